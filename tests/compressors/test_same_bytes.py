"""Same bytes: every compressor's payloads on fixed inputs and seeds match a stored digest.

A refactor (a moved module, a merged kernel, a new encode hook) must not change one byte on the
wire unless it bumps the compressor's version.  For every registered compressor this test
compresses fixed tensors for three steps (state carried, so error feedback and warm starts count)
at its default parameters and, where it has one, with optional error feedback on, and runs one
three-worker exchange; it hashes every payload's wire bytes and the exchange's aggregate.

The digests in ``tests/golden/payload_digests.json`` were recorded on the platform they name
(float rounding of torch's vector code can differ between CPU families and library versions), so
the test skips elsewhere rather than fail for a reason unrelated to gcbench.  To record anew after
a deliberate change of encoding (with a version bump), run::

    GCBENCH_RECORD_DIGESTS=1 python -m pytest tests/compressors/test_same_bytes.py

With ``GCBENCH_TEST_DEVICE=cuda`` (benchmarks/device_check.py) the inputs also go to the GPU, and every
compressor's payloads there must decode to what its CPU payloads decode to, within float rounding
(a GPU sums in another order, so bit-identity is reported, not required).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

import numpy as np
import pytest
import torch

from gcbench.compressors import registry
from gcbench.core.payload import Payload
from tests.conftest import TEST_DEVICE

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "payload_digests.json"
RECORD = os.environ.get("GCBENCH_RECORD_DIGESTS") == "1"
SHAPES = [(1000,), (64, 33), (5,), (3, 0), ((1 << 20) + 7,)]  # the last takes the parallel fast paths
STEPS = 3
WORKERS = 3


def _platform() -> dict[str, str]:
    return {"machine": platform.machine(), "torch": torch.__version__, "numpy": np.__version__}


def _inputs(step: int, worker: int = 0, device: str = "cpu") -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + 17 * worker + 1)
    return [torch.randn(s, generator=g).to(device) for s in SHAPES]


def _configs(name: str) -> list[tuple[str, dict]]:
    info = registry.get(name)
    out = [("default", {})]
    if info.error_feedback == "optional":
        out.append(("ef", {"error_feedback": True}))
    return out


def _digest(name: str, params: dict, device: str = "cpu") -> str:
    h = hashlib.sha256()
    comp = registry.create(name, **params)
    if registry.get(name).min_workers <= 1:
        states = [comp.init_state(seed=11 + i) for i in range(len(SHAPES))]
        for step in range(STEPS):
            for payload, _ in comp.compress_group(_inputs(step, 0, device), states, need_decoded=False):
                h.update(payload.to_bytes())
    # one multi-worker step over every unit: the paper's protocol where it has one
    comp = registry.create(name, **params)
    states = [[comp.init_state(seed=100 * w + u) for u in range(len(SHAPES))] for w in range(WORKERS)]
    for step in range(STEPS):
        grads = [_inputs(step, w, device) for w in range(WORKERS)]
        for res in comp.exchange_group(grads, states):
            for p in res.payloads:
                h.update(p.to_bytes())
            h.update(res.aggregate.detach().float().cpu().contiguous().numpy().tobytes())
            h.update(repr([(r.phase, r.worker, r.sent, r.received) for r in res.traffic.records]).encode())
    return h.hexdigest()


def _cases() -> list[tuple[str, str, dict]]:
    return [(n, label, params) for n in registry.names() for label, params in _configs(n)]


def _stored() -> dict:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


@pytest.mark.skipif(RECORD, reason="recording digests (GCBENCH_RECORD_DIGESTS=1)")
@pytest.mark.parametrize(("name", "label", "params"), _cases(), ids=[f"{n}-{lab}" for n, lab, _ in _cases()])
def test_payload_bytes_unchanged(name: str, label: str, params: dict) -> None:
    stored = _stored()
    if stored.get("platform") != _platform():
        pytest.skip(f"digests were recorded on {stored.get('platform')}, this is {_platform()}")
    key = f"{name}/{label}"
    version = registry.get(name).version
    entry = stored["digests"].get(key)
    if entry is None:
        pytest.fail(f"no stored digest for {key}: record them (see this module's docstring)")
    if entry["version"] != version:
        pytest.fail(f"{name} is version {version}, digest recorded at version {entry['version']}: record anew")
    assert _digest(name, params) == entry["sha256"], f"{key}: payload bytes changed without a version bump"


@pytest.mark.skipif(not RECORD, reason="set GCBENCH_RECORD_DIGESTS=1 to record the digests")
def test_record_digests() -> None:
    """Write every configuration's digest, its compressor's version and this platform to :data:`GOLDEN`."""
    digests = {f"{n}/{label}": {"sha256": _digest(n, params), "version": registry.get(n).version} for n, label, params in _cases()}
    GOLDEN.write_text(json.dumps({"digests": digests, "platform": _platform()}, indent=1, sort_keys=True) + "\n")
    assert json.loads(GOLDEN.read_text())["digests"] == digests


#: how far a device's decoded tensors may sit from the CPU's, relative to their norm: float reductions on a GPU
#: (norms, means, sums of workers) round in another order, which can move an aggregate by an ulp or flip a
#: stochastic-rounding or threshold decision for a few elements; a wrong kernel moves far more
DEVICE_REL_TOL = 1e-3


def _trace(name: str, params: dict, device: str) -> tuple[list[bytes], list[torch.Tensor]]:
    """Every payload's bytes and every decoded tensor and aggregate (on the CPU) of :func:`_digest`'s steps."""
    wires: list[bytes] = []
    outs: list[torch.Tensor] = []
    comp = registry.create(name, **params)
    if registry.get(name).min_workers <= 1:
        states = [comp.init_state(seed=11 + i) for i in range(len(SHAPES))]
        for step in range(STEPS):
            for payload, _ in comp.compress_group(_inputs(step, 0, device), states, need_decoded=False):
                wires.append(payload.to_bytes())
                outs.append(registry.decompress(Payload.from_bytes(wires[-1])).float().cpu())
    comp = registry.create(name, **params)
    states = [[comp.init_state(seed=100 * w + u) for u in range(len(SHAPES))] for w in range(WORKERS)]
    for step in range(STEPS):
        grads = [_inputs(step, w, device) for w in range(WORKERS)]
        for res in comp.exchange_group(grads, states):
            wires.extend(p.to_bytes() for p in res.payloads)
            outs.append(res.aggregate.detach().float().cpu())
    return wires, outs


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = float(torch.linalg.vector_norm(b.double()))
    diff = float(torch.linalg.vector_norm(a.double() - b.double()))
    return diff / scale if scale > 0 else diff


@pytest.mark.skipif(TEST_DEVICE == "cpu", reason="set GCBENCH_TEST_DEVICE=cuda to compare a device's output with the CPU's")
@pytest.mark.parametrize(("name", "label", "params"), _cases(), ids=[f"{n}-{lab}" for n, lab, _ in _cases()])
def test_payloads_on_the_test_device_decode_to_the_cpus(name: str, label: str, params: dict) -> None:
    """A tensor on the device takes the torch path (no numba kernels there): it must send what the CPU sends.

    Bit-identical payloads are reported; where the device's float rounding differs, every decoded
    tensor and aggregate must still lie within :data:`DEVICE_REL_TOL` of the CPU's and the bytes sent
    within 1% of the CPU's.
    """
    dev_wires, dev_outs = _trace(name, params, TEST_DEVICE)
    cpu_wires, cpu_outs = _trace(name, params, "cpu")
    assert len(dev_wires) == len(cpu_wires) and len(dev_outs) == len(cpu_outs), f"{name}/{label}: another number of payloads"
    same = sum(a == b for a, b in zip(dev_wires, cpu_wires, strict=True))
    worst = max((_rel(a, b) for a, b in zip(dev_outs, cpu_outs, strict=True)), default=0.0)
    dev_bytes, cpu_bytes = sum(map(len, dev_wires)), sum(map(len, cpu_wires))
    print(f"{name}/{label}: {same}/{len(cpu_wires)} payloads bit-identical on {TEST_DEVICE}, "
          f"worst relative distance {worst:.2e}, bytes {dev_bytes} vs {cpu_bytes}")
    assert worst <= DEVICE_REL_TOL, f"{name}/{label}: decoded output on {TEST_DEVICE} is {worst:.2e} from the CPU's (norm-relative)"
    assert abs(dev_bytes - cpu_bytes) <= 0.01 * cpu_bytes, f"{name}/{label}: {dev_bytes} bytes on {TEST_DEVICE}, {cpu_bytes} on the CPU"
