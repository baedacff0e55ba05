"""Record gradients from a PyTorch Lightning run with one callback.

::

    from gcbench.integrations.lightning import GradientRecorderCallback

    trainer = L.Trainer(max_steps=1000, callbacks=[GradientRecorderCallback("traces/mine", steps=range(0, 1000, 100))])
    trainer.fit(module, loader)           # then: gcbench run --trace traces/mine

The gradients are taken in ``on_before_optimizer_step`` (automatic optimization): after gradient
accumulation (``accumulate_grad_batches``: once per optimizer step), after AMP unscaling, and
before Lightning's gradient clipping and ``optimizer.step()``.  Trace step ``i`` is the ``i``-th
recorded optimizer step; ``trainer.global_step`` numbers (0 for the first update) are kept in the
manifest as ``recorded_steps``.  Under DDP the gradients are already all-reduced there, so only
global rank 0 records, as one worker.  Works with ``lightning.pytorch`` (the ``gcbench[lightning]``
extra) or, when that is absent, the standalone ``pytorch_lightning`` package.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package of the same framework
    import pytorch_lightning as pl

from gcbench.integrations import check_out, check_steps
from gcbench.sources.recorder import GradientRecorder


class GradientRecorderCallback(pl.Callback):
    """Save the gradients of the selected optimizer steps (``None``: every step) into ``out_dir``.

    ``model_name`` is written to the trace manifest (default: the LightningModule's class name);
    ``overwrite`` allows replacing an existing trace folder.  After ``fit``, :attr:`trace` is the
    manifest's path (None on other ranks).
    """

    def __init__(self, out_dir: Path | str, steps: Iterable[int] | None = None, *, model_name: str | None = None, seed: int = 0,
                 overwrite: bool = False) -> None:
        self.out = check_out(out_dir)
        self.steps = check_steps(steps)
        self.model_name, self.seed, self.overwrite = model_name, seed, overwrite
        self.recorder: GradientRecorder | None = None
        self.trace: Path | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.global_rank == 0:
            name = self.model_name or type(pl_module).__name__
            self.recorder = GradientRecorder(self.out, pl_module, steps=self.steps, model_name=name, seed=self.seed,
                                             overwrite=self.overwrite)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer) -> None:
        if self.recorder is not None:
            self.recorder.record(trainer.global_step, pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # keep what was recorded before the failure; the recorder never masks the real error
        if self.recorder is not None and self.recorder.recorded_steps:
            self._finish()
        self.recorder = None

    def _finish(self) -> None:
        if self.recorder is not None:
            self.trace = self.recorder.close()
            self.recorder = None

    def state_dict(self) -> dict[str, Any]:
        # nothing to resume: a resumed run records into a new trace folder
        return {}
