"""Plans in closed loop (gcbench/converge/exchange.py, local_steps.py, plans.py): rules, warm-up, local steps, bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from gcbench.compressors import registry
from gcbench.converge import devices as placement
from gcbench.converge.engine import run_seed
from gcbench.converge.steps import EngineSettings
from gcbench.converge.sweep import ConvergeConfig, run_converge
from gcbench.core.errors import GcbenchError
from gcbench.plan.model import Outer, Plan, Rule
from gcbench.plan.reader import PlanError
from gcbench.results.converge_record import ConvergeRecord
from gcbench.results.store import load_run
from gcbench.sources.zoo import load_model
from gcbench.workloads.problems import EVAL_BATCH_OFFSET, EVAL_BATCHES, make_problem

TINY = "tests.user_factory:tiny"  # tensors of 30, 5, 15 and 3 elements
EF = "topk:density=0.2,error_feedback=true"


def _settings(**kw: Any) -> EngineSettings:
    base = {"workers": 2, "steps": 6, "batch": None, "optimizer": "sgd", "lr": 0.1, "momentum": 0.0, "weight_decay": 0.0,
            "eval_every": 3}
    return EngineSettings(**{**base, **kw})


def _plan(*rules: Rule, **kw: Any) -> Plan:
    return Plan("p", rules, **kw)


@pytest.mark.parametrize("spec", [EF, "qsgd", "powersgd"])
def test_a_plan_of_one_default_rule_is_the_plain_compressor_to_the_bit(spec: str) -> None:
    problem = make_problem(None, TINY)
    s = _settings(steps=7, momentum=0.9)
    plain = run_seed(problem, spec, s, seed=3)
    plan = run_seed(problem, _plan(Rule(spec, default=True)), s, seed=3)
    assert plain.status == plan.status == "ok"
    assert plan.curve == plain.curve and plan.sent_bytes == plain.sent_bytes and plan.payload_bytes == plain.payload_bytes
    assert plan.rule_bytes == {0: [plain.sent_bytes, plain.payload_bytes]} and plan.state_resets == plain.state_resets


def test_each_rule_compresses_its_tensors_and_the_bytes_are_counted_per_rule() -> None:
    problem = make_problem(None, TINY)
    dense = run_seed(problem, "none", _settings(), seed=0)
    plan = run_seed(problem, _plan(Rule("none", numel_below=10), Rule(EF, default=True)), _settings(), seed=0)
    sparse = run_seed(problem, EF, _settings(), seed=0)
    assert plan.status == "ok" and set(plan.rule_bytes) == {0, 1}
    assert sum(b[0] for b in plan.rule_bytes.values()) == pytest.approx(plan.sent_bytes)
    # the biases (5 and 3 elements) go dense: six steps of what the uncompressed exchange of such tensors sends
    comp = registry.create("none")
    one = sum(comp.exchange([torch.zeros(n), torch.zeros(n)], [comp.init_state(0), comp.init_state(1)]).traffic.sent()
              for n in (5, 3))
    assert plan.rule_bytes[0][0] == pytest.approx(6 * one)
    assert 0 < plan.rule_bytes[1][0] < sparse.sent_bytes  # top-k on the weights alone: less than on every tensor
    assert plan.curve != sparse.curve and plan.curve != dense.curve


def test_the_warm_up_runs_its_compressor_on_every_tensor_and_its_bytes_are_the_references() -> None:
    problem = make_problem(None, TINY)
    ref = run_seed(problem, "none", _settings(steps=4, eval_every=2), seed=1)
    plan = run_seed(problem, _plan(Rule(EF, default=True), warmup_steps=4, warmup="none"), _settings(steps=6, eval_every=2),
                    seed=1)
    assert plan.curve[:3] == ref.curve  # the warm-up is the reference's training
    assert plan.warmup_sent_bytes == pytest.approx(ref.sent_bytes)
    assert plan.sent_bytes > plan.warmup_sent_bytes


def _averaged(seed: int, workers: int, steps: int, lr: float) -> list[torch.Tensor]:
    """Model averaging by hand: every worker trains its own copy with SGD on its own batches, then the mean."""
    replicas = [load_model(TINY, seed) for _ in range(workers)]
    for step in range(steps):
        for w, zm in enumerate(replicas):
            zm.module.zero_grad()
            x, y = zm.make_batch(step, w)
            zm.loss_fn(zm.module(x), y).backward()
            with torch.no_grad():
                for p in zm.module.parameters():
                    p -= lr * p.grad
    return [torch.stack(ps).mean(0) for ps in zip(*(list(zm.module.parameters()) for zm in replicas), strict=True)]


def test_local_steps_with_an_outer_sgd_of_rate_1_average_the_replicas() -> None:
    """DiLoCo with plain outer SGD at lr 1 and a lossless exchange is model averaging every H steps."""
    problem = make_problem(None, TINY)
    plan = _plan(Rule("none", default=True), local_steps=6, outer=Outer(lr=1.0, momentum=0.0, nesterov=False))
    r = run_seed(problem, plan, _settings(steps=6, eval_every=6), seed=2)
    zm, averaged = load_model(TINY, 2), _averaged(2, 2, 6, 0.1)
    with torch.no_grad():
        for p, a in zip(zm.module.parameters(), averaged, strict=True):
            p.copy_(a)
        held = [zm.make_batch(EVAL_BATCH_OFFSET + i, 0) for i in range(EVAL_BATCHES)]
        loss = sum(float(zm.loss_fn(zm.module(x), y)) for x, y in held) / EVAL_BATCHES
    assert r.status == "ok" and r.curve[-1]["eval_loss"] == pytest.approx(loss, rel=1e-5)


def test_local_steps_exchange_every_h_steps_and_at_the_end() -> None:
    problem = make_problem(None, TINY)
    ref = run_seed(problem, "none", _settings(steps=7), seed=0)
    plan = _plan(Rule("none", default=True), local_steps=3)
    r = run_seed(problem, plan, _settings(steps=7), seed=0)
    assert r.status == "ok" and r.steps_run == 7
    assert r.sent_bytes == pytest.approx(ref.sent_bytes * 3 / 7)  # exchanges after steps 3 and 6, and the last (7)
    warm = run_seed(problem, _plan(Rule("none", default=True), local_steps=3, warmup_steps=2, warmup="none"),
                    _settings(steps=7), seed=0)
    assert warm.warmup_sent_bytes == pytest.approx(ref.sent_bytes * 2 / 7)
    assert warm.sent_bytes == pytest.approx(ref.sent_bytes * 4 / 7)  # 2 warm-up steps, then after steps 5 and 7


def test_local_steps_carry_error_feedback_on_the_pseudo_gradient() -> None:
    problem = make_problem(None, TINY)
    kw = {"local_steps": 2}
    with_ef = run_seed(problem, _plan(Rule(EF, default=True), **kw), _settings(steps=8), seed=0)
    without = run_seed(problem, _plan(Rule("topk:density=0.2", default=True), **kw), _settings(steps=8), seed=0)
    assert with_ef.status == without.status == "ok" and with_ef.curve[-1] != without.curve[-1]


def test_on_the_cpu_the_device_plumbing_changes_no_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """--device cpu is the default; and the moves and evaluation hooks a GPU run takes, run on the CPU, change nothing."""
    problem = make_problem(None, TINY)
    plan = _plan(Rule("none", numel_below=10), Rule(EF, default=True), local_steps=2)
    base = [run_seed(problem, c, _settings(), seed=0) for c in (EF, plan)]
    assert [run_seed(problem, c, _settings(device="cpu"), seed=0).curve for c in (EF, plan)] == [b.curve for b in base]
    for module in (placement, __import__("gcbench.converge.engine", fromlist=["x"]), __import__("gcbench.converge.steps", fromlist=["x"])):
        monkeypatch.setattr(module, "on_cpu", lambda device: False)
    moved = [run_seed(problem, c, _settings(device="cpu"), seed=0) for c in (EF, plan)]
    assert [m.curve for m in moved] == [b.curve for b in base] and [m.status for m in moved] == ["ok", "ok"]


def test_every_tensor_the_engine_creates_follows_its_device() -> None:
    """A tensor made from nothing (zeros, empty, tensor ...) in gcbench/converge names its device, or copies another's."""
    import re

    root = Path(__file__).parents[2] / "gcbench" / "converge"
    bad = []
    for path in sorted(root.glob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for call in re.findall(r"torch\.(?:zeros|ones|empty|full|tensor|arange|rand|randn|randint)\((.*)", line):
                if "device=" not in call:
                    bad.append(f"{path.name}:{n}: {line.strip()}")
    assert bad == []


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return f"plan:{path}"


SMALL = '[plan]\nname = "small"\nwarmup_steps = 2\nwarmup = "none"\n[[plan.rule]]\nnumel_below = 10\ncompressor = "none"\n' \
        f'[[plan.rule]]\ndefault = true\ncompressor = "{EF}"\n'


def test_a_run_records_the_plan_its_assignment_and_bytes_per_rule(tmp_path: Path) -> None:
    spec = _write(tmp_path / "small.toml", SMALL)
    cfg = ConvergeConfig(model=TINY, compressors=(EF, spec), workers=2, steps=6, seeds=2, eval_every=3, lr=0.2)
    out = run_converge(cfg, tmp_path)
    rec = load_run(out.path)
    assert isinstance(rec, ConvergeRecord) and rec.status == "complete"
    assert [c.label for c in rec.cases] == ["none", EF, "plan:small"]
    case = rec.cases[2]
    p = case.convergence.plan
    assert case.compressor == "plan" and p is not None and p.name == "small" and p.warmup_steps == 2
    assert p.assignment == {"0.weight": 2, "0.bias": 1, "2.weight": 2, "2.bias": 1}
    assert [(x.rule, x.tensors, x.elements) for x in p.parts] == [(1, 2, 8), (2, 2, 45)]
    total = case.convergence.bytes.sent_per_worker_per_step
    assert sum(x.sent_per_worker_per_step for x in p.parts) == pytest.approx(total)
    assert sum(x.bytes_share for x in p.parts) == pytest.approx(1.0)
    assert case.convergence.settings.device == "cpu" and rec.environment.device == "cpu"


@pytest.mark.parametrize(("text", "match"), [
    (SMALL.replace("warmup_steps = 2", "warmup_steps = 6"), "warmup_steps = 6 is not shorter than the run's 6 steps"),
    (SMALL.replace("numel_below = 10", "numel_below = 2"), r"rule 1 \(numel < 2\) matches no tensor of the model's 4"),
    (SMALL.replace('warmup = "none"\n', 'warmup = "none"\nlocal_steps = 2\n').replace(EF, "powersgd"),
     "powersgd is a stateful"),
    (SMALL.replace(EF, "lgc:preset=reference"), "exchanges the whole model at once"),
])
def test_a_plan_the_run_cannot_use_is_refused_before_any_work(tmp_path: Path, text: str, match: str) -> None:
    spec = _write(tmp_path / "bad.toml", text)
    cfg = ConvergeConfig(model=TINY, compressors=(spec,), workers=2, steps=6, seeds=1, eval_every=3)
    with pytest.raises(GcbenchError, match=match) as info:
        run_converge(cfg, tmp_path / "out")
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()


def test_a_missing_plan_file_is_a_plan_error(tmp_path: Path) -> None:
    cfg = ConvergeConfig(model=TINY, compressors=(f"plan:{tmp_path / 'nope.toml'}",), workers=2, steps=6, seeds=1)
    with pytest.raises(PlanError):
        run_converge(cfg, tmp_path / "out")
