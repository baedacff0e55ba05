"""Worker processes: N spawned workers forming one gloo group on 127.0.0.1, watched by the parent.

:class:`WorkerGroup` starts the workers (``torch.multiprocessing`` spawn; each runs
:func:`_worker_entry`, which calls the worker function with a :class:`WorkerContext`) and never
blocks on them; :func:`run_group` runs one function on every rank and returns each rank's result.

Faults: the parent watches every worker.  A worker that exits (crash, kill, Python error) is named
with its rank ("rank 2 exited with code 1: ..."); a worker that stops responding is named once its
peers time out in a collective (the group's collective timeout) or when the run exceeds its
deadline ("rank 1 hung at step 0 and did not finish within 60 s ...; rank 0 was waiting for it in
a collective").  Each worker publishes a progress tick (twice the steps it finished, plus one while
a step is under way): the rank with the least progress is the one that hung, since its peers went
on into the step's collective.  Remaining workers are terminated (then killed).  A parent killed
outright (SIGKILL, the OOM killer) takes its workers with it (the Linux parent-death signal, and a
pipe every worker watches): nothing runs on as an orphan, and the next group removes the orphaned
work folder (:func:`sweep_orphaned_workdirs`).
"""

from __future__ import annotations

import json
import multiprocessing.connection
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gcbench.core import liveness
from gcbench.core.errors import TrainError
from gcbench.results.store import atomic_write_json


@dataclass
class WorkerContext:
    """What a worker function gets: its rank, the group to train in, heartbeats and an output sink."""

    rank: int
    world_size: int
    group: Any  # dist.ProcessGroup with the collective timeout
    workdir: Path | None
    # shared array of per-rank progress ticks (spawn mode): 2 × finished steps, + 1 while a step is
    # under way.  A hung rank stops before its peers, which enter the step and wait for it in a
    # collective, so the lowest tick names the rank that hung even when every rank is at step 0.
    steps: Any = None
    sink: Callable[[str, Any], None] | None = None

    def begin(self, step: int) -> None:
        """Mark step ``step`` (0-based) as entered: forward, backward and the hook's collectives."""
        if self.steps is not None:
            self.steps[self.rank] = 2 * step + 1

    def beat(self, step: int) -> None:
        """Mark ``step`` steps as finished."""
        if self.steps is not None:
            self.steps[self.rank] = 2 * step

    def emit(self, name: str, data: Any) -> None:
        """Hand a result to the parent (a JSON file in spawn mode, a callback under torchrun)."""
        if self.sink is not None:
            self.sink(name, data)
        elif self.workdir is not None:
            atomic_write_json(self.workdir / f"{name}.json", data)


_COMM_MARKERS = ("gloo", "connection closed", "connection reset", "timed out", "timeout", "broken pipe", "nccl", "peer")


def is_communication_error(exc: BaseException) -> bool:
    """True for errors raised by a collective because a peer failed (not the worker's own bug)."""
    msg = str(exc).lower()
    return isinstance(exc, RuntimeError | ConnectionError | TimeoutError | dist.DistBackendError) and any(m in msg for m in _COMM_MARKERS)


def _die_with_parent(parent_pid: int, lifeline: Any) -> None:
    """Make this worker end when the ``train`` process that spawned it does, however that one ends (SIGKILL included).

    A parent killed outright runs no cleanup: without this its workers would go on training, as
    orphans, into a temporary folder nobody reads.  :func:`gcbench.core.liveness.die_with_parent`
    arms the Linux parent-death signal (immediate, even while the worker is blocked in a
    collective); and, everywhere, a daemon thread waits on ``lifeline``, the read end of a pipe
    whose only write end the parent holds, and exits the worker at its end of file (the parent's
    exit closes it).
    """
    liveness.die_with_parent(parent_pid, poll_s=None)

    def watch() -> None:
        try:
            lifeline.recv()  # the parent never sends: this returns only by end of file
        except (EOFError, OSError):
            pass
        os._exit(1)

    threading.Thread(target=watch, name="gcbench-parent-lifeline", daemon=True).start()


def _worker_entry(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple[Any, ...], workdir: str,
                  init_timeout_s: float, collective_timeout_s: float, threads: int, steps: Any, parent_pid: int,
                  lifeline: Any, backend: str = "gloo") -> None:
    """Body of one spawned worker: join the group, run ``fn``, leave a result or an error file; die with the parent.

    The default group is gloo (the rendezvous, and small checks any rank can take part in); the
    training group is ``backend``'s: NCCL puts rank ``r`` on GPU ``r`` first (one GPU per rank)."""
    _die_with_parent(parent_pid, lifeline)
    torch.set_num_threads(threads)
    if platform.system() == "Linux":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # a local group talks over loopback only
    wd = Path(workdir)
    try:
        store = dist.TCPStore("127.0.0.1", port, world, False, timeout=timedelta(seconds=init_timeout_s))
        # the default group waits for slow starters (imports on a loaded machine); the training
        # group has the short collective timeout that exposes a hung peer
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=init_timeout_s))
        if backend == "nccl":
            torch.cuda.set_device(rank)
        group = dist.new_group(backend=backend, timeout=timedelta(seconds=collective_timeout_s))
        ctx = WorkerContext(rank, world, group, wd, steps)
        result = fn(ctx, *args)
        atomic_write_json(wd / f"result-{rank}.json", result)
    except BaseException as exc:  # reported to the parent, then a hard exit (peers may be gone)
        atomic_write_json(wd / f"error-{rank}.json", {"rank": rank, "type": type(exc).__name__, "message": str(exc).strip(),
                                                      "communication": is_communication_error(exc), "traceback": traceback.format_exc()})
        sys.stderr.flush()
        os._exit(1)
    try:
        dist.destroy_process_group()
    except Exception:  # leaving is best effort: the result is already on disk
        pass
    # then leave without the interpreter's teardown: a full-suite run saw a rank whose result was written abort there
    # ("terminate called without an active exception": a C++ thread still joinable at finalisation), which failed the
    # group with SIGABRT; nothing is left to do once the result is on disk
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _ranks(rs: Sequence[int]) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(str(r) for r in rs)


WORKDIR_PREFIX = "gcbench-train-"
OWNER_FILE = "owner.json"


def sweep_orphaned_workdirs(parent: Path | str | None = None) -> list[Path]:
    """Remove work folders of :class:`WorkerGroup` whose owner is gone (killed before it could clean up); returns them.

    Only folders named ``gcbench-train-*`` that hold an owner file naming a process of this host
    that no longer runs (:func:`gcbench.core.liveness.gone`) are touched: a live run's folder, or
    another host's on a shared temporary folder, is left alone.
    """
    removed = []
    for d in Path(parent or tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            owner = json.loads((d / OWNER_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(owner, dict) and liveness.gone(owner.get("pid"), owner.get("host"), owner.get("process_start")):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


class WorkerGroup:
    """N spawned worker processes forming one gloo group on 127.0.0.1, watched by the parent.

    The parent owns the rendezvous store (a TCPStore on a port the OS picks, so concurrent runs
    never clash) and never blocks on a worker: it waits on the process sentinels with a timeout.
    """

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], world_size: int, *, collective_timeout_s: float,
                 init_timeout_s: float, threads: int = 1, backend: str = "gloo") -> None:
        self.fn, self.args, self.world_size, self.backend = fn, args, world_size, backend
        self.collective_timeout_s, self.init_timeout_s, self.threads = collective_timeout_s, init_timeout_s, threads
        sweep_orphaned_workdirs()
        self._tmp = tempfile.TemporaryDirectory(prefix=WORKDIR_PREFIX)
        self.workdir = Path(self._tmp.name)
        atomic_write_json(self.workdir / OWNER_FILE, liveness.identity())  # lets a later run sweep it if this process is killed
        self.procs: list[Any] = []
        self.started = 0.0
        self._lifeline: Any = None

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        # the parent's own connection to its local store must not inherit a short run timeout (the watch loop enforces that)
        store_timeout = timedelta(seconds=max(self.init_timeout_s, 30.0))
        self.store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=store_timeout, wait_for_workers=False)
        self.steps = ctx.Array("q", self.world_size, lock=False)
        # the workers' lifeline (:func:`_die_with_parent`): they get the read end, only this process holds the write end
        lifeline, self._lifeline = ctx.Pipe(duplex=False)
        self.procs = [
            ctx.Process(target=_worker_entry, name=f"gcbench-rank{r}",
                        args=(r, self.world_size, self.store.port, self.fn, self.args, str(self.workdir), self.init_timeout_s,
                              self.collective_timeout_s, self.threads, self.steps, os.getpid(), lifeline, self.backend))
            for r in range(self.world_size)
        ]
        for p in self.procs:
            p.start()
        lifeline.close()  # the children have their copies; keeping ours would not matter, but nothing needs it
        self.started = time.monotonic()

    def codes(self) -> list[int | None]:
        return [p.exitcode for p in self.procs]

    def step(self, rank: int) -> int:
        """Steps ``rank`` has finished (its shared progress tick halved)."""
        return int(self.steps[rank]) // 2

    def hung(self, ranks: Sequence[int]) -> tuple[list[int], list[int]]:
        """Split ``ranks`` into (the ranks that hung, the ranks waiting for them).

        The hung ranks are those with the least progress: their peers went on into the next step
        and block in its collective.  Equal progress names nobody in particular: all are returned.
        """
        ticks = {r: int(self.steps[r]) for r in ranks}
        if len(set(ticks.values())) <= 1:
            return list(ranks), []
        low = min(ticks.values())
        return [r for r in ranks if ticks[r] == low], [r for r in ranks if ticks[r] != low]

    def wait(self, timeout_s: float) -> None:
        """Return when a worker exits or after ``timeout_s``."""
        alive = [p.sentinel for p in self.procs if p.exitcode is None]
        if alive:
            multiprocessing.connection.wait(alive, timeout=timeout_s)
        else:
            time.sleep(min(timeout_s, 0.05))

    def error(self, rank: int) -> dict[str, Any] | None:
        path = self.workdir / f"error-{rank}.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None

    def failure(self, grace_s: float = 3.0) -> str | None:
        """A message naming the failed rank(s), or None while no worker has failed."""
        if not any(c not in (None, 0) for c in self.codes()):
            return None
        # peers of a crashed worker fail a moment later: let them report, so the crash is told apart
        end = time.monotonic() + grace_s
        while time.monotonic() < end and any(c is None for c in self.codes()):
            self.wait(0.1)
        codes = self.codes()
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        errors = {r: self.error(r) for r in failed}
        primary = [r for r in failed if not (errors[r] or {}).get("communication")]
        alive = [r for r, c in enumerate(codes) if c is None]
        if primary:
            parts = []
            for r in primary:
                e = errors[r]
                done = " after writing its result" if (self.workdir / f"result-{r}.json").exists() else ""
                detail = f": {e['type']}: {first_line(e['message'])}" if e else f" (no error report: the process died{done})"
                parts.append(f"rank {r} {_exit_text(codes[r])}{detail}")  # type: ignore[arg-type]  # a failed rank has an exit code
            return "; ".join(parts)
        first = first_line(next(e["message"] for e in errors.values() if e)) if any(errors.values()) else "no report"
        if alive:
            hung, _ = self.hung(alive)  # peers still alive may be waiting too: name the one behind them all
            return (f"{_ranks(hung)} stopped responding at step {self.step(hung[0])}: {_ranks(failed)} gave up waiting in a "
                    f"collective after {self.collective_timeout_s:g} s ({first})")
        return f"{_ranks(failed)} failed in communication: {first}"

    def stuck(self, limit_s: float, what: str) -> str:
        """Message for a run past its deadline: the ranks that lag, or all that are still running."""
        alive = [r for r, c in enumerate(self.codes()) if c is None]
        hung, waiting = self.hung(alive)
        low = self.step(hung[0]) if hung else 0
        if not waiting:
            return f"{_ranks(hung)} did not finish within {limit_s:g} s ({what}; stuck at step {low})"
        verb = "was" if len(waiting) == 1 else "were"
        return (f"{_ranks(hung)} hung at step {low} and did not finish within {limit_s:g} s ({what}); "
                f"{_ranks(waiting)} {verb} waiting for {'it' if len(hung) == 1 else 'them'} in a collective")

    def result(self, rank: int) -> Any:
        return json.loads((self.workdir / f"result-{rank}.json").read_text(encoding="utf-8"))

    def stop(self, term_s: float = 1.0, join_s: float = 5.0) -> None:
        """End workers still running (by their own pid) and release the store and work folder.

        SIGTERM first, SIGKILL for any still alive ``term_s`` later (a worker blocked in a gloo
        collective may not act on SIGTERM promptly); nothing outlives the parent's run.
        """
        for p in self.procs:
            if p.exitcode is None:
                p.terminate()
        end = time.monotonic() + term_s
        while time.monotonic() < end and any(p.exitcode is None for p in self.procs):
            self.wait(0.05)
        for p in self.procs:
            if p.exitcode is None:
                p.kill()
        for p in self.procs:
            p.join(join_s)
        if self._lifeline is not None:
            self._lifeline.close()
            self._lifeline = None
        self._tmp.cleanup()


def first_line(msg: str) -> str:
    lines = [ln.strip() for ln in str(msg).splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


def run_group(fn: Callable[..., Any], args: tuple[Any, ...], world_size: int, *, timeout_s: float = 120.0,
              collective_timeout_s: float | None = None, threads: int = 1) -> list[Any]:
    """Run ``fn(ctx, *args)`` on ``world_size`` spawned workers; return each rank's (JSON) result.

    Raises :class:`TrainError` naming the rank when a worker fails or the group exceeds ``timeout_s``.
    """
    group = WorkerGroup(fn, args, world_size, collective_timeout_s=collective_timeout_s or max(5.0, timeout_s / 3),
                        init_timeout_s=timeout_s, threads=threads)
    group.start()
    try:
        while True:
            msg = group.failure()
            if msg:
                raise TrainError(msg)
            if all(c == 0 for c in group.codes()):
                return [group.result(r) for r in range(world_size)]
            if time.monotonic() - group.started > timeout_s:
                raise TrainError(group.stuck(timeout_s, "worker group"))
            group.wait(0.2)
    finally:
        group.stop()
