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
    # the body is exactly the float32 values at those indices, then the seed: nothing else is sent
    want = x.reshape(-1)[torch.from_numpy(idx)].numpy().astype("<f4").tobytes() + np.array([seed], "<u8").tobytes()
    assert p.to_bytes()[-p.body_nbytes :] == want
    out = decompress(Payload.from_bytes(p.to_bytes())).reshape(-1)
    assert torch.nonzero(out).reshape(-1).tolist() == sorted(idx.tolist())
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
    """The plain torch random-k (the plain-Python expansion, torch scatter) decodes to exactly what the fast path sends."""
    x = normal((70_001,), seed=8)
    comp = registry.create("randomk", density=0.01)
    for seed in range(3):
        fast = decompress(comp.compress(x, State(seed)))
        assert torch.equal(fast, type(comp).reference(comp, x, State(seed)))
        assert int(torch.count_nonzero(fast)) == 701


@pytest.mark.parametrize(("d", "k"), [(1, 1), (64, 64), (65, 3), (20_000, 100), (200_003, 1000), (140_000, 60_000)])
def test_indices_from_seed_match_the_plain_python_and_torch_expansions(d: int, k: int) -> None:
    for seed in (0, 17, 2**62, 2**64 - 1):
        idx = indices_from_seed(seed, d, k)
        np.testing.assert_array_equal(idx, kernels.random_subset_reference(seed, d, k))
        np.testing.assert_array_equal(idx, kernels.random_subset_torch(kernels.seed_word(seed), d, k).numpy())


def test_the_rotation_makes_every_position_equally_likely_exactly() -> None:
    """For any fixed shuffle, the uniform rotation c covers each position exactly k times as c runs over [0, d): the
    inclusion probability is k/d by construction (here for every c of one seed's shuffle, d = 97, k = 13)."""
    d, k = 97, 13
    keys, mults, adds, _ = kernels.subset_params(5, d)
    base = []
    for j in range(k):  # π(j) of that shuffle, from the definition
        x = j
        for kr, mr, ar in zip(keys.tolist(), mults.tolist(), adds.tolist(), strict=True):
            xp = (kr - x) % d
            x = xp if ((max(x, xp) * mr + ar) % 2**64) >> 63 else x
        base.append(x)
    assert len(set(base)) == k  # a permutation: distinct positions
    counts = np.zeros(d, np.int64)
    for c in range(d):
        counts[[(b + c) % d for b in base]] += 1
    assert np.all(counts == k)


def test_pairs_are_kept_together_as_often_as_in_a_uniform_subset() -> None:
    """Pair inclusion: in a uniform k-subset two given positions are both kept with probability k(k−1)/(d(d−1)).
    Over 3,000 seeds (d = 40, k = 8), the count of every pair at distance 1, 2, 5 and 20 (the shuffle starts from
    consecutive j, so near pairs are where a weak shuffle would show) matches it (chi-square over the distances)."""
    d, k, reps = 40, 8, 3000
    together = np.zeros((d, d), np.int64)
    for seed in range(reps):
        idx = indices_from_seed(seed * 7919 + 3, d, k)
        m = np.zeros(d, bool)
        m[idx] = True
        together += np.outer(m, m)
    p2 = k * (k - 1) / (d * (d - 1))
    for dist in (1, 2, 5, 20):
        pairs = np.array([together[i, (i + dist) % d] for i in range(d)], float)
        expected = reps * p2
        chi2 = float(((pairs - expected) ** 2 / (expected * (1 - p2))).sum())
        assert abs(chi2 - d) < 5 * math.sqrt(2 * d), (dist, chi2)


def test_dense_selection_is_complete() -> None:
    """Density 1: every position once (a permutation of the range); high densities need no full permutation."""
    np.testing.assert_array_equal(np.sort(indices_from_seed(3, 200_000, 200_000)), np.arange(200_000))
    idx = indices_from_seed(3, 1_000_000, 500_000)
    assert len(np.unique(idx)) == 500_000 and idx.min() >= 0 and idx.max() < 1_000_000
