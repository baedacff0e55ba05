"""``bench --model`` with a plan: a whole step of the model's tensors, each by its rule's compressor."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcbench.compressors import registry
from gcbench.measure.bench import bench_model_case, model_tensors, run_bench, spec_label
from gcbench.measure.plan_case import check_model_plans
from gcbench.plan import PlanError, parse_plan
from gcbench.plan.reader import case_params

PLAN = parse_plan({"name": "small", "rule": [{"numel_below": 1000, "compressor": "none"},
                                             {"default": True, "compressor": "topk:density=0.01"}]}, "t")


def test_bench_model_case_of_a_plan_counts_the_parts() -> None:
    params = case_params(PLAN)
    rec = bench_model_case("plan", params, "digits_cnn", repeats=1, warmup=0, max_rounds=1, budget_s=0.2)
    xs = model_tensors("digits_cnn")
    none, topk = registry.create("none"), registry.create("topk", density=0.01)
    parts = [(none if x.numel() < 1000 else topk).compress(x, (none if x.numel() < 1000 else topk).init_state(0)) for x in xs]
    numel = sum(x.numel() for x in xs)
    assert rec["ratio"] == pytest.approx(4 * numel / sum(p.nbytes for p in parts))
    assert rec["compressor"] == "plan" and rec["params"] == params and rec["tensors"] == len(xs)
    assert spec_label("plan", params) == "plan:small"


def test_a_plan_needs_a_model_and_must_fit_it(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(PLAN.to_toml().replace("numel_below = 1000", 'name = "encoder.*"'))
    with pytest.raises(PlanError, match="--model"):
        run_bench([f"plan:{path}"], [1000], isolate=False)
    with pytest.raises(PlanError, match=r"rule 1 \(name 'encoder"):
        check_model_plans(["topk", f"plan:{path}"], "digits_cnn")
