"""Statistics over seeds for ``gcbench converge``: intervals, gaps paired by seed, steps to a target.

* An interval is the mean over seeds with a 95% Student-t confidence interval
  (``mean ± t(0.975, n−1) · s / √n``); with one value it is that value (no spread can be
  estimated), with none it is absent.
* The **gap** is reference minus compressor of the final metric, paired by seed (the same seed
  gives both runs the same initial model and data order), over the seeds where both ran to the
  end; positive means the compressor ends worse.
* The **target** is a metric value.  By default it is a fraction (:data:`DEFAULT_TARGET_FRACTION`)
  of the reference's mean final metric, written ``ref − (1 − fraction)·|ref|`` so that it is also
  a looser value, not a stricter one, for a negative metric (``neg_loss``).  A seed *reaches* it
  at the first evaluated step whose metric is at or above it; the steps to target are averaged
  over the seeds that reached it, and "reached k of n" says how many did.  A seed that never
  reaches it within the step budget is an outcome (``reached = False``), never a missing number.
* The **curve** is the mean over seeds at each evaluated step, with the 95% interval as its band,
  over the seeds that were still running at that step (a diverged seed stops contributing).
* Every interval is **clipped to what its quantity can be** (:func:`domain`, :meth:`gcbench.core.intervals.Interval.clipped`):
  a t-interval over two seeds of 0.43 and 0.84 reaches 1.31, an accuracy no run can have.  Steps to the target lie in
  ``[0, budget]``, an accuracy in ``[0, 1]`` and a gap of accuracies in ``[-1, 1]``; the mean is never moved (it is an
  average of values inside the domain).  A negated loss (``neg_loss``) is not clipped: it is a user's ``loss_fn``, which
  may go below 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gcbench.core.intervals import UNBOUNDED, Domain, domain, mean_interval

#: the default target: 95% of the reference's mean final metric (see the module docstring)
DEFAULT_TARGET_FRACTION = 0.95




def interval(values: Sequence[float | None], bounds: Domain = UNBOUNDED) -> dict[str, Any] | None:
    """``{mean, low, high, n}``: the mean of the finite ``values`` with its 95% t-interval clipped to ``bounds``; None
    without a value."""
    iv = mean_interval([float(v) for v in values if v is not None and math.isfinite(float(v))])
    if iv is None:
        return None
    if iv.n > 1:
        iv = iv.clipped(bounds)
    return {"mean": iv.mean, "low": iv.lo, "high": iv.hi, "n": iv.n}


def target_from_fraction(reference_final_mean: float, fraction: float) -> float:
    """The metric value a fraction of the reference's final mean stands for (``ref − (1 − fraction)·|ref|``)."""
    return reference_final_mean - (1.0 - fraction) * abs(reference_final_mean)


def steps_to_target(curve: Sequence[Mapping[str, Any]], target: float) -> int | None:
    """The first evaluated step whose metric is at or above ``target``; None when no evaluation reached it."""
    for point in curve:
        m = point.get("metric")
        if m is not None and math.isfinite(m) and m >= target:
            return int(point["step"])
    return None


def best_metric(curves: Sequence[Sequence[Mapping[str, Any]]]) -> float | None:
    """The highest metric any evaluation of any curve reached."""
    vals = [p["metric"] for c in curves for p in c if p.get("metric") is not None and math.isfinite(p["metric"])]
    return max(vals) if vals else None


def curve_band(curves: Sequence[Sequence[Mapping[str, Any]]], bounds: Domain = UNBOUNDED) -> dict[str, Any]:
    """Mean metric and its 95% band (clipped to the metric's ``bounds``) at each evaluated step (over the curves that have
    it), and the mean training loss."""
    steps = sorted({int(p["step"]) for c in curves for p in c})
    by_step: dict[int, list[Mapping[str, Any]]] = {s: [] for s in steps}
    for c in curves:
        for p in c:
            by_step[int(p["step"])].append(p)
    mean, low, high, loss = [], [], [], []
    for s in steps:
        iv = interval([p.get("metric") for p in by_step[s]], bounds)
        mean.append(iv["mean"] if iv else None)
        low.append(iv["low"] if iv else None)
        high.append(iv["high"] if iv else None)
        losses = [p["train_loss"] for p in by_step[s] if p.get("train_loss") is not None and math.isfinite(p["train_loss"])]
        loss.append(float(np.mean(losses)) if losses else None)
    return {"curve_steps": steps, "curve_mean": mean, "curve_low": low, "curve_high": high, "loss_mean": loss}


def summarize(seeds: Sequence[Mapping[str, Any]], reference_finals: Mapping[int, float] | None, target: float | None,
              metric: str | None = None, budget: int | None = None) -> dict[str, Any]:
    """The :class:`~gcbench.results.converge_record.ConvergeSummary` of one compressor's seed runs.

    ``seeds``: :class:`~gcbench.results.converge_record.SeedRun` dicts (``seed``, ``status``, ``curve``,
    ``final_metric``); ``reference_finals``: the reference's final metric per seed (None for the
    reference itself, whose gap is zero by definition); ``target``: the metric to reach; ``metric`` and
    ``budget`` (the settings' metric and steps): the domains the intervals are clipped to (:func:`domain`).
    """
    finished = [s for s in seeds if s["status"] == "ok" and s.get("final_metric") is not None]
    gap_bounds = domain("gap", metric)
    out: dict[str, Any] = {
        "final_metric": interval([s["final_metric"] for s in finished], domain("metric", metric)),
        "seeds": len(seeds),
        "diverged": sum(1 for s in seeds if s["status"] == "diverged"),
        "failed": sum(1 for s in seeds if s["status"] == "error"),
    }
    if reference_finals is None:
        out["gap"] = interval([0.0 for _ in finished])
    else:
        out["gap"] = interval([reference_finals[s["seed"]] - s["final_metric"] for s in finished if s["seed"] in reference_finals],
                              gap_bounds)
    if target is not None:
        hits = [s["steps_to_target"] for s in seeds if s.get("reached")]
        out["reached"] = len(hits)
        out["steps_to_target"] = interval(hits, domain("steps", budget=budget))
    out.update(curve_band([s.get("curve") or [] for s in seeds if s["status"] != "error"], domain("metric", metric)))
    return out
