"""Sparse bodies of the sparsifiers (topk, dgc, sdagc, graddrop, threshold, adacomp, lgc): the encoders and
decoders that put the :mod:`gcbench.kernels` selection and scatter passes into the wire format of
:func:`gcbench.core.codec.encode_sparse`.

Each fast function has its plain counterpart — :func:`gcbench.core.codec.encode_sparse`,
:func:`decode_sparse_reference` — and the tests compare them bit for bit.  Outputs handed to the
caller are new memory from :mod:`gcbench.kernels.buffers` (the caller may keep them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors._common import sparse_decode
from gcbench.core import codec
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_numpy, meta_int, meta_str
from gcbench.core.payload import Payload
from gcbench.kernels import NUMBA, ZERO_NONE, count_chunks, pack_into, prefault, read_fixed, scatter, unpack_scatter, zeros_f32

_E_F32 = np.zeros(0, np.float32)
_E_I64 = np.zeros(0, np.int64)
_E_I32 = np.zeros(0, np.int32)
_E_U8 = np.zeros(0, np.uint8)


@dataclass
class Selection:
    """Outcome of :func:`select_encode` (host arrays).

    Attributes:
        body: the payload body in the requested coding (float32 values, then the index coding).
        k: entries selected (at most ``limit``).
        count: entries passing the threshold (before ``limit``).
        idx: sorted int64 indices (when asked for, or for codings other than fixed/int32).
        vals: their float32 values (with ``idx``).
        decoded: the dense float32 decoded vector (when asked for).
    """

    body: np.ndarray
    k: int
    count: int
    idx: np.ndarray | None
    vals: np.ndarray | None
    decoded: np.ndarray | None





def select_encode(a: np.ndarray, t: np.float32 | None, coding: str | None, *, counts: np.ndarray | None = None,
                  limit: int | None = None, zero_mode: int = ZERO_NONE, want_decoded: bool = False, want_idx: bool = False,
                  nan_pass: bool = False) -> Selection:
    """Select ``|a| >= t`` (the first ``limit`` in index order) and encode it as a sparse body.

    ``a`` is a flat float32 array, written only per ``zero_mode``; ``t`` comes from
    :func:`f32_threshold`; ``counts`` may be passed when the caller already counted with the same
    ``t``.  The body equals :func:`gcbench.core.codec.encode_sparse` of the selection in ``coding``
    (``fixed`` and ``int32`` are written by the selection pass itself); ``coding=None`` makes no
    body and returns the indices and values.
    """
    d = a.size
    if counts is None:
        counts = count_chunks(a, t, nan_pass)
    total = int(counts.sum())
    k = total if limit is None else min(total, int(limit))
    offsets = np.zeros(counts.size, np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    direct = coding == "int32" or (coding == "fixed" and codec.index_width(d) <= 32)
    want_idx = want_idx or not direct
    idx = prefault(np.empty(k, np.int64)) if want_idx else _E_I64
    dec = zeros_f32(d, touch=k >= d // (1 << 16)) if want_decoded else _E_F32
    width = codec.index_width(d)
    body, packed, idx32 = _E_U8, _E_U8, _E_I32
    if coding == "fixed" and direct:
        body = kernels.empty(4 * k + codec.packed_nbytes(k, width), torch.uint8).numpy()  # every byte written by select_write
        vals, packed = body[: 4 * k].view(np.float32), body[4 * k :]
    elif coding == "int32":
        body = prefault(np.empty(8 * k, np.uint8))
        vals, idx32 = body[: 4 * k].view(np.float32), body[4 * k :].view(np.int32)
    else:
        vals = prefault(np.empty(k, np.float32))
    if k and t is not None:
        kernels.select_write(a, t, nan_pass, counts, offsets, k, vals, idx, idx32, packed, width, zero_mode, dec)
    if coding is not None and not direct:
        body = codec.encode_sparse(vals, idx, d, coding)
    return Selection(body, k, total, idx if want_idx else None, vals if want_idx else None, dec if want_decoded else None)



def encode_sorted(vals: np.ndarray, idx: np.ndarray, d: int, coding: str) -> np.ndarray:
    """:func:`gcbench.core.codec.encode_sparse` of indices already sorted and unique (no argsort; fast ``fixed``)."""
    vals = np.ascontiguousarray(vals, dtype=np.float32)
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    if coding != "fixed" or not NUMBA or idx.size == 0 or codec.index_width(d) > 32:
        return codec.encode_sparse(vals, idx, d, coding)
    if idx[0] < 0 or idx[-1] >= d:
        raise ValueError("indices must be sorted, unique and within [0, d)")
    k = idx.size
    width = codec.index_width(d)
    body = prefault(np.zeros(4 * k + codec.packed_nbytes(k, width), np.uint8))
    body[: 4 * k].view(np.float32)[:] = vals
    pack_into(idx, width, body[4 * k :])
    return body


_U64 = np.uint64

def encode_indices(idx: np.ndarray, d: int, coding: str) -> np.ndarray:
    """:func:`gcbench.core.codec.encode_indices` of sorted unique indices (the ``fixed`` packing in parallel)."""
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    width = codec.index_width(d)
    if coding != "fixed" or not NUMBA or width > 32 or idx.size == 0:
        return codec.encode_indices(idx, d, coding)
    if idx[0] < 0 or idx[-1] >= d:
        raise ValueError("indices must be sorted, unique and within [0, d)")
    out = prefault(np.zeros(codec.packed_nbytes(idx.size, width), np.uint8))
    pack_into(idx, width, out)
    return out


def decode_indices(data: np.ndarray, d: int, k: int, coding: str, codec_name: str) -> np.ndarray:
    """:func:`gcbench.core.codec.decode_indices` (indices only) with the ``fixed`` fields read in parallel; checks the
    range, and that the indices fill ``data`` exactly (an encoder writes nothing after them)."""
    width = codec.index_width(d)
    if coding == "fixed" and NUMBA and width <= 32:
        need = codec.packed_nbytes(k, width)
        if len(data) < need:
            raise PayloadError(f"{codec_name} index list is truncated: need {need} bytes, have {len(data)}")
        idx, used = read_fixed(data[:need], width, k), need
    else:
        idx, used = codec.decode_indices(data, d, k, coding)
    if used != len(data):
        raise PayloadError(f"{codec_name} body has {len(data) - used} bytes after its {k} indices")
    if idx.size and (idx.min() < 0 or idx.max() >= d):
        raise PayloadError(f"{codec_name} body has an index outside the tensor")
    return idx


def decode_payload(payload: Payload) -> torch.Tensor:
    """Dense float32 tensor of a payload whose body is :func:`gcbench.core.codec.encode_sparse` (header k, coding):
    with the kernels on the CPU, with torch operations where the body lies otherwise (the torch path)."""
    if not kernels.cpu_fast(payload.data):
        return sparse_decode(payload)
    return decode_sparse(body_numpy(payload), payload.numel, meta_int(payload, "k"), meta_str(payload, "coding"), payload.codec)


def dense_from(idx: np.ndarray, vals: np.ndarray, d: int) -> torch.Tensor:
    """A fresh dense float32 CPU tensor with ``vals`` at ``idx`` and zeros elsewhere."""
    out = zeros_f32(d, touch=idx.size >= d // (1 << 16))
    if NUMBA:
        scatter(out, idx, vals)
    else:  # pragma: no cover - numba missing
        out[idx] = vals
    return torch.from_numpy(out)


def decode_sparse(body: np.ndarray, d: int, k: int, coding: str, codec_name: str) -> torch.Tensor:
    """Dense float32 CPU tensor from a :func:`gcbench.core.codec.encode_sparse` body (new memory).

    The ``fixed`` coding decodes in one fused pass (:func:`unpack_scatter`) into a buffer from
    :func:`gcbench.kernels.empty_maybe_zero`: a freed earlier output of the same size is reused
    (no page faults) and cleared part by part inside that pass.  The other codings parse the
    indices first (:func:`gcbench.core.codec.decode_sparse`) and scatter them.
    """
    if not 0 <= k <= d:
        raise PayloadError(f"{codec_name} payload says {k} nonzeros in {d} elements")
    if k == 0:
        return torch.from_numpy(zeros_f32(d, touch=False))
    touch = k >= d // (1 << 16)  # fault the pages first unless very few are written
    if coding == "fixed" and NUMBA and codec.index_width(d) <= 32:
        width = codec.index_width(d)
        need = 4 * k + codec.packed_nbytes(k, width)
        if len(body) < need:
            raise PayloadError(f"{codec_name} sparse body is truncated: need {need} bytes, have {len(body)}")
        result, is_zero = kernels.empty_maybe_zero(d)
        out = result.numpy()
        if is_zero and touch:
            prefault(out)
        vals = np.ascontiguousarray(body[: 4 * k]).view("<f4")
        bad = unpack_scatter(body[4 * k : need], width, vals, out, clear=not is_zero)
    else:
        out = zeros_f32(d, touch=touch)
        result = torch.from_numpy(out)
        vals, idx = codec.decode_sparse(body, d, k, coding)
        bad = scatter(out, idx, vals) if NUMBA else 0
        if not NUMBA:
            out[idx] = vals
    if bad:
        raise PayloadError(f"{codec_name} sparse body has an index outside the tensor")
    return result


def decode_sparse_reference(body: np.ndarray, d: int, k: int, coding: str) -> np.ndarray:
    """The plain decode :func:`decode_sparse` is checked against: parse every field (``fixed``
    bit by bit with ``np.unpackbits``; the other codings by :mod:`gcbench.core.codec`), then write the
    values in field order (a repeated index keeps its last value); raises like the fast path."""
    data = np.ascontiguousarray(body, dtype=np.uint8).ravel()
    if not 0 <= k <= d:
        raise PayloadError(f"payload says {k} nonzeros in {d} elements")
    if coding == "fixed":
        width = codec.index_width(d)
        need = 4 * k + codec.packed_nbytes(k, width)
        if len(data) < need:
            raise PayloadError("sparse body is truncated")
        vals = data[: 4 * k].view("<f4").astype(np.float32)
        bits = np.unpackbits(data[4 * k : need], count=k * width, bitorder="little").reshape(k, width).astype(np.int64)
        idx = (bits << np.arange(width, dtype=np.int64)).sum(axis=1)
        if idx.size and idx.max() >= d:
            raise PayloadError("sparse body has an index outside the tensor")
    else:
        vals, idx = codec.decode_sparse(data, d, k, coding)
    out = np.zeros(d, np.float32)
    last = idx.size - 1 - np.unique(idx[::-1], return_index=True)[1]  # each index's last occurrence
    out[idx[last]] = vals[last]
    return out


