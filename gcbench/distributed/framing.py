"""How the ``torch.distributed`` transport lays messages out on the device, and reads them back.

A payload crosses the wire as its header followed by its body (``len(header) + body bytes``: its
:attr:`~gcbench.core.payload.Payload.nbytes`).  The transport never serialises through Python bytes: a leg's
headers (and, for addressed messages, their framing) are joined on the host into one small byte string, copied to
the device as one ``uint8`` tensor (:func:`host_tensor`), and each message is that tensor's slice followed by its
body tensor, all joined by one ``torch.cat`` on the device.  A receiver reads the message sizes once (one
``int64`` size word per message, or per worker's blob; :func:`size_word`), allocates, receives, then reads the
received headers once (:func:`read_headers`: one host copy of the header bytes alone) and makes each payload's body a
view of the receive buffer (:func:`payload_at`; a copy on the device where the view would not be aligned for a
decoder to view it as wider elements): bodies stay on the device they arrived on.  Both reads are
:func:`gcbench.core.host_sync.host_ints` / :func:`~gcbench.core.host_sync.host_bytes`.

A size word is the message's length in its low 40 bits and its header's length above them, so the one read of the
sizes also tells where each header ends; it is 8 bytes as a plain length was, and the wire's byte counts are the same.

Addressed messages (:class:`~gcbench.core.protocol.Send`, :class:`~gcbench.core.protocol.ToServer`): a worker's
blob is its *meta* (per message: phase as u16 length and UTF-8, receivers as u16 count and u16 each, the payload's
wire size as u64, then the payload's header) followed by the messages' bodies in order; its size word holds the
blob's and the meta's lengths.  :func:`frame_messages` gives the same layout as bytes (files, tests) and
:func:`unframe_messages` parses it; the framing adds :func:`frame_overhead` bytes, as it always did.

Everything read from a peer is checked (:class:`~gcbench.core.errors.PayloadError` alone): size words (non-negative,
a header no longer than its message), the framing (lengths inside the blob, receivers inside the group, UTF-8
phases) and every header (:func:`~gcbench.core.payload.decode_header`, :func:`~gcbench.core.payload.check_shape`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import torch

from gcbench.core.errors import PayloadError
from gcbench.core.host_sync import host_bytes, host_upload
from gcbench.core.payload import MetaValue, Payload, check_shape, decode_header
from gcbench.core.protocol import SERVER, Message, Slot

#: bytes of one size word (an int64)
SIZE_BYTES = 8
_LEN_BITS = 40
LEN_MASK = (1 << _LEN_BITS) - 1
#: a message's parsed header: (codec, version, dtype, shape, meta)
Header = tuple[str, int, torch.dtype, tuple[int, ...], dict[str, MetaValue]]


def size_word(header_len: int, length: int) -> int:
    """The size word of a message of ``length`` bytes whose first ``header_len`` are its header (module docstring)."""
    if length > LEN_MASK:
        raise ValueError(f"a message of {length} bytes is longer than the transport carries (2^40)")
    return (header_len << _LEN_BITS) | length


def split_word(word: int, who: str) -> tuple[int, int]:
    """(header length, message length) of a peer's size word; a malformed word raises :class:`PayloadError`."""
    length, header = word & LEN_MASK, word >> _LEN_BITS
    if word < 0 or header > length or (length and not header):
        raise PayloadError(f"{who} sent a malformed message size ({word})")
    return header, length


def body_bytes(p: Payload, device: torch.device) -> torch.Tensor:
    """A payload's body as the bytes it puts on the wire (a ``uint8`` view of its data), on ``device``."""
    return p.data.detach().reshape(-1).contiguous().view(torch.uint8).to(device)


def wire_size(p: Payload) -> int:
    """The bytes a payload puts on the wire: its header and its body's bytes (its ``nbytes`` for a well-formed body)."""
    return len(p.header) + p.data.numel() * p.data.element_size()


def host_tensor(data: bytes, device: torch.device) -> torch.Tensor:
    """Host bytes (headers, framing) as one ``uint8`` tensor on ``device``: one small copy, no NumPy, counted as one
    upload by the device guard (:func:`gcbench.core.host_sync.host_upload`)."""
    return host_upload(data, device)


def joined(parts: Sequence[torch.Tensor], size: int, device: torch.device) -> torch.Tensor:
    """``parts`` concatenated on the device and zero-padded to ``size`` bytes (the longest message of a gather)."""
    have = sum(t.numel() for t in parts)
    pad = [torch.zeros(size - have, dtype=torch.uint8, device=device)] if size > have or not parts else []
    return torch.cat([*parts, *pad]) if len(parts) + len(pad) > 1 else (parts or pad)[0]


def message_parts(payloads: Sequence[Slot], device: torch.device) -> tuple[list[torch.Tensor], list[int], torch.Tensor]:
    """The tensors of a row of messages (each payload's header slice, then its body), their size words (0: none), and
    those words as an int64 tensor on ``device``.

    The words and the headers go to the device together, in one upload: the words first (native byte order, so the
    first ``8·n`` bytes view as ``n`` int64), then the headers.
    """
    words: list[int] = []
    bodies: list[torch.Tensor | None] = []
    for p in payloads:
        body = None if p is None else body_bytes(p, device)
        bodies.append(body)
        words.append(0 if p is None or body is None else size_word(len(p.header), len(p.header) + body.numel()))
    n = 8 * len(words)
    uploaded = host_tensor(struct.pack(f"={len(words)}q", *words) + b"".join(p.header for p in payloads if p is not None),
                           device)
    parts: list[torch.Tensor] = []
    pos = n
    for p, body in zip(payloads, bodies, strict=True):
        if p is None or body is None:
            continue
        h = len(p.header)
        parts += [uploaded[pos : pos + h], body]
        pos += h
    return parts, words, uploaded[:n].view(torch.int64)


def read_headers(spans: Sequence[tuple[torch.Tensor, int, int]]) -> list[bytes]:
    """The bytes of every span ``(buffer, start, length)``, read to the host together: one read, however many spans."""
    spans = [s for s in spans if s[2]]
    if not spans:
        return []
    raw = host_bytes(torch.cat([buf[start : start + n] for buf, start, n in spans]))
    out, pos = [], 0
    for _, _, n in spans:
        out.append(raw[pos : pos + n])
        pos += n
    return out


def parse_header(raw: bytes, who: str) -> tuple[Header, int]:
    """A received header (module docstring's checks) and its length."""
    codec, version, dtype, shape, meta, end = decode_header(raw)
    check_shape(shape)
    return (codec, version, dtype, shape, meta), end


#: a received body at an offset that is not a multiple of this is copied to a tensor of its own (see :func:`payload_at`)
BODY_ALIGN = 16


def payload_at(header: Header, buffer: torch.Tensor, start: int, stop: int) -> Payload:
    """The payload of a parsed header whose body is ``buffer[start:stop]``, on the buffer's device.

    A view of the buffer when it starts at a multiple of :data:`BODY_ALIGN` bytes, else a copy on the device: decoders
    view a body as wider elements (float32, int64 words), which needs an aligned offset in the buffer's storage.
    """
    codec, version, dtype, shape, meta = header
    body = buffer[start:stop]
    return Payload.trusted(codec, version, dtype, shape, body if start % BODY_ALIGN == 0 else body.clone(), meta)


def payload_from(raw: bytes, buffer: torch.Tensor, start: int, length: int, who: str) -> Payload:
    """The payload whose ``length`` bytes start at ``buffer[start]``, given its header bytes ``raw`` (read already)."""
    header, end = parse_header(raw, who)
    if end != len(raw):
        raise PayloadError(f"{who} sent a payload whose header is not the length its size declares")
    return payload_at(header, buffer, start + end, start + length)


# ----------------------------------------------------------------------------- addressed messages


def _prefix(m: Message, size: int) -> bytes:
    phase = m.phase.encode()
    return struct.pack(f"<H{len(phase)}sH{len(m.receivers)}HQ", len(phase), phase, len(m.receivers), *m.receivers, size)


def frame_meta(messages: Sequence[Message]) -> bytes:
    """The meta of a blob of addressed messages: per message its framing and its payload's header (module docstring)."""
    return b"".join(_prefix(m, wire_size(m.payload)) + m.payload.header for m in messages)


def frame_overhead(messages: Sequence[Message]) -> int:
    """Bytes the framing adds around the messages' payloads (declared by the format, not measured)."""
    return sum(2 + len(m.phase.encode()) + 2 + 2 * len(m.receivers) + 8 for m in messages)


def frame_messages(messages: Sequence[Message]) -> bytes:
    """Addressed messages as bytes, in the device layout (meta, then bodies): for files and tests."""
    return frame_meta(messages) + b"".join(m.payload.to_bytes()[len(m.payload.header):] for m in messages)


def parse_meta(raw: bytes, sender: int, world: int, *, blob: bool = False) -> tuple[list[tuple[str, tuple[int, ...], Header, int]], int]:
    """The messages of a meta: (phase, receivers, parsed header, body length) each, and where the meta ends.

    ``raw`` is the meta alone, or (``blob``) a whole blob of :func:`frame_messages`, whose meta ends where the bytes
    left are the bodies it declared (a message's framing is never empty, so that point is unique).  Malformed bytes
    raise :class:`PayloadError`.
    """
    who = "the server" if sender == SERVER else f"worker {sender}"
    out: list[tuple[str, tuple[int, ...], Header, int]] = []
    pos = bodies = 0

    def take(fmt: str) -> tuple[Any, ...]:
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(raw):
            raise PayloadError(f"protocol messages from {who} are truncated")
        values = struct.unpack_from(fmt, raw, pos)
        pos += size
        return values

    while pos + bodies < len(raw) if blob else pos < len(raw):
        (n_phase,) = take("<H")
        (phase_bytes,) = take(f"<{n_phase}s")
        (n_recv,) = take("<H")
        receivers = take(f"<{n_recv}H")
        (size,) = take("<Q")
        if any(r >= world for r in receivers):
            raise PayloadError(f"protocol message from {who} is malformed (a receiver outside the group)")
        try:
            phase = phase_bytes.decode()
        except UnicodeDecodeError:
            raise PayloadError("protocol message: its phase is not UTF-8") from None
        header, end = parse_header(raw[pos:], who)
        if end > size:
            raise PayloadError(f"protocol message from {who} is malformed (a header longer than its message)")
        out.append((phase, tuple(receivers), header, size - end))
        pos += end
        bodies += size - end
    return out, pos


def messages_from(meta: bytes, buffer: torch.Tensor, start: int, stop: int, sender: int, world: int) -> list[Message]:
    """The messages of a blob whose meta (read already) is ``meta`` and whose bodies are ``buffer[start:stop]``."""
    parsed, _ = parse_meta(meta, sender, world)
    return _messages(parsed, buffer, start, stop, sender)


def _messages(parsed: list[tuple[str, tuple[int, ...], Header, int]], buffer: torch.Tensor, start: int, stop: int,
              sender: int) -> list[Message]:
    if sum(n for *_, n in parsed) != stop - start:
        who = "the server" if sender == SERVER else f"worker {sender}"
        raise PayloadError(f"protocol messages from {who} are malformed (their bodies are not the blob's length)")
    out = []
    for phase, receivers, header, n in parsed:
        out.append(Message(phase, sender, receivers, payload_at(header, buffer, start, start + n)))
        start += n
    return out


def unframe_messages(raw: bytes, sender: int, world: int) -> list[Message]:
    """Inverse of :func:`frame_messages` for ``sender``'s bytes; malformed bytes raise :class:`PayloadError`."""
    parsed, end = parse_meta(raw, sender, world, blob=True)
    return _messages(parsed, host_tensor(raw[end:], torch.device("cpu")), 0, len(raw) - end, sender)
