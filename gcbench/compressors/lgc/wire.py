"""LGC's wire format: the payload bodies of every message kind, built and read (encode, decode, byte counts).

Kinds (header ``kind``): ``dense`` (fp32 values) and ``topk`` (values and indices) decode from the
payload alone; ``latent``, ``indices``, ``innovation``, ``values`` and ``weights`` are messages of
the multi-worker exchange and decode only inside it (the package docstring,
gcbench/compressors/lgc/__init__.py, lists each kind's body bits).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import numpy as np
import torch

from gcbench.compressors._common import sparse_body, to_numpy
from gcbench.compressors.lgc.index_sets import positions_in
from gcbench.core import codec
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_numpy, meta_int, meta_str
from gcbench.core.payload import MetaValue, Payload
from gcbench.core.protocol import SERVER, Message

STANDALONE_KINDS = ("dense", "topk")
PROTOCOL_KINDS = ("latent", "indices", "innovation", "values", "weights")


def refuse_kind(kind: str) -> NoReturn:
    """A payload kind that ``decompress`` cannot decode: the exchange's protocol messages, or garbage."""
    if kind in PROTOCOL_KINDS:
        raise PayloadError(f"lgc {kind!r} payloads are messages of the multi-worker exchange and decode only there "
                           "(they need the leader's index set and the server's decoder)")
    raise PayloadError(f"lgc payload of unknown kind {kind!r}")


def f32_bytes(t: torch.Tensor) -> np.ndarray:
    return to_numpy(t.reshape(-1).float()).astype("<f4", copy=False).view(np.uint8)


def f32_read(body: np.ndarray, start: int, count: int, what: str) -> torch.Tensor:
    end = start + 4 * count
    if count < 0 or len(body) < end:
        raise PayloadError(f"lgc {what}: body is truncated (need {end} bytes, have {len(body)})")
    return torch.from_numpy(body[start:end].view("<f4").astype(np.float32))


class Wire:
    """Builds and reads LGC's payloads (header ``kind`` plus a body), for one compressor's name, version and index coding."""

    def __init__(self, name: str, version: int, coding: str) -> None:
        self.name = name
        self.version = version
        self.coding = coding

    def msg(self, kind: str, body: np.ndarray, meta: dict[str, MetaValue], shape: tuple[int, ...], dtype: torch.dtype) -> Payload:
        data = torch.from_numpy(np.ascontiguousarray(body, dtype=np.uint8).ravel())
        return Payload(self.name, self.version, dtype, shape, data, {"kind": kind, **meta})

    def dense(self, v: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> Payload:
        return self.msg("dense", f32_bytes(v), {}, shape, dtype)

    def topk(self, vals: torch.Tensor, idx: torch.Tensor, d: int, shape: tuple[int, ...], dtype: torch.dtype) -> Payload:
        coding = self.coding
        return self.msg("topk", sparse_body(vals, idx, d, coding), {"k": int(idx.numel()), "coding": coding}, shape, dtype)

    def read_indices(self, p: Payload, d: int, nscales: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(scales, ascending indices) of an ``indices`` message."""
        body = body_numpy(p)
        scales = f32_read(body, 0, nscales, "indices")
        idx, _ = codec.decode_indices(body[4 * nscales :], d, meta_int(p, "k"), meta_str(p, "coding"))
        return scales, torch.from_numpy(idx)

    def read_sparse(self, p: Payload, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        vals, idx = codec.decode_sparse(body_numpy(p), d, meta_int(p, "k"), meta_str(p, "coding"))
        return torch.from_numpy(vals), torch.from_numpy(idx)

    def indices(self, idx: torch.Tensor, d: int, shape: tuple[int, ...], dtype: torch.dtype) -> Payload:
        coding = self.coding
        return self.msg("indices", codec.encode_indices(to_numpy(idx), d, coding), {"k": int(idx.numel()), "coding": coding}, shape, dtype)

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
        xb = codec.encode_sparse(to_numpy(acc[extra_pos]), to_numpy(extra_pos), d, coding)
        pull = self.msg("values", np.concatenate([f32_bytes(acc[idx]), xb]), {"k": idx.numel(), "m": int(extra_pos.numel()),
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
        pb = body_numpy(pull)
        agg = torch.zeros(d, dtype=torch.float32)
        agg[idx] = f32_read(pb, 0, k, "values")
        ev, ei = codec.decode_sparse(pb[4 * k :], d, meta_int(pull, "m"), meta_str(pull, "coding"))
        agg[torch.from_numpy(ei)] = torch.from_numpy(ev)
        return agg

    def multi_indices(self, idx: Sequence[torch.Tensor], dims: Sequence[int]) -> np.ndarray:
        """One body holding each unit's ascending indices, coded into that unit's size, back to back."""
        coding = self.coding
        parts = [codec.encode_indices(to_numpy(i), d, coding) for i, d in zip(idx, dims, strict=True)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)

    def read_multi_indices(self, body: np.ndarray, counts: Sequence[int], dims: Sequence[int]) -> tuple[list[torch.Tensor], int]:
        """Inverse of :meth:`multi_indices`; also returns the bytes consumed."""
        coding = self.coding
        out, pos = [], 0
        for k, d in zip(counts, dims, strict=True):
            idx, used = codec.decode_indices(body[pos:], d, k, coding)
            out.append(torch.from_numpy(idx))
            pos += used
        return out, pos
