"""Reading a plan from TOML and checking it before any work: one :class:`PlanError` line per mistake.

The file holds one ``[plan]`` table (see docs/plans.md)::

    [plan]
    name = "small-dense"
    warmup_steps = 20
    warmup = "bf16"
    local_steps = 1
    [plan.outer]            # only read with local_steps > 1
    lr = 0.7
    momentum = 0.9
    [[plan.rule]]
    numel_below = 1000
    compressor = "none"
    [[plan.rule]]
    default = true
    compressor = "topk:density=0.01,error_feedback=true"

Every compressor spec is checked by the registry's parser; unknown keys, a missing or misplaced
default rule, an unknown kind and ``local_steps`` < 1 are refused, and so is ``local_steps`` > 1
with a compressor whose protocol needs every step (:func:`needs_every_step`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from gcbench.core.errors import GcbenchError
from gcbench.plan.model import KINDS, Outer, Plan, Rule

PLAN_KEYS = ("name", "warmup_steps", "warmup", "local_steps", "outer", "rule")
RULE_KEYS = ("compressor", "name", "kind", "numel_below", "default")
OUTER_KEYS = ("lr", "momentum", "nesterov")
#: the prefix that makes a compressor argument a plan file: ``-c plan:small.toml``
PREFIX = "plan:"


class PlanError(GcbenchError):
    """A plan that cannot be used (bad file, bad rule, a rule that matches nothing): one line, exit 1."""


def _unknown(table: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    extra = sorted(set(table) - set(known))
    if extra:
        raise PlanError(f"{where}: unknown key {extra[0]!r} (known: {', '.join(known)})")


def _int(value: Any, where: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise PlanError(f"{where}: expected an integer ≥ {least}, got {value!r}")
    return value


def _float(value: Any, where: str, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < low \
            or (high is not None and value >= high):
        bound = f"in [{low:g}, {high:g})" if high is not None else f"≥ {low:g}"
        raise PlanError(f"{where}: expected a number {bound}, got {value!r}")
    return float(value)


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PlanError(f"{where}: expected a non-empty string, got {value!r}")
    return value.strip()


def check_spec(spec: str, where: str) -> str:
    """A compressor spec the registry parses, spelled as registered; anything else is a :class:`PlanError` at ``where``."""
    from gcbench.compressors import registry

    try:
        name, params = registry.parse_spec(spec)
    except GcbenchError as exc:
        raise PlanError(f"{where}: {exc}") from None
    return registry.format_spec(name, params)


def needs_every_step(spec: str) -> str | None:
    """Why ``spec`` cannot exchange a pseudo-gradient every H > 1 steps, or None when it can.

    A compressor that keeps state of its own and exchanges by its own protocol (PowerSGD's shared
    warm-start Q, 1-bit SGD's stripe owners' residuals, LGC's phases by step) expects that protocol
    to run at every optimizer step; error feedback alone works on the pseudo-gradient.
    """
    from gcbench.compressors import registry

    name, params = registry.parse_spec(spec)
    info = registry.get(name)
    protocol = info.resolve_protocol(params)
    if info.stateful and protocol.name not in ("allgather", "allreduce"):
        return f"{name} is a stateful {protocol.name} protocol ({protocol.description}) that must run every step"
    return None


def _rule(table: Any, where: str) -> Rule:
    if not isinstance(table, dict):
        raise PlanError(f"{where}: expected a [[plan.rule]] table, got {table!r}")
    _unknown(table, RULE_KEYS, where)
    if "compressor" not in table:
        raise PlanError(f"{where}: a rule needs compressor = \"SPEC\"")
    default = table.get("default", False)
    if not isinstance(default, bool):
        raise PlanError(f"{where}: default: expected true or false, got {default!r}")
    kind = table.get("kind")
    if kind is not None and kind not in KINDS:
        raise PlanError(f"{where}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    rule = Rule(compressor=check_spec(_str(table["compressor"], f"{where}: compressor"), f"{where}: compressor"),
                name=None if "name" not in table else _str(table["name"], f"{where}: name"), kind=kind,
                numel_below=None if "numel_below" not in table else _int(table["numel_below"], f"{where}: numel_below", 1),
                default=default)
    if default and rule.matchers():
        raise PlanError(f"{where}: the default rule matches every tensor left; it takes no {rule.matchers()[0]}")
    if not default and not rule.matchers():
        raise PlanError(f"{where}: a rule needs name, kind or numel_below (or default = true)")
    return rule


def _rules(items: Any, where: str) -> tuple[Rule, ...]:
    if not isinstance(items, list) or not items:
        raise PlanError(f"{where}: a plan needs [[plan.rule]] tables, the last with default = true")
    rules = tuple(_rule(t, f"{where}: rule {i + 1}") for i, t in enumerate(items))
    defaults = [i for i, r in enumerate(rules) if r.default]
    if not defaults:
        raise PlanError(f"{where}: no default rule; end the rules with one that has default = true")
    if len(defaults) > 1:
        raise PlanError(f"{where}: rules {defaults[0] + 1} and {defaults[1] + 1} are both default; a plan has one")
    if defaults[0] != len(rules) - 1:
        raise PlanError(f"{where}: the default rule (rule {defaults[0] + 1}) must be the last; rules after it would match nothing")
    return rules


def _outer(table: Any, where: str) -> Outer:
    if not isinstance(table, dict):
        raise PlanError(f"{where}: expected a table, got {table!r}")
    _unknown(table, OUTER_KEYS, where)
    nesterov = table.get("nesterov", Outer.nesterov)
    if not isinstance(nesterov, bool):
        raise PlanError(f"{where}: nesterov: expected true or false, got {nesterov!r}")
    return Outer(lr=_float(table.get("lr", Outer.lr), f"{where}: lr", 0.0),
                 momentum=_float(table.get("momentum", Outer.momentum), f"{where}: momentum", 0.0, 1.0), nesterov=nesterov)


def parse_plan(table: dict[str, Any], where: str, name: str | None = None) -> Plan:
    """The checked :class:`Plan` of a ``[plan]`` table (or of a document holding one); ``name`` when the table has none.

    ``where`` starts every error line (a file name, ``suite.toml [converge.plan]``).
    """
    if set(table) == {"plan"} and isinstance(table["plan"], dict):
        table = table["plan"]
    if not isinstance(table, dict) or not table:
        raise PlanError(f"{where}: expected a [plan] table")
    _unknown(table, PLAN_KEYS, f"{where} [plan]")
    rules = _rules(table.get("rule"), where)
    local = _int(table.get("local_steps", 1), f"{where}: local_steps", 1)
    if local > 1:
        for i, r in enumerate(rules):
            why = needs_every_step(r.compressor)
            if why:
                raise PlanError(f"{where}: rule {i + 1}: local_steps = {local} exchanges every {local} steps, but {why}")
    elif "outer" in table:
        raise PlanError(f"{where}: [plan.outer] applies with local_steps > 1 only (this plan exchanges every step)")
    warmup = check_spec(_str(table.get("warmup", Plan.warmup), f"{where}: warmup"), f"{where}: warmup")
    plan_name = table.get("name", name)
    if plan_name is None:
        raise PlanError(f"{where}: the plan needs a name (name = \"...\")")
    return Plan(name=_str(plan_name, f"{where}: name"), rules=rules,
                warmup_steps=_int(table.get("warmup_steps", 0), f"{where}: warmup_steps", 0), warmup=warmup,
                local_steps=local, outer=_outer(table.get("outer", {}), f"{where} [plan.outer]"))


def load_plan(path: str | os.PathLike[str]) -> Plan:
    """The plan in the TOML file ``path`` (its name defaults to the file's stem); a bad file is a :class:`PlanError`."""
    from gcbench.core.files import load_user_toml

    doc = load_user_toml(path, "plan file", error=PlanError)
    if "plan" not in doc:
        raise PlanError(f"{path}: no [plan] table (see docs/plans.md)")
    _unknown(doc, ("plan",), str(path))
    return parse_plan(doc, str(path), name=Path(path).stem)


def plan_from_spec(text: str) -> Plan | None:
    """``plan:FILE`` → the plan in FILE; anything else (a compressor spec) → None."""
    if not text.startswith(PREFIX):
        return None
    path = text[len(PREFIX):].strip()
    if not path:
        raise PlanError("plan: needs a file (plan:FILE.toml)")
    return load_plan(path)


def check_run_length(plan: Plan, steps: int, where: str = "") -> None:
    """Refuse a warm-up that takes the whole run (``warmup_steps`` ≥ ``steps``): the rules would never apply."""
    if plan.warmup_steps >= steps:
        raise PlanError(f"{where or plan.label}: warmup_steps = {plan.warmup_steps} is not shorter than the run's "
                        f"{steps} steps; the rules would never apply")


def plan_of_params(params: Any, where: str) -> Plan:
    """The plan of a suite's ``name = "plan"`` case: ``params.plan`` a ``[plan]`` table (``params.file`` then only says
    where it was read), or ``params = {file = "PATH"}`` alone."""
    if not isinstance(params, dict) or not params or set(params) - {"file", "plan"}:
        raise PlanError(f"{where}: a plan case takes params = {{file = \"PLAN.toml\"}} or a [plan] table as params.plan")
    if "plan" not in params:
        return load_plan(_str(params["file"], f"{where}: file"))
    if not isinstance(params["plan"], dict):
        raise PlanError(f"{where}: params.plan: expected a [plan] table, got {params['plan']!r}")
    return parse_plan(params["plan"], where)


def case_params(plan: Plan, file: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """A plan as a suite case's params (``{"plan": its [plan] table, "file": where it was read}``), which
    :func:`plan_of_params` reads back."""
    import tomllib

    return {"plan": tomllib.loads(plan.to_toml())["plan"], **({"file": str(file)} if file is not None else {})}


def case_of_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """A command line's SPEC as a case's (name, params): ``plan:FILE`` as ``("plan", case_params(...))``, a compressor's
    by the registry's parser."""
    plan = plan_from_spec(spec)
    if plan is not None:
        return "plan", case_params(plan, spec.partition(":")[2].strip())
    from gcbench.compressors import registry

    return registry.parse_spec(spec)
