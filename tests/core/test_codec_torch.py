"""Device-resident codecs (:mod:`gcbench.core.codec_torch`) against the host codecs.

Every encoding must be byte-identical to :mod:`gcbench.core.codec`'s, every decoder must invert it
and refuse the malformed bodies the host decoders refuse, and no function may convert a tensor to
NumPy (or back) or read more scalars than its docstring states.  The Elias-ω streams' own tests
are in ``test_codec_torch_elias.py``, which shares this module's helpers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from gcbench.core import codec
from gcbench.core import codec_torch as ct
from gcbench.core.errors import PayloadError
from gcbench.core.params import SPARSE_CODINGS

SIZES = [0, 1, 7, 8, 9, 1000, 100_003]


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """One intra-op thread: the bytes do not depend on it, and on a loaded 2-core machine two
    threads make every elementwise op here tens of times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def t(a: np.ndarray) -> torch.Tensor:
    """A host array as a tensor (test side only: the functions under test never see NumPy)."""
    return torch.from_numpy(np.ascontiguousarray(a))


def raw(x: torch.Tensor) -> bytes:
    """A uint8 tensor's bytes (``bytes(t)`` of a one-element tensor would read it as an int)."""
    return bytes(x.tolist())


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
    assert raw(ct.pack_bits(torch.tensor([1, 2, 3, 0, 1], dtype=torch.uint8), 2)) == b"\x39\x01"
    u8 = torch.tensor([200, 7], dtype=torch.uint8)
    assert raw(ct.pack_bits(u8, 8)) == b"\xc8\x07"
    assert raw(ct.pack_bits(torch.tensor([200, 263]), 8)) == b"\xc8\x07"  # 263 & 0xFF = 7, as codec


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
    assert raw(ct.pack_bits(torch.tensor(values, dtype=torch.int64), width)) == expected
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


# ---------------------------------------------------------------------------- varints


def test_varint_same_bytes_and_round_trip() -> None:
    rng = np.random.default_rng(3)
    for n in SIZES:
        vals = rng.integers(0, 2 ** rng.integers(1, 63, size=n), dtype=np.int64)
        if n >= 7:
            vals[:5] = [0, 127, 128, 2**63 - 1, -1]  # -1 is the uint64 2**64 - 1: ten bytes, as the host codec
        want = codec.varint_encode(vals)
        got = ct.varint_encode(t(vals))
        assert torch.equal(got, t(want)), n
        dec, used = ct.varint_decode(torch.cat([got, torch.tensor([5, 0x80], dtype=torch.uint8)]), n)
        assert torch.equal(dec, t(vals)) and used == len(want)


@pytest.mark.parametrize(
    ("n", "expected"), [(0, b"\x00"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"), (2**63 - 1, b"\xff" * 8 + b"\x7f")]
)
def test_varint_known_encodings(n: int, expected: bytes) -> None:
    assert raw(ct.varint_encode(torch.tensor([n]))) == expected


def test_varint_truncated_and_overlong_raise() -> None:
    enc = ct.varint_encode(torch.tensor([300, 5, 70000]))
    with pytest.raises(PayloadError, match="truncated"):
        ct.varint_decode(enc[:-1], 3)
    with pytest.raises(PayloadError, match="truncated"):
        ct.varint_decode(enc, 4)
    with pytest.raises(PayloadError, match="truncated"):
        ct.varint_decode(enc, 2**40)  # refused from the shape, before allocating 2**40 values
    with pytest.raises(PayloadError, match="overlong"):
        ct.varint_decode(torch.tensor([0x80] * 10 + [0x01], dtype=torch.uint8), 1)
    vals, used = ct.varint_decode(torch.tensor([0x80, 0x00, 0x05], dtype=torch.uint8), 2)  # non-canonical: accepted, as the host codec
    assert vals.tolist() == [0, 5] and used == 3
    assert codec.varint_decode(np.array([0x80, 0x00, 0x05], np.uint8), 2)[0].tolist() == [0, 5]


# ---------------------------------------------------------------------------- index codings and sparse vectors

_DK = [
    (1, 0),
    (1, 1),
    (2, 2),
    (1000, 0),
    (1000, 1),
    (1000, 37),
    (1000, 1000),
    (2**20 + 3, 500),
    (2**24, 3),
    (300_000, 9),
    (200_003, 100_003),
]
_HOST_CODINGS = ["fixed", "int32", "delta-varint", "elias"]


def _case(seed: int, d: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(d, size=k, replace=False)).astype(np.int64), rng.standard_normal(k).astype(np.float32)


@pytest.mark.parametrize("coding", _HOST_CODINGS)
@pytest.mark.parametrize(("d", "k"), _DK)
def test_index_coding_same_bytes_and_round_trip(coding: str, d: int, k: int) -> None:
    for seed in range(2):
        idx, _ = _case(seed + d + k, d, k)
        want = codec.encode_indices(idx, d, coding)
        got = ct.encode_indices(t(idx), d, coding)
        assert torch.equal(got, t(want))
        dec, used = ct.decode_indices(torch.cat([got, torch.tensor([0xFF, 0x01], dtype=torch.uint8)]), d, k, coding)
        assert torch.equal(dec, t(idx)) and used == len(want)


@pytest.mark.parametrize("coding", [*_HOST_CODINGS, "paper"])
@pytest.mark.parametrize(("d", "k"), _DK)
def test_sparse_same_bytes_and_round_trip(coding: str, d: int, k: int) -> None:
    for seed in range(2):
        idx, vals = _case(seed + 7 * d + k, d, k)
        want = codec.encode_sparse(vals, idx, d, coding)
        got = ct.encode_sparse(t(vals), t(idx), d, coding)
        assert torch.equal(got, t(want))
        out_vals, out_idx = ct.decode_sparse(got, d, k, coding)
        assert out_vals.dtype == torch.float32 and torch.equal(out_vals.view(torch.int32), t(vals.view(np.int32)))
        assert torch.equal(out_idx, t(idx))


@pytest.mark.parametrize("coding", [*_HOST_CODINGS, "paper"])
@pytest.mark.parametrize(
    "positions",
    [[0, 5, 70_000, 199_999], [65_535, 131_071], [65_534, 65_534 + 1 + 65_535 * 3 + 7, 299_999]],
    ids=["long", "exact", "multi"],
)
def test_sparse_escape_runs_same_bytes(coding: str, positions: list[int]) -> None:
    idx = np.array(positions, dtype=np.int64)
    vals = np.arange(1, len(idx) + 1, dtype=np.float32)
    want = codec.encode_sparse(vals, idx, 300_000, coding)
    got = ct.encode_sparse(t(vals), t(idx), 300_000, coding)
    assert torch.equal(got, t(want))
    assert torch.equal(ct.decode_sparse(got, 300_000, len(idx), coding)[1], t(idx))


def test_encoders_refuse_unsorted_and_unknown() -> None:
    for coding in _HOST_CODINGS:
        for bad in ([3, 1], [1, 1], [10], [-1, 2]):
            with pytest.raises(ValueError, match="sorted"):
                ct.encode_indices(torch.tensor(bad), 10, coding)
    with pytest.raises(ValueError, match="sorted"):
        ct.encode_sparse(torch.ones(2), torch.tensor([3, 1]), 10, "paper")
    with pytest.raises(ValueError, match="unknown index coding"):
        ct.encode_indices(torch.tensor([1]), 10, "golomb")
    with pytest.raises(ValueError):
        ct.encode_sparse(torch.ones(2), torch.tensor([3]), 10, "fixed")
    with pytest.raises(PayloadError, match="unknown index coding"):
        ct.decode_indices(torch.zeros(8, dtype=torch.uint8), 10, 1, "golomb")


def test_sparse_corrupt_raises() -> None:
    idx, vals = torch.tensor([3, 9]), torch.tensor([1.0, -2.0])
    body = ct.encode_sparse(vals, idx, 10, "paper")
    for bad_body, d, k in [(body[:-1], 10, 2), (body[:-6], 10, 2), (body, 10, 3), (body, 10, 1), (body, 9, 2)]:
        with pytest.raises(PayloadError):
            codec.decode_sparse(bad_body.numpy(), d, k, "paper")  # the host codec refuses it too
        with pytest.raises(PayloadError):
            ct.decode_sparse(bad_body, d, k, "paper")
    with pytest.raises(PayloadError, match="outside"):
        ct.decode_sparse(body, 9, 2, "paper")
    enc = ct.encode_sparse(vals, idx, 10, "int32")
    with pytest.raises(PayloadError, match="outside"):
        ct.decode_sparse(enc, 5, 2, "int32")
    with pytest.raises(PayloadError):
        ct.decode_sparse(enc[:7], 10, 2, "int32")
    for coding in _HOST_CODINGS:
        enc = ct.encode_sparse(vals, idx, 10, coding)
        ct.decode_sparse(enc, 10, 2, coding)
        with pytest.raises(PayloadError, match="after its 2 indices"):
            ct.decode_sparse(torch.cat([enc, torch.zeros(1, dtype=torch.uint8)]), 10, 2, coding)


def test_delta_varint_gap_past_the_tensor_raises() -> None:
    body = ct.varint_encode(torch.tensor([3, 20]))  # gaps 4 and 21 into a 10-element tensor
    with pytest.raises(PayloadError, match="gap past the tensor"):
        ct.decode_indices(body, 10, 2, "delta-varint")
    with pytest.raises(PayloadError, match="gap past the tensor"):
        codec.decode_indices(body.numpy(), 10, 2, "delta-varint")


def test_index_and_sparse_codecs_stay_on_device_within_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Budgets from the docstrings: decoders one read (none for fixed/int32 indices), encoders one."""
    idx = torch.sort(torch.randperm(50_000)[:3_000]).values
    vals = torch.randn(3_000)
    bodies = {c: ct.encode_sparse(vals, idx, 50_000, c) for c in [*_HOST_CODINGS, "paper"]}
    for coding, body in bodies.items():
        with guarded(monkeypatch, 1):
            ct.encode_sparse(vals, idx, 50_000, coding)
        with guarded(monkeypatch, 1):
            ct.decode_sparse(body, 50_000, 3_000, coding)
    for coding in _HOST_CODINGS:
        with guarded(monkeypatch, 1):
            enc = ct.encode_indices(idx, 50_000, coding)
        with guarded(monkeypatch, 0 if coding in ("fixed", "int32") else 1):
            ct.decode_indices(enc, 50_000, 3_000, coding)
    for coding in ("fixed", "int32"):
        with guarded(monkeypatch, 0):
            ct.encode_indices(idx, 50_000, coding, validate=False)
    with guarded(monkeypatch, 1):
        enc = ct.varint_encode(idx)
    with guarded(monkeypatch, 1):
        ct.varint_decode(enc, 3_000)


# ---------------------------------------------------------------------------- record helpers (Elias tests in test_codec_torch_elias.py)


def _records(rng: np.random.Generator, count: int, pattern: tuple[int, ...]) -> np.ndarray:
    recs = np.zeros((count, len(pattern)), np.int64)
    for j, w in enumerate(pattern):
        if w == 0:
            recs[:, j] = rng.integers(1, 2 ** rng.integers(1, 63, size=count), dtype=np.int64) if count else 0
            recs[: min(count, 4), j] = [1, 2, 3, 2**63 - 1][: min(count, 4)]
        elif w == 64:
            recs[:, j] = rng.integers(-(2**63), 2**63 - 1, size=count, dtype=np.int64)
        else:
            recs[:, j] = rng.integers(0, 2**w, size=count)
    return recs


# ---------------------------------------------------------------------------- every device

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here"))]


@pytest.mark.parametrize("device", DEVICES)
def test_same_bytes_on_every_device(device: str) -> None:
    """Each codec on ``device``: the host codec's bytes, outputs on the same device, decoders invert."""
    rng = np.random.default_rng(41)
    vals = rng.integers(0, 2**63 - 1, size=10_007, dtype=np.int64)
    for width in (1, 5, 13, 33, 64):
        packed = ct.pack_bits(t(vals).to(device), width)
        assert packed.device.type == device and torch.equal(packed.cpu(), t(codec.pack_bits(vals.view(np.uint64), width)))
        assert torch.equal(ct.unpack_bits(packed, width, vals.size).cpu(), t(vals & ((1 << width) - 1) if width < 64 else vals))
    enc = ct.varint_encode(t(vals).to(device))
    assert enc.device.type == device and torch.equal(enc.cpu(), t(codec.varint_encode(vals)))
    assert torch.equal(ct.varint_decode(enc, vals.size)[0].cpu(), t(vals))
    d = 300_000
    idx, fvals = _case(5, d, 3_001)
    for coding in [*_HOST_CODINGS, "paper"]:
        body = ct.encode_sparse(t(fvals).to(device), t(idx).to(device), d, coding)
        assert body.device.type == device and torch.equal(body.cpu(), t(codec.encode_sparse(fvals, idx, d, coding)))
        out_vals, out_idx = ct.decode_sparse(body, d, idx.size, coding)
        assert out_idx.device.type == device and torch.equal(out_idx.cpu(), t(idx)) and torch.equal(out_vals.cpu(), t(fvals))
    recs = _records(rng, 2_003, (0, 1, 0))
    stream = ct.write_records(t(recs).to(device), (0, 1, 0))
    assert stream.device.type == device and torch.equal(stream.cpu(), t(codec.write_records(recs, (0, 1, 0))))
    out, used = ct.read_fields(stream, recs.shape[0], (0, 1, 0))
    assert (
        out.device.type == device
        and torch.equal(out.cpu(), t(recs))
        and used == codec.read_fields(stream.cpu().numpy(), recs.shape[0], (0, 1, 0))[1]
    )


# ---------------------------------------------------------------------------- properties

_index_sets = st.integers(1, 5000).flatmap(lambda d: st.tuples(st.just(d), st.sets(st.integers(0, d - 1), max_size=200)))


@settings(max_examples=60, deadline=None)
@given(_index_sets, st.sampled_from(SPARSE_CODINGS))
def test_sparse_property(case: tuple[int, set[int]], coding: str) -> None:
    d, chosen = case
    idx = np.array(sorted(chosen), dtype=np.int64)
    vals = np.linspace(-1, 1, len(idx), dtype=np.float32)
    body = ct.encode_sparse(t(vals), t(idx), d, coding)
    assert torch.equal(body, t(codec.encode_sparse(vals, idx, d, coding)))
    out_vals, out_idx = ct.decode_sparse(body, d, len(idx), coding)
    assert torch.equal(out_idx, t(idx)) and torch.equal(out_vals, t(vals))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=100))
def test_varint_property(values: list[int]) -> None:
    arr = np.array(values, dtype=np.uint64).view(np.int64)
    enc = ct.varint_encode(t(arr))
    assert torch.equal(enc, t(codec.varint_encode(arr.view(np.uint64))))
    dec, used = ct.varint_decode(enc, len(values))
    assert torch.equal(dec, t(arr)) and used == enc.numel()


def test_negative_counts_are_payload_errors() -> None:
    body = torch.zeros(16, dtype=torch.uint8)
    with pytest.raises(PayloadError):
        ct.varint_decode(body, -1)
    for coding in [*_HOST_CODINGS, "paper"]:
        with pytest.raises(PayloadError):
            ct.decode_sparse(body[:12], 10, -1, coding)
        if coding != "paper":
            with pytest.raises(PayloadError):
                ct.decode_indices(body, 10, -1, coding)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_synchronisations_within_the_read_budget() -> None:
    """On a GPU, the synchronisations CUDA's sync debug mode reports (scalar reads, host copies,
    ops that size a result from data such as ``nonzero``) stay within each docstring's budget."""
    import warnings

    dev = "cuda"
    idx = torch.sort(torch.randperm(50_000, device=dev)[:3_000]).values
    vals = torch.randn(3_000, device=dev)
    recs = t(_records(np.random.default_rng(3), 2_000, (0, 1, 0))).to(dev)
    bodies = {c: ct.encode_sparse(vals, idx, 50_000, c) for c in [*_HOST_CODINGS, "paper"]}
    stream = ct.write_records(recs, (0, 1, 0))
    cases: list[tuple[str, Callable[[], Any], int]] = [
        ("pack_bits", lambda: ct.unpack_bits(ct.pack_bits(recs, 11), 11, recs.numel()), 0),
        ("encode_indices fixed, not validated", lambda: ct.encode_indices(idx, 50_000, "fixed", validate=False), 0),
        ("varint_encode", lambda: ct.varint_encode(idx), 1),
        ("write_records", lambda: ct.write_records(recs, (0, 1, 0)), 1),
        ("read_fields", lambda: ct.read_fields(stream, 2_000, (0, 1, 0)), 1),
    ]
    for coding, body in bodies.items():
        cases.append((f"encode_sparse {coding}", partial(ct.encode_sparse, vals, idx, 50_000, coding), 1))
        cases.append((f"decode_sparse {coding}", partial(ct.decode_sparse, body, 50_000, 3_000, coding), 1))
    for _, fn, _ in cases:
        fn()  # warm-up: the lookup tables are copied to the device once
    torch.cuda.synchronize()
    counts = {}
    torch.cuda.set_sync_debug_mode("warn")
    try:
        for name, fn, budget in cases:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn()
            counts[name] = (sum("synchroniz" in str(w.message) for w in caught), budget)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert all(n <= budget for n, budget in counts.values()), counts
