"""Tests of ``adacomp`` (Chen et al. 2018, reconstructed definition)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.compressors import registry
from gcbench.compressors.adacomp import RESIDUE, adacomp_bits, adacomp_reference, count_width, index_width
from gcbench.core.errors import PayloadError
from tests.compressors.test_topk_dither import ef_drift

# A hand-worked example: two bins of length 4, with a residue from an earlier step.
X = [0.5, -1.0, 1.25, 0.125, 2.0, 0.5, 0.0, 0.25]
E = [0.5, 0.5, -1.25, 0.0, -1.0, -2.0, 0.375, 0.0]
# G = E + X = [1.0, -0.5, 0.0, 0.125, 1.0, -1.5, 0.375, 0.25]
# H = G + X = [1.5, -1.5, 1.25, 0.25, 3.0, -1.0, 0.375, 0.5]
# bin 0: gmax = 1.0; |H| >= 1 at 0, 1 and 2, but G_2 = 0 (nothing to send) -> selected {0, 1}
# bin 1: gmax = 1.5; |H| >= 1.5 only at 4 (the bin's largest |G|, index 5, has |H| = 1.0) -> {4}
# scale = mean(1.0, 1.5) = 1.25


def run_once(x: list[float], e: list[float], **params: object) -> tuple[torch.Tensor, torch.Tensor, int]:
    c = registry.create("adacomp", **params)
    st = c.init_state(0)
    st.tensors[RESIDUE] = torch.tensor(e)
    p, dec = c.compress_and_decode(torch.tensor(x), st)
    assert torch.equal(c.decompress(p), dec)
    return dec, st.tensors[RESIDUE], p.body_nbytes


def test_hand_worked_sign_scale() -> None:
    dec, e_new, nbytes = run_once(X, E, bin_size=4)
    assert torch.nonzero(dec).reshape(-1).tolist() == [0, 1, 4]
    assert dec.tolist() == [1.25, -1.25, 0.0, 0.0, 1.25, 0.0, 0.0, 0.0]
    assert e_new.tolist() == [-0.25, 0.75, 0.0, 0.125, -0.25, -1.5, 0.375, 0.25]
    # 32 (scale) + 2 bins · 3 count bits + 3 selected · (2 index bits + 1 sign bit) = 47 bits
    assert adacomp_bits(2, 3, 4) == 47
    assert nbytes == 6


def test_hand_worked_no_quantization() -> None:
    dec, e_new, nbytes = run_once(X, E, bin_size=4, quantize="none")
    assert dec.tolist() == [1.0, -0.5, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert e_new.tolist() == [0.0, 0.0, 0.0, 0.125, 0.0, -1.5, 0.375, 0.25]
    # 2 bins · 3 count bits + 3 · (2 index bits + 32 value bits) = 108 bits
    assert adacomp_bits(2, 3, 4, "none") == 108
    assert nbytes == 14


def test_first_step_without_residue() -> None:
    # e = 0: G = x, H = 2x, so an element is selected when |x_i| >= gmax/2 of its bin
    x = [4.0, -1.0, 2.5, 0.5, 0.25, -0.25, 0.125, 0.0]
    dec, e_new, _ = run_once(x, [0.0] * 8, bin_size=4)
    # bin 0: gmax 4 -> |x| >= 2 at 0 and 2; bin 1: gmax 0.25 -> |x| >= 0.125 at 4, 5, 6
    # scale = (4 + 0.25)/2 = 2.125
    assert dec.tolist() == [2.125, 0.0, 2.125, 0.0, 2.125, -2.125, 2.125, 0.0]
    assert e_new.tolist() == [1.875, -1.0, 0.375, 0.5, -1.875, 1.875, -2.0, 0.0]


@pytest.mark.parametrize("quantize", ["sign_scale", "none"])
@pytest.mark.parametrize(("shape", "bin_size"), [((1000,), 7), ((64, 3, 3, 3), None), ((120, 100), None), ((513,), 1), ((5,), 50)])
def test_matches_reference_and_residue_identity(quantize: str, shape: tuple[int, ...], bin_size: int | None) -> None:
    c = registry.create("adacomp", bin_size=bin_size, quantize=quantize)
    st = c.init_state(0)
    gen = torch.Generator().manual_seed(5)
    for _ in range(4):
        x = torch.randn(shape, generator=gen)
        flat = x.reshape(-1)
        e_old = st.tensors.get(RESIDUE, torch.zeros(flat.numel())).clone()
        p, dec = c.compress_and_decode(x, st)
        L = int(p.meta["L"])
        sel, gq, e_ref = adacomp_reference(flat, e_old, L, quantize)
        assert torch.equal(dec.reshape(-1), gq)
        assert torch.equal(st.tensors[RESIDUE], e_ref)
        # the residue keeps everything not sent: G == Gq + e_new
        g = flat.double() + e_old.double()
        assert torch.allclose(g, gq.double() + st.tensors[RESIDUE].double(), rtol=0, atol=1e-6)
        # exact body size: per selected element ceil(log2 L) + 1 bits, a count per bin, 32 per tensor
        nbins = math.ceil(flat.numel() / L)
        assert p.body_nbytes == math.ceil(adacomp_bits(nbins, len(sel), L, quantize) / 8)


def test_bit_formula_widths() -> None:
    assert (count_width(50), index_width(50)) == (6, 6)
    assert (count_width(500), index_width(500)) == (9, 9)
    assert (count_width(4), index_width(4)) == (3, 2)
    assert (count_width(1), index_width(1)) == (1, 0)
    assert adacomp_bits(20, 7, 500) == 32 + 20 * 9 + 7 * 10


@pytest.mark.parametrize(
    ("shape", "L"), [((64, 3, 3, 3), 50), ((32, 16, 5), 50), ((300, 200), 500), ((1000,), 50), ((7,), 7), ((400, 1), 400)]
)
def test_default_bin_size_follows_the_shape(shape: tuple[int, ...], L: int) -> None:
    c = registry.create("adacomp")
    p = c.compress(torch.randn(shape), c.init_state(0))
    assert p.meta["L"] == L


def test_zero_bins_send_nothing() -> None:
    # bin 1 has G = 0 everywhere although x is not zero there (the residue cancels it): gmax = 0,
    # and |H| >= 0 holds for every element, yet nothing is selected there
    x = [1.0, -2.0, 0.5, 0.25, 1.0, -1.0, 3.0, 0.5]
    e = [0.0, 0.0, 0.0, 0.0, -1.0, 1.0, -3.0, -0.5]
    dec, e_new, _ = run_once(x, e, bin_size=4)
    assert dec[4:].tolist() == [0.0] * 4
    assert e_new[4:].tolist() == [0.0] * 4
    c = registry.create("adacomp", bin_size=4)
    p, out = c.compress_and_decode(torch.zeros(8), c.init_state(0))
    assert torch.equal(out, torch.zeros(8))
    assert p.body_nbytes == math.ceil(adacomp_bits(2, 0, 4) / 8)


def test_registered_as_reconstructed() -> None:
    info = registry.get("adacomp")
    assert info.reconstructed and info.error_feedback == "own" and info.stateful and info.biased
    assert "RECONSTRUCTED" in info.description


def test_ef_drift_bounded_and_shrinking() -> None:
    r = ef_drift("adacomp", 50, (40, 50), bin_size=50)
    assert max(r) < 1.0
    assert r[49] < 0.5 * r[4]


# ----------------------------------------------------------------------------- fast path vs torch path

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.skipif(not kernels.NUMBA, reason="compares the numba kernels' encoder with the torch one")
@pytest.mark.parametrize("quantize", ["sign_scale", "none"])
@pytest.mark.parametrize(("d", "L"), [(500_000, 500), (300_007, 50), (280_000, 1), (262_145, 262_145)])
def test_fast_encode_equals_torch_encode_and_decodes(quantize: str, d: int, L: int) -> None:
    from gcbench.compressors.adacomp import adacomp_fast_encode, adacomp_torch_encode

    gen = torch.Generator().manual_seed(d + L)
    e = torch.randn(d, generator=gen) * 0.5
    c = registry.create("adacomp", bin_size=L, quantize=quantize)
    for _ in range(2):
        x = torch.randn(d, generator=gen)
        body, gq, residue = adacomp_torch_encode(x, e, L, quantize)
        e_fast = e.clone()
        fast_body, decoded = adacomp_fast_encode(x.numpy(), e_fast.numpy(), L, quantize, True)
        assert fast_body.tobytes() == np.asarray(body).tobytes()
        assert decoded is not None and torch.equal(torch.from_numpy(decoded), gq)
        assert torch.equal(e_fast, residue)
        p = c.compress(x, c.init_state(0))  # a payload of this configuration, then this body in it
        p = type(p)(p.codec, p.version, p.dtype, p.shape, torch.from_numpy(fast_body), {"L": L, "q": quantize})
        assert torch.equal(c.decompress(p), gq)
        e = residue


@pytest.mark.parametrize("quantize", ["sign_scale", "none"])
def test_decode_into_a_reused_output_equals_the_torch_decode(quantize: str) -> None:
    """A decode of 2.1M elements (an 8 MB+ pooled output) right after another one's output was freed
    reuses that dirty buffer: every element the second payload does not select must still read 0."""
    from gcbench.compressors.adacomp import adacomp_torch_encode

    d, L = 2_100_000, 50
    gen = torch.Generator().manual_seed(7)
    c = registry.create("adacomp", bin_size=L, quantize=quantize)
    for step in range(3):  # decodes 2 and 3 get the freed output of the one before
        x = torch.randn(d, generator=gen) * (1 + step)
        e = torch.randn(d, generator=gen) * (0.5 if step != 1 else 0.0)  # step 1: fewer selected, the rest must be cleared
        body, gq, _ = adacomp_torch_encode(x, e, L, quantize)
        p = c.compress(x, c.init_state(0))
        p = type(p)(p.codec, p.version, p.dtype, p.shape, body, {"L": L, "q": quantize})
        got = c.decompress(p)
        assert torch.equal(got, gq), step
        del got


@cuda
def test_cuda_tensors_give_the_cpu_bytes() -> None:
    c = registry.create("adacomp")
    s_cpu, s_gpu = c.init_state(0), c.init_state(0)
    gen = torch.Generator().manual_seed(3)
    for _ in range(2):
        x = torch.randn(600, 700, generator=gen)
        assert c.compress(x.cuda(), s_gpu).to_bytes() == c.compress(x, s_cpu).to_bytes()
        assert torch.equal(s_gpu.tensors[RESIDUE].cpu(), s_cpu.tensors[RESIDUE])


@pytest.mark.parametrize("n", [1, 7, 8, 9, 127, 128, 129, 136, 1000, 8193, 100_003])
def test_pairwise_sum_is_numpys_sum_to_the_bit(n: int) -> None:
    """The torch path's scale sums the bin maxima in NumPy's order, so its float64 (and the float32 scale) is the CPU's."""
    from gcbench.compressors._adacomp_torch import pairwise_sum

    rng = np.random.default_rng(n)
    a = np.abs(rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)).astype(np.float32).astype(np.float64)
    assert float(pairwise_sum(torch.from_numpy(a))) == float(np.sum(a))


@pytest.mark.parametrize("quantize", ["sign_scale", "none"])
@pytest.mark.parametrize(("d", "L"), [(30_011, 50), (5_000, 1), (4_001, 4_001)])
def test_torch_decoder_equals_the_payloads_decode_and_refuses_bad_bins(quantize: str, d: int, L: int) -> None:
    from gcbench.compressors.adacomp import adacomp_torch_decode

    c = registry.create("adacomp", bin_size=L, quantize=quantize)
    st = c.init_state(0)
    gen = torch.Generator().manual_seed(d)
    for _ in range(2):
        p = c.compress(torch.randn(d, generator=gen), st)
        assert torch.equal(adacomp_torch_decode(p.data, d, L, quantize), c.decompress(p))
    with pytest.raises(PayloadError):  # a body cut short
        adacomp_torch_decode(p.data[:-1], d, L, quantize)
    cw = count_width(L)
    if cw <= 8 and 2**cw - 1 > L:  # the first bin's count field all ones: more than its bin holds
        bad = p.data.clone()
        head = 4 if quantize == "sign_scale" else 0
        bad[head] |= (1 << cw) - 1
        with pytest.raises(PayloadError, match="bin count"):
            adacomp_torch_decode(bad, d, L, quantize)
