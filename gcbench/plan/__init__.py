"""Compression plans: per-tensor rules, a dense warm-up and a sync period, written once (docs/plans.md).

:mod:`~gcbench.plan.model` holds the objects, :mod:`~gcbench.plan.reader` reads and checks them from
TOML, :mod:`~gcbench.plan.assign` matches them to a model's tensors.
"""

from gcbench.plan.assign import Assignment, TensorInfo, assign, layout_infos, overlaps, tensor_infos
from gcbench.plan.model import KINDS, Outer, Plan, Rule
from gcbench.plan.reader import PlanError, load_plan, parse_plan, plan_from_spec

__all__ = ["KINDS", "Assignment", "Outer", "Plan", "PlanError", "Rule", "TensorInfo", "assign", "layout_infos", "load_plan",
           "overlaps", "parse_plan", "plan_from_spec", "tensor_infos"]
