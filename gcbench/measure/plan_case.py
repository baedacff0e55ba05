"""A plan as a case of ``run`` and ``compare``: each tensor compressed by its rule's compressor, measured as one case.

:class:`PlanCompressor` is a :class:`~gcbench.core.compressor.Compressor` the runner drives like any other.  It holds
one configured compressor per distinct spec of the plan and knows which rule each unit (tensor) falls under; a unit's
state (:class:`PlanState`) carries its rule, so every call — one tensor's compression, a worker's group, the exchange
— reaches the rule's compressor with that compressor's own state.  Payloads are the rule compressors' real payloads,
so the case's bytes are the sum of the parts, and :func:`plan_record` splits them per rule.

A one-shot run measures the plan's rules: its warm-up and ``local_steps`` apply in ``converge`` and ``train``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import torch

from gcbench.compressors import registry
from gcbench.core.compressor import Compressor, ExchangeResult, Payload
from gcbench.core.errors import PayloadError
from gcbench.core.info import CompressorInfo, Flags
from gcbench.core.state import State
from gcbench.plan import Assignment, Plan, PlanError, assign, layout_infos, tensor_infos
from gcbench.plan.reader import plan_of_params

if TYPE_CHECKING:
    from gcbench.measure.granularity import Unit
    from gcbench.sources.base import GradientSource

#: the card every plan case records: ``compressor = "plan"``, its label ``plan:<name>``
PLAN_CARD = CompressorInfo(name="plan", impl="gcbench.measure.plan_case:PlanCompressor", version=1,
                           description="a compression plan: each tensor by its rule's compressor", paper="—",
                           biased=True, stateful=False, traffic_bytes=4.0)


class PlanState(State):
    """One unit's state under a plan: its rule and the state of that rule's compressor."""

    def __init__(self, rule: int, inner: State) -> None:
        super().__init__(inner.seed)
        self.rule, self.inner = rule, inner

    def reseed(self, seed: int) -> None:
        self.inner.reseed(seed)


def _combined_flags(subs: Sequence[Compressor]) -> Flags:
    """The plan's flags from its rules' compressors: biased, stateful or reconstructed if any is; EF "on" if any keeps one."""
    flags = [s.flags for s in subs]
    ef = {f.error_feedback for f in flags}
    return Flags(biased=any(f.biased for f in flags), stateful=any(f.stateful for f in flags),
                 error_feedback=ef.pop() if len(ef) == 1 else ("on" if ef & {"on", "always", "own"} else "off"),
                 deterministic=all(f.deterministic for f in flags), reconstructed=any(f.reconstructed for f in flags),
                 exchange="per rule: " + "; ".join(sorted({f"{s.name} {f.exchange}" for s, f in zip(subs, flags, strict=True)})))


class PlanCompressor(Compressor):
    """Each unit by its rule's compressor (see the module docstring); built for one list of layer units."""

    info = PLAN_CARD

    def __init__(self, plan: Plan, assignment: Assignment, units: Sequence[Unit]) -> None:
        if any(u.flat for u in units):
            raise PlanError(f"{plan.label}: a plan assigns compressors per tensor; run it at granularity 'layer' "
                            f"(got {units[0].kind} units)")
        self.plan, self.assignment = plan, assignment
        self.subs: dict[str, Compressor] = {}
        for spec in (r.compressor for r in plan.rules):
            if spec not in self.subs:
                name, params = registry.parse_spec(spec)
                self.subs[spec] = registry.create(name, **params)
        self.unit_rule = [assignment.rule_of[u.name] for u in units]
        subs = list(self.subs.values())
        _no_own_momentum(plan, subs)
        numel = sum(u.numel for u in units) or 1
        traffic = sum(self._sub(r).info.traffic_bytes * u.numel for r, u in zip(self.unit_rule, units, strict=True)) / numel
        self.info = dataclasses.replace(  # type: ignore[misc]  # a plan's card is its own instance's: its rules decide it
            PLAN_CARD, description=plan.label, traffic_bytes=traffic, min_workers=max(s.info.min_workers for s in subs))
        self.params = PLAN_CARD.resolve({})
        self._flags = _combined_flags(subs)
        # the narrowest float wire format among the rules (fp16 beside bf16: fp16's): where an input beyond its max
        # decodes to ±inf the runner counts saturation, as it does for that compressor alone
        wires = [w for w in (s.wire_dtype for s in subs) if w is not None and w.is_floating_point]
        self.wire_dtype = min(wires, key=lambda w: float(torch.finfo(w).max)) if wires else None

    def _sub(self, rule: int) -> Compressor:
        return self.subs[self.plan.rules[rule].compressor]

    @property
    def flags(self) -> Flags:
        return self._flags

    def init_unit_state(self, unit: int, seed: int) -> PlanState:
        """The state of unit ``unit``: its rule's compressor's fresh state."""
        rule = self.unit_rule[unit]
        return PlanState(rule, self._sub(rule).init_state(seed))

    def init_state(self, seed: int = 0) -> State:
        raise TypeError("a plan's states are per unit: use init_unit_state(unit, seed)")

    @overload
    def compress_and_decode(self, x: torch.Tensor, state: State, need_decoded: Literal[True] = ...) -> tuple[Payload, torch.Tensor]: ...

    @overload
    def compress_and_decode(self, x: torch.Tensor, state: State, need_decoded: bool) -> tuple[Payload, torch.Tensor | None]: ...

    def compress_and_decode(self, x: torch.Tensor, state: State, need_decoded: bool = True) -> tuple[Payload, torch.Tensor | None]:
        st = _plan_state(state)
        return self._sub(st.rule).compress_and_decode(x, st.inner, need_decoded)

    def _groups(self, n: int) -> dict[str, list[int]]:
        """Unit indices by the spec of their rule, in unit order (one group per rule compressor)."""
        groups: dict[str, list[int]] = {}
        for u in range(n):
            groups.setdefault(self.plan.rules[self.unit_rule[u]].compressor, []).append(u)
        return groups

    def compress_group(self, xs: Sequence[torch.Tensor], states: Sequence[State],
                       need_decoded: bool = True) -> list[tuple[Payload, torch.Tensor | None]]:
        """Each rule's compressor over its own units (a model-wide selection spans the rule's tensors)."""
        out: list[tuple[Payload, torch.Tensor | None]] = [None] * len(xs)  # type: ignore[list-item]  # every slot filled below
        for spec, idx in self._groups(len(xs)).items():
            done = self.subs[spec].compress_group([xs[i] for i in idx], [_plan_state(states[i]).inner for i in idx], need_decoded)
            for i, res in zip(idx, done, strict=True):
                out[i] = res
        return out

    def decompress(self, payload: Payload, expected_shape: tuple[int, ...] | torch.Size | None = None,
                   dtype: torch.dtype | None = None) -> torch.Tensor:
        """Decode by the payload's codec: the rule compressor that made it."""
        sub = next((s for s in self.subs.values() if s.name == payload.codec), None)
        if sub is None:
            raise PayloadError(f"{self.plan.label}: payload of codec {payload.codec!r}, which no rule of the plan uses")
        return sub.decompress(payload, expected_shape, dtype)

    def decompress_group(self, payloads: Sequence[Payload],
                         expected_shapes: Sequence[tuple[int, ...] | torch.Size] | None = None) -> list[torch.Tensor]:
        out: list[torch.Tensor] = [None] * len(payloads)  # type: ignore[list-item]  # every slot filled below
        for spec, idx in self._groups(len(payloads)).items():
            shapes = None if expected_shapes is None else [expected_shapes[i] for i in idx]
            for i, dec in zip(idx, self.subs[spec].decompress_group([payloads[i] for i in idx], shapes), strict=True):
                out[i] = dec
        return out

    def has_own_exchange(self) -> bool:
        return any(s.has_own_exchange() for s in self.subs.values())

    @property
    def needs_whole_model(self) -> bool:
        return any(s.needs_whole_model for s in self.subs.values())

    def exchange_group(self, grads: Sequence[Sequence[torch.Tensor]], states: Sequence[Sequence[State]]) -> list[ExchangeResult]:
        """Each rule's units exchanged by its compressor's protocol; the results in unit order."""
        units = len(grads[0]) if grads else 0
        out: list[ExchangeResult] = [None] * units  # type: ignore[list-item]  # every slot filled below
        for spec, idx in self._groups(units).items():
            done = self.subs[spec].exchange_group([[g[i] for i in idx] for g in grads],
                                                  [[_plan_state(s[i]).inner for i in idx] for s in states])
            for i, res in zip(idx, done, strict=True):
                out[i] = res
        return out

    def _encode(self, a: torch.Tensor, state: State, ctx: Any) -> Any:
        raise TypeError("a plan encodes nothing itself: each tensor goes to its rule's compressor (compress_and_decode)")

    def _decode(self, payload: Payload) -> torch.Tensor:
        raise TypeError("a plan decodes nothing itself: each payload goes to its codec's rule compressor (decompress)")


def _no_own_momentum(plan: Plan, subs: Sequence[Compressor]) -> None:
    """Refuse a rule whose compressor applies momentum of its own (DGC, SDAGC): its fidelity reference is a
    momentum-SGD update, not the gradient every other rule is held to, and the stream would take its aggregate as an
    update applied."""
    moving = sorted({s.name for s in subs if s.applies_momentum})
    if moving:
        raise PlanError(f"{plan.label}: {', '.join(moving)} applies momentum of its own, so its reference update is "
                        "not the gradient's; a plan case in run, compare or bench cannot mix it with other rules")


def _plan_state(state: State) -> PlanState:
    if not isinstance(state, PlanState):
        raise TypeError(f"a plan's unit states come from init_unit_state, got {type(state).__name__}")
    return state


def source_infos(source: GradientSource) -> list[Any]:
    """The tensor infos of a source's layout, with kinds where it has a model (a live source), else without."""
    module = getattr(source, "module", None)
    kinds = {i.name: i.kind for i in tensor_infos(module)} if isinstance(module, torch.nn.Module) else None
    return layout_infos(source.layout(), kinds)


def plan_compressor(params: Mapping[str, Any], source: GradientSource, units: Sequence[Unit]) -> PlanCompressor:
    """The plan case's compressor for ``source``'s tensors: its plan (from a case's params) matched to them."""
    plan = plan_of_params(params, "plan case")
    return PlanCompressor(plan, assign(plan, source_infos(source)), units)


def plan_record(comp: PlanCompressor, layers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a plan case's record adds: the plan, each tensor's rule, and the per-rule table with each rule's bytes
    (its tensors' mean wire bytes per step, from the case's per-layer rows: real payload lengths)."""
    bytes_of = {str(row["name"]): float(row["wire_bytes"]) for row in layers}
    return {"plan": comp.plan.describe(), "assignment": comp.assignment.to_dict(),
            "plan_rules": comp.assignment.rows(bytes_of)}


def _spec_infos(src: Any, seed: int) -> list[Any]:
    """The tensors a suite's source will yield, found without computing a gradient: a live model is built (not
    warmed up), a synthetic source's shapes named as it names them, a trace's layout read from its header."""
    if src.kind == "live":
        from gcbench.sources.zoo import load_model

        kwargs = {k: v for k, v in (("batch_size", src.batch_size), ("image_size", src.image_size)) if v is not None}
        return tensor_infos(load_model(src.model or "", seed, **kwargs).module)
    from gcbench.measure.source_data import build_source

    source = build_source(src, seed)
    try:
        return layout_infos(source.layout())
    finally:
        source.close()


def check_plan_cases(suite: Any) -> None:
    """Refuse, before any work, a suite's plan case that cannot run: a granularity other than ``layer``, or a rule that
    matches none of a source's tensors (:func:`gcbench.plan.assign.assign`); one :class:`PlanError` line."""
    plans = [plan_of_params(c.params, c.label or "plan") for c in suite.compressors if c.name == "plan"]
    if not plans:
        return
    if suite.granularity != "layer":
        raise PlanError(f"{plans[0].label}: a plan assigns compressors per tensor; run it at granularity 'layer' "
                        f"(this run's is {suite.granularity!r}: --granularity layer)")
    for plan in plans:
        _no_own_momentum(plan, [registry.create(name, **params) for name, params in map(registry.parse_spec, plan.specs())])
    for src in suite.sources:
        infos = _spec_infos(src, suite.seed)
        for plan in plans:
            assign(plan, infos)


def model_plan(params: Mapping[str, Any], model: str, seed: int = 0) -> PlanCompressor:
    """A plan case's compressor for a zoo model's tensors (``bench --model``): kinds from the model's modules."""
    from gcbench.measure.granularity import make_units
    from gcbench.sources import zoo

    plan = plan_of_params(params, "plan case")
    layout = zoo.layer_shapes(model)
    return PlanCompressor(plan, assign(plan, tensor_infos(zoo.load_model(model, seed).module)), make_units(layout, "layer"))


def fresh_states(comp: Compressor, seeds: Sequence[int]) -> list[State]:
    """One fresh state per unit, seeded ``seeds[u]``: a plan's are its rules' compressors' (it knows the unit's rule)."""
    if isinstance(comp, PlanCompressor):
        return [comp.init_unit_state(u, s) for u, s in enumerate(seeds)]
    return [comp.init_state(s) for s in seeds]


def check_model_plans(specs: Sequence[str], model: str) -> None:
    """Refuse, before any work, a ``plan:FILE`` among ``specs`` whose rules do not fit ``model``'s tensors (``bench --model``)."""
    from gcbench.plan.reader import case_of_spec

    for spec in specs:
        name, params = case_of_spec(spec)
        if name == "plan":
            model_plan(params, model)
