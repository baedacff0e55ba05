"""Card of lgc: what gcbench knows without importing :mod:`gcbench.compressors.lgc`."""

from __future__ import annotations

from gcbench.core.info import CompressorInfo, CostLeg, Param, ParamValue, Protocol
from gcbench.core.params import coding_param, density_param

PRESETS: dict[str, dict[str, ParamValue]] = {
    # gcbench's design: phases compressed so a short benchmark reaches phase 3; Adam, 8 steps per round
    "gcbench": {"dense_steps": 20, "train_steps": 60, "optimizer": "adam", "ae_iters": 8, "decoders": "shared",
                "dense_first": 0, "dense_last": 0},
    # the third-party re-implementation citing the TNNLS DOI: stage rounds [200, 300], SGD lr 1e-3 for one
    # "epoch" (one step) per round, one decoder per worker, ResNets' first 1 and last 2 parameter tensors dense
    "reference": {"dense_steps": 200, "train_steps": 300, "optimizer": "sgd", "ae_iters": 1, "decoders": "per-worker",
                  "dense_first": 1, "dense_last": 2},
}


def _preset_help(name: str, what: str) -> str:
    g, r = PRESETS["gcbench"][name], PRESETS["reference"][name]
    return f"{what} (default: the preset's — gcbench {g} (gcbench's choice), reference {r} (the re-implementation's))"


LGC_PROTOCOL = Protocol("lgc", "3 phases by step: dense fp32; top-k+EF with online autoencoder training; "
    "ps: leader latent+indices+innovation, others innovation only (re-implementation) / ring (protocol inferred by gcbench): "
    "summed latents at a rotating leader's indices",
    # ring mode: every worker trains a replica of the autoencoder, which must start from the same weights
    shared_seed=True,
    # the legs of the compressed phase (the steady state; the dense and top-k phases are shorter and differ): ps, three
    # server rounds (the one-time encoder transfer, the leader's latent and indices, everyone's innovation and the
    # aggregate back); ring, the leader's indices relayed round the ring, then a ring all-reduce of the latents.  Both presets
    # (the reference preset's over the whole model at once); its dense tensors (dense_first, dense_last) each add a dense
    # round of their own (ps: a server round, ring: a ring all-reduce), whose bytes the payload counts but whose latency
    # these legs leave out
    cost=(CostLeg("server", rounds=3),),
    cost_by=("mode", {"ps": (CostLeg("server", rounds=3),), "ring": (CostLeg("broadcast"), CostLeg("allreduce"))}))

LGC_CARD = CompressorInfo(
    name="lgc",
    impl="gcbench.compressors.lgc:LGC",
    version=2,
    description="RECONSTRUCTED Learned Gradient Compression (paper body not public): dense, then top-k+EF while a 1-D conv "
    "autoencoder trains, then leader latent + per-worker innovation (ps) or ring-summed latents (ring: named by the abstract, protocol "
    "inferred by gcbench); "
    "preset=gcbench (gcbench's design, per tensor) or preset=reference (a third-party re-implementation citing the TNNLS DOI: "
    "one whole-model autoencoder); needs >= 2 workers",
    paper="Abrahamyan et al. 2021, Learned Gradient Compression for Distributed Deep Learning (IEEE TNNLS, "
    "doi:10.1109/TNNLS.2021.3084806) — RECONSTRUCTED from its abstract, the EUSIPCO precursor's abstract and a third-party "
    "re-implementation; no official code",
    biased=True,
    stateful=True,
    error_feedback="always",
    deterministic=True,
    reconstructed=True,
    min_workers=2,
    params=(
        Param("preset", str, "gcbench", "gcbench: gcbench's design (per-tensor autoencoder, windows with RMS scales, Adam); "
              "reference: follows a third-party re-implementation citing the TNNLS DOI (one autoencoder over the whole model's "
              "concatenated top-k values, first/last tensors dense, its loss, SGD)", choices=tuple(PRESETS)),
        Param("mode", str, "ps", "phase-3 protocol: ps (parameter server: leader latent + innovations; abstract + re-implementation) "
              "or ring (the abstract names a ring-allreduce instance; this protocol, an all-reduce of latents at a rotating "
              "leader's indices, is gcbench's inference: nothing public describes it)",
              choices=("ps", "ring")),
        density_param(0.001, "top-k fraction per tensor, K = ceil(density * d) (1e-3: re-implementation's default)"),
        Param("dense_steps", int, None, _preset_help("dense_steps", "phase 1 length in steps, dense fp32"), low=0, optional=True),
        Param("train_steps", int, None, _preset_help("train_steps", "phase 2 length in steps, top-k+EF while the autoencoder trains"),
              low=0, optional=True),
        Param("innovation_density", float, 1e-5, "innovation fraction per tensor and worker, k_inn = ceil(innovation_density * d) "
              "(1e-5: re-implementation's default)", low=0.0, high=1.0, low_open=True),
        Param("dense_first", int, None, _preset_help("dense_first", "this many first tensors of the model are sent dense fp32 in "
              "every phase (whole-model exchange)"), low=0, optional=True),
        Param("dense_last", int, None, _preset_help("dense_last", "this many last tensors are sent dense fp32 in every phase"),
              low=0, optional=True),
        Param("optimizer", str, None, _preset_help("optimizer", "autoencoder optimizer"), choices=("adam", "sgd"), optional=True),
        Param("ae_lr", float, 1e-3, "autoencoder learning rate (1e-3: re-implementation's default)", low=0.0, low_open=True),
        Param("ae_iters", int, None, _preset_help("ae_iters", "optimizer steps per training exchange (on that step's values)"),
              low=1, optional=True),
        Param("decoders", str, None, _preset_help("decoders", "ps decoders: one shared, or one per worker (preset=reference "
              "always has one per worker)"), choices=("shared", "per-worker"), optional=True),
        Param("latent_weight", float, 0.5, "weight of the latent-similarity term; reconstruction gets 1 - latent_weight "
              "(0.5/0.5: re-implementation's default)", low=0.0, high=1.0),
        Param("window", int, 1024, "preset=gcbench: K values are cut into ceil(K/window) equal windows (gcbench's choice)", low=16),
        Param("channels", str, "64/128/256/64", "preset=gcbench: encoder widths of the stride-2 Conv1d layers, each halving "
              "the length (re-implementation's widths; gcbench's decoder mirrors them): lgc:channels=8/16/32 on the command "
              "line, channels = [8, 16, 32] in a suite", low=1, items=int, max_items=8),
        Param("latent_channels", int, 4, "preset=gcbench: latent channels (kernel-1 head, 4 as in the re-implementation): "
              "latent = latent_channels * L / 2^layers floats", low=1),
        Param("min_k", int, 64, "preset=gcbench: tensors with K below this keep top-k+EF in phase 3, no autoencoder "
              "(gcbench's choice)", low=1),
        coding_param("fixed"),
    ),
    traffic_bytes=12.0,  # top-k with error feedback (phases 2 and 3): read x and the residual, write the residual
    protocol=LGC_PROTOCOL,
    scalar_reads=1,
    scalar_reads_where="a top-k payload's decode: the sparse codec's one folded validity check (core/codec_torch.decode_sparse); "
                       "its encode with a variable-length index coding (delta-varint, elias): the stream's length",
)

CARDS = (LGC_CARD,)
