"""Top-k: exactly the k largest magnitudes, k·(32 + index bits) bits, optional error feedback."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench import codec, registry
from gcbench.compressor import ErrorFeedback, State, decompress
from gcbench.payload import Payload
from tests.conftest import expected_index_bits, normal


def top_set(x: torch.Tensor, k: int) -> list[int]:
    """Positions of the k largest |x| by a full sort (inputs have distinct magnitudes)."""
    order = np.argsort(-np.abs(x.reshape(-1).double().numpy()), kind="stable")
    return sorted(order[:k].tolist())


@pytest.mark.parametrize(
    ("shape", "density"),
    [((1,), 0.01), ((7,), 0.3), ((1000,), 0.01), ((64, 3, 3, 3), 0.1), ((512, 512), 0.001), ((100,), 0.07), ((1000,), 1.0)],
    ids=str,
)
def test_fixed_coding_body_size(shape: tuple[int, ...], density: float) -> None:
    x = normal(shape, seed=1)
    d = x.numel()
    k = max(1, min(d, math.ceil(round(density * d, 9))))
    p = registry.create("topk", density=density).compress(x, State(0))
    assert int(p.meta["k"]) == k
    assert p.body_nbytes == math.ceil(k * (32 + max(1, math.ceil(math.log2(d)) if d > 1 else 1)) / 8)


def test_density_rounding_in_binary_floating_point() -> None:
    # 0.07·100 = 7.000000000000001: k must be 7, and the body 7·(32 + 7) bits
    p = registry.create("topk", density=0.07).compress(normal((100,)), State(0))
    assert int(p.meta["k"]) == 7 and p.body_nbytes == math.ceil(7 * 39 / 8)


@pytest.mark.parametrize("coding", codec.INDEX_CODINGS)
@pytest.mark.parametrize("density", [0.001, 0.05, 0.5, 1.0])
def test_support_is_exactly_the_top_k(coding: str, density: float) -> None:
    x = normal((64, 3, 3, 3), seed=int(density * 1000))
    d = x.numel()
    k = math.ceil(density * d)
    p = registry.create("topk", density=density, index_coding=coding).compress(x, State(0))
    want = top_set(x, k)
    out = decompress(Payload.from_bytes(p.to_bytes())).reshape(-1)
    assert torch.nonzero(out).reshape(-1).tolist() == want
    assert torch.equal(out[want], x.reshape(-1)[want])  # values sent exactly as float32
    assert p.body_nbytes == 4 * k + math.ceil(expected_index_bits(np.array(want), d, coding) / 8)


def test_hand_worked() -> None:
    x = torch.tensor([0.5, -3.0, 1.0, 2.0, -0.25])
    p = registry.create("topk", density=0.4).compress(x, State(0))  # k = 2: indices 1 and 3
    # values in index order, then the two 3-bit indices 1, 3 packed LSB first: 0b011_001
    assert p.to_bytes()[-9:] == np.array([-3.0, 2.0], "<f4").tobytes() + bytes([0b011001])
    assert decompress(p).tolist() == [0.0, -3.0, 0.0, 2.0, 0.0]


def test_contractive() -> None:
    """‖C(x) − x‖² ≤ (1 − k/d)‖x‖² (Beznosikov's B3(d/k))."""
    for seed in range(5):
        x = normal((1000,), seed=seed)
        out = decompress(registry.create("topk", density=0.1).compress(x, State(0)))
        assert float(((out - x) ** 2).sum()) <= (1 - 0.1) * float((x**2).sum())


def test_error_feedback_identity_and_residual_applied() -> None:
    """x + e_old == decoded + e_new (float64) each step, and each step sends the top-k of x + e_old."""
    comp = registry.create("topk", density=0.05, error_feedback=True)
    assert comp.uses_error_feedback()
    state = comp.init_state(0)
    e_old = torch.zeros((40, 25), dtype=torch.float64)
    sent_total = torch.zeros((40, 25), dtype=torch.float64)
    x_total = torch.zeros((40, 25), dtype=torch.float64)
    for step in range(8):
        x = normal((40, 25), seed=100 + step)
        p, decoded = comp.compress_and_decode(x, state)
        e_new = state.tensors[ErrorFeedback.KEY].double()
        a = x.double() + e_old
        torch.testing.assert_close(decoded.double() + e_new, a, rtol=0, atol=1e-5)
        out = decompress(p).reshape(-1)
        assert torch.nonzero(out).reshape(-1).tolist() == top_set(a.float(), 50)
        e_old = e_new
        sent_total += out.double().reshape(40, 25)
        x_total += x.double()
    # telescoping: everything not yet sent is in the residual
    torch.testing.assert_close(sent_total + e_old, x_total, rtol=0, atol=1e-4)
    # without error feedback there is no residual and the same input gives the same output each step
    plain = registry.create("topk", density=0.05)
    st = plain.init_state(0)
    x = normal((40, 25), seed=1)
    assert plain.compress(x, st).to_bytes() == plain.compress(x, st).to_bytes()
    assert ErrorFeedback.KEY not in st.tensors
