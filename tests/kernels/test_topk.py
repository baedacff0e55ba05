"""The one exact top-k against a stable sort and torch.topk, and its torch reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.kernels import topk
from tests.kernels.helpers import TOPK_SAMPLE, gen, t3

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
    n = 2 * topk._SAMPLE
    g = np.random.default_rng(5)
    x = g.random(n).astype(np.float32)
    # the sample (every 2nd element here) sees none of the large values, or nothing else
    big = np.arange(n) % 2 == (1 if case == "sample-misses-the-top" else 0)
    x[big] += 100.0
    for k in (1000, n // 5):
        if case == "sample-sees-only-the-top" or k == 1000:  # too few, or far too many, pass t
            assert topk._topk_sampled(x.view(np.uint32), k, 4) is None  # the fallback runs
        np.testing.assert_array_equal(kernels.topk_select(x, k), kernels.topk_select_reference(x, k))
    normal = g.standard_normal(n).astype(np.float32)
    assert topk._topk_sampled(normal.view(np.uint32), 1000, 4) is not None  # the common path


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


# ----------------------------------------------------------------------------- exact top-k


def _torch_topk_set(x: torch.Tensor, k: int) -> np.ndarray:
    return np.sort(torch.topk(x.abs(), k, sorted=False).indices.numpy())


@pytest.mark.parametrize("density", [1e-4, 0.001, 0.01, 0.2])
@pytest.mark.parametrize("d", [4 * TOPK_SAMPLE + 12_345, 100_003, 5_000])  # full sample, d/4 sample, np.partition
def test_topk_select_equals_torch_topk(density: float, d: int, threads: int) -> None:
    x = torch.from_numpy(t3(d, int(density * 1e4)))
    k = math.ceil(density * d)
    idx, vals = kernels.topk_tensor(x, k)
    assert np.array_equal(idx.numpy(), _torch_topk_set(x, k))
    assert torch.equal(vals, x[idx])
    idx_t, _ = kernels.topk_select_torch(x, k)  # the torch version of the same rule
    assert torch.equal(idx_t, idx)


def test_topk_ties_keep_the_lowest_indices() -> None:
    d = 4 * TOPK_SAMPLE + 1
    x = torch.from_numpy(gen(6).random(d, dtype=np.float32) * 0.5)  # magnitudes < 0.5
    big = torch.from_numpy(np.sort(gen(7).choice(d, 3000, replace=False)))
    x[big[:1000]] = 2.0  # 1000 entries clearly on top
    x[big[1000:]] = -1.0  # 2000 tied at the k-th magnitude
    k = 1500
    idx, _ = kernels.topk_tensor(x, k)
    assert idx.tolist() == sorted(big[:1000].tolist() + big[1000:1500].tolist())
    assert torch.equal(kernels.topk_select_torch(x, k)[0], idx)


def test_topk_threshold_too_high_retries_then_stays_exact() -> None:
    """Huge values at every sampled position make the first thresholds too high: still the exact top-k."""
    d = 4 * TOPK_SAMPLE
    x = torch.from_numpy(gen(8).random(d, dtype=np.float32))
    stride = d // TOPK_SAMPLE
    x[stride // 2 :: stride] = 100.0 + torch.arange(TOPK_SAMPLE, dtype=torch.float32)
    k = 10 * TOPK_SAMPLE // 8  # more than the sampled positions hold
    idx, _ = kernels.topk_tensor(x, k)
    assert np.array_equal(idx.numpy(), _torch_topk_set(x, k))


def test_topk_with_nan_defers_to_torch() -> None:
    d = 4 * TOPK_SAMPLE
    x = torch.from_numpy(t3(d, 9))
    x[123] = float("nan")
    idx, _ = kernels.topk_tensor(x, 500)
    assert 123 in idx.tolist()  # torch.topk ranks NaN first
    assert np.array_equal(idx.numpy(), _torch_topk_set(x, 500))

