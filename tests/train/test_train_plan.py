"""gcbench train with a compression plan (-c plan:FILE / --plan FILE): 2 gloo processes train a user factory with the
plan in the DDP hook, the results record the plan, each tensor's rule and each rule's bytes; a plan that cannot run
is one line, exit 1, before any process starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

FACTORY = str(Path(__file__).resolve().parents[1] / "user_factory.py") + ":tiny"  # 0.weight 30, 0.bias 5, 2.weight 15, 2.bias 3
TOPK = "topk:density=0.2,error_feedback=true"
PLAN = f"""[plan]
name = "small"
warmup_steps = 3
warmup = "bf16"
[[plan.rule]]
numel_below = 20
compressor = "none"
[[plan.rule]]
default = true
compressor = "{TOPK}"
"""
STEPS = 10  # one epoch of a factory model


def _train(tmp_path: Path, *args: str) -> Any:
    from gcbench.cli import app

    return CliRunner().invoke(app, ["train", "--workers", "2", "--epochs", "1", "--timeout", "120", "--out", str(tmp_path / "runs"),
                                    "--quiet", "--model", FACTORY, "--trust-code", *args])


def test_a_plan_trains_in_the_hook_and_its_rules_are_recorded(tmp_path: Path) -> None:
    plan = tmp_path / "small.toml"
    plan.write_text(PLAN, encoding="utf-8")
    res = _train(tmp_path, "-c", TOPK, "--plan", str(plan))
    assert res.exit_code == 0, res.output
    (path,) = (tmp_path / "runs").glob("*.json")
    data = json.loads(path.read_text())
    assert [c["label"] for c in data["cases"]] == ["none", TOPK, "plan:small"]
    case = data["cases"][-1]
    tr = case["training"]
    assert case["status"] == "ok" and case["compressor"] == "plan" and tr["replicas_consistent"] and tr["steps"] == STEPS
    assert case["plan"]["name"] == "small" and case["plan"]["warmup_steps"] == 3
    assert case["params"]["file"] == str(plan) and case["params"]["plan"]["rule"][1]["compressor"] == TOPK
    assert case["assignment"] == {"0.weight": 2, "0.bias": 1, "2.weight": 1, "2.bias": 1}
    rows = case["plan_rules"]
    assert [(r["tensors"], r["elements"], r["protocol"]) for r in rows] == [(3, 23, "allreduce"), (1, 30, "allgather")]
    assert all(r["bytes"] > 0 for r in rows) and rows[1]["bytes"] < 30 * 4  # top-k sends less than its tensor dense
    # the run's bytes are the warm-up's and the rules', each a sum of real payload lengths
    total = case["training"]["bytes"]["payload_bytes_per_worker"]
    assert total == pytest.approx(3 * case["warmup_payload_bytes_per_step"] + (STEPS - 3) * sum(r["bytes"] for r in rows))
    assert tr["hook"]["compressor"] == "plan" and tr["hook"]["steps"] == {"warmup": 3, "rules": STEPS - 3}
    out = " ".join(res.output.split())
    assert "plan:small — per rule" in out and "numel < 20" in out
    # advise's step model prices the plan rule by rule (each group by its own protocol) beside the measured step
    pred = tr["prediction"]
    assert pred["step_s"] is not None and pred["communicate_s"] > 0 and "none:" in pred["collective"]
    assert pred["step_s"] == pytest.approx(pred["compute_s"] + pred["compress_s"] + pred["communicate_s"] + pred["decompress_s"])
    assert "plan:small: measured" in out and "advise predicted" in out
    from gcbench.cli import app

    shown = CliRunner().invoke(app, ["report", str(path)], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "plan:small — per rule" in shown.output and "after the warm-up, the mean over the ranks" in " ".join(shown.output.split())


BAD = {
    "nothing": (PLAN.replace("numel_below = 20", 'kind = "embedding"'), "matches no tensor"),
    "no default": (PLAN.replace("default = true\n", 'name = "x"\n'), "no default rule"),
    "local steps": (PLAN.replace("[plan]\n", "[plan]\nlocal_steps = 4\n"), "gcbench converge"),
    "warm-up": (PLAN.replace("warmup_steps = 3", "warmup_steps = 10"), "warmup_steps = 10"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_plan_that_cannot_run_is_one_line_before_any_process(tmp_path: Path, case: str) -> None:
    text, expected = BAD[case]
    plan = tmp_path / "bad.toml"
    plan.write_text(text, encoding="utf-8")
    res = _train(tmp_path, "-c", f"plan:{plan}")
    assert res.exit_code == 1, res.output
    assert expected in " ".join(res.output.split()) and "Traceback" not in res.output
    assert len([ln for ln in res.output.splitlines() if ln.strip()]) == 1, res.output
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*.json"))


def test_a_missing_plan_file_is_one_line(tmp_path: Path) -> None:
    res = _train(tmp_path, "--plan", str(tmp_path / "nope.toml"))
    assert res.exit_code == 1 and "nope.toml" in res.output and "Traceback" not in res.output
