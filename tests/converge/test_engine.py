"""The closed-loop engine (gcbench/converge/engine.py, steps.py): DDP's unit layout, the update, state, divergence, bytes.

The agreement with real DDP training is tests/converge/test_twin.py; these check the pieces fast.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from gcbench.compressors import registry
from gcbench.converge import steps
from gcbench.converge.engine import run_seed
from gcbench.converge.steps import EngineSettings, UnitLayout
from gcbench.sources.zoo import load_model
from gcbench.workloads.problems import EVAL_BATCH_OFFSET, EVAL_BATCHES, make_problem

TINY = "tests.user_factory:tiny"


def _settings(**kw: object) -> EngineSettings:
    base = {"workers": 2, "steps": 6, "batch": None, "optimizer": "sgd", "lr": 0.1, "momentum": 0.0, "weight_decay": 0.0,
            "eval_every": 3}
    return EngineSettings(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("sizes", [[10, 300_000, 20, 5], [262_144, 1, 262_145, 7_000_000, 3], [5] * 40])
def test_the_fallback_bucket_cut_is_ddps(sizes: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    order = list(reversed(range(len(sizes))))
    ddp = steps._bucket_assignment(sizes, order)
    monkeypatch.delattr(dist, "_compute_bucket_assignment_by_size")
    assert steps._bucket_assignment(sizes, order) == ddp


def test_the_layout_is_one_module_order_bucket_then_ddps_rebuilt_buckets() -> None:
    zm = load_model("smallcnn", 0)  # 620k parameters: two buckets after the rebuild (1 MiB, then the rest)
    params = list(zm.module.parameters())
    layout = UnitLayout(params, whole_model=False)
    assert layout.groups(0) == [(0, tuple(range(len(params))))]
    hooks = layout.watch()
    x, y = zm.make_batch(0, 0)
    zm.loss_fn(zm.module(x), y).backward()
    for h in hooks:
        h.remove()
    # what the gcbench DDP hook saw for this model (gloo, granularity layer): see the engine's module docstring
    assert layout.groups(1) == [(0, (9, 8, 7, 6)), (1, (4, 5, 2, 3, 0, 1))]
    assert UnitLayout(params, whole_model=True).groups(5) == [(steps.WHOLE_MODEL, tuple(range(len(params))))]


def test_uncompressed_training_is_sgd_on_the_workers_mean_gradient() -> None:
    problem = make_problem(None, TINY)
    r = run_seed(problem, "none", _settings(), seed=4)
    assert r.status == "ok" and r.steps_run == 6 and [p["step"] for p in r.curve] == [0, 3, 6]
    zm = load_model(TINY, 4)
    for step in range(6):
        grads = []
        for w in range(2):
            zm.module.zero_grad()
            x, y = zm.make_batch(step, w)
            zm.loss_fn(zm.module(x), y).backward()
            grads.append([p.grad.clone() for p in zm.module.parameters()])
        with torch.no_grad():
            for i, p in enumerate(zm.module.parameters()):
                p -= 0.1 * (grads[0][i] + grads[1][i]) / 2
    with torch.no_grad():
        held = [zm.make_batch(EVAL_BATCH_OFFSET + i, 0) for i in range(EVAL_BATCHES)]
        loss = sum(float(zm.loss_fn(zm.module(x), y)) for x, y in held) / EVAL_BATCHES
    assert r.curve[-1]["eval_loss"] == pytest.approx(loss, rel=1e-6)


def test_a_seed_is_reproducible_and_another_seed_differs() -> None:
    problem = make_problem(None, TINY)
    a = run_seed(problem, "qsgd", _settings(), seed=1)
    b = run_seed(problem, "qsgd", _settings(), seed=1)
    c = run_seed(problem, "qsgd", _settings(), seed=2)
    assert a.curve == b.curve and a.curve != c.curve
    assert a.payload_bytes == b.payload_bytes


def test_bytes_are_the_protocols_traffic_and_the_sparsifier_sends_less() -> None:
    problem = make_problem(None, TINY)
    dense = run_seed(problem, "none", _settings(), seed=0)
    sparse = run_seed(problem, "topk:density=0.1", _settings(), seed=0)
    assert dense.dense_bytes == 4 * (6 * 5 + 5 + 5 * 3 + 3)
    assert 0 < sparse.payload_bytes < dense.payload_bytes and sparse.sent_bytes > 0
    comp = registry.create("none")
    # one step's traffic, worker 0 and 1, per tensor (4 tensors): what exchange counts for the same gradients
    one = sum(comp.exchange([torch.zeros(s), torch.zeros(s)], [comp.init_state(0), comp.init_state(1)]).traffic.sent()
              for s in [(5, 6), (5,), (3, 5), (3,)])
    assert dense.sent_bytes == pytest.approx(6 * one)


def test_error_feedback_state_is_carried_across_steps() -> None:
    problem = make_problem(None, TINY)
    with_ef = run_seed(problem, "topk:density=0.1,error_feedback=true", _settings(steps=9), seed=0)
    without = run_seed(problem, "topk:density=0.1", _settings(steps=9), seed=0)
    assert with_ef.status == without.status == "ok"
    assert with_ef.curve[-1]["eval_loss"] != without.curve[-1]["eval_loss"]
    assert with_ef.state_resets == 0  # DDP's bucket rebuild after the first step: the residuals follow their parameters


def test_a_huge_learning_rate_diverges_as_an_outcome() -> None:
    problem = make_problem(None, TINY)
    r = run_seed(problem, "none", _settings(lr=1e6, steps=20, eval_every=5), seed=0)
    assert r.status == "diverged" and r.diverged_at_step is not None and r.diverged_at_step < 20
    assert r.diverged_reason in ("non-finite loss", "loss above 10x its start", "non-finite held-out loss",
                                 "non-finite update (the step overflows float32)")
    assert r.final is None and r.error is None


def test_a_failing_compressor_is_this_seeds_error(monkeypatch: pytest.MonkeyPatch) -> None:
    comp = registry.create("topk")

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("kernel exploded\nsecond line")

    monkeypatch.setattr(comp, "exchange_group", broken)
    r = run_seed(make_problem(None, TINY), comp, _settings(), seed=0)
    assert r.status == "error" and r.error == "RuntimeError: kernel exploded"


def test_the_callers_random_state_is_left_alone() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    run_seed(make_problem(None, TINY), "qsgd", _settings(steps=2), seed=0)
    assert torch.equal(torch.get_rng_state(), before)


def test_batch_norm_statistics_are_worker_0s_as_ddp_broadcasts_them(tmp_path: object) -> None:
    import sys
    import types

    mod = types.ModuleType("gcbench_test_bn_factory")

    def factory(seed: int = 0) -> tuple[torch.nn.Module, object]:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 2))

        def make_batch(i: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
            g = torch.Generator().manual_seed(1000 * i + w)
            return torch.randn(8, 4, generator=g) + 5 * w, torch.randint(0, 2, (8,), generator=g)

        return model, make_batch

    mod.factory = factory  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    try:
        problem = make_problem(None, f"{mod.__name__}:factory")
        seen: list[torch.Tensor] = []
        instance = problem.instance

        def spying(seed: int, workers: int, batch: int | None) -> object:
            sp = instance(seed, workers, batch)
            evaluate = sp.evaluate
            sp.evaluate = lambda m: (seen.append(m[1].running_mean.clone()), evaluate(m))[1]
            return sp

        problem.instance = spying  # type: ignore[method-assign]
        run_seed(problem, "none", _settings(steps=1, eval_every=1, lr=0.0), seed=0)
        bn = torch.nn.BatchNorm1d(6)
        torch.manual_seed(0)
        lin = torch.nn.Linear(4, 6)
        bn(lin(factory(0)[1](0, 0)[0]))  # worker 0's batch alone (worker 1's inputs are shifted by 5)
        assert torch.allclose(seen[-1], bn.running_mean, atol=1e-6)
    finally:
        del sys.modules[mod.__name__]


def _held_out_loss_nan_from(problem: object, evaluation: int) -> None:
    """Make ``problem``'s held-out loss NaN from its ``evaluation``-th evaluation on (0: the one before any update), the
    metric (accuracy) staying finite: what a model whose held-out pass overflows, or held-out data with a NaN, gives."""
    instance = problem.instance  # type: ignore[attr-defined]

    def patched(seed: int, workers: int, batch: int | None) -> object:
        sp = instance(seed, workers, batch)
        evaluate, calls = sp.evaluate, []

        def nan_loss(model: torch.nn.Module) -> tuple[float, float]:
            loss, metric = evaluate(model)
            calls.append(model)
            return (float("nan") if len(calls) > evaluation else loss), metric

        sp.evaluate = nan_loss
        return sp

    problem.instance = patched  # type: ignore[attr-defined]


def test_a_nan_held_out_loss_is_a_divergence_not_an_ok_seed() -> None:
    problem = make_problem(None, TINY)
    _held_out_loss_nan_from(problem, 1)  # the evaluation at step 3
    r = run_seed(problem, "none", _settings(), seed=0)
    assert (r.status, r.diverged_at_step, r.diverged_reason) == ("diverged", 3, "non-finite held-out loss")
    assert r.final is None and r.error is None and r.steps_run == 3


def test_a_nan_held_out_loss_before_any_update_is_the_seeds_error() -> None:
    problem = make_problem(None, TINY)
    _held_out_loss_nan_from(problem, 0)
    r = run_seed(problem, "none", _settings(), seed=0)
    assert r.status == "error" and r.steps_run == 0
    assert r.error == ("ConvergeError: the initial model's held-out loss is nan (before any update): check the model and "
                       "its held-out batches")


@pytest.mark.parametrize(("optimizer", "lr", "weight_decay"), [("sgd", 1e308, 0.0), ("adam", 1e38, 0.0), ("sgd", 0.1, 1e308)])
def test_an_update_that_overflows_float32_is_a_divergence(optimizer: str, lr: float, weight_decay: float) -> None:
    momentum = 0.9 if optimizer == "sgd" else None
    r = run_seed(make_problem(None, TINY), "topk:density=0.2", _settings(optimizer=optimizer, lr=lr, momentum=momentum,
                                                                        weight_decay=weight_decay), seed=0)
    assert (r.status, r.error, r.diverged_at_step) == ("diverged", None, 0)
    assert r.diverged_reason == "non-finite update (the step overflows float32)"


def test_a_system_exit_from_the_users_forward_is_the_seeds_error(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = make_problem(None, TINY)
    instance = problem.instance

    def exiting(seed: int, workers: int, batch: int | None) -> object:
        sp = instance(seed, workers, batch)
        forward = sp.model.forward
        calls: list[int] = []

        def forward_then_exit(x: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            if len(calls) > 10:  # past the initial evaluation (8 held-out batches) and one step
                raise SystemExit(3)
            return forward(x)

        monkeypatch.setattr(sp.model, "forward", forward_then_exit)
        return sp

    monkeypatch.setattr(problem, "instance", exiting)
    r = run_seed(problem, "none", _settings(), seed=0)
    assert (r.status, r.error) == ("error", "SystemExit: 3")
