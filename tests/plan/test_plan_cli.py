"""Plans on the command line: run and compare take -c plan:FILE and --plan FILE; validate matches a plan to a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli.application import app

runner = CliRunner()

SMALL = """[plan]
name = "small-dense"
warmup_steps = 20
[[plan.rule]]
numel_below = 1000
compressor = "none"
[[plan.rule]]
default = true
compressor = "topk:density=0.01,error_feedback=true"
"""


def _write(tmp_path: Path, text: str, name: str = "p.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


LIVE = ["--model", "digits_cnn", "--steps", "2", "--workers", "2", "-q"]


def test_run_with_a_plan(tmp_path: Path) -> None:
    plan = _write(tmp_path, SMALL)
    res = runner.invoke(app, ["run", "quick", "--plan", plan, "-c", "none", *LIVE, "--no-timing", "--json", "-o", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    cases = {c["label"]: c for c in json.loads(res.stdout)["cases"]}
    case = cases["plan:small-dense"]
    assert case["params"]["file"] == plan and case["plan"]["warmup_steps"] == 20
    assert [r["tensors"] for r in case["plan_rules"]] == [6, 2]  # digits_cnn: six tensors under 1,000 elements
    assert case["plan_rules"][0]["bytes"] == sum(u["wire_bytes"] for u in cases["none"]["layers"] if u["numel"] < 1000)
    results = json.loads(res.stdout)["results"]
    text = runner.invoke(app, ["report", results])
    assert "plan:small-dense — per rule" in text.output and "numel < 1000" in text.output
    md = runner.invoke(app, ["report", results, "--md"])
    assert "**plan:small-dense — per rule**" in md.output and "| 1 | numel &lt; 1000 | 6 | 906 |" in md.output
    page = tmp_path / "r.html"
    assert runner.invoke(app, ["report", results, "--html", "-o", str(page)]).exit_code == 0
    assert "<h4>plan:small-dense — per rule</h4>" in page.read_text()


def test_compare_with_a_plan(tmp_path: Path) -> None:
    plan = _write(tmp_path, SMALL)
    res = runner.invoke(app, ["compare", "topk:density=0.01,error_feedback=true", "-c", f"plan:{plan}", *LIVE, "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "plan:small-dense — per rule" in res.output


@pytest.mark.parametrize("text, message", [
    (SMALL.replace("numel_below = 1000", 'name = "decoder.*"'), "rule 1 (name 'decoder.*') matches no tensor"),
    (SMALL.replace("default = true\n", ""), "needs name, kind or numel_below"),
    (SMALL.replace("numel_below = 1000", 'kind = "layer"'), "unknown kind 'layer'"),
    (SMALL + "local_steps = 2\n", "unknown key 'local_steps'"),  # after [[plan.rule]]: a key of the rule
    (SMALL.replace("warmup_steps = 20", "local_steps = 4").replace("topk:density=0.01,error_feedback=true", "powersgd"),
     "powersgd is a stateful powersgd protocol"),
])
def test_bad_plans_are_one_line_before_any_work(tmp_path: Path, text: str, message: str) -> None:
    plan = _write(tmp_path, text)
    for argv in (["run", "quick", "--plan", plan, *LIVE], ["compare", "topk", f"-c plan:{plan}".split()[1], *LIVE]):
        res = runner.invoke(app, [*argv, "-o", str(tmp_path / "out")])
        assert res.exit_code == 1, res.output
        assert message in res.output and "Traceback" not in res.output
        assert len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_validate_a_plan(tmp_path: Path) -> None:
    linear = '[[plan.rule]]\nkind = "linear"\ncompressor = "bf16"\n[[plan.rule]]\ndefault'
    plan = _write(tmp_path, SMALL.replace('[[plan.rule]]\ndefault', linear))
    res = runner.invoke(app, ["validate", plan])
    assert res.exit_code == 0 and "3 rule(s)" in res.output and "--model" in res.output
    res = runner.invoke(app, ["validate", plan, "--model", "digits_cnn"])
    assert res.exit_code == 0, res.output
    assert "rule 1: numel < 1000 → none — 6 tensor(s), 906 elements" in res.output
    assert "rule 2 (kind linear) also matches 1 tensor rule 1 took (first wins)" in res.output
    shadowed = _write(tmp_path, SMALL.replace("numel_below = 1000", "numel_below = 100000"), "s.toml")
    res = runner.invoke(app, ["validate", shadowed, "--model", "digits_cnn"])
    assert res.exit_code == 0 and "2 rule(s)" in res.output
    res = runner.invoke(app, ["validate", "quick", "--model", "digits_cnn"])
    assert res.exit_code == 1 and "applies to a plan file" in res.output
