"""advise --convergence: time to accuracy = steps to target (a convergence file) × predicted step, and the bf16 baseline."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.core.errors import ResultsError
from gcbench.predict import accuracy as acc
from gcbench.predict import advise as adv
from gcbench.predict import advise_text as ptext
from gcbench.predict import step_kernels as sk
from gcbench.predict import time_to_accuracy as tta
from gcbench.predict.network import Network, collective_seconds
from gcbench.results.parse import parse_record
from tests.converge_fixture import case, converge_record, write_converge

runner = CliRunner()

DENSE = 4.0e6


def _kernels(*extra: sk.StepKernels) -> sk.KernelSet:
    """Hand-made kernels (seconds, not measurements) of the fixture's compressors on the mlp."""
    return sk.KernelSet("mlp", "cpu", "test", "hand-made", (
        sk.StepKernels("none", "none", 1e-3, 1e-3, 1e-3, DENSE, DENSE),
        sk.StepKernels("topk", "topk", 2e-3, 1e-4, 1e-3, DENSE / 50, DENSE, compress_x_copy=2.0, decompress_x_copy=0.1,
                        compress_x_copy_ci=(1.5, 3.0), decompress_x_copy_ci=(0.1, 0.2)),
        sk.StepKernels("signsgd", "signsgd", 1e-3, 1e-4, 1e-3, DENSE / 32, DENSE),
        sk.StepKernels("randomk", "randomk", 1e-4, 1e-4, 1e-3, DENSE / 100, DENSE),
        sk.StepKernels("qsgd", "qsgd", 1e-3, 1e-3, 1e-3, DENSE / 8, DENSE),
        *extra))


def _conv(task: str = "zoo:mlp") -> acc.ConvergenceInput:
    return acc.read_convergence(parse_record(converge_record(task)), "mlp", "conv.json")


def test_a_convergence_file_is_read_into_outcomes_with_every_status() -> None:
    conv = _conv()
    assert conv.task == "zoo:mlp" and conv.target == 0.8 and conv.budget == 200 and conv.seeds == 3
    status = {o.label: o.status for o in conv.outcomes}
    assert status == {"none": "reached", "fp16": "reached", "topk": "reached", "signsgd": "partial", "randomk": "never",
                      "qsgd": "diverged"}
    topk = conv.get("topk")
    assert topk is not None and topk.steps is not None and topk.steps.mean == pytest.approx((140 + 160 + 160) / 3)
    assert topk.steps.low < topk.steps.mean < topk.steps.high and topk.reached == 3


def test_a_convergence_file_of_another_model_or_kind_is_refused_naming_both() -> None:
    with pytest.raises(ResultsError, match="convergence run of zoo:smallcnn, not of mlp"):
        acc.read_convergence(parse_record(converge_record("zoo:smallcnn")), "mlp", "conv.json")
    bench = {"schema_version": 1, "kind": "bench", "cases": []}
    with pytest.raises(ResultsError, match="is a bench results file, not a convergence file"):
        acc.read_convergence(parse_record(bench), "mlp", "b.json")
    assert acc.same_model("zoo:mlp", "mlp") and acc.same_model("hf:gpt2", "hf:gpt2") and not acc.same_model("zoo:mlp", "cnn")


def test_time_to_target_is_steps_times_step_with_both_intervals_propagated() -> None:
    conv = _conv()
    a = adv.advise_kernels(_kernels(), 0.005, [16], [1.0], 5e-6, convergence_origin="conv.json")
    (st,) = tta.time_to_accuracy(a, conv)
    sc = a.scenarios[0]
    rows = {r.label: r for r in st.rows}
    topk, step = rows["topk"], next(s for s in sc.steps if s.label == "topk")
    o = conv.get("topk")
    assert o is not None and o.steps is not None and topk.time is not None
    assert topk.step.mean == pytest.approx(step.step_s) and topk.time.mean == pytest.approx(o.steps.mean * step.step_s)
    # the step's spread: topk priced at the ends of its ×copy CIs, the reference copy unchanged
    copy_s = sk.reference_copy(a.kernels.kernels)
    k = a.kernels.get("topk")
    assert k is not None
    lo = adv.predict_step(k.at_ci(0), 16, Network(1.0, 5e-6), 0.005, copy_s=copy_s).step_s
    hi = adv.predict_step(k.at_ci(1), 16, Network(1.0, 5e-6), 0.005, copy_s=copy_s).step_s
    assert topk.step.low == pytest.approx(lo) and topk.step.high == pytest.approx(hi) and lo < step.step_s < hi
    assert topk.time.low == pytest.approx(o.steps.low * lo) and topk.time.high == pytest.approx(o.steps.high * hi)
    # the reference is DDP's fp32 step; bf16 (not benched here) its modelled step with the reference's steps, said so
    ref, bf16 = rows["none"], rows["bf16 all-reduce"]
    assert ref.role == "fp32 reference" and ref.step.mean == pytest.approx(sc.reference_step_s)
    assert bf16.role == "bf16 baseline" and bf16.step.mean == pytest.approx(sc.bf16_step_s)
    assert "steps assumed the fp32 reference's" in bf16.note and "modelled" in bf16.note
    assert bf16.outcome.steps == ref.outcome.steps and ref.vs_fp32 == pytest.approx(1.0) and bf16.vs_bf16 == pytest.approx(1.0)
    assert topk.vs_bf16 == pytest.approx(bf16.time.mean / topk.time.mean)  # type: ignore[union-attr]


def test_ranking_puts_every_seed_reached_first_then_partial_never_and_diverged_last() -> None:
    a = adv.advise_kernels(_kernels(), 0.005, [16], [1.0], 5e-6, convergence_origin="conv.json")
    (st,) = tta.time_to_accuracy(a, _conv())
    statuses = [r.status for r in st.rows]
    assert statuses == sorted(statuses, key=acc.STATUSES.index)
    reached = [r.time.mean for r in st.rows if r.status == "reached" and r.time is not None]
    assert reached == sorted(reached)
    assert st.unpriced == ("fp16",)  # in the file, not in the kernels: cannot be priced
    line = tta.time_sentence(st, _conv())
    assert "fastest topk" in line and "× vs bf16 (" in line and "vs fp32)" in line
    assert "reach it in only some seeds (time over those): signsgd 1/3" in line
    assert "does not reach it within the budget of 200 steps: randomk" in line and "diverged: qsgd (3/3 seeds)" in line
    assert "not priced (not in the kernels advise has): fp16" in line


def test_a_compressor_faster_per_step_but_slower_to_accuracy_is_named() -> None:
    """On a fast link topk's step barely beats the all-reduce, and its 153 steps to the target against the reference's
    120 make it slower to accuracy: the sentence says so and no compressor is called faster than the baseline."""
    a = adv.advise_kernels(_kernels(), 0.005, [16], [400.0], 5e-6, convergence_origin="conv.json")
    (st,) = tta.time_to_accuracy(a, _conv())
    topk = next(r for r in st.rows if r.label == "topk")
    base = st.baseline_row()
    assert base is not None and base.time is not None and topk.time is not None
    if topk.step.mean < base.step.mean:
        assert topk in st.faster_step_slower_to_target
    line = tta.time_sentence(st, _conv())
    assert topk.time.mean > base.time.mean and "no compressor reaches it sooner than the bf16 all-reduce" in line


def test_the_files_bf16_case_is_the_bf16_baseline_with_its_own_steps() -> None:
    ref = {0: 0.90, 1: 0.91, 2: 0.89}
    bf = case("bf16", "bf16", {0: ("ok", 0.9, 120), 1: ("ok", 0.9, 140), 2: ("ok", 0.9, 160)}, ref_finals=ref)
    conv = acc.read_convergence(parse_record(converge_record(extra=[bf])), "mlp")
    k16 = sk.StepKernels("bf16", "bf16", 5e-4, 5e-4, 1e-3, DENSE / 2, DENSE)
    a = adv.advise_kernels(_kernels(k16), 0.005, [16], [1.0], 5e-6)
    (st,) = tta.time_to_accuracy(a, conv)
    rows = [r for r in st.rows if r.role == "bf16 baseline"]
    assert len(rows) == 1 and rows[0].label == "bf16" and rows[0].outcome.steps is not None
    assert rows[0].outcome.steps.mean == pytest.approx(140) and "bf16" not in st.unmeasured


def test_advise_command_with_a_convergence_file(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_bench_record()))
    conv = write_converge(tmp_path / "conv.json")
    r = runner.invoke(app, ["advise", "--kernels", str(bench), "--compute-ms", "5", "--workers", "16", "--bandwidth", "1",
                            "--convergence", str(conv), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["convergence"]["target"] == 0.8 and len(d["time_to_accuracy"]) == 1
    rows = {row["label"]: row for row in d["time_to_accuracy"][0]["rows"]}
    assert rows["topk"]["time"]["mean"] > 0 and rows["randomk"]["time"] is None and "bf16 all-reduce" in d["time_to_accuracy"][0]["summary"]
    assert "accuracy not measured" not in d["summaries"][0]
    # the step sentence names no "best" that the convergence file may show never reaching the target (randomk)
    assert ": fastest step " in d["summaries"][0] and "by step time alone" in d["summaries"][0] and ": best " not in d["summaries"][0]
    r = runner.invoke(app, ["advise", "--kernels", str(bench), "--compute-ms", "5", "--workers", "16", "--bandwidth", "1",
                            "--convergence", str(conv)])
    assert r.exit_code == 0, r.output
    assert "predicted time to accuracy 0.8" in r.stdout and "does not reach it within the budget of 200 steps" in r.stdout
    other = write_converge(tmp_path / "cnn.json", task="zoo:smallcnn")
    for bad, words in ((other, "convergence run of zoo:smallcnn, not of mlp"), (bench, "not a convergence file")):
        r = runner.invoke(app, ["advise", "--kernels", str(bench), "--compute-ms", "5", "--convergence", str(bad)])
        assert r.exit_code == 1 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output


def _bench_record() -> dict:
    """A bench file of whole-model steps of the mlp for none, topk and randomk (hand-made numbers, not measured)."""
    def bench_case(name: str, ratio: float, comp: float) -> dict:
        t = {"median_s": comp, "iqr_s": 0.0, "samples_s": [comp] * 3}
        copy = {"median_s": 1e-3, "iqr_s": 0.0, "samples_s": [1e-3] * 3}
        return {"compressor": name, "label": name, "params": {}, "version": 1, "numel": int(DENSE / 4), "model": "mlp",
                "tensors": 6, "threads": 1, "device": "cpu", "status": "ok", "input_bytes": DENSE, "ratio": ratio,
                "compress": t, "decompress": t, "copy": copy}
    return {"schema_version": 1, "kind": "bench", "environment": {"cpu_model": "test", "cpu_count": 2},
            "cases": [bench_case("none", 1.0, 1e-3), bench_case("topk", 50.0, 2e-3), bench_case("randomk", 100.0, 1e-4)]}


def test_the_bf16_baseline_is_measured_when_benched_and_modelled_otherwise() -> None:
    """Issue 31: claims against bf16.  Benched, its step is the bf16 compressor's; else DDP's path with half the bytes."""
    ks = _kernels()
    a = adv.advise_kernels(ks, 0.005, [16], [1.0], 5e-6)
    sc = a.scenarios[0]
    net = Network(1.0, 5e-6)
    half, _ = collective_seconds("allreduce", DENSE / 2, 16, net)
    assert sc.bf16_step_s == pytest.approx(0.005 + 2 * 1e-3 + half) and "modelled" in a.bf16_origin
    k16 = sk.StepKernels("bf16", "bf16", 5e-4, 5e-4, 1e-3, DENSE / 2, DENSE)
    b = adv.advise_kernels(_kernels(k16), 0.005, [16], [1.0], 5e-6)
    sb = b.scenarios[0]
    bf16 = next(s for s in sb.steps if s.label == "bf16")
    assert sb.bf16_step_s == pytest.approx(bf16.step_s) and bf16.speedup_bf16 == pytest.approx(1.0)
    assert b.bf16_origin.startswith("measured") and bf16 not in sb.paying  # the baseline never pays against itself
    topk = next(s for s in sb.steps if s.label == "topk")
    assert topk.speedup_bf16 == pytest.approx(sb.bf16_step_s / topk.step_s)
    assert topk.speedup == pytest.approx(sb.reference_step_s / topk.step_s)
    none = next(s for s in sb.steps if s.label == "none")
    assert none.larger_than_bf16 and not topk.larger_than_bf16 and not bf16.larger_than_bf16


def test_the_sentence_claims_against_bf16_with_fp32_in_brackets_or_the_other_way() -> None:
    ks = _kernels()
    line = ptext.summaries(adv.advise_kernels(ks, 0.005, [16], [1.0], 5e-6))[0]
    assert "× vs bf16 (" in line and "× vs fp32)" in line and "bf16 all-reduce" in line and "accuracy not measured" in line
    fp = adv.advise_kernels(ks, 0.005, [16], [1.0], 5e-6, baseline="fp32")
    line = ptext.summaries(fp)[0]
    assert "× vs fp32 (" in line and "× vs bf16)" in line
    # against fp32 a compressor may pay that does not pay against bf16
    assert len(fp.scenarios[0].paying) >= len(adv.advise_kernels(ks, 0.005, [16], [1.0], 5e-6).scenarios[0].paying)
    with pytest.raises(ResultsError, match="baseline"):
        adv.advise_kernels(ks, 0.005, [16], [1.0], 5e-6, baseline="fp16")
    big = sk.KernelSet("mlp", "cpu", "t", "", (sk.StepKernels("none", "none", 1e-3, 1e-3, 1e-3, DENSE, DENSE),
                                                # an all-reduced payload of 0.6 of the dense bytes (hand-made)
                                                sk.StepKernels("low-rank", "powersgd", 1e-4, 1e-4, 1e-3, DENSE * 0.6, DENSE)))
    fp = adv.advise_kernels(big, 0.005, [16], [0.1], 5e-6, baseline="fp32")
    line = ptext.summaries(fp)[0]
    assert "best low-rank" in line and "its payload larger than bf16's" in line and "vs bf16)" in line
    # against bf16 it does not pay: it sends more than a bf16 all-reduce
    assert "no compressor pays against the bf16 all-reduce" in ptext.summaries(adv.advise_kernels(big, 0.005, [16], [0.1], 5e-6))[0]


def test_advise_baseline_option(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_bench_record()))
    r = runner.invoke(app, ["advise", "--kernels", str(bench), "--compute-ms", "5", "--workers", "16", "--bandwidth", "1",
                            "--baseline", "fp32", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["baseline"] == "fp32" and "vs fp32 (" in d["summaries"][0] and d["scenarios"][0]["bf16_step_s"] > 0
    r = runner.invoke(app, ["advise", "--kernels", str(bench), "--compute-ms", "5", "--baseline", "fp8"])
    assert r.exit_code != 0 and "baseline" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_time_to_accuracy_table_fits_120_columns() -> None:
    from rich.console import Console

    from gcbench.report.advice import advice_output

    conv = _conv()
    a = adv.advise_kernels(_kernels(), 0.005, [16], [1.0, 100.0], 5e-6, convergence_origin="conv.json")
    for detail in (False, True):
        console = Console(width=120, record=True, emoji=False)
        priced = dataclasses.replace(a, convergence=conv, times=tuple(tta.time_to_accuracy(a, conv)))
        for part in advice_output(priced, detail=detail):
            console.print(part)
        text = console.export_text()
        rows = [line for line in text.splitlines() if line.startswith("│")]
        assert all(len(line) <= 120 for line in text.splitlines()) and not any("…" in line for line in rows)
        assert any("signsgd" in line and "1/3" in line for line in rows)
        assert any("qsgd" in line and "diverged" in line for line in rows)
        assert ("b: steps assumed the fp32 reference's" in text) == detail and "accuracy not measured" not in text


def test_a_convergence_file_given_where_a_run_is_expected_says_where_it_goes(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_bench_record()))
    conv = write_converge(tmp_path / "conv.json")
    r = runner.invoke(app, ["advise", str(conv), "--kernels", str(bench), "--compute-ms", "5"])
    assert r.exit_code == 1 and "pass it with --convergence" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = runner.invoke(app, ["simulate", str(conv)])
    assert r.exit_code == 1 and "is a convergence file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_clusters_are_priced_one_by_one_not_as_a_cross_product() -> None:
    conv = _conv()
    p = adv.price_convergence(conv, _kernels(), 0.005, [(16, 1.0), (64, 100.0)], 5e-6)
    assert [(st.workers, st.bandwidth_gbps) for st in p.times] == [(16, 1.0), (64, 100.0)]
    assert tta.parse_cluster("16x10") == (16, 10.0) and tta.parse_cluster("8×2.5") == (8, 2.5)
    for bad in ("16", "x10", "1x10", "16x0", "16xnan", "ax1"):
        with pytest.raises(ResultsError, match="WORKERSxGBITS"):
            tta.parse_cluster(bad)
    with pytest.raises(ResultsError, match="not of mlp"):
        adv.price_convergence(_conv_of("zoo:smallcnn"), _kernels(), 0.005, [(16, 1.0)], 5e-6)


def _conv_of(task: str) -> acc.ConvergenceInput:
    return acc.read_convergence(parse_record(converge_record(task)), None, "conv.json")


def test_advise_csv_has_a_row_per_cluster_and_compressor_with_the_new_columns(tmp_path: Path) -> None:
    import csv

    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_bench_record()))
    conv = write_converge(tmp_path / "conv.json")
    out = tmp_path / "advice.csv"
    base = ["advise", "--kernels", str(bench), "--compute-ms", "5", "--workers", "16", "--bandwidth", "1,10", "--csv", str(out)]
    r = runner.invoke(app, base)
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 2 * 3 and {row["compressor"] for row in rows} == {"none", "topk", "randomk"}
    topk = next(row for row in rows if row["compressor"] == "topk" and row["bandwidth_gbps"] == "1.0")
    assert float(topk["speedup_vs_bf16"]) == pytest.approx(float(topk["bf16_step_ms"]) / float(topk["step_ms"]))
    assert float(topk["speedup_vs_fp32"]) == pytest.approx(float(topk["fp32_step_ms"]) / float(topk["step_ms"]))
    assert topk["larger_than_bf16"] == "false" and "time_to_target_s" not in topk  # no convergence file: no such column
    r = runner.invoke(app, [*base, "--convergence", str(conv)])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out.open()))
    by = {(row["compressor"], row["bandwidth_gbps"]): row for row in rows}
    topk = by[("topk", "1.0")]
    assert float(topk["time_to_target_s_low"]) <= float(topk["time_to_target_s"]) <= float(topk["time_to_target_s_high"])
    assert by[("randomk", "1.0")]["status"] == "never" and by[("randomk", "1.0")]["time_to_target_s"] == ""
    assert by[("bf16 all-reduce", "1.0")]["role"] == "bf16 baseline"  # the modelled baseline has a row of its own
    assert by[("none", "1.0")]["role"] == "fp32 reference" and by[("none", "1.0")]["accuracy_measured"] == "true"
    r = runner.invoke(app, [*base[:-1], str(tmp_path)])
    assert r.exit_code == 1 and "--csv names a folder" in r.stderr


def test_a_reference_that_never_reaches_the_target_leaves_the_baseline_without_a_time() -> None:
    data = converge_record()
    ref = data["cases"][0]["convergence"]
    ref["summary"]["reached"], ref["summary"]["steps_to_target"] = 0, None
    for run in ref["seeds"]:  # the seeds say so too: a summary its seeds contradict is refused on load
        run["reached"], run["steps_to_target"] = False, None
    conv = acc.read_convergence(parse_record(data), "mlp")
    (st,) = tta.time_to_accuracy(adv.advise_kernels(_kernels(), 0.005, [16], [1.0], 5e-6), conv)
    base = st.baseline_row()
    assert base is not None and base.time is None and all(r.vs_bf16 is None for r in st.rows)
    line = tta.time_sentence(st, conv)
    assert "the bf16 baseline has no time to the target" in line and "fastest compressor topk" in line


def test_a_compressor_is_priced_only_with_the_kernels_of_its_own_configuration() -> None:
    """The file's topk (default density) must not be priced with a bench of topk at another density."""
    other = sk.KernelSet("mlp", "cpu", "t", "", (sk.StepKernels("none", "none", 1e-3, 1e-3, 1e-3, DENSE, DENSE),
                                                  sk.StepKernels("topk:density=0.1", "topk", 1e-3, 1e-3, 1e-3, DENSE / 5, DENSE)))
    (st,) = tta.time_to_accuracy(adv.advise_kernels(other, 0.005, [16], [1.0], 5e-6), _conv())
    assert "topk" in st.unpriced and "topk:density=0.1" in st.unmeasured
    assert all(r.label != "topk" for r in st.rows)


def test_a_spec_as_the_user_wrote_it_and_as_a_bench_labels_it_are_one_configuration() -> None:
    """converge keeps the user's spelling (``error_feedback=true``), a bench file the parsed value's (``True``)."""
    assert acc.same_spec("topk:density=0.01,error_feedback=true", "topk:error_feedback=True,density=0.01")
    assert not acc.same_spec("topk:density=0.01", "topk:density=0.1")
    assert not acc.same_spec("topk", "randomk")
    conv = _conv()
    assert conv.get("topk") is not None and conv.get("topk:density=0.5") is None


def test_advise_takes_the_model_and_the_compressors_of_the_convergence_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --model, advise prices the model the convergence run trained, for the compressors it trained (and bf16)."""
    asked: dict[str, object] = {}

    def step_inputs(model: str | None, specs: list[str], *args: object, **kwargs: object) -> object:
        asked.update(model=model, specs=list(specs), only=kwargs.get("only"))
        raise SystemExit(0)  # stop before measuring anything: the arguments are what this test checks

    monkeypatch.setattr(adv, "step_inputs", step_inputs)
    conv = write_converge(tmp_path / "conv.json", task="charlstm")
    r = runner.invoke(app, ["advise", "--convergence", str(conv), "--compute-ms", "5", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    labels = [c["label"] for c in json.loads(conv.read_text())["cases"] if c["status"] == "ok"]
    assert asked["model"] == "charlstm" and asked["specs"] == [*dict.fromkeys([*labels, "bf16"])] and asked["only"] == asked["specs"]


def test_a_target_met_at_step_0_is_priced_as_0_s_and_said_so_end_to_end(tmp_path: Path) -> None:
    """A real run whose target the untrained model already meets (``--target-value -1``: accuracy is never below it)
    reaches it at step 0; advise --convergence and report --cluster price it at 0 s instead of dividing by it."""
    runs = tmp_path / "runs"
    r = runner.invoke(app, ["converge", "--task", "digits", "--steps", "2", "--eval-every", "1", "--workers", "2", "--seeds", "2",
                            "-c", "topk", "--target-value", "-1", "-o", str(runs), "-q"])
    assert r.exit_code == 0, r.output
    (conv,) = runs.glob("*.json")
    steps = {c["label"]: c["convergence"]["summary"]["steps_to_target"] for c in json.loads(conv.read_text())["cases"]}
    assert {k: (v["mean"], v["low"], v["high"]) for k, v in steps.items()} == {"none": (0, 0, 0), "topk": (0, 0, 0)}
    bench = _bench_record()
    for c in bench["cases"]:
        c["model"] = "digits"
    kernels = tmp_path / "bench.json"
    kernels.write_text(json.dumps(bench))
    r = runner.invoke(app, ["advise", "--kernels", str(kernels), "--compute-ms", "5", "--workers", "4", "--bandwidth", "10",
                            "--convergence", str(conv), "--json"])
    assert r.exit_code == 0, r.output
    (st,) = json.loads(r.stdout)["time_to_accuracy"]
    rows = {row["label"]: row for row in st["rows"]}
    assert rows["topk"]["time"]["mean"] == 0 and rows["topk"]["vs_fp32"] == 1.0 and rows["topk"]["vs_bf16"] == 1.0
    assert "met at step 0, before any update" in st["summary"]
    r = runner.invoke(app, ["report", str(conv), "--cluster", "4x10", "--kernels", str(kernels), "--compute-ms", "5"],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "met at step 0, before any update" in r.stdout and "time to accuracy 0 s" in r.stdout
