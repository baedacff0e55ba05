"""Block-scaled low-precision element formats: fp8 (e4m3, e5m2), fp4 (e2m1), int8, int4.

One element quantizer serves every format: a float32 value ``y`` (the element times its block's
factor, ``min(1/scale, float32 max)``) is saturated to the format's largest finite magnitude, then rounded to the format's grid
— round to nearest, ties to even, or stochastically — and written as the format's bit code:

* floats (sign, exponent, mantissa; OCP 8-bit floating point spec and OCP Microscaling spec v1.0
  for e2m1): for ``|y|`` in binade ``[2^e, 2^(e+1))`` (``e`` at least the format's smallest normal
  exponent ``emin``, so the subnormals share the spacing of the first binade) the grid spacing is
  ``2^(e − m)``; ``k = |y|·2^(m − e)`` is exact in float32 and rounds to an integer; the code is the
  sign bit, then ``e + bias`` and ``k − 2^m`` for a normal result, or ``0`` and ``k`` for a subnormal;
* integers (symmetric): ``k = |y|`` rounds to an integer at most ``qmax`` (127 or 7); the code is
  the two's complement of ``±k`` in its 2 to 8 bits.

Stochastic rounding keeps ``⌊k⌋ + 1`` when the element's counter-based uniform
(:mod:`gcbench.kernels.rng`, number ``i`` of the compression's stream for element ``i``) is below
``k − ⌊k⌋``, so E[q] = y up to the uniforms' 2^-24 grid.  Decoding is a table lookup (``lut``) times
the block's multiplier.  Saturation: ``|y|`` beyond the largest finite value becomes that value
(e4m3 has no infinity: ±448; e5m2's ±inf is never produced: ±57344); a NaN ``y`` never reaches the
quantizer (its block's multiplier is NaN, the compressors' rule, :mod:`gcbench.compressors.lowprec`).

The numba kernels (:func:`encode_blocks`, :func:`encode_elements`, :func:`decode_blocks`,
:func:`block_amax`) and the plain torch functions (:func:`quantize_torch`, :func:`block_amax_torch`,
any device) compute the same bits; ``tests/compressors/test_lowprec.py`` checks both against
torch's own float8 casts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gcbench.kernels.rng import _TWO_M24, GAMMA, _mix64, key_of
from gcbench.kernels.runtime import PARALLEL, PART, bits_f32, f32_bits, njit, prange, run_parallel

F32_MAX = float(np.finfo(np.float32).max)
_F32_MAX = np.float32(F32_MAX)


@dataclass(frozen=True)
class ElemFormat:
    """An element format: ``bits`` wide, ``m`` mantissa bits, smallest normal exponent ``emin``,
    exponent ``bias``, largest finite magnitude ``maxv``, ``emax`` the exponent of its largest
    binade (the MX scale rule subtracts it); integers have ``is_int`` and ``maxv = qmax``."""

    name: str
    bits: int
    m: int
    emin: int
    bias: int
    maxv: float
    emax: int
    is_int: bool = False

    def lut(self) -> np.ndarray:
        """The float32 value of every code (``2^bits`` entries): the decoder's table.

        Codes the encoder never writes keep the format's meaning: e4m3's 0x7F/0xFF are NaN, e5m2's
        exponent 31 is ±inf or NaN (what torch's float8 dtypes decode them to).
        """
        n = 1 << self.bits
        codes = np.arange(n)
        if self.is_int:
            return np.where(codes >= n // 2, codes - n, codes).astype(np.float32)
        ebits = self.bits - 1 - self.m
        sign = np.where(codes >> (self.bits - 1), -1.0, 1.0)
        ex = (codes >> self.m) & ((1 << ebits) - 1)
        man = codes & ((1 << self.m) - 1)
        mag = np.where(ex == 0, man * 2.0 ** (self.emin - self.m), (1.0 + man / 2.0**self.m) * 2.0 ** (ex - self.bias))
        if self.name == "e4m3":
            mag = np.where((ex == 15) & (man == 7), np.nan, mag)
        elif self.name == "e5m2":
            mag = np.where(ex == 31, np.where(man == 0, np.inf, np.nan), mag)
        return (sign * mag).astype(np.float32)

    def packed_nbytes(self, d: int) -> int:
        """Bytes of ``d`` codes on the wire, bit-packed LSB first: one each at 8 bits, two per byte at 4 (low nibble first)."""
        return (d * self.bits + 7) // 8

    @property
    def store(self) -> int:
        """How the kernels write codes: 4 (nibbles, two per byte) or 8 (one byte each; other widths are packed after)."""
        return 4 if self.bits == 4 else 8


E4M3 = ElemFormat("e4m3", 8, 3, -6, 7, 448.0, 8)
E5M2 = ElemFormat("e5m2", 8, 2, -14, 15, 57344.0, 15)
E2M1 = ElemFormat("e2m1", 4, 1, 0, 1, 6.0, 2)
INT8 = ElemFormat("int8", 8, 0, 0, 0, 127.0, 0, is_int=True)


def int_format(bits: int) -> ElemFormat:
    """The symmetric ``bits``-bit integer format (2 to 8 bits): codes −qmax..qmax, qmax = 2^(bits−1) − 1."""
    return ElemFormat(f"int{bits}", bits, 0, 0, 0, float((1 << (bits - 1)) - 1), 0, is_int=True)


INTS = {b: int_format(b) for b in range(2, 9)}
INT8, INT4 = INTS[8], INTS[4]
FORMATS = {f.name: f for f in (E4M3, E5M2, E2M1, *INTS.values())}

# how a block's scale is made from its amax (the compressors' scale rules; the numba kernels branch on it)
SCALE_F32 = 0  # fp32 amax / maxv (fp8 per tensor or block, blockint)
SCALE_E8M0 = 1  # OCP MX: 2^(floor(log2 amax) − emax), 8-bit exponent code, 0xFF NaN
SCALE_NV = 2  # NVFP4: e4m3 code of (amax / 6) / tensor_scale, the multiplier that value times tensor_scale


# ----------------------------------------------------------------------------- torch (any device)


def block_amax_torch(flat: torch.Tensor, block: int) -> torch.Tensor:
    """max |x| of each block of ``block`` elements (the last may be shorter), float32; NaN for a block
    holding a NaN or ±inf."""
    d = flat.numel()
    nb = -(-d // block)
    pad = nb * block - d
    v = torch.nn.functional.pad(flat, (0, pad)) if pad else flat
    amax = v.reshape(nb, block).abs().amax(1)
    return torch.where(torch.isfinite(amax), amax, torch.full_like(amax, float("nan")))


def quantize_torch(y: torch.Tensor, fmt: ElemFormat, u: torch.Tensor | None = None) -> torch.Tensor:
    """Codes (uint8, one per element) of float32 ``y`` (no NaN): saturated, rounded to nearest even
    (``u`` None) or stochastically with the uniforms ``u``."""
    a = y.abs().clamp(max=fmt.maxv)
    neg = torch.signbit(y)
    if fmt.is_int:
        k = a
    else:
        e = ((a.view(torch.int32) >> 23) & 0xFF) - 127
        e = e.clamp(min=fmt.emin)
        k = a * ((fmt.m - e + 127) << 23).view(torch.float32)  # times 2^(m − e): exact
    if u is None:
        q = torch.round(k)  # half to even
    else:
        fl = torch.floor(k)
        q = fl + (u < k - fl).to(k.dtype)
    qi = q.to(torch.int32)
    if fmt.is_int:
        code = torch.where(neg, -qi, qi) & ((1 << fmt.bits) - 1)
    else:
        up = qi >= (2 << fmt.m)  # rounded up into the next binade: k = 2^(m+1) is 2^m there
        e = e + up.to(torch.int32)
        qi = torch.where(up, qi >> 1, qi)
        normal = qi >= (1 << fmt.m)
        code = torch.where(normal, ((e + fmt.bias) << fmt.m) | (qi - (1 << fmt.m)), qi)
        code = code | (neg.to(torch.int32) << (fmt.bits - 1))
    return code.to(torch.uint8)


def pack_nibbles_torch(codes: torch.Tensor) -> torch.Tensor:
    """Two 4-bit codes per byte, the first in the low nibble (an odd count pads a zero nibble)."""
    if codes.numel() % 2:
        codes = torch.cat([codes, codes.new_zeros(1)])
    pairs = codes.reshape(-1, 2)
    return pairs[:, 0] | (pairs[:, 1] << 4)


def unpack_nibbles_torch(data: torch.Tensor, d: int) -> torch.Tensor:
    """The ``d`` 4-bit codes of :func:`pack_nibbles_torch`'s bytes."""
    return torch.stack([data & 15, data >> 4], 1).reshape(-1)[:d]


def uniforms_torch(seed: int, n: int, device: torch.device | str) -> torch.Tensor:
    """The stochastic rounding's uniforms in plain torch (number ``i`` for element ``i``)."""
    from gcbench.kernels.rng import rand24_torch

    return rand24_torch(seed, n, device).to(torch.float32) * 2.0**-24


# ----------------------------------------------------------------------------- numba (CPU)


@njit(inline="always")
def _code(y, u, m, emin, bias, maxv, bits, is_int, stochastic):  # pragma: no cover - compiled
    """The code of one float32 value (no NaN): :func:`quantize_torch`'s arithmetic, element by element."""
    a = abs(y)
    if not (a <= maxv):
        a = maxv
    if is_int:
        k = a
        e = np.int32(0)
    else:
        e = np.int32(((f32_bits(a) >> 23) & 0xFF) - 127)
        if e < emin:
            e = np.int32(emin)
        k = a * bits_f32(np.int32((m - e + 127) << 23))
    if stochastic:
        fl = np.float32(np.floor(k))
        q = np.int32(fl) + (np.int32(1) if u < k - fl else np.int32(0))
    else:
        q = np.int32(np.rint(k))
    neg = f32_bits(y) < 0
    if is_int:
        c = -q if neg else q
        return np.uint8(c & ((1 << bits) - 1))
    if q >= (2 << m):
        e += 1
        q >>= 1
    if q >= (1 << m):
        c = ((e + bias) << m) | (q - (1 << m))
    else:
        c = q
    if neg:
        c |= 1 << (bits - 1)
    return np.uint8(c)


@njit(inline="always")
def _code_nearest(y, m, emin, bias, maxv, bits, is_int):  # pragma: no cover - compiled
    """:func:`_code` with round to nearest even, without branches on the value (so the loop vectorises).

    Floats: a normal result rounds the float32 bit pattern at mantissa bit ``23 − m`` (ties to even,
    a carry runs into the exponent); a subnormal one adds ``C = 2^(emin − m + 23)``, whose spacing is the
    format's subnormal step, and takes the float32 addition's own rounding: the same grid and ties as
    :func:`_code` (the tests check both against torch's float8 casts)."""
    a = min(abs(y), maxv)
    neg = np.int32(1) if f32_bits(y) < 0 else np.int32(0)
    if is_int:
        q = np.int32(np.rint(a))
        return np.uint8(((q ^ -neg) + neg) & ((1 << bits) - 1))
    b = f32_bits(a)
    sh = 23 - m
    cn = ((b + ((np.int32(1) << (sh - 1)) - 1) + ((b >> sh) & 1)) >> sh) - ((127 - bias) << m)
    cc = bits_f32(np.int32((emin - m + 23 + 127) << 23))
    cs = f32_bits(a + cc) - f32_bits(cc)
    c = cn if a >= bits_f32(np.int32((emin + 127) << 23)) else cs
    return np.uint8(c | (neg << (bits - 1)))


@njit(inline="always")
def _code_e2m1(y):  # pragma: no cover - compiled
    """:func:`_code_nearest` for e2m1 (values 0, 0.5, 1, 1.5, 2, 3, 4, 6): the magnitude code is the number of
    midpoints |y| passes, each tie going to the even code (> at a midpoint below an even code, ≥ below an odd one),
    saturating at 6; seven compares that vectorise better than the bit arithmetic (same codes: tested)."""
    a = abs(y)
    q = (np.int32(a > np.float32(0.25)) + np.int32(a >= np.float32(0.75)) + np.int32(a > np.float32(1.25))
         + np.int32(a >= np.float32(1.75)) + np.int32(a > np.float32(2.5)) + np.int32(a >= np.float32(3.5))
         + np.int32(a > np.float32(5.0)))
    neg = np.int32(1) if f32_bits(y) < 0 else np.int32(0)
    return np.uint8(q | (neg << 3))


@njit(inline="always")
def _uniform(key, i):  # pragma: no cover - compiled
    return np.float32(np.uint32(_mix64(key + np.uint64(i + 1) * GAMMA) >> np.uint64(40))) * _TWO_M24


@njit(inline="always")
def _inv(s):  # pragma: no cover - compiled
    """The encoder's factor of a block with multiplier ``s``: min(1/s, float32 max), 0 when s is 0 or NaN."""
    if s > 0:
        r = np.float32(1.0) / s
        return r if r <= _F32_MAX else _F32_MAX
    return np.float32(0.0)


@njit(inline="always")
def _quantize(xs, start, inv, m, emin, bias, maxv, bits, is_int, stochastic, key, dst):  # pragma: no cover - compiled
    """dst[t] = code of xs[t]·inv (element ``start + t`` of the tensor draws uniform ``start + t``); zeros when inv = 0."""
    n = xs.size
    if inv == 0:
        for t in range(n):
            dst[t] = 0
    elif stochastic:
        for t in range(n):
            dst[t] = _code(xs[t] * inv, _uniform(key, start + t), m, emin, bias, maxv, bits, is_int, True)
    elif m == 1 and bits == 4 and not is_int:  # e2m1
        for t in range(n):
            dst[t] = _code_e2m1(xs[t] * inv)
    else:
        for t in range(n):
            dst[t] = _code_nearest(xs[t] * inv, m, emin, bias, maxv, bits, is_int)


@njit(inline="always")
def _pack_nibbles(tmp, n, dst):  # pragma: no cover - compiled
    """dst[j] = tmp[2j] | tmp[2j+1] << 4 over ``n`` codes (an odd last one alone in its low nibble)."""
    for j in range(n // 2):
        dst[j] = tmp[2 * j] | (tmp[2 * j + 1] << 4)
    if n & 1:
        dst[n // 2] = tmp[n - 1]


@njit(inline="always")
def _scale(amax, kind, maxv, emax, ts):  # pragma: no cover - compiled
    """(scale code bits, multiplier) of one block from its amax (NaN: a non-finite block).

    SCALE_F32: amax / maxv (the code is the float32's bits); SCALE_E8M0: E = floor(log2 amax) − emax + 127
    clamped to [0, 254], 255 for NaN, multiplier 2^(E − 127); SCALE_NV: the e4m3 code of (amax / 6) / ts and
    its value times ts."""
    if kind == SCALE_F32:
        s = amax / maxv
        return np.int64(f32_bits(s)), s
    if kind == SCALE_E8M0:  # written as selects, so a loop over blocks vectorises
        nan = amax != amax
        ex = max(np.int32((f32_bits(amax) >> 23) & 0xFF) - emax, np.int32(0))
        mult = bits_f32(np.int32(0x00400000)) if ex == 0 else bits_f32(np.int32(ex << 23))
        return (np.int64(255) if nan else np.int64(ex)), (np.float32(np.nan) if nan else mult)
    return _scale_nv(amax, ts)


@njit(inline="always")
def _scale_nv(amax, ts):  # pragma: no cover - compiled
    """NVFP4's block scale: (e4m3 code of (amax / 6) / ts, its value times ts); code 0 where ts is not positive."""
    v = (amax / np.float32(6.0)) / ts if ts > 0 else np.float32(0.0)
    v = np.float32(0.0) if v != v else v
    c = _code_nearest(v, 3, -6, 7, np.float32(448.0), 8, False)
    return np.int64(c), _e4m3_value(c) * ts


@njit(inline="always")
def _scales(amaxs, kind, maxv, emax, ts, scode, invs):  # pragma: no cover - compiled
    """scode[j], invs[j] = the scale code and the encoder's factor of the block of amax ``amaxs[j]``; the rule is
    chosen once, outside the loop, so NVFP4's e4m3 scales vectorise (with the choice inside, they ran 4× slower)."""
    if kind == SCALE_NV:
        for j in range(amaxs.size):
            c, s = _scale_nv(amaxs[j], ts)
            scode[j] = c
            invs[j] = _inv(s)
    else:
        for j in range(amaxs.size):
            c, s = _scale(amaxs[j], kind, maxv, emax, ts)
            scode[j] = c
            invs[j] = _inv(s)


@njit(inline="always")
def _e4m3_value(c):  # pragma: no cover - compiled
    """The value of a non-negative e4m3 code (a block scale: never NaN)."""
    ex = np.int32((c >> 3) & 15)
    man = np.int32(c & 7)
    sub = np.float32(man) * np.float32(2.0**-9)
    return sub if ex == 0 else bits_f32(np.int32(((ex - 7 + 127) << 23) | (man << 20)))


@njit(inline="always")
def _block_absmax(xs):  # pragma: no cover - compiled
    """max |xs| via the bit patterns (NaN and ±inf above every finite value), NaN if any is non-finite."""
    mx = np.int32(0)
    for i in range(xs.size):
        b = f32_bits(xs[i]) & np.int32(0x7FFFFFFF)
        if b > mx:
            mx = b
    if mx >= np.int32(0x7F800000):
        return np.float32(np.nan)
    return bits_f32(mx)


@njit(inline="always")
def _quantize_each(xs, start, invx, m, emin, bias, maxv, bits, is_int, stochastic, key, dst):  # pragma: no cover - compiled
    """dst[t] = code of xs[t]·invx[t]: one flat loop over many small blocks (their factors spread per element)."""
    if stochastic:
        for t in range(xs.size):
            dst[t] = _code(xs[t] * invx[t], _uniform(key, start + t), m, emin, bias, maxv, bits, is_int, True)
    elif m == 1 and bits == 4 and not is_int:  # e2m1
        for t in range(xs.size):
            dst[t] = _code_e2m1(xs[t] * invx[t])
    else:
        for t in range(xs.size):
            dst[t] = _code_nearest(xs[t] * invx[t], m, emin, bias, maxv, bits, is_int)


@njit(**PARALLEL)
def _encode_blocks_kernel(x, block, kind, emax, ts, m, emin, bias, maxv, bits, is_int, stochastic, key,
                          scode, store, out):  # pragma: no cover - compiled
    n = x.size
    nb = (n + block - 1) // block
    per = max(1, PART // block)
    if block & 1 and per & 1:
        per += 1  # an even number of odd blocks: a group starts on an even element, a nibble pair in one thread
    for g in prange((nb + per - 1) // per):
        b0 = g * per
        b1 = min(nb, b0 + per)
        lo0 = b0 * block
        hi1 = min(n, b1 * block)
        nblk = b1 - b0
        amaxs = np.empty(nblk, np.float32)
        for j in range(nblk):  # amaxes, then scales, then factors, then one loop over the elements: each loop vectorises
            amaxs[j] = _block_absmax(x[(b0 + j) * block:min(n, (b0 + j + 1) * block)])
        invs = np.empty(nblk, np.float32)
        _scales(amaxs, kind, maxv, emax, ts, scode[b0:b1], invs)
        zero = False
        for j in range(nblk):
            zero |= invs[j] == 0
        invx = np.empty(hi1 - lo0, np.float32)
        for j in range(nblk):
            inv_b = invx[j * block:min(hi1 - lo0, (j + 1) * block)]
            for t in range(inv_b.size):
                inv_b[t] = invs[j]
        codes = out[lo0:hi1] if store == 8 else np.empty(hi1 - lo0, np.uint8)
        _quantize_each(x[lo0:hi1], lo0, invx, m, emin, bias, maxv, bits, is_int, stochastic, key, codes)
        if zero:  # a block of scale 0 or NaN sends zero codes
            for j in range(nblk):
                if invs[j] == 0:
                    codes[j * block:min(hi1 - lo0, (j + 1) * block)] = 0
        if store == 4:
            _pack_nibbles(codes, hi1 - lo0, out[lo0 // 2:(hi1 + 1) // 2])


def _check_out(n: int, fmt: ElemFormat, out: np.ndarray) -> None:
    """The kernels write without bounds checks: refuse an output buffer shorter than ``n`` codes in ``fmt.store``."""
    need = n if fmt.store == 8 else (n + 1) // 2
    if out.size < need:
        raise ValueError(f"{fmt.name} codes of {n} elements need {need} bytes, the buffer has {out.size}")


def encode_blocks(x: np.ndarray, block: int, kind: int, fmt: ElemFormat, ts: float, seed: int | None,
                  scode: np.ndarray, out: np.ndarray) -> None:
    """Blocks of at most :data:`PART` elements in one pass each: amax, scale, then the codes into ``out`` (nibbles or
    bytes, ``fmt.store``); ``ts`` is NVFP4's tensor scale.  ``scode`` receives each block's scale as it goes on the wire:
    a uint32 array of float32 bit patterns (SCALE_F32) or a uint8 array of codes (E8M0, e4m3), a view of the body."""
    _check_out(x.size, fmt, out)
    run_parallel(_encode_blocks_kernel, x.size, x, np.int64(block), np.int64(kind), np.int32(fmt.emax),
                 np.float32(ts), np.int32(fmt.m), np.int32(fmt.emin), np.int32(fmt.bias), np.float32(fmt.maxv), np.int64(fmt.bits),
                 fmt.is_int, seed is not None, key_of(seed or 0), scode, np.int64(fmt.store), out)


@njit(**PARALLEL)
def _amax_chunks_kernel(x, block, cpb, out):  # pragma: no cover - compiled
    n = x.size
    nb = (n + block - 1) // block
    for j in prange(nb * cpb):
        b = j // cpb
        lo = b * block + (j % cpb) * PART
        hi = min(n, b * block + block, lo + PART)
        out[j] = _block_absmax(x[lo:hi]) if lo < hi else np.float32(0.0)


def block_amax(x: np.ndarray, block: int) -> np.ndarray:
    """max |x| per block of ``block`` elements (NaN for a non-finite block), for blocks larger than :data:`PART`,
    in parallel parts of each block (:func:`block_amax_torch`'s numbers)."""
    cpb = -(-block // PART)
    nb = -(-x.size // block)
    parts = np.empty(nb * cpb, np.float32)
    run_parallel(_amax_chunks_kernel, x.size, x, np.int64(block), np.int64(cpb), parts)
    return parts.reshape(nb, cpb).max(1)  # NaN propagates


@njit(**PARALLEL)
def _encode_elements_kernel(x, block, mult, m, emin, bias, maxv, bits, is_int, stochastic, key, store, out):  # pragma: no cover - compiled
    n = x.size
    for p in prange((n + PART - 1) // PART):
        lo = p * PART  # PART is even: a nibble pair never straddles two parts
        hi = min(n, lo + PART)
        tmp = np.empty(hi - lo if store == 4 else 0, np.uint8)
        i = lo
        while i < hi:  # the part in runs of one block
            b = i // block
            end = min(hi, (b + 1) * block)
            dst = out[i:end] if store == 8 else tmp[i - lo:end - lo]
            _quantize(x[i:end], i, _inv(mult[b]), m, emin, bias, maxv, bits, is_int, stochastic, key, dst)
            i = end
        if store == 4:
            _pack_nibbles(tmp, hi - lo, out[lo // 2:(hi + 1) // 2])


def encode_elements(x: np.ndarray, block: int, mult: np.ndarray, fmt: ElemFormat, seed: int | None, out: np.ndarray) -> None:
    """The codes of ``x`` divided by its block's multiplier ``mult[i // block]`` (blocks of any size, parts in parallel)."""
    _check_out(x.size, fmt, out)
    run_parallel(_encode_elements_kernel, x.size, x, np.int64(block), mult, np.int32(fmt.m), np.int32(fmt.emin), np.int32(fmt.bias),
                 np.float32(fmt.maxv), np.int64(fmt.bits), fmt.is_int, seed is not None, key_of(seed or 0), np.int64(fmt.store), out)


@njit(inline="always")
def _values(codes, lut, s, out):  # pragma: no cover - compiled
    for t in range(out.size):
        out[t] = lut[codes[t]] * s


@njit(**PARALLEL)
def _decode_kernel(data, store, lut, block, mult, out):  # pragma: no cover - compiled
    n = out.size
    for p in prange((n + PART - 1) // PART):
        lo = p * PART
        hi = min(n, lo + PART)
        if store == 8:
            codes = data[lo:hi]
        else:  # PART is even: the part's nibbles are whole bytes
            codes = np.empty(hi - lo, np.uint8)
            src = data[lo // 2:(hi + 1) // 2]
            for j in range((hi - lo) // 2):
                codes[2 * j] = src[j] & 15
                codes[2 * j + 1] = src[j] >> 4
            if (hi - lo) & 1:
                codes[hi - lo - 1] = src[(hi - lo) // 2] & 15
        i = lo
        while i < hi:  # runs of one block
            b = i // block
            end = min(hi, (b + 1) * block)
            _values(codes[i - lo:end - lo], lut, mult[b], out[i:end])
            i = end


def decode_blocks(data: np.ndarray, store: int, lut: np.ndarray, block: int, mult: np.ndarray, out: np.ndarray) -> None:
    """out[i] = lut[code i] · mult[i // block] for the codes ``data``, two per byte (``store`` 4) or one (8)."""
    if data.size < (out.size if store == 8 else (out.size + 1) // 2):  # (the table has an entry for every code of its width)
        raise ValueError("lowprec decode: fewer codes than the output needs")
    run_parallel(_decode_kernel, out.size, data, np.int64(store), lut, np.int64(block), mult, out)
