"""``gcbench advise``: which compressor makes a model's training faster on a given cluster, and at what fidelity cost.

One library call answers it: :func:`advise` takes an :class:`AdviseRequest` (the model or its bench file, the
clusters, the network, the evidence to rank with) and returns an :class:`gcbench.predict.advice_model.Advice`; the command,
the report and a notebook call it alike::

    from gcbench.predict.advise import AdviseRequest, advise
    answer = advise(AdviseRequest(model="resnet50", workers=(16,), bandwidths_gbps=(1.0, 10.0), compute_s=0.12))

Its inputs (the kernels, the compute time, the delivered fractions) are read or measured by
:mod:`gcbench.predict.inputs`.  The step of each compressor is ``compute + compress + communicate + decompress``,
priced by :func:`gcbench.predict.step.price_step` on the cost description of its kernels
(:meth:`gcbench.predict.step_kernels.StepKernels.cost`).  The uncompressed reference is DDP's own path: the
gradients copied into buckets, a ring all-reduce of the dense fp32 bytes, and copied back (the copy time is the
bench's, of the same tensors on the same device).  A compressor's compress replaces the copy in and its decode the
copy out, so the identity codec lands at the reference up to its own overhead over a copy, with no special case for
it.

Every kernel is priced as its ×copy (its time over the copy timed in the same rounds, which load
that comes and goes moves alike) times the one copy the reference is charged, never as the raw
seconds of its own bench case: the cases run minutes apart in their own processes, and a case that
ran while the machine was disturbed measured ``none`` at 0.13–0.63× the reference it is identical
to.  So the reference and ``none`` are priced from the same copy by construction: an identity whose
×copy is 1 is exactly 1.0×.

What is still flagged after re-measuring is named in the scenario's sentence
(:func:`gcbench.predict.advise_text.summary_line`): an answer users act on either repeats or says it may not.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gcbench.compressors import registry
from gcbench.core.errors import ResultsError
from gcbench.predict.accuracy import ConvergenceInput, mismatch_text, read_convergence, run_model, same_model
from gcbench.predict.advice_model import Advice, ComputeDrift, Delivered, Pricing, Scenario, Step, is_bf16
from gcbench.predict.compute_time import stored_compute
from gcbench.predict.inputs import (
    KERNEL_BUDGET_S,
    Candidates,
    Progress,
    default_candidates,
    delivered_from_results,
    find_convergence,
    step_inputs,
)
from gcbench.predict.network import Network, Topology
from gcbench.predict.step import BASELINES, bf16_step, price_step, reference_step
from gcbench.predict.step_kernels import KernelSet, StepKernels, kernels_from_bench, reference_copy
from gcbench.predict.time_to_accuracy import time_to_accuracy
from gcbench.results.calibration import Calibration, load_calibration
from gcbench.results.recommend import larger_than_bf16
from gcbench.results.record import RunRecord

#: how the bf16 all-reduce is priced when no bf16 kernels were measured
BF16_MODELLED = ("modelled: DDP's fp32 path with half the bytes all-reduced, each cast priced as the copy it replaces "
                 "(no bench of bf16; `-c bf16` measures its casts)")
#: … and when they were
BF16_MEASURED = "measured: the bf16 compressor's casts (×copy, timed with the others), all-reduce of half the bytes"


def predict_step(k: StepKernels, n: int, net: Network, compute_s: float, topo: Topology = Topology(),
                 overlap: bool = False, calibration: Calibration | None = None, copy_s: float | None = None) -> Step:
    """The compressor's step on ``n`` workers over ``net``: :func:`gcbench.predict.step.price_step` of its kernels'
    cost description, priced against ``copy_s`` (the reference's copy, :func:`reference_copy`; default: this case's
    own copy)."""
    p = price_step(k.cost(compute_s, copy_s), n, net, topo, overlap, calibration)
    return Step(k.label, k.compressor, p.collective, compute_s, p.compress_s, p.communicate_s, p.decompress_s, p.step_s,
                math.nan, None, k.flags, larger_than_bf16=larger_than_bf16(p.payload_bytes, k.dense_bytes),
                payload_bytes=p.payload_bytes)


def _is_identity(k: StepKernels) -> bool:
    """Whether ``k`` is the identity codec (``none``): the fp32 reference, priced as :func:`reference_step` in every row.
    Priced by its own ×copy instead, a ``none`` timed while the machine was disturbed (0.13-0.63× or 1.3× a copy) put the
    table's fp32 row at 1.22× the bf16 all-reduce that the sentence, pricing fp32 by DDP's copies, called faster."""
    return k.compressor in registry.names() and registry.get(k.compressor).identity


def bf16_of_kernels(kernels: Sequence[StepKernels], n: int, net: Network, compute_s: float, topo: Topology = Topology(),
                    overlap: bool = False, calibration: Calibration | None = None) -> tuple[float, str]:
    """(step, how it was priced) of training with a bf16 all-reduce (:func:`gcbench.predict.step.bf16_step`): the
    ``bf16`` compressor's own predicted step where its kernels were measured (its casts as ×copy, an all-reduce of half
    the bytes), else DDP's path with half the bytes all-reduced and each cast priced as one copy, said so
    (:data:`BF16_MODELLED`)."""
    copy_s = reference_copy(kernels)
    own = next((k for k in kernels if is_bf16(k)), None)
    step = bf16_step(kernels[0].cost(compute_s, copy_s), n, net, topo, overlap, calibration,
                     own.cost(compute_s, copy_s) if own is not None else None)
    return step, BF16_MEASURED if own is not None else BF16_MODELLED


def _scenario(kernels: KernelSet, compute_s: float, n: int, net: Network, topology: Topology, overlap: bool,
              calibration: Calibration | None, delivered: Mapping[str, Delivered] | None, baseline: str) -> tuple[Scenario, str]:
    """Every compressor of ``kernels`` on ``n`` workers over ``net``, ranked fastest first, and how bf16 was priced."""
    copy_s = reference_copy(kernels.kernels)
    ref_step, ref_comm = reference_step(kernels.kernels[0].cost(compute_s, copy_s), n, net, topology, overlap, calibration)
    bf16_s, bf16_origin = bf16_of_kernels(kernels.kernels, n, net, compute_s, topology, overlap, calibration)
    steps = []
    for k in kernels.kernels:
        s = predict_step(k, n, net, compute_s, topology, overlap, calibration, copy_s)
        if _is_identity(k):  # the fp32 reference itself: one price for it in the sentence, the line and the table
            s = dataclasses.replace(s, compress_s=copy_s, communicate_s=ref_comm, decompress_s=copy_s, step_s=ref_step)
        steps.append(dataclasses.replace(s, speedup=ref_step / s.step_s, speedup_bf16=bf16_s / s.step_s,
                                         delivered=delivered.get(k.label) if delivered is not None else None))
    steps.sort(key=lambda s: s.step_s)
    return Scenario(n, net.bandwidth_gbps, ref_step, ref_comm, tuple(steps), bf16_s, baseline), bf16_origin


def advise_kernels(kernels: KernelSet, compute_s: float, workers: Sequence[int], bandwidths_gbps: Sequence[float],
                   latency_s: float, *, compute_origin: str = "given", delivered: Mapping[str, Delivered] | None = None,
                   fidelity_origin: str | None = None, topology: Topology = Topology(), overlap: bool = False,
                   calibration: Calibration | None = None, compute_flags: Sequence[str] = (), baseline: str = "bf16",
                   convergence_origin: str | None = None, candidates: str = "",
                   compute_drift_s: tuple[float, float] | None = None) -> Advice:
    """Predict every compressor of ``kernels`` on every workers × bandwidth and rank them (see the module docstring);
    each step's speed-up over the fp32 and the bf16 all-reduce (:func:`bf16_of_kernels`), claims against ``baseline``.
    ``compute_drift_s``: the lowest and highest compute medians of a measurement that drifted; each cluster is also
    priced at both (:class:`ComputeDrift`)."""
    if baseline not in BASELINES:
        raise ResultsError(f"baseline must be one of {', '.join(BASELINES)}, got {baseline!r}")
    if not kernels.kernels:
        raise ResultsError(f"no compressor of {kernels.origin or 'the input'} has kernel times and payload sizes to predict with")
    scenarios, bf16_origin = [], ""
    for n in workers:
        for bw in bandwidths_gbps:
            def priced(c: float, n: int = n, bw: float = bw) -> tuple[Scenario, str]:
                return _scenario(kernels, c, n, Network(bw, latency_s), topology, overlap, calibration, delivered, baseline)

            sc, bf16_origin = priced(compute_s)
            if compute_drift_s is not None:  # the same cluster at each end of the drift: does the answer move with it?
                lo, hi = (priced(c)[0] for c in compute_drift_s)
                sc = dataclasses.replace(sc, drift=ComputeDrift(*compute_drift_s, lo.answer, hi.answer,
                                                                _claim_of(lo, sc.lead.label), _claim_of(hi, sc.lead.label)))
            scenarios.append(sc)
    return Advice(kernels.model, kernels, compute_s, compute_origin, latency_s, tuple(scenarios), fidelity_origin,
                  topology=topology, overlap=overlap, calibration=calibration, compute_flags=tuple(compute_flags),
                  baseline=baseline, bf16_origin=bf16_origin, convergence_origin=convergence_origin,
                  candidates=candidates, compute_drift_s=compute_drift_s)


def _claim_of(sc: Scenario, label: str) -> float:
    """The speed-up over the claims' baseline of the compressor ``label`` on the cluster ``sc``."""
    return sc.claim(next(s for s in sc.steps if s.label == label))


@dataclass(frozen=True)
class AdviseRequest:
    """What ``gcbench advise`` is asked, one field per option of the command (see its ``--help``)."""

    model: str | None = None  # a zoo name or a user model; None: the model of ``kernels_file`` or ``convergence_file``
    workers: tuple[int, ...] = (16,)
    bandwidths_gbps: tuple[float, ...] = (1.0, 10.0, 25.0, 100.0)
    latency_s: float = 5e-6
    topology: Topology = field(default_factory=Topology)
    overlap: bool = False
    compute_s: float | None = None  # one step's compute on the cluster's devices; None: measured here
    compressors: tuple[str, ...] = ()  # SPECs to weigh; (): the convergence file's and bf16, else the default candidates
    all_compressors: bool = False  # time every registered compressor (with no ``compressors``)
    budget_s: float = KERNEL_BUDGET_S
    kernels_file: Path | None = None  # a bench file of ``gcbench bench --model``: its kernels instead of measuring them
    rounds: int = 3
    remeasure: bool = False
    network_file: Path | None = None  # a network calibration: collectives priced as measured there
    baseline: str = "bf16"
    convergence_file: Path | None = None  # rank by time to its target; None: the newest of the model in ``runs_dir``
    results_file: Path | None = None  # a ``run``/``compare`` file whose delivered fractions rank fidelity
    runs_dir: Path = Path("reports/runs")
    out_dir: Path = Path("reports/runs")  # where a bench measured here is written
    device: str = "cpu"  # where compute and kernels are measured here (cpu, cuda, cuda:N); a --kernels file keeps its own


def _convergence(req: AdviseRequest) -> tuple[RunRecord | None, str | None, str | None]:
    """(the convergence record, how it is named, the model): the file given, read first (a file of another kind is one
    line before any measuring), else the newest of the model in the runs folder; the model is the one given, else the
    one the convergence run trained."""
    from gcbench.core.errors import GcbenchError
    from gcbench.results.converge_thin import thin_curves
    from gcbench.results.store import load_run

    record, named, model = None, None, req.model
    if req.convergence_file is not None:
        named = str(req.convergence_file)
        record = load_run(req.convergence_file, object_hook=thin_curves)  # advise reads summaries: the curves cut while decoded
        conv = read_convergence(record, model, named)
        if model is None and req.kernels_file is None:  # the model the convergence run trained
            model = run_model(conv)  # a file factory: the file the run recorded, from any folder
    if model is None and req.kernels_file is None:
        raise GcbenchError("give --model NAME (or --kernels FILE of `gcbench bench --model NAME`, or --convergence FILE)")
    if record is None and model is not None:  # the closed-loop evidence of this model already in the runs folder
        found = find_convergence(model, req.runs_dir)
        if found is not None:
            record = found[0]
            named = f"{found[1]} (the newest convergence file of {model} in {req.runs_dir}; --convergence FILE names another)"
    return record, named, model


def _specs(req: AdviseRequest, conv: RunRecord | None) -> tuple[list[str], bool, Candidates | None]:
    """(the SPECs to weigh, whether they were named — only those of a bench file are read —, the default candidates
    when none were): the request's, else the compressors the convergence run trained and bf16 (so the 16-bit baseline
    claims are made against is measured here, not modelled), else :func:`default_candidates` (``--all``: every one)."""
    if req.compressors:
        return list(req.compressors), True, None
    if conv is not None and not req.all_compressors:
        labels = [c.label for c in conv.cases if c.ok]
        for label in labels:
            registry.parse_spec(label)
        return list(dict.fromkeys([*labels, "bf16"])), True, None
    every = [n for n in registry.names() if registry.get(n).min_workers <= 1]
    candidates = Candidates(tuple(every), ()) if req.all_compressors else default_candidates(every)
    return list(candidates.specs), False, candidates


def _fidelity(req: AdviseRequest) -> tuple[RunRecord, str] | None:
    """The results file whose delivered fractions rank fidelity, read before minutes of measuring."""
    from gcbench.core.errors import GcbenchError
    from gcbench.results.store import load_run

    if req.results_file is None:
        return None
    record = load_run(req.results_file)
    if record.kind == "converge":
        raise GcbenchError(f"{req.results_file} is a convergence file: pass it with --convergence (RUN is a `run`/`compare` "
                           "file whose delivered fractions rank fidelity)")
    return record, str(req.results_file)


def advise(req: AdviseRequest, progress: Progress | None = None) -> Advice:
    """The answer to ``req``: its inputs read or measured (:func:`gcbench.predict.inputs.step_inputs`, ``progress``
    told of the measuring), every compressor predicted on every cluster and ranked (:func:`advise_kernels`) and, with a
    convergence file, each ranked by time to its target (:attr:`Advice.times`)."""
    from gcbench.core.errors import GcbenchError
    from gcbench.sources.catalog import check_model

    conv_record, conv_named, model = _convergence(req)
    calibration = load_calibration(req.network_file) if req.network_file is not None else None
    if calibration is not None and req.topology.gpus_per_node > 1:
        raise GcbenchError("--network prices a flat network as measured: leave out --gpus-per-node")
    if model is not None:
        check_model(model)
    specs, named, candidates = _specs(req, conv_record)
    fidelity = _fidelity(req)
    step = step_inputs(model, specs, req.out_dir, kernels_file=req.kernels_file, only=specs if named else None,
                       compute_s=req.compute_s, rounds=req.rounds, progress=progress, remeasure=req.remeasure,
                       budget_s=req.budget_s, device=req.device)
    delivered = delivered_from_results(fidelity[0], step.kernels.model, fidelity[1]) if fidelity else None
    advice = advise_kernels(step.kernels, step.compute_s, req.workers, req.bandwidths_gbps, req.latency_s,
                            compute_origin=step.compute_origin, delivered=delivered,
                            fidelity_origin=fidelity[1] if fidelity else None, topology=req.topology, overlap=req.overlap,
                            calibration=calibration, compute_flags=step.compute_flags, baseline=req.baseline,
                            compute_drift_s=step.compute_drift_s,
                            convergence_origin=conv_named,
                            candidates=candidates.text() if candidates is not None and req.kernels_file is None else "")
    if conv_record is None:
        return advice
    conv = read_convergence(conv_record, step.kernels.model, conv_named or "")
    return dataclasses.replace(advice, convergence=conv, times=tuple(time_to_accuracy(advice, conv)))


# ----------------------------------------------------------------------------- a convergence file priced on named clusters


def price_convergence(conv: ConvergenceInput, kernels: KernelSet, compute_s: float, clusters: Sequence[tuple[int, float]],
                      latency_s: float, *, compute_origin: str = "given", baseline: str = "bf16") -> Pricing:
    """:func:`gcbench.predict.time_to_accuracy.time_to_accuracy` on each (workers, Gbit/s) of ``clusters`` (not their
    cross product)."""
    if not same_model(conv.task, kernels.model, conv.task_path):
        raise ResultsError(mismatch_text(conv.origin, conv.task, conv.task_path, kernels.model,
                                         f"the model of the kernels ({kernels.origin})",
                                         "give --kernels of `gcbench bench --model {model}`"))
    parts = [advise_kernels(kernels, compute_s, [n], [bw], latency_s, compute_origin=compute_origin, baseline=baseline,
                            convergence_origin=conv.origin) for n, bw in clusters]
    adv = dataclasses.replace(parts[0], scenarios=tuple(sc for p in parts for sc in p.scenarios))
    times = tuple(time_to_accuracy(adv, conv))
    return Pricing(conv, dataclasses.replace(adv, convergence=conv, times=times), times)


def price_convergence_file(record: RunRecord, origin: str, bench: RunRecord, bench_origin: str,
                           clusters: Sequence[tuple[int, float]], latency_s: float, compute_s: float | None = None) -> Pricing:
    """A convergence file's steps priced on ``clusters`` with the kernels of a bench file of its model (``report
    --cluster``): the compute time ``compute_s``, else the one stored with the bench (a one-line error without one)."""
    from gcbench.core.errors import GcbenchError

    conv = read_convergence(record, None, origin)
    model = conv.task[4:] if conv.task.startswith("zoo:") else conv.task
    ks = kernels_from_bench(bench, model, bench_origin)
    if compute_s is not None:
        return price_convergence(conv, ks, compute_s, clusters, latency_s, compute_origin="given")
    stored = stored_compute(bench, ks.model)
    if stored is None:
        raise GcbenchError(f"{bench_origin} stores no compute time of {ks.model}: give --compute-ms for the cluster's devices")
    return price_convergence(conv, ks, stored.median_s, clusters, latency_s,
                             compute_origin="stored with the bench file: this machine's CPU; --compute-ms prices the cluster's")
