"""Inputs and helpers shared by the kernel tests (plain functions: parametrised tests call them at collection)."""

from __future__ import annotations

import numpy as np
import pytest

from gcbench import kernels

# sizes around the kernels' block (1024) and part (65536) boundaries, with ragged tails
SIZES = [1, 7, 8, 63, 64, 65, 1000, 1024, 1025, 65536, 65537, 150_003]
N = 700_001  # several chunks and work items, not a multiple of anything
TOPK_SAMPLE = 1 << 18  # a size unit for the top-k tests: 4·TOPK_SAMPLE elements take the sampled path with a full sample


def gen(seed: int) -> np.random.Generator:
    """A seeded NumPy generator (PCG64)."""
    return np.random.Generator(np.random.PCG64(seed))


def t3(n: int, seed: int) -> np.ndarray:
    """Heavy-tailed float32 values (Student-t, 3 degrees of freedom)."""
    return gen(seed).standard_t(3.0, n).astype(np.float32)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes and equal float32 bit patterns (NaN payloads and signed zeros included)."""
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def signed_values(n: int, seed: int) -> np.ndarray:
    """Normal values with exact zeros, −0.0 and repeated magnitudes sprinkled in."""
    g = np.random.default_rng(seed)
    x = g.standard_normal(n).astype(np.float32)
    if n >= 8:
        x[:: max(1, n // 7)] = 0.0
        x[1 :: max(1, n // 5)] = -0.0
        x[2 :: max(1, n // 3)] = 1.5
    return x


def torch_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every compressor take its plain torch path on CPU (as on a device without kernels)."""
    monkeypatch.setattr(kernels, "cpu_fast", lambda *t: False)
    monkeypatch.setattr(kernels, "fused_ef_ok", lambda x: False)
    monkeypatch.setattr(kernels, "available", lambda: False)
