"""gcbench advise --plan auto|FILE and --device: a plan written and read back, its rivals, bad input before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from gcbench.plan.reader import load_plan

FAST = ["--model", "mlp", "--workers", "16", "--bandwidth", "1", "-c", "topk", "-c", "onebit", "--compute-ms", "5",
        "--budget", "5", "--rounds", "1"]


#: the checkout: the bench's worker processes import gcbench from a test's own working folder
ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))


def _advise(tmp: Path, *args: str) -> object:
    from gcbench.cli import app

    return CliRunner().invoke(app, ["advise", "--out", str(tmp / "runs"), "--runs-dir", str(tmp / "runs"), *args])


def test_plan_auto_on_mlp_writes_a_plan_that_loads_and_prices_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = _advise(tmp_path, "--plan", "auto", *FAST, "--json", "--csv", "plan.csv")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    data = json.loads(r.output)  # type: ignore[attr-defined]
    path = Path(data["plan_file"])
    assert path == Path("reports/plans/mlp-16x1.toml") and path.read_text().startswith("# gcbench advise --plan auto")
    plan = load_plan(path)
    assert plan.rules[-1].default and {r.compressor for r in plan.rules} <= {"topk", "onebit", "bf16", "none"}
    assert data["step"]["step_s"] <= min(s["step_s"] for s in data["singles"] if s["below_floor"] == 0) * (1 + 1e-9)
    assert sum(row["tensors"] for row in data["rules"]) == 6  # the mlp's six tensors, each under one rule
    assert sum(row["bytes_share"] for row in data["rules"]) == pytest.approx(1.0)
    assert Path("plan.csv").read_text().startswith("workers,bandwidth_gbps,compressor,")
    # the written plan priced as a given plan: the same step
    again = _advise(tmp_path, "--plan", str(path), *FAST, "--json")
    assert again.exit_code == 0, again.output  # type: ignore[attr-defined]
    assert json.loads(again.output)["step"]["step_s"] == pytest.approx(data["step"]["step_s"])  # type: ignore[attr-defined]
    # rerun replaces the plan advise wrote
    assert _advise(tmp_path, "--plan", "auto", *FAST, "-q").exit_code == 0  # type: ignore[attr-defined]


def test_a_given_plan_with_local_steps_is_priced_per_inner_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for h in (1, 8):
        Path(f"h{h}.toml").write_text(f'[plan]\nlocal_steps = {h}\n[[plan.rule]]\ndefault = true\ncompressor = "bf16"\n')
    steps = {}
    for h in (1, 8):
        r = _advise(tmp_path, "--plan", f"h{h}.toml", *FAST, "--json")
        assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
        steps[h] = json.loads(r.output)["step"]  # type: ignore[attr-defined]
    assert steps[8]["compute_s"] == steps[1]["compute_s"] == pytest.approx(0.005)
    assert steps[8]["step_s"] - 0.005 == pytest.approx((steps[1]["step_s"] - 0.005) / 8)
    text = _advise(tmp_path, "--plan", "h8.toml", *FAST)
    assert "per inner step" in text.output  # type: ignore[attr-defined]


@pytest.mark.parametrize(("args", "code", "words"), [
    (["--plan", "auto", "--model", "mlp", "--bandwidth", "1,10"], 1, "one --workers and one --bandwidth"),
    (["--plan", "auto", "--model", "mlp", "--bandwidth", "1", "--fidelity-floor", "2"], 1, "in [-1, 1]"),
    (["--plan-out", "x.toml", "--model", "mlp"], 1, "--plan auto"),
    (["--plan", "missing.toml", "--model", "mlp", "--bandwidth", "1"], 1, "missing.toml"),
    (["--plan", "auto", "--bandwidth", "1"], 1, "--model"),
    (["--model", "mlp", "--device", "gpu"], 2, "expected cpu, cuda or cuda:N"),
])
def test_bad_input_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], code: int,
                               words: str) -> None:
    monkeypatch.chdir(tmp_path)
    r = _advise(tmp_path, *args)
    assert r.exit_code == code and words in r.output and "Traceback" not in r.output, r.output  # type: ignore[attr-defined]
    assert not (tmp_path / "runs").exists()  # before any measuring


def test_plan_out_never_replaces_a_file_advise_did_not_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("mine.toml").write_text("[plan]\n# my own plan\n")
    r = _advise(tmp_path, "--plan", "auto", *FAST, "--plan-out", "mine.toml")
    assert r.exit_code == 1 and "mine.toml" in r.output  # type: ignore[attr-defined]
    assert Path("mine.toml").read_text() == "[plan]\n# my own plan\n" and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("device", ["cuda", "cuda:3"])
def test_device_cuda_without_cuda_is_one_line_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              device: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = _advise(tmp_path, "--model", "mlp", "--device", device)
    assert r.exit_code == 1 and "no CUDA device is available" in r.output  # type: ignore[attr-defined]
    assert not (tmp_path / "runs").exists()


def test_convergence_evidence_leaves_out_what_missed_its_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.converge_fixture import write_converge

    monkeypatch.chdir(tmp_path)
    conv = write_converge(tmp_path / "conv.json")
    r = _advise(tmp_path, "--plan", "auto", "--model", "mlp", "--workers", "16", "--bandwidth", "1", "--compute-ms", "5",
                "--budget", "5", "--rounds", "1", "--convergence", str(conv), "--json")
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    data = json.loads(r.output)  # type: ignore[attr-defined]
    left = " ".join(data["not_candidates"])
    assert all(f"{s}:" in left for s in ("signsgd", "randomk", "qsgd"))  # partial, never, diverged
    assert {s["compressor"] for s in data["singles"]} == {"fp16", "topk", "bf16", "none"}
    assert {r["compressor"] for r in data["rules"]} <= {"fp16", "topk", "bf16", "none"}
    used = {r["compressor"] for r in data["rules"]}
    # the fixture's mean steps to target (none: the reference; bf16, not trained there, is charged the reference's)
    steps = {"fp16": 120.0, "topk": 460 / 3, "none": 120.0, "bf16": 120.0}
    assert data["plan_steps_to_target"] == pytest.approx(max(steps[s] for s in used))
    tta = {s["compressor"]: s["step_s"] * s["steps_to_target"] for s in data["singles"] if s["below_floor"] == 0}
    assert data["step"]["step_s"] * data["plan_steps_to_target"] <= min(tta.values()) * (1 + 1e-9)
