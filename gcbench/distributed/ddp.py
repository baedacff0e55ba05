"""DDP communication hooks for every gcbench compressor: compressed training on ``torch.distributed``.

``register_compressor_hook(ddp_model, "topk:density=0.01")`` replaces DDP's gradient all-reduce with
a real compressed exchange (PyTorch's ``DistributedDataParallel.register_comm_hook`` API; gloo on
CPU, NCCL on GPU).  The same compressor objects and payloads as ``gcbench run`` are used, so the
bytes measured in training are the bytes the benchmark reports.

Protocols (which exchange runs for which compressor):

* ``gather`` (every compressor; the default): each worker compresses the bucket, the payloads are
  serialised with :meth:`Payload.to_bytes` (header included), their sizes are all-gathered, the
  bodies are padded to the largest and all-gathered as ``uint8``, and every worker decodes all N
  payloads with :meth:`Payload.from_bytes` and averages them.  All workers decode the same bytes in
  the same order, so replicas stay bit-identical.
* ``terngrad`` (TernGrad with ``share_scaler=true``, Wen et al. 2017): the workers first all-reduce
  (MAX) their per-tensor scalers ``s = max|clip(x)|`` (4 bytes per tensor), then quantize with the
  shared scaler and run the gather exchange.
* ``powersgd`` (Vogels et al. 2019, Algorithm 1, as PyTorch's ``powerSGD_hook``): per tensor of the
  bucket, ``P = M Q`` is all-reduced (mean), orthonormalised, ``Q = Mᵀ P̂`` is all-reduced (mean), the
  aggregate is ``P̂ Q̄ᵀ``; the warm-start Q is shared by all workers.  Tensors whose factors would not
  be smaller (vectors, small matrices) are all-reduced dense in the first all-reduce.  PowerSGD
  always works per tensor, whatever ``granularity`` says, because the low-rank view needs each
  tensor's matrix shape.
* ``onebit`` (1-bit SGD, Seide et al. 2014; :meth:`OneBitSGD.exchange`): each worker quantizes
  every tensor with its own residual and cuts the message into N stripes of whole columns; an
  all-to-all sends stripe j to rank j (leg 1); rank j averages the N stripes it holds,
  re-quantizes the average with its owner-side residual and all-gathers it (leg 2).  Like PowerSGD
  it works per tensor (the column view needs each tensor's shape; a flat bucket would be one
  column).  Stripe sizes travel first (an all-to-all, then an all-gather, of int64 lengths).

Compressors whose paper defines another multi-worker protocol that the hook does not implement
(LGC's three phases) use ``gather``; :attr:`HookState.protocol_note` says so and the training
results record it.

State: one :class:`~gcbench.core.compressor.State` per compressed unit (the whole flat bucket with
``granularity="bucket"``, each parameter's gradient with ``"layer"``), kept per bucket index, so
error-feedback residuals, momentum, warm starts and schedules persist across steps.  DDP rebuilds
its buckets once after the first iteration (bucket order follows gradient-ready order); a bucket
whose parameters changed gets fresh state and :attr:`HookState.state_resets` counts it.  Random
streams differ per worker (independent quantization noise is what makes averaging reduce variance),
except PowerSGD's initial Q, which must be identical on all workers.

Accounting (:class:`HookStats`), per bucket and step: ``payload_bytes`` = Σ ``payload.nbytes`` this
worker sent (header included; for PowerSGD, the float32 factors and dense tensors it all-reduced);
``sent_bytes`` = everything this worker handed to collectives, including the size exchange (8 bytes
per unit), the padding to the largest payload and TernGrad's scalers.  How a collective replicates
those bytes across links (ring, tree) is the network model's business (:mod:`gcbench.distributed.netmodel`).
Times are wall-clock (CUDA synchronised) for compress, communicate and decompress.  The hook is
synchronous: it returns an already-completed future, so communication does not overlap the rest
of the backward pass and the three times add up to the hook's share of the step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from gcbench.compressors import registry
from gcbench.core.compressor import Compressor, ErrorFeedback, State
from gcbench.core.errors import GcbenchError, ParamError
from gcbench.core.payload import Payload
from gcbench.measure.metrics import TimingPolicy, load_per_core, rel_ci, rel_iqr
from gcbench.results.record import UNSTABLE

#: a hook timing over fewer steps than this has no spread worth the name
TOO_FEW_STEPS = "too few steps"

GRANULARITIES = ("bucket", "layer")
PROTOCOL_CHOICES = ("auto", "gather")

#: the protocols (names as cards declare them, :class:`gcbench.core.info.Protocol`) this hook runs besides gather
HOOK_PROTOCOLS = ("terngrad", "powersgd", "onebit")
GATHER_DESCRIPTION = "all-gather the payloads, decode all, average"

_SIZE_BYTES = 8  # one int64 length per unit in the size exchange


def unit_seed(seed: int, rank: int | None, bucket: int, unit: int) -> int:
    """Seed of one unit's compressor state; ``rank=None`` gives a seed shared by all workers.

    Stable across processes (numpy's SeedSequence), so a restarted job draws the same streams.
    """
    words = [int(seed) % 2**32, 0xDD9 if rank is None else 1 + int(rank), int(bucket), int(unit)]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> np.uint64(1))


# ----------------------------------------------------------------------------- statistics


@dataclass
class BucketStats:
    """One bucket's exchange in one step, seen from this worker."""

    bucket: int
    numel: int
    units: int
    protocol: str
    collective: str  # "allgather" or "allreduce": what carried the payloads
    payload_bytes: int
    sent_bytes: int
    dense_bytes: int  # the bucket uncompressed (numel × element size)
    decoded_payloads: int  # payloads decoded per unit (N for gather, 1 for all-reduce)
    compress_s: float
    communicate_s: float
    decompress_s: float


@dataclass
class StepStats:
    """All buckets of one backward pass."""

    step: int
    buckets: list[BucketStats] = field(default_factory=list)

    def total(self, key: str) -> float:
        return sum(getattr(b, key) for b in self.buckets)

    def to_dict(self) -> dict[str, Any]:
        keys = ("payload_bytes", "sent_bytes", "dense_bytes", "compress_s", "communicate_s", "decompress_s")
        return {"step": self.step, **{k: self.total(k) for k in keys}, "buckets": [asdict(b) for b in self.buckets]}


class HookStats:
    """Per-step records of the hook; a step closes when DDP hands over its last bucket."""

    def __init__(self) -> None:
        self.steps: list[StepStats] = []
        self._pending: list[BucketStats] = []

    def add(self, rec: BucketStats, last: bool) -> None:
        self._pending.append(rec)
        if last:
            self.steps.append(StepStats(len(self.steps), self._pending))
            self._pending = []

    def reset(self) -> None:
        self.steps = []
        self._pending = []

    def summary(self, skip: int = 0, policy: TimingPolicy | None = None) -> dict[str, Any]:
        """Totals, and per-step medians with their spread, over the steps after the first ``skip`` (warm-up).

        Each of compress, communicate and decompress gets ``{median_s, iqr_s, rel_iqr, rel_ci, n, flags}``
        under ``timing``: flagged ``unstable`` when its median's CI half-width / median is over the policy's threshold
        or the machine was loaded when the summary was taken, and ``too few steps`` under 5 steps.
        ``ratio`` is dense bytes / payload bytes per step.
        """
        steps = self.steps[skip:] or self.steps
        if not steps:
            return {"steps": 0}
        policy = policy or TimingPolicy()

        def med(key: str) -> float:
            return float(np.median([s.total(key) for s in steps]))

        load = load_per_core()
        timing = {}
        for key in ("compress_s", "communicate_s", "decompress_s"):
            vals = [s.total(key) for s in steps]
            spread = rel_ci(vals)
            q1, q3 = np.percentile(vals, [25, 75])
            flags = []
            if (spread is not None and spread > policy.unstable_rel_ci) or (load is not None and load > policy.load_per_core):
                flags.append(UNSTABLE)
            if len(vals) < 5:
                flags.append(TOO_FEW_STEPS)
            timing[key.removesuffix("_s")] = {"median_s": float(np.median(vals)), "iqr_s": float(q3 - q1), "rel_iqr": rel_iqr(vals),
                                              "rel_ci": spread,
                                              "n": len(vals), "flags": flags}
        payload = float(np.mean([s.total("payload_bytes") for s in self.steps]))
        dense = float(np.mean([s.total("dense_bytes") for s in self.steps]))
        return {
            "ratio": dense / payload if payload > 0 else None,
            "timing": timing,
            "load_per_core": load,
            "steps": len(self.steps),
            "payload_bytes_total": int(sum(s.total("payload_bytes") for s in self.steps)),
            "sent_bytes_total": int(sum(s.total("sent_bytes") for s in self.steps)),
            "payload_bytes_per_step": float(np.mean([s.total("payload_bytes") for s in self.steps])),
            "sent_bytes_per_step": float(np.mean([s.total("sent_bytes") for s in self.steps])),
            "dense_bytes_per_step": float(np.mean([s.total("dense_bytes") for s in self.steps])),
            "compress_s_median": med("compress_s"),
            "communicate_s_median": med("communicate_s"),
            "decompress_s_median": med("decompress_s"),
            "buckets": len(steps[-1].buckets),
            "collectives": sorted({b.collective for s in steps for b in s.buckets}),
            "decoded_payloads": max(b.decoded_payloads for s in steps for b in s.buckets),
        }


# ----------------------------------------------------------------------------- state


class HookState:
    """Settings and internal state of the compressed communication hook (one per DDP model).

    Settings (fixed at construction): the compressor, process group, seed, granularity and the
    resolved protocol.  Internal state: one list of compressor states per bucket index, and the
    parameter signature each list belongs to.  ``stats`` collects the per-step accounting.
    """

    def __init__(
        self,
        compressor: Compressor,
        *,
        process_group: dist.ProcessGroup | None = None,
        seed: int = 0,
        granularity: str = "bucket",
        protocol: str = "auto",
        stats: HookStats | None = None,
    ) -> None:
        if granularity not in GRANULARITIES:
            raise ParamError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
        if protocol not in PROTOCOL_CHOICES:
            raise ParamError(f"protocol must be one of {', '.join(PROTOCOL_CHOICES)}, got {protocol!r}")
        if not dist.is_available() or not dist.is_initialized():
            raise GcbenchError("the compressor hook needs an initialised torch.distributed process group")
        self.compressor = compressor
        self.process_group = process_group
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)
        info = compressor.info
        if self.world_size < info.min_workers:
            raise GcbenchError(f"{info.name} needs at least {info.min_workers} workers ({info.exchange}); this group has {self.world_size}")
        self.seed = int(seed)
        self.granularity = granularity
        self.protocol = self._resolve_protocol(protocol)
        # why the protocol differs from the paper's, when it does (recorded in results)
        self.protocol_note: str | None = None
        paper = info.resolve_protocol(compressor.params)
        #: the protocol's facts when the hook runs the card's protocol (None: gather)
        self.card_protocol = paper if self.protocol == paper.name else None
        if self.card_protocol is None and paper.name != "allgather":
            self.protocol_note = f"{info.name}'s own exchange ({paper.description}) is not used by the DDP hook; gather-and-average instead"
        # bucket index -> states of its units; DDP's bucket rebuild invalidates them (see module doc)
        self.bucket_states: dict[int, list[State]] = {}
        self.bucket_signature: dict[int, tuple[Any, ...]] = {}
        self.state_resets = 0
        self.stats = stats if stats is not None else HookStats()
        # parameter names identify a bucket's contents across steps, processes and checkpoints
        self.param_names: dict[int, str] = {}

    def name_parameters(self, module: torch.nn.Module) -> None:
        """Remember the names of ``module``'s parameters (bucket signatures use them)."""
        self.param_names = {id(p): n for n, p in module.named_parameters()}

    def _resolve_protocol(self, requested: str) -> str:
        """The card's protocol where the hook runs it (and ``requested`` allows it), else ``"gather"``."""
        if requested == "gather" or self.world_size == 1:
            return "gather"
        paper = self.compressor.info.resolve_protocol(self.compressor.params)
        return paper.name if paper.name in HOOK_PROTOCOLS else "gather"

    @property
    def per_tensor(self) -> bool:
        """The protocol in use needs each tensor's shape, so it ignores ``granularity="bucket"``."""
        return self.card_protocol is not None and self.card_protocol.per_tensor

    def states_for(self, bucket: int, signature: tuple[Any, ...], n_units: int) -> list[State]:
        """This bucket's unit states, fresh when the bucket's parameters changed."""
        old = self.bucket_signature.get(bucket)
        if old != signature:
            if old is not None:
                self.state_resets += 1
            shared = self.protocol == "powersgd"  # the warm-start Q must start equal everywhere
            self.bucket_states[bucket] = [
                self.compressor.init_state(unit_seed(self.seed, None if shared else self.rank, bucket, u)) for u in range(n_units)
            ]
            self.bucket_signature[bucket] = signature
        return self.bucket_states[bucket]

    def describe(self) -> dict[str, Any]:
        """What results record about the hook's configuration."""
        info = self.compressor.info
        return {
            "compressor": info.name,
            "version": info.version,
            "params": dict(self.compressor.params),
            "protocol": self.protocol,
            "protocol_description": GATHER_DESCRIPTION if self.card_protocol is None else self.card_protocol.description,
            "protocol_note": self.protocol_note,
            "granularity": "layer" if self.per_tensor else self.granularity,
            "world_size": self.world_size,
            "seed": self.seed,
            "state_resets": self.state_resets,
        }

    def state_dict(self) -> dict[str, Any]:
        """Compressor states per bucket (for checkpoints); settings are rebuilt by the caller."""
        return {
            "bucket_states": {b: [s.state_dict() for s in sts] for b, sts in self.bucket_states.items()},
            "bucket_signature": {b: list(sig) for b, sig in self.bucket_signature.items()},
            "state_resets": self.state_resets,
        }

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        self.bucket_states = {int(b): [State.from_state_dict(s) for s in sts] for b, sts in sd["bucket_states"].items()}
        self.bucket_signature = {int(b): tuple(sig) for b, sig in sd["bucket_signature"].items()}
        self.state_resets = int(sd["state_resets"])


# ----------------------------------------------------------------------------- the hook


class _Clock:
    """Wall-clock laps, synchronising CUDA first so kernel time lands in the right phase."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.t = self.now()

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def lap(self) -> float:
        t = self.now()
        dt, self.t = t - self.t, t
        return dt


def _units(state: HookState, bucket: dist.GradBucket) -> tuple[list[torch.Tensor], list[int], tuple[Any, ...]]:
    """(tensors to compress, their offsets in the flat buffer, parameter signature of the bucket)."""
    buf = bucket.buffer()
    params = bucket.parameters()
    signature = tuple(state.param_names.get(id(p), f"<unnamed {tuple(p.shape)}>") for p in params)
    if state.granularity == "bucket" and not state.per_tensor:
        return [buf], [0], signature
    grads = bucket.gradients()
    base, esize = buf.data_ptr(), buf.element_size()
    offsets = []
    for g in grads:
        off = (g.data_ptr() - base) // esize
        if not 0 <= off <= buf.numel() - g.numel():
            raise RuntimeError("DDP bucket gradient is not a view of the bucket buffer")
        offsets.append(int(off))
    return list(grads), offsets, signature


def _terngrad_shared(comp: Compressor, x: torch.Tensor, st: State, scaler: float) -> Payload:
    """TernGrad's payload with the group's shared scaler (what ``TernGrad.exchange`` does per worker)."""
    if x.numel() == 0:
        return comp.compress(x, st)
    body, meta, _ = comp._encode(x.detach().float(), st, scaler=scaler)  # type: ignore[call-arg]  # TernGrad's scaler hand-over
    st.step += 1
    return comp._payload(x, body, meta)


def _gather_exchange(state: HookState, index: int, xs: Sequence[torch.Tensor], states: Sequence[State],
                     clock: _Clock) -> tuple[list[torch.Tensor], BucketStats]:
    """Compress, all-gather sizes then padded bodies, decode every worker's payloads, average."""
    comp, group, world = state.compressor, state.process_group, state.world_size
    dev = xs[0].device
    comm_s = 0.0
    extra_sent = 0
    if state.protocol == "terngrad":
        from gcbench.compressors.terngrad import clip_and_scale

        clip = comp.params.clip
        scalers = torch.tensor([clip_and_scale(x.detach().float(), clip)[1] for x in xs], dtype=torch.float32, device=dev)
        t = clock.now()
        dist.all_reduce(scalers, op=dist.ReduceOp.MAX, group=group)
        comm_s += clock.now() - t
        extra_sent += 4 * len(xs)
        shared = scalers.tolist()
        payloads = [_terngrad_shared(comp, x, st, s) for x, st, s in zip(xs, states, shared, strict=True)]
    else:
        payloads = [p for p, _ in comp.compress_group(xs, states, need_decoded=False)]
    messages = [p.to_bytes() for p in payloads]  # serialising is part of producing the wire message
    compress_s = clock.lap() - comm_s

    size_rows, bodies, longest = _padded_allgather(state, messages, dev)
    comm_s += clock.lap()

    acc = [torch.zeros(x.numel(), dtype=torch.float32, device=dev) for x in xs]
    for r in range(world):
        raw = bodies[r]
        pos = 0
        for u, n in enumerate(size_rows[r]):
            # a peer's bytes: the unit's own shape is the only one accepted (checked before anything is allocated)
            p = Payload.from_bytes(raw[pos : pos + n], device=dev, expected_shape=xs[u].shape)
            pos += n
            acc[u] += comp.decompress(p, expected_shape=xs[u].shape).reshape(-1).to(dev, torch.float32)
    means = [a.div_(world) for a in acc]
    decompress_s = clock.lap()
    rec = BucketStats(
        bucket=index, numel=sum(x.numel() for x in xs), units=len(xs), protocol=state.protocol, collective="allgather",
        payload_bytes=sum(p.nbytes for p in payloads), sent_bytes=_SIZE_BYTES * len(xs) + longest + extra_sent,
        dense_bytes=sum(x.numel() * x.element_size() for x in xs), decoded_payloads=world,
        compress_s=compress_s, communicate_s=comm_s, decompress_s=decompress_s,
    )
    return means, rec


def _powersgd_exchange(state: HookState, index: int, xs: Sequence[torch.Tensor], states: Sequence[State],
                       clock: _Clock) -> tuple[list[torch.Tensor], BucketStats]:
    """PowerSGD's Algorithm 1 across the process group (see the module docstring)."""
    from gcbench.compressors import powersgd as ps

    comp, group, world = state.compressor, state.process_group, state.world_size
    r = comp.params.rank
    dev = xs[0].device
    ms = [ErrorFeedback.corrected(x.detach().float(), st).reshape(x.shape) for x, st in zip(xs, states, strict=True)]
    low = [i for i, x in enumerate(xs) if ps.is_low_rank(tuple(x.shape), r)]
    dense = [i for i in range(len(xs)) if i not in low]
    mats: dict[int, torch.Tensor] = {}
    p_parts = []
    for i in low:
        rows, cols = ps.matrix_shape(tuple(xs[i].shape))
        mats[i] = ms[i].reshape(rows, cols)
        q0 = states[i].tensors.get(ps.Q_KEY)
        if q0 is None or tuple(q0.shape) != (cols, r):  # the same first draw as PowerSGD._start_q
            q0 = torch.from_numpy(states[i].rng.standard_normal((cols, r), dtype=np.float32))
        p_parts.append((mats[i] @ q0.to(dev)).reshape(-1))
    # dense tensors travel in the first all-reduce, as in PyTorch's hook
    first = torch.cat(p_parts + [ms[i].reshape(-1) for i in dense])
    compress_s = clock.lap()
    dist.all_reduce(first, group=group)
    first.div_(world)
    comm_s = clock.lap()

    p_hats: dict[int, torch.Tensor] = {}
    q_parts = []
    pos = 0
    for i in low:
        rows, cols = mats[i].shape
        p_hats[i] = ps.orthonormalize(first[pos : pos + rows * r].reshape(rows, r)).contiguous()
        pos += rows * r
        q_parts.append((mats[i].t() @ p_hats[i]).contiguous())
    second = torch.cat([q.reshape(-1) for q in q_parts]) if q_parts else torch.zeros(0, device=dev)
    compress_s += clock.lap()
    if second.numel():
        dist.all_reduce(second, group=group)
        second.div_(world)
    comm_s += clock.lap()

    out: list[torch.Tensor] = [torch.empty(0)] * len(xs)
    qpos = 0
    for j, i in enumerate(low):
        rows, cols = mats[i].shape
        q_mean = second[qpos : qpos + cols * r].reshape(cols, r).contiguous()
        qpos += cols * r
        agg = ps.reconstruct(p_hats[i], q_mean)
        approx = agg if comp.params.ef_residual == "aggregate" else ps.reconstruct(p_hats[i], q_parts[j])
        states[i].tensors[ErrorFeedback.KEY] = (mats[i] - approx).reshape(xs[i].shape)
        states[i].tensors[ps.Q_KEY] = q_mean.clone()
        out[i] = agg.reshape(-1)
    for i in dense:
        n = xs[i].numel()
        out[i] = first[pos : pos + n]
        pos += n
        states[i].tensors[ErrorFeedback.KEY] = torch.zeros_like(ms[i])  # sent exactly: nothing left over
    for st in states:
        st.step += 1
    decompress_s = clock.lap()
    wire = 4 * (first.numel() + second.numel())
    rec = BucketStats(
        bucket=index, numel=sum(x.numel() for x in xs), units=len(xs), protocol="powersgd", collective="allreduce",
        payload_bytes=wire, sent_bytes=wire, dense_bytes=sum(x.numel() * x.element_size() for x in xs), decoded_payloads=1,
        compress_s=compress_s, communicate_s=comm_s, decompress_s=decompress_s,
    )
    return out, rec


def _padded_allgather(state: HookState, messages: Sequence[bytes], dev: torch.device) -> tuple[list[list[int]], list[bytes], int]:
    """All-gather one byte string per unit from every rank: sizes first, then the bodies padded to the longest.

    Returns (each rank's unit sizes, each rank's concatenated bytes, the padded length this rank sent).
    """
    group, world = state.process_group, state.world_size
    sizes = torch.tensor([len(m) for m in messages], dtype=torch.int64, device=dev)
    all_sizes = [torch.empty_like(sizes) for _ in range(world)]
    dist.all_gather(all_sizes, sizes, group=group)
    size_rows = [s.tolist() for s in all_sizes]
    longest = max(sum(r) for r in size_rows)
    own = b"".join(messages)
    body = torch.zeros(longest, dtype=torch.uint8)
    if own:
        body[: len(own)] = torch.frombuffer(bytearray(own), dtype=torch.uint8)
    bodies = [torch.empty(longest, dtype=torch.uint8, device=dev) for _ in range(world)]
    dist.all_gather(bodies, body.to(dev), group=group)
    return size_rows, [b.cpu().numpy().tobytes() for b in bodies], longest


def _onebit_exchange(state: HookState, index: int, xs: Sequence[torch.Tensor], states: Sequence[State],
                     clock: _Clock) -> tuple[list[torch.Tensor], BucketStats]:
    """1-bit SGD's two legs across the process group (see the module docstring)."""
    from gcbench.compressors import onebit

    comp, group, world, rank = state.compressor, state.process_group, state.world_size, state.rank
    dev = xs[0].device
    g = comp.params.granularity
    bounds = [onebit.stripe_bounds(tuple(x.shape), g, world) for x in xs]
    # leg 1: stripe j of every unit goes to rank j (a unit with fewer columns than ranks has empty stripes)
    stripes = [onebit.worker_stripes(comp, x, st, b) for x, st, b in zip(xs, states, bounds, strict=True)]  # type: ignore[arg-type]  # OneBitSGD
    to_rank = [[b"" if (p := stripes[u][j]) is None else p.to_bytes() for u in range(len(xs))] for j in range(world)]
    compress_s = clock.lap()
    # collectives take tensors on the group's device (NCCL: CUDA); payload bytes are decoded on the CPU
    send_sizes = torch.tensor([[len(m) for m in row] for row in to_rank], dtype=torch.int64, device=dev).reshape(-1)
    recv_sizes = torch.empty_like(send_sizes)
    dist.all_to_all_single(recv_sizes, send_sizes, group=group)  # rank i's unit sizes for me, U per rank
    send_rows, recv_rows = send_sizes.reshape(world, -1).tolist(), recv_sizes.reshape(world, -1).tolist()
    flat = b"".join(b"".join(row) for row in to_rank)
    send = torch.frombuffer(bytearray(flat), dtype=torch.uint8).to(dev) if flat else torch.empty(0, dtype=torch.uint8, device=dev)
    recv = torch.empty(sum(map(sum, recv_rows)), dtype=torch.uint8, device=dev)
    dist.all_to_all_single(recv, send, [sum(r) for r in recv_rows], [sum(r) for r in send_rows], group=group)
    comm_s = clock.lap()

    # leg 2: average my stripe of every unit, re-quantize with my owner residual, all-gather the results
    raw = recv.cpu().numpy().tobytes()
    received: list[list[torch.Tensor]] = [[] for _ in xs]
    pos = 0
    for i in range(world):
        for u, n in enumerate(recv_rows[i]):
            if n:  # my stripe of unit u from rank i: its shape is known here, so a peer cannot make me allocate more
                mine = onebit.stripe_shape(tuple(xs[u].shape), g, bounds[u], rank)
                received[u].append(onebit.COLUMN.decompress(Payload.from_bytes(raw[pos : pos + n], expected_shape=mine), mine))
            pos += n
    owned = [onebit.owner_stripe(received[u], world, states[u])[0] if received[u] else None for u in range(len(xs))]
    messages = [b"" if p is None else p.to_bytes() for p in owned]
    compress_s += clock.lap()
    size_rows, bodies, longest = _padded_allgather(state, messages, dev)
    comm_s += clock.lap()

    out: list[list[torch.Tensor]] = [[] for _ in xs]
    for r in range(world):
        pos = 0
        for u, n in enumerate(size_rows[r]):
            if n:  # rank r's stripe of unit u
                theirs = onebit.stripe_shape(tuple(xs[u].shape), g, bounds[u], r)
                out[u].append(onebit.COLUMN.decompress(Payload.from_bytes(bodies[r][pos : pos + n], expected_shape=theirs), theirs))
            pos += n
    means = [onebit.assemble_stripes(cols, g, tuple(x.shape)).to(dev, torch.float32) if cols else torch.zeros(x.numel(), device=dev)
             for cols, x in zip(out, xs, strict=True)]
    decompress_s = clock.lap()
    leg1_bytes = sum(n for j, row in enumerate(send_rows) if j != rank for n in row)
    rec = BucketStats(
        bucket=index, numel=sum(x.numel() for x in xs), units=len(xs), protocol="onebit", collective="alltoall+allgather",
        payload_bytes=leg1_bytes + sum(len(m) for m in messages),
        sent_bytes=_SIZE_BYTES * len(xs) * (world - 1) + leg1_bytes + _SIZE_BYTES * len(xs) + longest,
        dense_bytes=sum(x.numel() * x.element_size() for x in xs), decoded_payloads=2 * world,
        compress_s=compress_s, communicate_s=comm_s, decompress_s=decompress_s,
    )
    return means, rec


#: the hook's transport of each protocol it runs (terngrad's shared scaler rides on the gather exchange)
_EXCHANGES = {"powersgd": _powersgd_exchange, "onebit": _onebit_exchange}


def compressor_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook: compressed exchange of one bucket, averaged over the group."""
    buf = bucket.buffer()
    xs, offsets, signature = _units(state, bucket)
    states = state.states_for(bucket.index(), signature, len(xs))
    clock = _Clock(buf.device)
    exchange = _EXCHANGES.get(state.protocol, _gather_exchange)
    means, rec = exchange(state, bucket.index(), xs, states, clock)
    if len(xs) == 1 and offsets == [0] and xs[0].numel() == buf.numel():
        out = means[0].reshape(buf.shape).to(buf.dtype)
    else:
        out = torch.zeros_like(buf)  # zeros: any gap between views stays a zero gradient
        for x, off, m in zip(xs, offsets, means, strict=True):
            out[off : off + x.numel()] = m.to(buf.dtype)
    rec.decompress_s += clock.lap()  # writing the averaged values back into the bucket layout
    state.stats.add(rec, bucket.is_last())
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future(devices=[buf.device] if buf.device.type == "cuda" else None)
    fut.set_result(out)
    return fut


# DDP checks the hook's annotations by identity, and this module's are strings (PEP 563)
compressor_hook.__annotations__ = {"state": HookState, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}


def make_compressor(compressor: str | Compressor, params: Mapping[str, Any] | None = None) -> Compressor:
    """A compressor from an instance, a name, or a ``name:key=value`` spec plus ``params``."""
    if isinstance(compressor, Compressor):
        if params:
            raise ParamError("give params only with a compressor name, not with a Compressor instance")
        return compressor
    name, spec_params = registry.parse_spec(compressor)
    return registry.create(name, **{**spec_params, **dict(params or {})})


def register_compressor_hook(
    ddp_model: torch.nn.parallel.DistributedDataParallel,
    compressor: str | Compressor,
    params: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    stats: HookStats | None = None,
    granularity: str = "bucket",
    protocol: str = "auto",
    process_group: dist.ProcessGroup | None = None,
) -> HookState:
    """Make ``ddp_model`` exchange gradients through a gcbench compressor; returns the hook state.

    Args:
        ddp_model: a ``DistributedDataParallel`` model (its process group must be the default
            group or ``process_group``).
        compressor: a registered name (``"qsgd"``), a spec (``"topk:density=0.001"``) or an instance.
        params: compressor parameters (with a name or spec only).
        seed: seeds every unit's state (per worker, per bucket, per unit).
        stats: an existing :class:`HookStats` to record into (default: a new one, ``state.stats``).
        granularity: ``"bucket"`` compresses each flat DDP bucket, ``"layer"`` each parameter's gradient.
        protocol: ``"auto"`` uses the paper's exchange where the hook implements it (TernGrad,
            PowerSGD, 1-bit SGD), ``"gather"`` forces gather-and-average.
        process_group: the group to communicate in (default: the default group).
    """
    comp = make_compressor(compressor, params)
    state = HookState(comp, process_group=process_group, seed=seed, granularity=granularity, protocol=protocol, stats=stats)
    state.name_parameters(ddp_model.module)
    ddp_model.register_comm_hook(state, compressor_hook)
    return state
