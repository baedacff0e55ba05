"""The ``torch.distributed`` transport of the protocol legs (:mod:`gcbench.core.protocol`), asynchronous.

:func:`drive` runs one worker's protocol generator: each leg it yields is launched as real
collectives with ``async_op=True`` and the generator resumes in the collective's completion
callback, so the whole exchange is one chain of futures and the caller (the DDP hook) returns at
once.  Per leg:

* :class:`AllReduce` — the units' tensors flattened into one buffer (cast to the leg's ``wire``
  dtype), one ``all_reduce`` (SUM or MAX), split back (in float32, or float64 for float64 tensors);
* :class:`AllGather` — every unit's message (its header, then its body) joined on the device
  (:mod:`gcbench.distributed.framing`); an ``all_gather`` of every unit's size word (int64), then one
  ``all_gather`` of the messages padded to the longest; the peers' headers read to the host together and
  their payloads made views of the receive buffers (this worker's own payloads are used as they are);
* :class:`AllToAll` — the same with ``all_to_all_single``: size words first, then the messages;
* :class:`Send` — every worker's addressed messages as one blob (:func:`~gcbench.distributed.framing.frame_meta`:
  phase, receivers, payload size and header per message, then the bodies) all-gathered (size words, then the
  blobs padded to the longest); each worker keeps those addressed to it.  Every worker sees every message, so
  each counts every message by the leg's rule; a point-to-point transport would move less (``handed`` says what moved);
* :class:`ToServer` — the workers' messages all-gathered the same way; the host rank runs the
  server's ``serve`` on them and broadcasts its replies' blob (size word, then the blob; a size of −1
  tells the others the server failed, so they raise instead of waiting).

Device residency: payload bodies never leave the device and never become Python bytes; the only host work is
the headers and framing (built on the host from the payloads' fields, copied to the device once per leg, twice in a
parameter server's round: :data:`HOST_UPLOADS`) and
:data:`HOST_READS`, the reads a leg makes before it can go on: the peers' message sizes (one read, before it
allocates what it receives) and their headers (one read, to parse them).  ``tests/distributed/test_transport_guard.py``
holds the DDP hook's step to that on a 2-process gloo group (no tensor/NumPy conversion at all).

Nothing here knows a compressor: it moves legs.  Bytes are counted two ways per leg
(:class:`LegBytes`): ``counted`` by the leg's rule from the messages really moved (the
simulation's numbers, :func:`gcbench.core.protocol.count_allreduce` and the others; an all-reduce
assumes every worker's tensors are the size of its own, which the collective requires), and
``handed``, the bytes this worker handed to collectives (sizes, padding and all).

Wire verification (the guard against silent fallbacks that send more than the codec promised:
a tensor that travels in a wider dtype than its payload, a dense exchange in place of a compressed
one).  Every tensor this worker contributes to a collective passes :meth:`TorchTransport._on_wire`
and is measured there (``numel × element_size``: :attr:`LegBytes.wire`).  Independently, the leg
declares what it should be: :attr:`LegBytes.promised`, the messages' own sizes (each payload's
``nbytes``; an all-reduce unit's elements × its declared wire itemsize, and never more than the
payload it stands for when the leg gives ``nbytes``: a summable payload's header is known to every
receiver and not sent), :attr:`LegBytes.overhead`, the transport's own declared bytes (8 per size
exchanged, the message framing of :func:`~gcbench.distributed.framing.frame_overhead`), and :attr:`LegBytes.padding`, the
padding of a gathered message to the longest (a real cost on the wire, reported apart).  When the
leg completes, ``wire == promised + overhead + padding`` or the transport raises
:class:`WireMismatchError` naming the leg and both sizes (``verify=False`` records without raising).
Only what this worker contributes is measured (receive buffers hold the peers' contributions), except a
broadcast's receivers, which hand the buffer that receives and are held to what arrives.

Collectives of one process group must start in the same order on every worker.  The legs of one
chain start in protocol order; the caller starts one chain after the previous one completed
(:class:`gcbench.distributed.hook_state.HookState` keeps that queue), so the order is the same everywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from gcbench.core.errors import GcbenchError
from gcbench.core.host_sync import host_ints
from gcbench.core.protocol import (
    SERVER,
    AllGather,
    AllReduce,
    AllToAll,
    Counted,
    Leg,
    Message,
    Send,
    Slot,
    ToServer,
    WorkerProtocol,
    addressed_to,
    count_allgather,
    count_allreduce,
    count_messages,
    reduce_dtype,
)
from gcbench.distributed.framing import (
    LEN_MASK,
    SIZE_BYTES,
    body_bytes,
    frame_meta,
    frame_overhead,
    host_tensor,
    joined,
    message_parts,
    messages_from,
    payload_from,
    read_headers,
    size_word,
    split_word,
)

Future = torch.futures.Future
_SIZE = SIZE_BYTES  # one int64 size word
#: host reads (:func:`gcbench.core.host_sync.host_ints` / ``host_bytes``, each one synchronisation) per leg, by kind, at
#: most: a variable-length leg reads the peers' size words once and their headers once; a parameter server's round
#: does so for the gathered messages and, on the other ranks, for the broadcast replies; an all-reduce reads nothing
HOST_READS = {"allreduce": 0, "allgather": 2, "alltoall": 2, "send": 2, "server": 4}
#: host uploads (:func:`gcbench.core.host_sync.host_upload`: host-born values copied to the device, one small copy each)
#: per leg, by kind, at most: an all-gather or all-to-all uploads its size words and its headers together; a send (a gather of
#: framed blobs) its framing, whose size word is filled on the device; a parameter server's round the gathered
#: framing and, on the server's rank, the replies'; an all-reduce nothing
HOST_UPLOADS = {"allreduce": 0, "allgather": 1, "alltoall": 1, "send": 1, "server": 2}


class WireMismatchError(GcbenchError):
    """A leg handed torch.distributed other bytes than its messages promise (module doc: wire verification)."""


@dataclass
class LegBytes:
    """One leg as this worker saw it: its kind and phase(s), counted bytes by phase, bytes handed to collectives.

    The wire verification's figures (module doc): ``wire`` measured from the tensors handed,
    ``promised`` + ``overhead`` + ``padding`` declared by the messages and the transport.
    """

    kind: str  # "allreduce", "allgather", "alltoall", "send", "server"
    counted: list[tuple[str, Counted]]
    handed: int
    delivered: int = 0  # payloads delivered to this worker (its own included)
    op: str = ""  # an all-reduce's "sum", "mean" or "max"
    phase: str = ""
    promised: int = 0  # the messages' declared bytes (payloads' nbytes, an all-reduce's declared body)
    overhead: int = 0  # the transport's declared bytes: size exchanges, message framing
    padding: int = 0  # padding of this worker's message to the longest of a gather
    wire: int = 0  # measured: numel × element_size of every tensor this worker contributed to the leg's collectives

    @property
    def verified(self) -> bool:
        return self.wire == self.promised + self.overhead + self.padding

    @property
    def ratio(self) -> float | None:
        """The bytes on the wire for the messages (padding and overhead off) per promised byte: 1.0 when verified."""
        return (self.wire - self.overhead - self.padding) / self.promised if self.promised else None


@dataclass
class ChainTimes:
    """Where one chain's time went: compute before/between legs, after the last leg, and inside collectives.

    ``compute`` holds the generator's segments in order: all but the last produce the next leg's
    message (compress), the last turns the final result into the aggregate (decompress).
    ``communicate_s`` sums, per leg, the wall time from launching its first collective to its
    last one's completion callback (waiting for slower peers included).
    """

    compute: list[float] = field(default_factory=list)
    communicate_s: float = 0.0

    @property
    def compress_s(self) -> float:
        return sum(self.compute[:-1])

    @property
    def decompress_s(self) -> float:
        return self.compute[-1] if self.compute else 0.0


def _completed(value: Any) -> Future:
    fut: Future = Future()
    fut.set_result(value)
    return fut


def _future(devices: Sequence[torch.device] | None) -> Future:
    """A future whose value may hold tensors on ``devices`` (torch's ``Future`` takes a list of devices, names or indices)."""
    listed: list[int | str | torch.device] | None = None if devices is None else list(devices)
    return Future(devices=listed)


def then(fut: Future, fn: Callable[[Any], Any], devices: Sequence[torch.device] | None = None) -> Future:
    """A future of ``fn(fut's value)``; when ``fn`` returns a future, of that future's value (errors propagate).

    ``devices``: the CUDA devices whose tensors the value may hold (as ``torch.futures.Future`` wants them).
    """
    out: Future = _future(devices)

    def done(f: Future) -> None:
        try:
            value = fn(f.value())
        except BaseException as exc:  # handed to the waiting side, never swallowed
            out.set_exception(exc)
            return
        if isinstance(value, Future):
            value.add_done_callback(lambda g: _settle(out, g))
        else:
            out.set_result(value)

    fut.add_done_callback(done)
    return out


def _settle(out: Future, f: Future) -> None:
    try:
        out.set_result(f.value())
    except BaseException as exc:  # see then
        out.set_exception(exc)


class TorchTransport:
    """Fulfils legs with ``torch.distributed`` collectives on one process group; records :class:`LegBytes` per leg.

    ``label`` names the exchange in a :class:`WireMismatchError` (the DDP hook gives the compressor's
    name); ``verify`` (default) raises it when a leg's measured bytes differ from its promise.
    """

    def __init__(self, group: dist.ProcessGroup | None, rank: int, world: int, device: torch.device,
                 threads: int | None = None, *, label: str = "", verify: bool = True) -> None:
        self.group, self.rank, self.world, self.device = group, rank, world, device
        self.devices = [device] if device.type == "cuda" else None
        self.legs: list[LegBytes] = []
        self.threads = threads if threads is not None else torch.get_num_threads()
        self.label = label
        self.verify = verify

    def keep_threads(self) -> None:
        """Compute with ``threads`` intra-op threads (default: the count of the thread that made this transport).

        Protocol code runs in the collectives' callback threads, whose count is the process
        default, not what the caller set; with another count float kernels (convolutions) may
        round differently, and the real transport would not reproduce the simulated one's bits (nor
        the workers each other's, where each computes the same thing, as replicas of a model).
        """
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)

    # ------------------------------------------------------------------ wire verification

    def _on_wire(self, t: torch.Tensor) -> torch.Tensor:
        """The tensor handed to a collective, as it is handed (identity: the one place a contributed tensor enters one).

        Kept apart so that a test can stand in a broken transport (one that widens what it sends)
        and see the verification catch it.
        """
        return t

    def _hand(self, rec: LegBytes, t: torch.Tensor) -> torch.Tensor:
        """``t`` as handed to a collective of leg ``rec``, its bytes added to the leg's measured ``wire``."""
        t = self._on_wire(t)
        rec.wire += t.numel() * t.element_size()
        return t

    def _leg(self, kind: str, phase: str, op: str = "") -> LegBytes:
        rec = LegBytes(kind, [], 0, op=op, phase=phase)
        self.legs.append(rec)
        return rec

    def _verify(self, rec: LegBytes) -> None:
        """Raise :class:`WireMismatchError` when leg ``rec``'s measured bytes differ from its declared ones (``verify``)."""
        if not self.verify or rec.verified:
            return
        index = next(i for i, leg in enumerate(self.legs) if leg is rec)
        ratio = rec.ratio
        times = f"{ratio:.3g}x the promised bytes" if ratio is not None else "nothing was promised"
        raise WireMismatchError(
            f"{self.label or 'exchange'}: wire check failed on leg {index} ({rec.kind}, phase {rec.phase!r}) of rank {self.rank}: "
            f"promised {rec.promised} bytes (+ {rec.overhead} sizes/framing, + {rec.padding} padding), sent {rec.wire} bytes to "
            f"torch.distributed ({times}): a wider dtype or a dense fallback on the wire")

    # ------------------------------------------------------------------ legs

    def launch(self, leg: Leg) -> Future:
        """Start the collectives of ``leg``; the future holds what the leg gives back to the generator."""
        if isinstance(leg, AllReduce):
            return self._allreduce(leg)
        if isinstance(leg, AllGather):
            return self._allgather(leg)
        if isinstance(leg, AllToAll):
            return self._alltoall(leg)
        if isinstance(leg, Send):
            return self._send(leg)
        if isinstance(leg, ToServer):
            return self._toserver(leg)
        raise TypeError(f"not a protocol leg: {type(leg).__name__}")

    def _allreduce(self, leg: AllReduce) -> Future:
        sizes = [t.numel() * leg.itemsize(u) for u, t in enumerate(leg.tensors)]
        counted = count_allreduce(leg, [sizes] * self.world, self.world)
        rec = self._leg("allreduce", "+".join(dict.fromkeys(leg.phase_of(u) for u in range(len(leg.tensors)))) or str(leg.phase), leg.op)
        rec.counted, rec.handed = [(ph, c[self.rank]) for ph, c in counted], sum(sizes)
        # a unit's body as declared, never more than the payload it stands for (a summable payload: header + body)
        rec.promised = sum(s if leg.nbytes is None else min(s, leg.nbytes[u]) for u, s in enumerate(sizes))
        if not leg.tensors:
            return _completed([])
        wire = {leg.wire or t.dtype for t in leg.tensors}
        if len(wire) != 1:
            raise TypeError(f"an all-reduce leg carries one wire dtype, got {sorted(map(str, wire))}")
        dtype = wire.pop()
        flat = self._hand(rec, torch.cat([t.detach().reshape(-1).to(self.device, dtype) for t in leg.tensors]))
        op = dist.ReduceOp.MAX if leg.op == "max" else dist.ReduceOp.SUM
        work = dist.all_reduce(flat, op=op, group=self.group, async_op=True)
        shapes = [(t.shape, reduce_dtype(t.dtype)) for t in leg.tensors]

        def split(_: Any) -> list[torch.Tensor]:
            self._verify(rec)
            parts = [p.to(dt).reshape(s) for p, (s, dt) in zip(flat.split([s.numel() for s, _ in shapes]), shapes, strict=True)]
            if leg.op == "mean":  # in place: the parts are this transport's (flat, or the casts of its slices)
                for p in parts:
                    p.div_(self.world)
            return parts

        return then(work.get_future(), split, self.devices)

    def _allgather(self, leg: AllGather) -> Future:
        own = leg.payloads
        units = len(own)
        rec = self._leg("allgather", leg.phase)
        rec.promised = sum(p.nbytes for p in own if p is not None)
        rec.overhead = _SIZE * units
        parts, _, words_on_device = message_parts(own, self.device)
        mine = sum(t.numel() for t in parts)
        sizes = self._hand(rec, words_on_device)
        all_sizes = [torch.empty_like(sizes) for _ in range(self.world)]
        work = dist.all_gather(all_sizes, sizes, group=self.group, async_op=True)

        def bodies(_: Any) -> Future:
            flat = host_ints(torch.cat(all_sizes)) if units else []  # the leg's one read of the sizes
            spans = [[split_word(w, f"worker {r}") for w in flat[r * units : (r + 1) * units]] for r in range(self.world)]
            rows = [[n for _, n in row] for row in spans]
            longest = max(sum(r) for r in rows)
            out = [torch.empty(longest, dtype=torch.uint8, device=self.device) for _ in range(self.world)]
            bodies_own = [0 if p is None else p.body_nbytes for p in own]
            counted = count_allgather(leg.per_peer, leg.body, rows, [bodies_own if r == self.rank else [0] * units
                                                                     for r in range(self.world)])
            rec.counted, rec.handed = [(leg.phase, counted[self.rank])], _SIZE * units + longest
            rec.delivered = sum(1 for r in rows for n in r if n)
            rec.padding = longest - mine
            body = self._hand(rec, joined(parts, longest, self.device))
            work2 = dist.all_gather(out, body, group=self.group, async_op=True)

            def parse(_: Any) -> list[list[Slot]]:
                self._verify(rec)
                return self._parse_rows([(r, out[r], 0, spans[r]) for r in range(self.world)], own)

            return then(work2.get_future(), parse, self.devices)

        return then(work.get_future(), bodies, self.devices)

    def _alltoall(self, leg: AllToAll) -> Future:
        me, world = self.rank, self.world
        units = len(leg.payloads[0]) if leg.payloads else 0
        rec = self._leg("alltoall", leg.phase)
        rec.promised = sum(p.nbytes for j in range(world) if j != me for p in leg.payloads[j] if p is not None)
        rec.overhead = _SIZE * units * world  # this worker's row of sizes is exchanged too (zeros to itself)
        parts, words, words_on_device = message_parts([None if j == me else p for j in range(world) for p in leg.payloads[j]],
                                                      self.device)
        send_rows = [[w & LEN_MASK for w in words[j * units : (j + 1) * units]] for j in range(world)]
        send_sizes = self._hand(rec, words_on_device)
        recv_sizes = torch.empty_like(send_sizes)
        work = dist.all_to_all_single(recv_sizes, send_sizes, group=self.group, async_op=True)

        def data(_: Any) -> Future:
            flat = host_ints(recv_sizes) if units else []  # the leg's one read of the sizes
            spans = [[split_word(w, f"worker {i}") for w in flat[i * units : (i + 1) * units]] for i in range(world)]
            recv_rows = [[n for _, n in row] for row in spans]
            sent = sum(sum(r) for r in send_rows)
            send = self._hand(rec, joined(parts, sent, self.device))
            recv = torch.empty(sum(map(sum, recv_rows)), dtype=torch.uint8, device=self.device)
            received = sum(sum(r) for r in recv_rows)
            rec.counted, rec.handed = [(leg.phase, Counted(sent, received))], _SIZE * units * (world - 1) + sent
            rec.delivered = sum(1 for r in recv_rows for n in r if n) + sum(1 for p in leg.payloads[me] if p is not None)
            work2 = dist.all_to_all_single(recv, send, [sum(r) for r in recv_rows], [sum(r) for r in send_rows],
                                           group=self.group, async_op=True)

            def parse(_: Any) -> list[list[Slot]]:
                self._verify(rec)
                starts = [sum(map(sum, recv_rows[:i])) for i in range(world)]
                return self._parse_rows([(i, recv, starts[i], spans[i]) for i in range(world)], leg.payloads[me])

            return then(work2.get_future(), parse, self.devices)

        return then(work.get_future(), data, self.devices)

    def _parse_rows(self, rows: Sequence[tuple[int, torch.Tensor, int, Sequence[tuple[int, int]]]],
                    own: Sequence[Slot]) -> list[list[Slot]]:
        """Per worker, its payload of every unit (None where it sent nothing); this worker's own as they are.

        ``rows``: per worker, (rank, the buffer its messages arrived in, where they start, (header, message) lengths
        per unit).  The peers' headers are read to the host together (one read); the bodies stay views of the buffers.
        """
        spans = []
        for r, buf, start, sizes in rows:
            for h, n in sizes:
                if r != self.rank and n:
                    spans.append((r, buf, start, h, n))
                start += n
        headers = iter(read_headers([(buf, start, h) for _, buf, start, h, _ in spans]))
        parsed = {(r, start): payload_from(next(headers), buf, start, n, f"worker {r}") for r, buf, start, _, n in spans}
        out: list[list[Slot]] = []
        for r, _, start, sizes in rows:
            if r == self.rank:
                out.append(list(own))
                continue
            row: list[Slot] = []
            for _, n in sizes:
                row.append(parsed[(r, start)] if n else None)  # shapes are checked where decoded
                start += n
            out.append(row)
        return out

    def _word(self, value: int) -> torch.Tensor:
        """A size word as a one-element int64 tensor on the transport's device, filled there (the value travels as the
        fill kernel's argument: no host buffer is copied, which a CUDA stream would wait for)."""
        return torch.full((1,), value, dtype=torch.int64, device=self.device)

    def _gather_blobs(self, messages: Sequence[Message], rec: LegBytes) -> tuple[Future, list[int]]:
        """All-gather every worker's blob of addressed messages (its size word, then the blobs padded to the longest):
        a future of every worker's messages (this worker's own as they are), and a list that receives the bytes this
        worker handed to the collectives.

        ``rec`` gets the measured bytes, the size exchange and the padding (its caller declares the promise and framing).
        """
        handed: list[int] = []
        rec.overhead += _SIZE
        meta = frame_meta(messages)
        parts = [host_tensor(meta, self.device), *(body_bytes(m.payload, self.device) for m in messages)]
        mine = sum(t.numel() for t in parts)
        size = self._hand(rec, self._word(size_word(len(meta), mine) if mine else 0))
        sizes = [torch.empty_like(size) for _ in range(self.world)]
        work = dist.all_gather(sizes, size, group=self.group, async_op=True)

        def data(_: Any) -> Future | list[list[Message]]:
            spans = [split_word(w, f"worker {r}") for r, w in enumerate(host_ints(torch.cat(sizes)))]  # one read
            longest = max(n for _, n in spans)
            handed.append(_SIZE + longest)
            if longest == 0:
                return [list(messages) if r == self.rank else [] for r in range(self.world)]
            rec.padding += longest - mine
            buf = self._hand(rec, joined(parts, longest, self.device))
            out = [torch.empty(longest, dtype=torch.uint8, device=self.device) for _ in range(self.world)]
            work2 = dist.all_gather(out, buf, group=self.group, async_op=True)
            return then(work2.get_future(), lambda _: self._blobs(out, spans, messages), self.devices)

        return then(work.get_future(), data, self.devices), handed

    def _blobs(self, out: Sequence[torch.Tensor], spans: Sequence[tuple[int, int]], own: Sequence[Message]) -> list[list[Message]]:
        """Every worker's messages from the gathered blobs (the peers' metas read together: one read); this worker's own as they are."""
        peers = [r for r in range(self.world) if r != self.rank and spans[r][1]]
        metas = dict(zip(peers, read_headers([(out[r], 0, spans[r][0]) for r in peers]), strict=True))
        return [list(own) if r == self.rank else
                messages_from(metas[r], out[r], spans[r][0], spans[r][1], r, self.world) if r in metas else []
                for r in range(self.world)]

    def _declare(self, rec: LegBytes, messages: Sequence[Message]) -> None:
        """Add framed ``messages`` to the leg's promise: their payloads' sizes, and the framing as overhead."""
        rec.promised += sum(m.payload.nbytes for m in messages)
        rec.overhead += frame_overhead(messages)

    def _send(self, leg: Send) -> Future:
        rec = self._leg("send", leg.phase)
        self._declare(rec, leg.messages)
        gathered, handed = self._gather_blobs(leg.messages, rec)

        def deliver(rows: list[list[Message]]) -> list[Message]:
            self._verify(rec)
            moved = [m for row in rows for m in row]
            mine = addressed_to(self.rank, moved)
            rec.counted = [(ph, c[self.rank]) for ph, c in count_messages(moved, self.world)]
            rec.handed, rec.delivered = sum(handed), len(mine)
            return mine

        return then(gathered, deliver, self.devices)

    def _toserver(self, leg: ToServer) -> Future:
        rec = self._leg("server", leg.phase)
        self._declare(rec, leg.messages)
        gathered, handed = self._gather_blobs(leg.messages, rec)
        src = leg.host if self.group is None else dist.get_global_rank(self.group, leg.host)
        host = self.rank == leg.host

        def serve(rows: list[list[Message]]) -> Future:
            replies: list[Message] = []
            failure: BaseException | None = None
            if host:
                try:
                    self.keep_threads()
                    replies = leg.serve(rows)
                except BaseException as exc:  # the others learn of it (size −1) and raise; this worker raises it
                    failure = exc
            meta = frame_meta(replies)
            parts = [host_tensor(meta, self.device), *(body_bytes(m.payload, self.device) for m in replies)] if host else []
            length = sum(t.numel() for t in parts)
            word = -1 if failure is not None else size_word(len(meta), length) if length else 0
            rec.overhead += _SIZE
            size = self._hand(rec, self._word(word))
            work = dist.broadcast(size, src=src, group=self.group, async_op=True)

            def body(_: Any) -> Future | list[Message]:
                if failure is not None:
                    raise failure
                got = word if host else host_ints(size)[0]  # the host knows its word; the others read it
                if got < 0:
                    raise RuntimeError(f"the parameter server (rank {leg.host}) failed in the {leg.phase!r} round")
                meta_len, n = split_word(got, "the server")
                handed.append(_SIZE + n)
                if n == 0:
                    return finish(rows, replies)
                # the host sends its replies; the others hand a buffer that receives them (their promise: what arrives)
                buf = self._hand(rec, joined(parts, n, self.device) if host else torch.empty(n, dtype=torch.uint8, device=self.device))
                work2 = dist.broadcast(buf, src=src, group=self.group, async_op=True)

                def arrived(_: Any) -> list[Message]:
                    if host:
                        return finish(rows, replies)
                    (raw,) = read_headers([(buf, 0, meta_len)])
                    return finish(rows, messages_from(raw, buf, meta_len, n, SERVER, self.world))

                return then(work2.get_future(), arrived, self.devices)

            return then(work.get_future(), body, self.devices)

        def finish(rows: list[list[Message]], replies: list[Message]) -> list[Message]:
            self._declare(rec, replies)
            self._verify(rec)
            moved = [m for row in rows for m in row] + replies
            mine = addressed_to(self.rank, replies)
            rec.counted = [(ph, c[self.rank]) for ph, c in count_messages(moved, self.world)]
            rec.handed, rec.delivered = sum(handed), len(mine)
            return mine

        return then(gathered, serve, self.devices)


def drive(gen: WorkerProtocol, transport: TorchTransport, times: ChainTimes, sync: Callable[[], None] | None = None) -> Future:
    """Run one worker protocol on ``transport``, asynchronously: a future of its :class:`Outcome`.

    The generator's first segment runs now; each later one in the completion callback of the
    leg before it.  ``sync`` (CUDA: synchronise) runs before each clock reading.
    """
    out: Future = _future(transport.devices)

    def now() -> float:
        if sync is not None:
            sync()
        return time.perf_counter()

    def resume(value: Any) -> None:
        transport.keep_threads()
        t0 = now()
        try:
            leg = gen.send(value)
        except StopIteration as stop:
            times.compute.append(now() - t0)
            out.set_result(stop.value)
            return
        except BaseException as exc:  # a peer's bad bytes or a protocol bug: the waiting side raises it
            out.set_exception(exc)
            return
        times.compute.append(now() - t0)
        launched = now()
        try:
            fut = transport.launch(leg)
        except BaseException as exc:  # see above
            out.set_exception(exc)
            return

        def landed(f: Future) -> None:
            times.communicate_s += now() - launched
            try:
                value = f.value()
            except BaseException as exc:  # see above
                out.set_exception(exc)
                return
            resume(value)

        fut.add_done_callback(landed)

    resume(None)
    return out
