"""Gradient dropping: sampled quantile threshold, global vs layer scope, residual, quantized survivors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench.compressors import registry
from gcbench.compressors.graddrop import _GROUP_LEVELS
from gcbench.core.compressor import ErrorFeedback
from gcbench.core.params import INDEX_CODINGS


def _gen(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def _normal(shape: tuple[int, ...], seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.from_numpy(_gen(seed).standard_normal(shape, dtype=np.float32)) * scale


def _nonzero(t: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(t.reshape(-1)).reshape(-1)


@pytest.mark.parametrize("drop_ratio", [0.99, 0.9])
def test_threshold_keeps_one_minus_r_of_the_entries(drop_ratio: float) -> None:
    """T = sorted[max(0, (int)(m·R) − 1)] of every (d // m)-th |a| (Marian); about (1 − R)·d entries exceed it."""
    x = _normal((1000, 1000), 1)
    c = registry.create("graddrop", drop_ratio=drop_ratio)
    p, dec = c.compress_and_decode(x, c.init_state(0))
    flat = x.reshape(-1).numpy()
    sample = np.sort(np.abs(flat[:: flat.size // 100_000][:100_000]))
    t = sample[max(0, int(np.float32(sample.size) * np.float32(drop_ratio)) - 1)]  # float rate, as Marian
    sent = _nonzero(dec).numpy()
    assert np.array_equal(sent, np.flatnonzero(np.abs(flat) > t))
    assert int(p.meta["k"]) == sent.size
    assert abs(sent.size / flat.size - (1 - drop_ratio)) < 0.05 * (1 - drop_ratio)


def test_small_tensor_under_layer_scope_sends_its_largest_entry() -> None:
    """Marian's rank for 64 values at R = 0.99 is (int)(63.36) − 1 = 62, the second largest: the maximum is sent."""
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
        assert all(_GROUP_LEVELS not in s.values for s in states)  # the hand-over is cleaned up
    # layer: above sorted[(int)(0.99·10000) − 1] = sorted[9899] of each layer -> 100 entries each;
    # global: above sorted[(int)(0.99·20000) − 1] = sorted[19799] of both -> 200 entries, all large
    assert kept["layer"] == [100, 100]
    assert kept["global"] == [0, 200]


@pytest.mark.parametrize("quantize", ["none", "2bit"])
def test_global_group_equals_compressing_the_concatenation(quantize: str) -> None:
    """Strided positions of the group follow the concatenation (unequal sizes, stride > 1); so do 2-bit buckets."""
    sizes = [(3001,), (71, 70), (1999,)]
    xs = [_normal(s, 10 + i) for i, s in enumerate(sizes)]
    c = registry.create("graddrop", sample_size=1000, drop_ratio=0.95, quantize=quantize)
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


@pytest.mark.parametrize(("scale", "reps", "decoded"), [
    ("min", (5.0, 7.5), [-5.0, 5.0, -7.5, 7.5, -7.5]),  # bucket floors T and T + w
    ("mean", (6.0, 9.0), [-6.0, 6.0, -9.0, 9.0, -9.0]),  # sampled bucket means: (5+6+7)/3 and (8+9+10)/3
])
def test_two_bit_hand_worked_encoding(scale: str, reps: tuple[float, float], decoded: list[float]) -> None:
    """Marian's 2-bit scheme on |a| = 1..10, R = 0.5, every element sampled (m = 10).

    cut = (int)(10·0.5) − 1 = 4 -> T = 5; kept: 6..10 at positions 5..9.  max_val = 10 (the largest
    sampled), w = (10 − 5)/2 = 2.5; bucket = min(1, (int)((|a| − 5)/2.5)): 6, 7 -> 0; 8, 9, 10 -> 1.
    Average variant: sampled ranks 4..6 (5, 6, 7: values <= T + w = 7.5, the cut-off included) and
    7..9 (8, 9, 10).  Codes (sign | bucket << 1): 1, 0, 3, 2, 3 -> LSB first 0b10_11_00_01, 0b11.
    """
    x = torch.tensor([1.0, -2.0, 3.0, -4.0, 5.0, -6.0, 7.0, -8.0, 9.0, -10.0])
    c = registry.create("graddrop", drop_ratio=0.5, scope="layer", quantize="2bit", quant_scale=scale, index_coding="int32")
    st = c.init_state(0)
    p, dec = c.compress_and_decode(x, st)
    assert p.meta == {"k": 5, "coding": "int32", "q": "2bit"}
    body = p.data.numpy().tobytes()
    assert body == (np.array(reps, "<f4").tobytes() + bytes([0b10_11_00_01, 0b11])
                    + np.array([5, 6, 7, 8, 9], "<i4").tobytes())
    assert dec.tolist() == [0.0] * 5 + decoded
    assert torch.equal(c.decompress(p), dec)
    assert torch.equal(st.tensors[ErrorFeedback.KEY], x - dec)  # the quantization error stays in the residual


def test_two_bit_maximum_is_the_largest_sampled_magnitude() -> None:
    """An entry off the strided sample above the sampled maximum falls in the upper bucket (T + w), not its own value."""
    x = _normal((1000,), 8)
    x[5] = 100.0  # sample_size 100: stride 10, position 5 is never sampled
    c = registry.create("graddrop", drop_ratio=0.9, sample_size=100, scope="layer", quantize="2bit")
    p, dec = c.compress_and_decode(x, c.init_state(0))
    sample = np.sort(np.abs(x.numpy()[::10]))
    t, top = sample[int(np.float32(100) * np.float32(0.9)) - 1], sample[-1]
    w = np.float32((top - t) / np.float32(2))
    assert float(dec[5]) == float(np.float32(t + w))
    kept = _nonzero(dec)
    assert torch.equal(kept, torch.nonzero(x.abs() > float(t)).reshape(-1))
    upper = (x[kept].abs() - float(t)) / float(w) >= 1
    assert torch.equal(dec[kept].abs(), torch.where(upper, float(np.float32(t + w)), float(t)))
    d, k = x.numel(), kept.numel()
    assert p.body_nbytes == 8 + math.ceil(2 * k / 8) + math.ceil(k * math.ceil(math.log2(d)) / 8)


@pytest.mark.parametrize("ratio", [0.99, 0.9, 0.5, 0.29])
@pytest.mark.parametrize("m", [1, 2, 10, 64, 100, 101, 201, 1000, 100_000])
def test_cut_index_is_marians(m: int, ratio: float) -> None:
    """max(0, (int)(m·R) − 1) with the product in float32; tensors of 2..100 elements send their maximum at R = 0.99."""
    from gcbench.compressors.graddrop import marian_cut_index

    cut = marian_cut_index(m, ratio)
    assert cut == max(0, int(np.float32(m) * np.float32(ratio)) - 1)
    if ratio == 0.99 and 2 <= m <= 100:
        assert cut <= m - 2
    assert marian_cut_index(100, 0.29) == 28  # float32(0.29)·100 rounds to 29.0 before the truncation
    assert marian_cut_index(101, 0.99) == 98 and marian_cut_index(1, 0.99) == 0


def test_marians_rank_where_it_differs_from_the_lower_quantile() -> None:
    """101 elements at R = 0.99: Marian's cut is rank 98 (the third largest), the lower quantile's rank 99: two are sent."""
    x = _normal((101,), 9)
    c = registry.create("graddrop", scope="layer")
    dec = c.compress_and_decode(x, c.init_state(0))[1]
    assert set(_nonzero(dec).tolist()) == set(torch.topk(x.abs(), 2).indices.tolist())


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
    for coding in INDEX_CODINGS:
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


@pytest.mark.parametrize(("quantize", "coding"), [("none", "fixed"), ("none", "delta-varint"), ("1bit", "fixed"), ("2bit", "elias"),
                                                 ("2bit", "fixed")])
def test_fast_path_bytes_and_residual_equal_the_reference(quantize: str, coding: str) -> None:
    from gcbench.compressors.graddrop import graddrop_reference_encode

    c = registry.create("graddrop", quantize=quantize, index_coding=coding, scope="layer")
    st = c.init_state(0)
    for step in range(3):
        x = _normal((600, 700), 90 + step)  # several work items for the kernels
        body, meta, ref_dec = graddrop_reference_encode(c, x, st)
        a = ErrorFeedback.corrected(x, st)
        p, dec = c.compress_and_decode(x, st)
        assert p.data.numpy().tobytes() == np.asarray(body).tobytes() and p.meta == meta
        assert torch.equal(dec, ref_dec)
        assert torch.equal(st.tensors[ErrorFeedback.KEY], a - dec)
        assert torch.equal(c.decompress(p), dec)


@pytest.mark.parametrize("quantize", ["none", "2bit"])
def test_global_group_bytes_equal_the_reference_with_the_group_threshold(quantize: str) -> None:
    from gcbench.compressors.graddrop import graddrop_levels, graddrop_reference_encode

    c = registry.create("graddrop", sample_size=5000, quantize=quantize, quant_scale="mean")
    shapes = [(500, 600), (300_001,)]
    states = [c.init_state(i) for i in range(2)]
    for step in range(2):
        xs = [_normal(s, 100 + 10 * step + i) for i, s in enumerate(shapes)]
        corrected = [ErrorFeedback.corrected(x, st).reshape(-1) for x, st in zip(xs, states, strict=True)]
        levels = graddrop_levels([lambda pos, f=f: f[pos] for f in corrected], [f.numel() for f in corrected], c.params)
        refs = [graddrop_reference_encode(c, x, st, levels) for x, st in zip(xs, states, strict=True)]
        for (p, dec), (body, meta, ref_dec) in zip(c.compress_group(xs, states), refs, strict=True):
            assert p.data.numpy().tobytes() == np.asarray(body).tobytes() and p.meta == meta
            assert torch.equal(dec, ref_dec)


@cuda
def test_cuda_tensors_give_the_cpu_bytes() -> None:
    c = registry.create("graddrop", scope="layer")
    s_cpu, s_gpu = c.init_state(0), c.init_state(0)
    for step in range(2):
        x = _normal((600, 700), 110 + step)
        assert c.compress(x.cuda(), s_gpu).to_bytes() == c.compress(x, s_cpu).to_bytes()
        assert torch.equal(s_gpu.tensors[ErrorFeedback.KEY].cpu(), s_cpu.tensors[ErrorFeedback.KEY])


@pytest.mark.parametrize(("quantize", "scale"), [("none", "min"), ("2bit", "min"), ("2bit", "mean")])
def test_torch_route_gives_the_fast_path_bytes(quantize: str, scale: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The route other devices take (no numba kernels) samples, cuts and buckets exactly as the CPU path."""

    c = registry.create("graddrop", scope="layer", quantize=quantize, quant_scale=scale, sample_size=3000)
    xs = [_normal((300, 70), 120 + t) for t in range(3)]
    st = c.init_state(0)
    want = [c.compress(x, st).to_bytes() for x in xs]
    from gcbench import kernels

    monkeypatch.setattr(kernels, "fast_cpu", lambda *t: False)
    st = c.init_state(0)
    assert [c.compress(x, st).to_bytes() for x in xs] == want


@pytest.mark.parametrize("quant_scale", ["min", "mean"])
@pytest.mark.parametrize("m", [1, 2, 7, 100, 101, 5_000])
def test_device_levels_equal_the_host_levels(m: int, quant_scale: str) -> None:
    """The torch path's levels (T, the 2-bit width and representatives) are the host's float32 values."""
    from gcbench.compressors.graddrop import drop_levels, drop_levels_torch

    sample = np.abs(np.random.default_rng(m).standard_t(3.0, m)).astype(np.float32)
    for two_bit in (False, True):
        host = drop_levels(sample, 0.99, two_bit, quant_scale)
        dev = drop_levels_torch(torch.from_numpy(sample), 0.99, two_bit, quant_scale)
        assert float(dev.threshold) == host.threshold
        if two_bit:
            assert float(dev.width) == host.width and tuple(dev.reps.tolist()) == host.reps
