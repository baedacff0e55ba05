"""Sign and 1-bit SGD kernels against their plain formulas."""

from __future__ import annotations

import numpy as np
import pytest

from gcbench import kernels
from tests.kernels.helpers import SIZES, signed_values

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

