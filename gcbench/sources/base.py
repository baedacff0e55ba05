"""The gradient-source interface shared by synthetic, live and recorded gradients."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from gcbench.core.errors import SourceError


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of one gradient tensor (one layer's parameter)."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


class GradientSource(ABC):
    """A stream of gradients: ``steps`` steps × ``workers`` workers × the tensors of ``layout()``.

    ``gradients(step, worker)`` returns a mapping name → tensor in layout order.  It may be lazy
    (a trace reads one tensor at a time when the mapping is indexed), so consumers should index
    by name rather than materialise every value when memory matters.  Steps are fed in order;
    sources may cache the current step.
    """

    #: short description recorded in results, e.g. "synthetic normal", "live resnet50"
    name: str
    workers: int
    steps: int

    @abstractmethod
    def layout(self) -> list[TensorSpec]:
        """The tensors of one (step, worker), in order."""

    @abstractmethod
    def gradients(self, step: int, worker: int) -> Mapping[str, torch.Tensor]:
        """Gradients of one worker at one step (float tensors on the CPU)."""

    def describe(self) -> dict[str, object]:
        """JSON-friendly description for results files."""
        return {"name": self.name, "workers": self.workers, "steps": self.steps, "tensors": len(self.layout())}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (open files, models)."""


def check_finite(name: str, t: torch.Tensor, where: str = "") -> None:
    """Raise a :class:`SourceError` naming the tensor if it holds NaN or Inf."""
    # a finite sum (one read, no temporary) proves every element is finite; scan only otherwise
    if t.is_floating_point() and t.numel() and not math.isfinite(float(t.sum(dtype=torch.float64))) and not bool(torch.isfinite(t).all()):
        n_nan = int(torch.isnan(t).sum())
        n_inf = int(torch.isinf(t).sum())
        loc = f" ({where})" if where else ""
        raise SourceError(f"gradient {name!r}{loc} contains {n_nan} NaN and {n_inf} Inf values")
