"""TernGrad (Wen et al. 2017): 2·d + 32 bits, unbiased w.r.t. the clipped gradient, scaler sharing."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
import torch

from gcbench.compressors import registry
from gcbench.compressors.registry import decompress
from gcbench.core.compressor import State
from gcbench.core.payload import Payload
from tests.conftest import looks_unbiased, normal, unbiasedness_statistic
from tests.kernels.helpers import torch_only


def clipped(x: torch.Tensor, c: float = 2.5) -> torch.Tensor:
    """The clipped gradient, computed here in float64: clamp to ±c·σ with σ the population std."""
    v = x.reshape(-1).double()
    sigma = float(torch.sqrt(((v - v.mean()) ** 2).mean()))
    return v.clamp(-c * sigma, c * sigma) if c > 0 and sigma > 0 else v


def heavy_tailed(d: int, seed: int) -> torch.Tensor:
    """Student-t(3): enough outliers that 2.5σ clipping changes several entries a lot."""
    return torch.from_numpy(np.random.Generator(np.random.PCG64(seed)).standard_t(3, d).astype(np.float32))


def samples(x: torch.Tensor, reps: int, **params: object) -> torch.Tensor:
    comp = registry.create("terngrad", **params)
    return torch.stack([decompress(comp.compress(x, State(1000 + r))).reshape(-1).double() for r in range(reps)])


def scaler_of(p: Payload) -> float:
    return struct.unpack("<f", p.to_bytes()[-4:])[0]


def test_hand_worked_encoding() -> None:
    x = torch.tensor([1.0, -1.0, 0.0, -1.0, 1.0])
    p = registry.create("terngrad", clip=0.0).compress(x, State(0))
    # every |x_i| / s is 0 or 1, so the draw is certain: codes 1, 2, 0, 2 | 1 (2 bits each, LSB first)
    assert p.data.tolist()[:2] == [0b10_00_10_01, 0b01]
    assert scaler_of(p) == 1.0
    assert decompress(p).tolist() == x.tolist()


@pytest.mark.parametrize("shape", [(1,), (7,), (1000,), (64, 3, 3, 3), (512, 512)], ids=str)
def test_body_size(shape: tuple[int, ...]) -> None:
    x = normal(shape, seed=3)
    d = x.numel()
    p = registry.create("terngrad").compress(x, State(0))
    assert p.body_nbytes == math.ceil((2 * d + 32) / 8) == math.ceil(2 * d / 8) + 4


def test_values_are_ternary_with_the_clipped_max_as_scaler() -> None:
    x = heavy_tailed(5000, seed=1)
    xc = clipped(x)
    assert (xc != x.double()).sum() > 10  # clipping bites on this input
    p = registry.create("terngrad").compress(x, State(0))
    s = scaler_of(p)
    assert s == pytest.approx(float(xc.abs().max()), rel=1e-6)
    out = decompress(p)
    assert set(out.unique().tolist()) <= {-s, 0.0, s}
    nz = out != 0
    assert torch.equal(torch.sign(out[nz]), torch.sign(x[nz]))
    zero_in = torch.zeros(100)
    zero_in[7] = 3.0
    assert torch.count_nonzero(decompress(registry.create("terngrad").compress(zero_in, State(0)))[torch.arange(100) != 7]) == 0


def test_unbiased_wrt_clipped_input_and_biased_wrt_raw_input() -> None:
    x = heavy_tailed(1000, seed=2)
    xc = clipped(x)
    reps = 400
    got = samples(x, reps)
    t_clip, n_eff = unbiasedness_statistic(got, xc)
    assert looks_unbiased(got, xc), f"T = {t_clip:.3f} (n_eff {n_eff:.0f}) for the clipped target"
    # the same statistic sees the clipping bias against the unclipped gradient
    t_raw, _ = unbiasedness_statistic(got, x.double())
    assert not looks_unbiased(got, x.double()), f"T = {t_raw:.3f} against the raw gradient"


def test_statistic_rejects_a_biased_ternarizer() -> None:
    """The unbiasedness check has power: deterministic rounding (|xc|/s > 1/2 -> ±s) is rejected."""
    x = heavy_tailed(1000, seed=2)
    xc = clipped(x)
    s = float(xc.abs().max())
    gen = np.random.Generator(np.random.PCG64(5))

    def rounded(_: int) -> torch.Tensor:
        return torch.where(xc.abs() / s > 0.5, torch.sign(xc) * s, 0.0)

    def wrong_probability(_: int) -> torch.Tensor:  # Bernoulli((|xc|/s)²): still stochastic, biased
        u = torch.from_numpy(gen.random(xc.numel()))
        return torch.where(u < (xc.abs() / s) ** 2, torch.sign(xc) * s, 0.0)

    for variant in (rounded, wrong_probability):
        assert not looks_unbiased(torch.stack([variant(r) for r in range(400)]), xc), variant.__name__


@pytest.mark.parametrize("clip", [2.5, 0.0])
def test_variance_matches_formula(clip: float) -> None:
    """E‖s·t − xc‖² = s‖xc‖₁ − ‖xc‖²."""
    x = heavy_tailed(1000, seed=3)
    xc = clipped(x, clip)
    s = float(xc.abs().max())
    expected = s * float(xc.abs().sum()) - float((xc**2).sum())
    reps = 300
    err = ((samples(x, reps, clip=clip) - xc) ** 2).sum(1)
    se = float(err.std()) / math.sqrt(reps)
    assert abs(float(err.mean()) - expected) < 5 * se, (float(err.mean()), expected, se)
    assert abs(float(err.mean()) - expected) < 0.05 * expected


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_exchange_shares_the_max_scaler(workers: int) -> None:
    comp = registry.create("terngrad")
    grads = [heavy_tailed(3000, seed=10 + w).reshape(30, 100) * (w + 1) for w in range(workers)]
    individual = [float(clipped(g).abs().max()) for g in grads]
    states = [comp.init_state(w) for w in range(workers)]
    res = comp.exchange(grads, states)
    shared = [scaler_of(p) for p in res.payloads]
    assert len(res.payloads) == workers
    assert shared == [shared[0]] * workers
    assert shared[0] == pytest.approx(max(individual), rel=1e-6)
    assert shared[0] > min(individual) * 1.5  # the workers really had different scalers
    for st in states:
        assert st.step == 1
    # every payload decodes on its own, to values in {−s, 0, s}, and the aggregate is their mean
    decoded = [decompress(Payload.from_bytes(p.to_bytes())) for p in res.payloads]
    for dec in decoded:
        assert set(dec.unique().tolist()) <= {-shared[0], 0.0, shared[0]}
    torch.testing.assert_close(res.aggregate, torch.stack(decoded).mean(0), rtol=1e-6, atol=1e-6)
    # traffic: the 4-byte scaler phase, then the all-gather of the real payloads
    assert res.traffic.phases() == ["scaler", "allgather"]
    sizes = [len(p.to_bytes()) for p in res.payloads]
    for w in range(workers):
        assert res.traffic.sent(w, "scaler") == 4 and res.traffic.received(w, "scaler") == 4 * (workers - 1)
        assert res.traffic.sent(w, "allgather") == sizes[w]
        assert res.traffic.received(w, "allgather") == sum(sizes) - sizes[w]
        assert res.traffic.sent(w) == 4 + sizes[w]


def test_exchange_without_sharing_keeps_own_scalers() -> None:
    comp = registry.create("terngrad", share_scaler=False)
    grads = [heavy_tailed(1000, seed=20 + w) * (w + 1) for w in range(3)]
    res = comp.exchange(grads, [comp.init_state(w) for w in range(3)])
    assert [scaler_of(p) for p in res.payloads] == pytest.approx([float(clipped(g).abs().max()) for g in grads], rel=1e-6)
    assert res.traffic.phases() == ["allgather"]


def test_exchange_with_shared_scaler_is_unbiased_for_the_clipped_mean() -> None:
    comp = registry.create("terngrad")
    grads = [heavy_tailed(500, seed=30 + w) * (w + 1) for w in range(3)]
    target = torch.stack([clipped(g) for g in grads]).mean(0)
    aggs = torch.stack(
        [comp.exchange(grads, [comp.init_state(100 * r + w) for w in range(3)]).aggregate.double() for r in range(300)]
    )
    assert looks_unbiased(aggs, target)


# ---------------------------------------------------------------------------- fast paths


@pytest.mark.parametrize("clip", [2.5, 0.0, 0.5])
@pytest.mark.parametrize("d", [1, 7, 1000, 70_001])
def test_fast_path_matches_the_torch_path(d: int, clip: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same key, same uniforms: the fused kernel and the plain torch definition send the same bytes."""
    x = heavy_tailed(d, seed=d)
    comp = registry.create("terngrad", clip=clip)
    fast = [comp.compress(x, State(s)) for s in range(3)]
    ref = [type(comp).reference(comp, x, State(s)) for s in range(3)]
    torch_only(monkeypatch)
    for s in range(3):
        slow = comp.compress(x, State(s))
        assert fast[s].to_bytes() == slow.to_bytes()
        assert torch.equal(decompress(slow).reshape(-1), ref[s])


def test_fast_exchange_matches_the_torch_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    comp = registry.create("terngrad")
    grads = [heavy_tailed(3000, seed=40 + w) * (w + 1) for w in range(3)]
    fast = comp.exchange(grads, [comp.init_state(w) for w in range(3)])
    torch_only(monkeypatch)
    slow = comp.exchange(grads, [comp.init_state(w) for w in range(3)])
    assert [p.to_bytes() for p in fast.payloads] == [p.to_bytes() for p in slow.payloads]
    assert torch.equal(fast.aggregate, slow.aggregate)


# ---------------------------------------------------------------------------- bias as the metrics report it


@pytest.mark.parametrize("clip", [2.5, 0.0])
def test_measured_bias_against_x_is_significant_only_with_clipping(clip: float) -> None:
    """gcbench's bias² (always against x) sees the clipping bias: > 5 standard errors with c = 2.5, ≈ 0 without.

    The expected value is the clipping bias itself, ‖clip(x) − x‖²/‖x‖², and the registry's flag
    says the same thing as the measurement.
    """
    from gcbench.measure.fidelity import fidelity

    x = heavy_tailed(2000, seed=7)
    reps = 200
    comp = registry.create("terngrad", clip=clip)
    decoded = [decompress(comp.compress(x, State(500 + r))) for r in range(reps)]
    fid = fidelity(x, decoded)
    assert fid.bias2 is not None and fid.bias_sq_se is not None
    z = fid.bias_sq / fid.bias_sq_se
    clip_bias = float(((clipped(x, clip) - x.double()) ** 2).sum() / (x.double() ** 2).sum())
    assert registry.get("terngrad").resolve_flags({"clip": clip}).biased == (clip > 0)
    if clip > 0:
        assert clip_bias > 0.05  # Student-t(3): clipping removes a sizeable part of ‖x‖²
        assert z > 5, f"bias² {fid.bias2:.4f} is only {z:.1f} standard errors above 0"
        assert fid.bias2 == pytest.approx(clip_bias, rel=0.25)
    else:
        assert clip_bias == 0.0
        assert abs(z) < 4, f"bias² {fid.bias2:.5f} is {z:.1f} standard errors from 0 without clipping"
