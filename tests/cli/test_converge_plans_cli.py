"""``gcbench converge`` with plans (``--plan FILE``, ``-c plan:FILE``) and ``--device``: tables, the report, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.converge.sweep import load_suite
from gcbench.plan.reader import plan_from_spec
from gcbench.results.store import load_run

runner = CliRunner()

TINY = ["--model", "tests.user_factory:tiny", "--workers", "2", "--steps", "4", "--seeds", "2", "--eval-every", "2", "--lr", "0.2"]
EF = "topk:density=0.2,error_feedback=true"
PLAN = ('[plan]\nname = "small"\nwarmup_steps = 1\nwarmup = "none"\n[[plan.rule]]\nnumel_below = 10\ncompressor = "none"\n'
        f'[[plan.rule]]\ndefault = true\ncompressor = "{EF}"\n')


def _plan(tmp_path: Path, text: str = PLAN, name: str = "small.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_plan_runs_beside_its_parts_and_its_rules_are_shown(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    r = runner.invoke(app, ["converge", *TINY, "-c", EF, "--plan", str(plan), "-o", str(tmp_path / "runs"), "-q"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(line) for line in lines if line[:1] in "┏┃┡│└") <= 120
    assert any("plan:small: rules" in line for line in lines)
    assert any("plan:small beside its parts" in line for line in lines)
    rules = [line for line in lines if "numel < 10" in line]
    assert rules and "2 │" in rules[0]  # the two biases
    (path,) = (tmp_path / "runs").glob("*.json")
    rec = load_run(path)
    assert [c.label for c in rec.cases] == ["none", EF, "plan:small"]
    same = runner.invoke(app, ["converge", *TINY, "-c", EF, "-c", f"plan:{plan}", "-o", str(tmp_path / "again"), "--json"])
    assert same.exit_code == 0, same.output
    (again,) = (tmp_path / "again").glob("*.json")
    assert [s.curve for c in load_run(again).cases for s in c.convergence.seeds] == \
        [s.curve for c in rec.cases for s in c.convergence.seeds]  # -c plan:FILE is --plan FILE


def test_the_report_shows_each_plans_rules_in_every_format(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    r = runner.invoke(app, ["converge", *TINY, "--seeds", "1", "--plan", str(plan), "-o", str(tmp_path / "runs"), "-q"])
    assert r.exit_code == 0, r.output
    (path,) = (tmp_path / "runs").glob("*.json")
    text = runner.invoke(app, ["report", str(path)])
    assert text.exit_code == 0, text.output
    assert "plan:small: rules" in text.output and "numel < 10" in text.output, text.output
    for fmt, needle in (("md", "### plan:small"), ("html", "Plan plan:small")):
        out = tmp_path / f"report.{fmt}"
        done = runner.invoke(app, ["report", str(path), f"--{fmt}", "-o", str(out)])
        assert done.exit_code == 0, done.output
        body = out.read_text(encoding="utf-8")
        assert needle in body and ("numel < 10" in body or "numel &lt; 10" in body), body[-3000:]


def _one_error_line(args: list[str], tmp_path: Path, needle: str, code: int = 1) -> None:
    r = runner.invoke(app, ["converge", *args, "-o", str(tmp_path / "runs"), "-q"])
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0], r.output
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*.json"))


def test_a_plan_the_run_cannot_use_is_one_line_before_any_work(tmp_path: Path) -> None:
    _one_error_line([*TINY, "--plan", str(_plan(tmp_path, PLAN.replace("warmup_steps = 1", "warmup_steps = 9")))], tmp_path,
                    "warmup_steps = 9 is not shorter than the run's 4 steps")
    _one_error_line([*TINY, "--plan", str(_plan(tmp_path, PLAN.replace("numel_below = 10", 'kind = "embedding"')))], tmp_path,
                    "matches no tensor of the model")
    local = PLAN.replace('warmup = "none"\n', 'warmup = "none"\nlocal_steps = 4\n').replace(EF, "powersgd")
    _one_error_line([*TINY, "--plan", str(_plan(tmp_path, local))], tmp_path, "must run every step")
    _one_error_line([*TINY, "--plan", str(tmp_path / "missing.toml")], tmp_path, "missing.toml")


def test_a_device_that_is_not_here_is_one_line_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _one_error_line([*TINY, "--device", "cuda"], tmp_path, "no CUDA device is available")
    r = runner.invoke(app, ["converge", *TINY, "--device", "gpu", "-o", str(tmp_path / "runs"), "-q"])
    assert r.exit_code == 2 and "expected cpu, cuda or cuda:N" in r.output


def test_device_cpu_is_the_default_bit_for_bit_and_recorded(tmp_path: Path) -> None:
    runs = []
    for i, extra in enumerate(([], ["--device", "cpu"])):
        r = runner.invoke(app, ["converge", *TINY, "--seeds", "1", "-c", EF, *extra, "-o", str(tmp_path / str(i)), "-q"])
        assert r.exit_code == 0, r.output
        (path,) = (tmp_path / str(i)).glob("*.json")
        runs.append(load_run(path))
    assert [s.curve for c in runs[0].cases for s in c.convergence.seeds] == \
        [s.curve for c in runs[1].cases for s in c.convergence.seeds]
    assert runs[1].environment.device == "cpu" and runs[1].cases[1].convergence.settings.device == "cpu"


def test_the_bundled_plans_suite_loads_with_its_plans() -> None:
    cfg, _ = load_suite("suites/converge_plans.toml")
    plans = [plan_from_spec(c) for c in cfg.compressors if c.startswith("plan:")]
    assert [p.name for p in plans if p is not None] == ["small-dense", "local8-int8"]
    small, local = plans
    assert small is not None and small.warmup_steps == 20 and small.rules[0].numel_below == 1000
    assert local is not None and local.local_steps == 8 and local.rules[-1].compressor == "blockint:bits=8"
    assert {"none", "topk:density=0.01,error_feedback=true", "blockint:bits=8"} <= set(cfg.compressors)


def test_validate_checks_a_suites_plans(tmp_path: Path) -> None:
    ok = runner.invoke(app, ["validate", "suites/converge_plans.toml"])
    assert ok.exit_code == 0 and "5 compressor(s)" in ok.output, ok.output
    _plan(tmp_path, PLAN.replace("warmup_steps = 1", "warmup_steps = 50"), "long.toml")
    suite = tmp_path / "s.toml"
    suite.write_text('kind = "converge"\ntask = "digits"\nsteps = 40\ncompressors = ["none", "plan:long.toml"]\n', encoding="utf-8")
    bad = runner.invoke(app, ["validate", str(suite)])
    assert bad.exit_code == 1 and "warmup_steps = 50 is not shorter than the run's 40 steps" in bad.output, bad.output
