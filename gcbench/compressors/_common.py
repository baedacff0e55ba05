"""Small helpers shared by compressor modules (sizes, sparse payload glue, parameters)."""

from __future__ import annotations

import math

import numpy as np
import torch

from gcbench.core import codec, codec_torch
from gcbench.core.header import body_tensor, meta_int, meta_keys, meta_str
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


def sparse_body(values: torch.Tensor, idx: torch.Tensor, d: int, coding: str, *, is_sorted: bool = False) -> torch.Tensor:
    """Encode float32 values at indices (sorted here unless ``is_sorted``) with a sparse coding, on their device.

    The body is a 1-D uint8 tensor on ``values``' device with the bytes of
    :func:`gcbench.core.codec.encode_sparse` (:func:`gcbench.core.codec_torch.encode_sparse`): the
    torch path's encoder, which never copies the selection to the host.
    """
    idx = idx.reshape(-1).to(torch.int64)
    values = values.reshape(-1).to(torch.float32)
    if not is_sorted:
        idx, order = torch.sort(idx, stable=True)
        values = values[order]
    return codec_torch.encode_sparse(values, idx, d, coding, validate=False)  # sorted here or by the caller: no check read


def sparse_body_nbytes(payload: Payload, codings: tuple[str, ...] = INDEX_CODINGS, *other_keys: str) -> tuple[int, int]:
    """Body size range of a payload written with :func:`sparse_body` (header ``k``, ``coding``; no
    other fields but ``other_keys``), its header checked: ``coding`` one of ``codings``, 0 <= k <= d."""
    meta_keys(payload, "k", "coding", *other_keys)
    coding = meta_str(payload, "coding", codings)
    d = payload.numel
    return codec.sparse_nbytes_range(d, meta_int(payload, "k", 0, d), coding)


def sparse_decode(payload: Payload) -> torch.Tensor:
    """Dense float32 vector, on the body's device, from a payload written with :func:`sparse_body` (meta k, coding).

    Torch operations only (:func:`gcbench.core.codec_torch.decode_sparse`, then one scatter): the
    torch path's decoder, whose scalar reads are the codec's (the index check, a variable-length
    coding's size).
    """
    d = payload.numel
    body = body_tensor(payload)
    vals, idx = codec_torch.decode_sparse(body, d, meta_int(payload, "k", 0, d), meta_str(payload, "coding"))
    return dense_from_sparse(vals, idx, d)


def dense_from_sparse(values: torch.Tensor, idx: torch.Tensor, d: int) -> torch.Tensor:
    """A fresh dense float32 vector of length d on ``values``' device: ``values`` at ``idx``, zeros elsewhere."""
    out = torch.zeros(d, dtype=torch.float32, device=values.device)
    out[idx] = values
    return out
