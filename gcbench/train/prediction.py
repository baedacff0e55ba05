"""``gcbench train``'s measured step held against the step ``gcbench advise`` would predict for the same cluster.

The cluster is the one the run trained on: before training, the ranks time all-reduces of 4 bytes
and of the model's fp32 gradient on the training group (:func:`measure_transport`); inverting the
ring all-reduce cost ``2(n-1)·α + 2(n-1)/n·bytes/B`` gives the latency α and bandwidth B of the
local transport.  The prediction is advise's step model (:func:`gcbench.predict.step.price_step`,
the one function ``advise`` and ``simulate`` price a step with) on that network, fed this run's
measured kernel times and payloads (compress, decode of one payload, bytes per step) and the
compute of the uncompressed reference run (advise charges every compressor one compute time).  So
the gap between the two is what the network and step model miss on this machine: overlap with the
backward pass, the transport's own overheads, anything the hook does besides its kernels.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from gcbench.core.errors import GcbenchError

if TYPE_CHECKING:
    from gcbench.results.calibration import Calibration

#: timed all-reduces of each size (after one warm-up); the median is kept
ROUNDS = 5
#: the large probe all-reduces at least this many bytes: a small model's gradient would time latency, not bandwidth
MIN_PROBE_BYTES = 1 << 20
#: a one-worker run has no communication: any finite bandwidth prices it at 0 s
_ONE_WORKER_GBPS = 1e6
#: the collectives priced as the transport issues them (the all-reduce is DDP's own: the α–β fit above prices it)
PRICED = ("allgather", "alltoall")
#: the larger message of each priced collective, bytes per worker (the smaller is 4 bytes a peer)
PRICE_PROBE_BYTES = 8 << 20


def _timed_allreduce(numel: int, device: torch.device, group: Any, rounds: int) -> float:
    x = torch.ones(max(1, numel), dtype=torch.float32, device=device)
    times = []
    for i in range(rounds + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        dist.all_reduce(x, group=group)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_transport(group: Any, device: torch.device, world: int, nbytes: int, rounds: int = ROUNDS) -> dict[str, Any]:
    """The local transport's α and bandwidth from all-reduces of 4 bytes and of ``nbytes`` (a collective: every rank)."""
    if world <= 1:
        return {"workers": world, "latency_s": 0.0, "bandwidth_gbps": _ONE_WORKER_GBPS, "nbytes": nbytes,
                "small_s": 0.0, "large_s": 0.0}
    probe = max(nbytes, MIN_PROBE_BYTES)
    small = _timed_allreduce(1, device, group, rounds)
    large = _timed_allreduce(probe // 4, device, group, rounds)
    alpha = small / (2 * (world - 1))
    volume = 2 * (world - 1) / world * probe
    # the size's own share: never below a twentieth of the large all-reduce, so noise cannot give an infinite link
    bw = volume / max(large - small, large / 20) * 8 / 1e9
    out = {"workers": world, "latency_s": alpha, "bandwidth_gbps": bw, "nbytes": probe, "small_s": small, "large_s": large}
    return {**out, **_transport_prices(group, device, world, bw, rounds)}


def _transport_prices(group: Any, device: torch.device, world: int, bandwidth_gbps: float, rounds: int) -> dict[str, Any]:
    """The all-gather and all-to-all as gcbench's transport issues them (the size words, then the bodies), each priced
    from calls of a few bytes and of :data:`PRICE_PROBE_BYTES` per worker (:func:`gcbench.distributed.calibrate.price_at`):
    ``prices`` as a calibration file holds them, ``backend``, and ``price_errors`` for a kind that could not be priced."""
    from gcbench.distributed.calibrate import price_at
    from gcbench.results.calibration import Calibration, CollectivePrice

    prices: list[CollectivePrice] = []
    errors = {}
    for kind in PRICED:
        try:
            prices.append(price_at(kind, (4 * world, PRICE_PROBE_BYTES), bandwidth_gbps, repeats=rounds, group=group,
                                   device=device))
        except GcbenchError as exc:  # times that did not grow with the size: the α–β model prices this kind
            errors[kind] = str(exc)
    backend = str(dist.get_backend(group))
    return {"backend": backend, "prices": Calibration(backend, bandwidth_gbps, tuple(prices)).to_dict()["prices"],
            "price_errors": errors or None}


def transport_calibration(transport: dict[str, Any]) -> Calibration | None:
    """The collectives a train run priced on its transport (:func:`measure_transport`) as a calibration for
    :func:`gcbench.predict.step.price_step`, or None (an older file, one worker, nothing priced)."""
    from gcbench.results.calibration import Calibration

    prices = transport.get("prices")
    if not prices:
        return None
    data = {"format": "gcbench-network-calibration", "backend": transport.get("backend") or "?",
            "bandwidth_gbps": transport["bandwidth_gbps"], "prices": prices}
    return Calibration.from_dict(data, "the transport measured before training")


def _spread(samples: list[float]) -> float | None:
    """Half the interquartile range of the steps after the first (DDP's first builds its buckets): the spread around
    the median step, which one slow step (a page fault, a busy core) does not inflate as a standard deviation would."""
    kept = samples[1:] if len(samples) > 2 else samples
    if len(kept) < 4:
        return None
    q1, _, q3 = statistics.quantiles(kept, n=4)
    return (q3 - q1) / 2


def predict_case(record: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any] | None:
    """advise's predicted step for one train case on its measured transport (None when the case has no step times)."""
    from gcbench.predict.network import Network
    from gcbench.predict.step import StepCost, price_step

    tr = record.get("training") or {}
    st, transport, size = tr.get("step_time") or {}, tr.get("transport"), tr.get("bytes") or {}
    if transport is None or st.get("total_s") is None:
        return None
    ref_st = ((reference or {}).get("training") or {}).get("step_time") or {}
    compute = ref_st.get("compute_s") if ref_st.get("compute_s") is not None else st.get("compute_s")
    decodes = max(1.0, float(tr.get("decoded_payloads_per_step") or 1))
    if record.get("compressor") == "plan" and record.get("plan_rules"):
        return _predict_plan(record, st, transport, float(compute or 0.0))
    cost = StepCost(record["label"], record["compressor"], wire_bytes=float(size.get("payload_bytes_per_step") or 0.0),
                    dense_bytes=float(size.get("dense_bytes_per_step") or 0.0), compute_s=float(compute or 0.0),
                    compress_s=float(st.get("compress_s") or 0.0), decompress_s=float(st.get("decompress_s") or 0.0) / decodes,
                    params=tuple(sorted((record.get("params") or {}).items())), measured_workers=int(tr.get("workers") or 1))
    try:
        net = Network(float(transport["bandwidth_gbps"]), float(transport["latency_s"]))
        priced = price_step(cost, int(tr.get("workers") or 1), net, calibration=transport_calibration(transport))
    except GcbenchError as exc:  # a compressor or protocol the model cannot price: said, not guessed
        return {"step_s": None, "error": str(exc)}
    samples = (tr.get("step_samples_rank0") or {}).get("total_s") or []
    return {"step_s": priced.step_s, "compute_s": cost.compute_s, "compress_s": priced.compress_s,
            "communicate_s": priced.communicate_s, "decompress_s": priced.decompress_s, "collective": priced.collective,
            "measured_step_s": st["total_s"], "measured_spread_s": _spread([float(s) for s in samples]),
            "cluster": "measured local transport"}


def _predict_plan(record: dict[str, Any], st: dict[str, Any], transport: dict[str, Any], compute_s: float) -> dict[str, Any]:
    """A plan case's predicted step, as ``advise --plan`` prices one (:func:`gcbench.predict.plan_search.plan_step`):
    compute + the hook's measured compress + each rule's group exchanged by its own protocol (its bytes per step, from
    the per-rule table) + the measured decode."""
    from gcbench.compressors import registry
    from gcbench.predict.network import Network
    from gcbench.predict.step import StepCost, price_step

    tr = record.get("training") or {}
    n = int(tr.get("workers") or 1)
    comm, legs = 0.0, []
    try:
        net = Network(float(transport["bandwidth_gbps"]), float(transport["latency_s"]))
        calibration = transport_calibration(transport)
        for row in record["plan_rules"]:
            name, params = registry.parse_spec(str(row["compressor"]))
            cost = StepCost(str(row.get("label") or name), name, wire_bytes=float(row.get("bytes") or 0.0),
                            dense_bytes=4.0 * float(row.get("elements") or 0), compute_s=0.0, compress_s=0.0,
                            decompress_s=0.0, params=tuple(sorted(params.items())), measured_workers=n)
            priced = price_step(cost, n, net, calibration=calibration)
            comm += priced.communicate_s
            legs.append(f"{name}: {priced.collective}")
    except GcbenchError as exc:  # a rule the model cannot price: said, not guessed
        return {"step_s": None, "error": str(exc)}
    compress, decompress = float(st.get("compress_s") or 0.0), float(st.get("decompress_s") or 0.0)
    samples = (tr.get("step_samples_rank0") or {}).get("total_s") or []
    return {"step_s": compute_s + compress + comm + decompress, "compute_s": compute_s, "compress_s": compress,
            "communicate_s": comm, "decompress_s": decompress, "collective": "; ".join(legs),
            "measured_step_s": st["total_s"], "measured_spread_s": _spread([float(s) for s in samples]),
            "cluster": "measured local transport"}


def prediction_line(label: str, prediction: dict[str, Any] | None, peer_wait: dict[str, Any] | None = None) -> str | None:
    """``topk: measured 41.2 ms ± 1.3 per step, advise predicted 38.0 ms (8% under)``, or None without a prediction;
    with ``peer_wait`` (:func:`gcbench.train.case.peer_wait`) how much of the measured step was waiting for the slowest
    worker, which the model, pricing workers in step, leaves out."""
    if not prediction or prediction.get("step_s") is None or not prediction.get("measured_step_s"):
        return None
    measured, predicted = float(prediction["measured_step_s"]), float(prediction["step_s"])
    spread = prediction.get("measured_spread_s")
    pm = f" ± {spread * 1e3:.{_digits(spread * 1e3)}f}" if spread is not None else ""
    gap = (predicted - measured) / measured
    how = "exact" if abs(gap) < 0.005 else f"{abs(gap):.0%} {'under' if gap < 0 else 'over'}"
    line = (f"{label}: measured {measured * 1e3:.{_digits(measured * 1e3)}f} ms{pm} per step, advise predicted "
            f"{predicted * 1e3:.{_digits(predicted * 1e3)}f} ms ({how})")
    if peer_wait and peer_wait.get("mean_s") is not None:
        wait = float(peer_wait["mean_s"]) * 1e3
        line += (f"; a worker waited {wait:.{_digits(wait)}f} ms a step on average for the slowest one's backward pass, "
                 "which the model leaves out")
    return line


def _digits(ms: float) -> int:
    """Decimals that keep about three significant digits of a time in milliseconds."""
    return 1 if ms >= 10 else 2 if ms >= 1 else 3


def transport_line(transport: dict[str, Any] | None) -> str | None:
    """How the cluster of the prediction was found, in one sentence."""
    if not transport:
        return None
    if transport["workers"] <= 1:
        return "advise's step model on one worker: no communication to predict"
    line = (f"predicted by advise's step model (gcbench.predict.step.price_step) from this run's kernel times and payloads on "
            f"the transport measured here: {transport['workers']} workers, {transport['bandwidth_gbps']:.3g} Gbit/s, "
            f"{transport['latency_s'] * 1e6:.3g} µs per message (all-reduces of 4 B and of {transport['nbytes']:,} B)")
    priced = [p for p in transport.get("prices") or () if isinstance(p, dict)]
    if priced:
        line += "; " + ", ".join(f"{p['kind']} {1e3 * float(p['overhead_s']):.2f} ms a call + {float(p['efficiency']):.2f}× "
                                 "the model's volume time" for p in priced)
        line += " (as the transport issues them: the size words, then the bodies)"
    return line
