"""How ``preset="gcbench"`` cuts a tensor's K values into the autoencoder's windows (gcbench's choice).

K values are split into n = ceil(K / ``window``) equal windows, each zero-padded to a length the
encoder's stride-2 layers divide; each window is divided by its RMS scale (the package docstring,
gcbench/compressors/lgc/__init__.py, "Values and windows").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Windows:
    """How K values are cut into equal, zero-padded windows of a length the encoder divides."""

    k: int
    n: int
    per: int
    length: int

    @classmethod
    def of(cls, k: int, window: int, fold: int) -> Windows:
        n = max(1, math.ceil(k / window))
        per = math.ceil(k / n)
        return cls(k, n, per, math.ceil(per / fold) * fold)

    def split(self, v: torch.Tensor) -> torch.Tensor:
        """(B, K) → (B, n, L), zero-padded."""
        b = v.shape[0]
        out = torch.zeros((b, self.n * self.per), dtype=v.dtype, device=v.device)
        out[:, : self.k] = v
        out = out.reshape(b, self.n, self.per)
        return torch.nn.functional.pad(out, (0, self.length - self.per))

    def join(self, w: torch.Tensor) -> torch.Tensor:
        """(B, n, L) → (B, K)."""
        return w[..., : self.per].reshape(w.shape[0], self.n * self.per)[:, : self.k]

    def valid(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """(n, L) bool on ``device``: positions holding one of the K values."""
        return self.split(torch.ones((1, self.k), dtype=torch.bool, device=device))[0]

    def latent_floats(self, latent_channels: int, fold: int) -> int:
        """Floats of the latent message: the codes plus one scale per window."""
        return self.n * (latent_channels * self.length // fold + 1)

    def scales(self, v: torch.Tensor) -> torch.Tensor:
        """Per-window RMS of one worker's K values (float32, shape (n,))."""
        w = self.split(v.reshape(1, -1).double())[0]
        count = self.valid(v.device).sum(1).double()
        return (w.pow(2).sum(1) / count).sqrt().float()
