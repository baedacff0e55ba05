"""Results storage: environment capture, the one writer of results files, atomic storage, loading, finding runs.

One file per run under ``reports/runs/``.  Each carries a schema version, the gcbench version,
UTC time, machine and environment, git commit and dirty flag, the resolved suite and its hash,
metric metadata, and one record per case: the typed record of :mod:`gcbench.results.record`.
:class:`RunWriter` rewrites the file atomically (temporary file, then rename) after every case,
so an interrupted run keeps every completed case.

Files of older schemas are upgraded on load (pytest-benchmark / asv habit); files of a newer
schema are refused with a clear error.
"""

from __future__ import annotations

import errno
import json
import math
import os
import platform
import re
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

import gcbench
from gcbench.core import liveness, signals
from gcbench.core.errors import GcbenchError, ResultsError
from gcbench.core.files import load_user_json
from gcbench.results.atomic import atomic_write, write_temp
from gcbench.results.metrics import metrics_metadata
from gcbench.results.parse import Case, as_case, parse_record
from gcbench.results.record import SCHEMA_VERSION, WRITER_GONE, RunRecord

DEFAULT_RUNS_DIR = Path("reports") / "runs"
#: a results file of the largest reference run is ~3 MB; this is far above any real one and far below RAM
MAX_JSON_BYTES = 256 * 1024 * 1024


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_info(path: Path | None = None) -> dict[str, Any]:
    """Commit and dirty flag of the gcbench checkout (None outside a git checkout)."""
    cwd = path or Path(gcbench.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True, timeout=5)
        return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def device_name(device: str) -> str | None:
    """What ``device`` is: the GPU's name for ``cuda``/``cuda:N``, the CPU model for ``cpu`` (None when unknown)."""
    kind, _, index = str(device).partition(":")
    if kind == "cuda":
        if not torch.cuda.is_available():
            return None
        return torch.cuda.get_device_name(int(index) if index.isdigit() else torch.cuda.current_device())
    return _cpu_model() if kind == "cpu" else None


def environment(device: str = "cpu", backend: str | None = None) -> dict[str, Any]:
    """Machine and software facts that decide whether two runs are comparable; ``device`` (``cpu``, ``cuda:N``) is
    where the run computed, named in ``device_name``, and ``backend`` the torch.distributed backend of a run that
    has processes (``gloo``, ``nccl``)."""
    from gcbench.kernels import runtime  # here: numba's import is for the commands that measure

    env: dict[str, Any] = {
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cuda_device": None,
        "device": device,
        "device_name": device_name(device),
        "backend": backend,
        "kernels": "numba" if runtime.NUMBA else "torch",  # GCBENCH_KERNELS and whether numba imports
    }
    if torch.cuda.is_available():
        env["cuda_device"] = torch.cuda.get_device_name(0)
        env["cuda_version"] = torch.version.cuda
    if runtime.SLOW_PATHS:  # numba failed: the file says why its kernels ran the slow path (absent when numba works)
        env["numba_error"] = "; ".join(runtime.SLOW_PATHS)
    return env


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf become None, numpy scalars become Python numbers."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def json_text(data: Any) -> str:
    """``data`` as the JSON text of a results file (NaN/inf as null, one-space indent)."""
    return json.dumps(_clean(data), indent=1, allow_nan=False)


def _write_temp(path: Path, data: Any) -> Path:
    """``data`` as JSON in a new temporary file beside ``path`` (:func:`gcbench.results.atomic.write_temp`)."""
    return write_temp(path, json_text(data))


def atomic_write_json(path: Path, data: Any) -> None:
    """Write JSON to a temporary file beside ``path`` and rename it into place (:func:`gcbench.results.atomic.atomic_write`).

    SIGINT/SIGTERM are held for the duration (:func:`gcbench.core.signals.deferred`), so a signal can
    neither leave a stray ``*.tmp`` file nor stop the write half-way; it is delivered afterwards.
    """
    with signals.deferred():  # the serialisation too: a signal must not land between it and the write
        atomic_write(path, json_text(data))


# a run file's name part taken from a suite's name: no path separators, no leading dot, bounded
_SLUG_BAD = re.compile(r"[^A-Za-z0-9_.-]+")
SLUG_MAX = 64


def safe_slug(name: str, default: str = "run") -> str:
    """``name`` as a file-name part: letters, digits, ``-``, ``_`` and ``.`` (not leading), at most 64 characters.

    A suite's ``name`` is free text from a file that may come from someone else; it must never
    choose the folder the results land in (``../../x``, ``/abs/path``) nor hide the file (``.x``).
    """
    slug = _SLUG_BAD.sub("-", str(name)).lstrip(".-")[:SLUG_MAX].rstrip(".-")
    return slug or default


def create_run_file(out_dir: Path, stem: str, data: dict[str, Any]) -> Path:
    """Create ``out_dir/<stem>.json`` holding ``data``, exclusively: never a file another run owns.

    The first free name of ``stem``, ``stem-2``, ``stem-3``, ... is taken, and ``data["run_id"]``
    is set to it.  Exclusivity is decided by the file system, not by an existence check (two runs
    started in the same second would both see the name free): the complete content is written to
    a temporary file and hard-linked to the final name, which fails if the name exists, so the
    file appears whole or not at all.  Where hard links are not supported, the name is claimed
    with ``O_CREAT | O_EXCL`` and the content renamed onto it.  Later updates of the file use
    :func:`atomic_write_json` on the returned path, which this run owns.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        name = stem if n == 1 else f"{stem}-{n}"
        path = out_dir / f"{name}.json"
        if path.exists():
            continue  # a cheap skip; the exclusive step below is what decides
        data["run_id"] = name
        with signals.deferred():
            tmp = _write_temp(path, data)
            try:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                        raise
                    try:  # no hard links here: claim the name exclusively, then move the content onto it
                        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                    except FileExistsError:
                        continue
                    os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
        return path
    raise ResultsError(f"{out_dir}: no free results file name for {stem!r} (10,000 taken)")


def run_file_stem(now: datetime, name: str, suite_hash: str = "") -> str:
    """``<UTC time>-<slug of name>[-<hash prefix>]``: the name part of a results file."""
    stem = f"{now:%Y%m%dT%H%M%SZ}-{safe_slug(name)}"
    return f"{stem}-{safe_slug(suite_hash[:6], '')}".rstrip("-") if suite_hash else stem


#: every results file this process created, in order: an interrupted command names the one it kept (gcbench.cli.failures)
CREATED: list[Path] = []


class RunWriter:
    """The one writer of results files: accumulates typed cases and keeps the run file on disk up to date.

    ``gcbench run``/``compare`` (:mod:`gcbench.measure.runner`), ``gcbench train``
    (:mod:`gcbench.train.driver`) and ``gcbench bench`` (:mod:`gcbench.measure.bench`) all write
    through it.  The header is a typed :class:`~gcbench.results.record.RunRecord` of the writer's
    ``kind``; each case is handed as its model (:class:`~gcbench.results.run_record.RunCase`,
    :class:`~gcbench.results.train_record.TrainCase`, :class:`~gcbench.results.bench_record.BenchCase`) or as a
    dict that is validated into it here, so nothing that does not fit the schema reaches a file.

    The file is created (exclusively, :func:`create_run_file`) when the first case is recorded,
    not when the run starts: a run that is interrupted, or crashes, before completing any case
    leaves no file that ``report``, ``latest`` or a regression gate could mistake for a run.
    Until then :attr:`path` is None.  After that every change rewrites the file atomically.
    """

    def __init__(self, out_dir: Path, suite: dict[str, Any], suite_hash: str, suite_path: str | None, device: str,
                 kind: str = "run", backend: str | None = None) -> None:
        now = datetime.now(UTC)
        self.out_dir = Path(out_dir)
        self.stem = run_file_stem(now, str(suite.get("name", "run")), suite_hash)
        self.run_id = self.stem
        self.path: Path | None = None
        self.kind = kind
        self.record: RunRecord = parse_record(_clean({
            "schema_version": SCHEMA_VERSION,
            "kind": kind,
            "run_id": self.stem,
            "gcbench_version": gcbench.__version__,
            "created_utc": now.isoformat(timespec="seconds"),
            "finished_utc": None,
            "status": "running",
            "writer": liveness.identity(),  # so a later command can tell a killed writer's "running" from a live one
            "environment": environment(device, backend),
            "git": git_info(),
            "suite": suite,
            "suite_hash": suite_hash,
            "suite_path": suite_path,
            "metrics": metrics_metadata(),
            "cases": [],
        }))

    @property
    def data(self) -> dict[str, Any]:
        """The file's content as JSON-ready values (what :meth:`flush` writes)."""
        return _clean(self.record.to_json_dict())

    def add_case(self, case: Case | dict[str, Any]) -> Case:
        """Record one case (its model, or a dict validated into the model of this file's kind); returns the typed case."""
        # validating and serialising the record run pydantic callbacks, which would turn a Ctrl-C arriving
        # inside them into a serialisation error: the stop signal waits until the case is on disk
        with signals.deferred():
            typed = as_case(_clean(case) if isinstance(case, dict) else case, self.kind)
            self.record.cases.append(typed)
            self.flush()
        return typed

    def replace_cases(self, cases: dict[int, Case | dict[str, Any]]) -> None:
        """Replace recorded cases by index (validated as :meth:`add_case` does) and rewrite the file once."""
        with signals.deferred():
            for i, case in cases.items():
                self.record.cases[i] = as_case(_clean(case) if isinstance(case, dict) else case, self.kind)
            self.flush()

    def finish(self, status: str) -> dict[str, Any]:
        """Record the final status and return the file's content (JSON-ready, as written).

        With no case recorded there is no file, and none is created.  The content is built inside
        the same held-signals section as the write: a caller that needs the cases afterwards must
        use this value, not serialise the record again where a SIGTERM could land inside pydantic.
        """
        with signals.deferred():  # as in add_case
            self.record.status = status
            self.record.finished_utc = datetime.now(UTC).isoformat(timespec="seconds")
            return self.flush()

    def flush(self) -> dict[str, Any]:
        """Write the file (create it with the first case); returns the content written."""
        data = self.data
        if self.path is None:
            if not self.record.cases:
                return data
            self.path = create_run_file(self.out_dir, self.stem, data)
            self.run_id = self.record.run_id = self.path.stem  # create_run_file set data["run_id"] too
            CREATED.append(self.path)
            return data
        atomic_write_json(self.path, data)
        return data


# a results file nests about 6 levels; this bounds what pydantic's and a reader's recursion can meet
MAX_DEPTH = 64


def _too_deep(data: Any, limit: int = MAX_DEPTH) -> bool:
    stack = [(data, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            if d > limit:
                return True
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


def check_structure(data: Any) -> str | None:
    """The first field of a parsed results file that does not fit the schema, as ``field: problem``; None when it fits."""
    try:
        parse_record(data)
    except ResultsError as exc:
        return str(exc)
    return None


def load_run(path: str | Path, object_hook: Callable[[dict[str, Any]], Any] | None = None) -> RunRecord:
    """Read a results file as its typed record; an unreadable, malformed or newer-schema file raises :class:`ResultsError`.

    The message is one line naming the file and the first field that does not fit
    (:func:`gcbench.results.parse.parse_record`), so a file that loads can be given to every reader.
    ``object_hook``: applied to each JSON object as it is decoded (a reader's cut of what it needs:
    :func:`gcbench.results.converge_thin.thin_curves`); a record read with one is never written back.
    """
    p = Path(path)
    # a FIFO, a device (a link to /dev/zero), a file over MAX_JSON_BYTES or an over-long integer: one line
    data = load_user_json(p, "gcbench results file", MAX_JSON_BYTES, ResultsError, object_hook)
    if not isinstance(data, dict) or "schema_version" not in data or "cases" not in data:
        raise ResultsError(f"{p}: not a gcbench results file (no schema_version/cases)")
    if _too_deep(data):
        raise ResultsError(f"{p}: not a gcbench results file (JSON nested deeper than {MAX_DEPTH} levels)")
    try:
        record = parse_record(data)
    except ResultsError as exc:
        text = str(exc)
        if text.startswith("written with"):
            raise ResultsError(f"{p}: {text}") from None
        raise ResultsError(f"{p}: not a valid gcbench results file: {text}") from None
    return with_live_status(record)


def with_live_status(record: RunRecord) -> RunRecord:
    """``record`` with status :data:`~gcbench.results.record.WRITER_GONE` when it says ``running`` but its writer is gone.

    A writer killed outright (SIGKILL, the OOM killer) records no end.  Its file keeps the
    writer's pid, host and start time; when that process no longer runs on this host
    (:func:`gcbench.core.liveness.gone`) the run cannot be going on.  The file itself is not
    changed (reading never writes); a writer on another host, or a file without a writer, stays ``running``.
    """
    w = record.writer
    if record.status == "running" and w is not None and liveness.gone(w.pid, w.host, w.process_start):
        record.status = WRITER_GONE
    return record


def _run_order(path: Path) -> tuple[str, int]:
    """Sort key of a run file: its name, with a same-second clash's ``-2``, ``-3`` … after the first."""
    m = re.fullmatch(r"(.*)-(\d{1,3})", path.stem)
    return (m.group(1), int(m.group(2))) if m else (path.stem, 1)


def named_time(path: Path) -> datetime | None:
    """The UTC time a results file's name starts with (:func:`run_file_stem`), or None for a name without one."""
    try:
        return datetime.strptime(path.stem[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def list_runs(runs_dir: str | Path = DEFAULT_RUNS_DIR) -> list[Path]:
    """Run files in ``runs_dir``, oldest first (by the UTC time that starts each name)."""
    d = Path(runs_dir)
    return sorted(d.glob("*.json"), key=_run_order) if d.exists() else []


def recorded_time(record: RunRecord) -> datetime | None:
    """When the run started by its own record (``created_utc``; ``finished_utc`` for a file without it), or None."""
    for text in (record.created_utc, record.finished_utc):
        if not text:
            continue
        try:
            t = datetime.fromisoformat(text)
        except ValueError:
            continue
        return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
    return None


def recent_benches(runs_dir: str | Path, max_age_s: float, now: datetime | None = None) -> Iterator[tuple[RunRecord, Path, float]]:
    """The bench files of ``runs_dir`` started at most ``max_age_s`` before ``now``, newest first: (record, path, age
    in seconds).  Only files named as benches are loaded (``<UTC time>-bench[-N].json``: a runs folder holds hundreds
    of run files), an unreadable one is passed over (``report`` says what is wrong with it), and the walk ends at the
    first whose name says it started too long ago."""
    now = now or datetime.now(UTC)
    for path in reversed(list_runs(runs_dir)):
        if not path.stem.split("-", 1)[-1].startswith("bench"):
            continue
        named = named_time(path)
        if named is not None and (now - named).total_seconds() > max_age_s:
            return  # newest first by name: every file from here on started longer ago
        try:
            record = load_run(path)
        except GcbenchError:
            continue
        started = recorded_time(record)
        age = (now - started).total_seconds() if started else None
        if record.kind == "bench" and age is not None and 0 <= age <= max_age_s:
            yield record, path, age


def latest_run(runs_dir: str | Path = DEFAULT_RUNS_DIR, finished: bool = False,
               on_skip: Callable[[ResultsError], None] | None = None) -> Path:
    """The newest run in ``runs_dir`` by the time recorded in the file; with ``finished``, the newest that finished.

    Neither a file's name (a ``saved-copy.json`` sorts after every ``2026…`` name) nor its mtime
    (a copy, a checkout) says when the run was made: the record's ``created_utc`` does.  Files
    that do not load (corrupt, a FIFO, a link to a device) are passed over; a file without a
    recorded time (hand-made, or very old) counts as older than every file with one, and among
    files of the same time (or none) the later name wins.  ``on_skip`` is handed the error of
    each file passed over for not loading (the CLI prints it as a warning).
    """
    oldest = datetime.min.replace(tzinfo=UTC)
    best: tuple[tuple[bool, datetime, tuple[str, int]], Path] | None = None
    unreadable: ResultsError | None = None
    for r in list_runs(runs_dir):
        try:
            record = load_run(r)
        except ResultsError as exc:
            unreadable = exc
            if on_skip is not None:
                on_skip(exc)
            continue
        if finished and not record.finished:
            continue
        when = recorded_time(record)
        key = (when is not None, when or oldest, _run_order(r))
        if best is None or key > best[0]:
            best = (key, r)
    if best is not None:
        return best[1]
    if finished:
        raise ResultsError(f"no finished run in {runs_dir} (every run there is still running, interrupted, failed or unreadable)")
    if unreadable is not None:
        raise unreadable  # not one file loads: say what is wrong with one, by its name
    raise ResultsError(f"no runs in {runs_dir}")


def resolve_run(ref: str, runs_dir: str | Path = DEFAULT_RUNS_DIR, finished: bool = False,
                on_skip: Callable[[ResultsError], None] | None = None) -> Path:
    """A run by path, by id (file stem), by unique id prefix, or 'latest' (:func:`latest_run`).

    With ``finished``, 'latest' is the newest run that ran to its end (:attr:`RunRecord.finished`):
    a regression gate must not pick up a run that is still going, was interrupted or failed, nor
    an unreadable file.
    """
    p = Path(ref)
    if p.is_dir():  # a folder of runs where one run was expected: say which option takes a folder
        other = "or 'latest' for its newest run" if p.resolve() == Path(runs_dir).resolve() else f"or give the folder as --runs-dir {ref}"
        raise ResultsError(f"{ref} is a folder, not a results file: name a file in it, {other}")
    if p.exists():
        return p
    if ref == "latest":
        return latest_run(runs_dir, finished, on_skip)
    runs = list_runs(runs_dir)
    hits = [r for r in runs if r.stem == ref] or [r for r in runs if r.stem.startswith(ref)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise ResultsError(f"no run {ref!r} in {runs_dir}")
    raise ResultsError(f"run id {ref!r} is ambiguous: {', '.join(h.stem for h in hits[:5])}")
