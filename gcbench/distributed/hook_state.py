"""The DDP hook's state and the queue its protocol runs wait on; :mod:`gcbench.distributed.ddp` installs the hook.

:class:`HookState` holds one DDP model's settings (the compressor, process group, seed, granularity, the resolved
protocol) and its compressor states; :func:`bucket_units` reads a DDP bucket's units; :func:`queued` runs the protocol
on units once the buckets queued before them completed, and records the run's statistics; :func:`make_compressor`
makes the compressor from a name or spec.  The plain hook (:mod:`gcbench.distributed.ddp`) and a plan's
(:mod:`gcbench.distributed.plan_hook`) are both built from them.

State (kept apart from the hook, like PyTorch's ``PowerSGDState``): one
:class:`~gcbench.core.compressor.State` per compressed unit (the whole flat bucket with
``granularity="bucket"``, each parameter's gradient with ``"layer"`` or a ``per_tensor``
protocol), kept per bucket index, so error-feedback residuals, momentum, warm starts and schedules
persist across steps.  DDP rebuilds its buckets once after the first iteration (bucket order
follows gradient-ready order); the states follow their parameters into the new buckets
(:mod:`gcbench.distributed.unit_states`: a parameter's own state as it is, a flat bucket's residuals
and momenta assembled slice by slice), and a unit that cannot be carried (a PowerSGD-like state
that is not element-aligned, in a flat bucket) gets a fresh one, counted by
:attr:`HookState.state_resets` (the whole model's states are never rebuilt).  Random
streams differ per worker (independent quantization noise is what makes averaging reduce
variance), except where the card's protocol says ``shared_seed`` (PowerSGD's initial Q must be
identical on all workers).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from gcbench.compressors import registry
from gcbench.core.compressor import Compressor, State
from gcbench.core.errors import GcbenchError, ParamError, PayloadError
from gcbench.core.protocol import Context, WorkerProtocol
from gcbench.distributed.hook_stats import BucketStats, HookStats
from gcbench.distributed.launch import RankMismatchError, check_agreement
from gcbench.distributed.transport import ChainTimes, LegBytes, TorchTransport, WireMismatchError, drive, then
from gcbench.distributed.unit_states import Part, StatePlaces

T = TypeVar("T")

GRANULARITIES = ("bucket", "layer")
PROTOCOL_CHOICES = ("auto", "gather")
GATHER_DESCRIPTION = "all-gather the payloads, decode all, average"
#: the bucket index under which a whole-model protocol's unit states and statistics are kept
WHOLE_MODEL = -1


def unit_seed(seed: int, rank: int | None, bucket: int, unit: int) -> int:
    """Seed of one unit's compressor state; ``rank=None`` gives a seed shared by all workers.

    Stable across processes (numpy's SeedSequence), so a restarted job draws the same streams.
    """
    words = [int(seed) % 2**32, 0xDD9 if rank is None else 1 + int(rank), int(bucket) % 2**32, int(unit)]  # WHOLE_MODEL too
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> np.uint64(1))


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
        verify_wire: bool = True,
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
        paper = info.resolve_protocol(compressor.params)
        if protocol == "auto" and not compressor.protocol_runs_anywhere():
            raise ParamError(f"{info.name}'s own exchange ({paper.description}) exists as a simulation only (it overrides "
                             "exchange, not worker_protocol); protocol='gather' all-gathers its payloads instead")
        self.protocol = "gather" if protocol == "gather" else paper.name
        #: the protocol's facts when the hook runs the card's protocol (None: gather)
        self.card_protocol = paper if self.protocol == paper.name else None
        #: the protocol spans the whole model: every bucket of a step is held until the last one arrives (:mod:`gcbench.distributed.ddp`)
        self.whole_model = self.card_protocol is not None and compressor.needs_whole_model
        self.held: list[Held] = []
        # the chain of buckets: each bucket's collectives start after the previous bucket's completed (:mod:`gcbench.distributed.ddp`)
        self.queue: torch.futures.Future[Any] = torch.futures.Future()
        self.queue.set_result(None)
        # bucket index -> states of its units; across DDP's bucket rebuild they follow their parameters (module doc)
        self.bucket_states: dict[int, list[State]] = {}
        self.bucket_signature: dict[int, tuple[Any, ...]] = {}
        self.bucket_parts: dict[int, list[list[Part]]] = {}  # each unit's parameters and their slices of it
        self.bucket_numels: dict[int, list[int]] = {}  # each unit's elements
        self.places = StatePlaces()
        self.state_resets = 0
        self.stats = stats if stats is not None else HookStats()
        #: raise :class:`WireMismatchError` when the bytes handed to collectives are not those promised (:mod:`gcbench.distributed.ddp`)
        self.verify_wire = bool(verify_wire)
        # the protocols compute with the creating thread's intra-op thread count, whichever thread runs a bucket's chain
        # (the caller's for the first bucket, a collective's callback thread after): the same count on every worker
        self.threads = torch.get_num_threads()
        # parameter names identify a bucket's contents across steps, processes and checkpoints; their order is the model's
        self.param_names: dict[int, str] = {}
        #: the ranks' configurations were compared (:meth:`check_peers`); the first bucket checks when nobody did
        self.peers_checked = False

    def name_parameters(self, module: torch.nn.Module) -> None:
        """Remember the names of ``module``'s parameters, in order (bucket signatures and the whole model's unit order use them)."""
        self.param_names = {id(p): n for n, p in module.named_parameters()}

    @property
    def per_tensor(self) -> bool:
        """The protocol in use needs each tensor (its shape, or the model's tensor list), so it ignores ``granularity="bucket"``."""
        return self.whole_model or (self.card_protocol is not None and self.card_protocol.per_tensor)

    @property
    def shared_seed(self) -> bool:
        """The protocol in use draws values all workers must agree on: the units' states are seeded alike."""
        return self.card_protocol is not None and self.card_protocol.shared_seed

    def worker_protocol(self, xs: list[torch.Tensor], states: list[State]) -> WorkerProtocol:
        """This worker's protocol generator for one bucket's units (the card's, or the forced all-gather)."""
        ctx = Context(self.rank, self.world_size, states if self.shared_seed else ())
        if self.protocol == "gather":
            return self.compressor.gather_protocol(xs, states, ctx)
        return self.compressor.worker_protocol(xs, states, ctx)

    def states_for(self, bucket: int, signature: tuple[Any, ...], n_units: int,
                   parts: Sequence[Sequence[Part]] | None = None, unit_numels: Sequence[int] | None = None) -> list[State]:
        """This bucket's unit states.  When the bucket's parameters changed (DDP's rebuild after the first step), each
        unit's state is carried from where its parameters' were (:mod:`gcbench.distributed.unit_states`: ``parts``,
        each unit's parameters and their slices, ``unit_numels`` its elements); a unit that cannot be carried gets a
        fresh state and counts in :attr:`state_resets`."""
        old = self.bucket_signature.get(bucket)
        if old != signature:
            shared = self.shared_seed  # e.g. PowerSGD's warm-start Q must start equal everywhere
            fresh = [self.compressor.init_state(unit_seed(self.seed, None if shared else self.rank, bucket, u)) for u in range(n_units)]
            if parts is not None and unit_numels is not None:
                if self.places:
                    carried = [self.places.carry(p, n, f) for p, n, f in zip(parts, unit_numels, fresh, strict=True)]
                    self.state_resets += sum(c is None for c in carried)
                    fresh = [f if c is None else c for c, f in zip(carried, fresh, strict=True)]
                self.places.record(parts, unit_numels, fresh)
                self.bucket_parts[bucket] = [list(p) for p in parts]
                self.bucket_numels[bucket] = list(unit_numels)
            elif old is not None:
                self.state_resets += 1
            self.bucket_states[bucket] = fresh
            self.bucket_signature[bucket] = signature
        return self.bucket_states[bucket]

    def describe(self) -> dict[str, Any]:
        """What results record about the hook's configuration."""
        info = self.compressor.info
        wire = self.stats.wire_summary()
        return {
            "compressor": info.name,
            "version": info.version,
            "params": dict(self.compressor.params),
            "protocol": self.protocol,
            "protocol_description": GATHER_DESCRIPTION if self.card_protocol is None else self.card_protocol.description,
            "granularity": "layer" if self.per_tensor else self.granularity,
            "world_size": self.world_size,
            "seed": self.seed,
            "state_resets": self.state_resets,
            # this rank's wire verification so far (:mod:`gcbench.distributed.ddp`): None before any bucket was checked
            "wire_verified": wire["verified"],
            "wire_bytes_ratio": wire["ratio"],
        }

    def configuration(self) -> dict[str, Any]:
        """What every rank must agree on for the exchanges to match: compressor, version, parameters, protocol, layout, seed."""
        info = self.compressor.info
        return {"compressor": info.name, "version": info.version, "params": dict(self.compressor.params), "protocol": self.protocol,
                "granularity": "layer" if self.per_tensor else self.granularity, "seed": self.seed}

    def configuration_text(self) -> str:
        """:meth:`configuration` as one short readable phrase (``topk v1 density=0.01, ... (protocol gather, bucket, seed 0)``)."""
        c = self.configuration()
        params = ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in sorted(c["params"].items()))
        return (f"{c['compressor']} v{c['version']}{' ' + params if params else ''} "
                f"(protocol {c['protocol']}, {c['granularity']}, seed {c['seed']})")

    def check_peers(self) -> None:
        """Compare the configuration with every rank's (one all-gather); raises :class:`RankMismatchError` on every rank if any differs.

        A collective: every rank of the group must call it (:func:`~gcbench.distributed.ddp.register_compressor_hook` does,
        and the first bucket does for a state registered by hand).
        """
        self.peers_checked = True
        try:
            check_agreement("gradient compressor", self.configuration(), self.configuration_text(), self.process_group)
        except RankMismatchError as exc:
            raise RankMismatchError(f"{exc} (every rank must register the same compressor, parameters, protocol, granularity "
                                    "and seed)") from None

    def state_dict(self) -> dict[str, Any]:
        """Compressor states per bucket (for checkpoints); settings are rebuilt by the caller."""
        return {
            "bucket_states": {b: [s.state_dict() for s in sts] for b, sts in self.bucket_states.items()},
            "bucket_signature": {b: list(sig) for b, sig in self.bucket_signature.items()},
            "bucket_parts": {b: [[(p.name, p.offset, p.numel) for p in unit] for unit in units] for b, units in self.bucket_parts.items()},
            "bucket_numels": {b: list(ns) for b, ns in self.bucket_numels.items()},
            "state_resets": self.state_resets,
        }

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        self.bucket_states = {int(b): [State.from_state_dict(s) for s in sts] for b, sts in sd["bucket_states"].items()}
        self.bucket_signature = {int(b): tuple(sig) for b, sig in sd["bucket_signature"].items()}
        self.state_resets = int(sd["state_resets"])
        # where each parameter's state is, for a later rebuild (a checkpoint without it: those units start fresh then)
        self.bucket_parts = {int(b): [[Part(str(n), int(o), int(k)) for n, o, k in unit] for unit in units]
                             for b, units in sd.get("bucket_parts", {}).items()}
        self.bucket_numels = {int(b): [int(n) for n in ns] for b, ns in sd.get("bucket_numels", {}).items()}
        self.places = StatePlaces()
        for b, units in self.bucket_parts.items():
            if b in self.bucket_states and b in self.bucket_numels:
                self.places.record(units, self.bucket_numels[b], self.bucket_states[b])


@dataclass
class Held:
    """A bucket whose exchange waits for the step's last bucket (a whole-model protocol): its layout and the future DDP holds."""

    buffer: torch.Tensor
    params: list[torch.Tensor]
    xs: list[torch.Tensor]
    offsets: list[int]
    future: torch.futures.Future[torch.Tensor]


# ----------------------------------------------------------------------------- a bucket's units and their run


def bucket_units(state: HookState, bucket: dist.GradBucket) -> tuple[list[torch.Tensor], list[int], tuple[Any, ...], list[list[Part]]]:
    """(tensors to compress, their offsets in the flat buffer, parameter signature of the bucket, each unit's parameters
    and their slices of it)."""
    buf = bucket.buffer()
    params = bucket.parameters()
    signature = tuple(state.param_names.get(id(p), f"<unnamed {tuple(p.shape)}>") for p in params)
    grads = bucket.gradients()
    base, esize = buf.data_ptr(), buf.element_size()
    offsets = []
    for g in grads:
        off = (g.data_ptr() - base) // esize
        if not 0 <= off <= buf.numel() - g.numel():
            raise RuntimeError("DDP bucket gradient is not a view of the bucket buffer")
        offsets.append(int(off))
    if state.granularity == "bucket" and not state.per_tensor:
        return [buf], [0], signature, [[Part(n, o, g.numel()) for n, o, g in zip(signature, offsets, grads, strict=True)]]
    return list(grads), offsets, signature, [[Part(n, 0, g.numel())] for n, g in zip(signature, grads, strict=True)]


def check_payload_sizes(compressor: Compressor, payloads: list[Any], verify: bool = True) -> bool:
    """Whether every payload ``compressor`` made has the body its header declares (``_expected_body_nbytes``).

    ``verify`` raises :class:`WireMismatchError` naming the compressor and both sizes instead of returning False.
    Payloads of other codecs, of empty tensors, and a protocol's own messages that its codec does not decode
    alone (LGC's latent and innovation messages: ``_expected_body_nbytes`` refuses them) are left to their receivers.
    """
    for p in payloads:
        if p is None or getattr(p, "codec", None) != compressor.name or p.numel == 0:
            continue
        try:
            size = compressor._expected_body_nbytes(p)
        except PayloadError:  # a message of the exchange, not a payload the codec decodes on its own
            continue
        if size is None:
            continue
        lo, hi = (size, size) if isinstance(size, int) else size
        if not lo <= p.body_nbytes <= hi:
            if verify:
                want = str(lo) if lo == hi else f"{lo} to {hi}"
                raise WireMismatchError(f"{compressor.name}: wire check failed: a payload's body has {p.body_nbytes} bytes where its "
                                        f"header promises {want} (shape {tuple(p.shape)})")
            return False
    return True


def _bucket_stats(state: HookState, index: int, xs: list[torch.Tensor], transport: TorchTransport, times: ChainTimes,
                  write_s: float, payloads_ok: bool = True, ready_at: float | None = None) -> BucketStats:
    legs: list[LegBytes] = transport.legs
    return BucketStats(
        bucket=index, numel=sum(x.numel() for x in xs), units=len(xs), protocol=state.protocol,
        collective="+".join(dict.fromkeys(leg.kind for leg in legs)),
        payload_bytes=sum(c.sent for leg in legs for _, c in leg.counted), sent_bytes=sum(leg.handed for leg in legs),
        dense_bytes=sum(x.numel() * x.element_size() for x in xs),
        decoded_payloads=max(1, sum(leg.delivered for leg in legs) // max(len(xs), 1)),
        compress_s=times.compress_s, communicate_s=times.communicate_s, decompress_s=times.decompress_s + write_s,
        promised_bytes=sum(leg.promised for leg in legs), overhead_bytes=sum(leg.overhead for leg in legs),
        padding_bytes=sum(leg.padding for leg in legs), wire_bytes=sum(leg.wire for leg in legs),
        wire_verified=payloads_ok and all(leg.verified for leg in legs), ready_at=ready_at,
    )


def queued(state: HookState, xs: list[torch.Tensor], states: list[State], device: torch.device, index: int, last: bool,
           write: Callable[[list[torch.Tensor]], T]) -> torch.futures.Future[T]:
    """Run the protocol on units ``xs`` once the chain before it completed: a future of ``write(the aggregates)``.

    Records the run's statistics as bucket ``index`` (``last``: the step's last record).
    """
    ready_at = time.monotonic()  # DDP hands the bucket over as its gradients are ready on this worker
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else None
    devices = [device] if cuda else None  # (the CUDA path is written to PyTorch's rules but was tested on gloo/CPU only)

    def start(_: Any) -> torch.futures.Future[Any]:
        transport = TorchTransport(state.process_group, state.rank, state.world_size, device, state.threads,
                                   label=state.compressor.info.name, verify=state.verify_wire)
        times = ChainTimes()
        return then(drive(state.worker_protocol(xs, states), transport, times, sync), lambda out: finish(out, transport, times),
                    devices)

    def finish(outcome: Any, transport: TorchTransport, times: ChainTimes) -> T:
        ok = check_payload_sizes(state.compressor, list(outcome.sent), state.verify_wire)
        t0 = time.perf_counter()
        out = write(outcome.aggregates)
        if sync is not None:
            sync()
        state.stats.add(_bucket_stats(state, index, xs, transport, times, time.perf_counter() - t0, ok, ready_at), last)
        return out

    done = then(state.queue, start, devices)
    queue: torch.futures.Future[Any] = torch.futures.Future()
    done.add_done_callback(lambda _: queue.set_result(None))  # the next bucket starts even after a failure here
    state.queue = queue
    return done


def make_compressor(compressor: str | Compressor, params: Mapping[str, Any] | None = None) -> Compressor:
    """A compressor from an instance, a name, or a ``name:key=value`` spec plus ``params``."""
    if isinstance(compressor, Compressor):
        if params:
            raise ParamError("give params only with a compressor name, not with a Compressor instance")
        return compressor
    name, spec_params = registry.parse_spec(compressor)
    return registry.create(name, **{**spec_params, **dict(params or {})})

