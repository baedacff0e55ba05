"""Record gradients from a Hugging Face ``transformers.Trainer`` run with one callback.

::

    from gcbench.integrations.hf import GradientRecorderCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[GradientRecorderCallback("traces/gpt2", steps=range(0, 1000, 100))])
    trainer.train()                       # then: gcbench run --trace traces/gpt2

The gradients are taken in ``on_pre_optimizer_step``: after gradient accumulation (the Trainer
calls it once per optimizer step, not per micro-batch) and after ``max_grad_norm`` clipping, right
before ``optimizer.step()`` — exactly the gradient the optimizer applies.  Trace step ``i`` is the
``i``-th recorded optimizer step; the Trainer's ``global_step`` numbers (0 for the first update)
are kept in the manifest as ``recorded_steps``.

Under DDP the Trainer has already all-reduced the gradients at that point, so every rank holds
the same averaged gradient: only the main process (``state.is_world_process_zero``) records, as
one worker.  Per-worker gradients need a communication hook (see ``gcbench.distributed.ddp``).  With fp16
mixed precision and no clipping the Trainer leaves gradients loss-scaled; set ``max_grad_norm``
(the default 1.0 clips, which unscales) or use bf16.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from torch import nn
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from gcbench.integrations import check_out, check_steps
from gcbench.sources.recorder import GradientRecorder


class GradientRecorderCallback(TrainerCallback):
    """Save the gradients of the selected optimizer steps (``None``: every step) into ``out_dir``.

    ``model_name`` is written to the trace manifest; ``overwrite`` allows replacing an existing
    trace folder.  After training, :attr:`trace` is the manifest's path (None on other ranks).
    """

    def __init__(self, out_dir: Path | str, steps: Iterable[int] | None = None, *, model_name: str = "hf-trainer",
                 overwrite: bool = False) -> None:
        self.out = check_out(out_dir)
        self.steps = check_steps(steps)
        self.model_name, self.overwrite = model_name, overwrite
        self.recorder: GradientRecorder | None = None
        self.trace: Path | None = None

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, model: nn.Module | None = None,
                       **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.recorder = GradientRecorder(self.out, model, steps=self.steps, model_name=self.model_name, seed=int(args.seed),
                                             overwrite=self.overwrite)

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                              model: nn.Module | None = None, **kwargs: Any) -> None:
        if self.recorder is not None:
            self.recorder.record(state.global_step, model)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if self.recorder is not None:
            self.trace = self.recorder.close()
            self.recorder = None
