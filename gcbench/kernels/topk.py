"""The one exact top-k of |x|: a threshold from a strided sample, an exact count in the pass that
forms a (= x, or x + e with error feedback), one collecting pass and an exact resolution of the
candidates; a radix select over the magnitude bits when the sample's threshold fails.
:func:`topk_select_reference` (a stable sort) is its oracle.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from gcbench.kernels.bits import _DEBRUIJN, _DEBRUIJN_TABLE
from gcbench.kernels.runtime import PARALLEL, PART, SUB, as_numpy, fast_cpu, njit, prange, run_parallel
from gcbench.kernels.scatter import gather

# ----------------------------------------------------------------------------- exact top-k

_RADIX_SHIFT = 19  # first-level key: the top 12 of the 31 magnitude bits (4096 bins: L1-resident counts)


@njit(cache=True)
def _add_into(x, e):  # pragma: no cover - compiled
    for i in range(x.size):
        e[i] = x[i] + e[i]


@njit(cache=True)
def _copy_into(x, e):  # pragma: no cover - compiled
    for i in range(x.size):
        e[i] = x[i]


@njit(cache=True)
def _histogram(ab, mask, value, shift, nbits, h):  # pragma: no cover - compiled
    """Count the magnitudes m = ab & 0x7FFFFFFF with (m & mask) == value into h[(m >> shift) & (2^nbits − 1)]."""
    low = np.uint32((1 << nbits) - 1)
    for i in range(ab.size):
        m = ab[i] & np.uint32(0x7FFFFFFF)
        if (m & mask) == value:
            h[(m >> shift) & low] += 1


@njit(cache=True)
def _histogram_all(ab, shift, h):  # pragma: no cover - compiled
    for i in range(ab.size):
        h[(ab[i] & np.uint32(0x7FFFFFFF)) >> shift] += 1


@njit(**PARALLEL)
def _topk_hist_kernel(ab, hist):  # pragma: no cover - compiled
    """Per-chunk histograms of the top 12 magnitude bits (chunk c: a fixed range)."""
    n = ab.size
    nchunks = hist.shape[0]
    for c in prange(nchunks):
        _histogram_all(ab[n * c // nchunks : n * (c + 1) // nchunks], np.uint32(_RADIX_SHIFT), hist[c])


@njit(**PARALLEL)
def _radix_kernel(ab, mask, value, shift, nbits, hist):  # pragma: no cover - compiled
    """Refining histogram (read only) among magnitudes whose high bits equal ``value``."""
    n = ab.size
    nchunks = hist.shape[0]
    for c in prange(nchunks):
        _histogram(ab[n * c // nchunks : n * (c + 1) // nchunks], mask, value, shift, nbits, hist[c])


@njit(cache=True)
def _collect(ab, start, thr, ties, out):  # pragma: no cover - compiled
    """Indices of magnitudes > thr, and of the first ``ties`` equal to thr, in ascending order.

    64 elements at a time: two comparison masks built in registers (vectorised), then only the
    set bits are visited (found by de Bruijn multiplication); with a 1% selection most blocks
    have no bit set.
    """
    q = 0
    full = ab.size // 64
    for g in range(full):
        s = ab[g * 64 : g * 64 + 64]
        gt = np.uint64(0)
        eq = np.uint64(0)
        for t in range(64):
            m = s[t] & np.uint32(0x7FFFFFFF)
            gt |= np.uint64(m > thr) << np.uint64(t)
            eq |= np.uint64(m == thr) << np.uint64(t)
        v = gt | eq if ties > 0 else gt
        while v != np.uint64(0):
            low = v & (~v + np.uint64(1))
            v ^= low
            if (gt & low) == np.uint64(0):  # a tie: taken while the quota lasts
                if ties <= 0:
                    continue
                ties -= 1
            out[q] = start + g * 64 + _DEBRUIJN_TABLE[(low * _DEBRUIJN) >> np.uint64(58)]
            q += 1
    for i in range(full * 64, ab.size):
        m = ab[i] & np.uint32(0x7FFFFFFF)
        if m > thr or (m == thr and ties > 0):
            if m == thr:
                ties -= 1
            out[q] = start + i
            q += 1


@njit(**PARALLEL)
def _topk_collect_kernel(ab, thr, ties, offsets, out):  # pragma: no cover - compiled
    """Chunk c writes its selected indices from offsets[c] (chunks as in the histograms)."""
    n = ab.size
    nchunks = offsets.size
    for c in prange(nchunks):
        lo = n * c // nchunks
        hi = n * (c + 1) // nchunks
        _collect(ab[lo:hi], lo, thr, ties[c], out[offsets[c] :])


def _boundary(hist: np.ndarray, k: int) -> tuple[int, int]:
    """(bin holding the k-th largest, how many of that bin are needed) of per-chunk histograms."""
    total = hist.sum(axis=0, dtype=np.int64)
    at_or_above = np.cumsum(total[::-1])[::-1]
    b = int(np.flatnonzero(at_or_above >= k)[-1])
    above = int(at_or_above[b + 1]) if b + 1 < len(total) else 0
    return b, k - above


@njit(cache=True)
def _count_at_least(ab, t):  # pragma: no cover - compiled
    c = 0
    for i in range(ab.size):
        c += np.int64((ab[i] & np.uint32(0x7FFFFFFF)) >= t)
    return c


@njit(**PARALLEL)
def _form_count_kernel(x, e, mode, t, counts):  # pragma: no cover - compiled
    """Per chunk c: #(|a| >= t) (as magnitude bits) into counts[c], forming a on the way.

    mode 0: a = x; 1: a = x + e written to e (error feedback); 2: a = x written to e (no
    residual yet).  Chunks are fixed ranges (as in the collect kernel).
    """
    n = x.size
    nchunks = counts.size
    for c in prange(nchunks):
        lo = n * c // nchunks
        hi = n * (c + 1) // nchunks
        cnt = 0
        for i0 in range(lo, hi, SUB):
            i1 = min(hi, i0 + SUB)
            if mode == 1:
                _add_into(x[i0:i1], e[i0:i1])
            elif mode == 2:
                _copy_into(x[i0:i1], e[i0:i1])
            src = x[i0:i1] if mode == 0 else e[i0:i1]
            cnt += _count_at_least(src.view(np.uint32), t)
        counts[c] = cnt


def _resolve(ab: np.ndarray, cand: np.ndarray, k: int) -> np.ndarray:
    """The k largest magnitudes among ascending candidate indices (ties: lowest indices)."""
    if len(cand) == k:
        return cand
    mag = ab[cand] & np.uint32(0x7FFFFFFF)
    t = np.partition(mag, len(mag) - k)[len(mag) - k]  # the k-th largest magnitude
    keep = mag > t
    keep[np.flatnonzero(mag == t)[: k - int(keep.sum())]] = True
    return cand[keep]


_SAMPLE = 1 << 17  # strided sample size for the top-k threshold


def _sample_threshold(x: np.ndarray, e: np.ndarray | None, has_e: bool, k: int) -> int:
    """A magnitude (as bits) that most likely lies below the k-th largest |a|, or 0 if none.

    The (1.1·k·m/n + 4σ + 8)-th largest of a strided sample of m magnitudes of a = x (+ e),
    computed with the same float32 addition as the kernels.
    """
    n = x.size
    stride = max(1, n // _SAMPLE)
    a = x[::stride] + e[::stride] if (e is not None and has_e) else x[::stride]
    sample = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) & np.uint32(0x7FFFFFFF)
    m = sample.size
    expect = k * m / n
    j = math.ceil(1.1 * expect + 4 * math.sqrt(expect) + 8)
    if j > m // 2:
        return 0
    return int(np.partition(sample, m - j)[m - j])


def topk_select(x: np.ndarray, k: int, e: np.ndarray | None = None, has_e: bool = False) -> np.ndarray:
    """Sorted int64 indices of the ``k`` largest |a| (exact), a = x, or a = x + e.

    With ``e`` given, a is written into ``e`` (error feedback: the residual buffer becomes the
    corrected gradient; ``has_e`` False means there was no residual yet, so a = x).  The
    magnitudes are compared as the 31 low bits of the float32 pattern, which order like the
    values.  Selection: a threshold t from a strided sample of a; the pass that forms a also
    counts exactly how many |a| >= t (:func:`topk_count`); if at least k (so every top-k element
    is among them) and not far more, one pass collects those indices in ascending order and they
    are resolved exactly.  Otherwise (an unlucky or periodic sample) a radix select (12 + 12 + 7
    bits) runs over the whole tensor (:func:`topk_collect`).  Ties at the k-th magnitude keep the
    lowest indices; NaN ranks above +inf.
    """
    t, counts = topk_count(x, k, e, has_e)
    return topk_collect(x if e is None else e, k, t, counts)


def topk_count(x: np.ndarray, k: int, e: np.ndarray | None = None, has_e: bool = False) -> tuple[int, np.ndarray]:
    """The first pass of :func:`topk_select`: (threshold bits t, per-chunk counts of |a| >= t),
    forming a = x + e into ``e`` on the way when ``e`` is given."""
    n = x.size
    if not 0 < k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    nchunks = max(1, min(16, n // PART))
    mode = 0 if e is None else (1 if has_e else 2)
    t = _sample_threshold(x, e, has_e, k) if (n >= 1 << 14 and k <= n // 4) else 0
    counts = np.empty(nchunks, np.int64)
    # with t = 0 this pass only forms a (every magnitude counts)
    run_parallel(_form_count_kernel, n, x, x if e is None else e, np.int64(mode), np.uint32(t), counts)
    return t, counts


def topk_collect(a: np.ndarray, k: int, t: int, counts: np.ndarray) -> np.ndarray:
    """The rest of :func:`topk_select` on the formed ``a``, given :func:`topk_count`'s ``(t, counts)``."""
    got = _collect_at_least(a.view(np.uint32), k, t, counts)
    return got if got is not None else _topk_radix(a, k, counts.size)


def _collect_at_least(ab: np.ndarray, k: int, t: int, counts: np.ndarray) -> np.ndarray | None:
    """The exact top-k among the magnitudes >= t (``counts``: how many per chunk), or None when
    t is unusable: 0, passed by fewer than k, or by far more than k (memory)."""
    total = int(counts.sum())
    if t <= 0 or not k <= total <= 4 * k + (1 << 16):
        return None
    offsets = np.zeros(counts.size, np.int64)
    offsets[1:] = np.cumsum(counts)[:-1]
    cand = np.empty(total, np.int64)
    run_parallel(_topk_collect_kernel, ab.size, ab, np.uint32(t - 1), np.zeros(counts.size, np.int64), offsets, cand)  # m > t − 1 ⇔ m >= t
    return _resolve(ab, cand, k)


def _topk_sampled(ab: np.ndarray, k: int, nchunks: int) -> np.ndarray | None:
    """The sampled-threshold path alone on formed magnitudes (None where :func:`topk_select`
    falls back to the radix select) — for the tests that check which path runs."""
    x = ab.view(np.float32)
    t = _sample_threshold(x, None, False, k)
    counts = np.empty(nchunks, np.int64)
    run_parallel(_form_count_kernel, x.size, x, x, np.int64(0), np.uint32(t), counts)
    return _collect_at_least(ab, k, t, counts)


def _topk_radix(a: np.ndarray, k: int, nchunks: int) -> np.ndarray:
    """Exact top-k of |a| by a radix select on the magnitude bits (see :func:`topk_select`)."""
    hist1 = np.zeros((nchunks, 1 << 12), np.int32)
    run_parallel(_topk_hist_kernel, a.size, a.view(np.uint32), hist1)
    ab = a.view(np.uint32)
    b1, need = _boundary(hist1, k)
    above = hist1[:, b1 + 1 :].sum(axis=1, dtype=np.int64)  # per chunk: strictly above the threshold
    in_bin = hist1[:, b1].astype(np.int64)
    thr = b1 << _RADIX_SHIFT
    if int(in_bin.sum()) > max(2 * k, 1 << 16):  # large boundary bin: refine before collecting
        hist2 = np.zeros((nchunks, 1 << 12), np.int32)
        run_parallel(_radix_kernel, ab.size, ab, np.uint32(0xFFF << 19), np.uint32(b1 << 19), np.uint32(7), np.int64(12), hist2)
        b2, need = _boundary(hist2, need)
        hist3 = np.zeros((nchunks, 1 << 7), np.int32)
        prefix = (b1 << 19) | (b2 << 7)
        run_parallel(_radix_kernel, ab.size, ab, np.uint32(0x7FFFFF80), np.uint32(prefix), np.uint32(0), np.int64(7), hist3)
        b3, need = _boundary(hist3, need)
        above = above + hist2[:, b2 + 1 :].sum(axis=1, dtype=np.int64) + hist3[:, b3 + 1 :].sum(axis=1, dtype=np.int64)
        thr = prefix | b3
        in_bin = hist3[:, b3].astype(np.int64)
        ties = np.minimum(in_bin, np.maximum(0, need - np.concatenate([[0], np.cumsum(in_bin)[:-1]])))
        offsets = np.zeros(nchunks, np.int64)
        offsets[1:] = np.cumsum(above + ties)[:-1]
        out = np.empty(k, np.int64)
        run_parallel(_topk_collect_kernel, ab.size, ab, np.uint32(thr), ties, offsets, out)
        return out
    # small boundary bin: collect all of it and resolve it on the full 31 bits here
    offsets = np.zeros(nchunks, np.int64)
    offsets[1:] = np.cumsum(above + in_bin)[:-1]
    cand = np.empty(int((above + in_bin).sum()), np.int64)
    run_parallel(_topk_collect_kernel, ab.size, ab, np.uint32(thr), in_bin, offsets, cand)
    return _resolve(ab, cand, k)


def topk_select_reference(a: np.ndarray, k: int) -> np.ndarray:
    """The same set by a stable sort of −|a| (ties to the lowest index), sorted (the oracle)."""
    mag = np.abs(a.astype(np.float32)).view(np.uint32) & np.uint32(0x7FFFFFFF)
    order = np.argsort(-mag.astype(np.int64), kind="stable")
    return np.sort(order[:k])



# ----------------------------------------------------------------------------- exact top-k

def kth_largest_np(values: np.ndarray, k: int) -> float:
    """The k-th largest entry of a 1-D array (k = 1 is the maximum), by ``np.partition``.

    The same value as ``torch.kthvalue(values, n − k + 1)`` (an order statistic does not depend on
    how ties are broken), computed on the calling thread: small torch ops right after the kernels
    wait for torch's worker threads to wake, which cost milliseconds each on a loaded machine.
    """
    n = values.size
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    return float(np.partition(values, n - k)[n - k])


def kth_largest_torch(mag: torch.Tensor, k: int, via_topk: bool | None = None) -> torch.Tensor:
    """The k-th largest of ``mag`` (1-D, no NaN, 0 < k <= numel) as a 0-d tensor on its device.

    On a GPU ``torch.kthvalue`` of one long row runs in a single thread block (the device check
    measured 107 ms for 16M floats on an H200, against 0.38 ms for ``torch.topk`` of the same
    tensor), so there the k-th largest is the smallest of ``torch.topk``'s k values — the same
    number.  On the CPU ``kthvalue`` is the faster of the two.  ``via_topk`` forces either way (tests).
    """
    if via_topk is None:
        via_topk = mag.device.type != "cpu"
    if via_topk:
        return torch.topk(mag, k, sorted=False).values.min()
    return torch.kthvalue(mag, mag.numel() - k + 1).values


def topk_among(vals: torch.Tensor, k: int) -> torch.Tensor:
    """Positions (ascending) of the k largest |vals|; among values equal to the k-th, the earliest (torch ops, any device).

    No scalar read: the ties kept are those whose running count stays within ``k − (number above the
    k-th)``, and exactly k positions are kept, so ``nonzero_static`` of size k lists them without the
    device telling the host a size (0 < k <= numel).
    """
    mag = vals.abs()
    kth = kth_largest_torch(mag, k)
    keep = mag > kth
    ties = mag == kth
    rank = torch.cumsum(ties, 0, dtype=torch.int32 if ties.numel() < 1 << 31 else torch.int64)  # 4 bytes an element, not 8
    keep |= ties & (rank <= k - keep.sum())
    return torch.nonzero_static(keep, size=k).reshape(-1)


def topk_tensor(flat: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k of ``|flat|`` (1-D float32): (sorted int64 indices, their values) — :func:`topk_select` on a
    CPU tensor, :func:`topk_select_torch` (its torch reference) anywhere else or without numba.

    Among magnitudes equal to the k-th largest the lowest indices are kept; NaN ranks above +inf.
    """
    d = flat.numel()
    if k >= d:
        return torch.arange(d, dtype=torch.int64, device=flat.device), flat.clone()
    if not fast_cpu(flat):
        return topk_select_torch(flat, k)
    if k <= 0:
        return torch.zeros(0, dtype=torch.int64), flat[:0].clone()
    a = as_numpy(flat)
    idx = topk_select(a, k)
    return torch.from_numpy(idx), torch.from_numpy(gather(a, idx))


def topk_select_torch(flat: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same selection in torch ops (any device): the same indices as :func:`topk_tensor`, NaN included.

    Magnitudes are compared as the kernels compare them, as the integers ``bits & 0x7FFFFFFF`` of the
    float32 values (a NaN ranks above +inf, NaNs by their bits), so there is one path and no scalar read.
    """
    d = flat.numel()
    if k >= d:
        return torch.arange(d, dtype=torch.int64, device=flat.device), flat.clone()
    if k <= 0:
        return torch.zeros(0, dtype=torch.int64, device=flat.device), flat[:0].clone()
    keys = flat.float().view(torch.int32) & 0x7FFFFFFF
    keep = topk_among(keys, k)
    return keep, flat[keep]


def topk_select_torch_exact(flat: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk`` itself, indices sorted: the fallback (and what inputs holding NaN get)."""
    idx = torch.topk(flat.abs(), k, sorted=False).indices.sort().values
    return idx, flat[idx]


