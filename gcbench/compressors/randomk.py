"""Random-k sparsification, scaled by d/k so it is unbiased.

The k positions are drawn from a 64-bit seed that the receiver also expands, so only the seed
crosses the wire with the values: 32·k + 64 bits.  ω = d/k − 1 (Stich et al. 2018; Wangni et al.
2018).  Index expansion uses NumPy's PCG64 ``choice`` without replacement (Floyd's algorithm for
small k), never a full ``randperm``.
"""

from __future__ import annotations

import numpy as np
import torch

from gcbench.compressor import Compressor, State, body_numpy, meta_int
from gcbench.compressors._common import density_param, k_of
from gcbench.errors import PayloadError
from gcbench.payload import Payload
from gcbench.registry import register


def indices_from_seed(seed: int, d: int, k: int) -> np.ndarray:
    """The sorted k distinct positions in [0, d) that ``seed`` expands to (both sides)."""
    gen = np.random.Generator(np.random.PCG64(seed))
    return np.sort(gen.choice(d, size=k, replace=False, shuffle=False)).astype(np.int64)


@register(
    name="randomk",
    version=1,
    description="k random positions scaled by d/k (unbiased); only a 64-bit seed is sent for the indices",
    paper="Stich et al. 2018; Wangni et al. 2018 (reference point)",
    biased=False,
    stateful=False,
    deterministic=False,
    params=(density_param(0.01),),
)
class RandomK(Compressor):
    def _encode(self, a: torch.Tensor, state: State):
        flat = a.reshape(-1)
        d = flat.numel()
        k = k_of(self.params["density"], d)
        seed = state.randint64()
        idx = torch.from_numpy(indices_from_seed(seed, d, k)).to(flat.device)
        vals = flat[idx].to("cpu").numpy().astype("<f4")
        body = np.concatenate([vals.view(np.uint8), np.array([seed], "<u8").view(np.uint8)])
        out = torch.zeros(d, dtype=torch.float32, device=flat.device)
        out[idx] = flat[idx] * (d / k)
        return body, {"k": k}, out

    def _decode(self, payload: Payload) -> torch.Tensor:
        d, k = payload.numel, meta_int(payload, "k")
        body = body_numpy(payload)
        if len(body) != 4 * k + 8:
            raise PayloadError(f"randomk body has {len(body)} bytes, expected {4 * k + 8}")
        seed = int(body[4 * k :].view("<u8")[0])
        idx = torch.from_numpy(indices_from_seed(seed, d, k))
        out = torch.zeros(d, dtype=torch.float32)
        out[idx] = torch.from_numpy(body[: 4 * k].view("<f4").astype(np.float32)) * (d / k)
        return out
