"""The metrics a results record holds: name, unit, direction and meaning, and the test that compares samples.

How each is measured is :mod:`gcbench.measure.fidelity` (size, fidelity) and
:mod:`gcbench.measure.timing`; this catalogue is written into every results
file and read by every comparison, so it sits with the results, below the measuring code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided Mann–Whitney U p-value (scipy) for two timing sample sets."""
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy import stats  # on use: importing scipy.stats costs 1-2.5 s of every command's start

    return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def process_test(base: Sequence[float], new: Sequence[float]) -> float | None:
    """Two-sided p-value that two sets of per-process timings differ, on their logarithms (a timing is a ratio scale).

    Each value is one process's median, so the test sees what a rerun sees: a process's own speed.  With two or more
    values a side, Welch's t-test; with one value on a side and two or more on the other, that value against the
    other side's spread (the t of a prediction: (x − mean)/(s·√(1 + 1/n)), n − 1 degrees of freedom); with one value
    a side, None: nothing says how far one process moves from the next.  Rounds inside one process cannot stand in
    for processes: on a quiet 2-core machine they made Mann–Whitney call 5 of 16 bench timings and 10 of 135 run
    metrics of an unchanged build worse (docs/timing.md).
    """
    a = [math.log(v) for v in base if math.isfinite(v) and v > 0]
    b = [math.log(v) for v in new if math.isfinite(v) and v > 0]
    if len(a) < len(b):  # the replicated side first: only its spread is known when the other has one value
        a, b = b, a
    na, nb = len(a), len(b)
    if nb == 0 or na < 2:
        return None
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((v - ma) ** 2 for v in a) / (na - 1)
    if nb >= 2:
        vb = sum((v - mb) ** 2 for v in b) / (nb - 1)
        se2 = va / na + vb / nb
        df = se2 ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1)) if se2 > 0 else 1.0
    else:
        se2, df = va * (1 + 1 / na), float(na - 1)
    if se2 <= 0:
        return 1.0 if ma == mb else 0.0
    from scipy.special import stdtr  # the t CDF; scipy.stats would cost 1-2.5 s of a report's start

    return float(min(1.0, 2 * stdtr(df, -abs(ma - mb) / math.sqrt(se2))))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of ``pvalues`` (same order): each p times how many are not yet smaller, made
    monotone.  Rejecting where the adjusted p is under α keeps the chance of any false call among them under α."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


@dataclass(frozen=True)
class MetricInfo:
    """Metadata written with every results file (unit and direction)."""

    name: str
    unit: str
    higher_is_better: bool
    description: str


def _metric(name: str, description: str, unit: str = "", higher_is_better: bool = False) -> MetricInfo:
    """A catalogue row: most metrics are unitless and lower-is-better."""
    return MetricInfo(name, unit, higher_is_better, description)


METRICS: tuple[MetricInfo, ...] = (
    _metric("ratio", "dense float32 bytes / wire bytes (headers included)", unit="x", higher_is_better=True),
    _metric("traffic_ratio", "dense float32 bytes / what a worker really sends per step in the exchange, "
            "every phase counted (scalers, both legs of 1-bit SGD, LGC's latents and innovations)", unit="x", higher_is_better=True),
    _metric("bits_per_element", "wire bits per gradient element", unit="bits"),
    _metric("q", "relative MSE (1/R) Σ‖C_r(x) − x‖²/‖x‖² (ω̂ for unbiased compressors)"),
    _metric("bias2", "relative bias² ‖E C(x) − x‖²/‖x‖² (U-statistic)"),
    _metric("variance", "relative variance (1/(R−1)) Σ‖C_r − mean‖²/‖x‖²"),
    _metric("omega_hat", "ω̂ = q, the variance parameter of an unbiased compressor (none for a biased one)"),
    _metric("delta", "Beznosikov δ = 1/(1 − q)"),
    _metric("alpha", "α = 1 − q (EF21 form)", higher_is_better=True),
    _metric("cosine", "⟨C(x), x⟩/(‖C(x)‖‖x‖), whole model (sums over tensors before the division)", higher_is_better=True),
    _metric("q_scaled", "scale-free error 1 − cos²: relative MSE after the best scalar rescaling of C(x)"),
    _metric("delivered", "stream: 1 − ‖Σ_t (U_t − D_t)‖/‖Σ_t D_t‖, the fraction of the dense update delivered "
            "after the last step (U: the case's update, D: the suite optimizer's dense update)", higher_is_better=True),
    _metric("stream_error", "stream: mean over steps of ‖U_t − D_t‖²/‖D_t‖² (whole model)"),
    _metric("stream_error_scaled", "stream: mean over steps of 1 − cos²(U_t, D_t)"),
    _metric("aggregate_q", "relative MSE of the exchanged aggregate vs the true worker mean"),
    _metric("ef_drift", "‖Σ C_t − Σ g_t‖/‖Σ g_t‖ after the last step"),
    _metric("aggregate_drift", "‖Σ_t (aggregate_t − mean_t)‖/‖Σ_t mean_t‖ after the last step"),
    _metric("final_accuracy", "held-out accuracy at the end of a training run (gcbench train)", higher_is_better=True),
    _metric("final_loss", "held-out loss at the end of a training run (gcbench train)"),
    _metric("compress_s", "median compress time per worker-step", unit="s"),
    _metric("decompress_s", "median decompress time per worker-step", unit="s"),
    # ×copy replaces copy_fraction (copy / compress, its inverse): files keep copy_fraction_* for older readers
    _metric("comp_over_copy", "×copy: median compress time / time of a plain copy of the same tensors, "
            "the copy timed in rounds interleaved with the kernels: pooled over the source's cases for a compute-bound "
            "kernel, its own rounds' for one within 2x of its traffic bound (timing.compress_baseline) "
            "(lower is better; 1 = as fast as a copy)", unit="× copy"),
    _metric("decomp_over_copy", "×copy of decompress: median decompress time / time of the same copy "
            "(lower is better)", unit="× copy"),
    _metric("compress_gbps", "dense input bytes / median compress time", unit="GB/s", higher_is_better=True),
)


def metrics_metadata() -> list[dict[str, Any]]:
    return [asdict(m) for m in METRICS]
