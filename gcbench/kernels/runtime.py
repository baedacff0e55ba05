"""The kernels' runtime: the kernel switch, the numba import, the thread policy and the views.

Everything that decides *how* a kernel runs is here, once: whether numba kernels run at all
(:data:`NUMBA`, from the switch ``GCBENCH_KERNELS`` and whether numba imports), how many threads a
call may use (:func:`workers`, with the one serial cut-off :data:`SERIAL_MAX`), the fixed work
unit :data:`PART`, and the one thread pool every kernel runs on — numba's (OpenMP) pool — in two
shapes:

* :data:`PARALLEL` kernels (the dense ones: quantizers, sign and 1-bit, statistics, bit packing,
  the generator, top-k's histograms) are a numba ``prange`` over fixed parts, run by
  :func:`run_parallel`.  A Python pool running the same bodies as serial nogil kernels was
  measured on the 25.6M-element bench (issue 15, quiet machine): signSGD 1.01→1.48× a copy,
  natural 4.04→6.32×, 1-bit SGD 3.02→4.96×, QSGD 4.33→5.50×.
* :data:`KERNEL` kernels over variable-size items (the sparse writers and scatters, AdaComp's
  bins, PowerSGD's row blocks) take an item range ``(i0, i1)``; :func:`run_chunks` runs them on
  the calling thread alone below the cut-off, else through a ``prange`` launcher written once per
  kernel (:func:`launches`), one contiguous range of items per thread.  They ran on a Python
  ``ThreadPoolExecutor`` until issue 15's thread-model A/B: whole compress / decompress of the
  25.6M-element tensor as ×copy, medians of 5 rounds per process, three processes per variant
  alternated (load 1.1–1.3 on the 2 shared cores; spread between processes of one variant up to
  ±10%), Python pool → numba pool: compress topk 4.55→4.25 (a second run of 4 processes each:
  4.08→4.33), dgc 4.94→3.34, graddrop 5.29→4.39, threshold 8.38→7.35, sdagc 4.85→3.29,
  topk_dither 5.58→5.91 (second run 6.38→6.05), randomk 0.90→0.90, adacomp 6.01→4.57, powersgd
  7.71→6.31; decompress topk 1.33→0.74, threshold 4.24→2.85, adacomp 2.68→1.45, powersgd
  3.27→1.71, the others equal or lower.  One pool also stops the two from spinning against each
  other in a compressor that uses both (an A/B interleaved in one process slowed whichever
  variant ran after the other's pool had been busy, so it was measured process by process).

A generic ``prange`` launcher taking the kernel as an argument, or a closure over it, was tried
and dropped: numba cannot cache either (every process recompiled it and the cache index grew
until loading it raised ``ReferenceError``), hence one small launcher per kernel.  Work is cut
into fixed parts, never by thread count, so results (float sums included) do not depend on the
number of threads.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypedDict

import numpy as np
import torch

#: The kernel switch: ``GCBENCH_KERNELS=torch`` runs every compressor on its plain torch path on
#: the CPU — the path a CUDA device takes — so that path is tested where no GPU is lent;
#: ``auto`` (the default) uses the numba kernels where they apply.
KERNEL_MODES = ("auto", "torch")


def kernel_mode() -> str:
    """The kernel switch's value (``auto`` or ``torch``); anything else is refused by the CLI."""
    return os.environ.get("GCBENCH_KERNELS", "auto").strip().lower() or "auto"


#: what ran a slow path because numba failed (to import, or to build a kernel), one line each; the results
#: file's environment records them (``numba_error``).  Empty when numba works or ``GCBENCH_KERNELS=torch`` chose
#: the torch path.
SLOW_PATHS: list[str] = []
#: set once the slow path has been said on stderr: the command's worker processes inherit it and stay quiet
SLOW_PATH_SAID_ENV = "GCBENCH_SLOW_PATH_SAID"


def slow_path(what: str, exc: BaseException) -> None:
    """Record that ``what`` failed with ``exc`` and the slow path runs instead; say so on stderr, once per command.

    numba is a dependency: without it every compressor still makes the same bytes on its torch or
    Python path, but its timings are several times slower, so a broken install must not pass unnoticed.
    """
    detail = str(exc).strip().splitlines()
    reason = f"{what}: {type(exc).__name__}{': ' + detail[0] if detail else ''}"
    SLOW_PATHS.append(reason)
    if os.environ.get(SLOW_PATH_SAID_ENV):
        return
    os.environ[SLOW_PATH_SAID_ENV] = "1"
    print(f"gcbench: warning: {reason}; the kernels run on their slow torch and Python paths (the same bytes, slower "
          "timings). Fix: pip install --force-reinstall 'numba>=0.59', or set GCBENCH_KERNELS=torch to choose that path.",
          file=sys.stderr)


try:
    if kernel_mode() == "torch":
        raise ImportError("GCBENCH_KERNELS=torch: the torch path everywhere")
    import numba
    from numba import njit, prange
    from numba.extending import intrinsic

    NUMBA = True
except Exception as exc:  # the torch path asked for, or numba missing or broken: compressors use their torch paths
    NUMBA = False
    if kernel_mode() != "torch":
        slow_path("numba failed to import", exc)
    prange = range  # type: ignore[misc]  # numba's stubs make prange a class; the builtin range stands in for it

    def njit(*args: Any, **kwargs: Any) -> Any:  # type: ignore[no-redef]  # the stand-in without numba
        """Stand-in decorator: the kernels stay importable (and unused) without numba."""
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

    def intrinsic(f: Any) -> Any:  # type: ignore[no-redef]  # the stand-in without numba
        """Stand-in decorator: the intrinsics below are never called without numba."""
        return f



@intrinsic
def f32_bits(typingctx, x):  # pragma: no cover - compiled
    """The bit pattern of a float32 as an int32 (a register move): ``f32_bits(v) & 0x7FFFFFFF`` orders
    |v| as integers, NaNs above every number, so a max of it is a plain integer reduction (LLVM
    vectorises it; a float max with NaN checks it did not: 18 ms against 12.5 over 25.6M elements)."""
    from llvmlite import ir
    from numba import types

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def bits_f32(typingctx, b):  # pragma: no cover - compiled
    """Inverse of :func:`f32_bits`: the float32 whose bit pattern is the int32 ``b``."""
    from llvmlite import ir
    from numba import types

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@intrinsic
def ctz64(typingctx, v):  # pragma: no cover - compiled
    """Trailing zero bits of a nonzero uint64 (one instruction; the result for 0 is undefined)."""
    from llvmlite import ir
    from numba import types

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))

    return types.uint64(types.uint64), codegen


if not NUMBA:  # the kernels run as plain Python (the torch path's decoders call a few): the bit casts as NumPy views
    def f32_bits(x: Any) -> np.int32:  # type: ignore[misc]  # the plain-Python stand-in of the intrinsic
        """Plain-Python :func:`f32_bits`."""
        return np.float32(x).view(np.int32)

    def bits_f32(b: Any) -> np.float32:  # type: ignore[misc]  # the plain-Python stand-in of the intrinsic
        """Plain-Python :func:`bits_f32`."""
        return np.int32(b).view(np.float32)


PART = 1 << 16  # elements per work item (256 KiB of float32): fixed, so results do not depend on the thread count
SUB = 1024  # elements per inner block: the uniforms and codes of one block stay in L1
SERIAL_MAX = 1 << 20  # inputs below this run on the calling thread alone
class JitOptions(TypedDict, total=False):
    """The keywords of ``njit`` that :data:`KERNEL` and :data:`PARALLEL` set."""

    nogil: bool
    parallel: bool
    cache: bool


KERNEL: JitOptions = dict(nogil=True, cache=True)  # a serial kernel over a range of items, which :func:`run_chunks` runs on numba's pool
#: a kernel whose ``prange`` over fixed parts :func:`run_parallel` runs on numba's pool
PARALLEL: JitOptions = dict(parallel=True, cache=True)


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

    Waking worker threads costs microseconds on an idle machine, but where other processes hold the
    cores a parallel region can wait 8 ms for its sleeping workers to get one (torch's own parallel
    copy pays the same), which is 10–20× the whole one-thread
    compression of a 1M-element tensor (0.4–0.8 ms).  Below 2^20 elements the second thread
    would save at most a fraction of a millisecond, so small tensors never risk the stall.
    """
    if numel is not None and numel < SERIAL_MAX:
        return 1
    n = max(1, torch.get_num_threads())
    return n if n_items is None else max(1, min(n, n_items))


def run_parallel(kernel: Callable[..., Any], numel: int, *args: Any) -> None:
    """Run the :data:`PARALLEL` kernel ``kernel(*args)`` (a ``prange`` over fixed parts) on the
    threads :func:`workers` gives for ``numel`` elements (numba's thread count is per calling thread)."""
    if NUMBA:
        # numba's pool has at most NUMBA_NUM_THREADS threads
        nth = min(workers(numel), numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]  # set at import, unseen by its stubs
        if numba.get_num_threads() != nth:
            numba.set_num_threads(nth)
    kernel(*args)


_LAUNCHERS: dict[Any, Callable[..., Any]] = {}


def launches(kernel: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Compile the decorated function as :data:`PARALLEL` and register it as the launcher of the
    :data:`KERNEL` item kernel ``kernel`` (what :func:`run_chunks` runs above the cut-off).

    The launcher is written once per kernel, at module level (numba caches it; one generic launcher
    taking the kernel as an argument, or a closure over it, is recompiled in every process)::

        @launches(_k)
        def _k_par(nth, n, *args):
            for p in prange(nth):
                _k(n * p // nth, n * (p + 1) // nth, *args)
    """
    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        launch = njit(**PARALLEL)(f)
        _LAUNCHERS[kernel] = launch
        return launch
    return register


def run_chunks(kernel: Callable[..., Any], n_items: int, numel: int, *args: Any) -> None:
    """Run the :data:`KERNEL` item kernel ``kernel(i0, i1, *args)`` over ``[0, n_items)``: on the calling
    thread alone when :func:`workers` gives one thread for ``numel`` elements (the items cover them),
    else through its :func:`launches` launcher on numba's pool, one contiguous range of items per
    thread — the same pool as :func:`run_parallel`, so there is one thread model.
    """
    t = workers(numel, n_items)
    if t <= 1 or not NUMBA:
        kernel(0, n_items, *args)
        return
    nth = min(t, numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]  # numba.config sets it at import, unseen by its stubs
    if numba.get_num_threads() != nth:
        numba.set_num_threads(nth)
    _LAUNCHERS[kernel](nth, n_items, *args)


@njit(inline="always")
def n_parts(n):  # pragma: no cover - compiled
    """How many :data:`PART`-element parts cover ``n`` elements: a :data:`PARALLEL` kernel's ``prange``."""
    return (n + PART - 1) // PART


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
