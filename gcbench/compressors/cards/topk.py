"""Card of topk: what gcbench knows without importing :mod:`gcbench.compressors.topk`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, Target
from gcbench.core.params import coding_param, density_param

TOPK_CARD = CompressorInfo(
    name="topk",
    impl="gcbench.compressors.topk:TopK",
    version=1,
    description="exact top-k by magnitude, values fp32 + coded indices",
    paper="Stich et al. 2018, Sparsified SGD with Memory (reference point)",
    biased=True, stateful=False, error_feedback="optional", deterministic=True, reconstructed=False,
    params=(density_param(0.01), coding_param("fixed")),
    target=Target(None, vs_torch_topk=2.0, topk_densities=(0.001, 0.01)),
    traffic_bytes=4.0,  # read the input once (the k values out are negligible)
    scalar_reads=1,
    scalar_reads_where=('compress: the body length of a variable-length index coding (delta-varint, elias), none for fixed '
                        "and int32 (the selection keeps exactly k: torch.nonzero_static); decompress: the sparse codec's one "
                        'folded validity check'),
)

CARDS = (TOPK_CARD,)
