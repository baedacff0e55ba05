"""Gradient sources: where the tensors that compressors are measured on come from.

* :mod:`gcbench.sources.synthetic` — seeded tensors from named distributions.
* :mod:`gcbench.sources.live` — gradients computed now from a zoo model, N workers, S steps.
* :mod:`gcbench.sources.trace` — recorded gradients (manifest + safetensors), read lazily.

All implement :class:`~gcbench.sources.base.GradientSource`.
"""

from gcbench.sources.base import GradientSource, TensorSpec, check_finite

__all__ = ["GradientSource", "TensorSpec", "check_finite"]
