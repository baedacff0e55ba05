"""The fidelity passes on several threads give the serial kernels' sums to the bit.

A large tensor's moments, squared distance and running sum run their blocks on several threads and add
the block sums in block order (:mod:`gcbench.kernels.stats`); the conftest runs every test on one thread
and on two (with no size too small for threads), so the second run compares the threaded pass with the
serial kernel it replaced.  Equality is exact: the quick suite's and every run's numbers must not move.
"""

from __future__ import annotations

import numpy as np
import pytest

from gcbench.kernels import stats

SIZES = [1, 2047, 2049, 100_003, 300_001]


def _data(n: int, r: int, seed: int = 0) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    rng = np.random.default_rng(seed + n)
    x = rng.standard_normal(n).astype(np.float32)
    return x, tuple((x + 0.1 * rng.standard_normal(n)).astype(np.float32) for _ in range(r))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("r", [1, 3])
def test_moments_are_the_serial_kernels_to_the_bit(n: int, r: int, threads: int) -> None:
    assert stats._threaded(n) == (threads > 1)  # the second run does take the threaded pass
    x, ds = _data(n, r)
    gram, dots, d_sq = np.zeros((r, r)), np.zeros(r), np.zeros(r)
    x_sq = stats._moments_kernel(x, ds, gram, dots, d_sq)
    got = stats.moments(x, ds)
    assert got[0] == x_sq
    assert np.array_equal(got[1], gram) and np.array_equal(got[2], dots) and np.array_equal(got[3], d_sq)


@pytest.mark.parametrize("n", SIZES)
def test_sq_dist_and_running_sums_are_the_serial_kernels_to_the_bit(n: int) -> None:
    x, (d,) = _data(n, 1, seed=7)
    assert stats.sq_dist(x, d) == stats._sq_dist_kernel(x, d)
    start = (0.5 * d).astype(np.float32)
    mine, ref = start.copy(), start.copy()
    assert stats.accumulate(mine, x, d) == stats._accumulate_kernel(ref, x, d)
    assert np.array_equal(mine, ref)  # the float32 sum itself, rounded as torch's ``acc += a - b``
    assert stats.accumulate(mine, x, None) == stats._accumulate_kernel(ref, x, None)
    assert np.array_equal(mine, ref)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("w", [2, 3])
def test_the_jackknifes_gram_matrices_are_the_serial_kernels_to_the_bit(n: int, w: int) -> None:
    _, rs = _data(n, w, seed=3)
    _, ss = _data(n, w, seed=4)
    want_e, want_r, got_e, got_r = (np.full((w, w), 0.25) for _ in range(4))  # added to, as across units
    stats._grams_kernel(rs, ss, want_e, want_r)
    stats.grams(rs, ss, got_e, got_r)
    assert np.array_equal(got_e, want_e) and np.array_equal(got_r, want_r)
