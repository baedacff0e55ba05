"""``gcbench advise --plan auto|FILE``: a plan chosen (or a given one priced) on one cluster, against the best single
compressor and the bf16 all-reduce.

:func:`advise_plan` reads or measures the kernels and the compute time as advise does
(:func:`gcbench.predict.inputs.step_inputs`), measures each tensor's fidelity and payload bytes per candidate
(:func:`gcbench.predict.plan_search.measure_tensor_fits`), and then either searches a plan
(:func:`gcbench.predict.plan_search.search`, written as rules by :func:`gcbench.predict.plan_rules.rules_of`) or prices
the plan it was given, per inner step when its ``local_steps`` is above 1.  With convergence evidence, a compressor the
convergence run saw miss its target in some seed is no candidate, and the time to the target decides: a plan is charged
the most steps to target of the compressors it mixes (a bound: the plan itself was not trained).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gcbench.core.errors import GcbenchError
from gcbench.plan.model import Plan
from gcbench.predict.inputs import Progress
from gcbench.predict.network import Network
from gcbench.predict.plan_search import DENSE, PlanStep, TensorFit, admissible, plan_step


@dataclass(frozen=True)
class Exempt:
    """A tensor left dense because no compressing candidate met the floor: its best candidate and that one's fidelity."""

    name: str
    numel: int
    codec: str  # bf16 or none
    best: str
    best_fidelity: float


@dataclass(frozen=True)
class Single:
    """One single compressor over the whole model on the cluster (the plan's rival)."""

    spec: str
    step: PlanStep
    below_floor: int  # tensors where it misses the floor
    steps_to_target: float | None = None


@dataclass(frozen=True)
class PlanAdvice:
    """The answer of ``advise --plan``: the plan, its rules' table, its step, its rivals and its exempt tensors."""

    model: str
    workers: int
    bandwidth_gbps: float
    floor: float
    plan: Plan
    auto: bool  # searched (True) or given (False)
    rows: tuple[dict[str, Any], ...]  # per rule: label, compressor, tensors, elements, bytes, bytes_share
    step: PlanStep
    best_single: Single
    bf16: Single
    singles: tuple[Single, ...]
    exempt: tuple[Exempt, ...]
    dense_by_choice: int  # tensors left dense though a compressor met the floor: dense was faster
    compute_s: float
    compute_origin: str
    kernels_origin: str
    device: str
    fidelity_origin: str
    left_out: tuple[str, ...] = ()
    convergence_origin: str | None = None
    plan_steps_to_target: float | None = None
    plan_file: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    best_within_floor: Single | None = None  # the fastest single compressor that meets the floor on every tensor

    @property
    def speedup_single(self) -> float:
        return self.best_single.step.step_s / self.step.step_s

    @property
    def speedup_bf16(self) -> float:
        return self.bf16.step.step_s / self.step.step_s


#: where the per-tensor fidelity comes from when no run file gives it
MEASURED = ("measured here: each tensor's cosine to its decoded compression and its payload bytes, one step's gradient "
            "(batch 0, seed 0)")


def _uniform(fits: Sequence[TensorFit], spec: str) -> dict[str, str]:
    return {f.name: spec for f in fits}


def _exempt(fits: Sequence[TensorFit], choice: dict[str, str], specs: Sequence[str], floor: float) -> tuple[list[Exempt], int]:
    """The tensors left dense because nothing compressing met ``floor``, and the count of those dense by choice."""
    out, by_choice = [], 0
    compressing = [s for s in specs if s not in DENSE]
    for f in fits:
        if choice[f.name] not in DENSE or not compressing:
            continue
        if any(s in compressing for s in admissible(f, specs, floor)):
            by_choice += 1
            continue
        best = max(compressing, key=lambda s: f.fidelity.get(s, -math.inf))
        out.append(Exempt(f.name, f.numel, choice[f.name], best, f.fidelity.get(best, math.nan)))
    return out, by_choice


def _steps_to_target(conv: Any, spec: str) -> float | None:
    """The mean steps to target of ``spec`` in ``conv`` where it reached it in every seed; a dense codec the run did not
    train (bf16) takes the reference's: it sends the gradient at 16 bits (an assumption, said in the docs)."""
    o = conv.get(spec) if conv is not None else None
    if o is None and conv is not None and spec in DENSE:
        o = next((r for r in conv.outcomes if r.reference), None)
    return o.steps.mean if o is not None and o.status == "reached" and o.steps is not None else None


def plan_steps(conv: Any, choice: dict[str, str]) -> float | None:
    """The steps to target charged a plan: the most of the compressors it mixes (None where one has none)."""
    used = [_steps_to_target(conv, s) for s in set(choice.values())]
    return None if any(u is None for u in used) else max(u for u in used if u is not None)


@dataclass(frozen=True)
class _Scored:
    step_s: float


def by_time_to_target(price: Any, conv: Any) -> Any:
    """The search's objective with convergence evidence: the plan's step × its steps to target (∞ without them)."""
    def objective(choice: dict[str, str]) -> _Scored:
        steps = plan_steps(conv, choice)
        return _Scored(price(choice).step_s * steps if steps is not None else math.inf)
    return objective


def converged_specs(conv: Any, specs: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the specs a convergence run saw reach its target in every seed, plus the dense codecs; one line per other)."""
    keep, out = [], []
    for s in specs:
        o = conv.get(s)
        if s in DENSE or (o is not None and o.status == "reached"):
            keep.append(s)
        else:
            out.append(f"{s}: {'not in ' + conv.origin if o is None else o.status + ' its target'} (--convergence)")
    return keep, out


def rivals(fits: Sequence[TensorFit], specs: Sequence[str], floor: float, price: Any, conv: Any = None) -> list[Single]:
    """Every spec over the whole model, priced; ranked by time to target with ``conv``, else by step."""
    out = [Single(s, price(_uniform(fits, s)), sum(1 for f in fits if s not in admissible(f, [s], floor)),
                  _steps_to_target(conv, s)) for s in specs]
    return sorted(out, key=lambda r: _tta(r.step, r.steps_to_target) if conv is not None else r.step.step_s)


def _tta(step: PlanStep, steps: float | None) -> float:
    return step.step_s * steps if steps is not None else math.inf


def pricer(fits: Sequence[TensorFit], kernels: Any, compute_s: float, n: int, bw: float, req: Any, calibration: Any,
           local_steps: int = 1) -> Any:
    """``assignment → PlanStep`` of ``fits`` on ``n`` workers at ``bw`` Gbit/s with the request's latency, topology and
    overlap."""
    net = Network(bw, req.latency_s)

    def price(assignment: dict[str, str]) -> PlanStep:
        return plan_step(assignment, fits, kernels, n, net, compute_s, req.topology, req.overlap, calibration, local_steps)
    return price


def check_plan_request(workers: Sequence[int], bandwidths: Sequence[float], floor: float) -> None:
    """One cluster and a floor in [-1, 1]: a plan is chosen for one cluster."""
    if len(workers) != 1 or len(bandwidths) != 1:
        raise GcbenchError("--plan prices one cluster: give one --workers and one --bandwidth "
                           f"(got {len(workers)} worker counts and {len(bandwidths)} bandwidths)")
    if not -1.0 <= floor <= 1.0:
        raise GcbenchError(f"--fidelity-floor is a cosine in [-1, 1], got {floor:g}")


def measure_progress(progress: Progress | None, model: str) -> None:
    if progress is not None:
        progress("fidelity", 0, 1, f"{model}: each tensor's fidelity and bytes per compressor")


def _specs(req: Any, conv: Any) -> tuple[list[str], list[str]]:
    """(the specs a plan may name, one line per spec left out and why): the request's, else advise's default candidates,
    or with convergence evidence the compressors its run trained, each of them a plan rule can name
    (:func:`gcbench.predict.plan_search.plan_candidates`), and with that evidence only those that reached its target."""
    from gcbench.compressors import registry
    from gcbench.predict.inputs import default_candidates
    from gcbench.predict.plan_search import plan_candidates

    if req.compressors:
        specs = list(req.compressors)
    elif conv is not None and not req.all_compressors:  # as advise: the compressors the convergence run trained
        specs = [o.label for o in conv.outcomes if not o.reference and not o.label.startswith("plan:")]
    else:
        every = [n for n in registry.names() if registry.get(n).min_workers <= 1]
        specs = list(every if req.all_compressors else default_candidates(every).specs)
    keep, out = plan_candidates(specs)
    if conv is not None:
        keep, more = converged_specs(conv, keep)
        out += more
    return keep, out


def fits_from_run(record: Any, model: str, fits: Sequence[TensorFit], origin: str) -> tuple[list[TensorFit], str]:
    """``fits`` with each spec's fidelity and bytes taken from the per-tensor table of a ``run``/``compare`` record of
    ``model`` where it has that spec's case with one unit per tensor (mean cosine and payload bytes over its steps), and
    the sentence saying which specs came from where.  A run by buckets has no per-tensor rows: those stay measured."""
    from gcbench.predict.accuracy import same_spec
    from gcbench.results.run_record import RunCase

    names = {f.name for f in fits}
    table: dict[str, dict[str, tuple[float, float]]] = {}
    for c in record.cases:
        if not isinstance(c, RunCase) or not c.ok or c.source is None or c.source.model != model or not c.layers:
            continue
        rows = {str(u.name): (float(u.cosine), float(u.wire_bytes)) for u in c.layers
                if u.name is not None and u.cosine is not None and u.wire_bytes is not None}
        spec = next((s for f in fits[:1] for s in f.fidelity if same_spec(s, c.label)), None)
        if spec is not None and set(rows) == names:
            table[spec] = rows
    if not table:
        return list(fits), f"measured here ({origin} has no per-tensor rows of these compressors on {model})"
    out = [TensorFit(f.name, f.numel, f.kind, {**f.fidelity, **{s: t[f.name][0] for s, t in table.items()}},
                     {**f.wire_bytes, **{s: t[f.name][1] for s, t in table.items()}}) for f in fits]
    return out, (f"{origin}: each tensor's mean cosine and payload bytes over the run's steps for {', '.join(table)}; "
                 "the others measured here")


def _given_choice(plan: Plan, fits: Sequence[TensorFit]) -> dict[str, str]:
    from gcbench.plan.assign import TensorInfo, assign

    infos = [TensorInfo(f.name, f.numel, f.kind, (f.numel,)) for f in fits]
    a = assign(plan, infos)
    return {f.name: a.spec_of(f.name) for f in fits}


def advise_plan(req: Any, plan: Plan | None, floor: float, progress: Progress | None = None) -> PlanAdvice:
    """``advise --plan``: ``plan`` priced (None: one searched) on the request's one cluster; see the module docstring."""
    from gcbench.plan.assign import TensorInfo
    from gcbench.predict.accuracy import read_convergence
    from gcbench.predict.advise import _convergence
    from gcbench.predict.inputs import step_inputs
    from gcbench.predict.plan_rules import rules_of
    from gcbench.predict.plan_search import measure_tensor_fits, search
    from gcbench.results.calibration import load_calibration
    from gcbench.sources.catalog import check_model

    check_plan_request(req.workers, req.bandwidths_gbps, floor)
    record, conv_named, model = _convergence(req)
    if model is None:
        raise GcbenchError("--plan needs --model NAME: each tensor's fidelity is measured on the model's gradients")
    check_model(model)
    conv = read_convergence(record, model, conv_named or "") if record is not None else None
    calibration = load_calibration(req.network_file) if req.network_file is not None else None
    specs, left_out = _specs(req, conv)
    if plan is not None:
        specs = list(dict.fromkeys([*plan.specs(), *specs]))
    step = step_inputs(model, specs, req.out_dir, kernels_file=req.kernels_file, only=specs, compute_s=req.compute_s,
                       rounds=req.rounds, progress=progress, remeasure=req.remeasure, budget_s=req.budget_s,
                       device=req.device)
    measure_progress(progress, model)
    fits = measure_tensor_fits(model, specs, device=req.device)
    fidelity_origin = MEASURED
    if req.results_file is not None:
        from gcbench.results.store import load_run

        fits, fidelity_origin = fits_from_run(load_run(req.results_file), model, fits, str(req.results_file))
    n, bw = req.workers[0], req.bandwidths_gbps[0]
    price = pricer(fits, step.kernels, step.compute_s, n, bw, req, calibration)
    auto = plan is None
    if plan is None:
        choice = search(fits, specs, floor, price if conv is None else by_time_to_target(price, conv))
        plan = rules_of(choice, [TensorInfo(f.name, f.numel, f.kind, (f.numel,)) for f in fits],
                        f"auto-{model}-{n}x{bw:g}")
        plan_price = price(choice)
    else:
        choice = _given_choice(plan, fits)
        plan_price = pricer(fits, step.kernels, step.compute_s, n, bw, req, calibration, plan.local_steps)(choice)
    return _answer(req, model, plan, auto, fits, choice, specs, floor, plan_price, price, step, conv, conv_named, left_out,
                   fidelity_origin)


def _answer(req: Any, model: str, plan: Plan, auto: bool, fits: Sequence[TensorFit], choice: dict[str, str],
            specs: Sequence[str], floor: float, plan_price: PlanStep, price: Any, step: Any, conv: Any,
            conv_named: str | None, left_out: Sequence[str], fidelity_origin: str) -> PlanAdvice:
    """The :class:`PlanAdvice` of a chosen or given ``plan``: its rules' table, its rivals, its exempt tensors."""
    from gcbench.plan.assign import TensorInfo, assign

    infos = [TensorInfo(f.name, f.numel, f.kind, (f.numel,)) for f in fits]
    rows = assign(plan, infos).rows({f.name: f.wire_bytes[choice[f.name]] for f in fits})
    singles = rivals(fits, specs, floor, price, conv)
    compressing = [r for r in singles if r.spec not in DENSE] or singles
    bf16 = next(r for r in singles if r.spec == "bf16")
    exempt, by_choice = _exempt(fits, choice, specs, floor) if auto else ([], 0)
    steps = plan_steps(conv, choice) if conv is not None else None
    notes = []
    if plan.local_steps > 1:
        notes.append(f"local_steps = {plan.local_steps}: compute every inner step, compress, exchange and decode once every "
                     f"{plan.local_steps} (the step shown is per inner step)")
    if plan.warmup_steps:
        notes.append(f"the {plan.warmup_steps} warm-up steps ({plan.warmup}) are not in the steady-state step shown")
    clean = next((r for r in compressing if r.below_floor == 0 and r is not compressing[0]), None)
    return PlanAdvice(model, req.workers[0], req.bandwidths_gbps[0], floor, plan, auto, tuple(rows), plan_price,
                      compressing[0], bf16, tuple(singles), tuple(exempt), by_choice, step.compute_s, step.compute_origin,
                      step.kernels.origin, step.kernels.device, fidelity_origin, tuple(left_out), conv_named, steps, None,
                      tuple(notes), clean if compressing[0].below_floor else None)
