"""A plan's sync period in closed loop: each worker takes H inner steps on its own replica, then the pseudo-gradient.

With ``local_steps = H > 1`` (DiLoCo, Douillard et al. 2023) the workers do not exchange gradients
every step.  Each keeps its own replica of the model and its own inner optimizer (the run's
``--optimizer``, with its state kept across rounds), and takes H steps on its own batches.  Then
every worker sends, per tensor and through the compressor of the tensor's rule (its error feedback
and state included), the pseudo-gradient: the last synchronised parameters minus its replica's.
The outer optimizer (SGD with Nesterov momentum, the plan's ``[plan.outer]`` lr and momentum)
steps the synchronised parameters with the aggregate, and every replica restarts from them.  The
last round of a run whose steps H does not divide is shorter: a run always ends synchronised.

During the plan's warm-up (its first ``warmup_steps`` steps) the workers exchange gradients every
step with the warm-up's compressor, and every replica's inner optimizer steps with the same
aggregate (the replicas stay identical: this is the plain data-parallel loop); the warm-up's bytes
are counted as any exchange's.

Steps are inner steps: the curve's x-axis, the steps to the target and the bytes per step (an
exchange's bytes over the H steps it covers, plus the warm-up's every step).  An evaluation scores
the synchronised parameters (the model the workers agree on), which between two exchanges are
those of the last one.  Buffers (batch-norm statistics) are worker 0's at every exchange, as DDP
broadcasts rank 0's.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
from torch import nn

from gcbench.converge.steps import UnitLayout, diverged, evaluated, first_evaluation, model_buffers, stepped, take_grads, worker_pass
from gcbench.workloads.problems import SeedProblem, make_optimizer

if TYPE_CHECKING:
    from gcbench.converge.exchange import PlanExchange
    from gcbench.converge.steps import EngineSettings, SeedResult, StepProgress


class Replicas:
    """The synchronised model, every worker's replica of it and inner optimizer, and the outer optimizer."""

    def __init__(self, model: nn.Module, exchange: PlanExchange, s: EngineSettings) -> None:
        outer = exchange.plan.outer
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.replicas = [copy.deepcopy(model) for _ in range(s.workers)]
        self.rparams = [[p for p in r.parameters() if p.requires_grad] for r in self.replicas]
        self.inner = [make_optimizer(s.optimizer, ps, s.lr, s.momentum, s.weight_decay) for ps in self.rparams]
        self.outer = torch.optim.SGD(self.params, lr=outer.lr, momentum=outer.momentum,
                                     nesterov=outer.nesterov and outer.momentum > 0)

    def pseudo_gradients(self) -> list[list[torch.Tensor]]:
        """Every worker's last synchronised parameters minus its replica's, per tensor."""
        with torch.no_grad():
            return [[g.detach() - r.detach() for g, r in zip(self.params, ps, strict=True)] for ps in self.rparams]

    def restart(self) -> None:
        """The synchronised model takes worker 0's buffers; every replica takes its parameters and buffers."""
        with torch.no_grad():
            for b, b0 in zip(model_buffers(self.model), model_buffers(self.replicas[0]), strict=True):
                b.copy_(b0)
            for ps, r in zip(self.rparams, self.replicas, strict=True):
                for p, g in zip(ps, self.params, strict=True):
                    p.copy_(g)
                for b, sb in zip(model_buffers(r), model_buffers(self.model), strict=True):
                    b.copy_(sb)


def _warmup_step(reps: Replicas, exchange: PlanExchange, layout: UnitLayout, step: int, grads: list[list[torch.Tensor]],
                 out: SeedResult) -> bool:
    """Every replica's inner optimizer steps with the warm-up exchange's aggregate; the synchronised model follows."""
    aggregates = exchange.run(step, layout.groups(step), grads, out)
    for ps, opt in zip(reps.rparams, reps.inner, strict=True):
        for i, a in aggregates.items():
            ps[i].grad = a.to(ps[i].dtype)
        if not stepped(opt, out, step):
            return False
        opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        for g, p in zip(reps.params, reps.rparams[0], strict=True):
            g.copy_(p)
    reps.restart()
    return True


def _sync(reps: Replicas, exchange: PlanExchange, layout: UnitLayout, step: int, out: SeedResult) -> bool:
    """The exchange of the pseudo-gradients and the outer step; every replica restarts from the result."""
    aggregates = exchange.run(step, layout.groups(step), reps.pseudo_gradients(), out)
    for i, a in aggregates.items():
        reps.params[i].grad = a.to(reps.params[i].dtype)
    if not stepped(reps.outer, out, step):
        return False
    reps.outer.zero_grad(set_to_none=True)
    reps.restart()
    return True


def train_local(sp: SeedProblem, model: nn.Module, image: bool, exchange: PlanExchange, s: EngineSettings, seed: int,
                out: SeedResult, progress: StepProgress | None) -> None:
    """One seed of a plan with ``local_steps`` > 1 (see the module docstring); ``out`` filled as the engine fills it."""
    reps = Replicas(model, exchange, s)
    layout = UnitLayout(reps.rparams[0], False)  # the gradient-ready order is seen on worker 0's replica
    h, warm = exchange.plan.local_steps, exchange.plan.warmup_steps
    threads = torch.get_num_threads()
    first_evaluation(sp, model, out, s.device)
    first_loss: float | None = None
    window: list[float] = []
    since = 0  # inner steps since the last exchange of pseudo-gradients
    for step in range(s.steps):
        batches = next(sp.batches)
        losses, grads = [], []
        for w, batch in enumerate(batches):
            hooks = layout.watch() if step == 0 and w == 0 else ()
            losses.append(worker_pass(sp, reps.replicas[w], batch, image, seed, step, w, s.device, hooks))
            grads.append(take_grads(reps.rparams[w]))
        loss_value = sum(losses) / len(losses)
        first_loss = loss_value if first_loss is None else first_loss
        if diverged(out, step, loss_value, first_loss, s.divergence_factor):
            break
        window.append(loss_value)
        if step < warm:
            ok = _warmup_step(reps, exchange, layout, step, grads, out)
        else:
            ok = _inner_steps(reps, grads, out, step)
            since += 1
            if ok and (since == h or step == s.steps - 1):
                ok, since = _sync(reps, exchange, layout, step, out), 0
        del grads
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        if not ok:
            break
        out.steps_run = step + 1
        if not evaluated(sp, model, out, s, window):
            break
        if progress is not None:
            progress(out.steps_run, s.steps)


def _inner_steps(reps: Replicas, grads: list[list[torch.Tensor]], out: SeedResult, step: int) -> bool:
    """Every worker's inner optimizer steps with its own gradients."""
    for ps, opt, row in zip(reps.rparams, reps.inner, grads, strict=True):
        for p, g in zip(ps, row, strict=True):
            p.grad = g
        if not stepped(opt, out, step):
            return False
        opt.zero_grad(set_to_none=True)
    return True
