"""Random-k sparsification, scaled by d/k so it is unbiased.

The k positions are drawn from a 64-bit seed that the receiver also expands, so only the seed
crosses the wire with the values: 32·k + 64 bits.  ω = d/k − 1 (Stich et al. 2018; Wangni et al.
2018).  Never a full ``randperm``.

Index expansion (version 3, :mod:`gcbench.kernels.rng`): position j of the k is (π(j) + c) mod d,
where π is a 32-round swap-or-not shuffle of [0, d) and c a uniform rotation, every parameter taken
from the counter-based SplitMix64 stream keyed by the seed.  π is a permutation, so the k positions
are distinct; the uniform rotation keeps each position with probability k/d (to within d/2^63),
so the estimator is unbiased with E‖C(x) − x‖² = (d/k − 1)‖x‖² exactly.  The work is O(k), a fixed
sequence of integer operations with no data-dependent branch, so the torch path expands the seed
where the tensor lies (a GPU never sends the seed to the host, nor the index set to the device)
and the numba kernel gives the same positions on the CPU.  The values travel in generation order.

Version history: version 1 drew with NumPy's ``choice``; version 2 cut the range into blocks, drew
the block counts with NumPy's multivariate hypergeometric and Floyd's algorithm within each block
(exactly uniform k-subsets, but host-only: a device had to receive the k indices every call).
Compress returns no decoded tensor on the CPU path (the receiver's d-element output is built only
when asked for); decoding scatters the k scaled values into a fresh zero buffer.
:func:`randomk_reference` is the plain torch form.
"""

from __future__ import annotations

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors._common import flat_and_k
from gcbench.compressors.cards.randomk import RANDOMK_CARD
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_numpy, body_tensor, meta_int, meta_keys
from gcbench.core.payload import Payload


def indices_from_seed(seed: int, d: int, k: int) -> np.ndarray:
    """The k distinct positions in [0, d) that ``seed`` expands to (both sides), in generation order."""
    if kernels.available():
        return kernels.random_subset(seed, d, k)
    return kernels.random_subset_reference(seed, d, k)


def randomk_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """Plain torch random-k: the seed's index set from the plain-Python expansion
    (:func:`gcbench.kernels.random_subset_reference`, one position at a time from the definition), values gathered,
    scaled by d/k and scattered into a zero tensor with torch ops."""
    flat, d, k = flat_and_k(x32, comp.params["density"])
    idx = torch.from_numpy(kernels.random_subset_reference(state.randint64(), d, k)).to(flat.device)
    out = torch.zeros(d, dtype=torch.float32, device=flat.device)
    out[idx] = flat[idx] * (d / k)
    return out


class RandomK(Compressor):
    """Random-k: k = ceil(density·d) values at positions drawn from a 64-bit seed, the seed sent instead of the indices."""

    info = RANDOMK_CARD
    reference = randomk_reference

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        flat, d, k = flat_and_k(a, self.params["density"])
        seed = state.randint64()
        idx = indices_from_seed(seed, d, k)
        if not kernels.cpu_fast(flat):  # the torch path: the seed expanded, the values gathered and the body built on flat's device
            word = kernels.seed_word(seed, flat.device)
            idx_t = kernels.random_subset_torch(word, d, k)
            vals = flat[idx_t].to(torch.float32)
            decoded = None
            if ctx.need_decoded:  # what the receiver decodes, built here
                decoded = torch.zeros(d, dtype=torch.float32, device=flat.device)
                decoded[idx_t] = vals * (d / k)
            return torch.cat([vals.contiguous().view(torch.uint8), word.view(torch.uint8)]), {"k": k}, decoded
        body = np.empty(4 * k + 8, np.uint8)
        body[: 4 * k] = kernels.gather(kernels.flat_f32(flat), idx).view(np.uint8)
        body[4 * k :] = np.array([seed], "<u8").view(np.uint8)
        return body, {"k": k}, None

    def _expected_body_nbytes(self, payload: Payload) -> int:
        meta_keys(payload, "k")
        return 4 * meta_int(payload, "k", 1, payload.numel) + 8  # k float32 values, the 64-bit seed

    def _decode(self, payload: Payload) -> torch.Tensor:
        d, k = payload.numel, meta_int(payload, "k")
        if not kernels.cpu_fast(payload.data):
            return _decode_torch(body_tensor(payload), d, k)
        body = body_numpy(payload)
        if not 1 <= k <= d or len(body) != 4 * k + 8:
            raise PayloadError(f"randomk body has {len(body)} bytes, expected {4 * k + 8}")
        seed = int(body[4 * k :].view("<u8")[0])
        idx = indices_from_seed(seed, d, k)
        out = kernels.zeros(d)
        kernels.scatter(out.numpy(), idx, body[: 4 * k].view("<f4"), d / k)
        return out


def _decode_torch(body: torch.Tensor, d: int, k: int) -> torch.Tensor:
    """The torch path's decoder: the seed expanded where the body lies (no scalar read), the values scaled and
    scattered there."""
    if not 1 <= k <= d or body.numel() != 4 * k + 8:
        raise PayloadError(f"randomk body has {body.numel()} bytes, expected {4 * k + 8}")
    idx = kernels.random_subset_torch(body[4 * k :].clone().view(torch.int64), d, k)
    out = torch.zeros(d, dtype=torch.float32, device=body.device)
    out[idx] = body[: 4 * k].clone().view(torch.float32) * (d / k)
    return out
