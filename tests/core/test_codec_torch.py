"""Device-resident codecs (:mod:`gcbench.core.codec_torch`) against the host codecs.

Every encoding must be byte-identical to :mod:`gcbench.core.codec`'s, every decoder must invert it
and refuse the malformed bodies the host decoders refuse, and no function may convert a tensor to
NumPy (or back) or read more scalars than its docstring states.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gcbench.core import codec
from gcbench.core import codec_torch as ct
from gcbench.core.errors import PayloadError

SIZES = [0, 1, 7, 8, 9, 1000, 100_003]


def t(a: np.ndarray) -> torch.Tensor:
    """A host array as a tensor (test side only: the functions under test never see NumPy)."""
    return torch.from_numpy(np.ascontiguousarray(a))


class _ScalarReads(TorchDispatchMode):
    """Counts ``aten._local_scalar_dense`` (``.item()``, ``int(t)``, ``bool(t)``) under the mode."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def guarded(monkeypatch: pytest.MonkeyPatch, max_reads: int) -> Iterator[_ScalarReads]:
    """Fail on any tensor<->NumPy conversion or ``tolist`` inside, and on more than ``max_reads`` scalar reads."""
    calls: list[str] = []

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            calls.append(name)
            return fn(*a, **k)

        return wrapper

    with monkeypatch.context() as m:
        m.setattr(torch.Tensor, "numpy", counting("numpy", torch.Tensor.numpy))
        m.setattr(torch.Tensor, "tolist", counting("tolist", torch.Tensor.tolist))
        m.setattr(torch, "from_numpy", counting("from_numpy", torch.from_numpy))
        mode = _ScalarReads()
        with mode:
            yield mode
        assert calls == [], f"host conversions inside a device codec: {calls}"
        assert mode.count <= max_reads, f"{mode.count} scalar reads, budget {max_reads}"


# ---------------------------------------------------------------------------- bit packing


@pytest.mark.parametrize("width", range(1, 65))
def test_pack_bits_same_bytes_as_codec(width: int) -> None:
    for seed, n in enumerate(SIZES):
        rng = np.random.default_rng(1000 * width + seed)
        vals = rng.integers(0, 2 ** min(width, 63), size=n, dtype=np.uint64)
        if width == 64:
            vals[1::2] |= np.uint64(1 << 63)  # the sign bit of the int64 pattern is a field bit
        elif n:
            vals[0] = 2**width - 1
        want = codec.pack_bits(vals, width)
        got = ct.pack_bits(t(vals.view(np.int64)), width)
        assert got.dtype == torch.uint8 and torch.equal(got, t(want)), (width, n)
        back = ct.unpack_bits(got, width, n)
        assert back.dtype == torch.int64
        assert torch.equal(back, t(vals.view(np.int64))), (width, n)


@pytest.mark.parametrize("width", [1, 3, 7, 12, 33])
def test_pack_bits_ignores_bits_above_width(width: int) -> None:
    rng = np.random.default_rng(width)
    vals = rng.integers(-(2**62), 2**62, size=1001, dtype=np.int64)
    want = codec.pack_bits(vals & ((1 << width) - 1), width)
    assert torch.equal(ct.pack_bits(t(vals), width), t(want))


def test_pack_bits_bool_masks_and_small_dtypes() -> None:
    rng = np.random.default_rng(5)
    for n in SIZES:
        mask = rng.random(n) < 0.3
        assert torch.equal(ct.pack_bits(t(mask), 1), t(codec.pack_bits(mask, 1)))
    assert bytes(ct.pack_bits(torch.tensor([1, 2, 3, 0, 1], dtype=torch.uint8), 2)) == b"\x39\x01"
    u8 = torch.tensor([200, 7], dtype=torch.uint8)
    assert bytes(ct.pack_bits(u8, 8)) == b"\xc8\x07"
    assert bytes(ct.pack_bits(torch.tensor([200, 263]), 8)) == b"\xc8\x07"  # 263 & 0xFF = 7, as codec


@pytest.mark.parametrize(
    ("values", "width", "expected"),
    [
        ([1, 0, 1, 1, 0, 0, 0, 0, 1], 1, b"\x0d\x01"),
        ([1, 2, 3, 0, 1], 2, b"\x39\x01"),
        ([5, 3, 7], 3, b"\xdd\x01"),
        ([0xABC, 0x123], 12, b"\xbc\x3a\x12"),
        ([], 5, b""),
    ],
)
def test_pack_bits_hand_worked(values: list[int], width: int, expected: bytes) -> None:
    assert bytes(ct.pack_bits(torch.tensor(values, dtype=torch.int64), width)) == expected
    got = ct.unpack_bits(torch.tensor(list(expected), dtype=torch.uint8), width, len(values))
    assert got.tolist() == values


@pytest.mark.parametrize("width", [1, 2, 4, 6, 8, 11, 64])
def test_unpack_bits_truncated_raises(width: int) -> None:
    packed = ct.pack_bits(torch.ones(50, dtype=torch.int64), width)
    with pytest.raises(PayloadError, match="truncated"):
        ct.unpack_bits(packed[:-1], width, 50)


@pytest.mark.parametrize("width", [0, 65])
def test_widths_outside_1_to_64_are_refused(width: int) -> None:
    with pytest.raises(ValueError, match=r"1\.\.64"):
        ct.pack_bits(torch.zeros(3, dtype=torch.int64), width)
    with pytest.raises(ValueError, match=r"1\.\.64"):
        ct.unpack_bits(torch.zeros(3, dtype=torch.uint8), width, 1)


def test_pack_unpack_stay_on_device_with_no_scalar_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    vals = torch.randint(0, 2**11, (10_001,))
    with guarded(monkeypatch, 0):
        for width in (1, 5, 8, 11, 64):
            packed = ct.pack_bits(vals, width)
            ct.unpack_bits(packed, width, vals.numel())
        ct.pack_bits(vals > 100, 1)


def test_guard_counts_what_it_claims_to(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard itself can fail: a ``.numpy()`` and an ``.item()`` inside are caught."""
    with pytest.raises(AssertionError, match="host conversions"):
        with guarded(monkeypatch, 5):
            torch.ones(3).numpy()
    with pytest.raises(AssertionError, match="scalar reads"):
        with guarded(monkeypatch, 0):
            torch.ones(3).sum().item()
