"""Price the collectives of a backend on the network they will run on: a calibration for ``gcbench advise --network``.

The α–β model (:mod:`gcbench.results.calibration`) counts the bytes a collective's algorithm moves
through one link.  A real backend moves more and worse: Ethernet, IP and TCP framing and the
acknowledgements share the link (about a tenth at 1500-byte frames), gloo's all-gather does not use
both directions of a link as the ring model assumes, and gcbench's transport first exchanges the
payloads' sizes.  This module times each collective the way gcbench's transport and DDP issue it,
on a running process group, at message sizes chosen from the link's nominal rate, and fits one
:class:`~gcbench.results.calibration.CollectivePrice` per collective: its efficiency against the
model's volume time, and its fixed cost per call.  The prices are measured apart from any training
they will predict; nothing is fitted to a training run.

Run it on every rank of the cluster (any ``torch.distributed`` launcher; rank 0 writes the file)::

    torchrun --nnodes 4 --nproc-per-node 1 --rdzv-endpoint HOST:29500 \\
        -m gcbench.distributed.calibrate --bandwidth 10 --out net.json
    gcbench advise --model resnet50 --workers 4 --bandwidth 10 --network net.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from gcbench.core.errors import GcbenchError
from gcbench.distributed.launch import LaunchError, init_from_env, launched
from gcbench.results.atomic import atomic_write
from gcbench.results.calibration import COLLECTIVES, Calibration, CollectivePrice, fit_price

#: each size is chosen so that the model's volume time of the collective is this many seconds at the nominal rate
DEFAULT_SECONDS = (0.05, 0.1, 0.2, 0.4)


def _issue(kind: str, nbytes: int, world: int, group: Any, device: torch.device | None = None) -> Callable[[], None]:
    """One call of ``kind`` with ``nbytes`` per worker as gcbench issues it: DDP's fp32 all-reduce; the transport's
    size exchange then the bodies for all-gather (padded to the longest) and all-to-all (``nbytes``/n to each peer,
    nothing to itself).  ``device``: where the tensors live (a CUDA device under NCCL; default the CPU)."""
    at = device or torch.device("cpu")
    if kind == "allreduce":
        x = torch.zeros(max(1, nbytes // 4), device=at)
        return lambda: dist.all_reduce(x, group=group)
    if kind == "allgather":
        size = torch.full((1,), nbytes, dtype=torch.int64, device=at)
        sizes = [torch.empty_like(size) for _ in range(world)]
        body = torch.zeros(nbytes, dtype=torch.uint8, device=at)
        out = [torch.empty_like(body) for _ in range(world)]

        def allgather() -> None:
            dist.all_gather(sizes, size, group=group)
            dist.all_gather(out, body, group=group)

        return allgather
    part = max(1, nbytes // world)
    splits = [0 if j == dist.get_rank(group) else part for j in range(world)]  # the transport sends nothing to itself
    send_sizes = torch.tensor(splits, dtype=torch.int64).to(at)
    recv_sizes = torch.empty_like(send_sizes)
    send = torch.zeros(sum(splits), dtype=torch.uint8, device=at)
    recv = torch.empty_like(send)

    def alltoall() -> None:
        dist.all_to_all_single(recv_sizes, send_sizes, group=group)
        dist.all_to_all_single(recv, send, splits, splits, group=group)

    return alltoall


def _timed(call: Callable[[], None], repeats: int, group: Any, device: torch.device | None = None) -> float:
    """Seconds per call of ``repeats`` calls issued back to back (after one warm-up call and a barrier), on the
    slowest rank.

    Back to back, as a training step issues its collectives, not each from an idle link: a two-way exchange over a
    shaped link takes one of a few discrete times (two processes swapping 93 KB over 5 Mbit/s: 156, about 226 or
    about 300 ms — the two directions overlapping fully, partly or not at all, as each side's acknowledgements wait
    behind its own data in the link's queue), and which one depends on how the link was left.  Each call timed from
    an idle link after a barrier (the median of five) landed on one mode or another from one calibration to the next
    (a 250 KB all-to-all: 223, 349 and 221 ms in three calibrations) and priced 1-bit SGD's two legs at 375 ms where
    its training steps communicated for 458 ms; back to back, the all-to-all took 280–296 ms and the all-gather
    185–210 ms a call, as in training.  The mean over the calls is what a run of steps pays."""
    call()  # warm-up: the connections, the buffers
    _sync(device)
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(repeats):
        call()
    _sync(device)
    dt = torch.tensor([(time.perf_counter() - t0) / repeats], dtype=torch.float64, device=device)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=group)
    return float(dt)


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(bandwidth_gbps: float, *, kinds: Sequence[str] = tuple(COLLECTIVES), seconds: Sequence[float] = DEFAULT_SECONDS,
            repeats: int = 9, group: Any = None, progress: Callable[[str], None] | None = None) -> Calibration:
    """Time every collective of ``kinds`` on ``group`` (default: the initialised default process group) and fit its price."""
    world = dist.get_world_size(group)
    bps = bandwidth_gbps * 1e9 / 8
    prices: list[CollectivePrice] = []
    for kind in kinds:
        factor = COLLECTIVES[kind](1.0, world).volume  # model volume per byte of message
        points = []
        for s in seconds:
            nbytes = max(world, int(s * bps / factor))
            t = _timed(_issue(kind, nbytes, world, group), repeats, group)
            points.append((float(nbytes), t))
            if progress:
                progress(f"{kind} {nbytes / 1e6:.3g} MB per worker: {1e3 * t:.1f} ms (model {1e3 * factor * nbytes / bps:.1f} ms)")
        prices.append(fit_price(kind, world, points, bandwidth_gbps))
    return Calibration(str(dist.get_backend(group)), bandwidth_gbps, tuple(prices))


def price_at(kind: str, sizes: Sequence[int], bandwidth_gbps: float, *, repeats: int, batches: int = 3, group: Any = None,
             device: torch.device | None = None) -> CollectivePrice:
    """The price of ``kind`` fitted to calls of the given bytes per worker, issued as gcbench issues them on
    ``device``: how ``gcbench train`` prices the all-gathers and all-to-alls of the transport it trains on.  Each
    size's time is the median of ``batches`` batches of ``repeats`` back-to-back calls (a busy core lands on one
    batch, not on the price).  A collective whose times do not grow with the size is a
    :class:`~gcbench.core.errors.ParamError` (from the fit)."""
    world = dist.get_world_size(group)
    points = []
    for b in sizes:
        call = _issue(kind, b, world, group, device)
        points.append((float(b), statistics.median(_timed(call, repeats, group, device) for _ in range(batches))))
    return fit_price(kind, world, points, bandwidth_gbps)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m gcbench.distributed.calibrate`` on every rank (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m gcbench.distributed.calibrate", description=__doc__.split("\n\n")[0],
                                 epilog="Example: torchrun --nproc-per-node 1 --nnodes 4 ... -m gcbench.distributed.calibrate "
                                        "--bandwidth 10 --out net.json")
    ap.add_argument("--bandwidth", type=float, required=True, help="the links' nominal rate in Gbit/s")
    ap.add_argument("--out", type=Path, required=True, help="the calibration file rank 0 writes")
    ap.add_argument("--backend", default="gloo", help="the process group's backend (default gloo)")
    ap.add_argument("--seconds", default=",".join(map(str, DEFAULT_SECONDS)),
                    help="model volume times (s) the message sizes are chosen for, a comma list")
    ap.add_argument("--repeats", type=int, default=9, help="calls per size, timed back to back (after one warm-up)")
    args = ap.parse_args(argv)
    try:
        secs = [float(x) for x in args.seconds.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--seconds must be a comma list of numbers, got {args.seconds!r}")
    if not 0 < args.bandwidth < float("inf") or len(secs) < 2 or min(secs) <= 0 or args.repeats < 1:
        ap.error("--bandwidth must be > 0, --seconds two or more positive numbers, --repeats at least 1")
    if not launched():
        ap.error("run it on every rank with a torch.distributed launcher (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR)")
    try:
        init_from_env(args.backend)  # a malformed launch or a failed rendezvous: one line, not a traceback or a wait
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        if dist.get_world_size() < 2:
            print("a calibration needs two or more ranks", file=sys.stderr)
            return 2
        rank0 = dist.get_rank() == 0
        try:
            cal = measure(args.bandwidth, seconds=secs, repeats=args.repeats, progress=print if rank0 else None)
        except GcbenchError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        if rank0:
            try:  # atomic: a full disk keeps an older calibration whole, and the error names the file
                atomic_write(args.out, json.dumps(cal.to_dict(), indent=1))
            except OSError as e:
                print(f"error: cannot write {args.out}: {e.strerror or e}", file=sys.stderr)
                return 1
            print(Calibration.from_dict(cal.to_dict(), str(args.out)).describe())
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
