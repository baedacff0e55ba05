"""Natural compression and natural dithering — Horváth et al. 2019, "Natural Compression for
Distributed Deep Learning" (arXiv:1905.10988).

Two registered compressors share this module:

* ``natural`` — natural compression C_nat.  Every value rounds stochastically to one of its two
  neighbouring powers of two: for |x| in [2^e, 2^(e+1)] the result is ``sign(x)·2^(e+1)`` with
  probability (|x| − 2^e)/2^e, else ``sign(x)·2^e``.  Unbiased with ω = 1/8 (the worst case is
  |x| = (4/3)·2^e).  Wire format: 9 bits per element, a sign bit and the 8-bit float32 exponent
  field of the result (code 0 = zero, code c in 1..254 = 2^(c − 127)), i.e. exactly
  ``ceil(9·d / 8)`` body bytes, laid out as the d exponent bytes followed by the d packed sign bits.

  Choices the paper leaves open (it works with normal float32 numbers only):

  - zeros stay zero (code 0);
  - subnormals (|x| < 2^−126) round stochastically between 0 and the smallest normal 2^−126,
    up with probability |x|/2^−126, which keeps the rounding unbiased;
  - the top binade [2^127, 2^128) always rounds *down* to 2^127, because 2^128 is not a finite
    float32; this is the one place the compressor is biased (relative error < 1/2, far outside
    any gradient's range);
  - ±inf keeps code 255 and decodes to ±inf; NaN (not representable in 9 bits) also decodes to
    ±inf, so a non-finite input stays visibly non-finite;
  - float16 input: its top binade [2^15, 65504] would round up to 2^16, which float16 cannot hold
    (it would become inf), so a float16 payload decodes 2^16 as 2^15 — the same "top binade rounds
    down" rule as float32's, biased only for |x| ≥ 2^15.  (bfloat16 has float32's range.)

  The probability is read straight from the mantissa bits, p = M/2^23 (exact in float32); with
  the generator's 24-bit float32 uniforms, P(u < p) = p exactly, so the rounding is exactly
  unbiased, not only up to float error.

* ``natural_dither`` — natural dithering D_nat^{p,s} on the whole tensor: n = ‖x‖_p
  (p = 2 by default, or inf), u_i = |x_i|/n, levels 0, 2^(1−s), …, 1/2, 1 (level index
  j = 0..s, level j > 0 is 2^(j−s)); u in [l_low, l_high] rounds up with probability
  (u − l_low)/(l_high − l_low).  Unbiased with
  ω = 1/8 + d^(1/r)·2^(1−s)·min(1, d^(1/r)·2^(1−s)), r = min(p, 2) (Horváth et al. 2019).
  Wire format: the float32 norm, then one packed field per element holding (level << 1) | sign,
  1 + ceil(log2(s+1)) bits wide: exactly ``ceil((32 + d·(1 + ceil(log2(s+1))))/8)`` body bytes.
  An all-zero tensor has n = 0 and sends level 0 everywhere.

The dithering helpers are shared with ``topk_dither`` (Beznosikov et al. 2020), which dithers the
top-k values.  Each fast function has a plain per-element ``*_reference`` twin used by the tests.

Random numbers and speed: each compression draws one 64-bit key from the state's generator, and
element i uses the i-th counter-based uniform of that key (SplitMix64 on the 2^-24 grid,
:mod:`gcbench.kernels`).  On CPU one numba pass draws, rounds and writes the body (natural
dithering first takes the norm in a read-only pass); the vectorised torch functions below are
the compressors' ``reference`` and the path on other devices, and draw the same uniforms, so
both paths produce the same bytes.  Version 2 of both compressors: the uniforms come from this
generator (version 1 drew them from the state's PCG64).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors.cards.natural import NATURAL_CARD, NATURAL_DITHER_CARD
from gcbench.core import codec, codec_torch
from gcbench.core.codec_torch_elias import settle
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_numpy, body_tensor, meta_int, meta_keys
from gcbench.core.payload import Payload

OMEGA_NATURAL = 1.0 / 8.0  # variance bound of C_nat (Horváth et al. 2019)

_SIGN_BIT = -(2**31)  # int32 with only the sign bit set
_MANTISSA = 0x7FFFFF
_TOP_NORMAL_EXP = 254  # biased exponent of [2^127, 2^128): rounding up would overflow


# ----------------------------------------------------------------------------- natural compression


def natural_codes(a: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(8-bit exponent codes as uint8, negative mask) of C_nat(a) given float32 uniforms ``u``.

    The float32 bit pattern gives both neighbours at once: the biased exponent E is the code of
    the lower power (E = 0 for subnormals and zero, whose lower neighbour is 0) and E + 1 the
    code of the upper one; the mantissa M gives the probability of rounding up, M/2^23, since
    |x| = (1 + M/2^23)·2^(E−127) for normals and (M/2^23)·2^−126 for subnormals.
    """
    bits = a.reshape(-1).contiguous().view(torch.int32)
    exp = (bits >> 23) & 0xFF
    p = (bits & _MANTISSA).to(torch.float32) * (1.0 / 2**23)  # exact: M < 2^23
    up = (u < p) & (exp < _TOP_NORMAL_EXP)  # top binade and inf/NaN never round up
    code = exp + up.to(torch.int32)
    neg = (bits < 0) & (code > 0)  # no sign on zero results, so all-zero in gives +0 out
    return code.to(torch.uint8), neg


def natural_values(code: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """float32 values ±2^(code−127) (0 for code 0) built directly as bit patterns."""
    bits = (code.to(torch.int32) << 23) | torch.where(neg, _SIGN_BIT, 0).to(torch.int32)
    return bits.view(torch.float32)


def natural_reference(a: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per-element definition of C_nat with the same uniforms (the tests' oracle)."""
    out = []
    for x, r in zip(a.reshape(-1).tolist(), u.reshape(-1).tolist(), strict=True):
        ax = abs(x)
        if ax == 0.0:
            out.append(0.0)
            continue
        if ax < 2.0**-126:  # subnormal: neighbours 0 and the smallest normal
            low, high = 0.0, 2.0**-126
        else:
            low = 2.0 ** math.floor(math.log2(ax))
            if ax < low:  # guard log2 rounding up at a binade edge
                low /= 2
            elif ax >= 2 * low:
                low *= 2
            high = 2 * low
        if high >= 2.0**128:
            val = low  # top binade: 2^128 is not a finite float32
        else:
            val = high if r < (ax - low) / (high - low) else low
        out.append(math.copysign(val, x) if val else 0.0)
    return torch.tensor(out, dtype=torch.float32)


def natural_torch(a: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(body, decoded) of natural compression in plain torch with the kernels' uniforms, on ``a``'s device."""
    code, neg = natural_codes(a, kernels.uniforms(seed, a.numel(), a.device))
    # 9 bits per element: d exponent bytes, then the d sign bits packed (ceil(9d/8) bytes).
    body = torch.cat([code, codec_torch.pack_bits(neg, 1)])
    return body, natural_values(code, neg)


def natural_compress_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """Decoded natural compression of ``x32`` by the vectorised torch definition (draws like ``compress``)."""
    return natural_torch(x32, state.randint64())[1]


class Natural(Compressor):
    """``natural``: natural compression C_nat (Horváth et al. 2019, arXiv:1905.10988), every value rounded
    stochastically to one of its two neighbouring powers of two (sign and exponent sent, 9 bits)."""

    info = NATURAL_CARD
    reference = natural_compress_reference

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        seed = state.randint64()
        if not kernels.cpu_fast(a):
            return natural_torch(a, seed)[0], {}, None
        d = a.numel()
        body = np.empty(d + codec.packed_nbytes(d, 1), np.uint8)
        kernels.natural_encode(kernels.flat_f32(a), seed, body)
        return body, {}, None

    def _expected_body_nbytes(self, payload: Payload) -> int:
        meta_keys(payload)
        return payload.numel + codec.packed_nbytes(payload.numel, 1)  # an exponent byte and a sign bit each

    def _decode(self, payload: Payload) -> torch.Tensor:
        d = payload.numel
        n = payload.data.numel()
        if n != d + codec.packed_nbytes(d, 1):
            raise PayloadError(f"natural body has {n} bytes, expected {d + codec.packed_nbytes(d, 1)}")
        f16 = payload.dtype == torch.float16  # 2^16 is inf in float16: the top binade rounds down (module docstring)
        if not _host_path(payload):
            body = body_tensor(payload)
            code = body[:d]
            out = natural_values(code, codec_torch.unpack_bits(body[d:], 1, d).bool() & (code > 0))
            return torch.where(out.abs() == _F16_OVERFLOW, out * 0.5, out) if f16 else out
        out = kernels.empty(d)
        kernels.natural_decode(body_numpy(payload), out.numpy())
        if f16:
            out[out.abs() == _F16_OVERFLOW] *= 0.5
        return out


_F16_OVERFLOW = 65536.0  # 2^16: the first power of two above float16's largest finite value 65504


def _host_path(payload: Payload) -> bool:
    """Whether a body is read by the numba kernels (a CPU body, numba present) rather than with torch ops."""
    return kernels.available() and payload.data.device.type == "cpu"


def natural_bits(d: int) -> int:
    """Body bits of ``natural`` (the tests' oracle): 9 per element."""
    return 9 * d


# ----------------------------------------------------------------------------- natural dithering


def level_bits(s: int) -> int:
    """Bits of a level index 0..s: ceil(log2(s+1))."""
    return max(1, math.ceil(math.log2(s + 1)))


def dither_table(s: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The s+1 levels 0, 2^(1−s), …, 1/2, 1 as float32 (index j > 0 holds 2^(j−s)), made on ``device`` from their
    bit patterns (exact, and no host-to-device copy)."""
    j = torch.arange(s + 1, dtype=torch.int32, device=device)
    return torch.where(j > 0, (j - s + 127) << 23, 0).view(torch.float32)


def tensor_norm(v: torch.Tensor, p: str) -> float:
    """‖v‖_p as a float32-representable Python float (the value that is sent)."""
    if v.numel() == 0:
        return 0.0
    # a norm beyond float32's max is sent as +inf (no warning): the wire holds a float32, and the runner
    # fails such a case with its reason (the decoded tensor is not finite)
    with np.errstate(over="ignore"):
        if kernels.cpu_fast(v):
            x = kernels.flat_f32(v)
            return float(np.float32(kernels.l2norm(x) if p == "2" else kernels.absmax(x)))
        n = v.double().pow(2).sum().sqrt() if p == "2" else v.abs().max().double()
        return float(np.float32(float(n)))


def tensor_norm_torch(v: torch.Tensor, p: str) -> torch.Tensor:
    """:func:`tensor_norm` as a float32 0-dim tensor on ``v``'s device (no host read): the float64 2-norm or max|v|,
    rounded once to float32 (+inf beyond its range)."""
    if v.numel() == 0:
        return torch.zeros((), dtype=torch.float32, device=v.device)
    n = v.double().pow(2).sum().sqrt() if p == "2" else v.abs().max().double()
    return n.to(torch.float32)


def dither_levels(u: torch.Tensor, s: int, uniforms: torch.Tensor) -> torch.Tensor:
    """Level indices (int64, 0..s) of natural dithering of ratios ``u`` in [0, 1].

    For u >= 2^(1−s) the bracketing levels are 2^⌊log2 u⌋ and twice that, so with
    u = m·2^e (frexp, m in [1/2, 1)) the lower index is e − 1 + s and the probability of rounding
    up is (u − 2^(e−1))/2^(e−1) = 2m − 1 (exact).  Below 2^(1−s) the levels are 0 and 2^(1−s) and
    the probability is u·2^(s−1).
    """
    m, e = torch.frexp(u)
    small = u < 2.0 ** (1 - s)  # includes u = 0, for which frexp's exponent is meaningless
    low = (e + (s - 1)).masked_fill_(small, 0)
    p = torch.where(small, u * 2.0 ** (s - 1), 2.0 * m - 1.0)
    return (low + (uniforms < p).to(low.dtype)).to(torch.int64)


def dither_values(levels: torch.Tensor, neg: torch.Tensor, n: torch.Tensor | float, s: int) -> torch.Tensor:
    """Decoded float32 values n·sign·level (identical arithmetic on both sides of the wire; ``n`` float32-exact,
    a number or a 0-dim tensor on the levels' device)."""
    mag = dither_table(s, levels.device)[levels] * n
    return torch.where(neg, -mag, mag)


def dither_reference(v: torch.Tensor, n: float, s: int, uniforms: torch.Tensor) -> torch.Tensor:
    """Per-element natural dithering of ``v`` with norm ``n`` (the tests' oracle): decoded values."""
    levels = [0.0] + [2.0 ** (j - s) for j in range(1, s + 1)]
    out = []
    for x, r in zip(v.reshape(-1).tolist(), uniforms.reshape(-1).tolist(), strict=True):
        # the ratio in float32 arithmetic, as it is computed on the wire side
        u = min(float(np.float32(abs(x)) / np.float32(n)), 1.0) if n > 0 else 0.0
        j = max(i for i in range(s + 1) if levels[i] <= u)  # lower bracketing level
        if j == s:
            val = 1.0
        else:
            lo, hi = levels[j], levels[j + 1]
            val = hi if r < (u - lo) / (hi - lo) else lo
        out.append(math.copysign(val * n, x) if val else 0.0)
    return torch.tensor(out, dtype=torch.float32)


def dither_encode(v: torch.Tensor, s: int, p: str, uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(norm sent as float32, a 0-dim tensor on ``v``'s device; level indices; negative mask) of natural dithering
    of flat ``v``, with no host read."""
    n = tensor_norm_torch(v, p)
    # divided by the norm as a tensor: exact on every device (a Python divisor is a reciprocal multiply on a GPU)
    u = torch.where(n > 0, (v.abs() / n).clamp_(max=1.0), 0.0)  # ≤ 1 mathematically; clamp guards rounding
    levels = dither_levels(u, s, uniforms)
    neg = (v < 0) & (levels > 0)
    return n, levels, neg


def omega_natural_dither(d: int, s: int, p: str) -> float:
    """Variance bound ω of natural dithering (Horváth et al. 2019), r = min(p, 2)."""
    r = 2.0  # p = 2 and p = inf both give r = min(p, 2) = 2
    t = d ** (1.0 / r) * 2.0 ** (1 - s)
    return 1.0 / 8.0 + t * min(1.0, t)


def natural_dither_torch(flat: torch.Tensor, s: int, p: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(body, decoded) of natural dithering in plain torch with the kernels' uniforms, on ``flat``'s device."""
    n, levels, neg = dither_encode(flat, s, p, kernels.uniforms(seed, flat.numel(), flat.device))
    field = (levels << 1) | neg.to(torch.int64)
    body = torch.cat([n.reshape(1).view(torch.uint8), codec_torch.pack_bits(field, 1 + level_bits(s))])
    return body, dither_values(levels, neg, n, s)


def natural_dither_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """Decoded natural dithering of ``x32`` by the vectorised torch definition (draws like ``compress``)."""
    return natural_dither_torch(x32.reshape(-1), comp.params["s"], comp.params["p"], state.randint64())[1]


class NaturalDither(Compressor):
    """``natural_dither``: natural dithering (Horváth et al. 2019, arXiv:1905.10988), each |x_i| / ‖x‖_p
    rounded stochastically to one of the levels 2^-j."""

    info = NATURAL_DITHER_CARD
    reference = natural_dither_reference

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        flat = a.reshape(-1)
        s, p = self.params["s"], self.params["p"]
        seed = state.randint64()
        if not kernels.cpu_fast(flat):
            body_t, decoded = natural_dither_torch(flat, s, p, seed)  # the decoded tensor too: the decoder's check is a host read
            return body_t, {"s": s}, decoded if ctx.need_decoded else None
        x = kernels.flat_f32(flat)
        n = tensor_norm(flat, p)
        w = 1 + level_bits(s)
        body = np.empty(4 + codec.packed_nbytes(x.size, w), np.uint8)
        body[:4] = np.array([n], "<f4").view(np.uint8)
        kernels.dither_pack(x, n, s, seed, w, body[4:])
        return body, {"s": s}, None

    def _expected_body_nbytes(self, payload: Payload) -> int:
        meta_keys(payload, "s")
        s = meta_int(payload, "s", 1, 120)
        return 4 + codec.packed_nbytes(payload.numel, 1 + level_bits(s))  # float32 norm, sign + level fields

    def _decode(self, payload: Payload) -> torch.Tensor:
        d = payload.numel
        s = meta_int(payload, "s")
        if not 1 <= s <= 120:
            raise PayloadError(f"natural_dither payload has an invalid level count s={s}")
        w = 1 + level_bits(s)
        nbytes = payload.data.numel()
        if nbytes != 4 + codec.packed_nbytes(d, w):
            raise PayloadError(f"natural_dither body has {nbytes} bytes, expected {4 + codec.packed_nbytes(d, w)}")
        if not _host_path(payload):
            return _dither_decode_torch(body_tensor(payload), d, s, w)
        body = body_numpy(payload)
        out = kernels.empty(d)
        if kernels.dither_decode(body[4:], w, s, float(body[:4].view("<f4")[0]), out.numpy()) > s:
            raise PayloadError("natural_dither body has a level index above s")
        return out


def _dither_decode_torch(body: torch.Tensor, d: int, s: int, w: int) -> torch.Tensor:
    """A natural dithering body decoded with torch ops on its device; its one scalar read is the check that no
    level index exceeds s, made before the table lookup (where such an index would be out of range)."""
    field = codec_torch.unpack_bits(body[4:], w, d)
    levels = field >> 1
    if d:
        settle([(levels.max() > s, "natural_dither body has a level index above s")])
    return dither_values(levels, (field & 1).bool(), body[:4].clone().view(torch.float32).reshape(()), s)


def natural_dither_bits(d: int, s: int) -> int:
    """Body bits of ``natural_dither`` (the tests' oracle): 32 + d·(1 + ceil(log2(s+1)))."""
    return 32 + d * (1 + level_bits(s))
