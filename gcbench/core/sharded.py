"""Compression inside sharded collectives: where a codec's rounding happens in a reduce-scatter + all-gather.

gcbench's default exchange all-gathers whole payloads (every worker decodes every worker's
tensor).  Production collectives shard instead: the flat tensor is split into N chunks (sizes as
:func:`gcbench.core.protocol.ring_allreduce_bytes` splits them) and each chunk is reduced by one
owner.  With a lossy codec inside, *where* the partial sums are re-encoded decides the error:

* ``ring`` — a ring reduce-scatter with a codec on every hop: in step t worker w sends its
  partial sum of chunk (w − t) mod N, encoded, to worker w + 1, which decodes it, adds its own
  chunk in the accumulation dtype and re-encodes it for the next hop: every chunk is encoded N − 1
  times on its way round (each encoding of a partial sum of k contributions).  The owner divides
  the full sum by N, encodes that mean once more, and an all-gather hands every worker every
  owner's chunk (phases ``reduce-scatter``, ``allgather``);
* ``alltoall`` — every worker encodes each of its N chunks once and sends chunk j to worker j
  (an all-to-all); the owner decodes the N contributions, reduces them in the accumulation dtype,
  divides by N, encodes the mean and all-gathers it (torchft's and ZeRO++'s qgZ layout; phases
  ``alltoall``, ``allgather``): every contribution is quantized once, whatever N;
* ``allgather`` — the compressor's default all-gather of whole payloads
  (:meth:`gcbench.core.compressor.Compressor.gather_protocol`, what gcbench runs for a codec
  without a protocol of its own), unchanged but for the counting rule below.

The schemes are worker protocols (:mod:`gcbench.core.protocol`): the simulated transport and the
``torch.distributed`` one (:mod:`gcbench.distributed.transport`) run the same generators.  Bytes
are counted by the legs' rules: a ring hop is a :class:`~gcbench.core.protocol.Send` (counted
once by its sender), the all-to-all per peer, and every all-gather here *per peer*
(``AllGather(per_peer=True)``): a ring all-gather makes each worker forward the other chunks, so a
message costs the group one copy per receiving peer, and the bytes per worker compare with an fp32
ring all-reduce's 2(N − 1)/N of the tensor.  (``gcbench run`` counts an all-gathered payload once,
as the sender's upload; the ``allgather`` scheme here counts it N − 1 times.)

Which compressors fit (:func:`check_fits`): a codec that keeps no state across steps (a residual or
momentum belongs to a whole tensor, not to a partial sum that passes through a worker), whose
protocol is neither defined over the whole model (LGC's reference preset) nor per tensor shape
(PowerSGD's matrices), and that runs with one worker (:attr:`CompressorInfo.min_workers`).  A
codec with a protocol of its own (TernGrad's shared scaler, THC's summed integers) is used here as
a plain codec: the scheme replaces its protocol.  Accumulation: ``fp32`` or ``bf16`` for ``ring`` and
``alltoall``; ``allgather`` decodes and averages in float32 as the default protocol does, so it
takes ``fp32`` alone.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import replace
from typing import Any

import torch

from gcbench.core.compressor import Compressor, ExchangeResult, State, Traffic
from gcbench.core.errors import GcbenchError
from gcbench.core.payload import Payload
from gcbench.core.protocol import (
    AllGather,
    AllToAll,
    Context,
    Leg,
    LegResult,
    Message,
    Outcome,
    Send,
    WorkerProtocol,
    relay,
    simulate,
    split_sizes,
)

SCHEMES: tuple[str, ...] = ("ring", "alltoall", "allgather")
ACCUMULATE: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


class CollectiveError(GcbenchError):
    """A compressor or accumulation dtype that a sharded scheme cannot run (one line)."""


def check_fits(comp: Compressor, scheme: str, accumulate: str = "fp32") -> None:
    """Raise :class:`CollectiveError` unless ``comp`` can run under ``scheme`` accumulating in ``accumulate`` (see the module rule)."""
    if scheme not in SCHEMES:
        raise CollectiveError(f"unknown collective scheme {scheme!r}; choose from {', '.join(SCHEMES)}")
    if accumulate not in ACCUMULATE:
        raise CollectiveError(f"unknown accumulation dtype {accumulate!r}; choose from {', '.join(ACCUMULATE)}")
    if scheme == "allgather" and accumulate != "fp32":
        raise CollectiveError("the allgather scheme decodes every payload and averages in fp32; it takes --accumulate fp32 only")
    name = comp.name
    if comp.needs_whole_model:
        raise CollectiveError(f"{name}: its protocol spans the whole model, so it cannot be split into chunks of one tensor")
    proto = comp.info.resolve_protocol(comp.params)
    if proto.per_tensor:
        raise CollectiveError(f"{name}: its protocol needs each tensor's shape ({proto.name}), which chunks of a flat tensor lose")
    if comp.stateful:
        raise CollectiveError(f"{name} keeps state across steps (residual, momentum or warm start) that belongs to a whole tensor, "
                              "not to the partial sums a sharded collective re-encodes")
    if comp.info.min_workers > 1:
        raise CollectiveError(f"{name} needs at least {comp.info.min_workers} workers inside its own protocol; it is no plain codec")


def chunk_sizes(numel: int, world: int) -> list[int]:
    """The N chunk lengths of a flat tensor (differing by at most one), as a ring all-reduce splits it."""
    return split_sizes(numel, world)


def _chunks(flat: torch.Tensor, world: int) -> list[torch.Tensor]:
    return list(flat.split(chunk_sizes(flat.numel(), world)))


def _encode(comp: Compressor, chunk: torch.Tensor, state: State) -> Payload:
    """The payload of ``chunk`` (encoded from float32)."""
    return comp.compress(chunk.float(), state)


def _decode(comp: Compressor, payload: Payload | None, numel: int, device: torch.device) -> torch.Tensor:
    if payload is None:
        raise CollectiveError(f"{comp.name}: a peer sent no payload for a chunk")
    return comp.decode_received(payload, (numel,)).to(device)


def _assemble(comp: Compressor, rows: Sequence[Sequence[Payload | None]], owned: Sequence[int], sizes: Sequence[int],
              device: torch.device) -> torch.Tensor:
    """The whole flat tensor from the all-gathered owners' chunks: worker j's payload holds chunk ``owned[j]``.

    Every worker decodes the same payloads (its own too: a codec's receiver decodes what its sender
    decoded, by the contract), so the simulated workers compute it once (:meth:`Context.once`).
    """
    parts: list[torch.Tensor] = [torch.zeros(0, device=device)] * len(sizes)
    for j, c in enumerate(owned):
        parts[c] = _decode(comp, rows[j][0], sizes[c], device)
    return torch.cat(parts)


def ring_protocol(comp: Compressor, x: torch.Tensor, state: State, ctx: Context, acc: torch.dtype, unit: int = 0) -> WorkerProtocol:
    """One worker's ring reduce-scatter with a codec on every hop, then the all-gather of the encoded means (module docstring)."""
    n, me = ctx.world, ctx.rank
    flat = x.detach().reshape(-1).float()
    sizes = chunk_sizes(flat.numel(), n)
    own = _chunks(flat, n)
    partial = own[me].to(acc)  # what this worker sends first: its own chunk me
    first: Payload | None = None
    for t in range(n - 1):
        c_recv = (me - t - 1) % n  # this step it sends its partial sum of chunk me − t and receives chunk me − t − 1's
        payload = _encode(comp, partial, state)
        first = payload if first is None else first
        got = yield Send([Message("reduce-scatter", me, ((me + 1) % n,), payload)], "reduce-scatter")
        (msg,) = got
        partial = _decode(comp, msg.payload, sizes[c_recv], flat.device).to(acc) + own[c_recv].to(acc)
    mine = _encode(comp, partial.float() / n, state)  # after N − 1 hops: the full sum of chunk me + 1
    rows = yield AllGather([mine], "allgather", per_peer=True, body=True)
    owned = [(j + 1) % n for j in range(n)]
    agg = ctx.once(("sharded", unit), lambda: _assemble(comp, rows, owned, sizes, flat.device))
    return Outcome([agg.reshape(x.shape)], [mine if first is None else first])


def alltoall_protocol(comp: Compressor, x: torch.Tensor, state: State, ctx: Context, acc: torch.dtype,
                      unit: int = 0) -> WorkerProtocol:
    """One worker's all-to-all of encoded chunks, reduce of its chunk in ``acc``, all-gather of the encoded means."""
    n, me = ctx.world, ctx.rank
    flat = x.detach().reshape(-1).float()
    sizes = chunk_sizes(flat.numel(), n)
    payloads = [_encode(comp, c, state) for c in _chunks(flat, n)]
    got = yield AllToAll([[p] for p in payloads], "alltoall")
    total = torch.zeros(sizes[me], dtype=acc, device=flat.device)
    for row in got:  # in worker order, this worker's own payload decoded like the others
        total = total + _decode(comp, row[0], sizes[me], flat.device).to(acc)
    mine = _encode(comp, total.float() / n, state)
    rows = yield AllGather([mine], "allgather", per_peer=True, body=True)
    agg = ctx.once(("sharded", unit), lambda: _assemble(comp, rows, range(n), sizes, flat.device))
    return Outcome([agg.reshape(x.shape)], [payloads[(me + 1) % n] if n > 1 else payloads[0]])


def per_peer(legs: Generator[Leg, LegResult, Outcome]) -> WorkerProtocol:
    """Pass a protocol's legs through with every all-gather counted per receiving peer; the computation is untouched."""
    return relay(legs, lambda leg: replace(leg, per_peer=True) if isinstance(leg, AllGather) else leg)


def sharded_protocol(comp: Compressor, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context, scheme: str,
                     accumulate: str = "fp32") -> WorkerProtocol:
    """One worker's side of ``scheme`` for its units ``xs`` (one after another); checks :func:`check_fits` first."""
    check_fits(comp, scheme, accumulate)
    if scheme == "allgather":
        return (yield from per_peer(comp.gather_protocol(xs, states, ctx)))
    acc = ACCUMULATE[accumulate]
    run = ring_protocol if scheme == "ring" else alltoall_protocol
    aggregates: list[torch.Tensor] = []
    sent: list[Payload | None] = []
    for u, (x, st) in enumerate(zip(xs, states, strict=True)):
        out = yield from run(comp, x, st, ctx, acc, u)
        aggregates += out.aggregates
        sent += out.sent
    return Outcome(aggregates, sent)


def simulate_sharded(comp: Compressor, grads: Sequence[torch.Tensor], states: Sequence[State], scheme: str,
                     accumulate: str = "fp32") -> ExchangeResult:
    """Run ``scheme`` for N workers (``grads[w]``, ``states[w]``) on the simulated transport: worker 0's aggregate, every byte.

    The workers share one :meth:`Context.once` memo, as :meth:`Compressor.simulate_exchange`'s do.
    """
    check_fits(comp, scheme, accumulate)
    n = len(grads)
    if n != len(states) or not n:
        raise ValueError("simulate_sharded needs one state per worker gradient, and at least one worker")
    memo: dict[Any, Any] = {}
    run = simulate([sharded_protocol(comp, [grads[w]], [states[w]], Context(w, n, (), memo), scheme, accumulate) for w in range(n)])
    traffic = Traffic()
    for phase, counted in run.legs:
        for w, c in enumerate(counted):
            traffic.add(phase, w, c.sent, c.received, c.sent_body)
    sent = [o.sent[0] for o in run.outcomes if o.sent[0] is not None]
    return ExchangeResult(run.outcomes[0].aggregates[0].reshape(grads[0].shape), traffic, sent)
