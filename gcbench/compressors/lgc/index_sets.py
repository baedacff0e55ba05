"""LGC's index sets: the k largest entries of a tensor, in ascending order, and where given positions sit in such a set.

The leader's top-k index set is what every LGC exchange aligns on (see the package docstring,
gcbench/compressors/lgc/__init__.py).
"""

from __future__ import annotations

import torch


def topk_indices_sorted(a: torch.Tensor, k: int) -> torch.Tensor:
    """Ascending indices of the k largest |a| (exact; ties as ``torch.topk``)."""
    return torch.sort(torch.topk(a.abs(), k, sorted=False).indices).values


def positions_in(sorted_idx: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each of ``pos``: its position in ascending ``sorted_idx`` and whether it is there (on ``pos``' device)."""
    sorted_idx = sorted_idx.to(pos.device)
    where = torch.searchsorted(sorted_idx, pos).clamp(max=max(sorted_idx.numel() - 1, 0))
    inside = sorted_idx[where] == pos if sorted_idx.numel() else torch.zeros(pos.shape, dtype=torch.bool, device=pos.device)
    return where, inside
