"""Every results file's environment names the device, what it is and the distributed backend."""

from __future__ import annotations

import pytest
import torch

from gcbench.results.record import Environment
from gcbench.results.store import _cpu_model, device_name, environment


def test_cpu_run_names_the_cpu_and_no_backend() -> None:
    env = Environment.model_validate(environment("cpu"))
    assert env.device == "cpu" and env.device_name == _cpu_model() and env.backend is None


def test_backend_is_recorded() -> None:
    assert environment("cpu", "gloo")["backend"] == "gloo"


def test_cuda_device_name_comes_from_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"Fake GPU {i}")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert device_name("cuda:1") == "Fake GPU 1"
    assert device_name("cuda") == "Fake GPU 0"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_name("cuda:0") is None
