"""LGC's rounds: the exchange steps of one worker, as legs of gcbench/core/protocol.py, shared by both presets.

Dense rounds (ps: push and pull through the server; ring: a ring all-reduce), top-k rounds with
error feedback (ps: through the server; ring: an all-gather) and their autoencoder training round,
the phase-3 server rounds (the one-time encoder transfer, the leader's latent and indices) and the
ring's broadcast and all-reduce.  The package docstring (gcbench/compressors/lgc/__init__.py) says
what each phase sends.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from types import MappingProxyType
from typing import Any, Protocol

import torch

from gcbench.compressors._common import dense_from_sparse, k_of
from gcbench.compressors.lgc import autoencoder as ae
from gcbench.compressors.lgc.index_sets import positions_in, topk_indices_sorted
from gcbench.compressors.lgc.result import LGCExchangeResult
from gcbench.compressors.lgc.windows import Windows
from gcbench.compressors.lgc.wire import Wire, f32_bytes, f32_read
from gcbench.core.compressor import State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_tensor
from gcbench.core.payload import Payload
from gcbench.core.protocol import SERVER, Context, Leg, Message, Outcome, Send, ToServer, WorkerProtocol

#: one autoencoder training step of a top-k round: (autoencoder record, values, innovation values, innovation mask, leader)
Trainer = Callable[[dict[str, Any], torch.Tensor, torch.Tensor, torch.Tensor, int], None]


class LGCCompressor(Protocol):
    """What the rounds and the presets use of the compressor they run for (:class:`gcbench.compressors.lgc.contract.LGC`)."""

    settings: MappingProxyType[str, Any]
    channels: tuple[int, ...]
    fold: int

    @property
    def info(self) -> Any: ...

    @property
    def name(self) -> str: ...

    def phase_of(self, step: int) -> str: ...

    def leader_of(self, step: int, workers: int) -> int: ...

    def k_of(self, d: int) -> int: ...

    def uses_autoencoder(self, d: int) -> bool: ...

    def windows(self, k: int) -> Windows: ...

    def autoencoder(self, state0: State, workers: int = 1, device: torch.device | None = None) -> dict[str, Any]: ...

    def optimise(self, rec: dict[str, Any], loss_of: Callable[[dict[str, torch.Tensor]], torch.Tensor]) -> None: ...

    def compress(self, x: torch.Tensor, state: State) -> Payload: ...

    def decode_received(self, payload: Payload, expected_shape: tuple[int, ...] | torch.Size | None = None) -> torch.Tensor: ...

    def worker_protocol(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> WorkerProtocol: ...

    def _result(self, agg: torch.Tensor, msgs: list[Message], n: int, phase: str, leader: int, used: bool) -> LGCExchangeResult: ...


def others(w: int, n: int) -> tuple[int, ...]:
    """Every worker but w."""
    return tuple(r for r in range(n) if r != w)


def noting_uploads(rounds: Generator[Leg, Any, list[torch.Tensor]], me: int, units: int) -> WorkerProtocol:
    """Pass a worker's rounds through, noting per unit the first message it sends there (its upload); its :class:`Outcome`."""
    firsts: list[Payload | None] = [None] * units
    value: Any = None
    while True:
        try:
            leg = rounds.send(value)
        except StopIteration as stop:
            return Outcome(stop.value, list(firsts))
        if isinstance(leg, Send | ToServer):
            for m in leg.messages:
                if m.sender == me and m.unit is not None and firsts[m.unit] is None:
                    firsts[m.unit] = m.payload
        value = yield leg


def only(msgs: Sequence[Message], phase: str) -> Payload:
    """The one message of ``phase`` among ``msgs`` (a peer or server that sent none, or several, broke the protocol)."""
    found = [m.payload for m in msgs if m.phase == phase]
    if len(found) != 1:
        raise PayloadError(f"lgc: expected one {phase!r} message, got {len(found)}")
    return found[0]


def by_sender(me: int, own: Payload, got: Sequence[Message], n: int, phase: str) -> list[Payload]:
    """Per worker, its ``phase`` message: this worker's own, the others' as received."""
    return [own if w == me else only([m for m in got if m.sender == w], phase) for w in range(n)]


class Rounds:
    """The exchange steps both presets run, as one worker's side: dense, top-k (with the autoencoder's training round),
    the phase-3 server rounds, and the ring's broadcast and all-reduce.  ``lgc`` is the compressor they run for."""

    def __init__(self, lgc: LGCCompressor) -> None:
        self.lgc = lgc
        self.wire = Wire(lgc.name, lgc.info.version, str(lgc.settings["index_coding"]))

    @property
    def settings(self) -> MappingProxyType[str, Any]:
        """The compressor's effective parameters (:attr:`LGC.settings`)."""
        return self.lgc.settings

    def _dense_exchange(self, u: int, a: torch.Tensor, ctx: Context, phase: str, shape: tuple[int, ...],
                        dtype: torch.dtype) -> Generator[Leg, Any, torch.Tensor]:
        """The mean of the workers' fp32 vectors, flat: ps through the server (push, pull), ring by a ring all-reduce."""
        n = ctx.world
        if self.settings["mode"] != "ps":
            return (yield from self._ring_allreduce(a, ctx, f"{phase}:ring", dtype)) / n

        def serve(rows: list[list[Message]]) -> list[Message]:
            acc = torch.zeros(a.numel(), dtype=torch.float32, device=a.device)
            for w in range(n):  # the server decodes what arrived
                acc += self.lgc.decode_received(only(rows[w], f"{phase}:push"), shape).reshape(-1)
            return [Message(f"{phase}:pull", SERVER, tuple(range(n)), self.wire.dense(acc / n, shape, dtype))]

        got = yield ToServer([Message(f"{phase}:push", ctx.rank, (), self.wire.dense(a, shape, dtype))], f"{phase}:push", serve)
        pull = only(got, f"{phase}:pull")
        return ctx.once((u, "aggregate"), lambda: self.lgc.decode_received(pull, shape).reshape(-1))

    def _topk_exchange(self, u: int, a: torch.Tensor, state: State | None, ctx: Context, phase: str, leader: int, train: Trainer | None,
                       shape: tuple[int, ...], dtype: torch.dtype,
                       keep: list[tuple[torch.Tensor, torch.Tensor]] | None = None
                       ) -> Generator[Leg, Any, tuple[torch.Tensor, torch.Tensor]]:
        """Top-k with error feedback: ps through the server (push, pull of the mean at the union of the
        indices), ring by all-gather; with a ``train`` step (only ``preset="gcbench"`` trains per tensor), then the
        autoencoder's training round, which calls it.  (aggregate, sent).

        ``keep`` receives every worker's push decoded (values, ascending indices), by worker, where this worker sees
        them (ps: in the server's round, where it is hosted; ring: from the all-gather), for a later training round
        over several units (the reference preset's).
        """
        me, n, d = ctx.rank, ctx.world, a.numel()
        k = self.lgc.k_of(d)
        idx = topk_indices_sorted(a, k)
        push = self.wire.topk(a[idx], idx, d, shape, dtype)
        sent = dense_from_sparse(a[idx], idx, d)
        if self.settings["mode"] == "ps":
            server: dict[str, Any] = {}  # what the server keeps between its rounds (it runs where rank 0 is)

            def serve(rows: list[list[Message]]) -> list[Message]:
                pushes = [only(row, f"{phase}:push") for row in rows]
                server["pushed"] = pushed = [self.wire.read_push(p, shape) for p in pushes]  # each decoded once
                if keep is not None:
                    keep[:] = pushed
                acc = self._mean_of(pushed, d, a.device)
                support = torch.unique(torch.cat([i for _, i in pushed]))
                replies = [Message(f"{phase}:pull", SERVER, tuple(range(n)), self.wire.topk(acc[support], support, d, shape, dtype))]
                if train is not None:  # the server tells the other workers the leader's index set
                    ip = self.wire.indices(pushed[leader][1], d, shape, dtype)
                    replies.append(Message("topk:train", SERVER, others(leader, n), ip))
                return replies

            got = yield ToServer([Message(f"{phase}:push", me, (), push)], f"{phase}:push", serve)
            pull = only(got, f"{phase}:pull")
            agg = ctx.once((u, "aggregate"), lambda: self.lgc.decode_received(pull, shape).reshape(-1))
            if train is not None:
                idx_l = idx if me == leader else self.wire.read_indices(only(got, "topk:train"), d, 0)[1]
                mine = [] if me == leader else [Message("topk:train", me, (), self.wire.missing_values(a, idx, idx_l, shape, dtype))]

                def serve_train(rows: list[list[Message]]) -> list[Message]:
                    pushed = server["pushed"]
                    lead = pushed[leader][1]
                    extra = [None if w == leader else only(rows[w], "topk:train") for w in range(n)]
                    values = self._values_at(pushed, lead, leader, extra)
                    inn_vals, inn_mask = self._innovation_in_k(pushed, lead, True, d)
                    assert state is not None, "training needs the unit's state"
                    train(self.lgc.autoencoder(state, n, values.device), values, inn_vals, inn_mask, leader)
                    return []

                yield ToServer(mine, "topk:train", serve_train)
            return agg, sent
        # ring: all-gather (each sends its payload once and receives the others')
        got = yield Send([Message(f"{phase}:allgather", me, others(me, n), push)], f"{phase}:allgather")
        pushes = by_sender(me, push, got, n, f"{phase}:allgather")
        # every push decoded once (the simulated transport shares it between the workers, each of which holds them all)
        pushed = ctx.once((u, "pushed"), lambda: [self.wire.read_push(p, shape) for p in pushes])
        if keep is not None:
            keep[:] = pushed
        agg = ctx.once((u, "aggregate"), lambda: self._mean_of(pushed, d, a.device))
        if train is not None:  # every worker trains an identical replica on every worker's values at the leader's indices
            idx_l = pushed[leader][1]
            extra = None if me == leader else self.wire.missing_values(a, idx, idx_l, shape, dtype)
            got = yield Send([] if extra is None else [Message("topk:train", me, others(me, n), extra)], "topk:train")
            rows = [None if w == leader else (extra if w == me else only([m for m in got if m.sender == w], "topk:train"))
                    for w in range(n)]
            values = self._values_at(pushed, idx_l, leader, rows)
            inn_vals, inn_mask = self._innovation_in_k(pushed, idx_l, False, d)
            assert state is not None, "training needs the unit's state"
            ctx.once((u, "train"), lambda: train(self.lgc.autoencoder(state, n, values.device), values, inn_vals, inn_mask, leader))
        return agg, sent

    @staticmethod
    def _mean_of(pushed: Sequence[tuple[torch.Tensor, torch.Tensor]], d: int, device: torch.device) -> torch.Tensor:
        """The mean of the workers' top-k vectors (values, indices), each added densely in worker order."""
        acc = torch.zeros(d, dtype=torch.float32, device=device)
        for vals, idx in pushed:
            acc += dense_from_sparse(vals.to(device), idx.to(device), d)
        return acc / len(pushed)

    def _values_at(self, pushed: list[tuple[torch.Tensor, torch.Tensor]], idx_l: torch.Tensor, leader: int,
                   extra: Sequence[Payload | None]) -> torch.Tensor:
        """Every worker's values (N, K) at the leader's top-k indices: from its push, the rest from its ``values`` message."""
        values = torch.zeros((len(pushed), idx_l.numel()), dtype=torch.float32, device=idx_l.device)
        for w, (vals_w, idx_w) in enumerate(pushed):
            where, have = positions_in(idx_w, idx_l)  # which leader indices this worker's push already held
            values[w, have] = vals_w[where[have]]
            p = extra[w]
            if w != leader and p is not None:
                body = body_tensor(p)  # as many values as the leader indices it lacks: the assignment checks the count
                if body.numel() % 4:
                    raise PayloadError(f"lgc values: worker {w} sent {body.numel()} bytes, not a whole number of float32")
                try:
                    values[w, ~have] = f32_read(body, 0, body.numel() // 4, "values").to(values.device)
                except RuntimeError:
                    raise PayloadError(f"lgc values: worker {w} sent {body.numel()} bytes, not 4 per leader index it lacks") from None
        return values

    def _weights_round(self, state: State, n: int, leader: int, shape: tuple[int, ...], dtype: torch.dtype,
                       device: torch.device | None = None) -> ToServer:
        """Phase 3, ps: the server's round that sends its trained encoder to the leader, once (no messages after);
        the autoencoder on ``device``, the gradients'."""

        def serve(rows: list[list[Message]]) -> list[Message]:
            rec = self.lgc.autoencoder(state, n, device)
            if rec["encoder_at_leader"]:
                return []
            enc = torch.cat([rec["params"][nm].reshape(-1) for nm in ae.encoder_names(rec["params"])])
            rec["encoder_at_leader"] = True  # one-time: the server's trained encoder goes to the leader
            weights = self.wire.msg("weights", f32_bytes(enc), {"k": int(enc.numel())}, shape, dtype)
            return [Message("setup:weights", SERVER, (leader,), weights)]

        return ToServer([], "setup:weights", serve)

    @staticmethod
    def _leader_round(mine: list[Message], server: dict[str, Payload], leader: int, n: int) -> ToServer:
        """Phase 3, ps: the leader's latent and indices to the server (kept in ``server``), which forwards the indices to the others."""

        def serve(rows: list[list[Message]]) -> list[Message]:
            server["latent"] = only(rows[leader], "compressed:latent")
            server["indices"] = ip = only(rows[leader], "compressed:indices")
            return [Message("compressed:indices", SERVER, others(leader, n), ip)]  # forwarded so the others can pick their values

        return ToServer(mine, "compressed:latent", serve)

    def _ring_broadcast(self, p: Payload | None, leader: int, ctx: Context, phase: str) -> Generator[Leg, Any, Payload]:
        """``p`` from the leader along the ring, each worker forwarding it to the next (N − 1 legs); every worker's copy."""
        me, n = ctx.rank, ctx.world
        for j in range(n - 1):
            sender = (leader + j) % n
            got = yield Send([Message(phase, me, ((me + 1) % n,), p)] if me == sender and p is not None else [], phase)
            if me == (sender + 1) % n:
                p = only(got, phase)
        if p is None:
            raise RuntimeError("lgc ring broadcast: the leader had nothing to send")
        return p

    def _ring_allreduce(self, v: torch.Tensor, ctx: Context, phase: str, dtype: torch.dtype) -> Generator[Leg, Any, torch.Tensor]:
        """The sum over the workers of ``v`` by a ring all-reduce (reduce-scatter, then all-gather) of fp32 chunk payloads.

        In step s of the reduce-scatter worker w sends chunk (w − s) mod N to w + 1, which adds it to
        its own; in the all-gather it sends chunk (w + 1 − s) mod N, which the next worker keeps.
        Every worker ends with the same sums, added in the same order.
        """
        me, n = ctx.rank, ctx.world
        chunks = [c.float().clone() for c in torch.tensor_split(v.reshape(-1), n)]
        for sweep in ("reduce", "gather"):
            for s in range(n - 1):
                c = (me - s) % n if sweep == "reduce" else (me + 1 - s) % n
                p = self.wire.dense(chunks[c], (chunks[c].numel(),), dtype)
                got = yield Send([Message(phase, me, ((me + 1) % n,), p)], phase)
                c = (me - 1 - s) % n if sweep == "reduce" else (me - s) % n  # the chunk the previous worker sent
                value = self.lgc.decode_received(only(got, phase), (chunks[c].numel(),)).reshape(-1)
                chunks[c] = chunks[c] + value if sweep == "reduce" else value
        return torch.cat(chunks)

    def _innovation_in_k(self, pushed: list[tuple[torch.Tensor, torch.Tensor]], idx_l: torch.Tensor, ps: bool,
                         d: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, mask) (N, K) of each worker's innovation at its positions inside the leader's index set.

        A worker's innovation is its k_inn largest |values|, which lie inside its own top-k push,
        so the trainer takes them from there.  Ring mode has no innovation (all zero).
        """
        n, k = len(pushed), idx_l.numel()
        vals = torch.zeros((n, k), dtype=torch.float32, device=idx_l.device)
        mask = torch.zeros((n, k), dtype=torch.bool, device=idx_l.device)
        if not ps:
            return vals, mask
        for w, (v, idx) in enumerate(pushed):
            k_inn = min(k_of(self.settings["innovation_density"], d), v.numel())
            top = torch.topk(v.abs(), k_inn, sorted=False).indices
            where, inside = positions_in(idx_l, idx[top])
            vals[w, where[inside]] = v[top][inside]
            mask[w, where[inside]] = True
        return vals, mask
