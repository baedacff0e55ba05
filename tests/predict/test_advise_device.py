"""advise --device: the compute time and the kernels are measured on the device asked for; a bench file is read as is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gcbench.predict import inputs
from gcbench.predict.compute_time import ComputeTiming
from gcbench.predict.step_kernels import KernelSet, StepKernels


def test_step_inputs_measure_compute_and_kernels_on_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, list[str]] = {"compute": [], "kernels": [], "cache": []}

    def compute(model: str, *, progress: Any = None, device: str = "cpu") -> ComputeTiming:
        seen["compute"].append(device)
        return ComputeTiming(0.01, (0.01,) * 5)

    def kernels(model: str, specs: Any, out_dir: Any, *, device: str = "cpu", **kw: Any) -> KernelSet:
        seen["kernels"].append(device)
        k = StepKernels("none", "none", 1e-3, 1e-3, 1e-3, 400.0, 400.0)
        return KernelSet(model, device, "test", str(tmp_path / "bench.json"), (k,))

    def cache(model: str, specs: Any, out_dir: Any, *, device: str = "cpu", **kw: Any) -> None:
        seen["cache"].append(device)

    monkeypatch.setattr(inputs, "measure_compute", compute)
    monkeypatch.setattr(inputs, "measure_kernels", kernels)
    monkeypatch.setattr(inputs, "find_recent_bench", cache)
    monkeypatch.setattr(inputs, "store_compute", lambda *a: None)
    got = inputs.step_inputs("mlp", ["none"], tmp_path, device="cuda:1")
    assert seen["compute"] == ["cuda:1", "cuda:1"] and seen["kernels"] == ["cuda:1"]
    assert seen["cache"] and set(seen["cache"]) == {"cuda:1"}  # a bench reused only from the same device
    assert got.kernels.device == "cuda:1" and "this machine's cuda:1" in got.compute_origin


def test_measure_compute_on_the_cpu_by_default() -> None:
    from gcbench.measure.timing import TimingPolicy
    from gcbench.predict.compute_time import measure_compute

    ct = measure_compute("mlp", policy=TimingPolicy(warmup=1, min_rounds=2, max_rounds=2, budget_s=5.0), attempts=1,
                         device="cpu")
    assert ct.median_s > 0 and len(ct.samples) == 2
