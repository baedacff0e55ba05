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

import math

import numpy as np
import torch

from gcbench.kernels.bits import _MASK64
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


def splitmix64_torch(seed: int | torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """SplitMix64 outputs ``counters`` of stream ``seed`` (int64 tensors with uint64 bits: torch has no wrapping uint64).

    ``seed`` is a Python integer, or an int64 tensor of its bits on the counters' device (never read back)."""
    key = seed if isinstance(seed, torch.Tensor) else _signed(int(key_of(seed)))
    z = (counters + 1) * _signed(int(GAMMA)) + key  # int64 multiply wraps like uint64
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




def normals_torch(seed: int, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``n`` float32 standard normals from stream ``seed``, with torch ops on ``device`` (no host data moves there).

    Number j is Box–Muller on output j: u1 = (its top 32 bits + ½)/2^32 in (0, 1), u2 = its low 32 bits/2^32, and
    √(−2 ln u1)·cos(2π u2) in float64, rounded to float32 (so |z| < 6.8, where the 32-bit u1 ends).  The same
    numbers on every device up to the last bit of float64 ``log``/``cos``, which the rounding to float32 hides.
    """
    z = splitmix64_torch(seed, torch.arange(n, dtype=torch.int64, device=device))
    u1 = (_lshr(z, 32).to(torch.float64) + 0.5) * 2.0**-32
    u2 = (z & 0xFFFFFFFF).to(torch.float64) * 2.0**-32
    return (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2.0 * math.pi) * u2)).to(torch.float32)

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
#
# A k-subset of [0, d) from a 64-bit seed, the same on the CPU kernels and on any torch device, in O(k) work with no
# data-dependent control flow (so a GPU computes it in a fixed sequence of element-wise ops, no host round trip):
#
#   position_j = (π(j) + c) mod d,   j = 0 … k − 1,
#
# where π is a swap-or-not shuffle of [0, d) (Hoang, Morris & Rogaway 2012) of SUBSET_ROUNDS rounds and c a uniform
# rotation.  Round r pairs x with its partner x' = (K_r − x) mod d and swaps the two when bit F_r(max(x, x')) is 1, so
# each round is an involution of [0, d) and π a permutation: the k positions are distinct.  F_r is the top bit of the
# multiply-add hash M_r·x + A_r mod 2^64 (M_r odd).  K_r, M_r, A_r and c are outputs 0 … 3·SUBSET_ROUNDS of the
# SplitMix64 stream keyed by the seed; K_r and c are those outputs' top 63 bits reduced mod d.
#
# Because c is uniform, each position is kept with probability k/d whatever π is (up to the modulo reduction's
# d/2^63), so random-k is unbiased with E‖C(x) − x‖² = (d/k − 1)‖x‖² exactly as the definition says.  π only decides
# how the k positions sit relative to each other: two of them keep their original distance only if the hash gave them
# the same bit in every round (probability 2^-32); with 32 rounds the subsets of a small range are uniform within
# chi-square tests (tests/kernels/test_rng.py,
# tests/compressors/test_randomk.py).

SUBSET_ROUNDS = 32
_SUB_CHUNK = 2048  # indices per inner chunk of the CPU kernel: the rounds run over a chunk that stays in L1 (it vectorises)


def _mix64_py(z: int) -> int:
    z &= _MASK64
    z = ((z ^ (z >> 30)) * int(MIX1)) & _MASK64
    z = ((z ^ (z >> 27)) * int(MIX2)) & _MASK64
    return z ^ (z >> 31)


def subset_params(seed: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The shuffle's round keys K (int64, in [0, d)), hash multipliers M (odd) and offsets A (uint64), and the
    rotation c, for ``seed`` and a range of ``d`` positions (Python's integers: the CPU paths' parameters)."""
    key = int(key_of(seed))
    u = [_mix64_py(key + (i + 1) * int(GAMMA)) for i in range(3 * SUBSET_ROUNDS + 1)]
    rounds = SUBSET_ROUNDS
    keys = np.array([(v >> 1) % d for v in u[:rounds]], np.int64)
    mults = np.array([v | 1 for v in u[rounds : 2 * rounds]], np.uint64)
    adds = np.array(u[2 * rounds : 3 * rounds], np.uint64)
    return keys, mults, adds, (u[3 * rounds] >> 1) % d


@njit(inline="always")
def _shuffle_chunk(keys, mults, adds, c, d, first, buf):  # pragma: no cover - compiled
    """buf[j] = (π(first + j) + c) mod d: the rounds over the whole chunk, one round at a time (the loop vectorises)."""
    m = buf.size
    for j in range(m):
        buf[j] = first + j
    for r in range(keys.size):
        kr = keys[r]
        mr = mults[r]
        ar = adds[r]
        for j in range(m):
            x = buf[j]
            xp = kr - x
            xp = xp + d if xp < 0 else xp
            xh = max(x, xp)
            buf[j] = xp if (np.uint64(xh) * mr + ar) >> np.uint64(63) else x
    for j in range(m):
        x = buf[j] + c
        buf[j] = x - d if x >= d else x


@njit(**PARALLEL)
def _subset_kernel(keys, mults, adds, c, d, out):  # pragma: no cover - compiled
    k = out.size
    for p in prange(n_parts(k)):
        lo, hi = bounds(p, PART, k)
        part = out[lo:hi]
        for s in range(0, hi - lo, _SUB_CHUNK):
            _shuffle_chunk(keys, mults, adds, c, d, lo + s, part[s : min(hi - lo, s + _SUB_CHUNK)])


def random_subset(seed: int, d: int, k: int) -> np.ndarray:
    """The k distinct positions in [0, d) that ``seed`` expands to (numba kernel), in generation order: position j is
    (π(j) + c) mod d (the section comment above).  O(k) work; every device computes the same positions
    (:func:`random_subset_torch`, :func:`random_subset_reference`)."""
    if not 0 <= k <= d:
        raise ValueError(f"k must be in [0, {d}], got {k}")
    out = np.empty(k, np.int64)
    if k:
        keys, mults, adds, c = subset_params(seed, d)
        run_parallel(_subset_kernel, d, keys, mults, adds, np.int64(c), np.int64(d), out)
    return out


def random_subset_torch(seed: torch.Tensor, d: int, k: int) -> torch.Tensor:
    """:func:`random_subset` with int64 torch ops where ``seed`` lies (a one-element int64 tensor holding the seed's
    64 bits): the parameters are computed there too, so the seed is never read back to the host.  A fixed sequence of
    about 7·:data:`SUBSET_ROUNDS` element-wise ops on k elements."""
    if not 0 <= k <= d:
        raise ValueError(f"k must be in [0, {d}], got {k}")
    dev = seed.device
    rounds = SUBSET_ROUNDS
    u = splitmix64_torch(seed.reshape(1), torch.arange(3 * rounds + 1, dtype=torch.int64, device=dev))
    keys = torch.remainder(_lshr(u[:rounds], 1), d)
    mults = u[rounds : 2 * rounds] | 1
    adds = u[2 * rounds : 3 * rounds]
    x = torch.arange(k, dtype=torch.int64, device=dev)
    for r in range(rounds):
        xp = torch.remainder(keys[r] - x, d)
        x = torch.where(torch.maximum(x, xp) * mults[r] + adds[r] < 0, xp, x)  # int64 wraps like uint64: < 0 is the top bit
    return torch.remainder(x + torch.remainder(_lshr(u[3 * rounds], 1), d), d)


def seed_word(seed: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The 64-bit ``seed`` as a one-element int64 tensor on ``device`` (its bits; what :func:`random_subset_torch` takes).

    A fill with the value as the kernel's argument: no host buffer is copied to the device, so nothing waits for it."""
    s = int(seed) & _MASK64
    return torch.full((1,), s - (1 << 64) if s >= 1 << 63 else s, dtype=torch.int64, device=device)


def random_subset_reference(seed: int, d: int, k: int) -> np.ndarray:
    """:func:`random_subset` in plain Python, one position at a time from the definition: the tests' oracle."""
    keys, mults, adds, c = subset_params(seed, d)
    out = []
    for j in range(k):
        x = j
        for kr, mr, ar in zip(keys.tolist(), mults.tolist(), adds.tolist(), strict=True):
            xp = (kr - x) % d
            if ((max(x, xp) * mr + ar) & _MASK64) >> 63:
                x = xp
        out.append((x + c) % d)
    return np.array(out, np.int64)
