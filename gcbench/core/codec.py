"""Wire codecs shared by the compressors: bit packing, varints, Elias-ω and the index codings.

Everything here turns numbers into the exact bytes a compressor sends and back.  The functions
work on NumPy arrays (host memory); compressors convert tensors at the boundary.

* :func:`pack_bits` / :func:`unpack_bits` — fixed-width unsigned fields, LSB-first, so 1-bit
  signs take one bit and ternary codes two.
* :func:`varint_encode` / :func:`varint_decode` — LEB128, vectorised.
* :func:`elias_omega_length`, :func:`write_fields`, :func:`write_records`, :func:`read_fields` —
  Elias-ω codes (as in QSGD, Alistarh et al. 2017) interleaved with fixed-width fields, MSB-first
  bit streams.
* :func:`encode_indices` / :func:`decode_indices` — sorted sparse index sets with the coding a
  user selects: ``fixed`` (``ceil(log2 d)`` bits each), ``int32``, ``delta-varint`` (gaps as
  LEB128) and ``elias`` (gaps as Elias-ω).
* :func:`encode_sparse` / :func:`decode_sparse` — float32 values plus indices, including DGC's
  ``paper`` format (32-bit value + 16-bit zero run per nonzero, with escape records).
* :func:`index_nbytes_range` / :func:`sparse_nbytes_range` — the body sizes a header's (d, k,
  coding) allow, which decoders check before allocating anything (decoding is a trust boundary).

Decoders raise :class:`~gcbench.core.errors.PayloadError` on malformed bytes and bound every
allocation by the bytes they were given.

Every fast routine has a plain reference (``*_reference``) that the tests compare against.  The
bit packers and stream writers run as numba kernels (:mod:`gcbench.kernels`): packing 25.6M
fields no longer builds one uint64 per bit (the old generic path, 1.6 GB for 6-bit fields).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from gcbench import kernels
from gcbench.core.errors import PayloadError
from gcbench.core.params import INDEX_CODINGS
from gcbench.kernels.runtime import slow_path

# ----------------------------------------------------------------------------- bit packing


def index_width(d: int) -> int:
    """Bits of a fixed-width index into ``d`` positions: ``ceil(log2 d)``, at least 1."""
    return max(1, math.ceil(math.log2(d))) if d > 1 else 1


def packed_nbytes(count: int, width: int) -> int:
    """Bytes that :func:`pack_bits` produces for ``count`` fields of ``width`` bits."""
    return (count * width + 7) // 8


def pack_bits(values: np.ndarray, width: int) -> np.ndarray:
    """Pack unsigned integers (< 2**width, 1 <= width <= 64) into a little-endian bit stream of uint8.

    Field i occupies bits ``[i*width, (i+1)*width)`` of the stream, least significant bit first.
    The numba kernel packs each group of 8 fields (exactly ``width`` bytes) in a register, groups
    in parallel; ``np.packbits`` serves boolean masks.  Bits above ``width`` are ignored.
    """
    if not 1 <= width <= 64:
        raise ValueError(f"bit width must be in 1..64, got {width}")
    values = np.ascontiguousarray(values).ravel()
    if width == 1 and values.dtype == np.bool_:
        return np.packbits(values, bitorder="little")
    if width == 8:
        return values.astype(np.uint8, copy=False)
    if kernels.available():
        return kernels.pack_fields(values, width)
    return _pack_bits_numpy(values, width)


def _pack_bits_numpy(values: np.ndarray, width: int) -> np.ndarray:
    """NumPy packer (used where numba is unavailable): one uint64 per bit, so memory-hungry."""
    v = values.astype(np.uint64, copy=False)
    shifts = np.arange(width, dtype=np.uint64)
    bits = ((v[:, None] >> shifts) & np.uint64(1)).astype(np.uint8)
    return np.packbits(bits.ravel(), bitorder="little")


def unpack_bits(data: np.ndarray, width: int, count: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: ``count`` fields of ``width`` bits as int64."""
    if not 1 <= width <= 64:
        raise ValueError(f"bit width must be in 1..64, got {width}")
    data = np.ascontiguousarray(data, dtype=np.uint8).ravel()
    need = packed_nbytes(count, width)
    if len(data) < need:
        raise PayloadError(f"bit-packed field is truncated: need {need} bytes, have {len(data)}")
    if width == 8:
        return data[:count].astype(np.int64)
    if kernels.available():
        return kernels.unpack_fields(data[:need], width, count)
    bits = np.unpackbits(data[:need], count=count * width, bitorder="little").reshape(count, width)
    weights = (np.uint64(1) << np.arange(width, dtype=np.uint64)).astype(np.uint64)
    return (bits.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64).astype(np.int64)


def pack_bits_reference(values: list[int], width: int) -> bytes:
    """Plain bit-by-bit packer, the oracle for :func:`pack_bits`."""
    out = bytearray((len(values) * width + 7) // 8)
    pos = 0
    for v in values:
        for b in range(width):
            if (int(v) >> b) & 1:
                out[pos // 8] |= 1 << (pos % 8)
            pos += 1
    return bytes(out)


# ----------------------------------------------------------------------------- varints


def varint_encode(values: np.ndarray) -> np.ndarray:
    """LEB128-encode non-negative integers (vectorised)."""
    v = np.ascontiguousarray(values, dtype=np.uint64).ravel()
    if v.size == 0:
        return np.zeros(0, np.uint8)
    nb = np.ones(len(v), np.int64)
    t = v >> np.uint64(7)
    while t.any():
        nb += t > 0
        t >>= np.uint64(7)
    ends = np.cumsum(nb)
    starts = ends - nb
    out = np.empty(int(ends[-1]), np.uint8)
    for j in range(int(nb.max())):
        sel = nb > j
        byte = ((v[sel] >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        byte |= np.where(nb[sel] > j + 1, 0x80, 0).astype(np.uint8)
        out[starts[sel] + j] = byte
    return out


def varint_decode(data: np.ndarray, count: int) -> tuple[np.ndarray, int]:
    """Decode ``count`` LEB128 integers; returns (values, bytes consumed)."""
    data = np.ascontiguousarray(data, dtype=np.uint8).ravel()
    if count == 0:
        return np.zeros(0, np.int64), 0
    ends = np.flatnonzero((data & 0x80) == 0)
    if len(ends) < count:
        raise PayloadError(f"varint stream is truncated: {len(ends)} of {count} values present")
    used = int(ends[count - 1]) + 1
    d = data[:used]
    group = np.zeros(used, np.int64)
    group[ends[: count - 1] + 1] = 1
    group = np.cumsum(group)
    first = np.concatenate([[0], ends[: count - 1] + 1])
    pos_in = np.arange(used) - first[group]
    if pos_in.max(initial=0) > 9:
        raise PayloadError("varint stream has an overlong value")
    parts = (d & 0x7F).astype(np.uint64) << (7 * pos_in).astype(np.uint64)
    vals = np.zeros(count, np.uint64)
    np.add.at(vals, group, parts)
    return vals.astype(np.int64), used


# ----------------------------------------------------------------------------- Elias-omega


def _bitlen(v: np.ndarray) -> np.ndarray:
    """Bit length of positive integers < 2**53 (exact via frexp)."""
    return np.frexp(v.astype(np.float64))[1].astype(np.int64)


def elias_omega_length(n: int) -> int:
    """Length in bits of the Elias-ω code of ``n >= 1`` (L(1)=1, L(2)=L(3)=3, L(4)=6)."""
    if n < 1:
        raise ValueError("Elias-ω codes positive integers only")
    length = 1
    while n > 1:
        b = n.bit_length()
        length += b
        n = b - 1
    return length


_OMEGA_DEPTH = 6  # enough for every n < 2**53


def elias_omega_fields(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fields (values, widths), shape (len(n), depth+1), whose concatenation is ω(n) per row.

    Columns are in stream order; absent groups have width 0 and vanish when written.
    """
    n = np.ascontiguousarray(n, dtype=np.int64).ravel()
    if n.size and n.min() < 1:
        raise ValueError("Elias-ω codes positive integers only")
    vals = np.zeros((len(n), _OMEGA_DEPTH + 1), np.int64)
    widths = np.zeros((len(n), _OMEGA_DEPTH + 1), np.int64)
    cur = n.copy()
    for level in range(_OMEGA_DEPTH):
        col = _OMEGA_DEPTH - 1 - level  # groups are written innermost (smallest) first
        active = cur > 1
        if not active.any():
            break
        bl = np.where(active, _bitlen(np.maximum(cur, 1)), 0)
        vals[:, col] = np.where(active, cur, 0)
        widths[:, col] = bl
        cur = np.where(active, bl - 1, 1)
    # terminating '0' bit: value 0, width 1 (last column)
    widths[:, _OMEGA_DEPTH] = 1
    return vals, widths


def _fields_of(values: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The fields of nonzero width as flat int64 arrays, and their total bits."""
    values = np.ascontiguousarray(values, dtype=np.int64).ravel()
    widths = np.ascontiguousarray(widths, dtype=np.int64).ravel()
    keep = widths > 0
    return values[keep], widths[keep], int(widths[keep].sum())


def write_fields(values: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Concatenate fields MSB-first into a big-endian bit stream; returns uint8 bytes."""
    values, widths, total = _fields_of(values, widths)
    if total == 0:
        return np.zeros(0, np.uint8)
    if kernels.available():
        return kernels.write_fields(values, widths, total)
    return write_fields_reference(values, widths)


def write_fields_reference(values: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Vectorised NumPy writer (one int64 per bit: memory-hungry), the oracle of :func:`write_fields`."""
    values, widths, total = _fields_of(values, widths)
    if total == 0:
        return np.zeros(0, np.uint8)
    starts = np.cumsum(widths) - widths
    owner = np.repeat(np.arange(len(widths)), widths)
    shift = widths[owner] - 1 - (np.arange(total) - starts[owner])
    bits = ((values[owner] >> shift) & 1).astype(np.uint8)
    return np.packbits(bits)


def write_records(records: np.ndarray, pattern: list[int] | tuple[int, ...]) -> np.ndarray:
    """The stream :func:`read_fields` reads: per record, column j in ``pattern[j]`` bits, or as
    its Elias-ω code where ``pattern[j]`` is 0 — without building per-group arrays (numba)."""
    pat = np.asarray(pattern, dtype=np.int64)
    records = np.ascontiguousarray(records, dtype=np.int64).reshape(-1, len(pat))
    if kernels.available():
        return kernels.write_records(records, pat)
    cols_v, cols_w = [], []
    for j, w in enumerate(pat):
        if w > 0:
            cols_v.append(records[:, j : j + 1])
            cols_w.append(np.full((len(records), 1), w, np.int64))
        else:
            v, wd = elias_omega_fields(records[:, j])
            cols_v.append(v)
            cols_w.append(wd)
    return write_fields(np.concatenate(cols_v, axis=1), np.concatenate(cols_w, axis=1))


def _read_fields_py(bits: np.ndarray, count: int, pattern: np.ndarray) -> tuple[np.ndarray, int]:
    """Reference reader: ``pattern[j] > 0`` is a fixed width, ``0`` an Elias-ω code."""
    out = np.zeros((count, len(pattern)), np.int64)
    pos = 0
    nbits = len(bits)
    for i in range(count):
        for j, w in enumerate(pattern):
            if w > 0:
                if pos + w > nbits:
                    return out, -1
                v = 0
                for _ in range(w):
                    v = (v << 1) | int(bits[pos])
                    pos += 1
                out[i, j] = v
            else:
                n = 1
                while True:
                    if pos >= nbits:
                        return out, -1
                    if bits[pos] == 0:
                        pos += 1
                        break
                    # n + 1 > 63 bits cannot be a valid int64 value: a corrupt stream (the
                    # reference would raise OverflowError and numba would wrap around silently)
                    if n > 62 or pos + n + 1 > nbits:
                        return out, -1
                    v = 0
                    for _ in range(n + 1):
                        v = (v << 1) | int(bits[pos])
                        pos += 1
                    n = v
                out[i, j] = n
    return out, pos


_read_fields_fast: Callable[..., Any] | None = None
if kernels.NUMBA:  # numba makes the sequential Elias-ω decoder fast; without it (or GCBENCH_KERNELS=torch) the reference decodes
    try:
        import numba

        _read_fields_fast = numba.njit(cache=True, nogil=True)(_read_fields_py)
    except Exception as exc:  # a numba that imports but cannot build the decoder: said once, the reference decodes
        slow_path("numba could not build the Elias-omega decoder", exc)


def _check_record_count(data: np.ndarray, count: int, pattern: np.ndarray) -> None:
    """Refuse a record count the stream cannot hold (each record takes at least one bit per column)
    before the (count, columns) output is allocated: a header must not size it, the bytes do."""
    min_bits = int(np.maximum(pattern, 1).sum())
    if count < 0 or count * min_bits > 8 * np.asarray(data).size:
        raise PayloadError(f"Elias-coded stream of {np.asarray(data).size} bytes cannot hold {count} records")


def read_fields(data: np.ndarray, count: int, pattern: list[int] | tuple[int, ...]) -> tuple[np.ndarray, int]:
    """Read ``count`` records of ``pattern`` from a stream made by :func:`write_fields`.

    ``pattern[j] > 0`` reads a fixed-width field of that many bits; ``0`` reads an Elias-ω code.
    Returns (records as int64 of shape (count, len(pattern)), bits consumed).
    """
    pat = np.asarray(pattern, dtype=np.int64)
    _check_record_count(data, count, pat)
    bits = np.unpackbits(np.ascontiguousarray(data, dtype=np.uint8))
    reader = _read_fields_fast if _read_fields_fast is not None else _read_fields_py
    out, used = reader(bits, int(count), pat)
    if used < 0:
        raise PayloadError("Elias-coded stream is truncated or corrupt")
    return out, used


def read_fields_reference(data: np.ndarray, count: int, pattern: list[int] | tuple[int, ...]) -> tuple[np.ndarray, int]:
    """:func:`read_fields` without numba (the test oracle)."""
    _check_record_count(data, count, np.asarray(pattern, dtype=np.int64))
    bits = np.unpackbits(np.ascontiguousarray(data, dtype=np.uint8))
    out, used = _read_fields_py(bits, int(count), np.asarray(pattern, dtype=np.int64))
    if used < 0:
        raise PayloadError("Elias-coded stream is truncated or corrupt")
    return out, used


# ----------------------------------------------------------------------------- index codings


def _check_sorted(idx: np.ndarray, d: int) -> np.ndarray:
    idx = np.ascontiguousarray(idx, dtype=np.int64).ravel()
    if idx.size and (idx[0] < 0 or idx[-1] >= d or np.any(np.diff(idx) <= 0)):
        raise ValueError("indices must be sorted, unique and within [0, d)")
    return idx


def _gaps(idx: np.ndarray) -> np.ndarray:
    """First gap is idx[0] + 1, then differences: all >= 1 for sorted unique indices."""
    return np.diff(idx, prepend=-1)


def encode_indices(idx: np.ndarray, d: int, coding: str) -> np.ndarray:
    """Encode sorted unique indices into [0, d) with ``coding`` (see :data:`INDEX_CODINGS`)."""
    idx = _check_sorted(idx, d)
    if coding == "fixed":
        return pack_bits(idx, index_width(d))
    if coding == "int32":
        return idx.astype("<i4").view(np.uint8)
    if coding == "delta-varint":
        return varint_encode(_gaps(idx) - 1)
    if coding == "elias":
        return write_records(_gaps(idx), (0,))
    raise ValueError(f"unknown index coding {coding!r}; choose from {', '.join(INDEX_CODINGS)}")


def decode_indices(data: np.ndarray, d: int, k: int, coding: str) -> tuple[np.ndarray, int]:
    """Decode ``k`` indices; returns (indices, bytes consumed)."""
    data = np.ascontiguousarray(data, dtype=np.uint8).ravel()
    if coding == "fixed":
        w = index_width(d)
        return unpack_bits(data, w, k), packed_nbytes(k, w)
    if coding == "int32":
        if len(data) < 4 * k:
            raise PayloadError("int32 index list is truncated")
        return data[: 4 * k].view("<i4").astype(np.int64), 4 * k
    # a gap of sorted indices into d positions is at most d: checking it keeps the running sum from wrapping around
    if coding == "delta-varint":
        gaps, used = varint_decode(data, k)
        if k and (gaps.min() < 0 or gaps.max() >= d):
            raise PayloadError("delta-varint index list has a gap past the tensor")
        return np.cumsum(gaps + 1) - 1, used
    if coding == "elias":
        rec, bits = read_fields(data, k, (0,))
        if k and rec[:, 0].max() > d:
            raise PayloadError("Elias index list has a gap past the tensor")
        return np.cumsum(rec[:, 0]) - 1, (bits + 7) // 8
    raise PayloadError(f"unknown index coding {coding!r}; choose from {', '.join(INDEX_CODINGS)}")


def _varint_nbytes(v: int) -> int:
    """Bytes of the LEB128 code of ``v >= 0``."""
    return max(1, -(-int(v).bit_length() // 7))


def index_nbytes_range(d: int, k: int, coding: str) -> tuple[int, int]:
    """(smallest, largest) byte size of ``k`` indices into ``d`` positions in ``coding``.

    Decoders check a body against it before allocating: ``fixed`` and ``int32`` are exact; a gap
    is at most d, so a ``delta-varint`` gap takes 1 to ``varint(d - 1)`` bytes and an ``elias``
    gap 1 to ``L(d)`` bits (Elias-ω lengths do not decrease with n).  Unknown codings raise
    :class:`PayloadError`.
    """
    if coding == "fixed":
        n = packed_nbytes(k, index_width(d))
        return n, n
    if coding == "int32":
        return 4 * k, 4 * k
    if coding == "delta-varint":
        return k, k * _varint_nbytes(max(d - 1, 0))
    if coding == "elias":
        return (k + 7) // 8, (k * elias_omega_length(max(d, 1)) + 7) // 8
    raise PayloadError(f"unknown index coding {coding!r}; choose from {', '.join(INDEX_CODINGS)}")


def sparse_nbytes_range(d: int, k: int, coding: str) -> tuple[int, int]:
    """(smallest, largest) byte size of :func:`encode_sparse` of ``k`` of ``d`` elements in ``coding``.

    ``paper``: 6 bytes per element plus one 6-byte escape record per 65,535 skipped positions.
    """
    if coding == "paper":
        return 6 * k, 6 * (k + d // _RUN_ESCAPE + 1)
    lo, hi = index_nbytes_range(d, k, coding)
    return 4 * k + lo, 4 * k + hi


def index_bits(idx: np.ndarray, d: int, coding: str) -> int:
    """Exact bit count of an index coding (the oracle the size tests use)."""
    idx = _check_sorted(idx, d)
    if coding == "fixed":
        return len(idx) * index_width(d)
    if coding == "int32":
        return 32 * len(idx)
    if coding == "delta-varint":
        return 8 * sum(max(1, math.ceil(int(g - 1).bit_length() / 7)) for g in _gaps(idx))
    if coding == "elias":
        return sum(elias_omega_length(int(g)) for g in _gaps(idx))
    raise ValueError(f"unknown index coding {coding!r}")


# ----------------------------------------------------------------------------- sparse vectors

_RUN_ESCAPE = 0xFFFF  # DGC 'paper' coding: a 16-bit run field of 65535 advances without an element


def _paper_encode(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    runs = _gaps(idx) - 1  # zeros before each element
    n_esc = runs // _RUN_ESCAPE
    rem = runs % _RUN_ESCAPE
    n_rec = len(idx) + int(n_esc.sum())
    rec_runs = np.empty(n_rec, np.uint16)
    rec_vals = np.zeros(n_rec, np.float32)
    # position of each element's own record: its escapes come just before it
    own = np.cumsum(n_esc + 1) - 1
    rec_runs[:] = _RUN_ESCAPE
    rec_runs[own] = rem
    rec_vals[own] = values
    return np.concatenate([rec_runs.astype("<u2").view(np.uint8), rec_vals.astype("<f4").view(np.uint8)])


def _paper_decode(data: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    if len(data) % 6:
        raise PayloadError("DGC paper-coded body is not a whole number of 48-bit records")
    n_rec = len(data) // 6
    runs = data[: 2 * n_rec].view("<u2").astype(np.int64)
    vals = data[2 * n_rec :].view("<f4")
    is_elem = runs != _RUN_ESCAPE
    if int(is_elem.sum()) != k:
        raise PayloadError(f"DGC paper-coded body holds {int(is_elem.sum())} elements, header says {k}")
    advance = np.where(is_elem, runs + 1, _RUN_ESCAPE)
    pos = np.cumsum(advance) - 1
    return vals[is_elem].astype(np.float32), pos[is_elem], len(data)


def encode_sparse(values: np.ndarray, idx: np.ndarray, d: int, coding: str) -> np.ndarray:
    """Encode float32 ``values`` at sorted unique ``idx`` of a length-``d`` vector.

    Layout: for ``paper``, records of (16-bit zero run, float32 value) stored as two arrays;
    otherwise the k float32 values followed by the index coding.
    """
    values = np.ascontiguousarray(values, dtype=np.float32).ravel()
    idx = _check_sorted(idx, d)
    if len(values) != len(idx):
        raise ValueError("values and indices differ in length")
    if coding == "paper":
        return _paper_encode(values, idx)
    return np.concatenate([values.astype("<f4").view(np.uint8), encode_indices(idx, d, coding)])


def decode_sparse(data: np.ndarray, d: int, k: int, coding: str) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`encode_sparse`: (float32 values, int64 indices)."""
    data = np.ascontiguousarray(data, dtype=np.uint8).ravel()
    if coding == "paper":
        vals, idx, _ = _paper_decode(data, k)
    else:
        if len(data) < 4 * k:
            raise PayloadError("sparse body is truncated")
        vals = data[: 4 * k].view("<f4").astype(np.float32)
        idx, used = decode_indices(data[4 * k :], d, k, coding)
        if 4 * k + used != len(data):  # an encoder writes nothing after the indices
            raise PayloadError(f"sparse body has {len(data) - 4 * k - used} bytes after its {k} indices")
    if idx.size and (idx.min() < 0 or idx.max() >= d):
        raise PayloadError("sparse body has an index outside the tensor")
    return vals, idx


def sparse_bits(idx: np.ndarray, d: int, coding: str) -> int:
    """Exact body bits of :func:`encode_sparse` (tests' oracle; the paper formulas)."""
    idx = _check_sorted(idx, d)
    if coding == "paper":
        runs = _gaps(idx) - 1
        return 48 * (len(idx) + int((runs // _RUN_ESCAPE).sum()))
    return 32 * len(idx) + 8 * math.ceil(index_bits(idx, d, coding) / 8)
