"""The runner and the per-case maths it uses (gcbench.measure.runner; casemath, traffic, case_summary, copy_baseline).

Each function of the per-case maths is checked against its definition (docs/metrics.md) on inputs
small enough to work out by hand; ``run_case`` and ``run_suite`` are checked end to end on tiny
hand-written or synthetic sources: the identity compressor loses nothing, a compressor that sends
nothing has q = 1, top-k with error feedback has the EF drift worked out below, bytes and worker
counts add up to the traffic records, and a failing case is recorded while the run goes on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gcbench.compressors import registry
from gcbench.core.errors import SourceError
from gcbench.measure import casemath, copy_baseline
from gcbench.measure.case_summary import fidelity_summary, finite_mean, size_summary, unit_summary
from gcbench.measure.casemath import (
    RunningSum,
    StreamStats,
    cosine_terms,
    cumulative_drift,
    ef_drift,
    model_cosine,
    norm_ratio,
    worker_mean,
)
from gcbench.measure.copy_baseline import pool_copy_baseline, timing_summary
from gcbench.measure.fidelity import fidelity
from gcbench.measure.granularity import make_units
from gcbench.measure.runner import run_case, run_suite
from gcbench.measure.source_data import SourceData
from gcbench.measure.suite import CompressorSpec, Suite, parse_suite
from gcbench.measure.timing import BEATS_BOUND, TOO_SHORT, UNSTABLE, Interleaved, TimingPolicy
from gcbench.measure.traffic import TrafficLog, allgather_traffic
from gcbench.results.phases import Window
from gcbench.results.store import load_run
from gcbench.sources.base import GradientSource, TensorSpec


def vec(*v: float) -> torch.Tensor:
    """A float32 vector of the given values."""
    return torch.tensor(v, dtype=torch.float32)


# ----------------------------------------------------------------------------- tensors and norms


def test_worker_mean_is_the_elementwise_mean_in_float32() -> None:
    m = worker_mean([vec(1, 2), vec(3, 6), vec(2, 1)])
    assert m.dtype == torch.float32
    assert m.tolist() == [2.0, 3.0]
    assert worker_mean([torch.tensor([1.0, 3.0], dtype=torch.float16)]).dtype == torch.float32


def test_worker_mean_of_finite_values_near_float32s_max_stays_finite() -> None:
    big = 3.0e38  # the float32 sum of two of them overflows; their mean does not
    m = worker_mean([vec(big, -big, 1.0), vec(big, -big, 3.0)])
    assert torch.isfinite(m).all()
    assert m.tolist() == pytest.approx([big, -big, 2.0], rel=1e-6)
    assert torch.isinf(worker_mean([vec(math.inf), vec(1.0)])).all()  # a non-finite input stays visibly non-finite


def test_norm_ratio_and_zero_denominator() -> None:
    assert norm_ratio(9.0, 4.0) == pytest.approx(1.5)
    assert norm_ratio(0.0, 4.0) == 0.0
    assert norm_ratio(1.0, 0.0) is None


def test_model_cosine_pools_units_before_dividing() -> None:
    # a = ([1, 0], [0]), b = ([1, 0], [1]): ⟨a, b⟩ = 1, ‖a‖ = 1, ‖b‖ = √2 — not the mean of per-unit cosines (1 and undefined)
    terms = [cosine_terms(vec(1, 0), vec(1, 0)), cosine_terms(vec(0), vec(1))]
    assert terms == [(1.0, 1.0, 1.0), (0.0, 0.0, 1.0)]
    assert model_cosine(terms) == pytest.approx(1 / math.sqrt(2))
    assert model_cosine([cosine_terms(vec(0, 0), vec(1, 2))]) is None
    assert model_cosine([cosine_terms(vec(-1, -2), vec(1, 2))]) == pytest.approx(-1.0)


# ----------------------------------------------------------------------------- running sums and drift


def test_running_sum_accumulates_restarts_and_leaves_inputs_alone() -> None:
    s = RunningSum(2)
    x0, x1 = vec(1, 2), vec(3)
    s.add(0, x0)
    s.add(1, x1)
    s.add(0, vec(1, 1))
    assert x0.tolist() == [1.0, 2.0]  # the first tensor was copied, not accumulated into
    assert s.sums[0].tolist() == [2.0, 3.0]  # type: ignore[union-attr]
    assert s.sq_norm() == 4 + 9 + 9
    s.add(0, vec(3, 3), vec(1, 2))  # a difference: (2, 3) + (2, 1)
    assert s.sums[0].tolist() == [4.0, 4.0]  # type: ignore[union-attr]
    assert s.sq_norm() == 16 + 16 + 9
    s.restart()
    assert s.sq_norm() == 0.0
    s.add(1, vec(2))
    assert s.sq_norm() == 4.0


@pytest.mark.parametrize("n", [1001, 3_000_017])  # the serial kernel, and the blocks on several threads
@pytest.mark.parametrize("kernel", ["numba", "torch"])
def test_a_one_step_running_sum_gives_the_same_bits_without_the_sum(n: int, kernel: str, monkeypatch) -> None:
    """One term per unit: its norm is the full sum's to the bit (accumulate64 on a zeroed sum), nothing is written,
    a window restart allows one more term, and a second term is refused."""
    from gcbench import kernels
    from gcbench.measure.fidelity import accumulate64, first_sum_sq64

    if kernel == "torch":
        monkeypatch.setattr(kernels, "cpu_fast", lambda *ts: False)
    gen = torch.Generator().manual_seed(n)
    a, b = torch.randn(n, generator=gen) * 1e3, torch.randn(n, generator=gen)
    b[:5] = a[:5]  # exact zeros in the difference (a −0 in it squares like a +0)
    for second in (b, None):
        full = RunningSum(1)
        full.add(0, a, second)
        one = RunningSum(1, one_step=True)
        one.add(0, a, second)
        assert one.sq_norm() == full.sq_norm() == accumulate64(torch.zeros(n), a, second) == first_sum_sq64(a, second)
        assert one.sums == [None]
        with pytest.raises(RuntimeError, match="one term"):
            one.add(0, a, second)
        one.restart()
        one.add(0, a)
        assert one.sq_norm() == first_sum_sq64(a)


def test_cumulative_drift_by_hand() -> None:
    # aggregates (1, 1), (0, 1) against means (1, 0), (1, 0): Σ err = (−1, 2), Σ mean = (2, 0)
    err, mean = RunningSum(1), RunningSum(1)
    for a, m in [(vec(1, 1), vec(1, 0)), (vec(0, 1), vec(1, 0))]:
        err.add(0, a, m)
        mean.add(0, m)
    assert cumulative_drift(err, mean) == pytest.approx(math.sqrt(5) / 2)


# the top-k (k = 1) with error feedback example of test_run_case_ef_drift_by_hand, worker 0
GRADS = [vec(4, 1, -2, 0.5), vec(1, 3, 1, 0), vec(0, 1, 1, 2)]
SENT = [vec(4, 0, 0, 0), vec(0, 4, 0, 0), vec(0, 0, 0, 2.5)]
# Σ C − Σ g after each step is minus the residual: (0, −1, 2, −.5), (−1, 0, 1, −.5), (−1, −1, 0, 0)
EF_DRIFT = [math.sqrt(5.25 / 21.25), 1.5 / 6.5, math.sqrt(2) / 7.5]
RESIDUAL = [math.sqrt(5.25) / math.sqrt(21.25), 1.5 / math.sqrt(11), math.sqrt(2) / math.sqrt(6)]


def test_ef_drift_by_hand() -> None:
    err, ref = RunningSum(1), RunningSum(1)
    drift, resid = [], []
    for c, g in zip(SENT, GRADS, strict=True):
        err.add(0, c, g)
        ref.add(0, g)
        d, r = ef_drift(err, ref, [g])
        drift.append(d)
        resid.append(r)
    assert drift == pytest.approx(EF_DRIFT)
    assert resid == pytest.approx(RESIDUAL)
    zero_err, zero_ref = RunningSum(1), RunningSum(1)
    zero_err.add(0, vec(0, 0), vec(0, 0))
    zero_ref.add(0, vec(0, 0))
    assert ef_drift(zero_err, zero_ref, [vec(0, 0)]) == (None, None)


def test_stream_stats_window_restarts_only_the_window_sums() -> None:
    stats = StreamStats(1, stateful=False, windowed=True)
    means = [vec(1, 0), vec(0, 2), vec(1, 1)]
    aggs = [vec(2, 0), vec(0, 2), vec(1, 0)]
    for t, (a, m) in enumerate(zip(aggs, means, strict=True)):
        stats.add_step([[m]], [a], [a], [8], [fidelity(m, [a])], window_start=t in (0, 2))
    # whole stream: Σ err = (1, 0), (1, 0), (1, −1); Σ mean = (1, 0), (1, 2), (2, 3)
    assert stats.agg_drift == pytest.approx([1.0, 1 / math.sqrt(5), math.sqrt(2 / 13)])
    # the window restarted at step 2: its drift is that step's alone, ‖(0, −1)‖ / ‖(1, 1)‖
    assert stats.window_drift == pytest.approx([1.0, 1 / math.sqrt(5), 1 / math.sqrt(2)])
    assert stats.agg_cosine == pytest.approx([1.0, 1.0, 1 / math.sqrt(2)])
    assert [f.q for u in stats.agg for f in u] == pytest.approx([1.0, 0.0, 0.5])
    assert stats.drift == [] and stats.bytes == [[8, 8, 8]]


# ----------------------------------------------------------------------------- traffic


def test_allgather_traffic() -> None:
    assert allgather_traffic([3, 5, 7]) == [(3, 12), (5, 10), (7, 8)]
    assert allgather_traffic([4]) == [(4, 0)]


def test_traffic_log_summaries_by_hand() -> None:
    log = TrafficLog(steps=2, workers=2)
    log.add_allgather(0, [10, 30], [8, 28])
    log.add_allgather(1, [20, 20], [18, 18])
    log.add("setup:weights", 0, 1, 0, 100, None)  # one-time: left out of the per-worker means
    s = log.summary()
    assert list(s) == ["allgather", "setup:weights"]
    assert s["allgather"]["sent_mean"] == 20.0 and s["allgather"]["received_mean"] == 20.0
    assert s["allgather"]["sent_max"] == 30
    assert s["allgather"]["per_step_sent"] == [20.0, 20.0]
    assert s["allgather"]["per_step_sent_body"] == [18.0, 18.0]
    assert s["setup:weights"]["per_step_sent_body"] is None  # the protocol did not say: no body-only numbers
    assert log.mean_sent() == 20.0
    assert log.by_worker(range(0, 2)) == {"sent_by_worker": [15.0, 25.0], "received_by_worker": [25.0, 15.0]}
    rows = log.windows([Window("a", 0, 0), Window("b", 1, 5)])  # the last window is clipped to the stream
    assert rows == [{"name": "a", "first": 0, "last": 0, "sent_by_worker": [10.0, 30.0], "received_by_worker": [30.0, 10.0]},
                    {"name": "b", "first": 1, "last": 5, "sent_by_worker": [20.0, 20.0], "received_by_worker": [20.0, 20.0]}]


def test_traffic_body_unknown_once_is_unknown_for_the_step() -> None:
    log = TrafficLog(steps=1, workers=1)
    log.add("p", 0, 0, 5, 0, None)
    log.add("p", 0, 0, 5, 0, 3)
    assert log.rows["p"] == [[10, 0, -1]]
    assert log.summary()["p"]["per_step_sent_body"] is None


# ----------------------------------------------------------------------------- summaries


def test_finite_mean_skips_none_and_non_finite() -> None:
    assert finite_mean([1.0, None, math.inf, 3.0, math.nan]) == 2.0
    assert finite_mean([None, math.inf]) is None


def test_fidelity_summary_by_hand() -> None:
    # unit 0: x = (3, 4), sent (3, 0): q = 16/25; unit 1: x = (0, 1) sent exactly: q = 0; one step
    per_unit = [[fidelity(vec(3, 4), [vec(3, 0)])], [fidelity(vec(0, 1), [vec(0, 1)])]]
    s = fidelity_summary(per_unit, repeats=1, reference="gradient", unbiased=False)
    assert s["q"]["mean"] == pytest.approx((16 / 25) / 2)  # mean over tensors
    assert s["q"]["worst"] == pytest.approx(16 / 25)
    assert s["q"]["model"] == pytest.approx(16 / 26)  # pooled: energy-weighted over the whole model
    assert s["alpha"]["worst"] == pytest.approx(1 - 16 / 25)
    assert s["cosine"]["worst"] == pytest.approx(3 / 5)
    assert s["omega_hat"] is None  # biased: q is not ω
    assert s["q_samples"] == pytest.approx([16 / 25, 0.0])
    assert fidelity_summary(per_unit, 1, "gradient", unbiased=True)["omega_hat"]["model"] == pytest.approx(16 / 26)


def test_unit_and_size_summaries() -> None:
    row = unit_summary("w", 4, [10, 14], [fidelity(vec(3, 4, 0, 0), [vec(3, 0, 0, 0)]), fidelity(vec(3, 4, 0, 0), [vec(3, 4, 0, 0)])])
    assert row["wire_bytes"] == 12.0 and row["ratio"] == pytest.approx(16 / 12)
    assert row["q"] == pytest.approx(8 / 25)
    size = size_summary(100, [[100, 140], [20, 20]], traffic_sent=200.0)  # two units, two steps
    assert size["wire_bytes"] == 140.0  # worker 0's bytes per step
    assert size["ratio"] == pytest.approx(400 / 140)
    assert size["bits_per_element"] == pytest.approx(8 * 140 / 100)
    assert size["traffic_ratio"] == 2.0


def test_timing_summary() -> None:
    """Per-round x-copy with its spread, throughputs, and compress held against the card's traffic bound."""
    policy = TimingPolicy()
    timed = Interleaved(copy=[1.0, 2.0, 1.0], kernels={"compress": [2.0, 4.0, 4.0], "decompress": [0.1, 0.2, 0.1]}, warmup=1,
                        stopped="budget", load_per_core=0.2)
    s = timing_summary(1000, "cpu", 2, timed, traffic_bytes=8.0, policy=policy)
    assert s["compress"]["median_s"] == 4.0 and s["compress"]["gbps"] == pytest.approx(4000 / 4.0 / 1e9)
    assert s["compress_x_copy"]["samples"] == [2.0, 2.0, 4.0] and s["compress_x_copy"]["median"] == 2.0
    assert s["compress_x_copy"]["iqr"] == pytest.approx(1.0) and s["compress_x_copy"]["flags"] == [UNSTABLE]  # IQR = 50% of the median
    assert s["copy_fraction_compress"] == pytest.approx(0.5)  # older readers: 1 / median x-copy
    assert s["traffic_bound_x_copy"] == 1.0 and s["rounds"] == 3 and s["stopped"] == "budget" and s["policy"]["budget_s"] == 1.0
    # decompress at 0.1x a copy is no traffic-bound breach: the card's bound is compress's
    assert BEATS_BOUND not in s["decompress_x_copy"]["flags"] and TOO_SHORT not in s["decompress_x_copy"]["flags"]
    fast = timing_summary(1000, "cpu", 2, Interleaved([1.0] * 3, {"compress": [0.1] * 3, "decompress": [1.0] * 3}, 1, "stable", None),
                          traffic_bytes=8.0, policy=policy)
    assert fast["compress_x_copy"]["flags"] == [BEATS_BOUND]


@pytest.fixture
def tiny_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """A last-level cache of one byte: every copy in these tests is too large for the caches (pooling applies)."""
    monkeypatch.setattr(copy_baseline, "last_level_cache_bytes", lambda: 1)


def test_pool_copy_baseline_holds_every_case_against_the_sources_median_copy(tiny_cache: None) -> None:
    """Cases of one source share one copy baseline: the median of every case's copy rounds."""
    policy = TimingPolicy(min_rounds=3)
    fast_copy = timing_summary(1000, "cpu", 2, Interleaved([0.8] * 4, {"compress": [8.0, 8.1, 7.9, 8.0], "decompress": [1.0] * 4}, 1,
                                                           "stable", 0.2), traffic_bytes=8.0, policy=policy)
    usual = [timing_summary(1000, "cpu", 2, Interleaved([1.0] * 4, {"compress": [2.0] * 4, "decompress": [1.0] * 4}, 1, "stable", 0.2),
                            traffic_bytes=8.0, policy=policy) for _ in range(2)]
    assert fast_copy["compress_x_copy"]["median"] == pytest.approx(10.0) and fast_copy["baseline"] == "round"
    pool_copy_baseline([fast_copy, *usual])
    # the pooled copy is 1.0 (8 of 12 rounds): the case whose own copy ran 20% fast is no longer 25% slower for it
    assert fast_copy["baseline"] == "pooled" and fast_copy["pooled_copy_s"] == 1.0 and fast_copy["pooled_copy_rounds"] == 12
    assert fast_copy["compress_x_copy"]["median"] == pytest.approx(8.0)
    assert fast_copy["copy_off_pooled"] == pytest.approx(-0.2)
    # its copy ran 20% off the run's, but a kernel at 8x its traffic bound owes an eighth of its time to memory
    # traffic: the drift moves it by 2.5%, under copy_drift (15%), so it is not flagged
    assert fast_copy["compress_baseline"] == "pooled" and fast_copy["compress_x_copy"]["flags"] == []
    assert fast_copy["compress_x_round_copy"]["median"] == pytest.approx(10.0)  # the per-round view is kept
    assert fast_copy["copy_fraction_compress"] == pytest.approx(1 / 8.0)
    # usual's compress, at 2x its bound, is memory-bound: its own rounds' copy stays its baseline
    assert usual[0]["compress_baseline"] == "round" and usual[0]["compress_x_copy"]["median"] == pytest.approx(2.0)
    # a decompress writes at least half a copy's traffic: at 1x its copy (2x that) usual's is memory-bound, at 1.25x
    # fast_copy's is not, and goes on the pooled copy
    assert usual[0]["decompress_baseline"] == "round" and usual[0]["decompress_x_copy"]["median"] == pytest.approx(1.0)
    assert fast_copy["decompress_baseline"] == "pooled" and fast_copy["decompress_x_copy"]["median"] == pytest.approx(1.0)


def _case(copy_s: float, compress_s: float, traffic_bytes: float | None, policy: TimingPolicy) -> dict[str, Any]:
    return timing_summary(1000, "cpu", 2, Interleaved([copy_s] * 4, {"compress": [compress_s] * 4, "decompress": [copy_s] * 4},
                                                      1, "stable", 0.2), traffic_bytes=traffic_bytes, policy=policy)


def test_pool_copy_baseline_keeps_a_memory_bound_kernel_on_its_own_rounds_copy(tiny_cache: None) -> None:
    """A kernel that is itself a copy moves with the copy beside it: the pooled copy would move its ×copy instead."""
    policy = TimingPolicy(min_rounds=3)
    fast_state = _case(0.8, 0.96, 8.0, policy)  # 1.2x its own copy, run while the copy ran 20% fast
    others = [_case(1.0, 1.2, 8.0, policy), _case(1.0, 10.0, 8.0, policy)]
    pool_copy_baseline([fast_state, *others])
    assert fast_state["compress_baseline"] == "round" and fast_state["compress_x_copy"]["median"] == pytest.approx(1.2)
    assert fast_state["compress_x_copy"]["flags"] == []  # no drift flag: its baseline ran beside it
    assert others[0]["compress_x_copy"]["median"] == pytest.approx(1.2)
    assert others[1]["compress_baseline"] == "pooled"


def test_pool_copy_baseline_flags_a_drift_that_could_move_the_kernel(tiny_cache: None) -> None:
    """Drift × the share of the kernel's time its traffic explains over copy_drift: flagged; no declared bound: all of it."""
    policy = TimingPolicy(min_rounds=3)
    cases = [_case(0.6, 1.5, 8.0, policy),  # 2.5x its own copy (compute-bound), 1.5x the pooled: share 2/3, drift 40%
             _case(0.8, 4.0, None, policy),  # no bound declared: a 20% drift flags it
             _case(1.0, 3.0, 8.0, policy), _case(1.0, 3.0, 8.0, policy), _case(1.0, 3.0, 8.0, policy)]
    pool_copy_baseline(cases)
    assert cases[0]["compress_baseline"] == "pooled" and cases[0]["copy_off_pooled"] == pytest.approx(-0.4)
    assert cases[0]["compress_x_copy"]["flags"] == [UNSTABLE]  # 0.4 x (1 / 1.5) = 27% > 15%
    assert cases[1]["compress_x_copy"]["flags"] == [UNSTABLE]
    assert cases[2]["compress_x_copy"]["flags"] == []


def test_pool_copy_baseline_flags_a_kernel_whose_own_median_is_not_pinned_down(tiny_cache: None) -> None:
    """Against a pooled copy the per-round ratio no longer cancels load: the kernel's own rounds must fix its median."""
    policy = TimingPolicy(min_rounds=3)
    noisy = timing_summary(1000, "cpu", 2, Interleaved([1.0, 2.0, 1.0, 3.0, 1.0], {"compress": [1.0, 2.0, 1.0, 3.0, 1.0],
                                                                                    "decompress": [1.0] * 5}, 1, "stable", 0.2),
                           traffic_bytes=None, policy=policy)
    assert noisy["compress_x_copy"]["flags"] == []  # per round: the kernel and its copy moved together
    steady = timing_summary(1000, "cpu", 2, Interleaved([1.0] * 5, {"compress": [1.0] * 5, "decompress": [1.0] * 5}, 1, "stable", 0.2),
                            traffic_bytes=None, policy=policy)
    pool_copy_baseline([noisy, steady])
    assert noisy["compress_x_copy"]["flags"] == [UNSTABLE] and steady["compress_x_copy"]["flags"] == []


def test_pool_copy_baseline_keeps_the_round_copy_where_the_caches_hold_the_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy the caches can hold runs at the speed the kernel beside it left them in: only its own round compares."""
    monkeypatch.setattr(copy_baseline, "last_level_cache_bytes", lambda: 16 << 20)
    policy = TimingPolicy(min_rounds=3)
    small = [timing_summary(1 << 20, "cpu", 2, Interleaved([c] * 3, {"compress": [2 * c] * 3, "decompress": [c] * 3}, 1, "stable", 0.2),
                            traffic_bytes=None, policy=policy) for c in (0.3e-3, 0.5e-3)]  # 8 MiB read + written < 4 x 16 MiB
    pool_copy_baseline(small)
    assert [t["baseline"] for t in small] == ["round", "round"] and [t["compress_x_copy"]["median"] for t in small] == [2.0, 2.0]
    big = [timing_summary(1 << 24, "cpu", 2, Interleaved([c] * 3, {"compress": [2 * c] * 3, "decompress": [c] * 3}, 1, "stable", 0.2),
                          traffic_bytes=None, policy=policy) for c in (8e-3, 10e-3)]  # 128 MiB: no cache holds it
    pool_copy_baseline(big)
    assert [t["baseline"] for t in big] == ["pooled", "pooled"]


def test_a_cache_resident_sources_copy_that_moved_is_recorded_and_said_under_its_table(monkeypatch: pytest.MonkeyPatch,
                                                                                         tmp_path: Path) -> None:
    """Issue 34 item 25: the quick suite's copy yardstick took 0.11-0.46 ms by case while its kernels repeated; its ×copy
    did not repeat (qsgd 3.07× then 5.84×) and nothing said so.  The spread is recorded and the caption says it."""
    monkeypatch.setattr(copy_baseline, "last_level_cache_bytes", lambda: 16 << 20)
    policy = TimingPolicy(min_rounds=3)

    def small(copies: Sequence[float]) -> list[dict[str, Any]]:
        return [timing_summary(1 << 20, "cpu", 2, Interleaved([c] * 3, {"compress": [1e-3] * 3, "decompress": [c] * 3}, 1,
                                                               "stable", 0.2), traffic_bytes=None, policy=policy) for c in copies]

    steady = small([0.30e-3, 0.33e-3])
    pool_copy_baseline(steady)
    assert [t["copy_spread"] for t in steady] == [pytest.approx(1.1)] * 2 and copy_baseline.COPY_SPREAD_LIMIT > 1.1
    moved = small([0.13e-3, 0.46e-3])
    pool_copy_baseline(moved)
    assert moved[0]["copy_spread"] == pytest.approx(0.46 / 0.13) and moved[0]["copy_range_s"] == [0.13e-3, 0.46e-3]
    assert [t["compress_x_copy"]["flags"] for t in moved] == [[], []]  # a source-level statement, not a flag on every row

    from gcbench.report.views import copy_caveat
    from gcbench.results.run_record import RunCase

    def cases(timings: list[dict[str, Any]]) -> list[RunCase]:
        return [RunCase.model_validate({"name": "c", "label": f"c{i}", "status": "ok", "timing": t}) for i, t in enumerate(timings)]

    assert copy_caveat(cases(steady)) == ""
    text = copy_caveat(cases(moved))
    assert "comp ×copy will not repeat run to run" in text and "0.13–0.46 ms across the cases" in text


def test_pool_copy_baseline_leaves_a_lone_case_alone() -> None:
    policy = TimingPolicy(min_rounds=3)
    one = timing_summary(1000, "cpu", 2, Interleaved([1.0] * 3, {"compress": [2.0] * 3, "decompress": [1.0] * 3}, 1, "stable", 0.2),
                         traffic_bytes=None, policy=policy)
    before = dict(one)
    pool_copy_baseline([one, None])  # a case without timing does not count
    assert one == before


# ----------------------------------------------------------------------------- run_case end to end


class HandSource(GradientSource):
    """Hand-written gradients: ``grads[step][worker]`` is the list of tensors of the layout."""

    def __init__(self, grads: Sequence[Sequence[Sequence[torch.Tensor]]]) -> None:
        self.grads = grads
        self.name = "hand"
        self.steps, self.workers = len(grads), len(grads[0])

    def layout(self) -> list[TensorSpec]:
        return [TensorSpec(f"t{i}", tuple(t.shape)) for i, t in enumerate(self.grads[0][0])]

    def gradients(self, step: int, worker: int) -> Mapping[str, torch.Tensor]:
        return {f"t{i}": t for i, t in enumerate(self.grads[step][worker])}


def _suite(**metrics: Any) -> Suite:
    return parse_suite({"name": "t", "seed": 5, "sources": [{"kind": "synthetic", "shapes": [[4]]}],
                        "compressors": [{"name": "none"}], "metrics": {"timing": False, **metrics}})


def _data(source: GradientSource) -> SourceData:
    return SourceData(source, make_units(source.layout(), "layer"), torch.device("cpu"), lambda *a: None)


def _synthetic(workers: int, steps: int, shapes: list[tuple[int, ...]]) -> SourceData:
    from gcbench.sources.synthetic import SyntheticSource

    return _data(SyntheticSource(shapes, workers=workers, steps=steps, seed=11))


def _run(name: str, data: SourceData, suite: Suite | None = None, windows: Sequence[Window] = (), **params: Any) -> dict[str, Any]:
    return run_case(CompressorSpec(name=name, label=name, params=params), data, suite or _suite(repeats=3), windows=windows)


def test_run_case_ef_drift_by_hand() -> None:
    rec = _run("topk", _data(HandSource([[[g]] for g in GRADS])), windows=[Window("a", 0, 0), Window("b", 1, 2)],
               density=0.25, error_feedback=True)
    assert rec["status"] == "ok" and rec["steps"] == 3 and rec["workers"] == 1
    assert rec["ef_drift"]["sum_drift"] == pytest.approx(EF_DRIFT)
    assert rec["ef_drift"]["residual_ratio"] == pytest.approx(RESIDUAL)
    # one worker: the aggregate is worker 0's message, so the aggregate drift is the EF drift
    assert rec["aggregate"]["sum_drift"] == pytest.approx(EF_DRIFT)
    # per-step q of the one-shot: ‖C_t − g_t‖² / ‖g_t‖²; C − g = (0, −1, 2, −.5), (−1, 1, −1, 0), (0, −1, −1, .5)
    assert rec["aggregate"]["per_step_q"] == pytest.approx([5.25 / 21.25, 3 / 11, 2.25 / 6])
    # window b restarts at step 1: Σ_{1..t} (C − g) = (−1, 1, −1, 0), then (−1, 0, −2, .5); Σ g = (1, 3, 1, 0), (1, 4, 2, 2)
    assert rec["aggregate"]["window_drift"] == pytest.approx([EF_DRIFT[0], math.sqrt(3 / 11), math.sqrt(5.25) / 5])
    assert [w["name"] for w in rec["windows"]] == ["a", "b"]
    assert rec["windows"][1]["sent_by_worker"] == [rec["size"]["wire_bytes"]]  # a fixed-size payload every step


def test_identity_loses_nothing_and_costs_only_its_header() -> None:
    data = _synthetic(workers=2, steps=2, shapes=[(6, 5), (7,)])
    rec = _run("none", data)
    assert rec["fidelity"]["q"]["mean"] == 0.0 and rec["fidelity"]["q"]["model"] == 0.0
    assert rec["fidelity"]["cosine"]["worst"] == pytest.approx(1.0)
    assert rec["aggregate"]["q"]["worst"] == 0.0
    assert rec["aggregate"]["sum_drift"] == [0.0, 0.0]
    assert rec["aggregate"]["per_step_cosine"] == pytest.approx([1.0, 1.0])
    assert rec["ef_drift"] is None  # stateless
    traffic = rec["traffic"]["allgather"]
    body = traffic["per_step_sent_body"][0]
    assert body == rec["size"]["dense_bytes"] == 4 * 37  # the body is the dense tensor
    header = rec["size"]["wire_bytes"] - body
    assert 0 < header < 64 * rec["units"]
    assert rec["size"]["ratio"] == pytest.approx(4 * 37 / (4 * 37 + header))


def test_a_compressor_that_sends_nothing_has_q_one() -> None:
    data = _synthetic(workers=2, steps=3, shapes=[(8, 4)])
    rec = _run("threshold", data, tau=1e9)  # no entry exceeds tau: nothing is sent, everything stays in the residual
    assert rec["fidelity"]["q"]["mean"] == 1.0 and rec["fidelity"]["q"]["model"] == 1.0
    assert rec["fidelity"]["delta"]["mean"] is None  # δ = 1/(1 − q) is infinite
    assert rec["aggregate"]["per_step_q"] == pytest.approx([1.0, 1.0, 1.0])
    assert rec["aggregate"]["per_step_cosine"] == [None, None, None]  # a zero aggregate has no direction
    assert rec["aggregate"]["sum_drift"] == pytest.approx([1.0, 1.0, 1.0])
    assert rec["ef_drift"]["sum_drift"] == pytest.approx([1.0, 1.0, 1.0])  # nothing of Σ g delivered
    # the residual is all of Σ g: ‖Σ_{s≤t} g_s‖ / ‖g_t‖ with worker 0's gradients
    g = [data.get(t, 0)[0].double() for t in range(3)]
    expected = [float(sum(g[: t + 1]).norm() / g[t].norm()) for t in range(3)]
    assert rec["ef_drift"]["residual_ratio"] == pytest.approx(expected)


@pytest.mark.parametrize("name", ["fp16", "qsgd", "terngrad"])
def test_bytes_and_counts_add_up_to_the_traffic(name: str) -> None:
    W, steps = 3, 2
    data = _synthetic(workers=W, steps=steps, shapes=[(16, 8), (5, 3), (9,)])
    rec = _run(name, data)
    assert (rec["workers"], rec["steps"], rec["units"]) == (W, steps, 3)
    assert len(rec["layers"]) == 3 and [r["name"] for r in rec["layers"]] == ["t0", "t1", "t2"]
    assert sum(r["numel"] for r in rec["layers"]) == rec["size"]["numel"] == 128 + 15 + 9
    assert sum(r["wire_bytes"] for r in rec["layers"]) == pytest.approx(rec["size"]["wire_bytes"])
    phases = rec["traffic"]
    assert rec["size"]["traffic_sent_bytes"] == pytest.approx(sum(p["sent_mean"] for p in phases.values()))
    gather = phases["allgather"]
    assert gather["received_mean"] == pytest.approx((W - 1) * gather["sent_mean"])  # everyone gets everyone else's payloads
    assert len(gather["per_step_sent"]) == steps
    assert gather["sent_mean"] == pytest.approx(sum(gather["per_step_sent"]) / steps)
    if name == "fp16":  # a fixed-size payload: every worker sends what worker 0 does
        assert gather["sent_mean"] == gather["sent_max"] == rec["size"]["wire_bytes"]
    if name == "terngrad":  # the paper's protocol: a shared scaler before the payloads
        assert list(phases) == ["scaler", "allgather"]


def test_stochastic_compressor_uses_the_suites_repeats() -> None:
    rec = _run("randomk", _synthetic(workers=2, steps=2, shapes=[(10, 10), (20,)]), _suite(repeats=4))
    assert rec["fidelity"]["repeats"] == 4
    assert len(rec["fidelity"]["q_samples"]) == 2 * 2 * 4  # units × steps × repeats
    assert rec["fidelity"]["bias2"]["se_mean"] is not None  # R ≥ 3: a jackknife error exists
    assert rec["fidelity"]["omega_hat"] is not None  # unbiased
    assert _run("fp16", _synthetic(1, 1, [(4,)]), _suite(repeats=4))["fidelity"]["repeats"] == 1  # deterministic


def test_one_shot_fidelity_only_on_its_first_steps_and_the_stream_on_every_step() -> None:
    data = _synthetic(workers=2, steps=5, shapes=[(10, 10), (20,)])
    rec = _run("randomk", data, _suite(repeats=3, fidelity_steps=2))
    assert len(rec["fidelity"]["q_samples"]) == 2 * 2 * 3  # units × one-shot steps × repeats
    stream = rec["stream"]
    assert stream["steps"] == 5 and len(stream["per_step_delivered"]) == 5 and len(stream["per_step_error"]) == 5
    assert stream["reference"] == "dense SGD update" and stream["momentum"] == 0.0
    assert len(stream["worker_delivered"]) == 2 and stream["worker_ci"]["n"] == 2
    assert stream["enough"] is True  # random-k keeps no state: the stream length does not decide
    assert len(rec["aggregate"]["per_step_q"]) == 5  # the aggregate is measured on every step
    assert len(rec["traffic"]["allgather"]["per_step_sent"]) == 5


def test_identity_delivers_the_whole_dense_update() -> None:
    suite = parse_suite({"name": "t", "seed": 5, "sources": [{"kind": "synthetic", "shapes": [[4]]}], "compressors": [{"name": "none"}],
                         "metrics": {"timing": False}, "optimizer": {"momentum": 0.9}})
    rec = _run("none", _synthetic(workers=3, steps=4, shapes=[(6, 5), (7,)]), suite)
    assert rec["stream"]["reference"] == "dense momentum-SGD update (m=0.9)"
    assert rec["stream"]["per_step_delivered"] == pytest.approx([1.0] * 4)
    assert rec["stream"]["per_step_error"] == [0.0] * 4  # the aggregate is bit for bit the true mean
    assert rec["stream"]["worker_delivered"] == pytest.approx([1.0] * 3)


def test_a_short_stream_of_a_stateful_case_is_not_enough() -> None:
    rec = _run("topk", _synthetic(workers=2, steps=3, shapes=[(10, 10)]), density=0.1, error_feedback=True)
    assert rec["stream"]["enough"] is False and rec["stream"]["min_steps"] == 10


def test_worker_view_where_the_protocol_aggregate_is_a_mean_of_contributions() -> None:
    data = _synthetic(workers=3, steps=2, shapes=[(16, 8)])
    tern = _run("terngrad", data)["stream"]  # shared scaler: the aggregate is the mean of the ternary tensors
    assert tern["worker_delivered"] is not None and len(tern["worker_delivered"]) == 3
    assert _run("onebit", data)["stream"]["worker_delivered"] is None  # the owners re-quantize the mean
    assert _run("powersgd", data)["stream"]["worker_delivered"] is None  # factors are all-reduced


def test_dgc_on_its_own_momentum_reference_is_not_filtered_twice() -> None:
    """DGC sends the momentum update itself: against the dense momentum-SGD update it delivers most of it,
    but against plain SGD's it overshoots (its Σ is about 1/(1 − m) times larger)."""
    data = _synthetic(workers=2, steps=6, shapes=[(32, 16)])

    def suite(m: float) -> Suite:
        return parse_suite({"name": "t", "seed": 5, "sources": [{"kind": "synthetic", "shapes": [[4]]}], "compressors": [{"name": "dgc"}],
                            "metrics": {"timing": False}, "optimizer": {"momentum": m}})

    dense = dict(density=1.0, min_dims=1, warmup_epochs=0)
    on_momentum = _run("dgc", data, suite(0.9), **dense)["stream"]
    on_sgd = _run("dgc", data, suite(0.0), **dense)["stream"]
    assert on_momentum["own_momentum"] is True
    assert on_momentum["delivered"] > 0.9
    assert on_sgd["delivered"] < on_momentum["delivered"]


# ----------------------------------------------------------------------------- run_suite


def test_a_failing_case_is_recorded_and_the_run_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cls = type(registry.create("signsgd"))

    def broken(self: Any, x: torch.Tensor, ref_state: dict[str, Any]) -> torch.Tensor:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cls, "reference_update", broken)
    suite = parse_suite({
        "name": "t", "seed": 0, "metrics": {"timing": False, "repeats": 2},
        "sources": [{"kind": "synthetic", "shapes": [[6, 4]], "workers": 1, "steps": 2}],
        "compressors": [{"name": "lgc"}, {"name": "signsgd"}, {"name": "none"}],
    })
    out = run_suite(suite, tmp_path)
    assert [r["status"] for r in out.records] == ["error", "error", "ok"]
    lgc, bug, ok = out.records
    assert "at least 2 workers" in lgc["error"] and "traceback" not in lgc  # a user error: one clear line
    assert bug["error"] == "RuntimeError: a bug" and "Traceback" in bug["traceback"]  # a bug keeps its traceback
    assert ok["fidelity"]["q"]["mean"] == 0.0
    assert out.failed == [lgc, bug]
    assert out.path is not None
    saved = load_run(out.path)
    assert saved.status == "complete-with-errors"
    assert [c.label for c in saved.cases] == ["lgc", "signsgd", "none"]


def test_a_run_holds_each_sources_cases_against_its_pooled_copy(tmp_path: Path, tiny_cache: None) -> None:
    """Two sources, two cases each: every timed case is re-based on its own source's copy rounds, on disk too."""
    suite = parse_suite({
        "name": "t", "seed": 0, "metrics": {"repeats": 2, "timing_repeats": 3, "timing_budget_s": 0.05},
        "sources": [{"kind": "synthetic", "shapes": [[64, 32]], "workers": 1, "steps": 1},
                    {"kind": "synthetic", "shapes": [[128, 64]], "workers": 1, "steps": 1}],
        "compressors": [{"name": "none"}, {"name": "topk"}],
    })
    out = run_suite(suite, tmp_path)
    saved = load_run(out.path)
    by_source: dict[str, list[Any]] = {}
    for case in saved.cases:
        by_source.setdefault(case.source.label, []).append(case.timing)
    assert len(by_source) == 2
    for timings in by_source.values():
        pooled = float(np.median([v for t in timings for v in t.copy_.samples_s]))
        for t in timings:
            assert t.baseline == "pooled" and t.pooled_copy_s == pytest.approx(pooled)
            assert t.compress_x_copy.median == pytest.approx(float(np.median(t.compress.samples_s)) / pooled)
            assert t.compress_x_round_copy is not None and t.compress_x_round_copy.samples


def test_every_timed_case_records_the_spread_between_processes_it_is_judged_with(tmp_path: Path, tiny_cache: None) -> None:
    """The built-in figure where this machine measured none; once a ``bench --processes`` of this machine is in the
    runs folder, its pooled spread and file, in every timed case, on disk (what compare's time interval adds)."""
    import json
    from datetime import UTC, datetime

    from gcbench.results.process_spread import BUILT_IN
    from gcbench.results.store import environment

    suite = parse_suite({
        "name": "t", "seed": 0, "metrics": {"repeats": 2, "timing_repeats": 3, "timing_budget_s": 0.05},
        "sources": [{"kind": "synthetic", "shapes": [[64, 32]], "workers": 1, "steps": 1}],
        "compressors": [{"name": "none"}, {"name": "topk"}],
    })
    first = load_run(run_suite(suite, tmp_path).path)
    assert [c.timing.process_spread.log_sd for c in first.cases] == [BUILT_IN.log_sd] * 2
    assert all(c.timing.process_spread.file is None for c in first.cases)
    bench = json.loads((Path(__file__).resolve().parents[1] / "golden" / "bench_small.json").read_text(encoding="utf-8"))
    bench.update(environment=environment("cpu"), created_utc=datetime.now(UTC).isoformat(), status="complete")
    logs = {"signsgd": [3.0, 3.3, 2.9, 3.1, 3.6], "topk": [10.0, 11.0, 12.5, 10.5, 11.5]}  # 4 cases × 2 kernels × 4 df
    for c in bench["cases"]:
        if not c.get("error"):
            c["x_copy"] = {k: {"median": 1.0, "process_medians": logs[c["compressor"]]} for k in ("compress", "decompress")}
    name = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-bench.json"
    (tmp_path / name).write_text(json.dumps(bench), encoding="utf-8")
    second = load_run(run_suite(suite, tmp_path).path)
    spreads = [c.timing.process_spread for c in second.cases]
    assert all(s.file == str(tmp_path / name) and s.df == 32 and s.timings == 8 for s in spreads)
    assert spreads[0].log_sd == pytest.approx(math.sqrt((np.var(np.log(logs["signsgd"]), ddof=1)
                                                         + np.var(np.log(logs["topk"]), ddof=1)) / 2))


# ----------------------------------------------------------------------------- non-finite output


#: float32 inputs near its max (uniform in ±1e37, then in ±3.4e38) and deep in its subnormals (±1e-40)
EXTREMES = [1e37, 3.4e38, 1e-40]


def _extreme_grads(scale: float, workers: int = 2, steps: int = 2) -> list[list[list[torch.Tensor]]]:
    gen = torch.Generator().manual_seed(3)
    return [[[(torch.rand(*shape, generator=gen) * 2 - 1) * scale for shape in ((64, 32), (40,))] for _ in range(workers)]
            for _ in range(steps)]


def _finite(v: Any) -> bool:
    return v is not None and math.isfinite(v)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("scale", EXTREMES, ids=["1e37", "3.4e38", "1e-40"])
@pytest.mark.parametrize("name", registry.names())
def test_every_compressor_near_float32s_limits_is_measured_flagged_or_failed_with_a_reason(name: str, scale: float) -> None:
    """Finite gradients in: the case has finite numbers, or is flagged ``saturated`` (a narrower float format), or fails
    with the reason; never an ``ok`` case whose every metric is empty."""
    data = _data(HandSource(_extreme_grads(scale)))
    try:
        rec = _run(name, data)
    except casemath.NonFiniteError as exc:
        assert str(exc).startswith(f"{name}: ") and "not finite" in str(exc)
        assert "float32" in str(exc)
        return
    assert rec["status"] == "ok"
    if rec["flags"].get("saturated"):
        assert getattr(registry.create(name), "wire_dtype", None) in (torch.float16, torch.bfloat16)
        return
    assert _finite(rec["fidelity"]["q"]["mean"]) and _finite(rec["fidelity"]["q"]["model"])
    assert _finite(rec["aggregate"]["q"]["model"])
    assert all(_finite(v) for v in rec["aggregate"]["sum_drift"])


@pytest.mark.parametrize("scale", [1e20, 1e37, 3.4e38])
def test_qsgd_near_float32s_max_quantizes_as_it_does_at_unit_scale(scale: float) -> None:
    """|g|·s overflowed float32 in the level and n·level in the decode (QSGD went ±inf at |g| ~ 1e37): the levels of
    finite input are the same at any scale, and the decoded tensor is finite."""
    grads = _extreme_grads(1.0, steps=1)  # one step: sums over steps of 3.4e38 would overflow the stream's float32 sums
    unit = _run("qsgd", _data(HandSource(grads)))
    big = _run("qsgd", _data(HandSource([[[t * scale for t in w] for w in s] for s in grads])))
    assert big["status"] == "ok" and "saturated" not in big["flags"]
    assert big["fidelity"]["q"]["mean"] == pytest.approx(unit["fidelity"]["q"]["mean"], rel=1e-3)


def test_fp16_saturation_is_a_flag_with_the_count_of_saturated_elements() -> None:
    g = [[[vec(1e5, 1.0, -7e4, 3.0)]], [[vec(2.0, -1e6, 0.5, 1.0)]]]  # 2, then 1 beyond fp16's 65504
    rec = _run("fp16", _data(HandSource(g)))
    assert rec["status"] == "ok" and rec["flags"]["saturated"] == 3
    assert _run("bf16", _data(HandSource(g)))["flags"].get("saturated") is None  # bf16 holds float32's range


def test_random_k_scaled_beyond_float32_fails_with_the_reason() -> None:
    """d/k·g is beyond float32 for |g| = 1e37 at density 1%: the format cannot hold it, so the case fails, saying why."""
    with pytest.raises(casemath.NonFiniteError, match=r"randomk: decompressed gradient is not finite .*'t0', step 0 worker 0"):
        _run("randomk", _data(HandSource(_extreme_grads(1e37))))


def test_a_run_records_a_non_finite_case_as_failed_and_goes_on(tmp_path: Path) -> None:
    suite = parse_suite({
        "name": "t", "seed": 0, "metrics": {"timing": False, "repeats": 2},
        "sources": [{"kind": "synthetic", "shapes": [[64, 32]], "workers": 1, "steps": 2, "scale": 1e37}],
        "compressors": [{"name": "randomk"}, {"name": "qsgd"}, {"name": "fp16"}],
    })
    out = run_suite(suite, tmp_path)
    randomk, qsgd, fp16 = out.records
    assert randomk["status"] == "error" and "decompressed gradient is not finite" in randomk["error"]
    assert "traceback" not in randomk  # a reason, not a bug
    assert qsgd["status"] == "ok" and _finite(qsgd["fidelity"]["q"]["mean"])
    assert fp16["status"] == "ok" and fp16["flags"]["saturated"] > 0
    assert load_run(out.path).status == "complete-with-errors"


def test_a_float64_trace_beyond_float32s_range_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    from gcbench.sources.trace import write_trace

    ok = torch.ones(8, dtype=torch.float64)
    huge = ok.clone()
    huge[3] = 1e300  # finite in float64, +inf in float32
    write_trace(HandSource([[[ok, ok]], [[ok, huge]]]), tmp_path / "tr", "hand", 0)
    suite = parse_suite({"name": "t", "seed": 0, "metrics": {"timing": False},
                         "sources": [{"kind": "trace", "path": str(tmp_path / "tr")}], "compressors": [{"name": "none"}]})
    out = run_suite(suite, tmp_path / "runs")
    (rec,) = out.records
    assert rec["status"] == "error"
    assert "'t1'" in rec["error"] and "step0001" in rec["error"] and "beyond float32's range" in rec["error"]
    assert load_run(out.path).status == "complete-with-errors"


def test_a_float64_gradient_beyond_float32s_range_is_named_in_a_bucket_too() -> None:
    ok = torch.ones(8, dtype=torch.float64)
    huge = ok.clone()
    huge[0] = -1e300
    src = HandSource([[[ok, huge]]])
    with pytest.raises(SourceError, match=r"gradient 't1' \(hand step 0 worker 0\) is float64 with 1 values beyond float32's range"):
        SourceData(src, make_units(src.layout(), "model"), torch.device("cpu"), lambda *a: None)


def test_check_decoded_counts_saturation_only_where_the_input_was_beyond_the_formats_max() -> None:
    x = vec(1e5, 2.0, -7e4, 3.0)
    assert casemath.check_decoded("c", "u", x, vec(1.0, 2.0, 3.0, 4.0), "step 0 worker 0") == 0
    assert casemath.check_decoded("c", "u", x, vec(math.inf, 2.0, -math.inf, 3.0), "step 0 worker 0", wire_max=65504.0) == 2
    with pytest.raises(casemath.NonFiniteError, match=r"c: decompressed gradient is not finite \(0 NaN and 1 ±Inf of 4 elements "
                                                      r"of 'u', step 0 worker 0\) though its input is finite \(max \|g\| = 1e\+05\)"):
        casemath.check_decoded("c", "u", x, vec(1.0, math.inf, 0.0, 0.0), "step 0 worker 0", wire_max=65504.0)  # 2.0 fits fp16
    with pytest.raises(casemath.NonFiniteError, match="1 NaN"):
        casemath.check_decoded("c", "u", x, vec(math.nan, 2.0, 0.0, 0.0), "step 0 worker 0", wire_max=65504.0)


def test_check_numbers_refuses_nan_and_inf_but_not_undefined() -> None:
    casemath.check_numbers("c", [0.5, None], "error", lambda: 1.0)
    for bad in (math.nan, math.inf):
        with pytest.raises(casemath.NonFiniteError, match=r"c: the error is not finite .*max \|g\| = 3e\+38"):
            casemath.check_numbers("c", [0.5, bad], "error", lambda: 3e38)


def test_a_run_and_its_table_do_not_import_scipy_stats() -> None:
    """Issue 34 item 25: scipy.stats cost 1-2.5 s of every quick run's start (the table's z-test imported it at the top)."""
    import subprocess
    import sys

    code = ("import sys, gcbench.measure.runner, gcbench.report.terminal; "
            "from gcbench.measure.fidelity import mean_ci; from gcbench.core.intervals import mean_interval; "
            "mean_ci([1.0, 2.0, 4.0]); mean_interval([1.0, 2.0, 4.0]); print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"
