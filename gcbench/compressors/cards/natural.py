"""Cards of natural, natural_dither: what gcbench knows without importing :mod:`gcbench.compressors.natural`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, Param, Target


def s_param(default: int = 8) -> Param:
    return Param("s", int, default, "natural dithering levels 0, 2^(1−s), …, 1/2, 1 (s + 1 levels)", low=1, high=120)


def p_param(default: str = "2") -> Param:
    return Param("p", str, default, "norm the values are divided by: '2' or 'inf'", choices=("2", "inf"))


NATURAL_CARD = CompressorInfo(
    name="natural",
    impl="gcbench.compressors.natural:Natural",
    version=2,
    description="natural compression: stochastic rounding to a neighbouring power of two, 9 bits/element, unbiased (ω = 1/8)",
    paper="Horváth et al. 2019, Natural Compression for Distributed Deep Learning",
    biased=False, stateful=False, error_feedback="no", deterministic=False, reconstructed=False,
    target=Target(6.0),
    traffic_bytes=5.125,  # one read, 9 bits out
)

NATURAL_DITHER_CARD = CompressorInfo(
    name="natural_dither",
    impl="gcbench.compressors.natural:NaturalDither",
    version=2,
    description="natural dithering: norm + sign + power-of-two level (s levels) per element, unbiased",
    paper="Horváth et al. 2019, Natural Compression for Distributed Deep Learning (natural dithering)",
    biased=False, stateful=False, error_feedback="no", deterministic=False, reconstructed=False,
    traffic_bytes=8.625,  # two reads (the norm needs the whole tensor first), 5 bits out at s=8
    params=(s_param(8), p_param("2")),
    target=Target(6.0),
    scalar_reads=1,
    scalar_reads_where="decode: the check that no level index exceeds s (a malformed body), before the table lookup",
)

CARDS = (NATURAL_CARD, NATURAL_DITHER_CARD,)
