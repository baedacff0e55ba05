"""The randomized Hadamard rotation in blocks: random sign flips, then an orthonormal fast Walsh–Hadamard transform.

A flat tensor of ``n`` elements is zero-padded to ``nb`` blocks of ``B = 2^m`` elements; each block
``v`` becomes ``H_B · D · v / sqrt(B)`` where ``D`` flips signs at random (one bit per element of a
counter-based SplitMix64 stream, :mod:`gcbench.kernels.rng`) and ``H_B`` is the Sylvester Hadamard
matrix.  The transform is orthonormal and its own inverse up to the signs: ``v = D · H_B · y / sqrt(B)``.

``H_B`` is applied as the fast transform's log2 B butterfly levels (``a, c -> a + c, a − c`` at
distance 1, 2, 4, …): O(n log B) additions, then one multiplication by the float32 ``1/sqrt(B)``.
The torch functions (:func:`fwht`, :func:`rotate`, :func:`unrotate`; any device) run one
vectorised pass per level; the numba kernels below (:func:`rotate_fast`, :func:`decode_fast`) run
the same additions in the same order block by block in cache, so both give the same float32 bits
(IEEE addition is exact to the order of operations; ``tests/kernels/test_hadamard.py`` checks it).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from gcbench.kernels.buffers import empty
from gcbench.kernels.rng import _TWO_M24, GAMMA, _fill_rand24_pairs, _mix64, key_of, splitmix64_torch
from gcbench.kernels.runtime import PARALLEL, njit, prange, run_parallel


def block_size(n: int, block: int) -> int:
    """The block length used for ``n`` elements: ``block`` (a power of two), or the next power of two of ``n`` if smaller."""
    if n <= 1:
        return 1
    return min(block, 1 << (n - 1).bit_length())


def padded_numel(n: int, block: int) -> int:
    """Elements after padding ``n`` to whole blocks of :func:`block_size` (``n`` < result < 2n + block)."""
    b = block_size(n, block)
    return -(-n // b) * b


def inv_sqrt(b: int) -> float:
    """The float32 normalisation ``1/sqrt(B)`` both paths multiply by (a float32 value, as a Python float)."""
    return float(np.float32(1.0 / math.sqrt(b)))


def butterfly(blocks: torch.Tensor) -> torch.Tensor:
    """The unnormalised Walsh–Hadamard transform of each row of ``blocks`` ((nb, B), B a power of two): a new tensor.

    Level h pairs elements h apart within each 2h-run: (a, c) -> (a + c, a − c), for h = 1, 2, 4, …, B/2.
    """
    nb, b = blocks.shape
    y = blocks.clone()
    h = 1
    while h < b:
        v = y.view(nb, b // (2 * h), 2, h)
        a, c = v[:, :, 0, :], v[:, :, 1, :]
        y = torch.stack((a + c, a - c), dim=2).view(nb, b)
        h *= 2
    return y


def fwht(blocks: torch.Tensor) -> torch.Tensor:
    """The orthonormal Walsh–Hadamard transform of each row of ``blocks``: :func:`butterfly` times the float32 1/sqrt(B)."""
    b = blocks.shape[1]
    scale = inv_sqrt(b) if blocks.dtype == torch.float32 else 1.0 / math.sqrt(b)
    return butterfly(blocks).mul_(scale)  # a number: the kernel's argument, no host buffer copied to the device


def random_words(key: int, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """SplitMix64 outputs 1..n of stream ``key`` (all 64 bits, as int64): :func:`gcbench.kernels.rng.rand24_torch` before its shift."""
    return splitmix64_torch(key, torch.arange(n, dtype=torch.int64, device=device))


_SIGN_TABLE: dict[torch.device, torch.Tensor] = {}


def _sign_table(device: torch.device) -> torch.Tensor:
    """Row v: the 8 signs (±1.0) of byte v, bit j (least significant first) set meaning −1."""
    if device not in _SIGN_TABLE:
        bits = (torch.arange(256).unsqueeze(1) >> torch.arange(8)) & 1
        _SIGN_TABLE[device] = (1.0 - 2.0 * bits.to(torch.float32)).to(device)
    return _SIGN_TABLE[device]


def signs(key: int, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``n`` random ±1.0 (float32) from stream ``key``: element 64·i + 8·k + j is −1 where bit j of byte k
    (little-endian) of the stream's number i is set; one table lookup per byte."""
    dev = torch.device(device)
    words = random_words(key, -(-n // 64), dev)
    as_bytes = words.view(torch.uint8)  # little-endian on every device torch runs on
    return _sign_table(dev)[as_bytes.long()].reshape(-1)[:n]


def rotate(flat: torch.Tensor, key: int, block: int) -> torch.Tensor:
    """``flat`` (float32, n elements) padded to blocks and rotated: shape (nb, B), float32, on ``flat``'s device."""
    n = flat.numel()
    b = block_size(n, block)
    total = padded_numel(n, block)
    padded = torch.zeros(total, dtype=torch.float32, device=flat.device)
    padded[:n] = flat
    padded.mul_(signs(key, total, flat.device))
    return fwht(padded.reshape(total // b, b))


def unrotate(blocks: torch.Tensor, key: int, n: int) -> torch.Tensor:
    """Inverse of :func:`rotate`: the first ``n`` elements of ``D · H · y / sqrt(B)`` (float32, flat)."""
    flat = fwht(blocks).reshape(-1)
    return flat.mul_(signs(key, flat.numel(), flat.device))[:n]


# ----------------------------------------------------------------------------- the fused CPU kernels (numba)
#
# The same definitions as the torch functions above, block by block in cache: signs, the butterfly (log2 B in-place
# passes over one block, the same additions in the same order as :func:`butterfly`), the scaling and the block's max
# in one pass; quantization, its uniforms and the packing in another; the decoder's unpacking, dequantization,
# transform and signs in a third.  They give the torch functions' bits (``tests/kernels/test_hadamard.py``).


@njit(inline="always")
def _pairs(lo, hi, h):  # pragma: no cover - compiled
    for j in range(h):  # two disjoint slices indexed from 0: LLVM vectorises it
        a = lo[j]
        c = hi[j]
        lo[j] = a + c
        hi[j] = a - c


@njit(inline="always")
def _four(v0, v1, v2, v3):  # pragma: no cover - compiled
    """Two levels on four values h apart: level h on (v0, v1) and (v2, v3), then level 2h on (v0, v2) and (v1, v3) —
    the same additions as :func:`butterfly`; returns the four new values in order."""
    a = v0 + v1
    b = v0 - v1
    c = v2 + v3
    d = v2 - v3
    return a + c, b + d, a - c, b - d


@njit(inline="always")
def _quads(q0, q1, q2, q3, h):  # pragma: no cover - compiled
    for j in range(h):  # two levels on four disjoint slices (:func:`_four`)
        q0[j], q1[j], q2[j], q3[j] = _four(q0[j], q1[j], q2[j], q3[j])


@njit(inline="always")
def _level_1(o, b):  # pragma: no cover - compiled
    """Level 1 of ``o[:b]`` (b even): one loop over the pairs with stride-2 loads, which LLVM vectorises by de-interleaving."""
    for j in range(b // 2):
        a = o[2 * j]
        c = o[2 * j + 1]
        o[2 * j] = a + c
        o[2 * j + 1] = a - c


@njit(inline="always")
def _levels_1_2(o, b):  # pragma: no cover - compiled
    """Levels 1 then 2 of ``o[:b]`` (b a multiple of 4), four elements a step (a stride-4 loop: vectorised)."""
    for j in range(b // 4):
        i = 4 * j
        o[i], o[i + 1], o[i + 2], o[i + 3] = _four(o[i], o[i + 1], o[i + 2], o[i + 3])


@njit(inline="always")
def _level_4(o, b):  # pragma: no cover - compiled
    """Level 4 of ``o[:b]`` (b a multiple of 8), written out over eight elements a step (a stride-8 loop: vectorised)."""
    for j in range(b // 8):
        i = 8 * j
        a0 = o[i]
        a1 = o[i + 1]
        a2 = o[i + 2]
        a3 = o[i + 3]
        c0 = o[i + 4]
        c1 = o[i + 5]
        c2 = o[i + 6]
        c3 = o[i + 7]
        o[i] = a0 + c0
        o[i + 1] = a1 + c1
        o[i + 2] = a2 + c2
        o[i + 3] = a3 + c3
        o[i + 4] = a0 - c0
        o[i + 5] = a1 - c1
        o[i + 6] = a2 - c2
        o[i + 7] = a3 - c3


@njit(inline="always")
def _small_levels(o, b):  # pragma: no cover - compiled
    """Levels 1, 2 and 4 of ``o[:b]`` (those that exist for b), as strided loops LLVM vectorises; returns the next level."""
    if b >= 4:
        _levels_1_2(o, b)
        if b >= 8:
            _level_4(o, b)
            return 8
        return 4
    if b == 2:
        _level_1(o, b)
    return b


@njit(inline="always")
def _butterfly(o, b):  # pragma: no cover - compiled
    """The unnormalised Walsh–Hadamard transform of ``o[:b]`` in place: levels 1, 2 and 4 as strided loops, then
    vectorised passes of two levels each over slices (the last alone when their count is odd)."""
    h = _small_levels(o, b)
    while 4 * h <= b:  # two levels (h, 2h) per pass: four slices h apart
        for s in range(0, b, 4 * h):
            _quads(o[s : s + h], o[s + h : s + 2 * h], o[s + 2 * h : s + 3 * h], o[s + 3 * h : s + 4 * h], h)
        h *= 4
    if h < b:
        for s in range(0, b, 2 * h):
            _pairs(o[s : s + h], o[s + h : s + 2 * h], h)


@njit(inline="always")
def _quads_scaled(q0, q1, q2, q3, h, scale):  # pragma: no cover - compiled
    """:func:`_quads` as the transform's last pass, each output times ``scale`` (the same two roundings as a separate pass)."""
    for j in range(h):
        y0, y1, y2, y3 = _four(q0[j], q1[j], q2[j], q3[j])
        q0[j] = y0 * scale
        q1[j] = y1 * scale
        q2[j] = y2 * scale
        q3[j] = y3 * scale


@njit(inline="always")
def _pairs_scaled(lo, hi, h, scale):  # pragma: no cover - compiled
    """:func:`_pairs` as the transform's last pass, scaled (see :func:`_quads_scaled`)."""
    for j in range(h):
        a = lo[j]
        c = hi[j]
        lo[j] = (a + c) * scale
        hi[j] = (a - c) * scale


@njit(inline="always")
def _scale(o, scale):  # pragma: no cover - compiled
    for j in range(o.size):
        o[j] = o[j] * scale


@njit(inline="always")
def _butterfly_scaled(o, b, scale):  # pragma: no cover - compiled
    """:func:`_butterfly`, then o *= scale: the scaling fused into the last pass where there is one (same bits)."""
    if b < 32:  # at most one pass after the strided ones: not worth fusing
        _butterfly(o, b)
        _scale(o, scale)
        return
    h = _small_levels(o, b)  # 8
    while 4 * h < b:  # every two-level pass but a last one
        for s in range(0, b, 4 * h):
            _quads(o[s : s + h], o[s + h : s + 2 * h], o[s + 2 * h : s + 3 * h], o[s + 3 * h : s + 4 * h], h)
        h *= 4
    if 4 * h == b:  # the last pass is two levels
        _quads_scaled(o[0:h], o[h : 2 * h], o[2 * h : 3 * h], o[3 * h : 4 * h], h, scale)
    else:  # one level left (2h == b)
        _pairs_scaled(o[0:h], o[h : 2 * h], h, scale)


@njit(inline="always")
def _absmax_bits(bits):  # pragma: no cover - compiled
    """max |x| over float32 values given as their int32 bit patterns: the max of the bits with the sign cleared.

    For non-negative floats the order of the bit patterns is the order of the values, and every NaN's pattern lies
    above +Inf's, so a NaN anywhere gives a NaN (as torch's ``abs().max()`` does); an integer reduction vectorises
    where a float ``max`` (with its NaN rule) does not."""
    m = np.int32(0)
    for j in range(bits.size):
        m = max(m, bits[j] & np.int32(0x7FFFFFFF))
    return m


@njit(inline="always")
def _sign_word(key, w):  # pragma: no cover - compiled
    return _mix64(key + np.uint64(w + 1) * GAMMA)


@njit(inline="always")
def _signed_copy(x, key, w0, o):  # pragma: no cover - compiled
    """o[j] = ±x[j] for whole 64-element words: bit j % 64 of stream word w0 + j // 64 set means −."""
    for w in range(o.size // 64):
        word = _sign_word(key, w0 + w)
        xs = x[64 * w : 64 * w + 64]
        os = o[64 * w : 64 * w + 64]
        for t in range(64):
            flip = np.float32(1.0) - np.float32(2.0) * np.float32((word >> np.uint64(t)) & np.uint64(1))
            os[t] = xs[t] * flip


@njit(inline="always")
def _signed_each(x, scale, key, base, o):  # pragma: no cover - compiled
    """o[j] = ±x[j]·scale (``x`` may be ``o``) for elements base + j of any block, the slow path of :func:`_signed_copy`
    (a constant scale 1 folds away): bit (base + j) % 64 of stream word (base + j) // 64 set means −."""
    word = np.uint64(0)
    for j in range(o.size):
        i = base + j
        if j == 0 or (i & 63) == 0:
            word = _sign_word(key, i >> 6)
        v = x[j] * scale
        o[j] = -v if (word >> np.uint64(i & 63)) & np.uint64(1) else v


@njit(**PARALLEL)
def _rotate_kernel(x, n, b, key, scale, out, bits, maxes):  # pragma: no cover - compiled
    nb = out.size // b
    for blk in prange(nb):
        o = out[blk * b : (blk + 1) * b]
        base = blk * b
        whole = base + b <= n
        if whole:
            src = x[base : base + b]
        else:  # the last block: its input and zeros past n, signed in place
            for j in range(b):
                o[j] = x[base + j] if base + j < n else np.float32(0.0)
            src = o
        if b % 64 == 0 and whole:  # a whole block of input: branch-free signs, one word per 64 elements
            _signed_copy(src, key, base >> 6, o)
        else:
            _signed_each(src, np.float32(1.0), key, base, o)
        _butterfly_scaled(o, b, scale)
        maxes[blk] = _absmax_bits(bits[blk * b : (blk + 1) * b])


def rotate_fast(x: np.ndarray, key: int, block: int) -> tuple[np.ndarray, float]:
    """:func:`rotate` of a flat float32 array by the fused kernel: the (nb, B) blocks as a float32 array, and max |y|."""
    n = x.size
    b = block_size(n, block)
    total = padded_numel(n, block)
    out = empty(total).numpy()  # huge pages, pooled: a fresh 100 MB output costs no page-fault storm
    maxes = np.zeros(total // b, np.int32)  # each block's max |y| as float32 bits
    run_parallel(_rotate_kernel, total, x, np.int64(n), np.int64(b), key_of(key), np.float32(inv_sqrt(b)), out,
                 out.view(np.int32), maxes)
    return out.reshape(total // b, b), float(np.int32(maxes.max()).view(np.float32)) if maxes.size else 0.0


#: words per chunk of the packing (part of thc's version-2 wire format): chunk c holds elements c·W·k onwards
CHUNK_WORDS = 1024


@njit(inline="always")
def _chunk(n, k, c):  # pragma: no cover - compiled
    """(first element, elements, words) of packing chunk ``c`` of ``n`` elements at ``k`` fields a word."""
    span = CHUNK_WORDS * k
    base = c * span
    count = min(n - base, span)
    return base, count, (count + k - 1) // k


@njit(**PARALLEL)
def _quantize_pack_kernel(y, up, m, factor, top, key, width, k, words):  # pragma: no cover - compiled
    """Chunk c's word c·W + i = Σ_f level(c·W·k + f·w_c + i) << f·width (w_c: the chunk's words), level(e) = ⌊r⌋ +
    [u_e < r − ⌊r⌋] with r = clamp((y_e·up + m)·factor, 0, top): the torch path's float32 arithmetic, field by field."""
    n = y.size
    for c in prange((n + CHUNK_WORDS * k - 1) // (CHUNK_WORDS * k)):
        base, count, wc = _chunk(n, k, c)
        acc = words[c * CHUNK_WORDS : c * CHUNK_WORDS + wc]
        acc[:] = 0
        u = np.empty(wc, np.uint32)
        for f in range(k):
            cnt = min(count - f * wc, wc)
            if cnt <= 0:
                break
            e0 = base + f * wc
            _fill_rand24_pairs(key, e0, u, cnt)
            ys = y[e0 : e0 + cnt]
            shift = np.int64(f * width)
            for j in range(cnt):  # one field of consecutive words: contiguous elements, vectorised
                r = (ys[j] * up + m) * factor
                r = np.float32(0.0) if r < np.float32(0.0) else (top if r > top else r)
                fl = np.floor(r)
                level = np.int64(fl) + np.int64(np.float32(u[j]) * _TWO_M24 < r - fl)
                acc[j] |= level << shift


def quant_factor(m: float, top: int) -> tuple[float, float, float]:
    """(up, m·up, factor) with r = (y·up + m·up)·factor: factor = top/(2m) rounded to float32 once, and where that
    overflows float32 (m under about 1e-37: subnormal ranges) y and m scaled up by 2^100 first (exact) so it does not."""
    m32 = float(np.float32(m))
    with np.errstate(over="ignore"):
        factor = np.float32(top / (2.0 * m32))
    if np.isfinite(factor):
        return 1.0, m32, float(factor)
    up = 2.0**100
    return up, m32 * up, float(np.float32(top / (2.0 * m32 * up)))


def quantize_pack_fast(y: np.ndarray, m: float, bits: int, seed: int, width: int, words: np.ndarray | None = None) -> np.ndarray:
    """Stochastic levels of flat float32 ``y`` on [−m, m] with the paired uniforms of stream ``seed``
    (:func:`gcbench.kernels.rng.paired_uniforms`), packed ⌊63/width⌋ = k per int64 word, field-major within chunks
    of :data:`CHUNK_WORDS` words (element c·W·k + f·w_c + i in field f, bits f·width, of word c·W + i): what
    ``quantize`` then ``pack`` of :mod:`gcbench.compressors.thc` give.  A zero or non-finite range gives all-zero words.

    ``words``: where to write them (an aligned int64 array of ⌈n/⌊63/width⌋⌉ words, e.g. a view of the payload body)."""
    k = 63 // width
    nw = -(-y.size // k)
    if words is None:
        words = empty(nw, torch.int64).numpy()
    if m == 0.0 or not math.isfinite(m):
        words[:] = 0
    elif nw:
        top = (1 << bits) - 1
        up, m_up, factor = quant_factor(m, top)
        run_parallel(_quantize_pack_kernel, y.size, y, np.float32(up), np.float32(m_up), np.float32(factor), np.float32(top),
                     key_of(seed), np.int64(width), np.int64(k), words)
    return words


@njit(**PARALLEL)
def _decode_kernel(words, width, k, mask, scale, m, key, b, inv, out):  # pragma: no cover - compiled
    nb = out.size // b
    n = out.size
    for blk in prange(nb):
        o = out[blk * b : (blk + 1) * b]
        base = blk * b
        j = 0
        while j < b:  # runs of the block's elements in one field of one chunk (see _quantize_pack_kernel)
            c = (base + j) // (CHUNK_WORDS * k)
            first, _, wc = _chunk(n, k, c)
            f = (base + j - first) // wc
            i = base + j - first - f * wc
            run = min(b - j, wc - i)
            shift = np.int64(f * width)
            ws = words[c * CHUNK_WORDS + i : c * CHUNK_WORDS + i + run]
            os = o[j : j + run]
            for t in range(run):
                os[t] = np.float32(np.float64((ws[t] >> shift) & mask) * scale - m)
            j += run
        _butterfly(o, b)
        if b % 64 == 0:
            _scale(o, inv)
            _signed_copy(o, key, base >> 6, o)
        else:
            _signed_each(o, inv, key, base, o)


def decode_fast(words: np.ndarray, width: int, padded: int, block: int, m: float, scale: float, key: int) -> np.ndarray:
    """Unpack ``padded`` fields, dequantize (field·scale − m, in float64), rotate back: the padded flat float32 array."""
    out = empty(padded).numpy()
    if words.size != -(-padded // (63 // width)):
        raise ValueError(f"{words.size} words do not hold {padded} fields of {width} bits")
    run_parallel(_decode_kernel, padded, words, np.int64(width), np.int64(63 // width), np.int64((1 << width) - 1),
                 np.float64(scale), np.float64(m), key_of(key), np.int64(block), np.float32(inv_sqrt(block)), out)
    return out
