"""Who is writing: a process's identity (pid, host, start time), and whether that process is gone.

A results file says ``running`` until its writer records an end; a writer killed outright
(SIGKILL, the OOM killer, a power cut) records nothing, so the file would say ``running``
forever.  Files and work folders therefore carry their writer's :func:`identity`, and a later
command asks :func:`gone`: the writer ran on this host and no process with that pid and that
start time exists any more.  The start time tells a pid reused by another process apart from the
writer.  On another host nothing can be known, so a writer there is never called gone.
"""

from __future__ import annotations

import os
import platform
import signal
import sys
import threading
import time
from typing import Any

#: prctl(2) option: the signal the kernel sends this process when the thread that started it exits
PR_SET_PDEATHSIG = 1
#: environment variable through which a parent names itself to a child that must die with it
PARENT_PID_ENV = "GCBENCH_PARENT_PID"
#: two readings of one process's start time differ by the rounding of its clock ticks at most
_START_TOLERANCE_S = 1.0


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (Linux), None when unreadable or absent."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()  # the name may hold spaces and ')': split after its last ')'


def process_start(pid: int) -> float | None:
    """When process ``pid`` started, in seconds since the epoch (Linux); None where that cannot be read."""
    fields = _stat_fields(pid)
    boot = _boot_time()
    if fields is None or boot is None or len(fields) < 20:
        return None
    try:
        ticks = int(fields[19])  # field 22 of stat(5), counted from the state, field 3
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return None


def identity() -> dict[str, Any]:
    """This process as a writer: ``{"pid", "host", "process_start"}`` (``process_start`` None off Linux)."""
    pid = os.getpid()
    return {"pid": pid, "host": platform.node(), "process_start": process_start(pid)}


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if sys.platform.startswith("linux"):
        fields = _stat_fields(pid)
        return fields is not None and fields[0] not in ("Z", "X")  # a zombie has ended: only its exit status is left
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # it exists (another user's): not known to be gone
    return True


def gone(pid: Any, host: Any, started: Any = None) -> bool:
    """True when the writer ``pid`` on ``host`` (started at ``started``, if known) certainly no longer runs.

    False when it may still run: it is alive, it ran on another host, or the identity is incomplete.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(host, str) or host != platform.node():
        return False
    if not _alive(pid):
        return True
    if isinstance(started, int | float) and not isinstance(started, bool):
        now = process_start(pid)
        if now is not None and abs(now - float(started)) > _START_TOLERANCE_S:
            return True  # the pid now belongs to a process started later: the writer is gone
    return False


def die_with_parent(parent_pid: int, poll_s: float | None = 1.0) -> None:
    """Make this (child) process end when ``parent_pid``, the process that started it, ends, however it ends.

    A parent killed outright (SIGKILL) runs no cleanup: without this its children would go on
    computing as orphans.  On Linux the kernel's parent-death signal (``prctl(PR_SET_PDEATHSIG,
    SIGKILL)``) ends the child at once, even while it is blocked in C code.  ``poll_s``: also a
    daemon thread that checks every ``poll_s`` seconds whether the child was re-parented (the
    portable guard, for systems without prctl).  A parent that died before this call is caught
    by the same check, at once.  Note: Linux sends the signal when the *thread* that started the
    child exits, so start such children from a thread that outlives them (the main thread).
    """
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl in this libc: the check below still works
            pass
    if os.getppid() != parent_pid:  # already re-parented: the parent is gone
        os._exit(1)
    if poll_s is None:
        return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="gcbench-parent-watchdog", daemon=True).start()
