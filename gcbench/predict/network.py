"""The network of the cost model: what one collective, and one compressor's protocol, costs on a cluster.

Collectives are priced for clusters of any size with the latency–
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
rule gives (:func:`protocol_seconds`).  A step is priced on it by :func:`gcbench.predict.step.price_step`
(``gcbench advise`` and ``gcbench simulate``'s ``auto``).  All functions are pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gcbench.compressors import registry
from gcbench.core.errors import ParamError
from gcbench.core.info import Protocol
from gcbench.results.calibration import Calibration, Cost, pairwise_alltoall, ring_allgather, ring_allreduce


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
