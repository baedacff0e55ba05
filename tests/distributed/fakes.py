"""Compressors that break the wire contract on purpose, for the tests of wire verification (DDP hook and FSDP2)."""

from __future__ import annotations

from typing import Any

import torch

from gcbench.compressors import registry
from gcbench.core.payload import Payload


def lying_topk() -> Any:
    """``topk`` whose payloads hold their body bytes widened to int32: each declares a byte per element and serialises four."""

    class LyingTopK(type(registry.create("topk"))):  # type: ignore[misc]
        def compress_group(self, xs: Any, states: Any, need_decoded: bool = True) -> Any:
            out = super().compress_group(xs, states, need_decoded)
            return [(Payload.trusted(p.codec, p.version, p.dtype, p.shape, p.data.to(torch.int32), p.meta), d) for p, d in out]

    return LyingTopK(density=0.25)
