"""Kernel benchmarks with pytest-benchmark (not part of the default test run).

Run:  python -m pytest benchmarks -q --benchmark-columns=median,iqr,rounds
      GCBENCH_BENCH_NUMEL=25600000 python -m pytest benchmarks ...   (ResNet-50 size; default 4M)

Each compressor's compress and decompress is timed on the same seeded float32 matrix, next to a
plain copy of that matrix into a preallocated buffer (the copy roofline), so the ratio
compress/copy can be read off one table.  `gcbench bench` reports the same ratios with the
targets and stored baselines; use it for pass/short verdicts.
"""

from __future__ import annotations

import os

import pytest
import torch

from gcbench.compressors import registry
from gcbench.measure.bench import matrix_shape

NUMEL = int(os.environ.get("GCBENCH_BENCH_NUMEL", "4000000"))
NAMES = [n for n in registry.names() if registry.get(n).min_workers <= 1]


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    torch.set_num_threads(int(os.environ.get("GCBENCH_BENCH_THREADS", "2")))
    return torch.randn(matrix_shape(NUMEL), generator=torch.Generator().manual_seed(0))


def test_copy_roofline(benchmark, x: torch.Tensor) -> None:
    buf = torch.empty_like(x)
    benchmark(buf.copy_, x)


@pytest.mark.parametrize("name", NAMES)
def test_compress(benchmark, x: torch.Tensor, name: str) -> None:
    comp = registry.create(name)
    state = comp.init_state(0)
    comp.compress(x, state)  # steady state for error feedback / momentum
    payload = benchmark.pedantic(lambda st: comp.compress(x, st), setup=lambda: ((state.clone(),), {}), rounds=5, warmup_rounds=1)
    assert payload.nbytes == len(payload.to_bytes())


@pytest.mark.parametrize("name", NAMES)
def test_decompress(benchmark, x: torch.Tensor, name: str) -> None:
    comp = registry.create(name)
    payload = comp.compress(x, comp.init_state(0))
    out = benchmark.pedantic(comp.decompress, args=(payload,), rounds=5, warmup_rounds=1)
    assert out.shape == x.shape
