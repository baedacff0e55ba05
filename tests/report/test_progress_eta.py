"""The run's overall ETA from injected clock readings (no waiting, no wall-clock assertions)."""

from __future__ import annotations

import pytest

from gcbench.report.progress import RunEta, format_seconds


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run_case(eta: RunEta, clock: FakeClock, done: int, total: int, seconds: float, steps: int = 4) -> None:
    """Feed the calls the runner makes for one case that takes ``seconds`` over ``steps`` steps."""
    eta.update("case", done, total)
    for t in range(steps):
        eta.update("step", t, steps)
        clock.now += seconds / steps
    eta.update("step", steps, steps)
    eta.update("case", done + 1, total)


def test_no_estimate_before_anything_is_measured() -> None:
    clock = FakeClock()
    eta = RunEta(clock)
    assert eta.remaining() is None and eta.text() == "ETA …"
    eta.update("case", 0, 5)
    assert eta.remaining() is None
    eta.update("step", 0, 4)  # the first step has begun, none done: still no rate
    clock.now = 3.0
    assert eta.remaining() is None


def test_first_case_rate_from_its_steps() -> None:
    clock = FakeClock()
    eta = RunEta(clock)
    eta.update("case", 0, 5)
    eta.update("step", 0, 4)
    clock.now = 2.0
    eta.update("step", 1, 4)  # a quarter of the case in 2 s: 8 s per case
    assert eta.per_case() == pytest.approx(8.0)
    assert eta.remaining() == pytest.approx(8.0 * (5 - 0.25))


def test_mean_of_timed_cases_and_running_fraction() -> None:
    clock = FakeClock()
    eta = RunEta(clock)
    _run_case(eta, clock, 0, 6, 4.0)
    clock.now += 100.0  # building the next source: not charged to any case
    _run_case(eta, clock, 1, 6, 8.0)
    assert eta.durations == pytest.approx([4.0, 8.0])
    assert eta.remaining() == pytest.approx(6.0 * 4)
    eta.update("case", 2, 6)
    eta.update("step", 0, 2)
    clock.now += 3.0
    eta.update("step", 1, 2)  # half of the third case done
    assert eta.remaining() == pytest.approx(6.0 * 3.5)
    assert eta.text() == "ETA 0:21"


def test_failed_source_cases_are_counted_not_timed() -> None:
    clock = FakeClock()
    eta = RunEta(clock)
    for done in range(1, 4):  # a source that failed to build: its cases are counted done at once
        clock.now += 0.001
        eta.update("case", done, 6)
    assert eta.done == 3 and eta.durations == [] and eta.remaining() is None
    _run_case(eta, clock, 3, 6, 10.0)
    assert eta.remaining() == pytest.approx(2 * 10.0)


def test_done_run_and_other_stages() -> None:
    clock = FakeClock()
    eta = RunEta(clock)
    eta.update("gradients", 3, 10)  # stages other than case/step do not change the estimate
    assert eta.total == 0 and eta.remaining() is None
    _run_case(eta, clock, 0, 1, 5.0)
    assert eta.remaining() == 0.0 and eta.text() == "ETA 0:00"


@pytest.mark.parametrize(("seconds", "text"), [(0, "0:00"), (0.2, "0:01"), (59.0, "0:59"), (61, "1:01"), (3600, "1:00:00"),
                                                (3725.5, "1:02:06")])
def test_format_seconds(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text
