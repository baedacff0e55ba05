"""The compressors a training comparison runs (``gcbench converge``, ``gcbench train``): :class:`Spec` and its parser.

:func:`parse_compressors` turns ``-c`` options into :class:`Spec` objects with the uncompressed reference
(:func:`reference_name`) first; a ``plan:FILE`` item is a compression plan (:func:`plan_spec`), after the compressors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gcbench.compressors import registry
from gcbench.core.errors import ParamError
from gcbench.plan.reader import PREFIX, case_params, plan_from_spec

#: the name a plan's :class:`Spec` carries: ``train``'s params are :func:`gcbench.plan.reader.case_params`'s (JSON-able,
#: :func:`plan_spec`), ``converge``'s the loaded plan and its source (:func:`gcbench.converge.bound_plans.plan_specs`)
PLAN = "plan"


def reference_name() -> str:
    """The uncompressed reference every training comparison includes: the identity compressor's card."""
    return registry.identity().name


@dataclass(frozen=True)
class Spec:
    """One compressor configuration to train with; ``label`` is the user's spelling."""

    label: str
    name: str
    params: dict[str, Any] = field(default_factory=dict)


def is_plan(text: str) -> bool:
    """Whether a compressor argument names a plan file (``plan:FILE``)."""
    return text.strip().startswith(PREFIX)


def plan_spec(text: str) -> Spec:
    """The :class:`Spec` of ``plan:FILE``: labelled ``plan:<name>``, its params the plan's table and file."""
    plan = plan_from_spec(text.strip())
    assert plan is not None  # is_plan chose the text
    return Spec(plan.label, PLAN, case_params(plan, text.strip()[len(PREFIX):].strip()))


def parse_compressors(text: str | Sequence[str]) -> list[Spec]:
    """``none,topk:density=0.01,error_feedback=true,qsgd`` → specs, with ``none`` first; ``plan:FILE`` items are plans
    (:func:`plan_spec`), after the compressors.

    Comma-separated (:func:`registry.split_specs`): a ``key=value`` item continues the previous
    compressor's parameters.  ``none`` (the reference of the accuracy gap) is added first if absent.
    """
    texts = [text] if isinstance(text, str) else list(text)
    labels = registry.split_specs([t for t in texts if not is_plan(t)])
    plans = [plan_spec(t) for t in texts if is_plan(t)]  # ``plan:FILE``: a compression plan, after the compressors
    if not labels and not plans:
        raise ParamError("no compressors given (e.g. -c none -c topk -c qsgd)")
    specs = []
    for label in labels:
        name, params = registry.parse_spec(label)
        specs.append(Spec(label, name, dict(params)))
    specs += plans
    seen = [s.label for s in specs]
    dup = sorted({x for x in seen if seen.count(x) > 1})
    if dup:
        raise ParamError(f"compressor {dup[0]!r} is listed twice")
    if not any(s.name == reference_name() and not s.params for s in specs):
        specs.insert(0, Spec(reference_name(), reference_name()))
    else:  # the reference runs first so every later record can state its gap
        specs.sort(key=lambda s: s.name != reference_name() or bool(s.params))
    return specs
