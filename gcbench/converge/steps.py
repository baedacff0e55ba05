"""What a seed's training loop is built from (the engine's, :mod:`gcbench.converge.engine`, and a plan's local steps,
:mod:`gcbench.converge.local_steps`): the seed's settings and result, DDP's unit layout and the compressor's states per
unit, and the steps of the loop (a worker's pass, its gradients taken, the divergence checks, the optimizer step, the
evaluations).  The layout, the buffers and what counts as a divergence are described in the engine's docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from gcbench.converge.devices import evaluating_on, moved, on_cpu
from gcbench.core.compressor import Compressor, State
from gcbench.workloads.problems import ConvergeError, SeedProblem

#: the gradient-ready order is unknown until the first backward pass; DDP's default bucket caps after it
FIRST_BUCKET_BYTES = 1024 * 1024
BUCKET_BYTES = 25 * 1024 * 1024
#: the group index of a whole-model protocol (the hook's ``WHOLE_MODEL``)
WHOLE_MODEL = -1

#: ``progress(step, steps)`` after every step of a seed
StepProgress = Callable[[int, int], None]


@dataclass(frozen=True)
class EngineSettings:
    """What one seed's run needs besides the problem and the compressor."""

    workers: int
    steps: int
    batch: int | None
    optimizer: str
    lr: float
    momentum: float | None
    weight_decay: float
    eval_every: int
    divergence_factor: float = 10.0
    device: str = "cpu"  # where the model, its batches, the compressors and their states live


@dataclass
class SeedResult:
    """One seed's outcome: the :class:`~gcbench.results.converge_record.SeedRun` fields, and the bytes it sent."""

    seed: int
    status: str  # "ok", "diverged" or "error"
    curve: list[dict[str, Any]] = field(default_factory=list)
    steps_run: int = 0
    error: str | None = None
    diverged_at_step: int | None = None
    diverged_reason: str | None = None
    wall_s: float = 0.0
    sent_bytes: float = 0.0  # every worker's, summed over the steps run
    payload_bytes: float = 0.0  # every worker's first-phase payloads (headers included), summed
    dense_bytes: int = 0  # the model's gradient, uncompressed, per step
    state_resets: int = 0
    #: a plan's bytes per rule index: [sent, payload], every worker's, summed over the steps run (warm-up included)
    rule_bytes: dict[int, list[float]] = field(default_factory=dict)
    warmup_sent_bytes: float = 0.0  # a plan's bytes sent during its warm-up (in sent_bytes and rule_bytes too)

    @property
    def final(self) -> dict[str, Any] | None:
        """The last evaluation of a seed that ran to its end (None for a diverged or failed seed)."""
        return self.curve[-1] if self.status == "ok" and self.curve else None


def _bucket_assignment(sizes: Sequence[int], order: Sequence[int]) -> list[list[int]]:
    """DDP's rebuilt buckets: parameters in gradient-ready ``order`` cut at 1 MiB (the first), then 25 MiB (float32 bytes)."""
    try:
        import torch.distributed as dist

        tensors = [torch.empty(sizes[i], dtype=torch.float32, device="meta") for i in order]
        buckets, _ = dist._compute_bucket_assignment_by_size(  # DDP's own function: the same cuts as the reducer makes
            tensors, [getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", FIRST_BUCKET_BYTES), BUCKET_BYTES], [False] * len(order), list(order))
        return [list(b) for b in buckets]
    except (ImportError, AttributeError, RuntimeError, TypeError):  # no torch.distributed: DDP's rule, here
        out: list[list[int]] = []
        current: list[int] = []
        used, cap = 0, FIRST_BUCKET_BYTES
        for i in order:  # a bucket closes once it holds at least its limit
            current.append(i)
            used += 4 * sizes[i]
            if used >= cap:
                out.append(current)
                current, used, cap = [], 0, BUCKET_BYTES
        return [*out, current] if current else out


class UnitLayout:
    """Which parameters the hook exchanges together, in which order, at each step (see :mod:`gcbench.converge.engine`)."""

    def __init__(self, params: Sequence[nn.Parameter], whole_model: bool) -> None:
        self.params = list(params)
        self.whole_model = whole_model
        self.ready: list[int] | None = None  # gradient-ready order, seen in the first backward pass
        self._rebuilt: list[tuple[int, tuple[int, ...]]] | None = None

    def watch(self) -> list[Any]:
        """Hooks recording the order gradients become ready (remove them after the first backward pass)."""
        self.ready = []
        order = self.ready
        return [p.register_post_accumulate_grad_hook(lambda _p, i=i: order.append(i)) for i, p in enumerate(self.params)]

    def groups(self, step: int) -> list[tuple[int, tuple[int, ...]]]:
        """``(bucket index, parameter indices in unit order)`` per group exchanged at ``step``."""
        everything = tuple(range(len(self.params)))
        if self.whole_model:
            return [(WHOLE_MODEL, everything)]
        if step == 0 or self.ready is None:
            return [(0, everything)]  # DDP's first step: one bucket in module order
        if self._rebuilt is None:
            order = list(dict.fromkeys(self.ready)) + [i for i in everything if i not in set(self.ready)]
            buckets = _bucket_assignment([p.numel() for p in self.params], order)
            self._rebuilt = [(b, tuple(ix)) for b, ix in enumerate(buckets)]
        return self._rebuilt


class UnitStates:
    """The compressor's states per (bucket, worker, unit), as the hook keeps them: fresh for a parameter first seen,
    and each parameter's own state after DDP's bucket rebuild (:mod:`gcbench.distributed.unit_states`)."""

    def __init__(self, comp: Compressor, seed: int, workers: int, sizes: Sequence[int]) -> None:
        from gcbench.distributed.hook_state import unit_seed
        from gcbench.distributed.unit_states import StatePlaces

        self.comp, self.seed, self.workers, self._unit_seed, self.sizes = comp, seed, workers, unit_seed, list(sizes)
        self.shared = comp.info.resolve_protocol(comp.params).shared_seed
        self.by_bucket: dict[int, tuple[tuple[int, ...], list[list[State]]]] = {}
        self.places = [StatePlaces() for _ in range(workers)]
        self.resets = 0

    def get(self, bucket: int, signature: tuple[int, ...]) -> list[list[State]]:
        from gcbench.distributed.unit_states import Part

        old = self.by_bucket.get(bucket)
        if old is not None and old[0] == signature:
            return old[1]
        parts = [[Part(str(i), 0, self.sizes[i])] for i in signature]
        numels = [self.sizes[i] for i in signature]
        states = []
        for w in range(self.workers):
            fresh = [self.comp.init_state(self._unit_seed(self.seed, None if self.shared else w, bucket, u)) for u in range(len(signature))]
            if self.places[w]:
                carried = [self.places[w].carry(p, n, f) for p, n, f in zip(parts, numels, fresh, strict=True)]
                self.resets += sum(c is None for c in carried) if w == 0 else 0  # counted as the hook of worker 0 counts
                fresh = [f if c is None else c for c, f in zip(carried, fresh, strict=True)]
            self.places[w].record(parts, numels, fresh)
            states.append(fresh)
        self.by_bucket[bucket] = (signature, states)
        return states


def _dropout_seed(seed: int, step: int, worker: int) -> int:
    words = [int(seed) % 2**32, 0xC0E, int(step) % 2**32, int(worker)]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> np.uint64(1))


def _evaluate(sp: Any, model: nn.Module, step: int, train_loss: float | None, device: str = "cpu") -> dict[str, Any]:
    with evaluating_on(model, device):
        eval_loss, metric = sp.evaluate(model)
    return {"step": step, "train_loss": train_loss, "eval_loss": float(eval_loss), "metric": float(metric)}


def _finite(point: dict[str, Any]) -> bool:
    """Whether an evaluation's held-out loss and metric are both finite numbers."""
    return math.isfinite(point["eval_loss"]) and math.isfinite(point["metric"])


def worker_pass(sp: SeedProblem, model: nn.Module, batch: tuple[Any, Any], image: bool, seed: int, step: int, worker: int,
                device: str, hooks: Sequence[Any] = ()) -> float:
    """One worker's forward and backward pass on its batch (its dropout seeded); its loss.  ``hooks`` removed after it."""
    x, y = batch
    torch.manual_seed(_dropout_seed(seed, step, worker))
    if not on_cpu(device):
        x, y = moved(x, device), moved(y, device)
    if image and isinstance(x, torch.Tensor) and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    loss = sp.loss(model(x), y)
    loss.backward()
    for h in hooks:
        h.remove()
    return float(loss.detach())


def take_grads(params: Sequence[nn.Parameter]) -> list[torch.Tensor]:
    """The gradients taken out of the parameters (zeros for one without): one gradient per worker is held."""
    row = []
    for p in params:
        row.append(p.grad if p.grad is not None else torch.zeros_like(p))
        p.grad = None
    return row


def diverged(out: SeedResult, step: int, loss_value: float, first_loss: float, factor: float) -> bool:
    """Whether a step's mean training loss is a divergence (non-finite, or above ``factor`` × the first); ``out`` says so."""
    if not math.isfinite(loss_value):
        out.status, out.diverged_at_step, out.diverged_reason = "diverged", step, "non-finite loss"
        return True
    if first_loss > 0 and loss_value > factor * first_loss:
        out.status, out.diverged_at_step = "diverged", step
        out.diverged_reason = f"loss above {factor:g}x its start"
        return True
    return False


def stepped(opt: torch.optim.Optimizer, out: SeedResult, step: int) -> bool:
    """``opt.step()``; False (``out`` diverged) where torch refuses an update factor beyond float32's range."""
    try:
        opt.step()
    except RuntimeError as exc:
        # torch refuses an update factor (lr x a moment, lr x weight decay) beyond float32's range: the same
        # outcome as an update that overflows to inf, which the next loss shows as non-finite
        if "without overflow" not in str(exc):
            raise
        out.status, out.diverged_at_step = "diverged", step
        out.diverged_reason = "non-finite update (the step overflows float32)"
        return False
    return True


def model_buffers(model: nn.Module) -> list[torch.Tensor]:
    """The buffers DDP broadcasts from rank 0 (batch-norm statistics and their counters)."""
    return [b for b in model.buffers() if b.is_floating_point() or b.dtype == torch.long]


def first_evaluation(sp: SeedProblem, model: nn.Module, out: SeedResult, device: str) -> None:
    """The step-0 evaluation; a non-finite one is the model's or its data's error (before any update: not a divergence)."""
    out.curve.append(_evaluate(sp, model, 0, None, device))
    if not _finite(out.curve[0]):
        raise ConvergeError(f"the initial model's held-out loss is {out.curve[0]['eval_loss']} (before any update): "
                            "check the model and its held-out batches")


def evaluated(sp: SeedProblem, model: nn.Module, out: SeedResult, s: EngineSettings, window: list[float]) -> bool:
    """At an evaluation step (every ``eval_every`` and the last), the held-out numbers with the mean training loss since the
    last one (``window``, emptied); False when they are not finite (a divergence, ``out`` says so)."""
    if out.steps_run % s.eval_every and out.steps_run != s.steps:
        return True
    out.curve.append(_evaluate(sp, model, out.steps_run, sum(window) / len(window), s.device))
    window.clear()
    if not _finite(out.curve[-1]):  # a NaN held-out loss with a finite accuracy is a divergence too
        out.status, out.diverged_at_step, out.diverged_reason = "diverged", out.steps_run, "non-finite held-out loss"
        return False
    return True
