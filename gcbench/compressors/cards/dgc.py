"""Card of dgc: what gcbench knows without importing :mod:`gcbench.compressors.dgc`."""

from __future__ import annotations

from typing import Any

from gcbench.core.info import CompressorInfo, Param, Target
from gcbench.core.params import coding_param, density_param

MIN_SAMPLE_RATIO = 0.01


DENSE_MAX = 65536  # default element bound of the dense rule: far above any bias/norm, far below a bucket


def dense_params() -> tuple[Param, Param]:
    """``min_dims`` and ``dense_max``: which tensors skip sparsification (shared with SDAGC)."""
    return (
        Param("min_dims", int, 2, "tensors with fewer dimensions are sent dense (momentum-SGD update, fp32), up to dense_max elements",
              low=0),
        Param("dense_max", int, DENSE_MAX, "a tensor below min_dims dimensions is sent dense only up to this many elements; "
              "larger 1-D tensors are flattened buckets and are sparsified", low=0),
    )


def clip_params() -> tuple[Param, Param]:
    """The local clipping parameters shared with SDAGC."""
    return (
        Param("clip_norm", float, None, "local clipping: scale x so ||x||_2 <= clip_norm / sqrt(workers) (none = off)",
              low=0.0, low_open=True, optional=True),
        Param("workers", int, 1, "N in the local clipping bound clip_norm·N^(-1/2)", low=1),
    )


def momentum_sparse_costs(selection_read: str) -> dict[str, Any]:
    """The costs DGC and SDAGC share: the traffic of a step that reads x and reads and writes the momentum u and
    the accumulation v (20 bytes an element), and their two scalar reads, of which ``selection_read`` says the first
    (the selection's size); the second is the sparse coding's."""
    return {
        "traffic_bytes": 20.0,
        "scalar_reads": 2,
        "scalar_reads_where": f"compress: {selection_read}, and the body length of a variable-length coding (paper, "
                              "delta-varint, elias); a dense tensor none; decompress: the sparse codec's one folded validity check",
    }


DGC_CARD = CompressorInfo(
    name="dgc",
    impl="gcbench.compressors.dgc:DGC",
    version=3,
    description="Deep Gradient Compression: momentum correction, sampled top-density threshold, momentum masking, warm-up",
    paper="Lin et al. 2018, Deep Gradient Compression (ICLR; official code)",
    # not deterministic: the sampling start is drawn from state.rng
    biased=True, stateful=True, error_feedback="own", deterministic=False, reconstructed=False,
    params=(
        density_param(0.001, "target fraction of entries sent after warm-up, k = ceil(density * d)"),
        Param("momentum", float, 0.9, "momentum m of the local momentum correction", low=0.0, high=1.0, high_open=True),
        Param("nesterov", bool, False, "Nesterov momentum correction (v += x + m·u)"),
        Param("masking", bool, True, "momentum factor masking: zero u where v was sent"),
        *clip_params(),
        Param("sample_ratio", float, 0.01, "fraction of |v| sampled for the threshold (at least ceil(2/density) elements); "
              "1 = exact top-k", low=MIN_SAMPLE_RATIO, high=1.0),
        Param("warmup_steps", int, 0, "warm-up length in steps (4 stages of 25%, 6.25%, 1.5625%, 0.39% density)", low=0),
        Param("warmup_epochs", int, 0, "warm-up length in epochs (needs steps_per_epoch); excludes warmup_steps", low=0),
        Param("steps_per_epoch", int, None, "steps per epoch, for warmup_epochs", low=1, optional=True),
        *dense_params(),
        coding_param("fixed", with_paper=True),
    ),
    target=Target(8.0, vs_torch_topk=5.0, topk_densities=(0.001,)),
    **momentum_sparse_costs("the selection's size (the adaptation's count, round and exact-top-k flag packed in one "
                            "integer, read once)"),
)

CARDS = (DGC_CARD,)
