"""How far this machine's ×copy moves from one process to the next: measured by ``gcbench bench --processes N``.

The rounds inside one process cannot show it (where the allocator put the buffers, which core, what the caches
held), so ``gcbench compare`` widens its compress-time interval by it (:func:`gcbench.results.verdict.with_process_spread`).
It is a property of the machine, not of a compressor: a quiet workstation's processes agree closely, a busy shared
VM's do not, and one figure written into the code is right for one of them only.

* **Measured** (:func:`spread_of`): a bench record timed in several processes keeps each process's median per kernel
  (``x_copy.<kernel>.process_medians``).  The spread is the pooled standard deviation of their logarithms over
  every timing with two or more processes: ``sqrt(Σ (n_i − 1)·s_i² / Σ (n_i − 1))``, with ``Σ (n_i − 1)`` degrees
  of freedom.  Pooling variances weighs a timing that moved far as much as its processes say, so a machine with a
  few jumpy kernels reads wider than its typical kernel, which errs towards "no significant difference".
* **Found** (:func:`machine_spread`): the newest bench file in the runs folder from the same machine
  (:meth:`Environment.machine_key`: CPU model, cores, threads, GPU, kernel path), at most :data:`MAX_AGE_S` old,
  whose spread has at least :data:`MIN_DF` degrees of freedom.  Its file is named wherever the figure is used.
* **Built in** (:data:`PROCESS_LOG_SD`) when there is none: measured on a quiet 2-core VM, the median over 16 timings
  of 4 A/A runs of ``gcbench bench`` (docs/timing.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from gcbench.results.bench_record import BenchCase
from gcbench.results.record import RunRecord
from gcbench.results.run_record import RunCase
from gcbench.results.store import recent_benches

#: the built-in spread of one kernel's ×copy between processes (sd of its logarithm), used where this machine has
#: not measured its own: on a quiet 2-core VM, four runs of `gcbench compare topk qsgd signsgd` read topk 1.54, 2.24,
#: 1.67 and 1.87× slower than qsgd, each with a rounds-only CI about ±8% wide; the median spread of 16 timings of 4
#: A/A `gcbench bench` runs there was 0.12
PROCESS_LOG_SD = 0.12
#: the fewest degrees of freedom a measured spread needs to replace the built-in one (e.g. 3 processes × 5 timings)
MIN_DF = 10
#: a measured spread older than this is not used: a machine's load and neighbours move over days
MAX_AGE_S = 7 * 24 * 3600.0
#: the command that measures it, named where the built-in figure stands in
MEASURE_HINT = "gcbench bench --processes 5"


@dataclass(frozen=True)
class ProcessSpread:
    """A spread between processes: the sd of log ×copy, how it was measured, and the file it came from (None: built in)."""

    log_sd: float
    df: int = 0  # degrees of freedom of the pooled estimate; 0 for the built-in figure
    timings: int = 0  # kernel timings pooled
    processes: int = 0  # the most processes a timing had
    path: Path | None = None

    @property
    def measured(self) -> bool:
        return self.path is not None

    def source(self) -> str:
        """Where the figure comes from, for a method line or a note."""
        if self.path is None:
            return f"built in, measured on a 2-core VM; `{MEASURE_HINT}` measures this machine's"
        return (f"this machine's, pooled over {self.timings} timings in up to {self.processes} processes "
                f"({self.df} df) in {self.path}")

    def to_dict(self) -> dict[str, Any]:
        """The ``timing.process_spread`` block of a case judged with it."""
        return {"log_sd": self.log_sd, "df": self.df, "timings": self.timings, "processes": self.processes,
                "file": None if self.path is None else str(self.path)}


BUILT_IN = ProcessSpread(PROCESS_LOG_SD)


def of_case(case: RunCase) -> ProcessSpread:
    """The spread a run case's timing was recorded with; the built-in one for a file from before it was recorded."""
    info = case.timing.process_spread if case.timing is not None else None
    if info is None or info.log_sd is None or not math.isfinite(info.log_sd) or info.log_sd < 0:
        return BUILT_IN
    return ProcessSpread(float(info.log_sd), int(info.df or 0), int(info.timings or 0), int(info.processes or 0),
                         None if info.file is None else Path(info.file))


def _log_medians(record: RunRecord) -> Iterable[list[float]]:
    """Each kernel timing's process medians, as logarithms (finite positive values only)."""
    for case in record.cases:
        if not isinstance(case, BenchCase) or not case.ok:
            continue
        for kernel in ("compress", "decompress"):
            yield [math.log(v) for v in case.process_medians(kernel) if v > 0]


def spread_of(record: RunRecord, path: Path | None = None) -> ProcessSpread | None:
    """The pooled spread between processes of a bench record's timings, or None when no timing had two processes."""
    ss, df, timings, most = 0.0, 0, 0, 0
    for logs in _log_medians(record):
        n = len(logs)
        if n < 2:
            continue
        mean = sum(logs) / n
        ss += sum((v - mean) ** 2 for v in logs)
        df += n - 1
        timings += 1
        most = max(most, n)
    if df == 0:
        return None
    return ProcessSpread(math.sqrt(ss / df), df, timings, most, path)


def machine_spread(runs_dir: Path | str, machine_key: str, device: str | None = None, *, now: datetime | None = None,
                   max_age_s: float = MAX_AGE_S) -> ProcessSpread | None:
    """The spread of the newest bench file in ``runs_dir`` from the machine ``machine_key`` names, timed on the same
    kind of device (``cpu``, ``cuda``: a GPU's kernels spread otherwise than the CPU's), at most ``max_age_s`` old and
    with at least :data:`MIN_DF` degrees of freedom, or None."""
    for record, path, _ in recent_benches(runs_dir, max_age_s, now):
        if not record.finished or record.env.machine_key() != machine_key:
            continue
        if _device_kind(record.env.device) != _device_kind(device):
            continue
        spread = spread_of(record, path)
        if spread is not None and spread.df >= MIN_DF:
            return spread
    return None


def _device_kind(device: str | None) -> str:
    return (device or "cpu").split(":", 1)[0]


def measured_line(spread: ProcessSpread | None, runs_dir: Path | str) -> str | None:
    """What a ``bench --processes`` run measured of this machine's spread, and whether compare and run will use it."""
    if spread is None:
        return None
    head = (f"spread between processes on this machine: {spread.log_sd:.3g} in log terms (sd of log ×copy, pooled over "
            f"{spread.timings} timings, {spread.df} df; the built-in figure is {PROCESS_LOG_SD:g})")
    if spread.df < MIN_DF:
        return f"{head}; too few degrees of freedom to stand for the machine (fewer than {MIN_DF}): time more sizes or processes"
    return (f"{head}; `gcbench compare` and `gcbench run` with results in {runs_dir} add it to their time intervals "
            f"for {MAX_AGE_S / 86400:g} days")
