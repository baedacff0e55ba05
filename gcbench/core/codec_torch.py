"""Device-resident twins of the wire codecs in :mod:`gcbench.core.codec`: torch operations only.

Every function here takes and returns tensors on the input's device and produces exactly the
bytes its NumPy/numba namesake in :mod:`gcbench.core.codec` produces (the same-bytes tests in
``tests/core/test_codec_torch.py``), so a compressor's torch path (the path a CUDA tensor takes)
never leaves the device to encode or decode:

* :func:`pack_bits` / :func:`unpack_bits` — fixed-width unsigned fields, LSB-first.  Eight
  fields of ``width`` bits fill exactly ``width`` bytes, so each output byte column of a group is
  built from the (at most ``ceil(8/width)+1``) fields that overlap it: a loop over byte columns
  (at most 64), each step vectorised over all groups.

Nothing here calls NumPy or reads a tensor into Python, except where a size must be known to
allocate; each function's docstring states its scalar reads.  Decoders raise
:class:`~gcbench.core.errors.PayloadError` on malformed bytes and allocate only what the bytes
given (and the expected shape) justify.
"""

from __future__ import annotations

import torch

from gcbench.core.codec import index_width, packed_nbytes
from gcbench.core.errors import PayloadError

__all__ = ["index_width", "pack_bits", "packed_nbytes", "unpack_bits"]

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
