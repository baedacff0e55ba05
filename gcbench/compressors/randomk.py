"""Random-k sparsification, scaled by d/k so it is unbiased.

The k positions are drawn from a 64-bit seed that the receiver also expands, so only the seed
crosses the wire with the values: 32·k + 64 bits.  ω = d/k − 1 (Stich et al. 2018; Wangni et al.
2018).  Never a full ``randperm``.

Index expansion (version 2, :func:`gcbench.kernels.random_subset`): the range is cut into blocks
of 65,536 positions; one multivariate hypergeometric draw (NumPy PCG64 seeded with the sent seed)
gives how many of the k fall in each block — exactly the block counts of a uniform k-subset —
and each block takes a uniform subset of that size by Floyd's algorithm on an 8 KiB bitmap, with
exactly uniform integers from the counter-based SplitMix64 stream; the bitmap yields the
positions in ascending order.  Every k-subset is equally likely (each position is kept with
probability exactly k/d), the cost is O(k + d/64) in cache-sized pieces at any density, and
blocks run in parallel.  Version 1 used NumPy's ``choice``, whose hash set outgrew the caches at
large k (4× the per-element cost at 100M elements) and which permutes the whole range above 2%
density.  Compress returns no decoded tensor (the receiver's d-element output is built only when
asked for); decoding scatters the k scaled values into a fresh zero buffer.
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
    """The sorted k distinct positions in [0, d) that ``seed`` expands to (both sides)."""
    if kernels.available():
        return kernels.random_subset(seed, d, k)
    return kernels.random_subset_reference(seed, d, k)


def randomk_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """Plain torch random-k: the same seed and index set, values gathered, scaled by d/k and
    scattered into a zero tensor with torch ops.  (The index expansion is shared: the tests
    check it against :func:`gcbench.kernels.random_subset_reference`, a plain Python twin.)"""
    flat, d, k = flat_and_k(x32, comp.params["density"])
    idx = torch.from_numpy(indices_from_seed(state.randint64(), d, k)).to(flat.device)
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
        if not kernels.cpu_fast(flat):  # the torch path: values gathered and the body built on flat's device
            idx_t = _on_device(idx, flat.device)
            vals = flat[idx_t].to(torch.float32)
            seed_word = torch.tensor([seed - (1 << 64) if seed >= 1 << 63 else seed], dtype=torch.int64, device=flat.device)
            decoded = None
            if ctx.need_decoded:  # what the receiver decodes, built here (no read of the seed back)
                decoded = torch.zeros(d, dtype=torch.float32, device=flat.device)
                decoded[idx_t] = vals * (d / k)
            return torch.cat([vals.contiguous().view(torch.uint8), seed_word.view(torch.uint8)]), {"k": k}, decoded
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


def _on_device(idx: np.ndarray, device: torch.device) -> torch.Tensor:
    """The seed's index set on ``device``: the torch path's one host-to-device copy (the expansion is NumPy's
    generator on the host; no device data goes the other way)."""
    return torch.from_numpy(idx).to(device)


def _decode_torch(body: torch.Tensor, d: int, k: int) -> torch.Tensor:
    """The torch path's decoder: one scalar read (the 64-bit seed, expanded on the host), the values scaled and
    scattered where the body lies."""
    if not 1 <= k <= d or body.numel() != 4 * k + 8:
        raise PayloadError(f"randomk body has {body.numel()} bytes, expected {4 * k + 8}")
    seed = int(body[4 * k :].clone().view(torch.int64)[0]) & ((1 << 64) - 1)
    out = torch.zeros(d, dtype=torch.float32, device=body.device)
    out[_on_device(indices_from_seed(seed, d, k), body.device)] = body[: 4 * k].clone().view(torch.float32) * (d / k)
    return out
