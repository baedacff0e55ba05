"""The settings of one ``gcbench train`` run: :class:`TrainConfig` and injected faults.

:meth:`TrainConfig.resolved` fills the task's defaults and checks every option before any process
starts (the compressors it compares: :mod:`gcbench.workloads.specs`).  ``GCBENCH_TRAIN_FAULT=crash:RANK[@STEP][/LABEL]``
(or ``hang:...``) injects a failure for testing (:class:`Fault`).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from gcbench.core.errors import ParamError, UnknownNameError, did_you_mean
from gcbench.workloads.tasks import TASKS, default_task

FAULT_ENV = "GCBENCH_TRAIN_FAULT"
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: finite, and far inside what torch.distributed can hold
#: the shortest timeout: torch.distributed's stores and collectives cannot even connect in 1 ms (a run could never start)
MIN_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class Fault:
    """An injected failure for tests: ``crash`` (the process exits) or ``hang`` (it stops responding)."""

    kind: str
    rank: int
    step: int = 2
    label: str | None = None  # only this compressor's run (default: every run)

    @classmethod
    def parse(cls, text: str) -> Fault:
        """``KIND:RANK[@STEP][/LABEL]``, e.g. ``crash:1``, ``hang:0@5/topk``."""
        kind, _, rest = text.partition(":")
        rest, _, label = rest.partition("/")
        rank_s, _, step_s = rest.partition("@")
        if kind not in ("crash", "hang") or not rank_s.strip().isdigit() or (step_s and not step_s.strip().isdigit()):
            raise ParamError(f"fault must look like crash:RANK[@STEP][/LABEL] or hang:RANK[@STEP][/LABEL], got {text!r}")
        return cls(kind, int(rank_s), int(step_s) if step_s else 2, label or None)

    def fire(self, rank: int, step: int, label: str) -> None:
        if rank != self.rank or step != self.step or (self.label is not None and label != self.label):
            return
        if self.kind == "crash":
            os._exit(3)  # like a segfault or an OOM kill: no Python cleanup, no message
        while True:  # hang: never return (the parent kills the process)
            time.sleep(3600)


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one ``gcbench train`` run (recorded in the results file)."""

    task: str = "auto"
    workers: int = 4
    epochs: int | None = None  # None: the task's default
    batch_size: int | None = None  # per worker
    lr: float | None = None
    target: float | None = None  # accuracy for time-to-target
    seed: int = 0
    granularity: str = "bucket"
    timeout_s: float = 300.0  # per compressor
    collective_timeout_s: float | None = None  # None: max(30, timeout / 3)
    threads: int | None = None  # per worker; None: cpu_count // workers
    fault: str | None = None
    device: str = "cpu"  # cpu, cuda (rank r on cuda:LOCAL_RANK) or cuda:N (one local worker); cuda trains over NCCL
    model: str | None = None  # instead of a task: a zoo model, hf:NAME or a user factory (gcbench.train.model_task)

    def resolved(self) -> TrainConfig:
        """Fill task defaults and validate; raises :class:`ParamError` with the option's name."""
        if self.model is not None:
            from gcbench.train.model_task import model_defaults

            task, defaults = "model", model_defaults(self.model)
        else:
            task = default_task() if self.task == "auto" else self.task
            if task not in TASKS:
                raise UnknownNameError(did_you_mean(task, list(TASKS), "task"))
            defaults = TASKS[task].defaults
        if self.workers < 1:
            raise ParamError(f"workers must be at least 1, got {self.workers}")
        for name in ("epochs", "batch_size", "threads"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ParamError(f"{name} must be at least 1, got {v}")
        if self.lr is not None and not 0 < self.lr < math.inf:  # NaN fails this too
            raise ParamError(f"lr must be a finite number > 0, got {self.lr}")
        if self.target is not None and not 0 < self.target <= 1:
            raise ParamError(f"target accuracy must be in (0, 1], got {self.target}")
        # torch.distributed keeps timeouts in integer milliseconds: inf or 1e300 s would overflow it
        if not MIN_TIMEOUT_S <= self.timeout_s <= MAX_TIMEOUT_S:
            raise ParamError(f"timeout must be at least {MIN_TIMEOUT_S:g} and at most {MAX_TIMEOUT_S:g} seconds, got {self.timeout_s}")
        if self.collective_timeout_s is not None and not MIN_TIMEOUT_S <= self.collective_timeout_s <= MAX_TIMEOUT_S:
            raise ParamError(f"collective timeout must be at least {MIN_TIMEOUT_S:g} and at most {MAX_TIMEOUT_S:g} seconds, "
                             f"got {self.collective_timeout_s}")
        if self.granularity not in ("bucket", "layer"):
            raise ParamError(f"granularity must be bucket or layer, got {self.granularity!r}")
        fault = self.fault or os.environ.get(FAULT_ENV) or None
        if fault:
            Fault.parse(fault)
        return TrainConfig(
            task=task, workers=self.workers, epochs=self.epochs or defaults.epochs, batch_size=self.batch_size or defaults.batch or None,
            lr=self.lr or defaults.lr, target=self.target or defaults.target, seed=self.seed, granularity=self.granularity,
            timeout_s=float(self.timeout_s), collective_timeout_s=float(self.collective_timeout_s or max(30.0, self.timeout_s / 3)),
            threads=self.threads or max(1, (os.cpu_count() or 1) // self.workers), fault=fault, device=self.device, model=self.model,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


