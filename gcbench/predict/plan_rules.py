"""A per-tensor choice (tensor → compressor spec) written as a short plan: rules by kind, size and name glob.

The default rule is the most common choice (by tensors, then elements); every other tensor is covered by the first of:
a ``kind`` rule (every tensor of that kind not yet covered has the same choice), a ``numel_below`` rule (the smallest
tensors not yet covered share a choice), a name glob on the name's last parts (``*.bn1.weight``, ``*.bias``), the exact
name.  Each rule matches only tensors of its own choice among those earlier rules left, so the plan assigns every tensor
exactly as chosen (:func:`rules_of` checks it through :func:`gcbench.plan.assign.assign`).
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Mapping, Sequence

from gcbench.plan.assign import TensorInfo, assign
from gcbench.plan.model import KINDS, Plan, Rule


def _default(choice: Mapping[str, str], infos: Sequence[TensorInfo]) -> str:
    count = Counter(choice[i.name] for i in infos)
    elems: Counter[str] = Counter()
    for i in infos:
        elems[choice[i.name]] += i.numel
    return max(count, key=lambda s: (count[s], elems[s], s))


def _kind_rules(left: list[TensorInfo], choice: Mapping[str, str], default: str) -> list[Rule]:
    rules = []
    for kind in KINDS:
        mine = [i for i in left if i.kind == kind]
        specs = {choice[i.name] for i in mine}
        if len(mine) >= 2 and len(specs) == 1 and default not in specs:
            rules.append(Rule(specs.pop(), kind=kind))
            left[:] = [i for i in left if i.kind != kind]
    return rules


def _size_rule(left: list[TensorInfo], choice: Mapping[str, str], default: str) -> list[Rule]:
    """One ``numel_below`` rule for the smallest tensors left, when at least two share a non-default choice."""
    order = sorted(left, key=lambda i: i.numel)
    if not order or choice[order[0].name] == default:
        return []
    spec = choice[order[0].name]
    cut = next((j for j, i in enumerate(order) if choice[i.name] != spec), len(order))
    bound = order[cut].numel if cut < len(order) else order[-1].numel + 1
    taken = [i for i in order if i.numel < bound]
    if len(taken) < 2 or any(choice[i.name] != spec for i in taken):
        return []
    left[:] = [i for i in left if i.numel >= bound]
    return [Rule(spec, numel_below=bound)]


def _globs(name: str) -> list[str]:
    parts = name.split(".")
    return [f"*.{'.'.join(parts[-k:])}" for k in range(1, len(parts))] + [name]


def _name_rules(left: list[TensorInfo], choice: Mapping[str, str], default: str) -> list[Rule]:
    """Name-glob rules for the non-default tensors left: per tensor, the glob that covers most tensors of its choice."""
    rules: list[Rule] = []
    while True:
        todo = [i for i in left if choice[i.name] != default]
        if not todo:
            return rules
        best: tuple[int, str, str] | None = None
        for i in todo:
            spec = choice[i.name]
            for glob in _globs(i.name):
                hits = [j for j in left if fnmatch.fnmatchcase(j.name, glob)]
                if all(choice[j.name] == spec for j in hits) and (best is None or len(hits) > best[0]):
                    best = (len(hits), glob, spec)
        assert best is not None  # the exact name always qualifies
        rules.append(Rule(best[2], name=best[1]))
        left[:] = [j for j in left if not fnmatch.fnmatchcase(j.name, best[1])]


def rules_of(choice: Mapping[str, str], infos: Sequence[TensorInfo], name: str, local_steps: int = 1) -> Plan:
    """The plan ``name`` whose rules give every tensor of ``infos`` its ``choice`` (see the module docstring)."""
    default = _default(choice, infos)
    left = list(infos)
    rules = _kind_rules(left, choice, default) + _size_rule(left, choice, default) + _name_rules(left, choice, default)
    plan = Plan(name, (*rules, Rule(default, default=True)), warmup_steps=0, warmup="bf16", local_steps=local_steps)
    got = assign(plan, infos)
    wrong = [i.name for i in infos if got.spec_of(i.name) != choice[i.name]]
    if wrong:  # a bug here, not bad input: the rules must reproduce the choice
        raise AssertionError(f"plan rules assign {wrong[0]} otherwise than chosen")
    return plan
