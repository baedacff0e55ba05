"""Statistics over seeds (gcbench/converge/seed_summary.py): t-intervals, paired gaps, steps to target, curve bands."""

from __future__ import annotations

import math

import pytest

from gcbench.converge import seed_summary
from gcbench.core.intervals import domain


def test_interval_is_the_mean_with_a_student_t_half_width() -> None:
    iv = seed_summary.interval([1.0, 2.0, 3.0])
    # s = 1, n = 3: half width = t(0.975, 2) / sqrt(3) = 4.3027 / 1.7321
    assert iv is not None and iv["mean"] == 2.0 and iv["n"] == 3
    assert iv["high"] - 2.0 == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert iv["low"] == pytest.approx(4.0 - iv["high"])


def test_interval_of_one_value_has_no_spread_and_of_none_is_absent() -> None:
    assert seed_summary.interval([0.7]) == {"mean": 0.7, "low": 0.7, "high": 0.7, "n": 1}
    assert seed_summary.interval([]) is None
    assert seed_summary.interval([float("nan"), None]) is None  # type: ignore[list-item]
    assert seed_summary.interval([1.0, float("inf"), 3.0])["n"] == 2  # type: ignore[index]


def test_a_fraction_target_is_looser_than_the_reference_for_either_sign() -> None:
    assert seed_summary.target_from_fraction(0.8, 0.95) == pytest.approx(0.76)
    assert seed_summary.target_from_fraction(-2.0, 0.95) == pytest.approx(-2.1)  # neg_loss: a loss 5% higher
    assert seed_summary.target_from_fraction(0.8, 1.0) == 0.8


def test_steps_to_target_is_the_first_evaluation_at_or_above_it() -> None:
    curve = [{"step": 0, "metric": 0.1}, {"step": 10, "metric": 0.5}, {"step": 20, "metric": 0.4}, {"step": 30, "metric": 0.6}]
    assert seed_summary.steps_to_target(curve, 0.5) == 10
    assert seed_summary.steps_to_target(curve, 0.55) == 30
    assert seed_summary.steps_to_target(curve, 0.7) is None
    assert seed_summary.best_metric([curve, [{"step": 0, "metric": float("nan")}]]) == 0.6


def _seed(seed: int, status: str, final: float | None, reached: bool | None = None, steps: int | None = None) -> dict:
    curve = [{"step": 0, "metric": 0.0, "train_loss": None}, {"step": 10, "metric": final if final is not None else 0.1, "train_loss": 1.0}]
    if status == "diverged":
        curve = curve[:1]
    return {"seed": seed, "status": status, "final_metric": final, "curve": curve, "reached": reached, "steps_to_target": steps}


def test_summary_pairs_the_gap_by_seed_and_counts_outcomes() -> None:
    ref = {0: 0.9, 1: 0.8, 2: 0.85}
    seeds = [_seed(0, "ok", 0.85, True, 10), _seed(1, "diverged", None, False), _seed(2, "ok", 0.75, False)]
    s = seed_summary.summarize(seeds, ref, target=0.8)
    assert s["gap"]["n"] == 2 and s["gap"]["mean"] == pytest.approx((0.05 + 0.10) / 2)  # seed 1 diverged: not paired
    assert s["final_metric"]["mean"] == pytest.approx(0.8)
    assert (s["seeds"], s["diverged"], s["failed"], s["reached"]) == (3, 1, 0, 1)
    assert s["steps_to_target"] == {"mean": 10.0, "low": 10.0, "high": 10.0, "n": 1}  # over the seed that reached it
    assert s["curve_steps"] == [0, 10]
    assert s["curve_mean"][1] == pytest.approx(0.8)  # the diverged seed stopped before step 10


def test_the_reference_gap_is_zero_and_nobody_reaching_is_an_outcome() -> None:
    s = seed_summary.summarize([_seed(0, "ok", 0.9), _seed(1, "ok", 0.8)], None, target=None)
    assert s["gap"]["mean"] == 0.0 and "reached" not in s
    s = seed_summary.summarize([_seed(0, "ok", 0.5, False), _seed(1, "error", None)], {0: 0.9, 1: 0.9}, target=0.85)
    assert s["reached"] == 0 and s["steps_to_target"] is None and s["failed"] == 1


def test_intervals_are_clipped_to_what_the_quantity_can_be() -> None:
    """Two seeds of accuracy 0.43 and 0.84 give a t-interval up to 2.3; steps 0 and 4 of a 4-step budget one from -23."""
    acc = seed_summary.interval([0.43, 0.84], domain("metric", "accuracy"))
    assert acc is not None and acc["mean"] == pytest.approx(0.635) and acc["high"] == 1.0 and acc["low"] == 0.0
    steps = seed_summary.interval([0.0, 4.0], domain("steps", budget=4))
    assert steps is not None and (steps["low"], steps["mean"], steps["high"]) == (0.0, 2.0, 4.0)
    gap = seed_summary.interval([0.5, -0.3], domain("gap", "accuracy"))
    assert gap is not None and (gap["low"], gap["high"]) == (-1.0, 1.0)
    loss = seed_summary.interval([-0.5, 0.4], domain("metric", "neg_loss"))  # a user's loss may be below 0: unclipped
    assert loss is not None and loss["high"] > 1 and loss["low"] < -1
    seeds = [{"seed": s, "status": "ok", "final_metric": f, "reached": True, "steps_to_target": k,
              "curve": [{"step": 0, "metric": 0.1 * s, "train_loss": 2.0}, {"step": 4, "metric": f, "train_loss": 1.0}]}
             for s, f, k in ((0, 0.43, 0), (1, 0.84, 4))]
    summary = seed_summary.summarize(seeds, {0: 0.9, 1: 0.1}, 0.0, "accuracy", 4)
    assert summary["final_metric"]["high"] == 1.0 and summary["steps_to_target"]["low"] == 0.0
    assert summary["steps_to_target"]["high"] == 4.0 and summary["gap"]["high"] == 1.0 and summary["gap"]["low"] == -1.0
    assert max(summary["curve_high"]) == 1.0 and min(summary["curve_low"]) == 0.0
