"""The card: what gcbench lists and validates without importing torch or the implementation."""

from gcbench.core.info import CompressorInfo, Target

HALFSIGN_CARD = CompressorInfo(
    name="halfsign",
    impl="gcbench_plugin_demo.impl:HalfSign",
    version=1,
    description="sign bit per element times the mean |x| of the tensor (1 bit + one float32)",
    paper="— (plugin demo; the scaled-sign operator of Karimireddy et al. 2019 without error feedback)",
    biased=True,
    stateful=False,
    traffic_bytes=8.125,  # two reads (the scale needs the whole tensor), 1 bit out
    target=Target(4.0),
)

CARDS = (HALFSIGN_CARD,)
