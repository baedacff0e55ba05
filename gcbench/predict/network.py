"""Network cost model: predicted step time and speed-up of compressed gradient exchange at scale.

Turns measured payload sizes and kernel times (a ``gcbench run``/``compare`` results file, or a
``gcbench train`` file) into predicted step times for clusters of any size, with the latency–
bandwidth (α–β, Hockney) model used for collectives by Thakur, Rabenseifner & Gropp 2005
("Optimization of Collective Communication Operations in MPICH") and, for gradient compression,
by Agarwal et al. 2022 ("On the Utility of Gradient Compression in Distributed Training Systems").
A message of m bytes over one link costs ``α + m/B``; every worker has one full-duplex link of
bandwidth B (Gbit/s, 1 Gbit = 10⁹ bit) and all links work in parallel.

Collectives (N workers; M = dense bytes, m = one worker's payload bytes):

* all-reduce: ring ``2(N−1)·α + 2(N−1)/N · M/B`` or pipelined double binary tree
  ``2⌈log₂N⌉·α + 2·M/B``, whichever is faster (as NCCL picks);
* ring all-gather of per-worker payloads: ``(N−1)·α + (N−1)·m/B`` (grows with N);
* pairwise all-to-all of m cut into N parts: ``(N−1)·α + (N−1)/N · m/B``;
* with several GPUs per node (:class:`Topology`) the collectives are hierarchical;
* with a :class:`~gcbench.results.calibration.Calibration` (``python -m gcbench.distributed.calibrate`` on the target network)
  each collective it measured is priced as measured: framing and the backend's own algorithms
  included.

A compressor's protocol is read from its card (:attr:`gcbench.core.info.Protocol.cost`, never from
its name): the legs its :meth:`worker_protocol` runs, each one collective over the bytes its size
rule gives (:func:`protocol_seconds`).  Step time: ``compute + compress + communicate + decompress ×
decoded payloads``.  The uncompressed reference is DDP's own path: the gradients copied into
buckets, an fp32 all-reduce, copied back; a compressor's encode and decode take the place of those
copies, so an identity codec whose kernels cost one copy each predicts exactly 1.0×.  This is the
model of ``gcbench advise`` (:mod:`gcbench.predict.advise`) and of ``gcbench simulate``
(``scheme="auto"``).  ``simulate``'s forced schemes are what-ifs: one ring all-reduce
(``allreduce``) or all-gather (``allgather``) of the payloads, or one parameter server (``ps``: the
N uploads share the server's link, it sends each worker the dense fp32 aggregate, or the sum in
the wire format for ``summable`` formats), against a dense ring all-reduce (``ps``: a dense
server).  Overlap of communication with the backward pass is an option of ``advise``.  All
functions are pure.
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
from gcbench.results.calibration import Calibration, Cost, pairwise_alltoall, ring_allgather, ring_allreduce
from gcbench.results.parse import as_record
from gcbench.results.record import RunRecord
from gcbench.results.run_record import MeasureRecord, RunCase
from gcbench.results.train_record import StepTime, TrainCase, TrainRecord

SCHEMES = ("auto", "allreduce", "allgather", "ps")


@dataclass(frozen=True)
class Network:
    """One full-duplex link per worker: bandwidth in Gbit/s, latency α per message in seconds."""

    bandwidth_gbps: float
    latency_s: float

    def __post_init__(self) -> None:
        # NaN and inf fail these too: an infinite link or latency predicts nothing
        if not 0 < self.bandwidth_gbps < math.inf:
            raise ParamError(f"bandwidth must be a finite number > 0 Gbit/s, got {self.bandwidth_gbps}")
        if not 0 <= self.latency_s < math.inf:
            raise ParamError(f"latency must be a finite number >= 0 s, got {self.latency_s}")

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9 / 8


def latency_seconds(latency_us: float, option: str = "latency_us") -> float:
    """A latency α given in microseconds (``--latency-us``) in seconds; NaN, inf or below 0 is a ParamError naming ``option``."""
    if not 0 <= latency_us < math.inf:  # NaN fails this too
        raise ParamError(f"{option} must be a finite number >= 0, got {latency_us:g}")
    return latency_us * 1e-6


def compute_seconds(compute_ms: float | None, option: str = "compute_ms") -> float | None:
    """A step's compute time given in milliseconds (``--compute-ms``) in seconds (None: not given); NaN, inf or below 0
    is a ParamError naming ``option``."""
    if compute_ms is None:
        return None
    if not 0 <= compute_ms < math.inf:
        raise ParamError(f"{option} must be a finite number >= 0, got {compute_ms:g}")
    return compute_ms / 1e3


def parameter_server(up_bytes: float, down_bytes: float, n: int) -> Cost:
    """One server: n uploads and n downloads through the server's link, one round each way."""
    if n <= 1:
        return Cost(0.0, 0.0)
    return Cost(2.0, n * float(up_bytes) + n * float(down_bytes))


def tree_allreduce(nbytes: float, n: int) -> Cost:
    """Pipelined double binary tree all-reduce (NCCL's tree): 2·⌈log₂ n⌉ rounds, each link carries the buffer twice.

    Fewer latency rounds than the ring (log n against n), the same order of bytes: what large
    clusters use for small and medium buffers.
    """
    if n <= 1:
        return Cost(0.0, 0.0)
    return Cost(2.0 * math.ceil(math.log2(n)), 2.0 * float(nbytes))


@dataclass(frozen=True)
class Topology:
    """Workers grouped in nodes: ``gpus_per_node`` workers share a node's link to the others (the network's bandwidth)
    and talk among themselves over ``intra_gbps`` (NVLink, PCIe).  One worker per node is the flat network."""

    gpus_per_node: int = 1
    intra_gbps: float = 0.0

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise ParamError(f"GPUs per node must be >= 1, got {self.gpus_per_node}")
        if self.gpus_per_node > 1 and not 0 < self.intra_gbps < math.inf:
            raise ParamError(f"the intra-node bandwidth must be a finite number > 0 Gbit/s, got {self.intra_gbps}")

    @property
    def flat(self) -> bool:
        return self.gpus_per_node == 1


def _intra_s(nbytes: float, topo: Topology) -> float:
    return nbytes / (topo.intra_gbps * 1e9 / 8) if nbytes else 0.0


def collective_seconds(kind: str, nbytes: float, n: int, net: Network, topo: Topology = Topology(),
                       calibration: Calibration | None = None) -> tuple[float, str]:
    """(seconds, algorithm) of one collective of ``nbytes`` per worker over ``n`` workers.

    ``kind``: ``allreduce`` (the faster of ring and tree, as NCCL picks), ``allgather`` (ring; every
    worker receives every other's bytes, so the cost grows with n), ``alltoall`` (pairwise).  With
    several GPUs per node the collective is hierarchical: intra-node steps on the intra-node
    bandwidth, and between nodes one exchange per node whose link carries all its GPUs' bytes.
    With a ``calibration`` (flat networks) a kind it measured is priced as measured.
    """
    if n <= 1:
        return 0.0, "none"
    if kind in ("server", "broadcast"):  # LGC's legs: priced on the flat network whatever the topology
        if kind == "server":  # every worker's message to a server hosted by a worker, a reply of the same size back
            return parameter_server(nbytes, nbytes, n).seconds(net), "one server"
        return Cost(float(n - 1), (n - 1) * float(nbytes)).seconds(net), "ring relay"  # one message per hop, in sequence
    if calibration is not None:
        if not topo.flat:
            raise ParamError("a network calibration prices a flat network: leave out --gpus-per-node, or the calibration")
        measured = calibration.seconds(kind, nbytes, n, net)
        if measured is not None:
            return measured
    g = topo.gpus_per_node
    if g > 1 and n % g:
        raise ParamError(f"{n} workers do not fill nodes of {g} GPUs")
    nodes = n // g if g > 1 else n
    if kind == "allreduce":
        if g == 1:
            ring, tree = ring_allreduce(nbytes, n).seconds(net), tree_allreduce(nbytes, n).seconds(net)
            return (ring, "ring") if ring <= tree else (tree, "tree")
        # reduce-scatter inside the node, the nodes all-reduce (each GPU its 1/g shard, the node's link carries all
        # g shards), all-gather inside the node
        intra = 2 * ((g - 1) / g * nbytes / (topo.intra_gbps * 1e9 / 8) + (g - 1) * net.latency_s)
        inter_ring, inter_tree = ring_allreduce(nbytes, nodes).seconds(net), tree_allreduce(nbytes, nodes).seconds(net)
        return intra + min(inter_ring, inter_tree), f"hierarchical ({'ring' if inter_ring <= inter_tree else 'tree'} between nodes)"
    if kind == "allgather":
        if g == 1:
            return ring_allgather(nbytes, n).seconds(net), "ring"
        # gather inside the node, the nodes exchange their g payloads each, every GPU gets the other nodes' payloads
        intra = _intra_s((g - 1) * nbytes, topo) + _intra_s((n - g) * nbytes, topo) + 2 * (g - 1) * net.latency_s
        return intra + ring_allgather(g * nbytes, nodes).seconds(net), "hierarchical ring"
    if kind == "alltoall":
        if g == 1:
            return pairwise_alltoall(nbytes, n).seconds(net), "pairwise"
        off_node = g * nbytes * (n - g) / n  # what the node's link carries out (and, symmetric, in)
        return (_intra_s(nbytes * (g - 1) / n, topo) + off_node / net.bytes_per_s + (n - 1) * net.latency_s), "pairwise"
    raise ParamError(f"unknown collective {kind!r}")


def protocol_seconds(protocol: Protocol, wire_bytes: float, n: int, net: Network, topo: Topology = Topology(),
                     tensors: int = 1, calibration: Calibration | None = None, payload_scale: float = 1.0) -> tuple[float, int, str]:
    """(seconds, payload decodes per worker, algorithms) of one step of ``protocol`` on ``n`` workers.

    Each of the protocol's legs (:attr:`Protocol.cost`) is one collective (:func:`collective_seconds`)
    over the bytes its size rule gives from ``wire_bytes`` (one worker's payload bytes of the step):
    1-bit SGD's all-to-all of its stripes then all-gather of the re-quantized stripe (m/n each),
    TernGrad's all-reduce of one float per tensor then all-gather, PowerSGD's all-reduces of P and
    Q, the casts' all-reduce of their bodies, THC's all-reduce of its packed integer sums, everyone
    else's all-gather of the payloads.  ``payload_scale`` resizes a payload measured on another
    number of workers (:func:`payload_scale`: THC's fields widen with N).
    """
    total, decodes, algos = 0.0, 0, []
    wire_bytes = wire_bytes * payload_scale
    for leg in protocol.cost:
        nbytes = {"payload": wire_bytes, "payload/n": wire_bytes / n, "scalars": 4.0 * tensors}[leg.size]
        secs, algo = collective_seconds(leg.collective, nbytes / leg.rounds, n, net, topo, calibration)
        total += secs * leg.rounds
        decodes += leg.decodes(n)
        algos.append(f"{leg.collective} ({algo})" if n > 1 else leg.collective)
    return total, decodes, " + ".join(algos)


def payload_scale(compressor: str, params: Mapping[str, Any] | Iterable[tuple[str, Any]], measured_workers: int, n: int) -> float:
    """How much larger one worker's payload is on ``n`` workers than on the ``measured_workers`` it was measured on:
    1.0 except for a protocol whose packed integer fields widen with N (THC, :meth:`Protocol.payload_scale`)."""
    info = registry.get(compressor)
    full = info.resolve(dict(params))
    return info.resolve_protocol(full).payload_scale(full, measured_workers, n)


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

    @property
    def protocol(self) -> Protocol:
        """The compressor's multi-worker protocol, from its card and configuration."""
        return registry.get(self.compressor).resolve_protocol(dict(self.params))


def collective_for(compressor: str, scheme: str = "auto") -> str:
    """``allreduce``, ``allgather`` or ``ps`` for a compressor under a scheme (see module docstring)."""
    if scheme not in SCHEMES:
        raise ParamError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
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
    bf16_step_s: float | None = None  # the same step with a bf16 all-reduce (:func:`bf16_step`)
    speedup_bf16: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def speedup_vs(self, baseline: str) -> float:
        """The speed-up over the ``baseline`` all-reduce (``bf16`` or ``fp32``; fp32 where bf16 was not priced)."""
        return self.speedup_bf16 if baseline == "bf16" and self.speedup_bf16 is not None else self.speedup


#: how :func:`bf16_step` prices the bf16 all-reduce when the source has no bf16 case
BF16_MODELLED = ("modelled: DDP's fp32 path with half the bytes all-reduced, each cast priced as the copy it replaces "
                 "(no bf16 case in the file; `-c bf16` in the run measures its casts)")
BF16_MEASURED = "measured: the file's bf16 case (its casts, timed with the others), all-reduce of half the bytes"
BASELINES = ("bf16", "fp32")


def bf16_step(case: CaseCost, n: int, net: Network, scheme: str = "auto", bf16_case: CaseCost | None = None) -> tuple[float, str]:
    """(step, how it was priced) of ``case``'s training with an uncompressed bf16 all-reduce instead: the source's own
    ``bf16`` case predicted (``auto``, where the file has one), else the fp32 reference with half the bytes, each cast
    priced as the copy it replaces (``auto``; a cast reads the fp32 gradient and writes half its bytes), or the forced
    scheme's dense reference of half the bytes."""
    if scheme == "auto":
        if bf16_case is not None:
            return predict(bf16_case, n, net, "auto").step_s, BF16_MEASURED
        comm = collective_seconds("allreduce", case.dense_bytes / 2, n, net)[0]
        return case.compute_s + case.copy_s + comm + case.copy_s, BF16_MODELLED
    half = CaseCost(case.label, case.compressor, case.wire_bytes, case.dense_bytes / 2, params=case.params)
    return case.compute_s + reference(half, n, scheme).seconds(net), "modelled: the dense reference with half the bytes"


def predict(case: CaseCost, n: int, net: Network, scheme: str = "auto", bf16_case: CaseCost | None = None,
            with_bf16: bool = False) -> Prediction:
    """Step time = compute + compress + communicate + decompress × decoded payloads; speed-up vs dense.

    ``auto`` is ``gcbench advise``'s model: the compressor's own protocol priced leg by leg, against DDP's
    uncompressed path (copy into buckets, all-reduce of fp32 by ring or tree, copy back; the copies are the
    case's measured copy of the same tensors, whose place the compressor's encode and decode take).  The forced
    schemes (``allreduce``, ``allgather``, ``ps``) are what-ifs with one collective each against a dense ring
    all-reduce (``ps``: a dense parameter server).
    """
    if n < 1:
        raise ParamError(f"workers must be >= 1, got {n}")
    if scheme not in SCHEMES:
        raise ParamError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    comp_s, dec_s = case.compress_s, case.decompress_s
    if scheme == "auto":
        comm, decoded, how = protocol_seconds(case.protocol, case.wire_bytes, n, net, tensors=case.tensors,
                                              payload_scale=payload_scale(case.compressor, case.params, case.measured_workers, n))
        decoded = max(1, decoded)
        comp_s, dec_s = case.kernel_seconds()
        # summed in the step's order: an identity whose kernels cost the copy is 1.0 to the last bit
        ref = case.compute_s + case.copy_s + collective_seconds("allreduce", case.dense_bytes, n, net)[0] + case.copy_s
    else:
        cost, decoded = communication(case, n, scheme)
        comm, how = cost.seconds(net), scheme
        ref = case.compute_s + reference(case, n, scheme).seconds(net)
    dec = dec_s * decoded
    step = case.compute_s + comp_s + comm + dec
    bf16 = bf16_step(case, n, net, scheme, bf16_case)[0] if with_bf16 else None
    return Prediction(case.label, case.source, how, n, net.bandwidth_gbps, net.latency_s,
                      case.compute_s, comp_s, comm, dec, step, ref, ref / step if step > 0 else math.inf,
                      bf16, None if bf16 is None else (bf16 / step if step > 0 else math.inf))


def break_even_bandwidth(case: CaseCost, n: int, latency_s: float, scheme: str = "auto", baseline: str = "fp32",
                         bf16_case: CaseCost | None = None) -> float | None:
    """Bandwidth (Gbit/s) at which the compressed step equals the uncompressed one (the ``baseline`` all-reduce:
    fp32, or bf16 as :func:`bf16_step` prices it); None if it never does.

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
    if scheme not in SCHEMES:
        raise ParamError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if baseline not in BASELINES:
        raise ParamError(f"baseline must be one of {', '.join(BASELINES)}, got {baseline!r}")
    record = as_record(data)
    cases = cases_from_results(record, compute_s)
    preds = simulate(cases, workers, bandwidths_gbps, latency_s, scheme)
    kind = record.kind
    even = tuple(tuple(break_even_bandwidth(c, n, latency_s, scheme, baseline, bf16_case_of(cases, c.source)) for n in workers)
                 for c in cases)
    sources = list(dict.fromkeys(c.source for c in cases))
    priced = tuple((src, bf16_step(next(c for c in cases if c.source == src), 1, Network(1.0, latency_s), scheme,
                                   bf16_case_of(cases, src))[1]) for src in sources)
    return Simulation(results, kind, scheme, latency_s, compute_s, tuple(workers), tuple(bandwidths_gbps), tuple(cases),
                      tuple(preds), even, baseline, priced)
