"""Results do not depend on the thread count: each kernel run on one thread and on two (every input
cut into the same fixed parts) gives the same bits; and the package sits below core."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.kernels import runtime
from tests.kernels.helpers import t3

D = 3 * kernels.PART + 4321  # several parts, a ragged last one


@pytest.fixture(autouse=True)
def threads() -> int:
    """This module switches the thread count itself (see :func:`_on`)."""
    return torch.get_num_threads()


def _on(nth: int, fn: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``fn()`` with ``nth`` kernel threads, every input large enough for them."""
    before = torch.get_num_threads()
    with monkeypatch.context() as m:
        m.setattr(runtime, "SERIAL_MAX", 0)
        torch.set_num_threads(nth)
        try:
            return fn()
        finally:
            torch.set_num_threads(before)


def _bits(value: Any) -> list[bytes]:
    """Every array (or float) of a result as raw bytes, in order."""
    items = value if isinstance(value, tuple) else (value,)
    return [np.asarray(v).tobytes() for v in items]


def _ops() -> dict[str, Callable[[], Any]]:
    x = t3(D, 1)
    e = t3(D, 2)

    def with_out(fn: Callable[[np.ndarray], None], nbytes: int) -> Callable[[], np.ndarray]:
        def run() -> np.ndarray:
            out = np.zeros(nbytes, np.uint8)
            fn(out)
            return out
        return run

    def ef(fn: Callable[[np.ndarray], Any]) -> Callable[[], tuple[Any, np.ndarray]]:
        def run() -> tuple[Any, np.ndarray]:
            buf = e.copy()
            return fn(buf), buf
        return run

    def momentum() -> tuple[float, np.ndarray, np.ndarray]:
        u, v = e.copy(), x[::-1].copy()
        return kernels.momentum_update_std(u, v, x, 0.9, 0.5), u, v

    def adacomp(sign_mode: bool) -> Callable[[], tuple[Any, ...]]:
        def run() -> tuple[Any, ...]:
            buf, L, ew = e.copy(), 50, 7 if sign_mode else 6
            gmax, counts = kernels.adacomp_bin_stats(buf, x, L)
            stream = np.zeros((counts.size * 6 + int(counts.sum()) * ew + 7) // 8, np.uint8)
            vals, dec = kernels.adacomp_encode(buf, x, L, gmax, counts, np.float32(1.25), sign_mode, ew, stream, counts.size * 6, True)
            out, _ = kernels.adacomp_decode(stream, counts.size * 6, ew, counts, L, sign_mode, 1.25, vals, D)
            return gmax, counts, stream, vals, dec, buf, out.numpy()
        return run

    qsgd_norms = np.zeros(-(-D // 512), np.float32)
    return {
        "rand24": lambda: kernels.rand24(5, D),
        "std_and_absmax": lambda: kernels.std_and_absmax(x),
        "l2norm": lambda: kernels.l2norm(x),
        "population_std": lambda: kernels.population_std(x),
        "pack_fields": lambda: kernels.pack_fields(np.arange(D, dtype=np.int64), 19),
        "unpack_fields": lambda: kernels.unpack_fields(kernels.pack_fields(np.arange(D, dtype=np.int64), 19), 19, D),
        "sign_pack": with_out(lambda out: kernels.sign_pack(x, out), (D + 7) // 8),
        "terngrad_codes": with_out(lambda out: kernels.terngrad_codes(x, 2.5, 3.0, 7, out), (D + 3) // 4),
        "natural_encode": with_out(lambda out: kernels.natural_encode(x, 7, out), D + (D + 7) // 8),
        "qsgd_encode": with_out(lambda out: kernels.qsgd_encode(x, 512, False, 16, 7, 6, qsgd_norms, out), (6 * D + 7) // 8),
        "ef_sign_form": ef(lambda buf: kernels.ef_sign_form(x, buf, True)),
        "topk_select": ef(lambda buf: kernels.topk_select(x, 999, buf, True)),
        "count_chunks": lambda: kernels.count_chunks(x, np.float32(1.5)),
        "momentum_update_std": momentum,
        "random_subset": lambda: kernels.random_subset(3, D, 5000),
        "adacomp_sign_scale": adacomp(True),
        "adacomp_none": adacomp(False),
    }


@pytest.mark.parametrize("name", sorted(_ops()))
def test_one_and_two_threads_give_the_same_bits(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    one = _on(1, _ops()[name], monkeypatch)
    two = _on(2, _ops()[name], monkeypatch)
    assert _bits(one) == _bits(two)


def test_workers_follow_torch_and_the_one_serial_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert runtime.workers(runtime.SERIAL_MAX - 1) == 1  # small inputs stay on the calling thread
    assert runtime.workers(runtime.SERIAL_MAX) == 2
    assert runtime.workers(runtime.SERIAL_MAX, n_items=1) == 1  # never more threads than items


def test_parallel_kernels_run_on_the_threads_workers_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_parallel sets numba's pool to :func:`runtime.workers` (the serial cut-off included) before the kernel runs."""
    import numba

    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    seen: list[int] = []
    for numel in (runtime.SERIAL_MAX - 1, runtime.SERIAL_MAX, 1):
        runtime.run_parallel(lambda: seen.append(numba.get_num_threads()), numel)
    two = min(2, numba.config.NUMBA_NUM_THREADS)
    assert seen == [1, two, 1]


def test_item_kernels_run_on_numbas_pool_through_their_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_chunks: the kernel itself over every item below the cut-off; above it, its registered
    launcher on numba's pool with the threads :func:`runtime.workers` gives, the items split into
    contiguous ranges that cover each item once."""
    import numba

    @numba.njit(nogil=True)
    def kernel(i0: int, i1: int, out: np.ndarray) -> None:  # pragma: no cover - numba
        for i in range(i0, i1):
            out[i] += 1

    calls: list[int] = []

    def launch(nth: int, n: int, out: np.ndarray) -> None:  # the shape of every launcher, run here in Python
        calls.append(numba.get_num_threads())
        for p in range(nth):
            kernel(n * p // nth, n * (p + 1) // nth, out)

    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setitem(runtime._LAUNCHERS, kernel, launch)
    out = np.zeros(7, np.int64)
    runtime.run_chunks(kernel, 7, runtime.SERIAL_MAX - 1, out)  # small: no launcher
    assert calls == [] and out.tolist() == [1] * 7
    runtime.run_chunks(kernel, 7, runtime.SERIAL_MAX, out)
    assert calls == [min(2, numba.config.NUMBA_NUM_THREADS)] and out.tolist() == [2] * 7


def test_every_item_kernel_has_a_cached_launcher() -> None:
    """Each registered launcher is a cached numba ``prange`` function (one per kernel, never generic)."""
    import gcbench.compressors.powersgd  # noqa: F401  (its row-block kernels register theirs)

    assert len(runtime._LAUNCHERS) >= 17
    for kernel, launch in runtime._LAUNCHERS.items():
        assert launch is not kernel and launch.targetoptions.get("parallel") and launch._cache.__class__.__name__ != "NullCache"


def test_the_package_imports_nothing_above_it() -> None:
    """Kernels sit below core: importing them loads no payload, codec, compressor or measure code."""
    above = ("core", "compressors", "sources", "results", "measure", "report", "distributed", "integrations", "cli")
    code = ("import sys, gcbench.kernels; "
            f"print(sorted(m for m in sys.modules if m.startswith('gcbench.') and m.split('.')[1] in {above!r}))")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
