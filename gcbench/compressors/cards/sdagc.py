"""Card of sdagc: what gcbench knows without importing :mod:`gcbench.compressors.sdagc`."""

from __future__ import annotations

from gcbench.compressors.cards.dgc import clip_params, dense_params, momentum_sparse_costs
from gcbench.core.info import CompressorInfo, Param, Target
from gcbench.core.params import coding_param

SDAGC_CARD = CompressorInfo(
    name="sdagc",
    impl="gcbench.compressors.sdagc:SDAGC",
    version=2,
    description="RECONSTRUCTED SDAGC: momentum compensation, residual accumulation, threshold lambda(t)*std(v) per layer",
    paper="Chen et al. 2020, SDAGC (reconstructed from the abstract; not a verified reproduction)",
    biased=True, stateful=True, error_feedback="own", deterministic=True, reconstructed=True,
    params=(
        Param("momentum", float, 0.9, "momentum m of the local momentum compensation", low=0.0, high=1.0, high_open=True),
        Param("masking", bool, True, "zero the momentum u where v was sent"),
        *clip_params(),
        Param("lambda_start", float, 2.0, "lambda at step 0 of the warm-up (threshold = lambda * std(v))", low=0.0, low_open=True),
        Param("lambda_final", float, 3.3, "lambda after the warm-up (about 0.1% density for Gaussian v)", low=0.0, low_open=True),
        Param("warmup_steps", int, 0, "steps over which lambda rises linearly from lambda_start to lambda_final", low=0),
        Param("lr_revision", bool, False, "scale the released update to at most the norm of the step's dense momentum update "
              "(reconstruction of the adaptive learning-rate revision; held-back part stays in v)"),
        *dense_params(),
        coding_param("fixed", with_paper=True),
    ),
    target=Target(8.0),
    **momentum_sparse_costs("how many entries pass lambda·std (torch.nonzero: the size of the index list)"),
)

CARDS = (SDAGC_CARD,)
