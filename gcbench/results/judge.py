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

**Timings** (:func:`judge_timing`: compress and decompress ×copy) are tested on each process's median, not on the
rounds inside one process (:func:`gcbench.results.metrics.process_test`): what moves between two runs of one build is
mostly the process, which its own rounds cannot show.  With one process a side (every ``gcbench run`` file, a ``gcbench
bench`` without ``--processes``) a timing is called better or worse only beyond :data:`ONE_PROCESS_FACTOR`.  Then
:func:`correct_timings` holds the tested timing rows of a comparison to Holm's correction, so a gate over many rows
of an unchanged build fails with a chance under α, not once in a few runs.

``worse`` and ``new failure`` are regressions (``--fail-on-regression``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gcbench.results.bench_record import BenchCase
from gcbench.results.metrics import METRICS, holm, mann_whitney, process_test
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


#: with one process a side, how far apart two timings must be to be called better or worse: A/A reruns of one build
#: on a quiet 2-core machine moved single-process ×copy by up to 1.70× (4 bench runs of 4 compressors at 1M and
#: 25.6M, 16 timings: median spread 12% in log terms); 2× is past all of them (docs/timing.md)
ONE_PROCESS_FACTOR = 2.0

#: the metrics :func:`judge_timing` decides (run files' and bench files' names)
TIMING_METRICS = frozenset({"comp_over_copy", "decomp_over_copy", "compress_x_copy", "decompress_x_copy"})


def judge_timing(common: dict[str, Any], b: float | None, n: float | None, pb: Sequence[float], pn: Sequence[float],
                 threshold: float, alpha: float, not_comparable: str = "") -> Row:
    """The verdict row of a timing: ``pb``/``pn`` are each side's per-process medians (one value: one process).

    The change must reach ``threshold``, and then either :func:`process_test` gives p < ``alpha`` or, with one
    process a side, the two are more than :data:`ONE_PROCESS_FACTOR` apart.
    """
    if not_comparable or b is None or n is None or b <= 0 or n <= 0:
        return judge(common, b, n, (), (), None, threshold, alpha, not_comparable)
    change = relative_change(b, n)
    p = process_test(pb, pn)
    if abs(change) < threshold:
        return Row(**common, change=change, p_value=p, verdict=NOT_SIGNIFICANT, reason=f"|change| < {threshold:.0%}")
    verdict = BETTER if (n > b) == bool(common["higher_is_better"]) else WORSE
    if p is None:
        factor = max(n / b, b / n)
        if factor < ONE_PROCESS_FACTOR:
            return Row(**common, change=change, p_value=None, verdict=NOT_SIGNIFICANT,
                       reason=f"one process a side: {factor:.2f}× apart, within the {ONE_PROCESS_FACTOR:g}× a process "
                              "alone can move")
        return Row(**common, change=change, p_value=None, verdict=verdict,
                   reason=f"one process a side: {factor:.2f}× apart, past the {ONE_PROCESS_FACTOR:g}× a process alone moves")
    sides = f"{len(pb)} vs {len(pn)} processes"
    if p >= alpha:
        return Row(**common, change=change, p_value=p, verdict=NOT_SIGNIFICANT, reason=f"p = {p:.2g} ≥ {alpha:g} ({sides})")
    return Row(**common, change=change, p_value=p, verdict=verdict, reason=sides)


def correct_timings(rows: list[Row], alpha: float) -> int:
    """Holm's correction over the timing rows a process test decided (their p-values); a better or worse one whose
    adjusted p reaches ``alpha`` becomes ``~`` (in place).  Returns how many rows the correction covered."""
    tested = [i for i, r in enumerate(rows) if r.metric in TIMING_METRICS and r.p_value is not None
              and r.verdict in (BETTER, WORSE, NOT_SIGNIFICANT)]
    adjusted = holm([rows[i].p_value or 0.0 for i in tested])
    for i, adj in zip(tested, adjusted, strict=True):
        r = rows[i]
        if r.verdict in (BETTER, WORSE) and adj >= alpha:
            rows[i] = replace(r, verdict=NOT_SIGNIFICANT,
                              reason=f"p = {r.p_value:.2g}, {adj:.2g} after Holm's correction over {len(tested)} timings ≥ {alpha:g}")
    return len(tested)
