"""Momentum correction (DGC, SDAGC): ``u = m·u + x``, ``v += u`` fused with the count or the std that
the selection needs next.
"""

from __future__ import annotations

import numpy as np

from gcbench.kernels.runtime import KERNEL, PART, n_chunks, njit, run_chunks
from gcbench.kernels.select import _count_ge
from gcbench.kernels.stats import _chunk_sizes, _combine_std, _mean_m2

# ----------------------------------------------------------------------------- momentum correction (DGC, SDAGC)
#
# Element-wise arithmetic is written to round exactly like the torch ops it replaces
# (``x * coef``, ``u.mul_(m).add_(x)``, ``v.add_(u)``): float32 operands, one rounding per
# operation, no fused multiply-add (numba contracts nothing without fastmath).


@njit(**KERNEL)
def _momentum_chunk(u, v, x, m, coef, use_coef):  # pragma: no cover - numba
    """u = m·u + x·coef; v = v + u on one chunk (float32, torch's rounding)."""
    for i in range(u.size):
        xi = x[i] * coef if use_coef else x[i]
        un = u[i] * m
        un = un + xi
        u[i] = un
        v[i] = v[i] + un


@njit(**KERNEL)
def _momentum_count_kernel(c0, c1, u, v, x, m, coef, use_coef, t, chunk, counts):  # pragma: no cover - numba
    """Momentum update of chunks c0..c1, then counts[c] = #{|v| >= t} over the updated chunk (in cache)."""
    n = u.size
    for c in range(c0, c1):
        lo = c * chunk
        hi = min(lo + chunk, n)
        vb = v[lo:hi]
        _momentum_chunk(u[lo:hi], vb, x[lo:hi], m, coef, use_coef)
        counts[c] = _count_ge(vb, t)


@njit(**KERNEL)
def _momentum_stats_kernel(c0, c1, u, v, x, m, coef, use_coef, chunk, means, m2s):  # pragma: no cover - numba
    """Momentum update of chunks c0..c1, then each chunk's mean and Σ(v − mean)² of v in float64."""
    n = u.size
    for c in range(c0, c1):
        lo = c * chunk
        hi = min(lo + chunk, n)
        vb = v[lo:hi]
        _momentum_chunk(u[lo:hi], vb, x[lo:hi], m, coef, use_coef)
        means[c], m2s[c] = _mean_m2(vb)


@njit(**KERNEL)
def _momentum_sample_kernel(c0, c1, u, v, x, m, coef, use_coef, start, stride, out):  # pragma: no cover - numba
    """out[j] = |v_new| at position start + j·stride (items of 4096 samples), without writing u or v."""
    ns = out.size
    for c in range(c0, c1):
        lo = c * 4096
        for j in range(lo, min(lo + 4096, ns)):
            i = start + j * stride
            xi = x[i] * coef if use_coef else x[i]
            un = u[i] * m
            un = un + xi
            out[j] = abs(v[i] + un)


def _f32(value: float | None) -> tuple[np.float32, bool]:
    return (np.float32(1.0), False) if value is None else (np.float32(value), True)


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
    nch = n_chunks(u.size)
    counts = np.zeros(nch, np.int64)
    c32, use = _f32(coef)
    run_chunks(_momentum_count_kernel, nch, u.size, u, v, x, np.float32(m), c32, use, t, PART, counts)
    return counts


def momentum_update_std(u: np.ndarray, v: np.ndarray, x: np.ndarray, m: float, coef: float | None) -> float:
    """``u = m·u + coef·x``; ``v += u`` in place (one pass), returning the population std of the new v.

    Per-chunk two-pass moments in float64 (the chunk is still in cache), combined exactly; equals
    ``torch.std(v, correction=0)`` after rounding to float32 (torch: float32 mean, then Σ(v − mean)²
    in float64 — both are within a few float64 ulps of the true value).
    """
    nch = n_chunks(u.size)
    means = np.zeros(nch, np.float64)
    m2s = np.zeros(nch, np.float64)
    c32, use = _f32(coef)
    run_chunks(_momentum_stats_kernel, nch, u.size, u, v, x, np.float32(m), c32, use, PART, means, m2s)
    return _combine_std(_chunk_sizes(u.size), means, m2s)


