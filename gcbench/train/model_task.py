"""``gcbench train --model``: a zoo model, ``hf:NAME`` or a user factory trained as a :class:`~gcbench.workloads.tasks.Task`.

The model, its batches, loss and held-out evaluation are ``gcbench converge``'s
(:class:`gcbench.workloads.problems.ModelProblem`, which resolves zoo names, ``hf:`` and
``path.py:factory`` through the zoo's loader): step ``t`` of rank ``r`` trains on the factory's
``make_batch(t, r)``, as converge's worker ``r`` does, and the held-out set is converge's.  An epoch
is :data:`STEPS_PER_EPOCH` steps (a model's synthetic stream has no end); the optimizer is the
problem's default (SGD with momentum 0.9 at 0.05, AdamW at 1e-4 for ``hf:`` models).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gcbench.workloads.problems import Defaults, ModelProblem, SeedProblem, make_optimizer
from gcbench.workloads.tasks import Task, TaskDefaults

#: steps of one epoch of a model (an evaluation at each epoch's end)
STEPS_PER_EPOCH = 10
#: epochs of a model run unless --epochs says otherwise
EPOCHS = 3
#: the accuracy time-to-target is measured against unless --target says otherwise (a model with no class labels
#: reports the negated held-out loss, which never reaches it: no time to target)
TARGET = 0.9


def model_defaults(spec: str) -> TaskDefaults:
    """What ``--model SPEC`` trains with unless the command line says otherwise: a zoo model's own batch (its card's
    ``batch_size``), else ``batch`` 0: whatever the factory makes."""
    batch = 0
    if ":" not in spec.removeprefix("zoo:"):
        from gcbench.core.errors import GcbenchError
        from gcbench.sources import catalog

        try:
            own = catalog.lookup(spec.removeprefix("zoo:")).options.get("batch_size")
        except GcbenchError:  # an unknown name: ModelProblem says so in one line
            own = None
        batch = own if isinstance(own, int) and not isinstance(own, bool) else 0
    return TaskDefaults(epochs=EPOCHS, target=TARGET, lr=1e-4 if spec.startswith("hf:") else 0.05, batch=batch)


class ModelTask(Task):
    """A converge model problem seen as a train task: this rank's own batches, the problem's loss and evaluation."""

    name = "model"

    def __init__(self, spec: str, seed: int, batch: int | None = None) -> None:
        super().__init__(seed)
        self.spec, self.batch = spec, batch
        self.problem = ModelProblem(spec, batch)  # an unknown name, a bad factory or no transformers: one line here
        self.metric = self.problem.metric
        self.defaults = model_defaults(spec)
        self._instance: SeedProblem | None = None

    def _seeded(self) -> SeedProblem:
        if self._instance is None:
            self._instance = self.problem.instance(self.seed, 1, self.batch)
        return self._instance

    def build_model(self) -> nn.Module:
        """The model as the factory builds it for this seed (a fresh one each call: every compressor starts alike)."""
        self._instance = None
        return self._seeded().model

    def optimizer(self, params: Any, lr: float) -> torch.optim.Optimizer:
        d: Defaults = self.problem.defaults
        return make_optimizer(d.optimizer, params, lr, d.momentum, 0.0)

    def batches(self, epoch: int, rank: int, world: int, batch_size: int) -> list[tuple[Any, Any]]:
        make_batch = self._seeded().make_batch
        assert make_batch is not None  # a model problem always has one
        first = epoch * STEPS_PER_EPOCH
        return [make_batch(step, rank) for step in range(first, first + STEPS_PER_EPOCH)]

    def loss(self, out: Any, y: Any) -> torch.Tensor:
        return self._seeded().loss(out, y)

    def evaluate(self, model: nn.Module) -> tuple[float, float]:
        return self._seeded().evaluate(model)

    def describe(self) -> dict[str, Any]:
        d = self.problem.defaults
        return {**self.problem.describe(), "model": self.spec, "steps_per_epoch": STEPS_PER_EPOCH,
                "optimizer": d.optimizer + (f" momentum {d.momentum:g}" if d.momentum else "")}
