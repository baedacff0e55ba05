"""LGC stays on the device in every phase: its wire, rounds and autoencoder are torch operations on the gradients' device.

The device guard (tests/compressors/test_device_guard.py) runs one step, LGC's dense phase; here every phase of both
presets and both modes runs with tensor<->NumPy conversions and scalar reads counted (:func:`count_host_syncs`).
LGC has no numba path, so this holds on the CPU as run here, and on ``GCBENCH_TEST_DEVICE=cuda``.
"""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import registry
from gcbench.core import codec_torch_elias
from gcbench.core.host_sync import count_host_syncs
from tests.conftest import TEST_DEVICE

WORKERS = 4
GCBENCH_SHAPES = [(20000,)]
#: the reference preset's model: a dense first tensor, two middle tensors sharing the autoencoder, two dense last ones
REFERENCE_SHAPES = [(3000,), (20000,), (30000,), (100,), (10,)]


@pytest.fixture(scope="module", autouse=True)
def _elias_tables() -> None:
    """The Elias-ω codec's tables, made once per device and cached (a one-time upload, not a step's): made here, before
    anything is counted, whichever test ran first."""
    codec_torch_elias.make_tables(TEST_DEVICE)


def _grads(step: int, shapes: list[tuple[int, ...]]) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(step)
    return [[torch.randn(s, generator=g).to(TEST_DEVICE) for s in shapes] for _ in range(WORKERS)]


@pytest.mark.parametrize("params", [{}, {"mode": "ring"}, {"decoders": "per-worker"}, {"index_coding": "elias"},
                                    {"preset": "reference", "density": 0.01},
                                    {"preset": "reference", "density": 0.01, "mode": "ring"}],
                         ids=["ps", "ring", "per-worker", "elias", "reference-ps", "reference-ring"])
def test_every_phase_of_the_exchange_stays_on_the_device(params: dict) -> None:
    """Dense, top-k (training the autoencoder) and compressed steps: no conversion; a one-tensor step within the card's budget."""
    comp = registry.create("lgc", dense_steps=1, train_steps=1, **params)
    shapes = REFERENCE_SHAPES if params.get("preset") == "reference" else GCBENCH_SHAPES
    states = [[comp.init_state(100 * w + u) for u in range(len(shapes))] for w in range(WORKERS)]
    phases = []
    for step in range(3):
        grads = _grads(step, shapes)
        with count_host_syncs() as counted:
            results = comp.exchange_group(grads, states)
        phases.append(comp.phase_of(step))
        assert counted.conversions == 0, f"{params} step {step}: {counted} at {counted.sites[:4]}"
        # the reference preset exchanges the model at once: its middle tensors' decodes share one step
        budget = comp.info.exchange_scalar_reads(WORKERS) * (len(shapes) - 3 if params.get("preset") else 1)
        assert counted.scalar_reads <= budget, f"{params} step {step}: {counted}, budget {budget}, at {counted.sites[:4]}"
        assert all(r.aggregate.device == grads[0][0].device for r in results)
    assert phases == ["dense", "topk", "compressed"]


@pytest.mark.parametrize("coding", ["fixed", "elias"])
def test_a_topk_step_compresses_and_decodes_on_the_device(coding: str) -> None:
    """The single-tensor contract past the dense phase: a top-k payload, built and decoded within the card's reads."""
    comp = registry.create("lgc", dense_steps=0, index_coding=coding)
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(1)).to(TEST_DEVICE)
    state = comp.init_state(0)
    with count_host_syncs() as counted:
        payload, decoded = comp.compress_and_decode(x, state)
    assert payload.meta["kind"] == "topk" and payload.data.device == x.device
    assert counted.conversions == 0 and counted.scalar_reads <= comp.info.scalar_reads, counted
    with count_host_syncs() as counted:
        out = comp.decompress(payload, x.shape)
    assert counted.conversions == 0 and counted.scalar_reads <= comp.info.scalar_reads, counted
    assert out.device == x.device and torch.equal(out, decoded)
