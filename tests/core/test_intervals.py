"""Intervals of a mean (gcbench/core/intervals.py): exact t quantiles, the t-interval, a paired difference, the jackknife."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from scipy import stats

from gcbench.core.intervals import UNBOUNDED, Interval, clip, jackknife, mean_interval, paired_difference, t_quantile


@pytest.mark.parametrize("confidence", [0.95, 0.99, 0.9])
def test_the_t_quantile_is_scipys_for_1_to_200_degrees_of_freedom(confidence: float) -> None:
    for df in range(1, 201):
        assert t_quantile(df, confidence) == pytest.approx(float(stats.t.ppf(0.5 + confidence / 2, df)), rel=1e-12), df


def test_the_interval_is_the_mean_plus_minus_t_times_the_standard_error() -> None:
    values = [1.0, 2.0, 4.0, 7.5]
    iv = mean_interval(values)
    assert iv is not None and iv.n == 4 and iv.df == 3 and iv.confidence == 0.95
    lo, hi = stats.t.interval(0.95, 3, loc=np.mean(values), scale=stats.sem(values))
    assert (iv.lo, iv.hi) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))
    assert iv.mean == np.mean(values) and iv.sd == pytest.approx(statistics.stdev(values), rel=1e-12)
    assert iv.se == pytest.approx(statistics.stdev(values) / 2, rel=1e-12)
    assert iv.as_dict() == {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": 4}


def test_eleven_or_more_values_get_the_exact_quantile_not_the_normal_one() -> None:
    """A table that stopped at 10 degrees of freedom and then used 1.96 made intervals too narrow from 11 draws on."""
    rng = np.random.default_rng(3)
    for n in (11, 12, 20, 31):
        values = list(rng.normal(0.1, 0.02, n))
        iv = mean_interval(values)
        assert iv is not None
        half = float(stats.t.ppf(0.975, n - 1)) * statistics.stdev(values) / math.sqrt(n)
        assert iv.hi - iv.mean == pytest.approx(half, rel=1e-9) and iv.mean - iv.lo == pytest.approx(half, rel=1e-9)
        assert iv.hi - iv.mean > 1.96 * statistics.stdev(values) / math.sqrt(n) * 1.01


def test_one_value_is_its_own_interval_and_none_has_none() -> None:
    assert mean_interval([0.7]) == Interval(0.7, 0.7, 0.7, 1, se=0.0, sd=0.0)
    assert mean_interval([]) is None
    same = mean_interval([0.25, 0.25, 0.25])
    assert same is not None and (same.lo, same.mean, same.hi, same.sd) == (0.25, 0.25, 0.25, 0.0)


def test_a_paired_difference_is_the_interval_of_the_differences() -> None:
    a, b = [0.9, 0.8, 0.85, 0.95], [0.7, 0.75, 0.6, 0.8]
    iv = paired_difference(a, b)
    assert iv == mean_interval([x - y for x, y in zip(a, b, strict=True)])
    assert iv is not None and iv.lo > 0
    with pytest.raises(ValueError):
        paired_difference([1.0, 2.0], [1.0])


def test_the_jackknife_centres_the_estimate_on_the_leave_one_out_spread() -> None:
    loo = [0.52, 0.49, 0.55, 0.50]
    iv = jackknife(0.51, loo)
    mean = sum(loo) / 4
    se = math.sqrt(3 / 4 * sum((v - mean) ** 2 for v in loo))
    half = float(stats.t.ppf(0.975, 3)) * se
    assert iv.mean == 0.51 and iv.n == 4 and iv.sd is None and iv.se == pytest.approx(se, rel=1e-12)
    assert (iv.lo, iv.hi) == (pytest.approx(0.51 - half, rel=1e-12), pytest.approx(0.51 + half, rel=1e-12))
    with pytest.raises(ValueError):
        jackknife(0.5, [0.5])


def test_an_interval_is_clipped_to_its_domain_and_its_mean_never_moves() -> None:
    iv = mean_interval([0.43, 0.84])
    assert iv is not None and iv.hi > 1 and iv.lo < 0
    cut = iv.clipped((0.0, 1.0))
    assert (cut.lo, cut.mean, cut.hi) == (0.0, iv.mean, 1.0)
    assert iv.clipped(UNBOUNDED) == iv
    assert clip(None, (0.0, 1.0)) is None and clip(2.0, (None, 1.0)) == 1.0 and clip(-2.0, (0.0, None)) == 0.0
