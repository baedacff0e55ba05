"""none / fp16 / bf16: the one-buffer group path gives exactly the payloads of compressing each tensor alone."""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import registry
from gcbench.compressors.cast import _span
from gcbench.core.errors import PayloadError
from gcbench.core.payload import Payload
from tests.conftest import normal


def _shapes() -> list[tuple[int, ...]]:
    return [(64, 3, 3, 3), (64,), (), (0,), (1000, 300), (7, 0, 2), (5,)]


def _laid_out(layout: str) -> list[torch.Tensor]:
    """The test tensors as separate tensors, or as views of one buffer: back to back (copied as one span), with a
    gap, out of order, or one of them transposed (each of the last three copied tensor by tensor)."""
    xs = [normal(s, seed=i) * 1e3 for i, s in enumerate(_shapes())]  # fp16 overflows to inf on some: also the same
    if layout == "separate":
        return xs
    sizes = [x.numel() for x in xs]
    gap = 3 if layout == "gap" else 0
    flat = torch.full((sum(sizes) + gap * len(xs),), float("nan"))
    order = list(range(len(xs)))[::-1] if layout == "reversed" else list(range(len(xs)))
    views: list[torch.Tensor | None] = [None] * len(xs)
    offset = 0
    for i in order:
        views[i] = flat[offset:offset + sizes[i]].view(xs[i].shape)
        views[i].copy_(xs[i])  # type: ignore[union-attr]
        offset += sizes[i] + gap
    out = [v for v in views if v is not None]
    if layout == "transposed":
        out[4] = out[4].reshape(-1).view(300, 1000).t()  # where the back-to-back layout puts it, not contiguous
        out[4].copy_(xs[4].reshape(300, 1000).t())
    return out


@pytest.mark.parametrize("layout", ["separate", "back-to-back", "gap", "reversed", "transposed"])
@pytest.mark.parametrize("name", ["none", "fp16", "bf16"])
def test_group_payloads_are_the_single_payloads(name: str, layout: str) -> None:
    comp = registry.create(name)
    xs = _laid_out(layout)
    sizes = [x.numel() for x in xs]
    assert (_span(xs, sizes, sum(sizes)) is not None) == (layout == "back-to-back")  # one copy only where it is safe
    group_states = [comp.init_state(i) for i in range(len(xs))]
    group = comp.compress_group(xs, group_states, need_decoded=False)
    for i, (x, (payload, decoded)) in enumerate(zip(xs, group, strict=True)):
        alone = comp.compress(x, comp.init_state(i))
        assert payload.to_bytes() == alone.to_bytes()
        assert decoded is None
        assert torch.equal(comp.decompress(payload), comp.decompress(alone)) or torch.equal(
            comp.decompress(payload).isnan(), comp.decompress(alone).isnan())
        assert payload.data.data_ptr() != x.data_ptr() or x.numel() == 0  # never the caller's memory
    assert all(s.step == 1 for s in group_states)
    before = group[0][0].to_bytes()
    xs[0].add_(1.0)  # the caller changing its tensor afterwards leaves the payload alone
    assert group[0][0].to_bytes() == before


def test_group_of_other_dtypes_takes_the_general_path() -> None:
    comp = registry.create("fp16")
    xs = [normal((50,), seed=1).double(), normal((20,), seed=2)]
    group = comp.compress_group(xs, [comp.init_state(0), comp.init_state(1)], need_decoded=False)
    assert [p.to_bytes() for p, _ in group] == [comp.compress(x, comp.init_state(i)).to_bytes() for i, x in enumerate(xs)]


@pytest.mark.parametrize("name", ["none", "fp16", "bf16"])
def test_group_decode_gives_the_single_decodes(name: str) -> None:
    comp = registry.create(name)
    xs = [normal(s, seed=i) for i, s in enumerate(_shapes())]  # () and empty shapes: the general path
    payloads = [comp.compress(x, comp.init_state(i)) for i, x in enumerate(xs)]
    for group in (payloads, [p for p in payloads if p.numel]):  # the mixed group and the all-fast group
        decoded = comp.decompress_group(group)
        assert len(decoded) == len(group)
        for p, d in zip(group, decoded, strict=True):
            alone = comp.decompress(p)
            assert d.shape == alone.shape and d.dtype == alone.dtype and torch.equal(d, alone)
            if p.numel:  # never the payload's memory (an empty tensor has none: both pointers may be null)
                assert d.untyped_storage().data_ptr() != p.data.untyped_storage().data_ptr()
    decoded = comp.decompress_group([p for p in payloads if p.numel])
    decoded[0].add_(1.0)  # one decoded tensor changed in place leaves its neighbours alone
    assert torch.equal(decoded[1], comp.decompress([p for p in payloads if p.numel][1]))


@pytest.mark.parametrize("name", ["none", "fp16"])
def test_group_decode_refuses_what_decode_refuses(name: str) -> None:
    comp = registry.create(name)
    good = comp.compress(normal((40,), seed=1), comp.init_state(0))
    short = Payload(good.codec, good.version, good.dtype, good.shape, good.data[:-1].clone())
    other = registry.create("fp16" if name == "none" else "none").compress(normal((40,), seed=2), comp.init_state(1))
    for bad in (short, other):
        with pytest.raises(PayloadError) as alone:
            comp.decompress(bad)
        with pytest.raises(PayloadError) as grouped:
            comp.decompress_group([good, bad])
        assert str(grouped.value) == str(alone.value)
