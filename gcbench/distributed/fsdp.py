"""Compressed gradients inside FSDP2's reduce-scatter (``torch.distributed.fsdp.fully_shard``), verified on the wire.

``register_fsdp_compressor(model, "qsgd")`` installs, on every ``fully_shard``-ed module of
``model``, a custom reduce-scatter (``FSDPModule.set_custom_reduce_scatter``, the ``ReduceScatter``
interface of ``torch/distributed/fsdp/_fully_shard/_fsdp_api.py``) that runs a gcbench compressor
where FSDP2 would reduce-scatter the dense gradients.  FSDP2 hands it one flat input per parameter
group and backward pass: every parameter's gradient, padded on dim 0 to a multiple of the world
size, laid out as ``world`` equal chunks (``input.view(world, -1)[j]`` is rank j's shard of every
parameter, ``foreach_reduce_scatter_copy_in`` in ``_fsdp_collectives.py``).  Per call, on each rank:

1. compress every chunk j with the compressor (one state per module and destination rank, so error
   feedback and warm starts persist across steps; its own chunk too, so every contribution to a
   shard goes through the same codec);
2. exchange the payloads with one all-to-all (the :class:`~gcbench.core.protocol.AllToAll` leg on the
   ``torch.distributed`` transport, :mod:`gcbench.distributed.transport`: sizes, then the bytes with
   ``all_to_all_single``, which gloo supports; no all-gather fallback is needed);
3. decode the world's payloads of its own chunk (peers' bytes checked against the shape it waits for),
   sum them in rank order in the accumulation dtype (float32 by default), divide by the world for
   FSDP's ``AVG`` (``SUM`` as is), and write the sum into FSDP's output shard.

The compressor sees flat 1-D chunks: a compressor whose protocol needs each tensor's shape or spans
the model (PowerSGD's P/Q all-reduces, 1-bit SGD's two legs, LGC) is run as a codec here (compress,
send, decode), not as its paper's protocol.  FSDP2 calls the reduce-scatter synchronously (it ignores
the returned work), so the exchange completes before the call returns.

Wire verification as in the DDP hook: the all-to-all's bytes handed to ``torch.distributed`` must be
the payloads' ``nbytes`` plus the size exchange, and every payload's body the size its header declares,
or the call raises :class:`~gcbench.distributed.transport.WireMismatchError` (``verify_wire=False``
records only).  :class:`FSDPCompression` keeps per call a :class:`~gcbench.distributed.hook_stats.BucketStats`
(``bucket`` = the module's index, ``dense_bytes`` = what FSDP's dense reduce-scatter would send: the
``world − 1`` peer chunks in the input's dtype); a step of its :class:`~gcbench.distributed.hook_stats.HookStats`
closes when every registered module's reduce-scatter ran once.

Limitations: one parameter group per module (FSDP2's own restriction on custom reduce-scatters); FSDP's
``PREMUL_SUM`` (``set_gradient_divide_factor``) is refused; HSDP's all-reduce across replicas stays dense.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

from gcbench.core.compressor import Compressor, State
from gcbench.core.errors import GcbenchError, ParamError
from gcbench.core.protocol import AllToAll, Outcome, WorkerProtocol
from gcbench.distributed.hook_state import check_payload_sizes, make_compressor, unit_seed
from gcbench.distributed.hook_stats import BucketStats, HookStats
from gcbench.distributed.launch import check_agreement
from gcbench.distributed.transport import ChainTimes, TorchTransport, drive

PHASE = "reduce-scatter"
ACCUM_DTYPES = (torch.float32, torch.float64)


class FSDPCompression:
    """What every module's compressed reduce-scatter shares: the compressor, seed, accumulation dtype, statistics."""

    def __init__(self, compressor: Compressor, *, seed: int = 0, accum: torch.dtype = torch.float32, verify_wire: bool = True,
                 stats: HookStats | None = None) -> None:
        if accum not in ACCUM_DTYPES:
            raise ParamError(f"accum must be torch.float32 or torch.float64, got {accum}")
        self.compressor = compressor
        self.seed = int(seed)
        self.accum = accum
        self.verify_wire = bool(verify_wire)
        self.stats = stats if stats is not None else HookStats()
        self.comms: list[CompressedReduceScatter] = []
        self._ran: set[int] = set()  # modules whose reduce-scatter ran in the step under way

    def record(self, rec: BucketStats) -> None:
        """Add one call's statistics; the step closes once every module's reduce-scatter ran."""
        self._ran.add(rec.bucket)
        last = len(self._ran) == len(self.comms)
        if last:
            self._ran = set()
        self.stats.add(rec, last)

    def configuration(self) -> dict[str, Any]:
        info = self.compressor.info
        return {"compressor": info.name, "version": info.version, "params": dict(self.compressor.params), "seed": self.seed,
                "accum": str(self.accum), "modules": len(self.comms)}

    def describe(self) -> dict[str, Any]:
        """What results record: the configuration and this rank's wire verification so far."""
        wire = self.stats.wire_summary()
        return {**self.configuration(), "protocol": "compressed reduce-scatter (all-to-all of payloads)",
                "wire_verified": wire["verified"], "wire_bytes_ratio": wire["ratio"]}


class CompressedReduceScatter(ReduceScatter):
    """FSDP2's reduce-scatter through a gcbench compressor, for one ``fully_shard``-ed module (module doc)."""

    def __init__(self, shared: FSDPCompression, index: int) -> None:
        self.shared = shared
        self.index = index
        self.states: list[State] = []
        self.signature: tuple[int, int] | None = None
        self.state_resets = 0

    def allocate(self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def _states(self, rank: int, world: int, numel: int) -> list[State]:
        sig = (world, numel)
        if sig != self.signature:
            if self.signature is not None:
                self.state_resets += 1
            comp, seed = self.shared.compressor, self.shared.seed
            self.states = [comp.init_state(unit_seed(seed, rank, self.index, j)) for j in range(world)]
            self.signature = sig
        return self.states

    def _protocol(self, rows: list[torch.Tensor], states: list[State], rank: int, world: int, average: bool) -> WorkerProtocol:
        comp, accum = self.shared.compressor, self.shared.accum
        payloads = [p for p, _ in comp.compress_group(rows, states, need_decoded=False)]
        received = yield AllToAll([[p] for p in payloads], PHASE)
        acc = torch.zeros(rows[rank].shape, dtype=accum, device=rows[rank].device)
        for w in range(world):  # rank order: the same on every rank
            acc += comp.decode_received(received[w][0], rows[rank].shape).to(device=acc.device, dtype=accum)
        if average:
            acc /= world
        return Outcome([acc], list(payloads))

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup, op: Any,
                 async_op: bool = False) -> None:
        if op == dist.ReduceOp.AVG:
            average = True
        elif op == dist.ReduceOp.SUM:
            average = False
        else:
            raise GcbenchError(f"the compressed FSDP reduce-scatter sums or averages; FSDP asked for {op} "
                               "(set_gradient_divide_factor is not supported)")
        shared = self.shared
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        if input_tensor.numel() != world * output_tensor.numel():
            raise RuntimeError(f"reduce-scatter input of {input_tensor.numel()} elements for an output of {output_tensor.numel()} "
                               f"on {world} ranks")
        rows = list(input_tensor.detach().reshape(world, -1).unbind(0))
        states = self._states(rank, world, input_tensor.numel())
        transport = TorchTransport(group, rank, world, input_tensor.device, label=shared.compressor.info.name,
                                   verify=shared.verify_wire)
        times = ChainTimes()
        sync = torch.cuda.synchronize if input_tensor.device.type == "cuda" else None
        outcome = drive(self._protocol(rows, states, rank, world, average), transport, times, sync).wait()
        ok = check_payload_sizes(shared.compressor, list(outcome.sent), shared.verify_wire)
        t0 = time.perf_counter()
        output_tensor.copy_(outcome.aggregates[0].reshape(output_tensor.shape))
        write_s = time.perf_counter() - t0
        leg = transport.legs[0]
        esize = input_tensor.element_size()
        shared.record(BucketStats(
            bucket=self.index, numel=input_tensor.numel(), units=world, protocol=PHASE, collective=leg.kind,
            payload_bytes=sum(c.sent for _, c in leg.counted), sent_bytes=leg.handed,
            dense_bytes=(world - 1) * rows[0].numel() * esize, decoded_payloads=leg.delivered,
            compress_s=times.compress_s, communicate_s=times.communicate_s, decompress_s=times.decompress_s + write_s,
            promised_bytes=leg.promised, overhead_bytes=leg.overhead, padding_bytes=leg.padding, wire_bytes=leg.wire,
            wire_verified=ok and leg.verified))
        return None


def register_fsdp_compressor(
    module: torch.nn.Module,
    compressor: str | Compressor,
    params: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    accum: torch.dtype = torch.float32,
    verify_wire: bool = True,
    stats: HookStats | None = None,
    process_group: dist.ProcessGroup | None = None,
) -> FSDPCompression:
    """Make every ``fully_shard``-ed module in ``module`` reduce-scatter its gradients through a gcbench compressor.

    Args:
        module: a model after ``fully_shard`` (it, and/or its submodules, are ``FSDPModule`` s).
        compressor: a registered name (``"qsgd"``), a spec (``"topk:density=0.01"``) or an instance.
        params: compressor parameters (with a name or spec only).
        seed: seeds every state (per rank, module and destination chunk).
        accum: the dtype peers' decoded chunks are summed in (float32 or float64).
        verify_wire: raise :class:`~gcbench.distributed.transport.WireMismatchError` when the bytes handed to
            ``torch.distributed`` are not what the payloads promise; False records it in the stats only.
        stats: an existing :class:`~gcbench.distributed.hook_stats.HookStats` to record into.
        process_group: the group the ranks compare their configurations in (default: the default group);
            the exchanges run in the group FSDP passes (its mesh's).

    A collective: every rank calls it, and every rank raises
    :class:`~gcbench.distributed.launch.RankMismatchError` when their configurations differ.
    """
    from torch.distributed.fsdp import FSDPModule

    if not dist.is_available() or not dist.is_initialized():
        raise GcbenchError("the compressed FSDP reduce-scatter needs an initialised torch.distributed process group")
    comp = make_compressor(compressor, params)
    shared = FSDPCompression(comp, seed=seed, accum=accum, verify_wire=verify_wire, stats=stats)
    # a module with no parameters of its own (a root over sharded children) has no parameter group and never reduce-scatters
    targets = [m for m in module.modules() if isinstance(m, FSDPModule) and m._get_fsdp_state()._fsdp_param_groups]
    if not targets:
        raise GcbenchError("no fully_shard-ed module found: call torch.distributed.fsdp.fully_shard on the model first")
    for i, m in enumerate(targets):
        comm = CompressedReduceScatter(shared, i)
        m.set_custom_reduce_scatter(comm)
        shared.comms.append(comm)
    cfg = shared.configuration()
    check_agreement("FSDP gradient compressor", cfg, f"{cfg['compressor']} {cfg['params']} seed {cfg['seed']} on {cfg['modules']} "
                    "modules", process_group)
    return shared
