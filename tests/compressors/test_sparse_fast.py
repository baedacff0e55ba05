"""The CPU kernels of ``gcbench.compressors._sparse_fast`` against plain torch/NumPy/codec versions.

Sizes cross :data:`SERIAL_BELOW`, so the work is split over two threads, and most checks also
run with one thread: results must not depend on the thread count.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from gcbench.compressors import _sparse_fast as fast
from gcbench.core import codec
from gcbench.core.errors import PayloadError

pytestmark = pytest.mark.skipif(not fast.HAVE_NUMBA, reason="numba kernels not available")

N = 700_001  # several chunks and work items, not a multiple of anything


def _gen(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def _t3(n: int, seed: int) -> np.ndarray:
    """Heavy-tailed float32 values (Student-t, 3 degrees of freedom)."""
    return _gen(seed).standard_t(3.0, n).astype(np.float32)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request: pytest.FixtureRequest) -> Iterator[int]:
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def _torch_select(a: np.ndarray, thr: float, strict: bool) -> np.ndarray:
    t = torch.from_numpy(a).abs()
    return torch.nonzero(t > thr if strict else t >= thr).reshape(-1).numpy()


# ----------------------------------------------------------------------------- thresholds


def test_threshold_rounds_like_torch() -> None:
    """torch compares a float32 tensor with float32(thr): 1 > 0.99999999 is False, 1 >= 1.00000001 is True."""
    a = np.array([1.0, -1.0, 0.5, np.nextafter(np.float32(1), np.float32(2))], np.float32)
    for thr, strict in ((0.99999999, True), (1.00000001, False), (1.0, True), (1.0, False), (0.75, True)):
        sel = fast.select_encode(a.copy(), fast.f32_threshold(thr, strict), None, want_idx=True)
        assert sel.idx is not None
        assert sel.idx.tolist() == _torch_select(a, thr, strict).tolist(), (thr, strict)
    assert fast.f32_threshold(float("inf"), True) is None
    assert fast.select_encode(a.copy(), None, "fixed").k == 0


# ----------------------------------------------------------------------------- selection + encoding


@pytest.mark.parametrize(("coding", "density"), [
    *[("fixed", dens) for dens in (0.0005, 0.02, 0.6, 1.0)],
    *[("int32", dens) for dens in (0.02, 1.0)],
    *[(coding, 0.002) for coding in ("delta-varint", "elias", "paper")],
])
def test_select_encode_equals_codec_of_torch_selection(coding: str, density: float, threads: int) -> None:
    a = _t3(N, 1)
    if density == 1.0:
        thr, strict = 0.0, False  # every element passes (no exact zeros in the data)
    else:
        thr, strict = float(np.quantile(np.abs(a), 1 - density)), True
    want = _torch_select(a, thr, strict)
    sel = fast.select_encode(a, fast.f32_threshold(thr, strict), coding, want_idx=True, want_decoded=True)
    assert sel.k == sel.count == want.size
    assert sel.idx is not None and sel.vals is not None and sel.decoded is not None
    assert np.array_equal(sel.idx, want)
    assert np.array_equal(sel.vals, a[want])
    assert np.array_equal(sel.body, codec.encode_sparse(a[want], want, N, coding))
    dense = np.zeros(N, np.float32)
    dense[want] = a[want]
    assert np.array_equal(sel.decoded, dense)


def test_select_encode_limit_zero_modes_and_nan() -> None:
    a = _t3(N, 2)
    a[[10, 400_000]] = np.nan
    a[[11, 400_001]] = np.inf
    thr = float(np.nanquantile(np.abs(a), 0.99))
    want = _torch_select(a, thr, False)  # NaN never passes, inf does
    assert 10 not in want and 11 in want
    limit = want.size // 3
    for mode in (fast.ZERO_NONE, fast.ZERO_SET, fast.ZERO_SUB):
        b = a.copy()
        sel = fast.select_encode(b, fast.f32_threshold(thr, False), "fixed", limit=limit, zero_mode=mode, want_idx=True)
        assert sel.count == want.size and sel.k == limit
        assert sel.idx is not None and np.array_equal(sel.idx, want[:limit])  # the first `limit` in index order
        assert np.array_equal(sel.body, codec.encode_sparse(a[want[:limit]], want[:limit], N, "fixed"))
        rest = np.ones(N, bool)
        rest[want[:limit]] = False
        assert np.array_equal(b[rest], a[rest], equal_nan=True)  # nothing else touched
        changed = b[want[:limit]]
        if mode == fast.ZERO_NONE:
            assert np.array_equal(changed, a[want[:limit]])
        elif mode == fast.ZERO_SET:
            assert np.all(changed == 0)
        else:  # a − a: 0, and NaN where a is infinite (what torch's a − decoded gives)
            fin = np.isfinite(a[want[:limit]])
            assert np.all(changed[fin] == 0) and np.all(np.isnan(changed[~fin]))


def test_nan_pass_counts_nan_as_candidate() -> None:
    a = _t3(1000, 3)
    a[5] = np.nan
    t = np.float32(2.0)
    assert int(fast.count_chunks(a, t, nan_pass=True).sum()) == int(fast.count_chunks(a, t).sum()) + 1


# ----------------------------------------------------------------------------- bit packing


def _shifted(packed: np.ndarray, nbits: int, bit0: int) -> np.ndarray:
    """The stream ``packed`` (``nbits`` bits) preceded by ``bit0`` zero bits."""
    bits = np.unpackbits(packed, bitorder="little")[:nbits]
    return np.packbits(np.concatenate([np.zeros(bit0, np.uint8), bits]), bitorder="little")


@pytest.mark.parametrize("width", [1, 3, 8, 13, 25, 32])
@pytest.mark.parametrize("bit0", [0, 5, 17])
def test_pack_into_matches_codec_pack_bits(width: int, bit0: int, threads: int) -> None:
    count = 3 * fast._PACK_ITEM + 77  # several work items, the last one partial
    values = _gen(width).integers(0, 2**width, count)
    stream = np.zeros(codec.packed_nbytes(count * width + bit0, 1), np.uint8)
    fast.pack_into(values, width, stream, bit0)
    assert np.array_equal(stream, _shifted(codec.pack_bits(values, width), count * width, bit0))
    assert np.array_equal(fast.read_fixed(stream, width, count, bit0), values)


def test_pack_into_matches_the_bit_by_bit_reference() -> None:
    for width, bit0 in ((5, 3), (11, 0), (29, 6)):
        values = _gen(width).integers(0, 2**width, 999)
        stream = np.zeros(codec.packed_nbytes(999 * width + bit0, 1), np.uint8)
        fast.pack_into(values, width, stream, bit0)
        ref = np.frombuffer(codec.pack_bits_reference(values.tolist(), width), np.uint8)
        assert np.array_equal(stream, _shifted(ref, 999 * width, bit0))


def test_pack_into_ors_into_a_shared_byte() -> None:
    """Two segments meeting inside a byte (AdaComp's counts then fields) both keep their bits."""
    first, second = np.array([5, 2, 7]), np.array([1, 0, 3, 2])
    stream = np.zeros(codec.packed_nbytes(3 * 3 + 4 * 2, 1), np.uint8)
    fast.pack_into(first, 3, stream)
    fast.pack_into(second, 2, stream, 9)
    ref = codec.pack_bits_reference([5, 2, 7], 3)
    bits = np.concatenate([np.unpackbits(np.frombuffer(ref, np.uint8), bitorder="little")[:9],
                           np.unpackbits(np.frombuffer(codec.pack_bits_reference([1, 0, 3, 2], 2), np.uint8), bitorder="little")[:8]])
    assert np.array_equal(stream, np.packbits(bits, bitorder="little"))


@pytest.mark.parametrize("coding", codec.SPARSE_CODINGS)
def test_encode_sorted_and_decode_round_trip(coding: str) -> None:
    d = 2_000_003
    idx = np.sort(_gen(4).choice(d, 50_000, replace=False))
    vals = _t3(idx.size, 5)
    body = fast.encode_sorted(vals, idx, d, coding)
    assert np.array_equal(body, codec.encode_sparse(vals, idx, d, coding))
    out = fast.decode_sparse(body, d, idx.size, coding, "test").numpy()
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
        fast.decode_sparse(bad, d, 2, "fixed", "test")
    with pytest.raises(PayloadError, match="truncated"):
        fast.decode_sparse(body[:-1], d, 2, "fixed", "test")
    with pytest.raises(PayloadError):
        fast.decode_sparse(body, d, d + 1, "fixed", "test")


def _special_values(k: int, seed: int) -> np.ndarray:
    """Float32 values with the bit patterns a decoder must carry unchanged: -0.0, ±inf, NaN, subnormals."""
    v = _t3(k, seed)
    special = np.array([-0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39], np.float32)
    v[: min(k, special.size)] = special[: min(k, special.size)]
    return v


def _raw_fixed_body(vals: np.ndarray, fields: np.ndarray, d: int) -> np.ndarray:
    """A ``fixed`` sparse body with the given fields as they are (any order, repeats, past d)."""
    return np.concatenate([vals.view(np.uint8), codec.pack_bits(fields, codec.index_width(d))])


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_decode_sparse_reference_is_the_plain_definition() -> None:
    """The reference itself, on a hand-made stream: fields 5, 2, 5 (the last 5 wins), 0."""
    vals = np.array([1.5, -2.0, 3.0, 4.0], np.float32)
    body = _raw_fixed_body(vals, np.array([5, 2, 5, 0]), 7)
    assert codec.index_width(7) == 3 and body.size == 16 + 2  # 4 fields of 3 bits
    assert fast.decode_sparse_reference(body, 7, 4, "fixed").tolist() == [4.0, 0.0, -2.0, 0.0, 0.0, 3.0, 0.0]
    with pytest.raises(PayloadError, match="outside"):
        fast.decode_sparse_reference(_raw_fixed_body(vals, np.array([5, 2, 7, 0]), 7), 7, 4, "fixed")


@pytest.mark.parametrize("coding", codec.INDEX_CODINGS)
@pytest.mark.parametrize("d", [1, 2, 9, 4_103, N, 2_300_003])  # widths 1..22; d > 2M: a pooled 8 MB+ output
def test_decode_sparse_matches_the_reference(coding: str, d: int, threads: int) -> None:
    """Every coding, k from 0 to d (last element included), bit for bit, on fresh and on reused outputs."""
    rng = _gen(d % 1000 + 40)
    full = coding in ("fixed", "int32") or d < N  # the slow pure-Python codings get the sparse cases only at large d
    ks = sorted({0, 1, min(d, 3), d // 1000, d // 7, d - 1, d} if full else {0, 1, d // 1000})
    for k in ks:
        idx = np.sort(rng.choice(d, k, replace=False))
        if k:
            idx[-1] = d - 1  # an index at the last element (still sorted and unique)
        vals = _special_values(k, k + 3)
        body = codec.encode_sparse(vals, idx, d, coding)
        want = fast.decode_sparse_reference(body, d, k, coding)
        for _ in range(2):  # the second decode of a large tensor gets the first one's freed buffer
            got = fast.decode_sparse(body, d, k, coding, "test")
            assert got.dtype == torch.float32 and _same_bits(got.numpy(), want), (coding, d, k)
            del got


@pytest.mark.parametrize("clear", [False, True])
@pytest.mark.parametrize("d", [37, 5_000, N])
def test_unpack_scatter_matches_the_reference_on_any_field_order(d: int, clear: bool, threads: int) -> None:
    """Sorted, unsorted, repeated and past-the-end fields: the written elements and the skipped count
    equal a sequential scatter's (a repeated field keeps its last value), and with ``clear`` a
    dirty output ends up zero everywhere else."""
    rng = _gen(d + clear)
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
        vals = _t3(k, k)
        body = _raw_fixed_body(vals, fields, d)
        out = np.full(d, np.float32(7.25)) if clear else np.zeros(d, np.float32)
        n_out = fast.unpack_scatter(body[4 * k :], width, vals, out, clear)
        assert n_out == int((fields >= d).sum()), case
        ref_body = _raw_fixed_body(vals[fields < d], fields[fields < d], d)
        want = fast.decode_sparse_reference(ref_body, d, int((fields < d).sum()), "fixed")
        assert _same_bits(out, want), (case, d, clear)
        if case == "past-end" and n_out:
            with pytest.raises(PayloadError, match="outside"):
                fast.decode_sparse(body, d, k, "fixed", "test")


def test_unpack_scatter_reads_the_stream_tail_exactly() -> None:
    """Streams of every length mod 4 bytes and widths 1..32: the last fields come from the padded
    tail words, and nothing past the stream's last byte is read (the stream is a view followed
    by 0xFF bytes in memory, which would show up in a field read past its end)."""
    rng = _gen(77)
    for width in range(1, 33):
        d = 2**width if width < 32 else 2**32
        for k in range(1, 12):
            fields = np.unique(rng.integers(0, min(d, 5_000), k))
            kk = fields.size
            vals = _t3(kk, width * 100 + k)
            packed = codec.pack_bits(fields, width)
            stream = np.concatenate([packed, np.full(5, 0xFF, np.uint8)])[: packed.size]
            out = np.zeros(min(d, 5_000), np.float32)
            assert fast.unpack_scatter(stream, width, vals, out, clear=False) == 0
            want = np.zeros(out.size, np.float32)
            want[fields] = vals
            assert _same_bits(out, want), (width, k)


# ----------------------------------------------------------------------------- exact top-k


def _torch_topk_set(x: torch.Tensor, k: int) -> np.ndarray:
    return np.sort(torch.topk(x.abs(), k, sorted=False).indices.numpy())


@pytest.mark.parametrize("density", [1e-4, 0.001, 0.01, 0.2])
@pytest.mark.parametrize("d", [4 * fast.TOPK_SAMPLE + 12_345, 100_003, 5_000])  # full sample, d/4 sample, np.partition
def test_topk_select_equals_torch_topk(density: float, d: int, threads: int) -> None:
    x = torch.from_numpy(_t3(d, int(density * 1e4)))
    k = math.ceil(density * d)
    idx, vals = fast.topk_select(x, k)
    assert np.array_equal(idx.numpy(), _torch_topk_set(x, k))
    assert torch.equal(vals, x[idx])
    idx_t, _ = fast.topk_select_torch(x, k)  # the torch version of the same rule
    assert torch.equal(idx_t, idx)


def test_topk_ties_keep_the_lowest_indices() -> None:
    d = 4 * fast.TOPK_SAMPLE + 1
    x = torch.from_numpy(_gen(6).random(d, dtype=np.float32) * 0.5)  # magnitudes < 0.5
    big = torch.from_numpy(np.sort(_gen(7).choice(d, 3000, replace=False)))
    x[big[:1000]] = 2.0  # 1000 entries clearly on top
    x[big[1000:]] = -1.0  # 2000 tied at the k-th magnitude
    k = 1500
    idx, _ = fast.topk_select(x, k)
    assert idx.tolist() == sorted(big[:1000].tolist() + big[1000:1500].tolist())
    assert torch.equal(fast.topk_select_torch(x, k)[0], idx)


def test_topk_threshold_too_high_retries_then_stays_exact() -> None:
    """Huge values at every sampled position make the first thresholds too high: still the exact top-k."""
    d = 4 * fast.TOPK_SAMPLE
    x = torch.from_numpy(_gen(8).random(d, dtype=np.float32))
    stride = d // fast.TOPK_SAMPLE
    x[stride // 2 :: stride] = 100.0 + torch.arange(fast.TOPK_SAMPLE, dtype=torch.float32)
    k = 10 * fast.TOPK_SAMPLE // 8  # more than the sampled positions hold
    idx, _ = fast.topk_select(x, k)
    assert np.array_equal(idx.numpy(), _torch_topk_set(x, k))


def test_topk_short_candidate_count_retries_with_a_lower_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first threshold that keeps fewer than k: the next, lower one is used and the result is exact."""
    real = fast.topk_candidate_rank
    calls: list[int] = []

    def too_high_first(m: int, k: int, d: int, widen: int) -> int:
        calls.append(widen)
        return max(1, real(m, k, d, 0) // 10) if widen == 0 else real(m, k, d, widen)

    monkeypatch.setattr(fast, "topk_candidate_rank", too_high_first)
    monkeypatch.setattr(fast, "topk_select_torch_exact", lambda flat, k: pytest.fail("fell back to torch.topk"))
    d = 4 * fast.TOPK_SAMPLE + 3
    x = torch.from_numpy(_t3(d, 10))
    idx, _ = fast.topk_select(x, 5000)
    assert calls[:2] == [0, 1]
    assert np.array_equal(idx.numpy(), _torch_topk_set(x, 5000))


def test_topk_with_nan_defers_to_torch() -> None:
    d = 4 * fast.TOPK_SAMPLE
    x = torch.from_numpy(_t3(d, 9))
    x[123] = float("nan")
    idx, _ = fast.topk_select(x, 500)
    assert 123 in idx.tolist()  # torch.topk ranks NaN first
    assert np.array_equal(idx.numpy(), _torch_topk_set(x, 500))


# ----------------------------------------------------------------------------- momentum and moments


@pytest.mark.parametrize("coef", [None, 0.3])
def test_momentum_kernels_round_like_the_torch_ops(coef: float | None, threads: int) -> None:
    n = N
    x, u, v = (torch.from_numpy(_t3(n, s)) for s in (10, 11, 12))
    u_t, v_t = u.clone(), v.clone()
    u_t.mul_(0.9).add_(x if coef is None else x * coef)
    v_t.add_(u_t)
    start, stride, count = 3, 97, (n - 3) // 97
    samples = fast.momentum_sample(u.numpy(), v.numpy(), x.numpy(), 0.9, coef, start, stride, count)
    assert np.array_equal(samples, v_t.abs().numpy()[start : start + count * stride : stride])
    t = np.float32(1.5)
    counts = fast.momentum_update_count(u.numpy(), v.numpy(), x.numpy(), 0.9, coef, t)
    assert torch.equal(u, u_t) and torch.equal(v, v_t)
    assert int(counts.sum()) == int((v_t.abs() >= 1.5).sum())


def test_population_std_equals_torch_std_in_float32() -> None:
    for seed in range(20):
        g = _gen(seed)
        n = int(g.integers(1, 400_000))
        v = (g.standard_normal(n) * g.random() * 10 + g.standard_normal()).astype(np.float32)
        want = np.float32(float(torch.std(torch.from_numpy(v), correction=0)))
        assert np.float32(fast.population_std(v)) == want
        u, x = np.zeros(n, np.float32), np.zeros(n, np.float32)
        w = v.copy()
        assert np.float32(fast.momentum_update_std(u, w, x, 0.9, None)) == want  # x = u = 0: v unchanged


# ----------------------------------------------------------------------------- the torch paths (non-CPU devices)


@pytest.mark.parametrize(("name", "params", "shape"), [
    ("topk", {"density": 0.002, "error_feedback": True}, (1100, 1000)),
    ("threshold", {"tau": 2.0}, (600, 700)),
    ("graddrop", {"scope": "layer"}, (600, 700)),
    ("graddrop", {"scope": "layer", "quantize": "2bit"}, (600, 700)),
    ("dgc", {}, (600, 700)),
    ("dgc", {"nesterov": True, "index_coding": "paper"}, (600, 700)),
    ("sdagc", {"lr_revision": True, "lambda_final": 2.0}, (600, 700)),
    ("adacomp", {}, (600, 700)),
    ("adacomp", {"quantize": "none"}, (600, 50, 3)),
])
def test_torch_path_gives_the_bytes_of_the_kernels(name: str, params: dict[str, object], shape: tuple[int, ...],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """What a CUDA tensor takes (the torch ops), run here on CPU tensors: the same bytes and states."""
    from gcbench.compressors import registry

    comp = registry.create(name, **params)
    fast_state, torch_state = comp.init_state(1), comp.init_state(1)
    xs = [torch.from_numpy(_t3(math.prod(shape), 400 + t).reshape(shape)) for t in range(3)]
    fast_out = [comp.compress_and_decode(x, fast_state) for x in xs]
    monkeypatch.setattr(fast, "fast_cpu", lambda *tensors: False)
    torch_out = [comp.compress_and_decode(x, torch_state) for x in xs]
    for (p1, d1), (p2, d2) in zip(fast_out, torch_out, strict=True):
        assert p1.to_bytes() == p2.to_bytes()
        assert torch.equal(d1, d2)
    assert fast_state.tensors.keys() == torch_state.tensors.keys()
    for key, value in fast_state.tensors.items():
        assert torch.equal(value, torch_state.tensors[key]), key


def test_powersgd_torch_path_agrees_within_float64_rounding(monkeypatch: pytest.MonkeyPatch) -> None:
    from gcbench.compressors import registry

    comp = registry.create("powersgd", rank=3)
    s1, s2 = comp.init_state(2), comp.init_state(2)
    xs = [torch.from_numpy(_t3(640 * 500, 500 + t).reshape(640, 500)) for t in range(3)]
    out1 = [comp.compress_and_decode(x, s1)[1] for x in xs]
    monkeypatch.setattr(fast, "fast_cpu", lambda *tensors: False)
    out2 = [comp.compress_and_decode(x, s2)[1] for x in xs]
    for a, b in zip(out1, out2, strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5 * float(a.abs().max()))
    assert torch.allclose(s1.tensors["residual"], s2.tensors["residual"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("coding", codec.INDEX_CODINGS)
def test_index_codings_match_codec(coding: str) -> None:
    d = 3_000_017
    idx = np.sort(_gen(12).choice(d, 40_000, replace=False))
    data = fast.encode_indices(idx, d, coding)
    assert np.array_equal(data, codec.encode_indices(idx, d, coding))
    assert np.array_equal(fast.decode_indices(data, d, idx.size, coding, "test"), idx)
    if coding == "fixed":
        with pytest.raises(PayloadError, match="truncated"):
            fast.decode_indices(data[:-1], d, idx.size, coding, "test")
        big = codec.pack_bits(np.array([5, d + 3]), codec.index_width(d))  # a field past the tensor
        with pytest.raises(PayloadError, match="outside"):
            fast.decode_indices(big, d, 2, coding, "test")
