"""The implementation: a Compressor subclass carrying its card."""

import numpy as np
import torch

from gcbench.core.compressor import Compressor, EncodeContext, Encoded, State
from gcbench.core.header import body_numpy, meta_keys
from gcbench.core.payload import Payload
from gcbench_plugin_demo.card import HALFSIGN_CARD


class HalfSign(Compressor):
    """``halfsign``: one sign bit per element times the mean |x| (the plugin demo of docs/adding.md)."""

    info = HALFSIGN_CARD

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        flat = a.reshape(-1)
        scale = flat.abs().mean().reshape(1)
        bits = np.packbits((flat < 0).numpy(), bitorder="little")
        body = np.concatenate([scale.numpy().astype("<f4").view(np.uint8), bits])
        return body, {}, None

    def _expected_body_nbytes(self, payload: Payload) -> int:
        meta_keys(payload)
        return 4 + (payload.numel + 7) // 8

    def _decode(self, payload: Payload) -> torch.Tensor:
        body = body_numpy(payload)
        scale = float(body[:4].view("<f4")[0])
        neg = np.unpackbits(body[4:], count=payload.numel, bitorder="little").astype(bool)
        return torch.from_numpy(np.where(neg, -scale, scale).astype(np.float32))
