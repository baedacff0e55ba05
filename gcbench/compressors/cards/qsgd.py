"""Card of qsgd: what gcbench knows without importing :mod:`gcbench.compressors.qsgd`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, Param, Target

QSGD_CARD = CompressorInfo(
    name="qsgd",
    impl="gcbench.compressors.qsgd:QSGD",
    version=2,
    description="stochastic quantization to s levels per bucket of B, norm 2 or inf; fixed or Elias coding",
    paper="Alistarh et al. 2017, QSGD: Communication-Efficient SGD via Gradient Quantization and Encoding",
    biased=False, stateful=False, error_feedback="no", deterministic=False, reconstructed=False,
    params=(
        Param("s", int, 16, "number of quantization levels", low=1, high=2**20),
        Param("bucket", int, 512, "bucket size B (elements sharing one norm)", low=1),
        Param("norm", str, "inf", "bucket norm: '2' (theory) or 'inf' (the paper's experiments)", choices=("2", "inf")),
        Param("encoding", str, "fixed", "wire coding: fixed-width or the paper's Elias-ω code", choices=("fixed", "elias")),
        Param("min_numel", int, 0, "tensors with fewer elements are sent unquantized as float32 (paper: 10000)", low=0),
    ),
    target=Target(6.0),
    traffic_bytes=4.75,  # one read (a bucket's norm is taken in cache), about 6 bits out at s=16
    scalar_reads=2,
    scalar_reads_where=("encoding='elias' only (fixed reads none): encode reads the count of nonzero levels (the "
                        "header's nnz, sizing the positions) and the Elias stream's length; decode one folded validity "
                        "check of the stream, before any scatter"),
)

CARDS = (QSGD_CARD,)
