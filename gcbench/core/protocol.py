"""The multi-worker protocols as SPMD code: legs (collective requests) and the simulated transport.

A compressor's protocol is written once, as a per-worker generator
(:meth:`gcbench.core.compressor.Compressor.worker_protocol`): every worker runs the same code on
its own gradients and states, computes locally, and *yields* a leg whenever it needs the other
workers; the transport fulfils the leg across the workers and sends each worker its result; the
generator finally returns the worker's :class:`Outcome`.  Two transports drive the same
generators:

* :func:`simulate` (here, no ``torch.distributed``): advances N worker generators in lock step
  in one process and counts every byte of every leg per worker (what
  :meth:`Compressor.exchange` returns as :class:`Traffic`);
* :mod:`gcbench.distributed.transport`: one real collective per leg (``async_op=True``),
  counting the bytes it hands to the collectives by the same rule.

The legs (each carries one entry per *unit*: the tensors a worker exchanges together):

* :class:`AllReduce` — element-wise SUM or MAX of equal-shape tensors; result: the reduced
  tensors, float32 (integer tensors: their own dtype, summed exactly; THC's packed levels).
* :class:`AllGather` — every worker's payloads to every worker; result: per worker, its payloads.
* :class:`AllToAll` — worker w's ``payloads[j]`` to worker j; result: per sending worker, what it
  sent to this worker.
* :class:`Send` — addressed :class:`Message` s (point to point, or one message to several workers);
  result: the messages addressed to this worker.
* :class:`ToServer` — a parameter server's round: every worker's messages to a server hosted by
  one rank, the server's computation (``serve``) run there once, its replies to the workers;
  result: the replies addressed to this worker.  The server is not a worker (:data:`SERVER`).

A payload slot may be ``None`` (nothing to send for that unit).

Byte counting (:class:`TrafficRecord`, per leg phase and worker) is a rule of the leg, applied by
both transports to the messages they really move, so the numbers the benchmark has always
recorded stay what they are:

* ``AllReduce(count="ring")``: a ring all-reduce of each unit (:func:`ring_allreduce_bytes`);
* ``AllReduce(count="once")`` and :class:`AllGather`: each worker's message counted once as sent
  and the others' as received (``nbytes`` overrides a unit's message size: a summable payload
  counts its header, which every receiver already knows);
* ``AllGather(per_peer=True)`` and :class:`AllToAll`: one copy per receiving peer;
* :class:`Send` and :class:`ToServer` (:func:`count_messages`): a worker's message counted once as
  sent (bytes and body) however many receive it, and as received by each receiver; the server's
  replies are sent by no worker and its messages received by none.

The simulated :class:`AllReduce` sums in float32 (float64 tensors: float64) in worker order; a
real one sums in the wire dtype and its own order, so the two agree bit for bit on float32 sums
of two workers only.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar, cast

import torch

from gcbench.core.payload import Payload

T = TypeVar("T")

#: a worker's message for one unit: a payload, or None when it sends nothing for that unit
Slot = Payload | None


def split_sizes(numel: int, n: int) -> list[int]:
    """The n chunk lengths of ``numel`` elements, as ``numpy.array_split`` cuts them: the first ``numel % n`` one longer.

    Arithmetic alone (no index array of the tensor's length is made to count its bytes).
    """
    q, r = divmod(int(numel), n)
    return [q + 1] * r + [q] * (n - r)


def ring_allreduce_bytes(numel: int, n: int, itemsize: int = 4) -> list[tuple[int, int]]:
    """(sent, received) bytes per worker of a ring all-reduce of ``numel`` elements over ``n`` workers.

    The buffer is split into n chunks (sizes differ by at most one element).  In reduce-scatter
    step t worker w sends chunk (w − t) mod n, so over the n − 1 steps it sends every chunk but
    (w + 1) mod n; in the all-gather it sends every chunk but (w + 2) mod n.  It receives what its
    left neighbour sends.  Per worker this is about 2·(n − 1)/n × the buffer.
    """
    if n == 1:
        return [(0, 0)]
    chunks = [c * itemsize for c in split_sizes(numel, n)]
    total = numel * itemsize
    sent = [2 * total - chunks[(w + 1) % n] - chunks[(w + 2) % n] for w in range(n)]
    return [(sent[w], sent[(w - 1) % n]) for w in range(n)]


def reduce_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype an all-reduce's result comes back in: float32 (float64 for float64), an integer tensor's own dtype."""
    return dtype if not dtype.is_floating_point else torch.promote_types(dtype, torch.float32)


@dataclass
class AllReduce:
    """Reduce each unit's tensor element-wise across the workers (``op``: ``"sum"``, ``"mean"`` or ``"max"``).

    Attributes:
        tensors: one tensor per unit (same shapes and dtypes on every worker).
        phase: the traffic phase this leg is counted under, or one per unit.
        op: ``"sum"``, ``"max"``, or ``"mean"``: the sum divided by the number of workers (in float32, or float64
            for float64 tensors), in place on the transport's own result, which saves the protocol a copy.
        count: ``"ring"`` (a ring all-reduce's chunks) or ``"once"`` (each worker's tensor once).
        nbytes: per unit, the message size ``"once"`` counts (default: the tensor's bytes on the wire).
        body: count body bytes too (the tensor's bytes on the wire; ``sent_body`` of the record).
        wire: the dtype the tensors travel in, when not their own (PowerSGD computes P in float64
            and sends it as float32): the real transport casts to it, both transports count it.
    """

    tensors: list[torch.Tensor]
    phase: str | list[str]
    op: Literal["sum", "max", "mean"] = "sum"
    count: Literal["ring", "once"] = "ring"
    nbytes: list[int] | None = None
    body: bool = False
    wire: torch.dtype | None = None

    def itemsize(self, unit: int) -> int:
        """Bytes per element on the wire."""
        return (self.wire or self.tensors[unit].dtype).itemsize

    def phase_of(self, unit: int) -> str:
        return self.phase if isinstance(self.phase, str) else self.phase[unit]


@dataclass
class AllGather:
    """Every worker's payloads (one slot per unit) to every other worker.

    ``per_peer`` counts one copy per receiving peer (a message addressed to each of them);
    ``body`` counts body bytes too.
    """

    payloads: Sequence[Slot]
    phase: str
    per_peer: bool = False
    body: bool = False


@dataclass
class AllToAll:
    """Worker w's ``payloads[j][u]`` to worker j (its own slot ``payloads[w]`` stays with it, uncounted)."""

    payloads: list[list[Slot]]
    phase: str


#: the sender of a :class:`Message` that the parameter server sends (the server is not a worker)
SERVER = -1


@dataclass
class Message:
    """One addressed message: sent once by ``sender`` (a worker's rank, or :data:`SERVER`), delivered to ``receivers``.

    ``phase`` is the traffic phase it is counted under; ``receivers`` are workers (a message to the
    server lists none).  ``unit``: the unit whose result counts it, where one protocol exchanges
    several units and results are reported per unit (:func:`counted_in`; LGC's whole-model
    exchange).  It is bookkeeping of the simulated transport's results, never sent: a message
    that crossed a real transport has ``None``.
    """

    phase: str
    sender: int
    receivers: tuple[int, ...]
    payload: Payload
    unit: int | None = None


@dataclass
class Send:
    """This worker's addressed ``messages`` (their sender is its rank); result: the messages addressed to it, by sender.

    ``phase`` names the leg (every worker yields the same); each message is counted under its own phase.
    """

    messages: list[Message]
    phase: str


#: the server's computation of a :class:`ToServer` round: every worker's messages (by worker) -> its replies
Serve = Callable[[list[list[Message]]], list[Message]]


@dataclass
class ToServer:
    """A parameter server's round: this worker's ``messages`` to the server, ``serve`` run once where it is hosted.

    The server is hosted by rank ``host`` and keeps its state there (every worker yields a
    ``serve``; the host's runs, on every worker's messages, by worker, in one call).  Its replies
    (sender :data:`SERVER`) are delivered; result: the replies addressed to this worker.  ``phase``
    names the leg; each message is counted under its own phase (:func:`count_messages`).
    """

    messages: list[Message]
    phase: str
    serve: Serve
    host: int = 0


Leg = AllReduce | AllGather | AllToAll | Send | ToServer
#: what a leg gives back to the generator (see each leg)
LegResult = Any


@dataclass(frozen=True)
class Context:
    """What a worker's protocol knows about its place in the group.

    Attributes:
        rank, world: this worker and the number of workers.
        shared: states that are identical on every worker (seeded alike), where a protocol draws
            what all workers must agree on (PowerSGD's first warm-start Q); by unit; read and draw only.
        memo: where :meth:`once` keeps values; the simulated transport shares one among its workers.
    """

    rank: int
    world: int
    shared: Sequence[Any] = ()
    memo: dict[Any, Any] | None = field(default=None, compare=False)

    def once(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()``, for a value every worker computes alike from the legs' results (a decoded aggregate).

        The simulated transport computes it once for the whole group (its workers share ``memo``),
        so simulating N workers costs what the exchange costs, not N times its receiving side.
        The value is shared: never modify it in place.
        """
        if self.memo is None:
            return compute()
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]


@dataclass
class Outcome:
    """What one worker's protocol returns.

    Attributes:
        aggregates: per unit, the aggregate this worker ends up with (float32, the unit's shape).
        sent: per unit, the payload this worker sent first (its upload); None where it sent
            nothing for that unit (a whole-model protocol counts a message in one unit).
        contributions: per unit, every worker's decoded contribution (by worker) where the
            aggregate is their mean; None where it is not.
    """

    aggregates: list[torch.Tensor]
    sent: Sequence[Slot]
    contributions: list[list[torch.Tensor]] | None = None


#: one worker's protocol: yields legs, receives their results, returns its outcome
WorkerProtocol = Generator[Leg, LegResult, Outcome]


@dataclass
class Counted:
    """Bytes one worker moved in one leg, by the leg's counting rule."""

    sent: int = 0
    received: int = 0
    sent_body: int | None = None


def _nbytes(p: Slot) -> int:
    return 0 if p is None else p.nbytes


def _body(p: Slot) -> int:
    return 0 if p is None else p.body_nbytes


def count_allreduce(leg: AllReduce, sizes: Sequence[Sequence[int]], world: int) -> list[tuple[str, list[Counted]]]:
    """Every worker's bytes in an all-reduce leg, by phase; ``sizes[w][u]``: worker w's tensor bytes of unit u."""
    by_phase: dict[str, list[Counted]] = {}
    for u in range(len(leg.tensors)):
        out = by_phase.setdefault(leg.phase_of(u), [Counted(sent_body=0 if leg.body else None) for _ in range(world)])
        if leg.count == "ring":
            itemsize = leg.itemsize(u)
            for w, (s, r) in enumerate(ring_allreduce_bytes(sizes[0][u] // itemsize, world, itemsize)):
                out[w].sent += s
                out[w].received += r
        else:
            msg = [sizes[w][u] if leg.nbytes is None else leg.nbytes[u] for w in range(world)]
            for w in range(world):
                out[w].sent += msg[w]
                out[w].received += sum(msg) - msg[w]
        if leg.body:
            for w in range(world):
                out[w].sent_body = (out[w].sent_body or 0) + sizes[w][u]
    return list(by_phase.items())


def count_allgather(per_peer: bool, body: bool, sizes: Sequence[Sequence[int]], bodies: Sequence[Sequence[int]]) -> list[Counted]:
    """Every worker's bytes in an all-gather leg; ``sizes[w][u]`` / ``bodies[w][u]``: worker w's message of unit u."""
    world = len(sizes)
    totals = [sum(s) for s in sizes]
    everything = sum(totals)
    copies = world - 1 if per_peer else 1  # the body bytes too: one copy per receiving peer
    return [Counted(totals[w] * copies, everything - totals[w], sum(bodies[w]) * copies if body else None) for w in range(world)]


def count_alltoall(sizes: Sequence[Sequence[Sequence[int]]]) -> list[Counted]:
    """Every worker's bytes in an all-to-all leg; ``sizes[w][j][u]``: worker w's message to j of unit u."""
    world = len(sizes)
    return [Counted(sum(sum(sizes[w][j]) for j in range(world) if j != w), sum(sum(sizes[i][w]) for i in range(world) if i != w))
            for w in range(world)]


def count_messages(messages: Sequence[Message], world: int) -> list[tuple[str, list[Counted]]]:
    """Every worker's bytes in addressed messages, by phase in order of first appearance.

    A worker's message counts once as sent (``nbytes``, and ``body_nbytes`` as ``sent_body``)
    however many workers receive it; each receiver counts it as received; the server's messages
    are sent by no worker.  Every worker gets a record of every phase present (zeros included).
    """
    by_phase: dict[str, list[Counted]] = {}
    for m in messages:
        out = by_phase.setdefault(m.phase, [Counted(sent_body=0) for _ in range(world)])
        if m.sender != SERVER:
            out[m.sender].sent += m.payload.nbytes
            out[m.sender].sent_body = (out[m.sender].sent_body or 0) + m.payload.body_nbytes
        for r in m.receivers:
            out[r].received += m.payload.nbytes
    return list(by_phase.items())


def addressed_to(rank: int, messages: Sequence[Message]) -> list[Message]:
    """The messages ``rank`` receives, in order."""
    return [m for m in messages if rank in m.receivers]


def _mark(messages: list[Message], unit: int) -> list[Message]:
    for m in messages:
        if m.unit is None:
            m.unit = unit
    return messages


def relay(legs: Generator[Leg, LegResult, T], change: Callable[[Leg], Leg]) -> Generator[Leg, LegResult, T]:
    """Pass a protocol's legs through ``change`` and each leg's result back unchanged; the protocol's value is returned."""
    value: LegResult = None
    while True:
        try:
            leg = legs.send(value)
        except StopIteration as stop:
            return stop.value
        value = yield change(leg)


def counted_in(legs: Generator[Leg, LegResult, T], unit: int) -> Generator[Leg, LegResult, T]:
    """Pass a protocol's legs through, marking every message without a unit, the server's replies too, as ``unit``'s.

    For a protocol over several units whose results are reported per unit: it runs each unit's
    rounds (and its rounds over all units) inside ``counted_in``, and the simulated transport's
    messages then say which unit's result counts them (:attr:`Message.unit`).
    """
    def mark(leg: Leg) -> Leg:
        if isinstance(leg, Send | ToServer):
            _mark(leg.messages, unit)
        if isinstance(leg, ToServer):
            serve = leg.serve
            return replace(leg, serve=lambda rows: _mark(serve(rows), unit))
        return leg

    return relay(legs, mark)


# ----------------------------------------------------------------------------- the simulated transport


@dataclass
class SimulatedRun:
    """What :func:`simulate` returns: every worker's outcome and the counted bytes of every leg."""

    outcomes: list[Outcome]
    #: per leg in order (and per phase within a leg): (phase, per worker counted bytes)
    legs: list[tuple[str, list[Counted]]] = field(default_factory=list)
    #: every addressed message of the :class:`Send` and :class:`ToServer` legs, in order (the server's replies after its round's messages)
    messages: list[Message] = field(default_factory=list)


def _fulfil(legs: Sequence[Leg], world: int) -> tuple[list[LegResult], list[tuple[str, list[Counted]]], list[Message]]:
    """Every worker's result of one leg, its counted bytes by phase, and its addressed messages."""
    first = legs[0]  # every leg of a round is of its first's kind (simulate checks it), hence the casts below
    if isinstance(first, Send | ToServer):
        rows = [leg.messages for leg in cast(Sequence[Send | ToServer], legs)]
        moved = [m for row in rows for m in row]
        if isinstance(first, ToServer):
            moved += cast(ToServer, legs[first.host]).serve(rows)
        return [addressed_to(w, moved) for w in range(world)], count_messages(moved, world), moved
    if isinstance(first, AllReduce):
        reduces = cast(Sequence[AllReduce], legs)
        results = []
        for u, t0 in enumerate(first.tensors):
            acc_dtype = reduce_dtype(t0.dtype)
            stacked = torch.stack([leg.tensors[u].detach().to(acc_dtype).reshape(t0.shape) for leg in reduces])
            # a sum adds in worker order from zero (what a decoder's accumulator does, so 0 + (−0) is +0)
            reduced = stacked.amax(0) if first.op == "max" else stacked.sum(0)
            results.append(reduced.div_(world) if first.op == "mean" else reduced)
        sizes = [[t.numel() * first.itemsize(u) for u, t in enumerate(leg.tensors)] for leg in reduces]
        return [results] * world, count_allreduce(first, sizes, world), []  # shared by the workers: read only
    if isinstance(first, AllGather):
        gathered = [leg.payloads for leg in cast(Sequence[AllGather], legs)]
        sizes = [[_nbytes(p) for p in row] for row in gathered]
        bodies = [[_body(p) for p in row] for row in gathered]
        return [gathered] * world, [(first.phase, count_allgather(first.per_peer, first.body, sizes, bodies))], []
    matrix = [leg.payloads for leg in cast(Sequence[AllToAll], legs)]
    sizes3 = [[[_nbytes(p) for p in matrix[w][j]] for j in range(world)] for w in range(world)]
    return [[matrix[i][w] for i in range(world)] for w in range(world)], [(first.phase, count_alltoall(sizes3))], []


def simulate(workers: Sequence[WorkerProtocol]) -> SimulatedRun:
    """Run N worker protocols in lock step in one process, fulfilling each leg across them.

    Every worker must yield the same kind of leg, with the same phase, at the same point, and all
    must finish together; anything else is a protocol bug and raises ``RuntimeError``.  The
    workers get the same leg results (tensors, payloads): a protocol reads them, never modifies them
    in place.  Build the workers' contexts with one ``memo`` dict (:meth:`Context.once`).  Workers
    advance in rank order, so a value :meth:`Context.once` computes is computed by the lowest rank
    that asks for it (rank 0 where every worker does).
    """
    world = len(workers)
    run = SimulatedRun([])
    pending: list[LegResult] = [None] * world
    while True:
        legs: list[Leg] = []
        done: list[Outcome] = []
        for gen, value in zip(workers, pending, strict=True):
            try:
                legs.append(gen.send(value))
            except StopIteration as stop:
                done.append(stop.value)
        if done:
            if len(done) != world:
                raise RuntimeError("worker protocols finished at different legs")
            run.outcomes = done
            return run
        kinds = {(type(leg).__name__, str(leg.phase)) for leg in legs}
        if len(kinds) != 1:
            raise RuntimeError(f"worker protocols yielded different legs at one point: {sorted(kinds)}")
        pending, counted, moved = _fulfil(legs, world)
        run.legs += counted
        run.messages += moved
