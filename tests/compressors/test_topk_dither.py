"""Tests of ``topk_dither``: top-k followed by natural dithering (Beznosikov et al. 2020)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench.compressors import registry
from gcbench.compressors._common import k_of
from gcbench.compressors.natural import level_bits
from gcbench.compressors.topk_dither import topk_dither_bits, topk_dither_parts
from gcbench.core import codec
from tests.compressors.test_natural import assert_unbiased, dither_test_input
from tests.kernels.helpers import torch_only

CODINGS = ("fixed", "int32", "delta-varint", "elias")


def distinct_magnitudes(d: int, seed: int) -> torch.Tensor:
    """Values with pairwise distinct magnitudes (the top-k set is unique), random signs."""
    g = np.random.Generator(np.random.PCG64(seed))
    mag = g.permutation(d).astype(np.float64) + 1.0 + g.uniform(0, 0.5, d)
    return torch.from_numpy((mag * g.choice([-1.0, 1.0], d)).astype(np.float32))


def ef_drift(name: str, steps: int, shape: tuple[int, ...], **params: object) -> list[float]:
    """‖Σ C_t − Σ g_t‖ / ‖Σ g_t‖ after each step on a seeded stream g_t = μ + noise."""
    c = registry.create(name, **params)
    st = c.init_state(0)
    gen = torch.Generator().manual_seed(11)
    mu = torch.randn(shape, generator=gen)
    sum_c = torch.zeros(shape, dtype=torch.float64)
    sum_g = torch.zeros(shape, dtype=torch.float64)
    out = []
    for _ in range(steps):
        g = mu + torch.randn(shape, generator=gen)
        _, dec = c.compress_and_decode(g, st)
        sum_c += dec.double()
        sum_g += g.double()
        out.append(float((sum_c - sum_g).norm() / sum_g.norm()))
    return out


@pytest.mark.parametrize("coding", CODINGS)
def test_support_is_the_topk_support(coding: str) -> None:
    d, density = 3000, 0.02
    x = distinct_magnitudes(d, 1)
    c = registry.create("topk_dither", density=density, index_coding=coding)
    p, dec = c.compress_and_decode(x, c.init_state(0))
    k = k_of(density, d)
    expect = np.sort(np.argsort(-x.abs().numpy())[:k])
    _, idx, _, _ = topk_dither_parts(p)
    assert np.array_equal(idx, expect)
    nz = torch.nonzero(dec).reshape(-1).numpy()
    assert np.isin(nz, expect).all()
    assert torch.all((dec == 0) | (torch.sign(dec) == torch.sign(x)))
    assert torch.equal(c.decompress(p), dec)


@pytest.mark.parametrize("coding", CODINGS)
@pytest.mark.parametrize(("d", "density", "s"), [(1, 0.01, 8), (7, 0.5, 8), (1000, 0.01, 8), (4099, 0.03, 3), (65536, 0.001, 15)])
def test_bit_count_matches_formula(coding: str, d: int, density: float, s: int) -> None:
    x = torch.randn(d, generator=torch.Generator().manual_seed(d))
    c = registry.create("topk_dither", density=density, s=s, index_coding=coding, error_feedback=False)
    p = c.compress(x, c.init_state(0))
    _, idx, _, _ = topk_dither_parts(p)
    k = k_of(density, d)
    assert len(idx) == k
    bits = topk_dither_bits(idx, d, s, coding)
    assert p.body_nbytes == math.ceil(bits / 8)
    if coding == "fixed":  # the spec's formula with fixed-width indices
        assert bits == k * codec.index_width(d) + 32 + k * (1 + math.ceil(math.log2(s + 1)))


def test_decoded_values_are_norm_times_level() -> None:
    x = torch.randn(5000, generator=torch.Generator().manual_seed(2))
    s = 8
    c = registry.create("topk_dither", density=0.05, error_feedback=False)
    p, dec = c.compress_and_decode(x, c.init_state(0))
    n, idx, levels, neg = topk_dither_parts(p)
    y = x[torch.from_numpy(idx)]
    assert n == float(np.float32(float(y.double().norm())))  # p = 2 norm of the kept values only
    lv = torch.tensor([0.0] + [2.0 ** (j - s) for j in range(1, s + 1)])
    expect = torch.sign(y) * lv[torch.from_numpy(levels)] * n
    assert torch.allclose(dec[torch.from_numpy(idx)], expect, rtol=1e-6, atol=0)
    assert np.array_equal(neg, (y < 0).numpy() & (levels > 0))  # sign bits only where a level is sent
    assert level_bits(s) == 4


def test_error_feedback_on_by_default_and_identity() -> None:
    info = registry.get("topk_dither")
    assert info.defaults["error_feedback"] is True
    c = registry.create("topk_dither", density=0.05)
    assert c.uses_error_feedback()
    st = c.init_state(0)
    gen = torch.Generator().manual_seed(3)
    for _ in range(5):
        x = torch.randn(40, 25, generator=gen)
        e_old = st.tensors.get("residual", torch.zeros_like(x)).clone()
        _, dec = c.compress_and_decode(x, st)
        e_new = st.tensors["residual"]
        assert e_new.abs().sum() > 0
        lhs = x.double() + e_old.double()
        rhs = dec.double() + e_new.double()
        assert torch.allclose(lhs, rhs, rtol=0, atol=1e-6 * float(lhs.abs().max()))


@pytest.mark.parametrize("p", ["inf", "2"])
def test_dithering_of_kept_values_is_unbiased(p: str) -> None:
    # without EF the kept set of a fixed x is fixed, so E[x̂[S]] = x[S]; the 64 kept values are
    # chosen so every rounding probability is inside (0, 1), the other 576 are smaller than all
    top = dither_test_input(8, p, 4 if p == "inf" else 17)  # seeds whose inputs pass its interior check
    g = np.random.Generator(np.random.PCG64(5))
    rest = torch.from_numpy(g.uniform(0.0, 0.9, 576).astype(np.float32)) * top.abs().min()
    x = torch.cat([top, rest])
    c = registry.create("topk_dither", density=0.1, s=8, p=p, error_feedback=False)
    st = c.init_state(0)
    samples = torch.stack([c.compress_and_decode(x, st)[1] for _ in range(2000)])
    assert torch.count_nonzero(samples[:, 64:]) == 0  # only the top-k positions are ever sent
    assert_unbiased(samples[:, :64], top)


def test_ef_drift_bounded_and_shrinking() -> None:
    r = ef_drift("topk_dither", 50, (40, 50), density=0.05)
    assert max(r) < 1.0
    assert r[49] < 0.5 * r[4]


# ---------------------------------------------------------------------------- fast paths


@pytest.mark.parametrize("ef", [True, False])
@pytest.mark.parametrize("coding", CODINGS)
@pytest.mark.parametrize(("d", "density"), [(1, 0.5), (3000, 0.02), (70_001, 0.01)])
def test_fused_path_matches_the_torch_path(coding: str, ef: bool, d: int, density: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU kernels (top-k count fused into the formation of a = x + e in the residual buffer,
    then collect, dither, subtract at k positions) and the torch path (base formation, torch.topk,
    the torch dithering) give the same bytes, decoded tensors and residuals, step after step
    (magnitudes are distinct, so the top-k set is unique)."""
    c = registry.create("topk_dither", density=density, index_coding=coding, error_feedback=ef)
    fused, generic, ref = c.init_state(0), c.init_state(0), c.init_state(0)
    for step in range(3):
        x = distinct_magnitudes(d, 50 + step)
        p1, d1 = c.compress_and_decode(x, fused)
        with monkeypatch.context() as m:
            torch_only(m)
            p2, d2 = c.compress_and_decode(x, generic)
        d3 = type(c).reference(c, x, ref)
        assert p1.to_bytes() == p2.to_bytes()
        assert torch.equal(d1, d2) and torch.equal(d1, d3)
        if ef:
            assert torch.equal(fused.tensors["residual"], generic.tensors["residual"])
            assert torch.equal(fused.tensors["residual"], ref.tensors["residual"])
    assert fused.step == generic.step == ref.step == 3


def test_ties_at_the_kth_magnitude_keep_the_lowest_indices() -> None:
    x = torch.tensor([1.0, -3.0, 2.0, 3.0, -2.0, 2.0, 0.5])
    c = registry.create("topk_dither", density=0.5, error_feedback=False)  # k = 4: 3, 3, and two of three 2s
    _, idx, _, _ = topk_dither_parts(c.compress(x, c.init_state(0)))
    assert idx.tolist() == [1, 2, 3, 4]
