"""Reference points ``none`` (32·d bits), ``fp16`` and ``bf16`` (16·d bits)."""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import registry
from gcbench.compressors.registry import decompress
from gcbench.core.compressor import State
from gcbench.core.errors import PayloadError
from gcbench.core.payload import Payload
from tests.conftest import normal, same_bits

CASTS = [("none", torch.float32, 4), ("fp16", torch.float16, 2), ("bf16", torch.bfloat16, 2)]


@pytest.mark.parametrize(("name", "wire", "nbytes"), CASTS, ids=[c[0] for c in CASTS])
@pytest.mark.parametrize("shape", [(1,), (7,), (64, 3, 3, 3), (300, 301)], ids=str)
def test_body_size_and_values(name: str, wire: torch.dtype, nbytes: int, shape: tuple[int, ...]) -> None:
    x = normal(shape, seed=1) * 100
    d = x.numel()
    payload = registry.create(name).compress(x, State(0))
    assert payload.body_nbytes * 8 == (32 if name == "none" else 16) * d
    assert payload.body_nbytes == nbytes * d
    # the body is the tensor in the wire dtype, little-endian, row-major
    assert payload.to_bytes()[-payload.body_nbytes :] == x.reshape(-1).to(wire).contiguous().view(torch.uint8).numpy().tobytes()
    out = decompress(payload)
    assert same_bits(out, x.to(wire).float())


def test_none_is_bit_exact_for_every_float_dtype() -> None:
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        x = normal((123,), seed=2, dtype=dtype)
        out = decompress(Payload.from_bytes(registry.create("none").compress(x, State(0)).to_bytes()))
        assert out.dtype == dtype
        assert same_bits(out, x) if dtype != torch.float64 else same_bits(out, x.float().double())


def test_special_values() -> None:
    x = torch.tensor([0.0, -0.0, 1e-45, float("inf"), -float("inf"), 70000.0, -1e-8, 3.0e38])
    none = decompress(registry.create("none").compress(x, State(0)))
    assert same_bits(none, x)
    half = decompress(registry.create("fp16").compress(x, State(0)))
    # beyond fp16's range becomes ±inf, as a real fp16 all-reduce would produce
    assert half[5].item() == float("inf") and half[7].item() == float("inf")
    assert torch.signbit(half[1]) and half[0].item() == 0.0
    bf = decompress(registry.create("bf16").compress(x, State(0)))
    assert torch.isfinite(bf[5]) and torch.isfinite(bf[7])  # bf16 keeps fp32's range
    assert same_bits(bf, x.to(torch.bfloat16).float())


def test_relative_error_of_the_casts() -> None:
    x = normal((10_000,), seed=3)
    for name, eps in (("fp16", 2.0**-11), ("bf16", 2.0**-8)):
        out = decompress(registry.create(name).compress(x, State(0)))
        rel = ((out - x).abs() / x.abs().clamp(min=1e-4)).max().item()
        assert 0 < rel <= eps * 1.0001


@pytest.mark.parametrize("name", ["none", "fp16", "bf16"])
def test_wrong_body_size_raises(name: str) -> None:
    p = registry.create(name).compress(normal((10,)), State(0))
    for body in (p.data[:-1], torch.cat([p.data, p.data[:2]])):
        with pytest.raises(PayloadError, match="bytes"):
            decompress(Payload(p.codec, p.version, p.dtype, p.shape, body.clone(), p.meta))


@pytest.mark.parametrize(("name", "wire", "nbytes"), CASTS, ids=[c[0] for c in CASTS])
def test_large_tensor_round_trip_and_reference(name: str, wire: torch.dtype, nbytes: int) -> None:
    """Sizes whose buffers come from the huge-page path: same bytes, and the ``reference`` agrees."""
    x = normal((3_000_001,), seed=5) * 1000
    comp = registry.create(name)
    p = comp.compress(x, State(0))
    assert p.body_nbytes == nbytes * x.numel()
    assert torch.equal(p.data.view(wire), x.to(wire))
    out = decompress(p)
    assert same_bits(out, x.to(wire).float())
    assert same_bits(out, type(comp).reference(comp, x, State(0)))
    x.fill_(0.0)  # the body is a copy: neither the input nor the decoded tensor aliases it
    out.fill_(1.0)
    assert same_bits(decompress(p), type(comp).reference(comp, normal((3_000_001,), seed=5) * 1000, State(0)))
