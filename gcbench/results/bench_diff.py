"""Bench against bench: two ``gcbench bench`` files (``kind = "bench"``, :mod:`gcbench.measure.bench`), row by row.

* Cases are matched by (row label, element count), like ``gcbench bench --baseline``; the label is
  the compressor, or its spec ``name:key=value`` when the benchmark set parameters.
* The metrics are compress×copy and decompress×copy (lower is better): kernel time as a multiple
  of a plain copy of the same tensor timed in the same process, which cancels most of the
  machine's load of the moment, not all of it: the same build's ×copy moves from process to process.
  So the test runs on each process's median (``gcbench bench --processes N`` times a case in N fresh
  processes; :func:`gcbench.results.judge.judge_timing`), and with one process a side only a change past
  :data:`gcbench.results.judge.ONE_PROCESS_FACTOR` is called.  Holm's correction holds the whole file's
  timings together (:func:`gcbench.results.judge.correct_timings`).
* A pair is not comparable when the machine (:meth:`gcbench.results.record.Environment.machine_key`), the
  compressor's version or parameters, or the benchmark's thread count or device differ.
* The threshold-and-test rule of :func:`gcbench.results.judge.judge` decides better / worse / ~.

:func:`gcbench.results.run_diff.compare_runs` sends two bench files here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gcbench.results.bench_record import BenchCase
from gcbench.results.judge import (
    DEFAULT_ALPHA,
    DEFAULT_THRESHOLD,
    FAILING,
    FIXED,
    MISSING,
    NEW,
    NEW_FAILURE,
    ONE_PROCESS_FACTOR,
    Comparison,
    Row,
    correct_timings,
    judge_timing,
    version_params_diff,
)
from gcbench.results.parse import as_record
from gcbench.results.record import RunRecord

# (metric, timing section whose samples it is built from); both are "× copy": lower is better
BENCH_METRICS: tuple[tuple[str, str], ...] = (("compress_x_copy", "compress"), ("decompress_x_copy", "decompress"))
BENCH_UNIT = "× copy"


def bench_source(rec: BenchCase) -> str:
    """The size a bench record was timed at, as the row's "source" ("1,000,000 elements")."""
    return f"{rec.numel:,} elements" if rec.numel is not None else "? elements"


def _bench_diff(base_file: RunRecord, new_file: RunRecord, b: BenchCase, n: BenchCase) -> str:
    """Why two bench records are not comparable ("" when they are)."""
    mb, mn = base_file.env.machine_key(), new_file.env.machine_key()
    if mb != mn:
        return f"machine changed: {mb} → {mn}"
    why = version_params_diff(b, n)
    if why:
        return why
    for key in ("threads", "device"):
        if getattr(b, key) != getattr(n, key):
            return f"{key} {getattr(b, key)} → {getattr(n, key)}"
    return ""


def compare_bench(baseline: RunRecord | Mapping[str, Any], new: RunRecord | Mapping[str, Any], threshold: float = DEFAULT_THRESHOLD,
                  alpha: float = DEFAULT_ALPHA) -> Comparison:
    """Compare two ``gcbench bench`` results files per (compressor, element count); see the module docstring."""
    base_rec, new_rec = as_record(baseline), as_record(new)
    cmp = Comparison(str(base_rec.run_id or "baseline"), str(new_rec.run_id or "new"), threshold, alpha)
    mb, mn = base_rec.env.machine_key(), new_rec.env.machine_key()
    if mb != mn:
        cmp.notes.append(f"different machines ({mb} vs {mn}): kernel timings are not comparable")
    if base_rec.gcbench_version != new_rec.gcbench_version:
        cmp.notes.append(f"gcbench {base_rec.gcbench_version} → {new_rec.gcbench_version}")
    cmp.notes.append("kernel times are compared as multiples of a copy timed in the same process, tested on each "
                     "process's median (Welch's t on their logarithms), Holm-corrected over the file's timings")

    def key(rec: BenchCase) -> tuple[str, int | None]:  # older files have no label: the compressor name is theirs
        return (rec.name, rec.numel)

    base_index: dict[tuple[str, int | None], BenchCase] = {}
    for rec in base_rec.cases:
        base_index.setdefault(key(rec), rec)
    seen: set[tuple[str, int | None]] = set()
    one_process = 0  # timing rows with one process a side: only a change past ONE_PROCESS_FACTOR is called
    for n in new_rec.cases:
        k = key(n)
        if k in seen:  # a duplicate (compressor, size) in one file: only the first is compared
            continue
        seen.add(k)
        ident = {"source": bench_source(n), "case": k[0]}
        case_row: dict[str, Any] = {**ident, "metric": "", "baseline": None, "new": None, "change": None, "p_value": None}
        b = base_index.get(k)
        if b is None:
            cmp.rows.append(Row(**case_row, verdict=NEW if n.ok else NEW_FAILURE, reason="" if n.ok else n.error_text))
            continue
        if not n.ok:
            cmp.rows.append(Row(**case_row, verdict=NEW_FAILURE if b.ok else FAILING, reason=n.error_text))
            continue
        if not b.ok:
            cmp.rows.append(Row(**case_row, verdict=FIXED, reason=f"failed in the baseline: {b.error_text}"))
            continue
        diff = _bench_diff(base_rec, new_rec, b, n)
        for metric, section in BENCH_METRICS:
            vb, vn = b.metric(metric), n.metric(metric)
            if vb is None and vn is None:
                continue
            pb, pn = b.process_medians(section), n.process_medians(section)
            one_process += not diff and len(pb) == 1 and len(pn) == 1
            common = {**ident, "metric": metric, "baseline": vb, "new": vn, "higher_is_better": False, "unit": BENCH_UNIT}
            cmp.rows.append(judge_timing(common, vb, vn, pb, pn, threshold, alpha, diff))
    for b in base_rec.cases:
        if key(b) not in seen:
            seen.add(key(b))
            cmp.rows.append(Row(bench_source(b), b.name, "", None, None, None, None, MISSING, "not in the new run"))
    correct_timings(cmp.rows, alpha)
    if one_process:
        cmp.notes.append(f"{one_process} timing(s) rest on one process a side: a process's own speed moves ×copy, so "
                         f"only a change past {ONE_PROCESS_FACTOR:g}× is called; time both with `gcbench bench "
                         "--processes 5` to test smaller changes")
    return cmp


def smallest_p(m: int, n: int) -> float:
    """The smallest exact two-sided Mann–Whitney p-value with ``m`` and ``n`` samples (fully separated samples)."""
    return min(1.0, 2.0 / math.comb(m + n, m))
