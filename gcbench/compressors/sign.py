"""Sign compressors: ``signsgd`` (1 bit per element) and ``efsignsgd`` (scaled sign with EF).

* ``signsgd`` — Bernstein et al. 2018: send sign(x), d bits, decoded as ±1 (the optimizer's step
  size supplies the scale).  Zero maps to +1; an all-zero tensor is flagged in the header and
  decodes to zeros.
* ``efsignsgd`` — Karimireddy et al. 2019, "Error Feedback Fixes SignSGD": with the shared error
  feedback, send sign(a)·‖a‖₁/d for a = x + e: d + 32 bits.  Unlike GRACE's version, the
  residual really is applied.

Fast paths (CPU, :mod:`gcbench.kernels`): the sign bits are packed straight from the float
comparison, 64 elements per register, in the same pass that detects an all-zero tensor;
``efsignsgd`` runs error feedback in two passes over the residual buffer, updated in place:
pass 1 (:meth:`EFSignSGD._form_corrected`) forms a = x + e and ‖a‖₁, pass 2 (``_encode``) writes
the bits and e = a − sign(a)·scale, instead of separate x + e, norm, encode, decode and
subtraction passes.  The same definition in plain torch is each class's ``reference``.

Torch path (a CUDA tensor, ``GCBENCH_KERNELS=torch``): the bits are packed and unpacked with
:mod:`gcbench.core.codec_torch` on the input's device and ``efsignsgd``'s float32 scale is computed
and written there, so nothing is copied to the host; ``signsgd`` reads one scalar, whether the tensor
is all zero, because that flag lives in the header.
"""

from __future__ import annotations

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors.cards.sign import EFSIGNSGD_CARD, SIGNSGD_CARD
from gcbench.core import codec_torch
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, ErrorFeedback, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_numpy, body_tensor, meta_flag, meta_keys
from gcbench.core.payload import MetaValue, Payload


def _sign_bits(a: torch.Tensor) -> torch.Tensor:
    """Packed bits a >= 0, LSB first (NaN sends 0), on ``a``'s device."""
    return codec_torch.pack_bits(a.reshape(-1) >= 0, 1)


def _signs_from_bits(data: np.ndarray, d: int, scale: float = 1.0) -> torch.Tensor:
    """±scale per bit (float32), decoded into a fresh buffer by the numba kernel (host bytes)."""
    out = kernels.empty(d)
    kernels.sign_unpack(data, scale, -scale, out.numpy())
    return out


def _signs_torch(body: torch.Tensor, d: int, scale: torch.Tensor | float = 1.0) -> torch.Tensor:
    """±scale per bit (float32) with torch ops on the body's device (``scale`` a float32 0-dim tensor or a number)."""
    bits = codec_torch.unpack_bits(body, 1, d).bool()
    if isinstance(scale, torch.Tensor):
        return torch.where(bits, scale, -scale)
    return torch.where(bits, scale, -scale).to(torch.float32)


def _host_decode(payload: Payload) -> bool:
    """Whether a body is decoded by the numba kernels (CPU body, numba present) rather than with torch ops."""
    return kernels.available() and payload.data.device.type == "cpu"


def signsgd_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """Plain torch signSGD: ±1 (+1 for zero), all-zero tensors to zeros."""
    flat = x32.reshape(-1)
    if not bool(flat.any()):
        return torch.zeros_like(flat)
    return torch.where(flat >= 0, 1.0, -1.0)


class SignSGD(Compressor):
    """``signsgd`` (Bernstein et al. 2018): the sign of every entry, one bit each, decoded as ±1."""

    info = SIGNSGD_CARD
    reference = signsgd_reference

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        if kernels.cpu_fast(a):
            body = np.empty((a.numel() + 7) // 8, np.uint8)
            nonzero = kernels.sign_pack(kernels.flat_f32(a), body)
            return body, ({} if nonzero else {"zero": 1}), None
        # the one scalar read of the torch path (the card's budget): the header's all-zero flag
        meta: dict[str, MetaValue] = {} if bool(a.any()) else {"zero": 1}
        return _sign_bits(a), meta, None

    def _expected_body_nbytes(self, payload: Payload) -> int:
        meta_keys(payload, "zero")
        meta_flag(payload, "zero")
        return (payload.numel + 7) // 8

    def _decode(self, payload: Payload) -> torch.Tensor:
        d = payload.numel
        if payload.data.numel() != (d + 7) // 8:
            raise PayloadError(f"signsgd body has {payload.data.numel()} bytes, expected {(d + 7) // 8}")
        if not _host_decode(payload):
            if meta_flag(payload, "zero"):
                return torch.zeros(d, dtype=torch.float32, device=payload.data.device)
            return _signs_torch(body_tensor(payload), d)
        if meta_flag(payload, "zero"):
            return kernels.zeros(d)
        return _signs_from_bits(body_numpy(payload), d)


def efsignsgd_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """Plain torch EF-signSGD step: a = x + e, decoded = sign(a)·‖a‖₁/d, e = a − decoded."""
    a = ErrorFeedback.corrected(x32, state).reshape(-1)
    scale = float(np.float32(float(a.abs().sum(dtype=torch.float64)) / a.numel()))
    decoded = torch.where(a >= 0, scale, -scale)
    state.tensors[ErrorFeedback.KEY] = (a - decoded).reshape(x32.shape)
    state.step += 1
    return decoded


class EFSignSGD(Compressor):
    """``efsignsgd`` (Karimireddy et al. 2019, "Error Feedback Fixes SignSGD"): the signs scaled by
    mean |a|, with error feedback."""

    info = EFSIGNSGD_CARD
    reference = efsignsgd_reference

    def _form_corrected(self, x32: torch.Tensor, e: torch.Tensor, has_e: bool, state: State) -> np.float32 | None:
        """On CPU, a = x + e and the scale ‖a‖₁/d in one pass (the kernels' pass 1)."""
        if not kernels.fused_ef_ok(x32):
            return super()._form_corrected(x32, e, has_e, state)
        return kernels.ef_sign_form(kernels.flat_f32(x32), e.reshape(-1).numpy(), has_e)

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        flat = a.reshape(-1)
        if ctx.fused is not None:  # pass 2 on the scale _form_corrected found: the bits, then e = a − decoded
            nb = (flat.numel() + 7) // 8
            body = np.empty(nb + 4, np.uint8)
            kernels.ef_sign_apply(flat.numpy(), ctx.fused, body[:nb])
            body[nb:] = np.array([ctx.fused], "<f4").view(np.uint8)
            return body, {}, None
        # ‖a‖₁/d: a float64 sum divided in float64, rounded once to float32, on the device (no host read)
        scale32 = (flat.abs().sum(dtype=torch.float64) / flat.numel()).to(torch.float32)
        wire = torch.cat([_sign_bits(flat), scale32.reshape(1).view(torch.uint8)])
        decoded = torch.where(flat >= 0, scale32, -scale32)
        ctx.keep_residual(a, decoded)
        return wire, {}, decoded

    def _expected_body_nbytes(self, payload: Payload) -> int:
        meta_keys(payload)
        return (payload.numel + 7) // 8 + 4  # sign bits, float32 scale

    def _decode(self, payload: Payload) -> torch.Tensor:
        d = payload.numel
        nb = (d + 7) // 8
        if payload.data.numel() != nb + 4:
            raise PayloadError(f"efsignsgd body has {payload.data.numel()} bytes, expected {nb + 4}")
        if not _host_decode(payload):
            body_t = body_tensor(payload)
            return _signs_torch(body_t[:nb], d, body_t[nb:].clone().view(torch.float32).reshape(()))
        body = body_numpy(payload)
        return _signs_from_bits(body, d, float(body[nb:].view("<f4")[0]))
