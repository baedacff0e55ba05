"""Card of thc: what gcbench knows without importing :mod:`gcbench.compressors.thc`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, CostLeg, Param, Protocol, Target

THC_PROTOCOL = Protocol("thc", "all-reduce MAX of the rotated range (one float per tensor), then all-reduce SUM of the "
                        "bit-packed integers at b + ceil(log2 N) bits, decoded once", allreduce_rounds=1, summable=True,
                        scalar_allreduces=1, cost=(CostLeg("allreduce", "scalars"), CostLeg("allreduce")), packed_sum_bits="bits")

THC_CARD = CompressorInfo(
    name="thc",
    impl="gcbench.compressors.thc:THC",
    version=2,  # 2: field-major packing of the words (1: k consecutive elements per word)
    description="randomized Hadamard rotation, stochastic b-bit uniform quantization on a shared range; integers summed "
                "by an all-reduce without decoding",
    paper="Li et al. 2024 (NSDI), THC: Accelerating Distributed Deep Learning Using Tensor Homomorphic Compression",
    # unbiased: stochastic rounding on a range that holds every value, under an orthogonal rotation;
    # reconstructed: uniform levels and one range per tensor replace the paper's lookup-table quantization and granularity
    biased=False, stateful=False, error_feedback="no", deterministic=False, reconstructed=True,
    params=(
        Param("bits", int, 4, "bits b per quantized coordinate (one worker's message)", low=1, high=16),
        Param("block", int, 4096, "Hadamard block length (a power of two; a tensor shorter than it uses its next power of two)",
              low=1, high=2**20, power_of_two=True),
        Param("seed", int, 0, "shared rotation seed: every worker's rotation of step t is drawn from (seed, t)", low=0,
              high=2**31 - 1),
    ),
    target=Target(6.0, 6.0),  # decompress rotates back: the same work as compress
    traffic_bytes=12.5,  # read x, write the rotated blocks, read them again to quantize, about 4.3 bits out
    protocol=THC_PROTOCOL,
)

CARDS = (THC_CARD,)
