"""Card of powersgd: what gcbench knows without importing :mod:`gcbench.compressors.powersgd`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, CostLeg, Param, Protocol

POWERSGD_PROTOCOL = Protocol("powersgd", "all-reduce P (mean), orthonormalise, Q = Mᵀ P̂, all-reduce Q (mean); shared warm-start Q",
                             allreduce_rounds=2, per_tensor=True, shared_seed=True,
                             cost=(CostLeg("allreduce", rounds=2),))

POWERSGD_CARD = CompressorInfo(
    name="powersgd",
    impl="gcbench.compressors.powersgd:PowerSGD",
    # version 3: the first warm-start Q is counter-based normals drawn on the device (2: the state's NumPy generator)
    version=3,
    description="rank-r P Qᵀ by one warm-started power iteration, factors in fp32, error feedback; vectors dense",
    paper="Vogels et al. 2019, PowerSGD: Practical Low-Rank Gradient Compression for Distributed Optimization",
    # not deterministic: the first Q is drawn from a seed of the state's seeded generator
    biased=True, stateful=True, error_feedback="always", deterministic=False, reconstructed=False,
    params=(
        Param("rank", int, 2, "rank r of the approximation (paper's main setting 2; PyTorch's hook defaults to 1)", low=1),
        Param("ef_residual", str, "aggregate", "exchange only: residual e_w = M_w − aggregate (authors' code, PyTorch hook) or "
              "M_w − P̂ Q_wᵀ (Algorithm 2 text)", choices=("aggregate", "local")),
    ),
    traffic_bytes=20.0,  # error feedback (read x and e, write e) and two more reads of M for M·Q and Mᵀ·P
    protocol=POWERSGD_PROTOCOL,
)

CARDS = (POWERSGD_CARD,)
