"""Tests of ``powersgd`` (Vogels et al. 2019): rank, error feedback, warm start, exchange, traffic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.compressors import registry
from gcbench.compressors.powersgd import (
    Q_KEY,
    matrix_shape,
    orthonormalize,
    orthonormalize_reference,
    powersgd_bits,
    powersgd_reference,
)
from gcbench.core.compressor import State
from gcbench.core.payload import Payload
from gcbench.core.protocol import ring_allreduce_bytes
from tests.compressors.test_topk_dither import ef_drift


def factors(payload) -> tuple[torch.Tensor, torch.Tensor]:
    """(P̂, Q) carried by a low-rank payload."""
    r = int(payload.meta["r"])
    rows, cols = matrix_shape(payload.shape)
    f = torch.from_numpy(payload.data.numpy().view("<f4").astype(np.float32))
    return f[: rows * r].reshape(rows, r), f[rows * r :].reshape(cols, r)


def first_q(seed: int, cols: int, r: int) -> torch.Tensor:
    """The warm-start Q a fresh state of ``seed`` draws on its first step."""
    return kernels.normals_torch(State(seed).randint64(), cols * r).reshape(cols, r)


@pytest.mark.parametrize("r", [1, 2, 4])
@pytest.mark.parametrize("shape", [(64, 3, 3, 3), (100, 80)])
def test_output_rank_at_most_r(r: int, shape: tuple[int, ...]) -> None:
    c = registry.create("powersgd", rank=r)
    st = c.init_state(0)
    for _ in range(3):
        x = torch.randn(shape)
        p, dec = c.compress_and_decode(x, st)
        rows, cols = matrix_shape(shape)
        sv = torch.linalg.svdvals(dec.reshape(rows, cols).double())
        assert float(sv[r:].max()) <= 1e-5 * float(sv[0])  # rank ≤ r up to float32 rounding
        assert float(sv[r - 1]) > 1e-2 * float(sv[0])  # and not a degenerate (rank < r) answer
        assert p.body_nbytes * 8 == powersgd_bits(shape, r) == 32 * r * (rows + cols)


def test_first_step_is_projection_onto_span_of_m_q() -> None:
    x = torch.randn(60, 40, generator=torch.Generator().manual_seed(1))
    c = registry.create("powersgd", rank=3)
    p, dec = c.compress_and_decode(x, c.init_state(7))
    ref = powersgd_reference(x, first_q(7, 40, 3))
    assert torch.allclose(dec, ref, atol=1e-5)
    p_hat, _ = factors(p)
    assert torch.allclose(p_hat.t() @ p_hat, torch.eye(3), atol=1e-5)  # orthonormal columns


def test_error_feedback_identity() -> None:
    c = registry.create("powersgd")
    st = c.init_state(0)
    gen = torch.Generator().manual_seed(2)
    for _ in range(5):
        x = torch.randn(32, 4, 5, generator=gen)
        e_old = st.tensors.get("residual", torch.zeros_like(x)).clone()
        _, dec = c.compress_and_decode(x, st)
        e_new = st.tensors["residual"]
        lhs = x.double() + e_old.double()
        assert torch.allclose(lhs, dec.double() + e_new.double(), rtol=0, atol=1e-5)
        assert e_new.norm() > 0


def test_warm_start_reuses_q() -> None:
    c = registry.create("powersgd", rank=2)
    st = c.init_state(3)
    gen = torch.Generator().manual_seed(3)
    x1, x2 = torch.randn(50, 30, generator=gen), torch.randn(50, 30, generator=gen)
    p1, _ = c.compress_and_decode(x1, st)
    _, q1 = factors(p1)
    assert torch.equal(st.tensors[Q_KEY], q1)  # the state keeps the step's final Q
    m2 = x2 + st.tensors["residual"]
    p2, dec2 = c.compress_and_decode(x2, st)
    p_hat2, _ = factors(p2)
    # the second step starts from Q1: P̂2 = orthonormalise(M2 Q1)
    assert torch.allclose(p_hat2, orthonormalize(m2 @ q1), atol=1e-6)
    assert torch.allclose(dec2, powersgd_reference(m2, q1), atol=1e-5)
    # and not from a fresh random Q (what a missing warm start would do)
    assert not torch.allclose(dec2, powersgd_reference(m2, first_q(3, 30, 2)), atol=1e-3)


def test_dense_for_vectors_and_small_matrices() -> None:
    c = registry.create("powersgd", rank=2)
    for shape in [(7,), (3, 4), (2, 50), ()]:
        x = torch.randn(shape)
        st = c.init_state(0)
        p, dec = c.compress_and_decode(x, st)
        assert p.meta["r"] == 0 and p.body_nbytes == 4 * x.numel()
        assert torch.equal(dec, x)
        assert torch.count_nonzero(st.tensors["residual"]) == 0
    # 2·(3 + 50) = 106 < 150: low rank
    assert registry.create("powersgd", rank=2).compress(torch.randn(3, 50), State(0)).meta["r"] == 2


def test_orthonormalize_handles_dependent_and_zero_columns() -> None:
    a = torch.randn(20, 1)
    p = torch.cat([a, 2 * a, torch.zeros(20, 1), torch.randn(20, 1)], 1)
    o = orthonormalize(p)
    assert torch.isfinite(o).all()
    assert torch.all(o[:, 1] == 0) and torch.all(o[:, 2] == 0)
    keep = o[:, [0, 3]]
    assert torch.allclose(keep.t() @ keep, torch.eye(2), atol=1e-6)
    full = torch.randn(30, 4)
    o = orthonormalize(full)
    ref = orthonormalize_reference(full)
    assert torch.allclose(o @ o.t(), ref @ ref.t(), atol=1e-5)  # same span


def test_exchange_with_identical_gradients_equals_single_worker() -> None:
    c = registry.create("powersgd", rank=2)
    gen = torch.Generator().manual_seed(4)
    single = c.init_state(9)
    workers = [c.init_state(9) for _ in range(3)]
    for _ in range(3):
        x = torch.randn(40, 6, 2, generator=gen)
        _, dec = c.compress_and_decode(x, single)
        res = c.exchange([x.clone(), x.clone(), x.clone()], workers)
        assert torch.allclose(res.aggregate, dec, atol=1e-5)
        for st in workers:
            assert torch.allclose(st.tensors["residual"], single.tensors["residual"], atol=1e-5)
            assert torch.allclose(st.tensors[Q_KEY], single.tensors[Q_KEY], atol=1e-5)


@pytest.mark.parametrize("ef_residual", ["aggregate", "local"])
def test_exchange_protocol(ef_residual: str) -> None:
    n, rows, cols, r = 3, 30, 20, 2
    c = registry.create("powersgd", rank=r, ef_residual=ef_residual)
    states = [c.init_state(5) for _ in range(n)]
    gen = torch.Generator().manual_seed(6)
    grads = [torch.randn(rows, cols, generator=gen) for _ in range(n)]
    res = c.exchange(grads, states)
    q0 = first_q(5, cols, r)
    p_hat = orthonormalize(torch.stack([g @ q0 for g in grads]).mean(0))
    q_ws = [g.t() @ p_hat for g in grads]
    q_mean = torch.stack(q_ws).mean(0)
    assert torch.allclose(res.aggregate, p_hat @ q_mean.t(), atol=1e-5)
    # P̂ Q̄ᵀ is the projection of the mean gradient onto span(P̂)
    mean_g = torch.stack(grads).mean(0)
    assert torch.allclose(res.aggregate, p_hat @ (p_hat.t() @ mean_g), atol=1e-5)
    for w, st in enumerate(states):
        local = p_hat @ q_ws[w].t()
        expect = grads[w] - (res.aggregate if ef_residual == "aggregate" else local)
        assert torch.allclose(st.tensors["residual"], expect, atol=1e-5)
        assert torch.allclose(st.tensors[Q_KEY], q_mean, atol=1e-6)  # shared warm start for the next step
        assert torch.allclose(c.decompress(res.payloads[w]), local, atol=1e-5)
        assert st.step == 1
    # either way the residuals sum to Σ M_w − N·aggregate
    total = sum(st.tensors["residual"] for st in states)
    assert torch.allclose(total, sum(grads) - n * res.aggregate, atol=1e-4)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_exchange_traffic_is_ring_allreduce_of_the_factors(n: int) -> None:
    rows, cols, r = 45, 33, 2
    c = registry.create("powersgd", rank=r)
    gen = torch.Generator().manual_seed(n)
    grads = [torch.randn(rows, cols, generator=gen) for _ in range(n)]
    res = c.exchange(grads, [c.init_state(0) for _ in range(n)])
    assert res.traffic.phases() == ["allreduce-P", "allreduce-Q"]
    p_bytes, q_bytes = 4 * rows * r, 4 * cols * r
    assert all(p.body_nbytes == p_bytes + q_bytes for p in res.payloads)  # the two factors
    for phase, size in (("allreduce-P", p_bytes), ("allreduce-Q", q_bytes)):
        assert res.traffic.sent(phase=phase) == res.traffic.received(phase=phase) == 2 * (n - 1) * size
        for w in range(n):
            # each worker sends and receives about 2·(N − 1)/N of the factor (chunks differ by one element)
            assert abs(res.traffic.sent(w, phase) - 2 * (n - 1) * size / n) <= 8
            assert abs(res.traffic.received(w, phase) - 2 * (n - 1) * size / n) <= 8


def test_ring_allreduce_bytes_exact() -> None:
    assert ring_allreduce_bytes(12, 3) == [(64, 64)] * 3  # chunks of 16 bytes, 4 of them each way
    assert ring_allreduce_bytes(10, 1) == [(0, 0)]
    sizes = ring_allreduce_bytes(10, 4)  # chunks 3, 3, 2, 2 elements
    assert sum(s for s, _ in sizes) == sum(r for _, r in sizes) == 2 * 3 * 40


def test_exchange_dense_tensors() -> None:
    c = registry.create("powersgd")
    grads = [torch.randn(9) for _ in range(3)]
    states = [c.init_state(0) for _ in range(3)]
    res = c.exchange(grads, states)
    assert torch.allclose(res.aggregate, torch.stack(grads).mean(0))
    assert res.traffic.phases() == ["allreduce-dense"]
    assert res.traffic.sent(phase="allreduce-dense") == 2 * 2 * 36


def test_ef_drift_bounded_and_shrinking() -> None:
    r = ef_drift("powersgd", 50, (40, 30), rank=2)
    assert max(r) < 1.0
    assert r[49] < 0.5 * r[4]


# ----------------------------------------------------------------------------- version 2 arithmetic (kept by version 3)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_version_two_products() -> None:
    """P = M Q and Q = Mᵀ P̂ to float64 accuracy, the same for every thread count; P̂Qᵀ rounded once."""
    from gcbench.compressors.powersgd import _reconstruct_torch, left_factor, reconstruct, right_factor

    assert registry.get("powersgd").version == 3  # version 3 changed only the first warm start's draw
    gen = torch.Generator().manual_seed(8)
    m = torch.randn(700, 900, generator=gen)  # enough work for the kernels to split over threads
    q = torch.randn(900, 3, generator=gen)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            p = left_factor(m, q)
            p_hat = orthonormalize(p).float().contiguous()
            results.append((p, p_hat, right_factor(m, p_hat), reconstruct(p_hat, right_factor(m, p_hat))))
    finally:
        torch.set_num_threads(before)
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)  # fixed row blocks: no dependence on the thread count
    p, p_hat, q_new, rec = results[0]
    assert torch.allclose(p, m.double() @ q.double(), rtol=1e-12, atol=1e-9)
    q64 = m.double().t() @ p_hat.double()
    assert torch.equal(q_new, q64.float()) or float((q_new.double() - q64).abs().max()) <= 1e-6 * float(q64.abs().max())
    want = (p_hat.double() @ q_new.double().t()).float()  # r = 3 products summed in float64, one rounding
    assert torch.equal(rec, _reconstruct_torch(p_hat, q_new))
    assert float((rec - want).abs().max()) <= 1e-6 * float(want.abs().max())


def test_residual_is_exactly_input_minus_what_the_receiver_decodes() -> None:
    c = registry.create("powersgd", rank=2)
    s1, s2 = c.init_state(4), c.init_state(4)
    gen = torch.Generator().manual_seed(9)
    for _ in range(3):
        x = torch.randn(640, 500, generator=gen)
        a = x + s1.tensors.get("residual", torch.zeros_like(x))
        p = c.compress(x, s1)
        p2, dec2 = c.compress_and_decode(x, s2)
        assert p.to_bytes() == p2.to_bytes()
        dec = c.decompress(p)
        assert torch.equal(dec, dec2)
        assert torch.equal(s1.tensors["residual"], a - dec)
        assert torch.equal(s1.tensors["residual"], s2.tensors["residual"])


def test_reference_is_the_float32_torch_step_within_rounding() -> None:
    c = registry.create("powersgd", rank=2)
    st = c.init_state(5)
    gen = torch.Generator().manual_seed(10)
    for _ in range(3):
        x = torch.randn(300, 400, generator=gen)
        ref = type(c).reference(c, x, st)
        dec = c.compress_and_decode(x, st)[1]
        assert torch.allclose(dec, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))


@cuda
def test_cuda_tensors_match_the_cpu_within_float64_rounding() -> None:
    c = registry.create("powersgd", rank=2)
    s_cpu, s_gpu = c.init_state(6), c.init_state(6)
    gen = torch.Generator().manual_seed(11)
    for _ in range(3):
        x = torch.randn(640, 500, generator=gen)
        d_cpu = c.compress_and_decode(x, s_cpu)[1]
        d_gpu = c.compress_and_decode(x.cuda(), s_gpu)[1]
        assert torch.allclose(d_gpu.cpu(), d_cpu, rtol=1e-5, atol=1e-5)
        assert torch.allclose(s_gpu.tensors["residual"].cpu(), s_cpu.tensors["residual"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(40, 30), (7,)], ids=["factors", "dense"])
@pytest.mark.parametrize("offset", [1, 2, 3])
def test_a_body_at_any_offset_of_its_buffer_decodes_alike(shape: tuple[int, ...], offset: int) -> None:
    """A body sliced out of a received buffer at an offset that is not a multiple of 4 decodes as the payload itself
    (the float32 view needs aligned bytes: the decoder copies them first)."""
    comp = registry.create("powersgd")
    p, decoded = comp.compress_and_decode(torch.randn(shape, generator=torch.Generator().manual_seed(offset)), comp.init_state(0))
    buf = torch.cat([torch.zeros(offset, dtype=torch.uint8), p.data])
    q = Payload.trusted(p.codec, p.version, p.dtype, p.shape, buf[offset:], dict(p.meta))
    assert torch.equal(comp.decompress(q), decoded)
