"""``gcbench bench --processes N``: every case timed in N fresh processes, and the N records made one.

Why: the same build's ×copy moves from process to process further than the rounds inside one process show (where
the allocator put the buffers, which core, what the caches held when it started).  On a quiet 2-core machine four
runs of one build gave topk's 1M compress ×copy 10.7, 15.4, 12.2 and 13.6, each with a tight CI of its own, and a
test on one process's rounds called 5 of 16 timings of an unchanged build worse.  A comparison that is to tell a
code change from that needs each side's spread between processes, so a case runs in N processes and the record
keeps each one's median (``x_copy.<kernel>.process_medians``) for :func:`gcbench.results.metrics.process_test`.

The passes run one after another over the whole sweep (case 1..k in process 1, then again), so a slow minute falls
on one process of many cases, not on every process of one case.

The merged record:

* ``compress_x_copy`` / ``decompress_x_copy`` and their ``x_copy`` block's ``median``: the median of the process
  medians; ``ci_lo``/``ci_hi``: the distribution-free CI of that median over the processes (the whole range for
  five or fewer); ``samples``, ``iqr``, ``rel_iqr``: every round of every process; ``flags``: those most processes
  raised, each reason saying how many and quoting the first; ``rounds``: all of them.
* ``copy``/``compress``/``decompress``: every process's samples, median and IQR over all of them.
* GB/s, speed-up over the reference and ×bound: the medians over processes; load and foreign CPU: the worst;
  peak memory: the largest.  ``reference`` and ``vs_torch_topk``: the first process's (context, not tested).
* A case that failed in any process is that failure (``process k of N: ...``): a kernel that sometimes fails fails.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gcbench.measure.timing import median_ci, rel_iqr

#: the most processes a case may be timed in (a sweep's time grows with them)
MAX_PROCESSES = 20

Progress = Callable[[str, int, int, str], None]


def passes_progress(progress: Progress | None, done: int, processes: int) -> Progress | None:
    """``progress`` for pass ``done`` (0-based) of ``processes``: one plan and one count over every pass."""
    if progress is None:
        return None

    def report(stage: str, i: int, total: int, text: str) -> None:
        if stage == "plan":
            if done == 0:  # the ETA learns from one plan: each case's work once per process
                plan = json.loads(text)
                plan["labels"], plan["case_work"] = plan["labels"] * processes, plan["case_work"] * processes
                progress(stage, 0, total * processes, json.dumps(plan))
            return
        if text == "done" and done < processes - 1:
            return
        label = text if text == "done" else f"{text} (process {done + 1}/{processes})"
        progress(stage, done * total + i, total * processes, label)

    return report


def _timing(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One timing section (``copy``, ``compress`` ...) over every process's samples."""
    samples = [float(v) for p in parts for v in (p.get("samples_s") or []) if v is not None]
    out = dict(parts[0])
    if samples:
        q1, med, q3 = np.percentile(samples, [25, 50, 75])
        out.update(samples_s=samples, median_s=float(med), iqr_s=float(q3 - q1))
    return out


def _x_copy(blocks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One kernel's ×copy block over the processes (see the module docstring)."""
    medians = [float(b["median"]) for b in blocks if b.get("median") is not None]
    samples = [float(v) for b in blocks for v in (b.get("samples") or [])]
    raised: dict[str, list[int]] = {}  # flag -> the processes (1-based) that raised it, in order
    for k, b in enumerate(blocks, 1):
        for f in b.get("flags") or []:
            raised.setdefault(f, []).append(k)
    # a flag of the median of the processes' medians: raised in most of them (one disturbed process of five moves
    # that median no more than the others' spread, which is what the processes are there to show)
    flags = [f for f, ks in raised.items() if 2 * len(ks) > len(blocks)]
    reasons = {f: f"{len(raised[f])} of {len(blocks)} processes; process {raised[f][0]}: {why}" for f in flags
               if (why := (blocks[raised[f][0] - 1].get("reasons") or {}).get(f))}
    out = dict(blocks[0])
    q1, q3 = np.percentile(samples, [25, 75]) if samples else (None, None)
    lo, hi = median_ci(medians) or (None, None)
    out.update(median=float(np.median(medians)) if medians else None, ci_lo=lo, ci_hi=hi, samples=samples,
               iqr=None if q1 is None or q3 is None else float(q3 - q1), rel_iqr=rel_iqr(samples) if samples else None,
               flags=flags, reasons=reasons, rounds=sum(int(b.get("rounds") or 0) for b in blocks),
               process_medians=medians)
    return out


def _median(values: Sequence[Any]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return float(np.median(kept)) if kept else None


def worst(*values: float | None) -> float | None:
    """The largest of ``values`` that is known (None when none is): a load, a peak."""
    return max((float(v) for v in values if v is not None), default=None)


def merge_processes(recs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The records of one case timed in ``len(recs)`` processes as one record (see the module docstring)."""
    n = len(recs)
    for k, r in enumerate(recs, 1):
        if r.get("error"):
            return {**r, "error": f"process {k} of {n}: {r['error']}", "processes": n}
    if n == 1:
        return dict(recs[0])
    out = copy.deepcopy(dict(recs[0]))
    for section in ("copy", "compress", "decompress"):
        if isinstance(out.get(section), dict):
            out[section] = _timing([r[section] for r in recs])
    x_copy = {k: _x_copy([r["x_copy"][k] for r in recs]) for k in out.get("x_copy") or {}}
    out["x_copy"] = x_copy
    for kernel in ("compress", "decompress"):
        if kernel in x_copy:
            out[f"{kernel}_x_copy"] = x_copy[kernel]["median"]
    for key in ("gbps_compress", "gbps_decompress", "speedup_vs_reference"):
        if key in out:
            out[key] = _median([r.get(key) for r in recs])
    for key in ("load_per_core", "foreign_cpu", "peak_extra_bytes"):
        if key in out:
            out[key] = worst(*(r.get(key) for r in recs))
    bound, med = out.get("traffic_bound"), out.get("compress_x_copy")
    if bound and med is not None:
        out["x_bound"] = med / bound
    out["processes"] = n
    return out


def merge_passes(passes: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Pass-major records (``passes[p][i]``: case i in process p) as one merged record per case."""
    return [merge_processes([p[i] for p in passes]) for i in range(len(passes[0]))] if passes else []
