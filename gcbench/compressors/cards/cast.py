"""Cards of none, fp16, bf16: what gcbench knows without importing :mod:`gcbench.compressors.cast`."""

from __future__ import annotations

from gcbench.core.info import ALLREDUCE, CompressorInfo

NONE = CompressorInfo(
    name="none",
    impl="gcbench.compressors.cast:NoCompression",
    version=1,
    description="identity: the dense float32 tensor (the baseline of every ratio)",
    paper="—",
    biased=False,
    stateful=False,
    traffic_bytes=8.0,  # read the input, write it
    protocol=ALLREDUCE,
    identity=True,
)

FP16 = CompressorInfo(
    name="fp16",
    impl="gcbench.compressors.cast:Fp16",
    version=1,
    description="cast to IEEE half precision (16 bits per element)",
    paper="— (mixed-precision communication)",
    biased=True,
    stateful=False,
    traffic_bytes=6.0,  # read 4 bytes, write 2
    protocol=ALLREDUCE,
)

BF16 = CompressorInfo(
    name="bf16",
    impl="gcbench.compressors.cast:Bf16",
    version=1,
    description="cast to bfloat16 (16 bits per element, fp32 range)",
    paper="— (mixed-precision communication)",
    biased=True,
    stateful=False,
    traffic_bytes=6.0,  # read 4 bytes, write 2
    protocol=ALLREDUCE,
)

CARDS = (NONE, FP16, BF16,)
