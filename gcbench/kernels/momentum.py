"""Momentum correction (DGC, SDAGC): ``u = m·u + x``, ``v += u`` fused with the count or the std that
the selection needs next.
"""

from __future__ import annotations

import numpy as np

from gcbench.kernels.runtime import KERNEL, PART, bounds, launches, n_chunks, njit, prange, run_chunks
from gcbench.kernels.select import _count_ge
from gcbench.kernels.stats import _chunk_sizes, _combine_std, _mean_m2

# ----------------------------------------------------------------------------- momentum correction (DGC, SDAGC)
#
# Element-wise arithmetic is written to round exactly like the torch ops it replaces
# (``x * coef``, ``u.mul_(m).add_(x)``, ``v.add_(u)``): float32 operands, one rounding per
# operation, no fused multiply-add (numba contracts nothing without fastmath).


@njit(inline="always")
def _u_new(u, x, m, coef, use_coef):  # pragma: no cover - numba
    """m·u + x·coef in float32 with torch's rounding (``x * coef``, ``u.mul_(m).add_(x)``)."""
    xi = x * coef if use_coef else x
    un = u * m
    return un + xi


@njit(**KERNEL)
def _momentum_kernel(c0, c1, u, v, x, m, coef, use_coef, t, stats, chunk, counts, means, m2s):  # pragma: no cover - numba
    """Chunks c0..c1: u = m·u + x·coef, v = v + u, then over the updated chunk (still in cache) either
    counts[c] = #{|v| >= t} or (``stats``) its mean and Σ(v − mean)² in float64."""
    n = u.size
    for c in range(c0, c1):
        lo, hi = bounds(c, chunk, n)
        ub = u[lo:hi]
        vb = v[lo:hi]
        xb = x[lo:hi]
        for i in range(ub.size):
            un = _u_new(ub[i], xb[i], m, coef, use_coef)
            ub[i] = un
            vb[i] = vb[i] + un
        if stats:
            means[c], m2s[c] = _mean_m2(vb)
        else:
            counts[c] = _count_ge(vb, t)


@launches(_momentum_kernel)
def _momentum_kernel_par(nth, n, *args):  # pragma: no cover - numba
    for p in prange(nth):
        _momentum_kernel(n * p // nth, n * (p + 1) // nth, *args)


@njit(**KERNEL)
def _momentum_sample_kernel(c0, c1, u, v, x, m, coef, use_coef, start, stride, out):  # pragma: no cover - numba
    """out[j] = |v_new| at position start + j·stride (items of 4096 samples), without writing u or v."""
    ns = out.size
    for c in range(c0, c1):
        lo = c * 4096
        for j in range(lo, min(lo + 4096, ns)):
            i = start + j * stride
            out[j] = abs(v[i] + _u_new(u[i], x[i], m, coef, use_coef))


@launches(_momentum_sample_kernel)
def _momentum_sample_kernel_par(nth, n, *args):  # pragma: no cover - numba
    for p in prange(nth):
        _momentum_sample_kernel(n * p // nth, n * (p + 1) // nth, *args)


def _f32(value: float | None) -> tuple[np.float32, bool]:
    return (np.float32(1.0), False) if value is None else (np.float32(value), True)


def _momentum(u: np.ndarray, v: np.ndarray, x: np.ndarray, m: float, coef: float | None, t: np.float32,
              stats: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The momentum update in place with per-chunk (counts of |v| >= t) or (means, M2s) of the new v."""
    nch = n_chunks(u.size)
    counts = np.zeros(0 if stats else nch, np.int64)
    means = np.zeros(nch if stats else 0, np.float64)
    m2s = np.zeros(nch if stats else 0, np.float64)
    c32, use = _f32(coef)
    run_chunks(_momentum_kernel, nch, u.size, u, v, x, np.float32(m), c32, use, np.float32(t), stats, PART, counts, means, m2s)
    return counts, means, m2s


def momentum_sample(u: np.ndarray, v: np.ndarray, x: np.ndarray, m: float, coef: float | None, start: int, stride: int,
                    count: int) -> np.ndarray:
    """|v| after the momentum update at positions ``start + j·stride`` (j < count), computed ahead of it."""
    out = np.empty(count, np.float32)
    c32, use = _f32(coef)
    items = n_chunks(count, 4096)
    run_chunks(_momentum_sample_kernel, items, count * 16, u, v, x, np.float32(m), c32, use, int(start), int(stride), out)
    return out


def momentum_update_count(u: np.ndarray, v: np.ndarray, x: np.ndarray, m: float, coef: float | None, t: np.float32) -> np.ndarray:
    """``u = m·u + coef·x``; ``v += u`` in place (one pass), returning per-chunk counts of ``|v| >= t``."""
    return _momentum(u, v, x, m, coef, t, False)[0]


def momentum_update_std(u: np.ndarray, v: np.ndarray, x: np.ndarray, m: float, coef: float | None) -> float:
    """``u = m·u + coef·x``; ``v += u`` in place (one pass), returning the population std of the new v.

    Per-chunk two-pass moments in float64 (the chunk is still in cache), combined exactly; equals
    ``torch.std(v, correction=0)`` after rounding to float32 (torch: float32 mean, then Σ(v − mean)²
    in float64 — both are within a few float64 ulps of the true value).
    """
    _, means, m2s = _momentum(u, v, x, m, coef, np.float32(0.0), True)
    return _combine_std(_chunk_sizes(u.size), means, m2s)


