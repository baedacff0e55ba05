"""Reductions and the momentum kernels against the torch ops they replace."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench import kernels
from tests.kernels.helpers import SIZES, N, gen, signed_values, t3

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


# ----------------------------------------------------------------------------- momentum and moments


@pytest.mark.parametrize("coef", [None, 0.3])
def test_momentum_kernels_round_like_the_torch_ops(coef: float | None, threads: int) -> None:
    n = N
    x, u, v = (torch.from_numpy(t3(n, s)) for s in (10, 11, 12))
    u_t, v_t = u.clone(), v.clone()
    u_t.mul_(0.9).add_(x if coef is None else x * coef)
    v_t.add_(u_t)
    start, stride, count = 3, 97, (n - 3) // 97
    samples = kernels.momentum_sample(u.numpy(), v.numpy(), x.numpy(), 0.9, coef, start, stride, count)
    assert np.array_equal(samples, v_t.abs().numpy()[start : start + count * stride : stride])
    t = np.float32(1.5)
    counts = kernels.momentum_update_count(u.numpy(), v.numpy(), x.numpy(), 0.9, coef, t)
    assert torch.equal(u, u_t) and torch.equal(v, v_t)
    assert int(counts.sum()) == int((v_t.abs() >= 1.5).sum())


def test_population_std_equals_torch_std_in_float32() -> None:
    for seed in range(20):
        g = gen(seed)
        n = int(g.integers(1, 400_000))
        v = (g.standard_normal(n) * g.random() * 10 + g.standard_normal()).astype(np.float32)
        want = np.float32(float(torch.std(torch.from_numpy(v), correction=0)))
        assert np.float32(kernels.population_std(v)) == want
        u, x = np.zeros(n, np.float32), np.zeros(n, np.float32)
        w = v.copy()
        assert np.float32(kernels.momentum_update_std(u, w, x, 0.9, None)) == want  # x = u = 0: v unchanged

