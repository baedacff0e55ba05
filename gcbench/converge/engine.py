"""One seed of one compressor in closed loop: N simulated workers, the compressor's protocol, the optimizer.

Each step, every worker computes its gradient on its own batch with the shared parameters (all
replicas are identical by construction: every worker applies the same aggregate, so one model
suffices and the workers' forward/backward passes run one after another on it).  The gradients are
exchanged by the compressor's own protocol, :meth:`~gcbench.core.compressor.Compressor.exchange_group`
(the simulated transport of the generator the DDP hook runs on ``torch.distributed``: the same
bytes and the same aggregate), and the optimizer steps with the aggregate.  Compressor state
(error-feedback residuals, momentum, warm starts, random streams) is carried across steps: one
:class:`~gcbench.core.compressor.State` per worker and parameter tensor.

The units are laid out as the hook sees them under ``gcbench train --granularity layer``
(:class:`UnitLayout`): DDP hands the hook one bucket at a time, and the hook keeps one state per
(bucket, unit), seeded ``unit_seed(seed, rank, bucket, unit)`` (:func:`gcbench.distributed.ddp.unit_seed`;
``rank=None`` for a protocol with a shared seed).  PyTorch's DDP puts every parameter in one bucket,
in module order, for the first step, then rebuilds its buckets in the order the gradients became
ready (1 MiB first bucket, then 25 MiB); the hook's unit states follow their parameters into the
new buckets (:mod:`gcbench.distributed.unit_states`), and so do this engine's.  A protocol over the whole model
(LGC's reference preset) gets every parameter, in module order, as one group.

Buffers (batch-norm running statistics) are updated by every worker's forward pass on the shared
model; after each step they are put back to what worker 0's pass left, as DDP's default
``broadcast_buffers`` gives every replica rank 0's buffers.

Divergence: a non-finite training loss, one above ``divergence_factor`` × the first step's, a
non-finite held-out loss or metric at an evaluation after the first step, or an update torch
cannot represent in float32 (``--lr 1e308``) stops the seed with status ``diverged``; a non-finite
held-out loss before any update is the seed's error (the model or its data, not the training).
Bytes are the protocol's :class:`~gcbench.core.compressor.Traffic`, summed over the run (no
per-step history is kept beyond the evaluation curve).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from gcbench.compressors import registry
from gcbench.converge.devices import evaluating_on, moved, on_cpu, rng_devices
from gcbench.converge.exchange import Exchange, PlanExchange, plan_rules
from gcbench.core.compressor import Compressor, State
from gcbench.plan.model import Plan
from gcbench.workloads.problems import ConvergeError, Problem, SeedProblem, make_optimizer

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
    """Which parameters the hook exchanges together, in which order, at each step (see the module docstring)."""

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
        from gcbench.distributed.ddp import unit_seed
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


def run_seed(problem: Problem, compressor: str | Compressor | Plan, settings: EngineSettings, seed: int,
             progress: StepProgress | None = None) -> SeedResult:
    """Train ``problem`` for ``settings.steps`` steps with ``compressor`` (or a plan) and ``settings.workers`` simulated workers.

    A compressor or problem that raises during the run gives status ``error`` with its message, a
    ``SystemExit`` from a user's model or hook included (it is that code's failure, not a request to
    end gcbench); ``KeyboardInterrupt`` (Ctrl-C, SIGTERM) propagates.  The caller's random state is
    left as it was.
    """
    if isinstance(compressor, Compressor | Plan):
        comp: Compressor | Plan = compressor
    else:
        name, params = registry.parse_spec(compressor)
        comp = registry.create(name, **params)
    t0 = time.perf_counter()
    out = SeedResult(seed, "ok")
    with torch.random.fork_rng(devices=rng_devices(settings.device)):
        try:
            _train(problem, comp, settings, seed, out, progress)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # recorded as this seed's error; the other seeds and compressors go on
            text = str(exc).strip().splitlines()
            out.status, out.error = "error", f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
    out.wall_s = time.perf_counter() - t0
    return out


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


def _gradients(sp: SeedProblem, model: nn.Module, params: list[nn.Parameter], buffers: list[torch.Tensor], layout: UnitLayout,
               image: bool, seed: int, step: int, device: str) -> tuple[list[list[torch.Tensor]], float]:
    """Every worker's gradients of one step (a forward and backward each, its dropout seeded) and their mean training loss;
    the model's buffers left as rank 0's pass made them."""
    batches = next(sp.batches)
    grads: list[list[torch.Tensor]] = []
    loss_sum = 0.0
    kept: list[torch.Tensor] = []
    for w, batch in enumerate(batches):
        loss_sum += worker_pass(sp, model, batch, image, seed, step, w, device, layout.watch() if step == 0 and w == 0 else ())
        if w == 0 and buffers:  # DDP broadcasts rank 0's buffers (batch-norm statistics): its update is the one kept
            kept = [b.detach().clone() for b in buffers]
        grads.append(take_grads(params))
    if buffers:
        with torch.no_grad():
            for b, k in zip(buffers, kept, strict=True):
                b.copy_(k)
    return grads, loss_sum / len(batches)


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


def placed(sp: SeedProblem, device: str) -> tuple[nn.Module, bool]:
    """The seed's model on ``device`` (channels-last for a convolutional one) and whether it is one."""
    model = sp.model
    # 2-D convolutions run about 12% faster on the CPU in channels-last memory (smallcnn's pass at batch 32: 17.5 ms
    # against 19.9 ms); gradients keep their logical shapes, so the compressors see the same tensors
    image = any(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    if not on_cpu(device):
        model = model.to(device)
    if image:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # Module.to takes it; torch's stub overloads omit it
    return model, image


def model_buffers(model: nn.Module) -> list[torch.Tensor]:
    """The buffers DDP broadcasts from rank 0 (batch-norm statistics and their counters)."""
    return [b for b in model.buffers() if b.is_floating_point() or b.dtype == torch.long]


def first_evaluation(sp: SeedProblem, model: nn.Module, out: SeedResult, device: str) -> None:
    """The step-0 evaluation; a non-finite one is the model's or its data's error (before any update: not a divergence)."""
    out.curve.append(_evaluate(sp, model, 0, None, device))
    if not _finite(out.curve[0]):
        raise ConvergeError(f"the initial model's held-out loss is {out.curve[0]['eval_loss']} (before any update): "
                            "check the model and its held-out batches")


def _train(problem: Problem, comp: Compressor | Plan, s: EngineSettings, seed: int, out: SeedResult,
           progress: StepProgress | None) -> None:
    sp = problem.instance(seed, s.workers, s.batch)
    model, image = placed(sp, s.device)
    params = [p for p in model.parameters() if p.requires_grad]
    out.dense_bytes = sum(p.numel() * p.element_size() for p in params)
    sizes = [p.numel() for p in params]
    exchange: Exchange | PlanExchange
    if isinstance(comp, Plan):
        exchange = PlanExchange(comp, plan_rules(comp, model)[0], seed, s.workers, sizes)
        if comp.local_steps > 1:
            from gcbench.converge.local_steps import train_local

            train_local(sp, model, image, exchange, s, seed, out, progress)
            out.state_resets = exchange.resets
            return
    else:
        exchange = Exchange(comp, seed, s.workers, sizes)
    opt = make_optimizer(s.optimizer, params, s.lr, s.momentum, s.weight_decay)
    layout = UnitLayout(params, isinstance(exchange, Exchange) and exchange.comp.needs_whole_model)
    # numba's OpenMP layer, started by a compressor's first parallel kernel, can reset the process's OpenMP thread
    # count, which torch shares: the count the run started with is put back after every exchange
    threads = torch.get_num_threads()
    buffers = model_buffers(model)
    first_evaluation(sp, model, out, s.device)
    first_loss: float | None = None
    window: list[float] = []  # training losses since the last evaluation
    for step in range(s.steps):
        grads, loss_value = _gradients(sp, model, params, buffers, layout, image, seed, step, s.device)
        if first_loss is None:
            first_loss = loss_value
        if diverged(out, step, loss_value, first_loss, s.divergence_factor):
            break
        window.append(loss_value)
        for i, aggregate in exchange.run(step, layout.groups(step), grads, out).items():
            params[i].grad = aggregate.to(params[i].dtype)
        del grads
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        if not stepped(opt, out, step):
            break
        opt.zero_grad(set_to_none=True)
        out.steps_run = step + 1
        if not evaluated(sp, model, out, s, window):
            break
        if progress is not None:
            progress(out.steps_run, s.steps)
    out.state_resets = exchange.resets


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
