"""check_device: a device name is read, and a GPU that is not here is refused before any work."""

from __future__ import annotations

import pytest
import torch

from gcbench.cli.failures import UsageError
from gcbench.cli.preflight import check_device
from gcbench.core.errors import GcbenchError


def test_cpu_is_always_there() -> None:
    assert check_device("cpu") == torch.device("cpu")
    assert check_device(" CPU ") == torch.device("cpu")


@pytest.mark.parametrize("text", ["gpu", "cuda:x", "cuda:", "cpu:0", "cuda:-1", ""])
def test_a_name_that_is_not_a_device_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="expected cpu, cuda or cuda:N"):
        check_device(text)


def test_cuda_without_cuda_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for text in ("cuda", "cuda:0"):
        with pytest.raises(GcbenchError, match="no CUDA device is available") as info:
            check_device(text)
        assert "\n" not in str(info.value) and not isinstance(info.value, UsageError)


def test_a_gpu_index_past_the_last_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert check_device("cuda") == torch.device("cuda")
    assert check_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(GcbenchError, match=r"no GPU 2 here \(2 visible: cuda:0..cuda:1\)"):
        check_device("cuda:2")
