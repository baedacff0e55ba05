"""Sign compressors: ``signsgd`` (1 bit per element) and ``efsignsgd`` (scaled sign with EF).

* ``signsgd`` — Bernstein et al. 2018: send sign(x), d bits, decoded as ±1 (the optimizer's step
  size supplies the scale).  Zero maps to +1; an all-zero tensor is flagged in the header and
  decodes to zeros.
* ``efsignsgd`` — Karimireddy et al. 2019, "Error Feedback Fixes SignSGD": with the shared error
  feedback, send sign(a)·‖a‖₁/d for a = x + e: d + 32 bits.  Unlike GRACE's version, the
  residual really is applied.
"""

from __future__ import annotations

import numpy as np
import torch

from gcbench import codec
from gcbench.compressor import Compressor, State, body_numpy
from gcbench.compressors._common import to_numpy
from gcbench.errors import PayloadError
from gcbench.payload import Payload
from gcbench.registry import register


def _sign_bits(a: torch.Tensor) -> np.ndarray:
    return codec.pack_bits(to_numpy(a.reshape(-1) >= 0), 1)


def _signs_from_bits(data: np.ndarray, d: int) -> torch.Tensor:
    bits = np.unpackbits(data[: (d + 7) // 8], count=d, bitorder="little")
    return torch.from_numpy(bits.astype(np.float32) * 2.0 - 1.0)


@register(
    name="signsgd",
    version=1,
    description="sign of each element, 1 bit each, decoded as ±1",
    paper="Bernstein et al. 2018, signSGD: Compressed Optimisation for Non-Convex Problems",
    biased=True,
    stateful=False,
)
class SignSGD(Compressor):
    def _encode(self, a: torch.Tensor, state: State):
        meta = {} if bool(a.any()) else {"zero": 1}
        return _sign_bits(a), meta, None

    def _decode(self, payload: Payload) -> torch.Tensor:
        d = payload.numel
        body = body_numpy(payload)
        if len(body) != (d + 7) // 8:
            raise PayloadError(f"signsgd body has {len(body)} bytes, expected {(d + 7) // 8}")
        if payload.meta.get("zero"):
            return torch.zeros(d)
        return _signs_from_bits(body, d)


@register(
    name="efsignsgd",
    version=1,
    description="error feedback + sign(x)·‖x‖₁/d (d + 32 bits)",
    paper="Karimireddy et al. 2019, Error Feedback Fixes SignSGD and other Gradient Compression Schemes",
    biased=True,
    stateful=True,
    error_feedback="always",
)
class EFSignSGD(Compressor):
    def _encode(self, a: torch.Tensor, state: State):
        flat = a.reshape(-1)
        scale = float(flat.abs().sum(dtype=torch.float64)) / flat.numel()
        scale32 = np.float32(scale)
        body = np.concatenate([_sign_bits(flat), np.array([scale32], "<f4").view(np.uint8)])
        decoded = torch.where(flat >= 0, float(scale32), -float(scale32))
        return body, {}, decoded

    def _decode(self, payload: Payload) -> torch.Tensor:
        d = payload.numel
        body = body_numpy(payload)
        nb = (d + 7) // 8
        if len(body) != nb + 4:
            raise PayloadError(f"efsignsgd body has {len(body)} bytes, expected {nb + 4}")
        scale = float(body[nb:].view("<f4")[0])
        return _signs_from_bits(body, d) * scale
