"""The fused Hadamard/THC kernels against their torch definitions (gcbench/kernels/hadamard.py, gcbench/compressors/thc.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.compressors.thc import dequantize, pack, quantize, unpack
from gcbench.kernels import hadamard
from tests.conftest import normal

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba kernels unavailable")


@pytest.mark.parametrize("n,block", [(1, 4096), (5, 4096), (100, 8), (30, 4096), (1000, 64), (100, 128), (3000, 2048), (10_007, 4096)])
def test_rotation_kernel_gives_the_torch_bits(n: int, block: int) -> None:
    x = normal((n,), seed=n)
    y, m = hadamard.rotate_fast(x.numpy(), 11, block)
    want = hadamard.rotate(x, 11, block)
    assert np.array_equal(y, want.numpy())  # the same additions in the same order
    assert m == float(want.abs().max())


@pytest.mark.parametrize("width", [1, 4, 7, 9, 21])
def test_quantize_and_pack_kernel_gives_the_torch_bits(width: int) -> None:
    bits = min(width, 4)
    y = normal((3001,), seed=width)
    m = float(y.abs().max())
    got = hadamard.quantize_pack_fast(y.numpy(), m, bits, 1234, width)
    want = pack(quantize(y, m, bits, kernels.paired_uniforms(1234, y.numel())), width)
    assert np.array_equal(got, want.numpy())
    assert not hadamard.quantize_pack_fast(y.numpy(), 0.0, bits, 1234, width).any()  # zero range: all levels 0


@pytest.mark.parametrize(("n", "block", "width"), [(5000, 1024, 6), (60_001, 4096, 5), (30_000, 256, 9), (70_000, 64, 4)])
def test_decode_kernel_gives_the_torch_bits(n: int, block: int, width: int) -> None:
    """Single and multi-chunk words (1024 words a chunk), blocks crossing chunks and fields."""
    x = normal((n,), seed=3)
    y = hadamard.rotate(x, 5, block)
    m = float(y.abs().max())
    words = pack(quantize(y.reshape(-1), m, 4, kernels.paired_uniforms(9, y.numel())), width)
    scale = 2.0 * m / 15
    fast = hadamard.decode_fast(words.numpy(), width, y.numel(), block, m, scale, 5)[:n]
    slow = hadamard.unrotate(dequantize(unpack(words, width, y.numel()), m, 4, 1).reshape(-1, block), 5, n)
    assert np.array_equal(fast, slow.numpy())
    assert torch.equal(hadamard.signs(3, 200), torch.from_numpy(np.where(_bits(3, 200), -1.0, 1.0).astype(np.float32)))


def _bits(key: int, n: int) -> np.ndarray:
    """Bit e % 64 of SplitMix64 output e // 64 + 1 of stream ``key`` (NumPy's wrapping uint64, the oracle)."""
    from gcbench.kernels.rng import GAMMA, MIX1, MIX2, key_of

    w = np.arange(1, -(-n // 64) + 1, dtype=np.uint64) * GAMMA + key_of(key)
    w = (w ^ (w >> np.uint64(30))) * MIX1
    w = (w ^ (w >> np.uint64(27))) * MIX2
    w ^= w >> np.uint64(31)
    e = np.arange(n)
    return ((w[e // 64] >> (e % 64).astype(np.uint64)) & np.uint64(1)).astype(bool)


@pytest.mark.parametrize("scale", [1e-40, 1e-30, 1e20])
def test_extreme_ranges_quantize_alike_and_finite(scale: float) -> None:
    y = normal((999,), seed=8) * scale
    m = float(y.abs().max())
    got = hadamard.quantize_pack_fast(y.numpy(), m, 4, 77, 5)
    want = pack(quantize(y, m, 4, kernels.paired_uniforms(77, y.numel())), 5)
    assert np.array_equal(got, want.numpy())
    levels = unpack(want, 5, 999)
    assert int(levels.min()) >= 0 and int(levels.max()) <= 15 and int(levels.max()) >= 8  # the range is used, no NaN level


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_input_gives_the_torch_range_and_zero_levels(bad: float) -> None:
    """A NaN anywhere makes the range NaN on both paths (a float max that skipped NaN once kept the kernel's finite),
    ±Inf makes it +Inf; either way every level is 0, so the message is the same on both paths and decodes to NaN."""
    x = normal((10_007,), seed=4)
    x[1234] = bad
    y, m = hadamard.rotate_fast(x.numpy(), 11, 4096)
    want = float(hadamard.rotate(x, 11, 4096).abs().max())
    assert (math.isnan(m) and math.isnan(want)) if math.isnan(bad) else m == want == math.inf
    got = hadamard.quantize_pack_fast(y.reshape(-1), m, 4, 1234, 4)
    ref = pack(quantize(torch.from_numpy(y.reshape(-1)), m, 4, kernels.paired_uniforms(1234, y.size)), 4)
    assert not got.any() and not ref.any()


@pytest.mark.parametrize("n,width", [(4096, 4), (10_000, 5), (63, 62), (64 * 21 + 5, 21), (40_000, 4), (2 * 1024 * 9, 7)])
def test_packing_is_field_major_in_chunks(n: int, width: int) -> None:
    """Chunk c (1024 words, W·k elements; the last fewer) holds element c·W·k + f·w_c + i in field f of word c·W + i:
    the version-2 layout the kernels and the torch path write, and the kernel quantizer agrees across chunks."""
    levels = torch.randint(0, 1 << min(width, 4), (n,), generator=torch.Generator().manual_seed(n))
    k, chunk = 63 // width, hadamard.CHUNK_WORDS
    words = pack(levels, width)
    assert words.numel() == -(-n // k) and torch.equal(unpack(words, width, n), levels)
    for e in (0, 1, n // 3, n // 2, n - 1):
        c, rem = divmod(e, chunk * k)
        wc = -(-min(n - c * chunk * k, chunk * k) // k)
        f, i = divmod(rem, wc)
        assert (int(words[c * chunk + i]) >> (f * width)) & ((1 << width) - 1) == int(levels[e])
    y = normal((n,), seed=n)
    m = float(y.abs().max())
    got = hadamard.quantize_pack_fast(y.numpy(), m, min(width, 4), 77, width)
    assert np.array_equal(got, pack(quantize(y, m, min(width, 4), kernels.paired_uniforms(77, n)), width).numpy())
