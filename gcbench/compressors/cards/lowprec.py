"""Cards of fp8, mxfp8, mxfp4, nvfp4, blockint: what gcbench knows without importing :mod:`gcbench.compressors.lowprec`.

Every card offers ``rounding=nearest`` (round to nearest even, deterministic, biased) and
``rounding=stochastic``.  Stochastic rounding makes ``fp8`` and ``blockint`` unbiased
(``unbiased_when``); ``mxfp8``, ``mxfp4`` and ``nvfp4`` stay biased with it, since their scale
rules let block values saturate (see :mod:`gcbench.compressors.lowprec`).  Each card is
deterministic with ``rounding=nearest`` (no random number is drawn) and randomised with
``rounding=stochastic`` (``random_when``), so the runner repeats the one-shot measurement only then.
"""

from __future__ import annotations

from typing import Any

from gcbench.core.info import CompressorInfo, Param, Target


def rounding_param() -> Param:
    return Param("rounding", str, "nearest", "round to nearest even (biased) or stochastically with the state's uniforms",
                 choices=("nearest", "stochastic"))


def _card(name: str, cls: str, *, description: str, paper: str, reconstructed: bool, **facts: Any) -> CompressorInfo:
    """A low-precision card: version 1, biased, stateless, deterministic unless rounding is stochastic."""
    return CompressorInfo(
        name=name,
        impl=f"gcbench.compressors.lowprec:{cls}",
        version=1,
        description=description,
        paper=paper,
        biased=True, stateful=False, error_feedback="no", deterministic=True, reconstructed=reconstructed,
        random_when={"rounding": "stochastic"},
        **facts,
    )


def _fp32_scaled(name: str, cls: str, own: tuple[Param, ...], block: int, block_what: str, **facts: Any) -> CompressorInfo:
    """fp8 and blockint: an fp32 scale per block (``block`` elements by default), unbiased with stochastic rounding."""
    block_param = Param("block", int, block, f"{block_what}; a shorter tail block is sent", low=1, high=2**31)
    return _card(name, cls, unbiased_when={"rounding": "stochastic"}, params=(*own, block_param, rounding_param()), **facts)


FP8_CARD = _fp32_scaled(
    "fp8", "Fp8",
    (
        Param("format", str, "e4m3", "element format: e4m3 (max 448, no inf) or e5m2 (max 57344)", choices=("e4m3", "e5m2")),
        Param("scale", str, "tensor", "one fp32 scale per tensor, or one per block of `block` elements", choices=("tensor", "block")),
    ),
    128, "elements per scale with scale=block (128: DeepSeek-V3's 1x128 tiles)",
    description="fp8 (e4m3 or e5m2) with an fp32 scale amax/max per tensor or per block, saturating",
    paper="Micikevicius et al. 2022, FP8 Formats for Deep Learning (OCP 8-bit floating point); per-tensor scaling as torchao's fp8",
    reconstructed=False,
    target=Target(3.0, 2.0),
    traffic_bytes=9.0,  # per tensor: two reads (the amax first), 1 byte out
)


def _mx(name: str, cls: str, elem: str, bits: int, target: Target) -> CompressorInfo:
    return _card(
        name, cls,
        description=f"OCP Microscaling {name.upper()}: {elem} elements, 32-element blocks sharing an E8M0 power-of-two scale",
        paper="OCP Microscaling Formats (MX) Specification v1.0 (2023); Rouhani et al. 2023, Microscaling Data Formats for Deep Learning; "
          "equals torchao's to_mx (floor scale rule)",
        reconstructed=False,
        params=(rounding_param(),),
        target=target,
        traffic_bytes=4.0 + bits / 8 + 1 / 32,  # one read (a block's amax in cache), the codes and one scale byte per 32 out
    )


MXFP8_CARD = _mx("mxfp8", "MxFp8", "e4m3", 8, Target(3.0, 2.0))
MXFP4_CARD = _mx("mxfp4", "MxFp4", "e2m1", 4, Target(4.0, 4.0))

NVFP4_CARD = _card(
    "nvfp4", "NvFp4",
    description="NVFP4: e2m1 elements, an e4m3 scale per 16, one fp32 tensor scale amax/(448*6)",
    # not reconstructed: the payload equals torchao's nvfp4_quantize byte for byte (tests/compressors/test_lowprec_torchao.py)
    # except a block whose e4m3 scale underflows (sent as zeros here, clamped to e4m3's smallest subnormal there)
    paper="NVIDIA 2025, NVFP4 as described in 'Introducing NVFP4 for Efficient and Accurate Low-Precision Inference' "
          "(NVIDIA technical blog) and 'Pretraining Large Language Models with NVFP4' (arXiv:2509.25149); equals torchao's nvfp4_quantize",
    reconstructed=False,
    params=(rounding_param(),),
    target=Target(4.0, 4.0),
    traffic_bytes=8.5625,  # two reads (the tensor amax first), 4 bits and one scale byte per 16 out
)

BLOCKINT_CARD = _fp32_scaled(
    "blockint", "BlockInt",
    (Param("bits", int, 8, "bits per element, 2 to 8 (int8 one per byte, int4 two; others bit-packed)", low=2, high=8),),
    256, "elements per fp32 scale (0.125 bits/element of scales)",
    description="symmetric int8/int4 (2-8 bits) per block with an fp32 scale amax/qmax (ZeRO++ qgZ-style gradient quantization)",
    paper="Wang et al. 2023, ZeRO++: Extremely Efficient Collective Communication for Giant Model Training (qgZ)",
    # reconstructed: the claim is ZeRO++'s qgZ, whose DeepSpeed (CUDA) kernels were not compared byte for byte; the
    # arithmetic itself equals torchao's symmetric affine quantizer over [-qmax, qmax] (tests/compressors/test_lowprec_torchao.py)
    reconstructed=True,
    target=Target(3.0, 2.0),
    traffic_bytes=5.015625,  # one read, 1 byte and 4/256 bytes of scale out
)

CARDS = (FP8_CARD, MXFP8_CARD, MXFP4_CARD, NVFP4_CARD, BLOCKINT_CARD)
