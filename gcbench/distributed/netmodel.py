"""Network cost model: predicted step time and speed-up of compressed gradient exchange at scale.

Turns measured payload sizes and kernel times (a ``gcbench run``/``compare`` results file, or a
``gcbench train`` file) into predicted step times for clusters of any size, with the latency–
bandwidth (α–β, Hockney) model used for collectives by Thakur, Rabenseifner & Gropp 2005
("Optimization of Collective Communication Operations in MPICH") and, for gradient compression,
by Agarwal et al. 2022 ("On the Utility of Gradient Compression in Distributed Training Systems").
A message of m bytes over one link costs ``α + m/B``; every worker has one full-duplex link of
bandwidth B (Gbit/s, 1 Gbit = 10⁹ bit) and all links work in parallel.

Collectives (N workers; M = dense bytes, m = one worker's payload bytes):

* ring all-reduce: ``2(N−1)·α + 2(N−1)/N · M/B`` (reduce-scatter then all-gather);
* ring all-gather of per-worker payloads: ``(N−1)·α + (N−1)·m/B``;
* parameter server: one server with the same link; the N uploads share the server's link
  (``α + N·m/B``), the server decodes all N payloads and sums them, and sends each worker the dense
  fp32 aggregate (``α + N·M/B``); for formats whose card says ``summable`` (fp16/bf16/none) it sends the
  sum in the wire format (``α + N·m/B``).  Server-side summation time is ignored.

Which collective applies (``scheme="auto"``) is read from the compressor's card
(:class:`gcbench.core.info.Protocol`), never from its name:

* a protocol made of all-reduces (``allreduce_rounds``: none, fp16 and bf16 sum their bodies in
  place, 1; PowerSGD all-reduces P then Q, 2) → ring all-reduce of m with that many latency rounds;
* every other protocol (sparse or quantized payloads that do not add up in their encoding) →
  ring all-gather, and each worker decodes all N payloads; ``scalar_allreduces`` (TernGrad's
  shared scaler) add the latency of that many tiny all-reduces.

Step time: ``compute + compress + communicate + decompress × decoded payloads``, where decoded
payloads is N for all-gather (and the parameter server), 1 for all-reduce.  No overlap of
communication with the backward pass is modelled, although the DDP hook of
:mod:`gcbench.distributed.ddp` overlaps them: the prediction is an upper bound of such a step.
The uncompressed reference is ``compute + ring all-reduce of M`` (``scheme`` ``ps``: a dense
parameter server).  Speed-up = reference / predicted.  All functions are pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gcbench.compressors import registry
from gcbench.core.errors import ParamError, ResultsError
from gcbench.core.info import Protocol
from gcbench.results.record import MeasureRecord, RunRecord, StepTime, TrainCase, TrainRecord, as_record

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


@dataclass(frozen=True)
class Cost:
    """A communication cost as ``alphas·α + volume/B``: latency rounds and bytes through one link."""

    alphas: float
    volume: float

    def seconds(self, net: Network) -> float:
        return self.alphas * net.latency_s + self.volume / net.bytes_per_s

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.alphas + other.alphas, self.volume + other.volume)


def ring_allreduce(nbytes: float, n: int) -> Cost:
    """Ring all-reduce of ``nbytes`` over ``n`` workers: 2(n−1) rounds, 2(n−1)/n of the buffer."""
    if n <= 1:
        return Cost(0.0, 0.0)
    return Cost(2.0 * (n - 1), 2.0 * (n - 1) / n * nbytes)


def ring_allgather(nbytes: float, n: int) -> Cost:
    """Ring all-gather of ``nbytes`` per worker: n−1 rounds, each worker receives (n−1)·nbytes."""
    if n <= 1:
        return Cost(0.0, 0.0)
    return Cost(float(n - 1), (n - 1) * float(nbytes))


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


def pairwise_alltoall(nbytes: float, n: int) -> Cost:
    """All-to-all of ``nbytes`` per worker cut into n parts (part j to worker j): n−1 rounds, (n−1)/n of the message out."""
    if n <= 1:
        return Cost(0.0, 0.0)
    return Cost(float(n - 1), (n - 1) / n * float(nbytes))


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


def collective_seconds(kind: str, nbytes: float, n: int, net: Network, topo: Topology = Topology()) -> tuple[float, str]:
    """(seconds, algorithm) of one collective of ``nbytes`` per worker over ``n`` workers.

    ``kind``: ``allreduce`` (the faster of ring and tree, as NCCL picks), ``allgather`` (ring; every
    worker receives every other's bytes, so the cost grows with n), ``alltoall`` (pairwise).  With
    several GPUs per node the collective is hierarchical: intra-node steps on the intra-node
    bandwidth, and between nodes one exchange per node whose link carries all its GPUs' bytes.
    """
    if n <= 1:
        return 0.0, "none"
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
                     tensors: int = 1) -> tuple[float, int, str]:
    """(seconds, payload decodes per worker, algorithms) of one step of ``protocol`` on ``n`` workers.

    Each of the protocol's legs (:attr:`Protocol.cost`) is one collective (:func:`collective_seconds`)
    over the bytes its size rule gives from ``wire_bytes`` (one worker's payload bytes of the step):
    1-bit SGD's all-to-all of its stripes then all-gather of the re-quantized stripe (m/n each),
    TernGrad's all-reduce of one float per tensor then all-gather, PowerSGD's all-reduces of P and
    Q, the casts' all-reduce of their bodies, everyone else's all-gather of the payloads.
    """
    total, decodes, algos = 0.0, 0, []
    for leg in protocol.cost:
        nbytes = {"payload": wire_bytes, "payload/n": wire_bytes / n, "scalars": 4.0 * tensors}[leg.size]
        if leg.collective in ("server", "broadcast"):  # minimal pricing, flat network (the topology is not modelled here)
            cost = (parameter_server(nbytes / leg.rounds, nbytes / leg.rounds, n) if leg.collective == "server"
                    else Cost(float(n - 1), (n - 1) * nbytes / leg.rounds))  # one message per hop, hops in sequence
            secs, algo = cost.seconds(net), "one server" if leg.collective == "server" else "ring relay"
        else:
            secs, algo = collective_seconds(leg.collective, nbytes / leg.rounds, n, net, topo)
        total += secs * leg.rounds
        decodes += leg.decodes(n)
        algos.append(f"{leg.collective} ({algo})" if n > 1 else leg.collective)
    return total, decodes, " + ".join(algos)


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

    @property
    def protocol(self) -> Protocol:
        """The compressor's multi-worker protocol, from its card."""
        return registry.get(self.compressor).protocol


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
    """(communication cost, decoded payloads per step) of one case on ``n`` workers."""
    kind = collective_for(case.compressor, scheme)
    if kind == "allreduce":
        rounds = case.protocol.allreduce_rounds
        c = ring_allreduce(case.wire_bytes, n)
        return Cost(c.alphas * rounds, c.volume), 1
    if kind == "allgather":
        c = ring_allgather(case.wire_bytes, n)
        extra = case.protocol.scalar_allreduces
        if extra:
            c = c + Cost(extra * ring_allreduce(0.0, n).alphas, 0.0)
        return c, n
    compatible = case.protocol.summable
    down = case.wire_bytes if compatible else case.dense_bytes
    return parameter_server(case.wire_bytes, down, n), n + (1 if compatible else 0)


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def predict(case: CaseCost, n: int, net: Network, scheme: str = "auto") -> Prediction:
    """Step time = compute + compress + communicate + decompress × decoded payloads; speed-up vs dense."""
    if n < 1:
        raise ParamError(f"workers must be >= 1, got {n}")
    cost, decoded = communication(case, n, scheme)
    comm = cost.seconds(net)
    dec = case.decompress_s * decoded
    step = case.compute_s + case.compress_s + comm + dec
    ref = case.compute_s + reference(case, n, scheme).seconds(net)
    return Prediction(case.label, case.source, collective_for(case.compressor, scheme), n, net.bandwidth_gbps, net.latency_s,
                      case.compute_s, case.compress_s, comm, dec, step, ref, ref / step if step > 0 else math.inf)


def break_even_bandwidth(case: CaseCost, n: int, latency_s: float, scheme: str = "auto") -> float | None:
    """Bandwidth (Gbit/s) at which the compressed step equals the dense one; None if it never does.

    From ``comp + dec·k + a_c·α + v_c/B = a_r·α + v_r/B``: ``B* = (v_r − v_c) / (comp + dec·k + (a_c − a_r)·α)``.
    Below B* (slower links) compression wins, above it the dense all-reduce wins — when the
    compressor sends fewer bytes than the dense exchange and costs time to run (both > 0).
    """
    cost, decoded = communication(case, n, scheme)
    ref = reference(case, n, scheme)
    saved_volume = ref.volume - cost.volume
    overhead = case.compress_s + case.decompress_s * decoded + (cost.alphas - ref.alphas) * latency_s
    if saved_volume <= 0 or overhead <= 0:
        return None
    return saved_volume / overhead * 8 / 1e9


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
                                (tr.task.name if tr.task else None) or "train"))
            continue
        wire, dense = (c.size.wire_bytes, c.size.dense_bytes) if c.size else (None, None)
        if wire is None or dense is None:
            continue
        src = c.source_label if c.source and (c.source.label or c.source.name) else ""
        out.append(CaseCost(c.label, name, float(wire), float(dense), float(compute_s or 0.0),
                            float(c.metric("compress_s") or 0.0), float(c.metric("decompress_s") or 0.0), src))
    if not out:
        raise ResultsError("the results file has no successful case with payload sizes to simulate")
    return out


def simulate(cases: Sequence[CaseCost], workers: Iterable[int], bandwidths_gbps: Iterable[float], latency_s: float,
             scheme: str = "auto") -> list[Prediction]:
    """Predictions for every case × worker count × bandwidth."""
    bws = list(bandwidths_gbps)
    ns = list(workers)
    return [predict(c, n, Network(b, latency_s), scheme) for b in bws for c in cases for n in ns]


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
    break_even_gbps: tuple[tuple[float | None, ...], ...]  # per case, per worker count

    def prediction(self, case: CaseCost, n: int, bandwidth_gbps: float) -> Prediction:
        return next(p for p in self.predictions
                    if (p.label, p.source, p.workers, p.bandwidth_gbps) == (case.label, case.source, n, bandwidth_gbps))

    def to_dict(self) -> dict[str, Any]:
        return {"results": self.results, "scheme": self.scheme, "latency_s": self.latency_s,
                "predictions": [p.to_dict() for p in self.predictions]}


def simulate_results(data: RunRecord | Mapping[str, Any], workers: Sequence[int], bandwidths_gbps: Sequence[float],
                     latency_s: float, scheme: str = "auto", compute_s: float | None = None, results: str = "") -> Simulation:
    """Predictions and break-even bandwidths of every successful case of a results file (see the module docstring)."""
    if scheme not in SCHEMES:
        raise ParamError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    record = as_record(data)
    cases = cases_from_results(record, compute_s)
    preds = simulate(cases, workers, bandwidths_gbps, latency_s, scheme)
    kind = record.kind
    even = tuple(tuple(break_even_bandwidth(c, n, latency_s, scheme) for n in workers) for c in cases)
    return Simulation(results, kind, scheme, latency_s, compute_s, tuple(workers), tuple(bandwidths_gbps), tuple(cases),
                      tuple(preds), even)
