"""Card of randomk: what gcbench knows without importing :mod:`gcbench.compressors.randomk`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, Target
from gcbench.core.params import density_param

RANDOMK_CARD = CompressorInfo(
    name="randomk",
    impl="gcbench.compressors.randomk:RandomK",
    # version 3: the seed expands by a swap-or-not shuffle on any device (2: NumPy block counts, host only)
    version=3,
    description="k random positions scaled by d/k (unbiased); only a 64-bit seed is sent for the indices",
    paper="Stich et al. 2018; Wangni et al. 2018 (reference point)",
    biased=False, stateful=False, error_feedback="no", deterministic=False, reconstructed=False,
    params=(density_param(0.01),),
    target=Target(2.0),
    # the k = density·d chosen entries sit at random positions, so each read brings its whole 64-byte cache line:
    # 1 − (1 − 0.01)^16 of the lines at density 0.01, 0.59 bytes per element, plus the 4·k bytes of values written
    traffic_bytes=0.63,
    scalar_reads=0,  # the seed is expanded where the body lies: nothing is read back
)

CARDS = (RANDOMK_CARD,)
