"""A suite's sharded-collectives sweep as a user sees it: printed by ``gcbench run``, and in ``report``'s terminal, Markdown and HTML."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.report.collectives_table import grid

runner = CliRunner()

SUITE = """
name = "sweep"
[[sources]]
kind = "synthetic"
shapes = [[16, 8]]
workers = 2
steps = 1
[[compressors]]
name = "bf16"
[metrics]
repeats = 2
timing = false
[collectives]
compressors = ["bf16", "qsgd"]
workers = [2, 3]
numel = 300
draws = 2
schemes = ["ring", "alltoall", "allgather"]
accumulate = ["fp32", "bf16"]
"""


def _run(tmp_path: Path, text: str = SUITE) -> tuple[str, Path]:
    suite = tmp_path / "s.toml"
    suite.write_text(text)
    r = runner.invoke(app, ["run", str(suite), "--out", str(tmp_path / "runs"), "--quiet"])
    assert r.exit_code == 0, r.output
    return r.output, next((tmp_path / "runs").glob("*.json"))


def test_run_prints_the_sweep_and_report_shows_it_in_every_format(tmp_path: Path) -> None:
    out, path = _run(tmp_path)
    sweep = json.loads(path.read_text())["collectives"]
    g = grid(sweep)
    assert g.workers == (2, 3) and len(g.error_rows) == len(g.bytes_rows) == 2 * 5  # compressors × scheme/acc pairs run
    assert g.skipped == ("not run under allgather/bf16: allgather decodes and averages in fp32 (bf16, qsgd)",)
    first = next(r for r in sweep["rows"] if (r["compressor"], r["scheme"], r["accumulate"], r["workers"]) == ("bf16", "ring", "fp32", 3))
    cell = f"{first['error']:.2e}"
    assert "sharded collectives" in out and "N=3" in out and cell in out and g.skipped[0] in out
    r = runner.invoke(app, ["report", str(path)])
    assert r.exit_code == 0 and "sharded collectives" in r.output and cell in r.output
    md = tmp_path / "r.md"
    assert runner.invoke(app, ["report", str(path), "--md", "-o", str(md)]).exit_code == 0
    text = md.read_text()
    assert "### Sharded collectives" in text and "| bf16 | ring/fp32 | " in text and cell in text
    html = tmp_path / "r.html"
    assert runner.invoke(app, ["report", str(path), "--html", "-o", str(html)]).exit_code == 0
    page = html.read_text()
    assert "Sharded collectives: error and bytes as N grows" in page and 'data-plot="collectives_error"' in page and cell in page


def test_run_json_carries_the_sweep_and_a_failed_sweep_is_one_line(tmp_path: Path) -> None:
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE)
    r = runner.invoke(app, ["run", str(suite), "--out", str(tmp_path / "runs"), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["collectives"]["workers"] == [2, 3]
    bad = SUITE.replace('compressors = ["bf16", "qsgd"]', 'compressors = ["dgc"]')
    (tmp_path / "b").mkdir()
    out, path = _run(tmp_path / "b", bad)
    assert "collectives sweep failed:" in out and "keeps state" in out
    r = runner.invoke(app, ["report", str(path), "--md"])
    assert r.exit_code == 0 and "collectives sweep failed:" in r.output
