"""Every kernel test runs on one thread and on two (parts written concurrently), whatever the input size:
results must not depend on the thread count."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from gcbench.kernels import runtime


@pytest.fixture(autouse=True, params=[1, 2], ids=["1thread", "2threads"])
def threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """torch's (hence numba's and the kernel pool's) thread count; with two, no input is too small for threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    if request.param > 1:
        monkeypatch.setattr(runtime, "SERIAL_MAX", 0)
    yield request.param
    torch.set_num_threads(before)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without numba (or under ``GCBENCH_KERNELS=torch``) there are no fast kernels to check here."""
    from gcbench import kernels

    if not kernels.NUMBA:
        skip = pytest.mark.skip(reason="numba kernels not available")
        for item in items:
            if "tests/kernels/" in str(item.path).replace("\\", "/"):
                item.add_marker(skip)
