"""Shared test helpers: bitwise tensor comparison, seeded inputs and the hypothesis profile.

Helpers are plain functions (import them with ``from tests.conftest import ...``) so that
parametrised tests can call them at collection time as well as inside test bodies.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

# the CLI's piped output takes its width from COLUMNS (else 200): tests read 200-column output whatever the shell exports
os.environ["COLUMNS"] = "200"

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

from gcbench.compressors.check import same_bits  # noqa: F401  (re-exported for the tests)
from gcbench.core.payload import _varint as scalar_varint

# Property tests must stay quick on a 2-core machine shared with other jobs: few examples, and no
# per-example deadline (a JIT warm-up or a busy neighbour would otherwise fail them at random).
settings.register_profile(
    "gcbench", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.load_profile("gcbench")

#: where the device-aware tests (the contract, same bytes) put their input tensors: ``GCBENCH_TEST_DEVICE=cuda`` runs them
#: on the GPU, the path a CUDA tensor takes through every compressor (benchmarks/device_check.py does so)
TEST_DEVICE = os.environ.get("GCBENCH_TEST_DEVICE", "cpu").strip() or "cpu"


def on_test_device(t: torch.Tensor) -> torch.Tensor:
    """``t`` on the tests' device (:data:`TEST_DEVICE`; the CPU unless GCBENCH_TEST_DEVICE says otherwise)."""
    return t.to(TEST_DEVICE)


def pytest_configure(config: pytest.Config) -> None:
    """Refuse a GCBENCH_TEST_DEVICE this machine does not have: tests that silently ran on the CPU would prove nothing."""
    try:
        device = torch.device(TEST_DEVICE)
    except RuntimeError as exc:
        raise pytest.UsageError(f"GCBENCH_TEST_DEVICE={TEST_DEVICE!r} is not a torch device ({exc})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError(f"GCBENCH_TEST_DEVICE={TEST_DEVICE!r}: no CUDA device is available here")

def normal(shape: tuple[int, ...], seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A seeded N(0, 1) tensor (NumPy PCG64, independent of torch's global generator)."""
    n = int(np.prod(shape)) if shape else 1
    v = np.random.Generator(np.random.PCG64(seed)).standard_normal(n).astype(np.float32)
    return torch.from_numpy(v.reshape(shape)).to(dtype)


# ---------------------------------------------------------------------------- codec oracles


def omega(n: int) -> str:
    """Elias-ω code of n >= 1 as a bit string, by the textbook recursion (independent of gcbench.core.codec)."""
    code = "0"
    while n > 1:
        b = bin(n)[2:]
        code = b + code
        n = len(b) - 1
    return code


def expected_index_bits(idx: np.ndarray, d: int, coding: str) -> int:
    """Bits of a sorted index set under ``coding``, computed without gcbench.core.codec's size helpers."""
    gaps = np.diff(np.asarray(idx, dtype=np.int64), prepend=-1)
    if coding == "fixed":
        return len(idx) * max(1, (d - 1).bit_length())  # ceil(log2 d), at least 1
    if coding == "int32":
        return 32 * len(idx)
    if coding == "delta-varint":
        return 8 * sum(len(scalar_varint(int(g) - 1)) for g in gaps)
    if coding == "elias":
        return sum(len(omega(int(g))) for g in gaps)
    raise ValueError(coding)


# ---------------------------------------------------------------------------- unbiasedness


def unbiasedness_statistic(samples: torch.Tensor, target: torch.Tensor) -> tuple[float, float]:
    """Normalised squared error of the Monte-Carlo mean: (T, n_eff).

    ``samples`` is (R, d): R independent compressions, decoded, in float64.  With per-element sample
    variances v_i, ``T = ‖mean − target‖² / (Σ v_i / R)``.  For an unbiased compressor E[T] ≈ 1 with
    standard deviation ≈ sqrt(2 / n_eff), n_eff = (Σ v_i)² / Σ v_i²; a bias b adds R‖b‖² / Σ v_i.
    A deterministic compressor with any bias gives T = inf.
    """
    r = samples.shape[0]
    mean = samples.mean(0)
    var = samples.var(0, correction=1)
    num = float(((mean - target.double()) ** 2).sum())
    total = float(var.sum())
    if total == 0.0:
        return (0.0 if num == 0.0 else math.inf), 1.0
    return num / (total / r), total**2 / float((var**2).sum())


def looks_unbiased(samples: torch.Tensor, target: torch.Tensor, z: float = 5.0) -> bool:
    """True when T lies within z standard deviations of 1 (see :func:`unbiasedness_statistic`)."""
    t, n_eff = unbiasedness_statistic(samples, target)
    return abs(t - 1.0) <= z * math.sqrt(2.0 / n_eff)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Run a test with one torch thread, then restore the count.

    The CI machine has 2 shared cores: for the small models of the source tests a second intra-op
    thread only adds spin-wait under load (measured 0.1 s against 1-6 s per small ResNet step), and
    the results do not depend on it.  Modules opt in with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def recording_legs(gen, sink: list):  # type: ignore[no-untyped-def,type-arg]
    """Wrap a worker's protocol generator: every leg it yields is appended to ``sink`` and passed on unchanged; the
    generator's return value is returned (for reading which legs a protocol runs, in order, on the simulated transport)."""
    value = None
    while True:
        try:
            leg = gen.send(value)
        except StopIteration as stop:
            return stop.value
        sink.append(leg)
        value = yield leg
