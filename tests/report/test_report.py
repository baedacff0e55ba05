"""Reports from stored results: loading runs, Markdown tables, the terminal report and the CLI's errors."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape as rich_escape
from rich.text import Text
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.core.errors import ResultsError
from gcbench.measure.runner import run_suite
from gcbench.measure.suite import parse_suite
from gcbench.measure.timing import BEATS_BOUND, UNSTABLE
from gcbench.report.columns import (
    BENCH_COLUMNS,
    LAYER_METRICS,
    ONESHOT_COLUMNS,
    SUMMARY_COLUMNS,
    TRAIN_COLUMNS,
    compress_gbps_text,
    compress_x_copy_text,
    delivered_text,
    worker_delivered_text,
    x_copy_text,
)
from gcbench.report.load import LoadedRun, load_runs
from gcbench.report.markdown import markdown_layers, markdown_report, md_escape
from gcbench.report.notes import FOOTNOTE, TIMING_NOTE
from gcbench.report.numbers import fmt, size_text, spread_text
from gcbench.report.terminal import head_to_head_output, layer_tables, run_output, summary_tables
from gcbench.report.views import bench_target, by_source, case_name, pareto_front, stream_caption
from gcbench.results.bench_record import BenchCase
from gcbench.results.record import XCopy
from gcbench.results.run_record import RunCase
from gcbench.results.store import load_run

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
runner = CliRunner()


def _run(name: str) -> LoadedRun:
    path = GOLDEN / f"{name}.json"
    return LoadedRun(path, json.loads(path.read_text(encoding="utf-8")))


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    d = tmp_path / "runs"
    d.mkdir()
    shutil.copy(GOLDEN / "run_base.json", d / "20260105T100000Z-golden-000001.json")
    shutil.copy(GOLDEN / "run_new.json", d / "20260106T100000Z-golden-000002.json")
    return d


# ----------------------------------------------------------------------------- loading


def test_load_runs_by_dir_id_prefix_and_latest(runs_dir: Path) -> None:
    runs = load_runs(None, runs_dir)
    assert [r.run_id for r in runs] == ["golden-base", "golden-new"]  # oldest first
    assert [r.run_id for r in load_runs(["latest"], runs_dir)] == ["golden-new"]
    assert [r.run_id for r in load_runs(["20260105T"], runs_dir)] == ["golden-base"]
    with pytest.raises(ResultsError, match="ambiguous"):
        load_runs(["2026"], runs_dir)
    with pytest.raises(ResultsError, match="no results files"):
        load_runs(None, runs_dir / "empty")


# ----------------------------------------------------------------------------- Markdown


def _md_tables(text: str) -> list[list[str]]:
    """Consecutive table lines of a Markdown document."""
    tables, cur = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            tables.append(cur)
            cur = []
    if cur:
        tables.append(cur)
    return tables


def _cells(line: str) -> list[str]:
    # split on pipes that are not escaped
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_markdown_has_a_table_per_source_with_a_row_per_case() -> None:
    run = _run("run_base")
    text = markdown_report([run])
    tables = _md_tables(text)
    groups = by_source(run.cases)
    main = [t for t in tables if _cells(t[0]) == ["case", *[md_escape(c.header) for c in SUMMARY_COLUMNS]]]
    oneshot = [t for t in tables if _cells(t[0]) == ["case", *[md_escape(c.header) for c in ONESHOT_COLUMNS]]]
    assert len(main) == len(oneshot) == len(groups) == 2  # per source: the common-reference table and the one-shot one
    for table, (src, cases) in zip(main, groups.items(), strict=True):
        assert f"### {md_escape(src)}" in text
        _, sep, *rows = table
        assert set(_cells(sep)[1:]) == {"---:"}
        assert len(rows) == len(cases)
        for row, case in zip(rows, cases, strict=True):
            cells = _cells(row)
            assert len(cells) == 1 + len(SUMMARY_COLUMNS)
            assert cells[0].startswith(md_escape(case.label))
            if case.ok:
                assert cells[1] == fmt(case.size.ratio, "ratio")
                assert cells[3] == "—"  # a file from before the stream view: no delivered fraction, not an error
            else:
                assert cells[1].startswith("failed: ")
    for table, cases in zip(oneshot, groups.values(), strict=True):
        for row, case in zip(table[2:], cases, strict=True):
            if case.ok:
                assert _cells(row)[1] == fmt(case.metric("q"))
    assert "no stream in these results" in text and "One-shot fidelity (own reference)" in text
    # reconstructed compressors carry the dagger; hostile labels are neutralised
    assert "adacomp †" in text
    assert "<script>" not in text and "<img" not in text and "<b>" not in text
    assert "&lt;script&gt;alert(\"pwn\")&lt;/script&gt;" in text


def test_markdown_escapes_pipes_so_columns_stay_aligned() -> None:
    run = _run("run_base")
    data = run.data.model_copy(deep=True)
    data.cases[2].label = "a|b *c* [d](e)"
    tables = _md_tables(markdown_report([LoadedRun(run.path, data)]))
    row = next(ln for t in tables for ln in t if "a\\|b" in ln)
    assert len(_cells(row)) == 1 + len(SUMMARY_COLUMNS)
    assert "\\*c\\* \\[d\\](e)" in row


def test_markdown_comparison_and_claims_sections() -> None:
    from gcbench.results.baselines import load_claims, match_claims
    from gcbench.results.run_diff import compare_runs

    base, new = _run("run_base"), _run("run_new")
    cmp = compare_runs(base.data, new.data)
    claims = match_claims(load_claims(), [base.data, new.data])
    text = markdown_report([base, new], claims, cmp)
    tables = _md_tables(text)
    compare_table = next(t for t in tables if _cells(t[0])[:2] == ["case", "metric"])
    verdicts = [_cells(r)[6] for r in compare_table[2:]]
    assert "~" not in verdicts  # unchanged rows are hidden by default ...
    assert len(verdicts) == sum(1 for r in cmp.rows if r.verdict != "~")
    assert "~" in [_cells(r)[6] for t in _md_tables(markdown_report([base], None, cmp, all_rows=True))
                   for r in t[2:] if _cells(t[0])[:2] == ["case", "metric"]]  # ... and shown on request
    claims_table = next(t for t in tables if _cells(t[0])[0] == "paper")
    assert len(claims_table) == 2 + len(claims)
    assert "277×" in text and "with the paper's wire format" in text and "not measured in these runs" in text


def test_pareto_front() -> None:
    # (q, ratio): lower q and higher ratio are better
    pts = [(0.1, 10.0), (0.5, 50.0), (0.3, 5.0), (1.0, 50.0), (0.1, 8.0), (2.0, 100.0)]
    assert pareto_front(pts) == [0, 1, 5]
    assert pareto_front([(0.2, 3.0), (0.2, 3.0)]) == [0, 1]  # ties dominate nothing


def test_fmt() -> None:
    assert fmt(None) == "—" and fmt(float("nan")) == "—"
    assert fmt(276.7, "ratio") == "276.7×" and fmt(1234.0, "ratio") == "1,234×"
    assert fmt(0.01463, "ms") == "14.6" and fmt(0.000023, "ms") == "0.023"
    assert fmt(-7.7e-7) == "-7.70e-07" and fmt(0.915) == "0.915" and fmt(0.0) == "0"
    assert fmt(0.1, "pct") == "+10.0%" and fmt(float("inf"), "pct") == "+∞"
    # the kinds that are one format spec and a suffix, and the two that scale first
    assert fmt(1234.56, "x") == "1,234.6×" and fmt(2.005, "x2") == "2.00×" and fmt(0.91234, "acc") == "0.9123"
    assert fmt(1.234, "s") == "1.23" and fmt(1234567, "int") == "1,234,567"
    assert fmt(0.0123, "pp") == "+1.23" and fmt(2_500_000, "mb") == "2.500"


# ----------------------------------------------------------------------------- CLI


def test_cli_terminal_report(runs_dir: Path) -> None:
    r = runner.invoke(app, ["report", "--runs-dir", str(runs_dir)])
    assert r.exit_code == 0, r.output
    for label in ("dgc-paper", "topk", "qsgd", "adacomp †", "graddrop-bad", "fp16"):
        assert label in r.output
    assert "graddrop-bad failed: SourceError" in r.output
    # a rich-markup-looking label must be printed literally, not interpreted
    assert '<script>alert("pwn")</script>' in r.output
    # the measured claim: DGC with the paper's wire format on ResNet-50
    assert "277×" in r.output and "wire format" in r.output


def test_cli_markdown_to_file(tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    r = runner.invoke(app, ["report", str(GOLDEN / "run_base.json"), "--md", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_text(encoding="utf-8").startswith("# gcbench report")


def test_cli_newer_schema_is_one_clear_line() -> None:
    r = runner.invoke(app, ["report", str(GOLDEN / "newer_schema.json")])
    assert r.exit_code == 1
    assert "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "schema 99" in lines[0] and "newer" in lines[0] and "upgrade gcbench" in lines[0]
    # the same through --baseline
    r = runner.invoke(app, ["report", "--baseline", str(GOLDEN / "newer_schema.json"), str(GOLDEN / "run_base.json")])
    assert r.exit_code == 1 and "Traceback" not in r.output and "newer" in r.output


def test_cli_baseline_comparison_and_fail_on_regression(runs_dir: Path, tmp_path: Path) -> None:
    # newest run in the folder against a baseline named by id
    r = runner.invoke(app, ["report", "--runs-dir", str(runs_dir), "--baseline", "20260105T", "--fail-on-regression"])
    assert r.exit_code == 1
    assert "worse" in r.output and "new failure" in r.output and "not comparable" in r.output and "regression" in r.output
    # the same content under another name: nothing changed, exit 0 even with --fail-on-regression
    # (once the case that fails in both is left out: a failed case fails the gate, see test_results_store)
    data = json.loads((GOLDEN / "run_base.json").read_text(encoding="utf-8"))
    data["cases"] = [c for c in data["cases"] if c.get("status") == "ok"]
    base, same = tmp_path / "base.json", tmp_path / "same.json"
    base.write_text(json.dumps(data), encoding="utf-8")
    shutil.copy(base, same)
    r = runner.invoke(app, ["report", "--baseline", str(base), str(same), "--fail-on-regression"])
    assert r.exit_code == 0, r.output
    assert "worse" not in r.output


@pytest.mark.parametrize("args, message", [
    (["--md", "--html"], "exclusive"),
    (["--threshold", "-1"], "--threshold"),
    (["--fail-on-regression"], "needs --baseline"),
    (["-o", "x.md"], "--output needs --md or --html"),
    (["--baseline", "20260105T", "latest", "20260106T"], "one run"),
    (["--baseline", "20260105T", "20260105T"], "same file"),
    (["nonexistent-run"], "no run 'nonexistent-run'"),
])
def test_cli_user_errors(runs_dir: Path, args: list[str], message: str) -> None:
    r = runner.invoke(app, ["report", "--runs-dir", str(runs_dir), *args])
    assert r.exit_code == 1, r.output
    assert message in r.output and "Traceback" not in r.output


def test_cli_report_without_runs(tmp_path: Path) -> None:
    r = runner.invoke(app, ["report", "--runs-dir", str(tmp_path / "none")])
    assert r.exit_code == 1 and "no results files" in r.output


def _case(run: LoadedRun, label: str) -> Any:
    return next(c for c in run.cases if c.label == label)


# ----------------------------------------------------------------------------- train and bench files


def _md_section(text: str, heading: str) -> str:
    """The Markdown from ``heading`` to the next second-level heading."""
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_markdown_train_table_has_every_compressor_and_the_training_columns() -> None:
    run = _run("train_digits")
    text = markdown_report([run])
    assert "## Training run golden-train" in text
    tables = _md_tables(text)
    assert len(tables) == 1
    header, sep, *rows = tables[0]
    assert _cells(header) == ["compressor", *[md_escape(c.header) for c in TRAIN_COLUMNS]]
    assert set(_cells(sep)[1:]) == {"---:"}
    assert [_cells(r)[0] for r in rows] == [c.label for c in run.cases] == ["none", "topk", "qsgd"]
    by = {_cells(r)[0]: dict(zip(_cells(header), _cells(r), strict=True)) for r in rows}
    none, topk = _case(run, "none").training, _case(run, "topk").training
    assert by["none"]["final acc"] == f"{none.final_accuracy:.4f}" == "0.8078"
    assert by["topk"]["gap (pp)"] == f"{100 * topk.accuracy_gap:+.2f}" == "+21.17"
    assert by["none"]["to target (s)"] == f"{none.time_to_target_s:.2f}"
    assert by["topk"]["to target (s)"] == "not reached"  # a missing time means the target was not reached, not unknown
    assert by["topk"]["MB/worker"] == f"{topk.bytes.payload_bytes_per_worker / 1e6:.3f}"
    assert by["topk"]["step ms"] == fmt(topk.step_time.total_s, "ms")
    assert by["topk"]["ratio"] == fmt(_case(run, "topk").size.ratio, "ratio")
    assert by["qsgd"]["final acc"].startswith("failed: rank 1 exited with code 3")
    assert "&lt;b&gt;bold&lt;/b&gt;" in text and "<b>" not in text
    assert "q = relative MSE" not in text  # the run footnote belongs to run tables only


def test_bench_table_shows_the_records_traffic_bound_multiple() -> None:
    run = _run("bench_small")
    run.cases[0].x_bound = 2.5  # compress at 2.5x the memory traffic it must do
    header, _, *rows = _md_tables(markdown_report([run]))[0]
    first = dict(zip(_cells(header), _cells(rows[0]), strict=True))
    assert first["×bound"] == fmt(2.5, "x") and "×bound = compress ×copy ÷ the traffic bound" in markdown_report([run])


def test_markdown_bench_table_has_every_row_target_and_verdict() -> None:
    run = _run("bench_small")
    text = markdown_report([run])
    assert "## Kernel benchmark golden-bench" in text and "at least 5 timed rounds" in text
    header, _, *rows = _md_tables(text)[0]
    assert _cells(header) == ["compressor", *[md_escape(c.header) for c in BENCH_COLUMNS], "target", "verdict"]
    cells = [dict(zip(_cells(header), _cells(r), strict=True)) for r in rows]
    assert [(c["compressor"], c["elements"]) for c in cells] == [
        ("signsgd", "100,000"), ("signsgd", "1,000,000"), ("topk", "100,000"), ("topk", "1,000,000"), ("qsgd", "100,000")]
    assert [c["verdict"] for c in cells] == ["pass", "pass", "short", "short", "error"]
    for c, rec in zip(cells[:4], run.cases[:4], strict=True):
        # ×copy is written as every ×copy cell is (three digits, the spread at the same decimals where the file has one)
        assert c["comp ×copy"].split(" ±")[0] == spread_text(rec.compress_x_copy, None, "×")
        assert c["dec ×copy"].split(" ±")[0] == spread_text(rec.decompress_x_copy, None, "×")
        assert c["GB/s"] == fmt(rec.gbps_compress)
        assert c["peak/input"] == fmt(rec.peak_extra_bytes / rec.input_bytes)
    assert all(c["×bound"] == "—" for c in cells[:4])  # a file from before the traffic bound: no number made up
    assert cells[0]["target"] == "≤ 2× copy, decompress ≤ 3× copy"  # every limit that "pass" checks is named
    assert "measured 0.001: 0.33×, 0.01: 0.33×" in cells[2]["target"]
    assert cells[4]["ratio"].startswith("failed: GcbenchError")


def test_bench_target_follows_bench_verdict() -> None:
    rec = _case_bench("signsgd", 100_000).model_copy(deep=True)
    assert bench_target(rec)[1] == "pass"
    rec.compress_x_copy = 2.5  # over the 2× compress target
    assert bench_target(rec)[1] == "short"
    rec.compress_x_copy, rec.decompress_x_copy = 1.0, 3.5  # within it, but decompress over 3×
    assert bench_target(rec)[1] == "short"
    assert bench_target(BenchCase(compressor="signsgd", numel=10, error="x")) == ("", "error")
    assert bench_target(BenchCase(compressor="nosuch", compress_x_copy=1.0, decompress_x_copy=1.0)) == ("—", "—")


def _case_bench(name: str, numel: int) -> BenchCase:
    return next(c for c in _run("bench_small").cases if c.compressor == name and c.numel == numel)


def test_size_text() -> None:
    assert [size_text(n) for n in (999, 1000, 100_000, 1_000_000, 25_600_000, 2_000_000_000)] == [
        "999", "1K", "100K", "1M", "25.6M", "2G"]


@pytest.fixture
def mixed_dir(tmp_path: Path) -> Path:
    """A runs folder with a run, a compare, a train and a bench file."""
    d = tmp_path / "mixed"
    d.mkdir()
    shutil.copy(GOLDEN / "run_base.json", d / "20260105T100000Z-golden-000001.json")
    compare = {**json.loads((GOLDEN / "run_new.json").read_text(encoding="utf-8")), "kind": "compare", "run_id": "golden-compare"}
    (d / "20260106T100000Z-compare-000002.json").write_text(json.dumps(compare), encoding="utf-8")
    shutil.copy(GOLDEN / "train_digits.json", d / "20260107T100000Z-train-digits-000003.json")
    shutil.copy(GOLDEN / "bench_small.json", d / "20260108T100000Z-bench.json")
    return d


def test_cli_mixed_folder_terminal_and_markdown(mixed_dir: Path) -> None:
    r = runner.invoke(app, ["report", "--runs-dir", str(mixed_dir)])
    assert r.exit_code == 0, r.output
    for kind in ("run", "compare", "train", "bench"):
        assert f"│ {kind} " in r.output
    assert "golden-train — training: digits" in r.output and "golden-bench — kernel benchmark" in r.output
    assert "not reached" in r.output and "short" in r.output and "pass" in r.output
    assert "qsgd failed: rank 1 exited with code 3 (no message) <b>bold</b>" in r.output  # literal, not rich markup
    assert "qsgd failed: GcbenchError" in r.output
    assert "4 ok, 1 failed" in r.output and "2 ok, 1 failed" in r.output  # bench records fail with "error", not "status"
    r = runner.invoke(app, ["report", "--runs-dir", str(mixed_dir), "--md"])
    assert r.exit_code == 0, r.output
    headings = [ln for ln in r.output.splitlines() if ln.startswith("## ")]
    assert headings == ["## Run golden-base", "## Run golden-compare", "## Training run golden-train",
                        "## Kernel benchmark golden-bench", "## Paper claims"]
    assert "| compressor | final acc |" in r.output and "| compressor | elements |" in r.output


def _bench_pair(tmp_path: Path) -> tuple[Path, Path]:
    base = json.loads((GOLDEN / "bench_small.json").read_text(encoding="utf-8"))
    new = copy.deepcopy(base)
    new["run_id"] = "golden-bench-new"
    for c in new["cases"]:
        if c.get("numel") == 1_000_000 and c["compressor"] == "topk":
            # 2× slower compress, every sample clear of the baseline's
            c["compress"]["samples_s"] = [2 * s for s in c["compress"]["samples_s"]]
            c["compress_x_copy"] *= 2
    b, n = tmp_path / "bench_base.json", tmp_path / "bench_new.json"
    b.write_text(json.dumps(base), encoding="utf-8")
    n.write_text(json.dumps(new), encoding="utf-8")
    return b, n


def test_cli_baseline_compares_bench_files(tmp_path: Path) -> None:
    b, n = _bench_pair(tmp_path)
    r = runner.invoke(app, ["report", "--baseline", str(b), str(n), "--fail-on-regression"])
    assert r.exit_code == 1, r.output
    assert "topk (1,000,000 elements)" in r.output and "compress ×copy ↓" in r.output and "worse" in r.output
    assert "+100.0%" in r.output and "1 regression(s)" in r.output
    r = runner.invoke(app, ["report", "--baseline", str(b), str(n), "--md"])
    assert r.exit_code == 0, r.output
    row = next(ln for ln in r.output.splitlines() if ln.startswith("| topk (1,000,000 elements) | compress ×copy"))
    assert _cells(row)[2:4] == ["7.18×", "14.35×"] and _cells(row)[6] == "worse"
    assert "## Kernel benchmark golden-bench-new" in r.output  # the new file in detail, the baseline in the rows


def test_cli_baseline_of_another_kind_is_one_clear_line() -> None:
    r = runner.invoke(app, ["report", "--baseline", str(GOLDEN / "run_base.json"), str(GOLDEN / "bench_small.json")])
    assert r.exit_code == 1 and "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cannot compare a bench results file" in lines[0] and "same kind" in lines[0]


# ----------------------------------------------------------------------------- timing cells


def test_x_copy_cells_show_the_spread_and_flags_and_no_speed_beyond_the_traffic_bound() -> None:
    assert x_copy_text(XCopy(median=3.1, iqr=0.8, flags=[])) == "3.10× ±0.40"
    assert x_copy_text(XCopy(median=3.1, iqr=0.8, flags=[UNSTABLE])) == "3.10× ±0.40 (unstable)"
    beaten = x_copy_text(XCopy(median=0.2, iqr=0.01, flags=[BEATS_BOUND]))
    assert "0.2" not in beaten and "beats traffic bound" in beaten  # not printed as a speed
    assert x_copy_text(XCopy(median=2.0)) == "2.00×"  # a file from before interleaved timing: median only
    assert x_copy_text(None) == "—"
    # one timed round has no spread: its cell says so instead of a "±<0.01" nobody measured
    one = XCopy(median=3.9487, iqr=0.0, samples=[3.9487], flags=["cut short"])
    assert x_copy_text(one) == "3.95× (1 round, cut short)"
    assert x_copy_text(XCopy(median=3.9487, iqr=0.0, rounds=1)) == "3.95× (1 round)"
    assert x_copy_text(XCopy(median=3.9, iqr=0.0, samples=[3.9, 3.9])) == "3.90× ±<0.01"  # two equal rounds: a spread of 0


def test_a_spread_is_written_to_the_decimals_of_its_value() -> None:
    # the "1.1× ±0.012": a value and its spread at different precisions
    assert spread_text(1.1, 0.012, "×") == "1.10× ±0.01"
    assert spread_text(1.14, 0.0125, "×") == "1.14× ±0.01"
    assert spread_text(12.4, 0.87, "×") == "12.4× ±0.9"
    assert spread_text(266.4, 12.6, "×") == "266× ±13"
    assert spread_text(1.03, 0.00016, "×") == "1.03× ±<0.01"  # not a false ±0.00
    assert spread_text(7.7, None, "×") == "7.70×"
    assert spread_text(0.0234, 0.0031, "×") == "0.023× ±0.003"  # small values keep two significant digits
    for v, sp in ((1.1, 0.012), (12.4, 0.87), (0.1, 0.005), (345.0, 2.0), (0.0234, 0.0031), (0.004, 0.0001)):
        value, spread = spread_text(v, sp).split(" ±")
        decimals = len(value.partition(".")[2])
        assert len(spread.lstrip("<").partition(".")[2]) == decimals
    assert x_copy_text(None) == "—"


def test_a_timed_run_prints_spreads_and_says_what_the_flags_mean(tmp_path: Path) -> None:
    suite = parse_suite({"name": "tiny", "seed": 0, "sources": [{"kind": "synthetic", "shapes": [[128, 64]], "workers": 1, "steps": 1}],
                         "compressors": [{"name": "none"}, {"name": "topk"}],
                         # every case its 3 rounds, whatever a fresh clone's first numba compile costs the run's budget
                         "metrics": {"repeats": 1, "timing_repeats": 3, "timing_run_budget_s": 600}})
    outcome = run_suite(suite, tmp_path)
    cases = load_run(outcome.path).cases
    console = Console(record=True, width=400)
    for part in run_output(cases, "tiny"):
        console.print(part)
    text = console.export_text()
    for case in cases:
        x = case.timing.compress_x_copy
        assert len(x.samples) == case.timing.rounds >= 3 and x.flags is not None
        row = next(line for line in text.splitlines() if line.lstrip("│ ").startswith(case.label + " "))
        assert compress_x_copy_text(case) in row and ("±" in row or BEATS_BOUND in row)
    notes = " ".join(text.split())  # the footnote wraps at the console's width
    assert "(unstable)" in notes and "(beats traffic bound)" in notes and "gcbench list metrics" in notes  # the short legend
    assert "(unstable) = " in FOOTNOTE and "(beats traffic bound) = " in FOOTNOTE  # the definitions, in --md and --html


def test_a_timing_that_beats_its_traffic_bound_shows_no_speed_in_run_or_compare_tables() -> None:
    def case(label: str, flags: list[str]) -> RunCase:
        return RunCase.model_validate({"label": label, "status": "ok", "timing": {
            "compress": {"median_s": 0.001, "gbps": 4.0, "samples_s": [0.001] * 3},
            "compress_x_copy": {"median": 0.1, "iqr": 0.01, "samples": [0.1] * 3, "flags": flags}}})

    fast, honest = case("fast", [BEATS_BOUND]), case("honest", [])
    assert compress_gbps_text(fast) == f"— ({BEATS_BOUND})" and compress_gbps_text(honest) == "4"
    console = Console(record=True, width=400)
    for part in head_to_head_output([fast, honest], "layer"):
        console.print(part)
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:4]] for line in console.export_text().splitlines()
            if line.startswith("│")}
    assert rows["compress GB/s ↑"] == [f"— ({BEATS_BOUND})", "4"]
    assert rows["compress ×copy ↓"] == [f"— ({BEATS_BOUND})", "0.10× ±0.01"]


# ----------------------------------------------------------------------------- one reference per table


def _streamed(label: str, delivered: float, steps: int = 12, enough: bool = True, own_momentum: bool = False,
              fidelity_reference: str = "gradient", ci: bool = True) -> RunCase:
    """A run case with a stream on the common reference (momentum SGD, m = 0.9) and a one-shot block on its own reference."""
    per = [delivered * (t + 1) / steps for t in range(steps)]
    stream: dict[str, Any] = {"reference": "dense momentum-SGD update (m=0.9)", "momentum": 0.9, "own_momentum": own_momentum,
                              "steps": steps, "min_steps": 10, "enough": enough, "delivered": delivered,
                              "per_step_delivered": per, "per_step_error": [0.5] * steps, "per_step_error_scaled": [0.2] * steps}
    if ci:
        stream["worker_delivered"] = [delivered - 0.01, delivered + 0.01]
        stream["worker_ci"] = {"mean": delivered - 0.06, "lo": delivered - 0.08, "hi": delivered - 0.04, "n": 2}
        stream["delivered_ci"] = {"mean": delivered, "lo": delivered - 0.05, "hi": delivered + 0.05, "n": 2, "se_mean": 0.004}
    return RunCase.model_validate({
        "label": label, "status": "ok", "compressor": label, "source": {"name": "synthetic", "label": "synthetic"},
        "size": {"ratio": 100.0}, "stream": stream,
        "fidelity": {"reference": fidelity_reference, "q": {"model": 0.9}, "cosine": {"model": 0.3, "mean": 0.7},
                     "q_scaled": {"model": 0.91}}})


def _printed(parts: list[Any]) -> str:
    console = Console(record=True, width=400)
    for part in parts:
        console.print(part)
    return console.export_text()


def test_delivered_cell_has_its_worker_ci_and_marks_a_short_stream() -> None:
    assert delivered_text(_streamed("ef", 0.931)) == "0.931 ± 0.050"  # the headline's own interval
    assert worker_delivered_text(_streamed("ef", 0.931)) == "0.851–0.891"  # the workers' own: another column
    tiny = _streamed("ef", 0.5)
    tiny.stream.delivered_ci.lo, tiny.stream.delivered_ci.hi = 0.4999, 0.5001  # type: ignore[union-attr]
    assert delivered_text(tiny) == "0.500 ± 1.00e-04"  # not "< 0.001": the Markdown would carry an entity
    assert worker_delivered_text(_streamed("ef", 0.931, ci=False)) == "—"
    assert delivered_text(_streamed("ef", 0.931, steps=2, enough=False, ci=False)) == "0.931 (short: 2 steps)"
    old = RunCase.model_validate({"label": "old", "status": "ok", "size": {"ratio": 2.0}})  # a file from before the stream view
    assert delivered_text(old) == "—"


def test_run_tables_put_the_common_reference_first_and_each_own_reference_apart() -> None:
    cases = [_streamed("dgc", 0.95, own_momentum=True, fidelity_reference="momentum-SGD update u_t = m·u_{t-1} + g_t"),
             _streamed("topk", 0.6), _streamed("signsgd", -0.4, steps=3, enough=False)]
    text = _printed(run_output(cases, "t"))
    lines = text.splitlines()
    main_header = next(i for i, ln in enumerate(lines) if "delivered" in ln and "step err" in ln and "scaled err" in ln)
    oneshot_title = next(i for i, ln in enumerate(lines) if "one-shot fidelity (own reference)" in ln)
    assert main_header < oneshot_title  # the common reference first
    assert "q" not in [c.strip() for c in lines[main_header].split("┃")]  # no one-shot column in the main table
    # the main table's caption names the one reference; the one-shot caption names each reference that is not the gradient
    flat = " ".join(text.split())  # captions wrap at their table's width
    assert "fidelity on the common reference: dense momentum-SGD update (m=0.9)" in flat
    assert "dgc applies momentum itself" in flat
    assert "dgc: momentum-SGD update u_t = m·u_{t-1} + g_t" in flat
    row = {ln.split("│")[1].strip(): ln for ln in lines[main_header:oneshot_title] if ln.startswith("│")}
    assert "0.950 ± 0.050" in row["dgc"] and "-0.400 ± 0.050 (short: 3 steps)" in row["signsgd"]
    assert "short = a stream of fewer than the 10 steps" in flat
    oneshot = {ln.split("│")[1].strip(): [c.strip() for c in ln.split("│")[2:-1]] for ln in lines[oneshot_title:] if ln.startswith("│")}
    assert oneshot["topk"][:2] == ["0.9", "0.91"] and oneshot["topk"][3] == "0.3"  # q, q scaled, cosine: whole model


def test_a_file_without_streams_still_renders_and_says_so() -> None:
    run = _run("run_base")
    text = " ".join(_printed(summary_tables(run)).split())
    assert "no stream in these results" in text and "one-shot fidelity (own reference)" in text
    assert stream_caption([]).startswith("delivered / step err / scaled err: no stream")


def test_x_copy_means_one_thing_in_the_column_the_notes_and_the_glossary() -> None:
    from gcbench.results.metrics import METRICS

    col = next(c for c in SUMMARY_COLUMNS if c.metric == "comp_over_copy")
    glossary = {m.name: m for m in METRICS}
    assert col.higher_is_better is False and glossary["comp_over_copy"].higher_is_better is False
    for text in (col.help, glossary["comp_over_copy"].description, TIMING_NOTE):
        assert "compress time / " in text and "lower is better" in text
    assert "copy_fraction" not in glossary  # its inverse, "higher is better", contradicted the ×copy column
    assert len(glossary) == len(METRICS)  # one entry per name: two definitions of one metric could disagree


# ----------------------------------------------------------------------------- per layer


def test_layer_tables_have_every_layer_a_whole_model_row_and_pages_that_fit_the_width() -> None:
    run = _run("run_base")
    group = by_source(run.cases)["synthetic <img src=x onerror=alert(1)> normal"]
    cases = [c for c in group if c.ok and c.layers]
    tables = layer_tables(group, "base", width=70)
    metrics = [m.field for m in LAYER_METRICS]
    pages = len(tables) // len(metrics)
    assert len(tables) == pages * len(metrics) and pages > 1  # 8 cases do not fit 70 columns: paged, not wrapped
    for t, metric in zip(tables, [m for m in LAYER_METRICS for _ in range(pages)], strict=True):
        console = Console(record=True, width=70)
        console.print(t)
        assert all(cell_len(line) <= 70 for line in console.export_text().splitlines())
        names = list(t.columns[0].cells)
        assert names == ["t0", "t1", "t2", "whole model"]  # every unit of the source, first seen first
        for col in t.columns[2:]:
            case = next(c for c in cases if rich_escape(case_name(c)) == col.header)
            cells = list(col.cells)
            assert Text.from_markup(cells[-1]).plain == fmt(case.metric(metric.metric), metric.kind)
            for cell_text, unit in zip(cells[:-1], names[:-1], strict=True):
                v = next((getattr(u, metric.field) for u in case.layers or [] if u.name == unit), None)
                assert Text.from_markup(cell_text).plain == fmt(v, metric.kind)  # — where the case has no such unit
                assert cell_text.startswith("[red]") == (metric.bad is not None and v is not None and v >= metric.bad)
    seen = [col.header for t in tables[:pages] for col in t.columns[2:]]
    assert seen == [rich_escape(case_name(c)) for c in cases]  # each case once, in order, over the pages


def test_markdown_layer_tables_page_the_cases_and_escape_the_labels() -> None:
    run = _run("run_base")
    text = markdown_layers([run], per_table=4)
    assert "&lt;script&gt;" in text and "<script>" not in text and "<img" not in text
    tables = _md_tables(text)
    live = [t for t in tables if "conv1.weight" in t[2]]
    assert len(live) == len(LAYER_METRICS)  # 2 live cases: one page per metric
    for header, _, *rows in tables:
        assert 3 <= len(_cells(header)) <= 2 + 4 and rows[-1].startswith("| **whole model**")
        assert len(rows) in (4, 13)  # 3 synthetic units or 12 live ones, and the whole model


def test_report_layers_on_the_command_line() -> None:
    r = runner.invoke(app, ["report", str(GOLDEN / "run_base.json"), "--layers"])
    assert r.exit_code == 0, r.output
    assert "per layer: ratio" in r.output and "per layer: q" in r.output and "conv1.weight" in r.output
    r = runner.invoke(app, ["report", str(GOLDEN / "run_base.json"), "--layers", "--md"])
    assert r.exit_code == 0 and r.output.startswith("# gcbench report — per layer") and "| conv1.weight |" in r.output
    r = runner.invoke(app, ["report", str(GOLDEN / "bench_small.json"), "--layers"])
    assert r.exit_code == 1 and "no per-layer rows" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["report", str(GOLDEN / "run_base.json"), "--layers", "--html"])
    assert r.exit_code == 1 and "--layers is for the terminal and --md" in r.output


# ----------------------------------------------------------------------------- the compressor card


def test_a_card_says_paper_flags_reconstruction_protocol_wire_format_and_parameters_with_ranges() -> None:
    from gcbench.compressors import registry
    from gcbench.report.listing import card_rows, card_table

    dgc = dict(card_rows(registry.get("dgc"), "gcbench", None))
    assert dgc["paper"].startswith("Lin et al. 2018") and dgc["reconstructed"].startswith("no")
    assert dgc["flags"].startswith("biased, stateful, EF:own") and "randomised" in dgc["flags"]
    assert dgc["protocol"].startswith("allgather") and "payload 'dgc' v3" in dgc["wire format"]
    sdagc = dict(card_rows(registry.get("sdagc"), "gcbench", None))
    assert sdagc["reconstructed"].startswith("YES") and "deterministic" in sdagc["flags"]
    powersgd = dict(card_rows(registry.get("powersgd"), "gcbench", None))
    assert "2 all-reduce round(s), per tensor" in powersgd["protocol"]
    r = runner.invoke(app, ["list", "dgc"], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "density=0.001 (in (0, 1]): target fraction" in text and "index_coding='fixed' (one of 'fixed'," in text
    assert "reconstructed" in text and "wire format" in text and "protocol" in text
    console = Console(record=True, width=200)
    console.print(card_table(registry.get("sdagc"), "gcbench"))
    assert "YES: a reconstructed definition" in console.export_text()


@pytest.mark.parametrize("name", ["none", "fp16", "topk", "dgc", "qsgd"])
def test_a_cards_bit_count_is_counted_from_a_real_encoding(name: str) -> None:
    import torch

    from gcbench.compressors import registry
    from gcbench.report.listing import WIRE_SAMPLE_SHAPE, card_dict, wire_sample

    card = registry.get(name)
    w = wire_sample(card)
    comp = registry.create(name)
    x = torch.randn(*WIRE_SAMPLE_SHAPE, generator=torch.Generator().manual_seed(0))
    wire = comp.compress(x, comp.init_state(0)).to_bytes()  # the bytes that cross the wire
    assert w.bits_per_element == 8 * len(wire) / x.numel() and w.codec == name and w.version == card.version
    if name in ("none", "fp16"):  # dense casts: the element width, plus a header that is a rounding error
        assert w.bits_per_element == pytest.approx({"none": 32, "fp16": 16}[name], rel=1e-3)
    assert f"{w.bits_per_element:.4g} bits/element" in w.text()
    d = card_dict(card, "gcbench", w)
    assert d["wire"]["bits_per_element"] == w.bits_per_element and d["name"] == name and d["origin"] == "gcbench"
    json.dumps(d)  # what --json prints


# ----------------------------------------------------------------------------- issue 34: output files


def _copy_run(tmp_path: Path, name: str = "run.json", golden: str = "run_base.json") -> Path:
    path = tmp_path / name
    shutil.copy(Path(__file__).resolve().parents[1] / "golden" / golden, path)
    return path


@pytest.mark.parametrize("case", ["md", "html", "link", "baseline", "csv"])
def test_report_refuses_to_write_over_its_own_input(tmp_path: Path, case: str) -> None:
    """`report RUN.json --md -o RUN.json` used to exit 0 and replace the results file with Markdown."""
    run = _copy_run(tmp_path)
    before = run.read_bytes()
    if case == "link":
        (tmp_path / "r.md").symlink_to(run)
    args = {
        "md": ["report", str(run), "--md", "-o", str(run)],
        "html": ["report", str(run), "--html", "-o", str(run)],
        "link": ["report", str(run), "--md", "-o", str(tmp_path / "r.md")],
        "baseline": ["report", "--baseline", str(run), str(_copy_run(tmp_path, "new.json", "run_new.json")), "--md", "-o", str(run)],
        "csv": ["report", str(_copy_run(tmp_path, "cases.csv")), "--csv", str(tmp_path)],
    }[case]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert "is an input of this command" in r.output.replace("\n", ""), r.output
    assert run.read_bytes() == before
    if case == "csv":
        assert (tmp_path / "cases.csv").read_bytes() == before and not (tmp_path / "layers.csv").exists()


@pytest.mark.parametrize("how", ["md", "html", "csv"])
def test_a_report_write_on_a_full_disk_keeps_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """A full disk used to leave a truncated fragment in place of the previous report, and an error naming no file."""
    import errno
    import os

    run = _copy_run(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    target = out / {"md": "r.md", "html": "r.html", "csv": "cases.csv"}[how]
    opts = {"md": ["--md", "-o", str(target)], "html": ["--html", "-o", str(target)], "csv": ["--csv", str(out)]}[how]
    # the previous report is one gcbench wrote (a file it did not write is refused before any work)
    first = CliRunner().invoke(app, ["report", str(run), *opts])
    assert first.exit_code == 0, first.output
    for extra in [p for p in out.iterdir() if p != target]:
        extra.unlink()
    previous = target.read_text(encoding="utf-8")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")  # what a write that fills the disk raises: no file name

    monkeypatch.setattr(os, "fsync", full)
    r = CliRunner().invoke(app, ["report", str(run), *opts])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert f"error: cannot write {target}: No space left on device" in r.output.replace("\n", ""), r.output
    assert target.read_text(encoding="utf-8") == previous
    assert sorted(p.name for p in out.iterdir()) == [target.name]  # no temporary file left behind


def _awkward_file(tmp_path: Path, name: str, edit: Any) -> Path:
    """The golden run with ``edit(data)`` applied, written as ``name`` (json.dumps writes a lone surrogate as \\udxxx)."""
    data = json.loads((GOLDEN / "run_base.json").read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _huge(data: dict[str, Any]) -> None:
    case = data["cases"][0]
    case["size"]["wire_bytes"] = case["size"]["ratio"] = 10**400  # an int no float holds (JSON reads 1e999 as inf)
    case["fidelity"]["q"]["mean"] = 10**400
    case["layers"][0]["ratio"] = -(10**400)


def _surrogate(data: dict[str, Any]) -> None:
    case = data["cases"][0]
    case["label"] = "lab\ud800el"
    case["layers"][0]["name"] = "lay\udfffer"
    case["error"] = "\ud83d alone"


@pytest.mark.parametrize("mode", [[], ["--md"], ["--layers"], ["--md", "--layers"], ["--csv", "CSV"], ["--md", "-o", "OUT.md"],
                                  ["--baseline", str(GOLDEN / "run_base.json"), "--fail-on-regression"]])
def test_numbers_beyond_floats_and_lone_surrogates_render_without_a_traceback(tmp_path: Path, mode: list[str]) -> None:
    mode = [str(tmp_path / m) if m in ("CSV", "OUT.md") else m for m in mode]
    for path in (_awkward_file(tmp_path, "huge.json", _huge), _awkward_file(tmp_path, "sur.json", _surrogate)):
        r = runner.invoke(app, ["report", str(path), *mode])
        assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
        assert "Traceback" not in r.output and r.exit_code in (0, 1), r.output
        if r.exit_code == 1:  # only the gate may fail, and it says why in a line
            assert "--fail-on-regression" in mode and "error: regression gate" in r.output
    if "--md" in mode and "-o" not in mode:
        assert "lab?el" in r.output


def test_a_record_reads_numbers_beyond_floats_as_infinity_and_refuses_huge_integers(tmp_path: Path) -> None:
    run = load_run(_awkward_file(tmp_path, "huge.json", _huge))
    assert run.cases[0].size.wire_bytes == float("inf") and run.cases[0].layers[0].ratio == float("-inf")
    assert run.cases[0].metric("ratio") is None  # not finite: a reader's "no value", as a stored infinity
    assert fmt(float("inf")) == "∞" and fmt(float("-inf"), "ratio") == "−∞" and fmt(float("nan")) == "—"
    assert fmt(10**400) == "∞" and fmt(-(10**400), "ms") == "−∞"  # an int beyond floats (a parameter) as text, no OverflowError

    def huge_count(data: dict[str, Any]) -> None:
        data["cases"][0]["layers"][0]["numel"] = 10**400

    with pytest.raises(ResultsError, match=r"layers\[0\]\.numel: expected an integer of at most 64 bits"):
        load_run(_awkward_file(tmp_path, "count.json", huge_count))
    sur = load_run(_awkward_file(tmp_path, "sur.json", _surrogate))
    assert sur.cases[0].label == "lab?el" and sur.cases[0].layers[0].name == "lay?er"


def _long_names(data: dict[str, Any]) -> None:
    for c in data["cases"]:
        if c.get("layers"):
            c["layers"][0]["name"] = "layer." + "L" * 5000 + ".weight"
    data["cases"][0]["label"] = "X" * 5000
    data["cases"][0]["source"]["label"] = "S" * 5000


def test_long_names_are_clipped_in_terminal_tables_and_whole_in_files(tmp_path: Path) -> None:
    src = _awkward_file(tmp_path, "long.json", _long_names)
    for mode in (["--layers"], []):
        r = runner.invoke(app, ["report", str(src), *mode], env={"COLUMNS": "160"})
        assert r.exit_code == 0, r.output
        lines = r.output.splitlines()
        assert max(cell_len(line) for line in lines) <= 200  # the piped console's width: no line stretched past it
        headers = [line for line in lines if line.startswith("┃ layer" if mode else "┃ case")]
        # every other column keeps its header (before, a 5,000-character name squeezed them to nothing)
        assert headers and all(("elements" in h) if mode else ("comp ×copy" in h or "agg q" in h) for h in headers), headers
        assert "X" * 81 not in r.output and "L" * 81 not in r.output and "S" * 81 not in r.output
    assert "X" * 52 + "…" + "X" * 27 in r.output  # clipped in the middle to NAME_MAX = 80 characters
    r = runner.invoke(app, ["report", str(src), "--md", "--layers"])
    assert r.exit_code == 0 and "layer." + "L" * 5000 + ".weight" in r.output  # a file keeps them whole
    r = runner.invoke(app, ["report", str(src), "--md"])
    assert r.exit_code == 0 and "X" * 5000 in r.output


def test_case_rows_decide_a_failed_case_once_for_every_renderer() -> None:
    """The view model (:func:`gcbench.report.views.case_rows`): a case that ran has a text per column, a failed one its error."""
    from gcbench.report.views import case_rows

    cases = [RunCase.model_validate(c) for c in json.loads((GOLDEN / "run_base.json").read_text())["cases"]]
    failed = cases[0].model_copy(update={"status": "failed", "error": "boom | *x*"})
    rows = case_rows([cases[0], failed], SUMMARY_COLUMNS)
    assert rows[0].ok and len(rows[0].texts) == len(SUMMARY_COLUMNS) and rows[0].error == ""
    assert rows[0].values(SUMMARY_COLUMNS) == [col.get(cases[0]) for col in SUMMARY_COLUMNS]
    assert not rows[1].ok and rows[1].texts == () and rows[1].values(SUMMARY_COLUMNS) == [] and "boom" in rows[1].error
    assert rows[1].name == case_name(failed)


def test_a_columns_direction_is_the_metrics_catalogues() -> None:
    """A column of a catalogued metric takes its direction from :data:`gcbench.results.metrics.METRICS`, spelled once."""
    from gcbench.report.columns import CATALOGUE, Column
    from gcbench.results.metrics import METRICS

    direction = {m.name: m.higher_is_better for m in METRICS}
    for col in (*SUMMARY_COLUMNS, *ONESHOT_COLUMNS, *TRAIN_COLUMNS, *BENCH_COLUMNS):
        if col.metric in direction:
            assert col.higher_is_better is direction[col.metric], col.key
    assert Column("q", "q", "q", "g", CATALOGUE, "").titled == "q ↓"
    with pytest.raises(ValueError, match="not in the metrics catalogue"):
        Column("x", "x", "not_a_metric", "g", CATALOGUE, "")


def test_markdown_escapes_what_would_be_html_or_an_entity_and_leaves_a_plain_ampersand() -> None:
    """Issue 33 item 8: the Markdown read "Aji &amp; Heafield"; hostile text must still never become HTML."""
    assert md_escape("Aji & Heafield") == "Aji & Heafield"
    assert md_escape("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert(1)&gt;"
    assert md_escape("&lt;script&gt;") == "&amp;lt;script&amp;gt;"  # shown as typed, not turned into "<script>"
    assert md_escape("a|b_c") == "a\\|b\\_c"


def test_the_bench_table_fits_120_columns_without_cutting_a_number() -> None:
    """Issue 33 item 7: bench's target column wrapped onto eight lines and cells were cut ("1 Gbi…")."""
    from gcbench.report.terminal import bench_table

    console = Console(width=120, record=True, emoji=False)
    console.print(bench_table(_run("bench_small")))
    text = console.export_text()
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert rows and all(len(line) <= 120 for line in text.splitlines())
    assert not any("…" in line for line in rows), "a cell was cut"
    assert "targets: " in text


def test_the_markdown_of_a_run_carries_each_sources_answer() -> None:
    """Issue 33 items 2 and 4: the recommendation (and a compare run's verdicts) reach the Markdown, not only the terminal."""
    text = markdown_report([_run("run_base")])
    assert "**live resnet50: no recommendation — these results have no stream" in text
    answers = [line for line in text.splitlines() if line.startswith("**")]
    assert len(answers) == len(by_source(_run("run_base").cases))  # one per source
    assert not any("<img" in line for line in answers)  # a hostile source label stays text


def test_a_run_whose_budget_cut_most_timings_says_so_once_under_the_table() -> None:
    from gcbench.report.views import cut_caveat
    from gcbench.results.run_record import RunCase

    def case(i: int, flags: list[str], samples: list[float]) -> RunCase:
        x = {"median": 2.0, "iqr": 0.0, "samples": samples, "flags": flags}
        return RunCase.model_validate({"name": "c", "label": f"c{i}", "status": "ok", "timing": {"compress_x_copy": x}})

    cut, full = ["cut short"], []
    mostly = [case(0, cut, [2.0]), case(1, cut, [2.0]), case(2, cut, [2.0, 2.1]), case(3, full, [2.0] * 5)]
    text = cut_caveat(mostly)
    assert "3 of 4 figures were cut short" in text and "2 of them from one round" in text and "gcbench bench --model" in text
    assert cut_caveat([case(0, cut, [2.0]), case(1, full, [2.0] * 5), case(2, full, [2.0] * 5)]) == ""  # one row: its flag
    assert cut_caveat([case(0, full, [2.0] * 5)]) == "" and cut_caveat([]) == ""
    assert "cut short by the run's timing budget" in stream_caption(mostly)


def test_bench_caption_has_a_roofline_per_size_and_says_where_x_copy_cannot_repeat() -> None:
    """Two sizes: one copy roofline each (never one median over both); a cache-resident size whose copies spread past
    the limit across the cases' processes says ×copy there will not repeat, a lone resident case that it may not, and
    a resident size whose copies agreed says nothing more."""
    run = _run("bench_small")
    small = [c for c in run.cases if c.ok and c.numel == 100_000]
    large = [c for c in run.cases if c.ok and c.numel == 1_000_000]
    for c in small:
        c.copy_cache_resident, c.copy_cases, c.copy_spread, c.copy_range_s = True, len(small), 2.9, [1e-4, 2.9e-4]
    text = markdown_report([run])
    assert "copy roofline at 100K (same tensor into a preallocated buffer)" in text
    assert "copy roofline at 1M (same tensor into a preallocated buffer)" in text
    assert "×copy at 100K will not repeat run to run: this copy, which the caches hold, took 0.1–0.29 ms across the 2 cases'" in text
    assert "×copy at 1M" not in text  # not marked resident: nothing said
    for c in small:
        c.copy_spread = 1.1
    assert "×copy at 100K" not in markdown_report([run])
    for c in large:
        c.copy_cache_resident, c.copy_cases = True, 1
    assert "×copy at 1M may not repeat run to run" in markdown_report([run])
