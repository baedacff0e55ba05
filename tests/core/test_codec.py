"""Wire codecs: bit packing, varints, Elias-ω, index codings and sparse vectors.

Fast routines are checked against the plain references in :mod:`gcbench.core.codec` and against
hand-worked bytes; every size is checked against an independently computed bit count.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gcbench.core import codec
from gcbench.core.errors import PayloadError
from gcbench.core.params import INDEX_CODINGS, SPARSE_CODINGS
from gcbench.core.payload import _varint as scalar_varint
from tests.conftest import expected_index_bits, omega

# ---------------------------------------------------------------------------- helpers


def bitstring(data: np.ndarray) -> str:
    return "".join(f"{int(b):08b}" for b in np.asarray(data, dtype=np.uint8))


def fields_string(vals: np.ndarray, widths: np.ndarray) -> str:
    return "".join(format(int(v), f"0{int(w)}b") for v, w in zip(vals.ravel(), widths.ravel(), strict=True) if w > 0)


# ---------------------------------------------------------------------------- bit packing


@pytest.mark.parametrize(
    ("values", "width", "expected"),
    [
        ([1, 0, 1, 1, 0, 0, 0, 0, 1], 1, b"\x0d\x01"),  # LSB first: bits 0,2,3 -> 0x0d; bit 8 -> 0x01
        ([1, 2, 3, 0, 1], 2, b"\x39\x01"),  # 1 | 2<<2 | 3<<4 | 0<<6 = 0x39
        ([5, 3, 7], 3, b"\xdd\x01"),  # stream 101 110 111 (LSB first per field)
        ([0xA, 0x5, 0xF], 4, b"\x5a\x0f"),
        ([0xABC, 0x123], 12, b"\xbc\x3a\x12"),  # the 24-bit little-endian integer 0x123ABC
        ([200, 7], 8, b"\xc8\x07"),
        ([], 5, b""),
    ],
)
def test_pack_bits_hand_worked(values: list[int], width: int, expected: bytes) -> None:
    assert codec.pack_bits_reference(values, width) == expected
    assert codec.pack_bits(np.array(values, dtype=np.int64), width).tobytes() == expected
    assert codec.unpack_bits(np.frombuffer(expected, np.uint8), width, len(values)).tolist() == values


@pytest.mark.parametrize("width", range(1, 13))
@pytest.mark.parametrize("count", [0, 1, 7, 9, 1000])
def test_pack_bits_matches_reference(width: int, count: int) -> None:
    rng = np.random.default_rng(width * 7919 + count)
    vals = rng.integers(0, 2**width, size=count)
    if count:
        vals[0] = 2**width - 1  # the widest value must fit exactly
    packed = codec.pack_bits(vals, width)
    assert packed.dtype == np.uint8
    assert len(packed) == codec.packed_nbytes(count, width) == math.ceil(count * width / 8)
    assert packed.tobytes() == codec.pack_bits_reference(vals.tolist(), width)
    out = codec.unpack_bits(packed, width, count)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, vals)


def test_pack_bits_accepts_bool_and_uint8() -> None:
    mask = np.array([True, False, True, True, False, False, False, False, True])
    assert codec.pack_bits(mask, 1).tobytes() == b"\x0d\x01"
    assert codec.pack_bits(np.array([1, 2, 3, 0, 1], np.uint8), 2).tobytes() == b"\x39\x01"


@pytest.mark.parametrize("width", [1, 2, 4, 6, 8, 11])
def test_unpack_bits_truncated_raises(width: int) -> None:
    packed = codec.pack_bits(np.ones(50, np.int64), width)
    with pytest.raises(PayloadError, match="truncated"):
        codec.unpack_bits(packed[:-1], width, 50)


@given(st.integers(1, 16).flatmap(lambda w: st.tuples(st.just(w), st.lists(st.integers(0, 2**w - 1), max_size=200))))
def test_pack_bits_property(case: tuple[int, list[int]]) -> None:
    width, values = case
    packed = codec.pack_bits(np.array(values, dtype=np.int64), width)
    assert packed.tobytes() == codec.pack_bits_reference(values, width)
    assert codec.unpack_bits(packed, width, len(values)).tolist() == values


@pytest.mark.parametrize(
    ("d", "width"), [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (1000, 10), (1024, 10), (1025, 11), (2**20 + 1, 21)]
)
def test_index_width(d: int, width: int) -> None:
    assert codec.index_width(d) == width


# ---------------------------------------------------------------------------- varints


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (16384, b"\x80\x80\x01"),
        (2**63 - 1, b"\xff" * 8 + b"\x7f"),
    ],
)
def test_varint_known_encodings(n: int, expected: bytes) -> None:
    assert codec.varint_encode(np.array([n], np.uint64)).tobytes() == expected
    assert scalar_varint(n) == expected  # the header's scalar encoder agrees
    vals, used = codec.varint_decode(np.frombuffer(expected + b"\x05", np.uint8), 1)
    assert vals.tolist() == [n] and used == len(expected)


def test_varint_round_trip_mixed_lengths() -> None:
    rng = np.random.default_rng(3)
    vals = np.concatenate([rng.integers(0, 2 ** rng.integers(1, 63, size=500), dtype=np.int64), [0, 127, 128, 2**63 - 1]])
    enc = codec.varint_encode(vals)
    assert enc.tobytes() == b"".join(scalar_varint(int(v)) for v in vals)
    dec, used = codec.varint_decode(enc, len(vals))
    np.testing.assert_array_equal(dec, vals)
    assert used == len(enc)
    assert codec.varint_encode(np.zeros(0, np.int64)).size == 0
    assert codec.varint_decode(np.zeros(0, np.uint8), 0)[0].size == 0


def test_varint_truncated_and_overlong_raise() -> None:
    enc = codec.varint_encode(np.array([300, 5, 70000]))
    with pytest.raises(PayloadError, match="truncated"):
        codec.varint_decode(enc[:-1], 3)
    with pytest.raises(PayloadError, match="overlong"):
        codec.varint_decode(np.array([0x80] * 10 + [0x01], np.uint8), 1)


@given(st.lists(st.integers(0, 2**63 - 1), max_size=100))
def test_varint_property(values: list[int]) -> None:
    enc = codec.varint_encode(np.array(values, dtype=np.uint64))
    assert enc.tobytes() == b"".join(scalar_varint(v) for v in values)
    dec, used = codec.varint_decode(enc, len(values))
    assert dec.tolist() == values and used == len(enc)


# ---------------------------------------------------------------------------- Elias-omega


@pytest.mark.parametrize(("n", "length"), [(1, 1), (2, 3), (3, 3), (4, 6), (7, 6), (8, 7), (15, 7), (16, 11), (17, 11), (100, 13)])
def test_elias_omega_length_known(n: int, length: int) -> None:
    assert codec.elias_omega_length(n) == length == len(omega(n))


@pytest.mark.parametrize(("n", "code"), [(1, "0"), (2, "100"), (3, "110"), (4, "101000"), (16, "10100100000"), (17, "10100100010")])
def test_elias_omega_hand_worked_codes(n: int, code: str) -> None:
    assert omega(n) == code  # the oracle itself against the hand-worked codes
    vals, widths = codec.elias_omega_fields(np.array([n]))
    assert fields_string(vals, widths) == code
    stream = codec.write_fields(vals, widths)
    assert len(stream) == math.ceil(len(code) / 8)
    assert bitstring(stream) == code + "0" * (8 * len(stream) - len(code))  # MSB first, zero padded


def test_elias_omega_fields_match_textbook_codes() -> None:
    ns = np.concatenate([np.arange(1, 3000), [2**31 - 1, 2**31, 2**40 + 3, 2**52 + 1, 2**53 - 1]])
    vals, widths = codec.elias_omega_fields(ns)
    for row, n in enumerate(ns):
        code = omega(int(n))
        assert fields_string(vals[row], widths[row]) == code
        assert int(widths[row].sum()) == codec.elias_omega_length(int(n)) == len(code)


def test_elias_omega_rejects_non_positive() -> None:
    with pytest.raises(ValueError):
        codec.elias_omega_length(0)
    with pytest.raises(ValueError):
        codec.elias_omega_fields(np.array([3, 0]))


def _mixed_records(rng: np.random.Generator, count: int, pattern: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Random records for ``pattern`` (0 = Elias-ω, w > 0 = w fixed bits) as fields, plus expected values and bits."""
    recs = np.zeros((count, len(pattern)), np.int64)
    vals_cols, width_cols = [], []
    total = 0
    for j, w in enumerate(pattern):
        if w == 0:
            col = rng.integers(1, 2 ** rng.integers(1, 40, size=count), dtype=np.int64) if count else np.zeros(0, np.int64)
            v, wd = codec.elias_omega_fields(col)
            total += sum(len(omega(int(c))) for c in col)
        else:
            col = rng.integers(0, 2**w, size=count, dtype=np.int64)
            v, wd = col[:, None], np.full((count, 1), w, np.int64)
            total += w * count
        recs[:, j] = col
        vals_cols.append(v)
        width_cols.append(wd)
    return np.concatenate(vals_cols, axis=1), np.concatenate(width_cols, axis=1), recs, total


@pytest.mark.parametrize("pattern", [(0,), (0, 1, 0), (5, 0, 12), (1,), (3, 3)])
@pytest.mark.parametrize("count", [0, 1, 9, 500])
def test_write_read_fields_round_trip(pattern: tuple[int, ...], count: int) -> None:
    rng = np.random.default_rng(count + 17 * len(pattern))
    vals, widths, recs, total = _mixed_records(rng, count, pattern)
    stream = codec.write_fields(vals, widths)
    assert len(stream) == math.ceil(total / 8)
    fast, used = codec.read_fields(stream, count, pattern)
    ref, used_ref = codec.read_fields_reference(stream, count, pattern)
    np.testing.assert_array_equal(fast, recs)
    np.testing.assert_array_equal(ref, recs)
    assert used == used_ref == total


@pytest.mark.parametrize("pattern", [(0,), (0, 1, 0), (5, 0, 12), (1,), (3, 3), (0, 40), (64,)])
@pytest.mark.parametrize("count", [0, 1, 9, 500])
def test_write_records_and_fast_writer_match_the_numpy_writer(pattern: tuple[int, ...], count: int) -> None:
    """The numba writers against the vectorised NumPy writer and the independent field layout."""
    rng = np.random.default_rng(count + 31 * len(pattern))
    if 64 in pattern:  # full-width fields: every bit pattern of an int64
        recs = rng.integers(-(2**63), 2**63 - 1, size=(count, 1), dtype=np.int64)
        vals, widths, total = recs, np.full((count, 1), 64, np.int64), 64 * count
    elif 40 in pattern:
        recs = np.stack([rng.integers(1, 2**50, size=count), rng.integers(0, 2**40, size=count)], axis=1).astype(np.int64)
        gv, gw = codec.elias_omega_fields(recs[:, 0])
        vals = np.concatenate([gv, recs[:, 1:]], axis=1)
        widths = np.concatenate([gw, np.full((count, 1), 40, np.int64)], axis=1)
        total = int(widths.sum())
    else:
        vals, widths, recs, total = _mixed_records(rng, count, pattern)
    want = codec.write_fields_reference(vals, widths)
    assert len(want) == math.ceil(total / 8)
    np.testing.assert_array_equal(codec.write_fields(vals, widths), want)
    np.testing.assert_array_equal(codec.write_records(recs, pattern), want)


def test_write_records_rejects_non_positive_elias_values() -> None:
    with pytest.raises(ValueError):
        codec.write_records(np.array([[3], [0]]), (0,))


@pytest.mark.parametrize("width", [1, 2, 3, 7, 11, 24, 40, 57, 64])
def test_pack_bits_many_fields_match_reference_and_numpy(width: int) -> None:
    """Beyond the small cases: 200,003 fields (several kernel parts, ragged tail), all widths."""
    rng = np.random.default_rng(width)
    vals = rng.integers(0, 2 ** min(width, 63), size=200_003, dtype=np.uint64)
    if width == 64:
        vals[1::2] |= np.uint64(1 << 63)
    packed = codec.pack_bits(vals, width)
    np.testing.assert_array_equal(packed, codec._pack_bits_numpy(vals, width))
    assert packed[: 8 * width].tobytes() == codec.pack_bits_reference([int(v) for v in vals[:64]], width)  # 64 fields = 8·width bytes
    np.testing.assert_array_equal(codec.unpack_bits(packed, width, len(vals)).view(np.uint64), vals)


@pytest.mark.parametrize("width", [0, 65])
def test_pack_bits_rejects_widths_outside_1_to_64(width: int) -> None:
    with pytest.raises(ValueError, match=r"1\.\.64"):
        codec.pack_bits(np.zeros(3, np.int64), width)
    with pytest.raises(ValueError, match=r"1\.\.64"):
        codec.unpack_bits(np.zeros(3, np.uint8), width, 1)


def test_read_fields_truncated_raises() -> None:
    vals, widths = codec.elias_omega_fields(np.array([1000, 3, 70000]))
    stream = codec.write_fields(vals, widths)
    for reader in (codec.read_fields, codec.read_fields_reference):
        with pytest.raises(PayloadError):
            reader(stream[:-1], 3, (0,))
        with pytest.raises(PayloadError):
            reader(stream, 4, (0,))  # one record more than was written


def test_read_fields_corrupt_huge_code_raises() -> None:
    """A group announcing a > 63-bit value is corrupt: PayloadError, not OverflowError or a wrapped value."""
    code = "10" + "110" + "1100011" + "1" * 100 + "0"  # n: 1 -> 2 -> 6 -> 99 -> a 100-bit value
    bits = np.array([int(c) for c in code + "0" * ((-len(code)) % 8)], np.uint8)
    for reader in (codec.read_fields, codec.read_fields_reference):
        with pytest.raises(PayloadError):
            reader(np.packbits(bits), 1, (0,))


@given(st.lists(st.integers(1, 2**53 - 1), max_size=60), st.lists(st.integers(0, 1), min_size=60, max_size=60))
def test_elias_fields_property(ns: list[int], signs: list[int]) -> None:
    arr = np.array(ns, dtype=np.int64)
    gv, gw = codec.elias_omega_fields(arr)
    sv = np.array(signs[: len(ns)], np.int64)[:, None]
    vals = np.concatenate([gv, sv], axis=1)
    widths = np.concatenate([gw, np.ones_like(sv)], axis=1)
    stream = codec.write_fields(vals, widths)
    assert bitstring(stream)[: sum(len(omega(n)) + 1 for n in ns)] == "".join(omega(n) + str(s) for n, s in zip(ns, signs, strict=False))
    rec, used = codec.read_fields(stream, len(ns), (0, 1))
    assert rec[:, 0].tolist() == ns and rec[:, 1].tolist() == signs[: len(ns)]
    assert used == sum(len(omega(n)) + 1 for n in ns)


# ---------------------------------------------------------------------------- index codings


def _random_set(rng: np.random.Generator, d: int, k: int) -> np.ndarray:
    return np.sort(rng.choice(d, size=k, replace=False)).astype(np.int64)


@pytest.mark.parametrize("coding", INDEX_CODINGS)
@pytest.mark.parametrize(("d", "k"), [(1, 0), (1, 1), (2, 2), (1000, 0), (1000, 1), (1000, 37), (1000, 1000), (2**20 + 3, 500), (2**24, 3)])
def test_index_coding_round_trip_and_size(coding: str, d: int, k: int) -> None:
    rng = np.random.default_rng(d + k)
    idx = _random_set(rng, d, k)
    enc = codec.encode_indices(idx, d, coding)
    bits = expected_index_bits(idx, d, coding)
    assert codec.index_bits(idx, d, coding) == bits
    assert len(enc) == math.ceil(bits / 8)
    dec, used = codec.decode_indices(np.concatenate([enc, np.array([0xFF, 0x01], np.uint8)]), d, k, coding)
    np.testing.assert_array_equal(dec, idx)
    assert used == len(enc)


_index_sets = st.integers(1, 5000).flatmap(lambda d: st.tuples(st.just(d), st.sets(st.integers(0, d - 1), max_size=200)))


@given(_index_sets, st.sampled_from(INDEX_CODINGS))
def test_index_coding_property(case: tuple[int, set[int]], coding: str) -> None:
    d, chosen = case
    idx = np.array(sorted(chosen), dtype=np.int64)
    enc = codec.encode_indices(idx, d, coding)
    assert len(enc) == math.ceil(expected_index_bits(idx, d, coding) / 8)
    dec, _ = codec.decode_indices(enc, d, len(idx), coding)
    np.testing.assert_array_equal(dec, idx)


def test_index_coding_rejects_unsorted_and_unknown() -> None:
    with pytest.raises(ValueError):
        codec.encode_indices(np.array([3, 1]), 10, "fixed")
    with pytest.raises(ValueError):
        codec.encode_indices(np.array([1, 1]), 10, "fixed")
    with pytest.raises(ValueError):
        codec.encode_indices(np.array([10]), 10, "fixed")
    with pytest.raises(ValueError, match="unknown index coding"):
        codec.encode_indices(np.array([1]), 10, "golomb")


# ---------------------------------------------------------------------------- sparse vectors


def test_paper_coding_hand_worked() -> None:
    # one element 1.0 at index 2 of 10: run of 2 zeros (u16 LE), then the float32 value
    body = codec.encode_sparse(np.array([1.0], np.float32), np.array([2]), 10, "paper")
    assert body.tobytes() == b"\x02\x00" + b"\x00\x00\x80\x3f"
    vals, idx = codec.decode_sparse(body, 10, 1, "paper")
    assert vals.tolist() == [1.0] and idx.tolist() == [2]


@pytest.mark.parametrize("coding", SPARSE_CODINGS)
@pytest.mark.parametrize(
    "positions",
    [
        [],
        [0],
        [0, 5, 70_000, 199_999],  # one run > 65535 and one of 129,998 (one escape each)
        [65_535, 131_071],  # runs of exactly 65,535: an escape then a zero run
        [65_534, 65_534 + 1 + 65_535 * 3 + 7, 299_999],  # a run just under the escape, then three escapes
        list(range(100, 200)),
    ],
    ids=["empty", "first", "long-runs", "exact-escape", "multi-escape", "dense-block"],
)
def test_sparse_round_trip_and_size(coding: str, positions: list[int]) -> None:
    d = 300_000
    idx = np.array(positions, dtype=np.int64)
    rng = np.random.default_rng(len(positions))
    vals = rng.standard_normal(len(idx)).astype(np.float32)
    body = codec.encode_sparse(vals, idx, d, coding)
    if coding == "paper":
        runs = np.diff(idx, prepend=-1) - 1
        escapes = int(sum(int(r) // 65_535 for r in runs))
        assert 8 * len(body) == 48 * len(idx) + 48 * escapes
    else:
        assert len(body) == 4 * len(idx) + math.ceil(expected_index_bits(idx, d, coding) / 8)
    assert codec.sparse_bits(idx, d, coding) == 8 * len(body)
    out_vals, out_idx = codec.decode_sparse(body, d, len(idx), coding)
    assert out_vals.dtype == np.float32
    np.testing.assert_array_equal(out_idx, idx)
    np.testing.assert_array_equal(out_vals.view(np.int32), vals.view(np.int32))


def test_paper_escape_count_for_long_run() -> None:
    d = 1_000_000
    idx = np.array([999_999])  # 999,999 zeros before the element: 15 escapes + remainder 17,974
    body = codec.encode_sparse(np.array([2.5], np.float32), idx, d, "paper")
    assert len(body) == 6 * (1 + 999_999 // 65_535)
    runs = body[: 2 * 16].view("<u2")
    assert runs[:-1].tolist() == [0xFFFF] * 15 and int(runs[-1]) == 999_999 - 15 * 65_535


def test_sparse_corrupt_raises() -> None:
    idx, vals = np.array([3, 9]), np.array([1.0, -2.0], np.float32)
    body = codec.encode_sparse(vals, idx, 10, "paper")
    with pytest.raises(PayloadError):
        codec.decode_sparse(body[:-1], 10, 2, "paper")
    with pytest.raises(PayloadError):
        codec.decode_sparse(body[:-6], 10, 2, "paper")
    with pytest.raises(PayloadError):
        codec.decode_sparse(body, 10, 3, "paper")
    with pytest.raises(PayloadError, match="outside"):
        codec.decode_sparse(body, 9, 2, "paper")  # index 9 does not exist in a 9-element tensor
    enc = codec.encode_sparse(vals, idx, 10, "int32")
    with pytest.raises(PayloadError, match="outside"):
        codec.decode_sparse(enc, 5, 2, "int32")
    with pytest.raises(PayloadError):
        codec.decode_sparse(enc[:7], 10, 2, "int32")
    with pytest.raises(ValueError):
        codec.encode_sparse(vals, np.array([3]), 10, "fixed")


# ---------------------------------------------------------------------------- hostile bodies


@given(_index_sets, st.sampled_from(SPARSE_CODINGS))
def test_encodings_lie_in_the_size_range_decoders_check(case: tuple[int, set[int]], coding: str) -> None:
    """Decoders refuse a body outside ``sparse_nbytes_range`` before allocating: no real encoding may fall outside it."""
    d, chosen = case
    idx = np.array(sorted(chosen), dtype=np.int64)
    body = codec.encode_sparse(np.ones(len(idx), np.float32), idx, d, coding)
    lo, hi = codec.sparse_nbytes_range(d, len(idx), coding)
    assert lo <= len(body) <= hi
    if coding != "paper":
        lo, hi = codec.index_nbytes_range(d, len(idx), coding)
        assert lo <= len(codec.encode_indices(idx, d, coding)) <= hi


@pytest.mark.parametrize("coding", SPARSE_CODINGS)
@pytest.mark.parametrize("d", [1, 2, 127, 128, 65_535, 65_536, 2**24 + 1])
def test_size_range_is_reached_by_the_widest_gaps(coding: str, d: int) -> None:
    """The upper bound is tight where it matters: one element at the far end of the tensor is the widest gap."""
    body = codec.encode_sparse(np.ones(1, np.float32), np.array([d - 1]), d, coding)
    lo, hi = codec.sparse_nbytes_range(d, 1, coding)
    assert lo <= len(body) <= hi
    if coding in ("fixed", "int32", "delta-varint", "elias"):
        assert len(body) == hi


def test_decode_sparse_refuses_trailing_bytes() -> None:
    idx, vals = np.array([3, 9]), np.array([1.0, -2.0], np.float32)
    for coding in INDEX_CODINGS:
        body = codec.encode_sparse(vals, idx, 10, coding)
        codec.decode_sparse(body, 10, 2, coding)
        with pytest.raises(PayloadError, match="after its 2 indices"):
            codec.decode_sparse(np.concatenate([body, np.zeros(1, np.uint8)]), 10, 2, coding)


def test_unknown_index_coding_on_decode_is_a_payload_error() -> None:
    with pytest.raises(PayloadError, match="unknown index coding"):
        codec.decode_indices(np.zeros(8, np.uint8), 10, 1, "golomb")
    with pytest.raises(PayloadError, match="unknown index coding"):
        codec.index_nbytes_range(10, 1, "golomb")


@pytest.mark.parametrize("count", [2**40, 2**62, -1])
def test_read_fields_refuses_counts_the_stream_cannot_hold_before_allocating(count: int) -> None:
    """A header's count must not size the (count, columns) output: 4 bytes hold at most 32 one-bit records."""
    with pytest.raises(PayloadError, match="cannot hold"):
        codec.read_fields(np.zeros(4, np.uint8), count, (0, 1, 0))
    with pytest.raises(PayloadError, match="cannot hold"):
        codec.read_fields_reference(np.zeros(4, np.uint8), count, (0,))
