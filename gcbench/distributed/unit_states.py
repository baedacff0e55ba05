"""Compressor states across DDP's bucket rebuild: each unit's state follows its parameters.

DDP puts the parameters in buckets for the first step, then rebuilds the buckets once, in the order
the gradients became ready.  The hook keeps one :class:`~gcbench.core.compressor.State` per unit (a
bucket's flat buffer, or one parameter's gradient).  When a bucket's parameters change, each new
unit's state is made from where its parameters' states were (:meth:`StatePlaces.carry`), so
error-feedback residuals and momenta survive the rebuild:

* a unit of one parameter that was a unit of its own (``granularity="layer"``, per-tensor protocols,
  and the converge engine's units): the same ``State`` object, untouched;
* a flat bucket (``granularity="bucket"``): a fresh state (the new unit's seed and random stream)
  with the sources' step and their element-aligned tensors (those with as many elements as their
  unit: residuals, momenta), each parameter's slice copied to its offset in the new buffer, zeros
  in the buffer's alignment gaps.

A unit that cannot be made so (a parameter not seen before, sources at different steps, a tensor
that is not element-aligned such as PowerSGD's Q, small values in ``State.values``, or tensors that
differ between the sources) keeps its fresh state, and the caller counts it (``HookState.state_resets``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gcbench.core.compressor import State


@dataclass(frozen=True)
class Part:
    """One parameter's slice of a unit: its name, first element and element count in the unit's flat layout."""

    name: str
    offset: int
    numel: int


@dataclass(frozen=True)
class _Place:
    state: State
    offset: int
    numel: int
    unit_numel: int


class StatePlaces:
    """Where each parameter's state is now: its unit's state and its slice of that unit."""

    def __init__(self) -> None:
        self._places: dict[str, _Place] = {}

    def __bool__(self) -> bool:
        return bool(self._places)

    def record(self, units: Sequence[Sequence[Part]], unit_numels: Sequence[int], states: Sequence[State]) -> None:
        """The units of one bucket now hold these parameters, with these states."""
        for parts, numel, st in zip(units, unit_numels, states, strict=True):
            for p in parts:
                self._places[p.name] = _Place(st, p.offset, p.numel, numel)

    def carry(self, parts: Sequence[Part], unit_numel: int, fresh: State) -> State | None:
        """The state of a new unit of ``parts`` (``unit_numel`` elements) made from its parameters' states, or None.

        ``fresh`` is the unit's own new state: what an assembled state starts from (its seed and random stream)."""
        places = [self._places.get(p.name) for p in parts]
        if not places or any(pl is None for pl in places):
            return None
        found = [pl for pl in places if pl is not None]
        first = found[0]
        if len(parts) == 1 and parts[0].offset == 0 and first.offset == 0 and first.numel == first.unit_numel == unit_numel:
            return first.state  # the parameter was a unit of its own: its state, as it is
        sources = list({id(pl.state): pl.state for pl in found}.values())
        keys = set(sources[0].tensors)
        units = {id(pl.state): pl.unit_numel for pl in found}
        if (any(st.values or st.step != sources[0].step or set(st.tensors) != keys for st in sources)
                or any(t.numel() != units[id(st)] for st in sources for t in st.tensors.values())):
            return None
        out = fresh
        out.step = sources[0].step
        for key in keys:
            like = sources[0].tensors[key]
            t = torch.zeros(unit_numel, dtype=like.dtype, device=like.device)
            for part, pl in zip(parts, found, strict=True):
                t[part.offset:part.offset + part.numel] = pl.state.tensors[key].reshape(-1)[pl.offset:pl.offset + pl.numel]
            out.tensors[key] = t
        return out
