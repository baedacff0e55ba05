"""User model factories for the ``package.module:factory`` tests (tests/sources/test_zoo.py and live tests)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _batches(seed: int, batch_size: int = 4) -> object:
    def make_batch(batch_index: int, worker: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed * 1_000_003 + batch_index * 101 + worker)
        return torch.randn(batch_size, 6, generator=g), torch.randint(0, 3, (batch_size,), generator=g)

    return make_batch


def tiny(seed: int = 0, batch_size: int = 4) -> tuple[nn.Module, object]:
    """A 6-5-3 classifier; weights depend on ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)), _batches(seed, batch_size)


def tiny_no_seed() -> tuple[nn.Module, object]:
    """A factory that takes no seed at all."""
    return nn.Linear(6, 3), _batches(0)


def tiny_mse(seed: int = 0) -> tuple[nn.Module, object, object]:
    """Returns a custom loss as third value: MSE against one-hot targets."""
    torch.manual_seed(seed)

    def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out, F.one_hot(y, 3).float())

    return nn.Linear(6, 3), _batches(seed), loss_fn


def not_a_module(seed: int = 0) -> tuple[object, object]:
    """Wrong: the first value is not an nn.Module."""
    return {"weights": torch.zeros(3)}, _batches(seed)


def not_a_tuple(seed: int = 0) -> nn.Module:
    """Wrong: returns the module alone."""
    return nn.Linear(6, 3)


def nan_model(seed: int = 0) -> tuple[nn.Module, object]:
    """A model whose gradients are NaN (a weight is NaN)."""
    m = nn.Linear(6, 3)
    with torch.no_grad():
        m.weight[0, 0] = float("nan")
    return m, _batches(seed)


NOT_CALLABLE = 3
