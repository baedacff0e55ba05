"""Card of adacomp: what gcbench knows without importing :mod:`gcbench.compressors.adacomp`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, Param, Target

QUANTIZE = ("sign_scale", "none")


ADACOMP_CARD = CompressorInfo(
    name="adacomp",
    impl="gcbench.compressors.adacomp:AdaComp",
    version=1,
    description="RECONSTRUCTED AdaComp: per-bin self-adjusting selection (|G+x| ≥ bin max|G|), sign·scale, own residue",
    paper="Chen et al. 2018, AdaComp: Adaptive Residual Gradient Compression for Data-Parallel Distributed Training (reconstructed)",
    biased=True, stateful=True, error_feedback="own", deterministic=True, reconstructed=True,
    params=(
        Param("bin_size", int, None, "bin length L; unset = 50 for conv and 1-D tensors, 500 for 2-D (FC, LSTM, embedding)",
              low=1, optional=True),
        Param("quantize", str, "sign_scale", "selected values: sign·scale (paper) or fp32 values ('none')", choices=QUANTIZE),
    ),
    target=Target(5.0),
    traffic_bytes=12.0,  # read x and the residue G, write G
    scalar_reads=2,
    scalar_reads_where=("compress: how many elements are selected (torch.nonzero: the stream's length); decompress: the "
                        "selected count (the bins' counts summed: the body's length, with the count check folded in) and the "
                        "check that every index lies in its bin"),
)

CARDS = (ADACOMP_CARD,)
