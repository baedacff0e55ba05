"""Checks a command makes before any work starts: its outputs can be written, its suite fits in memory.

A file in the way, a read-only folder, ``/proc``, a full disk or a suite too big for this machine is
one clear line up front rather than a traceback after a long run.  So is an output that would
replace one of the command's inputs (:func:`check_not_an_input`) or a file gcbench did not write
(:func:`check_replaceable`): nothing the user already has is lost to an output path.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gcbench.cli.failures import OutputError, UsageError
from gcbench.cli.output import warn
from gcbench.core.errors import GcbenchError

if TYPE_CHECKING:  # torch loads only when a device is checked: train checks its launch first
    import torch


def check_output_dir(path: Path, option: str) -> None:
    """Fail before any work when the output folder ``path`` cannot hold a new file.

    Writes and removes one probe file in ``path`` (or, when it does not exist yet, in its nearest
    existing ancestor, so no folder is left behind by a later error), so a file in the way, a
    read-only folder, ``/proc`` or a full disk is one clear line up front rather than a traceback
    after a long run.  Probing is the only test that also holds for root, for whom permission bits
    are not enforced.
    """
    if path.exists() and not path.is_dir():
        raise OutputError(f"cannot write {path}: {option} must be a folder, and this is a file")
    _probe(path, path, option)


def check_output_file(path: Path, option: str) -> None:
    """Fail before any work when the output file ``path`` cannot be written (see :func:`check_output_dir`)."""
    if path.is_dir():
        raise OutputError(f"cannot write {path}: {option} names a folder; give a file name")
    _probe(path, path.parent, option)


def check_not_an_input(outputs: Sequence[Path], inputs: Sequence[Path], option: str) -> None:
    """Refuse an output file that is one of the command's input files (the same path, or the same file by a link).

    ``gcbench report RUN.json --md -o RUN.json`` would otherwise replace the results file with
    the Markdown rendered from it.
    """
    for out_path in outputs:
        for in_path in inputs:
            try:
                same = out_path.resolve() == in_path.resolve() or (out_path.exists() and os.path.samefile(out_path, in_path))
            except OSError:
                same = False
            if same:
                raise GcbenchError(f"{option} {out_path} is an input of this command ({in_path}): writing it would replace "
                                   "that input; choose another output")


#: how much of an existing output file is read to tell whether gcbench wrote it
_HEAD_BYTES = 4096


def check_replaceable(path: Path, option: str, what: str, ours: Callable[[bytes], bool]) -> None:
    """Refuse, before any work, to replace an existing file at ``path`` that is not ``what`` (``"a CSV that gcbench
    collectives wrote"``).

    The policy of every output FILE a user names (``--csv FILE``, ``report --output``, the four
    tables of ``report --csv DIR``): an earlier file of the same kind is replaced (rerunning a command
    updates its CSV or report), anything else is refused with one line, exit 1: a results file, a
    notes file or another program's CSV named by mistake would otherwise be lost.  ``ours`` tells from
    the file's first 4 KiB (the header gcbench writes) whether gcbench wrote it.  An empty file holds
    nothing to lose; a device or FIFO (``-o /dev/stdout``) is written into, not replaced.  Results
    folders (``--out``) never need this: a results file gets a new name, never an existing one.
    """
    try:
        st = path.stat()  # a link's target: what the atomic write replaces
    except OSError:
        return  # nothing there; a path that cannot be written is check_output_file's
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        return
    try:
        with path.open("rb") as fh:
            head = fh.read(_HEAD_BYTES)
    except OSError:
        head = b""  # unreadable: gcbench cannot tell it wrote it, so it is not replaced
    if not ours(head):
        raise GcbenchError(f"{option} {path} already exists and is not {what}: writing would replace it; remove it or "
                           "choose another file name")


def _probe(named: Path, folder: Path, option: str) -> None:
    """Write and remove a file in ``folder`` or its nearest existing ancestor; errors name ``named``."""
    probe_dir = folder
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise OutputError(f"cannot write {named}: {probe_dir} is a file, not a folder ({option})")
    try:
        fd, probe = tempfile.mkstemp(prefix=".gcbench-probe-", dir=probe_dir)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"cannot write {named}: {exc.strerror or type(exc).__name__} ({option})") from exc


def check_device(text: str, option: str = "--device") -> torch.device:
    """The torch device ``text`` names (``cpu``, ``cuda``, ``cuda:N``), checked before any work starts.

    ``cuda`` on a machine without CUDA, or ``cuda:N`` past the last visible GPU, is one line and
    exit 1 here rather than a CUDA error after models are built and processes started; a name
    that is not a device at all (``gpu``, ``cuda:x``) is a usage error (exit 2).
    """
    import torch

    name = text.strip().lower()
    kind, colon, index_text = name.partition(":")
    if kind not in ("cpu", "cuda") or (colon and not index_text.isdigit()) or (kind == "cpu" and colon):
        raise UsageError(f"{option} {text!r}: expected cpu, cuda or cuda:N (N a GPU index)")
    if kind == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise GcbenchError(f"{option} {text}: no CUDA device is available here (torch.cuda.is_available() is False); "
                           "use --device cpu")
    if not index_text:
        return torch.device("cuda")
    count = torch.cuda.device_count()
    if int(index_text) >= count:
        raise GcbenchError(f"{option} {text}: there is no GPU {int(index_text)} here ({count} visible: "
                           f"cuda:0..cuda:{count - 1})")
    return torch.device("cuda", int(index_text))


def memory_check(suite: Any, where: str, force: bool) -> None:
    """Refuse a suite whose estimated memory exceeds this machine's (``--force``: warn), before any file is written."""
    from gcbench.measure.footprint import check_memory

    for line in check_memory(suite, where, force):
        warn(line)


def check_suite(suite: Any, where: str, force: bool, plans: bool = True) -> None:
    """Refuse, before any file is written, what a run of ``suite`` would meet in its first minutes: a trace folder that
    is missing or short of the workers and steps asked for, a compressor given fewer workers than it is defined on
    (one line each), more memory than this machine has (``--force``: warn), and with ``plans`` a plan whose rules do not
    fit the sources' tensors.  A run then fails only on what cannot be known without running it."""
    from gcbench.measure.suite_checks import check_sources

    problems = check_sources(suite, where)
    if problems:
        raise GcbenchError("\n".join(problems))
    memory_check(suite, where, force)
    if plans and any(c.name == "plan" for c in suite.compressors):  # a plan's rules against the tensors
        from gcbench.measure.plan_case import check_plan_cases

        check_plan_cases(suite)
