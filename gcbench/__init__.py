"""gcbench — a benchmark for gradient compression in distributed deep learning.

It replays recorded or live gradients through a registry of compressors and measures, on the
same tensors, the real compression ratio (bytes on the wire), the fidelity of the decompressed
gradient (bias, variance, ω, δ) and compress/decompress throughput.

Library entry points: :mod:`gcbench.registry` (``create``, ``names``), the
:class:`~gcbench.compressor.Compressor` contract, :mod:`gcbench.sources` and
:func:`gcbench.runner.run_suite`.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gcbench.compressor import Compressor, ExchangeResult, State, Traffic, decompress
    from gcbench.payload import Payload
    from gcbench.registry import create, get, names, register

# The public names are imported on first use (PEP 562), not with the package: ``python -m gcbench``
# imports this package before its ``__main__`` can install the signal handlers, and importing
# torch takes seconds, so an eager import here would turn an early Ctrl-C into a traceback.
_LAZY = {"Compressor": "compressor", "ExchangeResult": "compressor", "State": "compressor", "Traffic": "compressor",
         "decompress": "compressor", "Payload": "payload", "create": "registry", "get": "registry", "names": "registry",
         "register": "registry"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"gcbench.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gcbench' has no attribute {name!r}")

__all__ = [
    "Compressor",
    "ExchangeResult",
    "Payload",
    "State",
    "Traffic",
    "__version__",
    "create",
    "decompress",
    "get",
    "names",
    "register",
]
