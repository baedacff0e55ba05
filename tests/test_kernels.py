"""Fast kernels (:mod:`gcbench.kernels`) against plain NumPy/torch oracles.

The counter-based generator is checked against the published SplitMix64 sequence and against its
NumPy and torch twins; every fused kernel against the straightforward formula it replaces, on
sizes that cross the kernels' part and block boundaries and on special values (±0, NaN, ties).
"""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.core import codec

# sizes around the kernels' block (1024) and part (65536) boundaries, with ragged tails
SIZES = [1, 7, 8, 63, 64, 65, 1000, 1024, 1025, 65536, 65537, 150_003]


@pytest.fixture(autouse=True, params=["serial", "threads"])
def threading_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every kernel test runs on one thread and on all of torch's threads (parts written
    concurrently), whatever the input size."""
    if request.param == "threads":
        monkeypatch.setattr(kernels, "SERIAL_MAX", 0)
        monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    return request.param


def torch_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every compressor take its plain torch path on CPU (as on a device without kernels)."""
    monkeypatch.setattr(kernels, "cpu_fast", lambda *t: False)
    monkeypatch.setattr(kernels, "fused_ef_ok", lambda x: False)
    monkeypatch.setattr(kernels, "available", lambda: False)


def signed_values(n: int, seed: int) -> np.ndarray:
    """Normal values with exact zeros, −0.0 and repeated magnitudes sprinkled in."""
    g = np.random.default_rng(seed)
    x = g.standard_normal(n).astype(np.float32)
    if n >= 8:
        x[:: max(1, n // 7)] = 0.0
        x[1 :: max(1, n // 5)] = -0.0
        x[2 :: max(1, n // 3)] = 1.5
    return x


# ----------------------------------------------------------------------------- random numbers


def test_rand24_is_the_published_splitmix64_sequence() -> None:
    # SplitMix64 seeded with 0 (Steele et al. 2014; Vigna's splitmix64.c): 0xE220A8397B1DCDAF,
    # 0x6E789E6AA1B965F4, 0x06C45D188009454F — a uniform keeps the top 24 bits
    assert kernels.rand24(0, 3).tolist() == [0xE220A8, 0x6E789E, 0x06C45D]
    assert kernels.rand24(0, 2, start=1).tolist() == [0x6E789E, 0x06C45D]


@pytest.mark.parametrize("n", [1, 1000, 65537, 200_000])
@pytest.mark.parametrize("seed", [0, 1, 2**63 - 5, 123456789])
def test_rand24_kernel_numpy_and_torch_agree(n: int, seed: int) -> None:
    start = 12345 if n > 1000 else 0
    fast = kernels.rand24(seed, n, start)
    assert fast.dtype == np.uint32 and int(fast.max()) < 2**24
    np.testing.assert_array_equal(fast, kernels.rand24_reference(seed, n, start))
    np.testing.assert_array_equal(fast.astype(np.int64), kernels.rand24_torch(seed, n, "cpu", start).numpy())


def test_uniforms_are_on_the_grid_and_uniform() -> None:
    u = kernels.uniforms(99, 400_000)
    assert u.dtype == torch.float32 and float(u.min()) >= 0.0 and float(u.max()) < 1.0
    assert torch.equal(u * 2**24, torch.floor(u * 2**24))  # multiples of 2^-24
    counts = torch.histc(u, bins=100, min=0.0, max=1.0)
    expected = 4000.0
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert abs(chi2 - 99) < 5 * math.sqrt(2 * 99), chi2
    # different keys give uncorrelated streams, and neighbouring counters uncorrelated numbers
    v = kernels.uniforms(100, 400_000).double()
    ud = u.double()
    assert abs(float(torch.corrcoef(torch.stack([ud, v]))[0, 1])) < 5 / math.sqrt(400_000)
    assert abs(float(torch.corrcoef(torch.stack([ud[1:], ud[:-1]]))[0, 1])) < 5 / math.sqrt(400_000)
    assert torch.equal(kernels.uniforms(99, 10, start=5), u[5:15])


def test_bernoulli_frequency_matches_probability() -> None:
    """P(u < p) = p: the test every stochastic quantizer relies on, for grid and off-grid p."""
    n = 1_000_000
    u = kernels.uniforms(7, n)
    for p in (2.0**-10, 0.3, 0.5, 0.75 + 2.0**-20, 1 - 2.0**-9):
        freq = float((u < p).double().mean())
        assert abs(freq - p) < 5 * math.sqrt(p * (1 - p) / n), (p, freq)


# ----------------------------------------------------------------------------- buffers


@pytest.mark.parametrize("n", [10, 3_000_000])
def test_empty_and_zeros(n: int) -> None:
    z = kernels.zeros(n)
    assert z.shape == (n,) and z.dtype == torch.float32 and int(torch.count_nonzero(z)) == 0
    e = kernels.empty(n, torch.float16)
    e.fill_(2.0)
    assert e.dtype == torch.float16 and float(e.double().sum()) == 2.0 * n
    if n * 4 >= 8 << 20:  # the mapping path: aligned to the huge-page size
        assert z.data_ptr() % (2 << 20) == 0
    b = kernels.empty(n).numpy()  # the buffer survives as long as a view of it does
    b[-1] = 5.0
    del e, z
    assert b[-1] == 5.0


def test_freed_buffers_are_reused_only_after_their_last_reference_is_gone() -> None:
    import gc

    n = 3_000_000  # 12 MB: the mapping path
    a = kernels.empty(n)
    a.fill_(7.0)
    held = kernels.empty(n)
    assert held.data_ptr() != a.data_ptr()  # a live buffer is never handed out again
    view = a[100:200]
    ptr = a.data_ptr()
    del a
    gc.collect()
    b = kernels.empty(n)
    assert b.data_ptr() != ptr and bool((view == 7.0).all())  # a view keeps the memory
    del view, b
    gc.collect()
    c = kernels.zeros(n)  # the freed mapping comes back, cleared
    assert int(torch.count_nonzero(c)) == 0
    c.fill_(3.0)
    cp = c.data_ptr()
    del c
    gc.collect()
    d = kernels.empty(n)
    assert d.data_ptr() == cp  # reused: no new mapping, no new page faults
    e = kernels.empty(n + 1)  # another size never takes it
    assert e.data_ptr() != cp


def test_empty_maybe_zero_says_when_the_buffer_is_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """True (and all zeros) for a small buffer and a fresh mapping; False exactly for a reused one."""
    import gc

    monkeypatch.setattr(kernels, "_pool", [])  # an empty pool: the first large buffer is a fresh mapping
    monkeypatch.setattr(kernels, "_returned", collections.deque())
    small, small_zero = kernels.empty_maybe_zero(1000)
    assert small_zero and small.shape == (1000,) and int(torch.count_nonzero(small)) == 0
    n = 3_000_000  # 12 MB: the mapping path
    a, a_zero = kernels.empty_maybe_zero(n)
    assert a_zero and a.dtype == torch.float32 and int(torch.count_nonzero(a)) == 0
    a.fill_(4.0)
    ptr = a.data_ptr()
    del a
    gc.collect()
    b, b_zero = kernels.empty_maybe_zero(n)
    reused = b.data_ptr() == ptr and not b_zero and bool((b == 4.0).all())  # reused, not cleared
    del b
    gc.collect()
    assert reused


def test_buffer_pool_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    monkeypatch.setattr(kernels, "POOL_BYTES", 0)
    monkeypatch.setattr(kernels, "_pool", [])
    monkeypatch.setattr(kernels, "_returned", collections.deque())
    a = kernels.empty(3_000_000)
    a.fill_(1.0)
    del a
    gc.collect()
    assert not kernels._returned and not kernels._pool  # nothing kept: the mapping was unmapped
    z = kernels.zeros(3_000_000)  # fresh memory reads as zero
    assert int(torch.count_nonzero(z)) == 0


# ----------------------------------------------------------------------------- bit fields


@pytest.mark.parametrize("width", [1, 2, 3, 5, 6, 8, 9, 13, 21, 31, 32, 33, 47, 63, 64])
def test_pack_fields_across_parts_matches_numpy_packer(width: int) -> None:
    n = 70_001  # two parts, ragged last group
    g = np.random.default_rng(width)
    top = 2**width if width < 64 else 2**64
    v = g.integers(0, min(top, 2**63), size=n, dtype=np.uint64)
    if width == 64:
        v[::3] |= np.uint64(1 << 63)
    v[0] = np.uint64(top - 1)
    packed = kernels.pack_fields(v, width)
    np.testing.assert_array_equal(packed, codec._pack_bits_numpy(v, width))
    np.testing.assert_array_equal(kernels.unpack_fields(packed, width, n).view(np.uint64), v)


def test_pack_fields_masks_values_to_the_width() -> None:
    v = np.array([0b1111, 0b1010, -1], np.int64)
    assert kernels.pack_fields(v, 2).tolist() == [0b111011]  # 3, 2, 3 (two bits of each)


# ----------------------------------------------------------------------------- reductions


@pytest.mark.parametrize("n", SIZES)
def test_absmax_l2norm_std(n: int) -> None:
    x = signed_values(n, n) * 3 + 1000.0  # a large mean: the shifted sums must not cancel
    x64 = x.astype(np.float64)
    assert kernels.absmax(x) == float(np.abs(x).max())
    assert kernels.l2norm(x) == pytest.approx(float(np.sqrt((x64**2).sum())), rel=1e-12)
    sd, amax = kernels.std_and_absmax(x)
    assert amax == float(np.abs(x).max())
    assert sd == pytest.approx(float(x64.std()), rel=1e-9, abs=1e-12)


def test_absmax_sees_nan_and_negative_maximum() -> None:
    x = np.array([1.0, -7.5, 3.0], np.float32)
    assert kernels.absmax(x) == 7.5
    x[1] = np.nan
    assert math.isnan(kernels.absmax(x))


# ----------------------------------------------------------------------------- sign and 1-bit


@pytest.mark.parametrize("n", SIZES)
def test_sign_pack_and_unpack(n: int) -> None:
    x = signed_values(n, 3)
    if n > 3:
        x[3] = np.nan  # NaN >= 0 is false: bit 0
    out = np.empty((n + 7) // 8, np.uint8)
    nonzero = kernels.sign_pack(x, out)
    np.testing.assert_array_equal(out, np.packbits(x >= 0, bitorder="little"))
    assert nonzero == bool((x != 0).any())
    dec = np.empty(n, np.float32)
    kernels.sign_unpack(out, 2.5, -0.5, dec)
    np.testing.assert_array_equal(dec, np.where(x >= 0, 2.5, -0.5).astype(np.float32))


def test_sign_pack_all_zero_flag() -> None:
    x = np.zeros(70_000, np.float32)
    x[69_999] = -0.0
    assert not kernels.sign_pack(x, np.empty(8750, np.uint8))
    x[12] = 1e-45
    assert kernels.sign_pack(x, np.empty(8750, np.uint8))


@pytest.mark.parametrize("has_e", [True, False])
@pytest.mark.parametrize("n", [7, 1025, 150_003])
def test_ef_sign_form_then_apply(n: int, has_e: bool) -> None:
    x = signed_values(n, 5)
    e0 = np.random.default_rng(6).standard_normal(n).astype(np.float32)
    a = x + e0 if has_e else x.copy()
    e = e0.copy()
    out = np.empty((n + 7) // 8, np.uint8)
    scale = kernels.ef_sign_form(x, e, has_e)
    assert scale == np.float32(np.abs(a.astype(np.float64)).sum() / n)
    np.testing.assert_array_equal(e, a)  # pass 1 leaves a = x + e in the buffer
    kernels.ef_sign_apply(e, scale, out)
    np.testing.assert_array_equal(out, np.packbits(a >= 0, bitorder="little"))
    np.testing.assert_array_equal(e, a - np.where(a >= 0, scale, -scale).astype(np.float32))


def onebit_oracle(a: np.ndarray, rows: int, cols: int, by_row: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mu0, mu1, decoded) from plain per-group means in float64."""
    m = a.reshape(rows, cols).astype(np.float64)
    groups = m if by_row else m.T
    mu0, mu1 = [], []
    for g in groups:
        pos, neg = g[g >= 0], g[~(g >= 0)]
        mu1.append(pos.mean() if pos.size else 0.0)
        mu0.append(neg.mean() if neg.size else 0.0)
    mu0a, mu1a = np.array(mu0, np.float32), np.array(mu1, np.float32)
    gid = np.repeat(np.arange(rows), cols) if by_row else np.tile(np.arange(cols), rows)
    return mu0a, mu1a, np.where(a >= 0, mu1a[gid], mu0a[gid])


@pytest.mark.parametrize(
    ("rows", "cols", "by_row"),
    [(64, 27, False), (64, 27, True), (300, 1001, False), (7, 30_001, True), (1, 150_003, True), (150_003, 1, False), (3, 5, False)],
)
def test_onebit_form_apply_and_decode(rows: int, cols: int, by_row: bool) -> None:
    n = rows * cols
    x = signed_values(n, rows) + 0.2
    e0 = np.random.default_rng(cols).standard_normal(n).astype(np.float32) * 0.1
    a = x + e0
    e = e0.copy()
    bits = np.empty((n + 7) // 8, np.uint8)
    mu0, mu1 = kernels.onebit_form(x, e, True, cols, by_row)
    np.testing.assert_array_equal(e, a)  # pass 1 leaves a = x + e in the buffer
    kernels.onebit_apply(e, cols, by_row, mu0, mu1, bits)
    want0, want1, dec = onebit_oracle(a, rows, cols, by_row)
    np.testing.assert_allclose(mu0, want0, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(mu1, want1, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(bits, np.packbits(a >= 0, bitorder="little"))
    out = np.empty(n, np.float32)
    kernels.onebit_decode(bits, cols, by_row, mu0, mu1, out)
    np.testing.assert_allclose(out, dec, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(e, a - out)  # the residual is exactly a − decoded (float32)


# ----------------------------------------------------------------------------- top-k


@pytest.mark.parametrize(
    "kind", ["normal", "zeros", "integers", "one-binade", "tiny", "nan"]
)
@pytest.mark.parametrize("n", [1, 9, 4097, 150_003])
def test_topk_select_matches_stable_sort(kind: str, n: int) -> None:
    g = np.random.default_rng(n)
    x = {
        "normal": lambda: g.standard_normal(n),
        "zeros": lambda: np.zeros(n),
        "integers": lambda: g.integers(-3, 4, n),  # heavy ties: the lowest indices must win
        "one-binade": lambda: 1 + g.random(n),  # a huge first-level bin: the refining passes
        "tiny": lambda: g.standard_normal(n) * 1e-42,  # subnormals
        "nan": lambda: np.where(g.random(n) < 0.01, np.nan, g.standard_normal(n)),
    }[kind]().astype(np.float32)
    for k in sorted({1, max(1, n // 100), max(1, n // 3), n}):
        got = kernels.topk_select(x, k)
        np.testing.assert_array_equal(got, kernels.topk_select_reference(x, k))


@pytest.mark.parametrize("has_e", [True, False])
def test_topk_select_forms_the_corrected_gradient(has_e: bool) -> None:
    g = np.random.default_rng(4)
    x = g.standard_normal(100_000).astype(np.float32)
    e0 = g.standard_normal(100_000).astype(np.float32)
    e = e0.copy()
    got = kernels.topk_select(x, 1000, e, has_e)
    a = x + e0 if has_e else x
    np.testing.assert_array_equal(e, a)
    np.testing.assert_array_equal(got, kernels.topk_select_reference(a, 1000))
    # the torch.topk set agrees where magnitudes are distinct
    want = torch.topk(torch.from_numpy(a).abs(), 1000).indices.sort().values.numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", ["sample-misses-the-top", "sample-sees-only-the-top"])
def test_topk_select_falls_back_when_the_sampled_threshold_fails(case: str) -> None:
    """Periodic data that defeats the strided sample still gives the exact set."""
    n = 2 * kernels._SAMPLE
    g = np.random.default_rng(5)
    x = g.random(n).astype(np.float32)
    # the sample (every 2nd element here) sees none of the large values, or nothing else
    big = np.arange(n) % 2 == (1 if case == "sample-misses-the-top" else 0)
    x[big] += 100.0
    for k in (1000, n // 5):
        if case == "sample-sees-only-the-top" or k == 1000:  # too few, or far too many, pass t
            assert kernels._topk_sampled(x.view(np.uint32), k, 4) is None  # the fallback runs
        np.testing.assert_array_equal(kernels.topk_select(x, k), kernels.topk_select_reference(x, k))
    normal = g.standard_normal(n).astype(np.float32)
    assert kernels._topk_sampled(normal.view(np.uint32), 1000, 4) is not None  # the common path


def test_gather_scatter() -> None:
    g = np.random.default_rng(2)
    d = 1_000_003
    s = np.sort(g.choice(d, size=5000, replace=False))
    a = g.standard_normal(d).astype(np.float32)
    np.testing.assert_array_equal(kernels.gather(a, s), a[s])
    out = np.zeros(d, np.float32)
    kernels.scatter(out, s, a[s], 3.0)
    want = np.zeros(d, np.float32)
    want[s] = a[s] * np.float32(3.0)
    np.testing.assert_array_equal(out, want)
    kernels.scatter_sub(out, s, a[s])
    np.testing.assert_array_equal(out[s], want[s] - a[s])


# ----------------------------------------------------------------------------- random k-subsets


def test_random_subset_every_subset_equally_likely() -> None:
    """d = 6, k = 3: the 20 subsets are equally frequent over 6000 seeds (chi-square)."""
    freq: dict[tuple[int, ...], int] = {}
    for seed in range(6000):
        sub = tuple(kernels.random_subset(seed, 6, 3).tolist())
        freq[sub] = freq.get(sub, 0) + 1
    assert len(freq) == 20
    chi2 = sum((c - 300) ** 2 / 300 for c in freq.values())
    assert abs(chi2 - 19) < 5 * math.sqrt(2 * 19), chi2


@pytest.mark.parametrize(("d", "k"), [(1, 0), (1, 1), (70_000, 35_000), (200_003, 2000)])
def test_random_subset_matches_the_python_oracle(d: int, k: int) -> None:
    for seed in (1, 99):
        got = kernels.random_subset(seed, d, k)
        np.testing.assert_array_equal(got, kernels.random_subset_reference(seed, d, k))
        assert len(got) == k and np.all(np.diff(got) > 0) and (k == 0 or (got[0] >= 0 and got[-1] < d))
