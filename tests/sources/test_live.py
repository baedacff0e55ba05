"""Tests of LiveSource: data-parallel semantics, determinism, caching, progress, errors."""

from __future__ import annotations

import pytest
import torch

from gcbench.core.errors import ParamError, SourceError
from gcbench.sources.live import WARMUP_BATCH_OFFSET, LiveSource
from gcbench.sources.zoo import load_model

R18 = {"image_size": 32, "batch_size": 2}


# 2 shared cores: a second intra-op thread only adds spin-wait under load (see conftest.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_deterministic_for_a_seed_and_distinct_across_workers_and_seeds() -> None:
    # resnet18 has batch norm (batch statistics) and the LSTM has dropout (seeded per pass)
    for model, kw in (("resnet18", R18), ("lstm_lm", {"batch_size": 2, "seq_len": 6, "vocab": 100, "hidden": 16})):
        a = LiveSource(model, workers=2, steps=2, seed=0, warmup_steps=1, **kw)
        b = LiveSource(model, workers=2, steps=2, seed=0, warmup_steps=1, **kw)
        c = LiveSource(model, workers=2, steps=2, seed=1, warmup_steps=1, **kw)
        for step in range(2):
            ga0, ga1 = dict(a.gradients(step, 0)), dict(a.gradients(step, 1))
            assert _equal(ga0, dict(b.gradients(step, 0))) and _equal(ga1, dict(b.gradients(step, 1)))
            # every tensor differs between workers (different batches), and between seeds
            assert all(not torch.equal(ga0[k], ga1[k]) for k in ga0), model
            assert not _equal(ga0, dict(c.gradients(step, 0)))


def test_layout_is_named_parameters_order_float32_cpu() -> None:
    src = LiveSource("resnet18", workers=1, steps=1, **R18)
    ref = load_model("resnet18", 0, **R18).module
    names = [n for n, p in ref.named_parameters() if p.requires_grad]
    assert [t.name for t in src.layout()] == names
    g = src.gradients(0, 0)
    assert list(g) == names
    for spec in src.layout():
        t = g[spec.name]
        assert t.dtype == torch.float32 and t.device.type == "cpu" and tuple(t.shape) == spec.shape and not t.requires_grad


def _manual_grads(module: torch.nn.Module, loss_fn: object, batch: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
    module.zero_grad(set_to_none=True)
    x, y = batch
    loss_fn(module(x), y).backward()  # type: ignore[operator]
    return {n: p.grad.detach().clone() for n, p in module.named_parameters()}


def test_matches_hand_computed_data_parallel_sgd() -> None:
    # the MLP has no dropout or batch norm, so a plain re-implementation must agree bit for bit:
    # warm-up on worker-0 batches at the offset, then per-worker gradients, then a mean-gradient step
    lr, workers = 0.05, 3
    src = LiveSource("mlp", workers=workers, steps=3, seed=4, warmup_steps=2, lr=lr, batch_size=8)
    m = load_model("mlp", 4, batch_size=8)
    params = dict(m.module.named_parameters())
    for i in range(2):
        g = _manual_grads(m.module, m.loss_fn, m.make_batch(WARMUP_BATCH_OFFSET + i, 0))
        with torch.no_grad():
            for n, p in params.items():
                p.add_(g[n], alpha=-lr)
    for step in range(3):
        per_worker = [_manual_grads(m.module, m.loss_fn, m.make_batch(step, w)) for w in range(workers)]
        for w in range(workers):
            assert _equal(dict(src.gradients(step, w)), per_worker[w]), (step, w)
        with torch.no_grad():
            for n, p in params.items():
                p.add_(torch.stack([g[n] for g in per_worker]).mean(0), alpha=-lr)


def test_gradients_change_between_steps_only_through_the_update() -> None:
    # with lr = 0 the model never moves, so step t's gradient is the gradient on batch t at the start
    still = LiveSource("mlp", workers=1, steps=2, lr=0.0)
    moving = LiveSource("mlp", workers=1, steps=2, lr=0.1)
    assert _equal(dict(still.gradients(0, 0)), dict(moving.gradients(0, 0)))
    assert not _equal(dict(still.gradients(1, 0)), dict(moving.gradients(1, 0)))


def test_out_of_order_requests_recompute_the_same_values() -> None:
    src = LiveSource("mlp", workers=2, steps=3, warmup_steps=1)
    s0 = dict(src.gradients(0, 1))
    s2 = dict(src.gradients(2, 0))  # skips ahead through step 1
    assert _equal(dict(src.gradients(0, 1)), s0)  # goes back: rebuilt from the seed, re-warmed, recomputed
    assert _equal(dict(src.gradients(2, 0)), s2)
    fresh = LiveSource("mlp", workers=2, steps=3, warmup_steps=1)
    for step in range(3):
        fresh.gradients(step, 0)
    assert _equal(dict(fresh.gradients(2, 0)), s2)


def test_progress_callback_counts_every_forward_backward() -> None:
    calls: list[tuple[int, int, str]] = []
    src = LiveSource("mlp", workers=2, steps=2, warmup_steps=3, progress=lambda d, t, m: calls.append((d, t, m)))
    assert [c[0] for c in calls] == [1, 2, 3] and all(c[1] == 7 for c in calls) and "warm-up" in calls[0][2]
    src.gradients(0, 0)
    src.gradients(1, 1)
    assert [c[0] for c in calls] == list(range(1, 8))
    assert "step 2/2 worker 2/2" in calls[-1][2]


def test_global_rng_untouched_and_nothing_printed(capsys: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(99)
    before = torch.get_rng_state()
    src = LiveSource("lstm_lm", workers=2, steps=1, warmup_steps=1, batch_size=2, seq_len=4, vocab=30, hidden=8)
    src.gradients(0, 1)
    assert torch.equal(torch.get_rng_state(), before)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_user_factory_model_and_describe() -> None:
    src = LiveSource("tests.user_factory:tiny", workers=2, steps=1, seed=3)
    assert src.name == "live tests.user_factory:tiny"
    g = src.gradients(0, 1)
    assert set(g) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    d = src.describe()
    assert d["kind"] == "live" and d["workers"] == 2 and d["parameters"] == 6 * 5 + 5 + 5 * 3 + 3


def test_nan_gradients_are_reported_per_tensor() -> None:
    src = LiveSource("tests.user_factory:nan_model", workers=1, steps=1)
    with pytest.raises(SourceError, match=r"gradient '(weight|bias)'.*NaN"):
        src.gradients(0, 0)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"workers": 0}, "workers must be an integer >= 1"),
    ({"steps": 0}, "steps must be an integer >= 1"),
    ({"warmup_steps": -1}, "warmup_steps must be an integer >= 0"),
    ({"lr": float("nan")}, "lr must be a finite number"),
])
def test_bad_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ParamError, match=message):
        LiveSource("mlp", **kwargs)  # type: ignore[arg-type]


def test_out_of_range_requests() -> None:
    src = LiveSource("mlp", workers=2, steps=1)
    with pytest.raises(ParamError, match=r"step 1 out of range"):
        src.gradients(1, 0)
    with pytest.raises(ParamError, match=r"worker 2 out of range"):
        src.gradients(0, 2)


@pytest.mark.slow
def test_resnet50_live_step_full_size() -> None:
    src = LiveSource("resnet50", workers=1, steps=1)
    g = src.gradients(0, 0)
    assert len(g) == 161 and sum(t.numel() for t in g.values()) == 25_557_032


def test_an_lr_that_breaks_the_sgd_update_is_one_source_error() -> None:
    # the suite bounds lr to [0, 1000]; the source itself must not end in a RuntimeError from torch's add_
    src = LiveSource("mlp", workers=2, steps=2, lr=1e300, batch_size=4)
    with pytest.raises(SourceError, match=r"mlp: the SGD update with lr=1e\+300 fails on parameter '.*'.*; lower the source's lr"):
        src.gradients(1, 0)
