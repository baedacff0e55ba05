"""The run's overall ETA from injected clock readings (no waiting, no wall-clock assertions)."""

from __future__ import annotations

import pytest

from gcbench.cli.progress import RunEta, format_seconds


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


def test_with_the_runners_plan_cases_are_weighed_by_their_sources_work_and_their_compressor() -> None:
    """Issue 33 item 6: half way through two sources, the second (half the work) is priced from the first's times."""
    import json

    from gcbench.cli.progress import RunEta

    now = [0.0]
    eta = RunEta(clock=lambda: now[0])
    eta.update("plan", 0, 4, json.dumps({"work": [10.0, 5.0], "cases": ["a", "b"]}))

    def case(start: float, end: float, done_before: int) -> None:
        now[0] = start
        eta.update("case", done_before, 4, "x on s")
        eta.update("step", 0, 2, "")
        now[0] = end
        eta.update("step", 2, 2, "")
        eta.update("case", done_before + 1, 4, "x done")

    case(2.0, 4.0, 0)  # source 0 built in 2 s; a: 2 s for 10 units
    case(4.0, 10.0, 1)  # b: 6 s for 10 units
    # left: building source 1 (0.2 s a unit × 5) + a (0.2 × 5) + b (0.6 × 5) = 5 s; the unweighted mean said 8 s
    assert eta.remaining() == pytest.approx(5.0)
    case(11.0, 12.0, 2)  # source 1 built in 1 s, a took 1 s
    assert eta.remaining() == pytest.approx(3.0)


def test_a_plan_that_cannot_be_read_or_holds_an_unknown_work_leaves_the_mean() -> None:
    import json

    from gcbench.cli.progress import RunEta

    for message in ("not json", json.dumps({"work": [None, 5.0], "cases": ["a", "b"]})):
        now = [0.0]
        eta = RunEta(clock=lambda now=now: now[0])
        eta.update("plan", 0, 4, message)
        eta.update("case", 0, 4, "a on s")
        eta.update("step", 0, 1, "")
        now[0] = 3.0
        eta.update("step", 1, 1, "")
        eta.update("case", 1, 4, "a done")
        assert eta.remaining() == pytest.approx(9.0)  # 3 s a case × 3 cases left


def test_building_a_source_is_priced_by_its_build_work() -> None:
    """A live model's build (forward + backward on every worker-step) follows its activations, not its parameters."""
    import json

    from gcbench.cli.progress import RunEta

    now = [0.0]
    eta = RunEta(clock=lambda: now[0])
    eta.update("plan", 0, 2, json.dumps({"work": [10.0, 10.0], "build": [100.0, 10.0], "cases": ["a"]}))
    now[0] = 20.0  # building source 0 took 20 s (0.2 s a unit of build work)
    eta.update("case", 0, 2, "a on s0")
    eta.update("step", 0, 1, "")
    now[0] = 25.0
    eta.update("step", 1, 1, "")
    eta.update("case", 1, 2, "a done")
    assert eta.remaining() == pytest.approx(0.2 * 10 + 5.0)  # source 1's build (10 units) + a's 5 s on equal work
