"""The implementation: a Compressor subclass carrying its card.

Written with torch operations alone, so it runs on the tensor's device (a GPU's too) without a copy to the host:
the device guard (tests/compressors/test_device_guard.py) holds every registered compressor, plugins included, to it.
"""

import torch

from gcbench.core.codec_torch import pack_bits, unpack_bits
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, State
from gcbench.core.header import body_tensor, meta_keys
from gcbench.core.payload import Payload
from gcbench_plugin_demo.card import HALFSIGN_CARD


class HalfSign(Compressor):
    """``halfsign``: one sign bit per element times the mean |x| (the plugin demo of docs/adding.md)."""

    info = HALFSIGN_CARD

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        flat = a.reshape(-1)
        scale = flat.abs().mean().reshape(1)  # float32: its 4 bytes, little-endian, open the body
        body = torch.cat([scale.view(torch.uint8), pack_bits(flat < 0, 1)])
        return body, {}, None

    def _expected_body_nbytes(self, payload: Payload) -> int:
        meta_keys(payload)
        return 4 + (payload.numel + 7) // 8

    def _decode(self, payload: Payload) -> torch.Tensor:
        body = body_tensor(payload)
        scale = body[:4].clone().view(torch.float32)  # a copy: the body may start at any offset of a buffer
        neg = unpack_bits(body[4:], 1, payload.numel).bool()
        return torch.where(neg, -scale, scale)
