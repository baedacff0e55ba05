"""Reports of a convergence file (kind converge): terminal, Markdown, CSV, HTML with its curves, and no crash anywhere."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.core.errors import ResultsError
from gcbench.core.intervals import domain
from gcbench.predict.accuracy import Span
from gcbench.report.convergence import answer, ci_text, convergence_rows
from gcbench.report.load import LoadedRun
from gcbench.results.run_diff import compare_runs
from gcbench.results.store import load_run
from tests.converge_fixture import case, converge_record, interval, write_converge

runner = CliRunner()


@pytest.fixture
def conv(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    runs.mkdir()
    return write_converge(runs / "conv.json")


def test_the_rows_put_the_reference_first_then_reached_partial_never_diverged(conv: Path) -> None:
    rows = convergence_rows(LoadedRun(conv, load_run(conv)))
    assert [r.name for r in rows] == ["none (reference)", "fp16", "topk", "signsgd", "randomk", "qsgd"]
    topk = rows[2]
    assert topk.cells[0] == "3/3" and topk.cells[1] == "0/3" and topk.cells[4].startswith("153 ±")
    assert rows[-1].cells[:2] == ("0/3", "3/3") and rows[-1].cells[2] == "—"  # diverged: no final metric
    assert rows[0].cells[5] == "4†" and rows[2].cells[5] == "0.08"  # fp32's bytes are larger than bf16's, topk's not
    line = answer(LoadedRun(conv, load_run(conv)))
    assert "reach it in only some seeds: signsgd 1/3" in line and "diverged: qsgd (3/3 seeds)" in line
    assert "within the budget of 200 steps: randomk" in line and "Steps only" in line


def test_an_interval_is_shown_as_plus_minus_when_symmetric() -> None:
    assert ci_text(Span(0.877, 0.865, 0.889)) == "0.877 ±0.012"
    assert ci_text(Span(0.4, 0.4 - 1e-17, 0.4 + 1e-17)) == "0.4"  # equal values: no spread shown
    assert ci_text(Span(10.0, 5.0, 20.0)) == "10 (5–20)" and ci_text(None) == "—"


def test_terminal_report_of_a_convergence_file_fits_120_columns(conv: Path) -> None:
    r = runner.invoke(app, ["report", str(conv)], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    assert "convergence: zoo:mlp" in r.stdout and "steps to target" in r.stdout and "signsgd" in r.stdout
    from gcbench.report.convergence import convergence_table

    console = Console(width=120, record=True, emoji=False)
    console.print(convergence_table(LoadedRun(conv, load_run(conv))))
    text = console.export_text()
    assert all(len(line) <= 120 for line in text.splitlines())
    assert not any("…" in line for line in text.splitlines() if line.startswith("│"))


def test_markdown_and_csv_of_a_convergence_file(conv: Path, tmp_path: Path) -> None:
    r = runner.invoke(app, ["report", str(conv), "--md"])
    assert r.exit_code == 0, r.output
    assert "## Convergence run conv-test" in r.stdout and "| topk | 3/3 | 0/3 |" in r.stdout
    out = tmp_path / "csv"
    r = runner.invoke(app, ["report", str(conv), "--csv", str(out)])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader((out / "cases.csv").open()))
    by = {row["case"]: row for row in rows}
    assert by["topk"]["kind"] == "converge" and by["topk"]["reached"] == "3" and by["topk"]["larger_than_bf16"] == "false"
    assert float(by["topk"]["steps_to_target_low"]) < float(by["topk"]["steps_to_target"]) < float(by["topk"]["steps_to_target_high"])
    assert by["qsgd"]["diverged"] == "3" and by["qsgd"]["steps_to_target"] == "" and by["none"]["larger_than_bf16"] == "true"
    steps = list(csv.DictReader((out / "steps.csv").open()))
    topk = [s for s in steps if s["case"] == "topk"]
    assert [int(s["step"]) for s in topk] == list(range(20, 201, 20)) and all(s["metric_mean"] for s in topk)


def test_html_of_a_convergence_file_draws_its_curves_and_says_steps_only(conv: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", str(conv), "--html", "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "Convergence run conv-test" in page and 'data-plot="converge_curves"' in page
    assert "Against steps only" in page and "diverged: qsgd" in page


def test_a_folder_with_a_convergence_file_renders_its_index_and_history(conv: Path, tmp_path: Path) -> None:
    runs = conv.parent
    (runs / "conv-b.json").write_text(json.dumps(converge_record() | {"run_id": "conv-b", "created_utc": "2026-11-27T13:00:00+00:00"}))
    out = tmp_path / "i.html"
    r = runner.invoke(app, ["report", "--runs-dir", str(runs), "--html", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "convergence of zoo:mlp" in out.read_text()
    r = runner.invoke(app, ["report", "--runs-dir", str(runs)], env={"COLUMNS": "120"})
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output


def test_comparing_convergence_files_is_one_clear_refusal(conv: Path) -> None:
    other = conv.parent / "conv-b.json"
    other.write_text(json.dumps(converge_record() | {"run_id": "conv-b"}))
    with pytest.raises(ResultsError, match="does not compare convergence files"):
        compare_runs(load_run(conv), load_run(other))
    r = runner.invoke(app, ["report", str(other), "--baseline", str(conv)])
    assert r.exit_code == 1 and "does not compare convergence files" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    run = Path(__file__).parents[1] / "golden" / "run_base.json"
    r = runner.invoke(app, ["report", str(conv), "--baseline", str(run)])
    assert r.exit_code == 1 and "cannot compare a converge results file" in r.stderr, r.output


def test_a_failed_case_of_a_convergence_file_is_shown_failed(tmp_path: Path) -> None:
    data = converge_record()
    data["cases"][2]["status"] = "error"
    data["cases"][2]["error"] = "RuntimeError: boom"
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    r = runner.invoke(app, ["report", str(path)], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    assert re.search(r"topk.*failed", r.stdout) and "boom" in r.stdout


def _bench(tmp_path: Path) -> Path:
    from tests.predict.test_time_to_accuracy import _bench_record

    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_bench_record()))
    return path


def test_report_prices_a_convergence_file_on_each_cluster_given(conv: Path, tmp_path: Path) -> None:
    bench = _bench(tmp_path)
    args = ["report", str(conv), "--cluster", "16x1", "--cluster", "64x100", "--kernels", str(bench), "--compute-ms", "5"]
    r = runner.invoke(app, args, env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    assert "on 16 × 1 Gbit/s, to accuracy 0.8" in r.stdout and "on 64 × 100 Gbit/s, to accuracy 0.8" in r.stdout
    assert "16 workers × 1 Gbit/s — predicted time to accuracy 0.8" in r.stdout and "Steps only" not in r.stdout
    assert "not priced (not in the kernels advise has): fp16, signsgd, qsgd" in r.stdout  # the bench has none, topk, randomk
    out = tmp_path / "r.html"
    r = runner.invoke(app, [*args, "--html", "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert page.count('data-plot="converge_time"') == 2 and "against predicted wall time on 16 workers × 1 Gbit/s" in page
    assert "on 64 × 100 Gbit/s, to accuracy 0.8" in page
    r = runner.invoke(app, [*args, "--md"])
    assert r.exit_code == 0 and "* on 16 × 1 Gbit/s, to accuracy 0.8" in r.stdout, r.output


@pytest.mark.parametrize(("extra", "words"), [
    (["--cluster", "16x1"], "--cluster WORKERSxGBITS and --kernels FILE go together"),
    (["--cluster", "16", "--kernels", "BENCH"], "--cluster takes WORKERSxGBITS"),
    (["--cluster", "1x10", "--kernels", "BENCH"], "at least 2 workers"),
    (["--cluster", "16x10", "--kernels", "BENCH"], "stores no compute time of mlp: give --compute-ms"),
])
def test_report_cluster_bad_input_is_one_line(conv: Path, tmp_path: Path, extra: list[str], words: str) -> None:
    bench = _bench(tmp_path)
    r = runner.invoke(app, ["report", str(conv), *[str(bench) if a == "BENCH" else a for a in extra]])
    assert r.exit_code == 1 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output


def test_report_cluster_refuses_a_run_that_is_not_a_convergence_file(tmp_path: Path) -> None:
    run = Path(__file__).parents[1] / "golden" / "run_base.json"
    r = runner.invoke(app, ["report", str(run), "--cluster", "16x1", "--kernels", str(_bench(tmp_path)), "--compute-ms", "5"])
    assert r.exit_code == 1 and "none of the runs shown is one" in r.stderr, r.output
    other = write_converge(tmp_path / "cnn.json", task="zoo:smallcnn")
    r = runner.invoke(app, ["report", str(other), "--cluster", "16x1", "--kernels", str(_bench(tmp_path)), "--compute-ms", "5"])
    assert r.exit_code == 1 and "smallcnn" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output


def test_layers_of_a_convergence_file_are_one_line(conv: Path) -> None:
    for extra in ([], ["--md"]):
        r = runner.invoke(app, ["report", str(conv), "--layers", *extra])
        assert r.exit_code == 1 and "no per-layer rows" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output


def test_intervals_of_a_file_written_before_clipping_are_clipped_where_shown(tmp_path: Path) -> None:
    """A file whose stored intervals leave the quantity's domain (written before the writer clipped them: an accuracy
    up to 1.3, steps from -1170 on a 200-step budget) is shown clipped in the table, the CSV and the HTML curves."""
    extra = case("wide", "topk", {0: ("ok", 0.43, 0), 1: ("ok", 0.84, 200)}, ref_finals={0: 0.90, 1: 0.91, 2: 0.89})
    summary = extra["convergence"]["summary"]
    assert summary["final_metric"]["high"] > 1 and summary["steps_to_target"]["low"] < 0  # the fixture does not clip
    assert max(summary["curve_high"]) > 1
    path = write_converge(tmp_path / "conv.json", extra=[extra])
    run = LoadedRun(path, load_run(path))
    row = next(r for r in convergence_rows(run) if r.name == "wide")
    assert row.cells[2] == "0.635 (0–1)" and row.cells[4] == "100 ±100"  # 0–200, not -1170–1370
    out = tmp_path / "csv"
    r = runner.invoke(app, ["report", str(path), "--csv", str(out)])
    assert r.exit_code == 0, r.output
    with (out / "cases.csv").open() as f:
        wide = next(c for c in csv.DictReader(f) if c["case"] == "wide")
    assert float(wide["final_metric_high"]) == 1.0 and float(wide["steps_to_target_low"]) == 0.0
    with (out / "steps.csv").open() as f:
        highs = [float(c["metric_high"]) for c in csv.DictReader(f) if c["case"] == "wide" and c["metric_high"]]
    assert highs and max(highs) <= 1.0
    from gcbench.report.html_converge_plots import curve_series

    (pts,) = [p for c, p in curve_series([c for c in run.cases if c.label == "wide"])]
    assert max(p[3] for p in pts if p[3] is not None) == 1.0


def test_the_converge_commands_table_writes_a_clipped_interval_by_its_ends() -> None:
    """``gcbench converge``'s own table: an interval clipped at a bound is not symmetric, so not written ± half-width."""
    from gcbench.converge import seed_summary
    from gcbench.report.converge_table import converge_table

    c = case("topk", "topk", {0: ("ok", 0.43, 0), 1: ("ok", 0.84, 200)})
    s = c["convergence"]["summary"]
    s["final_metric"] = seed_summary.interval([0.43, 0.84], domain("metric", "accuracy"))
    s["steps_to_target"] = seed_summary.interval([100.0, 102.0], domain("steps", budget=200))
    console = Console(width=120, record=True)
    console.print(converge_table([c], "t"))
    text = console.export_text()
    assert "0.635 (0.000–1.000)" in text and "101 ± 13" in text  # unclipped: still ± half-width


def test_the_verdict_holds_compressors_against_the_references_own_outcome() -> None:
    """The reference reached the target on 1 of 2 seeds: fp8, bit-identical to it, is not "failing"; a compressor that
    reached it on as many seeds is not either; one that never reached it is, and the sentence says the reference's 1/2."""
    from gcbench.report.converge_table import failing, same_as_reference, verdict

    ref_runs = {0: ("ok", 0.90, 100), 1: ("ok", 0.70, None)}
    finals = {0: 0.90, 1: 0.70}
    ref = case("none", "none", ref_runs, reference=True, ref_finals=finals)
    fp8 = case("fp8", "fp8", ref_runs, ref_finals=finals)
    half = case("qsgd", "qsgd", {0: ("ok", 0.89, 120), 1: ("ok", 0.70, None)}, ref_finals=finals)
    never = case("topk", "topk", {0: ("ok", 0.50, None), 1: ("ok", 0.40, None)}, ref_finals=finals)
    cases = [ref, fp8, half, never]
    assert same_as_reference(fp8, ref) and not same_as_reference(half, ref)
    assert failing(cases) == [("topk", "reached the target on 0 of 2 seeds, the reference on 1")]
    text = verdict(cases)
    assert "The target is not reliably reached by the reference itself (1 of 2 seeds within 200 steps)" in text
    assert "fp8" not in text and "qsgd" not in text and "topk (reached the target on 0 of 2 seeds" in text
    assert verdict([ref, fp8, half]).startswith("Every compressor reached the target on as many seeds as the reference")
    # a compressor whose curves equal the reference's is its outcome even where a gap test would flag a pair of seeds
    full = {0: ("ok", 0.90, 100), 1: ("ok", 0.91, 120)}
    full_ref = case("none", "none", full, reference=True, ref_finals={0: 0.90, 1: 0.91})
    assert verdict([full_ref, case("fp8", "fp8", full, ref_finals={0: 0.90, 1: 0.91})]).startswith("Every compressor")


def test_the_reports_answer_says_when_the_reference_itself_reached_the_target_on_some_seeds(tmp_path: Path) -> None:
    data = converge_record()
    ref = data["cases"][0]["convergence"]
    ref["seeds"][2].update(reached=False, steps_to_target=None)
    ref["summary"].update(reached=2, steps_to_target=interval([100.0, 120.0]))
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(data))
    line = answer(LoadedRun(path, load_run(path)))
    assert "the target is not reliably reached by the reference itself (2/3 seeds)" in line
    assert "reliably" not in answer(LoadedRun(tmp_path, converge_record()))


def test_the_verdict_says_when_the_reference_met_the_target_before_training() -> None:
    """A model that never learns (resnet50 on random labels for 4 steps: accuracy 0) sets the target at 0.95 × 0: met
    at step 0 by everything, so "every compressor reached the target" would be an empty claim."""
    from gcbench.report.converge_table import verdict

    at0 = {0: ("ok", 0.0, 0), 1: ("ok", 0.0, 0)}
    ref = case("none", "none", at0, reference=True, ref_finals={0: 0.0, 1: 0.0})
    text = verdict([ref, case("topk", "topk", at0, ref_finals={0: 0.0, 1: 0.0})])
    assert "was met at step 0 by the reference on every seed" in text and not text.startswith("Every compressor")
    later = {0: ("ok", 0.9, 40), 1: ("ok", 0.9, 60)}
    assert verdict([case("none", "none", later, reference=True, ref_finals={0: 0.9, 1: 0.9})]).startswith("Every compressor")
