"""The command line through typer's runner: list, validate, run, and user errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.compressors import registry
from gcbench.results.store import SCHEMA_VERSION, load_run

runner = CliRunner()

TINY = """
name = "tiny"
seed = 3
[[sources]]
kind = "synthetic"
shapes = [[64, 32], [10]]
workers = 2
steps = 2
[metrics]
repeats = 3
timing_repeats = 2
warmup = 0
[[compressors]]
name = "topk"
params = { density = 0.1, error_feedback = true }
[[compressors]]
name = "qsgd"
[[compressors]]
name = "terngrad"
"""


def _write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_version() -> None:
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and "gcbench" in r.output


def test_list_shows_every_compressor_and_json() -> None:
    r = runner.invoke(app, ["list"])
    assert r.exit_code == 0
    r = runner.invoke(app, ["list", "--json"])
    rows = json.loads(r.output)
    assert {row["name"] for row in rows} == set(registry.names())
    for row in rows:
        assert row["version"] >= 1 and row["paper"] and row["description"]
        assert isinstance(row["biased"], bool) and isinstance(row["stateful"], bool)


def test_list_unknown_kind_is_one_line() -> None:
    r = runner.invoke(app, ["list", "compresors"])
    assert r.exit_code == 1 and "did you mean 'compressors'" in r.output and "Traceback" not in r.output


def test_validate_good_and_bad(tmp_path: Path) -> None:
    r = runner.invoke(app, ["validate", str(_write(tmp_path, TINY))])
    assert r.exit_code == 0 and "ok:" in r.output
    bad = TINY.replace("density = 0.1", "density = 5")
    p = _write(tmp_path, bad, "bad.toml")
    r = runner.invoke(app, ["validate", str(p)])
    assert r.exit_code == 1
    assert f"{p}: compressors[0].params.density: must be in (0, 1], got 5" in r.output.replace("\n", "")
    assert "Traceback" not in r.output


@pytest.mark.parametrize("text", ["name = \n[[compressors]\n", "this is not toml at all", TINY.replace('"topk"', '"topkk"'),
                                  TINY.replace("workers = 2", "workers = -1"), "\x00\x01binary"])
def test_corrupt_suites_exit_1_without_traceback(tmp_path: Path, text: str) -> None:
    p = _write(tmp_path, text)
    for cmd in (["validate", str(p)], ["run", str(p), "--out", str(tmp_path / "runs")]):
        r = runner.invoke(app, cmd)
        assert r.exit_code == 1, r.output
        assert "Traceback" not in r.output
        assert r.exception is None or isinstance(r.exception, SystemExit)
        assert "error:" in r.output


def test_run_writes_a_valid_results_file(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = runner.invoke(app, ["run", str(_write(tmp_path, TINY)), "--out", str(runs), "--quiet"])
    assert r.exit_code == 0, r.output
    files = list(runs.glob("*.json"))
    assert len(files) == 1
    data = load_run(files[0])
    assert data.schema_version == SCHEMA_VERSION and data.status == "complete"
    assert data.suite.name == "tiny" and len(data.suite_hash) == 16
    env = data.environment
    assert env.cpu_count and env.torch_threads and env.torch and "cpu_model" in env.model_fields_set
    assert data.git is not None and {"commit", "dirty"} <= data.git.model_fields_set
    labels = [c.label for c in data.cases]
    assert labels == ["topk(density=0.1,error_feedback=True)", "qsgd", "terngrad"]
    for c in data.cases:
        assert c.status == "ok"
        assert c.size.wire_bytes > 0 and c.size.ratio > 1
        assert c.fidelity.q.model is not None and c.timing.compress.median_s > 0
        assert len(c.timing.compress.samples_s) == c.timing.rounds >= 2  # timing_repeats is the least number of rounds
    topk = data.cases[0]
    assert topk.ef_drift.sum_drift and len(topk.ef_drift.sum_drift) == 2
    tern = data.cases[2]
    # one 4-byte scaler per tensor (2 tensors) per step, received from the one other worker
    assert tern.traffic["scaler"].sent_mean == 8 and tern.traffic["scaler"].received_mean == 8
    assert "ratio" in r.output and str(files[0]) in r.output.replace("\n", "")


def test_run_json_and_failed_case_exit_code(tmp_path: Path) -> None:
    r = runner.invoke(app, ["run", str(_write(tmp_path, TINY)), "--out", str(tmp_path / "runs"), "--json", "-c", "signsgd",
                            "--no-timing"])
    assert r.exit_code == 0, r.output
    payload = json.loads(r.output)
    assert [c["label"] for c in payload["cases"]] == ["signsgd"]
    assert payload["cases"][0]["timing"] is None


def test_nan_source_is_reported_per_tensor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from gcbench.sources import synthetic

    orig = synthetic.SyntheticSource.gradients

    def poisoned(self, step, worker):
        g = dict(orig(self, step, worker))
        t = g["t1"].clone()
        t[3] = float("nan")
        g["t1"] = t
        return g

    monkeypatch.setattr(synthetic.SyntheticSource, "gradients", poisoned)
    r = runner.invoke(app, ["run", str(_write(tmp_path, TINY)), "--out", str(tmp_path / "runs"), "--quiet"])
    assert r.exit_code == 1
    assert "t1" in r.output and "NaN" in r.output and "Traceback" not in r.output
    assert torch.isnan(torch.tensor(float("nan")))
