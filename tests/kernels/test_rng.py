"""Counter-based numbers and random k-subsets against the published sequence and their NumPy, torch and Python twins."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench import kernels

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


def test_paired_numbers_are_two_fields_of_each_splitmix64_output() -> None:
    # the same outputs as above: 0xE220A8397B1DCDAF gives 0xE220A8 then 0x397B1D, 0x6E789E6AA1B965F4 gives 0x6E789E, 0x6AA1B9
    assert kernels.rand24_pairs(0, 4).tolist() == [0xE220A8, 0x397B1D, 0x6E789E, 0x6AA1B9]
    assert kernels.rand24_pairs(0, 2, start=1).tolist() == [0x397B1D, 0x6E789E]


@pytest.mark.parametrize(("n", "start"), [(1, 0), (1, 1), (2, 1), (1001, 0), (1001, 7), (65537, 12345), (200_000, 3)])
@pytest.mark.parametrize("seed", [0, 2**63 - 5, 123456789])
def test_paired_kernel_numpy_and_torch_agree(n: int, start: int, seed: int) -> None:
    fast = kernels.rand24_pairs(seed, n, start)
    assert fast.dtype == np.uint32 and int(fast.max()) < 2**24
    np.testing.assert_array_equal(fast, kernels.rand24_pairs_reference(seed, n, start))
    np.testing.assert_array_equal(fast.astype(np.int64), kernels.rand24_pairs_torch(seed, n, "cpu", start).numpy())


def test_paired_uniforms_are_uniform_and_neighbours_uncorrelated() -> None:
    """The two halves of one output must not be correlated (they are neighbours in every stream that uses them)."""
    n = 400_000
    u = kernels.paired_uniforms(99, n).double()
    counts = torch.histc(u.float(), bins=100, min=0.0, max=1.0)
    chi2 = float(((counts - n / 100) ** 2 / (n / 100)).sum())
    assert abs(chi2 - 99) < 5 * math.sqrt(2 * 99), chi2
    assert abs(float(torch.corrcoef(torch.stack([u[0::2], u[1::2]]))[0, 1])) < 5 / math.sqrt(n / 2)
    assert abs(float(torch.corrcoef(torch.stack([u[1:-1:2], u[2::2]]))[0, 1])) < 5 / math.sqrt(n / 2)
    for p in (2.0**-10, 0.3, 0.75 + 2.0**-20):
        for half in (u[0::2], u[1::2]):
            freq = float((half < p).double().mean())
            assert abs(freq - p) < 5 * math.sqrt(p * (1 - p) / half.numel()), (p, freq)
    assert torch.equal(kernels.paired_uniforms(99, 10, start=5).double(), u[5:15])


def test_normals_are_standard_normal_and_counter_based() -> None:
    """200,000 normals of one stream: the Kolmogorov–Smirnov test against N(0, 1) does not reject them (fixed seed),
    their mean and variance are 0 and 1 within 5 standard errors, and number j does not depend on how many are drawn."""
    from scipy import stats

    z = kernels.normals_torch(12345, 200_000).double().numpy()
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(z.mean()) < 5 / math.sqrt(len(z)) and abs(z.var() - 1) < 5 * math.sqrt(2 / len(z))
    assert np.abs(z).max() < 6.8  # the 32-bit u1's tail
    assert torch.equal(kernels.normals_torch(12345, 1000), torch.from_numpy(z[:1000]).float())
    assert not torch.equal(kernels.normals_torch(12346, 1000), kernels.normals_torch(12345, 1000))


# ----------------------------------------------------------------------------- random k-subsets


def test_random_subset_every_subset_equally_likely() -> None:
    """d = 6, k = 3: the 20 subsets are equally frequent over 6000 seeds (chi-square)."""
    freq: dict[tuple[int, ...], int] = {}
    for seed in range(6000):
        sub = tuple(sorted(kernels.random_subset(seed, 6, 3).tolist()))
        freq[sub] = freq.get(sub, 0) + 1
    assert len(freq) == 20
    chi2 = sum((c - 300) ** 2 / 300 for c in freq.values())
    assert abs(chi2 - 19) < 5 * math.sqrt(2 * 19), chi2


@pytest.mark.parametrize(("d", "k"), [(1, 0), (1, 1), (70_000, 35_000), (200_003, 2000)])
def test_random_subset_matches_the_python_oracle(d: int, k: int) -> None:
    for seed in (1, 99):
        got = kernels.random_subset(seed, d, k)
        np.testing.assert_array_equal(got, kernels.random_subset_reference(seed, d, k))
        np.testing.assert_array_equal(got, kernels.random_subset_torch(kernels.seed_word(seed), d, k).numpy())
        assert len(np.unique(got)) == k and (k == 0 or (got.min() >= 0 and got.max() < d))
