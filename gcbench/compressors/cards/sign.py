"""Cards of signsgd, efsignsgd: what gcbench knows without importing :mod:`gcbench.compressors.sign`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, Target

SIGNSGD_CARD = CompressorInfo(
    name="signsgd",
    impl="gcbench.compressors.sign:SignSGD",
    version=1,
    description="sign of each element, 1 bit each, decoded as ±1",
    paper="Bernstein et al. 2018, signSGD: Compressed Optimisation for Non-Convex Problems",
    biased=True, stateful=False, error_feedback="no", deterministic=True, reconstructed=False,
    traffic_bytes=4.125,  # read the input once, write 1 bit
    target=Target(2.0),
    scalar_reads=1,
    scalar_reads_where="encode: whether the tensor is all zero, the header's zero flag (the body's bits cannot say it)",
)

EFSIGNSGD_CARD = CompressorInfo(
    name="efsignsgd",
    impl="gcbench.compressors.sign:EFSignSGD",
    version=1,
    description="error feedback + sign(x)·‖x‖₁/d (d + 32 bits)",
    paper="Karimireddy et al. 2019, Error Feedback Fixes SignSGD and other Gradient Compression Schemes",
    biased=True, stateful=True, error_feedback="always", deterministic=True, reconstructed=False,
    traffic_bytes=12.125,  # read x and the residual, write the residual, 1 bit out
    target=Target(4.0),
)

CARDS = (SIGNSGD_CARD, EFSIGNSGD_CARD,)
