"""Gradient dropping: sampled quantile threshold, global vs layer scope, residual, quantized survivors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench import codec, registry
from gcbench.compressor import ErrorFeedback
from gcbench.compressors.graddrop import _GROUP_THRESHOLD


def _gen(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def _normal(shape: tuple[int, ...], seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.from_numpy(_gen(seed).standard_normal(shape, dtype=np.float32)) * scale


def _nonzero(t: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(t.reshape(-1)).reshape(-1)


@pytest.mark.parametrize("drop_ratio", [0.99, 0.9])
def test_threshold_keeps_one_minus_r_of_the_entries(drop_ratio: float) -> None:
    """T is the lower R-quantile of every (d // m)-th |a|; about (1 − R)·d entries exceed it."""
    x = _normal((1000, 1000), 1)
    c = registry.create("graddrop", drop_ratio=drop_ratio)
    p, dec = c.compress_and_decode(x, c.init_state(0))
    flat = x.reshape(-1).numpy()
    sample = np.abs(flat[:: flat.size // 100_000][:100_000])
    t = np.quantile(sample, drop_ratio, method="lower")
    sent = _nonzero(dec).numpy()
    assert np.array_equal(sent, np.flatnonzero(np.abs(flat) > t))
    assert int(p.meta["k"]) == sent.size
    assert abs(sent.size / flat.size - (1 - drop_ratio)) < 0.05 * (1 - drop_ratio)


def test_small_tensor_under_layer_scope_sends_its_largest_entry() -> None:
    """The lower quantile of 64 values at R = 0.99 is the second largest: the maximum is sent."""
    x = _normal((64,), 2)
    c = registry.create("graddrop", scope="layer")
    dec = c.compress_and_decode(x, c.init_state(0))[1]
    assert _nonzero(dec).tolist() == [int(x.abs().argmax())]


def test_global_scope_thresholds_across_tensors_layer_scope_per_tensor() -> None:
    """Two layers, scales 1 and 100: one global threshold keeps (almost) only the large layer."""
    small, large = _normal((100, 100), 3), _normal((100, 100), 4, scale=100.0)
    kept = {}
    for scope in ("global", "layer"):
        c = registry.create("graddrop", scope=scope)
        states = [c.init_state(0), c.init_state(1)]
        out = c.compress_group([small, large], states)
        kept[scope] = [int(p.meta["k"]) for p, _ in out]
        assert all(_GROUP_THRESHOLD not in s.values for s in states)  # the hand-over is cleaned up
    # layer: above sorted[floor(0.99·9999)] = sorted[9899] of each layer -> 100 entries each;
    # global: above sorted[floor(0.99·19999)] = sorted[19799] of both -> 200 entries, all large
    assert kept["layer"] == [100, 100]
    assert kept["global"] == [0, 200]


def test_global_group_equals_compressing_the_concatenation() -> None:
    """Strided positions of the group follow the concatenation (unequal sizes, stride > 1)."""
    sizes = [(3001,), (71, 70), (1999,)]
    xs = [_normal(s, 10 + i) for i, s in enumerate(sizes)]
    c = registry.create("graddrop", sample_size=1000, drop_ratio=0.95)
    states = [c.init_state(i) for i in range(len(xs))]
    whole_state = c.init_state(9)
    for step in range(3):
        xs_t = [x * (1 + step) + _normal(x.shape, 20 + step) for x in xs]
        group = c.compress_group(xs_t, states)
        cat = torch.cat([x.reshape(-1) for x in xs_t])
        whole = c.compress_and_decode(cat, whole_state)[1]
        assert torch.equal(torch.cat([dec.reshape(-1) for _, dec in group]), whole)


@pytest.mark.parametrize("quantize", ["none", "1bit", "2bit"])
@pytest.mark.parametrize("scope", ["global", "layer"])
def test_residual_identity(quantize: str, scope: str) -> None:
    """x + e_old == decoded + e_new at every step (the quantization error stays in e)."""
    c = registry.create("graddrop", quantize=quantize, scope=scope, drop_ratio=0.9)
    shapes = [(40, 50), (300,)]
    states = [c.init_state(i) for i in range(2)]
    for step in range(4):
        xs = [_normal(s, 100 * step + i) for i, s in enumerate(shapes)]
        olds = [st.tensors.get(ErrorFeedback.KEY, torch.zeros(s)).double() for st, s in zip(states, shapes, strict=True)]
        out = c.compress_group(xs, states)
        for x, old, (_, dec), st in zip(xs, olds, out, states, strict=True):
            new = st.tensors[ErrorFeedback.KEY].double()
            assert torch.allclose(x.double() + old, dec.double() + new, rtol=0, atol=1e-6)
            assert int((dec != 0).sum()) > 0


@pytest.mark.parametrize("scale", ["min", "mean"])
def test_one_bit_survivors_decode_to_plus_minus_m(scale: str) -> None:
    x = _normal((200, 200), 5)
    fp32 = registry.create("graddrop", drop_ratio=0.95)
    plain = fp32.compress_and_decode(x, fp32.init_state(0))[1]
    c = registry.create("graddrop", drop_ratio=0.95, quantize="1bit", quant_scale=scale)
    p, dec = c.compress_and_decode(x, c.init_state(0))
    idx = _nonzero(plain)
    assert torch.equal(_nonzero(dec), idx)  # same survivors as fp32 values
    kept = x.reshape(-1)[idx]
    m = kept.abs().min() if scale == "min" else kept.abs().mean()
    assert torch.allclose(dec.reshape(-1)[idx], torch.sign(kept) * m, rtol=1e-6, atol=0)
    d, k = x.numel(), idx.numel()
    assert p.body_nbytes == 4 + math.ceil(k / 8) + math.ceil(k * math.ceil(math.log2(d)) / 8)


@pytest.mark.parametrize("scale", ["min", "mean"])
def test_two_bit_survivors_use_two_magnitudes(scale: str) -> None:
    x = _normal((200, 200), 6)
    c = registry.create("graddrop", drop_ratio=0.95, quantize="2bit", quant_scale=scale)
    p, dec = c.compress_and_decode(x, c.init_state(0))
    idx = _nonzero(dec)
    kept = x.reshape(-1)[idx]
    mag = kept.abs()
    median = torch.kthvalue(mag, (mag.numel() + 1) // 2).values
    high = mag > median
    pick = (lambda g: g.min()) if scale == "min" else (lambda g: g.mean())
    want = torch.sign(kept) * torch.where(high, pick(mag[high]), pick(mag[~high]))
    assert torch.allclose(dec.reshape(-1)[idx], want, rtol=1e-6, atol=0)
    d, k = x.numel(), idx.numel()
    assert p.body_nbytes == 8 + math.ceil(2 * k / 8) + math.ceil(k * math.ceil(math.log2(d)) / 8)


@pytest.mark.parametrize("shape", [(1000, 1000), (513, 77), (4097,)])
def test_fixed_coding_body_size(shape: tuple[int, ...]) -> None:
    """fp32 survivors: body = nnz·(32 + ceil(log2 d)) bits rounded up."""
    c = registry.create("graddrop")
    st = c.init_state(0)
    d = math.prod(shape)
    for t in range(2):
        p = c.compress(_normal(shape, 30 + t), st)
        nnz = int(p.meta["k"])
        assert nnz > 0
        assert p.body_nbytes == math.ceil(nnz * (32 + math.ceil(math.log2(d))) / 8)


def test_other_index_codings_decode() -> None:
    x = _normal((300, 300), 7)
    ref = None
    for coding in codec.INDEX_CODINGS:
        c = registry.create("graddrop", index_coding=coding)
        p, dec = c.compress_and_decode(x, c.init_state(0))
        assert torch.equal(registry.create("graddrop").decompress(p), dec)
        ref = dec if ref is None else ref
        assert torch.equal(dec, ref)


def test_sum_of_decoded_tracks_sum_of_gradients() -> None:
    """‖Σ C_t − Σ g_t‖/‖Σ g_t‖ = ‖e_T‖/‖Σ g_t‖ is bounded and shrinks over 50 steps."""
    shape = (120, 250)
    g = _gen(0)
    mu = 0.3 * torch.from_numpy(g.standard_normal(shape, dtype=np.float32))
    c = registry.create("graddrop")
    st = c.init_state(0)
    sum_c = torch.zeros(shape, dtype=torch.float64)
    sum_g = torch.zeros_like(sum_c)
    rel = []
    for _ in range(50):
        x = mu + torch.from_numpy(g.standard_normal(shape, dtype=np.float32))
        sum_c += c.compress_and_decode(x, st)[1].double()
        sum_g += x.double()
        rel.append(float((sum_c - sum_g).norm() / sum_g.norm()))
    assert torch.allclose(sum_c + st.tensors[ErrorFeedback.KEY].double(), sum_g, rtol=0, atol=1e-3)
    assert rel[49] < 0.7 * rel[4] and rel[49] < 0.6


# ----------------------------------------------------------------------------- fast path vs reference

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize(("quantize", "coding"), [("none", "fixed"), ("none", "delta-varint"), ("1bit", "fixed"), ("2bit", "elias")])
def test_fast_path_bytes_and_residual_equal_the_reference(quantize: str, coding: str) -> None:
    from gcbench.compressors.graddrop import graddrop_reference_encode

    c = registry.create("graddrop", quantize=quantize, index_coding=coding, scope="layer")
    st = c.init_state(0)
    for step in range(3):
        x = _normal((600, 700), 90 + step)  # several work items for the kernels
        body, meta, ref_dec = graddrop_reference_encode(c, x, st)
        a = ErrorFeedback.corrected(x, st)
        p, dec = c.compress_and_decode(x, st)
        assert p.data.numpy().tobytes() == body.tobytes() and p.meta == meta
        assert torch.equal(dec, ref_dec)
        assert torch.equal(st.tensors[ErrorFeedback.KEY], a - dec)
        assert torch.equal(c.decompress(p), dec)


def test_global_group_bytes_equal_the_reference_with_the_group_threshold() -> None:
    from gcbench.compressors.graddrop import graddrop_reference_encode, graddrop_threshold

    c = registry.create("graddrop", sample_size=5000)
    shapes = [(500, 600), (300_001,)]
    states = [c.init_state(i) for i in range(2)]
    for step in range(2):
        xs = [_normal(s, 100 + 10 * step + i) for i, s in enumerate(shapes)]
        corrected = [ErrorFeedback.corrected(x, st).reshape(-1) for x, st in zip(xs, states, strict=True)]
        thr = graddrop_threshold([lambda pos, f=f: f[pos] for f in corrected], [f.numel() for f in corrected], 0.99, 5000)
        refs = [graddrop_reference_encode(c, x, st, thr) for x, st in zip(xs, states, strict=True)]
        for (p, dec), (body, meta, ref_dec) in zip(c.compress_group(xs, states), refs, strict=True):
            assert p.data.numpy().tobytes() == body.tobytes() and p.meta == meta
            assert torch.equal(dec, ref_dec)


@cuda
def test_cuda_tensors_give_the_cpu_bytes() -> None:
    c = registry.create("graddrop", scope="layer")
    s_cpu, s_gpu = c.init_state(0), c.init_state(0)
    for step in range(2):
        x = _normal((600, 700), 110 + step)
        assert c.compress(x.cuda(), s_gpu).to_bytes() == c.compress(x, s_cpu).to_bytes()
        assert torch.equal(s_gpu.tensors[ErrorFeedback.KEY].cpu(), s_cpu.tensors[ErrorFeedback.KEY])
