"""Elias-ω streams on the device, and the one-read check every device decoder ends with.

The Elias-ω writers and the parallel reader behind :mod:`gcbench.core.codec_torch` (split out to
keep each module short); see that module for the contract.  :func:`settle` is how every device
codec turns its validity conditions (and, where a size must be known to allocate, that size)
into Python with a single scalar read.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gcbench.core.errors import PayloadError

Check = tuple[torch.Tensor, str]


def settle(checks: Sequence[Check], value: torch.Tensor | int | None = None, error: type[Exception] = PayloadError) -> int:
    """At most one scalar read: ``value`` (a non-negative 0-d integer tensor, an int, or 0) when no
    check holds, else raise ``error`` with the message of the first check (in list order) that holds.

    Each check is (a boolean tensor that is true when the input is bad, its message); folding them
    and the size into one int64 is what keeps a decoder at one host round trip.  No checks and an
    int (or no) value: nothing is read.
    """
    if not checks:
        return value if isinstance(value, int) else 0 if value is None else int(value)
    bad = torch.stack([c.reshape(()) for c, _ in checks])
    first = bad.to(torch.int32).argmax()
    if isinstance(value, torch.Tensor):
        ok = value.to(torch.int64)
    else:
        ok = torch.full((), value or 0, dtype=torch.int64, device=bad.device)
    code = int(torch.where(bad.any(), -1 - first, ok))
    if code < 0:
        raise error(checks[-1 - code][1])
    return code


_I64 = torch.int64


def _mask(w: torch.Tensor | int) -> torch.Tensor | int:
    """``2**w - 1`` as int64 bit patterns (all ones for 64 bits); ``w`` in 0..64."""
    if isinstance(w, int):
        return -1 if w >= 64 else (1 << w) - 1
    return torch.where(w >= 64, -1, (1 << w.clamp(max=63)) - 1)


def _shr(v: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Logical right shift of int64 bit patterns by per-lane amounts in 0..63."""
    return (v >> s) & torch.where(s == 0, -1, (1 << (64 - s).clamp(max=63)) - 1)


def _bitlen(v: torch.Tensor) -> torch.Tensor:
    """Exact bit length of non-negative int64 values (binary search over shifts)."""
    n = torch.zeros_like(v)
    for step in (32, 16, 8, 4, 2, 1):
        high = (v >> step) > 0
        n += torch.where(high, step, 0)
        v = torch.where(high, v >> step, v)
    return n + (v > 0).to(_I64)


# ----------------------------------------------------------------------------- writers


def _scatter_fields(words: torch.Tensor, v: torch.Tensor, w: torch.Tensor | int, start: torch.Tensor) -> None:
    """Add fields (``v`` in ``w`` <= 64 bits, MSB first, at bit ``start``) into big-endian 64-bit
    ``words``.  A field lies in one word or straddles two; bits of different fields are
    disjoint, so a sum is an OR (no carries).  The last word is a spare slot for unused shares."""
    spare = words.numel() - 1
    v = v & _mask(w)
    sh = 64 - (start & 63) - w  # >= 0: the field fits its first word, this far from the word's end
    at = start >> 6
    head = torch.where(sh >= 0, v << sh.clamp(0, 63), _shr(v, (-sh).clamp(0, 63)))
    words.scatter_add_(0, at, head)
    tail = v << (64 + sh).clamp(0, 63)  # the straddling field's low bits, at the top of the next word
    words.scatter_add_(0, torch.where(sh >= 0, spare, at + 1), tail)


def _stream(total: int, device: torch.device) -> torch.Tensor:
    """Zeroed 64-bit words for a ``total``-bit stream, plus the spare slot."""
    return torch.zeros((total + 63) // 64 + 1, dtype=_I64, device=device)


def _stream_bytes(words: torch.Tensor, total: int) -> torch.Tensor:
    """The first ``ceil(total / 8)`` bytes of big-endian ``words`` (the spare slot dropped)."""
    w = words[:-1]
    out = torch.stack([(w >> (56 - 8 * i)) & 0xFF for i in range(8)], dim=1).to(torch.uint8)
    return out.reshape(-1)[: (total + 7) // 8]


def write_fields(values: torch.Tensor, widths: torch.Tensor) -> torch.Tensor:
    """Concatenate fields MSB-first into a big-endian bit stream; same bytes as
    :func:`gcbench.core.codec.write_fields` (fields of width 0 vanish; widths at most 64).

    One scalar read: the stream's length (to allocate it).
    """
    v = values.reshape(-1).to(_I64)
    w = widths.reshape(-1).to(_I64)
    if v.numel() == 0:
        return torch.zeros(0, dtype=torch.uint8, device=v.device)
    ends = torch.cumsum(w, 0)
    total = settle([], ends[-1])
    words = _stream(total, v.device)
    _scatter_fields(words, v, w, ends - w)
    return _stream_bytes(words, total)


_PREFIX: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}


def make_tables(device: torch.device | str) -> None:
    """The codec's per-device tables (the ω prefix and decode tables), made now if they are not yet: each is one small
    upload in a process's life, made on first use otherwise; the device guard makes them before it counts a step."""
    dev = torch.device(device)
    _omega_prefix_table(dev)
    _omega_table(dev)


def _omega_prefix_table(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """For m in 0..63, the groups of ω(m) before its last group and terminator, as one (value,
    width): ω(n) for n >= 2 is that prefix of m = bitlen(n) - 1, then n, then a 0 bit.  Built
    once per device."""
    key = str(device)
    if key not in _PREFIX:
        vals, widths = [0, 0], [0, 0]  # m = 0 (unused: n = 1 codes as a lone 0) and m = 1 (no prefix)
        for m in range(2, 64):
            inner = m.bit_length() - 1
            vals.append((vals[inner] << m.bit_length()) | m)
            widths.append(widths[inner] + m.bit_length())
        _PREFIX[key] = (torch.tensor(vals, dtype=_I64, device=device), torch.tensor(widths, dtype=_I64, device=device))
    return _PREFIX[key]


def _column_fields(col: torch.Tensor, width: int) -> list[tuple[torch.Tensor, torch.Tensor | int]]:
    """A record column as fields (value, width): ``width`` bits, or (width 0) its Elias-ω code as
    two fields, the prefix groups (at most 11 bits) and then n with the terminating 0 bit."""
    if width > 0:
        return [(col, width)]
    bl = _bitlen(col.clamp(min=1))
    pv, pw = _omega_prefix_table(col.device)
    one = col <= 1
    return [(pv[bl - 1], pw[bl - 1]), (torch.where(one, 0, col << 1), torch.where(one, 1, bl + 1))]


def write_records_checked(records: torch.Tensor, pattern: Sequence[int], checks: Sequence[Check], error: type[Exception]) -> torch.Tensor:
    """:func:`write_records` with the caller's ``checks`` folded into its one scalar read."""
    pat = [int(p) for p in pattern]
    rec = records.reshape(-1, len(pat)).to(_I64)
    cols = [_column_fields(rec[:, j], w) for j, w in enumerate(pat)]
    lengths = torch.zeros(rec.shape[0], dtype=_I64, device=rec.device)
    for fields in cols:
        for _, w in fields:
            lengths = lengths + w
    ends = torch.cumsum(lengths, 0)
    all_checks = list(checks)
    for j, w in enumerate(pat):  # column by column: a list index would be a host-to-device copy
        if w == 0 and rec.numel():
            all_checks.append(((rec[:, j] < 1).any(), "Elias-ω codes positive integers only"))
    if rec.shape[0] == 0:
        settle(all_checks, error=error)
        return torch.zeros(0, dtype=torch.uint8, device=rec.device)
    total = settle(all_checks, ends[-1], error)
    words = _stream(total, rec.device)
    at = ends - lengths
    for fields in cols:
        for v, w in fields:
            _scatter_fields(words, v, w, at)
            at = at + w
    return _stream_bytes(words, total)


def write_records(records: torch.Tensor, pattern: Sequence[int]) -> torch.Tensor:
    """The stream :func:`read_fields` reads: per record, column j in ``pattern[j]`` bits, or as its
    Elias-ω code where ``pattern[j]`` is 0; same bytes as :func:`gcbench.core.codec.write_records`
    (``ValueError`` on an Elias value below 1).

    Each Elias-ω code is two fields (a table lookup for the short prefix groups, then n and its
    terminator), so no per-group arrays are built.  One scalar read: the stream's length, folded
    with the check.
    """
    return write_records_checked(records, pattern, [], ValueError)


# ----------------------------------------------------------------------------- reader


def _chunk(device: torch.device) -> int:
    """Bit positions decoded speculatively per step: bounds the temporaries (small on a CPU, whose
    caches they then fit; large on an accelerator, where each step is a kernel launch)."""
    return 1 << 16 if device.type == "cpu" else 1 << 22


class _Bits:
    """An MSB-first bit stream for lane-parallel reads: the bytes, and the 64-bit big-endian word
    at every byte offset (8 bytes per stream byte), so any field of at most 64 bits is two gathers."""

    def __init__(self, data: torch.Tensor) -> None:
        n = data.numel()
        self.nbits = 8 * n
        self.bytes = torch.zeros(n + 9, dtype=_I64, device=data.device)
        self.bytes[:n] = data.to(_I64)
        self.words = torch.zeros(n + 1, dtype=_I64, device=data.device)
        for i in range(8):
            self.words |= self.bytes[i : i + n + 1] << (56 - 8 * i)

    def read(self, pos: torch.Tensor, w: torch.Tensor | int, clamp: bool = True) -> torch.Tensor:
        """``w`` (1..64) bits at each position as an unsigned value (int64 bit pattern); bits past
        the stream read as 0.  ``clamp=False`` when every position is known to be <= nbits + 7."""
        if clamp:
            pos = pos.clamp(0, self.nbits)
        q, off = pos >> 3, pos & 7
        t = off + w  # the field ends ``t`` bits into the 72-bit window at byte q
        word, ninth = self.words[q], self.bytes[q + 8]
        inside = _shr(word, (64 - t).clamp(0, 63))
        across = (word << (t - 64).clamp(0, 63)) | (ninth >> (72 - t).clamp(0, 63))
        return torch.where(t <= 64, inside, across) & _mask(w)


_WINDOW = 16  # bits decoded at once by table lookup: always the first two groups of a code
_TABLES: dict[str, torch.Tensor] = {}


def _omega_table(device: torch.device) -> torch.Tensor:
    """For every 16-bit window, codec.py's reader run inside it: ``n << 8 | bits used << 2 |
    state`` with state 1 (code ended), 2 (corrupt: a group after n > 62) or 0 (the next group
    does not fit the window; reading goes on from ``bits used`` with ``n``).  Built once per device."""
    key = str(device)
    if key not in _TABLES:
        table = []
        for x in range(1 << _WINDOW):
            pos, n, state = 0, 1, 0
            while pos < _WINDOW:
                if not (x >> (_WINDOW - 1 - pos)) & 1:
                    pos, state = pos + 1, 1
                    break
                if n > 62:
                    state = 2
                    break
                if pos + n + 1 > _WINDOW:
                    break
                pos, n = pos + n + 1, (x >> (_WINDOW - pos - n - 1)) & ((1 << (n + 1)) - 1)
            table.append(n << 8 | pos << 2 | state)
        _TABLES[key] = torch.tensor(table, dtype=_I64, device=device)
    return _TABLES[key]


def _omega_walk(bits: _Bits, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Decode an Elias-ω code at every position (each <= nbits + 1): (value, end, valid), as
    codec.py's reader: a group of n + 1 bits starts at each 1 bit, a 0 bit ends the code, and
    n > 62 or a code running past the stream is corrupt.  A table lookup on the next 16 bits
    decodes the first groups (at least two); groups grow as n -> >= 2**n, so at most two more
    groups and the terminating bit remain: three steps decide every lane."""
    entry = _omega_table(pos.device)[bits.read(pos, _WINDOW, clamp=False)]
    state, n = entry & 3, entry >> 8
    cur = pos + ((entry >> 2) & 63)
    done = state == 1
    ok = (state != 2) & (cur <= bits.nbits)  # a window that ran past the stream read zeros there
    cur = cur.clamp(max=bits.nbits + 1)  # (such a lane is invalid; clamped, its reads stay in bounds)
    for _ in range(3):
        live = ok & ~done
        width = (n + 1).clamp(1, 64)
        value = bits.read(cur, width, clamp=False)
        inside = cur < bits.nbits
        one = _shr(value, width - 1) == 1  # a group's first bit is the one that announces it
        stop = live & inside & ~one
        group = live & inside & one
        ok = ok & ~(live & ~inside) & ~(group & ((n > 62) | (cur + n + 1 > bits.nbits)))
        take = group & ok
        cur = torch.where(stop, cur + 1, torch.where(take, cur + width, cur))
        n = torch.where(take, value, n)
        done = done | stop
    return n, cur, ok & done


def _record_ends(bits: _Bits, pattern: list[int], limit: int, index: torch.dtype) -> torch.Tensor:
    """Where a record starting at each bit position 0..limit would end, ``limit + 1`` (the node
    "bad") where it cannot be read or ends past ``limit``; plus the entry bad -> bad.  Positions
    are decoded speculatively, in chunks."""
    bad = limit + 1
    omega = torch.full((limit + 2,), bad, dtype=index, device=bits.bytes.device)
    step = _chunk(omega.device)
    for lo in range(0, limit + 1, step):
        pos = torch.arange(lo, min(lo + step, limit + 1), device=omega.device)
        _, end, ok = _omega_walk(bits, pos)
        omega[lo : lo + pos.numel()] = torch.where(ok & (end <= limit), end, bad).to(index)
    ends = torch.full_like(omega, bad)
    for lo in range(0, limit + 1, step):
        q = torch.arange(lo, min(lo + step, limit + 1), device=omega.device)
        for w in pattern:
            if w > 0:
                q = torch.where((q + w > limit) | (q == bad), bad, q + w)
            else:
                q = omega[q].to(_I64)
        ends[lo : lo + q.numel()] = q.to(index)
    return ends


#: the longest Elias-ω code the reader accepts: groups of 2, at most 4, 16 and 63 bits, and the 0
_OMEGA_MAX_BITS = 2 + 4 + 16 + 63 + 1


def _record_starts(ends: torch.Tensor, count: int, bad: int) -> tuple[torch.Tensor, torch.Tensor, list[Check]]:
    """Starts of the first ``count`` records of the chain 0 -> ends[0] -> ..., by doubling: after
    round r every node within 2**r steps of bit 0 is marked (``ceil(log2 count)`` rounds, each a
    gather and a scatter over the positions).  Returns (starts, bits used, checks)."""
    reach = torch.zeros(bad + 2, dtype=torch.bool, device=ends.device)  # slot bad + 1 takes unmarked lanes
    reach[0] = True
    jump = ends
    for _ in range(max(count - 1, 0).bit_length()):
        reach[torch.where(reach[: bad + 1], jump, bad + 1)] = True
        jump = jump[jump]
    reach = reach[: bad + 1]
    rank = torch.cumsum(reach, 0, dtype=torch.int32) - 1
    chain = reach & (rank < count)
    starts = torch.zeros(count + 1, dtype=_I64, device=ends.device)
    starts.scatter_(0, torch.where(chain, rank.to(_I64), count), torch.arange(bad + 1, device=ends.device))
    used = torch.where(chain, ends, 0).max().to(_I64)
    return starts[:count], used, [((chain & (ends == bad)).any(), "Elias-coded stream is truncated or corrupt")]


def _check_record_count(nbytes: int, count: int, pattern: list[int]) -> None:
    """Refuse a record count the stream cannot hold (each record takes at least one bit per column)
    before anything is allocated: a header must not size the output, the bytes do."""
    if count < 0 or count * sum(max(w, 1) for w in pattern) > 8 * nbytes:
        raise PayloadError(f"Elias-coded stream of {nbytes} bytes cannot hold {count} records")


def read_fields_lazy(data: torch.Tensor, count: int, pattern: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor | int, list[Check]]:
    """:func:`read_fields` without the read: (records, bits used, checks)."""
    pat = [int(p) for p in pattern]
    flat = data.reshape(-1)
    _check_record_count(flat.numel(), count, pat)
    out = torch.zeros((count, len(pat)), dtype=_I64, device=flat.device)
    if count == 0:
        return out, 0, []
    bits = _Bits(flat)
    if 0 not in pat:  # fixed widths only: record i starts at i * sum(pattern), and the count check covered the length
        starts: torch.Tensor = torch.arange(count, device=flat.device) * sum(pat)
        used: torch.Tensor | int = count * sum(pat)
        checks: list[Check] = []
    else:
        # record i starts within i * (longest record) bits: no later position can start one of the first count
        limit = min(bits.nbits, count * sum(w if w > 0 else _OMEGA_MAX_BITS for w in pat))
        index = torch.int32 if limit + 3 < 2**31 else _I64
        starts, used, checks = _record_starts(_record_ends(bits, pat, limit, index), count, limit + 1)
    q = starts
    for j, w in enumerate(pat):
        if w > 0:
            out[:, j] = bits.read(q, w)
            q = q + w
        else:
            out[:, j], q, _ = _omega_walk(bits, q)
    return out, used, checks


def read_fields(data: torch.Tensor, count: int, pattern: Sequence[int]) -> tuple[torch.Tensor, int]:
    """Read ``count`` records of ``pattern`` from a stream made by :func:`write_fields` or
    :func:`write_records`; same records, bit count and errors as
    :func:`gcbench.core.codec.read_fields`.

    The sequential reader becomes a parallel one: the Elias-ω code (and so the record) that would
    start at every bit position is decoded speculatively, then pointer doubling from bit 0 finds
    the chain of real record starts, whose fields are read last.  Memory is linear in the bytes
    given and in the count (a few tens of bytes per bit at the peak, over at most the
    ``count * longest record`` bits the first ``count`` records can span); the count is checked
    against the stream's size before anything is allocated.  One scalar read: the bits used,
    folded with the validity check (none when every column has a fixed width).
    """
    rec, used, checks = read_fields_lazy(data, count, pattern)
    if isinstance(used, int):
        return rec, used
    return rec, settle(checks, used)
