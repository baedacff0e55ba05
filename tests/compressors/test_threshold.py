"""Fixed-threshold sparsification with error feedback."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench.compressors import registry
from gcbench.core.compressor import ErrorFeedback
from gcbench.core.errors import ParamError


def _gen(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def _normal(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.from_numpy(_gen(seed).standard_normal(shape, dtype=np.float32))


def test_sends_exactly_the_entries_above_tau_and_keeps_the_rest() -> None:
    """Per step: sent = {|x + e| > τ} with their exact values; e_new = (x + e) off the sent set."""
    tau = 1.2
    c = registry.create("threshold", tau=tau)
    st = c.init_state(0)
    e = torch.zeros(80, 90)
    for step in range(5):
        x = _normal((80, 90), step)
        a = x + e
        want = a.abs() > tau
        p, dec = c.compress_and_decode(x, st)
        assert torch.equal(dec != 0, want)
        assert torch.equal(dec[want], a[want])
        assert int(p.meta["k"]) == int(want.sum())
        e_new = st.tensors[ErrorFeedback.KEY]
        assert torch.allclose(e_new, torch.where(want, 0.0, a), rtol=0, atol=1e-6)
        # error-feedback identity: x + e_old == decoded + e_new
        assert torch.allclose(x.double() + e.double(), dec.double() + e_new.double(), rtol=0, atol=1e-6)
        e = e_new.clone()


def test_entries_at_exactly_tau_are_not_sent() -> None:
    c = registry.create("threshold", tau=0.5)
    x = torch.tensor([[0.5, -0.5, 0.50001, -2.0]])
    dec = c.compress_and_decode(x, c.init_state(0))[1]
    assert dec.tolist() == [[0.0, 0.0, pytest.approx(0.50001), -2.0]]


def test_default_tau_and_its_range() -> None:
    assert registry.get("threshold").defaults["tau"] == 1e-3
    for bad in (0.0, -1.0):
        with pytest.raises(ParamError):
            registry.create("threshold", tau=bad)


@pytest.mark.parametrize("shape", [(1000, 1000), (513, 77), (4097,)])
def test_fixed_coding_body_size(shape: tuple[int, ...]) -> None:
    c = registry.create("threshold", tau=2.0)
    st = c.init_state(0)
    d = math.prod(shape)
    for t in range(2):
        p = c.compress(_normal(shape, 10 + t), st)
        nnz = int(p.meta["k"])
        assert nnz > 0
        assert p.body_nbytes == math.ceil(nnz * (32 + math.ceil(math.log2(d))) / 8)


def test_sum_of_decoded_tracks_sum_of_gradients() -> None:
    """‖Σ C_t − Σ g_t‖/‖Σ g_t‖ = ‖e_T‖/‖Σ g_t‖ is bounded and shrinks over 50 steps."""
    shape = (120, 250)
    g = _gen(0)
    mu = 0.3 * torch.from_numpy(g.standard_normal(shape, dtype=np.float32))
    c = registry.create("threshold", tau=2.5)
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
    assert rel[49] < 0.3 * rel[4] and rel[49] < 0.1


# ----------------------------------------------------------------------------- fast path vs reference

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize(("tau", "coding"), [(2.5, "fixed"), (1e-3, "fixed"), (2.0, "int32"), (2.5, "elias")])
def test_fast_path_bytes_and_residual_equal_the_reference(tau: float, coding: str) -> None:
    from gcbench.compressors.threshold import threshold_reference_encode

    c = registry.create("threshold", tau=tau, index_coding=coding)
    st = c.init_state(0)
    for step in range(3):
        x = _normal((600, 700), 60 + step)  # 420,000 elements: the kernels split the work over threads
        body, meta, ref_dec = threshold_reference_encode(c, x, st)
        a = ErrorFeedback.corrected(x, st)
        p, dec = c.compress_and_decode(x, st)
        assert p.data.numpy().tobytes() == np.asarray(body).tobytes() and p.meta == meta
        assert torch.equal(dec, ref_dec)
        assert torch.equal(st.tensors[ErrorFeedback.KEY], a - dec)  # as the generic error-feedback path stores it
        assert torch.equal(c.decompress(p), dec)


def test_compress_without_decoded_leaves_the_same_state() -> None:
    c = registry.create("threshold", tau=1.5)
    s1, s2 = c.init_state(0), c.init_state(0)
    for step in range(3):
        x = _normal((600, 700), 70 + step)
        assert c.compress(x, s1).to_bytes() == c.compress_and_decode(x, s2)[0].to_bytes()
        assert torch.equal(s1.tensors[ErrorFeedback.KEY], s2.tensors[ErrorFeedback.KEY])


@cuda
def test_cuda_tensors_give_the_cpu_bytes() -> None:
    c = registry.create("threshold", tau=1.5)
    s_cpu, s_gpu = c.init_state(0), c.init_state(0)
    for step in range(2):
        x = _normal((600, 700), 80 + step)
        assert c.compress(x.cuda(), s_gpu).to_bytes() == c.compress(x, s_cpu).to_bytes()
        assert torch.equal(s_gpu.tensors[ErrorFeedback.KEY].cpu(), s_cpu.tensors[ErrorFeedback.KEY])
