"""Threshold selection, the parallel bit writer and the sparse bodies of :mod:`gcbench.compressors._sparse`
against :mod:`gcbench.core.codec` and the plain decode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.compressors import _sparse
from gcbench.core import codec
from gcbench.core.errors import PayloadError
from gcbench.core.params import INDEX_CODINGS, SPARSE_CODINGS
from gcbench.kernels import bits
from tests.kernels.helpers import N, gen, same_bits, t3


def _torch_select(a: np.ndarray, thr: float, strict: bool) -> np.ndarray:
    t = torch.from_numpy(a).abs()
    return torch.nonzero(t > thr if strict else t >= thr).reshape(-1).numpy()


# ----------------------------------------------------------------------------- thresholds


def test_threshold_rounds_like_torch() -> None:
    """torch compares a float32 tensor with float32(thr): 1 > 0.99999999 is False, 1 >= 1.00000001 is True."""
    a = np.array([1.0, -1.0, 0.5, np.nextafter(np.float32(1), np.float32(2))], np.float32)
    for thr, strict in ((0.99999999, True), (1.00000001, False), (1.0, True), (1.0, False), (0.75, True)):
        sel = _sparse.select_encode(a.copy(), kernels.f32_threshold(thr, strict), None, want_idx=True)
        assert sel.idx is not None
        assert sel.idx.tolist() == _torch_select(a, thr, strict).tolist(), (thr, strict)
    assert kernels.f32_threshold(float("inf"), True) is None
    assert _sparse.select_encode(a.copy(), None, "fixed").k == 0


# ----------------------------------------------------------------------------- selection + encoding


@pytest.mark.parametrize(("coding", "density"), [
    *[("fixed", dens) for dens in (0.0005, 0.02, 0.6, 1.0)],
    *[("int32", dens) for dens in (0.02, 1.0)],
    *[(coding, 0.002) for coding in ("delta-varint", "elias", "paper")],
])
def test_select_encode_equals_codec_of_torch_selection(coding: str, density: float, threads: int) -> None:
    a = t3(N, 1)
    if density == 1.0:
        thr, strict = 0.0, False  # every element passes (no exact zeros in the data)
    else:
        thr, strict = float(np.quantile(np.abs(a), 1 - density)), True
    want = _torch_select(a, thr, strict)
    sel = _sparse.select_encode(a, kernels.f32_threshold(thr, strict), coding, want_idx=True, want_decoded=True)
    assert sel.k == sel.count == want.size
    assert sel.idx is not None and sel.vals is not None and sel.decoded is not None
    assert np.array_equal(sel.idx, want)
    assert np.array_equal(sel.vals, a[want])
    assert np.array_equal(sel.body, codec.encode_sparse(a[want], want, N, coding))
    dense = np.zeros(N, np.float32)
    dense[want] = a[want]
    assert np.array_equal(sel.decoded, dense)


def test_select_encode_limit_zero_modes_and_nan() -> None:
    a = t3(N, 2)
    a[[10, 400_000]] = np.nan
    a[[11, 400_001]] = np.inf
    thr = float(np.nanquantile(np.abs(a), 0.99))
    want = _torch_select(a, thr, False)  # NaN never passes, inf does
    assert 10 not in want and 11 in want
    limit = want.size // 3
    for mode in (kernels.ZERO_NONE, kernels.ZERO_SET, kernels.ZERO_SUB):
        b = a.copy()
        sel = _sparse.select_encode(b, kernels.f32_threshold(thr, False), "fixed", limit=limit, zero_mode=mode, want_idx=True)
        assert sel.count == want.size and sel.k == limit
        assert sel.idx is not None and np.array_equal(sel.idx, want[:limit])  # the first `limit` in index order
        assert np.array_equal(sel.body, codec.encode_sparse(a[want[:limit]], want[:limit], N, "fixed"))
        rest = np.ones(N, bool)
        rest[want[:limit]] = False
        assert np.array_equal(b[rest], a[rest], equal_nan=True)  # nothing else touched
        changed = b[want[:limit]]
        if mode == kernels.ZERO_NONE:
            assert np.array_equal(changed, a[want[:limit]])
        elif mode == kernels.ZERO_SET:
            assert np.all(changed == 0)
        else:  # a − a: 0, and NaN where a is infinite (what torch's a − decoded gives)
            fin = np.isfinite(a[want[:limit]])
            assert np.all(changed[fin] == 0) and np.all(np.isnan(changed[~fin]))


@pytest.mark.parametrize("decoded", [False, True])
@pytest.mark.parametrize("nan_pass", [False, True])
@pytest.mark.parametrize("zero_mode", [0, 1, 2])
@pytest.mark.parametrize("coding", ["fixed", "int32"])
def test_dense_write_pass_equals_the_plain_selection(coding: str, zero_mode: int, nan_pass: bool, decoded: bool,
                                                     threads: int) -> None:
    """Chunks where most elements pass take the one-pass dense writer: every output (body, indices,
    values, decoded tensor, the state update) equals the plain selection bit for bit, with NaN, ±inf
    and -0.0 in the data, and a ``limit`` that cuts a chunk in the middle (that chunk takes the
    collect-then-write path, the others the dense one)."""
    a = t3(N, 9)
    a[[3, 70_000, 699_999]] = np.nan
    a[[4, 70_001]] = np.inf
    a[[5, 140_000]] = -np.inf
    a[[6, 7, 200_000]] = -0.0
    thr = float(np.quantile(np.abs(a[np.isfinite(a)]), 0.1))  # about 90% pass: dense chunks
    mag = np.abs(a)
    passing = np.flatnonzero((mag >= np.float32(thr)) | (nan_pass & np.isnan(a)))
    for limit in (None, int(passing.size * 0.37)):
        want = passing if limit is None else passing[:limit]
        b = a.copy()
        sel = _sparse.select_encode(b, kernels.f32_threshold(thr, False), coding, limit=limit, zero_mode=zero_mode,
                                    want_decoded=decoded, want_idx=coding == "int32", nan_pass=nan_pass)
        assert sel.count == passing.size and sel.k == want.size
        assert np.array_equal(sel.body, codec.encode_sparse(a[want], want, N, coding))
        if coding == "int32":  # the int64 indices and values asked for besides the body
            assert sel.idx is not None and sel.vals is not None
            assert np.array_equal(sel.idx, want) and same_bits(sel.vals, a[want])
        if decoded:
            dense = np.zeros(N, np.float32)
            dense[want] = a[want]
            assert sel.decoded is not None and same_bits(sel.decoded, dense)
        residual = a.copy()
        if zero_mode == 1:
            residual[want] = 0.0
        elif zero_mode == 2:
            with np.errstate(invalid="ignore"):
                residual[want] = a[want] - a[want]  # NaN where a is ±inf or NaN
        assert same_bits(b, residual)


def test_fixed_body_in_reused_dirty_memory_is_exact(threads: int) -> None:
    """The ``fixed`` body comes from the buffer pool uninitialised: a freed body full of 0xFF bytes,
    taken again by a slightly smaller one, still yields the codec's bytes (the bytes that chunks
    share are cleared before they are OR-ed, and every other byte is written)."""
    import gc

    n = 3_000_001  # a body of ~20 MB: the pooled mapping path
    a = t3(n, 11)
    t = kernels.f32_threshold(float(np.quantile(np.abs(a), 0.05)), True)
    first = _sparse.select_encode(a.copy(), t, "fixed")
    ptr = first.body.ctypes.data
    first.body[:] = 0xFF
    del first
    gc.collect()
    t2 = kernels.f32_threshold(float(np.quantile(np.abs(a), 0.06)), True)  # fewer pass: a smaller body
    sel = _sparse.select_encode(a.copy(), t2, "fixed", want_idx=True)
    assert sel.body.ctypes.data == ptr  # the dirty memory was taken again
    assert sel.idx is not None and np.array_equal(sel.body, codec.encode_sparse(a[sel.idx], sel.idx, n, "fixed"))


def test_nan_pass_counts_nan_as_candidate() -> None:
    a = t3(1000, 3)
    a[5] = np.nan
    t = np.float32(2.0)
    assert int(kernels.count_chunks(a, t, nan_pass=True).sum()) == int(kernels.count_chunks(a, t).sum()) + 1


# ----------------------------------------------------------------------------- bit packing


def _shifted(packed: np.ndarray, nbits: int, bit0: int) -> np.ndarray:
    """The stream ``packed`` (``nbits`` bits) preceded by ``bit0`` zero bits."""
    bits = np.unpackbits(packed, bitorder="little")[:nbits]
    return np.packbits(np.concatenate([np.zeros(bit0, np.uint8), bits]), bitorder="little")


@pytest.mark.parametrize("width", [1, 3, 8, 13, 25, 32])
@pytest.mark.parametrize("bit0", [0, 5, 17])
def test_pack_into_matches_codec_pack_bits(width: int, bit0: int, threads: int) -> None:
    count = 3 * bits._PACK_ITEM + 77  # several work items, the last one partial
    values = gen(width).integers(0, 2**width, count)
    stream = np.zeros(codec.packed_nbytes(count * width + bit0, 1), np.uint8)
    kernels.pack_into(values, width, stream, bit0)
    assert np.array_equal(stream, _shifted(codec.pack_bits(values, width), count * width, bit0))
    assert np.array_equal(kernels.read_fixed(stream, width, count, bit0), values)


def test_pack_into_matches_the_bit_by_bit_reference() -> None:
    for width, bit0 in ((5, 3), (11, 0), (29, 6)):
        values = gen(width).integers(0, 2**width, 999)
        stream = np.zeros(codec.packed_nbytes(999 * width + bit0, 1), np.uint8)
        kernels.pack_into(values, width, stream, bit0)
        ref = np.frombuffer(codec.pack_bits_reference(values.tolist(), width), np.uint8)
        assert np.array_equal(stream, _shifted(ref, 999 * width, bit0))


def test_pack_into_ors_into_a_shared_byte() -> None:
    """Two segments meeting inside a byte (AdaComp's counts then fields) both keep their bits."""
    first, second = np.array([5, 2, 7]), np.array([1, 0, 3, 2])
    stream = np.zeros(codec.packed_nbytes(3 * 3 + 4 * 2, 1), np.uint8)
    kernels.pack_into(first, 3, stream)
    kernels.pack_into(second, 2, stream, 9)
    ref = codec.pack_bits_reference([5, 2, 7], 3)
    bits = np.concatenate([np.unpackbits(np.frombuffer(ref, np.uint8), bitorder="little")[:9],
                           np.unpackbits(np.frombuffer(codec.pack_bits_reference([1, 0, 3, 2], 2), np.uint8), bitorder="little")[:8]])
    assert np.array_equal(stream, np.packbits(bits, bitorder="little"))


@pytest.mark.parametrize("coding", SPARSE_CODINGS)
def test_encode_sorted_and_decode_round_trip(coding: str) -> None:
    d = 2_000_003
    idx = np.sort(gen(4).choice(d, 50_000, replace=False))
    vals = t3(idx.size, 5)
    body = _sparse.encode_sorted(vals, idx, d, coding)
    assert np.array_equal(body, codec.encode_sparse(vals, idx, d, coding))
    out = _sparse.decode_sparse(body, d, idx.size, coding, "test").numpy()
    want = np.zeros(d, np.float32)
    want[idx] = vals
    assert np.array_equal(out, want)


def test_decode_rejects_out_of_range_and_truncated_bodies() -> None:
    d = 1000  # 10-bit fields hold up to 1023
    body = codec.encode_sparse(np.ones(2, np.float32), np.array([3, 999]), d, "fixed")
    fields = codec.unpack_bits(body[8:], 10, 2)
    fields[1] = 1010  # out of the tensor
    bad = np.concatenate([body[:8], codec.pack_bits(fields, 10)])
    with pytest.raises(PayloadError, match="outside"):
        _sparse.decode_sparse(bad, d, 2, "fixed", "test")
    with pytest.raises(PayloadError, match="truncated"):
        _sparse.decode_sparse(body[:-1], d, 2, "fixed", "test")
    with pytest.raises(PayloadError):
        _sparse.decode_sparse(body, d, d + 1, "fixed", "test")


def _special_values(k: int, seed: int) -> np.ndarray:
    """Float32 values with the bit patterns a decoder must carry unchanged: -0.0, ±inf, NaN, subnormals."""
    v = t3(k, seed)
    special = np.array([-0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39], np.float32)
    v[: min(k, special.size)] = special[: min(k, special.size)]
    return v


def _raw_fixed_body(vals: np.ndarray, fields: np.ndarray, d: int) -> np.ndarray:
    """A ``fixed`` sparse body with the given fields as they are (any order, repeats, past d)."""
    return np.concatenate([vals.view(np.uint8), codec.pack_bits(fields, codec.index_width(d))])



def test_decode_sparse_reference_is_the_plain_definition() -> None:
    """The reference itself, on a hand-made stream: fields 5, 2, 5 (the last 5 wins), 0."""
    vals = np.array([1.5, -2.0, 3.0, 4.0], np.float32)
    body = _raw_fixed_body(vals, np.array([5, 2, 5, 0]), 7)
    assert codec.index_width(7) == 3 and body.size == 16 + 2  # 4 fields of 3 bits
    assert _sparse.decode_sparse_reference(body, 7, 4, "fixed").tolist() == [4.0, 0.0, -2.0, 0.0, 0.0, 3.0, 0.0]
    with pytest.raises(PayloadError, match="outside"):
        _sparse.decode_sparse_reference(_raw_fixed_body(vals, np.array([5, 2, 7, 0]), 7), 7, 4, "fixed")


@pytest.mark.parametrize("coding", INDEX_CODINGS)
@pytest.mark.parametrize("d", [1, 2, 9, 4_103, N, 2_300_003])  # widths 1..22; d > 2M: a pooled 8 MB+ output
def test_decode_sparse_matches_the_reference(coding: str, d: int, threads: int) -> None:
    """Every coding, k from 0 to d (last element included), bit for bit, on fresh and on reused outputs."""
    rng = gen(d % 1000 + 40)
    full = coding in ("fixed", "int32") or d < N  # the slow pure-Python codings get the sparse cases only at large d
    ks = sorted({0, 1, min(d, 3), d // 1000, d // 7, d - 1, d} if full else {0, 1, d // 1000})
    for k in ks:
        idx = np.sort(rng.choice(d, k, replace=False))
        if k:
            idx[-1] = d - 1  # an index at the last element (still sorted and unique)
        vals = _special_values(k, k + 3)
        body = codec.encode_sparse(vals, idx, d, coding)
        want = _sparse.decode_sparse_reference(body, d, k, coding)
        for _ in range(2):  # the second decode of a large tensor gets the first one's freed buffer
            got = _sparse.decode_sparse(body, d, k, coding, "test")
            assert got.dtype == torch.float32 and same_bits(got.numpy(), want), (coding, d, k)
            del got


@pytest.mark.parametrize("clear", [False, True])
@pytest.mark.parametrize("d", [37, 5_000, N])
def test_unpack_scatter_matches_the_reference_on_any_field_order(d: int, clear: bool, threads: int) -> None:
    """Sorted, unsorted, repeated and past-the-end fields: the written elements and the skipped count
    equal a sequential scatter's (a repeated field keeps its last value), and with ``clear`` a
    dirty output ends up zero everywhere else."""
    rng = gen(d + clear)
    width = codec.index_width(d)
    for case in ("sorted", "reversed", "repeats", "past-end"):
        k = d // 2 + 1
        if case == "sorted":
            fields = np.sort(rng.choice(d, k, replace=False))
        elif case == "reversed":
            fields = np.sort(rng.choice(d, k, replace=False))[::-1].copy()
        elif case == "repeats":
            fields = rng.integers(0, d, k)
        else:  # sorted, but the last fields point past the tensor (as far as the width allows)
            fields = np.sort(rng.integers(0, min(2**width, d + 50), k))
        vals = t3(k, k)
        body = _raw_fixed_body(vals, fields, d)
        out = np.full(d, np.float32(7.25)) if clear else np.zeros(d, np.float32)
        n_out = kernels.unpack_scatter(body[4 * k :], width, vals, out, clear)
        assert n_out == int((fields >= d).sum()), case
        ref_body = _raw_fixed_body(vals[fields < d], fields[fields < d], d)
        want = _sparse.decode_sparse_reference(ref_body, d, int((fields < d).sum()), "fixed")
        assert same_bits(out, want), (case, d, clear)
        if case == "past-end" and n_out:
            with pytest.raises(PayloadError, match="outside"):
                _sparse.decode_sparse(body, d, k, "fixed", "test")


def test_unpack_scatter_reads_the_stream_tail_exactly() -> None:
    """Streams of every length mod 4 bytes and widths 1..32: the last fields come from the padded
    tail words, and nothing past the stream's last byte is read (the stream is a view followed
    by 0xFF bytes in memory, which would show up in a field read past its end)."""
    rng = gen(77)
    for width in range(1, 33):
        d = 2**width if width < 32 else 2**32
        for k in range(1, 12):
            fields = np.unique(rng.integers(0, min(d, 5_000), k))
            kk = fields.size
            vals = t3(kk, width * 100 + k)
            packed = codec.pack_bits(fields, width)
            stream = np.concatenate([packed, np.full(5, 0xFF, np.uint8)])[: packed.size]
            out = np.zeros(min(d, 5_000), np.float32)
            assert kernels.unpack_scatter(stream, width, vals, out, clear=False) == 0
            want = np.zeros(out.size, np.float32)
            want[fields] = vals
            assert same_bits(out, want), (width, k)

