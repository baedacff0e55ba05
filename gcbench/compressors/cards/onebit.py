"""Card of onebit: what gcbench knows without importing :mod:`gcbench.compressors.onebit`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, CostLeg, Param, Protocol, Target

GRANULARITIES = ("column", "row", "tensor")


ONEBIT_PROTOCOL = Protocol("onebit", "two-leg: stripe owners sum and re-quantize with their own residual", per_tensor=True,
                           cost=(CostLeg("alltoall"), CostLeg("allgather", "payload/n")))

ONEBIT_CARD = CompressorInfo(
    name="onebit",
    impl="gcbench.compressors.onebit:OneBitSGD",
    version=2,
    description="1-bit SGD: sign bit per element + two float32 means per column, error feedback",
    paper="Seide et al. 2014, 1-Bit Stochastic Gradient Descent and its Application to Data-Parallel Distributed Training of Speech DNNs",
    biased=True, stateful=True, error_feedback="always", deterministic=True, reconstructed=False,
    params=(
        Param("granularity", str, "column", "which entries share a pair of means: column (paper), row, or tensor (one pair; the "
              "framework variant)", choices=GRANULARITIES),
    ),
    target=Target(4.0),
    traffic_bytes=12.125,  # read x and the residual, write the residual, 1 bit out
    protocol=ONEBIT_PROTOCOL,
)

CARDS = (ONEBIT_CARD,)
