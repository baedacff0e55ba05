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
(:class:`~gcbench.converge.steps.UnitLayout`): DDP hands the hook one bucket at a time, and the hook keeps one state per
(bucket, unit), seeded ``unit_seed(seed, rank, bucket, unit)`` (:func:`gcbench.distributed.hook_state.unit_seed`;
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

import time

import torch
from torch import nn

from gcbench.compressors import registry
from gcbench.converge.devices import on_cpu, rng_devices
from gcbench.converge.exchange import Exchange, PlanExchange, plan_rules
from gcbench.converge.local_steps import train_local
from gcbench.converge.steps import (
    EngineSettings,
    SeedResult,
    StepProgress,
    UnitLayout,
    diverged,
    evaluated,
    first_evaluation,
    model_buffers,
    stepped,
    take_grads,
    worker_pass,
)
from gcbench.core.compressor import Compressor
from gcbench.plan.model import Plan
from gcbench.workloads.problems import Problem, SeedProblem, make_optimizer


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

