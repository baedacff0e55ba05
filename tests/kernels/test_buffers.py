"""The one allocator: huge-page buffers, their reuse pool and its switch."""

from __future__ import annotations

import collections

import pytest
import torch

from gcbench import kernels
from gcbench.kernels import buffers

# ----------------------------------------------------------------------------- buffers


@pytest.mark.parametrize("n", [10, 3_000_000])
def test_empty_and_zeros(n: int) -> None:
    z = kernels.zeros(n)
    assert z.shape == (n,) and z.dtype == torch.float32 and int(torch.count_nonzero(z)) == 0
    e = kernels.empty(n, torch.float16)
    e.fill_(2.0)
    assert e.dtype == torch.float16 and float(e.double().sum()) == 2.0 * n
    if n * 4 >= 8 << 20:  # the mapping path: aligned to the huge-page size
        assert z.data_ptr() % (2 << 20) == 0
    b = kernels.empty(n).numpy()  # the buffer survives as long as a view of it does
    b[-1] = 5.0
    del e, z
    assert b[-1] == 5.0


def test_freed_buffers_are_reused_only_after_their_last_reference_is_gone() -> None:
    import gc

    n = 3_000_000  # 12 MB: the mapping path
    a = kernels.empty(n)
    a.fill_(7.0)
    held = kernels.empty(n)
    assert held.data_ptr() != a.data_ptr()  # a live buffer is never handed out again
    view = a[100:200]
    ptr = a.data_ptr()
    del a
    gc.collect()
    b = kernels.empty(n)
    assert b.data_ptr() != ptr and bool((view == 7.0).all())  # a view keeps the memory
    del view, b
    gc.collect()
    c = kernels.zeros(n)  # the freed mapping comes back, cleared
    assert int(torch.count_nonzero(c)) == 0
    c.fill_(3.0)
    cp = c.data_ptr()
    del c
    gc.collect()
    d = kernels.empty(n)
    assert d.data_ptr() == cp  # reused: no new mapping, no new page faults
    del d
    gc.collect()
    e = kernels.empty(n + 1000)  # a slightly larger buffer fits in the mapping's last huge page
    assert e.data_ptr() == cp
    del e
    gc.collect()
    assert kernels.empty(buffers._HUGE_MIN // 4 + 1).data_ptr() != cp  # a much smaller one never takes it (the rest would sit idle)
    assert kernels.empty(2 * n).data_ptr() != cp  # nor a larger one


def test_empty_maybe_zero_says_when_the_buffer_is_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """True (and all zeros) for a small buffer and a fresh mapping; False exactly for a reused one."""
    import gc

    monkeypatch.setattr(buffers, "_pool", [])  # an empty pool: the first large buffer is a fresh mapping
    monkeypatch.setattr(buffers, "_returned", collections.deque())
    small, small_zero = kernels.empty_maybe_zero(1000)
    assert small_zero and small.shape == (1000,) and int(torch.count_nonzero(small)) == 0
    n = 3_000_000  # 12 MB: the mapping path
    a, a_zero = kernels.empty_maybe_zero(n)
    assert a_zero and a.dtype == torch.float32 and int(torch.count_nonzero(a)) == 0
    a.fill_(4.0)
    ptr = a.data_ptr()
    del a
    gc.collect()
    b, b_zero = kernels.empty_maybe_zero(n)
    reused = b.data_ptr() == ptr and not b_zero and bool((b == 4.0).all())  # reused, not cleared
    del b
    gc.collect()
    assert reused


def test_buffer_pool_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    monkeypatch.setattr(buffers, "POOL_BYTES", 0)
    monkeypatch.setattr(buffers, "_pool", [])
    monkeypatch.setattr(buffers, "_returned", collections.deque())
    a = kernels.empty(3_000_000)
    a.fill_(1.0)
    del a
    gc.collect()
    assert not buffers._returned and not buffers._pool  # nothing kept: the mapping was unmapped
    z = kernels.zeros(3_000_000)  # fresh memory reads as zero
    assert int(torch.count_nonzero(z)) == 0



def test_a_model_sized_step_of_outputs_is_reused_whole() -> None:
    """A GPT-2 worker-step's outputs (25 of 9 MB and more, here 40 of 9.4 MB: 376 MB) freed together all come back
    from the pool for the next step, not from fresh mappings (with 16 entries, 24 of the 40 were mapped afresh)."""
    import gc

    if buffers.POOL_BYTES < 376 << 20:
        pytest.skip("a machine with under 3 GB of memory keeps a smaller pool")
    buffers._pool.clear()
    buffers._returned.clear()
    n = 768 * 3072  # one GPT-2 MLP weight's gradient, float32
    step = [kernels.empty(n) for _ in range(40)]
    ptrs = {t.data_ptr() for t in step}
    del step
    gc.collect()
    again = [buffers._buffer(4 * n) for _ in range(40)]
    assert all(reused for _, reused in again)
    assert {t.data_ptr() for t, _ in again} == ptrs
