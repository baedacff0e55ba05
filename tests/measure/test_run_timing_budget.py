"""A run's whole timing budget (``metrics.timing_run_budget_s``): it caps a case's rounds, and says so.

A one-step run of hf:gpt2 spent minutes in timing rounds of a second and more each (at least
``timing_repeats`` rounds and a warm-up per compressor, whatever ``timing_budget_s`` said).  These
tests count rounds and flags, never wall time: a fake clock drives the calibration, and the run-level
test makes the share so small that one round always exceeds it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gcbench.measure import bench, copy_baseline
from gcbench.measure.copy_baseline import timing_summary
from gcbench.measure.runner import RunTimingBudget, run_suite
from gcbench.measure.suite import parse_suite
from gcbench.measure.timing import TimingPolicy, time_interleaved
from gcbench.results.record import CUT_SHORT
from gcbench.results.store import load_run
from tests.measure.test_metrics import FakeClock


def _rounds(policy: TimingPolicy):
    """Rounds of a 0.1 s copy and a 0.3 s compress and a 0.05 s decompress (0.45 s a round) under ``policy``, on a fake clock."""
    clock = FakeClock()
    return time_interleaved(clock.takes([0.1]), {"compress": clock.takes([0.3]), "decompress": clock.takes([0.05])}, policy,
                            clock=clock, load=lambda: None)


def test_a_spent_share_stops_the_rounds_before_their_least_count_and_flags_them() -> None:
    capped = TimingPolicy(warmup=1, min_rounds=5, budget_s=1.0, cap_s=1.0)
    timed = _rounds(capped)
    assert timed.stopped == "cut short" and len(timed.copy) == 3  # 0.45, 0.9, 1.35 s: the third round passes the share
    rec = timing_summary(1000, "cpu", 2, timed, None, capped)
    for kernel in ("compress", "decompress"):
        block = rec[f"{kernel}_x_copy"]
        assert CUT_SHORT in block["flags"]
        assert "3 of at least 5" in block["reasons"][CUT_SHORT]
    assert rec["policy"]["cap_s"] == 1.0  # recorded, so a reader (and the pooled re-flagging) knows the cap


def test_without_a_run_share_the_least_count_stands_and_nothing_is_cut() -> None:
    plain = TimingPolicy(warmup=1, min_rounds=5, budget_s=1.0)
    timed = _rounds(plain)
    assert len(timed.copy) == 5 and timed.stopped == "stable"
    rec = timing_summary(1000, "cpu", 2, timed, None, plain)
    assert CUT_SHORT not in rec["compress_x_copy"]["flags"]


def test_the_run_budget_shares_what_is_left_and_floors_a_spent_one() -> None:
    m = parse_suite({"name": "t", "seed": 0, "sources": [{"kind": "synthetic", "shapes": [[8]]}],
                     "compressors": [{"name": "none"}]}).metrics
    budget = RunTimingBudget(2.0, 4)
    first = budget.policy(m)
    assert first.cap_s == pytest.approx(bench.case_budget(2.0, 4)) and first.min_rounds == m.timing_repeats
    assert first.budget_s == pytest.approx(min(m.timing_budget_s, first.cap_s))
    budget.spend(1.9, 0.4)  # a big case: 1.5 s beyond its rounds (payloads, warm-up)
    later = budget.policy(m)
    assert later.cap_s == bench.MIN_CASE_BUDGET_S  # the budget is spent: one round, then cut short


def test_one_case_that_compiled_does_not_shrink_every_later_share() -> None:
    """A case's cost beyond its rounds is estimated by the median of the cases so far: one case that paid a cold
    kernel compile (a large overhead once) leaves the later cases the share the typical overhead leaves them."""
    m = parse_suite({"name": "t", "seed": 0, "sources": [{"kind": "synthetic", "shapes": [[8]]}],
                     "compressors": [{"name": "none"}]}).metrics
    budget = RunTimingBudget(30.0, 11)
    budget.spend(6.0, 1.0)  # compiled: 5 s beyond its rounds
    budget.spend(1.2, 1.0)
    budget.spend(1.2, 1.0)
    even = (30.0 - 8.4) / 8
    assert budget.policy(m).cap_s == pytest.approx(even - 0.2)  # the median overhead, not the compile's 5 s


def test_a_run_whose_budget_is_spent_times_one_round_a_case_flagged_on_disk(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: every case's share is a nanosecond, so each takes exactly one timed round and the results file
    flags both kernels ``cut short`` — also after the source's cases are re-based on the pooled copy."""
    monkeypatch.setattr(copy_baseline, "last_level_cache_bytes", lambda: 1)  # pooling applies: flags are recomputed there
    monkeypatch.setattr(bench, "MIN_CASE_BUDGET_S", 1e-9)
    suite = parse_suite({
        "name": "t", "seed": 0, "metrics": {"repeats": 2, "timing_repeats": 4, "timing_run_budget_s": 1e-9},
        "sources": [{"kind": "synthetic", "shapes": [[64, 32]], "workers": 1, "steps": 1}],
        "compressors": [{"name": "none"}, {"name": "topk"}],
    })
    saved = load_run(run_suite(suite, tmp_path).path)
    for case in saved.cases:
        t = case.timing
        assert t.rounds == 1 and t.stopped == "cut short"
        assert CUT_SHORT in (t.compress_x_copy.flags or []) and CUT_SHORT in (t.decompress_x_copy.flags or [])


def test_the_default_budget_leaves_a_small_run_its_rounds(tmp_path: Path) -> None:
    suite = parse_suite({
        "name": "t", "seed": 0, "metrics": {"repeats": 2, "timing_repeats": 4},
        "sources": [{"kind": "synthetic", "shapes": [[64, 32]], "workers": 1, "steps": 1}],
        "compressors": [{"name": "none"}, {"name": "topk"}],
    })
    saved = load_run(run_suite(suite, tmp_path).path)
    for case in saved.cases:
        assert case.timing.rounds >= 4 and CUT_SHORT not in (case.timing.compress_x_copy.flags or [])
