"""One compressor's worker-step priced on a cluster: the cost description (:class:`StepCost`) and :func:`price_step`.

A step is ``compute + compress + communicate + decompress × decoded payloads``: the communication is the
compressor's protocol priced leg by leg on the network (:func:`gcbench.predict.network.protocol_seconds`), the
decompress is charged once per payload the protocol hands a worker.  The uncompressed reference is DDP's own path
(:func:`reference_step`): the gradients copied into buckets, an fp32 all-reduce (ring or tree, whichever is faster),
copied back; a compressor's compress and decode take the place of those copies, so an identity codec whose kernels
cost one copy each lands at the reference exactly.  The bf16 all-reduce (:func:`bf16_step`) is the bf16 cast's own
step where its kernels were measured, else DDP's path with half the bytes all-reduced and each cast priced as the
copy it replaces (a cast reads the fp32 gradient and writes half its bytes).

A cost description comes from a bench file (:meth:`gcbench.predict.step_kernels.StepKernels.cost`, ``gcbench
advise``) or from a results file (:meth:`gcbench.predict.simulate.CaseCost.cost`, ``gcbench simulate``): the two
commands price a step with this one function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gcbench.compressors import registry
from gcbench.predict.network import Network, Topology, collective_seconds, protocol_seconds
from gcbench.results.calibration import Calibration

#: the all-reduce a compressor's speed-up is claimed against: ``bf16`` (the default: mixed-precision training's own
#: baseline; Han et al. 2024 show claims against fp32 overstate what compression buys) or ``fp32``
BASELINES = ("bf16", "fp32")

#: the share of a step's compute that is the backward pass, which DDP overlaps with communication (backward costs
#: about twice the forward pass)
BACKWARD_SHARE = 2 / 3
#: DDP's bucket size: the last bucket's communication starts only when the backward pass has ended
BUCKET_BYTES = 25 * 2**20


@dataclass(frozen=True)
class StepCost:
    """What one compressor's worker-step costs before a cluster prices it (seconds and bytes per worker per step)."""

    label: str
    compressor: str
    wire_bytes: float  # what one worker sends per step (its payloads), as measured on ``measured_workers``
    dense_bytes: float  # the step's gradient in fp32
    compute_s: float  # forward and backward of one step
    compress_s: float  # the compress charged a step
    decompress_s: float  # decoding ONE worker's payloads of a step
    copy_s: float = 0.0  # a copy of the step's tensors: each of DDP's bucket copies in the reference
    tensors: int = 1  # tensors one step compresses (TernGrad's shared scaler: one float each)
    params: tuple[tuple[str, Any], ...] = ()  # the configuration: the protocol can depend on it
    measured_workers: int = 1  # the workers whose exchange ``wire_bytes`` was measured in (1: compress alone)


@dataclass(frozen=True)
class PricedStep:
    """One :class:`StepCost` priced on one cluster (seconds)."""

    collective: str  # the protocol's legs and the algorithm of each
    compress_s: float
    communicate_s: float  # the communication the step waits for
    decompress_s: float  # every payload the worker decodes
    step_s: float
    payload_bytes: float  # one worker's payload on this cluster's workers (THC's fields widen with N)


def exposed(comm_s: float, compute_s: float, dense_bytes: float, overlap: bool) -> float:
    """The communication a step waits for: all of it, or with ``overlap`` what the backward pass does not hide —
    at least the last bucket's share (DDP starts a bucket's exchange as soon as its gradients are ready)."""
    if not overlap:
        return comm_s
    buckets = max(1, math.ceil(dense_bytes / BUCKET_BYTES))
    return max(comm_s / buckets, comm_s - BACKWARD_SHARE * compute_s)


def price_step(cost: StepCost, n: int, net: Network, topo: Topology = Topology(), overlap: bool = False,
               calibration: Calibration | None = None) -> PricedStep:
    """``cost``'s step on ``n`` workers over ``net``: compute + compress + its protocol + decode of what it receives."""
    info = registry.get(cost.compressor)
    protocol = info.resolve_protocol(dict(cost.params))
    scale = protocol.payload_scale(info.resolve(dict(cost.params)), cost.measured_workers, n)
    comm, decodes, algos = protocol_seconds(protocol, cost.wire_bytes, n, net, topo, cost.tensors, calibration, scale)
    dec = cost.decompress_s * max(1, decodes)
    wait = exposed(comm, cost.compute_s, cost.dense_bytes, overlap)
    step = cost.compute_s + cost.compress_s + wait + dec
    return PricedStep(algos, cost.compress_s, wait, dec, step, cost.wire_bytes * scale)


def reference_step(cost: StepCost, n: int, net: Network, topo: Topology = Topology(), overlap: bool = False,
                   calibration: Calibration | None = None) -> tuple[float, float]:
    """(step, communication waited for) of uncompressed training on ``cost``'s gradient: DDP's own path — copied into
    buckets (``cost.copy_s``), an all-reduce of the fp32 bytes (ring or tree, whichever is faster), copied back."""
    comm, _ = collective_seconds("allreduce", cost.dense_bytes, n, net, topo, calibration)
    wait = exposed(comm, cost.compute_s, cost.dense_bytes, overlap)
    return cost.compute_s + cost.copy_s + wait + cost.copy_s, wait  # price_step's order of terms: an identity is 1.0 to the last bit


def bf16_step(cost: StepCost, n: int, net: Network, topo: Topology = Topology(), overlap: bool = False,
              calibration: Calibration | None = None, own: StepCost | None = None) -> float:
    """The step of training on ``cost``'s gradient with a bf16 all-reduce: ``own`` (the bf16 cast's measured step)
    priced where there is one, else DDP's path (:func:`reference_step`) with half the bytes all-reduced and each cast
    priced as one copy."""
    if own is not None:
        return price_step(own, n, net, topo, overlap, calibration).step_s
    comm, _ = collective_seconds("allreduce", cost.dense_bytes / 2, n, net, topo, calibration)
    return cost.compute_s + cost.copy_s + exposed(comm, cost.compute_s, cost.dense_bytes, overlap) + cost.copy_s
