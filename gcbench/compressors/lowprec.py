"""Block-scaled low-precision formats: ``fp8``, ``mxfp8``, ``mxfp4``, ``nvfp4``, ``blockint``.

Each splits the flat tensor into blocks of B elements (the last block may be shorter: its scale
comes from its own elements and its bytes are counted), gives each block one scale, and sends
every element as a code of an element format (:mod:`gcbench.kernels.lowprec`) of
``y = x · min(1/scale, float32 max)`` (exactly ``x / scale`` for the power-of-two MX scales),
saturated at the format's largest finite value and rounded to nearest even (``rounding=nearest``)
or stochastically (``rounding=stochastic``).  Decoded: ``code value × scale``.

| name | elements | scale per block | body |
|---|---|---|---|
| ``fp8`` | e4m3 or e5m2 | fp32 ``amax / max`` (448 or 57344), per tensor (B = d) or per block of B | 4·⌈d/B⌉ + d bytes |
| ``mxfp8`` | e4m3 | E8M0 ``2^(⌊log2 amax⌋ − 8)``, B = 32 (OCP MX v1.0) | ⌈d/32⌉ + d bytes |
| ``mxfp4`` | e2m1 | E8M0 ``2^(⌊log2 amax⌋ − 2)``, B = 32 (OCP MX v1.0) | ⌈d/32⌉ + ⌈d/2⌉ bytes |
| ``nvfp4`` | e2m1 | e4m3 of ``(amax / 6) / ts``, B = 16, times one fp32 ``ts = amax_tensor / (448·6)`` | 4 + ⌈d/16⌉ + ⌈d/2⌉ bytes |
| ``blockint`` | int2 … int8 (symmetric) | fp32 ``amax / qmax``, qmax = 2^(bits−1) − 1, B = 256 | 4·⌈d/B⌉ + ⌈bits·d/8⌉ bytes |

Wire layout: the scales first (fp32 little-endian, or one byte each), then the codes bit-packed
least significant bit first (4-bit codes two per byte, the first element in the low nibble; other
widths than 8 and 4 as the fixed-width fields of :func:`gcbench.core.codec.pack_bits`).  The header carries the element format and B
where the codec has a choice (``fp8``: ``fmt``, ``B``; ``blockint``: ``bits``, ``B``).

Non-finite input: a block holding a NaN or ±inf gets a NaN scale (fp32 NaN, E8M0 0xFF, or for
``nvfp4`` a NaN tensor scale, since the tensor amax is then non-finite) and decodes to NaN in
every element; nothing raises (the OCP MX spec's rule, used for every format here).  A block
whose scale is 0 (all zeros, or an amax so small that ``amax / max`` underflows float32) sends
zero codes.  Decoding never warns: scale bytes that no encoder writes (an NVFP4 tensor scale of
±inf, NaN or near the float32 maximum, whose products with the block scales overflow) decode
quietly to ±inf or NaN by the same rule, as the hostile-payload tests check with warnings as errors.

Bias: with ``rounding=nearest`` every format is biased (deterministic rounding).  Stochastic
rounding is unbiased for ``fp8`` and ``blockint``, whose scale maps the block's amax onto the
largest code, so nothing saturates (up to one float32 rounding of ``x / scale``).  For ``mxfp8``,
``mxfp4`` and ``nvfp4`` it is not: the MX spec's floor rule leaves block values up to
``2^(emax+1)`` (512 for e4m3, 8 for e2m1) that saturate at 448 or 6, and NVFP4's e4m3-rounded
block scale may round below ``amax / 6``; their cards stay biased whatever the rounding.

Paths: on CPU tensors with numba, blocks of at most 65536 elements are encoded in one pass each
(amax, scale, codes while the block is in cache); larger blocks (``fp8`` per tensor) take an
amax pass in parallel parts, then a code pass.  Elsewhere (a CUDA tensor, ``GCBENCH_KERNELS=torch``)
:func:`encode_torch` computes the same bytes with torch ops; it is also the class's ``reference``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import overload

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors.cards.lowprec import BLOCKINT_CARD, FP8_CARD, MXFP4_CARD, MXFP8_CARD, NVFP4_CARD
from gcbench.core import codec, codec_torch
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_numpy, body_tensor, meta_int, meta_keys, meta_str
from gcbench.core.payload import Payload
from gcbench.kernels import lowprec as lp

_NV_TS_DIV = 448.0 * 6.0  # NVFP4's tensor scale: amax / (e4m3 max · e2m1 max)
_LUTS = {name: fmt.lut() for name, fmt in lp.FORMATS.items()}
_LUTS_T = {name: torch.from_numpy(lut) for name, lut in _LUTS.items()}  # made once: a call never converts
_LUTS_ON: dict[tuple[str, torch.device], torch.Tensor] = {}


def _lut(name: str, device: torch.device) -> torch.Tensor:
    """The decoder's table of format ``name`` as a float32 tensor on ``device`` (copied there once per device)."""
    lut = _LUTS_ON.get((name, device))
    if lut is None:
        lut = _LUTS_ON[(name, device)] = _LUTS_T[name].to(device)
    return lut


def _scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    """A float32 0-dim tensor on ``like``'s device: torch divides by a Python number as a multiplication
    by its reciprocal on a GPU (an ulp off), by a tensor exactly."""
    return torch.full((), value, dtype=torch.float32, device=like.device)


def scales_torch(amax: torch.Tensor, kind: int, fmt: lp.ElemFormat, ts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale bytes on the wire, float32 multiplier per block) from the blocks' amax (NaN: non-finite block).

    The numba kernel's ``_scale`` (:mod:`gcbench.kernels.lowprec`) computes the same bits.
    """
    if kind == lp.SCALE_F32:
        s = amax / _scalar(fmt.maxv, amax)
        return s.contiguous().view(torch.uint8), s
    if kind == lp.SCALE_E8M0:
        ex = (((amax.view(torch.int32) >> 23) & 0xFF) - fmt.emax).clamp(min=0)
        ex = torch.where(torch.isnan(amax), 255, ex)
        mult = torch.where(ex == 0, _scalar(2.0**-127, amax), (ex << 23).view(torch.float32))
        mult = torch.where(ex == 255, _scalar(float("nan"), amax), mult)
        return ex.to(torch.uint8), mult
    v = torch.where(ts > 0, amax / _scalar(6.0, amax) / ts, _scalar(0.0, amax))
    v = torch.where(torch.isnan(v), _scalar(0.0, amax), v)
    code = lp.quantize_torch(v, lp.E4M3)
    return code, _lut("e4m3", amax.device)[code.long()] * ts


@overload
def _tensor_scale(amax: torch.Tensor) -> torch.Tensor: ...


@overload
def _tensor_scale(amax: float) -> float: ...


def _tensor_scale(amax: float | torch.Tensor) -> float | torch.Tensor:
    """NVFP4's fp32 tensor scale amax / 2688 (NaN when the tensor holds a non-finite value)."""
    if isinstance(amax, torch.Tensor):
        return amax / _scalar(_NV_TS_DIV, amax)
    return float(np.float32(amax) / np.float32(_NV_TS_DIV))


def encode_torch(flat: torch.Tensor, fmt: lp.ElemFormat, kind: int, block: int, seed: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(body, decoded) of one tensor in plain torch on its own device: the definition, and the path off the CPU kernels."""
    d = flat.numel()
    amax = lp.block_amax_torch(flat, block)
    ts = _tensor_scale(amax.max()) if kind == lp.SCALE_NV else _scalar(0.0, flat)
    scale_bytes, mult = scales_torch(amax, kind, fmt, ts)
    den = mult.repeat_interleave(block)[:d]
    inv = torch.where(mult > 0, (_scalar(1.0, mult) / mult).clamp(max=lp.F32_MAX), _scalar(0.0, mult)).repeat_interleave(block)[:d]
    y = torch.where(inv > 0, flat * inv, _scalar(0.0, flat))
    u = None if seed is None else lp.uniforms_torch(seed, d, flat.device)
    codes = lp.quantize_torch(y, fmt, u)
    wire = pack_codes_torch(codes, fmt)
    head = [ts.reshape(1).view(torch.uint8)] if kind == lp.SCALE_NV else []
    body = torch.cat([*head, scale_bytes.reshape(-1), wire])
    decoded = _lut(fmt.name, flat.device)[codes.long()] * den
    return body, decoded


def pack_codes_torch(codes: torch.Tensor, fmt: lp.ElemFormat) -> torch.Tensor:
    """The wire bytes of one code per element: as they are at 8 bits, nibbles at 4, else LSB-first fields (on the codes' device)."""
    if fmt.bits == 8:
        return codes
    if fmt.bits == 4:
        return lp.pack_nibbles_torch(codes)
    return codec_torch.pack_bits(codes, fmt.bits)


def encode_cpu(x: np.ndarray, fmt: lp.ElemFormat, kind: int, block: int, seed: int | None) -> np.ndarray:
    """The same body as :func:`encode_torch` with the numba kernels (``x`` contiguous float32)."""
    d = x.size
    nb = -(-d // block)
    head = 4 if kind == lp.SCALE_NV else 0
    snb = 4 * nb if kind == lp.SCALE_F32 else nb
    body = np.empty(head + snb + fmt.packed_nbytes(d), np.uint8)
    packed = fmt.bits != fmt.store  # widths other than 8 and 4: the kernels write bytes, packed after
    codes = np.empty(d, np.uint8) if packed else body[head + snb:]
    ts = 0.0
    if kind == lp.SCALE_NV:
        amax = kernels.absmax(x)
        ts = _tensor_scale(amax if np.isfinite(amax) else float("nan"))
        body[:4] = np.array([ts], "<f4").view(np.uint8)
    if block <= lp.PART:
        scales = body[head:head + snb]  # the kernel writes the scales in place (head is 0 for fp32 scales: aligned)
        lp.encode_blocks(x, block, kind, fmt, ts, seed, scales.view(np.uint32) if kind == lp.SCALE_F32 else scales, codes)
    else:
        amax_t = torch.from_numpy(lp.block_amax(x, block))
        scale_bytes, mult_t = scales_torch(amax_t, kind, fmt, _scalar(ts, amax_t))
        body[head:head + snb] = scale_bytes.numpy()
        lp.encode_elements(x, block, mult_t.numpy(), fmt, seed, codes)
    if packed:
        body[head + snb:] = codec.pack_bits(codes, fmt.bits)
    return body


def multipliers(scale_bytes: np.ndarray, kind: int, ts: float) -> np.ndarray:
    """The float32 multiplier of each block from its scale bytes (the decoder's side of :func:`scales_torch`)."""
    if kind == lp.SCALE_F32:
        return scale_bytes.view("<f4").astype(np.float32)
    if kind == lp.SCALE_E8M0:
        ex = scale_bytes.astype(np.int32)
        mult = (ex << 23).view(np.float32)
        mult[ex == 0] = np.float32(2.0**-127)
        mult[ex == 255] = np.float32(np.nan)
        return mult
    # A hostile (or merely huge) tensor scale overflows the product to ±inf, and an inf one times a zero block
    # scale gives NaN: both are the non-finite rule's quiet results (module doc), not warnings on the caller's stderr.
    with np.errstate(over="ignore", invalid="ignore"):
        return _LUTS["e4m3"][scale_bytes] * np.float32(ts)


def lowprec_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """Decoded tensor by the plain torch definition (:func:`encode_torch`; draws the key like ``compress``)."""
    assert isinstance(comp, _BlockScaled)
    flat = x32.reshape(-1)
    seed = state.randint64() if comp._stochastic() else None
    return encode_torch(flat, comp._fmt(), comp.kind, min(comp._block(flat.numel()), flat.numel()), seed)[1]


class _BlockScaled(Compressor):
    """The common body: a block size, an element format and a scale rule; subclasses say which."""

    kind: int = lp.SCALE_F32
    reference = lowprec_reference

    @abstractmethod
    def _fmt(self) -> lp.ElemFormat:
        """The element format (e4m3, e5m2, e2m1 or an integer width)."""

    @abstractmethod
    def _block(self, d: int) -> int:
        """The block size of a tensor of ``d`` elements (``d`` itself for a per-tensor scale)."""

    def _meta(self, d: int) -> dict:
        return {}

    def _stochastic(self) -> bool:
        return self.params["rounding"] == "stochastic"

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        flat = a.reshape(-1)
        d = flat.numel()
        fmt, block = self._fmt(), min(self._block(d), d)
        seed = state.randint64() if self._stochastic() else None
        if kernels.cpu_fast(flat):
            return encode_cpu(kernels.flat_f32(flat), fmt, self.kind, block, seed), self._meta(d), None
        body, decoded = encode_torch(flat.float(), fmt, self.kind, block, seed)
        return body, self._meta(d), decoded

    # --- decoding: the header says the format and block size, the body holds scales then codes

    @abstractmethod
    def _wire(self, payload: Payload) -> tuple[lp.ElemFormat, int]:
        """(element format, block size) this payload was encoded with."""

    def _sizes(self, payload: Payload) -> tuple[int, int, int]:
        """(head bytes, scale bytes, code bytes) of this payload's body."""
        fmt, block = self._wire(payload)
        d = payload.numel
        nb = -(-d // min(block, d))
        return (4 if self.kind == lp.SCALE_NV else 0), (4 * nb if self.kind == lp.SCALE_F32 else nb), fmt.packed_nbytes(d)

    def _expected_body_nbytes(self, payload: Payload) -> int:
        return sum(self._sizes(payload))

    def _decode(self, payload: Payload) -> torch.Tensor:
        fmt, block = self._wire(payload)
        d = payload.numel
        block = min(block, d)
        head, snb, cnb = self._sizes(payload)
        if payload.data.numel() != head + snb + cnb:
            raise PayloadError(f"{self.name} body has {payload.data.numel()} bytes, expected {head + snb + cnb}")
        if not (kernels.available() and payload.data.device.type == "cpu"):
            return decode_torch(body_tensor(payload), fmt, self.kind, block, d)
        body = body_numpy(payload)
        ts = float(body[:4].view("<f4")[0]) if head else 0.0
        mult = multipliers(body[head:head + snb], self.kind, ts)
        codes = body[head + snb:]
        if fmt.bits != fmt.store:
            codes = codec.unpack_bits(codes, fmt.bits, d).astype(np.uint8)
        out = kernels.empty(d)
        lp.decode_blocks(codes, 8 if fmt.bits != 4 else 4, _LUTS[fmt.name], block, mult, out.numpy())
        return out


def _f32(raw: torch.Tensor) -> torch.Tensor:
    """Little-endian float32 values of uint8 bytes (copied first when the slice is not 4-byte aligned)."""
    if raw.storage_offset() % 4:
        raw = raw.clone()
    return raw.view(torch.float32)


def multipliers_torch(scale_bytes: torch.Tensor, kind: int, ts: torch.Tensor) -> torch.Tensor:
    """:func:`multipliers` with torch ops on the bytes' device (``ts`` a float32 0-dim tensor: NVFP4's tensor scale)."""
    if kind == lp.SCALE_F32:
        return _f32(scale_bytes)
    if kind == lp.SCALE_E8M0:
        ex = scale_bytes.to(torch.int32)
        mult = torch.where(ex == 0, _scalar(2.0**-127, ts), (ex << 23).view(torch.float32))
        return torch.where(ex == 255, _scalar(float("nan"), ts), mult)
    return _lut("e4m3", scale_bytes.device)[scale_bytes.long()] * ts


def decode_torch(body: torch.Tensor, fmt: lp.ElemFormat, kind: int, block: int, d: int) -> torch.Tensor:
    """The decoded float32 tensor of a body (length checked) with torch ops on its device: no host reads."""
    head = 4 if kind == lp.SCALE_NV else 0
    nb = -(-d // block)
    snb = 4 * nb if kind == lp.SCALE_F32 else nb
    ts = _f32(body[:4]).reshape(()) if head else torch.zeros((), dtype=torch.float32, device=body.device)
    mult = multipliers_torch(body[head:head + snb], kind, ts)
    c = body[head + snb:]
    if fmt.bits == 4:
        c = lp.unpack_nibbles_torch(c, d)
    elif fmt.bits != 8:
        c = codec_torch.unpack_bits(c, fmt.bits, d)
    return _lut(fmt.name, body.device)[c.long()] * mult.repeat_interleave(block)[:d]


class Fp8(_BlockScaled):
    """``fp8``: e4m3 or e5m2 elements with an fp32 scale amax/max per tensor (torchao's tensorwise fp8) or per block."""

    info = FP8_CARD

    def _fmt(self) -> lp.ElemFormat:
        return lp.FORMATS[self.params["format"]]

    def _block(self, d: int) -> int:
        return d if self.params["scale"] == "tensor" else self.params["block"]

    def _meta(self, d: int) -> dict:
        return {"fmt": self.params["format"], "B": min(self._block(d), d)}

    def _wire(self, payload: Payload) -> tuple[lp.ElemFormat, int]:
        meta_keys(payload, "fmt", "B")
        return lp.FORMATS[meta_str(payload, "fmt", ("e4m3", "e5m2"))], meta_int(payload, "B", 1, 2**62)


class _FixedFormat(_BlockScaled):
    """A format whose element type and block size are fixed by its spec: the payload's meta is empty."""

    elem: lp.ElemFormat = lp.E4M3
    block: int = 32

    def _fmt(self) -> lp.ElemFormat:
        return self.elem

    def _block(self, d: int) -> int:
        return self.block

    def _wire(self, payload: Payload) -> tuple[lp.ElemFormat, int]:
        meta_keys(payload)
        return self.elem, self.block


class _Mx(_FixedFormat):
    """OCP Microscaling: 32-element blocks sharing an E8M0 scale."""

    kind = lp.SCALE_E8M0


class MxFp8(_Mx):
    """``mxfp8``: MXFP8 (e4m3 elements), OCP MX v1.0."""

    info = MXFP8_CARD
    elem = lp.E4M3


class MxFp4(_Mx):
    """``mxfp4``: MXFP4 (e2m1 elements, two per byte), OCP MX v1.0."""

    info = MXFP4_CARD
    elem = lp.E2M1


class NvFp4(_FixedFormat):
    """``nvfp4``: e2m1 elements, an e4m3 scale per 16, one fp32 tensor scale (NVIDIA's two-level scaling)."""

    info = NVFP4_CARD
    kind = lp.SCALE_NV
    elem = lp.E2M1
    block = 16


class BlockInt(_BlockScaled):
    """``blockint``: symmetric 2- to 8-bit integers (int8, int4 …) per block of B with an fp32 scale amax/qmax (ZeRO++ qgZ style)."""

    info = BLOCKINT_CARD

    def _fmt(self) -> lp.ElemFormat:
        return lp.INTS[self.params["bits"]]

    def _block(self, d: int) -> int:
        return self.params["block"]

    def _meta(self, d: int) -> dict:
        return {"bits": self.params["bits"], "B": min(self._block(d), d)}

    def _wire(self, payload: Payload) -> tuple[lp.ElemFormat, int]:
        meta_keys(payload, "bits", "B")
        return lp.INTS[meta_int(payload, "bits", 2, 8)], meta_int(payload, "B", 1, 2**62)
