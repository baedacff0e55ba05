"""``gcbench collectives``: tables within 120 columns, --json, --csv, and one-line errors with exit 1."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli import app

runner = CliRunner()
SMALL = ["--numel", "512", "--workers", "2,4", "--draws", "2", "-q"]


def test_tables_fit_120_columns() -> None:
    res = runner.invoke(app, ["collectives", "bf16", "qsgd", *SMALL, "--workers", "2,3,4,5,10,16", "--scheme", "ring,alltoall"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(line) for line in lines) <= 120
    assert "N=16" in res.output and "qsgd" in res.output and "alltoall/bf16" in res.output and "×" in res.output
    assert "±" in res.output  # qsgd's spread over the draws


def test_json_and_csv(tmp_path: Path) -> None:
    out = tmp_path / "sweep.csv"
    res = runner.invoke(app, ["collectives", "bf16", *SMALL, "--json", "--csv", str(out), "--accumulate", "fp32"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["workers"] == [2, 4] and data["numel"] == 512 and data["draws"] == 2
    assert {(r["scheme"], r["workers"]) for r in data["rows"]} == {(s, n) for s in ("ring", "alltoall", "allgather") for n in (2, 4)}
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 6 and float(rows[0]["error"]) == data["rows"][0]["error"]


def test_errors_are_one_line_exit_1() -> None:
    for args, text, code in ((["dgc"], "keeps state", 1), (["bf16", "--scheme", "allgather", "--accumulate", "bf16"], "fp32 only", 1),
                             (["bf16", "--scheme", "tree"], "unknown collective scheme", 2),  # an unknown name: exit 2
                             (["bf16", "--workers", "two"], "--workers", 1), (["lgc:preset=reference"], "lgc", 1)):
        res = runner.invoke(app, ["collectives", *args, *SMALL[:2]])
        assert res.exit_code == code, (args, res.output)
        assert text in res.output and "Traceback" not in res.output
        assert len([line for line in res.output.splitlines() if line.strip()]) == 1, res.output


def test_real_gradients_of_a_zoo_model() -> None:
    res = runner.invoke(app, ["collectives", "bf16", "--model", "mlp", "--workers", "2", "--scheme", "alltoall", "--accumulate",
                              "fp32", "--draws", "1", "--json", "-q"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["numel"] == 535_818 and "mlp" in data["distribution"]
    (row,) = data["rows"]
    assert 1e-4 < row["error"] < 1e-2 and row["x_fp32_ring"] == pytest.approx(0.5, abs=0.01)
    both = runner.invoke(app, ["collectives", "bf16", "--model", "mlp", "--trace", "somewhere"])
    assert both.exit_code == 1 and "not both" in both.output
