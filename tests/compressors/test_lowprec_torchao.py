"""mxfp8, mxfp4, nvfp4 and blockint against torchao's own quantizers, byte for byte (skipped without torchao).

The block formats are written from public definitions (OCP Microscaling Formats (MX) v1.0 for MXFP8 and
MXFP4; NVIDIA's NVFP4 description: e2m1 elements, an e4m3 scale per 16, one fp32 tensor scale
amax / (448 · 6)).  torchao implements the same definitions independently (``to_mx`` with the floor
scale rule; ``nvfp4_quantize`` with ``per_tensor_amax_to_scale``), so equal bytes on varied tensors are
the evidence that lets the cards drop the RECONSTRUCTED label (docs/compressors.md).  Install with
``pip install 'gcbench[torchao]'`` (torchao declares no dependency on torch, so the installed torch stays).
"""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import registry
from gcbench.core.compressor import State

try:  # a torchao without these (older, or a layout change) skips like an absent one
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
    from torchao.quantization.quant_primitives import MappingType, choose_qparams_affine, quantize_affine
except ImportError as e:  # pragma: no cover - depends on the environment
    pytest.skip(f"torchao's MX/NVFP4 quantizers are not installed ({e}): pip install 'gcbench[torchao]'", allow_module_level=True)


def _tensors() -> list[torch.Tensor]:
    """Gradient-like tensors: several sizes (multiples of 32, torchao's block constraint), magnitudes over 12 decades,
    outliers, exact zeros, and blocks whose amax varies by 10^4 within one tensor."""
    g = torch.Generator().manual_seed(0)
    out = []
    for n, mag in ((32, 1.0), (1024, 1e-6), (4096, 3e4), (8192, 1e-3), (32 * 999, 0.02)):
        x = torch.randn(n, generator=g) * mag
        x[torch.randint(0, n, (3,), generator=g)] *= 40.0
        x[:32] = 0.0 if n > 32 else x[:32]
        out.append(x)
    per_block = 10 ** torch.empty(256).uniform_(-4, 0, generator=g)
    out.append(torch.randn(256 * 16, generator=g) * per_block.repeat_interleave(16))
    return out


@pytest.mark.parametrize(("name", "elem"), [("mxfp8", torch.float8_e4m3fn), ("mxfp4", torch.float4_e2m1fn_x2)])
def test_mx_payloads_are_torchaos_to_mx(name: str, elem: torch.dtype) -> None:
    """E8M0 scales (floor rule) and element codes equal torchao's ``to_mx``, the OCP MX v1.0 reference of torchao."""
    for x in _tensors():
        body = registry.create(name).compress(x, State(0)).data
        scale, data = to_mx(x.reshape(1, -1), elem, 32, ScaleCalculationMode.FLOOR)
        nb = x.numel() // 32
        assert torch.equal(body[:nb], scale.reshape(-1).view(torch.uint8)), f"{name} scales differ on {x.numel()} elements"
        assert torch.equal(body[nb:], data.reshape(-1).view(torch.uint8)), f"{name} codes differ on {x.numel()} elements"


def test_nvfp4_payload_is_torchaos_nvfp4_quantize() -> None:
    """Tensor scale, e4m3 block scales and packed e2m1 codes equal torchao's two-level ``nvfp4_quantize`` on every
    block but those whose scale underflows e4m3 (all-zero blocks here: the next test)."""
    for x in _tensors():
        body = registry.create("nvfp4").compress(x, State(0)).data
        ts = per_tensor_amax_to_scale(x.abs().max())
        scales, codes = nvfp4_quantize(x.reshape(1, -1), 16, ts)
        nb = x.numel() // 16
        ours, theirs = body[4:4 + nb], scales.reshape(-1).view(torch.uint8)
        flushed = ours == 0
        assert torch.equal(body[:4].view(torch.float32), ts.reshape(1))
        assert bool((x.reshape(nb, 16)[flushed].abs().amax(1) <= 6 * ts * 2.0**-10).all()), "only underflowing blocks send scale 0"
        assert torch.equal(ours[~flushed], theirs[~flushed]), f"block scales differ on {x.numel()} elements"
        ours_codes, their_codes = body[4 + nb:].reshape(nb, 8), codes.reshape(-1).view(torch.uint8).reshape(nb, 8)
        assert torch.equal(ours_codes[~flushed], their_codes[~flushed]), f"codes differ on {x.numel()} elements"
        assert int(flushed.sum()) <= 2, "the test tensors keep their blocks inside e4m3's range (the two zero blocks aside)"


def test_nvfp4_differs_from_torchao_only_where_a_block_scale_underflows_e4m3() -> None:
    """The one difference: a block whose scale (amax / 6) / ts rounds to e4m3 zero (its amax under about 1/229,000 of
    the tensor's) sends scale 0 and zero codes here, where torchao clamps the scale to e4m3's smallest subnormal."""
    x = torch.randn(16 * 64, generator=torch.Generator().manual_seed(1))
    x[16:32] *= 1e-7  # block 1 far below e4m3's range relative to the tensor scale
    body = registry.create("nvfp4").compress(x, State(0)).data
    scales, codes = nvfp4_quantize(x.reshape(1, -1), 16, per_tensor_amax_to_scale(x.abs().max()))
    ours, theirs = body[4:68], scales.reshape(-1).view(torch.uint8)
    assert (ours != theirs).nonzero().flatten().tolist() == [1] and int(ours[1]) == 0
    differ = (body[68:] != codes.reshape(-1).view(torch.uint8)).nonzero().flatten()
    assert differ.numel() > 0 and bool(((differ >= 8) & (differ < 16)).all()), "only block 1's eight code bytes differ"


@pytest.mark.parametrize("bits", [8, 4])
def test_blockint_is_torchaos_symmetric_affine_quantizer_with_a_symmetric_range(bits: int) -> None:
    """blockint's codes and fp32 scales equal torchao's symmetric affine quantizer over [−qmax, qmax] per block of 256:
    the generic definition.  Its RECONSTRUCTED label stays: it names ZeRO++'s qgZ, whose DeepSpeed kernels were not compared."""
    qmax = 2 ** (bits - 1) - 1
    for x in _tensors()[1:]:
        x = x[: x.numel() // 256 * 256]
        p = registry.create("blockint", bits=bits).compress(x, State(0))
        nb = x.numel() // 256
        scale, zero = choose_qparams_affine(x.reshape(1, -1), MappingType.SYMMETRIC, (1, 256), torch.int8,
                                            quant_min=-qmax, quant_max=qmax)
        q = quantize_affine(x.reshape(1, -1), (1, 256), scale, zero, torch.int8, -qmax, qmax).reshape(-1)
        assert torch.equal(p.data[:4 * nb].view(torch.float32), scale.reshape(-1).float())
        ours = registry.decompress(p)
        assert torch.equal(ours, q.float() * scale.reshape(-1).float().repeat_interleave(256)), f"int{bits} codes differ"
