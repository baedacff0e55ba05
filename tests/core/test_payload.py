"""The wire payload: header round trips, exact sizes and loud failures on corrupt bytes."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gcbench.core.errors import PayloadError
from gcbench.core.payload import FORMAT_VERSION, Payload, decode_header, encode_header

ALL_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.uint8, torch.int8, torch.int32, torch.int64]


def _payload(meta: dict[str, object] | None = None, body: bytes = b"\x01\x02\x03", shape: tuple[int, ...] = (4, 5)) -> Payload:
    data = torch.frombuffer(bytearray(body), dtype=torch.uint8) if body else torch.empty(0, dtype=torch.uint8)
    return Payload("qsgd", 3, torch.float16, shape, data, meta or {})


def test_hand_worked_header() -> None:
    hdr = encode_header("ab", 300, torch.float16, (2, 128), {"k": -3, "f": 0.5, "s": "xy"})
    expected = (
        bytes([FORMAT_VERSION, 2]) + b"ab" + b"\xac\x02"  # format, codec name, version 300 as a varint
        + bytes([1, 2]) + b"\x02" + b"\x80\x01"  # dtype code of float16, ndim, dims 2 and 128
        + bytes([3])  # three meta entries
        + b"\x01k" + b"i" + b"\x05"  # zigzag(-3) = 5
        + b"\x01f" + b"f" + struct.pack("<d", 0.5)
        + b"\x01s" + b"s" + b"\x02xy"
    )
    assert hdr == expected
    assert decode_header(expected + b"BODY") == ("ab", 300, torch.float16, (2, 128), {"k": -3, "f": 0.5, "s": "xy"}, len(expected))


@pytest.mark.parametrize(
    "meta",
    [
        {},
        {"k": 0},
        {"k": 12345678901234},
        {"neg": -1, "big_neg": -(2**40)},
        {"flag": True},
        {"np_int": np.int64(7), "np_float": np.float32(0.25)},
        {"x": 1.5, "tiny": 1e-300, "inf": float("inf"), "neg": -0.0},
        {"coding": "delta-varint", "empty": ""},
        {"a": 1, "b": 2.0, "c": "three"},
    ],
    ids=["none", "zero", "big-int", "negative", "bool", "numpy", "floats", "strings", "mixed"],
)
def test_header_round_trip_with_meta(meta: dict[str, object]) -> None:
    p = _payload(meta)
    raw = p.to_bytes()
    assert p.nbytes == len(raw) == len(p.header) + p.body_nbytes
    q = Payload.from_bytes(raw)
    assert (q.codec, q.version, q.dtype, q.shape) == ("qsgd", 3, torch.float16, (4, 5))
    assert dict(q.meta) == {k: (int(v) if isinstance(v, bool | np.integer) else v) for k, v in meta.items()}
    for k, v in meta.items():
        want = int if isinstance(v, bool | int | np.integer) else type(float(v)) if isinstance(v, float | np.floating) else str
        assert type(q.meta[k]) is want
        if isinstance(v, float):
            assert struct.pack("<d", q.meta[k]) == struct.pack("<d", v)  # bit-exact, sign of zero included
    assert q.data.tolist() == [1, 2, 3]
    assert q.to_bytes() == raw


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 0, 2), (512, 512), (2**40,)], ids=str)
def test_dtype_and_shape_round_trip(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    p = Payload("none", 1, dtype, shape, torch.empty(0, dtype=torch.uint8))
    q = Payload.from_bytes(p.to_bytes(), expected_shape=shape)  # (2**40,) only when the receiver expects it
    assert q.dtype == dtype and q.shape == shape and q.body_nbytes == 0
    assert p.nbytes == len(p.to_bytes())
    assert q.numel == int(np.prod(shape)) if shape else q.numel == 1


def test_nbytes_counts_header_and_body() -> None:
    small, large = _payload(body=b"\x00"), _payload(body=bytes(1000))
    assert large.nbytes - small.nbytes == 999
    assert large.body_nbytes == 1000
    assert small.nbytes == len(small.to_bytes())


def test_body_must_be_flat_uint8() -> None:
    with pytest.raises(TypeError):
        Payload("x", 1, torch.float32, (2,), torch.zeros(2, dtype=torch.float32))
    with pytest.raises(TypeError):
        Payload("x", 1, torch.float32, (2,), torch.zeros((2, 2), dtype=torch.uint8))


def test_unencodable_header_values_rejected() -> None:
    with pytest.raises(TypeError):
        _payload({"bad": [1, 2]}).to_bytes()
    with pytest.raises(ValueError):
        encode_header("x" * 256, 1, torch.float32, (1,), {})
    with pytest.raises(ValueError):
        encode_header("x", 1, torch.complex64, (1,), {})


def test_every_truncated_header_raises() -> None:
    p = _payload({"k": -3, "f": 0.5, "s": "xy"}, body=b"")
    raw = p.to_bytes()
    assert len(raw) == len(p.header)
    for cut in range(len(raw)):
        with pytest.raises(PayloadError):
            Payload.from_bytes(raw[:cut])
    assert Payload.from_bytes(raw).meta == {"k": -3, "f": 0.5, "s": "xy"}


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"", "empty"),
        (b"\x02\x04qsgd\x01\x00\x00\x00", "format version"),
        (b"\x01\x04q\xffgd\x01\x00\x00\x00", "non-ASCII"),
        (b"\x01\x04qsgd\x01\x63\x00\x00", "dtype"),
        (b"\x01\x04qsgd\x01\x00\x00\x01\x01kz\x00", "meta tag"),
        (b"\x01\x04qsgd" + b"\xff" * 11 + b"\x01\x00\x00\x00", "overlong"),
        (b"\x01\x04qsgd\x01\x00\x01\x80", "truncated"),
    ],
    ids=["empty", "format", "non-ascii", "dtype", "meta-tag", "overlong-varint", "truncated-dim"],
)
def test_garbage_raises_payload_error(raw: bytes, match: str) -> None:
    with pytest.raises(PayloadError, match=match):
        Payload.from_bytes(raw)


@given(st.one_of(st.binary(max_size=64), st.binary(max_size=64).map(lambda b: bytes([FORMAT_VERSION]) + b)))
def test_random_bytes_never_raise_anything_but_payload_error(raw: bytes) -> None:
    try:
        p = Payload.from_bytes(raw)
    except PayloadError:
        return
    # whatever parsed re-serialises to at most the same bytes (varints may have been non-minimal)
    assert len(p.to_bytes()) <= len(raw)
    assert Payload.from_bytes(p.to_bytes()).to_bytes() == p.to_bytes()


def test_from_bytes_accepts_bytearray_and_memoryview() -> None:
    raw = _payload({"s": 4}).to_bytes()
    for buf in (bytearray(raw), memoryview(raw)):
        assert Payload.from_bytes(buf).to_bytes() == raw


# ---------------------------------------------------------------- decoding as a trust boundary


def test_header_refuses_non_canonical_and_huge_varints() -> None:
    good = b"\x01\x04qsgd\x01\x00\x01\x05\x00"
    assert Payload.from_bytes(good).shape == (5,)
    with pytest.raises(PayloadError, match="non-canonical"):
        Payload.from_bytes(b"\x01\x04qsgd\x01\x00\x01\x85\x00\x00")  # 5 spelled in two bytes
    with pytest.raises(PayloadError, match="overlong"):
        Payload.from_bytes(b"\x01\x04qsgd\x01\x00\x01" + b"\xff" * 9 + b"\x02\x00")  # 2^64 + ...


def test_header_refuses_repeated_meta_keys_and_too_many_dimensions() -> None:
    one = _payload({"k": 1}, body=b"").to_bytes()
    twice = one[:-5] + b"\x02" + one[-4:] * 2  # meta count 2, the 4-byte entry "k"=1 twice
    assert Payload.from_bytes(one).meta == {"k": 1}
    with pytest.raises(PayloadError, match="repeats meta key 'k'"):
        Payload.from_bytes(twice)
    p = Payload("none", 1, torch.float32, (1,) * 65, torch.empty(0, dtype=torch.uint8))
    with pytest.raises(PayloadError, match="65 dimensions"):
        Payload.from_bytes(p.to_bytes())


def test_declared_size_is_bounded_without_an_expected_shape() -> None:
    """At most MAX_NUMEL elements, and decode_budget of the wire size in decoded bytes, unless the receiver expects the shape."""
    from gcbench.core.payload import DECODE_BYTES_PER_WIRE_BYTE, DECODE_FLOOR_BYTES, MAX_NUMEL, check_shape, decode_nbytes

    check_shape((MAX_NUMEL,))
    with pytest.raises(PayloadError, match="elements"):
        check_shape((MAX_NUMEL // 2 + 1, 2))
    with pytest.raises(PayloadError, match="dimension"):
        check_shape((0, 2**40))  # an empty tensor cannot hide an absurd dimension
    check_shape((2**40,), expected_shape=(2**40,))
    with pytest.raises(PayloadError, match="expects"):
        check_shape((4, 5), expected_shape=torch.Size([5, 4]))
    # the floor: any message may decode to DECODE_FLOOR_BYTES (float32 decode plus the cast to the header's dtype)
    floor32 = DECODE_FLOOR_BYTES // decode_nbytes(1, torch.float32)
    check_shape((floor32,), wire_nbytes=1)
    with pytest.raises(PayloadError, match="for its size"):
        check_shape((floor32 + 1,), wire_nbytes=1)
    with pytest.raises(PayloadError, match="float64"):  # the same elements declared float64 cost more
        check_shape((floor32,), wire_nbytes=1, dtype=torch.float64)
    # beyond the floor: DECODE_BYTES_PER_WIRE_BYTE per byte of the message
    n = 100_000
    most = DECODE_BYTES_PER_WIRE_BYTE * n // decode_nbytes(1, torch.float32)
    check_shape((most,), wire_nbytes=n)
    check_shape((most,), wire_nbytes=lambda: n)
    with pytest.raises(PayloadError, match="pass the expected shape"):
        check_shape((most + 1,), wire_nbytes=lambda: n)
    check_shape((most + 1,), expected_shape=(most + 1,), wire_nbytes=n)  # the receiver waits for it
    # parsing allocates the body alone: from_bytes checks the structure, the decode the size
    raw = _payload(body=b"", shape=(2**30,)).to_bytes()
    assert Payload.from_bytes(raw).shape == (2**30,)
    with pytest.raises(PayloadError, match="expects"):
        Payload.from_bytes(raw, expected_shape=(2**30, 1))


def test_a_sliced_payload_is_its_buffer_range_read_on_first_use() -> None:
    """``Payload.sliced`` (the casts' grouped path) defers only the view: bytes, size, copies and pickles are a payload's."""
    import dataclasses
    import pickle

    buf = torch.arange(40, dtype=torch.uint8)
    p = Payload.sliced("none", 1, torch.float32, (2, 2), buf, 8, 24)
    assert "data" not in p.__dict__
    assert p.body_nbytes == 16 and "data" in p.__dict__
    assert torch.equal(p.data, buf[8:24])
    q = Payload("none", 1, torch.float32, (2, 2), buf[8:24].clone())
    assert p.to_bytes() == q.to_bytes() and p.nbytes == q.nbytes
    fresh = Payload.sliced("none", 1, torch.float32, (2, 2), buf, 8, 24)
    assert pickle.loads(pickle.dumps(fresh)).to_bytes() == q.to_bytes()
    assert torch.equal(dataclasses.replace(fresh, shape=(4,)).data, buf[8:24])
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        _ = p.nonsense  # type: ignore[attr-defined]
