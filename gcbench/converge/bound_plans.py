"""Plans among a convergence run's compressors (``converge -c plan:FILE`` / ``--plan FILE``), checked before any work.

A plan (:mod:`gcbench.plan`) runs in closed loop like any compressor and gets its own case,
labelled ``plan:<name>``.  Everything that would make it fail is refused here, in one line, before
the first step: a plan file that does not load (the loader's own checks: no default rule, an
unknown kind, ``local_steps`` > 1 with a protocol that needs every step ...), a warm-up that takes
the whole run, a compressor that needs more workers than the run has, a protocol over the whole
model (it cannot be one rule among others), and a rule that matches no tensor of the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcbench.compressors import registry
from gcbench.core.errors import ParamError
from gcbench.plan.assign import Assignment
from gcbench.plan.model import Plan
from gcbench.plan.reader import PREFIX, PlanError, check_run_length, plan_from_spec
from gcbench.workloads.specs import PLAN, Spec


def resolve_relative(text: str, folder: Path) -> str:
    """``plan:FILE`` with a relative FILE that exists next to a suite file (``folder``) made to point there."""
    path = Path(text.strip()[len(PREFIX):].strip())
    if not path.is_absolute() and not path.exists() and (folder / path).is_file():
        return f"{PREFIX}{folder / path}"
    return text


def plan_specs(texts: Sequence[str]) -> list[Spec]:
    """The plans named by ``plan:FILE`` arguments, loaded and checked on their own; two plans of one name are refused."""
    out: list[Spec] = []
    for text in texts:
        plan = plan_from_spec(text.strip())
        assert plan is not None  # is_plan chose the text
        if any(s.label == plan.label for s in out):
            raise ParamError(f"{plan.label} is listed twice (two plan files named {plan.name!r}: give one another name)")
        out.append(Spec(plan.label, PLAN, {"plan": plan, "source": text.strip()[len(PREFIX):].strip()}))
    return out


def check_plan(plan: Plan, workers: int, steps: int) -> None:
    """What a plan's compressors need of the run: the workers, a warm-up shorter than the run, no whole-model protocol."""
    check_run_length(plan, steps, f"{plan.label}")
    for spec in plan.specs():
        name, params = registry.parse_spec(spec)
        info = registry.get(name)
        if workers < info.min_workers:
            raise ParamError(f"{plan.label}: {spec} needs at least {info.min_workers} workers, got --workers {workers}")
        if registry.create(name, **params).needs_whole_model:
            raise PlanError(f"{plan.label}: {spec} exchanges the whole model at once, so it cannot be one rule of a plan; "
                            "run it as a compressor (-c)")


@dataclass(frozen=True)
class BoundPlan:
    """A plan checked against the run's model: what its case records beside the curves."""

    plan: Plan
    assignment: Assignment
    source: str | None

    def as_tuple(self) -> tuple[Plan, Assignment, str | None]:
        return self.plan, self.assignment, self.source


def bind(specs: Sequence[Spec], model: Any, workers: int, steps: int) -> dict[str, BoundPlan]:
    """Every plan of ``specs`` checked (:func:`check_plan`) and matched to ``model``'s tensors, by label."""
    from gcbench.converge.exchange import plan_rules

    out: dict[str, BoundPlan] = {}
    for s in specs:
        if s.name != PLAN:
            continue
        plan: Plan = s.params["plan"]
        check_plan(plan, workers, steps)
        out[s.label] = BoundPlan(plan, plan_rules(plan, model)[1], s.params.get("source"))
    return out
