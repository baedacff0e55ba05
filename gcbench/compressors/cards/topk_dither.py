"""Card of topk_dither: what gcbench knows without importing :mod:`gcbench.compressors.topk_dither`."""

from __future__ import annotations

from gcbench.compressors.cards.natural import p_param, s_param
from gcbench.core.info import CompressorInfo, Param, Target
from gcbench.core.params import coding_param, density_param

TOPK_DITHER_CARD = CompressorInfo(
    name="topk_dither",
    impl="gcbench.compressors.topk_dither:TopKDither",
    version=2,
    description="exact top-k, then natural dithering of the kept values (norm + sign + level), error feedback on",
    paper="Beznosikov et al. 2020, On Biased Compression for Distributed Learning (top-k ∘ natural dithering of Horváth et al. 2019)",
    biased=True, stateful=False, error_feedback="optional", deterministic=False, reconstructed=False,
    params=(
        density_param(0.01),
        s_param(8),
        p_param("2"),
        coding_param("fixed"),
        Param("error_feedback", bool, True, "apply error feedback (residual) across steps; on by default for this biased compressor"),
    ),
    target=Target(6.0),
    traffic_bytes=12.0,  # error feedback on by default: read x and the residual, write the residual
    scalar_reads=2,
    scalar_reads_where=("decode: one folded validity check (indices inside the tensor, levels at most s, the stream "
                        "filling its body), after the index stream's length for delta-varint; encode: the stream's "
                        "length for the elias and delta-varint codings (fixed and int32 read none)"),
)

CARDS = (TOPK_DITHER_CARD,)
