"""The learning problems ``gcbench train`` trains on (``--task``): data, model, optimizer, batches, evaluation.

* ``digits`` (default when scikit-learn is installed): the 1,797 8×8 handwritten digits bundled
  with scikit-learn (``load_digits``, no download), a fixed seeded 80/20 split, an MLP
  64-256-128-10 (50,826 parameters), SGD with momentum.  Metric: test accuracy.
* ``digits_cnn``: the same digits and split as 8×8 one-channel images, a small CNN (two 3×3
  convolutions of 16 and 32 channels, 2×2 max-pool, fully connected 512-64-10: 38,282 parameters,
  three of its six tensors under 5,000 elements), SGD with momentum.  Metric: test accuracy.  Added
  for ``gcbench converge`` (docs/convergence.md): its small convolution tensors beside one large
  fully connected layer are where a per-tensor compressor at a fixed density or rank starves some
  tensors, which the MLP has none of.
* ``charlstm`` (the default without scikit-learn): next-character prediction on the public-domain
  texts shipped in ``gcbench/data/`` (last 10% held out), an embedding-32 / LSTM-128 / linear model,
  Adam.  Metric: next-character accuracy on the held-out text.

Every rank of a run builds the same task from the same seed (:func:`make_task`); the batches of
each rank and epoch are derived from that seed, so every compressor sees the same data order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from gcbench.core.errors import TrainError, UnknownNameError, did_you_mean
from gcbench.sources.architectures import CharLSTM, digits_build, digits_cnn_build

DATA_DIR = Path(__file__).resolve().parents[1] / "data"

TEXT_FILES = ("public_domain.txt",)


def _derive(*parts: int) -> int:
    """A 63-bit seed from integer parts (stable across processes and platforms)."""
    words = [int(p) % 2**32 for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> np.uint64(1))



@dataclass(frozen=True)
class TaskDefaults:
    """What a task trains with unless the command line says otherwise."""

    epochs: int
    target: float  # the metric's value training should reach
    lr: float
    batch: int


class Task(ABC):
    """A small, real learning problem: data, model, optimizer, batches and evaluation."""

    name: str
    metric = "accuracy"
    defaults: TaskDefaults

    def __init__(self, seed: int) -> None:
        self.seed = seed

    @abstractmethod
    def build_model(self) -> nn.Module: ...

    @abstractmethod
    def optimizer(self, params: Any, lr: float) -> torch.optim.Optimizer: ...

    @abstractmethod
    def batches(self, epoch: int, rank: int, world: int, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's batches of one epoch; every rank gets the same number of batches."""

    @abstractmethod
    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def evaluate(self, model: nn.Module) -> tuple[float, float]:
        """(held-out loss, held-out accuracy)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]: ...


def sklearn_available() -> bool:
    try:
        import sklearn.datasets  # noqa: F401
    except ImportError:
        return False
    return True


class DigitsTask(Task):
    """scikit-learn's 8×8 digits (1,797 images, bundled, no download) with an MLP."""

    name = "digits"
    defaults = TaskDefaults(epochs=10, target=0.9, lr=0.1, batch=32)

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            raise TrainError(f"task {self.name!r} needs scikit-learn (pip install scikit-learn), or use --task charlstm") from None
        d = load_digits()
        x = torch.from_numpy(np.asarray(d.data, dtype=np.float32) / 16.0)
        y = torch.from_numpy(np.asarray(d.target, dtype=np.int64))
        # a fixed split: every run (and every compressor) sees the same test images
        perm = torch.from_numpy(np.random.Generator(np.random.PCG64(12345)).permutation(len(y)))
        n_test = len(y) // 5
        self.x_test, self.y_test = x[perm[:n_test]], y[perm[:n_test]]
        self.x_train, self.y_train = x[perm[n_test:]], y[perm[n_test:]]

    def build_model(self) -> nn.Module:
        return digits_build()

    def optimizer(self, params: Any, lr: float) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=lr, momentum=0.9)

    def batches(self, epoch: int, rank: int, world: int, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.y_train)
        perm = torch.from_numpy(np.random.Generator(np.random.PCG64(_derive(self.seed, 1, epoch))).permutation(n))
        shard = perm[rank : (n // world) * world : world]  # equal shards: all ranks take the same number of steps
        steps = len(shard) // batch_size
        if steps == 0:
            raise TrainError(f"digits: {n} training images cannot give {world} workers a batch of {batch_size}")
        return [(self.x_train[shard[i * batch_size : (i + 1) * batch_size]], self.y_train[shard[i * batch_size : (i + 1) * batch_size]])
                for i in range(steps)]

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out, y)

    def evaluate(self, model: nn.Module) -> tuple[float, float]:
        with torch.no_grad():
            out = model(self.x_test)
            return float(self.loss(out, self.y_test)), float((out.argmax(1) == self.y_test).float().mean())

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "dataset": "sklearn load_digits (8x8, 10 classes)", "train": len(self.y_train),
                "test": len(self.y_test), "model": "MLP 64-256-128-10", "optimizer": "SGD momentum 0.9"}


class DigitsCNNTask(DigitsTask):
    """scikit-learn's 8×8 digits as one-channel images with a small CNN (the same data, split and batches as ``digits``)."""

    name = "digits_cnn"
    defaults = TaskDefaults(epochs=10, target=0.9, lr=0.05, batch=32)

    def build_model(self) -> nn.Module:
        return digits_cnn_build()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "name": self.name, "model": "CNN conv3x3-16, conv3x3-32, maxpool 2, FC 512-64-10"}


def load_text() -> str:
    """The shipped public-domain text (provenance lines starting with '#' removed)."""
    parts = []
    for name in TEXT_FILES:
        path = DATA_DIR / name
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TrainError(f"task 'charlstm': cannot read {path} ({exc})") from None
        parts.append("\n".join(line for line in raw.splitlines() if not line.startswith("#")).strip())
    return "\n\n".join(parts)


class CharLSTMTask(Task):
    """Next-character prediction on the shipped public-domain text."""

    name = "charlstm"
    defaults = TaskDefaults(epochs=6, target=0.35, lr=0.005, batch=16)
    seq_len = 64
    steps_per_epoch = 20

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        text = load_text()
        self.vocab = sorted(set(text))
        index = {c: i for i, c in enumerate(self.vocab)}
        ids = torch.tensor([index[c] for c in text], dtype=torch.int64)
        cut = int(len(ids) * 0.9)
        self.train_ids, self.test_ids = ids[:cut], ids[cut:]
        self.chars = len(text)

    def build_model(self) -> nn.Module:
        return CharLSTM(len(self.vocab))

    def optimizer(self, params: Any, lr: float) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=lr)

    def batches(self, epoch: int, rank: int, world: int, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        rng = np.random.Generator(np.random.PCG64(_derive(self.seed, 2, epoch, rank)))  # each rank its own windows
        span = len(self.train_ids) - self.seq_len - 1
        offsets = torch.arange(self.seq_len + 1)
        out = []
        for _ in range(self.steps_per_epoch):
            starts = torch.from_numpy(rng.integers(0, span, size=batch_size))
            win = self.train_ids[starts[:, None] + offsets]
            out.append((win[:, :-1], win[:, 1:]))
        return out

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    def evaluate(self, model: nn.Module) -> tuple[float, float]:
        n = (len(self.test_ids) - 1) // self.seq_len
        x = self.test_ids[: n * self.seq_len].reshape(n, self.seq_len)
        y = self.test_ids[1 : n * self.seq_len + 1].reshape(n, self.seq_len)
        with torch.no_grad():
            out = model(x)
            return float(self.loss(out, y)), float((out.argmax(-1) == y).float().mean())

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "dataset": f"gcbench/data public-domain text ({self.chars} characters, {len(self.vocab)} symbols)",
                "train_chars": len(self.train_ids), "test_chars": len(self.test_ids), "seq_len": self.seq_len,
                "steps_per_epoch": self.steps_per_epoch, "model": "Embedding 32 - LSTM 128 - Linear", "optimizer": "Adam"}


TASKS: dict[str, type[Task]] = {"digits": DigitsTask, "digits_cnn": DigitsCNNTask, "charlstm": CharLSTMTask}


def default_task() -> str:
    return "digits" if sklearn_available() else "charlstm"


def make_task(name: str, seed: int) -> Task:
    if name == "auto":
        name = default_task()
    if name not in TASKS:
        raise UnknownNameError(did_you_mean(name, list(TASKS), "task"))
    return TASKS[name](seed)

