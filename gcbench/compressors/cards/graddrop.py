"""Card of graddrop: what gcbench knows without importing :mod:`gcbench.compressors.graddrop`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, Param, Target
from gcbench.core.params import coding_param

QUANTIZE = ("none", "1bit", "2bit")


GRADDROP_CARD = CompressorInfo(
    name="graddrop",
    impl="gcbench.compressors.graddrop:GradDrop",
    version=2,
    description="gradient dropping: drop |x+e| below the sampled R-quantile (global or per layer), residual kept; 1/2-bit option",
    paper="Aji & Heafield 2017, Sparse Communication for Distributed Gradient Descent (Marian implementation)",
    biased=True, stateful=True, error_feedback="always", deterministic=True, reconstructed=False,
    params=(
        Param("drop_ratio", float, 0.99, "R: fraction of entries dropped; threshold = sampled R-quantile of |x+e|",
              low=0.0, high=1.0, high_open=True),
        Param("scope", str, "global", "one threshold over all tensors of the step (global, Marian) or per tensor (layer)",
              choices=("global", "layer")),
        Param("sample_size", int, 100000, "at most this many strided samples for the quantile", low=1),
        coding_param("fixed"),
        Param("quantize", str, "none", "survivor values: fp32 (none), sign + one scale (1bit), sign + bucket bit with Marian's two "
              "equal-width buckets between the cut-off and the largest sampled magnitude (2bit)", choices=QUANTIZE),
        Param("quant_scale", str, "min", "quantized survivors' magnitude: 1bit min or mean kept |a|; 2bit the bucket floors (min, "
              "Marian's min-drop) or the sampled bucket means (mean, Marian's average)", choices=("min", "mean")),
    ),
    target=Target(8.0),
    traffic_bytes=12.0,  # read x and the residual, write the residual
    scalar_reads=2,
    scalar_reads_where=('compress: how many entries pass the sampled threshold (torch.nonzero: the size of the index list), '
                        'and the body length of a variable-length index coding (delta-varint, elias); decompress: the index '
                        'check, folded into one read, and the bytes a variable-length index coding used'),
)

CARDS = (GRADDROP_CARD,)
