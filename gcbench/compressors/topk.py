"""Top-k sparsification: the k entries of largest magnitude, exactly (optional error feedback).

Bits: k·(32 + index bits) with the selected index coding (``fixed`` = ceil(log2 d) bits).
Biased and contractive: E‖C(x) − x‖² ≤ (1 − k/d)‖x‖², i.e. Beznosikov's B3(d/k).
Reference point used by Stich et al. 2018, Beznosikov et al. 2020 and most sparsification papers.

Selection (:func:`gcbench.kernels.topk_tensor`): a threshold from a strided
sample keeps a candidate set that provably contains the top k when at least k pass (checked; a
short count falls back to a radix select over the magnitude bits), and the exact top k are
chosen among the candidates.  The result is the exact top-k set; among magnitudes exactly equal
to the k-th largest, the lowest indices are kept, where ``torch.topk`` leaves the choice
unspecified (it may differ between versions, devices and thread counts).  The body is unchanged
from version 1 for inputs without such ties.  :func:`topk_reference` is the plain
``torch.topk`` version the tests and ``gcbench bench`` compare against.
"""

from __future__ import annotations

import torch

from gcbench import kernels
from gcbench.compressors import _sparse
from gcbench.compressors._common import dense_from_sparse, flat_and_k, sparse_body, sparse_body_nbytes
from gcbench.compressors.cards.topk import TOPK_CARD
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, ErrorFeedback, State
from gcbench.core.payload import MetaValue, Payload


def topk_indices(a: torch.Tensor, k: int) -> torch.Tensor:
    """Sorted indices of the k largest |a| (exact; equal magnitudes at the k-th keep the lowest indices)."""
    flat = a.reshape(-1).float().contiguous()
    return (kernels.topk_tensor(flat, k) if kernels.fast_cpu(flat) else kernels.topk_select_torch(flat, k))[0]


def topk_reference_encode(comp: Compressor, x32: torch.Tensor, state: State) -> tuple[torch.Tensor, dict[str, MetaValue], torch.Tensor]:
    """(body, header, decoded) for ``x32`` the straightforward way: ``torch.topk`` of |x + e| (state untouched)."""
    a = ErrorFeedback.corrected(x32, state) if comp.uses_error_feedback() else x32
    flat, d, k = flat_and_k(a, comp.params["density"])
    idx = torch.topk(flat.abs(), k, sorted=False).indices
    coding = comp.params["index_coding"]
    body = sparse_body(flat[idx], idx, d, coding)
    return body, {"k": k, "coding": coding}, dense_from_sparse(flat[idx], idx, d).reshape(x32.shape)


def topk_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """The decoded tensor of :func:`topk_reference_encode` (the class's ``reference``)."""
    return topk_reference_encode(comp, x32, state)[2]


class TopK(Compressor):
    """Exact top-k by magnitude (:func:`gcbench.kernels.topk_tensor` on CPU, its torch twin elsewhere), values fp32 + coded indices."""

    info = TOPK_CARD
    reference = topk_reference

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        flat, d, k = flat_and_k(a, self.params["density"])
        coding = self.params["index_coding"]
        fast = kernels.fast_cpu(flat)
        idx, vals = kernels.topk_tensor(flat, k) if fast else kernels.topk_select_torch(flat, k)  # sorted indices; vals is a copy
        meta: dict[str, MetaValue] = {"k": k, "coding": coding}
        if fast:
            idx_np, vals_np = idx.numpy(), vals.numpy()
            body = _sparse.encode_sorted(vals_np, idx_np, d, coding)
            decoded = _sparse.dense_from(idx_np, vals_np, d) if ctx.need_decoded else None
            if ctx.ef:
                kernels.scatter_sub(kernels.as_numpy(flat), idx_np, vals_np)  # residual a − decoded: only k entries change
            return body, meta, decoded
        decoded = dense_from_sparse(vals, idx, d) if ctx.need_decoded else None
        if ctx.ef:
            flat[idx] = flat[idx] - vals
        return sparse_body(vals, idx, d, coding, is_sorted=True), meta, decoded  # on the input's device: no host copy

    def _expected_body_nbytes(self, payload: Payload) -> tuple[int, int]:
        return sparse_body_nbytes(payload)

    def _decode(self, payload: Payload) -> torch.Tensor:
        return _sparse.decode_payload(payload)
