"""Fixed-threshold sparsification with error feedback (reference point).

``a = x + e``; send every entry with ``|a| > tau`` as (fp32 value, index); ``e = a − decoded``
(the shared error-feedback mechanism, always on: without it entries below ``tau`` would never be
sent).  Body bits: nnz·(32 + index bits) with the selected index coding (``fixed`` =
ceil(log2 d) bits per index).  This is the "hard threshold" sparsifier studied by Sahu et al.
2021 (Rethinking gradient sparsification as total error minimization) and the fixed-threshold
baseline of Strom 2015.

``tau`` is absolute, so the density depends on the gradient scale.  The default 1e-3 suits
gradients of order 1e-3 (typical of real networks; it keeps about a third of a N(0, 1e-6)
tensor); for unit-scale synthetic tensors it keeps almost everything — set ``tau`` to the
scale studied.
"""

from __future__ import annotations

import torch

from gcbench.compressor import Compressor, State
from gcbench.compressors._common import coding_param, dense_from_sparse, sparse_body, sparse_decode
from gcbench.compressors._select import above
from gcbench.payload import Payload
from gcbench.registry import Param, register


@register(
    name="threshold",
    version=1,
    description="send entries with |x+e| > tau (fixed absolute threshold), error feedback always on",
    paper="Strom 2015; Sahu et al. 2021, Rethinking gradient sparsification as total error minimization (reference point)",
    biased=True,
    stateful=True,
    error_feedback="always",
    deterministic=True,
    params=(
        Param("tau", float, 1e-3, "absolute threshold: entries with |x + e| > tau are sent", low=0.0, low_open=True),
        coding_param("fixed"),
    ),
)
class Threshold(Compressor):
    """Hard-threshold sparsifier: every |a_i| > tau is sent exactly."""

    def _encode(self, a: torch.Tensor, state: State):
        flat = a.reshape(-1)
        d = flat.numel()
        idx = above(flat, self.params["tau"])
        vals = flat[idx]
        coding = self.params["index_coding"]
        return sparse_body(vals, idx, d, coding), {"k": int(idx.numel()), "coding": coding}, dense_from_sparse(vals, idx, d)

    def _decode(self, payload: Payload) -> torch.Tensor:
        return sparse_decode(payload)
