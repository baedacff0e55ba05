"""Fixed-threshold sparsification with error feedback."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench import registry
from gcbench.compressor import ErrorFeedback
from gcbench.errors import ParamError


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
