"""The device guard's counter (gcbench.core.host_sync): what it counts, in which threads, and that it leaves torch as it was."""

from __future__ import annotations

import threading

import numpy as np
import torch

from gcbench.core.host_sync import count_host_syncs, host_bytes, host_ints, host_upload


def test_every_conversion_counts_once() -> None:
    x = torch.arange(6.0)
    with count_host_syncs() as c:
        x.numpy()
        np.asarray(x)  # __array__ calls numpy(): one conversion
        x.tolist()
        torch.from_numpy(np.zeros(3))
        torch.as_tensor(np.zeros(3))
        torch.tensor(np.zeros(2))
        torch.frombuffer(bytearray(b"ab"), dtype=torch.uint8)
        torch.frombuffer(memoryview(bytearray(b"\x01\x02")), dtype=torch.uint8)  # a memoryview is host data too
    assert c.conversions == 8 and c.scalar_reads == 0
    assert all(" conversion " in s for s in c.sites) and c.sites[0].startswith("core/test_host_sync.py:")


def test_what_is_not_a_conversion_is_not_counted() -> None:
    x = torch.arange(6.0)
    with count_host_syncs() as c:
        torch.tensor([1, 2, 3])  # a Python list: host metadata, not tensor data
        torch.as_tensor(x)
        (x * 2).sum()
        x.to(torch.float64)
    assert (c.conversions, c.scalar_reads) == (0, 0)


def test_scalar_reads_count_in_this_thread_and_others() -> None:
    x = torch.arange(6.0)
    with count_host_syncs() as c:
        x.sum().item()
        bool(x.any())
        int(x[1])
        float(x[2])
        worker = threading.Thread(target=lambda: x.max().item())
        worker.start()
        worker.join()
        with torch.inference_mode():
            torch.ones(2).sum().item()  # an inference tensor's read reaches the mode as aten.item
    assert c.scalar_reads == 6 and c.conversions == 0


def test_a_conversion_in_another_thread_counts() -> None:
    x = torch.arange(3.0)
    with count_host_syncs() as c:
        worker = threading.Thread(target=x.numpy)
        worker.start()
        worker.join()
    assert c.conversions == 1


def test_the_sanctioned_host_reads_count_as_one_scalar_read_each() -> None:
    with count_host_syncs() as c:
        assert host_ints(torch.tensor([3, 1 << 41, 0])) == [3, 1 << 41, 0]
        assert host_bytes(torch.tensor([104, 105], dtype=torch.uint8)) == b"hi"
    assert (c.conversions, c.scalar_reads) == (0, 2)


def test_counters_nest_and_torch_is_restored_after() -> None:
    numpy, from_numpy, array = torch.Tensor.numpy, torch.from_numpy, torch.Tensor.__array__
    x = torch.arange(3.0)
    with count_host_syncs() as outer:
        x.numpy()
        with count_host_syncs() as inner:
            x.sum().item()
        x.sum().item()
    assert (outer.conversions, outer.scalar_reads) == (1, 2) and (inner.conversions, inner.scalar_reads) == (0, 1)
    assert torch.Tensor.numpy is numpy and torch.from_numpy is from_numpy and torch.Tensor.__array__ is array
    assert "numpy" not in vars(torch.Tensor)
    with count_host_syncs() as after:
        pass
    x.sum().item()
    x.numpy()
    assert (after.conversions, after.scalar_reads) == (0, 0)


def test_python_numbers_given_a_device_are_a_conversion_and_the_sanctioned_upload_is_not() -> None:
    # torch.tensor([...], device=d) copies a host buffer to d (a CUDA stream waits for it); on the CPU it is the same
    # call, so a CPU test sees what a GPU would pay; torch.full passes the number as the kernel's argument instead
    with count_host_syncs() as counted:
        torch.tensor([1, 2], dtype=torch.int64, device="cpu")
        torch.tensor(3.0, device=torch.device("cpu"))
        torch.as_tensor([4], device="cpu")
    assert (counted.conversions, counted.uploads) == (3, 0)
    with count_host_syncs() as counted:
        torch.tensor([1, 2])  # a host tensor, built on the host: nothing leaves a device
        torch.full((1,), 7, dtype=torch.int64, device="cpu")
        t = host_upload(b"\x01\x02\x03", "cpu")
    assert (counted.conversions, counted.uploads) == (0, 1)
    assert t.dtype == torch.uint8 and t.tolist() == [1, 2, 3]
