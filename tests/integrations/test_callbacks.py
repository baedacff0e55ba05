"""Trainer callbacks: a tiny model trained on synthetic data records the gradients its optimizer applies,
after accumulation and before the step, into a trace that ``gcbench run --trace`` replays."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from gcbench.core.errors import ParamError
from gcbench.sources.trace import TraceSource

LR = 0.1


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


# the Trainer itself needs accelerate (both come with the extra)
needs_transformers = pytest.mark.skipif(not (_has("transformers") and _has("accelerate")),
                                        reason="transformers/accelerate are not installed (pip install 'gcbench[hf]')")
needs_lightning = pytest.mark.skipif(not (_has("lightning") or _has("pytorch_lightning")),
                                     reason="lightning is not installed (pip install 'gcbench[lightning]')")


# 2 shared cores: a second intra-op thread only adds spin-wait under load (see conftest.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _check_sgd_used_recorded(trace: Path, before: list[dict[str, torch.Tensor]], after: list[dict[str, torch.Tensor]]) -> None:
    """Plain SGD without momentum or decay: p_after = p_before − lr·g, so g is the gradient the optimizer applied."""
    src = TraceSource(trace)
    assert src.steps == len(before) == len(after)
    for step in range(src.steps):
        grads = src.gradients(step, 0)
        for name in (s.name for s in src.layout()):
            expected = before[step][name] - LR * grads[name]
            assert torch.allclose(after[step][name], expected, rtol=0, atol=1e-6), (step, name)
        # and the step really moved the model, so the check above is not trivially true
        assert any(not torch.equal(before[step][n], after[step][n]) for n in before[step])


def _replay(trace: Path, tmp_path: Path) -> None:
    from gcbench.cli import app
    from gcbench.results.store import load_run

    out = tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", "suites/quick.toml", "--trace", str(trace), "-c", "topk", "-c", "qsgd", "--no-timing", "-q",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    cases = load_run(next(out.glob("*.json"))).cases
    assert [c.status for c in cases] == ["ok", "ok"]


def test_bad_step_selection_is_a_user_error() -> None:
    from gcbench.integrations import check_steps

    with pytest.raises(ParamError, match="steps must be >= 0"):
        check_steps([3, -1])
    with pytest.raises(ParamError, match="steps must be integers"):
        check_steps(["a"])
    assert check_steps(range(0, 6, 2)) == {0, 2, 4}


# --------------------------------------------------------------------------------------------
# Hugging Face Trainer


class _TokenData(torch.utils.data.Dataset):
    """Deterministic token rows for a causal LM (labels = inputs; the model shifts them)."""

    def __init__(self, n: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


@needs_transformers
def test_hf_trainer_callback_records_the_applied_gradients_and_the_trace_replays(tmp_path: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    from gcbench.integrations.hf import GradientRecorderCallback

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16, bos_token_id=49,
                                       eos_token_id=49, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    before: list[dict[str, torch.Tensor]] = []
    after: list[dict[str, torch.Tensor]] = []
    recorded = {0, 2}

    class Probe(TrainerCallback):
        # snapshots around the steps the recorder selected
        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: torch.nn.Module | None = None, **kw: Any) -> None:
            if state.global_step in recorded:
                assert model is not None
                before.append(_params(model))

        def on_optimizer_step(self, args: Any, state: Any, control: Any, model: torch.nn.Module | None = None, **kw: Any) -> None:
            if state.global_step in recorded:  # global_step is incremented after this event
                assert model is not None
                after.append(_params(model))

    cb = GradientRecorderCallback(tmp_path / "trace", steps=sorted(recorded), model_name="tiny-gpt2")
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=4, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                             learning_rate=LR, optim="sgd", lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=0.0,
                             report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True, seed=0,
                             dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=_TokenData(32, 8, 50), callbacks=[cb, Probe()])
    trainer.train()
    assert cb.trace == tmp_path / "trace" / "manifest.json"
    manifest = json.loads(cb.trace.read_text())
    # two optimizer steps recorded out of 4 (8 micro-batches: recording is per step, after accumulation)
    assert manifest["recorded_steps"] == [0, 2] and manifest["steps"] == 2 and manifest["workers"] == 1
    assert manifest["model"] == "tiny-gpt2"
    assert manifest["tensors"][0]["name"] == "transformer.wte.weight"
    _check_sgd_used_recorded(tmp_path / "trace", before, after)
    _replay(tmp_path / "trace", tmp_path)


# --------------------------------------------------------------------------------------------
# Lightning


@needs_lightning
def test_lightning_callback_records_the_applied_gradients_and_the_trace_replays(tmp_path: Path) -> None:
    from gcbench.integrations.lightning import GradientRecorderCallback, pl

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=LR)

    before: list[dict[str, torch.Tensor]] = []
    after: list[dict[str, torch.Tensor]] = []
    recorded = {1, 3}

    class Probe(pl.Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            def post(opt: Any, args: Any, kwargs: Any) -> None:
                if trainer.global_step in recorded:  # the step counter moves after the optimizer step
                    after.append(_params(pl_module))

            trainer.optimizers[0].register_step_post_hook(post)

        def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
            if trainer.global_step in recorded:
                before.append(_params(pl_module))

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    cb = GradientRecorderCallback(tmp_path / "trace", steps=sorted(recorded))
    trainer = pl.Trainer(max_steps=4, accumulate_grad_batches=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path), callbacks=[cb, Probe()])
    trainer.fit(Tiny(), loader)
    assert cb.trace == tmp_path / "trace" / "manifest.json"
    manifest = json.loads(cb.trace.read_text())
    assert manifest["recorded_steps"] == [1, 3] and manifest["steps"] == 2
    assert manifest["model"] == "Tiny"
    assert [t["name"] for t in manifest["tensors"]] == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]
    _check_sgd_used_recorded(tmp_path / "trace", before, after)
    _replay(tmp_path / "trace", tmp_path)
