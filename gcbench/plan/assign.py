"""Matching a plan's rules to a model's tensors: each tensor's kind, the first rule that matches it, overlaps.

A tensor's kind comes from the module that owns it: ``Linear`` (and Hugging Face's ``Conv1D``,
a linear layer with transposed weights) is ``linear``, any other ``Conv*`` ``convolution``,
``Embedding*`` ``embedding``, a module whose class name holds ``Norm`` (BatchNorm, LayerNorm,
GroupNorm, RMSNorm) ``norm``; a parameter named ``bias`` is ``bias`` whatever owns it.  Tensors
without a module (synthetic or recorded gradients) have no kind, so a kind rule matches none of them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gcbench.plan.model import Plan, Rule
from gcbench.plan.reader import PlanError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TensorInfo:
    """What a rule can match about one gradient tensor: its qualified name, size, kind and shape."""

    name: str
    numel: int
    kind: str | None
    shape: tuple[int, ...]


def module_kind(module: torch.nn.Module) -> str | None:
    """The kind of the parameters ``module`` owns directly (before the bias rule), from its class."""
    import torch

    cls = type(module).__name__
    if isinstance(module, torch.nn.Linear) or cls == "Conv1D":  # transformers' Conv1D is GPT-2's linear layer
        return "linear"
    if isinstance(module, torch.nn.modules.conv._ConvNd) or cls.startswith("Conv"):
        return "convolution"
    if isinstance(module, torch.nn.Embedding | torch.nn.EmbeddingBag) or "Embedding" in cls:
        return "embedding"
    if "Norm" in cls:
        return "norm"
    return None


def tensor_infos(module: torch.nn.Module) -> list[TensorInfo]:
    """The trainable parameters of ``module`` in ``named_parameters`` order (the gradient layout), each with its kind."""
    owner: dict[int, str | None] = {}
    for _, sub in module.named_modules():
        kind = module_kind(sub)
        for leaf, p in sub.named_parameters(recurse=False):
            owner.setdefault(id(p), "bias" if leaf.endswith("bias") else kind)
    return [TensorInfo(n, p.numel(), owner.get(id(p)), tuple(p.shape))
            for n, p in module.named_parameters() if p.requires_grad]


def layout_infos(layout: Iterable[Any], kinds: Mapping[str, str | None] | None = None) -> list[TensorInfo]:
    """Infos of a gradient layout (``TensorSpec`` s: name, shape); kinds from ``kinds`` where known, else None."""
    out = []
    for spec in layout:
        shape = tuple(int(s) for s in spec.shape)
        numel = 1
        for s in shape:
            numel *= s
        out.append(TensorInfo(spec.name, numel, (kinds or {}).get(spec.name), shape))
    return out


def matches(rule: Rule, info: TensorInfo) -> bool:
    """Whether ``rule`` matches ``info``: every matcher it sets holds (the default rule matches all)."""
    if rule.default:
        return True
    return ((rule.name is None or fnmatch.fnmatchcase(info.name, rule.name))
            and (rule.kind is None or info.kind == rule.kind)
            and (rule.numel_below is None or info.numel < rule.numel_below))


@dataclass(frozen=True)
class Assignment:
    """Which rule each tensor of a model falls under (the first that matches it)."""

    plan: Plan
    infos: tuple[TensorInfo, ...]
    rule_of: dict[str, int]  # tensor name → index of its rule in plan.rules

    def spec_of(self, name: str, step: int | None = None) -> str:
        """The compressor spec of tensor ``name`` (at ``step``: the warm-up's during the warm-up)."""
        rule = self.rule_of[name]
        return self.plan.rules[rule].compressor if step is None else self.plan.spec_at(rule, step)

    def tensors_of(self, rule: int) -> list[TensorInfo]:
        return [i for i in self.infos if self.rule_of[i.name] == rule]

    def rows(self, bytes_of: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
        """One row per rule: its label, compressor, tensors and elements (and bytes and bytes share with ``bytes_of``:
        the bytes each tensor sent, by name)."""
        total = sum(bytes_of.values()) if bytes_of else 0
        rows = []
        for r, rule in enumerate(self.plan.rules):
            mine = self.tensors_of(r)
            row: dict[str, Any] = {"rule": r + 1, "label": rule.label(), "compressor": rule.compressor,
                                   "tensors": len(mine), "elements": sum(i.numel for i in mine)}
            if bytes_of is not None:
                row["bytes"] = sum(bytes_of.get(i.name, 0) for i in mine)
                row["bytes_share"] = row["bytes"] / total if total else None
            rows.append(row)
        return rows

    def to_dict(self) -> dict[str, int]:
        """Each tensor's rule number (1-based, as tables show it), for results files."""
        return {i.name: self.rule_of[i.name] + 1 for i in self.infos}


def _first_match(rules: Sequence[Rule], info: TensorInfo) -> int:
    return next(r for r, rule in enumerate(rules) if matches(rule, info))  # the default rule is last and matches all


def assign(plan: Plan, infos: Sequence[TensorInfo]) -> Assignment:
    """Each tensor to the first rule that matches it; a non-default rule that takes no tensor is a :class:`PlanError`."""
    rule_of = {i.name: _first_match(plan.rules, i) for i in infos}
    taken = set(rule_of.values())
    for r, rule in enumerate(plan.rules):
        if not rule.default and r not in taken:
            also = sum(1 for i in infos if matches(rule, i))
            why = f" (the {also} it matches are taken by earlier rules)" if also else ""
            no_kind = " (these tensors have no module, so no kind)" if rule.kind and all(i.kind is None for i in infos) else ""
            raise PlanError(f"{plan.label}: rule {r + 1} ({' and '.join(rule.matchers())}) matches no tensor of the "
                            f"model's {len(infos)}{why}{no_kind}")
    return Assignment(plan, tuple(infos), rule_of)


def overlaps(plan: Plan, infos: Sequence[TensorInfo]) -> list[str]:
    """One line per (rule, earlier rule) where the earlier rule took tensors the later one also matches (first wins)."""
    lines = []
    for r, rule in enumerate(plan.rules):
        if rule.default:
            continue
        took: dict[int, int] = {}
        for i in infos:
            if matches(rule, i):
                first = _first_match(plan.rules, i)
                if first < r:
                    took[first] = took.get(first, 0) + 1
        for q, n in sorted(took.items()):
            lines.append(f"rule {r + 1} ({' and '.join(rule.matchers())}) also matches {n} tensor"
                         f"{'s' if n != 1 else ''} rule {q + 1} took (first wins)")
    return lines
