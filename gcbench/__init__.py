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

from gcbench.compressor import Compressor, ExchangeResult, State, Traffic, decompress
from gcbench.payload import Payload
from gcbench.registry import create, get, names, register

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
