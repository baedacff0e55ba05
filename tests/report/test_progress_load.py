"""The ETA follows the machine's load: the last cases' durations against the run's history (injected clock, no waiting).

On a shared machine the load changes within a run (another job starts, a CI neighbour finishes).  The run-long mean
of the case durations lags: after four 1 s cases and three 3 s ones it still priced the cases left at 1.86 s.
"""

from __future__ import annotations

import json

import pytest

from gcbench.cli.progress import RECENT, SPEED_BOUNDS, RunEta
from tests.report.test_progress_eta import FakeClock, _run_case


def _eta_after(durations: list[float], total: int) -> RunEta:
    clock = FakeClock()
    eta = RunEta(clock)
    for i, secs in enumerate(durations):
        _run_case(eta, clock, i, total, secs)
    return eta


def test_a_steady_machine_keeps_the_mean() -> None:
    eta = _eta_after([2.0] * 6, 10)
    assert eta.speed() == pytest.approx(1.0) and eta.remaining() == pytest.approx(2.0 * 4)


def test_a_machine_loaded_mid_run_gets_a_longer_eta() -> None:
    """Four cases at 1 s, then three at 3 s (the load tripled): the three cases left are priced at the recent 3 s."""
    eta = _eta_after([1.0] * 4 + [3.0] * RECENT, 10)
    mean = (4 * 1.0 + RECENT * 3.0) / (4 + RECENT)
    assert eta.per_case() == pytest.approx(mean)  # the history alone would say 1.86 s a case
    assert eta.speed() == pytest.approx(3.0 / mean)
    assert eta.remaining() == pytest.approx(3.0 * 3)


def test_a_machine_that_became_quiet_gets_a_shorter_eta() -> None:
    eta = _eta_after([3.0] * 4 + [1.0] * RECENT, 10)
    assert eta.remaining() == pytest.approx(1.0 * 3)


def test_too_few_cases_to_compare_and_one_odd_case_are_bounded() -> None:
    assert _eta_after([1.0] * RECENT, 10).speed() == 1.0  # no history beyond the recent cases
    eta = _eta_after([1.0] * 20 + [1000.0], 30)  # unbounded: 1002 s over the 146 s the history predicts, 6.9x
    assert eta.speed() == SPEED_BOUNDS[1]


def test_a_planned_run_scales_its_weighted_estimate_by_the_recent_speed() -> None:
    """With the runner's plan (compressors a, b over four sources of equal work): a takes 1 s and b 2 s until the load
    triples.  The compressors' rates from the whole run price the two cases left at 5/3 + 10/3 s; the last three
    cases took 11 s where those rates say 25/3, so the estimate is 5 × 33/25."""
    clock = FakeClock()
    eta = RunEta(clock)
    eta.update("plan", 0, 8, json.dumps({"work": [1.0, 1.0, 1.0, 1.0], "cases": ["a", "b"]}))
    for i, secs in enumerate([1.0, 2.0, 1.0, 2.0, 3.0, 6.0]):
        _run_case(eta, clock, i, 8, secs)
    assert eta.speed() == pytest.approx(11 / (25 / 3))
    assert eta.remaining() == pytest.approx(5.0 * 33 / 25)
