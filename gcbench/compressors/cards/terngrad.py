"""Card of terngrad: what gcbench knows without importing :mod:`gcbench.compressors.terngrad`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, CostLeg, Param, Protocol, Target

TERNGRAD_PROTOCOL = Protocol("terngrad", "scaler sharing: s = max over workers (one extra float each)", scalar_allreduces=1,
                             applies_when={"share_scaler": True}, cost=(CostLeg("allreduce", "scalars"), CostLeg("allgather")))

TERNGRAD_CARD = CompressorInfo(
    name="terngrad",
    impl="gcbench.compressors.terngrad:TernGrad",
    version=2,
    description="stochastic ternary {-s, 0, +s} with 2.5σ clipping, 2 bits/element + one float",
    paper="Wen et al. 2017, TernGrad: Ternary Gradients to Reduce Communication in Distributed Deep Learning",
    # E[C(x)] = clip(x): biased with respect to x whenever clipping is on (the default), because
    # clipping bites on every tensor with entries beyond c·σ; unbiased only with clip = 0
    biased=True, stateful=False, error_feedback="no", deterministic=False, reconstructed=False,
    unbiased_when={"clip": 0.0},
    params=(
        Param("clip", float, 2.5, "clip at clip·std before ternarizing (0 disables)", low=0.0),
        Param("share_scaler", bool, True, "in the multi-worker exchange, share s = max of the workers' scalers"),
    ),
    target=Target(6.0),
    traffic_bytes=8.25,  # two reads (the scaler needs the whole tensor first), 2 bits out
    protocol=TERNGRAD_PROTOCOL,
)

CARDS = (TERNGRAD_CARD,)
