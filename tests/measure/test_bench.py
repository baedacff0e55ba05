"""The kernel benchmark harness: sizes, targets, same-process copy roofline, isolation."""

from __future__ import annotations

import statistics

import pytest

from gcbench.core.errors import GcbenchError
from gcbench.measure.bench import bench_case, matrix_shape, parse_size, run_bench
from gcbench.measure.bench_verdict import kernel_verdict, target_of


def test_parse_size() -> None:
    assert parse_size("1K") == 1000 and parse_size("25.6M") == 25_600_000 and parse_size("100") == 100
    with pytest.raises(GcbenchError):
        parse_size("lots")


def test_matrix_shape_keeps_numel() -> None:
    for n in (1, 7, 1000, 25_600_000, 1_000_003):
        shape = matrix_shape(n)
        prod = 1
        for s in shape:
            prod *= s
        assert prod == n


@pytest.mark.parametrize("text", ["1e300", "3G", "2147483649", "inf", "nan"])
def test_parse_size_refuses_sizes_no_tensor_can_have(text: str) -> None:
    # 1e300 hung in matrix_shape's divisor search up to the 1,800 s subprocess timeout
    with pytest.raises(GcbenchError, match=r"must be 1 to 2,147,483,648 \(2\*\*31\) elements"):
        parse_size(text)
    assert parse_size("2147483648") == 2**31


def test_matrix_shape_of_a_large_prime_is_quick() -> None:
    assert matrix_shape(2**31 - 1) == (1, 2**31 - 1)  # a prime: trial division to sqrt(2**31), ~23,000 steps
    assert matrix_shape(25_600_000) == (4000, 6400) and matrix_shape(2**31) == (32768, 65536)
    # the old search stepped down one row at a time from ~1.2e9 here: a hang, now one error
    with pytest.raises(GcbenchError, match="must be 0 to 2,147,483,648"):
        matrix_shape(2**61 - 1)


def test_bench_case_records_same_process_ratios() -> None:
    rec = bench_case("signsgd", numel=20_000, repeats=3, warmup=1, threads=1)
    # --rounds is the least number of rounds: calibration adds rounds until the median is pinned down
    assert len(rec["copy"]["samples_s"]) == len(rec["compress"]["samples_s"]) == rec["x_copy"]["compress"]["rounds"] >= 3
    per_round = [c / k for c, k in zip(rec["compress"]["samples_s"], rec["copy"]["samples_s"], strict=True)]
    assert rec["compress_x_copy"] == pytest.approx(statistics.median(per_round))  # copy and compress of the same round
    assert rec["x_copy"]["compress"]["samples"] == pytest.approx(per_round) and isinstance(rec["x_copy"]["decompress"]["flags"], list)
    assert rec["ratio"] > 30 and rec["numel"] == 20_000


def test_bench_case_records_the_traffic_bound() -> None:
    from gcbench.compressors import registry
    from gcbench.results.bench_record import BenchCase

    rec = bench_case("signsgd", numel=20_000, repeats=2, warmup=0, threads=1, reference=False)
    bound = registry.create("signsgd").info.traffic_bytes / 8
    assert rec["traffic_bound"] == pytest.approx(bound) and 0 < bound
    assert rec["x_bound"] == pytest.approx(rec["compress_x_copy"] / bound)
    case = BenchCase.model_validate(rec)  # the typed record keeps both, and --json writes them
    assert case.x_bound == pytest.approx(rec["x_bound"]) and case.to_json_dict()["traffic_bound"] == pytest.approx(bound)


def test_topk_row_compares_with_torch_topk() -> None:
    rec = bench_case("topk", numel=50_000, repeats=2, warmup=0, threads=1)
    assert set(rec["vs_torch_topk"]) == {"0.001", "0.01"}
    target, mark = kernel_verdict(rec)
    assert "torch.topk" in target and mark in ("pass", "short", "flagged")  # flagged: the machine was busy


def test_verdict_uses_targets() -> None:
    rec = {"compressor": "signsgd", "compress_x_copy": 1.5, "decompress_x_copy": 1.0}
    assert kernel_verdict(rec)[1] == "pass"
    assert kernel_verdict({**rec, "compress_x_copy": 2.5})[1] == "short"
    assert kernel_verdict({**rec, "decompress_x_copy": 3.5})[1] == "short"
    assert kernel_verdict({"compressor": "none", "compress_x_copy": 1, "decompress_x_copy": 1})[1] == "—"
    assert target_of("dgc").compress_x_copy == 8.0  # read from DGC's card
    slow_select = {"compressor": "dgc", "compress_x_copy": 7.0, "decompress_x_copy": 1.0, "vs_torch_topk": {"0.001": {"speedup": 4.0}}}
    assert kernel_verdict(slow_select) == ("≤ 8× copy, 5× torch.topk @0.001", "short")  # 4× torch.topk misses the card's 5×
    assert target_of("not_installed_here") is None


def test_every_target_and_topk_row_comes_from_a_card() -> None:
    from gcbench.compressors import registry

    with_target = {c.name for c in registry.infos() if c.target is not None}
    assert {"signsgd", "dgc", "topk", "adacomp"} <= with_target and "none" not in with_target
    rec = bench_case("topk", numel=4096, repeats=1, warmup=0, threads=1, reference=False)
    assert sorted(rec["vs_torch_topk"]) == ["0.001", "0.01"]  # the densities on topk's card


def test_run_bench_isolated_records_failures_and_goes_on() -> None:
    recs = run_bench(["signsgd"], [5000], repeats=2, warmup=0, threads=1, isolate=True)
    assert recs[0]["compressor"] == "signsgd" and "compress_x_copy" in recs[0]
    with pytest.raises(GcbenchError, match="did you mean"):
        run_bench(["signsdg"], [10])


def test_specs_with_parameters_are_benchmarked_and_labelled() -> None:
    recs = run_bench(["topk:density=0.1", "topk"], [20_000], repeats=2, warmup=0, threads=1, isolate=False)
    spec, plain = recs
    assert spec["label"] == "topk:density=0.1" and spec["params"]["density"] == 0.1
    assert plain["label"] == "topk" and plain["params"]["density"] == 0.01
    # the parameter reached the compressor: ten times the kept entries, about a tenth of the ratio
    assert plain["ratio"] / spec["ratio"] == pytest.approx(10, rel=0.1)
    with pytest.raises(GcbenchError, match="density"):
        run_bench(["topk:density=5"], [10])  # a bad parameter fails before any work


def test_bench_comparison_matches_rows_by_label() -> None:
    from gcbench.results.run_diff import compare_runs

    recs = run_bench(["topk:density=0.1", "topk"], [20_000], repeats=2, warmup=0, threads=1, isolate=False)
    env = {"cpu_model": "x", "cpu_count": 2, "torch_threads": 1}
    base = {"schema_version": 1, "kind": "bench", "run_id": "b", "environment": env, "cases": recs}
    new = {"schema_version": 1, "kind": "bench", "run_id": "n", "environment": env, "cases": [recs[1]]}
    cmp = compare_runs(base, new)
    cases = {(r.case, r.verdict) for r in cmp.rows if r.metric == ""}
    assert ("topk:density=0.1", "missing") in cases  # not matched to the plain topk row
    assert {r.case for r in cmp.rows if r.metric} == {"topk"}


def test_bench_model_times_a_whole_step_of_the_model() -> None:
    from gcbench.compressors import registry
    from gcbench.measure.bench import model_tensors
    from gcbench.results.bench_record import BenchCase
    from gcbench.sources.zoo import layer_shapes

    layout = layer_shapes("mlp")
    (rec,) = run_bench(["topk"], [123], repeats=2, warmup=0, threads=1, isolate=False, model="mlp")
    assert rec["model"] == "mlp" and rec["tensors"] == len(layout) and rec["numel"] == sum(t.numel for t in layout)
    assert len(rec["copy"]["samples_s"]) == len(rec["compress"]["samples_s"]) >= 2  # the sizes list is not used
    xs = model_tensors("mlp")
    assert [tuple(x.shape) for x in xs] == [t.shape for t in layout]
    comp = registry.create("topk")
    sent = sum(comp.compress(x, comp.init_state(i)).nbytes for i, x in enumerate(xs))
    assert rec["ratio"] == pytest.approx(4 * rec["numel"] / sent)  # every tensor of the step, each its own payload
    case = BenchCase.model_validate(rec)
    assert case.model == "mlp" and case.tensors == len(layout)


def test_bench_model_of_an_unknown_model_fails_before_any_work() -> None:
    with pytest.raises(GcbenchError, match="did you mean"):
        run_bench(["topk"], [1], model="resnt50")


# ----------------------------------------------------------------------------- issue 34 item 24: flags that mean something


class _Clock:
    """A clock that moves only when a timed function says how long it took (no wall time: deterministic)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def takes(self, durations: list[float]):
        calls = {"n": 0}

        def fn() -> None:
            self.now += durations[calls["n"] % len(durations)]
            calls["n"] += 1

        return fn


class _Meter:
    """A :class:`CpuMeter` with a fixed answer: other processes' share of the CPU while timing."""

    def __init__(self, share: float | None) -> None:
        self.value = share

    def start(self) -> _Meter:
        return self

    def share(self) -> float | None:
        return self.value


def _bench_rounds(ratios: list[float], policy, foreign: float | None = 0.02, load: float | None = 0.3):
    """A bench kernel timed against a copy of 8 ms whose per-round ×copy cycles through ``ratios``, under ``policy``."""
    from gcbench.measure.bench import kernel_x_copy
    from gcbench.measure.timing import time_interleaved

    clock = _Clock()
    timed = time_interleaved(clock.takes([0.008]), {"compress": clock.takes([0.008 * r for r in ratios])}, policy,
                             clock=clock, load=lambda: load, meter=_Meter(foreign))  # type: ignore[arg-type]
    return kernel_x_copy(timed, "compress", policy)


# a quiet machine: ±3% jitter and, one round in seven, a round 25% slow (a page-fault storm, a timer tick)
QUIET_ROUNDS = [3.40, 3.31, 3.45, 3.38, 4.25, 3.36, 3.42]
# a loaded machine shares the cores: a bimodal ×copy, rounds 1.0× or 1.6× as a neighbour comes and goes
BIMODAL_ROUNDS = [3.4, 5.4, 3.4, 5.4, 5.4, 3.4]


def test_five_fixed_rounds_flag_a_quiet_kernel_for_one_slow_round() -> None:
    """The old rule (exactly --rounds rounds): the median's CI over 5 rounds is their whole range, so one slow round flags."""
    from gcbench.measure.timing import TimingPolicy

    fixed = TimingPolicy(warmup=1, min_rounds=5, max_rounds=5, budget_s=1e9)
    assert _bench_rounds(QUIET_ROUNDS, fixed)["flags"] == ["unstable"]


def test_bench_calibration_does_not_flag_a_quiet_kernel() -> None:
    from gcbench.measure.bench import BENCH_MAX_ROUNDS, bench_policy

    block = _bench_rounds(QUIET_ROUNDS, bench_policy(5, 1))
    assert block["flags"] == [] and block["reasons"] == {}
    assert block["stopped"] == "stable" and 5 < block["rounds"] < BENCH_MAX_ROUNDS  # more rounds pinned the median down
    assert block["median"] == pytest.approx(3.40, rel=0.02)


def test_bench_flags_a_bimodal_kernel_and_says_why() -> None:
    from gcbench.measure.bench import BENCH_MAX_ROUNDS, bench_policy

    block = _bench_rounds(BIMODAL_ROUNDS, bench_policy(5, 1))
    assert block["flags"] == ["unstable"] and block["rounds"] == BENCH_MAX_ROUNDS  # more rounds could not pin it down
    assert f"after {BENCH_MAX_ROUNDS} rounds" in block["reasons"]["unstable"] and "over ±10%" in block["reasons"]["unstable"]


def test_other_processes_flag_a_steady_kernel_but_its_own_threads_do_not() -> None:
    """Load is what other processes took of the CPU while timing; the 1-minute load average counts the bench's own threads."""
    from gcbench.measure.bench import bench_policy

    steady = [3.40, 3.38, 3.42]
    # the bench's own two threads on two cores put the load average at ~1.0 per core: not a reason to flag
    assert _bench_rounds(steady, bench_policy(5, 1), foreign=0.03, load=1.3)["flags"] == []
    loaded = _bench_rounds(steady, bench_policy(5, 1), foreign=0.6, load=0.2)
    assert loaded["flags"] == ["unstable"] and "other processes took 60%" in loaded["reasons"]["unstable"]
    # where the CPU share cannot be read, the load average still judges
    assert _bench_rounds(steady, bench_policy(5, 1), foreign=None, load=1.3)["flags"] == ["unstable"]


def test_cpu_meter_takes_this_process_off_the_machines_busy_time() -> None:
    from gcbench.measure.timing import CpuMeter

    stat = iter([(100.0, 200.0), (104.0, 204.0)])  # 4 CPU-seconds busy out of 4 (2 CPUs, 2 s): the machine was full
    own = iter([10.0, 14.0])  # … all of it this process's own threads
    assert CpuMeter(read=lambda: next(stat), own=lambda: next(own), cpus=2).start().share() == 0.0
    stat = iter([(100.0, 200.0), (104.0, 204.0)])
    own = iter([10.0, 12.0])  # two of the four were someone else's
    assert CpuMeter(read=lambda: next(stat), own=lambda: next(own), cpus=2).start().share() == pytest.approx(0.5)
    # 2 CPUs for 50 ms, 5 ticks each at 100 Hz: a 50% share there is tick noise as often as load, so none is given
    stat = iter([(100.0, 200.0), (100.05, 200.1)])
    own = iter([10.0, 10.0])
    assert CpuMeter(read=lambda: next(stat), own=lambda: next(own), cpus=2, tick_s=0.01).start().share() is None
    stat = iter([(100.0, 200.0), (100.12, 200.24)])  # 120 ms: twelve ticks each, measured
    own = iter([10.0, 10.0])
    assert CpuMeter(read=lambda: next(stat), own=lambda: next(own), cpus=2, tick_s=0.01).start().share() == pytest.approx(0.5)
    assert CpuMeter(read=lambda: None).start().share() is None  # no /proc/stat: not measured
    live = CpuMeter().start()
    sum(i * i for i in range(200_000))
    share = live.share()
    assert share is None or 0.0 <= share <= 1.0


def test_bench_table_says_what_triggered_each_flag() -> None:
    from gcbench.report.views import flag_reason_lines
    from gcbench.results.bench_record import BenchCase

    block = {"median": 3.1, "samples": [3.1] * 6, "flags": ["unstable"],
             "reasons": {"unstable": "the median's 95% CI is ±14% of it (over ±10%) after 40 rounds"}}
    case = BenchCase.model_validate({"compressor": "sdagc", "label": "sdagc", "numel": 1000, "compress_x_copy": 3.1,
                                     "decompress_x_copy": 0.7, "x_copy": {"compress": block, "decompress": {"median": 0.7, "flags": []}}})
    assert flag_reason_lines([case]) == ["sdagc compress — unstable: the median's 95% CI is ±14% of it (over ±10%) after 40 rounds."]


def test_garbage_collection_before_timing_scans_only_what_came_after_the_first() -> None:
    """The quick suite spent a full collection (0.1-1 s over ~260,000 long-lived objects) before every case's timing."""
    import gc

    from gcbench.measure.timing import collect_garbage

    collect_garbage()
    assert gc.get_freeze_count() > 0  # the long-lived objects are out of later collections' way

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    import weakref

    ref = weakref.ref(Cycle())
    collect_garbage()
    assert ref() is None  # garbage made after the freeze is still collected


def test_a_flagged_timing_is_neither_pass_nor_short() -> None:
    rec = {"compressor": "signsgd", "compress_x_copy": 2.5, "decompress_x_copy": 1.0,
           "x_copy": {"compress": {"flags": ["unstable"]}, "decompress": {"flags": []}}}
    assert kernel_verdict(rec)[1] == "flagged"  # 2.5x over the 2x target, but the number is not a speed
    assert kernel_verdict({**rec, "x_copy": {"compress": {"flags": []}, "decompress": {"flags": []}}})[1] == "short"


def test_max_rounds_caps_calibration_in_the_isolated_process_too() -> None:
    (rec,) = run_bench(["signsgd"], [5000], repeats=2, warmup=0, threads=1, isolate=True, max_rounds=4)
    assert 2 <= len(rec["compress"]["samples_s"]) <= 4 and rec["policy"]["max_rounds"] == 4


def test_cache_resident_sizes_record_how_far_the_copy_moved_between_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_copy_spread: with a 32 MiB last-level cache, 1M elements (8 MB read + write) are cache-resident and 25.6M
    are not; the resident cases of one size get their copies' spread, a lone one only its count; failed cases, other
    devices and ``--model`` cases are left alone."""
    from gcbench.measure import copy_baseline

    monkeypatch.setattr(copy_baseline, "last_level_cache_bytes", lambda: 32 << 20)

    def rec(name: str, numel: int, copy_ms: float, **kw: object) -> dict[str, object]:
        return {"compressor": name, "numel": numel, "threads": 2, "device": "cpu", "copy": {"median_s": copy_ms / 1e3}, **kw}

    recs = [rec("topk", 1_000_000, 0.1), rec("qsgd", 1_000_000, 0.29), rec("topk", 25_600_000, 2.4),
            rec("qsgd", 25_600_000, 4.0), rec("sign", 100_000, 0.01), rec("bad", 1_000_000, 9.0, error="boom"),
            rec("gpu", 1_000_000, 9.0, device="cuda"), rec("m", 1_000_000, 9.0, model="resnet18")]
    copy_baseline.bench_copy_spread(recs)
    one, two, big, _, lone, bad, gpu, model = recs
    assert one["copy_cache_resident"] and one["copy_cases"] == 2 and one["copy_range_s"] == [0.1e-3, 0.29e-3]
    assert one["copy_spread"] == pytest.approx(2.9) and two["copy_spread"] == one["copy_spread"]
    assert "copy_cache_resident" not in big  # 205 MB of traffic: not held by a 32 MiB cache
    assert lone["copy_cases"] == 1 and "copy_spread" not in lone
    assert not any("copy_cache_resident" in r for r in (bad, gpu, model))
