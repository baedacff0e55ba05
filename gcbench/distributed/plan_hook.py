"""A compression plan in the DDP hook: each parameter's gradient by its rule's compressor (docs/plans.md, docs/hook.md).

``register_compressor_hook(ddp_model, "plan:small.toml")`` (or a :class:`~gcbench.plan.model.Plan`) matches the
plan's rules to the module's parameters (:func:`gcbench.plan.assign.assign`: a rule that matches nothing is a
:class:`~gcbench.plan.reader.PlanError` before any collective) and installs :func:`plan_hook`.  Per bucket:

* the units are the bucket's parameter gradients (a plan assigns compressors per tensor);
* they are grouped by rule, and each rule group runs its compressor's own protocol (top-k's all-gather beside
  ``none``'s all-reduce) on the hook's shared queue, rule groups in rule order, buckets in DDP's order, so the
  collectives start in the same order on every rank;
* during the first ``warmup_steps`` backward passes every rule group runs the warm-up's compressor instead;
* each (rule, phase) keeps its own compressor states per tensor, carried across steps and across DDP's bucket
  rebuild as the plain hook carries them (:mod:`gcbench.distributed.unit_states`).

A plan of one default rule exchanges exactly what ``register_compressor_hook(model, spec, granularity="layer")``
would, with the same seeds (``tests/distributed/test_plan_hook.py`` checks the replicas bit for bit).  Rules that
share a compressor spec are still exchanged apart, one protocol run per rule group, so each rule's bytes are exact
(``converge`` groups a bucket's tensors per compressor instead; the result differs only for a compressor whose
selection spans its group's tensors).

Accounting: every rule group's exchange is one :class:`~gcbench.distributed.hook_stats.BucketStats` record in
``state.stats`` (so a step holds one record per bucket and rule group), and :attr:`PlanHookState.rule_bytes`
(:attr:`PlanHookState.warmup_bytes` during the warm-up) sums each rule's payload and sent bytes;
:meth:`PlanHookState.describe` gives the per-rule table.

Not in a hook: ``local_steps`` > 1 takes H optimizer steps between exchanges, an outer loop around the optimizer
that a gradient hook cannot run (``gcbench converge`` runs it), and a protocol that spans the whole model cannot be
one rule among others; both are refused in one line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from gcbench.distributed.hook_state import HookState, bucket_units, make_compressor, queued
from gcbench.distributed.hook_stats import BucketStats, HookStats
from gcbench.distributed.launch import RankMismatchError, check_agreement
from gcbench.distributed.transport import then
from gcbench.plan.assign import Assignment, assign, tensor_infos
from gcbench.plan.model import Plan
from gcbench.plan.reader import PlanError, plan_from_spec

#: the phases a rule's bytes are tallied under
RULES, WARMUP = "rules", "warmup"


def check_hook_plan(plan: Plan) -> None:
    """Refuse what a gradient hook cannot run: ``local_steps`` > 1, a rule (or warm-up) over the whole model."""
    if plan.local_steps > 1:
        raise PlanError(f"{plan.label}: local_steps = {plan.local_steps} takes {plan.local_steps} optimizer steps between "
                        "exchanges, an outer loop a gradient hook cannot run; train it with gcbench converge --plan, or "
                        "set local_steps = 1")
    for spec in plan.specs():
        if make_compressor(spec).needs_whole_model:
            raise PlanError(f"{plan.label}: {spec} exchanges the whole model at once, so it cannot be one rule of a plan; "
                            "register it as a compressor")


def as_plan(compressor: Any) -> Plan | None:
    """The plan ``compressor`` names (a :class:`Plan`, or ``plan:FILE``), else None."""
    if isinstance(compressor, Plan):
        return compressor
    return plan_from_spec(compressor.strip()) if isinstance(compressor, str) else None


class _RuleStats(HookStats):
    """One rule group's records: forwarded to the plan's shared stats, and summed for the rule."""

    def __init__(self, owner: PlanHookState, rule: int, phase: str) -> None:
        super().__init__()
        self.owner, self.rule, self.phase = owner, rule, phase

    def add(self, rec: BucketStats, last: bool) -> None:
        tally = self.owner.warmup_bytes if self.phase == WARMUP else self.owner.rule_bytes
        row = tally.setdefault(self.rule, {"payload_bytes": 0, "sent_bytes": 0, "dense_bytes": 0})
        for key in row:
            row[key] += int(getattr(rec, key))
        if last:
            self.owner.phase_steps[self.phase] += 1
        self.owner.stats.add(rec, last)


class PlanHookState(HookState):
    """The plan hook's settings and states: one :class:`HookState` per (rule, phase), sharing the queue and stats.

    The base :class:`HookState` holds the group, seed, queue, stats and parameter names (its ``compressor`` is the
    default rule's); the per-rule states hold the compressors, protocols and unit states.
    """

    def __init__(self, plan: Plan, assignment: Assignment, *, process_group: dist.ProcessGroup | None = None, seed: int = 0,
                 protocol: str = "auto", stats: HookStats | None = None, verify_wire: bool = True) -> None:
        check_hook_plan(plan)
        super().__init__(make_compressor(plan.rules[-1].compressor), process_group=process_group, seed=seed,
                         granularity="layer", protocol=protocol, stats=stats, verify_wire=verify_wire)
        self.plan, self.assignment = plan, assignment
        self.step = 0  # backward passes begun (the warm-up counts them)
        self.rule_bytes: dict[int, dict[str, int]] = {}
        self.warmup_bytes: dict[int, dict[str, int]] = {}
        self.phase_steps = {RULES: 0, WARMUP: 0}

        def sub(spec: str, rule: int, phase: str) -> HookState:
            st = HookState(make_compressor(spec), process_group=process_group, seed=seed, granularity="layer",
                           protocol=protocol, stats=_RuleStats(self, rule, phase), verify_wire=verify_wire)
            st.peers_checked = True  # the plan's fingerprint covers every rule's configuration
            return st

        self.rule_states = [sub(r.compressor, i, RULES) for i, r in enumerate(plan.rules)]
        self.warmup_states = [sub(plan.warmup, i, WARMUP) for i in range(len(plan.rules))] if plan.warmup_steps else []

    def states_at(self, step: int) -> list[HookState]:
        """The per-rule states that exchange at ``step``: the warm-up's before ``warmup_steps``, else the rules'."""
        return self.warmup_states if step < self.plan.warmup_steps else self.rule_states

    def rule_of(self, name: str) -> int:
        """The rule index of parameter ``name`` (a parameter the assignment does not know falls under the default)."""
        return self.assignment.rule_of.get(name, len(self.plan.rules) - 1)

    @property
    def state_resets(self) -> int:  # summed over the per-rule states
        return sum(s.state_resets for s in [*self.rule_states, *self.warmup_states])

    @state_resets.setter
    def state_resets(self, value: int) -> None:  # the base class initialises it; the per-rule states count
        pass

    def configuration(self) -> dict[str, Any]:
        """What every rank must agree on: the plan, each tensor's rule, every rule's configuration, the seed."""
        return {"plan": self.plan.describe(), "assignment": self.assignment.to_dict(),
                "rules": [s.configuration() for s in self.rule_states],
                "warmup": [s.configuration() for s in self.warmup_states[:1]], "seed": self.seed}

    def configuration_text(self) -> str:
        digest = hashlib.sha256(self.plan.to_toml().encode()).hexdigest()[:8]
        rules = " | ".join(r.label() for r in self.plan.rules)
        warm = f"; warm-up {self.plan.warmup_steps} × {self.plan.warmup}" if self.plan.warmup_steps else ""
        return f"{self.plan.label} #{digest} ({rules}{warm}; seed {self.seed})"

    def check_peers(self) -> None:
        """Compare the plan's configuration with every rank's (a collective); :class:`RankMismatchError` on a difference."""
        self.peers_checked = True
        try:
            check_agreement("compression plan", self.configuration(), self.configuration_text(), self.process_group)
        except RankMismatchError as exc:
            raise RankMismatchError(f"{exc} (every rank must register the same plan, on the same model, with the same seed)") from None

    def rule_rows(self) -> list[dict[str, Any]]:
        """The per-rule table: each rule's tensors and elements, its protocol, and its payload and sent bytes per step
        after the warm-up (means over the steps recorded; this rank's)."""
        steps = max(self.phase_steps[RULES], 1)
        total = sum(r["payload_bytes"] for r in self.rule_bytes.values())
        rows = self.assignment.rows()
        for r, row in enumerate(rows):
            got = self.rule_bytes.get(r, {"payload_bytes": 0, "sent_bytes": 0})
            row.update(protocol=self.rule_states[r].protocol, bytes=got["payload_bytes"] / steps,
                       sent_bytes=got["sent_bytes"] / steps, bytes_share=got["payload_bytes"] / total if total else None)
        return rows

    def describe(self) -> dict[str, Any]:
        """What results record about the hook: the plan, each tensor's rule, the per-rule table, the warm-up's bytes."""
        wire = self.stats.wire_summary()
        warm = sum(r["payload_bytes"] for r in self.warmup_bytes.values())
        return {"compressor": "plan", "label": self.plan.label, "plan": self.plan.describe(),
                "assignment": self.assignment.to_dict(), "plan_rules": self.rule_rows(),
                "protocol": "per rule", "granularity": "layer", "world_size": self.world_size, "seed": self.seed,
                "state_resets": self.state_resets, "steps": dict(self.phase_steps),
                "warmup_payload_bytes_per_step": warm / self.phase_steps[WARMUP] if self.phase_steps[WARMUP] else None,
                "wire_verified": wire["verified"], "wire_bytes_ratio": wire["ratio"]}

    def state_dict(self) -> dict[str, Any]:
        """Every rule's (and the warm-up's) unit states, and the step count that places the warm-up."""
        return {"step": self.step, "rules": [s.state_dict() for s in self.rule_states],
                "warmup": [s.state_dict() for s in self.warmup_states]}

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        self.step = int(sd["step"])
        for mine, theirs in ((self.rule_states, sd["rules"]), (self.warmup_states, sd["warmup"])):
            if len(mine) != len(theirs):
                raise PlanError(f"{self.plan.label}: the checkpoint holds {len(theirs)} rule states, this plan has {len(mine)}")
            for s, d in zip(mine, theirs, strict=True):
                s.load_state_dict(d)


def _fill(out: torch.Tensor, offsets: Sequence[int], xs: Sequence[torch.Tensor], means: Sequence[torch.Tensor]) -> None:
    """One rule group's aggregates written at their offsets of the bucket's flat result."""
    for x, off, m in zip(xs, offsets, means, strict=True):
        out[off : off + x.numel()] = m.reshape(-1).to(out.dtype)


def plan_hook(state: PlanHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook of a plan: each rule group of the bucket through its compressor's protocol, in rule
    order on the shared queue; the future completes when every group's aggregate is in the bucket's layout."""
    if not state.peers_checked:
        state.check_peers()
    buf = bucket.buffer()
    xs, offsets, signature, parts = bucket_units(state, bucket)  # granularity "layer": one unit per parameter
    index, last, step = bucket.index(), bucket.is_last(), state.step
    if last:
        state.step += 1
    groups: dict[int, list[int]] = {}
    for u, name in enumerate(signature):
        groups.setdefault(state.rule_of(name), []).append(u)
    subs, n_rules = state.states_at(step), len(state.plan.rules)
    out = torch.zeros_like(buf)
    futures = []
    for k, rule in enumerate(sorted(groups)):  # rule order: the same on every rank
        idx = groups[rule]
        sub, gx = subs[rule], [xs[u] for u in idx]
        states = sub.states_for(index * n_rules + rule, tuple(signature[u] for u in idx), len(idx), [parts[u] for u in idx],
                                [x.numel() for x in gx])
        goff = [offsets[u] for u in idx]
        sub.queue = state.queue  # one queue for every rule: collectives in the same order on every rank
        futures.append(queued(sub, gx, states, buf.device, index, last and k == len(groups) - 1,
                              partial(_fill, out, goff, gx)))
        state.queue = sub.queue
    devices = [buf.device] if buf.device.type == "cuda" else None

    def settle(done: list[torch.futures.Future[Any]]) -> torch.Tensor:
        for f in done:
            f.value()  # a failed rule group's error reaches DDP's waiter
        return out

    return then(torch.futures.collect_all(futures), settle, devices)


# DDP checks the hook's annotations by identity, and this module's are strings (PEP 563)
plan_hook.__annotations__ = {"state": PlanHookState, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}


def register_plan_hook(ddp_model: torch.nn.parallel.DistributedDataParallel, plan: Plan, *, seed: int = 0,
                       stats: HookStats | None = None, protocol: str = "auto", process_group: dist.ProcessGroup | None = None,
                       verify_wire: bool = True) -> PlanHookState:
    """Make ``ddp_model`` exchange each parameter's gradient by its ``plan`` rule's compressor; returns the hook state.

    The plan is matched to ``ddp_model.module``'s parameters first (a rule that matches none of them, ``local_steps``
    > 1, a whole-model protocol: :class:`PlanError`, before any collective), then every rank compares its plan's
    fingerprint with the others' (:meth:`PlanHookState.check_peers`, a collective).
    """
    assignment = assign(plan, tensor_infos(ddp_model.module))
    state = PlanHookState(plan, assignment, process_group=process_group, seed=seed, protocol=protocol, stats=stats,
                          verify_wire=verify_wire)
    state.check_peers()
    state.name_parameters(ddp_model.module)
    ddp_model.register_comm_hook(state, plan_hook)
    return state
