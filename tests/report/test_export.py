"""CSV export (:mod:`gcbench.report.export`, ``gcbench report --csv DIR``): tidy files that read back to the record's numbers."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.core.errors import GcbenchError
from gcbench.measure.runner import run_suite
from gcbench.measure.suite import parse_suite
from gcbench.report.export import (
    BENCH_METRIC_COLUMNS,
    CSV_FILES,
    RUN_METRIC_COLUMNS,
    TRAIN_METRIC_COLUMNS,
    MetricColumn,
    cell,
    write_csv,
)
from gcbench.report.load import LoadedRun, load_runs
from gcbench.results.bench_record import BenchCase
from gcbench.results.run_record import RunCase
from gcbench.results.train_record import TrainCase

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
runner = CliRunner()


@pytest.fixture(scope="module")
def streamed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh run with everything a case can hold: three layers, a 3-step stream, timed rounds, EF drift (dgc)."""
    suite = parse_suite({"name": "tiny", "seed": 0,
                         "sources": [{"kind": "synthetic", "shapes": [[64, 32], [32], [16, 8]], "workers": 2, "steps": 3}],
                         "compressors": [{"name": "none"}, {"name": "topk"}, {"name": "dgc", "params": {"density": 0.1}}],
                         "metrics": {"repeats": 2, "timing_repeats": 3}})
    return run_suite(suite, tmp_path_factory.mktemp("runs")).path


def _read(folder: Path, name: str) -> tuple[list[str], list[dict[str, str]]]:
    with (folder / name).open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def _number(text: str) -> float | None:
    return None if text == "" else float(text)


def _metric_columns(case: Any) -> tuple[MetricColumn, ...]:
    if isinstance(case, BenchCase):
        return BENCH_METRIC_COLUMNS
    return TRAIN_METRIC_COLUMNS if isinstance(case, TrainCase) else RUN_METRIC_COLUMNS


def _case_name(case: Any) -> str:
    return case.name if isinstance(case, BenchCase) else case.label


def test_every_metric_cell_reads_back_to_the_records_number(tmp_path: Path, streamed_run: Path) -> None:
    runs = load_runs([str(streamed_run), str(GOLDEN / "run_base.json"), str(GOLDEN / "bench_small.json"),
                      str(GOLDEN / "train_digits.json")])
    written = write_csv(tmp_path, runs)
    assert [w.path.name for w in written] == list(CSV_FILES) and not any(w.replaced for w in written)
    header, rows = _read(tmp_path, "cases.csv")
    assert len(rows) == sum(len(r.cases) for r in runs) == written[0].rows
    # stable snake_case names, each once; units in the name where a value has one
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", h) for h in header) and len(set(header)) == len(header)
    assert {"compress_ms", "decompress_ms", "compress_x_copy", "wire_bytes"} <= set(header)
    checked: Counter[str] = Counter()
    for row, (run, case) in zip(rows, [(r, c) for r in runs for c in r.cases], strict=True):  # in the files' order
        assert (row["run_id"], row["kind"], row["case"]) == (run.run_id, run.kind, _case_name(case))
        for col in _metric_columns(case):
            want = col.value(case)
            assert _number(row[col.name]) == want, (run.kind, _case_name(case), col.name)  # exact: repr round-trips
            checked[run.kind] += want is not None
    assert checked["run"] > 50 and checked["bench"] > 10 and checked["train"] > 10  # real numbers, not empty cells
    fresh = [r for r in rows if r["run_id"] == runs[0].run_id]
    assert all(r["delivered"] and r["compress_x_copy_ci_lo"] and r["timing_rounds"] for r in fresh)
    dgc = next(r for r in fresh if r["compressor"] == "dgc")
    assert dgc["stream_enough"] == "false" and dgc["stateful"] == "true" and dgc["params"].startswith("density=0.1")


def test_one_row_per_layer_per_step_and_per_timed_round(tmp_path: Path, streamed_run: Path) -> None:
    runs = load_runs([str(streamed_run)])
    write_csv(tmp_path, runs)
    cases: list[RunCase] = runs[0].cases
    _, layers = _read(tmp_path, "layers.csv")
    _, steps = _read(tmp_path, "steps.csv")
    _, timings = _read(tmp_path, "timings.csv")
    for c in cases:
        mine = [r for r in layers if r["case"] == c.label]
        assert [r["unit"] for r in mine] == [u.name for u in c.layers or []] and len(mine) == 3
        for r, u in zip(mine, c.layers or [], strict=True):
            assert _number(r["ratio"]) == u.ratio and _number(r["q"]) == u.q and int(r["numel"]) == u.numel
            assert _number(r["bits_per_element"]) == pytest.approx(8 * (u.wire_bytes or 0) / (u.numel or 1))
        mine = [r for r in steps if r["case"] == c.label]
        assert c.stream is not None and [int(r["step"]) for r in mine] == [1, 2, 3]
        assert [_number(r["delivered"]) for r in mine] == c.stream.per_step_delivered
        assert [_number(r["step_error"]) for r in mine] == c.stream.per_step_error
        assert _number(mine[-1]["delivered"]) == c.metric("delivered")  # the last step's is the case's number
        assert c.timing is not None
        for kernel, timing in (("compress", c.timing.compress), ("decompress", c.timing.decompress), ("copy", c.timing.copy_)):
            mine = [r for r in timings if r["case"] == c.label and r["kernel"] == kernel]
            assert timing is not None and [_number(r["time_ms"]) for r in mine] == [1e3 * s for s in timing.samples_s or []]
            assert [int(r["round"]) for r in mine] == list(range(1, len(mine) + 1)) and mine
        x = c.timing.x_copy("compress")
        assert x is not None and [_number(r["x_copy"]) for r in timings
                                  if r["case"] == c.label and r["kernel"] == "compress"] == x.samples
    dgc = next(c for c in cases if c.compressor == "dgc")
    assert dgc.ef_drift is not None and [_number(r["ef_drift"]) for r in steps if r["case"] == dgc.label] == dgc.ef_drift.sum_drift


def test_several_runs_share_one_file_per_table_told_apart_by_run_id(tmp_path: Path) -> None:
    runs = load_runs([str(GOLDEN / "run_base.json"), str(GOLDEN / "run_new.json")])
    write_csv(tmp_path, runs)
    _, layers = _read(tmp_path, "layers.csv")
    assert Counter(r["run_id"] for r in layers) == {r.run_id: sum(len(c.layers or []) for c in r.cases if c.ok) for r in runs}
    _, rows = _read(tmp_path, "cases.csv")
    failed = [r for r in rows if r["status"] != "ok"]
    assert failed and all(r["error"] and r["ratio"] == "" for r in failed)  # a failed case: its error, empty numbers
    data = json.loads((GOLDEN / "run_new.json").read_text(encoding="utf-8"))
    data["kind"] = "compare"  # `gcbench compare` files hold run cases: the same tables
    write_csv(tmp_path, [LoadedRun(GOLDEN / "run_new.json", data)])
    _, rows = _read(tmp_path, "cases.csv")
    assert {r["kind"] for r in rows} == {"compare"} and len(rows) == len(data["cases"]) and rows[0]["ratio"]


def test_a_bench_file_gets_its_own_columns_and_its_rounds(tmp_path: Path) -> None:
    runs = load_runs([str(GOLDEN / "bench_small.json")])
    write_csv(tmp_path, runs)
    header, rows = _read(tmp_path, "cases.csv")
    assert {"numel", "copy_ms", "target", "verdict"} <= set(header) and "delivered" not in header
    assert [r["verdict"] for r in rows] == ["pass", "pass", "short", "short", "error"]
    _, timings = _read(tmp_path, "timings.csv")
    bench: list[BenchCase] = runs[0].cases
    for c in bench:
        for kernel, t in (("compress", c.compress), ("copy", c.copy_)):
            mine = [r for r in timings if r["case"] == c.name and r["numel"] == str(c.numel) and r["kernel"] == kernel]
            assert [_number(r["time_ms"]) for r in mine] == ([1e3 * s for s in t.samples_s or []] if c.ok and t else [])
    _, layers = _read(tmp_path, "layers.csv")
    assert layers == []  # the header alone: four files every time, none left from an earlier export


def test_awkward_text_round_trips_through_the_csv_quoting(tmp_path: Path) -> None:
    data = json.loads((GOLDEN / "run_base.json").read_text(encoding="utf-8"))
    data["cases"][0]["label"] = 'top,k "x"\nsecond line'
    run = LoadedRun(GOLDEN / "run_base.json", data)
    write_csv(tmp_path, [run])
    _, rows = _read(tmp_path, "cases.csv")
    assert rows[0]["case"] == 'top,k "x"\nsecond line'
    assert cell(float("nan")) == "" and cell(True) == "true" and cell(["a", "b"]) == "a;b" and cell(0.1) == "0.1"


def test_text_cells_that_a_spreadsheet_would_run_as_formulas_are_neutralised(tmp_path: Path) -> None:
    data = json.loads((GOLDEN / "run_base.json").read_text(encoding="utf-8"))
    case = data["cases"][0]
    case["label"] = '=HYPERLINK("http://x","y")'
    case["source"]["label"] = "@SUM(A1)"
    case["layers"][0]["name"] = "-2+3"
    case["layers"][1]["name"] = "\tcmd"
    case["layers"][2]["name"] = "+cmd|' /C calc'!A0"
    case["layers"][3]["name"] = "\rx"
    case["layers"][4]["name"] = "plain = text"
    case["layers"][5]["name"] = "lone \ud800 surrogate"
    write_csv(tmp_path, [LoadedRun(GOLDEN / "run_base.json", data)])
    _, rows = _read(tmp_path, "cases.csv")
    assert rows[0]["case"] == "'" + case["label"] and rows[0]["source"] == "'@SUM(A1)"
    _, layers = _read(tmp_path, "layers.csv")
    names = [r["unit"] for r in layers if r["case"] == rows[0]["case"]][:6]
    assert names == ["'-2+3", "'\tcmd", "'+cmd|' /C calc'!A0", "'\rx", "plain = text", "lone ? surrogate"]
    # numbers are numbers: a negative value is written as it is, never prefixed
    assert cell(-0.5) == "-0.5" and cell(-3) == "-3" and cell("-0.5") == "'-0.5" and cell(["-a", "b"]) == "'-a;b"
    assert all(not r["q"].startswith("'") for r in layers)


def test_pandas_reads_the_files_as_they_are(tmp_path: Path, streamed_run: Path) -> None:
    pd = pytest.importorskip("pandas")
    runs = load_runs([str(streamed_run)])
    write_csv(tmp_path, runs)
    cases = pd.read_csv(tmp_path / "cases.csv")
    assert list(cases["ratio"]) == [c.metric("ratio") for c in runs[0].cases]
    assert cases["compress_ms"].dtype.kind == "f" and cases["stream_enough"].dtype == bool
    assert len(pd.read_csv(tmp_path / "layers.csv")) == 9 and len(pd.read_csv(tmp_path / "steps.csv")) == 9


def test_an_export_replaces_its_own_four_files_and_nothing_else(tmp_path: Path) -> None:
    runs = load_runs([str(GOLDEN / "run_base.json")])
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    write_csv(tmp_path, runs)
    before = (tmp_path / "cases.csv").read_text(encoding="utf-8")
    again = write_csv(tmp_path, runs)
    assert all(w.replaced for w in again) and (tmp_path / "cases.csv").read_text(encoding="utf-8") == before
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*CSV_FILES, "notes.txt"])  # no temporary file left
    (tmp_path / "steps.csv").unlink()
    (tmp_path / "steps.csv").mkdir()
    with pytest.raises(GcbenchError, match=r"steps\.csv: a folder of that name is in the way"):
        write_csv(tmp_path, runs)
    assert (tmp_path / "cases.csv").read_text(encoding="utf-8") == before  # nothing replaced: all four or none
    with pytest.raises(GcbenchError, match="it is a file"):
        write_csv(tmp_path / "notes.txt", runs)


def test_report_csv_on_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "csv"
    r = runner.invoke(app, ["report", str(GOLDEN / "run_base.json"), "--csv", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == sorted(CSV_FILES)
    assert "cases.csv: 12 rows" in r.output and "replaced" not in r.output
    r = runner.invoke(app, ["report", str(GOLDEN / "run_base.json"), "--csv", str(out)])
    assert r.exit_code == 0 and "cases.csv: 12 rows (replaced)" in r.output
    for extra in (["--md"], ["--html"], ["--layers"]):
        r = runner.invoke(app, ["report", str(GOLDEN / "run_base.json"), "--csv", str(out), *extra])
        assert r.exit_code == 1 and "--csv writes its own files" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["report", str(GOLDEN / "run_base.json"), "--csv", str(GOLDEN / "run_base.json")])
    assert r.exit_code == 1 and "it is a file, not a folder" in r.output
