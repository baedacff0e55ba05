"""Confidence intervals of a mean, one :class:`Interval` for each way gcbench estimates one.

* :func:`mean_interval` — the mean of n values ± t(n−1) · s/√n, s the sample standard deviation (n − 1 in
  the denominator): the two-sided Student-t interval at ``confidence``.  One value is its own interval (no
  spread can be estimated); no value has none.  Callers leave out what is not a measurement (None, NaN).
* :func:`paired_difference` — the t-interval of the differences aᵢ − bᵢ of two paired samples (the same
  workers or seeds on both sides): what the two share cancels in each difference.
* :func:`jackknife` — a statistic θ computed on all n units and on each n − 1 with one left out gives
  the standard error √((n−1)/n · Σᵢ(θ₍₋ᵢ₎ − θ̄₍₋·₎)²); the interval is θ ± t(n−1) times that error.

The t quantile is exact (:func:`t_quantile`, scipy.special's ``stdtrit``, which ``scipy.stats.t.ppf`` calls
too), imported on use: scipy.stats costs 1-2.5 s to import, a third of a quick run's start, scipy.special
about a third of that.

An interval may be **clipped to what its quantity can be** (:data:`Domain`, :meth:`Interval.clipped`): a
t-interval over two seeds' accuracies of 0.43 and 0.84 reaches 1.31, which no accuracy can be.  The mean is
never moved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

#: the confidence of every interval gcbench reports
CONFIDENCE = 0.95

#: the bounds of a quantity an interval may not leave (None: unbounded on that side)
Domain = tuple[float | None, float | None]
UNBOUNDED: Domain = (None, None)


def clip(value: float | None, bounds: Domain) -> float | None:
    """``value`` moved into ``bounds`` (None stays None)."""
    if value is None:
        return None
    lo, hi = bounds
    if lo is not None and value < lo:
        return lo
    if hi is not None and value > hi:
        return hi
    return value


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided Student-t quantile for ``df`` degrees of freedom: t(0.5 + confidence/2, df)."""
    from scipy.special import stdtrit

    return float(stdtrit(df, 0.5 + confidence / 2))


@dataclass(frozen=True)
class Interval:
    """A mean (or a statistic: the centre) with its two-sided interval at ``confidence``.

    ``n``: the values (or units left out in turn) it rests on; ``se``: the standard error of the centre;
    ``sd``: the values' sample standard deviation (None for a jackknife, whose values are leave-one-out
    statistics, not draws).  With one value ``lo = hi = mean`` and both spreads are 0.
    """

    mean: float
    lo: float
    hi: float
    n: int
    se: float
    sd: float | None = None
    confidence: float = CONFIDENCE

    @property
    def df(self) -> int:
        """The t quantile's degrees of freedom."""
        return self.n - 1

    def clipped(self, bounds: Domain) -> Interval:
        """The same interval with its ends moved into ``bounds`` (the centre stays)."""
        lo, hi = clip(self.lo, bounds), clip(self.hi, bounds)
        return replace(self, lo=self.lo if lo is None else lo, hi=self.hi if hi is None else hi)

    def as_dict(self) -> dict[str, float | int]:
        """``{mean, lo, hi, n}``, the block a results record stores."""
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "n": self.n}


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The mean of ``values`` with its Student-t interval (df = n − 1); None without a value."""
    vals = [float(v) for v in values]
    if not vals:
        return None
    n = len(vals)
    mean = float(np.mean(vals))
    if n == 1:
        return Interval(mean, mean, mean, 1, se=0.0, sd=0.0, confidence=confidence)
    sd = float(np.std(vals, ddof=1))
    half = 0.0 if sd == 0.0 else t_quantile(n - 1, confidence) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, se=sd / math.sqrt(n), sd=sd, confidence=confidence)


def paired_difference(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The t-interval of the mean of the paired differences ``a[i] − b[i]`` (equal lengths); None for none."""
    return mean_interval([x - y for x, y in zip(a, b, strict=True)], confidence)


def jackknife(estimate: float, leave_one_out: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """``estimate`` ± t(n−1) × the jackknife standard error of its ``leave_one_out`` values (n ≥ 2, all finite)."""
    vals = np.array(leave_one_out, dtype=float)
    n = len(vals)
    if n < 2:
        raise ValueError(f"a jackknife needs at least two leave-one-out values, got {n}")
    se = math.sqrt((n - 1) / n * float(((vals - vals.mean()) ** 2).sum()))
    half = t_quantile(n - 1, confidence) * se
    return Interval(estimate, estimate - half, estimate + half, n, se=se, confidence=confidence)


def domain(quantity: str, metric: str | None = None, budget: int | None = None) -> Domain:
    """What ``quantity`` (``"steps"``, ``"metric"`` or ``"gap"``) of a run of ``metric`` over ``budget`` steps can be.

    Steps to the target: ``[0, budget]``; accuracy: ``[0, 1]``, so a gap of two accuracies ``[-1, 1]``; anything else
    (a negated user loss) is unbounded.
    """
    if quantity == "steps":
        return (0.0, float(budget) if budget is not None else None)
    if metric == "accuracy":
        return (0.0, 1.0) if quantity == "metric" else (-1.0, 1.0)
    return UNBOUNDED
