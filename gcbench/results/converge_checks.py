"""What a convergence file (``kind = "converge"``) must satisfy beyond its types, checked when it is read.

The types of :mod:`gcbench.results.record` let through a file that was edited or corrupted into numbers no run can
produce: steps to the target below 0, above the budget or NaN, more seeds reaching the target than were run, a summary
that says something its own per-seed records do not.  ``advise --convergence`` and ``report`` would print such a
file's numbers as measurements ("fastest topk, -4.87 s = -50 steps", "reached 1000/2"), so a file is refused on load
with one line naming the field, and its readers can take every number it holds at its word:

* **bounds**: a seed's ``steps_to_target`` and ``steps_run``, and the summary's mean steps to the target, lie in
  ``[0, settings.steps]``; every number checked here is finite; ``reached``, ``diverged`` and ``failed`` are at most
  the seeds; an interval's ``low <= mean <= high`` and its ``n`` at most the seeds;
* **one story per seed**: a seed has ``reached`` exactly when it has ``steps_to_target``;
* **the summary is its seeds'**: where the per-seed records are there, the summary's counts are recounted from them
  and its final metric and steps to the target (their means and ``n``) recomputed, within float tolerance
  (:data:`REL_TOL`); the gap to the reference is recomputed against the reference case's own seeds
  (:func:`record_problem`).

The interval ends are not recomputed: files written before the intervals were clipped to their quantity's domain
(:mod:`gcbench.converge.seed_summary`) hold ends outside it, and they are real files; readers clip them for display.
Each function returns the first problem as text (the field's path from the case's ``convergence``), or None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gcbench.results.record import ConvergeCase, Convergence, Interval

#: how far a summary's mean may differ from the one recomputed from its seeds (relative; an absolute 1e-9 near 0)
REL_TOL = 1e-6
_ABS_TOL = 1e-9


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=_ABS_TOL)


def _interval_problem(where: str, iv: Interval | None, seeds: int | None, lo: float | None = None,
                      hi: float | None = None, domain: str = "") -> str | None:
    """An interval's own consistency: finite ends around its mean, ``n`` at most the seeds, the mean in ``[lo, hi]``."""
    if iv is None or iv.mean is None:
        return None
    for name in ("mean", "low", "high"):
        v = getattr(iv, name)
        if v is not None and not math.isfinite(v):
            return f"{where}.{name}: {v} is not a finite number"
    m = float(iv.mean)
    if (lo is not None and m < lo) or (hi is not None and m > hi):
        return f"{where}.mean: {m:g} is outside [{lo:g}, {hi:g}]{domain}"
    if iv.low is not None and iv.low > m + _ABS_TOL * max(1.0, abs(m)):
        return f"{where}.low: {iv.low:g} is above its mean {m:g}"
    if iv.high is not None and iv.high < m - _ABS_TOL * max(1.0, abs(m)):
        return f"{where}.high: {iv.high:g} is below its mean {m:g}"
    if seeds is not None and iv.n is not None and iv.n > seeds:
        return f"{where}.n: {iv.n}, more than the {seeds} seeds"
    return None


def _against(where: str, iv: Interval | None, values: Sequence[float]) -> str | None:
    """``iv`` against the values it summarises: absent exactly when there are none, else the same mean and ``n``."""
    if not values:
        if iv is not None and iv.mean is not None:
            return f"{where}: {iv.mean:g} over no seed (no per-seed value to summarise)"
        return None
    mean = math.fsum(values) / len(values)
    if iv is None or iv.mean is None:
        return f"{where}: missing, while {len(values)} seeds have a value (mean {mean:g})"
    if not _close(float(iv.mean), mean):
        return f"{where}.mean: {iv.mean:g}, but its seeds' values average {mean:g}"
    if iv.n is not None and iv.n != len(values):
        return f"{where}.n: {iv.n}, but {len(values)} seeds have a value"
    return None


def convergence_problem(conv: Convergence) -> str | None:
    """The first problem of one case's ``convergence`` (see the module docstring), as ``path: what``; None if none."""
    budget = int(conv.settings.steps)
    span = f" (the budget of {budget} steps)"
    runs = conv.seeds
    for i, r in enumerate(runs or []):
        where = f"convergence.seeds[{i}]"
        if r.status not in ("ok", "diverged", "error"):
            return f"{where}.status: expected one of ok, diverged, error, got {r.status!r}"
        for name in ("steps_to_target", "steps_run", "diverged_at_step"):
            v = getattr(r, name)
            if v is not None and not 0 <= v <= budget:
                return f"{where}.{name}: {v} is outside [0, {budget}]{span}"
        for name in ("final_metric", "final_loss"):
            v = getattr(r, name)
            if v is not None and not math.isfinite(v):
                return f"{where}.{name}: {v} is not a finite number"
        if r.reached is not None and r.reached != (r.steps_to_target is not None):
            return (f"{where}.reached: {str(r.reached).lower()}, but steps_to_target is "
                    f"{'absent' if r.steps_to_target is None else r.steps_to_target}")
    s = conv.summary
    if s is None:
        return None
    n = s.seeds if s.seeds is not None else (len(runs) if runs is not None else None)
    if runs is not None and s.seeds is not None and s.seeds != len(runs):
        return f"convergence.summary.seeds: {s.seeds}, but the case holds {len(runs)} seed runs"
    for name in ("reached", "diverged", "failed"):
        v = getattr(s, name)
        if v is not None and n is not None and v > n:
            return f"convergence.summary.{name}: {v}, more than the {n} seeds"
    for name, lo, hi, domain in (("steps_to_target", 0.0, float(budget), span), ("final_metric", None, None, ""),
                                 ("gap", None, None, "")):
        problem = _interval_problem(f"convergence.summary.{name}", getattr(s, name), n, lo, hi, domain)
        if problem:
            return problem
    if runs is None:
        return None
    counts = {"reached": sum(1 for r in runs if r.reached), "diverged": sum(1 for r in runs if r.status == "diverged"),
              "failed": sum(1 for r in runs if r.status == "error")}
    for name, want in counts.items():
        v = getattr(s, name)
        if v is not None and v != want:
            return f"convergence.summary.{name}: {v}, but {want} of its seed runs say so"
    finals = [float(r.final_metric) for r in runs if r.status == "ok" and r.final_metric is not None]
    hits = [float(r.steps_to_target) for r in runs if r.reached and r.steps_to_target is not None]
    problem = _against("convergence.summary.final_metric", s.final_metric, finals)
    if problem is None and s.reached is not None:  # a summary without `reached` was made without a target
        problem = _against("convergence.summary.steps_to_target", s.steps_to_target, hits)
    return problem


def record_problem(cases: Sequence[ConvergeCase]) -> str | None:
    """The first gap of a case that its seeds and the reference's do not give (``cases[i].convergence.summary.gap``).

    The gap is reference minus compressor of the final metric, paired by seed, over the seeds where both finished
    (:func:`gcbench.converge.seed_summary.summarize`); the reference's own gap is 0.
    """
    ref = next((c for c in cases if c.convergence is not None and c.convergence.reference), None)
    if ref is None or ref.convergence is None or ref.convergence.seeds is None:
        return None
    # every reference seed with a final metric, as the writer pairs them (gcbench.converge.sweep)
    ref_finals = {r.seed: float(r.final_metric) for r in ref.convergence.seeds if r.final_metric is not None}
    for i, c in enumerate(cases):
        conv = c.convergence
        if conv is None or conv.seeds is None or conv.summary is None or conv.summary.gap is None:
            continue
        if conv.reference:
            gaps = [0.0 for r in conv.seeds if r.status == "ok" and r.final_metric is not None]
        else:
            gaps = [ref_finals[r.seed] - float(r.final_metric) for r in conv.seeds
                    if r.status == "ok" and r.final_metric is not None and r.seed in ref_finals]
        problem = _against(f"cases[{i}].convergence.summary.gap", conv.summary.gap, gaps)
        if problem:
            return problem
    return None
