"""Counter-based random numbers and random k-subsets.

SplitMix64 (Steele, Lea & Flood 2014) evaluated as a *counter-based* generator: the i-th number of
the stream with key ``k`` is ``mix64(k + (i + 1)·γ)``, so any element's number is computed where it is
needed, in any order and on any number of threads, and the same key gives the same numbers on every
machine.  A uniform is the top 24 bits over 2^24: a float32 in [0, 1) on the grid j·2^-24, so
``P(u < p)`` equals ``p`` exactly for every float32 ``p`` on that grid.  :func:`rand24` (numba),
:func:`rand24_reference` (NumPy) and :func:`rand24_torch` (any torch device) compute the same numbers;
:func:`random_subset` has :func:`random_subset_reference` beside it.

*Paired* numbers (:func:`rand24_pairs` and its twins) take two 24-bit numbers from each output:
number 2p is the top 24 bits of output p, number 2p + 1 the next 24 (bits 16–39), at half the
multiplications a number; a compressor that uses them says so (``thc``; the others draw one per output).
"""

from __future__ import annotations

import numpy as np
import torch

from gcbench.kernels.bits import _DEBRUIJN, _DEBRUIJN_TABLE, _MASK64
from gcbench.kernels.runtime import NUMBA, PARALLEL, PART, bounds, n_parts, njit, prange, run_parallel

U64 = np.uint64
GAMMA = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment (odd, ≈ 2^64/φ)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
_TWO_M24 = np.float32(2.0**-24)

# ----------------------------------------------------------------------------- random numbers
#
# Kernel-writing rule used throughout: parallel drivers slice the arrays per part and call
# serial functions whose loops index those slices with ``range`` counters from 0.  Numba then
# knows the indices are non-negative and contiguous, and LLVM vectorises the loops (the same
# loops indexed as ``x[lo + j]`` inside a part loop ran 4–10× slower here).


def key_of(seed: int) -> np.uint64:
    """The 64-bit stream key of a Python integer seed."""
    return np.uint64(int(seed) & _MASK64)


@njit(inline="always")
def _mix64(z):  # pragma: no cover - compiled
    z = (z ^ (z >> np.uint64(30))) * MIX1
    z = (z ^ (z >> np.uint64(27))) * MIX2
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def _fill_rand24(key, start, buf, m):  # pragma: no cover - compiled
    """buf[j] = top 24 bits of SplitMix64 output ``start + j`` of stream ``key``, j < m."""
    for j in range(m):
        buf[j] = np.uint32(_mix64(key + np.uint64(start + j + 1) * GAMMA) >> np.uint64(40))


@njit(**PARALLEL)
def _rand24_kernel(key, start, out, paired):  # pragma: no cover - compiled
    n = out.size
    for p in prange(n_parts(n)):
        lo, hi = bounds(p, PART, n)
        if paired:
            _fill_rand24_pairs(key, start + lo, out[lo:hi], hi - lo)
        else:
            _fill_rand24(key, start + lo, out[lo:hi], hi - lo)


def rand24(seed: int, n: int, start: int = 0, paired: bool = False) -> np.ndarray:
    """Numbers ``start .. start+n-1`` of stream ``seed`` as uint32 in [0, 2^24) (numba kernel); ``paired``: the paired
    numbers (:func:`rand24_pairs`)."""
    out = np.empty(int(n), np.uint32)
    if n:
        run_parallel(_rand24_kernel, n, key_of(seed), np.int64(start), out, paired)
    return out


def rand24_reference(seed: int, n: int, start: int = 0) -> np.ndarray:
    """The same numbers computed with NumPy's wrapping uint64 arithmetic (the tests' oracle)."""
    z = np.arange(start + 1, start + n + 1, dtype=np.uint64) * GAMMA + key_of(seed)
    z = (z ^ (z >> U64(30))) * MIX1
    z = (z ^ (z >> U64(27))) * MIX2
    z ^= z >> U64(31)
    return (z >> U64(40)).astype(np.uint32)


def _signed(u: int) -> int:
    """A uint64 constant as the int64 with the same bits (torch has no wrapping uint64 multiply)."""
    return u - (1 << 64) if u >= 1 << 63 else u


def _lshr(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's ``>>`` is arithmetic)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def rand24_torch(seed: int, n: int, device: torch.device | str = "cpu", start: int = 0) -> torch.Tensor:
    """The same numbers as :func:`rand24` with int64 torch ops on any device (int64 tensor)."""
    return _lshr(splitmix64_torch(seed, torch.arange(start, start + n, dtype=torch.int64, device=device)), 40)


def splitmix64_torch(seed: int, counters: torch.Tensor) -> torch.Tensor:
    """SplitMix64 outputs ``counters`` of stream ``seed`` (int64 tensors with uint64 bits: torch has no wrapping uint64)."""
    z = (counters + 1) * _signed(int(GAMMA)) + _signed(int(key_of(seed)))  # int64 multiply wraps like uint64
    z = (z ^ _lshr(z, 30)) * _signed(int(MIX1))
    z = (z ^ _lshr(z, 27)) * _signed(int(MIX2))
    return z ^ _lshr(z, 31)


def uniforms(seed: int, n: int, device: torch.device | str = "cpu", start: int = 0) -> torch.Tensor:
    """float32 uniforms in [0, 1) on the 2^-24 grid: number ``start + j`` of stream ``seed``.

    The torch paths of the stochastic compressors draw here, so they see exactly the numbers
    the fused kernels draw inline.
    """
    if torch.device(device).type == "cpu" and NUMBA:
        return torch.from_numpy(rand24(seed, n, start).astype(np.float32) * _TWO_M24)
    return rand24_torch(seed, n, device, start).to(torch.float32) * 2.0**-24



@njit(inline="always")
def _pair_number(key, e):  # pragma: no cover - compiled
    """Paired number ``e`` of stream ``key``: bits 40–63 (e even) or 16–39 (e odd) of output ⌊e/2⌋."""
    z = _mix64(key + np.uint64(e // 2 + 1) * GAMMA)
    return np.uint32((z >> np.uint64(40 - 24 * (e & 1))) & np.uint64(0xFFFFFF))


@njit(inline="always")
def _fill_rand24_pairs(key, start, buf, m):  # pragma: no cover - compiled
    """buf[j] = paired number ``start + j`` of stream ``key``, j < m: whole outputs in the loop (it vectorises), an odd
    first or last number alone."""
    j = 0
    if start & 1 and m > 0:
        buf[0] = _pair_number(key, start)
        j = 1
    p0 = (start + j) // 2
    half = (m - j) // 2
    for q in range(half):
        z = _mix64(key + np.uint64(p0 + q + 1) * GAMMA)
        buf[j + 2 * q] = np.uint32(z >> np.uint64(40))
        buf[j + 2 * q + 1] = np.uint32((z >> np.uint64(16)) & np.uint64(0xFFFFFF))
    if (m - j) & 1:
        buf[m - 1] = _pair_number(key, start + m - 1)


def rand24_pairs(seed: int, n: int, start: int = 0) -> np.ndarray:
    """Paired numbers ``start .. start+n-1`` of stream ``seed`` as uint32 in [0, 2^24) (numba kernel)."""
    return rand24(seed, n, start, paired=True)


def rand24_pairs_reference(seed: int, n: int, start: int = 0) -> np.ndarray:
    """The same paired numbers with NumPy's wrapping uint64 arithmetic (the tests' oracle)."""
    e = np.arange(start, start + n, dtype=np.uint64)
    z = (e // U64(2) + U64(1)) * GAMMA + key_of(seed)
    z = (z ^ (z >> U64(30))) * MIX1
    z = (z ^ (z >> U64(27))) * MIX2
    z ^= z >> U64(31)
    return ((z >> (U64(40) - U64(24) * (e & U64(1)))) & U64(0xFFFFFF)).astype(np.uint32)


def rand24_pairs_torch(seed: int, n: int, device: torch.device | str = "cpu", start: int = 0) -> torch.Tensor:
    """The same paired numbers with int64 torch ops on any device (int64 tensor)."""
    e = torch.arange(start, start + n, dtype=torch.int64, device=device)
    z = splitmix64_torch(seed, e // 2)
    return torch.where((e & 1) == 0, _lshr(z, 40), _lshr(z, 16) & 0xFFFFFF)


def paired_uniforms(seed: int, n: int, device: torch.device | str = "cpu", start: int = 0) -> torch.Tensor:
    """float32 uniforms in [0, 1) on the 2^-24 grid from the paired numbers (:func:`uniforms`' twin for ``thc``)."""
    if torch.device(device).type == "cpu" and NUMBA:
        return torch.from_numpy(rand24_pairs(seed, n, start).astype(np.float32) * _TWO_M24)
    return rand24_pairs_torch(seed, n, device, start).to(torch.float32) * 2.0**-24


# ----------------------------------------------------------------------------- random k-subsets

SAMPLE_BLOCK = 1 << 16  # positions per block of the k-subset sampler (an 8 KiB bitmap)


@njit(inline="always")
def _below(key, ctr, bound):  # pragma: no cover - compiled
    """Uniform integer in [0, bound) (bound ≤ 2^32) from stream ``key`` starting at counter
    ``ctr``: Lemire's multiply-shift on 32-bit draws with rejection, so exactly uniform.
    Returns (value, next counter)."""
    b = np.uint64(bound)
    threshold = (np.uint64(1 << 32) - b) % b
    while True:
        r = _mix64(key + np.uint64(ctr + 1) * GAMMA) >> np.uint64(32)
        ctr += 1
        prod = r * b
        if (prod & np.uint64(0xFFFFFFFF)) >= threshold:
            return np.int64(prod >> np.uint64(32)), ctr


@njit(cache=True)
def _block_subset(key, block, size, count, words, out):  # pragma: no cover - compiled
    """A uniform ``count``-subset of [0, size) by Floyd's algorithm on a bitmap, written to out
    in ascending order (offset by block·SAMPLE_BLOCK)."""
    for w in range((size + 63) // 64):
        words[w] = np.uint64(0)
    ctr = np.int64(block) << np.int64(32)  # each block draws from its own counter range
    for j in range(size - count, size):
        t, ctr = _below(key, ctr, j + 1)
        bit = np.uint64(1) << np.uint64(t & 63)
        if words[t >> 6] & bit:
            words[j >> 6] |= np.uint64(1) << np.uint64(j & 63)
        else:
            words[t >> 6] |= bit
    q = 0
    base = np.int64(block) * SAMPLE_BLOCK
    for w in range((size + 63) // 64):
        v = words[w]
        while v != np.uint64(0):
            low = v & (~v + np.uint64(1))
            out[q] = base + w * 64 + _DEBRUIJN_TABLE[(low * _DEBRUIJN) >> np.uint64(58)]
            q += 1
            v ^= low


@njit(**PARALLEL)
def _subset_kernel(key, d, counts, offsets, out):  # pragma: no cover - compiled
    nb = counts.size
    for b in prange(nb):
        if counts[b] == 0:
            continue
        words = np.empty(SAMPLE_BLOCK // 64, np.uint64)
        size = min(SAMPLE_BLOCK, d - b * SAMPLE_BLOCK)
        _block_subset(key, b, size, counts[b], words, out[offsets[b] : offsets[b] + counts[b]])


def random_subset(seed: int, d: int, k: int) -> np.ndarray:
    """A uniformly random k-subset of [0, d), ascending, determined by ``seed`` alone.

    The range is cut into blocks of :data:`SAMPLE_BLOCK` positions.  How many of the k fall in
    each block is one multivariate hypergeometric draw from a PCG64 generator seeded with
    ``seed`` — exactly the block counts of a uniform k-subset — and each block then takes a
    uniform subset of that size by Floyd's algorithm with exactly uniform integers from the
    counter-based stream (key drawn from the same generator).  So every k-subset is equally
    likely and each position is kept with probability exactly k/d, at O(k + d/64) cost in
    cache-sized pieces, for any density.
    """
    if not 0 <= k <= d:
        raise ValueError(f"k must be in [0, {d}], got {k}")
    gen = np.random.Generator(np.random.PCG64(int(seed)))
    nb = max(1, -(-d // SAMPLE_BLOCK))
    if nb == 1:
        counts = np.array([k], np.int64)
    else:
        sizes = np.full(nb, SAMPLE_BLOCK, np.int64)
        sizes[-1] = d - (nb - 1) * SAMPLE_BLOCK
        counts = gen.multivariate_hypergeometric(sizes, k, method="marginals").astype(np.int64)
    key = key_of(int(gen.integers(0, 2**63 - 1)))
    offsets = np.zeros(nb, np.int64)
    offsets[1:] = np.cumsum(counts)[:-1]
    out = np.empty(k, np.int64)
    if k:
        run_parallel(_subset_kernel, d, key, np.int64(d), counts, offsets, out)
    return out


def _mix64_py(z: int) -> int:
    z &= _MASK64
    z = ((z ^ (z >> 30)) * int(MIX1)) & _MASK64
    z = ((z ^ (z >> 27)) * int(MIX2)) & _MASK64
    return z ^ (z >> 31)


def random_subset_reference(seed: int, d: int, k: int) -> np.ndarray:
    """:func:`random_subset` in plain Python (a set and ``sorted``): the tests' oracle."""
    gen = np.random.Generator(np.random.PCG64(int(seed)))
    nb = max(1, -(-d // SAMPLE_BLOCK))
    if nb == 1:
        counts = [k]
    else:
        sizes = np.full(nb, SAMPLE_BLOCK, np.int64)
        sizes[-1] = d - (nb - 1) * SAMPLE_BLOCK
        counts = gen.multivariate_hypergeometric(sizes, k, method="marginals").tolist()
    key = int(gen.integers(0, 2**63 - 1))
    out: list[int] = []
    for b, count in enumerate(counts):
        size = min(SAMPLE_BLOCK, d - b * SAMPLE_BLOCK)
        ctr = b << 32
        chosen: set[int] = set()
        for j in range(size - count, size):
            bound = j + 1
            while True:  # Lemire's multiply-shift with rejection on 32-bit draws
                r = _mix64_py(key + (ctr + 1) * int(GAMMA)) >> 32
                ctr += 1
                prod = r * bound
                if (prod & 0xFFFFFFFF) >= ((1 << 32) - bound) % bound:
                    t = prod >> 32
                    break
            chosen.add(j if t in chosen else t)
        out.extend(b * SAMPLE_BLOCK + i for i in sorted(chosen))
    return np.array(out, np.int64)


