"""gcbench advise: its inputs (bench --model files, fidelity of a run), the prediction and ranking, the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.compressors import registry
from gcbench.core.errors import ResultsError
from gcbench.measure.bench import bench_to_file, model_tensors
from gcbench.measure.runner import run_suite
from gcbench.measure.suite import parse_suite
from gcbench.predict import advice_model as pmodel
from gcbench.predict import advise as adv
from gcbench.predict import advise_text as ptext
from gcbench.predict import compute_time as ctime
from gcbench.predict import decision
from gcbench.predict import inputs as inp
from gcbench.predict import network as pnet
from gcbench.predict import step as pstep
from gcbench.predict import step_kernels as sk
from gcbench.predict.network import Network, collective_seconds
from gcbench.results.calibration import ring_allreduce
from gcbench.results.store import load_run

runner = CliRunner()


@pytest.fixture(scope="module")
def mlp_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    outcome = bench_to_file(["none", "topk", "fp16"], [], out, repeats=2, warmup=0, threads=1, isolate=False, model="mlp")
    assert outcome.path is not None
    return outcome.path


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    suite = parse_suite({"name": "adv", "version": 1, "seed": 0, "granularity": "layer",
                         "sources": [{"kind": "live", "label": "mlp live", "model": "mlp", "workers": 2, "steps": 2}],
                         "metrics": {"repeats": 2, "timing_repeats": 2, "warmup": 0}, "compressors": [{"name": "none"}, {"name": "topk"}]})
    outcome = run_suite(suite, tmp_path_factory.mktemp("run"))
    return Path(outcome.path)


def test_kernels_of_a_bench_file_are_its_whole_model_steps(mlp_bench: Path) -> None:
    ks = sk.kernels_from_bench(load_run(mlp_bench), None, str(mlp_bench))
    assert ks.model == "mlp" and ks.device == "cpu" and [k.label for k in ks.kernels] == ["none", "topk", "fp16"]
    xs = model_tensors("mlp")
    topk = registry.create("topk")
    sent = sum(topk.compress(x, topk.init_state(i)).nbytes for i, x in enumerate(xs))
    k = ks.get("topk")
    assert k is not None and k.wire_bytes == pytest.approx(sent) and k.dense_bytes == 4 * sum(x.numel() for x in xs)
    assert k.compress_s > 0 and k.decompress_s > 0 and k.copy_s > 0
    with pytest.raises(ResultsError, match="no cases of resnet50"):
        sk.kernels_from_bench(load_run(mlp_bench), "resnet50")


def test_identity_whose_kernels_cost_a_copy_is_the_reference() -> None:
    # no special case: a codec whose encode and decode each cost what DDP's copies into and out of its
    # buckets cost, and that all-reduces the dense bytes, predicts exactly the uncompressed step
    ident = sk.StepKernels("none", "none", 0.004, 0.004, 0.004, 1e8, 1e8)
    ks = sk.KernelSet("m", "cpu", "test", "", (ident,))
    a = adv.advise_kernels(ks, 0.1, [2, 16, 256], [1, 10, 100], 5e-6)
    assert all(s.speedup == pytest.approx(1.0) for sc in a.scenarios for s in sc.steps)
    sc = a.scenarios[-1]
    net = Network(100, 5e-6)
    assert sc.reference_step_s == pytest.approx(0.1 + 2 * 0.004 + collective_seconds("allreduce", 1e8, 256, net)[0])
    assert collective_seconds("allreduce", 1e8, 256, net)[0] <= ring_allreduce(1e8, 256).seconds(net)  # ring or tree


def test_scenarios_rank_fastest_first_and_say_when_nothing_pays() -> None:
    ks = sk.KernelSet("m", "cpu", "test", "", (
        sk.StepKernels("none", "none", 0.004, 0.004, 0.004, 1e8, 1e8),
        sk.StepKernels("topk", "topk", 0.05, 0.002, 0.004, 2e6, 1e8),  # all-gathered: decodes N payloads
        sk.StepKernels("powersgd", "powersgd", 0.03, 0.003, 0.004, 1e6, 1e8)))
    a = adv.advise_kernels(ks, 0.1, [16], [1, 400], 5e-6)
    slow, fast = a.scenarios
    assert [s.step_s for s in slow.steps] == sorted(s.step_s for s in slow.steps)
    assert slow.paying and slow.paying[0].speedup > 1 and "best" in ptext.summary_line(slow)
    assert not fast.paying and "no compressor pays" in ptext.summary_line(fast)  # at 400 Gbit/s the kernels cost more than they save
    topk = next(s for s in slow.steps if s.label == "topk")
    assert topk.collective == "allgather (ring)" and topk.decompress_s == pytest.approx(16 * 0.002)
    psgd = next(s for s in slow.steps if s.label == "powersgd")
    assert psgd.collective.startswith("allreduce") and psgd.decompress_s == pytest.approx(0.003)  # one aggregate to decode


def test_delivered_comes_from_the_one_source_of_the_model(mlp_run: Path) -> None:
    got = inp.delivered_from_results(load_run(mlp_run), "mlp", str(mlp_run))
    assert set(got) == {"none", "topk"}
    assert got["none"].value == pytest.approx(1.0) and 0 < got["topk"].value < 1 and got["topk"].steps == 2
    with pytest.raises(ResultsError, match="no source of model resnet50"):
        inp.delivered_from_results(load_run(mlp_run), "resnet50")


def test_advise_command_with_kernels_and_fidelity(mlp_bench: Path, mlp_run: Path) -> None:
    r = runner.invoke(app, ["advise", str(mlp_run), "--kernels", str(mlp_bench), "--compute-ms", "5", "--workers", "4,16",
                            "--bandwidth", "0.1,10", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["model"] == "mlp" and d["compute_origin"] == "given" and len(d["scenarios"]) == 4
    steps = {s["label"]: s for s in d["scenarios"][0]["steps"]}
    assert steps["topk"]["delivered"]["value"] < 1 and steps["fp16"]["delivered"] is None  # fp16 was not in the run
    r = runner.invoke(app, ["advise", "--kernels", str(mlp_bench), "--compute-ms", "5", "-c", "topk", "--workers", "8"])
    assert r.exit_code == 0, r.output
    assert "8 workers" in r.stdout and "kernels measured on cpu" in r.stdout and "topk" in r.stdout and "fp16" not in r.stdout


@pytest.mark.parametrize(("args", "words"), [
    (["advise"], ("--model",)),
    (["advise", "--model", "resnt50"], ("did you mean",)),
    (["advise", "--model", "mlp", "--workers", "0"], ("--workers",)),
    (["advise", "--model", "mlp", "--latency-us", "nan"], ("--latency-us",)),
])
def test_advise_bad_input_is_one_line(args: list[str], words: tuple[str, ...]) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.output and all(w in lines[0] for w in words), r.output


def test_advise_kernels_file_without_model_steps_is_one_line(mlp_run: Path) -> None:
    r = runner.invoke(app, ["advise", "--kernels", str(mlp_run), "--compute-ms", "1"])
    assert r.exit_code == 1 and "bench --model" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_run_of_a_live_source_gives_its_kernels_compute_and_decision_plot(mlp_run: Path) -> None:
    from gcbench.predict.decision import DECISION_BANDWIDTHS, decision_curves
    from gcbench.report.html_plots import plot_decision

    record = load_run(mlp_run)
    ks, compute = sk.kernels_from_run(record, "mlp live", str(mlp_run))
    assert ks.model == "mlp" and {k.label for k in ks.kernels} == {"none", "topk"}
    assert compute is not None and compute > 0  # the live source timed its forward + backward passes
    assert record.cases[0].source.identity() == record.cases[1].source.identity()  # a timing is not part of the gradients' identity
    assert "compute_s" not in record.cases[0].source.identity()
    workers, compute2, curves, even = decision_curves(record.cases)
    assert workers == 2 and compute2 == compute and all(len(v) == len(DECISION_BANDWIDTHS) for v in curves.values())
    topk = curves["topk"]
    assert topk[0] > topk[-1]  # the fewer bytes a compressor sends, the more it gains on slow links
    e = even["topk"]
    if e is not None:  # where it crosses 1x, the curve is on both sides of 1 around it
        i = next(j for j, b in enumerate(DECISION_BANDWIDTHS) if b >= e)
        assert (topk[i - 1] - 1) * (topk[i] - 1) <= 0
    plot = plot_decision(record.cases, "t")
    assert plot is not None and plot.kind == "decision" and "2 workers" in plot.caption


def test_overlap_hides_communication_behind_the_backward_pass_but_never_the_last_bucket() -> None:
    # 100 ms of compute (2/3 of it backward), 40 MB of gradients = 2 DDP buckets
    assert pstep.exposed(0.05, 0.1, 40e6, overlap=False) == 0.05
    assert pstep.exposed(0.05, 0.1, 40e6, overlap=True) == pytest.approx(0.025)  # hidden but for the last bucket's half
    assert pstep.exposed(0.5, 0.1, 40e6, overlap=True) == pytest.approx(0.5 - 0.1 * 2 / 3)  # longer than the backward pass
    k = sk.StepKernels("none", "none", 0.004, 0.004, 0.004, 4e7, 4e7)
    ks = sk.KernelSet("m", "cpu", "test", "", (k,))
    a = adv.advise_kernels(ks, 0.1, [8], [10], 5e-6, overlap=True)
    assert a.overlap and a.scenarios[0].steps[0].speedup == pytest.approx(1.0)
    assert a.scenarios[0].reference_step_s < adv.advise_kernels(ks, 0.1, [8], [10], 5e-6).scenarios[0].reference_step_s


def test_advise_command_topology_options(mlp_bench: Path) -> None:
    r = runner.invoke(app, ["advise", "--kernels", str(mlp_bench), "--compute-ms", "5", "--workers", "16", "--gpus-per-node", "8",
                            "--intra-bandwidth", "800", "--overlap", "--bandwidth", "10"])
    assert r.exit_code == 0, r.output
    assert "nodes of 8 GPUs" in r.stdout and "hierarchical" in r.stdout and "overlap" in r.stdout
    for args, words in ((["--gpus-per-node", "8"], "--intra-bandwidth"), (["--gpus-per-node", "8", "--intra-bandwidth", "800",
                                                                           "--workers", "12"], "does not fill")):
        r = runner.invoke(app, ["advise", "--kernels", str(mlp_bench), "--compute-ms", "5", *args])
        assert r.exit_code != 0 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output


# ----------------------------------------------------------------------------- issue 34 item 27: an answer that repeats


def test_identity_is_one_exactly_whatever_moment_its_own_case_was_timed_in() -> None:
    """The audit's symptom: ``none`` priced 0.13-0.63x in three of four runs.  Each bench case runs in its own process
    minutes apart; a case timed while the machine was disturbed measures its kernels and its copy slow alike (its
    ×copy stays 1), but its raw seconds were set against the reference's copy from the other cases."""
    disturbed_none = sk.StepKernels("none", "none", 0.050, 0.046, 0.045, 1e8, 1e8, compress_x_copy=1.0, decompress_x_copy=1.0)
    topk = sk.StepKernels("topk", "topk", 0.030, 0.002, 0.004, 2e6, 1e8, compress_x_copy=7.5, decompress_x_copy=0.5)
    a = adv.advise_kernels(sk.KernelSet("m", "cpu", "test", "", (disturbed_none, topk)), 0.012, [2, 16], [1, 10, 100], 5e-6)
    for sc in a.scenarios:
        none = next(s for s in sc.steps if s.label == "none")
        assert none.speedup == 1.0 and none.compress_s == none.decompress_s == 0.004  # priced on the reference's copy
        t = next(s for s in sc.steps if s.label == "topk")
        assert t.compress_s == pytest.approx(7.5 * 0.004)  # every kernel on the same copy: the ranking is consistent


def test_every_kernel_of_a_bench_file_is_priced_by_its_x_copy(mlp_bench: Path) -> None:
    ks = sk.kernels_from_bench(load_run(mlp_bench), None, str(mlp_bench))
    for k in ks.kernels:
        assert k.compress_x_copy is not None and k.decompress_x_copy is not None
        assert k.priced(k.copy_s) == pytest.approx((k.compress_x_copy * k.copy_s, k.decompress_x_copy * k.copy_s))


class _StepClock:
    """A clock the fake step advances by the next of its durations (deterministic compute timing)."""

    def __init__(self, durations: list[float]) -> None:
        self.now, self.durations, self.n = 0.0, durations, 0

    def __call__(self) -> float:
        return self.now

    def step(self, i: int) -> None:
        self.now += self.durations[self.n % len(self.durations)]
        self.n += 1


class _Meter:
    def __init__(self, share: float | None = 0.01) -> None:
        self.value = share

    def start(self) -> _Meter:
        return self

    def share(self) -> float | None:
        return self.value


def test_compute_in_rounds_is_not_flagged_on_a_quiet_machine() -> None:
    clock = _StepClock([0.0122, 0.0125, 0.0124, 0.0128, 0.0123])
    ct = ctime.time_compute(clock.step, clock=clock, meter=_Meter)
    assert ct.flags == () and ct.attempts == 1 and ct.median_s == pytest.approx(0.0124, rel=0.02)
    assert len(ct.samples) >= ctime.COMPUTE_POLICY.min_rounds


def test_disturbed_compute_is_measured_again_and_the_good_attempt_kept() -> None:
    # the first attempt's steps disagree (12 ms and 200 ms: a neighbour came and went), the second's do not
    first = [0.012, 0.200, 0.012, 0.200, 0.200, 0.012] * 5 + [0.012]  # 1 warm-up + 30 rounds (the cap)
    clock = _StepClock(first + [0.0124] * 40)
    ct = ctime.time_compute(clock.step, clock=clock, meter=_Meter)
    assert ct.attempts == 2 and ct.flags == () and ct.median_s == pytest.approx(0.0124)


def test_compute_that_stays_disturbed_is_flagged_with_its_reason() -> None:
    clock = _StepClock([0.012, 0.200, 0.012, 0.200, 0.200, 0.012])
    ct = ctime.time_compute(clock.step, clock=clock, meter=_Meter)
    assert ct.attempts == 2 and ct.flags == ("unstable",) and "95% CI" in ct.reasons[0]
    steady = _StepClock([0.0124])
    busy = ctime.time_compute(steady.step, clock=steady, meter=lambda: _Meter(0.7))  # steady steps, but others had the CPU
    assert busy.flags == ("unstable",) and "other processes took 70%" in busy.reasons[0]


def test_the_sentence_says_when_the_timings_behind_it_were_flagged() -> None:
    from gcbench.report.advice import advice_json

    ok = (sk.StepKernels("none", "none", 0.004, 0.004, 0.004, 1e8, 1e8),
          sk.StepKernels("powersgd", "powersgd", 0.03, 0.003, 0.004, 1e6, 1e8))
    clean = adv.advise_kernels(sk.KernelSet("m", "cpu", "test", "", ok), 0.1, [16], [1], 5e-6)
    assert clean.untrusted() == [] and "cannot be trusted" not in ptext.summaries(clean)[0] and "best powersgd" in ptext.summaries(clean)[0]
    flagged_kernel = sk.StepKernels("topk", "topk", 0.05, 0.002, 0.004, 2e6, 1e8, flags=("unstable",),
                                     reasons=("compress unstable (other processes took 60% of the machine's CPU)",))
    busy = adv.advise_kernels(sk.KernelSet("m", "cpu", "test", "", (*ok, flagged_kernel)), 0.1, [16], [1], 5e-6)
    line = ptext.summaries(busy)[0]
    assert "cannot be trusted" in line and "flagged after re-measuring: topk (unstable)" in line
    assert busy.untrusted_reasons() == ["topk — compress unstable (other processes took 60% of the machine's CPU)"]
    bad_compute = adv.advise_kernels(sk.KernelSet("m", "cpu", "test", "", ok), 0.1, [16], [1], 5e-6,
                             compute_flags=("unstable: the median's 95% CI is ±80% of it (over ±10%) after 30 rounds",))
    assert "compute per step (unstable)" in ptext.summaries(bad_compute)[0]
    assert "compute per step — unstable: the median's 95% CI" in bad_compute.untrusted_reasons()[0]
    assert advice_json(bad_compute)["summaries"] == ptext.summaries(bad_compute)
    from gcbench.report.advice import advice_output

    printed = [o for o in advice_output(busy, detail=True) if isinstance(o, str)]
    assert any("cannot be trusted" in o for o in printed) and any("other processes took 60%" in o for o in printed)
    short = [o for o in advice_output(busy) if isinstance(o, str)]  # by default: which timings, and where to read why
    assert any(o.startswith("Trust: 1 timing flagged (topk (unstable); --detail says why)") for o in short)
    assert not any("other processes took 60%" in o for o in short)


def test_flagged_bench_cases_are_timed_again_and_the_less_flagged_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from gcbench.measure import bench

    def rec(label: str, flags: list[str], x: float) -> dict:
        return {"label": label, "compressor": label, "numel": 100, "compress_x_copy": x,
                "x_copy": {"compress": {"flags": flags}, "decompress": {"flags": []}}}

    first = [rec("topk", ["unstable"], 9.0), rec("none", [], 1.0)]
    asked: list[list[str]] = []

    def fake_run_bench(names, sizes, **kw):
        asked.append(list(names))
        return [rec("topk", [], 7.5)]

    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    out = bench.remeasure_unstable(first, ["topk", "none"], repeats=3, warmup=1, threads=1, device="cpu", isolate=False, model="mlp")
    assert asked == [["topk"]]  # only the flagged one
    assert out[0]["compress_x_copy"] == 7.5 and out[0]["remeasured"] == 1 and out[1] is first[1]


def _timing(ms: float, n: int = 5, flags: tuple[str, ...] = (), reasons: tuple[str, ...] = ()) -> ctime.ComputeTiming:
    return ctime.ComputeTiming(ms / 1e3, tuple([ms / 1e3] * n), flags, reasons)


def test_compute_measured_before_and_after_the_kernels_is_flagged_when_the_machine_changed_speed() -> None:
    """Issue 34 item 27: the mlp's step took 1.3 ms one minute and 2.3 ms the next on a quiet VM, each measurement steady."""
    same = ctime.combine_compute(_timing(1.30), _timing(1.36))
    assert same.flags == () and same.reasons == () and same.attempts == 2 and len(same.samples) == 10
    assert same.median_s == pytest.approx(1.33e-3)
    moved = ctime.combine_compute(_timing(1.30), _timing(2.30))
    assert moved.flags == ("drifted",)
    assert "1.3 ms per step before the kernels were timed, 2.3 ms after (+77%, over ±10%)" in moved.reasons[0]
    slower_first = ctime.combine_compute(_timing(2.0), _timing(1.7))  # -15%: drift either way counts
    assert slower_first.flags == ("drifted",)
    kept = ctime.combine_compute(_timing(1.3, flags=("unstable",), reasons=("unstable: x",)), _timing(1.31))
    assert kept.flags == ("unstable",) and kept.reasons == ("unstable: x",)


def test_compute_time_excludes_making_the_batch() -> None:
    """The batch is made outside the timed region: a data loader works beside a real step."""
    class Clock:
        t = 0.0

        def __call__(self) -> float:
            return self.t

    clock = Clock()

    def prepare(i: int) -> int:
        clock.t += 5.0  # an expensive batch: must not be timed
        return i

    def step(batch: int) -> None:
        clock.t += 0.001

    ct = ctime.time_compute(step, clock=clock, meter=_Meter, prepare=prepare)
    assert ct.median_s == pytest.approx(0.001)


def test_a_flagged_kernel_of_a_compressor_far_behind_does_not_put_the_answer_in_doubt() -> None:
    """A flag rare on a quiet machine must still not ride on every sentence: only the timings the answer rests on count."""
    ok = (sk.StepKernels("none", "none", 0.004, 0.004, 0.004, 1e8, 1e8),
          sk.StepKernels("powersgd", "powersgd", 0.03, 0.003, 0.004, 1e6, 1e8))
    far = sk.StepKernels("natural", "natural", 0.05, 0.03, 0.04, 6e7, 1e8, flags=("unstable",), reasons=("decompress unstable",))
    a = adv.advise_kernels(sk.KernelSet("m", "cpu", "test", "", (*ok, far)), 0.1, [16], [1], 5e-6)
    sc = a.scenarios[0]
    step = {s.label: s for s in sc.steps}
    assert step["natural"].speedup * pmodel.CONTENDER_MARGIN < sc.paying[0].speedup  # far behind the best
    assert a.untrusted() == ["natural (unstable)"]  # still listed under the table and in --json
    assert a.untrusted_for(sc) == [] and "cannot be trusted" not in ptext.summaries(a)[0]
    near = sk.StepKernels("dgc", "dgc", 0.03, 0.003, 0.004, 1.1e6, 1e8, flags=("unstable",), reasons=("compress unstable",))
    b = adv.advise_kernels(sk.KernelSet("m", "cpu", "test", "", (*ok, near)), 0.1, [16], [1], 5e-6)
    assert "dgc (unstable)" in ptext.summaries(b)[0] and "cannot be trusted" in ptext.summaries(b)[0]


def test_a_curves_break_even_is_where_it_crosses_one_on_the_log_axis() -> None:
    """:func:`gcbench.predict.decision.crossing`, the break-even the decision plot marks."""
    assert decision.crossing([1.0, 10.0, 100.0], [3.0, 2.0, 0.0]) == pytest.approx(10 ** 1.5)
    assert decision.crossing([1.0, 10.0], [0.5, 2.0]) == pytest.approx(10 ** (1 / 3))
    assert decision.crossing([1.0, 10.0, 100.0], [3.0, 2.0, 1.5]) is None


def _step(label: str, speedup: float, delivered: float | None) -> pmodel.Step:
    d = None if delivered is None else pmodel.Delivered(delivered, None, None, 10)
    return pmodel.Step(label, label, "allgather", 0.01, 0.001, 0.001, 0.001, 0.02 / speedup, speedup, d)


def test_a_compressor_under_the_fidelity_floor_is_never_recommended() -> None:
    """Issue 33 item 2: advise named sdagc best while it delivered 0.021 of the update, and ranked signsgd (-83.5) silently."""
    sc = pmodel.Scenario(16, 1.0, 0.02, 0.015, (_step("sdagc", 3.03, 0.021), _step("signsgd", 2.5, -83.5), _step("qsgd", 1.8, 0.95),
                                             _step("fp16", 1.4, None), _step("none", 0.9, 1.0)))
    line = ptext.summary_line(sc)
    assert "best qsgd, 1.80×" in line and "delivering 0.950" in line and "also faster: fp16 1.40×" in line
    assert ("faster but not recommended: sdagc 3.03× (delivers 0.021 of the dense update over 10 open-loop steps, under the 0.5 "
            "floor)") in line
    assert "signsgd 2.50× (delivers -83.5 of the dense update over 10 open-loop steps, worse than sending nothing)" in line
    only_low = pmodel.Scenario(16, 1.0, 0.02, 0.015, (_step("sdagc", 3.03, 0.021), _step("none", 0.9, 1.0)))
    line = ptext.summary_line(only_low)
    assert "no compressor both pays and delivers enough" in line and "best" not in line


def test_the_advise_table_fits_120_columns_at_four_link_speeds() -> None:
    """Issue 33 item 7: advise's table was 152 columns wide and truncated its headers ("1 Gbi…") at 160."""
    from rich.console import Console

    from gcbench.report.advice import advice_output, short_protocol

    assert short_protocol("alltoall (pairwise) + allgather (ring)") == "A2A pairwise + AG ring"
    ks = sk.KernelSet("mlp", "cpu", "test machine", "test", tuple(
        sk.StepKernels(name, name, 1e-3, 1e-3, 1e-3, 4e6 / r, 4e6, ("unstable",) if name == "topk_dither" else (), 1, ())
        for name, r in (("none", 1), ("natural_dither", 8), ("topk_dither", 50), ("onebit", 30), ("powersgd", 100))))
    advice = adv.advise_kernels(ks, 0.01, [16], [1.0, 10.0, 25.0, 100.0], 5e-6)
    console = Console(width=120, record=True, emoji=False)
    for part in advice_output(advice):
        console.print(part)
    text = console.export_text()
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert rows and all(len(line) <= 120 for line in text.splitlines())
    assert not any("…" in line for line in rows), "a cell was cut"
    assert any("*" in line for line in rows if "topk_dither" in line)  # its flag, as a mark


def test_thc_s_payload_widens_with_the_workers_and_is_flagged_when_it_passes_bf16() -> None:
    """A bench measures THC's payload alone (b bits a field); on N workers its fields are b + ⌈log2 N⌉ bits, and advise
    prices, shows and flags the wider payload (10 bits on 64 workers: 16-bit fields, 3 a word, 21.3 bits an element)."""
    dense = 4e8
    k4 = sk.StepKernels("thc", "thc", 0.01, 0.01, 0.004, dense / 4 / 8 * 4 * 64 / 60, dense, params=(("bits", 4),))
    net = pnet.Network(10, 5e-6)
    s1, s16 = adv.predict_step(k4, 1, net, 0.1), adv.predict_step(k4, 16, net, 0.1)
    assert s1.payload_bytes == pytest.approx(k4.wire_bytes)
    assert s16.payload_bytes == pytest.approx(k4.wire_bytes * 15 / 7) and not s16.larger_than_bf16
    k10 = sk.StepKernels("thc10", "thc", 0.01, 0.01, 0.004, dense / 4 * 64 / 6 / 8, dense, params=(("bits", 10),))
    assert not adv.predict_step(k10, 1, net, 0.1).larger_than_bf16 and not adv.predict_step(k10, 8, net, 0.1).larger_than_bf16
    wide = adv.predict_step(k10, 64, net, 0.1)
    assert wide.payload_bytes == pytest.approx(k10.wire_bytes * 2) and wide.larger_than_bf16


def test_a_drifted_compute_time_keeps_the_two_medians_that_disagreed(tmp_path: Path) -> None:
    """combine_compute and against_previous record the span advise prices each answer at; the bench file keeps it."""
    moved = ctime.combine_compute(_timing(2.0), _timing(1.39))
    assert moved.drift_s == (pytest.approx(1.39e-3), pytest.approx(2.0e-3))
    assert ctime.combine_compute(_timing(1.30), _timing(1.36)).drift_s is None  # within ±10%: no drift
    wider = ctime.against_previous(moved, _timing(3.0), "the last bench")
    assert wider.drift_s == (pytest.approx(1.39e-3), pytest.approx(3.0e-3)) and wider.flags == ("drifted",)
    assert ctime.against_previous(_timing(1.3), _timing(1.8), "x").drift_s == (pytest.approx(1.3e-3), pytest.approx(1.8e-3))
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"schema_version": 1, "kind": "bench", "cases": []}))
    ctime.store_compute(path, "mlp", moved)
    record = load_run(path)
    assert ctime.stored_compute(record, "mlp").drift_s == moved.drift_s  # type: ignore[union-attr]
    data = json.loads(path.read_text())
    del data[ctime.COMPUTE_KEY]["drift_s"]  # a file written before the span was kept
    path.write_text(json.dumps(data))
    assert ctime.stored_compute(load_run(path), "mlp").drift_s is None  # type: ignore[union-attr]


_DRIFT_KERNELS = sk.KernelSet("m", "cpu", "test", "", (
    sk.StepKernels("none", "none", 0.004, 0.004, 0.004, 4e8, 4e8),
    sk.StepKernels("bf16", "bf16", 0.004, 0.004, 0.004, 2e8, 4e8),
    sk.StepKernels("powersgd", "powersgd", 0.03, 0.003, 0.004, 4e6, 4e8)))


def test_a_compute_drift_that_leaves_the_answer_where_it_was_is_no_reason_to_distrust_it() -> None:
    """`advise --model mlp` on a quiet VM read "cannot be trusted … compute per step (drifted)" in two runs of three: the
    step's compute moved 2.0 → 1.39 ms between its two measurements.  Compute adds to every step alike, so without
    overlap the ranking and whether compression pays cannot move with it; the sentence gives the speed-up at both ends."""
    flags = ("drifted: 200 ms per step before the kernels were timed, 800 ms after",)
    a = adv.advise_kernels(_DRIFT_KERNELS, 0.5, [16], [10], 5e-6, compute_flags=flags, compute_drift_s=(0.2, 0.8))
    sc = a.scenarios[0]
    at = {c: adv.advise_kernels(_DRIFT_KERNELS, c, [16], [10], 5e-6).scenarios[0] for c in (0.2, 0.8)}
    assert sc.drift is not None and sc.drift.holds and sc.answer == at[0.2].answer == at[0.8].answer == "powersgd"
    assert sc.drift.claim_low == pytest.approx(at[0.2].claim(at[0.2].lead))
    assert sc.drift.claim_high == pytest.approx(at[0.8].claim(at[0.8].lead))
    line = ptext.summaries(a)[0]
    lo, hi = sorted((sc.drift.claim_low, sc.drift.claim_high))
    assert f"compute drifted 200–800 ms a step: the same answer at both ends, powersgd {lo:.2f}–{hi:.2f}× vs bf16" in line
    assert "cannot be trusted" not in line and a.untrusted_for(sc) == [] and a.untrusted() == []
    assert "every answer is the same at both ends" in a.untrusted_reasons()[0]
    from gcbench.report.advice import trust_line

    assert "drifted 200–800 ms: every answer above is the same at both ends" in trust_line(a)


def test_a_compute_drift_that_moves_the_answer_keeps_it_in_doubt_and_says_how() -> None:
    """With overlap, a longer backward pass hides more of the exchange: at 0.8 s of compute the bf16 all-reduce is as
    fast as powersgd, at 0.2 s powersgd pays 1.6×, so a measurement that drifted across that span cannot answer."""
    flags = ("drifted: 200 ms per step before the kernels were timed, 800 ms after",)
    a = adv.advise_kernels(_DRIFT_KERNELS, 0.5, [16], [10], 5e-6, overlap=True, compute_flags=flags, compute_drift_s=(0.2, 0.8))
    sc = a.scenarios[0]
    assert sc.drift is not None and not sc.drift.holds
    line = ptext.summaries(a)[0]
    assert "compute drifted 200–800 ms a step, and the answer moves with it: powersgd at 200 ms, none pays at 800 ms" in line
    assert "cannot be trusted" in line and a.untrusted() == a.untrusted_for(sc) == ["compute per step (drifted)"]
