"""``gcbench advise``: which compressor makes a model's training faster on a given cluster, and at what fidelity cost.

Inputs, each measured apart from anything it predicts (nothing is fitted):

* **Kernels and bytes of one worker-step** on the model's own tensors, per compressor: the cases of
  ``gcbench bench --model NAME`` (an isolated process per compressor; compress of every tensor as
  a group, decode of all its payloads, and a copy of the same tensors), run here or read from a
  bench file measured elsewhere (``--kernels FILE``, e.g. ``gcbench bench --model resnet50 --device
  cuda --json`` on a GPU machine).  The device the kernels ran on is named in every output.
* **Compute time of one step**: given (``--compute-ms``: a GPU's, for a GPU cluster), or measured
  here — forward and backward of the zoo model at its default batch, median of steps after a warm-up
  — and then called this machine's.
* **Fidelity**: the fraction of the dense update a compressor delivers over a stream, from a
  ``run``/``compare`` results file with a source of the same model (``--results FILE``); without
  one the ranking says fidelity was not measured.

The step of each compressor is ``compute + compress + communicate + decompress`` with the
communication of its protocol from :mod:`gcbench.predict.network`.  The uncompressed reference
is DDP's own path: the gradients copied into buckets, a ring all-reduce of the dense fp32 bytes,
and copied back (the copy time is the bench's, of the same tensors on the same device).  A
compressor's compress replaces the copy in and its decode the copy out, so the identity codec
lands at the reference up to its own overhead over a copy, with no special case for it.

Every kernel is priced as its ×copy (its time over the copy timed in the same rounds, which load
that comes and goes moves alike) times the one copy the reference is charged, never as the raw
seconds of its own bench case: the cases run minutes apart in their own processes, and a case that
ran while the machine was disturbed measured ``none`` at 0.13–0.63× the reference it is identical
to.  So the reference and ``none`` are priced from the same copy by construction: an identity whose
×copy is 1 is exactly 1.0×.

Timings that cannot be trusted are re-measured once (compute when its rounds disagree or other
processes took the CPU, a compressor's kernels when bench flagged them), and what is still flagged
is named in the scenario's sentence (:func:`summary_line`): an answer users act on either repeats
or says it may not.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gcbench.compressors import registry
from gcbench.core.errors import ResultsError
from gcbench.predict.advise_text import ACCURACY_NOT_MEASURED, STEP_ONLY, summary_line
from gcbench.predict.advise_text import caveat as caveat  # the sentence's names stay importable from here
from gcbench.predict.compute_time import (  # the compute time's names stay importable from here
    COMPUTE_DRIFT as COMPUTE_DRIFT,
)
from gcbench.predict.compute_time import (
    COMPUTE_KEY,
    ComputeTiming,
    against_previous,
    combine_compute,
    measure_compute,
    store_compute,
    stored_compute,
)
from gcbench.predict.compute_time import (
    COMPUTE_POLICY as COMPUTE_POLICY,
)
from gcbench.predict.compute_time import (
    time_compute as time_compute,
)
from gcbench.predict.network import Calibration, Network, Topology, collective_seconds, protocol_seconds
from gcbench.predict.step_kernels import KernelSet, StepKernels, kernels_from_bench
from gcbench.predict.step_kernels import kernels_from_run as kernels_from_run  # importable from here, as before
from gcbench.predict.step_kernels import step_kernels_of as step_kernels_of
from gcbench.results.bench_cache import find_recent_bench
from gcbench.results.recommend import (
    DELIVERED_FLOOR,
    ClosedEvidence,
    ClosedLoop,
    case_point,  # one rule for which open-loop fractions judge a compressor
    larger_than_bf16,
)
from gcbench.results.record import RunCase, RunRecord

Progress = Callable[[str, int, int, str], None]


#: the most rounds a kernel of advise's bench takes: bench's own cap, still bounded by its 3 s budget per case.  At 15
#: rounds a small model's 0.05-0.2 ms kernels (mlp) could not pin their medians down on a quiet machine: 11 of 19
#: compressors stayed flagged after re-measuring and the answer was called untrustworthy on every run; 40 rounds of
#: them cost milliseconds, while a large model's rounds stop at the budget
ADVISE_MAX_ROUNDS = 40


#: the time advise's kernel measurement may take by default (``--budget``), the second timing of flagged kernels
#: included: a cold advise of the mlp benched 26 compressors for 546 s on a 2-core machine under load (3-7), every figure
#: flagged and re-timed; within this budget the rounds of each case get its share and a figure the budget stopped early
#: is flagged ``cut short``.  At 60 s a cold advise of the mlp with two busy processes beside other work (load 4-6) took
#: 120 s in all (the compute time, measured before and after the kernels, and the command's start are the rest)
KERNEL_BUDGET_S = 45.0


def measure_kernels(model: str, specs: Sequence[str], out_dir: Path | str, *, rounds: int = 3, threads: int = 2,
                    device: str = "cpu", progress: Progress | None = None, budget_s: float | None = KERNEL_BUDGET_S) -> KernelSet:
    """Run ``gcbench bench --model`` for ``specs`` here (one worker process for all of them) within ``budget_s`` and
    read its file; a compressor whose timing was flagged ``unstable`` is timed once more, while the budget lasts, and the
    less flagged of the two kept."""
    from gcbench.measure.bench import bench_to_file

    outcome = bench_to_file(specs, [], out_dir, repeats=rounds, warmup=1, threads=threads, device=device, model=model,
                            progress=progress, remeasure=True, max_rounds=ADVISE_MAX_ROUNDS, budget_s=budget_s,
                            shared_worker=True)
    failed = [c for c in outcome.record.cases if not c.ok]
    if failed:
        raise ResultsError(f"bench --model {model} failed for {', '.join(c.name for c in failed)}: {failed[0].error_text}")
    return kernels_from_bench(outcome.record, model, str(outcome.path))


def family_of(name: str) -> str:
    """The family of a registered compressor: the module that implements it (``gcbench.compressors.lowprec`` holds
    blockint, fp8, mxfp4, mxfp8 and nvfp4), as its card names it — the registry's own unit, so a new card joins its
    family without a list to update."""
    return registry.get(name).impl.partition(":")[0]


def baseline_names() -> list[str]:
    """The compressors every advise weighs: the identity (the fp32 reference, DDP's own path) and the bf16 cast (the
    16-bit baseline claims are made against, measured rather than modelled)."""
    return [n for n in registry.names() if registry.get(n).identity] + [n for n in registry.names() if n == "bf16"]


@dataclass(frozen=True)
class Candidates:
    """The compressors a cold advise times by default, and the registered ones it leaves out (``--all`` times them)."""

    specs: tuple[str, ...]
    left_out: tuple[str, ...]

    def text(self) -> str:
        """What was timed and why, for the output's header."""
        if not self.left_out:
            return f"compressors: all {len(self.specs)} registered (--all)"
        return (f"compressors: the baselines and, per family (the module implementing it), the member whose card declares "
                f"the least memory traffic per element: {len(self.specs)} of {len(self.specs) + len(self.left_out)} "
                f"(left out: {', '.join(self.left_out)}; --all times every one, -c names them)")


def default_candidates(names: Sequence[str]) -> Candidates:
    """Of ``names`` (registered compressors), the baselines (:func:`baseline_names`) and one member per other family
    (:func:`family_of`): the one whose card declares the least memory traffic per element of its compress (the cheapest
    kernel; ties to the first name).  A family that holds a baseline is represented by it (the casts: fp16 is bf16's
    twin).  Timing every registered compressor cost a cold advise 26 cases for the answer of about 17 families."""
    base = [n for n in baseline_names() if n in names]
    fams: dict[str, list[str]] = {}
    for n in names:
        fams.setdefault(family_of(n), []).append(n)
    keep = set(base)
    for members in fams.values():
        if not keep.intersection(members):
            keep.add(min(members, key=lambda n: (registry.get(n).traffic_bytes, n)))
    chosen = [*base, *(n for n in names if n in keep and n not in base)]
    return Candidates(tuple(chosen), tuple(n for n in names if n not in keep))


def select_kernels(kernels: KernelSet, compressors: Sequence[str]) -> KernelSet:
    """``kernels`` with only the step kernels of the compressors ``compressors`` names (SPECs: their names count)."""
    wanted = {registry.parse_spec(sp)[0] for sp in compressors}
    return dataclasses.replace(kernels, kernels=tuple(k for k in kernels.kernels if k.compressor in wanted))


@dataclass(frozen=True)
class StepInputs:
    """What :func:`advise` prices a step with: the kernels, the compute time, where that time comes from and its flags."""

    kernels: KernelSet
    compute_s: float
    compute_origin: str
    compute_flags: tuple[str, ...] = ()


def _age_text(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def step_inputs(model: str | None, specs: Sequence[str], out_dir: Path | str, *, kernels_file: Path | None = None,
                only: Sequence[str] | None = None, compute_s: float | None = None, rounds: int = 3,
                progress: Progress | None = None, remeasure: bool = False,
                budget_s: float | None = KERNEL_BUDGET_S) -> StepInputs:
    """The kernels and the compute time of :func:`advise`.

    The kernels are read from the bench file ``kernels_file`` (only those of the compressors ``only`` names, when
    given), else from a recent bench in ``out_dir`` of the same model, compressors, machine and gcbench version
    (:func:`gcbench.results.bench_cache.find_recent_bench`; not with ``remeasure``), else measured here for ``specs``
    on ``model`` within ``budget_s`` (:func:`measure_kernels`; the bench file goes to ``out_dir``).  The compute time
    is ``compute_s`` when given; else the one
    stored with a reused bench (measured with its kernels); else measured here: before and after the kernels when
    they are measured too, since two measurements a minute apart show a machine whose speed moved under the run
    (:func:`combine_compute`), and stored in the new bench file for the next call.
    """
    from gcbench.results.store import load_run

    before: ComputeTiming | None = None
    cached = None if kernels_file is not None or remeasure or model is None else find_recent_bench(model, specs, out_dir)
    stored: ComputeTiming | None = None
    if kernels_file is not None:
        ks = kernels_from_bench(load_run(kernels_file), model, str(kernels_file))
        if only is not None:
            ks = select_kernels(ks, only)
    elif cached is not None:
        record, path, age_s = cached
        ks = select_kernels(kernels_from_bench(record, model, f"{path}, reused: measured {_age_text(age_s)} ago by this gcbench "
                                                             "on this machine; --remeasure times them again"), specs)
        stored = stored_compute(record, ks.model)
    else:
        assert model is not None
        before = measure_compute(model, progress=progress) if compute_s is None else None
        ks = measure_kernels(model, specs, out_dir, rounds=rounds, progress=progress, budget_s=budget_s)
    if compute_s is not None:
        return StepInputs(ks, compute_s, "given")
    if stored is not None:
        return StepInputs(ks, stored.median_s, f"measured on this machine's CPU with the reused kernels, median of "
                          f"{len(stored.samples)} steps; give --compute-ms for the cluster's devices", stored.reasons)
    ct = measure_compute(ks.model, progress=progress)
    if before is not None:
        ct = combine_compute(before, ct)
        store_compute(Path(ks.origin), ks.model, ct)
    if model is not None and kernels_file is None:  # a fresh measurement: does it agree with the last one stored here?
        last = find_recent_bench(model, [], out_dir, stored=COMPUTE_KEY, skip=Path(ks.origin) if before is not None else None)
        if last is not None:
            ct = against_previous(ct, stored_compute(last[0], model), f"the bench of {_age_text(last[2])} ago ({last[1]})")
    origin = (f"measured on this machine's CPU, median of {len(ct.samples)} steps"
              + (f" in {ct.attempts} measurements" if ct.attempts > 1 else "")
              + "; give --compute-ms for the cluster's devices")
    return StepInputs(ks, ct.median_s, origin, ct.reasons)


def find_convergence(model: str, runs_dir: Path | str) -> tuple[RunRecord, Path] | None:
    """The newest convergence file (``gcbench converge``) in ``runs_dir`` of ``model`` (a zoo model is recorded as
    ``zoo:NAME``), or None: the closed-loop evidence a recommendation is held to when none was named.  Only files whose
    head says ``converge`` are parsed: a runs folder holds hundreds of run and bench files."""
    from gcbench.core.errors import GcbenchError
    from gcbench.predict.time_to_accuracy import read_convergence
    from gcbench.results.store import list_runs, load_run

    for path in reversed(list_runs(runs_dir)):
        try:
            with path.open(encoding="utf-8") as fh:
                if '"converge"' not in fh.read(4096):
                    continue
            record = load_run(path)
            read_convergence(record, model, str(path))
        except (OSError, UnicodeDecodeError, GcbenchError):
            continue  # unreadable, another kind or another model: not this model's evidence
        return record, path
    return None


def closed_evidence(record: RunRecord, model: str, origin: str, labels: Sequence[str]) -> ClosedEvidence:
    """The outcomes of a convergence file of ``model`` for the case ``labels`` (matched by configuration:
    ``topk:error_feedback=true`` as typed and ``=True`` as a file labels it are one), for
    :func:`gcbench.results.recommend.recommend`.  A file of another model is refused in one line."""
    from gcbench.predict.time_to_accuracy import read_convergence

    conv = read_convergence(record, model, origin)
    outcomes = {}
    for label in labels:
        o = conv.get(label)
        if o is not None:
            outcomes[label] = ClosedLoop(o.status, o.reached, o.seeds, o.steps.mean if o.steps else None,
                                         o.final.mean if o.final else None)
    ref = next((o for o in conv.outcomes if o.reference), None)
    return ClosedEvidence(f"{origin}: {conv.task}, {conv.seeds} seeds", conv.target_text, conv.budget,
                          ref.steps.mean if ref is not None and ref.steps is not None else None, outcomes)


@dataclass(frozen=True)
class Delivered:
    """A compressor's delivered fraction of the dense update over a stream (with its CI over workers), from a results file."""

    value: float
    ci_lo: float | None
    ci_hi: float | None
    steps: int | None
    # False: an error-feedback compressor on a stream shorter than its residual needs to drain (recommend.Point.judged),
    # whose fraction is no verdict on it: never "under the floor", named as not judged
    judged: bool = True
    drain: int | None = None  # the steps its residual needs to drain, where its configuration says (1/density)


def delivered_from_results(record: RunRecord, model: str, origin: str = "") -> dict[str, Delivered]:
    """Per case label, the delivered fraction on the one source of ``record`` that ran ``model`` (sources are never mixed)."""
    cases = [c for c in record.cases if isinstance(c, RunCase) and c.ok]
    labels = sorted({c.source_label for c in cases if c.source is not None and c.source.model == model})
    if not labels:
        raise ResultsError(f"{origin or 'the results file'} has no source of model {model}")
    if len(labels) > 1:
        raise ResultsError(f"{origin or 'the results file'} has {len(labels)} sources of {model} ({', '.join(labels)}); "
                           "keep one per file")
    out = {}
    for c in cases:
        if c.source_label != labels[0]:
            continue
        v = c.metric("delivered")
        if v is None:
            continue
        st = c.stream
        ci = st.worker_ci if st is not None else None
        p = case_point(c)
        out[c.label] = Delivered(float(v), ci.lo if ci else None, ci.hi if ci else None, st.steps if st is not None else None,
                                 p.judged if p is not None else True, p.drain if p is not None else None)
    return out


@dataclass(frozen=True)
class Step:
    """One compressor's predicted step on one cluster (seconds)."""

    label: str
    compressor: str
    collective: str
    compute_s: float
    compress_s: float
    communicate_s: float
    decompress_s: float
    step_s: float
    speedup: float  # the reference step over this one: above 1 compression pays
    delivered: Delivered | None = None
    flags: tuple[str, ...] = ()
    speedup_bf16: float | None = None  # the bf16 all-reduce's step over this one (:attr:`Scenario.bf16_step_s`)
    larger_than_bf16: bool = False  # one worker's payload is larger than the bf16 cast's
    payload_bytes: float | None = None  # one worker's payload of the step on this cluster's workers (THC's widen with N)

    def speedup_vs(self, baseline: str) -> float:
        """The speed-up over the ``baseline`` all-reduce (``bf16`` or ``fp32``; fp32 where bf16 was not priced)."""
        return self.speedup_bf16 if baseline == "bf16" and self.speedup_bf16 is not None else self.speedup


@dataclass(frozen=True)
class Scenario:
    """Every compressor on one cluster: workers × bandwidth, the reference step, the steps ranked fastest first."""

    workers: int
    bandwidth_gbps: float
    reference_step_s: float
    reference_communicate_s: float
    steps: tuple[Step, ...]
    bf16_step_s: float | None = None  # the bf16 all-reduce's step (:func:`bf16_step`)
    baseline: str = "bf16"  # the reference claims are made against (:data:`BASELINES`)

    @property
    def claim_baseline(self) -> str:
        """The baseline the claims are made against: :attr:`baseline`, fp32 where bf16 was not priced."""
        return self.baseline if self.baseline == "fp32" or self.bf16_step_s is not None else "fp32"

    @property
    def baseline_step_s(self) -> float:
        """The step of :attr:`claim_baseline`."""
        return self.bf16_step_s if self.claim_baseline == "bf16" and self.bf16_step_s is not None else self.reference_step_s

    def claim(self, s: Step) -> float:
        """``s``'s speed-up over :attr:`claim_baseline`."""
        return s.speedup_vs(self.claim_baseline)

    @property
    def paying(self) -> list[Step]:
        """The compressors faster than the claims' baseline all-reduce (bf16 by default), fastest first."""
        return [s for s in self.steps if self.claim(s) > 1.0]

    @property
    def recommendable(self) -> list[Step]:
        """The paying compressors that deliver at least :data:`DELIVERED_FLOOR` of the dense update, were not measured, or
        whose fraction is no verdict on them (:attr:`not_judged`)."""
        return [s for s in self.paying if s.delivered is None or not s.delivered.judged or s.delivered.value >= DELIVERED_FLOOR]

    @property
    def below_floor(self) -> list[Step]:
        """The paying compressors whose measured delivered fraction is under :data:`DELIVERED_FLOOR`: never recommended."""
        return [s for s in self.paying if s.delivered is not None and s.delivered.judged and s.delivered.value < DELIVERED_FLOOR]

    @property
    def not_judged(self) -> list[Step]:
        """The paying error-feedback compressors under the floor on a stream shorter than their residual needs to drain:
        their open-loop fraction is no verdict (they send the rest later), so neither rejected nor vouched for."""
        return [s for s in self.paying if s.delivered is not None and not s.delivered.judged and s.delivered.value < DELIVERED_FLOOR]


@dataclass(frozen=True)
class Advice:
    """The answer of ``gcbench advise``: scenarios and the inputs they came from."""

    model: str
    kernels: KernelSet
    compute_s: float
    compute_origin: str  # "given" or "measured on this machine (…)"
    latency_s: float
    scenarios: tuple[Scenario, ...]
    fidelity_origin: str | None = None
    topology: Topology = field(default_factory=Topology)
    overlap: bool = False
    calibration: Calibration | None = None  # collectives priced as measured on the network (else the α–β model)
    compute_flags: tuple[str, ...] = ()  # what was wrong with the measured compute time, after its re-measurement
    baseline: str = "bf16"  # the all-reduce claims are made against (:data:`BASELINES`)
    bf16_origin: str = ""  # how the bf16 all-reduce was priced (:func:`bf16_step`)
    convergence_origin: str | None = None  # the convergence file time to accuracy was ranked with (else accuracy unmeasured)
    candidates: str = ""  # which compressors were timed and why (:meth:`Candidates.text`; "" when the user named them)

    def untrusted(self) -> list[str]:
        """The flagged timings every scenario's answer rests on, by name: the compute time, and any compressor's kernels
        (a flagged kernel could move a compressor above or below the one named best).  :meth:`untrusted_reasons` says why."""
        out = list(dict.fromkeys(f"compute per step ({r.split(':')[0]})" for r in self.compute_flags))
        out += [f"{k.label} ({', '.join(k.flags)})" for k in self.kernels.kernels if k.flags]
        return out

    def untrusted_reasons(self) -> list[str]:
        """Each flagged timing of :meth:`untrusted` with what triggered its flags (measured values and thresholds)."""
        out = [f"compute per step — {r}" for r in self.compute_flags]
        out += [f"{k.label} — {'; '.join(k.reasons) if k.reasons else ', '.join(k.flags)}" for k in self.kernels.kernels if k.flags]
        return out

    def untrusted_for(self, sc: Scenario) -> list[str]:
        """The flagged timings one scenario's sentence rests on: the compute time, and the kernels of the compressors it
        names (the best and the next two that pay) or that come within :data:`CONTENDER_MARGIN` of the best, which a
        flagged kernel could move above it.  A flagged kernel of a compressor far behind changes no answer: calling
        every sentence untrustworthy for it made the caveat ride on nearly every quiet run (one of 19 kernels just over
        ±10% is common on this 2-core machine)."""
        ranked = list(sc.recommendable) or list(sc.paying) or list(sc.steps)
        if not ranked:
            return self.untrusted()
        lead = ranked[0].speedup
        relevant = {s.label for s in ranked[:3]} | {s.label for s in sc.steps if s.speedup * CONTENDER_MARGIN >= lead}
        if self.bf16_origin.startswith("measured"):  # the bf16 kernels price the baseline every claim is made against
            relevant |= {k.label for k in self.kernels.kernels if _is_bf16(k)}
        out = list(dict.fromkeys(f"compute per step ({r.split(':')[0]})" for r in self.compute_flags))
        out += [f"{k.label} ({', '.join(k.flags)})" for k in self.kernels.kernels if k.flags and k.label in relevant]
        return out

    def compute_note(self) -> str:
        """The clause a sentence carries when compute was timed on this machine rather than given for the cluster."""
        if self.compute_origin == "given":
            return ""
        return f" (compute: this machine's {1e3 * self.compute_s:.1f} ms a step; --compute-ms prices the cluster's devices)"

    def summary_for(self, sc: Scenario) -> str:
        """:func:`summary_line` of one scenario, with the caveat when the timings behind it were flagged and the clause
        saying accuracy was not measured, or, with a convergence file, that it ranks by step time alone (its fastest step
        is no "best": the time-to-accuracy sentence is the answer)."""
        acc = STEP_ONLY if self.convergence_origin else ACCURACY_NOT_MEASURED
        return summary_line(sc, self.untrusted_for(sc), self.compute_note(), acc)

    def summaries(self) -> list[str]:
        """:meth:`summary_for` every scenario."""
        return [self.summary_for(sc) for sc in self.scenarios]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kernels"]["kernels"] = [asdict(k) for k in self.kernels.kernels]
        d["untrusted"] = self.untrusted()
        d["untrusted_reasons"] = self.untrusted_reasons()
        d["summaries"] = self.summaries()
        return d


#: the share of a step's compute that is the backward pass, which DDP overlaps with communication (backward costs
#: about twice the forward pass)
BACKWARD_SHARE = 2 / 3
#: DDP's bucket size: the last bucket's communication starts only when the backward pass has ended
BUCKET_BYTES = 25 * 2**20


def exposed(comm_s: float, compute_s: float, dense_bytes: float, overlap: bool) -> float:
    """The communication a step waits for: all of it, or with ``overlap`` what the backward pass does not hide —
    at least the last bucket's share (DDP starts a bucket's exchange as soon as its gradients are ready)."""
    if not overlap:
        return comm_s
    buckets = max(1, math.ceil(dense_bytes / BUCKET_BYTES))
    return max(comm_s / buckets, comm_s - BACKWARD_SHARE * compute_s)


def reference_copy(kernels: Sequence[StepKernels]) -> float:
    """The copy of the step's tensors DDP's bucket copies are charged and every ×copy is priced against: the fastest
    of the kernels' copies (load only ever slows a copy down: a case timed while the machine stalled measured its copy
    at 4 ms against 0.12)."""
    return min(k.copy_s for k in kernels)


def predict_step(k: StepKernels, n: int, net: Network, compute_s: float, topo: Topology = Topology(),
                 overlap: bool = False, calibration: Calibration | None = None, copy_s: float | None = None) -> Step:
    """The compressor's step on ``n`` workers over ``net``: compute + compress + its protocol + decode of what it receives.

    The kernels are priced by :meth:`StepKernels.priced` against ``copy_s`` (the reference's copy,
    :func:`reference_copy`; default: this case's own copy).
    """
    protocol = registry.get(k.compressor).resolve_protocol(dict(k.params))
    scale = protocol.payload_scale(registry.get(k.compressor).resolve(dict(k.params)), k.measured_workers, n)
    comm, decodes, algos = protocol_seconds(protocol, k.wire_bytes, n, net, topo, k.tensors, calibration, scale)
    comp_s, dec_one = k.priced(k.copy_s if copy_s is None else copy_s)
    dec = dec_one * max(1, decodes)
    wait = exposed(comm, compute_s, k.dense_bytes, overlap)
    step = compute_s + comp_s + wait + dec
    payload = k.wire_bytes * scale
    return Step(k.label, k.compressor, algos, compute_s, comp_s, wait, dec, step, math.nan, None, k.flags,
                larger_than_bf16=larger_than_bf16(payload, k.dense_bytes), payload_bytes=payload)


def reference_step(kernels: Sequence[StepKernels], n: int, net: Network, compute_s: float, topo: Topology = Topology(),
                   overlap: bool = False, calibration: Calibration | None = None) -> tuple[float, float]:
    """(step, communication waited for) of uncompressed training: DDP's own path — the gradients copied into
    buckets (:func:`reference_copy`), an all-reduce of the fp32 bytes (ring or tree, whichever is faster), copied
    back.  The same copy prices every compressor's kernels (:func:`predict_step`), so an identity codec whose ×copy
    is 1 and that all-reduces the dense bytes is this step exactly."""
    dense = kernels[0].dense_bytes
    copy_s = reference_copy(kernels)
    comm, _ = collective_seconds("allreduce", dense, n, net, topo, calibration)
    wait = exposed(comm, compute_s, dense, overlap)
    return compute_s + copy_s + wait + copy_s, wait  # predict_step's order of terms: an identity is 1.0 to the last bit


#: the all-reduce a compressor's speed-up is claimed against: ``bf16`` (the default: mixed-precision training's own
#: baseline; Han et al. 2024 show claims against fp32 overstate what compression buys) or ``fp32``
BASELINES = ("bf16", "fp32")

#: how the bf16 all-reduce is priced when no bf16 kernels were measured
BF16_MODELLED = ("modelled: DDP's fp32 path with half the bytes all-reduced, each cast priced as the copy it replaces "
                 "(no bench of bf16; `-c bf16` measures its casts)")


def _is_bf16(k: StepKernels) -> bool:
    return k.compressor == "bf16" and not k.params


def _is_identity(k: StepKernels) -> bool:
    """Whether ``k`` is the identity codec (``none``): the fp32 reference, priced as :func:`reference_step` in every row.
    Priced by its own ×copy instead, a ``none`` timed while the machine was disturbed (0.13-0.63× or 1.3× a copy) put the
    table's fp32 row at 1.22× the bf16 all-reduce that the sentence, pricing fp32 by DDP's copies, called faster."""
    return k.compressor in registry.names() and registry.get(k.compressor).identity


def bf16_step(kernels: Sequence[StepKernels], n: int, net: Network, compute_s: float, topo: Topology = Topology(),
              overlap: bool = False, calibration: Calibration | None = None) -> tuple[float, str]:
    """(step, how it was priced) of training with a bf16 all-reduce: the ``bf16`` compressor's own predicted step
    where its kernels were measured (its casts as ×copy, an all-reduce of half the bytes), else DDP's path
    (:func:`reference_step`) with half the bytes all-reduced and each cast priced as one copy — a cast reads the fp32
    gradient and writes half its bytes, no more traffic than the copy it replaces; said so (:data:`BF16_MODELLED`)."""
    own = next((k for k in kernels if _is_bf16(k)), None)
    if own is not None:
        return predict_step(own, n, net, compute_s, topo, overlap, calibration, reference_copy(kernels)).step_s, \
            "measured: the bf16 compressor's casts (×copy, timed with the others), all-reduce of half the bytes"
    dense = kernels[0].dense_bytes / 2
    copy_s = reference_copy(kernels)
    comm, _ = collective_seconds("allreduce", dense, n, net, topo, calibration)
    return compute_s + copy_s + exposed(comm, compute_s, kernels[0].dense_bytes, overlap) + copy_s, BF16_MODELLED


def advise(kernels: KernelSet, compute_s: float, workers: Sequence[int], bandwidths_gbps: Sequence[float], latency_s: float, *,
           compute_origin: str = "given", delivered: Mapping[str, Delivered] | None = None,
           fidelity_origin: str | None = None, topology: Topology = Topology(), overlap: bool = False,
           calibration: Calibration | None = None, compute_flags: Sequence[str] = (), baseline: str = "bf16",
           convergence_origin: str | None = None, candidates: str = "") -> Advice:
    """Predict every compressor of ``kernels`` on every workers × bandwidth and rank them (see the module docstring);
    each step's speed-up over the fp32 and the bf16 all-reduce (:func:`bf16_step`), claims against ``baseline``."""
    if baseline not in BASELINES:
        raise ResultsError(f"baseline must be one of {', '.join(BASELINES)}, got {baseline!r}")
    if not kernels.kernels:
        raise ResultsError(f"no compressor of {kernels.origin or 'the input'} has kernel times and payload sizes to predict with")
    scenarios = []
    for n in workers:
        for bw in bandwidths_gbps:
            net = Network(bw, latency_s)
            ref_step, ref_comm = reference_step(kernels.kernels, n, net, compute_s, topology, overlap, calibration)
            bf16_s, bf16_origin = bf16_step(kernels.kernels, n, net, compute_s, topology, overlap, calibration)
            copy_s = reference_copy(kernels.kernels)
            steps = []
            for k in kernels.kernels:
                s = predict_step(k, n, net, compute_s, topology, overlap, calibration, copy_s)
                if _is_identity(k):  # the fp32 reference itself: one price for it in the sentence, the line and the table
                    s = dataclasses.replace(s, compress_s=copy_s, communicate_s=ref_comm, decompress_s=copy_s, step_s=ref_step)
                steps.append(dataclasses.replace(s, speedup=ref_step / s.step_s, speedup_bf16=bf16_s / s.step_s,
                                                 delivered=delivered.get(k.label) if delivered is not None else None))
            steps.sort(key=lambda s: s.step_s)
            scenarios.append(Scenario(n, bw, ref_step, ref_comm, tuple(steps), bf16_s, baseline))
    return Advice(kernels.model, kernels, compute_s, compute_origin, latency_s, tuple(scenarios), fidelity_origin,
                  topology=topology, overlap=overlap, calibration=calibration, compute_flags=tuple(compute_flags),
                  baseline=baseline, bf16_origin=bf16_origin if scenarios else "", convergence_origin=convergence_origin,
                  candidates=candidates)


#: a compressor whose predicted speed-up is within this factor of the best one's could be moved above it by a flagged
#: kernel (a flag means the median's 95% CI is wider than ±10%), so its flags put the answer in doubt
CONTENDER_MARGIN = 1.25
