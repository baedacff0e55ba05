"""Top-k: exactly the k largest magnitudes, k·(32 + index bits) bits, optional error feedback."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.compressors import registry
from gcbench.compressors.registry import decompress
from gcbench.core.compressor import ErrorFeedback, State
from gcbench.core.params import INDEX_CODINGS
from gcbench.core.payload import Payload
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


@pytest.mark.parametrize("coding", INDEX_CODINGS)
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


# ----------------------------------------------------------------------------- fast path vs reference

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _big(seed: int, d: int = 1_100_000) -> torch.Tensor:
    """Large enough for the sampled selection path (>= 4·TOPK_SAMPLE elements); heavy tails, no ties."""
    return torch.from_numpy(np.random.Generator(np.random.PCG64(seed)).standard_t(3.0, d).astype(np.float32))


@pytest.mark.parametrize("density", [0.001, 0.01])
@pytest.mark.parametrize("ef", [False, True])
def test_fast_path_bytes_and_residual_equal_the_reference(density: float, ef: bool) -> None:
    from gcbench.compressors.topk import topk_reference_encode

    comp = registry.create("topk", density=density, error_feedback=ef)
    state = comp.init_state(0)
    for step in range(3):
        x = _big(10 + step)
        body, meta, ref_dec = topk_reference_encode(comp, x, state)  # reads the state, changes nothing
        a = ErrorFeedback.corrected(x, state)
        p, dec = comp.compress_and_decode(x, state)
        assert p.data.numpy().tobytes() == np.asarray(body).tobytes() and p.meta == meta
        assert torch.equal(dec, ref_dec)
        if ef:  # the residual is exactly a − decoded in float32, as the generic error-feedback path stores it
            assert torch.equal(state.tensors[ErrorFeedback.KEY], a - dec)
    assert torch.equal(type(comp).reference(comp, x, comp.init_state(0)), topk_reference_encode(comp, x, comp.init_state(0))[2])


def test_ties_at_the_kth_magnitude_keep_the_lowest_indices() -> None:
    x = torch.zeros(1_100_000)
    x[::1000] = 5.0  # 1100 clear winners
    x[7::500] = -1.0  # 2200 tied candidates (every other one overlaps the winners' stride: none here)
    k = 1100 + 300
    out = decompress(registry.create("topk", density=k / x.numel()).compress(x, State(0)))
    sent = torch.nonzero(out).reshape(-1).tolist()
    assert sent == sorted(list(range(0, 1_100_000, 1000)) + list(range(7, 1_100_000, 500))[:300])


def test_compress_and_compress_and_decode_leave_the_same_state_and_bytes() -> None:
    comp = registry.create("topk", density=0.01, error_feedback=True)
    s1, s2 = comp.init_state(0), comp.init_state(0)
    for step in range(3):
        x = _big(20 + step)
        p1 = comp.compress(x, s1)
        p2, _ = comp.compress_and_decode(x, s2)
        assert p1.to_bytes() == p2.to_bytes()
        assert torch.equal(s1.tensors[ErrorFeedback.KEY], s2.tensors[ErrorFeedback.KEY])


def test_a_payload_kept_by_the_caller_is_not_overwritten() -> None:
    comp = registry.create("topk", density=0.01, error_feedback=True)
    state = comp.init_state(0)
    p1, d1 = comp.compress_and_decode(_big(30), state)
    kept, kept_dec = p1.to_bytes(), d1.clone()
    comp.compress_and_decode(_big(31), state)
    assert p1.to_bytes() == kept and torch.equal(d1, kept_dec)


@cuda
def test_cuda_tensors_give_the_cpu_bytes() -> None:
    comp = registry.create("topk", density=0.001, error_feedback=True)
    s_cpu, s_gpu = comp.init_state(0), comp.init_state(0)
    for step in range(2):
        x = _big(40 + step)
        p_cpu = comp.compress(x, s_cpu)
        p_gpu = comp.compress(x.cuda(), s_gpu)
        assert p_gpu.to_bytes() == p_cpu.to_bytes()
        assert torch.equal(s_gpu.tensors[ErrorFeedback.KEY].cpu(), s_cpu.tensors[ErrorFeedback.KEY])


@pytest.mark.skipif(not kernels.NUMBA, reason="compares the numba kernels' selection with the torch one")
@pytest.mark.parametrize("k", [1, 5, 37, 999])
def test_the_torch_selection_ranks_nan_inf_and_ties_as_the_kernels(k: int) -> None:
    """The device path compares magnitudes as the kernels do (integer bit patterns): NaN above +inf, ties by index."""
    x = torch.from_numpy(np.round(np.random.default_rng(k).standard_normal(1000) * 4).astype(np.float32))  # many ties
    x[[3, 500, 900]] = float("nan")
    x[[10, 11]] = float("inf")
    x[12] = -float("inf")
    idx_fast, vals_fast = kernels.topk_tensor(x, k)
    idx_torch, vals_torch = kernels.topk_select_torch(x, k)
    assert torch.equal(idx_fast, idx_torch)
    assert vals_fast.numpy().tobytes() == vals_torch.numpy().tobytes()
