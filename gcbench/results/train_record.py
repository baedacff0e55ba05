"""The ``train`` kind of results file: one :class:`TrainCase` per compressor of :mod:`gcbench.train.driver` (the
:class:`Training` results besides the size), and the numbers tables name (:data:`TRAIN_METRICS`).

The header and the parts every kind shares are :mod:`gcbench.results.record`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from gcbench.results.fields import Bool, Int, Num, Series, Str
from gcbench.results.record import CaseBase, Model, RunRecord, Source, finite
from gcbench.results.run_record import PlanRule


class TaskInfo(Model):
    name: Str | None = None
    dataset: Str | None = None
    model: Str | None = None


class CurvePoint(Model):
    """The held-out numbers at the end of one epoch."""

    epoch: Int | None = None
    step: Int | None = None
    train_time_s: Num | None = None
    train_loss: Num | None = None
    test_loss: Num | None = None
    test_accuracy: Num | None = None


class StepTime(Model):
    total_s: Num | None = None
    compute_s: Num | None = None
    compress_s: Num | None = None
    communicate_s: Num | None = None
    decompress_s: Num | None = None


class PeerWait(Model):
    """What each worker waited per step for the slowest to finish its backward pass (:func:`gcbench.train.case.peer_wait`):
    the mean over ranks of each rank's mean, and those means."""

    mean_s: Num
    per_rank_s: list[Num]


class TrainBytes(Model):
    payload_bytes_per_step: Num | None = None
    payload_bytes_per_worker: Num | None = None
    payload_bytes_per_worker_max: Num | None = None
    sent_bytes_per_worker: Num | None = None
    dense_bytes_per_step: Num | None = None


class HookInfo(Model):
    """The DDP hook's description of itself (compressor, protocol, granularity, world size...)."""

    protocol: Str | None = None
    #: files written before every protocol ran on the real transport: why the hook all-gathered instead (None now)
    protocol_note: Str | None = None


class Transport(Model):
    """The local transport a train run measured before training (all-reduces of 4 B and of the gradient)."""

    workers: Int | None = None
    latency_s: Num | None = None
    bandwidth_gbps: Num | None = None
    nbytes: Int | None = None
    small_s: Num | None = None
    large_s: Num | None = None
    #: the all-gather and all-to-all as the transport issues them, priced as a calibration file prices them (absent in
    #: files before 2026-12-02: the α–β model then priced them from the all-reduces)
    backend: Str | None = None
    prices: list[dict[str, Any]] | None = None
    price_errors: dict[str, Str] | None = None


class Prediction(Model):
    """advise's step model on the measured transport with this run's kernel times, beside the measured step."""

    step_s: Num | None = None
    compute_s: Num | None = None
    compress_s: Num | None = None
    communicate_s: Num | None = None
    decompress_s: Num | None = None
    collective: Str | None = None
    measured_step_s: Num | None = None
    measured_spread_s: Num | None = None
    cluster: Str | None = None
    error: Str | None = None


class Training(Model):
    task: TaskInfo | None = None
    metric: Str | None = None
    workers: Int | None = None
    epochs: Int | None = None
    steps: Int | None = None
    batch_size_per_worker: Int | None = None
    lr: Num | None = None
    threads_per_worker: Int | None = None
    target_accuracy: Num | None = None
    reference: Str | None = None
    curve: list[CurvePoint] | None = None
    final_accuracy: Num | None = None
    final_loss: Num | None = None
    best_accuracy: Num | None = None
    accuracy_gap: Num | None = None
    time_to_target_s: Num | None = None
    epochs_to_target: Num | None = None
    train_time_s: Num | None = None
    step_time: StepTime | None = None
    step_time_per_rank: list[StepTime] | None = None
    peer_wait: PeerWait | None = None  # one host's workers only; files before it have none
    bytes: TrainBytes | None = None
    replicas_consistent: Bool | None = None
    diverged: Bool | None = None
    hook: HookInfo | None = None
    decoded_payloads_per_step: Num | None = None
    step_samples_rank0: dict[str, Series] | None = None
    collectives: list[Str] | None = None
    buckets: Int | None = None
    device: Str | None = None  # where the ranks trained (rank 0's: cpu, cuda:0)
    transport: Transport | None = None
    prediction: Prediction | None = None

    def settings(self) -> dict[str, Any]:
        """The training settings that decide a train case's numbers (its curve and results are not settings)."""
        return {k: getattr(self, k) for k in ("task", "metric", "workers", "epochs", "steps", "batch_size_per_worker", "lr")}


class TrainCase(CaseBase):
    """One compressor of ``gcbench train``."""

    training: Training | None = None
    source: Source | None = None  # train files have none; declared so readers of any case may ask
    plan: dict[str, Any] | None = None  # a plan case's plan (gcbench.plan.Plan.describe), as in run records
    plan_rules: list[PlanRule] | None = None

    @property
    def source_label(self) -> str:
        return str(self.training.task.name) if self.training and self.training.task and self.training.task.name else "?"

    @property
    def source_name(self) -> str:
        return self.source_label

    def metric(self, name: str) -> float | None:
        get = TRAIN_METRICS.get(name)
        return None if get is None else finite(get(self))

    def samples(self, name: str) -> list[float]:
        return []

    def standard_error(self, name: str) -> float | None:
        return None


def _tr(name: str) -> Callable[[TrainCase], Any]:
    return lambda c: getattr(c.training, name) if c.training else None


def _step(name: str) -> Callable[[TrainCase], Any]:
    return lambda c: getattr(c.training.step_time, name) if c.training and c.training.step_time else None


TRAIN_METRICS: dict[str, Callable[[TrainCase], Any]] = {
    "ratio": lambda c: c.size.ratio if c.size else None,
    "bits_per_element": lambda c: c.size.bits_per_element if c.size else None,
    **{k: _tr(k) for k in ("final_accuracy", "final_loss", "best_accuracy", "accuracy_gap", "time_to_target_s",
                           "epochs_to_target", "train_time_s", "target_accuracy")},
    **{f"step_{k}": _step(k) for k in ("total_s", "compute_s", "compress_s", "communicate_s", "decompress_s")},
    "payload_bytes_per_worker": lambda c: c.training.bytes.payload_bytes_per_worker if c.training and c.training.bytes else None,
}


class TrainRecord(RunRecord):
    kind: Literal["train"]
    cases: list[TrainCase]
