"""The kernels' runtime: the kernel switch, the numba import, the one thread model and the views.

Everything that decides *how* a kernel runs is here, once: whether numba kernels run at all
(:data:`NUMBA`, from the switch ``GCBENCH_KERNELS`` and whether numba imports), how many threads a
call may use (:func:`workers`, with the one serial cut-off :data:`SERIAL_MAX`), and the fixed work
unit :data:`PART`.  Every kernel is a serial ``numba.njit(nogil=True)`` function over a range of
fixed parts; :func:`run_chunks` (a kernel over item ranges) and :func:`run_threads` (a kernel
that takes its :func:`share` of the parts) run it on the calling thread alone, or as the body of
one numba ``prange`` loop over the threads (:func:`_launch_threads`, :func:`_launch_chunks`), so
every threaded kernel runs on numba's OpenMP pool.  That pool was measured against a Python
``ThreadPoolExecutor`` running the same nogil kernels (issue 15): on the 25.6M-element bench the
Python pool made signSGD 1.01→1.48× a copy, natural compression 4.04→6.32×, 1-bit SGD
3.02→4.96×, and the sparse kernels no faster.  Work is cut into fixed parts, never by thread
count, so results (float sums included) do not depend on the number of threads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

#: The kernel switch: ``GCBENCH_KERNELS=torch`` runs every compressor on its plain torch path on
#: the CPU — the path a CUDA device takes — so that path is tested where no GPU is lent;
#: ``auto`` (the default) uses the numba kernels where they apply.
KERNEL_MODES = ("auto", "torch")


def kernel_mode() -> str:
    """The kernel switch's value (``auto`` or ``torch``); anything else is refused by the CLI."""
    return os.environ.get("GCBENCH_KERNELS", "auto").strip().lower() or "auto"


try:
    if kernel_mode() == "torch":
        raise ImportError("GCBENCH_KERNELS=torch: the torch path everywhere")
    import numba
    from numba import njit, prange

    NUMBA = True
except Exception:  # numba missing or broken, or the torch path asked for: compressors use their torch paths
    NUMBA = False
    prange = range

    def njit(*args: Any, **kwargs: Any) -> Any:  # type: ignore[no-redef]
        """Stand-in decorator: the kernels stay importable (and unused) without numba."""
        if args and callable(args[0]):
            return args[0]
        return lambda f: f


PART = 1 << 16  # elements per work item (256 KiB of float32): fixed, so results do not depend on the thread count
SUB = 1024  # elements per inner block: the uniforms and codes of one block stay in L1
SERIAL_MAX = 1 << 20  # inputs below this run on the calling thread alone
KERNEL = dict(nogil=True, cache=True)  # the options of a serial kernel that :func:`run_chunks` runs on its threads


def available() -> bool:
    """Whether the numba kernels can run in this process."""
    return NUMBA


def cpu_fast(*tensors: torch.Tensor) -> bool:
    """True when every tensor is on the CPU and the numba kernels are available."""
    return NUMBA and all(t.device.type == "cpu" for t in tensors)


def fast_cpu(*tensors: torch.Tensor) -> bool:
    """True when the numba kernels apply: numba present, every tensor a contiguous CPU float32 tensor."""
    return cpu_fast(*tensors) and all(t.dtype == torch.float32 and t.is_contiguous() for t in tensors)


def fused_ef_ok(x: torch.Tensor) -> bool:
    """Whether a compressor's fused CPU error-feedback path applies to ``x``."""
    return x.is_floating_point() and x.numel() > 0 and cpu_fast(x)


def workers(numel: int | None, n_items: int | None = None) -> int:
    """Threads for a call over ``numel`` elements (in ``n_items`` work items): one below :data:`SERIAL_MAX`,
    else as many as torch uses (``torch.set_num_threads`` is the one knob), at most one per item.

    Waking worker threads costs microseconds on an idle machine, but on these shared 2-core
    machines some processes paid 8 ms per parallel region (sleeping workers waiting for a busy
    core; torch's own parallel copy paid the same), which is 10–20× the whole one-thread
    compression of a 1M-element tensor (0.4–0.8 ms).  Below 2^20 elements the second thread
    would save at most a fraction of a millisecond, so small tensors never risk the stall.
    """
    if numel is not None and numel < SERIAL_MAX:
        return 1
    n = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS if NUMBA else 1))
    return n if n_items is None else max(1, min(n, n_items))


def _use_threads(nth: int) -> None:
    """numba's thread count for the next parallel region on this thread (its own setting, per caller)."""
    if numba.get_num_threads() != nth:
        numba.set_num_threads(nth)


@njit(parallel=True, cache=True)
def _launch_threads(kernel, nth, args):  # pragma: no cover - compiled
    """``kernel(tid, nth, *args)`` for every ``tid`` in ``[0, nth)``, one per thread of numba's pool."""
    for tid in prange(nth):
        kernel(tid, nth, *args)


@njit(parallel=True, cache=True)
def _launch_chunks(kernel, n_items, nth, args):  # pragma: no cover - compiled
    """``kernel(i0, i1, *args)`` over ``nth`` contiguous ranges of ``[0, n_items)``, one per thread of numba's pool."""
    for tid in prange(nth):
        kernel(n_items * tid // nth, n_items * (tid + 1) // nth, *args)


def run_chunks(kernel: Callable[..., Any], n_items: int, numel: int, *args: Any) -> None:
    """Run the ``nogil`` kernel ``kernel(i0, i1, *args)`` over ``[0, n_items)``, one contiguous range per thread.

    ``numel`` (the elements the items cover) decides by :func:`workers` whether threads are worth starting.
    """
    t = workers(numel, n_items)
    if t <= 1:
        kernel(0, n_items, *args)
        return
    _use_threads(t)
    _launch_chunks(kernel, n_items, t, args)


def run_threads(kernel: Callable[..., Any], numel: int, *args: Any) -> None:
    """Run the ``nogil`` kernel ``kernel(tid, nth, *args)`` once per thread, ``tid`` in ``[0, nth)``, with
    ``nth`` from :func:`workers`; each call takes its :func:`share` of the kernel's fixed parts."""
    nth = workers(numel)
    if nth <= 1:
        kernel(0, 1, *args)
        return
    _use_threads(nth)
    _launch_threads(kernel, nth, args)


@njit(inline="always")
def share(n, tid, nth):  # pragma: no cover - compiled
    """The parts ``[lo, hi)`` of ``n`` that thread ``tid`` of ``nth`` takes (contiguous, every part once)."""
    return n * tid // nth, n * (tid + 1) // nth


@njit(inline="always")
def my_parts(n, tid, nth):  # pragma: no cover - compiled
    """The :data:`PART`-element parts of ``n`` elements that thread ``tid`` of ``nth`` takes (:func:`share`)."""
    return share((n + PART - 1) // PART, tid, nth)


@njit(inline="always")
def bounds(i, size, n):  # pragma: no cover - compiled
    """Elements ``[lo, hi)`` of work item ``i`` of ``size`` elements out of ``n``."""
    lo = i * size
    return lo, min(n, lo + size)


def n_chunks(n: int, chunk: int = PART) -> int:
    """Work items of ``chunk`` elements covering ``n`` (at least one)."""
    return max(1, -(-n // chunk))


def flat_f32(t: torch.Tensor) -> np.ndarray:
    """Contiguous flat float32 NumPy view of a CPU tensor (copied only if needed)."""
    return t.detach().reshape(-1).to(torch.float32).contiguous().numpy()


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """NumPy view of a contiguous CPU tensor (shares memory: writes go to the tensor)."""
    return t.detach().numpy()
