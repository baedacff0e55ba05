"""Results: the versioned JSON record of a run, environment capture, atomic storage, loading.

One file per run under ``reports/runs/``.  Each carries a schema version, the gcbench version,
UTC time, machine and environment, git commit and dirty flag, the resolved suite and its hash,
metric metadata, and one record per case.  The file is rewritten atomically (temporary file,
then rename) after every case, so an interrupted run keeps every completed case.

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
import tempfile
from abc import ABC, abstractmethod
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

import gcbench
from gcbench.core import signals
from gcbench.core.errors import ResultsError
from gcbench.results.metrics import metrics_metadata

SCHEMA_VERSION = 1
DEFAULT_RUNS_DIR = Path("reports") / "runs"


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


def environment(device: str = "cpu") -> dict[str, Any]:
    """Machine and software facts that decide whether two runs are comparable."""
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
    }
    if torch.cuda.is_available():
        env["cuda_device"] = torch.cuda.get_device_name(0)
        env["cuda_version"] = torch.version.cuda
    return env


def machine_key(env: dict[str, Any]) -> str:
    """What must match for timings to be comparable: CPU model, cores, threads, GPU."""
    return f"{env.get('cpu_model')}|{env.get('cpu_count')}|{env.get('torch_threads')}|{env.get('cuda_device')}"


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


def _write_temp(path: Path, data: Any) -> Path:
    """``data`` as JSON in a new temporary file beside ``path`` (synced, mode 0644); returns its path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(_clean(data), f, indent=1, allow_nan=False)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def atomic_write_json(path: Path, data: Any) -> None:
    """Write JSON to a temporary file beside ``path`` and rename it into place.

    SIGINT/SIGTERM are held for the duration (:func:`gcbench.core.signals.deferred`), so a signal can
    neither leave a stray ``*.tmp`` file nor stop the write half-way; it is delivered afterwards.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with signals.deferred():
        tmp = _write_temp(path, data)
        try:
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


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


class RunWriter:
    """Accumulates case records and keeps the run file on disk up to date.

    The file is created (exclusively, :func:`create_run_file`) when the first case is recorded,
    not when the run starts: a run that is interrupted, or crashes, before completing any case
    leaves no file that ``report``, ``latest`` or a regression gate could mistake for a run.
    Until then :attr:`path` is None.  After that every change rewrites the file atomically.
    """

    def __init__(self, out_dir: Path, suite: dict[str, Any], suite_hash: str, suite_path: str | None, device: str,
                 kind: str = "run") -> None:
        now = datetime.now(UTC)
        self.out_dir = Path(out_dir)
        self.stem = run_file_stem(now, str(suite.get("name", "run")), suite_hash)
        self.run_id = self.stem
        self.path: Path | None = None
        self.data: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "kind": kind,
            "run_id": self.stem,
            "gcbench_version": gcbench.__version__,
            "created_utc": now.isoformat(timespec="seconds"),
            "finished_utc": None,
            "status": "running",
            "environment": environment(device),
            "git": git_info(),
            "suite": suite,
            "suite_hash": suite_hash,
            "suite_path": suite_path,
            "metrics": metrics_metadata(),
            "cases": [],
        }

    def add_case(self, record: dict[str, Any]) -> None:
        self.data["cases"].append(record)
        self.flush()

    def finish(self, status: str) -> None:
        """Record the final status; with no case recorded there is no file, and none is created."""
        self.data["status"] = status
        self.data["finished_utc"] = datetime.now(UTC).isoformat(timespec="seconds")
        self.flush()

    def flush(self) -> None:
        if self.path is None:
            if not self.data["cases"]:
                return
            self.path = create_run_file(self.out_dir, self.stem, self.data)
            self.run_id = self.path.stem
            return
        atomic_write_json(self.path, self.data)


def _upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Upgrade older schema versions in place (none older than 1 exist yet)."""
    return data


# ----------------------------------------------------------------------------- structure check
#
# What every reader (report, Markdown, HTML, baseline comparison, simulate, bench --baseline)
# takes for granted about a results file, checked once in load_run so that a file that passes
# cannot crash a reader.  Fields are optional unless marked required (older files lack some and
# the readers cope), unknown fields are allowed (newer gcbench of the same schema adds some),
# but a field that is present must have the type the readers use.  Numbers may be null: NaN
# and infinity are stored as null.


class _Spec(ABC):
    """A check of one JSON value: ``check(value, where)`` returns the first problem or None."""

    @abstractmethod
    def check(self, value: Any, where: str) -> str | None:
        """The first problem of ``value`` (at path ``where``), or None if it fits."""


class _Is(_Spec):
    def __init__(self, *types: type, null: bool = True, what: str = "", lo: float | None = None, hi: float | None = None) -> None:
        self.types, self.null, self.what, self.lo, self.hi = types, null, what, lo, hi

    def check(self, value: Any, where: str) -> str | None:
        if value is None and self.null:
            return None
        ok = isinstance(value, self.types) and not (isinstance(value, bool) and bool not in self.types)
        if not ok:
            return f"{where}: expected {self.what or ' or '.join(t.__name__ for t in self.types)}, got {_show(value)}"
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            return f"{where}: expected {self.what} in [{self.lo:g}, {self.hi:g}], got {_show(value)}"
        return None


class _Obj(_Spec):
    def __init__(self, fields: dict[str, _Spec], required: tuple[str, ...] = (), null: bool = True) -> None:
        self.fields, self.required, self.null = fields, required, null

    def check(self, value: Any, where: str) -> str | None:
        if value is None and self.null:
            return None
        if not isinstance(value, dict):
            return f"{where}: expected an object, got {_show(value)}"
        for key in self.required:
            if key not in value:
                return f"{where}: missing field {key!r}"
        for key, spec in self.fields.items():
            if key in value:
                problem = spec.check(value[key], f"{where}.{key}")
                if problem:
                    return problem
        return None


class _List(_Spec):
    def __init__(self, item: _Spec, null: bool = True) -> None:
        self.item, self.null = item, null

    def check(self, value: Any, where: str) -> str | None:
        if value is None and self.null:
            return None
        if not isinstance(value, list):
            return f"{where}: expected a list, got {_show(value)}"
        for i, v in enumerate(value):
            problem = self.item.check(v, f"{where}[{i}]")
            if problem:
                return problem
        return None


class _Map(_Spec):
    """An object with free keys and values of one kind (traffic phases, statistics)."""

    def __init__(self, value: _Spec, null: bool = True) -> None:
        self.value, self.null = value, null

    def check(self, value: Any, where: str) -> str | None:
        if value is None and self.null:
            return None
        if not isinstance(value, dict):
            return f"{where}: expected an object, got {_show(value)}"
        for k, v in value.items():
            problem = self.value.check(v, f"{where}.{k}")
            if problem:
                return problem
        return None


class _Window(_Obj):
    """A phase window: its steps ``first``..``last`` must be a non-empty range (readers average over it)."""

    def check(self, value: Any, where: str) -> str | None:
        problem = super().check(value, where)
        if problem is None and value["first"] > value["last"]:
            return f"{where}: first step {value['first']} after last step {value['last']}"
        return problem


class _Any(_Spec):
    def check(self, value: Any, where: str) -> str | None:
        return None


def _show(value: Any) -> str:
    kind = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value))
    if kind is None:
        kind = "a number"
    text = json.dumps(value)
    return f"{kind} ({text[:37] + '...' if len(text) > 40 else text})" if not isinstance(value, dict | list) else kind


_NUM = _Is(int, float, what="a number")
_INT = _Is(int, what="an integer")
_STR = _Is(str, what="a string")
# counts the readers build lists of (steps, workers): bounded so a file cannot make them allocate without limit
_COUNT = _Is(int, what="an integer", lo=0, hi=10**6)
_NUMS = _List(_NUM)
_FINITE = _List(_Is(int, float, null=False, what="a number"))  # lists the readers convert with float()
_STAT = _Map(_Is(int, float, str, what="a number"))  # mean, lo, hi, worst, n, model, se_mean
_TIMING = _Obj({"median_s": _NUM, "iqr_s": _NUM, "samples_s": _NUMS, "gbps": _NUM, "elements_per_s": _NUM, "warmup": _INT})
_FLAGS = _Map(_Is(bool, str, int, float, what="a flag"))
_SOURCE = _Obj({"name": _STR, "label": _STR, "kind": _STR, "workers": _INT, "steps": _INT})
_SIZE = _Obj({k: _NUM for k in ("numel", "dense_bytes", "wire_bytes", "ratio", "bits_per_element", "traffic_sent_bytes",
                                "traffic_ratio")})
_COMMON_CASE = {"label": _STR, "compressor": _STR, "version": _INT, "params": _Map(_Any()), "flags": _FLAGS,
                "status": _STR, "error": _Any(), "workers": _COUNT, "steps": _COUNT, "size": _SIZE}
_RUN_CASE = _Obj({
    **_COMMON_CASE,
    "source": _SOURCE, "granularity": _STR, "units": _COUNT,
    "fidelity": _Obj({"repeats": _INT, "reference": _STR, "q_samples": _NUMS,
                      **{k: _STAT for k in ("q", "bias2", "variance", "omega_hat", "delta", "alpha", "cosine")}}),
    "aggregate": _Obj({"q": _STAT, "cosine": _STAT, "per_step_q": _NUMS, "per_step_cosine": _NUMS, "sum_drift": _NUMS,
                       "window_drift": _NUMS}),
    "traffic": _Map(_Obj({"sent_mean": _NUM, "received_mean": _NUM, "sent_max": _NUM, "per_step_sent": _FINITE}, null=False)),
    "ef_drift": _Obj({"sum_drift": _NUMS, "residual_ratio": _NUMS}),
    "timing": _Obj({"numel": _INT, "device": _STR, "threads": _INT, "compress": _TIMING, "decompress": _TIMING, "copy": _TIMING,
                    "copy_fraction_compress": _NUM, "copy_fraction_decompress": _NUM}),
    "layers": _List(_Obj({"name": _STR, "numel": _INT, **{k: _NUM for k in ("wire_bytes", "ratio", "q", "bias2", "variance",
                                                                               "cosine")}}, null=False)),
    "windows": _List(_Window({"name": _STR, "first": _COUNT, "last": _COUNT, "sent_by_worker": _FINITE,
                              "received_by_worker": _FINITE}, required=("name", "first", "last", "sent_by_worker"), null=False)),
    "step_phases": _List(_STR),
    "phases": _Map(_Map(_Any(), null=False)),
}, required=("label", "status"), null=False)
_TRAIN_CASE = _Obj({
    **_COMMON_CASE,
    "training": _Obj({
        "task": _Map(_Any()), "metric": _STR, "workers": _INT, "epochs": _INT, "steps": _INT, "batch_size_per_worker": _INT,
        "lr": _NUM, "threads_per_worker": _INT, "target_accuracy": _NUM, "reference": _STR,
        "curve": _List(_Map(_Is(int, float, str, what="a number"), null=False)),
        **{k: _NUM for k in ("final_accuracy", "final_loss", "best_accuracy", "accuracy_gap", "time_to_target_s",
                             "epochs_to_target", "train_time_s")},
        "step_time": _Map(_NUM), "step_time_per_rank": _List(_Map(_NUM)), "bytes": _Map(_NUM),
        "replicas_consistent": _Is(bool), "diverged": _Is(bool), "hook": _Map(_Any()),
        "decoded_payloads_per_step": _NUM, "step_samples_rank0": _Map(_NUMS), "collectives": _List(_STR), "buckets": _INT,
    }),
}, required=("label", "status"), null=False)
_BENCH_CASE = _Obj({
    "compressor": _STR, "label": _STR, "params": _Map(_Any()), "version": _INT, "numel": _INT, "shape": _List(_INT),
    "threads": _INT, "device": _STR, "copy": _TIMING, "compress": _TIMING, "decompress": _TIMING, "error": _Any(),
    **{k: _NUM for k in ("compress_x_copy", "decompress_x_copy", "gbps_compress", "gbps_decompress", "ratio", "peak_extra_bytes",
                         "input_bytes", "speedup_vs_reference", "baseline_change")},
    "reference": _Any(),
    "vs_torch_topk": _Map(_Obj({"speedup": _Is(int, float, null=False, what="a number")}, required=("speedup",), null=False)),
}, required=("compressor",), null=False)
_CASES = {"run": _RUN_CASE, "compare": _RUN_CASE, "train": _TRAIN_CASE, "bench": _BENCH_CASE}
_TOP = _Obj({
    "schema_version": _Is(int, null=False, what="an integer"), "kind": _Is(str, null=False, what="a string"),
    "run_id": _STR, "gcbench_version": _STR, "created_utc": _STR, "finished_utc": _STR, "status": _STR,
    "environment": _Map(_Any()), "git": _Obj({"commit": _STR, "dirty": _Is(bool)}),
    "suite": _Obj({"name": _STR, "sizes": _List(_Any())}),
    "suite_hash": _STR, "suite_path": _STR, "metrics": _List(_Any()), "cases": _List(_Any(), null=False),
}, required=("schema_version", "cases"), null=False)
# a results file nests about 6 levels; this bounds what a reader's recursion can meet
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
    if not isinstance(data, dict):
        return f"expected a JSON object at the top, got {_show(data)}"
    problem = _TOP.check(data, "results")
    if problem:
        return problem.removeprefix("results: ").removeprefix("results.")
    kind = str(data.get("kind") or "run")
    if kind not in _CASES:
        return f"kind: expected one of {', '.join(_CASES)}, got {kind!r}"
    spec = _CASES[kind]
    for i, case in enumerate(data["cases"]):
        problem = spec.check(case, f"cases[{i}]")
        if problem:
            return problem
    return None


def load_run(path: str | Path) -> dict[str, Any]:
    """Read a results file; an unreadable, malformed or newer-schema file raises :class:`ResultsError`.

    The message is one line naming the file and the first field that does not fit
    (:func:`check_structure`), so a file that loads can be given to every reader.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{p}: results file not found") from None
    except IsADirectoryError:
        raise ResultsError(f"{p}: is a folder, not a results file") from None
    except RecursionError:
        raise ResultsError(f"{p}: not a gcbench results file (JSON nested too deeply)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{p}: not a readable gcbench results file ({exc})") from None
    if not isinstance(data, dict) or "schema_version" not in data or "cases" not in data:
        raise ResultsError(f"{p}: not a gcbench results file (no schema_version/cases)")
    v = data["schema_version"]
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ResultsError(f"{p}: schema_version: expected a positive integer, got {_show(v)}")
    if v > SCHEMA_VERSION:
        raise ResultsError(f"{p}: written with results schema {v}, newer than this gcbench reads ({SCHEMA_VERSION}); upgrade gcbench")
    if _too_deep(data):
        raise ResultsError(f"{p}: not a gcbench results file (JSON nested deeper than {MAX_DEPTH} levels)")
    data = _upgrade(data)
    problem = check_structure(data)
    if problem:
        raise ResultsError(f"{p}: not a valid gcbench results file: {problem}")
    return data


# the statuses of a run that ran to its end (a bench file, written once at its end, has none)
FINISHED_STATUSES = ("complete", "complete-with-errors", None)


def run_finished(data: dict[str, Any]) -> bool:
    """Whether a loaded results file is a run that ran to its end (not ``running``, ``interrupted`` or ``failed``)."""
    return data.get("status") in FINISHED_STATUSES


def _run_order(path: Path) -> tuple[str, int]:
    """Sort key of a run file: its name, with a same-second clash's ``-2``, ``-3`` … after the first."""
    m = re.fullmatch(r"(.*)-(\d{1,3})", path.stem)
    return (m.group(1), int(m.group(2))) if m else (path.stem, 1)


def list_runs(runs_dir: str | Path = DEFAULT_RUNS_DIR) -> list[Path]:
    """Run files in ``runs_dir``, oldest first (by the UTC time that starts each name)."""
    d = Path(runs_dir)
    return sorted(d.glob("*.json"), key=_run_order) if d.exists() else []


def resolve_run(ref: str, runs_dir: str | Path = DEFAULT_RUNS_DIR, finished: bool = False) -> Path:
    """A run by path, by id (file stem), by unique id prefix, or 'latest'.

    With ``finished``, 'latest' is the newest run that ran to its end (:func:`run_finished`):
    a regression gate must not pick up a run that is still going, was interrupted or failed, nor
    an unreadable file.
    """
    p = Path(ref)
    if p.exists():
        return p
    runs = list_runs(runs_dir)
    if ref == "latest":
        if not runs:
            raise ResultsError(f"no runs in {runs_dir}")
        if not finished:
            return runs[-1]
        for r in reversed(runs):
            try:
                if run_finished(load_run(r)):
                    return r
            except ResultsError:
                continue
        raise ResultsError(f"no finished run in {runs_dir} (every run there is still running, interrupted, failed or unreadable)")
    hits = [r for r in runs if r.stem == ref] or [r for r in runs if r.stem.startswith(ref)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise ResultsError(f"no run {ref!r} in {runs_dir}")
    raise ResultsError(f"run id {ref!r} is ambiguous: {', '.join(h.stem for h in hits[:5])}")
