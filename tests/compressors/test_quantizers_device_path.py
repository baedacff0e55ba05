"""The quantizers' torch path (the path a CUDA tensor takes) in the settings the device guard does not reach.

``tests/compressors/test_device_guard.py`` holds every compressor at its default parameters; these are the other
codings and widths of the quantizers, sign compressors and block-scaled formats (qsgd's Elias coding, topk_dither's
four index codings, blockint's odd widths, terngrad's scaler sharing, onebit's granularities ...).  In this process,
on the CPU: the compressors are sent down their torch path (as on a device without kernels) and the uniforms drawn
with torch ops, so each configuration is checked to

* make no tensor<->NumPy conversion and at most its card's ``scalar_reads`` per ``compress_and_decode`` and per
  ``decompress``, and at most ``exchange_scalar_reads(4)`` in a 4-worker exchange;
* send the numba path's bytes and decode to its tensors (where numba is present), payloads crossed both ways.
"""

from __future__ import annotations

import pytest
import torch

from gcbench import kernels
from gcbench.compressors import registry
from gcbench.core.host_sync import count_host_syncs
from gcbench.core.payload import Payload
from gcbench.kernels import rng
from tests.kernels.helpers import torch_only

CONFIGS: list[tuple[str, dict[str, object]]] = [
    ("signsgd", {}), ("efsignsgd", {}),
    ("onebit", {"granularity": "row"}), ("onebit", {"granularity": "tensor"}),
    ("terngrad", {"share_scaler": True}), ("terngrad", {"clip": 0.0, "share_scaler": False}),
    ("qsgd", {"encoding": "elias"}), ("qsgd", {"encoding": "elias", "norm": "2", "s": 3, "bucket": 100}),
    ("qsgd", {"norm": "2", "s": 300, "bucket": 7}), ("qsgd", {"min_numel": 10**6}),
    ("natural", {}), ("natural_dither", {"s": 3, "p": "inf"}),
    ("topk_dither", {"index_coding": "elias"}), ("topk_dither", {"index_coding": "int32"}),
    ("topk_dither", {"index_coding": "delta-varint", "error_feedback": False, "s": 2, "p": "inf"}),
    ("blockint", {"bits": 3, "block": 33}), ("blockint", {"bits": 5, "rounding": "stochastic"}),
    ("fp8", {"scale": "block", "block": 100, "format": "e5m2", "rounding": "stochastic"}),
    ("mxfp4", {"rounding": "stochastic"}), ("nvfp4", {}), ("fp16", {}),
]
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in p.items()) or 'default'}" for n, p in CONFIGS]
SHAPE = (40, 250)  # 10,000 elements: the counts do not depend on the size, and the Elias reader on a CPU is slow


def _all_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch path on the CPU, uniforms included (they take NumPy's kernel whenever numba is present)."""
    torch_only(monkeypatch)
    monkeypatch.setattr(kernels, "fast_cpu", lambda *t: False)  # topk_dither's selection
    monkeypatch.setattr(rng, "NUMBA", False)


def _inputs(seed: int, n: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(SHAPE, generator=g) * torch.logspace(-3, 3, SHAPE[1]) for _ in range(n)]


@pytest.mark.parametrize(("name", "params"), CONFIGS, ids=IDS)
def test_the_torch_path_stays_on_the_device(name: str, params: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    _all_torch(monkeypatch)
    comp = registry.create(name, **params)
    budget = comp.info.scalar_reads
    xs = _inputs(1)
    warm, _ = comp.compress_and_decode(xs[0], comp.init_state(1))  # warm-up: tables made once per device (elias's
    comp.decompress(warm, xs[0].shape)  # encode and decode tables) are not a step's
    state = comp.init_state(0)
    for _ in range(2):  # a first step, and one with the state it left
        with count_host_syncs() as counted:
            payload, _ = comp.compress_and_decode(xs[0], state)
        assert counted.conversions == 0 and counted.scalar_reads <= budget, (counted, budget)
    with count_host_syncs() as counted:
        comp.decompress(payload, xs[0].shape)
    assert counted.conversions == 0 and counted.scalar_reads <= budget, (counted, budget)
    states = [comp.init_state(w) for w in range(4)]
    with count_host_syncs() as counted:
        comp.exchange(xs, states)
    assert counted.conversions == 0 and counted.scalar_reads <= comp.info.exchange_scalar_reads(4), counted


@pytest.mark.skipif(not kernels.available(), reason="numba kernels unavailable: no second path to compare")
@pytest.mark.parametrize(("name", "params"), CONFIGS, ids=IDS)
def test_the_torch_path_sends_the_kernels_bytes(name: str, params: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two steps on each path from the same seed: the same wire bytes and decoded tensors, and each path decodes the
    other's payloads to the same tensors (the torch decoder reads a numba payload, and the reverse)."""
    comp = registry.create(name, **params)
    xs = _inputs(2, 2)

    def run() -> list[tuple[Payload, torch.Tensor]]:
        st = comp.init_state(3)
        return [comp.compress_and_decode(x, st) for x in xs]

    fast = run()
    with monkeypatch.context() as m:
        _all_torch(m)
        slow = run()
        slow_reads_fast = [comp.decompress(p) for p, _ in fast]
    fast_reads_slow = [comp.decompress(p) for p, _ in slow]
    for (pf, df), (ps, ds), a, b in zip(fast, slow, slow_reads_fast, fast_reads_slow, strict=True):
        assert pf.to_bytes() == ps.to_bytes()
        assert torch.equal(df, ds) and torch.equal(a, b) and torch.equal(a.reshape(df.shape), df)
