"""``gcbench simulate``: every case of a results file predicted on a grid of cluster sizes and link speeds.

Turns measured payload sizes and kernel times (a ``gcbench run``/``compare`` results file, or a ``gcbench train``
file) into predicted step times: each case read as a :class:`CaseCost`, priced by ``scheme="auto"`` with the model of
``gcbench advise`` (:func:`gcbench.predict.step.price_step` on :meth:`CaseCost.cost`; the network in
:mod:`gcbench.predict.network`).  ``simulate``'s forced schemes are what-ifs: one ring all-reduce (``allreduce``) or
all-gather (``allgather``) of the payloads, or one parameter server (``ps``: the N uploads share the server's link,
it sends each worker the dense fp32 aggregate, or the sum in the wire format for ``summable`` formats), against a
dense ring all-reduce (``ps``: a dense server).  All functions are pure.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gcbench.compressors import registry
from gcbench.core.errors import ParamError, ResultsError, UnknownNameError
from gcbench.core.info import Protocol
from gcbench.predict.network import Network, parameter_server, payload_scale
from gcbench.predict.step import BASELINES, StepCost, bf16_step, price_step, reference_step
from gcbench.results.calibration import Cost, ring_allgather, ring_allreduce
from gcbench.results.parse import as_record
from gcbench.results.record import RunRecord
from gcbench.results.run_record import MeasureRecord, RunCase
from gcbench.results.train_record import StepTime, TrainCase, TrainRecord

SCHEMES = ("auto", "allreduce", "allgather", "ps")


@dataclass(frozen=True)
class CaseCost:
    """What the model needs from one measured case (per worker, per step, seconds and bytes)."""

    label: str
    compressor: str
    wire_bytes: float
    dense_bytes: float
    compute_s: float = 0.0
    compress_s: float = 0.0
    decompress_s: float = 0.0  # decoding ONE worker's payloads of a step
    source: str = ""
    copy_s: float = 0.0  # a copy of the same tensors measured beside the kernels (DDP's bucket copies); 0: not measured
    tensors: int = 1  # tensors one step compresses (TernGrad's shared scaler: one float each)
    params: tuple[tuple[str, Any], ...] = ()  # the configuration: the protocol can depend on it
    # the kernels' median ×copy: with ``copy_s``, what ``auto`` prices them by (the reference's copies and the kernels
    # from one copy, so an identity at 1× a copy is 1.0× however far its own rounds' copy drifted); None: the seconds
    compress_x_copy: float | None = None
    decompress_x_copy: float | None = None
    measured_workers: int = 1  # the workers whose exchange ``wire_bytes`` was measured in (1: compress alone)

    def kernel_seconds(self) -> tuple[float, float]:
        """(compress, decompress) seconds ``auto`` charges: ×copy × ``copy_s`` where both are known, else the raw seconds."""
        c = self.compress_x_copy * self.copy_s if self.compress_x_copy is not None and self.copy_s > 0 else self.compress_s
        d = self.decompress_x_copy * self.copy_s if self.decompress_x_copy is not None and self.copy_s > 0 else self.decompress_s
        return c, d

    def cost(self) -> StepCost:
        """The cost description ``auto`` prices (:func:`gcbench.predict.step.price_step`): the kernels as
        :meth:`kernel_seconds` charges them, the copy as measured."""
        comp_s, dec_s = self.kernel_seconds()
        return StepCost(self.label, self.compressor, self.wire_bytes, self.dense_bytes, self.compute_s, comp_s, dec_s,
                        self.copy_s, self.tensors, self.params, self.measured_workers)

    @property
    def protocol(self) -> Protocol:
        """The compressor's multi-worker protocol, from its card and configuration."""
        return registry.get(self.compressor).resolve_protocol(dict(self.params))


def check_scheme(scheme: str) -> None:
    """One :class:`ParamError` line for a scheme that is not one of :data:`SCHEMES`."""
    if scheme not in SCHEMES:
        raise ParamError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")


def collective_for(compressor: str, scheme: str = "auto") -> str:
    """``allreduce``, ``allgather`` or ``ps`` for a compressor under a scheme (see module docstring)."""
    check_scheme(scheme)
    if scheme != "auto":
        return scheme
    if registry.get(compressor).protocol.allreduce:
        return "allreduce"
    return "allgather"


def communication(case: CaseCost, n: int, scheme: str = "auto") -> tuple[Cost, int]:
    """(communication cost, decoded payloads per step) of one case on ``n`` workers under a forced single-collective
    scheme (``auto`` here is the card's all-reduce or all-gather; :func:`predict` prices ``auto`` by the protocol's legs)."""
    kind = collective_for(case.compressor, scheme)
    # summed payloads (all-reduce, a server's sum) at the width N of them need; all-gathered ones as one worker sends them
    summed = payload_scale(case.compressor, case.params, case.measured_workers, n) * case.wire_bytes
    if kind == "allreduce":
        rounds = case.protocol.allreduce_rounds or 1
        c = ring_allreduce(summed, n)
        return Cost(c.alphas * rounds, c.volume), 1
    if kind == "allgather":
        c = ring_allgather(payload_scale(case.compressor, case.params, case.measured_workers, 1) * case.wire_bytes, n)
        extra = case.protocol.scalar_allreduces
        if extra:
            c = c + Cost(extra * ring_allreduce(0.0, n).alphas, 0.0)
        return c, n
    compatible = case.protocol.summable
    down = summed if compatible else case.dense_bytes
    return parameter_server(summed if compatible else case.wire_bytes, down, n), n + (1 if compatible else 0)


def reference(case: CaseCost, n: int, scheme: str = "auto") -> Cost:
    """Communication of the uncompressed fp32 gradient: ring all-reduce, or a dense server for ``ps``."""
    if scheme == "ps":
        return parameter_server(case.dense_bytes, case.dense_bytes, n)
    return ring_allreduce(case.dense_bytes, n)


@dataclass(frozen=True)
class Prediction:
    """Predicted step of one case on one network and cluster size."""

    label: str
    source: str
    collective: str
    workers: int
    bandwidth_gbps: float
    latency_s: float
    compute_s: float
    compress_s: float
    communicate_s: float
    decompress_s: float
    step_s: float
    reference_step_s: float
    speedup: float
    bf16_step_s: float | None = None  # the same step with a bf16 all-reduce (:func:`bf16_of_case`)
    speedup_bf16: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def speedup_vs(self, baseline: str) -> float:
        """The speed-up over the ``baseline`` all-reduce (``bf16`` or ``fp32``; fp32 where bf16 was not priced)."""
        return self.speedup_bf16 if baseline == "bf16" and self.speedup_bf16 is not None else self.speedup


#: how :func:`bf16_of_case` prices the bf16 all-reduce when the source has no bf16 case
BF16_MODELLED = ("modelled: DDP's fp32 path with half the bytes all-reduced, each cast priced as the copy it replaces "
                 "(no bf16 case in the file; `-c bf16` in the run measures its casts)")
BF16_MEASURED = "measured: the file's bf16 case (its casts, timed with the others), all-reduce of half the bytes"


def bf16_of_case(case: CaseCost, n: int, net: Network, scheme: str = "auto",
                 bf16_case: CaseCost | None = None) -> tuple[float, str]:
    """(step, how it was priced) of ``case``'s training with an uncompressed bf16 all-reduce instead: the source's own
    ``bf16`` case predicted (``auto``, where the file has one), else the fp32 reference with half the bytes, each cast
    priced as the copy it replaces (``auto``, :func:`gcbench.predict.step.bf16_step`), or the forced scheme's dense
    reference of half the bytes."""
    if scheme == "auto":
        own = bf16_case.cost() if bf16_case is not None else None
        return bf16_step(case.cost(), n, net, own=own), BF16_MEASURED if bf16_case is not None else BF16_MODELLED
    half = CaseCost(case.label, case.compressor, case.wire_bytes, case.dense_bytes / 2, params=case.params)
    return case.compute_s + reference(half, n, scheme).seconds(net), "modelled: the dense reference with half the bytes"


def predict(case: CaseCost, n: int, net: Network, scheme: str = "auto", bf16_case: CaseCost | None = None,
            with_bf16: bool = False) -> Prediction:
    """Step time = compute + compress + communicate + decompress × decoded payloads; speed-up vs dense.

    ``auto`` is ``gcbench advise``'s model (:func:`gcbench.predict.step.price_step` on :meth:`CaseCost.cost`): the
    compressor's own protocol priced leg by leg, against DDP's uncompressed path (copy into buckets, all-reduce of fp32
    by ring or tree, copy back; the copies are the case's measured copy of the same tensors, whose place the
    compressor's encode and decode take).  The forced
    schemes (``allreduce``, ``allgather``, ``ps``) are what-ifs with one collective each against a dense ring
    all-reduce (``ps``: a dense parameter server).
    """
    if n < 1:
        raise ParamError(f"workers must be >= 1, got {n}")
    check_scheme(scheme)
    if scheme == "auto":
        cost = case.cost()
        priced = price_step(cost, n, net)
        comp_s, comm, dec, step, how = priced.compress_s, priced.communicate_s, priced.decompress_s, priced.step_s, priced.collective
        ref = reference_step(cost, n, net)[0]
    else:
        forced, decoded = communication(case, n, scheme)
        comp_s, comm, how = case.compress_s, forced.seconds(net), scheme
        dec = case.decompress_s * decoded
        step = case.compute_s + comp_s + comm + dec
        ref = case.compute_s + reference(case, n, scheme).seconds(net)
    bf16 = bf16_of_case(case, n, net, scheme, bf16_case)[0] if with_bf16 else None
    return Prediction(case.label, case.source, how, n, net.bandwidth_gbps, net.latency_s,
                      case.compute_s, comp_s, comm, dec, step, ref, ref / step if step > 0 else math.inf,
                      bf16, None if bf16 is None else (bf16 / step if step > 0 else math.inf))


def break_even_bandwidth(case: CaseCost, n: int, latency_s: float, scheme: str = "auto", baseline: str = "fp32",
                         bf16_case: CaseCost | None = None) -> float | None:
    """Bandwidth (Gbit/s) at which the compressed step equals the uncompressed one (the ``baseline`` all-reduce:
    fp32, or bf16 as :func:`bf16_of_case` prices it); None if it never does.

    Below it (slower links) compression wins, above it the dense all-reduce wins.  Found on the
    model itself (a log-spaced scan from 1 Mbit/s to 1 Pbit/s, then bisection), so it holds for
    every protocol and collective the model prices.
    """
    def pays(gbps: float) -> float:
        return predict(case, n, Network(gbps, latency_s), scheme, bf16_case, baseline == "bf16").speedup_vs(baseline) - 1.0

    grid = [10.0 ** (k / 8) for k in range(-24, 49)]
    values = [pays(b) for b in grid]
    for (lo, vlo), (hi, vhi) in itertools.pairwise(zip(grid, values, strict=True)):
        if vlo > 0 >= vhi:
            for _ in range(80):
                mid = math.sqrt(lo * hi)
                lo, hi = (mid, hi) if pays(mid) > 0 else (lo, mid)
            return math.sqrt(lo * hi)
    return None


# ----------------------------------------------------------------------------- results files


def cases_from_results(data: RunRecord | Mapping[str, Any], compute_s: float | None = None) -> list[CaseCost]:
    """Cost inputs of every successful case of a ``run``/``compare`` or ``train`` results record (or dict).

    ``run`` files carry no compute time: ``compute_s`` (default 0) is used.  ``train`` files use
    their measured compute time unless ``compute_s`` overrides it, and divide the measured
    decompress time by the payloads decoded per step (N in the training run).
    """
    out = []
    record = as_record(data)
    for c in record.cases if isinstance(record, MeasureRecord | TrainRecord) else []:
        if not c.ok:
            continue
        name = str(c.compressor or c.label)
        params = tuple(sorted((c.params or {}).items()))
        try:
            registry.get(name).resolve(dict(params))  # the protocol depends on them: a damaged value is the file's fault
        except (ParamError, UnknownNameError) as e:
            raise ResultsError(f"case {c.label!r} of the results file cannot be priced: {e}") from None
        if isinstance(c, TrainCase):
            tr = c.training
            if tr is None:
                continue
            st = tr.step_time or StepTime()
            wire = tr.bytes.payload_bytes_per_step if tr.bytes else None
            dense = tr.bytes.dense_bytes_per_step if tr.bytes else None
            if wire is None or dense is None:
                continue
            decoded = tr.decoded_payloads_per_step or 1
            out.append(CaseCost(c.label, name, float(wire), float(dense),
                                float(compute_s if compute_s is not None else st.compute_s or 0.0),
                                float(st.compress_s or 0.0), float(st.decompress_s or 0.0) / decoded,
                                (tr.task.name if tr.task else None) or "train", params=params,
                                measured_workers=int(tr.workers or 1)))
            continue
        wire, dense = (c.size.wire_bytes, c.size.dense_bytes) if c.size else (None, None)
        if wire is None or dense is None:
            continue
        src = c.source_label if c.source and (c.source.label or c.source.name) else ""
        t = c.timing
        copy_s = (t.pooled_copy_s or (t.copy_.median_s if t.copy_ is not None else None)) if t is not None else None
        xs = [t.x_copy(k) if t is not None else None for k in ("compress", "decompress")]
        xm = [float(x.median) if x is not None and x.median is not None and math.isfinite(x.median) and x.median > 0 else None
              for x in xs]
        measured = c.source.workers if isinstance(c, RunCase) and c.source is not None else None
        out.append(CaseCost(c.label, name, float(wire), float(dense), float(compute_s or 0.0),
                            float(c.metric("compress_s") or 0.0), float(c.metric("decompress_s") or 0.0), src,
                            float(copy_s or 0.0), len(c.layers or []) or 1, params, xm[0], xm[1], int(measured or 1)))
    if not out:
        raise ResultsError("the results file has no successful case with payload sizes to simulate")
    return out


def bf16_case_of(cases: Sequence[CaseCost], source: str) -> CaseCost | None:
    """The source's own ``bf16`` case (its casts measured beside the others), if the file has one."""
    return next((c for c in cases if c.source == source and c.compressor == "bf16"), None)


def simulate(cases: Sequence[CaseCost], workers: Iterable[int], bandwidths_gbps: Iterable[float], latency_s: float,
             scheme: str = "auto") -> list[Prediction]:
    """Predictions for every case × worker count × bandwidth, each against the fp32 and the bf16 all-reduce."""
    bws = list(bandwidths_gbps)
    ns = list(workers)
    return [predict(c, n, Network(b, latency_s), scheme, bf16_case_of(cases, c.source), True)
            for b in bws for c in cases for n in ns]


@dataclass(frozen=True)
class Simulation:
    """``gcbench simulate``: every case of one results file predicted on a grid of cluster sizes and link speeds."""

    results: str
    kind: str  # run, compare or train: where the compute time comes from
    scheme: str
    latency_s: float
    compute_s: float | None  # given by the user; None: measured (train) or 0 (run)
    workers: tuple[int, ...]
    bandwidths_gbps: tuple[float, ...]
    cases: tuple[CaseCost, ...]
    predictions: tuple[Prediction, ...]
    break_even_gbps: tuple[tuple[float | None, ...], ...]  # per case, per worker count, against the baseline
    baseline: str = "bf16"  # the uncompressed all-reduce speed-ups are claimed against (the other in brackets)
    bf16_priced: tuple[tuple[str, str], ...] = ()  # (source, how its bf16 all-reduce was priced)

    def prediction(self, case: CaseCost, n: int, bandwidth_gbps: float) -> Prediction:
        return next(p for p in self.predictions
                    if (p.label, p.source, p.workers, p.bandwidth_gbps) == (case.label, case.source, n, bandwidth_gbps))

    def to_dict(self) -> dict[str, Any]:
        return {"results": self.results, "scheme": self.scheme, "latency_s": self.latency_s, "baseline": self.baseline,
                "bf16_priced": dict(self.bf16_priced), "predictions": [p.to_dict() for p in self.predictions]}


def simulate_results(data: RunRecord | Mapping[str, Any], workers: Sequence[int], bandwidths_gbps: Sequence[float],
                     latency_s: float, scheme: str = "auto", compute_s: float | None = None, results: str = "",
                     baseline: str = "bf16") -> Simulation:
    """Predictions and break-even bandwidths of every successful case of a results file (see the module docstring),
    against the fp32 and the bf16 all-reduce; the break-even bandwidths against ``baseline``."""
    check_scheme(scheme)
    if baseline not in BASELINES:
        raise ParamError(f"baseline must be one of {', '.join(BASELINES)}, got {baseline!r}")
    record = as_record(data)
    cases = cases_from_results(record, compute_s)
    preds = simulate(cases, workers, bandwidths_gbps, latency_s, scheme)
    kind = record.kind
    even = tuple(tuple(break_even_bandwidth(c, n, latency_s, scheme, baseline, bf16_case_of(cases, c.source)) for n in workers)
                 for c in cases)
    sources = list(dict.fromkeys(c.source for c in cases))
    priced = tuple((src, bf16_of_case(next(c for c in cases if c.source == src), 1, Network(1.0, latency_s), scheme,
                                   bf16_case_of(cases, src))[1]) for src in sources)
    return Simulation(results, kind, scheme, latency_s, compute_s, tuple(workers), tuple(bandwidths_gbps), tuple(cases),
                      tuple(preds), even, baseline, priced)
