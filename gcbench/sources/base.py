"""The gradient-source interface shared by synthetic, live and recorded gradients."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from gcbench.core.errors import SourceError
from gcbench.core.finite import all_finite


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


#: the largest float32: every compressor computes in float32, so a gradient must fit it
FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def check_finite(name: str, t: torch.Tensor, where: str = "") -> None:
    """Raise a :class:`SourceError` naming the tensor if it holds NaN or Inf, or values float32 cannot hold.

    A wider tensor (float64) with a value beyond ±float32's max is refused too: the compressors and
    the float32 measurements would turn it into ±inf and every number of the case into nothing.
    """
    loc = f" ({where})" if where else ""
    if not all_finite(t):
        n_nan = int(torch.isnan(t).sum())
        n_inf = int(torch.isinf(t).sum())
        raise SourceError(f"gradient {name!r}{loc} contains {n_nan} NaN and {n_inf} Inf values")
    if t.is_floating_point() and t.numel() and torch.finfo(t.dtype).max > FLOAT32_MAX:
        peak = float(t.detach().abs().max())
        if peak > FLOAT32_MAX:
            n = int((t.detach().abs() > FLOAT32_MAX).sum())
            raise SourceError(f"gradient {name!r}{loc} is {str(t.dtype).removeprefix('torch.')} with {n} values beyond float32's range "
                              f"(max |g| = {peak:.3g} > {FLOAT32_MAX:.3g}); gcbench compresses float32 gradients: rescale the source")
