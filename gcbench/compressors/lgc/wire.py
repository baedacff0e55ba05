"""LGC's wire format: the payload bodies of every message kind, built and read (encode, decode, byte counts).

Kinds (header ``kind``): ``dense`` (fp32 values) and ``topk`` (values and indices) decode from the
payload alone; ``latent``, ``indices``, ``innovation``, ``values`` and ``weights`` are messages of
the multi-worker exchange and decode only inside it (the package docstring,
gcbench/compressors/lgc/__init__.py, lists each kind's body bits).

Bodies are built and read with torch operations on the tensors' device
(:mod:`gcbench.core.codec_torch`, the same bytes as :mod:`gcbench.core.codec`): a message made on a
GPU never leaves it.  Reading a sparse or index body costs the codec's one folded validity read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import torch

from gcbench.compressors.lgc.index_sets import positions_in
from gcbench.core import codec_torch
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_tensor, meta_int, meta_keys, meta_str
from gcbench.core.params import INDEX_CODINGS
from gcbench.core.payload import MetaValue, Payload, check_shape
from gcbench.core.protocol import SERVER, Message

STANDALONE_KINDS = ("dense", "topk")
PROTOCOL_KINDS = ("latent", "indices", "innovation", "values", "weights")


def refuse_kind(kind: str) -> NoReturn:
    """A payload kind that ``decompress`` cannot decode: the exchange's protocol messages, or garbage."""
    if kind in PROTOCOL_KINDS:
        raise PayloadError(f"lgc {kind!r} payloads are messages of the multi-worker exchange and decode only there "
                           "(they need the leader's index set and the server's decoder)")
    raise PayloadError(f"lgc payload of unknown kind {kind!r}")


def f32_bytes(t: torch.Tensor) -> torch.Tensor:
    """A tensor's values as float32 little-endian bytes: a new 1-D uint8 tensor on its device (never a view of ``t``)."""
    return t.detach().reshape(-1).float().clone().view(torch.uint8)


def f32_read(body: torch.Tensor, start: int, count: int, what: str) -> torch.Tensor:
    """``count`` float32 values from byte ``start`` of a uint8 body: a new tensor on the body's device."""
    end = start + 4 * count
    if count < 0 or body.numel() < end:
        raise PayloadError(f"lgc {what}: body is truncated (need {end} bytes, have {body.numel()})")
    return body[start:end].clone().view(torch.float32)


def sparse(values: torch.Tensor, idx: torch.Tensor, d: int, coding: str) -> torch.Tensor:
    """The sparse body of float32 ``values`` at ascending ``idx`` (their device; the caller's indices are sorted)."""
    return codec_torch.encode_sparse(values, idx, d, coding, validate=False)


def cat_bytes(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """Byte tensors back to back (an empty body when there are none)."""
    return torch.cat(list(parts)) if parts else torch.zeros(0, dtype=torch.uint8)


class Wire:
    """Builds and reads LGC's payloads (header ``kind`` plus a body), for one compressor's name, version and index coding."""

    def __init__(self, name: str, version: int, coding: str) -> None:
        self.name = name
        self.version = version
        self.coding = coding

    def msg(self, kind: str, body: torch.Tensor, meta: dict[str, MetaValue], shape: tuple[int, ...], dtype: torch.dtype) -> Payload:
        return Payload(self.name, self.version, dtype, shape, body.reshape(-1), {"kind": kind, **meta})

    def dense(self, v: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> Payload:
        return self.msg("dense", f32_bytes(v), {}, shape, dtype)

    def topk(self, vals: torch.Tensor, idx: torch.Tensor, d: int, shape: tuple[int, ...], dtype: torch.dtype) -> Payload:
        coding = self.coding
        return self.msg("topk", sparse(vals, idx, d, coding), {"k": int(idx.numel()), "coding": coding}, shape, dtype)

    def read_indices(self, p: Payload, d: int, nscales: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(scales, ascending indices) of an ``indices`` message."""
        body = body_tensor(p)
        scales = f32_read(body, 0, nscales, "indices")
        idx, _ = codec_torch.decode_indices(body[4 * nscales :], d, meta_int(p, "k", 0, d), meta_str(p, "coding"))
        return scales, idx

    def read_sparse(self, p: Payload, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        return codec_torch.decode_sparse(body_tensor(p), d, meta_int(p, "k", 0, d), meta_str(p, "coding"))

    def read_push(self, p: Payload, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, ascending indices) of a peer's ``topk`` message for a tensor of ``shape``, decoded once on its
        device, its header checked first (codec, version, shape, fields) as a decode of it would be."""
        if p.codec != self.name or p.version != self.version:
            raise PayloadError(f"lgc: a peer sent a {p.codec} version {p.version} payload, expected {self.name} version {self.version}")
        check_shape(p.shape, shape)
        meta_keys(p, "kind", "k", "coding")
        if meta_str(p, "kind") != "topk":
            raise PayloadError(f"lgc: a peer's top-k message is of kind {meta_str(p, 'kind')!r}")
        meta_str(p, "coding", INDEX_CODINGS)
        return self.read_sparse(p, p.numel)

    def indices(self, idx: torch.Tensor, d: int, shape: tuple[int, ...], dtype: torch.dtype) -> Payload:
        coding = self.coding
        return self.msg("indices", codec_torch.encode_indices(idx, d, coding, validate=False), {"k": int(idx.numel()), "coding": coding},
                        shape, dtype)

    def missing_values(self, v: torch.Tensor, idx_w: torch.Tensor, idx_l: torch.Tensor, shape: tuple[int, ...],
                        dtype: torch.dtype) -> Payload:
        """A worker's values at the leader's indices that its own top-k (``idx_w``) did not hold (fp32, no indices)."""
        _, have = positions_in(idx_w, idx_l)
        missing = idx_l[~have].to(v.device)
        return self.msg("values", f32_bytes(v[missing]), {"k": int(missing.numel())}, shape, dtype)

    def pull(self, acc: torch.Tensor, idx: torch.Tensor, extra_pos: torch.Tensor, n: int, shape: tuple[int, ...],
              dtype: torch.dtype) -> tuple[torch.Tensor, Message]:
        """The server's aggregate message (values at the leader's indices, then the innovations outside them)
        and the aggregate every worker rebuilds from it and the index set it knows."""
        d = acc.numel()
        coding = self.coding
        xb = sparse(acc[extra_pos], extra_pos, d, coding)
        pull = self.msg("values", torch.cat([f32_bytes(acc[idx]), xb]), {"k": idx.numel(), "m": int(extra_pos.numel()),
                                                                                 "coding": coding}, shape, dtype)
        return self.read_pull(pull, idx, d), Message("compressed:pull", SERVER, tuple(range(n)), pull)

    def read_pull(self, pull: Payload, idx: torch.Tensor, d: int) -> torch.Tensor:
        """The flat aggregate of ``d`` elements from the server's ``values`` message and the leader's ascending indices ``idx``.

        ``d`` is the receiver's own tensor size: the message's header does not size what is allocated.
        """
        k = idx.numel()
        if pull.numel != d:
            raise PayloadError(f"lgc aggregate: the server's message declares {pull.numel} elements, the receiver expects {d}")
        if meta_int(pull, "k") != k:
            raise PayloadError(f"lgc aggregate: holds {meta_int(pull, 'k')} values, the leader's index set has {k}")
        pb = body_tensor(pull)
        agg = torch.zeros(d, dtype=torch.float32, device=pb.device)
        agg[idx.to(pb.device)] = f32_read(pb, 0, k, "values")
        ev, ei = codec_torch.decode_sparse(pb[4 * k :], d, meta_int(pull, "m", 0, d), meta_str(pull, "coding"))
        agg[ei] = ev
        return agg

    def multi_indices(self, idx: Sequence[torch.Tensor], dims: Sequence[int]) -> torch.Tensor:
        """One body holding each unit's ascending indices, coded into that unit's size, back to back."""
        coding = self.coding
        return cat_bytes([codec_torch.encode_indices(i, d, coding, validate=False) for i, d in zip(idx, dims, strict=True)])

    def read_multi_indices(self, body: torch.Tensor, counts: Sequence[int], dims: Sequence[int]) -> tuple[list[torch.Tensor], int]:
        """Inverse of :meth:`multi_indices`; also returns the bytes consumed."""
        coding = self.coding
        out, pos = [], 0
        for k, d in zip(counts, dims, strict=True):
            idx, used = codec_torch.decode_indices(body[pos:], d, k, coding)
            out.append(idx)
            pos += used
        return out, pos
