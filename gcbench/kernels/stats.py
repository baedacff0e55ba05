"""Reductions: max |x|, norms, std (chunked, combined exactly) and the fidelity sums (moments,
running sums with their norms), each with its torch reference named in its docstring.
"""

from __future__ import annotations

import math

import numpy as np

from gcbench.kernels.runtime import KERNEL, PARALLEL, PART, bounds, launches, n_chunks, njit, prange, run_chunks, run_parallel

# ----------------------------------------------------------------------------- reductions


@njit(cache=True)
def _absmax_bits(xb):  # pragma: no cover - compiled
    """max of the sign-cleared float32 bit patterns: for non-negative floats the pattern orders
    like the value, so this is an exact max|x| that vectorises without fast-math; a NaN
    (pattern above +inf) wins, as in ``torch.amax``."""
    m = np.uint32(0)
    for i in range(xb.size):
        v = xb[i] & np.uint32(0x7FFFFFFF)
        m = max(m, v)
    return m


@njit(cache=True, fastmath={"reassoc"})
def _sumsq(x):  # pragma: no cover - compiled
    acc = 0.0
    for i in range(x.size):
        v = np.float64(x[i])
        acc += v * v
    return acc


@njit(cache=True, fastmath={"reassoc"})
def _moments(x, shift):  # pragma: no cover - compiled
    s1 = 0.0
    s2 = 0.0
    for i in range(x.size):
        v = np.float64(x[i]) - shift
        s1 += v
        s2 += v * v
    return s1, s2


@njit(**PARALLEL)
def _absmax_kernel(xb, out):  # pragma: no cover - compiled
    n = xb.size
    for p in prange(out.size):
        out[p] = _absmax_bits(xb[p * PART : min(n, (p + 1) * PART)])


@njit(**PARALLEL)
def _sumsq_kernel(x, out):  # pragma: no cover - compiled
    n = x.size
    for p in prange(out.size):
        out[p] = _sumsq(x[p * PART : min(n, (p + 1) * PART)])


@njit(**PARALLEL)
def _stats_kernel(x, shift, out, mx):  # pragma: no cover - compiled
    """Per part: shifted Σ and Σ² (float64) and the max sign-cleared bit pattern."""
    n = x.size
    xb = x.view(np.uint32)
    for p in prange(mx.size):
        lo, hi = bounds(p, PART, n)
        s1, s2 = _moments(x[lo:hi], shift)
        out[p, 0] = s1
        out[p, 1] = s2
        mx[p] = _absmax_bits(xb[lo:hi])


def _bits_to_f32(b: int) -> float:
    return float(np.array([b], np.uint32).view(np.float32)[0])


def absmax(x: np.ndarray) -> float:
    """max|x| of a float32 array, exactly (NaN if any element is NaN)."""
    if x.size == 0:
        return 0.0
    parts = np.empty(n_chunks(x.size), np.uint32)
    run_parallel(_absmax_kernel, x.size, x.view(np.uint32), parts)
    return _bits_to_f32(int(parts.max()))


def l2norm(x: np.ndarray) -> float:
    """‖x‖₂ accumulated in float64 (parts of fixed size: the same value on any thread count)."""
    if x.size == 0:
        return 0.0
    parts = np.empty(n_chunks(x.size), np.float64)
    run_parallel(_sumsq_kernel, x.size, x, parts)
    return math.sqrt(float(parts.sum()))


def std_and_absmax(x: np.ndarray) -> tuple[float, float]:
    """(population standard deviation in float64, exact max|x|) of a float32 array in one pass.

    The sums are shifted by x[0] so a large mean does not cancel the variance away.
    """
    n = x.size
    if n == 0:
        return 0.0, 0.0
    shift = float(x[0]) if math.isfinite(float(x[0])) else 0.0
    parts = np.empty((n_chunks(n), 2), np.float64)
    mx = np.empty(n_chunks(n), np.uint32)
    run_parallel(_stats_kernel, n, x, shift, parts, mx)
    s1, s2 = float(parts[:, 0].sum()), float(parts[:, 1].sum())
    var = max(0.0, s2 / n - (s1 / n) ** 2)
    return math.sqrt(var), _bits_to_f32(int(mx.max()))



# ----------------------------------------------------------------------------- fidelity sums

MOMENT_BLOCK = 2048  # elements per block of the fidelity pass: x and the R errors (float64) stay in L1/L2

# the sums may be reordered (SIMD lanes) and multiply-adds fused: 2-2.5x faster, a change of ~1e-15
# relative; NaN and inf still propagate (no finite-math assumption)
_SUM_MATH = {"reassoc", "contract"}


@njit(cache=True, fastmath=_SUM_MATH)
def _moments_block(x, ds, lo, xb, eb, dots, dsq, gram):  # pragma: no cover - compiled
    """One block's sums from ``lo``: writes Σd·x and Σd² of each draw to ``dots`` and ``dsq``, the errors' Gram
    matrix to ``gram`` (upper triangle), and returns Σx²; ``xb`` and ``eb`` are scratch of MOMENT_BLOCK elements."""
    r_n = len(ds)
    m = min(MOMENT_BLOCK, x.shape[0] - lo)
    s = 0.0
    for i in range(m):
        v = np.float64(x[lo + i])
        xb[i] = v
        s += v * v
    for r in range(r_n):
        d = ds[r]
        s1 = 0.0
        s2 = 0.0
        for i in range(m):
            v = np.float64(d[lo + i])
            s1 += v * xb[i]
            s2 += v * v
            eb[r, i] = v - xb[i]
        dots[r] = s1
        dsq[r] = s2
    for r in range(r_n):  # the errors' Gram matrix while the block is in cache
        for q in range(r, r_n):
            g = 0.0
            for i in range(m):
                g += eb[r, i] * eb[q, i]
            gram[r, q] = g
    return s


@njit(cache=True)  # no fast-math: each block's sums are added in block order
def _moments_add(dots_k, dsq_k, gram_k, gram, dots, d_sq):  # pragma: no cover - compiled
    r_n = dots.shape[0]
    for r in range(r_n):
        dots[r] += dots_k[r]
        d_sq[r] += dsq_k[r]
    for r in range(r_n):
        for q in range(r, r_n):
            g = gram_k[r, q]
            gram[r, q] += g
            if q != r:
                gram[q, r] += g


@njit(cache=True, fastmath=_SUM_MATH)
def _moments_kernel(x, ds, gram, dots, d_sq):  # pragma: no cover - compiled
    r_n = len(ds)
    xb = np.empty(MOMENT_BLOCK)
    eb = np.empty((r_n, MOMENT_BLOCK))
    dots_b = np.empty(r_n)
    dsq_b = np.empty(r_n)
    gram_b = np.empty((r_n, r_n))
    x_sq = 0.0
    for lo in range(0, x.shape[0], MOMENT_BLOCK):
        x_sq += _moments_block(x, ds, lo, xb, eb, dots_b, dsq_b, gram_b)
        _moments_add(dots_b, dsq_b, gram_b, gram, dots, d_sq)
    return x_sq


# ----- the same sums on several threads, to the bit: each block's sums are the serial kernel's (the same loop over the
# same MOMENT_BLOCK elements), kept per block; one pass without fast-math then adds them in block order exactly as the
# serial kernel's running totals do.  Parts are fixed (BLOCK_PARTS), so the result depends on neither the thread count
# nor the schedule.  A one-step hf:gpt2 run (124M elements) spent about 30 s of ~110 s (quiet machine) in these passes
# on one thread of two.

#: the fixed number of parts a parallel fidelity pass splits its blocks into (more than any machine's threads here)
BLOCK_PARTS = 64


@njit(**PARALLEL, fastmath=_SUM_MATH)
def _moments_blocks(x, ds, xsq_b, dots_b, dsq_b, gram_b):  # pragma: no cover - compiled
    r_n = len(ds)
    nb = xsq_b.shape[0]
    per = (nb + BLOCK_PARTS - 1) // BLOCK_PARTS
    for p in prange(BLOCK_PARTS):
        xb = np.empty(MOMENT_BLOCK)
        eb = np.empty((r_n, MOMENT_BLOCK))
        for b in range(p * per, min(nb, (p + 1) * per)):
            xsq_b[b] = _moments_block(x, ds, b * MOMENT_BLOCK, xb, eb, dots_b[b], dsq_b[b], gram_b[b])


@njit(cache=True)  # no fast-math: the block sums are added in block order, as the serial kernel adds them
def _moments_reduce(xsq_b, dots_b, dsq_b, gram_b, gram, dots, d_sq):  # pragma: no cover - compiled
    x_sq = 0.0
    for b in range(xsq_b.shape[0]):
        x_sq += xsq_b[b]
        _moments_add(dots_b[b], dsq_b[b], gram_b[b], gram, dots, d_sq)
    return x_sq


@njit(cache=True)  # no fast-math: in block order, as the serial kernels' ``total += s``
def _sum_in_order(parts):  # pragma: no cover - compiled
    total = 0.0
    for b in range(parts.shape[0]):
        total += parts[b]
    return total


def _blocks(n: int) -> int:
    return (n + MOMENT_BLOCK - 1) // MOMENT_BLOCK


def _threaded(n: int) -> bool:
    """Whether a pass over ``n`` elements runs on several threads (:func:`gcbench.kernels.runtime.workers`: small
    tensors never do, so the quick suite's passes are the serial kernels themselves)."""
    from gcbench.kernels.runtime import workers

    return workers(n) > 1


def moments(x: np.ndarray, ds: tuple[np.ndarray, ...]) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """‖x‖², the Gram matrix ⟨e_r, e_s⟩ of the errors e_r = d_r − x, ⟨d_r, x⟩ and ‖d_r‖², all in
    float64, from one read of float32 ``x`` and each ``d_r`` (block by block; on a large tensor the
    blocks run on several threads and their sums are added in block order, so the result is the
    serial kernel's to the bit, whatever the thread count).  The torch reference is
    :func:`gcbench.measure.fidelity.moments_torch`."""
    r = len(ds)
    gram, dots, d_sq = np.zeros((r, r)), np.zeros(r), np.zeros(r)
    n = x.shape[0]
    if not _threaded(n):
        x_sq = _moments_kernel(x, ds, gram, dots, d_sq)
        return float(x_sq), gram, dots, d_sq
    nb = _blocks(n)
    xsq_b, dots_b, dsq_b, gram_b = np.empty(nb), np.empty((nb, r)), np.empty((nb, r)), np.empty((nb, r, r))
    run_parallel(_moments_blocks, n, x, ds, xsq_b, dots_b, dsq_b, gram_b)
    x_sq = _moments_reduce(xsq_b, dots_b, dsq_b, gram_b, gram, dots, d_sq)
    return float(x_sq), gram, dots, d_sq


@njit(cache=True, fastmath=_SUM_MATH)
def _grams_block(rs, ss, lo, rb, eb, e_k, r_k):  # pragma: no cover - compiled
    """One block's Gram matrices from ``lo`` into the upper triangles of ``e_k`` and ``r_k``; ``rb`` and ``eb`` are
    scratch of MOMENT_BLOCK elements per worker."""
    w_n = len(rs)
    m = min(MOMENT_BLOCK, rs[0].shape[0] - lo)
    for w in range(w_n):
        r = rs[w]
        s = ss[w]
        for i in range(m):
            a = np.float64(r[lo + i])
            rb[w, i] = a
            eb[w, i] = np.float64(s[lo + i]) - a
    for w in range(w_n):  # both Gram matrices while the block is in cache
        for v in range(w, w_n):
            se = 0.0
            sr = 0.0
            for i in range(m):
                se += eb[w, i] * eb[v, i]
                sr += rb[w, i] * rb[v, i]
            e_k[w, v] = se
            r_k[w, v] = sr


@njit(cache=True)  # no fast-math: each block's sums are added in block order
def _grams_add(e_k, r_k, g_e, g_r):  # pragma: no cover - compiled
    w_n = g_e.shape[0]
    for w in range(w_n):
        for v in range(w, w_n):
            se = e_k[w, v]
            sr = r_k[w, v]
            g_e[w, v] += se
            g_r[w, v] += sr
            if v != w:
                g_e[v, w] += se
                g_r[v, w] += sr


@njit(cache=True, fastmath=_SUM_MATH)
def _grams_kernel(rs, ss, g_e, g_r):  # pragma: no cover - compiled
    w_n = len(rs)
    rb = np.empty((w_n, MOMENT_BLOCK))
    eb = np.empty((w_n, MOMENT_BLOCK))
    e_k = np.empty((w_n, w_n))
    r_k = np.empty((w_n, w_n))
    for lo in range(0, rs[0].shape[0], MOMENT_BLOCK):
        _grams_block(rs, ss, lo, rb, eb, e_k, r_k)
        _grams_add(e_k, r_k, g_e, g_r)


def grams(rs: tuple[np.ndarray, ...], ss: tuple[np.ndarray, ...], g_e: np.ndarray, g_r: np.ndarray) -> None:
    """Add the W×W Gram matrices of the errors ``ss[w] − rs[w]`` and of ``rs`` to ``g_e`` and ``g_r``, in float64 from
    one read of each float32 array, block by block on the calling thread (the sums do not depend on the thread count).

    The delivered fraction's jackknife over workers (:meth:`gcbench.measure.stream.DeliveredStream.delivered_jackknife`)
    took 8.3 s on 30M elements and two workers as float64 torch copies and matrix products, 0.48 s here (load 6)."""
    if len(rs) != len(ss) or any(a.shape != rs[0].shape for a in (*rs, *ss)):
        raise ValueError("grams: one float32 vector of one length per worker on each side")
    n, w_n = rs[0].shape[0], len(rs)
    if not _threaded(n):
        _grams_kernel(rs, ss, g_e, g_r)
        return
    nb = _blocks(n)  # on several threads, the block sums added in block order: the serial sums to the bit
    e_b, r_b = np.empty((nb, w_n, w_n)), np.empty((nb, w_n, w_n))
    run_parallel(_grams_blocks, n, rs, ss, e_b, r_b)
    _grams_reduce(e_b, r_b, g_e, g_r)


@njit(**PARALLEL, fastmath=_SUM_MATH)
def _grams_blocks(rs, ss, e_b, r_b):  # pragma: no cover - compiled
    w_n = len(rs)
    nb = e_b.shape[0]
    per = (nb + BLOCK_PARTS - 1) // BLOCK_PARTS
    for p in prange(BLOCK_PARTS):
        rb = np.empty((w_n, MOMENT_BLOCK))
        eb = np.empty((w_n, MOMENT_BLOCK))
        for k in range(p * per, min(nb, (p + 1) * per)):
            _grams_block(rs, ss, k * MOMENT_BLOCK, rb, eb, e_b[k], r_b[k])


@njit(cache=True)  # no fast-math: in block order, as the serial kernel adds them
def _grams_reduce(e_b, r_b, g_e, g_r):  # pragma: no cover - compiled
    for k in range(e_b.shape[0]):
        _grams_add(e_b[k], r_b[k], g_e, g_r)


@njit(cache=True, fastmath=_SUM_MATH)
def _sq_dist_block(a, b, lo):  # pragma: no cover - compiled
    s = 0.0
    for i in range(lo, min(lo + MOMENT_BLOCK, a.shape[0])):
        v = np.float64(a[i] - b[i])  # the difference in float32, as torch's ``a - b`` rounds it
        s += v * v
    return s


@njit(cache=True, fastmath=_SUM_MATH)
def _sq_dist_kernel(a, b):  # pragma: no cover - compiled
    total = 0.0
    for lo in range(0, a.shape[0], MOMENT_BLOCK):
        total += _sq_dist_block(a, b, lo)
    return total


@njit(cache=True, fastmath=_SUM_MATH)
def _sq_norm_kernel(a):  # pragma: no cover - compiled
    total = 0.0
    for lo in range(0, a.shape[0], MOMENT_BLOCK):
        s = 0.0
        for i in range(lo, min(lo + MOMENT_BLOCK, a.shape[0])):
            v = np.float64(a[i])
            s += v * v
        total += s
    return total


@njit(cache=True)  # no fast-math: the float32 update must round exactly as torch's ``acc += a - b``
def _accumulate_block(acc, a, b, lo):  # pragma: no cover - compiled
    """``b`` None compiles its own loop, ``acc += a``; ``acc`` None another, the norm of what a zeroed ``acc`` would hold
    with nothing written (numba prunes the other branches)."""
    s = 0.0
    for i in range(lo, min(lo + MOMENT_BLOCK, a.shape[0])):
        v = a[i] if b is None else a[i] - b[i]
        if acc is not None:
            v = acc[i] + v
            acc[i] = v
        w = np.float64(v)
        s += w * w
    return s


@njit(cache=True)
def _accumulate_kernel(acc, a, b):  # pragma: no cover - compiled
    total = 0.0
    for lo in range(0, a.shape[0], MOMENT_BLOCK):
        total += _accumulate_block(acc, a, b, lo)
    return total


@njit(**PARALLEL, fastmath=_SUM_MATH)
def _sq_dist_blocks(a, b, out):  # pragma: no cover - compiled
    nb = out.shape[0]
    per = (nb + BLOCK_PARTS - 1) // BLOCK_PARTS
    for p in prange(BLOCK_PARTS):
        for k in range(p * per, min(nb, (p + 1) * per)):
            out[k] = _sq_dist_block(a, b, k * MOMENT_BLOCK)


@njit(parallel=True, cache=True)  # no fast-math: the float32 update must round exactly as torch's ``acc += a - b``
def _accumulate_blocks(acc, a, b, out):  # pragma: no cover - compiled
    nb = out.shape[0]
    per = (nb + BLOCK_PARTS - 1) // BLOCK_PARTS
    for p in prange(BLOCK_PARTS):
        for k in range(p * per, min(nb, (p + 1) * per)):
            out[k] = _accumulate_block(acc, a, b, k * MOMENT_BLOCK)


def accumulate(acc: np.ndarray | None, a: np.ndarray, b: np.ndarray | None) -> float:
    """``acc += a − b`` (``b`` None: ``acc += a``) in place (float32: the difference and the sum each
    rounded), returning ‖acc‖² summed in float64: a running sum and its norm in one pass (a large one on
    several threads, its block sums added in block order: the serial result to the bit).  ``acc`` None: what a
    zeroed ``acc`` would return, with no sum written or read (:func:`first_sum_sq`).  The torch
    reference is :func:`gcbench.measure.fidelity.accumulate64`'s chunked loop."""
    n = a.shape[0]
    if not _threaded(n):
        return float(_accumulate_kernel(acc, a, b))
    out = np.empty(_blocks(n))
    run_parallel(_accumulate_blocks, n, acc, a, b, out)
    return float(_sum_in_order(out))


def first_sum_sq(a: np.ndarray, b: np.ndarray | None) -> float:
    """What :func:`accumulate` returns for a zeroed ``acc`` (‖a − b‖², ``b`` None: ‖a‖², the difference rounded to
    float32, the squares summed in float64 block by block in the same order: the same bits), without the sum itself:
    no buffer written or read (a one-step stream's running sums are read for their norms alone)."""
    return accumulate(None, a, b)


def sq_norm(a: np.ndarray) -> float:
    """‖a‖² of a float32 array, summed in float64 in one pass on the calling thread."""
    return float(_sq_norm_kernel(a))


def sq_dist(a: np.ndarray, b: np.ndarray) -> float:
    """‖a − b‖² of two float32 arrays (difference rounded to float32, squares summed in float64), in one pass (a large
    one on several threads, the serial result to the bit)."""
    n = a.shape[0]
    if not _threaded(n):
        return float(_sq_dist_kernel(a, b))
    out = np.empty(_blocks(n))
    run_parallel(_sq_dist_blocks, n, a, b, out)
    return float(_sum_in_order(out))

@njit(nogil=True, cache=True, fastmath={"reassoc"})
def _mean_m2(vb):  # pragma: no cover - numba
    """(mean, Σ(v − mean)²) of one chunk in float64, two passes while it is in cache.

    The sums may be reordered into SIMD lanes (a fixed order for a given chunk, so still the same on
    any thread count): as one serial chain of float64 adds they took 4x a copy of the chunk, the
    most of SDAGC's encode (momentum update with the std: 5.6x a copy against 1.3x with a count).
    """
    s = 0.0
    for i in range(vb.size):
        s += np.float64(vb[i])
    mean = s / vb.size
    q = 0.0
    for i in range(vb.size):
        dv = np.float64(vb[i]) - mean
        q += dv * dv
    return mean, q


@njit(**KERNEL)
def _mean_m2_kernel(c0, c1, v, chunk, means, m2s):  # pragma: no cover - numba
    """Each chunk's :func:`_mean_m2` (no update)."""
    n = v.size
    for c in range(c0, c1):
        lo = c * chunk
        means[c], m2s[c] = _mean_m2(v[lo : min(lo + chunk, n)])


@launches(_mean_m2_kernel)
def _mean_m2_kernel_par(nth, n, *args):  # pragma: no cover - numba
    for p in prange(nth):
        _mean_m2_kernel(n * p // nth, n * (p + 1) // nth, *args)


def _combine_std(counts: np.ndarray, means: np.ndarray, m2s: np.ndarray) -> float:
    """Population std from per-chunk (count, mean, M2) by Chan et al.'s pairwise formula, float64."""
    n = counts.sum()
    mean = float((counts * means).sum() / n)
    m2 = float(m2s.sum() + (counts * (means - mean) ** 2).sum())
    return math.sqrt(max(m2, 0.0) / n)


def _chunk_sizes(n: int) -> np.ndarray:
    nch = n_chunks(n)
    sizes = np.full(nch, PART, np.float64)
    sizes[-1] = n - PART * (nch - 1)
    return sizes


def population_std(v: np.ndarray) -> float:
    """Population std of ``v`` (float64, chunked two-pass moments; see :func:`momentum_update_std`)."""
    nch = n_chunks(v.size)
    means = np.zeros(nch, np.float64)
    m2s = np.zeros(nch, np.float64)
    run_chunks(_mean_m2_kernel, nch, v.size, v, PART, means, m2s)
    return _combine_std(_chunk_sizes(v.size), means, m2s)


