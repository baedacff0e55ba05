"""Card of randomk: what gcbench knows without importing :mod:`gcbench.compressors.randomk`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, Target
from gcbench.core.params import density_param

RANDOMK_CARD = CompressorInfo(
    name="randomk",
    impl="gcbench.compressors.randomk:RandomK",
    version=2,
    description="k random positions scaled by d/k (unbiased); only a 64-bit seed is sent for the indices",
    paper="Stich et al. 2018; Wangni et al. 2018 (reference point)",
    biased=False, stateful=False, error_feedback="no", deterministic=False, reconstructed=False,
    params=(density_param(0.01),),
    target=Target(2.0),
    traffic_bytes=0.08,  # read and write only the k = density·d chosen entries (density 0.01)
    scalar_reads=1,
    scalar_reads_where="decompress: the 64-bit seed, read from the body, which the host expands into the index set",
    # the expansion's block counts are NumPy's multivariate hypergeometric draw: the same set on a device would need a
    # new expansion (a new version, other bytes on the CPU too)
    host_transfers=("the index set: expanded on the host from the 64-bit seed (NumPy's hypergeometric block counts, then "
                    "Floyd's algorithm per block) and copied to the device once per call (k int64); compress reads no "
                    "device data for it"),
)

CARDS = (RANDOMK_CARD,)
