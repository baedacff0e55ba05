"""Synthetic gradients: seeded tensors of given shapes from named distributions.

Distributions: ``normal`` (N(0, 1)), ``laplace`` (unit scale), ``student-t`` (heavy tail, ``df``
degrees of freedom, default 3), ``sparse`` (normal on a random fraction ``sparsity_density`` of
positions, zero elsewhere), ``lowrank`` (a rank-``rank`` product plus 1% noise; matrices only).
Each (step, worker, tensor) gets its own generator seeded from (seed, step, worker, index), so
results do not depend on the order tensors are requested in.  ``scale`` multiplies everything
(real gradients are ~1e-3; relative metrics do not depend on it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from gcbench.core.errors import ParamError
from gcbench.sources.base import GradientSource, TensorSpec

DISTRIBUTIONS = ("normal", "laplace", "student-t", "sparse", "lowrank")


def sample(shape: tuple[int, ...], distribution: str, gen: np.random.Generator, *, df: float = 3.0,
           sparsity_density: float = 0.05, rank: int = 4) -> torch.Tensor:
    """One float32 tensor of ``shape`` drawn from ``distribution`` with ``gen``."""
    n = int(np.prod(shape)) if shape else 1
    if distribution == "normal":
        v = gen.standard_normal(n, dtype=np.float32)
    elif distribution == "laplace":
        v = gen.laplace(0.0, 1.0, n).astype(np.float32)
    elif distribution == "student-t":
        v = gen.standard_t(df, n).astype(np.float32)
    elif distribution == "sparse":
        v = np.zeros(n, np.float32)
        m = max(1, round(sparsity_density * n)) if n else 0
        pos = gen.choice(n, size=m, replace=False) if m else np.zeros(0, np.int64)
        v[pos] = gen.standard_normal(m, dtype=np.float32)
    elif distribution == "lowrank":
        rows = shape[0] if shape else 1
        cols = n // rows if rows else 0
        r = max(1, min(rank, rows, cols))
        v = (gen.standard_normal((rows, r), dtype=np.float32) @ gen.standard_normal((r, cols), dtype=np.float32)).ravel()
        v += 0.01 * gen.standard_normal(n, dtype=np.float32) * float(np.std(v) or 1.0)
    else:
        raise ParamError(f"unknown distribution {distribution!r}; choose from {', '.join(DISTRIBUTIONS)}")
    return torch.from_numpy(v.reshape(shape))


class SyntheticSource(GradientSource):
    """Seeded synthetic gradients for the given shapes (names ``t0``, ``t1``, … unless given)."""

    def __init__(self, shapes: list[tuple[int, ...]], distribution: str = "normal", *, workers: int = 1, steps: int = 1,
                 seed: int = 0, scale: float = 1.0, names: list[str] | None = None, df: float = 3.0,
                 sparsity_density: float = 0.05, rank: int = 4) -> None:
        if distribution not in DISTRIBUTIONS:
            raise ParamError(f"unknown distribution {distribution!r}; choose from {', '.join(DISTRIBUTIONS)}")
        self.shapes = [tuple(int(s) for s in sh) for sh in shapes]
        self.names = names or [f"t{i}" for i in range(len(self.shapes))]
        self.distribution = distribution
        self.workers, self.steps, self.seed, self.scale = workers, steps, seed, scale
        self.kw: dict[str, Any] = {"df": df, "sparsity_density": sparsity_density, "rank": rank}
        self.name = f"synthetic {distribution}"

    def layout(self) -> list[TensorSpec]:
        return [TensorSpec(n, s) for n, s in zip(self.names, self.shapes, strict=True)]

    def gradients(self, step: int, worker: int) -> Mapping[str, torch.Tensor]:
        out = {}
        for i, (name, shape) in enumerate(zip(self.names, self.shapes, strict=True)):
            gen = np.random.Generator(np.random.PCG64([self.seed, step, worker, i]))
            t = sample(shape, self.distribution, gen, **self.kw)
            out[name] = t * self.scale if self.scale != 1.0 else t
        return out

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "kind": "synthetic", "distribution": self.distribution,
                "shapes": [list(s) for s in self.shapes], "seed": self.seed, "scale": self.scale}
