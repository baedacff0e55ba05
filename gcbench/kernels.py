"""Fast CPU kernels shared by the compressors: a counter-based generator, fused quantizers,
bit-field writers and output buffers that do not pay 4 KiB page faults.

Why this module exists (issue 8, measured in environment.md): on a 25.6M-element tensor a copy
costs 7.5–9 ms, while ``torch.rand_like`` costs 120 ms, every new 100 MB result 35–55 ms of page
faults, and an eager chain of elementwise torch ops one pass (and often one allocation) per op.
The kernels here read the input once or twice, draw their random numbers inside the same loop
and write the packed wire bits directly.

* **Random numbers** — SplitMix64 (Steele, Lea & Flood 2014, "Fast splittable pseudorandom number
  generators"; the generator Java's ``SplittableRandom`` and xoshiro's seeding use) evaluated as a
  *counter-based* generator: the i-th number of a stream with key ``k`` is
  ``mix64(k + (i + 1)·γ)``, so any element's number is computed where it is needed, in any order
  and on any number of threads, and the same key gives the same numbers on every machine.  A
  uniform is the top 24 bits over 2^24: a float32 in [0, 1) on the grid j·2^-24, so ``P(u < p)``
  equals ``p`` exactly for every float32 ``p`` on that grid (natural compression's mantissa
  probabilities M/2^23 among them).  The key of each compression is one draw from the state's
  PCG64 generator, so a seed still fixes every draw and ``state_dict`` still resumes a stream.
  :func:`rand24_reference` (NumPy) and :func:`rand24_torch` (any torch device) compute the same
  numbers; tests compare all three.
* **Fused quantizers** — TernGrad, QSGD, natural compression and natural dithering: at most one
  read-only statistics pass (std and max, or norms; QSGD's bucket norms are taken inside its
  one pass while the bucket is in cache), then one pass that draws, quantizes and writes the
  packed fields.  Sign and 1-bit SGD kernels work in the error-feedback residual buffer: their
  first pass forms a = x + e there with the sums their scales need, the second writes the bits
  and leaves the new residual.  Exact top-k: a threshold from a strided sample, an exact count in
  the pass that forms a, one collecting pass and an exact resolution of the ~1.1k candidates
  (a radix select over the magnitude bits when the sample's threshold fails).
* **Bit fields** — LSB-first fixed-width packing for every width 1..64 (groups of 8 fields are
  whole bytes, so parts pack in parallel) and MSB-first Elias-ω/fixed record streams.
* **Random k-subsets** — :func:`random_subset`: blockwise (hypergeometric block counts, then
  Floyd's algorithm on an 8 KiB bitmap per block), exactly uniform, ascending, any density.
* **Buffers** — :func:`empty` returns large tensors backed by an anonymous mapping advised for
  transparent huge pages (``MADV_HUGEPAGE``, scoped to that buffer only; nothing machine-wide is
  changed), so filling a fresh 100 MB output faults 50 huge pages instead of 25,000 small ones.

Every kernel runs on CPU NumPy views of contiguous tensors; compressors keep a plain torch path
(their ``reference``) for other devices and for the tests, and the tests check that both give
the same bytes.  Parallel kernels split the work into fixed-size parts, so results (float64 sums
included) do not depend on the thread count; inputs under :data:`SERIAL_MAX` elements run on
the calling thread.  numba compiles each kernel on first use and caches it on disk.
"""

from __future__ import annotations

import collections
import math
import mmap
import os
import threading
import weakref
from typing import Any

import numpy as np
import torch

#: The kernel switch: ``GCBENCH_KERNELS=torch`` runs every compressor on its plain torch path on
#: the CPU — the path a CUDA device takes — so that path is tested where no GPU is lent;
#: ``auto`` (the default) uses the numba kernels where they apply.
KERNEL_MODES = ("auto", "torch")


def kernel_mode() -> str:
    """The kernel switch's value (``auto`` or ``torch``); anything else is refused by the CLI."""
    return os.environ.get("GCBENCH_KERNELS", "auto").strip().lower() or "auto"


try:
    if kernel_mode() == "torch":
        raise ImportError("GCBENCH_KERNELS=torch: the torch path everywhere")
    import numba
    from numba import njit, prange

    NUMBA = True
except Exception:  # numba missing or broken, or the torch path asked for: compressors use their torch paths
    NUMBA = False
    prange = range

    def njit(*args: Any, **kwargs: Any) -> Any:  # type: ignore[no-redef]
        """Stand-in decorator: the kernels stay importable (and unused) without numba."""
        if args and callable(args[0]):
            return args[0]
        return lambda f: f


U64 = np.uint64
GAMMA = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment (odd, ≈ 2^64/φ)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1
_TWO_M24 = np.float32(2.0**-24)

PART = 1 << 16  # elements per parallel part: fixed, so float sums do not depend on the thread count
SUB = 1024  # elements per inner block: the uniforms and codes of one block stay in L1


# ----------------------------------------------------------------------------- infrastructure


def available() -> bool:
    """Whether the numba kernels can run in this process."""
    return NUMBA


def cpu_fast(*tensors: torch.Tensor) -> bool:
    """True when every tensor is on the CPU and the numba kernels are available."""
    return NUMBA and all(t.device.type == "cpu" for t in tensors)


SERIAL_MAX = 1 << 20  # inputs below this run on the calling thread alone


def set_threads(size: int | None = None) -> None:
    """Use as many numba threads as torch does (``torch.set_num_threads`` is the one knob), or
    one thread for an input of fewer than :data:`SERIAL_MAX` elements.

    Waking worker threads costs microseconds on an idle machine, but on these shared 2-core
    machines some processes paid 8 ms per parallel region (sleeping OpenMP workers waiting for a
    busy core; torch's own parallel copy paid the same), which is 10–20× the whole one-thread
    compression of a 1M-element tensor (0.4–0.8 ms).  Below 2^20 elements the second thread
    would save at most a fraction of a millisecond, so small tensors never risk the stall.
    """
    if NUMBA:
        n = 1 if size is not None and size < SERIAL_MAX else max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
        if numba.get_num_threads() != n:
            numba.set_num_threads(n)


def flat_f32(t: torch.Tensor) -> np.ndarray:
    """Contiguous flat float32 NumPy view of a CPU tensor (copied only if needed)."""
    return t.detach().reshape(-1).to(torch.float32).contiguous().numpy()


def _nparts(n: int) -> int:
    return max(1, (n + PART - 1) // PART)


# ----------------------------------------------------------------------------- buffers

_HUGE = 2 << 20  # x86-64 transparent huge page size
_HUGE_MIN = 8 << 20  # below this, malloc's heap serves allocations without fresh page faults

#: Freed output mappings kept for reuse by the next buffer of the same size (bytes, entries);
#: POOL_BYTES = 0 turns the reuse off.  Sixteen entries: with four, the four 9 MB outputs of
#: decoding ResNet-50's largest convolutions evicted the whole-step buffer of the compress before,
#: so every compress mapped and faulted 100 MB afresh (the identity compressor at 8x a copy in the
#: cnn suite instead of 1.2x).
POOL_BYTES = 512 << 20
POOL_ENTRIES = 16
_returned: collections.deque[tuple[int, mmap.mmap]] = collections.deque()  # filled by finalizers
_pool: list[tuple[int, mmap.mmap]] = []
_pool_lock = threading.Lock()


def _huge_ok(nbytes: int) -> bool:
    return nbytes >= _HUGE_MIN and hasattr(mmap, "MADV_HUGEPAGE") and os.name == "posix"


def _recycle(size: int, mm: mmap.mmap) -> None:
    """Finalizer of a buffer's array: hand its mapping back (no lock: it may run inside any
    allocation, in any thread; ``deque.append`` is atomic)."""
    _returned.append((size, mm))


def _take_mapping(size: int) -> mmap.mmap | None:
    """A freed mapping of exactly ``size`` bytes, if one is pooled (the pool is trimmed here)."""
    with _pool_lock:
        while _returned:
            _pool.append(_returned.popleft())
        total = sum(sz for sz, _ in _pool)
        while _pool and (len(_pool) > POOL_ENTRIES or total > POOL_BYTES):
            total -= _pool.pop(0)[0]  # the oldest goes; it is unmapped when collected
        for i in range(len(_pool) - 1, -1, -1):
            if _pool[i][0] == size:
                return _pool.pop(i)[1]
    return None


def _buffer(nbytes: int) -> tuple[torch.Tensor, bool]:
    """(uint8 tensor of ``nbytes`` on huge pages, whether its memory was used before)."""
    size = nbytes + _HUGE
    mm = _take_mapping(size) if POOL_BYTES > 0 else None
    reused = mm is not None
    if mm is None:
        mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(mm, dtype=np.uint8)  # the array (and every view of it) keeps ``mm`` alive
    off = (-raw.ctypes.data) % _HUGE
    if not reused:
        try:
            mm.madvise(mmap.MADV_HUGEPAGE, off, nbytes)
        except (OSError, ValueError):  # pragma: no cover - no THP: small pages, still correct
            pass
    if POOL_BYTES > 0:
        weakref.finalize(raw, _recycle, size, mm).atexit = False
    return torch.from_numpy(raw[off : off + nbytes]), reused


def empty(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A new flat CPU tensor of ``n`` elements whose pages are cheap to fault in.

    Large buffers come from their own anonymous mapping, aligned to 2 MiB and advised
    ``MADV_HUGEPAGE`` (a per-buffer hint that the machine's THP mode "madvise" honours): the
    first write faults 2 MiB at a time (a fresh 100 MB output: 6 ms here against 22–28 ms with
    4 KiB pages).  When the tensor (and every view of it) is freed, the mapping goes to a small
    pool (:data:`POOL_BYTES`, :data:`POOL_ENTRIES`) and the next buffer of the same size reuses
    it without faulting again — a caching allocator for these outputs only: a buffer is reused
    only after its last reference is gone, so nothing a caller holds is ever overwritten.
    Small buffers, and systems without the advice, use ``torch.empty``.
    """
    nbytes = int(n) * dtype.itemsize
    if not _huge_ok(nbytes):
        return torch.empty(int(n), dtype=dtype)
    return _buffer(nbytes)[0].view(dtype)


def zeros(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A zero-filled flat tensor: a fresh mapping reads as zero, a reused one is cleared; small
    ones are zeroed by the C allocator on this thread (``torch.zeros`` may start a parallel fill)."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    nbytes = int(n) * itemsize
    if not _huge_ok(nbytes):
        return torch.from_numpy(np.zeros(nbytes, np.uint8)).view(dtype)
    buf, reused = _buffer(nbytes)
    if reused:
        buf.zero_()
    return buf.view(dtype)


def empty_maybe_zero(n: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, bool]:
    """:func:`zeros` without the clearing: a new flat tensor and whether it already reads as zero.

    False only for a reused pooled mapping (it holds an earlier, freed output): a kernel that
    writes every element anyway clears it part by part, while the part is in cache, instead of
    paying a separate pass.  (``zeros`` clears with a torch fill, whose OpenMP workers keep
    spinning afterwards against the next kernel's threads on a 2-core machine: the sparse decode
    scatter right after it took 17 ms instead of 9.5–12.5.)  A fresh mapping, or a small buffer
    from ``np.zeros``, reads as zero.
    """
    itemsize = torch.empty(0, dtype=dtype).element_size()
    nbytes = int(n) * itemsize
    if not _huge_ok(nbytes):
        return torch.from_numpy(np.zeros(nbytes, np.uint8)).view(dtype), True
    buf, reused = _buffer(nbytes)
    return buf.view(dtype), not reused


def fused_ef_ok(x: torch.Tensor) -> bool:
    """Whether a compressor's fused CPU error-feedback path applies to ``x``."""
    return x.is_floating_point() and x.numel() > 0 and cpu_fast(x)


# ----------------------------------------------------------------------------- random numbers
#
# Kernel-writing rule used throughout: parallel drivers slice the arrays per part and call
# serial functions whose loops index those slices with ``range`` counters from 0.  Numba then
# knows the indices are non-negative and contiguous, and LLVM vectorises the loops (the same
# loops indexed as ``x[lo + j]`` inside a ``prange`` body ran 4–10× slower here).


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


@njit(parallel=True, cache=True)
def _rand24_kernel(key, start, out):  # pragma: no cover - compiled
    n = out.size
    for p in prange((n + PART - 1) // PART):
        lo = p * PART
        hi = min(n, lo + PART)
        _fill_rand24(key, start + lo, out[lo:hi], hi - lo)


def rand24(seed: int, n: int, start: int = 0) -> np.ndarray:
    """Numbers ``start .. start+n-1`` of stream ``seed`` as uint32 in [0, 2^24) (numba kernel)."""
    out = np.empty(int(n), np.uint32)
    if n:
        set_threads(n)
        _rand24_kernel(key_of(seed), np.int64(start), out)
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
    z = torch.arange(start + 1, start + n + 1, dtype=torch.int64, device=device)
    z = z * _signed(int(GAMMA)) + _signed(int(key_of(seed)))  # int64 multiply wraps like uint64
    z = (z ^ _lshr(z, 30)) * _signed(int(MIX1))
    z = (z ^ _lshr(z, 27)) * _signed(int(MIX2))
    z = z ^ _lshr(z, 31)
    return _lshr(z, 40)


def uniforms(seed: int, n: int, device: torch.device | str = "cpu", start: int = 0) -> torch.Tensor:
    """float32 uniforms in [0, 1) on the 2^-24 grid: number ``start + j`` of stream ``seed``.

    The torch paths of the stochastic compressors draw here, so they see exactly the numbers
    the fused kernels draw inline.
    """
    if torch.device(device).type == "cpu" and NUMBA:
        return torch.from_numpy(rand24(seed, n, start).astype(np.float32) * _TWO_M24)
    return rand24_torch(seed, n, device, start).to(torch.float32) * 2.0**-24


# ----------------------------------------------------------------------------- bit positions

# The lowest set bit ``low`` of a nonzero uint64 sits at _DEBRUIJN_TABLE[(low · _DEBRUIJN) >> 58].
_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_TABLE = np.array(
    [0, 1, 48, 2, 57, 49, 28, 3, 61, 58, 50, 42, 38, 29, 17, 4, 62, 55, 59, 36, 53, 51, 43, 22, 45, 39, 33, 30, 24, 18, 12, 5,
     63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11, 46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9, 13, 8, 7, 6],
    np.int64,
)  # fmt: skip


# ----------------------------------------------------------------------------- bit fields


@njit(cache=True)
def _pack_le(fields, m, width, out, words):  # pragma: no cover - compiled
    """fields[:m] (each < 2^width, width ≤ 8) LSB-first into out[:ceil(m·width/8)].

    A group of 8 fields is exactly ``width`` bytes.  Stage 1 assembles every group in a uint64
    (``words``: scratch of ≥ m/8 entries); stage 2 stores each word as 8 bytes at the group's
    offset — overlapping the next group's bytes, which that group then rewrites — and the
    groups near the end exactly.  (The loop shapes are the ones measured fastest here: 0.24
    ns per field against 0.55 for a one-stage loop.)
    """
    full = m // 8
    for g in range(full):
        acc = np.uint64(0)
        for t in range(8):
            acc |= np.uint64(fields[8 * g + t]) << np.uint64(t * width)
        words[g] = acc
    # 8-byte stores only where they end inside this call's bytes: the next call's (maybe another
    # thread's) bytes are never touched
    fast = min(full, max(0, (full * width - 8) // width + 1))
    for g in range(fast):
        o = out[g * width : g * width + 8]
        a = words[g]
        for b in range(8):
            o[b] = np.uint8((a >> np.uint64(8 * b)) & np.uint64(0xFF))
    for g in range(fast, full):
        o = out[g * width : g * width + width]
        a = words[g]
        for b in range(width):
            o[b] = np.uint8((a >> np.uint64(8 * b)) & np.uint64(0xFF))
    rest = m - full * 8
    if rest:
        s = fields[full * 8 : m]
        acc = np.uint64(0)
        for t in range(rest):
            acc |= np.uint64(s[t]) << np.uint64(t * width)
        o = out[full * width : full * width + (rest * width + 7) // 8]
        for b in range(o.size):
            o[b] = np.uint8((acc >> np.uint64(8 * b)) & np.uint64(0xFF))


@njit(cache=True)
def _unpack_le(data, m, width, out, words):  # pragma: no cover - compiled
    """Inverse of :func:`_pack_le`: m fields (width ≤ 8) from ``data`` into out[:m].

    Stage 1 reads each group's bytes as one 8-byte little-endian word (bytes past the group are
    shifted out in stage 2); groups whose 8-byte read would leave ``data`` read byte by byte.
    """
    mask = (np.uint64(1) << np.uint64(width)) - np.uint64(1)
    full = m // 8
    safe = min(full, max(0, (data.size - 8) // width + 1))  # groups whose 8-byte read stays inside data
    for g in range(safe):
        d = data[g * width : g * width + 8]
        acc = np.uint64(0)
        for b in range(8):
            acc |= np.uint64(d[b]) << np.uint64(8 * b)
        words[g] = acc
    for g in range(safe):
        a = words[g]
        for t in range(8):
            out[8 * g + t] = (a >> np.uint64(t * width)) & mask
    for g in range(safe, (m + 7) // 8):
        cnt = min(8, m - g * 8)
        d = data[g * width : g * width + (cnt * width + 7) // 8]
        acc = np.uint64(0)
        for b in range(d.size):
            acc |= np.uint64(d[b]) << np.uint64(8 * b)
        o = out[g * 8 : g * 8 + cnt]
        for t in range(cnt):
            o[t] = (acc >> np.uint64(t * width)) & mask


@njit(cache=True)
def _pack_wide(fields, m, width, out):  # pragma: no cover - compiled
    """fields[:m] of ``width`` ≤ 64 bits LSB-first into out (pieces of ≤ 32 bits: no overflow)."""
    acc = np.uint64(0)
    nb = 0
    q = 0
    for i in range(m):
        v = np.uint64(fields[i])
        left = width
        while left > 0:
            take = 32 if left > 32 else left
            acc |= (v & ((np.uint64(1) << np.uint64(take)) - np.uint64(1))) << np.uint64(nb)
            v = v >> np.uint64(take)
            nb += take
            left -= take
            while nb >= 8:
                out[q] = np.uint8(acc & np.uint64(0xFF))
                q += 1
                acc >>= np.uint64(8)
                nb -= 8
    if nb > 0:
        out[q] = np.uint8(acc & np.uint64(0xFF))


@njit(cache=True)
def _unpack_wide(data, m, width, out):  # pragma: no cover - compiled
    """Inverse of :func:`_pack_wide` into out[:m] (uint64 bit patterns)."""
    acc = np.uint64(0)
    nb = 0
    q = 0
    for i in range(m):
        v = np.uint64(0)
        got = 0
        while got < width:
            take = width - got if width - got < 32 else 32
            while nb < take:
                acc |= np.uint64(data[q]) << np.uint64(nb)
                q += 1
                nb += 8
            v |= (acc & ((np.uint64(1) << np.uint64(take)) - np.uint64(1))) << np.uint64(got)
            acc >>= np.uint64(take)
            nb -= take
            got += take
        out[i] = v


@njit(cache=True)
def _mask_fields(values, width, out):  # pragma: no cover - compiled
    """out = values mod 2^width as uint64 (bit patterns; negative int64 wrap like uint64)."""
    mask = np.uint64(_MASK64) if width >= 64 else (np.uint64(1) << np.uint64(width)) - np.uint64(1)
    for i in range(values.size):
        out[i] = np.uint64(values[i]) & mask


@njit(cache=True)
def _pack_part(values, lo, hi, width, out):  # pragma: no cover - compiled
    """Pack fields [lo, hi) (lo a multiple of 8) into their bytes of ``out``."""
    f = np.empty(hi - lo, np.uint64)
    _mask_fields(values[lo:hi], width, f)
    dst = out[(lo // 8) * width : min(out.size, (hi // 8 + 1) * width)]
    if width <= 8:
        _pack_le(f, hi - lo, width, dst, np.empty((hi - lo) // 8 + 1, np.uint64))
    else:
        _pack_wide(f, hi - lo, width, dst)


@njit(cache=True)
def _unpack_part(data, lo, hi, width, out):  # pragma: no cover - compiled
    src = data[(lo // 8) * width : min(data.size, (hi // 8 + 1) * width)]
    o = out[lo:hi].view(np.uint64)
    if width <= 8:
        _unpack_le(src, hi - lo, width, o, np.empty((hi - lo) // 8 + 1, np.uint64))
    else:
        _unpack_wide(src, hi - lo, width, o)


@njit(parallel=True, cache=True)
def _pack_kernel(values, width, out):  # pragma: no cover - compiled
    n = values.size
    for p in prange((n + PART - 1) // PART):
        _pack_part(values, p * PART, min(n, (p + 1) * PART), width, out)


@njit(cache=True)
def _pack_serial(values, width, out):  # pragma: no cover - compiled
    n = values.size
    for p in range((n + PART - 1) // PART):
        _pack_part(values, p * PART, min(n, (p + 1) * PART), width, out)


@njit(parallel=True, cache=True)
def _unpack_kernel(data, width, out):  # pragma: no cover - compiled
    n = out.size
    for p in prange((n + PART - 1) // PART):
        _unpack_part(data, p * PART, min(n, (p + 1) * PART), width, out)


@njit(cache=True)
def _unpack_serial(data, width, out):  # pragma: no cover - compiled
    n = out.size
    for p in range((n + PART - 1) // PART):
        _unpack_part(data, p * PART, min(n, (p + 1) * PART), width, out)


def pack_fields(values: np.ndarray, width: int) -> np.ndarray:
    """Pack fields LSB-first, ``width`` (1..64) bits each, each value taken modulo 2^width.

    Small inputs (sparse index lists, small tensors) use a serial twin of the parallel kernel,
    so they never compile or wake a parallel region.
    """
    n = values.size
    out = np.empty((n * width + 7) // 8, np.uint8)
    if n:
        if values.dtype == np.bool_:
            values = values.view(np.uint8)
        if n < SERIAL_MAX:
            _pack_serial(values, np.int64(width), out)
        else:
            set_threads(n)
            _pack_kernel(values, np.int64(width), out)
    return out


def unpack_fields(data: np.ndarray, width: int, count: int) -> np.ndarray:
    """Inverse of :func:`pack_fields`: ``count`` fields as int64 (``data`` must be long enough)."""
    out = np.empty(int(count), np.int64)
    if count:
        if count < SERIAL_MAX:
            _unpack_serial(data, np.int64(width), out)
        else:
            set_threads(count)
            _unpack_kernel(data, np.int64(width), out)
    return out


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


@njit(parallel=True, cache=True)
def _absmax_kernel(xb, out):  # pragma: no cover - compiled
    n = xb.size
    for p in prange(out.size):
        out[p] = _absmax_bits(xb[p * PART : min(n, (p + 1) * PART)])


@njit(parallel=True, cache=True)
def _sumsq_kernel(x, out):  # pragma: no cover - compiled
    n = x.size
    for p in prange(out.size):
        out[p] = _sumsq(x[p * PART : min(n, (p + 1) * PART)])


@njit(parallel=True, cache=True)
def _stats_kernel(x, shift, out, mx):  # pragma: no cover - compiled
    """Per part: shifted Σ and Σ² (float64) and the max sign-cleared bit pattern."""
    n = x.size
    xb = x.view(np.uint32)
    for p in prange(mx.size):
        lo = p * PART
        hi = min(n, lo + PART)
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
    set_threads(x.size)
    parts = np.empty(_nparts(x.size), np.uint32)
    _absmax_kernel(x.view(np.uint32), parts)
    return _bits_to_f32(int(parts.max()))


def l2norm(x: np.ndarray) -> float:
    """‖x‖₂ accumulated in float64 (parts of fixed size: the same value on any thread count)."""
    if x.size == 0:
        return 0.0
    set_threads(x.size)
    parts = np.empty(_nparts(x.size), np.float64)
    _sumsq_kernel(x, parts)
    return math.sqrt(float(parts.sum()))


def std_and_absmax(x: np.ndarray) -> tuple[float, float]:
    """(population standard deviation in float64, exact max|x|) of a float32 array in one pass.

    The sums are shifted by x[0] so a large mean does not cancel the variance away.
    """
    n = x.size
    if n == 0:
        return 0.0, 0.0
    set_threads(n)
    shift = float(x[0]) if math.isfinite(float(x[0])) else 0.0
    parts = np.empty((_nparts(n), 2), np.float64)
    mx = np.empty(_nparts(n), np.uint32)
    _stats_kernel(x, shift, parts, mx)
    s1, s2 = float(parts[:, 0].sum()), float(parts[:, 1].sum())
    var = max(0.0, s2 / n - (s1 / n) ** 2)
    return math.sqrt(var), _bits_to_f32(int(mx.max()))


# ----------------------------------------------------------------------------- sign / 1-bit


@njit(cache=True)
def _sign_bits(a, out):  # pragma: no cover - compiled
    """Bits (a >= 0) of a (NaN gives 0) LSB-first into out[:ceil(m/8)], 64 per register."""
    m = a.size
    full = m // 64
    for g in range(full):
        s = a[g * 64 : g * 64 + 64]
        acc = np.uint64(0)
        for t in range(64):
            acc |= np.uint64(s[t] >= 0) << np.uint64(t)
        o = out[g * 8 : g * 8 + 8]
        for b in range(8):
            o[b] = np.uint8((acc >> np.uint64(8 * b)) & np.uint64(0xFF))
    if full * 64 < m:
        s = a[full * 64 : m]
        o = out[full * 8 : (m + 7) // 8]
        for b in range(o.size):
            o[b] = 0
        for t in range(s.size):
            if s[t] >= 0:
                o[t >> 3] |= np.uint8(1 << (t & 7))


@njit(cache=True)
def _any_nonzero(a):  # pragma: no cover - compiled
    nz = np.uint8(0)
    for i in range(a.size):
        nz |= np.uint8(a[i] != 0)
    return nz


@njit(cache=True)
def _bits_to_values(bits, pos, neg, out):  # pragma: no cover - compiled
    """out[i] = pos where bit i is set, else neg."""
    m = out.size
    full = m // 64
    for g in range(full):
        d = bits[g * 8 : g * 8 + 8]
        acc = np.uint64(0)
        for b in range(8):
            acc |= np.uint64(d[b]) << np.uint64(8 * b)
        o = out[g * 64 : g * 64 + 64]
        for t in range(64):
            o[t] = pos if (acc >> np.uint64(t)) & np.uint64(1) else neg
    if full * 64 < m:
        d = bits[full * 8 : (m + 7) // 8]
        o = out[full * 64 : m]
        for t in range(o.size):
            o[t] = pos if (d[t >> 3] >> (t & 7)) & 1 else neg


@njit(parallel=True, cache=True)
def _sign_pack_kernel(x, out, nz):  # pragma: no cover - compiled
    n = x.size
    for p in prange(nz.size):
        lo = p * PART
        hi = min(n, lo + PART)
        _sign_bits(x[lo:hi], out[lo // 8 : (hi + 7) // 8])
        nz[p] = _any_nonzero(x[lo:hi])


def sign_pack(x: np.ndarray, out: np.ndarray) -> bool:
    """Write the bits ``x >= 0`` of float32 ``x`` into ``out`` (ceil(n/8) bytes, LSB first).

    Returns whether any element is nonzero (signSGD's all-zero flag), from the same pass.
    """
    if x.size == 0:
        return False
    set_threads(x.size)
    nz = np.empty(_nparts(x.size), np.uint8)
    _sign_pack_kernel(x, out, nz)
    return bool(nz.any())


@njit(parallel=True, cache=True)
def _sign_unpack_kernel(bits, pos, neg, out):  # pragma: no cover - compiled
    n = out.size
    for p in prange((n + PART - 1) // PART):
        lo = p * PART
        hi = min(n, lo + PART)
        _bits_to_values(bits[lo // 8 : (hi + 7) // 8], pos, neg, out[lo:hi])


def sign_unpack(bits: np.ndarray, pos: float, neg: float, out: np.ndarray) -> None:
    """out[i] = pos where bit i is set else neg (float32 ``out``)."""
    if out.size:
        set_threads(out.size)
        _sign_unpack_kernel(bits, np.float32(pos), np.float32(neg), out)


@njit(cache=True, fastmath={"reassoc"})
def _add_abs(x, e, has_e):  # pragma: no cover - compiled
    """e <- a = x + e (or x); returns Σ|a| in float64."""
    acc = 0.0
    if has_e:
        for i in range(x.size):
            a = x[i] + e[i]
            e[i] = a
            acc += abs(np.float64(a))
    else:
        for i in range(x.size):
            a = x[i]
            e[i] = a
            acc += abs(np.float64(a))
    return acc


@njit(cache=True)
def _sub_sign_scale(e, scale):  # pragma: no cover - compiled
    """e <- a − (scale if a >= 0 else −scale), float32."""
    neg = -scale
    for i in range(e.size):
        a = e[i]
        e[i] = a - (scale if a >= 0 else neg)


@njit(parallel=True, cache=True)
def _ef_add_abs_kernel(x, e, has_e, parts):  # pragma: no cover - compiled
    n = x.size
    for p in prange(parts.size):
        lo = p * PART
        hi = min(n, lo + PART)
        parts[p] = _add_abs(x[lo:hi], e[lo:hi], has_e)


@njit(parallel=True, cache=True)
def _ef_sign_kernel(e, scale, out):  # pragma: no cover - compiled
    n = e.size
    for p in prange((n + PART - 1) // PART):
        lo = p * PART
        hi = min(n, lo + PART)
        _sign_bits(e[lo:hi], out[lo // 8 : (hi + 7) // 8])
        _sub_sign_scale(e[lo:hi], scale)


def ef_sign_form(x: np.ndarray, e: np.ndarray, has_e: bool) -> np.float32:
    """Pass 1 of EF-signSGD: a = x + e written into ``e`` (``has_e`` False: a = x), with ‖a‖₁ in
    the same pass.  Returns the float32 scale ‖a‖₁/d that is sent (pass 2: :func:`ef_sign_apply`)."""
    set_threads(x.size)
    parts = np.empty(_nparts(x.size), np.float64)
    _ef_add_abs_kernel(x, e, bool(has_e), parts)
    return np.float32(float(parts.sum()) / x.size)


def ef_sign_apply(e: np.ndarray, scale: np.float32, out: np.ndarray) -> None:
    """Pass 2 of EF-signSGD on ``e`` holding a: the bits a >= 0 into ``out``, then e <- a − sign(a)·scale."""
    set_threads(e.size)
    _ef_sign_kernel(e, np.float32(scale), out)


# 1-bit SGD: the flat tensor is a rows × cols matrix (row-major); each element's group is its
# column (``by_row`` False) or its row.  One group for the whole tensor is one long row.


@njit(cache=True, fastmath={"reassoc"})
def _add_col_sums(x, e, has_e, sa, sp, cp):  # pragma: no cover - compiled
    """e <- a = x (+ e); per position j (a column): sa += a, sp += a·[a ≥ 0], cp += [a ≥ 0]."""
    for j in range(x.size):
        a = x[j] + e[j] if has_e else x[j]
        e[j] = a
        a64 = np.float64(a)
        pos = a >= 0
        sa[j] += a64
        sp[j] += a64 if pos else 0.0
        cp[j] += 1.0 if pos else 0.0


@njit(cache=True, fastmath={"reassoc"})
def _add_row_sums(x, e, has_e):  # pragma: no cover - compiled
    """e <- a = x (+ e); returns (Σ a, Σ a·[a ≥ 0], #[a ≥ 0]) in float64."""
    sa = 0.0
    sp = 0.0
    cp = 0.0
    for j in range(x.size):
        a = x[j] + e[j] if has_e else x[j]
        e[j] = a
        a64 = np.float64(a)
        pos = a >= 0
        sa += a64
        sp += a64 if pos else 0.0
        cp += 1.0 if pos else 0.0
    return sa, sp, cp


@njit(cache=True, fastmath={"reassoc"})
def _add_col_sums4(x0, x1, x2, x3, e0, e1, e2, e3, has_e, sa, sp, cp):  # pragma: no cover - compiled
    """:func:`_add_col_sums` for four rows at once: the accumulators are read and written once
    per four elements (the column sums ran at half the speed of a copy one row at a time)."""
    for j in range(x0.size):
        a0 = x0[j] + e0[j] if has_e else x0[j]
        a1 = x1[j] + e1[j] if has_e else x1[j]
        a2 = x2[j] + e2[j] if has_e else x2[j]
        a3 = x3[j] + e3[j] if has_e else x3[j]
        e0[j] = a0
        e1[j] = a1
        e2[j] = a2
        e3[j] = a3
        b0 = np.float64(a0)
        b1 = np.float64(a1)
        b2 = np.float64(a2)
        b3 = np.float64(a3)
        sa[j] += (b0 + b1) + (b2 + b3)
        sp[j] += ((b0 if a0 >= 0 else 0.0) + (b1 if a1 >= 0 else 0.0)) + ((b2 if a2 >= 0 else 0.0) + (b3 if a3 >= 0 else 0.0))
        cp[j] += ((1.0 if a0 >= 0 else 0.0) + (1.0 if a1 >= 0 else 0.0)) + ((1.0 if a2 >= 0 else 0.0) + (1.0 if a3 >= 0 else 0.0))


@njit(parallel=True, cache=True)
def _onebit_colstats_kernel(x, e, has_e, cols, nchunks, sums):  # pragma: no cover - compiled
    """Column groups: chunk c (a fixed range of whole rows) accumulates sums[c, 0..2, :]."""
    rows = x.size // cols
    for c in prange(nchunks):
        r0 = rows * c // nchunks
        r1 = rows * (c + 1) // nchunks
        r = r0
        while r + 4 <= r1:
            lo = r * cols
            _add_col_sums4(
                x[lo : lo + cols], x[lo + cols : lo + 2 * cols], x[lo + 2 * cols : lo + 3 * cols], x[lo + 3 * cols : lo + 4 * cols],
                e[lo : lo + cols], e[lo + cols : lo + 2 * cols], e[lo + 2 * cols : lo + 3 * cols], e[lo + 3 * cols : lo + 4 * cols],
                has_e, sums[c, 0], sums[c, 1], sums[c, 2],
            )  # fmt: skip
            r += 4
        for rr in range(r, r1):
            lo = rr * cols
            _add_col_sums(x[lo : lo + cols], e[lo : lo + cols], has_e, sums[c, 0], sums[c, 1], sums[c, 2])


@njit(parallel=True, cache=True)
def _onebit_rowstats_kernel(x, e, has_e, cols, per_row, sums):  # pragma: no cover - compiled
    """Row groups: segment q = (row, piece of ≤ PART columns) writes sums[q, 0..2]."""
    rows = x.size // cols
    for q in prange(rows * per_row):
        r = q // per_row
        lo = r * cols + (q - r * per_row) * PART
        hi = min((r + 1) * cols, lo + PART)
        sa, sp, cp = _add_row_sums(x[lo:hi], e[lo:hi], has_e)
        sums[q, 0] = sa
        sums[q, 1] = sp
        sums[q, 2] = cp


@njit(cache=True)
def _sub_group_means(e, m0, m1):  # pragma: no cover - compiled
    """e[j] <- a − (m1[j] if a >= 0 else m0[j]) (per-column means of one row segment).

    Both means are loaded unconditionally: a select of two loads vectorises, a conditional
    load did not (4× slower here).
    """
    for j in range(e.size):
        a = e[j]
        v1 = m1[j]
        v0 = m0[j]
        e[j] = a - (v1 if a >= 0 else v0)


@njit(cache=True)
def _sub_row_mean(e, m0, m1):  # pragma: no cover - compiled
    for j in range(e.size):
        a = e[j]
        e[j] = a - (m1 if a >= 0 else m0)


@njit(cache=True)
def _expand_bits(bits, m, out):  # pragma: no cover - compiled
    """out[i] = bit i of ``bits`` (LSB first) as 0/1 bytes, i < m."""
    full = m // 8
    for g in range(full):
        b = np.uint32(bits[g])
        for t in range(8):
            out[8 * g + t] = np.uint8((b >> np.uint32(t)) & np.uint32(1))
    for i in range(full * 8, m):
        out[i] = np.uint8((bits[i >> 3] >> (i & 7)) & 1)


@njit(cache=True)
def _select_groups(msk, m0, m1, out):  # pragma: no cover - compiled
    for j in range(out.size):
        v1 = m1[j]
        v0 = m0[j]
        out[j] = v1 if msk[j] else v0


@njit(cache=True)
def _select_row(msk, m0, m1, out):  # pragma: no cover - compiled
    for j in range(out.size):
        out[j] = m1 if msk[j] else m0


@njit(parallel=True, cache=True)
def _onebit_apply_kernel(e, cols, by_row, mu0, mu1, out, decode):  # pragma: no cover - compiled
    """Per part: the bits (a >= 0) of e and e <- a − decoded; or, with ``decode``, e <- decoded
    from the bits in ``out`` (the receiver)."""
    n = e.size
    for p in prange((n + PART - 1) // PART):
        lo = p * PART
        hi = min(n, lo + PART)
        msk = np.empty(hi - lo if decode else 0, np.uint8)
        if decode:
            _expand_bits(out[lo // 8 : (hi + 7) // 8], hi - lo, msk)
        else:
            _sign_bits(e[lo:hi], out[lo // 8 : (hi + 7) // 8])
        i = lo
        while i < hi:
            r = i // cols
            c0 = i - r * cols
            end = min(hi, (r + 1) * cols)
            seg = e[i:end]
            if by_row and decode:
                _select_row(msk[i - lo : end - lo], mu0[r], mu1[r], seg)
            elif by_row:
                _sub_row_mean(seg, mu0[r], mu1[r])
            elif decode:
                _select_groups(msk[i - lo : end - lo], mu0[c0 : c0 + end - i], mu1[c0 : c0 + end - i], seg)
            else:
                _sub_group_means(seg, mu0[c0 : c0 + end - i], mu1[c0 : c0 + end - i])
            i = end


def _group_layout(n: int, cols: int, by_row: bool) -> tuple[int, bool, int]:
    """(cols, by_row, groups), a single group mapped to one long row (reduced in parallel)."""
    groups = n // cols if by_row else cols
    if groups == 1:
        return n, True, 1
    return cols, by_row, groups


def onebit_form(x: np.ndarray, e: np.ndarray, has_e: bool, cols: int, by_row: bool) -> tuple[np.ndarray, np.ndarray]:
    """Pass 1 of 1-bit SGD over the rows × cols matrix of flat ``x``: a = x + e written into ``e``
    (``has_e`` False: a = x), with each group's sums in the same pass.

    Each group (column, or row when ``by_row``) gets mu1 = mean of its a >= 0 and mu0 = mean of
    its a < 0 (0 when empty; float64 sums rounded to float32, as the torch path).  Returns
    (mu0, mu1) per group; pass 2 is :func:`onebit_apply`.
    """
    n = x.size
    cols, by_row, groups = _group_layout(n, cols, by_row)
    set_threads(n)
    if by_row:
        per_row = (cols + PART - 1) // PART
        seg = np.empty((groups * per_row, 3), np.float64)
        _onebit_rowstats_kernel(x, e, bool(has_e), cols, per_row, seg)
        tot = seg.reshape(groups, per_row, 3).sum(axis=1).T
    else:
        rows = n // cols
        # chunks of whole rows, a count fixed by the shape: the float64 sums do not depend on threads
        nchunks = max(1, min(64, rows, n // 4096))
        sums = np.zeros((nchunks, 3, cols), np.float64)
        _onebit_colstats_kernel(x, e, bool(has_e), cols, nchunks, sums)
        tot = sums.sum(axis=0)
    cnt_pos = tot[2]
    cnt_neg = (n // groups) - cnt_pos
    mu1 = np.where(cnt_pos > 0, tot[1] / np.maximum(cnt_pos, 1), 0.0).astype(np.float32)
    mu0 = np.where(cnt_neg > 0, (tot[0] - tot[1]) / np.maximum(cnt_neg, 1), 0.0).astype(np.float32)
    return mu0, mu1


def onebit_apply(e: np.ndarray, cols: int, by_row: bool, mu0: np.ndarray, mu1: np.ndarray, out: np.ndarray) -> None:
    """Pass 2 of 1-bit SGD on ``e`` holding a: the bits a >= 0 into ``out`` in flat order, then e <- a − decoded."""
    cols, by_row, _ = _group_layout(e.size, cols, by_row)
    set_threads(e.size)
    _onebit_apply_kernel(e, cols, by_row, mu0, mu1, out, False)


def onebit_decode(bits: np.ndarray, cols: int, by_row: bool, mu0: np.ndarray, mu1: np.ndarray, out: np.ndarray) -> None:
    """out[i] = mu1[g] where bit i is set else mu0[g], g the group of flat index i."""
    if out.size:
        cols, by_row, _ = _group_layout(out.size, cols, by_row)
        set_threads(out.size)
        _onebit_apply_kernel(out, cols, by_row, mu0, mu1, bits, True)


# ----------------------------------------------------------------------------- TernGrad


@njit(cache=True)
def _tern_codes(x, r, cb, s32, code):  # pragma: no cover - compiled
    """code[j] = 0, 1 (+) or 2 (−): xc = clamp(x, −cb, cb), kept when u < |xc|/s32 (float32)."""
    for j in range(x.size):
        xc = x[j]
        xc = -cb if xc < -cb else xc  # written out so that NaN stays NaN, as in torch.clamp
        xc = cb if xc > cb else xc
        keep = np.float32(r[j]) * _TWO_M24 < abs(xc) / s32
        sign = np.uint8(1) if xc >= 0 else np.uint8(2)
        code[j] = sign if keep else np.uint8(0)


@njit(parallel=True, cache=True)
def _terngrad_kernel(x, cb, s32, key, out):  # pragma: no cover - compiled
    n = x.size
    for p in prange((n + PART - 1) // PART):
        r = np.empty(SUB, np.uint32)
        code = np.empty(SUB, np.uint8)
        words = np.empty(SUB // 8 + 1, np.uint64)
        for lo in range(p * PART, min(n, (p + 1) * PART), SUB):
            m = min(SUB, n - lo)
            _fill_rand24(key, lo, r, m)
            _tern_codes(x[lo : lo + m], r, cb, s32, code)
            _pack_le(code, m, 2, out[lo // 4 : (lo + m + 3) // 4], words)


def terngrad_codes(x: np.ndarray, cb: float, s32: float, seed: int, out: np.ndarray) -> None:
    """TernGrad's 2-bit codes of float32 ``x`` (clip bound ``cb``, scaler ``s32`` > 0) into ``out``."""
    if x.size:
        set_threads(x.size)
        _terngrad_kernel(x, np.float32(cb), np.float32(s32), key_of(seed), out)


@njit(cache=True)
def _tern_values(codes, m, s32, out):  # pragma: no cover - compiled
    """out[:m] = s·t from 2-bit codes: t = (c & 1) − (c >> 1), so 0 → 0, 1 → +1, 2 → −1 (and the
    never-sent 3 → 0); 32 codes per 8-byte register."""
    full = m // 32
    for g in range(full):
        d = codes[g * 8 : g * 8 + 8]
        acc = np.uint64(0)
        for b in range(8):
            acc |= np.uint64(d[b]) << np.uint64(8 * b)
        o = out[g * 32 : g * 32 + 32]
        for t in range(32):
            c = np.int32((acc >> np.uint64(2 * t)) & np.uint64(3))
            o[t] = np.float32((c & 1) - (c >> 1)) * s32
    for i in range(full * 32, m):
        c = np.int32((codes[i >> 2] >> (2 * (i & 3))) & 3)
        out[i] = np.float32((c & 1) - (c >> 1)) * s32


@njit(parallel=True, cache=True)
def _terngrad_decode_kernel(codes, s32, out):  # pragma: no cover - compiled
    n = out.size
    for p in prange((n + PART - 1) // PART):
        lo = p * PART
        hi = min(n, lo + PART)
        _tern_values(codes[lo // 4 : (hi + 3) // 4], hi - lo, s32, out[lo:hi])


def terngrad_decode(codes: np.ndarray, s32: float, out: np.ndarray) -> None:
    """out = s·t for the packed 2-bit codes."""
    if out.size:
        set_threads(out.size)
        _terngrad_decode_kernel(codes, np.float32(s32), out)


# ----------------------------------------------------------------------------- QSGD


@njit(cache=True)
def _qsgd_segment(x, r, nb, sf, field):  # pragma: no cover - compiled
    """Fields of one bucket's elements with norm ``nb`` (the torch path's float32 arithmetic)."""
    for t in range(x.size):
        v = x[t]
        rr = (abs(v) * sf) / nb if nb > 0 else np.float32(0.0)
        rr = sf if rr > sf else rr
        fl = np.floor(rr)
        lv = fl + (np.float32(1.0) if np.float32(r[t]) * _TWO_M24 < rr - fl else np.float32(0.0))
        lvi = np.uint32(lv) if lv == lv else np.uint32(0)  # a NaN input sends level 0
        field[t] = (lvi << np.uint32(1)) | np.uint32(v < 0)


@njit(cache=True)
def _qsgd_fields(x, start, bucket, norms, sf, r, field):  # pragma: no cover - compiled
    """field[j] = (level << 1) | (x < 0) for x[j] at flat index start + j.

    r = s·|x|/n (0 when n = 0), clamped to s; level = ⌊r⌋ + [u < r − ⌊r⌋].
    """
    m = x.size
    j = 0
    while j < m:
        b = (start + j) // bucket
        end = min(m, (b + 1) * bucket - start)
        _qsgd_segment(x[j:end], r[j:end], norms[b], sf, field[j:end])
        j = end


@njit(cache=True)
def _bucket_norm(x, xb, inf_norm):  # pragma: no cover - compiled
    if inf_norm:
        return np.array([_absmax_bits(xb)], np.uint32).view(np.float32)[0]
    return np.float32(math.sqrt(_sumsq(x)))


@njit(parallel=True, cache=True)
def _qsgd_kernel(x, bucket, part, norms, own_norms, inf_norm, sf, key, width, out):  # pragma: no cover - compiled
    """QSGD fixed-width fields, packed.  With ``own_norms`` each part (whole buckets) first
    computes its buckets' norms while they are in cache; otherwise ``norms`` is given."""
    n = x.size
    xb = x.view(np.uint32)
    for p in prange((n + part - 1) // part):
        lo0 = p * part
        hi0 = min(n, lo0 + part)
        if own_norms:
            for b in range(lo0 // bucket, (hi0 + bucket - 1) // bucket):
                b0 = b * bucket
                b1 = min(n, b0 + bucket)
                norms[b] = _bucket_norm(x[b0:b1], xb[b0:b1], inf_norm)
        r = np.empty(SUB, np.uint32)
        field = np.empty(SUB, np.uint32)
        words = np.empty(SUB // 8 + 1, np.uint64)
        for lo in range(lo0, hi0, SUB):
            m = min(SUB, hi0 - lo)
            _fill_rand24(key, lo, r, m)
            _qsgd_fields(x[lo : lo + m], lo, bucket, norms, sf, r, field)
            dst = out[(lo // 8) * width : min(out.size, ((lo + m) // 8 + 1) * width)]
            if width <= 8:
                _pack_le(field, m, width, dst, words)
            else:
                _pack_wide(field, m, width, dst)


@njit(parallel=True, cache=True)
def _bucket_norm_kernel(x, bucket, inf_norm, partial, per):  # pragma: no cover - compiled
    """Buckets larger than a part: partial[q] = max-bits or Σx² of piece q (``per`` per bucket)."""
    n = x.size
    xb = x.view(np.uint32)
    for q in prange(partial.size):
        b = q // per
        lo = b * bucket + (q - b * per) * PART
        hi = min(min(n, (b + 1) * bucket), lo + PART)
        if lo >= hi:
            partial[q] = 0.0
        elif inf_norm:
            partial[q] = np.float64(_absmax_bits(xb[lo:hi]))
        else:
            partial[q] = _sumsq(x[lo:hi])


def qsgd_plan(n: int, bucket: int) -> tuple[int, bool]:
    """(part size, whether each part computes its own bucket norms) for :func:`qsgd_encode`.

    Parts are whole buckets and a multiple of 8 elements (so each part owns whole bytes of
    the packed fields) when a bucket fits a part; larger buckets get their norms first.
    """
    if bucket <= PART:
        unit = bucket * 8 // math.gcd(bucket, 8)
        return unit * max(1, PART // unit), True
    return PART, False


def qsgd_norms(x: np.ndarray, bucket: int, inf_norm: bool) -> np.ndarray:
    """float32 bucket norms (max|x| exactly, or sqrt of the float64 Σx²) in parallel pieces."""
    n = x.size
    nb = -(-n // bucket)
    per = -(-bucket // PART)
    partial = np.empty(nb * per, np.float64)
    set_threads(n)
    _bucket_norm_kernel(x, np.int64(bucket), bool(inf_norm), partial, np.int64(per))
    pieces = partial.reshape(nb, per)
    if inf_norm:
        return pieces.max(axis=1).astype(np.uint32).view(np.float32)
    return np.sqrt(pieces.sum(axis=1)).astype(np.float32)


def qsgd_encode(x: np.ndarray, bucket: int, inf_norm: bool, s: int, seed: int, width: int, norms: np.ndarray, out: np.ndarray) -> None:
    """Fill ``norms`` (float32 per bucket) and the packed fixed-width QSGD fields ``out``."""
    if x.size == 0:
        return
    part, own = qsgd_plan(x.size, bucket)
    if not own:
        norms[:] = qsgd_norms(x, bucket, inf_norm)
    set_threads(x.size)
    _qsgd_kernel(x, np.int64(bucket), np.int64(part), norms, own, bool(inf_norm), np.float32(s), key_of(seed), np.int64(width), out)


@njit(parallel=True, cache=True)
def _qsgd_levels_kernel(x, bucket, norms, sf, key, field):  # pragma: no cover - compiled
    n = x.size
    for p in prange((n + PART - 1) // PART):
        r = np.empty(SUB, np.uint32)
        for lo in range(p * PART, min(n, (p + 1) * PART), SUB):
            m = min(SUB, n - lo)
            _fill_rand24(key, lo, r, m)
            _qsgd_fields(x[lo : lo + m], lo, bucket, norms, sf, r, field[lo : lo + m])


def qsgd_fields(x: np.ndarray, bucket: int, norms: np.ndarray, s: int, seed: int) -> np.ndarray:
    """Unpacked fields (level << 1) | sign, uint32 — the same draws as :func:`qsgd_encode`."""
    field = np.empty(x.size, np.uint32)
    if x.size:
        set_threads(x.size)
        _qsgd_levels_kernel(x, np.int64(bucket), norms, np.float32(s), key_of(seed), field)
    return field


@njit(cache=True)
def _qsgd_value_segment(field, nb, sf, out):  # pragma: no cover - compiled
    for t in range(out.size):
        f = field[t]
        v = (nb * np.float32(f >> np.uint32(1))) / sf
        out[t] = -v if f & np.uint32(1) else v


@njit(cache=True)
def _qsgd_values(field, start, bucket, norms, sf, out):  # pragma: no cover - compiled
    """out[j] = ±(n_b·level)/s for field j at flat index start + j."""
    m = out.size
    j = 0
    while j < m:
        b = (start + j) // bucket
        end = min(m, (b + 1) * bucket - start)
        _qsgd_value_segment(field[j:end], norms[b], sf, out[j:end])
        j = end


@njit(parallel=True, cache=True)
def _qsgd_decode_kernel(data, width, bucket, norms, sf, out):  # pragma: no cover - compiled
    n = out.size
    for p in prange((n + PART - 1) // PART):
        field = np.empty(SUB, np.uint32)
        wide = np.empty(SUB, np.uint64)
        words = np.empty(SUB // 8 + 1, np.uint64)
        for lo in range(p * PART, min(n, (p + 1) * PART), SUB):
            m = min(SUB, n - lo)
            src = data[(lo // 8) * width : min(data.size, ((lo + m) // 8 + 1) * width)]
            if width <= 8:
                _unpack_le(src, m, width, field, words)
            else:
                _unpack_wide(src, m, width, wide)
                for j in range(m):
                    field[j] = np.uint32(wide[j] & np.uint64(0xFFFFFFFF))
            _qsgd_values(field, lo, bucket, norms, sf, out[lo : lo + m])


def qsgd_decode(data: np.ndarray, width: int, bucket: int, norms: np.ndarray, s: int, out: np.ndarray) -> None:
    """out[i] = ±n_b·level_i/s from the packed fixed-width fields."""
    if out.size:
        set_threads(out.size)
        _qsgd_decode_kernel(data, np.int64(width), np.int64(bucket), norms, np.float32(s), out)


@njit(parallel=True, cache=True)
def _qsgd_scatter_kernel(pos, field, bucket, norms, sf, out):  # pragma: no cover - compiled
    for j in prange(pos.size):
        i = pos[j]
        f = field[j]
        v = (norms[i // bucket] * np.float32(f >> np.uint32(1))) / sf
        out[i] = -v if f & np.uint32(1) else v


def qsgd_scatter(pos: np.ndarray, field: np.ndarray, bucket: int, norms: np.ndarray, s: int, out: np.ndarray) -> None:
    """Write ±n_b·level/s at ``pos`` of zero-filled ``out`` (QSGD's Elias coding)."""
    if pos.size:
        set_threads(pos.size)
        _qsgd_scatter_kernel(pos, field.astype(np.uint32), np.int64(bucket), norms, np.float32(s), out)


# ----------------------------------------------------------------------------- natural compression


@njit(cache=True)
def _natural_codes(xb, r, code, sign):  # pragma: no cover - compiled
    """Exponent code E (+1 when rounding up) and sign of each float32 bit pattern.

    Rounding up ⇔ u < M/2^23 ⇔ r24 < 2M for u = r24/2^24: the exact integer form of the float
    comparison; the top binade (E = 254) and inf/NaN (255) never round up; no sign on code 0.
    """
    for j in range(xb.size):
        b = xb[j]
        e = (b >> np.uint32(23)) & np.uint32(0xFF)
        up = (r[j] < ((b & np.uint32(0x7FFFFF)) << np.uint32(1))) and (e < np.uint32(254))
        c = e + np.uint32(up)
        code[j] = np.uint8(c)
        sign[j] = np.uint8((b >> np.uint32(31)) != 0 and c > 0)


@njit(parallel=True, cache=True)
def _natural_kernel(xb, key, out):  # pragma: no cover - compiled
    n = xb.size
    for p in prange((n + PART - 1) // PART):
        r = np.empty(SUB, np.uint32)
        sign = np.empty(SUB, np.uint8)
        words = np.empty(SUB // 8 + 1, np.uint64)
        for lo in range(p * PART, min(n, (p + 1) * PART), SUB):
            m = min(SUB, n - lo)
            _fill_rand24(key, lo, r, m)
            _natural_codes(xb[lo : lo + m], r, out[lo : lo + m], sign)
            _pack_le(sign, m, 1, out[n + lo // 8 : n + (lo + m + 7) // 8], words)


def natural_encode(x: np.ndarray, seed: int, out: np.ndarray) -> None:
    """Natural compression body of float32 ``x``: n code bytes, then ceil(n/8) sign bytes."""
    if x.size:
        set_threads(x.size)
        _natural_kernel(x.view(np.uint32), key_of(seed), out)


@njit(cache=True)
def _natural_values(code, signs, out):  # pragma: no cover - compiled
    """out = (code << 23) | (sign << 31) with the sign dropped for code 0 (uint32 patterns)."""
    m = out.size
    full = m // 64
    for g in range(full):
        d = signs[g * 8 : g * 8 + 8]
        acc = np.uint64(0)
        for b in range(8):
            acc |= np.uint64(d[b]) << np.uint64(8 * b)
        c = code[g * 64 : g * 64 + 64]
        o = out[g * 64 : g * 64 + 64]
        for t in range(64):
            ci = np.uint32(c[t])
            sg = np.uint32((acc >> np.uint64(t)) & np.uint64(1)) if ci > 0 else np.uint32(0)
            o[t] = (ci << np.uint32(23)) | (sg << np.uint32(31))
    for i in range(full * 64, m):
        ci = np.uint32(code[i])
        sg = np.uint32((signs[i >> 3] >> (i & 7)) & 1) if ci > 0 else np.uint32(0)
        out[i] = (ci << np.uint32(23)) | (sg << np.uint32(31))


@njit(parallel=True, cache=True)
def _natural_decode_kernel(body, n, out):  # pragma: no cover - compiled
    for p in prange((n + PART - 1) // PART):
        lo = p * PART
        hi = min(n, lo + PART)
        _natural_values(body[lo:hi], body[n + lo // 8 : n + (hi + 7) // 8], out[lo:hi])


def natural_decode(body: np.ndarray, out: np.ndarray) -> None:
    """float32 values ±2^(code−127) (0 for code 0) into ``out``."""
    if out.size:
        set_threads(out.size)
        _natural_decode_kernel(body, out.size, out.view(np.uint32))


# ----------------------------------------------------------------------------- natural dithering


@njit(cache=True)
def _dither_ratio(x, n32, ab):  # pragma: no cover - compiled
    """ab[j] = min(|x_j| / n, 1) in float32 (0 when n = 0)."""
    for j in range(x.size):
        a = abs(x[j]) / n32 if n32 > 0 else np.float32(0.0)
        ab[j] = np.float32(1.0) if a > 1 else a


@njit(cache=True)
def _dither_fields(x, ab, r, s, small, inv_small, field):  # pragma: no cover - compiled
    """field[j] = (level << 1) | sign of natural dithering, from the ratio ab[j] = u.

    A normal u = (1 + M/2^23)·2^(E−127) ≥ 2^(1−s) lies between level indices E−127+s and one
    above and rounds up with probability M/2^23 ⇔ r24 < 2M (exact); below 2^(1−s) the bracket
    is [0, 2^(1−s)] and the probability u·2^(s−1) (a float32 comparison, as the torch path).
    The sign bit is sent only with a nonzero level.
    """
    abits = ab.view(np.uint32)
    for j in range(x.size):
        a = ab[j]
        b = abits[j]
        hi_up = np.uint32(r[j] < ((b & np.uint32(0x7FFFFF)) << np.uint32(1)))
        lv_hi = ((b >> np.uint32(23)) & np.uint32(0xFF)) + np.uint32(s) - np.uint32(127) + hi_up
        lv_lo = np.uint32(np.float32(r[j]) * _TWO_M24 < a * inv_small)
        lv = lv_lo if a < small else lv_hi
        ng = np.uint32(x[j] < 0) & np.uint32(lv > 0)
        field[j] = (lv << np.uint32(1)) | ng


@njit(parallel=True, cache=True)
def _dither_kernel(x, n32, s, small, inv_small, key, width, out):  # pragma: no cover - compiled
    """Natural dithering fields of ``width`` ≤ 8 bits, packed into ``out``."""
    n = x.size
    for p in prange((n + PART - 1) // PART):
        r = np.empty(SUB, np.uint32)
        ab = np.empty(SUB, np.float32)
        field = np.empty(SUB, np.uint32)
        words = np.empty(SUB // 8 + 1, np.uint64)
        for lo in range(p * PART, min(n, (p + 1) * PART), SUB):
            m = min(SUB, n - lo)
            xs = x[lo : lo + m]
            _fill_rand24(key, lo, r, m)
            _dither_ratio(xs, n32, ab)
            _dither_fields(xs, ab, r, s, small, inv_small, field)
            _pack_le(field, m, width, out[(lo // 8) * width : min(out.size, ((lo + m) // 8 + 1) * width)], words)


@njit(cache=True)
def _dither_fields_serial(x, n32, s, small, inv_small, key, out):  # pragma: no cover - compiled
    """The same fields unpacked, on one thread (top-k's k values: no parallel region to compile)."""
    r = np.empty(SUB, np.uint32)
    ab = np.empty(SUB, np.float32)
    for lo in range(0, x.size, SUB):
        m = min(SUB, x.size - lo)
        _fill_rand24(key, lo, r, m)
        _dither_ratio(x[lo : lo + m], n32, ab)
        _dither_fields(x[lo : lo + m], ab, r, s, small, inv_small, out[lo : lo + m])


def _dither_args(s: int) -> tuple[np.int64, np.float32, np.float32]:
    return np.int64(s), np.float32(2.0 ** (1 - s)), np.float32(2.0 ** (s - 1))


def dither_pack(x: np.ndarray, n32: float, s: int, seed: int, width: int, out: np.ndarray) -> None:
    """Natural dithering of float32 ``x`` with norm ``n32``; fields of ``width`` ≤ 8 bits packed
    into ``out``.  Element j draws number j of stream ``seed``."""
    if x.size:
        set_threads(x.size)
        _dither_kernel(x, np.float32(n32), *_dither_args(s), key_of(seed), np.int64(width), out)


def dither_fields(x: np.ndarray, n32: float, s: int, seed: int) -> np.ndarray:
    """The fields of :func:`dither_pack`, unpacked (uint32), for codings that interleave them."""
    out = np.empty(x.size, np.uint32)
    if x.size:
        _dither_fields_serial(x, np.float32(n32), *_dither_args(s), key_of(seed), out)
    return out


@njit(cache=True)
def _dither_values(field, s, n32, out, pw):  # pragma: no cover - compiled
    """out[j] = ±2^(level−s)·n (0 for level 0); returns the largest level index.

    The level value is built as float32 bits, (level + 127 − s) << 23 — exactly the table value
    2^(level−s) (s ≤ 120 keeps it normal) — which vectorises where a table lookup did not (3×).
    Levels above s (a corrupt body: the caller rejects it) decode as s.  ``pw`` is scratch.
    """
    su = np.uint32(s)
    top = np.uint32(0)
    for j in range(out.size):
        lv = field[j] >> np.uint32(1)
        top = max(top, lv)
        lvc = min(lv, su)
        pw[j] = ((lvc + np.uint32(127) - su) << np.uint32(23)) if lvc > 0 else np.uint32(0)
    pf = pw.view(np.float32)
    for j in range(out.size):
        v = pf[j] * n32
        out[j] = -v if field[j] & np.uint32(1) else v
    return top


@njit(parallel=True, cache=True)
def _dither_decode_kernel(data, width, s, n32, out, top):  # pragma: no cover - compiled
    n = out.size
    for p in prange(top.size):
        field = np.empty(SUB, np.uint32)
        pw = np.empty(SUB, np.uint32)
        words = np.empty(SUB // 8 + 1, np.uint64)
        mx = np.uint32(0)
        for lo in range(p * PART, min(n, (p + 1) * PART), SUB):
            m = min(SUB, n - lo)
            _unpack_le(data[(lo // 8) * width : min(data.size, ((lo + m) // 8 + 1) * width)], m, width, field, words)
            mx = max(mx, _dither_values(field[:m], s, n32, out[lo : lo + m], pw))
        top[p] = mx


def dither_decode(data: np.ndarray, width: int, s: int, n32: float, out: np.ndarray) -> int:
    """Decode packed natural dithering fields into float32 ``out``; returns the largest level read."""
    if out.size == 0:
        return 0
    set_threads(out.size)
    top = np.zeros(_nparts(out.size), np.uint32)
    _dither_decode_kernel(data, np.int64(width), np.int64(s), np.float32(n32), out, top)
    return int(top.max())


def dither_values(fields: np.ndarray, s: int, n32: float) -> tuple[np.ndarray, int]:
    """(float32 ±level·n of unpacked fields, largest level index) — serial: k values of top-k."""
    f = np.ascontiguousarray(fields, dtype=np.uint32)
    out = np.empty(f.size, np.float32)
    if f.size == 0:
        return out, 0
    top = int(_dither_values(f, np.int64(s), np.float32(n32), out, np.empty(f.size, np.uint32)))
    return out, top


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


@njit(parallel=True, cache=True)
def _topk_hist_kernel(ab, hist):  # pragma: no cover - compiled
    """Per-chunk histograms of the top 12 magnitude bits (chunk c: a fixed range)."""
    n = ab.size
    nchunks = hist.shape[0]
    for c in prange(nchunks):
        _histogram_all(ab[n * c // nchunks : n * (c + 1) // nchunks], np.uint32(_RADIX_SHIFT), hist[c])


@njit(parallel=True, cache=True)
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


@njit(parallel=True, cache=True)
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


@njit(parallel=True, cache=True)
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
    set_threads(n)
    # chunks depend on the size only, and the selected set does not depend on them at all
    nchunks = max(1, min(16, n // PART))
    mode = 0 if e is None else (1 if has_e else 2)
    t = _sample_threshold(x, e, has_e, k) if (n >= 1 << 14 and k <= n // 4) else 0
    counts = np.empty(nchunks, np.int64)
    # with t = 0 this pass only forms a (every magnitude counts)
    _form_count_kernel(x, x if e is None else e, np.int64(mode), np.uint32(t), counts)
    return t, counts


def topk_collect(a: np.ndarray, k: int, t: int, counts: np.ndarray) -> np.ndarray:
    """The rest of :func:`topk_select` on the formed ``a``, given :func:`topk_count`'s ``(t, counts)``."""
    set_threads(a.size)
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
    _topk_collect_kernel(ab, np.uint32(t - 1), np.zeros(counts.size, np.int64), offsets, cand)  # m > t − 1 ⇔ m >= t
    return _resolve(ab, cand, k)


def _topk_sampled(ab: np.ndarray, k: int, nchunks: int) -> np.ndarray | None:
    """The sampled-threshold path alone on formed magnitudes (None where :func:`topk_select`
    falls back to the radix select) — for the tests that check which path runs."""
    x = ab.view(np.float32)
    t = _sample_threshold(x, None, False, k)
    counts = np.empty(nchunks, np.int64)
    _form_count_kernel(x, x, np.int64(0), np.uint32(t), counts)
    return _collect_at_least(ab, k, t, counts)


def _topk_radix(a: np.ndarray, k: int, nchunks: int) -> np.ndarray:
    """Exact top-k of |a| by a radix select on the magnitude bits (see :func:`topk_select`)."""
    hist1 = np.zeros((nchunks, 1 << 12), np.int32)
    _topk_hist_kernel(a.view(np.uint32), hist1)
    ab = a.view(np.uint32)
    b1, need = _boundary(hist1, k)
    above = hist1[:, b1 + 1 :].sum(axis=1, dtype=np.int64)  # per chunk: strictly above the threshold
    in_bin = hist1[:, b1].astype(np.int64)
    thr = b1 << _RADIX_SHIFT
    if int(in_bin.sum()) > max(2 * k, 1 << 16):  # large boundary bin: refine before collecting
        hist2 = np.zeros((nchunks, 1 << 12), np.int32)
        _radix_kernel(ab, np.uint32(0xFFF << 19), np.uint32(b1 << 19), np.uint32(7), np.int64(12), hist2)
        b2, need = _boundary(hist2, need)
        hist3 = np.zeros((nchunks, 1 << 7), np.int32)
        prefix = (b1 << 19) | (b2 << 7)
        _radix_kernel(ab, np.uint32(0x7FFFFF80), np.uint32(prefix), np.uint32(0), np.int64(7), hist3)
        b3, need = _boundary(hist3, need)
        above = above + hist2[:, b2 + 1 :].sum(axis=1, dtype=np.int64) + hist3[:, b3 + 1 :].sum(axis=1, dtype=np.int64)
        thr = prefix | b3
        in_bin = hist3[:, b3].astype(np.int64)
        ties = np.minimum(in_bin, np.maximum(0, need - np.concatenate([[0], np.cumsum(in_bin)[:-1]])))
        offsets = np.zeros(nchunks, np.int64)
        offsets[1:] = np.cumsum(above + ties)[:-1]
        out = np.empty(k, np.int64)
        _topk_collect_kernel(ab, np.uint32(thr), ties, offsets, out)
        return out
    # small boundary bin: collect all of it and resolve it on the full 31 bits here
    offsets = np.zeros(nchunks, np.int64)
    offsets[1:] = np.cumsum(above + in_bin)[:-1]
    cand = np.empty(int((above + in_bin).sum()), np.int64)
    _topk_collect_kernel(ab, np.uint32(thr), in_bin, offsets, cand)
    return _resolve(ab, cand, k)


def topk_select_reference(a: np.ndarray, k: int) -> np.ndarray:
    """The same set by a stable sort of −|a| (ties to the lowest index), sorted (the oracle)."""
    mag = np.abs(a.astype(np.float32)).view(np.uint32) & np.uint32(0x7FFFFFFF)
    order = np.argsort(-mag.astype(np.int64), kind="stable")
    return np.sort(order[:k])


@njit(cache=True)
def _gather(a, idx, out):  # pragma: no cover - compiled
    for j in range(idx.size):
        out[j] = a[idx[j]]


@njit(cache=True)
def _scatter_sub(e, idx, dec):  # pragma: no cover - compiled
    for j in range(idx.size):
        i = idx[j]
        e[i] = e[i] - dec[j]


@njit(cache=True)
def _scatter(out, idx, vals, scale):  # pragma: no cover - compiled
    for j in range(idx.size):
        out[idx[j]] = vals[j] * scale


@njit(parallel=True, cache=True)
def _scatter_kernel(out, idx, vals, scale, nchunks):  # pragma: no cover - compiled
    """Chunks of sorted ``idx`` write disjoint ranges of ``out``: the first touch of a fresh
    output's pages (the kernel zeroing them) is spread over the threads too."""
    k = idx.size
    for c in prange(nchunks):
        lo = k * c // nchunks
        hi = k * (c + 1) // nchunks
        _scatter(out, idx[lo:hi], vals[lo:hi], scale)


def gather(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """a[idx] as float32 (serial: cheaper than NumPy's fancy indexing for sparse sets)."""
    out = np.empty(idx.size, np.float32)
    _gather(a, idx, out)
    return out


def scatter_sub(e: np.ndarray, idx: np.ndarray, dec: np.ndarray) -> None:
    """e[idx] -= dec (the residual update of a sparsifier with error feedback, float32)."""
    _scatter_sub(e, idx, dec)


def scatter(out: np.ndarray, idx: np.ndarray, vals: np.ndarray, scale: float = 1.0) -> None:
    """out[idx] = vals·scale (float32 product); sorted ``idx`` large enough scatter in parallel."""
    v = np.ascontiguousarray(vals, dtype=np.float32)
    if out.size >= SERIAL_MAX and idx.size >= 1024 and (idx.size < 2 or bool(np.all(idx[1:] > idx[:-1]))):
        set_threads(out.size)
        _scatter_kernel(out, idx, v, np.float32(scale), np.int64(16))
    else:
        _scatter(out, idx, v, np.float32(scale))


@njit(cache=True)
def _write_fields_kernel(values, widths, out):  # pragma: no cover - compiled
    """Fields MSB-first into ``out``; widths up to 64, appended in pieces of at most 32 bits."""
    acc = np.uint64(0)
    nb = 0
    q = 0
    for i in range(values.size):
        w = widths[i]
        v = np.uint64(values[i])
        while w > 0:
            take = 32 if w > 32 else w
            piece = (v >> np.uint64(w - take)) & ((np.uint64(1) << np.uint64(take)) - np.uint64(1))
            acc = (acc << np.uint64(take)) | piece
            nb += take
            w -= take
            while nb >= 8:
                out[q] = np.uint8((acc >> np.uint64(nb - 8)) & np.uint64(0xFF))
                q += 1
                nb -= 8
    if nb > 0:
        out[q] = np.uint8((acc << np.uint64(8 - nb)) & np.uint64(0xFF))


def write_fields(values: np.ndarray, widths: np.ndarray, total_bits: int) -> np.ndarray:
    """Concatenate ``values[i]`` in ``widths[i]`` bits (MSB first); ``total_bits`` = Σ widths."""
    out = np.zeros((total_bits + 7) // 8, np.uint8)
    if total_bits:
        _write_fields_kernel(values, widths, out)
    return out


@njit(inline="always")
def _bitlen(v):  # pragma: no cover - compiled
    n = 0
    while v > np.uint64(0):
        v >>= np.uint64(1)
        n += 1
    return n


@njit(inline="always")
def _omega_len(v):  # pragma: no cover - compiled
    length = 1
    n = np.uint64(v)
    while n > np.uint64(1):
        b = _bitlen(n)
        length += b
        n = np.uint64(b - 1)
    return length


@njit(cache=True)
def _records_bits(records, pattern):  # pragma: no cover - compiled
    """Total bits of the records (Elias-ω for pattern 0, fixed width otherwise); -1 on a value < 1."""
    total = 0
    for i in range(records.shape[0]):
        for j in range(pattern.size):
            if pattern[j] > 0:
                total += pattern[j]
            else:
                if records[i, j] < 1:
                    return -1
                total += _omega_len(records[i, j])
    return total


@njit(cache=True)
def _write_records_kernel(records, pattern, out):  # pragma: no cover - compiled
    acc = np.uint64(0)
    nb = 0
    q = 0
    gv = np.empty(8, np.uint64)  # Elias-ω groups of one value, innermost last
    gw = np.empty(8, np.int64)
    for i in range(records.shape[0]):
        for j in range(pattern.size):
            v = np.uint64(records[i, j])
            ng = 0
            if pattern[j] > 0:
                gv[0] = v
                gw[0] = pattern[j]
                ng = 1
            else:
                gv[0] = np.uint64(0)  # the terminating 0 bit
                gw[0] = 1
                ng = 1
                n = v
                while n > np.uint64(1):
                    b = _bitlen(n)
                    gv[ng] = n
                    gw[ng] = b
                    ng += 1
                    n = np.uint64(b - 1)
            for g in range(ng - 1, -1, -1):  # outermost group first, the terminator last
                w = gw[g]
                val = gv[g]
                while w > 0:
                    take = 32 if w > 32 else w
                    piece = (val >> np.uint64(w - take)) & ((np.uint64(1) << np.uint64(take)) - np.uint64(1))
                    acc = (acc << np.uint64(take)) | piece
                    nb += take
                    w -= take
                    while nb >= 8:
                        out[q] = np.uint8((acc >> np.uint64(nb - 8)) & np.uint64(0xFF))
                        q += 1
                        nb -= 8
    if nb > 0:
        out[q] = np.uint8((acc << np.uint64(8 - nb)) & np.uint64(0xFF))


def write_records(records: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """MSB-first stream of ``records`` (count × len(pattern) int64): column j in ``pattern[j]``
    bits, or as its Elias-ω code where ``pattern[j]`` is 0 (values must then be >= 1)."""
    records = np.ascontiguousarray(records, dtype=np.int64).reshape(-1, len(pattern))
    pattern = np.ascontiguousarray(pattern, dtype=np.int64)
    total = int(_records_bits(records, pattern))
    if total < 0:
        raise ValueError("Elias-ω codes positive integers only")
    out = np.zeros((total + 7) // 8, np.uint8)
    if total:
        _write_records_kernel(records, pattern, out)
    return out


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


@njit(parallel=True, cache=True)
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
        set_threads(d)  # the work is O(k + d/64): blocks in parallel for large tensors
        _subset_kernel(key, np.int64(d), counts, offsets, out)
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


# ----------------------------------------------------------------------------- fidelity sums

MOMENT_BLOCK = 2048  # elements per block of the fidelity pass: x and the R errors (float64) stay in L1/L2

# the sums may be reordered (SIMD lanes) and multiply-adds fused: 2-2.5x faster, a change of ~1e-15
# relative; NaN and inf still propagate (no finite-math assumption)
_SUM_MATH = {"reassoc", "contract"}


@njit(cache=True, fastmath=_SUM_MATH)
def _moments_kernel(x, ds, gram, dots, d_sq):  # pragma: no cover - compiled
    r_n = len(ds)
    n = x.shape[0]
    xb = np.empty(MOMENT_BLOCK)
    eb = np.empty((r_n, MOMENT_BLOCK))
    x_sq = 0.0
    for lo in range(0, n, MOMENT_BLOCK):
        m = min(MOMENT_BLOCK, n - lo)
        s = 0.0
        for i in range(m):
            v = np.float64(x[lo + i])
            xb[i] = v
            s += v * v
        x_sq += s
        for r in range(r_n):
            d = ds[r]
            s1 = 0.0
            s2 = 0.0
            for i in range(m):
                v = np.float64(d[lo + i])
                s1 += v * xb[i]
                s2 += v * v
                eb[r, i] = v - xb[i]
            dots[r] += s1
            d_sq[r] += s2
        for r in range(r_n):  # the errors' Gram matrix while the block is in cache
            for q in range(r, r_n):
                s = 0.0
                for i in range(m):
                    s += eb[r, i] * eb[q, i]
                gram[r, q] += s
                if q != r:
                    gram[q, r] += s
    return x_sq


def moments(x: np.ndarray, ds: tuple[np.ndarray, ...]) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """‖x‖², the Gram matrix ⟨e_r, e_s⟩ of the errors e_r = d_r − x, ⟨d_r, x⟩ and ‖d_r‖², all in
    float64, from one read of float32 ``x`` and each ``d_r`` (block by block, on the calling
    thread, so the sums do not depend on the thread count).  The torch reference is
    :func:`gcbench.measure.metrics.moments_torch`."""
    r = len(ds)
    gram, dots, d_sq = np.zeros((r, r)), np.zeros(r), np.zeros(r)
    x_sq = _moments_kernel(x, ds, gram, dots, d_sq)
    return float(x_sq), gram, dots, d_sq


@njit(cache=True, fastmath=_SUM_MATH)
def _sq_dist_kernel(a, b):  # pragma: no cover - compiled
    total = 0.0
    for lo in range(0, a.shape[0], MOMENT_BLOCK):
        s = 0.0
        for i in range(lo, min(lo + MOMENT_BLOCK, a.shape[0])):
            v = np.float64(a[i] - b[i])  # the difference in float32, as torch's ``a - b`` rounds it
            s += v * v
        total += s
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
def _accumulate_kernel(acc, a, b):  # pragma: no cover - compiled
    total = 0.0
    for lo in range(0, acc.shape[0], MOMENT_BLOCK):
        s = 0.0
        for i in range(lo, min(lo + MOMENT_BLOCK, acc.shape[0])):
            v = acc[i] + (a[i] - b[i])
            acc[i] = v
            w = np.float64(v)
            s += w * w
        total += s
    return total


@njit(cache=True)
def _accumulate1_kernel(acc, a):  # pragma: no cover - compiled
    total = 0.0
    for lo in range(0, acc.shape[0], MOMENT_BLOCK):
        s = 0.0
        for i in range(lo, min(lo + MOMENT_BLOCK, acc.shape[0])):
            v = acc[i] + a[i]
            acc[i] = v
            w = np.float64(v)
            s += w * w
        total += s
    return total


def accumulate(acc: np.ndarray, a: np.ndarray, b: np.ndarray | None) -> float:
    """``acc += a − b`` (``b`` None: ``acc += a``) in place (float32: the difference and the sum each
    rounded), returning ‖acc‖² summed in float64: a running sum and its norm in one pass.  The torch
    reference is :func:`gcbench.measure.metrics.accumulate64`'s chunked loop."""
    return float(_accumulate1_kernel(acc, a) if b is None else _accumulate_kernel(acc, a, b))


def sq_norm(a: np.ndarray) -> float:
    """‖a‖² of a float32 array, summed in float64 in one pass on the calling thread."""
    return float(_sq_norm_kernel(a))


def sq_dist(a: np.ndarray, b: np.ndarray) -> float:
    """‖a − b‖² of two float32 arrays (difference rounded to float32, squares summed in float64), in one pass."""
    return float(_sq_dist_kernel(a, b))
