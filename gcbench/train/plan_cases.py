"""Compression plans in ``gcbench train`` (``-c plan:FILE`` / ``--plan FILE``): read, checked before any process, recorded.

A plan trains like a compressor, labelled ``plan:<name>``: every worker registers it in the DDP hook
(:mod:`gcbench.distributed.plan_hook`), so each parameter's gradient crosses the wire compressed by its rule's
compressor, after the plan's dense warm-up.  Everything that would fail in the workers is refused here, in one line,
before any process starts: a file that does not load (the loader's checks), ``local_steps`` > 1 or a whole-model
protocol (the hook's :func:`~gcbench.distributed.plan_hook.check_hook_plan`), a rule compressor that needs more workers
than the run has, a rule that matches no tensor of the task's model, and a warm-up as long as the run.

The results case records the plan, each tensor's rule and the per-rule table with each rule's payload bytes per step
(after the warm-up, averaged over ranks), as ``run``'s plan cases do (docs/plans.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from gcbench.compressors import registry
from gcbench.core.errors import ParamError
from gcbench.plan.model import Plan
from gcbench.plan.reader import check_run_length, plan_of_params
from gcbench.workloads.specs import PLAN, Spec

if TYPE_CHECKING:
    from gcbench.workloads.tasks import Task

#: the card version a plan case records (a plan has no card of its own: its rules' compressors have theirs)
PLAN_VERSION = 1


def plan_of(spec: Spec) -> Plan:
    """The plan a plan :class:`Spec` carries."""
    return plan_of_params(spec.params, spec.label)


def _steps(task: Task, epochs: int, workers: int, batch_size: int) -> int:
    """The optimizer steps of the run: epochs × the batches of one epoch (every rank takes as many)."""
    return epochs * len(task.batches(0, 0, workers, batch_size))


def check_plans(specs: Sequence[Spec], task: Task, workers: int, epochs: int, batch_size: int) -> None:
    """Every plan among ``specs`` checked against the run (see the module docstring); one :class:`PlanError` line."""
    from gcbench.distributed.plan_hook import check_hook_plan
    from gcbench.plan.assign import assign, tensor_infos

    plans = [plan_of(s) for s in specs if s.name == PLAN]
    if not plans:
        return
    infos = tensor_infos(task.build_model())
    steps = _steps(task, epochs, workers, batch_size)
    for plan in plans:
        check_hook_plan(plan)
        for spec in plan.specs():
            info = registry.get(registry.parse_spec(spec)[0])
            if workers < info.min_workers:
                raise ParamError(f"{plan.label}: {spec} needs at least {info.min_workers} workers, got {workers}")
        assign(plan, infos)
        check_run_length(plan, steps, plan.label)


def plan_identity(spec: Spec) -> dict[str, Any]:
    """A plan case's ``compressor``, ``version``, ``params`` and ``flags`` (its rules' compressors' flags combined)."""
    from gcbench.measure.plan_case import _combined_flags

    plan = plan_of(spec)
    subs = [registry.create(name, **params) for name, params in map(registry.parse_spec, plan.specs())]
    return {"compressor": PLAN, "version": PLAN_VERSION, "params": dict(spec.params), "flags": _combined_flags(subs).to_dict()}


def plan_fields(ranks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What a plan case adds to its record, from the ranks' hook descriptions: the plan, each tensor's rule, and the
    per-rule table with each rule's bytes per step averaged over ranks (each rank's are real payload lengths)."""
    hooks = [r["hook"] for r in ranks]
    rows = [dict(row) for row in hooks[0]["plan_rules"]]
    for i, row in enumerate(rows):
        for key in ("bytes", "sent_bytes"):
            row[key] = float(np.mean([h["plan_rules"][i][key] for h in hooks]))
    total = sum(row["bytes"] for row in rows)
    for row in rows:
        row["bytes_share"] = row["bytes"] / total if total else None
    warm = [h["warmup_payload_bytes_per_step"] for h in hooks if h.get("warmup_payload_bytes_per_step") is not None]
    return {"plan": hooks[0]["plan"], "assignment": hooks[0]["assignment"], "plan_rules": rows,
            "warmup_payload_bytes_per_step": float(np.mean(warm)) if warm else None}

