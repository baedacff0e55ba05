"""The fused fidelity pass against the plain definition it replaced (full-size float64 errors, a
chunked Gram matrix, cosines from separate norms), on random and edge inputs, on both of its
paths (the numba kernel and the chunked torch reference)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.measure import fidelity as metrics
from gcbench.measure.fidelity import CHUNK, Moments, fidelity, moments, moments_torch, sq_dist64, sq_norm64

needs_numba = pytest.mark.skipif(not kernels.available(), reason="numba missing: only the torch path runs")


def reference_fidelity(x: torch.Tensor, decoded: Sequence[torch.Tensor]) -> dict[str, object]:
    """The definition before fusion, kept verbatim in spirit: every error as a full float64 tensor."""
    r = len(decoded)
    x64 = x.detach().reshape(-1).double()
    x_sq = float(x64 @ x64)
    errors = [d.detach().reshape(-1).double() - x64 for d in decoded]
    g = torch.stack(errors) @ torch.stack(errors).T
    g = g.numpy()
    diag = np.diag(g)
    if r == 1:
        bias_sq, var_sum, se = float(g[0, 0]), 0.0, None
    else:
        off = float(g.sum() - diag.sum())
        bias_sq = off / (r * (r - 1))
        var_sum = float((diag.sum() - g.sum() / r) / (r - 1))
        se = None
        if r >= 3:
            row = g.sum(1) - diag
            loo = [(off - 2 * row[i]) / ((r - 1) * (r - 2)) for i in range(r)]
            se = math.sqrt((r - 1) / r * sum((v - np.mean(loo)) ** 2 for v in loo))
    cos = []
    for d in decoded:
        d64 = d.detach().reshape(-1).double()
        nd = float(d64.norm())
        if x_sq > 0 and nd > 0:
            cos.append(float(d64 @ x64) / (nd * math.sqrt(x_sq)))
        elif x_sq > 0:
            cos.append(0.0)
    return {"x_sq": x_sq, "err_sq_mean": float(diag.mean()), "bias_sq": bias_sq, "bias_sq_se": se, "var_sum": var_sum,
            "cosine": float(np.mean(cos)) if cos else None, "q_samples": [float(v / x_sq) for v in diag] if x_sq > 0 else []}


def _close(a: object, b: object, rel: float = 1e-9) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(u, v, rel) for u, v in zip(a, b, strict=True))  # type: ignore[arg-type]
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12 * (1 + abs(a)))  # type: ignore[arg-type]


def assert_matches_reference(x: torch.Tensor, decoded: Sequence[torch.Tensor]) -> None:
    want = reference_fidelity(x, decoded)
    got = fidelity(x, decoded)
    for key, value in want.items():
        assert _close(getattr(got, key), value), (key, getattr(got, key), value)


def _rand(n: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.from_numpy((scale * np.random.default_rng(seed).standard_normal(n)).astype(np.float32))


# sizes around the numba block (2048) and the torch chunk (65536), so partial blocks and chunks are covered
SIZES = [1, 7, kernels.MOMENT_BLOCK + 1, CHUNK + 3, 2 * CHUNK + 4099]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("repeats", [1, 2, 3, 5])
def test_random_inputs_match_the_plain_definition(n: int, repeats: int) -> None:
    x = _rand(n, 0)
    decs = [x + _rand(n, 1 + r, 0.3) for r in range(repeats)]
    assert_matches_reference(x, decs)


def test_edge_inputs_match_the_plain_definition() -> None:
    x = _rand(5000, 3)
    zero = torch.zeros(5000)
    cases = [
        (zero, [zero.clone()]),  # nothing to divide by
        (zero, [_rand(5000, 4), _rand(5000, 5)]),
        (x, [zero.clone()]),  # all dropped: cosine 0
        (x, [x.clone()]),  # exact: q = 0 exactly
        (x, [x.clone(), x.clone()]),  # identical repeats
        (x, [x * 2, x * 2, x * 2]),  # identical repeats, biased: zero variance, bias² = ‖x‖²
        (_rand(1, 6), [_rand(1, 7)]),  # one element
        (_rand(1, 6), [_rand(1, 7), _rand(1, 8)]),
        (x.reshape(50, 100), [x.reshape(50, 100) * 0.5]),
    ]
    for xs, decs in cases:
        assert_matches_reference(xs, decs)
    exact = fidelity(x, [x.clone()])
    assert exact.q == 0.0 and exact.bias_sq == 0.0 and exact.cosine == pytest.approx(1.0, rel=1e-12)
    same = fidelity(x, [x * 2, x * 2, x * 2])
    assert same.var_sum == pytest.approx(0.0, abs=1e-9 * same.x_sq) and same.bias2 == pytest.approx(1.0)


@needs_numba
@pytest.mark.parametrize("n", SIZES)
def test_kernel_and_torch_paths_agree(n: int) -> None:
    x = _rand(n, 10)
    decs = [x + _rand(n, 11 + r, 0.1) for r in range(4)]
    assert metrics._fast(x, *decs)
    a, b = moments(x, decs), moments_torch(x, decs)
    assert isinstance(a, Moments)
    for field in ("x_sq", "gram", "dots", "d_sq"):
        np.testing.assert_allclose(getattr(a, field), getattr(b, field), rtol=1e-12, atol=1e-12)


def test_other_dtypes_and_layouts_take_the_torch_path_and_match() -> None:
    x = _rand(3000, 20)
    strided = torch.stack([x, x], 1)[:, 0]  # non-contiguous float32 view
    assert not strided.is_contiguous()
    assert_matches_reference(strided, [strided * 0.9])
    x64 = x.double()
    dec64 = [x64 + 0.01, x64 * 0.5]
    keep = [d.clone() for d in dec64]
    assert not metrics._fast(x64, *dec64)
    assert_matches_reference(x64, dec64)
    for d, k in zip(dec64, keep, strict=True):  # the pass works on copies of its chunks, never on the inputs
        assert torch.equal(d, k)
    half = x.half()
    assert_matches_reference(half, [half * 0.5])


def test_cosine_terms_kept_for_pooling() -> None:
    x, d = _rand(4000, 30), _rand(4000, 31)
    f = fidelity(x, [d])
    dot, d_sq, x_sq = f.cosine_terms()
    assert dot == pytest.approx(float(x.double() @ d.double()), rel=1e-12)
    assert d_sq == pytest.approx(float(d.double() @ d.double()), rel=1e-12)
    assert x_sq == f.x_sq


def test_size_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="elements"):
        fidelity(torch.zeros(4), [torch.zeros(5)])
    with pytest.raises(ValueError, match="one size"):
        sq_dist64(torch.zeros(4), torch.zeros(5))


@pytest.mark.parametrize("n", [0, 1, kernels.MOMENT_BLOCK + 5, CHUNK + 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_norms_match_the_plain_definition(n: int, dtype: torch.dtype) -> None:
    a, b = _rand(n, 40).to(dtype), _rand(n, 41).to(dtype)
    assert sq_norm64(a) == pytest.approx(float(a.double().pow(2).sum()), rel=1e-12, abs=0.0)
    assert sq_dist64(a, b) == pytest.approx(float((a - b).double().pow(2).sum()), rel=1e-12, abs=0.0)
