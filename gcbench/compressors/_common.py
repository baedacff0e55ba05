"""Small helpers shared by compressor modules (sizes, sparse payload glue, parameters)."""

from __future__ import annotations

import math

import numpy as np
import torch

from gcbench.core import codec
from gcbench.core.header import body_numpy, meta_int, meta_keys, meta_str
from gcbench.core.params import INDEX_CODINGS
from gcbench.core.payload import Payload


def k_of(density: float, d: int) -> int:
    """Number of entries a sparsifier keeps: ceil(density * d), at least 1, at most d."""
    if not d:
        return 0
    x = density * d
    # density·d is a binary floating-point product: 0.07·100 = 7.000000000000001 must keep 7, not 8
    k = round(x) if abs(x - round(x)) <= 1e-9 * x else math.ceil(x)
    return min(d, max(1, k))


def flat_and_k(a: torch.Tensor, density: float) -> tuple[torch.Tensor, int, int]:
    """A sparsifier's view of ``a``: flattened (a view when ``a`` is contiguous), its length d, and k = :func:`k_of` (density, d)."""
    flat = a.reshape(-1)
    d = flat.numel()
    return flat, d, k_of(density, d)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """Host NumPy view of a tensor (copied from the device if needed)."""
    return t.detach().to("cpu").contiguous().numpy()


def sparse_body(values: torch.Tensor, idx: torch.Tensor, d: int, coding: str) -> np.ndarray:
    """Encode float32 values at indices (sorted here) with a sparse coding."""
    idx_np = to_numpy(idx).astype(np.int64, copy=False)
    vals_np = to_numpy(values).astype(np.float32, copy=False)
    order = np.argsort(idx_np, kind="stable")
    return codec.encode_sparse(vals_np[order], idx_np[order], d, coding)


def sparse_body_nbytes(payload: Payload, codings: tuple[str, ...] = INDEX_CODINGS, *other_keys: str) -> tuple[int, int]:
    """Body size range of a payload written with :func:`sparse_body` (header ``k``, ``coding``; no
    other fields but ``other_keys``), its header checked: ``coding`` one of ``codings``, 0 <= k <= d."""
    meta_keys(payload, "k", "coding", *other_keys)
    coding = meta_str(payload, "coding", codings)
    d = payload.numel
    return codec.sparse_nbytes_range(d, meta_int(payload, "k", 0, d), coding)


def sparse_decode(payload: Payload) -> torch.Tensor:
    """Dense float32 vector from a payload written with :func:`sparse_body` (meta k, coding)."""
    d = payload.numel
    vals, idx = codec.decode_sparse(body_numpy(payload), d, meta_int(payload, "k"), meta_str(payload, "coding"))
    out = torch.zeros(d, dtype=torch.float32)
    out[torch.from_numpy(idx)] = torch.from_numpy(vals)
    return out


def dense_from_sparse(values: torch.Tensor, idx: torch.Tensor, d: int) -> torch.Tensor:
    out = torch.zeros(d, dtype=torch.float32, device=values.device)
    out[idx] = values
    return out
