"""Random-k scaled by d/k: 32·k + 64 bits (values + the seed), shared indices, unbiased."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.compressors import registry
from gcbench.compressors.randomk import indices_from_seed
from gcbench.compressors.registry import decompress
from gcbench.core.compressor import State
from gcbench.core.payload import Payload
from tests.conftest import looks_unbiased, normal, unbiasedness_statistic


def seed_of(p: Payload) -> int:
    return int(np.frombuffer(p.to_bytes()[-8:], "<u8")[0])


@pytest.mark.parametrize(
    ("shape", "density"),
    [((1,), 0.01), ((7,), 0.5), ((1000,), 0.01), ((1000,), 0.07), ((64, 3, 3, 3), 0.1), ((512, 512), 0.001), ((100,), 1.0), ((100,), 0.07)],
    ids=str,
)
def test_body_is_values_plus_seed(shape: tuple[int, ...], density: float) -> None:
    x = normal(shape, seed=2)
    d = x.numel()
    k = max(1, min(d, math.ceil(round(density * d, 9))))
    p = registry.create("randomk", density=density).compress(x, State(0))
    assert int(p.meta["k"]) == k
    assert p.body_nbytes * 8 == 32 * k + 64


def test_receiver_expands_the_same_indices_from_the_seed() -> None:
    x = normal((64, 3, 3, 3), seed=3)
    d, density = x.numel(), 0.1
    k = math.ceil(density * d)
    comp = registry.create("randomk", density=density)
    p = comp.compress(x, State(42))
    seed = seed_of(p)
    idx = indices_from_seed(seed, d, k)
    assert len(idx) == k == len(np.unique(idx)) and idx.min() >= 0 and idx.max() < d
    assert np.all(np.diff(idx) > 0)
    # the body is exactly the float32 values at those indices, then the seed: nothing else is sent
    want = x.reshape(-1)[torch.from_numpy(idx)].numpy().astype("<f4").tobytes() + np.array([seed], "<u8").tobytes()
    assert p.to_bytes()[-p.body_nbytes :] == want
    out = decompress(Payload.from_bytes(p.to_bytes())).reshape(-1)
    assert torch.nonzero(out).reshape(-1).tolist() == idx.tolist()
    torch.testing.assert_close(out[torch.from_numpy(idx)], x.reshape(-1)[torch.from_numpy(idx)] * (d / k), rtol=1e-6, atol=0)
    # same seed, same indices; another state draws another seed and another set
    assert seed_of(comp.compress(x, State(42))) == seed
    other = comp.compress(x, State(43))
    assert seed_of(other) != seed and not np.array_equal(indices_from_seed(seed_of(other), d, k), idx)
    # the state's generator advances: the next step uses a new seed
    st = State(42)
    comp.compress(x, st)
    assert seed_of(comp.compress(x, st)) != seed


def test_selection_is_uniform() -> None:
    """Each position is chosen with probability k/d (chi-square over 400 draws)."""
    d, k, reps = 500, 50, 400
    counts = np.zeros(d)
    rng = np.random.Generator(np.random.PCG64(9))
    for _ in range(reps):
        counts[indices_from_seed(int(rng.integers(0, 2**63 - 1)), d, k)] += 1
    p = k / d
    chi2 = float((((counts - reps * p) ** 2) / (reps * p * (1 - p))).sum())
    assert abs(chi2 - d) < 5 * math.sqrt(2 * d), chi2
    assert counts.sum() == reps * k


def _samples(x: torch.Tensor, reps: int, density: float) -> torch.Tensor:
    comp = registry.create("randomk", density=density)
    return torch.stack([decompress(comp.compress(x, State(700 + r))).reshape(-1).double() for r in range(reps)])


@pytest.mark.parametrize("density", [0.1, 0.5])
def test_unbiased_and_the_unscaled_variant_is_not(density: float) -> None:
    x = normal((1000,), seed=5)
    got = _samples(x, 400, density)
    t, n_eff = unbiasedness_statistic(got, x.double())
    assert looks_unbiased(got, x.double()), f"T = {t:.3f}, n_eff = {n_eff:.0f}"
    # the same check on random-k *without* the d/k scale (biased by the factor k/d) rejects it
    k = math.ceil(density * 1000)
    unscaled = got * (k / 1000)
    assert not looks_unbiased(unscaled, x.double())


def test_variance_is_d_over_k_minus_one() -> None:
    """ω = d/k − 1: E‖C(x) − x‖² = (d/k − 1)‖x‖²."""
    x = normal((1000,), seed=6)
    reps = 400
    err = ((_samples(x, reps, 0.1) - x.double()) ** 2).sum(1)
    expected = (1000 / 100 - 1) * float((x.double() ** 2).sum())
    assert abs(float(err.mean()) - expected) < 5 * float(err.std()) / math.sqrt(reps)


def test_reference_and_fast_path_agree() -> None:
    """The plain torch random-k (NumPy sort, torch scatter) decodes to exactly what the fast path sends."""
    x = normal((70_001,), seed=8)
    comp = registry.create("randomk", density=0.01)
    for seed in range(3):
        fast = decompress(comp.compress(x, State(seed)))
        assert torch.equal(fast, type(comp).reference(comp, x, State(seed)))
        assert int(torch.count_nonzero(fast)) == 701


@pytest.mark.parametrize(("d", "k"), [(1, 1), (64, 64), (65, 3), (20_000, 100), (200_003, 1000), (140_000, 60_000)])
def test_indices_from_seed_matches_the_plain_python_sampler(d: int, k: int) -> None:
    for seed in (0, 17, 2**62):
        np.testing.assert_array_equal(indices_from_seed(seed, d, k), kernels.random_subset_reference(seed, d, k))


def test_selection_is_uniform_across_blocks() -> None:
    """Several sampler blocks (65,536 positions each, the last short): inclusion frequencies of
    1024-position bins match k/d (chi-square), and block counts vary like a uniform subset's."""
    d, k, reps = 2 * 65536 + 4099, 1000, 300
    counts = np.zeros(d)
    first_block = []
    rng = np.random.Generator(np.random.PCG64(11))
    for _ in range(reps):
        idx = indices_from_seed(int(rng.integers(0, 2**63 - 1)), d, k)
        counts[idx] += 1
        first_block.append(int((idx < 65536).sum()))
    bins = np.add.reduceat(counts, np.arange(0, d, 1024))
    sizes = np.diff(np.append(np.arange(0, d, 1024), d))
    expected = reps * k * sizes / d
    chi2 = float(((bins - expected) ** 2 / expected).sum())
    nbins = len(bins)
    assert abs(chi2 - nbins) < 5 * math.sqrt(2 * nbins), chi2
    # hypergeometric: mean k·65536/d, variance k·p·(1−p)·(d−k)/(d−1)
    p = 65536 / d
    mean, var = np.mean(first_block), np.var(first_block, ddof=1)
    assert abs(mean - k * p) < 5 * math.sqrt(k * p * (1 - p) / reps)
    assert 0.7 < var / (k * p * (1 - p) * (d - k) / (d - 1)) < 1.4


def test_dense_selection_is_fast_and_complete() -> None:
    """Density 1: every position, in order; high densities need no full permutation."""
    np.testing.assert_array_equal(indices_from_seed(3, 200_000, 200_000), np.arange(200_000))
    idx = indices_from_seed(3, 1_000_000, 500_000)
    assert len(np.unique(idx)) == 500_000 and np.all(np.diff(idx) > 0)
