"""What ``gcbench converge`` trains: one interface over the ``train`` tasks, zoo, Hugging Face and user models.

A :class:`Problem` names a learning problem (``settings.task`` in the results file) and, per seed,
builds a :class:`SeedProblem`: the model (initialised from the seed), a stream of per-step batches
(one batch per worker, each worker its own; the seed changes the data order), the loss, and an
evaluation on held-out data giving ``(eval loss, metric)``.  The metric is always "higher is
better": accuracy where the problem has class labels and held-out data, else the negated held-out
loss (``metric = "neg_loss"``).

* **Tasks** (:mod:`gcbench.workloads.tasks`): ``digits``, ``digits_cnn`` (scikit-learn's bundled
  8×8 digits) and ``charlstm`` (the text in ``gcbench/data/``).  The model, the batches
  (``Task.batches(epoch, rank, world, batch)``, the very function ``gcbench train``'s ranks call),
  the loss and the evaluation are the task's own, so a simulated run and a real one see the same
  data in the same order (the fast twin, ``tests/converge/test_twin.py``).
* **Models** (:func:`gcbench.sources.zoo.load_model`): a zoo name (``smallcnn``, ``resnet18`` …)
  on the seeded synthetic data its live source uses, ``hf:NAME`` (Hugging Face, when transformers
  is installed), or a user factory ``package.module:factory`` or ``path/to/file.py:factory``
  (README "Real gradients").  Step ``t`` of worker ``w`` trains on ``make_batch(t, w)``; the
  held-out set is :data:`EVAL_BATCHES` batches at indices from :data:`EVAL_BATCH_OFFSET` (never a
  training index).  Accuracy is measured where the loss is gcbench's cross entropy and the targets
  are integer class labels; otherwise the metric is the negated held-out loss.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gcbench.core.errors import GcbenchError, ParamError, UnknownNameError, did_you_mean

#: held-out batches of a model problem start at this batch index (training uses 0, 1, 2, …; the live source's warm-up 2**30)
EVAL_BATCH_OFFSET = 1 << 29
#: held-out batches of a model problem (worker 0's stream at :data:`EVAL_BATCH_OFFSET` + i)
EVAL_BATCHES = 8

OPTIMIZERS = ("sgd", "adam", "adamw")


class ConvergeError(GcbenchError):
    """A convergence run that cannot be done as asked (one line on the command line, exit 1)."""


@dataclass(frozen=True)
class Defaults:
    """What a problem trains with unless the command line says otherwise."""

    optimizer: str
    lr: float
    momentum: float | None
    batch: int | None  # None: the model's own batch


#: the optimizer each ``train`` task builds (``Task.optimizer``), by name (tests/converge/test_problems.py checks the two agree)
TASK_OPTIMIZERS: dict[str, tuple[str, float | None]] = {"digits": ("sgd", 0.9), "digits_cnn": ("sgd", 0.9), "charlstm": ("adam", None)}


def make_optimizer(name: str, params: Any, lr: float, momentum: float | None, weight_decay: float) -> torch.optim.Optimizer:
    """``sgd`` (with ``momentum``), ``adam`` or ``adamw``, with ``weight_decay`` (L2 for sgd/adam, decoupled for adamw)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum or 0.0, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    raise UnknownNameError(did_you_mean(name, list(OPTIMIZERS), "optimizer"))


@dataclass
class SeedProblem:
    """One seed's instance of a problem: model, batches, loss and evaluation."""

    model: nn.Module
    batches: Iterator[list[tuple[Any, Any]]]  # one list per step: worker w's (inputs, targets) at index w
    loss: Callable[[Any, Any], torch.Tensor]
    evaluate: Callable[[nn.Module], tuple[float, float]]  # (held-out loss, metric)
    #: a model's ``make_batch(step, worker)`` (None for a task): gcbench train's rank r takes only its own batches
    make_batch: Callable[[int, int], Any] | None = None


class Problem(ABC):
    """A learning problem ``gcbench converge`` can train with N simulated workers."""

    spec: str  # what the results file calls it (``settings.task``)
    dataset: str
    metric: str  # "accuracy" or "neg_loss"
    defaults: Defaults

    @abstractmethod
    def instance(self, seed: int, workers: int, batch: int | None) -> SeedProblem:
        """The problem for ``seed`` (model initialised from it, data order from it)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]: ...


class TaskProblem(Problem):
    """A ``gcbench train`` task (:mod:`gcbench.workloads.tasks`): its model, batches, loss and evaluation as they are."""

    def __init__(self, name: str) -> None:
        from gcbench.workloads.tasks import TASKS, make_task

        if name not in TASKS:
            raise UnknownNameError(did_you_mean(name, list(TASKS), "task"))
        self.spec = name
        self._make = make_task
        task = make_task(name, 0)  # fails here, in one line, without its package (digits needs scikit-learn)
        info = task.describe()
        self.dataset = str(info.get("dataset", name))
        self.metric = "accuracy"
        optimizer, momentum = TASK_OPTIMIZERS[name]
        self.defaults = Defaults(optimizer, task.defaults.lr, momentum, task.defaults.batch)
        self._describe = info

    def instance(self, seed: int, workers: int, batch: int | None) -> SeedProblem:
        task = self._make(self.spec, seed)
        torch.manual_seed(seed)  # as gcbench train: the same initial model for a seed, whatever the compressor
        model = task.build_model()
        size = int(batch or self.defaults.batch or 1)

        def stream() -> Iterator[list[tuple[Any, Any]]]:
            for epoch in itertools.count():
                per_worker = [task.batches(epoch, w, workers, size) for w in range(workers)]
                yield from (list(step) for step in zip(*per_worker, strict=True))

        return SeedProblem(model, stream(), task.loss, task.evaluate)

    def describe(self) -> dict[str, Any]:
        return dict(self._describe)


def _is_file_factory(spec: str) -> bool:
    path, sep, _ = spec.rpartition(":")
    return bool(sep) and path.endswith(".py")


class ModelProblem(Problem):
    """A zoo, Hugging Face or user model on the batches its factory makes (:func:`gcbench.sources.zoo.load_model`)."""

    def __init__(self, spec: str, batch: int | None = None) -> None:
        from gcbench.sources import catalog
        from gcbench.sources.zoo import cross_entropy, load_model

        self.spec = spec
        self._load_model, self._cross_entropy = load_model, cross_entropy
        self.user = _is_file_factory(spec) or catalog.is_user_model(spec)
        self.hf = spec.startswith("hf:")
        self._name = spec  # a path/file.py:factory too: the loader imports the file and names it in every error
        if not self.user and not self.hf:
            card = catalog.lookup(spec)  # an unknown zoo name: "did you mean" in one line
            self._batch_option = "batch_size" in card.options
            own_batch = card.options.get("batch_size")
        else:
            self._batch_option = self.hf or batch is not None  # a user factory gets batch_size only when asked for
            own_batch = None
        if self.hf:
            try:
                import transformers  # noqa: F401
            except ImportError:
                raise ConvergeError(f"model {spec!r} needs transformers (pip install 'gcbench[hf]')") from None
        self.defaults = (Defaults("adamw", 1e-4, None, None) if self.hf
                         else Defaults("sgd", 0.05, 0.9, int(own_batch) if isinstance(own_batch, int) else None))
        probe = self._load(0, batch)
        inputs, targets = probe.make_batch(0, 0)
        default_loss = getattr(probe.loss_fn, "__wrapped__", probe.loss_fn) is cross_entropy
        labels = isinstance(targets, torch.Tensor) and not targets.is_floating_point() and not targets.is_complex()
        if default_loss and not labels:
            kind = type(targets).__name__ if not isinstance(targets, torch.Tensor) else f"a {targets.dtype} tensor"
            raise ConvergeError(f"model {spec!r}: make_batch's targets are {kind}, not integer class labels, and the factory "
                                "returns no loss_fn for them; return (module, make_batch, loss_fn)")
        self.metric = "accuracy" if default_loss and labels else "neg_loss"
        self.dataset = ("gcbench synthetic batches of the model's live source (class prototypes + noise, or token streams)"
                        if not self.user else "the factory's make_batch")
        self.parameters = sum(p.numel() for p in probe.module.parameters() if p.requires_grad)
        del probe, inputs, targets

    def _load(self, seed: int, batch: int | None) -> Any:
        kwargs: dict[str, Any] = {}
        if batch is not None and self._batch_option:
            kwargs["batch_size"] = int(batch)
        return self._load_model(self._name, seed, **kwargs)

    def instance(self, seed: int, workers: int, batch: int | None) -> SeedProblem:
        zm = self._load(seed, batch)
        model = zm.module.train()
        held_out = [zm.make_batch(EVAL_BATCH_OFFSET + i, 0) for i in range(EVAL_BATCHES)]
        accuracy = self.metric == "accuracy"

        def stream() -> Iterator[list[tuple[Any, Any]]]:
            for step in itertools.count():
                yield [zm.make_batch(step, w) for w in range(workers)]

        def evaluate(m: nn.Module) -> tuple[float, float]:
            was_training = m.training
            m.eval()
            total, correct, count = 0.0, 0, 0
            try:
                with torch.no_grad():
                    for x, y in held_out:
                        out = m(x)
                        total += float(zm.loss_fn(out, y))
                        if accuracy:
                            correct += int((out.argmax(-1) == y).sum())
                            count += int(y.numel())
            finally:
                m.train(was_training)
            loss = total / len(held_out)
            return loss, (correct / count if accuracy and count else -loss)

        return SeedProblem(model, stream(), zm.loss_fn, evaluate, zm.make_batch)

    def describe(self) -> dict[str, Any]:
        return {"name": self.spec, "dataset": self.dataset, "metric": self.metric, "parameters": self.parameters,
                "held_out": f"{EVAL_BATCHES} batches at indices {EVAL_BATCH_OFFSET}+"}


def make_problem(task: str | None, model: str | None, batch: int | None = None) -> Problem:
    """The problem a command names: ``--task`` (a train task) or ``--model`` (zoo, ``hf:``, user factory); exactly one."""
    if (task is None) == (model is None):
        raise ParamError("name exactly one of --task (digits, digits_cnn, charlstm) and --model (a zoo, hf: or user model)")
    if task is not None:
        from gcbench.workloads.tasks import default_task

        return TaskProblem(default_task() if task == "auto" else task)
    assert model is not None
    if model.startswith("zoo:"):
        model = model.removeprefix("zoo:")
    return ModelProblem(model, batch)
