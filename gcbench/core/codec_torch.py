"""Device-resident twins of the wire codecs in :mod:`gcbench.core.codec`: torch operations only.

Every function here takes and returns tensors on the input's device and produces exactly the
bytes its NumPy/numba namesake in :mod:`gcbench.core.codec` produces (the same-bytes tests in
``tests/core/test_codec_torch.py``), so a compressor's torch path (the path a CUDA tensor takes)
never leaves the device to encode or decode:

* :func:`pack_bits` / :func:`unpack_bits` — fixed-width unsigned fields, LSB-first.  Eight
  fields of ``width`` bits fill exactly ``width`` bytes, so each output byte column of a group is
  built from the (at most ``ceil(8/width)+1``) fields that overlap it: a loop over byte columns
  (at most 64), each step vectorised over all groups.
* :func:`varint_encode` / :func:`varint_decode` — LEB128: per-value byte counts, prefix sums
  for the offsets, one scatter per byte position.
* :func:`write_fields`, :func:`write_records`, :func:`read_fields` — Elias-ω streams (from
  :mod:`gcbench.core.codec_torch_elias`): code lengths, prefix sums, then a scatter of each
  field's bytes; the reader decodes a code at every bit position speculatively and finds the
  real record starts by pointer doubling from bit 0.
* :func:`encode_indices` / :func:`decode_indices` and :func:`encode_sparse` /
  :func:`decode_sparse` — the index codings (``fixed``, ``int32``, ``delta-varint``, ``elias``)
  and sparse bodies, DGC's ``paper`` format included.

Nothing here calls NumPy or reads a tensor into Python, except where a size must be known to
allocate (a variable-length stream's length) and to raise on malformed bytes: each function
folds its validity conditions and that size into one int64 and reads it once
(:func:`~gcbench.core.codec_torch_elias.settle`); each docstring states its scalar reads.
Decoders raise :class:`~gcbench.core.errors.PayloadError` on malformed bytes and allocate only
what the bytes given (and the expected shape) justify.  The size helpers that need no tensor
(``index_width``, ``packed_nbytes``, ``elias_omega_length``, ``index_nbytes_range``,
``sparse_nbytes_range``) are the host codec's, re-exported so a torch path imports one module.
"""

from __future__ import annotations

import torch

from gcbench.core.codec import elias_omega_length, index_nbytes_range, index_width, packed_nbytes, sparse_nbytes_range
from gcbench.core.codec_torch_elias import (
    Check,
    read_fields,
    read_fields_lazy,
    settle,
    write_fields,
    write_records,
    write_records_checked,
)
from gcbench.core.errors import PayloadError
from gcbench.core.params import INDEX_CODINGS

__all__ = [
    "decode_indices",
    "decode_sparse",
    "elias_omega_length",
    "encode_indices",
    "encode_sparse",
    "index_nbytes_range",
    "index_width",
    "pack_bits",
    "packed_nbytes",
    "read_fields",
    "sparse_nbytes_range",
    "unpack_bits",
    "varint_decode",
    "varint_encode",
    "write_fields",
    "write_records",
]

_I64 = torch.int64


def _check_width(width: int) -> None:
    if not 1 <= width <= 64:
        raise ValueError(f"bit width must be in 1..64, got {width}")


def _low_mask(width: int) -> int:
    """``2**width - 1`` as an int64 bit pattern (-1 for 64 bits)."""
    return -1 if width == 64 else (1 << width) - 1


def _overlaps(width: int, byte: int) -> list[tuple[int, int]]:
    """Fields of an 8-field group that overlap byte ``byte`` of the group, as (field, shift):
    the field's bit 0 lies at bit ``shift`` of the byte (negative: before the byte starts)."""
    out = []
    for field in range(8):
        start = field * width
        if start < 8 * byte + 8 and start + width > 8 * byte:
            out.append((field, start - 8 * byte))
    return out


def pack_bits(values: torch.Tensor, width: int) -> torch.Tensor:
    """Pack unsigned integers (< 2**width, 1 <= width <= 64) into a little-endian uint8 bit stream.

    Same bytes as :func:`gcbench.core.codec.pack_bits`: field i occupies bits
    ``[i*width, (i+1)*width)``, least significant bit first; bits above ``width`` are ignored;
    ``width`` 64 takes int64 bit patterns (uint64 values as their two's complement).  Bool masks
    pack at width 1.  No scalar reads; the result is on ``values``' device.
    """
    _check_width(width)
    flat = values.reshape(-1)
    count = flat.numel()
    if width == 8:
        return (flat.to(_I64) & 0xFF).to(torch.uint8) if flat.dtype != torch.uint8 else flat.clone()
    groups = (count + 7) // 8
    v = torch.zeros(groups * 8, dtype=_I64, device=flat.device)
    v[:count] = flat.to(_I64)
    if width < 64:
        v &= _low_mask(width)
    v = v.view(groups, 8)
    out = torch.empty((groups, width), dtype=torch.uint8, device=flat.device)
    for byte in range(width):
        col: torch.Tensor | None = None
        for field, shift in _overlaps(width, byte):
            part = v[:, field] << shift if shift >= 0 else v[:, field] >> -shift
            col = part if col is None else col | part
        assert col is not None  # every byte of a group overlaps at least one field
        out[:, byte] = (col & 0xFF).to(torch.uint8)
    return out.reshape(-1)[: packed_nbytes(count, width)]


def unpack_bits(data: torch.Tensor, width: int, count: int) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: ``count`` fields of ``width`` bits as int64.

    Raises :class:`PayloadError` when ``data`` holds fewer than ``packed_nbytes(count, width)``
    bytes (checked from its shape, before allocating).  No scalar reads.
    """
    _check_width(width)
    flat = data.reshape(-1)
    if flat.dtype != torch.uint8:
        raise TypeError(f"unpack_bits reads uint8 bytes, got {flat.dtype}")
    need = packed_nbytes(count, width)
    if flat.numel() < need:
        raise PayloadError(f"bit-packed field is truncated: need {need} bytes, have {flat.numel()}")
    if width == 8:
        return flat[:count].to(_I64)
    groups = (count + 7) // 8
    b = torch.zeros(groups * width, dtype=_I64, device=flat.device)
    b[:need] = flat[:need].to(_I64)
    b = b.view(groups, width)
    out = torch.empty((groups, 8), dtype=_I64, device=flat.device)
    for field in range(8):
        start = field * width
        acc: torch.Tensor | None = None
        for byte in range(start // 8, (start + width - 1) // 8 + 1):
            shift = 8 * byte - start  # where the byte's bit 0 lands in the field
            part = b[:, byte] << shift if shift >= 0 else b[:, byte] >> -shift
            acc = part if acc is None else acc | part
        assert acc is not None
        out[:, field] = acc & _low_mask(width) if width < 64 else acc
    return out.reshape(-1)[:count]


# ----------------------------------------------------------------------------- varints


def _shr(v: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (uint64 semantics) by 0 <= k <= 63."""
    return v if k == 0 else (v >> k) & ((1 << (64 - k)) - 1)


def _varint_layout(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per value: LEB128 byte count and start offset; and the total byte count (a 0-d tensor)."""
    nb = torch.ones_like(v)
    for j in range(1, 10):
        nb += (_shr(v, 7 * j) != 0).to(_I64)
    ends = torch.cumsum(nb, 0)
    return nb, ends - nb, ends[-1]


def _varint_write(v: torch.Tensor, nb: torch.Tensor, starts: torch.Tensor, total: int) -> torch.Tensor:
    """Scatter the LEB128 bytes of ``v`` (layout from :func:`_varint_layout`) into ``total`` bytes.

    Byte j of every value is written in one step; values shorter than j+1 bytes write to a spare
    slot past the end, so no step needs a data-dependent size (no boolean indexing, no sync)."""
    out = torch.empty(total + 1, dtype=torch.uint8, device=v.device)
    for j in range(10):
        pos = torch.where(nb > j, starts + j, total)
        byte = (_shr(v, 7 * j) & 0x7F) | torch.where(nb > j + 1, 0x80, 0)
        out.scatter_(0, pos, byte.to(torch.uint8))
    return out[:total]


def varint_encode(values: torch.Tensor) -> torch.Tensor:
    """LEB128-encode non-negative integers; same bytes as :func:`gcbench.core.codec.varint_encode`.

    int64 inputs are read as uint64 bit patterns, as the host codec does.  One scalar read: the
    stream's length (to allocate it).
    """
    v = values.reshape(-1).to(_I64)
    if v.numel() == 0:
        return torch.zeros(0, dtype=torch.uint8, device=v.device)
    nb, starts, total = _varint_layout(v)
    return _varint_write(v, nb, starts, settle([], total))


def _varint_decode_lazy(data: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor, list[Check]]:
    """:func:`varint_decode` without the read: (values, bytes consumed as a 0-d tensor, checks)."""
    n = data.numel()
    if count < 0 or count > n:  # each value takes at least one byte: refused from the shape, before allocating
        raise PayloadError(f"varint stream is truncated: {n} bytes cannot hold {count} values")
    is_end = (data & 0x80) == 0
    cum = torch.cumsum(is_end.to(_I64), 0)
    used = (cum < count).sum() + 1
    group = cum - is_end.to(_I64)  # values ended strictly before each byte
    pos = torch.arange(n, device=data.device)
    is_start = torch.ones_like(is_end)
    is_start[1:] = is_end[:-1]
    pos_in = pos - torch.cummax(torch.where(is_start, pos, 0), 0).values
    mine = group < count
    parts = (data.to(_I64) & 0x7F) << torch.clamp(7 * pos_in, max=63)
    vals = torch.zeros(count + 1, dtype=_I64, device=data.device)
    vals.scatter_add_(0, torch.where(mine, group, count), parts)  # fields do not overlap: sum == or
    checks = [
        (cum[-1] < count, f"varint stream is truncated: fewer than {count} values present"),
        ((mine & (pos_in > 9)).any(), "varint stream has an overlong value"),
    ]
    return vals[:count], used, checks


def varint_decode(data: torch.Tensor, count: int) -> tuple[torch.Tensor, int]:
    """Decode ``count`` LEB128 integers; returns (int64 values, bytes consumed).

    Same values and errors as :func:`gcbench.core.codec.varint_decode` (truncated, overlong; a
    non-canonical code is accepted, as there).  One scalar read: the bytes consumed, folded with
    the validity checks.
    """
    flat = _bytes(data)
    if count == 0:
        return torch.zeros(0, dtype=_I64, device=flat.device), 0
    vals, used, checks = _varint_decode_lazy(flat, count)
    return vals, settle(checks, used)


# ----------------------------------------------------------------------------- index codings


def _bytes(data: torch.Tensor) -> torch.Tensor:
    flat = data.reshape(-1)
    if flat.dtype != torch.uint8:
        raise TypeError(f"expected uint8 bytes, got {flat.dtype}")
    return flat


def _as_dtype(data: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A fresh tensor of ``dtype`` whose little-endian bytes are ``data`` (whose size divides evenly)."""
    return data.clone().view(dtype)


def _le_bytes(t: torch.Tensor) -> torch.Tensor:
    """The little-endian bytes of a tensor's elements, as the host codec's ``.view(np.uint8)``."""
    if t.numel() == 0:
        return torch.zeros(0, dtype=torch.uint8, device=t.device)
    return t.contiguous().view(torch.uint8)


def _sorted_checks(idx: torch.Tensor, d: int) -> list[Check]:
    if idx.numel() == 0:
        return []
    bad = (idx[0] < 0) | (idx[-1] >= d) | (idx[1:] <= idx[:-1]).any()
    return [(bad, "indices must be sorted, unique and within [0, d)")]


def _gaps(idx: torch.Tensor) -> torch.Tensor:
    """First gap is idx[0] + 1, then differences: all >= 1 for sorted unique indices."""
    return torch.diff(idx, prepend=torch.full((1,), -1, dtype=_I64, device=idx.device))


def _unknown(coding: str) -> str:
    return f"unknown index coding {coding!r}; choose from {', '.join(INDEX_CODINGS)}"


def encode_indices(idx: torch.Tensor, d: int, coding: str, *, validate: bool = True) -> torch.Tensor:
    """Encode sorted unique indices into [0, d) with ``coding``; same bytes as
    :func:`gcbench.core.codec.encode_indices`.

    ``validate`` checks that the indices are sorted, unique and in range (``ValueError``
    otherwise), as the host codec does; a caller that has just sorted them may pass False.
    Scalar reads: one for ``fixed`` and ``int32`` when validating (the check), none otherwise;
    one for ``delta-varint`` and ``elias`` (the stream's length, folded with the check).
    """
    if coding not in INDEX_CODINGS:
        raise ValueError(_unknown(coding))
    idx = idx.reshape(-1).to(_I64)
    checks = _sorted_checks(idx, d) if validate else []
    if coding in ("fixed", "int32"):
        settle(checks, error=ValueError)
        if coding == "fixed":
            return pack_bits(idx, index_width(d))
        return _le_bytes(idx.to(torch.int32))
    if idx.numel() == 0:
        return torch.zeros(0, dtype=torch.uint8, device=idx.device)
    if coding == "delta-varint":
        v = _gaps(idx) - 1
        nb, starts, total = _varint_layout(v)
        return _varint_write(v, nb, starts, settle(checks, total, ValueError))
    return write_records_checked(_gaps(idx).reshape(-1, 1), (0,), checks, ValueError)


def _decode_indices_lazy(data: torch.Tensor, d: int, k: int, coding: str) -> tuple[torch.Tensor, torch.Tensor | int, list[Check]]:
    """:func:`decode_indices` without the read: (indices, bytes consumed, checks)."""
    if k < 0:
        raise PayloadError(f"an index list cannot hold {k} indices")
    if coding == "fixed":
        w = index_width(d)
        return unpack_bits(data, w, k), packed_nbytes(k, w), []
    if coding == "int32":
        if data.numel() < 4 * k:
            raise PayloadError("int32 index list is truncated")
        return _as_dtype(data[: 4 * k], torch.int32).to(_I64), 4 * k, []
    if k == 0:
        return torch.zeros(0, dtype=_I64, device=data.device), 0, []
    # a gap of sorted indices into d positions is at most d: checking it keeps the running sum from wrapping around
    if coding == "delta-varint":
        gaps, used, checks = _varint_decode_lazy(data, k)
        checks.append(((gaps.min() < 0) | (gaps.max() >= d), "delta-varint index list has a gap past the tensor"))
        return torch.cumsum(gaps + 1, 0) - 1, used, checks
    if coding == "elias":
        rec, bits, checks = read_fields_lazy(data, k, (0,))
        checks.append((rec[:, 0].max() > d, "Elias index list has a gap past the tensor"))
        return torch.cumsum(rec[:, 0], 0) - 1, (bits + 7) // 8, checks
    raise PayloadError(_unknown(coding))


def decode_indices(data: torch.Tensor, d: int, k: int, coding: str) -> tuple[torch.Tensor, int]:
    """Decode ``k`` indices; returns (int64 indices, bytes consumed), as
    :func:`gcbench.core.codec.decode_indices`.

    Scalar reads: none for ``fixed`` and ``int32``; one for ``delta-varint`` and ``elias`` (the
    bytes consumed, folded with the validity checks).
    """
    idx, used, checks = _decode_indices_lazy(_bytes(data), d, k, coding)
    if isinstance(used, int):
        settle(checks)
        return idx, used
    return idx, settle(checks, used)


# ----------------------------------------------------------------------------- sparse vectors

_RUN_ESCAPE = 0xFFFF  # DGC 'paper' coding: a 16-bit run field of 65535 advances without an element


def _paper_encode(values: torch.Tensor, idx: torch.Tensor, checks: list[Check]) -> torch.Tensor:
    """Records of (16-bit zero run, float32 value), escapes for runs of 65,535 or more.
    One scalar read: the record count (folded with ``checks``)."""
    runs = _gaps(idx) - 1  # zeros before each element
    n_esc = torch.div(runs, _RUN_ESCAPE, rounding_mode="floor")
    n_rec = settle(checks, idx.numel() + n_esc.sum(), ValueError)
    own = torch.cumsum(n_esc + 1, 0) - 1  # each element's record comes after its escapes
    rec_runs = torch.full((n_rec,), _RUN_ESCAPE, dtype=_I64, device=idx.device)
    rec_runs[own] = runs - n_esc * _RUN_ESCAPE
    rec_vals = torch.zeros(n_rec, dtype=torch.float32, device=idx.device)
    rec_vals[own] = values
    run_bytes = torch.stack([rec_runs & 0xFF, rec_runs >> 8], dim=1).to(torch.uint8).reshape(-1)
    return torch.cat([run_bytes, _le_bytes(rec_vals)])


def _paper_decode(data: torch.Tensor, d: int, k: int) -> tuple[torch.Tensor, torch.Tensor, list[Check]]:
    """(values, indices, checks) of a DGC paper-coded body; sizes from its shape, no read."""
    if data.numel() % 6:
        raise PayloadError("DGC paper-coded body is not a whole number of 48-bit records")
    n_rec = data.numel() // 6
    if k > n_rec:
        raise PayloadError(f"DGC paper-coded body holds at most {n_rec} elements, header says {k}")
    rb = data[: 2 * n_rec].to(_I64).view(n_rec, 2)
    runs = rb[:, 0] | (rb[:, 1] << 8)
    vals = _as_dtype(data[2 * n_rec :], torch.float32)
    is_elem = runs != _RUN_ESCAPE
    pos = torch.cumsum(torch.where(is_elem, runs + 1, _RUN_ESCAPE), 0) - 1
    slot = torch.where(is_elem, torch.cumsum(is_elem.to(_I64), 0) - 1, k)  # element rank; escapes to a spare slot
    slot = torch.clamp(slot, max=k)
    out_vals = torch.zeros(k + 1, dtype=torch.float32, device=data.device).scatter_(0, slot, vals)
    out_idx = torch.zeros(k + 1, dtype=_I64, device=data.device).scatter_(0, slot, pos)
    n_elem = is_elem.sum() if n_rec else torch.zeros((), dtype=_I64, device=data.device)
    return out_vals[:k], out_idx[:k], [(n_elem != k, f"DGC paper-coded body does not hold the {k} elements its header says")]


def encode_sparse(values: torch.Tensor, idx: torch.Tensor, d: int, coding: str, *, validate: bool = True) -> torch.Tensor:
    """Encode float32 ``values`` at sorted unique ``idx`` of a length-``d`` vector; same bytes as
    :func:`gcbench.core.codec.encode_sparse`.

    Layout: for ``paper``, records of (16-bit zero run, float32 value) stored as two arrays;
    otherwise the k float32 values followed by the index coding.  ``validate`` as in
    :func:`encode_indices`.  Scalar reads: those of :func:`encode_indices`; one for ``paper`` (the
    record count, folded with the check).
    """
    values = values.reshape(-1).to(torch.float32)
    idx = idx.reshape(-1).to(_I64)
    if values.numel() != idx.numel():
        raise ValueError("values and indices differ in length")
    if coding == "paper":
        return _paper_encode(values, idx, _sorted_checks(idx, d) if validate else [])
    if coding not in INDEX_CODINGS:
        raise ValueError(_unknown(coding))
    return torch.cat([_le_bytes(values), encode_indices(idx, d, coding, validate=validate)])


def decode_sparse(data: torch.Tensor, d: int, k: int, coding: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`encode_sparse`: (float32 values, int64 indices), as
    :func:`gcbench.core.codec.decode_sparse` (same errors: truncated, wrong count, trailing bytes,
    an index outside the tensor).  One scalar read: every validity check folded into one.
    """
    flat = _bytes(data)
    if k < 0:
        raise PayloadError(f"a sparse body cannot hold {k} elements")
    if coding == "paper":
        vals, idx, checks = _paper_decode(flat, d, k)
    else:
        if flat.numel() < 4 * k:
            raise PayloadError("sparse body is truncated")
        vals = _as_dtype(flat[: 4 * k], torch.float32)
        idx, used, checks = _decode_indices_lazy(flat[4 * k :], d, k, coding)
        trailing = (4 * k + used) != flat.numel()
        message = f"sparse body has bytes after its {k} indices"
        if isinstance(trailing, torch.Tensor):
            checks.append((trailing, message))
        elif trailing:  # a fixed-size coding: known from the shape
            raise PayloadError(message)
    if k:
        checks.append(((idx.min() < 0) | (idx.max() >= d), "sparse body has an index outside the tensor"))
    settle(checks)
    return vals, idx
