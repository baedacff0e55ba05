"""The metrics a results record holds: name, unit, direction and meaning, and the test that compares samples.

How each is measured is :mod:`gcbench.measure.fidelity` (size, fidelity) and
:mod:`gcbench.measure.timing`; this catalogue is written into every results
file and read by every comparison, so it sits with the results, below the measuring code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided Mann–Whitney U p-value (scipy) for two timing sample sets."""
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy import stats  # on use: importing scipy.stats costs 1-2.5 s of every command's start

    return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


@dataclass(frozen=True)
class MetricInfo:
    """Metadata written with every results file (unit and direction)."""

    name: str
    unit: str
    higher_is_better: bool
    description: str


METRICS: tuple[MetricInfo, ...] = (
    MetricInfo("ratio", "x", True, "dense float32 bytes / wire bytes (headers included)"),
    MetricInfo("traffic_ratio", "x", True, "dense float32 bytes / what a worker really sends per step in the exchange, "
               "every phase counted (scalers, both legs of 1-bit SGD, LGC's latents and innovations)"),
    MetricInfo("bits_per_element", "bits", False, "wire bits per gradient element"),
    MetricInfo("q", "", False, "relative MSE (1/R) Σ‖C_r(x) − x‖²/‖x‖² (ω̂ for unbiased compressors)"),
    MetricInfo("bias2", "", False, "relative bias² ‖E C(x) − x‖²/‖x‖² (U-statistic)"),
    MetricInfo("variance", "", False, "relative variance (1/(R−1)) Σ‖C_r − mean‖²/‖x‖²"),
    MetricInfo("omega_hat", "", False, "ω̂ = q, the variance parameter of an unbiased compressor (none for a biased one)"),
    MetricInfo("delta", "", False, "Beznosikov δ = 1/(1 − q)"),
    MetricInfo("alpha", "", True, "α = 1 − q (EF21 form)"),
    MetricInfo("cosine", "", True, "⟨C(x), x⟩/(‖C(x)‖‖x‖), whole model (sums over tensors before the division)"),
    MetricInfo("q_scaled", "", False, "scale-free error 1 − cos²: relative MSE after the best scalar rescaling of C(x)"),
    MetricInfo("delivered", "", True, "stream: 1 − ‖Σ_t (U_t − D_t)‖/‖Σ_t D_t‖, the fraction of the dense update delivered "
               "after the last step (U: the case's update, D: the suite optimizer's dense update)"),
    MetricInfo("stream_error", "", False, "stream: mean over steps of ‖U_t − D_t‖²/‖D_t‖² (whole model)"),
    MetricInfo("stream_error_scaled", "", False, "stream: mean over steps of 1 − cos²(U_t, D_t)"),
    MetricInfo("aggregate_q", "", False, "relative MSE of the exchanged aggregate vs the true worker mean"),
    MetricInfo("ef_drift", "", False, "‖Σ C_t − Σ g_t‖/‖Σ g_t‖ after the last step"),
    MetricInfo("aggregate_drift", "", False, "‖Σ_t (aggregate_t − mean_t)‖/‖Σ_t mean_t‖ after the last step"),
    MetricInfo("final_accuracy", "", True, "held-out accuracy at the end of a training run (gcbench train)"),
    MetricInfo("final_loss", "", False, "held-out loss at the end of a training run (gcbench train)"),
    MetricInfo("compress_s", "s", False, "median compress time per worker-step"),
    MetricInfo("decompress_s", "s", False, "median decompress time per worker-step"),
    # ×copy replaces copy_fraction (copy / compress, its inverse): files keep copy_fraction_* for older readers
    MetricInfo("comp_over_copy", "× copy", False, "×copy: median compress time / time of a plain copy of the same tensors, "
               "the copy timed in rounds interleaved with the kernels: pooled over the source's cases for a compute-bound "
               "kernel, its own rounds' for one within 2x of its traffic bound (timing.compress_baseline) "
               "(lower is better; 1 = as fast as a copy)"),
    MetricInfo("decomp_over_copy", "× copy", False, "×copy of decompress: median decompress time / time of the same copy "
               "(lower is better)"),
    MetricInfo("compress_gbps", "GB/s", True, "dense input bytes / median compress time"),
)


def metrics_metadata() -> list[dict[str, Any]]:
    return [asdict(m) for m in METRICS]
