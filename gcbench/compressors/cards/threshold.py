"""Card of threshold: what gcbench knows without importing :mod:`gcbench.compressors.threshold`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, Param, Target
from gcbench.core.params import coding_param

THRESHOLD_CARD = CompressorInfo(
    name="threshold",
    impl="gcbench.compressors.threshold:Threshold",
    version=1,
    description="send entries with |x+e| > tau (fixed absolute threshold), error feedback always on",
    paper="Strom 2015; Sahu et al. 2021, Rethinking gradient sparsification as total error minimization (reference point)",
    biased=True, stateful=True, error_feedback="always", deterministic=True, reconstructed=False,
    params=(
        Param("tau", float, 1e-3, "absolute threshold: entries with |x + e| > tau are sent", low=0.0, low_open=True),
        coding_param("fixed"),
    ),
    target=Target(8.0),
    traffic_bytes=12.0,  # read x and the residual, write the residual (the sparse output depends on the data)
    scalar_reads=2,
    scalar_reads_where=('compress: how many entries pass tau (torch.nonzero: the size of the index list), and the body length '
                        "of a variable-length index coding (delta-varint, elias); decompress: the sparse codec's one folded "
                        'validity check'),
)

CARDS = (THRESHOLD_CARD,)
