"""gcbench — a benchmark for gradient compression in distributed deep learning.

It replays recorded or live gradients through a registry of compressors and measures, on the
same tensors, the real compression ratio (bytes on the wire), the fidelity of the decompressed
gradient (bias, variance, ω, δ) and compress/decompress throughput.

Library entry points: :mod:`gcbench.compressors.registry` (``create``, ``names``), the
:class:`~gcbench.core.compressor.Compressor` contract, :mod:`gcbench.sources` and
:func:`gcbench.measure.runner.run_suite`.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gcbench.compressors.registry import create, decompress, get, names, register
    from gcbench.core.compressor import Compressor, ExchangeResult, State, Traffic
    from gcbench.core.payload import Payload

# The public names are imported on first use (PEP 562), not with the package: ``python -m gcbench``
# imports this package before its ``__main__`` can install the signal handlers, and importing
# torch takes seconds, so an eager import here would turn an early Ctrl-C into a traceback.
_LAZY = {"Compressor": "core.compressor", "ExchangeResult": "core.compressor", "State": "core.compressor",
         "Traffic": "core.compressor", "decompress": "compressors.registry", "Payload": "core.payload", "create": "compressors.registry",
         "get": "compressors.registry", "names": "compressors.registry", "register": "compressors.registry"}


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
