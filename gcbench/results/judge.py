"""One metric of a case in two runs: the verdict names, the :class:`Row` a comparison is made of, and the rule.

The rule (:func:`judge`), shared by run against run (:mod:`gcbench.results.run_diff`) and bench against bench
(:mod:`gcbench.results.bench_diff`): each metric's direction comes from :data:`gcbench.results.metrics.METRICS`.  A
change counts only if its relative size reaches ``threshold`` (default 5%) AND, where raw samples exist in both runs,
a two-sided Mann–Whitney test (:func:`gcbench.results.metrics.mann_whitney`) gives p < ``alpha``: timing samples for
compress/decompress times, the per-tensor ``q_samples`` for q.  bias² has no samples but a jackknife standard error;
it is tested with a two-sided z-test on the difference (the mean of the per-tensor standard errors stands in for the
standard error of the pooled value, which it bounds from above, so the test is conservative).  Metrics without
samples (ratio, bits per element, variance, cosine, aggregate q, EF drift) are deterministic given the suite's seed,
so the threshold alone decides.

``worse`` and ``new failure`` are regressions (``--fail-on-regression``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gcbench.results.bench_record import BenchCase
from gcbench.results.metrics import METRICS, mann_whitney
from gcbench.results.run_record import RunCase
from gcbench.results.train_record import TrainCase

BETTER = "better"
WORSE = "worse"
NOT_SIGNIFICANT = "~"
NOT_COMPARABLE = "not comparable"
NEW = "new"
MISSING = "missing"
NEW_FAILURE = "new failure"
FIXED = "fixed"
FAILING = "failing"
VERDICTS = (WORSE, NEW_FAILURE, BETTER, FIXED, NOT_COMPARABLE, NEW, MISSING, FAILING, NOT_SIGNIFICANT)
REGRESSIONS = (WORSE, NEW_FAILURE)

DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.05

#: each metric's direction and unit, from the catalogue (:data:`gcbench.results.metrics.METRICS`)
DIRECTION = {m.name: m.higher_is_better for m in METRICS}
UNIT = {m.name: m.unit for m in METRICS}


@dataclass(frozen=True)
class Row:
    """One line of a comparison: a metric of a case (metric is ``""`` for case-level verdicts)."""

    source: str
    case: str
    metric: str
    baseline: float | None
    new: float | None
    change: float | None  # (new − baseline) / |baseline|; ±inf when the baseline is 0
    p_value: float | None
    verdict: str
    reason: str = ""
    higher_is_better: bool | None = None
    unit: str = ""


@dataclass
class Comparison:
    """The rows of a comparison and what the two runs are."""

    baseline_id: str
    new_id: str
    threshold: float
    alpha: float
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict in REGRESSIONS]

    def counts(self) -> dict[str, int]:
        out = {v: 0 for v in VERDICTS}
        for r in self.rows:
            out[r.verdict] += 1
        return {k: v for k, v in out.items() if v}


def relative_change(base: float, new: float) -> float:
    """(new − base)/|base|; 0 when both are 0; ±inf when only the baseline is 0."""
    if base == new:
        return 0.0
    if base == 0:
        return math.copysign(math.inf, new)
    return (new - base) / abs(base)


def z_test(base: float, new: float, se_base: float, se_new: float) -> float | None:
    """Two-sided p-value of ``new − base`` given the two standard errors (None without them)."""
    s = math.hypot(se_base, se_new)
    if not math.isfinite(s) or s <= 0:
        return None
    # 2·P(Z > z) = erfc(z/√2): the normal tail without importing scipy.stats (1-2.5 s of every command that prints a table)
    return math.erfc(abs(new - base) / s / math.sqrt(2.0))


def keys_diff(what: str, base: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """``"<what> changed: k1, k2"``, the keys whose values differ ("" when none does)."""
    keys = sorted(k for k in set(base) | set(new) if base.get(k) != new.get(k))
    return f"{what} changed: " + ", ".join(keys) if keys else ""


def version_params_diff(base: RunCase | TrainCase | BenchCase, new: RunCase | TrainCase | BenchCase) -> str:
    """The compressor version or parameters that changed between two cases of one compressor ("" when neither did)."""
    if base.version != new.version:
        return f"{new.compressor} version {base.version} → {new.version}"
    return keys_diff("parameters", base.params or {}, new.params or {})



def judge(common: dict[str, Any], b: float | None, n: float | None, sb: Sequence[float], sn: Sequence[float],
          se: tuple[float, float] | None, threshold: float, alpha: float, not_comparable: str = "") -> Row:
    """The verdict row of one metric: ``common`` holds the row's identity (source, case, metric, values, direction, unit).

    ``sb``/``sn`` are raw samples (Mann–Whitney when both have some), ``se`` the two standard errors
    (a z-test, used only without samples).  See the module docstring for the rule.
    """
    if not_comparable:
        return Row(**common, change=None, p_value=None, verdict=NOT_COMPARABLE, reason=not_comparable)
    if b is None or n is None:
        return Row(**common, change=None, p_value=None, verdict=NOT_COMPARABLE,
                   reason=f"only the {'new' if b is None else 'baseline'} run has this metric")
    change = relative_change(b, n)
    p: float | None = None
    if sb and sn:
        p = mann_whitney(sb, sn)
    elif se is not None:
        p = z_test(b, n, se[0], se[1])
    if abs(change) < threshold:
        return Row(**common, change=change, p_value=p, verdict=NOT_SIGNIFICANT, reason=f"|change| < {threshold:.0%}")
    if p is not None and p >= alpha:
        return Row(**common, change=change, p_value=p, verdict=NOT_SIGNIFICANT, reason=f"p = {p:.2g} ≥ {alpha:g}")
    if (sb or sn) and p is None:
        # samples exist but too few for a test: a change within noise cannot be told from a real one
        reason = "too few samples for a significance test; threshold alone"
    else:
        reason = ""
    improved = (n > b) == bool(common["higher_is_better"])
    return Row(**common, change=change, p_value=p, verdict=BETTER if improved else WORSE, reason=reason)
