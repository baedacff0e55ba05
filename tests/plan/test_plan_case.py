"""A plan as a case of ``run``: each tensor by its rule's compressor, its bytes the sum of the parts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gcbench.measure.plan_case import check_plan_cases
from gcbench.measure.runner import run_suite
from gcbench.measure.suite import parse_suite
from gcbench.plan import PlanError
from gcbench.results.parse import as_cases

SHAPES = [[300], [40, 50], [7], [20, 30]]  # synthetic tensors t0..t3


def _plan(*rules: dict[str, Any], name: str = "p") -> dict[str, Any]:
    return {"name": "plan", "params": {"plan": {"name": name, "rule": list(rules)}}}


def _run(tmp_path: Path, compressors: list[dict[str, Any]], workers: int = 2, steps: int = 3, **suite: Any) -> list[dict[str, Any]]:
    s = parse_suite({"name": "t", "seed": 3, "sources": [{"kind": "synthetic", "shapes": SHAPES, "workers": workers, "steps": steps}],
                     "compressors": compressors, "metrics": {"timing": False, "repeats": 3}, **suite})
    check_plan_cases(s)
    return run_suite(s, tmp_path).records


NUMBERS = [("size", "wire_bytes"), ("size", "traffic_sent_bytes"), ("fidelity", "q"), ("aggregate", "q"), ("stream", "delivered"),
           ("stream", "per_step_error")]


@pytest.mark.parametrize("spec, params", [("topk", {"density": 0.1, "error_feedback": True}), ("qsgd", {}), ("bf16", {}),
                                          ("terngrad", {})])
def test_one_rule_plan_measures_what_its_compressor_does(tmp_path: Path, spec: str, params: dict[str, Any]) -> None:
    """Every tensor under one rule: the same bytes and the same numbers as the compressor alone (seeds, repeats, protocol)."""
    from gcbench.compressors.registry import format_spec

    single, plan = _run(tmp_path, [{"name": spec, "params": params}, _plan({"default": True, "compressor": format_spec(spec, params)})])
    assert single["status"] == plan["status"] == "ok", plan.get("error")
    for block, key in NUMBERS:
        # bytes exactly; the float figures to 1e-12: a fresh-clone CI saw the known last-bit jitter of the fidelity sums
        # (aggregate q mean 3.64035644462075e-06 against ...751e-06 for bf16), while a rule that measured anything else
        # would change the leading digits
        assert plan[block][key] == pytest.approx(single[block][key], rel=1e-12, abs=1e-18), (block, key)
    assert plan["size"] == single["size"]
    assert plan["traffic"] == single["traffic"]
    assert [u["wire_bytes"] for u in plan["layers"]] == [u["wire_bytes"] for u in single["layers"]]
    assert plan["label"] == "plan:p" and plan["compressor"] == "plan"


def test_mixed_plan_bytes_are_the_parts(tmp_path: Path) -> None:
    topk = "topk:density=0.1"
    none, top, plan = _run(tmp_path, [{"name": "none"}, {"name": "topk", "params": {"density": 0.1}},
                                      _plan({"numel_below": 500, "compressor": "none"}, {"default": True, "compressor": topk})])
    assert plan["status"] == "ok", plan.get("error")
    assert plan["assignment"] == {"t0": 1, "t1": 2, "t2": 1, "t3": 2}
    want = [none["layers"][0], top["layers"][1], none["layers"][2], top["layers"][3]]
    assert [u["wire_bytes"] for u in plan["layers"]] == [u["wire_bytes"] for u in want]
    rules = plan["plan_rules"]
    assert [(r["tensors"], r["elements"]) for r in rules] == [(2, 307), (2, 2600)]
    assert sum(r["bytes"] for r in rules) == plan["size"]["wire_bytes"]
    assert rules[0]["bytes"] == none["layers"][0]["wire_bytes"] + none["layers"][2]["wire_bytes"]
    assert sum(r["bytes_share"] for r in rules) == pytest.approx(1.0)
    assert plan["plan"]["rules"][1]["compressor"] == topk and plan["params"]["plan"]["name"] == "p"
    case = as_cases([plan])[0]
    assert case.plan_rules is not None and case.plan_rules[1].tensors == 2
    big = {**plan, "plan_rules": [{**rules[0], "elements": 11_679_912}, rules[1]]}  # resnet18's default rule's elements
    parsed = as_cases([big])[0].plan_rules
    assert parsed is not None and parsed[0].elements == 11_679_912


def test_plan_with_a_protocol_rule(tmp_path: Path) -> None:
    """A rule whose compressor has its own exchange (PowerSGD's all-reduces) beside the default all-gather."""
    psgd, top, plan = _run(tmp_path, [{"name": "powersgd", "params": {"rank": 2}}, {"name": "topk", "params": {"density": 0.1}},
                                      _plan({"name": "t[13]", "compressor": "powersgd:rank=2"},
                                            {"default": True, "compressor": "topk:density=0.1"})])
    assert plan["status"] == "ok", plan.get("error")
    want = [top["layers"][0], psgd["layers"][1], top["layers"][2], psgd["layers"][3]]
    assert [u["wire_bytes"] for u in plan["layers"]] == [u["wire_bytes"] for u in want]
    assert plan["size"]["traffic_sent_bytes"] > 0


def test_plan_cases_are_checked_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match=r"rule 1 \(name 'conv\*'\) matches no tensor"):
        _run(tmp_path, [_plan({"name": "conv*", "compressor": "none"}, {"default": True, "compressor": "bf16"})])
    with pytest.raises(PlanError, match="granularity 'layer'"):
        _run(tmp_path, [_plan({"default": True, "compressor": "bf16"})], granularity="model")
    with pytest.raises(PlanError, match="no module"):
        _run(tmp_path, [_plan({"kind": "norm", "compressor": "none"}, {"default": True, "compressor": "bf16"})])
    assert not list(tmp_path.iterdir())


def test_suite_file_plan_by_file(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[plan]\nname = "f"\n[[plan.rule]]\ndefault = true\ncompressor = "bf16"\n')
    s = parse_suite({"name": "t", "sources": [{"kind": "synthetic", "shapes": [[4]]}],
                     "compressors": [{"name": "plan", "params": {"file": str(path)}}]})
    assert s.compressors[0].label == "plan:f" and s.compressors[0].params["file"] == str(path)
    with pytest.raises(PlanError, match="params"):
        parse_suite({"name": "t", "sources": [{"kind": "synthetic", "shapes": [[4]]}],
                     "compressors": [{"name": "plan", "params": {"path": "x"}}]})


def test_a_narrow_float_rule_saturates_as_its_compressor_does(tmp_path: Path) -> None:
    """fp16 maps inputs beyond 65504 to ±inf: counted as saturation under a plan as for fp16 alone, not a failure."""
    s = parse_suite({"name": "t", "seed": 3, "sources": [{"kind": "synthetic", "shapes": SHAPES, "workers": 2, "steps": 2,
                                                          "scale": 1e5}],
                     "compressors": [{"name": "fp16"}, _plan({"numel_below": 500, "compressor": "bf16"},
                                                             {"default": True, "compressor": "fp16"})],
                     "metrics": {"timing": False}})
    fp16, plan = run_suite(s, tmp_path).records
    assert fp16["status"] == plan["status"] == "ok", plan.get("error")
    big = [u for u in fp16["layers"] if u["numel"] >= 500]
    assert fp16["flags"]["saturated"] > plan["flags"]["saturated"] > 0  # the small tensors went as bf16
    assert [u["wire_bytes"] for u in plan["layers"] if u["numel"] >= 500] == [u["wire_bytes"] for u in big]


def test_a_plans_residual_drains_as_its_slowest_rule() -> None:
    """The recommendation's drain steps for a plan case: its error-feedback rules' most (1/density for top-k)."""
    from gcbench.plan import parse_plan
    from gcbench.plan.reader import case_params
    from gcbench.results.recommend import residual_drain_steps

    def drain(*rules: dict[str, Any]) -> int | None:
        return residual_drain_steps("plan", case_params(parse_plan({"name": "p", "rule": list(rules)}, "t")))

    assert drain({"numel_below": 10, "compressor": "topk:density=0.1,error_feedback=true"},
                 {"default": True, "compressor": "topk:density=0.01,error_feedback=true"}) == 100
    assert drain({"default": True, "compressor": "topk:density=0.01"}) is None  # no residual: nothing drains


def test_a_rule_with_its_own_momentum_is_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="dgc applies momentum of its own"):
        _run(tmp_path, [_plan({"numel_below": 100, "compressor": "none"}, {"default": True, "compressor": "dgc"})])
    assert not list(tmp_path.iterdir())
