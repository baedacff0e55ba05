"""Fidelity and size of a compressor's output, exactly as the docs ("What the metrics mean") define them.

What each recorded metric means (unit, direction) is :data:`gcbench.results.metrics.METRICS`; how
kernels are timed is :mod:`gcbench.measure.timing`.

For a gradient x and R independent compressions C_1(x)..C_R(x) with errors e_r = C_r(x) − x:

* bias² (relative)   ‖mean_r C_r − x‖² / ‖x‖², estimated without the variance/R inflation by
  the U-statistic Σ_{r≠s}⟨e_r, e_s⟩ / (R(R−1)) (unbiased for ‖E e‖²), with a jackknife standard
  error over the repeats;
* variance (relative) (1/(R−1)) Σ‖C_r − mean‖² / ‖x‖²;
* q (relative MSE)   (1/R) Σ‖e_r‖² / ‖x‖²;  ω̂ = q for unbiased compressors;
* δ (Beznosikov)     1/(1 − q) when q < 1 (else ∞);  α = 1 − q;
* cosine             mean over r of ⟨C_r, x⟩ / (‖C_r‖‖x‖).

Everything is computed from the R×R Gram matrix of the errors and the products ⟨C_r, x⟩, ‖C_r‖²
(float64), taken in one chunked pass over x and the C_r (:func:`moments`), so one read of the data
serves every quantity.  Ratios of zero-norm inputs are undefined and reported as ``None``
(an all-zero tensor in gives all-zero out; there is nothing to divide by).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from gcbench import kernels
from gcbench.core.intervals import mean_interval
from gcbench.core.payload import dense_bytes


def ratio(numel: int, wire_bytes: float) -> float | None:
    """Compression ratio: dense float32 bytes / wire bytes."""
    return dense_bytes(numel) / wire_bytes if wire_bytes > 0 else None


def bits_per_element(numel: int, wire_bytes: float) -> float | None:
    return 8.0 * wire_bytes / numel if numel else None


# ----------------------------------------------------------------------------- fidelity


@dataclass
class Fidelity:
    """Fidelity of one tensor (sums kept so tensors can be pooled energy-weighted)."""

    numel: int
    repeats: int
    x_sq: float  # ‖x‖²
    err_sq_mean: float  # (1/R) Σ‖e_r‖²
    bias_sq: float  # U-statistic estimate of ‖E e‖² (== ‖e‖² when R = 1)
    bias_sq_se: float | None  # jackknife standard error of bias_sq (None when R < 3)
    var_sum: float  # (1/(R−1)) Σ‖C_r − mean‖² (0 when R = 1)
    cosine: float | None
    q_samples: list[float] = field(default_factory=list)  # per-repeat ‖e_r‖²/‖x‖²
    dots: list[float] = field(default_factory=list)  # per-repeat ⟨C_r, x⟩ (cosine terms, pooled over units)
    d_sq: list[float] = field(default_factory=list)  # per-repeat ‖C_r‖²

    def cosine_terms(self, repeat: int = 0) -> tuple[float, float, float]:
        """⟨C_r, x⟩, ‖C_r‖² and ‖x‖² of one repeat: the terms a whole-model cosine sums over units."""
        return self.dots[repeat], self.d_sq[repeat], self.x_sq

    @property
    def q(self) -> float | None:
        return self.err_sq_mean / self.x_sq if self.x_sq > 0 else None

    @property
    def q_scaled(self) -> float | None:
        """The scale-free error: mean over repeats of min_s ‖s·C_r − x‖²/‖x‖² = 1 − cos²(C_r, x) (1 for an all-zero C_r)."""
        if self.x_sq <= 0 or not self.dots:
            return None
        return float(np.mean([scaled_error(d, c, self.x_sq) for d, c in zip(self.dots, self.d_sq, strict=True)]))

    @property
    def bias2(self) -> float | None:
        return self.bias_sq / self.x_sq if self.x_sq > 0 else None

    @property
    def variance(self) -> float | None:
        return self.var_sum / self.x_sq if self.x_sq > 0 else None

    def to_dict(self) -> dict[str, Any]:
        q = self.q
        return {
            "numel": self.numel,
            "repeats": self.repeats,
            "q": q,
            "bias2": self.bias2,
            "bias2_se": (self.bias_sq_se / self.x_sq) if (self.bias_sq_se is not None and self.x_sq > 0) else None,
            "variance": self.variance,
            "cosine": self.cosine,
            "q_scaled": self.q_scaled,
            "delta": delta_beznosikov(q),
            "alpha": (1.0 - q) if q is not None else None,
        }


def scaled_error(dot: float, c_sq: float, x_sq: float) -> float:
    """min_s ‖s·c − x‖² / ‖x‖² = 1 − ⟨c, x⟩²/(‖c‖²‖x‖²): the relative error left after the best scalar rescaling of c.

    Scale-free: an unscaled sign compressor is not charged for its scale alone.  1 when c is all
    zeros (the best rescaling of nothing is nothing).  ``x_sq`` must be positive.
    """
    return 1.0 - (dot * dot / (c_sq * x_sq) if c_sq > 0 else 0.0)


def delta_beznosikov(q: float | None) -> float | None:
    """δ_B = 1/(1 − q) for q < 1; ``inf`` is reported as None (not contractive)."""
    if q is None or q >= 1.0:
        return None
    return 1.0 / (1.0 - q)


#: elements per chunk of the fused passes: a chunk's float64 rows (x, and one error per repeat)
#: stay in cache while every product over them is taken, so no full-size float64 copy is made
CHUNK = 1 << 16


def _fast(*tensors: torch.Tensor) -> bool:
    """Whether the numba passes of :mod:`gcbench.kernels` apply: float32 CPU tensors, numba present."""
    return kernels.cpu_fast(*tensors) and all(t.dtype == torch.float32 for t in tensors)


def sq_norm64(t: torch.Tensor) -> float:
    """‖t‖², accumulated in float64 in one pass (no full-size float64 copy of ``t``)."""
    if _fast(t):
        return kernels.sq_norm(kernels.flat_f32(t))
    flat = t.detach().reshape(-1)
    total = 0.0
    for lo in range(0, flat.numel(), CHUNK):
        c = flat[lo : lo + CHUNK].double()
        total += float(torch.dot(c, c))
    return total


def sq_dist64(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖²: the difference taken in the inputs' dtype (as ``a - b`` would), squared and summed in
    float64, chunk by chunk, so no full-size difference tensor is made."""
    fa, fb = a.detach().reshape(-1), b.detach().reshape(-1)
    if fa.numel() != fb.numel():
        raise ValueError(f"sq_dist64 needs tensors of one size, got {fa.numel()} and {fb.numel()}")
    if _fast(fa, fb):
        return kernels.sq_dist(kernels.flat_f32(fa), kernels.flat_f32(fb))
    total = 0.0
    for lo in range(0, fa.numel(), CHUNK):
        c = (fa[lo : lo + CHUNK] - fb[lo : lo + CHUNK]).double()
        total += float(torch.dot(c, c))
    return total


def accumulate64(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor | None = None) -> float:
    """``acc += a − b`` (``b`` None: ``acc += a``) in place and ‖acc‖² in float64, in one pass: a running
    sum and its squared norm, the two things a stream needs at every step, from one read of the data.

    float32 ``acc``; the difference and the sum are each rounded to float32, chunk by chunk here and
    element by element in the numba kernel, so both leave the same bits in ``acc``.
    """
    flat, fa = acc.view(-1), a.detach().reshape(-1)
    fb = None if b is None else b.detach().reshape(-1)
    if fa.numel() != flat.numel() or (fb is not None and fb.numel() != flat.numel()):
        raise ValueError(f"accumulate64 needs tensors of one size, got {flat.numel()}, {fa.numel()} and "
                         f"{flat.numel() if fb is None else fb.numel()}")
    if _fast(flat, fa) and (fb is None or _fast(fb)):
        return kernels.accumulate(flat.numpy(), kernels.flat_f32(fa), None if fb is None else kernels.flat_f32(fb))
    total = 0.0
    for lo in range(0, flat.numel(), CHUNK):
        c = flat[lo : lo + CHUNK]
        c.add_(fa[lo : lo + CHUNK] if fb is None else fa[lo : lo + CHUNK] - fb[lo : lo + CHUNK])
        d = c.double()
        total += float(torch.dot(d, d))
    return total


def first_sum_sq64(a: torch.Tensor, b: torch.Tensor | None = None) -> float:
    """What :func:`accumulate64` returns for a zeroed ``acc`` (‖a − b‖², ``b`` None: ‖a‖²; the same bits), in one
    read of ``a`` and ``b`` and no sum written: a running sum that is read for its norm after one step only."""
    fa = a.detach().reshape(-1)
    fb = None if b is None else b.detach().reshape(-1)
    if fb is not None and fb.numel() != fa.numel():
        raise ValueError(f"first_sum_sq64 needs tensors of one size, got {fa.numel()} and {fb.numel()}")
    if _fast(fa) and (fb is None or _fast(fb)):
        return kernels.first_sum_sq(kernels.flat_f32(fa), None if fb is None else kernels.flat_f32(fb))
    total = 0.0
    for lo in range(0, fa.numel(), CHUNK):
        d = (fa[lo : lo + CHUNK] if fb is None else fa[lo : lo + CHUNK] - fb[lo : lo + CHUNK]).double()
        total += float(torch.dot(d, d))
    return total


@dataclass(frozen=True)
class Moments:
    """The inner products fidelity needs, from one pass over x and its R decoded versions (float64)."""

    x_sq: float  # ‖x‖²
    gram: np.ndarray  # R×R ⟨e_r, e_s⟩ with e_r = d_r − x
    dots: np.ndarray  # ⟨d_r, x⟩
    d_sq: np.ndarray  # ‖d_r‖²


def moments(x: torch.Tensor, decoded: Sequence[torch.Tensor]) -> Moments:
    """Every inner product of :func:`fidelity` in a single pass over ``x`` and ``decoded``: the numba
    kernel :func:`gcbench.kernels.moments` for float32 CPU tensors, :func:`moments_torch` otherwise."""
    for d in decoded:
        if d.numel() != x.numel():
            raise ValueError(f"decoded tensor has {d.numel()} elements, the gradient {x.numel()}")
    if _fast(x, *decoded):
        x_sq, gram, dots, d_sq = kernels.moments(kernels.flat_f32(x), tuple(kernels.flat_f32(d) for d in decoded))
        return Moments(x_sq=x_sq, gram=gram, dots=dots, d_sq=d_sq)
    return moments_torch(x, decoded)


def moments_torch(x: torch.Tensor, decoded: Sequence[torch.Tensor]) -> Moments:
    """:func:`moments` in torch, chunk by chunk (any device and dtype; the numba kernel's reference).

    Each chunk of x and of every d_r is converted to float64 once; the errors are formed from the
    float64 chunks (as d.double() − x.double() would), and all products are taken while the chunk
    is in cache, so the cost is one read of each tensor and no full-size temporary.
    """
    r = len(decoded)
    fx = x.detach().reshape(-1)
    fds = [d.detach().reshape(-1) for d in decoded]
    pairs = [(i, j) for i in range(r) for j in range(i, r)]
    # sums stay on the tensors' device until the end: one synchronisation per call, not per product
    acc = torch.zeros(1 + 2 * r + len(pairs), dtype=torch.float64, device=fx.device)
    for lo in range(0, fx.numel(), CHUNK):
        xc = fx[lo : lo + CHUNK].double()
        dcs = [f[lo : lo + CHUNK].to(torch.float64, copy=True) for f in fds]  # own copies: changed below
        prods = [torch.dot(xc, xc)] + [torch.dot(dc, xc) for dc in dcs] + [torch.dot(dc, dc) for dc in dcs]
        ecs = [dc.sub_(xc) for dc in dcs]  # in place: the chunk's d_r is no longer needed
        prods += [torch.dot(ecs[i], ecs[j]) for i, j in pairs]
        acc += torch.stack(prods)
    sums = acc.cpu().numpy()
    gram = np.zeros((r, r))
    for (i, j), v in zip(pairs, sums[1 + 2 * r :], strict=True):
        gram[i, j] = gram[j, i] = v
    return Moments(x_sq=float(sums[0]), gram=gram, dots=sums[1 : 1 + r].copy(), d_sq=sums[1 + r : 1 + 2 * r].copy())


def fidelity(x: torch.Tensor, decoded: Sequence[torch.Tensor]) -> Fidelity:
    """All fidelity quantities of R decoded versions of ``x`` (see the module docstring)."""
    r = len(decoded)
    if r == 0:
        raise ValueError("fidelity needs at least one decoded tensor")
    m = moments(x, decoded)
    x_sq, g = m.x_sq, m.gram
    diag = np.diag(g)
    err_sq_mean = float(diag.mean())
    if r == 1:
        bias_sq, se, var_sum = float(g[0, 0]), None, 0.0
    else:
        off = float(g.sum() - diag.sum())
        bias_sq = off / (r * (r - 1))
        var_sum = float((diag.sum() - g.sum() / r) / (r - 1))
        se = None
        if r >= 3:  # jackknife over repeats: leave-one-out U-statistics from the same Gram matrix
            row = g.sum(1) - diag
            loo = [(off - 2 * row[i]) / ((r - 1) * (r - 2)) for i in range(r)]
            se = math.sqrt((r - 1) / r * sum((v - np.mean(loo)) ** 2 for v in loo))
    cos = []
    for dot, dsq in zip(m.dots, m.d_sq, strict=True):
        nd = math.sqrt(dsq)
        if x_sq > 0 and nd > 0:
            cos.append(float(dot) / (nd * math.sqrt(x_sq)))
        elif x_sq > 0:
            cos.append(0.0)
    q_samples = [float(v / x_sq) for v in diag] if x_sq > 0 else []
    return Fidelity(
        numel=x.numel(),
        repeats=r,
        x_sq=x_sq,
        err_sq_mean=err_sq_mean,
        bias_sq=bias_sq,
        bias_sq_se=se,
        var_sum=var_sum,
        cosine=float(np.mean(cos)) if cos else None,
        q_samples=q_samples,
        dots=[float(v) for v in m.dots],
        d_sq=[float(v) for v in m.d_sq],
    )


def pooled(fids: Sequence[Fidelity]) -> dict[str, Any]:
    """Whole-model quantities: numerators and ‖x‖² summed over tensors (energy-weighted)."""
    x_sq = sum(f.x_sq for f in fids)
    if x_sq <= 0:
        return {"q": None, "bias2": None, "variance": None, "delta": None, "alpha": None, "cosine": None, "q_scaled": None}
    q = sum(f.err_sq_mean for f in fids) / x_sq
    # cosine and its scale-free error, whole model: per repeat, ⟨C_r, x⟩ and ‖C_r‖² summed over tensors first
    repeats = min((len(f.dots) for f in fids), default=0)
    dots = [sum(f.dots[r] for f in fids) for r in range(repeats)]
    c_sq = [sum(f.d_sq[r] for f in fids) for r in range(repeats)]
    cos = [d / math.sqrt(c * x_sq) for d, c in zip(dots, c_sq, strict=True) if c > 0]
    return {
        "q": q,
        "bias2": sum(f.bias_sq for f in fids) / x_sq,
        "variance": sum(f.var_sum for f in fids) / x_sq,
        "delta": delta_beznosikov(q),
        "alpha": 1.0 - q,
        "cosine": float(np.mean(cos)) if cos else None,
        "q_scaled": float(np.mean([scaled_error(d, c, x_sq) for d, c in zip(dots, c_sq, strict=True)])) if repeats else None,
    }


def mean_ci(samples: Sequence[float], confidence: float = 0.95) -> dict[str, float | None]:
    """A record's statistic block: the mean of the finite ``samples`` with its Student-t interval, worst = max."""
    vals = [v for v in samples if v is not None and math.isfinite(v)]
    iv = mean_interval(vals, confidence)
    if iv is None:
        return {"mean": None, "lo": None, "hi": None, "worst": None, "n": 0}
    return {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "worst": float(max(vals)), "n": iv.n}


def summarise(values: Sequence[float | None], worst: str = "max") -> dict[str, float | None]:
    """Mean and worst case (max, or min for higher-is-better metrics) over tensors and steps."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {"mean": None, "worst": None}
    return {"mean": float(np.mean(vals)), "worst": float(max(vals) if worst == "max" else min(vals))}
