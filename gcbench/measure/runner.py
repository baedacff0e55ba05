"""The runner: feeds gradients from a suite's sources through each compressor and measures.

For every (source, compressor) case it keeps one compressor state per (worker, unit) — a unit is
a layer, a DDP-style bucket or the whole flattened model — and feeds the steps in order, so error
feedback, momentum and warm-up schedules see a real stream of gradients.  At each step:

1. *Fidelity* on worker 0: R independent compressions of every unit from copies of its current
   state (R = the suite's ``repeats`` for stochastic compressors, 1 for deterministic ones), against
   the compressor's reference (the gradient itself, or the momentum-SGD update for DGC/SDAGC).
2. *The stream*: every worker compresses its units (``compress_group``, so model-wide selection
   works); the aggregate is the mean of the decoded payloads — or the compressor's own
   ``exchange`` protocol where its paper defines one (TernGrad's shared scaler, 1-bit SGD's two
   legs, PowerSGD's all-reduces).  Sizes and traffic come from the real payloads.
3. *Aggregate fidelity* against the true worker mean, and *error-feedback drift* over steps.
4. *Timing* (first ``timing_steps`` steps): compress and decompress of all units of one worker,
   interleaved round by round with a copy of the same tensors into preallocated buffers, until
   the per-round ×copy is stable (:func:`gcbench.measure.timing.time_interleaved`), then flagged.

A live source with ``loop = "closed"`` gives every case its own model (built from the same seed
and warm-up): after each step the case's aggregate is fed back and the model steps with it, so the
next step's gradients follow that compressor's trajectory (:mod:`gcbench.measure.source_data`).

The runner never prints: it reports progress through a callback, ``progress(stage, done, total,
message)``, which the CLI turns into a rich progress bar: every stage counts units done (the
``step`` stage from 0 at a case's start to its steps), and a message names what runs.  A failing
case is recorded with its error and the run goes on.
"""

from __future__ import annotations

import json
import statistics
import time
import traceback
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from gcbench.compressors import registry
from gcbench.core import signals
from gcbench.core.compressor import Compressor, Payload, State
from gcbench.core.errors import GcbenchError, SourceError
from gcbench.measure.case_summary import aggregate_summary, fidelity_summary, size_summary, unit_summary
from gcbench.measure.casemath import Scratch, StreamStats, check_decoded, check_numbers, max_abs, worker_mean
from gcbench.measure.copy_baseline import pool_copy_baseline, timing_summary
from gcbench.measure.fidelity import Fidelity, fidelity
from gcbench.measure.footprint import source_build_work, source_work
from gcbench.measure.granularity import make_units
from gcbench.measure.plan_case import PlanCompressor, plan_compressor, plan_record
from gcbench.measure.source_data import ClosedLoopData, Progress, SourceData, build_source, no_progress
from gcbench.measure.stream import DeliveredStream
from gcbench.measure.suite import CompressorSpec, MetricsSpec, SourceSpec, Suite
from gcbench.measure.timing import TimingPolicy, time_step
from gcbench.measure.traffic import TrafficLog
from gcbench.results.phases import Window, case_phases, phase_windows
from gcbench.results.process_spread import BUILT_IN, machine_spread
from gcbench.results.store import RunWriter
from gcbench.sources.base import FLOAT32_MAX, GradientSource


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed derived deterministically from its parts (stable across processes)."""
    words = [zlib.crc32(p.encode()) if isinstance(p, str) else int(p) % (2**32) for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> np.uint64(1))


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise GcbenchError("device 'cuda' requested but no CUDA device is available (use --device cpu)")
    return torch.device(device)


# ----------------------------------------------------------------------------- one case


def _unit_states(comp: Compressor, seed: int, workers: int, n_units: int) -> list[list[State]]:
    if isinstance(comp, PlanCompressor):  # a plan's unit states are its rules' compressors' (each knows its unit)
        return [[comp.init_unit_state(u, derive_seed(seed, "state", w, u)) for u in range(n_units)] for w in range(workers)]
    return [[comp.init_state(derive_seed(seed, "state", w, u)) for u in range(n_units)] for w in range(workers)]


def own_momentum(specs: Sequence[tuple[str, dict[str, Any]]]) -> float:
    """The momentum of the first compressor that applies momentum itself (DGC, SDAGC), else 0.

    ``gcbench compare`` takes it as its optimizer's when none is given: comparing DGC with the
    plain-SGD update would charge it for its momentum, not for its compression.
    """
    for name, params in specs:
        comp = registry.create(name, **params)
        if comp.applies_momentum:
            return float(comp.params["momentum"])
    return 0.0


def suite_windows(suite: Suite, steps: int) -> list[Window]:
    """The phase windows of the suite's first compressor whose protocol changes by step (LGC), else []."""
    for c in suite.compressors:
        try:
            comp = registry.create(c.name, **c.params)
        except GcbenchError:
            continue  # the case itself reports the bad name or parameter
        names = [comp.step_phase(t) for t in range(steps)]
        if any(n is not None for n in names):
            return phase_windows(names)
    return []


def run_case(spec: CompressorSpec, data: SourceData, suite: Suite, progress: Progress = no_progress,
             windows: Sequence[Window] = (), timing_budget: RunTimingBudget | None = None) -> dict[str, Any]:
    """Measure one compressor configuration on one source; returns the case record.

    ``windows`` (the source's phase windows, :func:`suite_windows`) restart a second cumulative
    aggregate error at each window's first step, so every case is measured over the same phases.
    ``timing_budget``: the run's (:class:`RunTimingBudget`); None times the case by the suite's per-case policy alone.
    The numbers themselves are :mod:`gcbench.measure.casemath`'s, :mod:`~gcbench.measure.stream`'s and
    :mod:`~gcbench.measure.traffic`'s, summarised by :mod:`~gcbench.measure.case_summary`; this function runs the steps.
    """
    W, T, units = data.source.workers, data.source.steps, data.units
    # a plan (gcbench.plan) is a case like a compressor: each tensor by its rule's compressor
    comp = plan_compressor(spec.params, data.source, units) if spec.name == "plan" else registry.create(spec.name, **spec.params)
    info = comp.info
    if W < info.min_workers:
        raise GcbenchError(f"{info.name} needs at least {info.min_workers} workers ({info.exchange}); this source has {W} "
                           f"(use --workers {info.min_workers} or a source with more workers)")
    repeats = 1 if comp.flags.deterministic else suite.metrics.repeats  # per configuration (the card's random_when)
    states = _unit_states(comp, suite.seed, W, len(units))
    ref_states: list[list[dict[str, Any]]] = [[{} for _ in units] for _ in range(W)]
    custom_exchange = W > 1 and comp.has_own_exchange()
    scratch = getattr(data, "scratch", None)  # the source's buffers, lent to this case (the caller takes them back)
    stats = StreamStats(len(units), comp.stateful, windowed=bool(windows), scratch=scratch, one_step=T == 1)
    traffic = TrafficLog(T, W)
    starts = {w.first for w in windows}
    step_phases: list[str | None] = []
    timing: dict[str, Any] | None = None

    own_ref = type(comp).reference_update is not Compressor.reference_update  # DGC/SDAGC: momentum-SGD reference
    ref = data.reference(suite.optimizer.momentum)
    stream = DeliveredStream(ref, len(units), comp.applies_momentum, scratch)
    one_shot_steps = min(suite.metrics.fidelity_steps, T)
    wire_max = saturating_max(comp)
    saturated = 0  # elements a narrower float format mapped to ±inf, over every worker and step of the stream

    # the bar counts steps done, from 1 as each one ends (one numbering for every bar)
    progress("step", 0, T, spec.label)  # type: ignore[arg-type]  # a resolved suite labels every spec
    for t in range(T):
        xs = [data.get(t, w) for w in range(W)]

        def check(w: int, u: int, dec: torch.Tensor, step: int = t, inputs: list[list[torch.Tensor]] = xs) -> int:
            """Refuse a non-finite decoded tensor of worker ``w``'s unit ``u`` (finite input); count saturated elements."""
            return check_decoded(info.name, units[u].name, inputs[w][u], dec, f"step {step} worker {w}", wire_max)

        def check_mean(u: int, agg: torch.Tensor, step: int = t) -> None:
            """Refuse a protocol's non-finite aggregate of finite inputs, against the true mean's range."""
            check_decoded(info.name, units[u].name, ref.mean[step][u], agg, f"step {step} aggregate", wire_max)

        refs = [[comp.reference_update(x, ref_states[w][u]) for u, x in enumerate(xs[w])] for w in range(W)] if own_ref else xs
        if suite.metrics.timing and t < suite.metrics.timing_steps:
            timing = _time_case(comp, xs[0], states[0], suite, data.copy_destination(xs[0]), timing_budget)

        # 1. and 2.: worker 0's one-shot fidelity, then every worker's compression and the aggregate
        ex = _exchange_step(comp, t, xs, states, refs[0], traffic, repeats, suite.seed, t < one_shot_steps, custom_exchange,
                            saturated, check, check_mean, scratch)
        saturated += ex.saturated
        if custom_exchange:
            step_phases.append(ex.phase)
        fids, aggregates, outs0 = ex.fids, ex.aggregates, ex.outs0

        # 3. the stream on the common reference; aggregate fidelity against the own reference and EF drift
        stream.add_step(t, aggregates, ex.contributions)
        data.advance(t, aggregates)  # closed loop: the model takes this aggregate before the next step's gradients
        stats.add_step(refs, aggregates, [dec for _, dec in outs0], [p.nbytes for p, _ in outs0], fids, window_start=t in starts,
                       true_means=None if own_ref else ref.mean[t], common=None if own_ref else stream.common_step(t))
        if not saturated:  # finite tensors in and out: a metric that is NaN or ±inf is an overflowed float32 sum
            _check_step_numbers(info.name, stats, stream, fids, xs)
        if scratch is not None and data.loop == "open":  # (a closed loop's model holds views of them until the next step)
            scratch.give_back(aggregates)  # read by nothing after this step: the next step's aggregates reuse them
        progress("step", t + 1, T, spec.label)  # type: ignore[arg-type]  # a resolved suite labels every spec
    rec = _case_record(spec, comp, data, suite, repeats, stats, traffic, timing, windows, step_phases,
                       {**stream.summary(comp.stateful, suite.metrics.min_stream_steps), "loop": data.loop})
    if isinstance(comp, PlanCompressor):
        rec.update(plan_record(comp, rec["layers"]), params=dict(spec.params))  # the plan's table, as the suite holds it
    if saturated:
        rec["flags"]["saturated"] = saturated
    else:  # the workers' own sums over the whole stream, summed in float32 like every other
        check_numbers(info.name, rec["stream"]["worker_delivered"] or [], "workers' delivered fraction",
                      lambda: max((max_abs(x) for w in range(W) for x in data.get(T - 1, w)), default=0.0))
    return rec


def saturating_max(comp: Compressor) -> float | None:
    """The largest value of the compressor's wire format where that is a float narrower than float32 (fp16: 65504,
    bf16: about 3.39e38), else None: beyond it the cast saturates to ±inf, a fact of the format, not a bug."""
    wire = getattr(comp, "wire_dtype", None)
    if isinstance(wire, torch.dtype) and wire.is_floating_point:
        top = float(torch.finfo(wire).max)
        return top if top < FLOAT32_MAX else None
    return None


def _check_step_numbers(name: str, stats: StreamStats, stream: DeliveredStream, fids: Sequence[Fidelity] | None,
                        xs: Sequence[Sequence[torch.Tensor]]) -> None:
    """Fail the case (:class:`~gcbench.measure.casemath.NonFiniteError`) when one of this step's numbers came out NaN or ±inf."""
    values: list[float | None] = [f.err_sq_mean for f in fids or []]
    values += [unit[-1].err_sq_mean for unit in stats.agg if unit]
    values += [stats.agg_drift[-1], stats.drift[-1] if stats.drift else None]
    values += [series[-1] for series in (stream.error, stream.error_scaled, stream.delivered) if series]
    check_numbers(name, values, "error of this case", lambda: max((max_abs(x) for w in xs for x in w), default=0.0))


def _repeat_fidelity(comp: Compressor, xs: Sequence[torch.Tensor], states: Sequence[State], refs: Sequence[torch.Tensor],
                     repeats: int, seed: int, step: int, check: Callable[[int, torch.Tensor], int] | None = None,
                     ) -> tuple[list[Fidelity], list[tuple[Payload, torch.Tensor]], list[State]]:
    """Worker 0's fidelity per unit from ``repeats`` compressions, each from a reseeded copy of its state.

    Also returns the first repeat's (payload, decoded) per unit and the state it left: an
    independent draw from the current state, so the stream can take it as worker 0's step.
    ``check(unit, decoded)`` sees every decoded tensor first (it raises on a non-finite one).
    """
    fids, firsts, first_states = [], [], []
    for u, x in enumerate(xs):
        decs = []
        for r in range(repeats):
            st = states[u].clone()
            if repeats > 1:
                st.reseed(derive_seed(seed, "repeat", step, u, r))
            p, dec = comp.compress_and_decode(x, st)
            if check is not None:
                check(u, dec)
            decs.append(dec)
            if r == 0:
                firsts.append((p, dec))
                first_states.append(st)
        fids.append(fidelity(refs[u], decs))
    return fids, firsts, first_states


@dataclass(frozen=True)
class _Exchanged:
    """One step's compressions (:func:`_exchange_step`)."""

    fids: list[Fidelity] | None  # worker 0's one-shot fidelity by unit (None after the one-shot steps)
    aggregates: list[torch.Tensor]  # by unit
    outs0: Sequence[tuple[Payload, torch.Tensor]]  # worker 0's (payload, decoded) by unit
    contributions: list[list[torch.Tensor]] | None  # each worker's decoded tensors by unit (None: the protocol hides them)
    phase: str | None  # the protocol's phase of this step (LGC); None for the default exchange
    saturated: int  # elements a narrower float wire format mapped to ±inf in this step


def _exchange_step(comp: Compressor, t: int, xs: Sequence[Sequence[torch.Tensor]], states: list[list[State]],
                   refs0: Sequence[torch.Tensor], traffic: TrafficLog, repeats: int, seed: int, one_shot: bool,
                   custom_exchange: bool, saturated_before: int, check: Callable[[int, int, torch.Tensor], int],
                   check_mean: Callable[[int, torch.Tensor], None], scratch: Scratch | None = None) -> _Exchanged:
    """Step ``t``'s compressions: worker 0's one-shot fidelity (on the first steps), then every worker's compression
    and the aggregate, by the default all-gather or the compressor's own protocol (its messages counted in ``traffic``).

    ``check(worker, unit, decoded)`` refuses a non-finite decoded tensor and counts saturated elements;
    ``check_mean(unit, aggregate)`` refuses a protocol's non-finite aggregate while nothing in the stream (counting
    ``saturated_before``) has saturated; ``scratch`` lends the aggregates' buffers.  Worker 0's state in ``states`` is
    replaced by its first fidelity repeat's where the stream takes that repeat as its step.
    """
    # 1. one-shot fidelity on the first steps: repeats from copies of the current state (worker 0)
    fids: list[Fidelity] | None = None
    firsts: list[tuple[Payload, torch.Tensor]] = []
    first_states: list[State] = []
    if one_shot and (repeats > 1 or custom_exchange):
        fids, firsts, first_states = _repeat_fidelity(comp, xs[0], states[0], refs0, repeats, seed, t,
                                                      lambda u, dec: check(0, u, dec))
    elif custom_exchange:  # worker 0's own compression from a copy of its state: its bytes and decoded tensors
        firsts = [comp.compress_and_decode(x, st.clone()) for x, st in zip(xs[0], states[0], strict=True)]
        for u, (_, dec) in enumerate(firsts):
            check(0, u, dec)

    # 2. the stream: every worker compresses; aggregate by the default or the paper's protocol
    saturated = 0
    if custom_exchange:
        aggregates, phase, contributions = _protocol_exchange(comp, xs, states, traffic, t)
        for w, contribution in enumerate(contributions or []):
            saturated += sum(check(w, u, dec) for u, dec in enumerate(contribution))
        if not saturated_before + saturated:  # the protocol's aggregate of finite inputs, against the true mean's range
            for u, agg in enumerate(aggregates):
                check_mean(u, agg)
        return _Exchanged(fids, aggregates, firsts, contributions, phase, saturated)  # worker 0: its first fidelity repeat
    # worker 0's stream step is its first fidelity repeat (an independent draw from the same
    # state), so stochastic compressors do not compress worker 0's tensors once more
    reuse = fids is not None and _per_unit(comp)
    if reuse:
        states[0] = first_states
    # need_decoded=True: every decoded tensor is there
    outs = [firsts if reuse and w == 0
            else cast(list[tuple[Payload, torch.Tensor]], comp.compress_group(xs[w], states[w], need_decoded=True))
            for w in range(len(xs))]
    saturated += sum(check(w, u, dec) for w, o in enumerate(outs) for u, (_, dec) in enumerate(o))
    aggregates = [worker_mean([o[u][1] for o in outs], scratch) for u in range(len(xs[0]))]
    traffic.add_allgather(t, [sum(p.nbytes for p, _ in o) for o in outs], [sum(p.body_nbytes for p, _ in o) for o in outs])
    if fids is None and one_shot:
        fids = [fidelity(refs0[u], [dec]) for u, (_, dec) in enumerate(outs[0])]
    return _Exchanged(fids, aggregates, outs[0], [[dec for _, dec in o] for o in outs], None, saturated)


def _per_unit(comp: Compressor) -> bool:
    """Whether a worker's group compression is each unit's on its own (no model-wide selection; a plan's rules alike)."""
    if isinstance(comp, PlanCompressor):
        return all(type(s).compress_group is Compressor.compress_group for s in comp.subs.values())
    return type(comp).compress_group is Compressor.compress_group


def _protocol_exchange(comp: Compressor, xs: Sequence[Sequence[torch.Tensor]], states: Sequence[Sequence[State]],
                       traffic: TrafficLog, step: int) -> tuple[list[torch.Tensor], str | None, list[list[torch.Tensor]] | None]:
    """One step of the compressor's own exchange protocol over every unit, its messages counted in ``traffic``.

    Returns the aggregate of each unit, the step's phase (a protocol with phases by step, LGC,
    names it; None otherwise) and each worker's decoded contribution by unit where the protocol's
    aggregate is their mean (else None).
    """
    aggregates: list[torch.Tensor] = []
    phase = None
    results = comp.exchange_group(xs, states)
    contributions: list[list[torch.Tensor]] | None = None
    if results and all(r.contributions is not None for r in results):
        contributions = [[r.contributions[w] for r in results] for w in range(len(xs))]  # type: ignore[index]  # every result has them (checked above)
    for u, res in enumerate(results):
        aggregates.append(res.aggregate)
        if u == 0:
            phase = getattr(res, "phase", None)
        for ph in res.traffic.phases():
            for w in range(len(xs)):
                traffic.add(ph, step, w, res.traffic.sent(w, ph), res.traffic.received(w, ph), res.traffic.sent_body(w, ph))
    return aggregates, phase, contributions


class RunTimingBudget:
    """A whole run's timing budget (``metrics.timing_run_budget_s``), shared out among its timed cases.

    Each case's timing gets its share of what is left (as :func:`gcbench.measure.bench.case_budget` shares advise's
    sweep: the even share less what a case has cost beyond its timed rounds — payloads, the warm-up round) as its
    :attr:`TimingPolicy.cap_s`; its per-case ``timing_budget_s`` still bounds it.  A case whose share ran out before
    ``timing_repeats`` rounds stops early and its kernels are flagged ``cut short`` (:func:`flag_reasons`), so a big
    model's run takes a bounded time for timing and says which figures it cut, instead of taking minutes of rounds.
    """

    def __init__(self, total_s: float, timings: int) -> None:
        self.total_s, self.left = total_s, max(1, timings)
        self.spent_s = 0.0
        self.overheads: list[float] = []

    def policy(self, m: MetricsSpec) -> TimingPolicy:
        """The next timed case's policy: the suite's, with this case's share of the run's budget as its cap."""
        from gcbench.measure.bench import CALIBRATION_SHARE, MIN_CASE_BUDGET_S  # here: bench's imports are not every run's

        # bench's case_budget without its ceiling (a bench case's own 3 s): a run given more time spends it
        even = max(0.0, self.total_s - self.spent_s) / self.left
        # a case's cost beyond its rounds, from the cases so far: their median, so one case that compiled its decoder's
        # kernels in its warm-up round does not shrink every later case's share
        share = max(MIN_CASE_BUDGET_S, even * CALIBRATION_SHARE if not self.overheads else even - statistics.median(self.overheads))
        return TimingPolicy(warmup=m.warmup, min_rounds=m.timing_repeats, budget_s=min(m.timing_budget_s, share), cap_s=share)

    def spend(self, seconds: float, rounds_s: float) -> None:
        """Record one timed case: ``seconds`` in all, ``rounds_s`` of them in its timed rounds."""
        self.spent_s += seconds
        self.overheads.append(max(0.0, seconds - rounds_s))
        self.left = max(1, self.left - 1)


def _time_case(comp: Compressor, xs: Sequence[torch.Tensor], states: Sequence[State], suite: Suite,
               copy_into: Sequence[torch.Tensor] | None = None, budget: RunTimingBudget | None = None) -> dict[str, Any]:
    """Compress/decompress timing of one worker-step, interleaved with a copy of the same tensors (:func:`time_step`)
    into ``copy_into`` (the source's one destination); ``budget``: the run's timing budget, which caps its rounds."""
    m = suite.metrics
    device = xs[0].device if xs else torch.device("cpu")
    if budget is None:
        policy = TimingPolicy(warmup=m.warmup, min_rounds=m.timing_repeats, budget_s=m.timing_budget_s)
    else:
        policy = budget.policy(m)
    # the payloads the decompress decodes are made before the clock: on a cold numba cache this first call compiles
    # the compressor's kernels, a one-off cost that must not eat the run's timing budget for every later case
    payloads = [p for p, _ in comp.compress_group(xs, [s.clone() for s in states], need_decoded=False)]
    began = time.perf_counter()
    timed = time_step(comp, xs, states, policy, device, payloads=payloads, copy_into=copy_into)
    if budget is not None:
        budget.spend(time.perf_counter() - began, sum(timed.copy) + sum(sum(v) for v in timed.kernels.values()))
    return timing_summary(sum(x.numel() for x in xs), str(device), torch.get_num_threads(), timed, comp.info.traffic_bytes, policy)


def _case_record(spec: CompressorSpec, comp: Compressor, data: SourceData, suite: Suite, repeats: int, stats: StreamStats,
                 traffic: TrafficLog, timing: dict[str, Any] | None, windows: Sequence[Window],
                 step_phases: list[str | None], stream: dict[str, Any]) -> dict[str, Any]:
    """The case record: what was measured, and the summaries of its streams."""
    info = comp.info
    flags = comp.flags  # from the resolved parameters: TernGrad with clipping is biased
    rec: dict[str, Any] = {
        "label": spec.label,
        "compressor": info.name,
        "version": info.version,
        "params": dict(comp.params),
        "flags": flags.to_dict(),
        "source": data.source.describe(),
        "granularity": suite.granularity,
        "units": len(data.units),
        "workers": data.source.workers,
        "steps": data.source.steps,
        "status": "ok",
        "size": size_summary(data.numel, stats.bytes, traffic.mean_sent()),
        "fidelity": fidelity_summary(stats.fids, repeats, comp.reference_name(), unbiased=not flags.biased),
        "aggregate": aggregate_summary(stats),
        "traffic": traffic.summary(),
        "ef_drift": {"sum_drift": stats.drift, "residual_ratio": stats.residual} if comp.stateful else None,
        "stream": stream,
        "timing": timing,
        "layers": [unit_summary(u.name, u.numel, b, f) for u, b, f in zip(data.units, stats.bytes, stats.fids, strict=True)],
    }
    if windows:
        rec["windows"] = traffic.windows(windows)
    if any(p is not None for p in step_phases):
        rec["step_phases"] = step_phases
        rec["phases"] = case_phases(rec, phase_windows(step_phases))
    return rec


def _failed_record(spec: CompressorSpec, source_name: str, exc: BaseException, source_label: str | None = None) -> dict[str, Any]:
    error = str(exc) if isinstance(exc, GcbenchError) else f"{type(exc).__name__}: {exc}"
    rec: dict[str, Any] = {"label": spec.label, "compressor": spec.name, "params": spec.params, "status": "error",
                           "source": {"name": source_name, "label": source_label or source_name}, "error": error}
    try:
        info = registry.get(spec.name)
        rec["version"] = info.version
    except GcbenchError:
        pass
    if not isinstance(exc, GcbenchError):
        rec["traceback"] = traceback.format_exc()
    return rec


# ----------------------------------------------------------------------------- whole run


def _pool_source_timings(writer: RunWriter, indices: Sequence[int]) -> None:
    """Once a source's cases are done, hold their kernel times against the source's pooled copy (see
    :func:`gcbench.measure.copy_baseline.pool_copy_baseline`) and rewrite those cases."""
    recs = {i: writer.record.cases[i].to_json_dict() for i in indices if writer.record.cases[i].status == "ok"}
    timed = {i: r for i, r in recs.items() if r.get("timing")}
    if len(timed) < 2:
        return
    pool_copy_baseline([r["timing"] for r in timed.values()])
    writer.replace_cases(timed)


def _open_source(spec: SourceSpec, seed: int, suite: Suite, device: torch.device,
                 progress: Progress) -> tuple[GradientSource, SourceData, list[Window]]:
    """Build a suite's source and the data its cases read: cached once (open loop) or one case's own (closed loop)."""
    source = build_source(spec, seed, progress)
    units = make_units(source.layout(), suite.granularity, suite.bucket_mb)
    data = ClosedLoopData(source, units, device) if spec.loop == "closed" else SourceData(source, units, device, progress)
    return source, data, suite_windows(suite, source.steps)


@dataclass
class RunOutcome:
    """The results file of a run (None when no case was recorded: no file is written) and its case records."""

    path: Path | None
    records: list[dict[str, Any]]
    collectives: dict[str, Any] | None = None  # the suite's ``[collectives]`` sweep as stored (None: the suite has none)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("status") != "ok"]


def _run_collectives(suite: Suite, writer: RunWriter, progress: Progress) -> None:
    """The suite's ``[collectives]`` sweep after its cases, stored as the file's top-level ``collectives`` object.

    A compressor that cannot run under a scheme is recorded as ``{"error": ...}`` (the cases stand).
    The sweep's progress shows as its own ``sweep`` row, so the run's case count and ETA are untouched.
    """
    from gcbench.measure.collectives import default_compressors, run_sweep

    spec = suite.collectives
    assert spec is not None

    def shown(stage: str, done: int, total: int, message: str) -> None:
        if stage == "case":
            progress("sweep", done, total, f"collectives: {message}")

    try:
        sweep = run_sweep(spec.compressors or default_compressors(), workers=spec.workers, schemes=spec.schemes,
                          accumulate=spec.accumulate, numel=spec.numel, distribution=spec.distribution, draws=spec.draws,
                          seed=suite.seed, progress=shown)
        result: dict[str, Any] = sweep.to_dict()
    except GcbenchError as exc:
        result = {"error": str(exc)}
    with signals.deferred():
        setattr(writer.record, "collectives", result)  # noqa: B010 - an extra field of the record (kept by its schema)
        writer.flush()


def run_suite(suite: Suite, out_dir: Path | str = "reports/runs", progress: Progress | None = None, suite_path: str | None = None,
              kind: str = "run") -> RunOutcome:
    """Run every (source, compressor) case of ``suite``; the results file is kept current on disk.

    The file is created exclusively in ``out_dir`` when the first case is recorded (see
    :class:`gcbench.results.store.RunWriter`) and ends with status ``complete``, ``complete-with-errors``,
    ``interrupted`` (KeyboardInterrupt, SIGTERM under the CLI) or ``failed`` (an error outside any case).
    """
    progress = progress or no_progress
    device = resolve_device(suite.metrics.device)
    if suite.metrics.threads:
        torch.set_num_threads(suite.metrics.threads)
    writer = RunWriter(Path(out_dir), suite.to_dict(), suite.hash(), suite_path, str(device), kind=kind)
    # how far a timing moves between processes here, which compare's time interval adds: this machine's, where a
    # `gcbench bench --processes N` in out_dir measured it, else the built-in figure
    spread = (machine_spread(out_dir, writer.record.env.machine_key(), writer.record.env.device) or BUILT_IN).to_dict()
    total = len(suite.sources) * len(suite.compressors)
    done = 0
    status = "complete"
    # what each case will cost, roughly: its source's elements × workers × steps (the ETA weighs cases by it)
    budget = RunTimingBudget(suite.metrics.timing_run_budget_s, total * suite.metrics.timing_steps)
    plan = {"work": [source_work(s) for s in suite.sources], "build": [source_build_work(s) for s in suite.sources],
            "cases": [c.label for c in suite.compressors]}
    progress("plan", 0, total, json.dumps(plan))
    try:
        for s_idx, src_spec in enumerate(suite.sources):
            src_seed = derive_seed(suite.seed, "source", s_idx) if src_spec.kind != "trace" else suite.seed
            try:
                source, data, windows = _open_source(src_spec, src_seed, suite, device, progress)
            except SourceError as exc:
                for c in suite.compressors:
                    writer.add_case(_failed_record(c, src_spec.display(), exc, src_spec.display()))
                    done += 1
                    progress("case", done, total, f"{c.label}: source failed")
                continue
            source_cases: list[int] = []
            for c_idx, c in enumerate(suite.compressors):
                progress("case", done, total, f"{c.label} on {source.name}")
                try:
                    if data.loop == "closed" and c_idx > 0:  # every case its own model: same seed, same warm-up, own steps
                        source, data, windows = _open_source(src_spec, src_seed, suite, device, progress)
                    rec = run_case(c, data, suite, progress, windows, budget)
                    rec["source"]["label"] = src_spec.display()
                    if rec.get("timing"):
                        rec["timing"]["process_spread"] = spread
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # one failing case does not abort the sweep
                    rec = _failed_record(c, source.name, exc, src_spec.display())
                finally:  # the case's record holds numbers only: its model-sized buffers serve the next case
                    data.scratch.release()
                writer.add_case(rec)
                source_cases.append(len(writer.record.cases) - 1)
                done += 1
                progress("case", done, total, f"{c.label} done")
                if data.loop == "closed":
                    source.close()
            source.close()
            _pool_source_timings(writer, source_cases)
        if suite.collectives is not None:
            _run_collectives(suite, writer, progress)
    except KeyboardInterrupt:  # SIGINT, or SIGTERM through gcbench.core.signals: keep every completed case
        writer.finish("interrupted")
        raise
    except BaseException:  # a bug outside any one case: the file must not keep saying "running"
        writer.finish("failed")
        raise
    # the cases as written, serialised inside the write's held-signals section: a SIGTERM landing
    # in a serialisation after it would surface as a PydanticSerializationError, not an interrupt
    final = writer.finish(status if all(c.status == "ok" for c in writer.record.cases) else "complete-with-errors")
    return RunOutcome(writer.path, final["cases"], final.get("collectives"))  # JSON-ready, as `run --json` prints them
