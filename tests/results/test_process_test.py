"""Timings are judged on processes, not on the rounds inside one: the test, Holm's correction and the verdict rule."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from scipy import stats

from gcbench.results.judge import (
    BETTER,
    NOT_SIGNIFICANT,
    ONE_PROCESS_FACTOR,
    WORSE,
    Row,
    correct_timings,
    judge_timing,
)
from gcbench.results.metrics import holm, process_test


def _common(metric: str = "compress_x_copy") -> dict[str, Any]:
    return {"source": "1,000,000 elements", "case": "topk", "metric": metric, "baseline": None, "new": None,
            "higher_is_better": False, "unit": "× copy"}


def test_process_test_is_welch_on_logarithms() -> None:
    a, b = [10.7, 15.4, 12.2, 13.6, 11.0], [14.1, 19.9, 16.0, 17.2, 15.5, 18.0]
    want = stats.ttest_ind([math.log(v) for v in a], [math.log(v) for v in b], equal_var=False).pvalue
    assert process_test(a, b) == pytest.approx(want, rel=1e-9)
    assert process_test(b, a) == pytest.approx(want, rel=1e-9)  # two-sided: the order does not matter


def test_one_value_against_replicated_processes_is_a_prediction_test() -> None:
    reps, x = [2.0, 2.2, 1.9, 2.1], 3.0
    logs = [math.log(v) for v in reps]
    m, s, n = sum(logs) / 4, stats.tstd(logs), 4
    t = (math.log(x) - m) / (s * math.sqrt(1 + 1 / n))
    want = 2 * stats.t.sf(abs(t), n - 1)
    assert process_test(reps, [x]) == pytest.approx(want, rel=1e-9)
    assert process_test([x], reps) == pytest.approx(want, rel=1e-9)


def test_one_process_a_side_has_no_test() -> None:
    assert process_test([2.0], [3.0]) is None
    assert process_test([], [1.0, 2.0]) is None
    assert process_test([2.0, float("nan")], [3.0]) is None  # a non-finite median is not a process


def test_process_test_rejects_at_its_level_on_unchanged_processes() -> None:
    # A/A: both sides drawn from one log-normal process distribution; the test must reject near α, not far above it
    rng = random.Random(7)
    rejections = sum(process_test([math.exp(rng.gauss(0, 0.12)) for _ in range(5)],
                                  [math.exp(rng.gauss(0, 0.12)) for _ in range(5)]) < 0.05  # type: ignore[operator]
                     for _ in range(2000))
    assert 0.03 < rejections / 2000 < 0.07


def test_holm_matches_its_definition() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 → 0.02, 0.03, 0.06, 0.04, made monotone → 0.02, 0.03, 0.06, 0.06
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([]) == []
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])


def test_one_process_a_side_calls_only_past_the_factor() -> None:
    within = judge_timing(_common(), 10.0, 10.0 * 1.7, [10.0], [17.0], 0.05, 0.05)
    assert within.verdict == NOT_SIGNIFICANT and "one process a side" in within.reason and within.p_value is None
    past = judge_timing(_common(), 10.0, 10.0 * (ONE_PROCESS_FACTOR + 0.5), [10.0], [25.0], 0.05, 0.05)
    assert past.verdict == WORSE and "past the 2×" in past.reason
    faster = judge_timing(_common(), 10.0, 4.0, [10.0], [4.0], 0.05, 0.05)
    assert faster.verdict == BETTER


def test_replicated_processes_call_a_change_their_spread_cannot_explain() -> None:
    base = [10.0, 10.4, 9.7, 10.2, 9.9]
    slower = [v * 1.3 for v in (10.1, 9.8, 10.3, 10.0, 9.9)]
    r = judge_timing(_common(), 10.0, 13.0, base, slower, 0.05, 0.05)
    assert r.verdict == WORSE and r.p_value is not None and r.p_value < 0.001 and r.reason == "5 vs 5 processes"
    # 15% with processes spread as wide as topk's at 1M were on this machine (10.7-15.4): not told from noise
    noisy_b = [10.7, 15.4, 12.2, 13.6, 11.0]
    noisy_n = [v * 1.15 for v in (11.0, 13.6, 10.7, 15.4, 12.2)]
    r = judge_timing(_common(), 12.2, 12.2 * 1.15, noisy_b, noisy_n, 0.05, 0.05)
    assert r.verdict == NOT_SIGNIFICANT and r.reason.startswith("p = ")
    # under the threshold nothing is called, however sure the test
    r = judge_timing(_common(), 10.0, 10.3, base, [v * 1.03 for v in base], 0.05, 0.05)
    assert r.verdict == NOT_SIGNIFICANT and "|change| <" in r.reason


def test_holm_correction_turns_a_lone_marginal_call_among_many_into_noise() -> None:
    rows = [Row("s", f"c{i}", "compress_x_copy", 1.0, 1.0, 0.0, 0.5, NOT_SIGNIFICANT) for i in range(9)]
    rows.append(Row("s", "c9", "compress_x_copy", 1.0, 1.2, 0.2, 0.02, WORSE, "5 vs 5 processes"))
    rows.append(Row("s", "c9", "ratio", 1.0, 2.0, 1.0, 0.001, BETTER))  # not a timing: left alone
    assert correct_timings(rows, 0.05) == 10
    assert rows[9].verdict == NOT_SIGNIFICANT and "Holm" in rows[9].reason and rows[9].p_value == 0.02
    assert rows[10].verdict == BETTER
    strong = [Row("s", "c", "decompress_x_copy", 1.0, 2.0, 1.0, 1e-6, WORSE), *rows[:9]]
    correct_timings(strong, 0.05)
    assert strong[0].verdict == WORSE
