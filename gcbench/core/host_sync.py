"""Counting what leaves the device: tensor<->NumPy conversions and scalar reads (the device guard's counter).

A device path that converts a tensor to NumPy (or NumPy or Python bytes to a tensor) moves the data through host
memory, and a scalar read (``.item()``, ``bool()``, ``int()`` or ``float()`` of a tensor: the operator
``aten::_local_scalar_dense``) makes the host wait for the device.  :func:`count_host_syncs` counts both while it is
active, in every thread (the ``torch.distributed`` transport resumes a protocol in the collectives' callback threads):

* conversions: ``Tensor.numpy``, ``Tensor.__array__`` (``np.asarray(t)``), ``Tensor.tolist``, ``torch.from_numpy``,
  ``torch.as_tensor`` / ``torch.tensor`` / ``torch.frombuffer`` given an ``ndarray`` or a bytes-like object, and
  ``torch.as_tensor`` / ``torch.tensor`` given Python numbers and a ``device`` (a host buffer copied there: on CPU
  the same call, so a CPU test sees it); one count per outermost call: ``__array__`` calling ``numpy`` counts once.
  The functions are replaced while a
  counter is active and restored when the last one exits;
* scalar reads: a :class:`~torch.utils._python_dispatch.TorchDispatchMode` counts ``aten._local_scalar_dense`` in
  the thread that entered the counter (every tensor; an inference tensor's read reaches it as ``aten.item``), and a
  kernel registered at the
  operator's autograd keys (CPU and CUDA) counts the other threads' reads (tensors outside inference mode), so
  no read is counted twice.

:func:`host_ints` and :func:`host_bytes` are the sanctioned reads a device path makes where it must (a transport's
message sizes before it allocates, the headers it parses): each counts as one scalar read.  :func:`host_upload` is the
sanctioned way the other way (the headers and framing a transport sends, born on the host): each counts as one upload.

Used by ``tests/compressors/test_device_guard.py`` (every compressor's torch path, the simulated and the real
exchange) and ``benchmarks/device_check.py`` (the same on a GPU).  It is a test instrument: the replacement functions
and the dispatch mode slow every call while active.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

_LOCK = threading.RLock()
_ACTIVE: list[HostSyncs] = []
_LOCAL = threading.local()  # depth of the conversion wrappers in this thread: only the outermost call counts
_SCALAR = torch.ops.aten._local_scalar_dense.default
#: what the dispatch mode counts: the read itself, and ``aten.item``, which an inference tensor's read reaches the mode as
#: (its decomposition into the read then runs below the mode, unseen: one count)
_READS = (_SCALAR, torch.ops.aten.item.default)
#: sites kept per counter (the first ones): enough to find a conversion, bounded for a loop that makes thousands
MAX_SITES = 20


@dataclass
class HostSyncs:
    """What one :func:`count_host_syncs` block counted; ``sites`` says where (``file:line what``), the first few."""

    conversions: int = 0
    scalar_reads: int = 0
    uploads: int = 0  # host-born bytes copied to the device the sanctioned way (:func:`host_upload`)
    sites: list[str] = field(default_factory=list)
    owner: int = field(default_factory=threading.get_ident)

    def _note(self, kind: str, what: str) -> None:
        if kind == "conversion":
            self.conversions += 1
        elif kind == "upload":
            self.uploads += 1
        else:
            self.scalar_reads += 1
        if len(self.sites) < MAX_SITES:
            self.sites.append(f"{_caller()} {kind} {what}")

    def __str__(self) -> str:
        return f"{self.conversions} conversion(s), {self.scalar_reads} scalar read(s), {self.uploads} upload(s)"


def _caller() -> str:
    """The innermost frame outside this module and torch: where the code that asked for the host lives."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if name != __file__ and "/torch/" not in name:
            return f"{name.rsplit('/', 2)[-2]}/{name.rsplit('/', 1)[-1]}:{f.f_lineno}"
        f = f.f_back  # type: ignore[assignment]  # the outermost frame's f_back is None, which ends the loop
    return "?"


def _record(kind: str, what: str, *, thread: int | None = None) -> None:
    with _LOCK:
        for counter in _ACTIVE:
            if thread is None or counter.owner != thread:
                counter._note(kind, what)


def _is_host_data(obj: Any) -> bool:
    return isinstance(obj, np.ndarray | bytes | bytearray | memoryview)


Condition = Callable[[tuple[Any, ...], dict[str, Any]], bool]


def _counting(name: str, fn: Callable[..., Any], when: Condition | None) -> Callable[..., Any]:
    """``fn`` that records a conversion (when ``when(args, kwargs)``, or always) unless called inside another counted call."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_LOCAL, "depth", 0)
        if depth == 0 and (when is None or when(args, kwargs)):
            _record("conversion", name)
        _LOCAL.depth = depth + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _LOCAL.depth = depth

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]  # for introspection, as functools.wraps sets it
    return wrapper


def _first_is_host(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return bool(args) and _is_host_data(args[0])


def _host_values_to_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Host data, or Python numbers (a list, a tuple, a scalar) given a ``device``: values copied from host memory to
    where the device path runs, which a CUDA stream waits for (``torch.full`` passes a number as a kernel argument)."""
    if not args:
        return False
    return _is_host_data(args[0]) or (kwargs.get("device") is not None and isinstance(args[0], list | tuple | int | float))


#: (owner, attribute, counted only when) of every replaced conversion; None: always a conversion
_TARGETS: tuple[tuple[Any, str, Condition | None], ...] = (
    (torch.Tensor, "numpy", None),
    (torch.Tensor, "__array__", None),
    (torch.Tensor, "tolist", None),
    (torch, "from_numpy", None),
    (torch, "as_tensor", _host_values_to_device),
    (torch, "tensor", _host_values_to_device),
    (torch, "frombuffer", _first_is_host),
)
_SAVED: list[tuple[Any, str, Any, bool]] = []  # (owner, attribute, original, whether it was the owner's own attribute)
_LIBRARY: list[Any] = []


class _ScalarReads(TorchDispatchMode):
    """Counts ``aten._local_scalar_dense`` in the thread that entered it (for every active counter of that thread)."""

    def __init__(self, counter: HostSyncs) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        if func in _READS:
            with _LOCK:
                self.counter._note("scalar read", str(func))
        return func(*args, **(kwargs or {}))


def _other_thread_read(t: torch.Tensor) -> Any:
    """The scalar read's autograd-key kernel while counting: count it for counters of other threads, then read."""
    _record("scalar read", "aten._local_scalar_dense (another thread)", thread=threading.get_ident())
    with torch._C._AutoDispatchBelowAutograd():
        return _SCALAR(t)


def _install() -> None:
    for owner, attr, when in _TARGETS:
        original = getattr(owner, attr)
        _SAVED.append((owner, attr, original, attr in vars(owner)))
        setattr(owner, attr, _counting(f"{getattr(owner, '__name__', owner)}.{attr}", original, when))
    lib = torch.library.Library("aten", "IMPL")  # a temporary override, destroyed on exit
    for key in ("AutogradCPU", "AutogradCUDA"):
        lib.impl("_local_scalar_dense", _other_thread_read, key)
    _LIBRARY.append(lib)


def _uninstall() -> None:
    while _SAVED:
        owner, attr, original, own = _SAVED.pop()
        if own:
            setattr(owner, attr, original)
        else:
            delattr(owner, attr)
    while _LIBRARY:
        _LIBRARY.pop()._destroy()


def _host_read(t: torch.Tensor, what: str) -> torch.Tensor:
    """``t`` on the CPU, counted as one scalar read (one synchronisation) by every active counter, never as a conversion."""
    _record("scalar read", f"host read of {t.numel()} {what}")
    return t.detach().cpu()


def host_ints(t: torch.Tensor) -> list[int]:
    """The integers of a small tensor on the host: one read (a transport's message sizes).

    The one sanctioned way a device path reads values to the host: :func:`count_host_syncs` counts it as one scalar
    read (it is one synchronisation and one small copy, whatever the count), not as a conversion.
    """
    depth = getattr(_LOCAL, "depth", 0)
    _LOCAL.depth = depth + 1  # the conversion inside is this read's, counted above
    try:
        return [int(v) for v in _host_read(t, "integers").tolist()]
    finally:
        _LOCAL.depth = depth


def host_upload(data: bytes, device: torch.device | str) -> torch.Tensor:
    """Host-born bytes (payload headers, a transport's size words and framing) as one ``uint8`` tensor on ``device``:
    the one sanctioned way such bytes reach the device, one small copy, counted as one upload (never as a conversion),
    so a guard can bound how many a step makes."""
    _record("upload", f"upload of {len(data)} bytes")
    depth = getattr(_LOCAL, "depth", 0)
    _LOCAL.depth = depth + 1
    try:
        return torch.tensor(list(data), dtype=torch.uint8, device=device)
    finally:
        _LOCAL.depth = depth


def host_bytes(t: torch.Tensor) -> bytes:
    """The bytes of a small 1-D ``uint8`` tensor on the host: one read (received payload headers), as :func:`host_ints`."""
    depth = getattr(_LOCAL, "depth", 0)
    _LOCAL.depth = depth + 1
    try:
        return bytes(_host_read(t, "bytes").contiguous().numpy().tobytes())
    finally:
        _LOCAL.depth = depth


@contextmanager
def count_host_syncs() -> Iterator[HostSyncs]:
    """Count tensor<->NumPy conversions and scalar reads, in every thread, until the block exits (module docstring).

    Counters nest: each active counter sees every event.  The counts are read from the yielded :class:`HostSyncs`.
    """
    counter = HostSyncs()
    with _LOCK:
        if not _ACTIVE:
            _install()
        _ACTIVE.append(counter)
    try:
        with _ScalarReads(counter):
            yield counter
    finally:
        with _LOCK:
            _ACTIVE.remove(counter)
            if not _ACTIVE:
                _uninstall()
