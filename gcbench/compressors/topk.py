"""Top-k sparsification: the k entries of largest magnitude, exactly (optional error feedback).

Bits: k·(32 + index bits) with the selected index coding (``fixed`` = ceil(log2 d) bits).
Biased and contractive: E‖C(x) − x‖² ≤ (1 − k/d)‖x‖², i.e. Beznosikov's B3(d/k).
Reference point used by Stich et al. 2018, Beznosikov et al. 2020 and most sparsification papers.
"""

from __future__ import annotations

import torch

from gcbench.compressor import Compressor, State
from gcbench.compressors._common import coding_param, dense_from_sparse, density_param, k_of, sparse_body, sparse_decode
from gcbench.payload import Payload
from gcbench.registry import register


def topk_indices(a: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest |a| (exact; ties broken by torch.topk)."""
    return torch.topk(a.abs(), k, sorted=False).indices


@register(
    name="topk",
    version=1,
    description="exact top-k by magnitude, values fp32 + coded indices",
    paper="Stich et al. 2018, Sparsified SGD with Memory (reference point)",
    biased=True,
    stateful=False,
    error_feedback="optional",
    params=(density_param(0.01), coding_param("fixed")),
)
class TopK(Compressor):
    def _encode(self, a: torch.Tensor, state: State):
        flat = a.reshape(-1)
        d = flat.numel()
        k = k_of(self.params["density"], d)
        idx = topk_indices(flat, k)
        vals = flat[idx]
        body = sparse_body(vals, idx, d, self.params["index_coding"])
        return body, {"k": k, "coding": self.params["index_coding"]}, dense_from_sparse(vals, idx, d)

    def _decode(self, payload: Payload) -> torch.Tensor:
        return sparse_decode(payload)
