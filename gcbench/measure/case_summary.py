"""The summaries of one case's per-unit, per-step numbers into the record's fidelity, aggregate, size and per-layer
blocks: mean over tensors and steps, worst case, and the pooled whole model (docs/metrics.md)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from gcbench.core.payload import dense_bytes
from gcbench.measure.casemath import StreamStats
from gcbench.measure.fidelity import Fidelity, bits_per_element, mean_ci, pooled, ratio, summarise


def finite_mean(values: Iterable[float | None]) -> float | None:
    """The mean of the finite values (``None`` and ±inf/NaN skipped); ``None`` when there are none."""
    v = [x for x in values if x is not None and math.isfinite(x)]
    return float(np.mean(v)) if v else None


def _by_step(per_unit: Sequence[Sequence[Fidelity]]) -> list[dict[str, Any]]:
    """The whole model's pooled fidelity at each step (energy-weighted over units)."""
    return [pooled([unit[t] for unit in per_unit]) for t in range(len(per_unit[0]))]


def fidelity_summary(per_unit: Sequence[Sequence[Fidelity]], repeats: int, reference: str, unbiased: bool) -> dict[str, Any]:
    """The record's fidelity block from worker 0's fidelity per unit and step (``per_unit[u][t]``).

    Every statistic appears twice: over tensors and steps (mean with a CI or worst case), and as
    ``model``, the mean over steps of the whole model's pooled value.  ω̂ is q, given only for
    unbiased compressors.
    """
    fids = [f for unit in per_unit for f in unit]
    fd = [f.to_dict() for f in fids]
    model = _by_step(per_unit)

    def col(key: str) -> list[Any]:
        return [d[key] for d in fd]

    def model_mean(key: str) -> float | None:
        return finite_mean(p[key] for p in model)

    return {
        "repeats": repeats,
        "reference": reference,
        "q": {**mean_ci(col("q")), "model": model_mean("q")},
        "bias2": {**mean_ci(col("bias2")), "model": model_mean("bias2"), "se_mean": finite_mean(col("bias2_se"))},
        "variance": {**mean_ci(col("variance")), "model": model_mean("variance")},
        "omega_hat": {**mean_ci(col("q")), "model": model_mean("q")} if unbiased else None,
        "delta": {**summarise(col("delta")), "model": model_mean("delta")},
        "alpha": {**summarise(col("alpha"), worst="min"), "model": model_mean("alpha")},
        "cosine": {**summarise(col("cosine"), worst="min"), "model": model_mean("cosine")},
        "q_scaled": {**summarise(col("q_scaled")), "model": model_mean("q_scaled")},
        "q_samples": [s for f in fids for s in f.q_samples][:2000],
    }


def aggregate_summary(stats: StreamStats) -> dict[str, Any]:
    """The record's aggregate block: the aggregate's q and cosine against the true mean, and its stream per step."""
    fids = [f for unit in stats.agg for f in unit]
    per_step_q = [p["q"] for p in _by_step(stats.agg)]
    rec: dict[str, Any] = {
        "q": {**summarise([f.q for f in fids]), "model": finite_mean(per_step_q)},
        "cosine": {**summarise([f.cosine for f in fids], worst="min"), "model": finite_mean(stats.agg_cosine)},
        "per_step_q": per_step_q,
        "per_step_cosine": stats.agg_cosine,
        "sum_drift": stats.agg_drift,
    }
    if stats.windowed:
        rec["window_drift"] = stats.window_drift
    return rec


def unit_summary(name: str, numel: int, wire_bytes: Sequence[int], fids: Sequence[Fidelity]) -> dict[str, Any]:
    """One unit's row of the record's per-layer table: mean wire bytes and ratio, mean fidelity over steps."""
    fd = [f.to_dict() for f in fids]
    b = float(np.mean(wire_bytes))
    return {"name": name, "numel": numel, "wire_bytes": b, "ratio": ratio(numel, b),
            **{k: finite_mean(d[k] for d in fd) for k in ("q", "bias2", "variance", "cosine")}}


def size_summary(numel: int, unit_bytes: Sequence[Sequence[int]], traffic_sent: float) -> dict[str, Any]:
    """The record's size block from worker 0's wire bytes per unit and step and what a worker sends per step.

    ``wire_bytes`` (and the ratio) is worker 0's payload bytes per step; ``traffic_sent_bytes`` is
    what a worker really sends per step in the exchange, every phase counted (scalers, both legs
    of 1-bit SGD, LGC's latents and innovations).
    """
    wire = sum(sum(b) for b in unit_bytes) / len(unit_bytes[0])
    return {"numel": numel, "dense_bytes": dense_bytes(numel), "wire_bytes": wire,
            "ratio": ratio(numel, wire), "bits_per_element": bits_per_element(numel, wire),
            "traffic_sent_bytes": traffic_sent, "traffic_ratio": ratio(numel, traffic_sent) if traffic_sent else None}
