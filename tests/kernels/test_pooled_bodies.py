"""Sparse bodies come from the kernels' allocator: a body reusing the freed mapping of an earlier
payload (dirty bytes) must hold the same bytes as a fresh one."""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import registry
from gcbench.kernels import buffers
from tests.kernels.helpers import torch_only


def test_a_reused_dirty_body_gives_the_torch_path_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    c = registry.create("threshold", tau=1e-3)
    x1 = torch.randn(1_500_000, generator=torch.Generator().manual_seed(11))
    x2 = -x1.flip(0)  # as many entries pass (the same body size), other bytes everywhere
    with monkeypatch.context() as m:
        torch_only(m)
        expect = c.compress(x2, c.init_state(0)).to_bytes()
    first = c.compress(x1, c.init_state(0))
    nbytes = first.body_nbytes
    assert nbytes >= buffers._HUGE_MIN  # a pooled body, not np.zeros
    del first  # its mapping goes back to the pool
    second = c.compress(x2, c.init_state(0))
    assert second.body_nbytes == nbytes
    assert second.to_bytes() == expect
