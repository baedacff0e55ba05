"""``signsgd`` (d bits, decoded ±1) and ``efsignsgd`` (d + 32 bits, error feedback)."""

from __future__ import annotations

import math
import struct

import pytest
import torch

from gcbench.compressors import registry
from gcbench.compressors.registry import decompress
from gcbench.core.compressor import ErrorFeedback, State
from gcbench.core.payload import Payload
from tests.conftest import normal
from tests.kernels.helpers import torch_only

SHAPES = [(1,), (7,), (9,), (1000,), (64, 3, 3, 3), (512, 512)]


def test_signsgd_hand_worked() -> None:
    x = torch.tensor([1.0, -2.0, 0.0, 3.0, -0.5])
    p = registry.create("signsgd").compress(x, State(0))
    assert p.data.tolist() == [0b01101]  # LSB first: +, -, + (zero), +, -
    assert decompress(p).tolist() == [1.0, -1.0, 1.0, 1.0, -1.0]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_signsgd_body_and_values(shape: tuple[int, ...]) -> None:
    x = normal(shape, seed=sum(shape))
    d = x.numel()
    p = registry.create("signsgd").compress(x, State(0))
    assert p.body_nbytes == math.ceil(d / 8)
    out = decompress(Payload.from_bytes(p.to_bytes()))
    assert set(out.unique().tolist()) <= {-1.0, 1.0}
    assert torch.equal(out, torch.where(x >= 0, 1.0, -1.0))


def test_signsgd_all_zero_decodes_to_zero_but_a_single_zero_to_plus_one() -> None:
    z = registry.create("signsgd").compress(torch.zeros(10), State(0))
    assert z.body_nbytes == 2 and torch.count_nonzero(decompress(z)) == 0
    one = torch.zeros(10)
    one[3] = -1.0
    out = decompress(registry.create("signsgd").compress(one, State(0)))
    assert out[3].item() == -1.0 and (out[torch.arange(10) != 3] == 1.0).all()


def test_efsignsgd_hand_worked() -> None:
    x = torch.tensor([1.0, -2.0, 0.0, 3.0])
    comp = registry.create("efsignsgd")
    p = comp.compress(x, comp.init_state(0))
    assert p.to_bytes()[-5:] == bytes([0b1101]) + struct.pack("<f", 1.5)  # ‖x‖₁/d = 6/4
    assert decompress(p).tolist() == [1.5, -1.5, 1.5, 1.5]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_efsignsgd_body_size(shape: tuple[int, ...]) -> None:
    x = normal(shape, seed=1)
    d = x.numel()
    p = registry.create("efsignsgd").compress(x, State(0))
    assert p.body_nbytes == math.ceil((d + 32) / 8) == math.ceil(d / 8) + 4


def test_efsignsgd_error_feedback_identity_and_residual_applied() -> None:
    """x + e_old == decoded + e_new (float64) every step, and each step compresses x + e_old."""
    comp = registry.create("efsignsgd")
    state = comp.init_state(0)
    e_old = torch.zeros(500, dtype=torch.float64)
    for step in range(6):
        x = normal((500,), seed=10 + step) * (1 + step)
        p, decoded = comp.compress_and_decode(x, state)
        e_new = state.tensors[ErrorFeedback.KEY].double()
        a = x.double() + e_old
        torch.testing.assert_close(decoded.double() + e_new, a, rtol=0, atol=1e-5 * float(a.abs().max()))
        # the transmitted value is sign(a)·‖a‖₁/d of the *corrected* a, not of x
        scale = float(a.abs().mean())
        want = torch.where(a >= 0, 1.0, -1.0).double() * scale
        torch.testing.assert_close(decompress(p).double(), want, rtol=1e-6, atol=0)
        if step:
            assert not torch.allclose(want, torch.where(x >= 0, 1.0, -1.0).double() * float(x.abs().mean()))
        e_old = e_new
    assert state.step == 6


# ---------------------------------------------------------------------------- fast paths


@pytest.mark.parametrize("shape", [(7,), (1000,), (300, 301), (70_001,)], ids=str)
def test_signsgd_fast_path_matches_the_torch_path(shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    x = normal(shape, seed=4)
    x.view(-1)[::5] = 0.0
    comp = registry.create("signsgd")
    fast = comp.compress(x, State(0))
    torch_only(monkeypatch)
    slow = comp.compress(x, State(0))
    assert fast.to_bytes() == slow.to_bytes()
    assert torch.equal(decompress(fast), decompress(slow))
    assert torch.equal(decompress(fast).reshape(-1), type(comp).reference(comp, x, State(0)))


@pytest.mark.parametrize("shape", [(7,), (64, 3, 3, 3), (300, 301)], ids=str)
def test_efsignsgd_fused_step_matches_the_torch_path(shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels' two passes (formation with ‖a‖₁, then bits and residual) and the torch path
    (base formation, torch ``_encode``) give the same bytes, decoded tensors and residuals step
    after step (and the ``reference`` does too)."""
    comp = registry.create("efsignsgd")
    fused, generic, ref = comp.init_state(0), comp.init_state(0), comp.init_state(0)
    for step in range(4):
        x = normal(shape, seed=20 + step) * (1 + step)
        p1, d1 = comp.compress_and_decode(x, fused)
        with monkeypatch.context() as m:
            torch_only(m)
            p2, d2 = comp.compress_and_decode(x, generic)
        d3 = type(comp).reference(comp, x, ref)
        assert p1.to_bytes() == p2.to_bytes()
        assert torch.equal(d1, d2) and torch.equal(d1.reshape(-1), d3)
        assert torch.equal(fused.tensors["residual"], generic.tensors["residual"])
        assert torch.equal(fused.tensors["residual"], ref.tensors["residual"])
    assert fused.step == generic.step == ref.step == 4


def test_efsignsgd_residual_of_another_shape_counts_as_zero() -> None:
    comp = registry.create("efsignsgd")
    st = comp.init_state(0)
    st.tensors["residual"] = torch.full((5,), 100.0)
    x = normal((3, 4), seed=1)
    p, _ = comp.compress_and_decode(x, st)
    assert p.to_bytes() == comp.compress(x, comp.init_state(0)).to_bytes()
    assert st.tensors["residual"].shape == (3, 4)
