"""advise --plan auto's search on a synthetic model: exemption, the plan against single compressors, rules, TOML."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gcbench.plan.assign import TensorInfo, assign
from gcbench.plan.reader import load_plan
from gcbench.predict.network import Network
from gcbench.predict.plan_advise import _exempt, rivals
from gcbench.predict.plan_rules import rules_of
from gcbench.predict.plan_search import PlanStep, TensorFit, fallback, plan_candidates, plan_step, search
from gcbench.predict.step_kernels import KernelSet, StepKernels

SPECS = ["none", "bf16", "topk"]
COPY_S = 1e-4


def _fit(name: str, numel: int, kind: str | None, topk_cos: float) -> TensorFit:
    return TensorFit(name, numel, kind, {"none": 1.0, "bf16": 0.999, "topk": topk_cos},
                     {"none": 4.0 * numel, "bf16": 2.0 * numel, "topk": 0.08 * numel + 16})


FITS = [_fit("a.weight", 400_000, "linear", 0.8), _fit("a.bias", 500, "bias", 0.1),
        _fit("b.weight", 300_000, "linear", 0.7), _fit("b.bias", 400, "bias", 0.2)]
TOTAL = sum(f.numel for f in FITS)


def _kernels() -> KernelSet:
    dense = 4.0 * TOTAL

    def k(name: str, comp_x: float, dec_x: float, ratio: float) -> StepKernels:
        return StepKernels(name, name, comp_x * COPY_S, dec_x * COPY_S, COPY_S, dense / ratio, dense,
                           compress_x_copy=comp_x, decompress_x_copy=dec_x)
    return KernelSet("synthetic", "cpu", "test", "hand-made", (k("none", 1, 1, 1), k("bf16", 1.2, 1.2, 2), k("topk", 5, 2, 50)))


def _price(n: int = 16, bw: float = 1.0, local_steps: int = 1) -> Callable[[dict[str, str]], PlanStep]:
    ks = _kernels()
    return lambda a: plan_step(a, FITS, ks, n, Network(bw, 5e-6), 0.01, local_steps=local_steps)


def test_a_tensor_below_the_floor_is_exempt_and_the_plan_beats_every_single_that_meets_it() -> None:
    price = _price()
    choice = search(FITS, SPECS, 0.5, price)
    assert choice["a.weight"] == "topk" and choice["b.weight"] == "topk"  # 1 Gbit/s: compression pays on the weights
    assert choice["a.bias"] in ("bf16", "none") and choice["b.bias"] in ("bf16", "none")
    exempt, _ = _exempt(FITS, choice, SPECS, 0.5)
    assert {e.name for e in exempt} == {"a.bias", "b.bias"}
    assert all(e.best == "topk" and e.best_fidelity < 0.5 for e in exempt)
    plan_s = price(choice).step_s
    singles = rivals(FITS, SPECS, 0.5, price)
    for r in singles:
        if r.below_floor == 0:
            assert plan_s <= r.step.step_s
    topk = next(r for r in singles if r.spec == "topk")
    assert topk.below_floor == 2  # the single top-k misses the floor on both biases
    assert plan_s < next(r for r in singles if r.spec == "bf16").step.step_s


def test_a_fast_network_keeps_everything_dense_and_the_floor_never_admits_a_tensor_below_it() -> None:
    price = _price(bw=10_000.0)  # communication is nearly free: compress kernels are the cost
    choice = search(FITS, SPECS, 0.5, price)
    assert all(s in ("bf16", "none") for s in choice.values())
    strict = search(FITS, SPECS, 0.75, _price())
    assert strict["b.weight"] != "topk" and strict["a.weight"] == "topk"  # 0.7 < 0.75 ≤ 0.8


def test_local_steps_divide_everything_but_compute() -> None:
    a = {f.name: "bf16" for f in FITS}
    one, eight = _price()(a), _price(local_steps=8)(a)
    assert eight.compute_s == one.compute_s
    assert eight.step_s - eight.compute_s == pytest.approx((one.step_s - one.compute_s) / 8)


def test_fallback_is_bf16_unless_bf16_misses_the_floor() -> None:
    f = FITS[1]
    assert fallback(f, 0.5) == "bf16" and fallback(f, 0.9999) == "none"


def test_rules_reproduce_the_choice_and_round_trip_through_load_plan(tmp_path: Path) -> None:
    infos = [TensorInfo(f.name, f.numel, f.kind, (f.numel,)) for f in FITS]
    choice = search(FITS, SPECS, 0.5, _price())
    plan = rules_of(choice, infos, "auto-test")
    assert plan.rules[-1].default and plan.rules[-1].compressor == "topk"
    assert len(plan.rules) == 2 and plan.rules[0].kind == "bias"  # the exempt biases: one kind rule
    path = tmp_path / "p.toml"
    path.write_text("# gcbench advise --plan auto\n" + plan.to_toml(), encoding="utf-8")
    back = load_plan(path)
    got = assign(back, infos)
    assert {i.name: got.spec_of(i.name) for i in infos} == choice


def test_rules_by_size_and_by_name_when_kinds_do_not_separate() -> None:
    infos = [TensorInfo(n, k, None, (k,)) for n, k in
             [("x.0.w", 10), ("x.1.w", 20), ("x.2.w", 5000), ("y.0.w", 6000), ("y.1.w", 7000), ("z.w", 8000)]]
    choice = {"x.0.w": "none", "x.1.w": "none", "x.2.w": "topk", "y.0.w": "topk", "y.1.w": "bf16", "z.w": "topk"}
    plan = rules_of(choice, infos, "t")
    assert plan.rules[0].numel_below == 5000 and plan.rules[0].compressor == "none"
    got = assign(plan, infos)
    assert {i.name: got.spec_of(i.name) for i in infos} == choice


def test_candidates_leave_out_what_a_plan_rule_cannot_name() -> None:
    keep, out = plan_candidates(["topk", "dgc"])
    assert keep == ["topk", "bf16", "none"]
    assert out and out[0].startswith("dgc: applies momentum")


def test_a_run_files_per_tensor_rows_replace_the_measured_ones_for_its_compressors() -> None:
    from types import SimpleNamespace

    from gcbench.predict.plan_advise import fits_from_run
    from gcbench.results.run_record import RunCase

    def case(label: str, model: str, names: list[str]) -> RunCase:
        return RunCase.model_validate({"label": label, "status": "ok", "compressor": label, "source": {"model": model},
                                       "layers": [{"name": n, "numel": 1, "wire_bytes": 7.0, "cosine": 0.25}
                                                  for n in names]})
    names = [f.name for f in FITS]
    record = SimpleNamespace(cases=[case("topk", "synthetic", names), case("bf16", "other", names),
                                    case("none", "synthetic", names[:2])])
    fits, origin = fits_from_run(record, "synthetic", FITS, "run.json")
    assert all(f.fidelity["topk"] == 0.25 and f.wire_bytes["topk"] == 7.0 for f in fits)
    assert [f.fidelity["bf16"] for f in fits] == [g.fidelity["bf16"] for g in FITS]  # another model's rows: not read
    assert [f.wire_bytes["none"] for f in fits] == [g.wire_bytes["none"] for g in FITS]  # buckets, not tensors: measured
    assert origin.startswith("run.json") and "topk" in origin
    same, says = fits_from_run(SimpleNamespace(cases=[]), "synthetic", FITS, "run.json")
    assert same == FITS and says.startswith("measured here")


def test_with_convergence_evidence_the_time_to_target_decides() -> None:
    from types import SimpleNamespace

    from gcbench.predict.plan_advise import by_time_to_target, plan_steps

    def outcome(label: str, steps: float, reference: bool = False) -> SimpleNamespace:
        return SimpleNamespace(label=label, reference=reference, status="reached", steps=SimpleNamespace(mean=steps))
    outs = [outcome("none", 100, True), outcome("topk", 1000)]
    conv = SimpleNamespace(outcomes=outs, get=lambda s: next((o for o in outs if o.label == s), None))
    price = _price()
    fast = search(FITS, SPECS, 0.5, price)
    assert "topk" in fast.values() and plan_steps(conv, fast) == 1000  # bf16 is charged the reference's 100
    slow_to_converge = search(FITS, SPECS, 0.5, by_time_to_target(price, conv))
    assert "topk" not in slow_to_converge.values()  # 10× the steps: top-k's shorter step does not pay
    assert price(slow_to_converge).step_s * 100 < price(fast).step_s * 1000
