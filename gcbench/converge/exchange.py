"""The exchange of one step's gradients (or pseudo-gradients) in the engine: one compressor, or a plan's rules.

:class:`Exchange` runs one compressor over the unit layout's groups, with the compressor's states
per (bucket, worker, unit) as the hook keeps them (:class:`~gcbench.converge.steps.UnitStates`).
:class:`PlanExchange` runs a compression plan (:mod:`gcbench.plan`): every parameter tensor gets
the compressor of the rule it falls under (the warm-up's compressor for every tensor during the
warm-up); a group of the layout whose tensors fall under different compressors is exchanged once
per compressor, its tensors in the group's order, so a plan of one default rule exchanges exactly
the groups, with exactly the states, the plain compressor would (the same curve, to the bit).
Each compressor keeps its own states, carried across steps per tensor.  Bytes are counted per
tensor and summed per rule (and, separately, the warm-up's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from gcbench.compressors import registry
from gcbench.converge.steps import UnitStates
from gcbench.core.compressor import Compressor

if TYPE_CHECKING:
    from gcbench.converge.steps import SeedResult
    from gcbench.plan.model import Plan

#: ``(bucket index, parameter indices in unit order)`` per group, as :meth:`~gcbench.converge.steps.UnitLayout.groups` gives them
Groups = Sequence[tuple[int, tuple[int, ...]]]


def create(spec: str) -> Compressor:
    """The compressor a spec names (``topk:density=0.01``)."""
    name, params = registry.parse_spec(spec)
    return registry.create(name, **params)


class Exchange:
    """One compressor over the layout's groups; its states per (bucket, worker, unit), carried across steps."""

    def __init__(self, comp: Compressor, seed: int, workers: int, sizes: Sequence[int]) -> None:
        self.comp = comp
        self.states = UnitStates(comp, seed, workers, sizes)

    @property
    def resets(self) -> int:
        return self.states.resets

    def run(self, step: int, groups: Groups, grads: Sequence[Sequence[torch.Tensor]], out: SeedResult) -> dict[int, torch.Tensor]:
        """Every group's aggregate per parameter index; the traffic added to ``out``."""
        aggregates: dict[int, torch.Tensor] = {}
        for bucket, signature in groups:
            self._group(bucket, signature, grads, out, aggregates)
        return aggregates

    def _group(self, bucket: int, signature: tuple[int, ...], grads: Sequence[Sequence[torch.Tensor]], out: SeedResult,
               aggregates: dict[int, torch.Tensor]) -> list[tuple[int, float, float]]:
        """One group through the compressor's protocol: ``(index, sent, payload bytes)`` per tensor."""
        st = self.states.get(bucket, signature)
        results = self.comp.exchange_group([[row[i] for i in signature] for row in grads], st)
        counted: list[tuple[int, float, float]] = []
        for i, r in zip(signature, results, strict=True):
            aggregates[i] = r.aggregate
            sent, payload = r.traffic.sent(), sum(pl.nbytes for pl in r.payloads)
            out.sent_bytes += sent
            out.payload_bytes += payload
            counted.append((i, sent, payload))
        return counted


class PlanExchange:
    """A plan's rules over the layout's groups (see the module docstring); bytes per rule in ``out.rule_bytes``."""

    def __init__(self, plan: Plan, rule_of: Sequence[int], seed: int, workers: int, sizes: Sequence[int]) -> None:
        self.plan, self.rule_of = plan, list(rule_of)
        self.by_spec = {spec: Exchange(create(spec), seed, workers, sizes) for spec in plan.specs()}

    @property
    def resets(self) -> int:
        return sum(e.resets for e in self.by_spec.values())

    def spec(self, index: int, step: int) -> str:
        return self.plan.spec_at(self.rule_of[index], step)

    def run(self, step: int, groups: Groups, grads: Sequence[Sequence[torch.Tensor]], out: SeedResult) -> dict[int, torch.Tensor]:
        """Every tensor's aggregate by its rule's compressor at ``step``; bytes added to ``out`` and to its rule's."""
        aggregates: dict[int, torch.Tensor] = {}
        warm = step < self.plan.warmup_steps
        for bucket, signature in groups:
            parts: dict[str, list[int]] = {}
            for i in signature:  # the group's tensors by compressor, each part in the group's order
                parts.setdefault(self.spec(i, step), []).append(i)
            for spec, part in parts.items():
                for i, sent, payload in self.by_spec[spec]._group(bucket, tuple(part), grads, out, aggregates):
                    row = out.rule_bytes.setdefault(self.rule_of[i], [0.0, 0.0])
                    row[0] += sent
                    row[1] += payload
                    if warm:
                        out.warmup_sent_bytes += sent
        return aggregates


def plan_rules(plan: Plan, model: torch.nn.Module) -> tuple[list[int], Any]:
    """Each trainable parameter's rule index (the engine's parameter order), and the plan's assignment to ``model``."""
    from gcbench.plan.assign import assign, tensor_infos

    infos = tensor_infos(model)
    assignment = assign(plan, infos)
    return [assignment.rule_of[i.name] for i in infos], assignment
