"""Results: the versioned JSON record of a run, environment capture, atomic storage, loading.

One file per run under ``reports/runs/``.  Each carries a schema version, the gcbench version,
UTC time, machine and environment, git commit and dirty flag, the resolved suite and its hash,
metric metadata, and one record per case.  The file is rewritten atomically (temporary file,
then rename) after every case, so an interrupted run keeps every completed case.

Files of older schemas are upgraded on load (pytest-benchmark / asv habit); files of a newer
schema are refused with a clear error.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

import gcbench
from gcbench.errors import ResultsError
from gcbench.metrics import metrics_metadata

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


def atomic_write_json(path: Path, data: Any) -> None:
    """Write JSON to a temporary file beside ``path`` and rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(_clean(data), f, indent=1, allow_nan=False)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunWriter:
    """Accumulates case records and keeps the run file on disk up to date."""

    def __init__(self, out_dir: Path, suite: dict[str, Any], suite_hash: str, suite_path: str | None, device: str,
                 kind: str = "run") -> None:
        now = datetime.now(UTC)
        self.run_id = f"{now:%Y%m%dT%H%M%SZ}-{suite.get('name', 'run')}-{suite_hash[:6]}"
        self.path = Path(out_dir) / f"{self.run_id}.json"
        n = 1
        while self.path.exists():  # two runs in the same second
            n += 1
            self.path = Path(out_dir) / f"{self.run_id}-{n}.json"
        self.data: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "kind": kind,
            "run_id": self.path.stem,
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
        self.flush()

    def add_case(self, record: dict[str, Any]) -> None:
        self.data["cases"].append(record)
        self.flush()

    def finish(self, status: str) -> None:
        self.data["status"] = status
        self.data["finished_utc"] = datetime.now(UTC).isoformat(timespec="seconds")
        self.flush()

    def flush(self) -> None:
        atomic_write_json(self.path, self.data)


def _upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """Upgrade older schema versions in place (none older than 1 exist yet)."""
    return data


def load_run(path: str | Path) -> dict[str, Any]:
    """Read a results file; corrupt or newer-schema files raise :class:`ResultsError`."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{p}: results file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{p}: not a readable gcbench results file ({exc})") from None
    if not isinstance(data, dict) or "schema_version" not in data or "cases" not in data:
        raise ResultsError(f"{p}: not a gcbench results file (no schema_version/cases)")
    v = data["schema_version"]
    if not isinstance(v, int) or v > SCHEMA_VERSION:
        raise ResultsError(f"{p}: written with results schema {v}, newer than this gcbench reads ({SCHEMA_VERSION}); upgrade gcbench")
    return _upgrade(data)


def list_runs(runs_dir: str | Path = DEFAULT_RUNS_DIR) -> list[Path]:
    """Run files in ``runs_dir``, oldest first."""
    d = Path(runs_dir)
    return sorted(d.glob("*.json")) if d.exists() else []


def resolve_run(ref: str, runs_dir: str | Path = DEFAULT_RUNS_DIR) -> Path:
    """A run by path, by id (file stem), by unique id prefix, or 'latest'."""
    p = Path(ref)
    if p.exists():
        return p
    runs = list_runs(runs_dir)
    if ref == "latest":
        if not runs:
            raise ResultsError(f"no runs in {runs_dir}")
        return runs[-1]
    hits = [r for r in runs if r.stem == ref] or [r for r in runs if r.stem.startswith(ref)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise ResultsError(f"no run {ref!r} in {runs_dir}")
    raise ResultsError(f"run id {ref!r} is ambiguous: {', '.join(h.stem for h in hits[:5])}")
