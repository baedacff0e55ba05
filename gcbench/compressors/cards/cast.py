"""Cards of none, fp16, bf16: what gcbench knows without importing :mod:`gcbench.compressors.cast`."""

from __future__ import annotations

from gcbench.core.info import ALLREDUCE, CompressorInfo

NONE_CARD = CompressorInfo(
    name="none",
    impl="gcbench.compressors.cast:NoCompression",
    version=1,
    description="identity: the dense float32 tensor (the baseline of every ratio)",
    paper="—",
    biased=False, stateful=False, error_feedback="no", deterministic=True, reconstructed=False,
    traffic_bytes=8.0,  # read the input, write it
    protocol=ALLREDUCE,
    identity=True,
)


def _half(name: str, cls: str, description: str) -> CompressorInfo:
    """The card of a cast to a 16-bit float: fp16 and bf16 differ only in the format."""
    return CompressorInfo(
        name=name,
        impl=f"gcbench.compressors.cast:{cls}",
        version=1,
        description=description,
        paper="— (mixed-precision communication)",
        biased=True, stateful=False, error_feedback="no", deterministic=True, reconstructed=False,
        traffic_bytes=6.0,  # read 4 bytes, write 2
        protocol=ALLREDUCE,
    )


FP16_CARD = _half("fp16", "Fp16", "cast to IEEE half precision (16 bits per element)")
BF16_CARD = _half("bf16", "Bf16", "cast to bfloat16 (16 bits per element, fp32 range)")

CARDS = (NONE_CARD, FP16_CARD, BF16_CARD,)
