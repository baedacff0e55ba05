"""Deep Gradient Compression: sampled selection, momentum correction and masking, warm-up, wire sizes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gcbench.compressors import registry
from gcbench.compressors._sparsify import DGC_LOWER, DGCStep, dgc_sample_plan, dgc_select, dgc_step_fast, dgc_step_torch
from gcbench.compressors.dgc import dgc_reference, scheduled_density
from gcbench.core import codec
from gcbench.core.compressor import State
from gcbench.core.errors import ParamError
from gcbench.core.payload import Payload


def _gen(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def _normal(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.from_numpy(_gen(seed).standard_normal(shape, dtype=np.float32))


def _sent(decoded: torch.Tensor) -> set[int]:
    return set(torch.nonzero(decoded.reshape(-1)).reshape(-1).tolist())


# ----------------------------------------------------------------------------- selection helper


@pytest.mark.parametrize("density", [0.001, 0.01])
def test_sampled_selection_count_in_bounds_on_heavy_tails(density: float) -> None:
    """Student-t (df=3) magnitudes: 0.8k..1.3k pass before truncation, min(count, k) after."""
    imp = torch.from_numpy(_gen(1).standard_t(3.0, 1_000_000).astype(np.float32)).abs()
    d = imp.numel()
    k = math.ceil(density * d)
    n, stride = dgc_sample_plan(d, density, 0.01)
    assert n >= max(math.ceil(0.01 * d), math.ceil(2 / density)) and stride > 1
    truncated = 0
    for start in range(0, stride, max(1, stride // 12)):
        sel = dgc_select(imp, k, density, n, stride, start)
        assert 0.8 * k <= sel.count_before <= 1.3 * k
        assert sel.indices.numel() == min(sel.count_before, k)
        idx = sel.indices
        assert torch.all(idx[1:] > idx[:-1])  # sorted, unique
        assert float(imp[idx].min()) >= sel.threshold
        # the passing set is the top-count_before set, so what is sent is a subset of it
        top = set(torch.topk(imp, sel.count_before).indices.tolist())
        assert set(idx.tolist()) <= top
        truncated += sel.count_before > k
    assert truncated > 0  # the truncation branch was exercised


def _plan_positions(d: int, n: int, stride: int, start: int) -> torch.Tensor:
    return torch.arange(start, start + n * stride, stride)


def test_selection_too_many_takes_exact_topk() -> None:
    """A sample of tiny values gives a low threshold: > 1.3k pass, so the exact top-k is taken."""
    d, density = 200_000, 0.001
    k = math.ceil(density * d)
    n, stride = dgc_sample_plan(d, density, 0.01)
    imp = torch.from_numpy(_gen(2).random(d, dtype=np.float32)) + 0.5
    start = 3
    imp[_plan_positions(d, n, stride, start)] = 1e-3
    sel = dgc_select(imp, k, density, n, stride, start)
    assert sel.exact_topk and sel.count_before == k
    assert set(sel.indices.tolist()) == set(torch.topk(imp, k).indices.tolist())


def test_selection_too_few_lowers_threshold_by_0_8() -> None:
    """Ten high samples put the threshold above the bulk; three ×0.8 rounds reach the 1.0 group."""
    d, density = 200_000, 0.001
    k = math.ceil(density * d)  # 200
    n, stride = dgc_sample_plan(d, density, 0.01)
    top = math.ceil(n * density)
    start = 5
    imp = torch.full((d,), 0.1)
    pos = _plan_positions(d, n, stride, start)
    imp[pos[:top]] = 1.9  # the sample's top values: the first threshold is 1.9
    free = torch.ones(d, dtype=torch.bool)
    free[pos] = False
    group = torch.nonzero(free).reshape(-1)[7 : 7 + k + 10]  # k + 10 entries at 1.0, none of them sampled
    imp[group] = 1.0
    sel = dgc_select(imp, k, density, n, stride, start)
    # 1.9 -> 1.52 -> 1.216 -> 0.9728: only the third lowering lets the 1.0 group pass
    assert sel.rounds == 3
    assert sel.threshold == pytest.approx(1.9 * DGC_LOWER**3)
    assert sel.count_before == k + 10 + top
    passing = torch.nonzero(imp >= sel.threshold).reshape(-1)
    assert torch.equal(sel.indices, passing[:k])  # official truncation keeps the first k positions


def test_exact_path_for_small_tensors() -> None:
    """d <= ceil(2/density) samples everything: the exact k-th largest, no adaptation."""
    assert dgc_sample_plan(1728, 0.001, 0.01) == (1728, 1)
    assert dgc_sample_plan(10_000, 0.5, 1.0) == (10_000, 1)
    imp = _normal((1728,), 3).abs()
    sel = dgc_select(imp, 2, 0.001, 1728, 1, 0)
    assert set(sel.indices.tolist()) == set(torch.topk(imp, 2).indices.tolist())


# ----------------------------------------------------------------------------- compressor state


def test_momentum_factor_masking_zeroes_u_and_v_at_sent_positions() -> None:
    x = _normal((300, 400), 4)
    for masking in (True, False):
        c = registry.create("dgc", density=0.01, masking=masking)
        st = c.init_state(0)
        _, dec = c.compress_and_decode(x, st)
        sent = torch.tensor(sorted(_sent(dec)))
        assert 0.8 * 1200 <= sent.numel() <= 1200
        u, v = st.tensors["momentum"].reshape(-1), st.tensors["velocity"].reshape(-1)
        xf = x.reshape(-1)
        assert torch.equal(dec.reshape(-1)[sent], xf[sent])  # first step: v = u = x
        assert torch.all(v[sent] == 0)
        keep = torch.ones(xf.numel(), dtype=torch.bool)
        keep[sent] = False
        assert torch.equal(v[keep], xf[keep])
        if masking:
            assert torch.all(u[sent] == 0) and torch.equal(u[keep], xf[keep])
        else:
            assert torch.equal(u, xf)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_correction_hand_computed(nesterov: bool) -> None:
    """Unsent entries accumulate v = x1(1+m) + x2, then x1(1+m+m²) + x2(1+m) + x3 (Nesterov shifted)."""
    m = 0.9
    shape = (100, 100)
    big = torch.tensor([5, 77, 1234, 4321, 9999])
    xs = []
    for t in range(3):
        x = _normal(shape, 10 + t)
        x.reshape(-1)[big] = 1000.0 + t  # always the largest: these k = 5 entries are the ones sent
        xs.append(x)
    c = registry.create("dgc", density=5e-4, momentum=m, nesterov=nesterov)
    st = c.init_state(0)
    decs = [c.compress_and_decode(x, st)[1] for x in xs[:2]]
    x1, x2 = (x.double().reshape(-1) for x in xs[:2])
    rest = torch.ones(10_000, dtype=torch.bool)
    rest[big] = False
    v2 = st.tensors["velocity"].double().reshape(-1)
    u2 = st.tensors["momentum"].double().reshape(-1)
    if nesterov:
        want_v = (1 + m + m * m) * x1 + (1 + m) * x2
    else:
        want_v = (1 + m) * x1 + x2
    assert torch.allclose(v2[rest], want_v[rest], rtol=1e-6, atol=1e-5)
    assert torch.allclose(u2[rest], (m * x1 + x2)[rest], rtol=1e-6, atol=1e-5)
    assert torch.all(v2[big] == 0) and torch.all(u2[big] == 0)
    # at step 2 the sent entries restarted from zero momentum and velocity: they send x2 (Nesterov: (1+m)·x2)
    assert _sent(decs[1]) == set(big.tolist())
    assert torch.allclose(decs[1].double().reshape(-1)[big], (1 + m if nesterov else 1.0) * x2[big])
    c.compress(xs[2], st)
    if not nesterov:
        x3 = xs[2].double().reshape(-1)
        v3 = st.tensors["velocity"].double().reshape(-1)
        want = (1 + m + m * m) * x1 + (1 + m) * x2 + x3
        assert torch.allclose(v3[rest], want[rest], rtol=1e-6, atol=1e-5)


def test_one_dimensional_tensors_send_the_momentum_update_dense() -> None:
    m = 0.9
    c = registry.create("dgc")
    st = c.init_state(0)
    u = torch.zeros(1000, dtype=torch.float64)
    for t in range(3):
        x = _normal((1000,), 20 + t)
        p, dec = c.compress_and_decode(x, st)
        u = m * u + x.double()
        assert p.meta["coding"] == "dense" and p.body_nbytes == 4 * 1000
        assert torch.allclose(dec.double(), u, rtol=1e-6, atol=1e-6)
    assert "velocity" not in st.tensors


def test_large_one_dimensional_tensors_are_sparsified() -> None:
    """A flat bucket (1-D, more than dense_max elements) is sparsified like a weight matrix, with the
    selection of the exact reference; at the boundary dense_max elements stay dense."""
    d = 200_000
    c = registry.create("dgc", density=0.001)
    st = c.init_state(0)
    x = _normal((d,), 25)
    p, dec = c.compress_and_decode(x, st)
    k = math.ceil(0.001 * d)
    assert p.meta["coding"] == "fixed"
    assert p.body_nbytes == math.ceil(int(p.meta["k"]) * (32 + math.ceil(math.log2(d))) / 8) < 4 * d / 100
    nnz = len(_sent(dec))
    assert nnz == int(p.meta["k"]) and 0.8 * k <= nnz <= k
    assert "velocity" in st.tensors
    # the reference applies the same rule: with the exact threshold both send the same top-k entries
    exact = registry.create("dgc", density=0.001, sample_ratio=1.0)
    dec_exact = exact.compress_and_decode(x, exact.init_state(0))[1]
    ref = dgc_reference(x, torch.zeros(d), torch.zeros(d), 0, exact.params)[0]
    assert len(_sent(dec_exact)) == k and torch.equal(dec_exact, ref)
    assert _sent(dec_exact) == set(torch.topk(x.abs(), k).indices.tolist())
    # boundary: numel == dense_max is dense, one more element is sparsified
    edge = registry.create("dgc", dense_max=1000)
    assert edge.compress(_normal((1000,), 26), edge.init_state(0)).meta["coding"] == "dense"
    assert edge.compress(_normal((1001,), 26), edge.init_state(0)).meta["coding"] == "fixed"


def test_dense_max_zero_sparsifies_every_one_dimensional_tensor() -> None:
    c = registry.create("dgc", density=0.01, dense_max=0, sample_ratio=1.0)
    st = c.init_state(0)
    u = torch.zeros(1000)
    v = torch.zeros(1000)
    for t in range(3):
        x = _normal((1000,), 27 + t)
        p, dec = c.compress_and_decode(x, st)
        ref, u, v = dgc_reference(x, u, v, t, c.params)
        assert p.meta["coding"] == "fixed" and int(p.meta["k"]) == 10 == len(_sent(dec))
        assert torch.equal(dec, ref)
    assert registry.create("dgc").compress(_normal((1,), 30), State(0)).meta["coding"] == "dense"
    assert registry.create("dgc", dense_max=0).compress(_normal((1,), 30), State(0)).meta["coding"] == "fixed"


# ----------------------------------------------------------------------------- warm-up


def test_warmup_densities_at_listed_steps() -> None:
    want = [0.25, 0.25, 0.0625, 0.0625, 0.015625, 0.015625, 0.00390625, 0.00390625, 0.001, 0.001]
    assert [scheduled_density(s, 0.001, 8) for s in range(10)] == want
    assert scheduled_density(0, 0.001, 0) == 0.001
    assert scheduled_density(5, 0.01, 8) == 0.015625 and scheduled_density(6, 0.01, 8) == 0.01  # never below density
    # through the compressor (exact threshold, tie-free data): k = ceil(density_t · d) per step
    d = 100 * 120
    for params in ({"warmup_steps": 8}, {"warmup_epochs": 4, "steps_per_epoch": 2}):
        c = registry.create("dgc", sample_ratio=1.0, **params)
        st = c.init_state(0)
        ks = [int(c.compress(_normal((100, 120), 30 + s), st).meta["k"]) for s in range(10)]
        assert ks == [math.ceil(w * d) for w in want]


def test_warmup_parameter_errors() -> None:
    with pytest.raises(ParamError, match="steps_per_epoch"):
        registry.create("dgc", warmup_epochs=4)
    with pytest.raises(ParamError, match="not both"):
        registry.create("dgc", warmup_epochs=4, steps_per_epoch=10, warmup_steps=5)


# ----------------------------------------------------------------------------- reference


@pytest.mark.parametrize("params", [
    {"density": 0.01, "sample_ratio": 1.0},
    {"density": 0.02, "sample_ratio": 1.0, "nesterov": True, "clip_norm": 50.0, "workers": 4},
    {"density": 0.05, "sample_ratio": 1.0, "masking": False, "warmup_steps": 4},
    {"density": 0.001},  # d = 1728 <= 2/density: the exact path by default
])
def test_fast_path_matches_reference(params: dict[str, object]) -> None:
    c = registry.create("dgc", **params)
    shape = (200, 300) if params.get("sample_ratio") == 1.0 else (64, 3, 3, 3)
    st = c.init_state(0)
    u = torch.zeros(shape)
    v = torch.zeros(shape)
    for t in range(6):
        x = _normal(shape, 40 + t)
        dec = c.compress_and_decode(x, st)[1]
        ref, u, v = dgc_reference(x, u, v, t, c.params)
        assert _sent(dec) == _sent(ref)
        assert torch.allclose(dec, ref, rtol=1e-6, atol=0)
        assert torch.allclose(st.tensors["momentum"], u, rtol=1e-6, atol=1e-6)
        assert torch.allclose(st.tensors["velocity"], v, rtol=1e-6, atol=1e-6)


def test_sampled_path_sends_largest_entries() -> None:
    """With sampling, what is sent is within the top-(1.3k) entries of |v| and about k of them."""
    x = torch.from_numpy(_gen(5).standard_t(3.0, (1000, 1000)).astype(np.float32))
    c = registry.create("dgc")
    st = c.init_state(7)
    dec = c.compress_and_decode(x, st)[1]
    sent = _sent(dec)
    assert 800 <= len(sent) <= 1000
    assert sent <= set(torch.topk(x.reshape(-1).abs(), 1300).indices.tolist())


def test_clipping_bounds_the_accumulated_gradient() -> None:
    """Local clipping scales x to norm clip_norm/sqrt(N) before accumulation, and only when larger."""
    x = _normal((50, 60), 6) * 10
    before = x.clone()
    c = registry.create("dgc", clip_norm=2.0, workers=4, masking=False)
    st = c.init_state(0)
    c.compress(x, st)
    u = st.tensors["momentum"]
    assert float(u.norm()) == pytest.approx(1.0, rel=1e-5)  # 2 / sqrt(4)
    assert torch.allclose(u / u.norm(), x / x.norm(), atol=1e-6)
    assert torch.equal(x, before)  # the caller's tensor is not scaled in place
    small = _normal((50, 60), 7) * 1e-3  # norm ~0.055 < 1: untouched
    st = c.init_state(0)
    c.compress(small, st)
    assert torch.equal(st.tensors["momentum"], small)


# ----------------------------------------------------------------------------- wire format


def test_paper_coding_is_48_bits_per_nonzero_plus_escapes() -> None:
    for cols, pos, vals, escapes in (
        (70_000, [5, 100_000, 139_999], [5.0, -3.0, 7.0], 1),  # run 99,994 > 65,535: one escape
        (140_000, [0, 200_000], [2.0, -4.0], 3),  # run 199,999 = 3·65,535 + 3,394: three escapes
    ):
        x = torch.zeros((2, cols))
        x.reshape(-1)[torch.tensor(pos)] = torch.tensor(vals)
        c = registry.create("dgc", index_coding="paper")
        p = c.compress(x, c.init_state(0))
        assert int(p.meta["k"]) == len(pos)
        assert 8 * p.body_nbytes == 48 * (len(pos) + escapes)
        assert 8 * p.body_nbytes == codec.sparse_bits(np.array(pos), 2 * cols, "paper")
        assert torch.equal(registry.create("dgc").decompress(Payload.from_bytes(p.to_bytes())), x)


@pytest.mark.parametrize("shape", [(1000, 1000), (64, 3, 3, 3), (513, 77)])
def test_fixed_coding_body_size(shape: tuple[int, ...]) -> None:
    """Body = nnz·(32 + ceil(log2 d)) bits rounded up to bytes."""
    c = registry.create("dgc", density=0.003)
    st = c.init_state(0)
    d = math.prod(shape)
    for t in range(3):
        p = c.compress(_normal(shape, 50 + t), st)
        nnz = int(p.meta["k"])
        assert nnz > 0
        assert p.body_nbytes == math.ceil(nnz * (32 + math.ceil(math.log2(d))) / 8)


# ----------------------------------------------------------------------------- drift over steps


def _stream(steps: int, shape: tuple[int, ...], seed: int = 0):
    """Gradients with a persistent mean (signal) plus noise, as over a stretch of training."""
    g = _gen(seed)
    mu = 0.3 * torch.from_numpy(g.standard_normal(shape, dtype=np.float32))
    for _ in range(steps):
        yield mu + torch.from_numpy(g.standard_normal(shape, dtype=np.float32))


def test_sum_of_updates_tracks_momentum_sgd() -> None:
    """‖Σ C_t − Σ u_t‖/‖Σ u_t‖ against uncompressed momentum SGD stays below 1 and shrinks.

    Without masking the identity Σ C_t + v_T = Σ u_t holds exactly; with masking (default) the
    entries that are sent lose their momentum tail, so the tracking is looser but still improves.
    """
    shape, m = (120, 250), 0.9
    for masking in (False, True):
        c = registry.create("dgc", density=0.01, masking=masking)
        st = c.init_state(0)
        sum_c = torch.zeros(shape, dtype=torch.float64)
        sum_u = torch.zeros_like(sum_c)
        u = torch.zeros_like(sum_c)
        rel = []
        for g in _stream(50, shape):
            sum_c += c.compress_and_decode(g, st)[1].double()
            u = m * u + g.double()
            sum_u += u
            rel.append(float((sum_c - sum_u).norm() / sum_u.norm()))
        if not masking:
            assert torch.allclose(sum_c + st.tensors["velocity"].double(), sum_u, rtol=1e-5, atol=1e-3)
            assert rel[49] < 0.7 * rel[4]
        assert rel[49] < rel[4] < 1.0
        assert rel[49] < 0.7


# ----------------------------------------------------------------------------- fused CPU step vs torch step

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _compare_steps(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, **kw: object) -> DGCStep:
    """Run dgc_step_fast and dgc_step_torch on copies; everything must agree bit for bit."""
    u1, v1, u2, v2 = u.clone(), v.clone(), u.clone(), v.clone()
    a = dgc_step_fast(x, u1, v1, **kw)  # type: ignore[arg-type]
    b = dgc_step_torch(x, u2, v2, **kw)  # type: ignore[arg-type]
    assert np.asarray(a.body).tobytes() == np.asarray(b.body).tobytes()
    assert (a.sent, a.threshold, a.count_before, a.exact_topk, a.rounds) == (b.sent, b.threshold, b.count_before, b.exact_topk, b.rounds)
    assert (a.decoded is None) == (b.decoded is None)
    if a.decoded is not None:
        assert torch.equal(a.decoded, b.decoded)
    assert torch.equal(u1, u2) and torch.equal(v1, v2)
    u.copy_(u1)
    v.copy_(v1)
    return a


def _kw(d: int, density: float = 0.001, start: int = 3, **over: object) -> dict[str, object]:
    n, stride = dgc_sample_plan(d, density, 0.01)
    kw: dict[str, object] = dict(momentum=0.9, nesterov=False, coef=None, k=math.ceil(density * d), density=density, num_samples=n,
                                 stride=stride, start=start, coding="fixed", masking=True, want_decoded=True)
    kw.update(over)
    return kw


@pytest.mark.parametrize("over", [
    {},
    {"masking": False, "want_decoded": False},
    {"nesterov": True},
    {"coef": 0.37},
    {"density": 0.01, "coding": "paper"},
    {"coding": "elias"},
    {"num_samples": 500_000, "stride": 1, "start": 0},  # the whole tensor is the sample (no adaptation)
], ids=str)
def test_fused_step_equals_torch_step(over: dict[str, object]) -> None:
    d = 500_000
    u = torch.zeros(d)
    v = torch.zeros(d)
    over = dict(over)
    density = float(over.pop("density", 0.001))  # type: ignore[arg-type]
    for t in range(3):
        x = torch.from_numpy(_gen(200 + t).standard_t(3.0, d).astype(np.float32))
        step = _compare_steps(x, u, v, **_kw(d, density, **{"start": 3 + t, **over}))
        assert step.sent > 0


def test_fused_step_exact_topk_and_lowering_branches() -> None:
    d, density = 500_000, 0.001
    kw = _kw(d, density, start=7)
    pos = _plan_positions(d, int(kw["num_samples"]), int(kw["stride"]), 7)  # type: ignore[call-overload]
    x = torch.from_numpy(_gen(300).random(d, dtype=np.float32)) + 0.5
    x[pos] = 1e-3  # a sample of tiny values: the threshold passes far more than 1.3·k
    step = _compare_steps(x, torch.zeros(d), torch.zeros(d), **kw)
    assert step.exact_topk and step.sent == kw["k"]
    x = torch.full((d,), 0.1)
    x[pos[: math.ceil(pos.numel() * density)]] = 1.9  # the sample's top: too high a threshold
    free = torch.ones(d, dtype=torch.bool)
    free[pos] = False
    x[torch.nonzero(free).reshape(-1)[:600]] = 1.0
    step = _compare_steps(x, torch.zeros(d), torch.zeros(d), **kw)
    assert step.rounds == 3


def test_class_reference_is_dgc_reference_from_the_state() -> None:
    c = registry.create("dgc", density=0.01, sample_ratio=1.0)
    st = c.init_state(0)
    x0, x1 = _normal((200, 300), 210), _normal((200, 300), 211)
    c.compress(x0, st)
    want = dgc_reference(x1, st.tensors["momentum"], st.tensors["velocity"], st.step, c.params)[0]
    assert torch.equal(type(c).reference(c, x1, st), want)
    assert torch.equal(c.compress_and_decode(x1, st)[1], want)


@cuda
def test_cuda_tensors_give_the_cpu_bytes() -> None:
    c = registry.create("dgc")
    s_cpu, s_gpu = c.init_state(3), c.init_state(3)
    for t in range(3):
        x = torch.from_numpy(_gen(220 + t).standard_t(3.0, (800, 700)).astype(np.float32))
        assert c.compress(x.cuda(), s_gpu).to_bytes() == c.compress(x, s_cpu).to_bytes()
        assert torch.equal(s_gpu.tensors["velocity"].cpu(), s_cpu.tensors["velocity"])
        assert torch.equal(s_gpu.tensors["momentum"].cpu(), s_cpu.tensors["momentum"])


# ----------------------------------------------------------------------------- one k: the exact path is top-k


@pytest.mark.parametrize(("shape", "density", "seed", "dropped"), [
    ((10, 10), 0.07, 2, 2.2635),  # 0.07·100 = 7.000000000000001: the threshold was the 8th largest
    ((300, 1000), 1e-5, 5, 4.8119),  # 1e-5·300000 = 3.0000000000000004: the largest entry was dropped
])
def test_exact_path_keeps_the_k_largest_when_density_times_d_is_inexact(
        shape: tuple[int, int], density: float, seed: int, dropped: float) -> None:
    """Version 2 computed k tolerantly but the threshold rank with a plain ceil: k + 1 passed and one of the k largest went."""
    x = _normal(shape, seed)
    k = round(density * x.numel())
    assert density * x.numel() != k  # the floating-point error this test is about
    top = set(torch.topk(x.reshape(-1).abs(), k).indices.tolist())
    assert any(abs(float(x.reshape(-1)[i].abs()) - dropped) < 1e-4 for i in top)  # the entry version 2 dropped
    for fast_path in (True, False):
        c = registry.create("dgc", density=density, sample_ratio=1.0)
        st = c.init_state(0)
        if fast_path:
            dec = c.compress_and_decode(x, st)[1]
        else:  # the torch path (other devices) makes the same selection
            d = x.numel()
            step = dgc_step_torch(x.reshape(-1), torch.zeros(d), torch.zeros(d), 0.9, False, None, k, density, d, 1, 0, "fixed", True, True)
            dec = step.decoded
        assert _sent(dec) == top


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 60), cols=st.integers(2, 90), density=st.floats(1e-3, 1.0), seed=st.integers(0, 2**31),
       ties=st.booleans())
def test_exact_path_sends_a_top_k_by_magnitude(rows: int, cols: int, density: float, seed: int, ties: bool) -> None:
    """sample_ratio = 1: exactly k = k_of(density, d) entries, none smaller than any entry left out (ties included)."""
    from gcbench.compressors._common import k_of

    x = _normal((rows, cols), seed)
    if ties:  # few distinct magnitudes: many ties at the k-th largest
        x = torch.round(x * 2) / 2
    d = x.numel()
    k = k_of(density, d)
    c = registry.create("dgc", density=density, sample_ratio=1.0, momentum=0.0, dense_max=0, min_dims=0)
    for fast_path in (True, False):
        if fast_path:
            dec = c.compress_and_decode(x, c.init_state(0))[1].reshape(-1)
        else:
            step = dgc_step_torch(x.reshape(-1), torch.zeros(d), torch.zeros(d), 0.0, False, None, k, density, d, 1, 0, "fixed", True, True)
            dec = step.decoded
        mag = x.reshape(-1).abs()
        kept = torch.zeros(d, dtype=torch.bool)
        kept[list(_sent(dec))] = True
        nonzero = int((mag > 0).sum())
        assert int(kept.sum()) == min(k, nonzero)
        if kept.any() and (~kept).any():
            assert float(mag[kept].min()) >= float(mag[~kept].max())
        if not ties:
            assert _sent(dec) == set(torch.topk(mag, min(k, nonzero)).indices.tolist())


def test_ties_at_the_threshold_never_displace_a_larger_entry() -> None:
    """|v| = 1, 1, 5 with k = 2: the threshold is 1; keeping the first two by position would drop the 5."""
    x = torch.tensor([[1.0, -1.0, 5.0]])
    c = registry.create("dgc", density=0.5, sample_ratio=1.0, momentum=0.0)
    p, dec = c.compress_and_decode(x, c.init_state(0))
    assert int(p.meta["k"]) == 2 and dec.tolist() == [[1.0, 0.0, 5.0]]
    d = 3
    step = dgc_step_torch(x.reshape(-1), torch.zeros(d), torch.zeros(d), 0.0, False, None, 2, 0.5, d, 1, 0, "fixed", True, True)
    assert step.decoded.tolist() == [1.0, 0.0, 5.0] and np.asarray(step.body).tobytes() == p.data.numpy().tobytes()


def test_sample_ratio_below_the_official_minimum_is_rejected() -> None:
    """The official code clamps sample_ratio to [0.01, 1]; gcbench says so instead of recording a value it did not use."""
    with pytest.raises(ParamError, match=r"dgc\.sample_ratio: must be in \[0\.01, 1\], got 0\.005"):
        registry.create("dgc", sample_ratio=0.005)
    assert registry.create("dgc", sample_ratio=0.01).params["sample_ratio"] == 0.01
