"""Tests of ``natural`` (natural compression) and ``natural_dither`` (Horváth et al. 2019)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.compressors import registry
from gcbench.compressors.natural import (
    OMEGA_NATURAL,
    dither_encode,
    dither_reference,
    dither_values,
    level_bits,
    natural_bits,
    natural_codes,
    natural_dither_bits,
    natural_reference,
    natural_values,
    omega_natural_dither,
)
from gcbench.core.compressor import State
from gcbench.core.errors import PayloadError
from gcbench.core.payload import Payload

# ----------------------------------------------------------------------------- shared statistics


def unbiasedness_z(samples: torch.Tensor, x: torch.Tensor) -> tuple[float, float]:
    """(max per-element |z|, |aggregate z|) of the sample mean of ``samples`` (R × d) against ``x``.

    Elements whose samples never vary must equal x exactly (z = inf otherwise).  The aggregate
    z = Σ z_i / √d detects a small bias shared by many elements.
    """
    s = samples.double()
    r = s.shape[0]
    mean = s.mean(0)
    se = s.std(0, correction=1) / math.sqrt(r)
    dev = mean - x.double()
    var = se > 0
    if bool(((~var) & (dev != 0)).any()):
        return math.inf, math.inf
    z = dev[var] / se[var]
    if z.numel() == 0:
        return 0.0, 0.0
    return float(z.abs().max()), float(abs(z.sum()) / math.sqrt(z.numel()))


def assert_unbiased(samples: torch.Tensor, x: torch.Tensor, max_z: float = 5.5, agg_z: float = 4.5) -> None:
    zmax, zagg = unbiasedness_z(samples, x)
    assert zmax < max_z and zagg < agg_z, f"sample mean is biased: max |z| = {zmax:.2f}, aggregate |z| = {zagg:.2f}"


def repeat_decoded(name: str, x: torch.Tensor, reps: int, seed: int = 0, **params: object) -> torch.Tensor:
    """``reps`` independent compressions of ``x`` (fresh stream per repeat), decoded, stacked."""
    c = registry.create(name, **params)
    st = c.init_state(seed)
    out = []
    for _ in range(reps):
        out.append(c.decompress(c.compress(x, st)).reshape(-1))
    return torch.stack(out)


def mixed_values(d: int, seed: int) -> torch.Tensor:
    """Signed values spread over many binades (what gradients look like)."""
    g = np.random.Generator(np.random.PCG64(seed))
    mag = 2.0 ** g.uniform(-12, 6, d)
    return torch.from_numpy((mag * g.choice([-1.0, 1.0], d)).astype(np.float32))


def interior_values(d: int, seed: int) -> torch.Tensor:
    """Signed values 2^e·(1 + f), f in [0.05, 0.95]: every rounding probability is well inside (0, 1),
    so an unbiased compressor varies on every element and a deterministic one is caught."""
    g = np.random.Generator(np.random.PCG64(seed))
    mag = 2.0 ** g.integers(-12, 6, d) * (1.0 + g.uniform(0.05, 0.95, d))
    return torch.from_numpy((mag * g.choice([-1.0, 1.0], d)).astype(np.float32))


def dither_up_probability(x: torch.Tensor, s: int, p: str) -> torch.Tensor:
    """Probability that each element of natural dithering rounds up (from the definition)."""
    xd = x.double()
    n = float(xd.norm()) if p == "2" else float(xd.abs().max())
    u = xd.abs() / n
    first = 2.0 ** (1 - s)
    lo = torch.where(u < first, torch.zeros_like(u), 2.0 ** torch.floor(torch.log2(u.clamp(min=first))))
    hi = torch.where(u < first, torch.full_like(u, first), 2 * lo)
    return torch.where(u >= 1, torch.zeros_like(u), (u - lo) / (hi - lo))


# ----------------------------------------------------------------------------- natural compression


def test_natural_matches_reference_on_special_values() -> None:
    tiny = 2.0**-126
    vals = [0.0, -0.0, 1.0, -1.0, 1.5, -3.0, 0.75, 1e-3, -7.1e4, tiny, -tiny, tiny / 4, 3 * tiny / 8, 1e-45, 3e38, -3.4e38, 2.0**127]
    a = torch.tensor(vals * 20, dtype=torch.float32)
    u = State(3).uniform(a.numel())
    code, neg = natural_codes(a, u)
    fast = natural_values(code, neg)
    ref = natural_reference(a, u)
    assert torch.equal(fast, ref)
    # the top binade never overflows: 3e38 and -3.4e38 always go down to ±2^127
    assert torch.all(fast[a.abs() >= 2.0**127].abs() == 2.0**127)
    assert torch.isfinite(fast).all()


def test_natural_matches_reference_on_random_values() -> None:
    a = mixed_values(3000, 1)
    u = State(5).uniform(a.numel())
    code, neg = natural_codes(a, u)
    assert torch.equal(natural_values(code, neg), natural_reference(a, u))


def test_natural_outputs_are_zero_or_signed_powers_of_two() -> None:
    x = mixed_values(5000, 2)
    dec = repeat_decoded("natural", x, 3).reshape(-1)
    mant, _ = torch.frexp(dec.abs())
    assert torch.all((dec == 0) | (mant == 0.5))  # a power of two has mantissa exactly 1/2
    xs = x.repeat(3)
    assert torch.all((dec == 0) | (torch.sign(dec) == torch.sign(xs)))
    # each output is one of the two neighbours of its input
    ratio = dec.abs() / xs.abs()
    assert torch.all((ratio > 0.5) & (ratio <= 2.0))


def test_natural_inf_and_zero() -> None:
    c = registry.create("natural")
    x = torch.tensor([float("inf"), -float("inf"), 0.0, -0.0])
    out = c.decompress(c.compress(x, c.init_state(0)))
    assert out[0] == float("inf") and out[1] == -float("inf")
    assert out[2] == 0 and out[3] == 0 and not torch.signbit(out[2:]).any()


def test_natural_subnormals_round_unbiased_between_zero_and_smallest_normal() -> None:
    x = torch.full((4000,), 2.0**-128)  # a quarter of the smallest normal
    dec = repeat_decoded("natural", x, 1).reshape(-1)
    assert set(dec.unique().tolist()) <= {0.0, 2.0**-126}
    frac_up = float((dec > 0).double().mean())
    assert abs(frac_up - 0.25) < 4 * math.sqrt(0.25 * 0.75 / 4000)


def test_natural_is_unbiased() -> None:
    x = interior_values(64, 3)
    samples = repeat_decoded("natural", x, 2000)
    assert_unbiased(samples, x)


def test_unbiasedness_check_rejects_biased_roundings() -> None:
    """The statistic above has the power to catch plausible mistakes (else it tests nothing)."""
    x = interior_values(64, 3)
    st = State(0)
    ax = x.abs().double()
    low = 2.0 ** torch.floor(torch.log2(ax))
    # mistake 1: probability of rounding up measured against the upper power, (|x| − 2^e)/2^(e+1)
    wrong = []
    for _ in range(2000):
        u = st.uniform(64).double()
        wrong.append(torch.sign(x) * torch.where(u < (ax - low) / (2 * low), 2 * low, low))
    with pytest.raises(AssertionError):
        assert_unbiased(torch.stack(wrong), x)
    # mistake 2: deterministic rounding down
    with pytest.raises(AssertionError):
        assert_unbiased((torch.sign(x) * low).float().expand(2000, 64), x)


def test_natural_empirical_omega_is_at_most_one_eighth() -> None:
    # worst case of the variance bound: |x| = (4/3)·2^e gives exactly ω = 1/8
    g = np.random.Generator(np.random.PCG64(4))
    x = torch.from_numpy((4.0 / 3.0 * 2.0 ** g.integers(-20, 20, 1000) * g.choice([-1.0, 1.0], 1000)).astype(np.float32))
    dec = repeat_decoded("natural", x, 200).double()
    q = float(((dec - x.double()) ** 2).sum(1).mean() / (x.double() ** 2).sum())
    assert 0.95 * OMEGA_NATURAL < q <= 1.03 * OMEGA_NATURAL
    y = torch.randn(20000)
    dec = repeat_decoded("natural", y, 5).double()
    q = float(((dec - y.double()) ** 2).sum(1).mean() / (y.double() ** 2).sum())
    assert q <= OMEGA_NATURAL


@pytest.mark.parametrize("d", [1, 7, 8, 9, 1000, 1001])
def test_natural_bit_count_is_exactly_nine_per_element(d: int) -> None:
    c = registry.create("natural")
    p = c.compress(torch.randn(d), c.init_state(0))
    assert p.body_nbytes == math.ceil(natural_bits(d) / 8) == math.ceil(9 * d / 8)
    assert p.nbytes == len(p.to_bytes())


# ----------------------------------------------------------------------------- natural dithering


@pytest.mark.parametrize(("s", "p"), [(8, "2"), (3, "2"), (8, "inf"), (1, "inf")])
def test_dither_matches_reference(s: int, p: str) -> None:
    v = mixed_values(2000, 6)
    u = State(7).uniform(v.numel())
    n, levels, neg = dither_encode(v, s, p, u)
    expect_n = float(np.float32(float(v.double().norm()))) if p == "2" else float(v.abs().max())
    assert n == expect_n
    assert torch.equal(dither_values(levels, neg, n, s), dither_reference(v, float(n), s, u))


@pytest.mark.parametrize(("s", "p"), [(8, "2"), (4, "inf")])
def test_natural_dither_outputs_are_norm_times_a_level(s: int, p: str) -> None:
    x = mixed_values(3000, 8)
    c = registry.create("natural_dither", s=s, p=p)
    out = c.decompress(c.compress(x, c.init_state(0)))
    n = float(np.float32(float(x.double().norm()))) if p == "2" else float(x.abs().max())
    levels = torch.tensor([0.0] + [2.0 ** (j - s) for j in range(1, s + 1)])
    ratio = (out.abs() / n).reshape(-1, 1)
    assert torch.isclose(ratio, levels, rtol=1e-6, atol=0).any(1).all()
    assert torch.all((out == 0) | (torch.sign(out) == torch.sign(x)))
    if p == "inf":  # the largest element has u = 1 and keeps its exact value
        i = int(x.abs().argmax())
        assert out[i] == x[i]


def dither_test_input(s: int, p: str, seed: int) -> torch.Tensor:
    """64 values whose ratios u fall inside the level brackets (every level pair is used), so every
    rounding probability is in [0.02, 0.98] (asserted)."""
    g = np.random.Generator(np.random.PCG64(seed))
    j = g.integers(0, s, 63)  # bracket [l_j, l_(j+1)], l_0 = 0
    lo = np.where(j == 0, 0.0, 2.0 ** (j - s))
    hi = 2.0 ** (j + 1 - s)
    u = np.concatenate([[1.0], lo + g.uniform(0.1, 0.9, 63) * (hi - lo)])
    x = torch.from_numpy((3.7 * u * g.choice([-1.0, 1.0], 64)).astype(np.float32))
    prob = dither_up_probability(x, s, p)[1:]
    assert bool(((prob > 0.02) & (prob < 0.98)).all()), "test input does not exercise the rounding"
    return x


@pytest.mark.parametrize(("s", "p"), [(3, "inf"), (8, "inf"), (2, "2")])
def test_natural_dither_is_unbiased(s: int, p: str) -> None:
    x = dither_test_input(s, p, 9)
    samples = repeat_decoded("natural_dither", x, 2000, s=s, p=p)
    assert_unbiased(samples, x)


def test_dither_biased_variants_are_rejected() -> None:
    """Plausible mistakes fail the same unbiasedness check."""
    s = 3
    x = dither_test_input(s, "inf", 9)
    # mistake 1: always rounding down to the lower level (uniforms of 1 never round up)
    n, levels, neg = dither_encode(x, s, "inf", torch.ones(64))
    with pytest.raises(AssertionError):
        assert_unbiased(dither_values(levels, neg, n, s).expand(2000, 64), x)
    # mistake 2: probability of rounding up taken as u/l_high instead of (u − l_low)/(l_high − l_low)
    st = State(1)
    xd = x.double()
    u = xd.abs() / xd.abs().max()
    prob = dither_up_probability(x, s, "inf")
    lo = torch.where(u < 2.0 ** (1 - s), 0.0, 2.0 ** torch.floor(torch.log2(u.clamp(min=2.0 ** (1 - s)))))
    hi = torch.where(u < 2.0 ** (1 - s), 2.0 ** (1 - s), 2 * lo)
    wrong = []
    for _ in range(2000):
        r = st.uniform(64).double()
        pick = torch.where(r < u / hi, hi, lo)
        wrong.append(torch.sign(xd) * pick * float(xd.abs().max()))
    assert not torch.allclose(prob, u / hi)  # the mistake really differs
    with pytest.raises(AssertionError):
        assert_unbiased(torch.stack(wrong), x)


@pytest.mark.parametrize(("d", "s"), [(16, 2), (64, 4), (256, 8)])
def test_natural_dither_empirical_omega_within_bound(d: int, s: int) -> None:
    x = torch.randn(d, generator=torch.Generator().manual_seed(d))
    dec = repeat_decoded("natural_dither", x, 400, s=s).double()
    q = float(((dec - x.double()) ** 2).sum(1).mean() / (x.double() ** 2).sum())
    assert q <= omega_natural_dither(d, s, "2") * 1.05


@pytest.mark.parametrize("s", [1, 2, 3, 7, 8, 15, 16, 31])
@pytest.mark.parametrize("d", [1, 5, 1000])
def test_natural_dither_bit_count(d: int, s: int) -> None:
    c = registry.create("natural_dither", s=s)
    p = c.compress(torch.randn(d), c.init_state(0))
    assert p.body_nbytes == math.ceil(natural_dither_bits(d, s) / 8) == math.ceil((32 + d * (1 + math.ceil(math.log2(s + 1)))) / 8)
    assert level_bits(s) == math.ceil(math.log2(s + 1))


def test_natural_dither_all_zero() -> None:
    c = registry.create("natural_dither")
    p = c.compress(torch.zeros(100), c.init_state(0))
    out = c.decompress(p)
    assert torch.equal(out, torch.zeros(100))
    assert p.body_nbytes == math.ceil(natural_dither_bits(100, 8) / 8)


# ----------------------------------------------------------------------------- fast paths


def special_and_mixed(d: int) -> torch.Tensor:
    tiny = 2.0**-126
    special = [0.0, -0.0, 1.0, -1.5, tiny, -tiny / 4, 3e38, -3.4e38, 2.0**127, float("inf"), -float("inf"), 1e-45]
    return torch.cat([torch.tensor(special, dtype=torch.float32), mixed_values(d, 11)])


@pytest.mark.parametrize("d", [1, 1000, 70_001])
def test_natural_fast_path_matches_the_torch_path(d: int, monkeypatch: pytest.MonkeyPatch) -> None:
    x = special_and_mixed(d)
    c = registry.create("natural")
    fast = [c.compress(x, c.init_state(s)) for s in range(2)]
    fast_dec = [c.decompress(p) for p in fast]
    ref = [type(c).reference(c, x, c.init_state(s)) for s in range(2)]
    monkeypatch.setattr(kernels, "cpu_fast", lambda *t: False)
    monkeypatch.setattr(kernels, "available", lambda: False)
    for s in range(2):
        slow = c.compress(x, c.init_state(s))
        assert fast[s].to_bytes() == slow.to_bytes()
        assert torch.equal(fast_dec[s], c.decompress(slow))
        assert torch.equal(fast_dec[s], ref[s])


def test_natural_kernel_matches_the_per_element_definition() -> None:
    """The fused kernel against the per-element oracle, with the same counter-based uniforms."""
    x = special_and_mixed(3000)
    x = x[torch.isfinite(x)]  # the per-element oracle works on finite floats
    c = registry.create("natural")
    st = c.init_state(4)
    key = st.clone().randint64()  # the key compress draws first
    out = c.decompress(c.compress(x, st))
    assert torch.equal(out, natural_reference(x, kernels.uniforms(key, x.numel())))


@pytest.mark.parametrize(("s", "p"), [(8, "2"), (3, "inf"), (1, "2"), (120, "inf"), (15, "2")])
@pytest.mark.parametrize("d", [5, 1000, 70_001])
def test_natural_dither_fast_path_matches_the_torch_path(d: int, s: int, p: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = mixed_values(d, d + s)
    c = registry.create("natural_dither", s=s, p=p)
    fast = [c.compress(x, c.init_state(k)) for k in range(2)]
    fast_dec = [c.decompress(q) for q in fast]
    ref = [type(c).reference(c, x, c.init_state(k)) for k in range(2)]
    monkeypatch.setattr(kernels, "cpu_fast", lambda *t: False)
    monkeypatch.setattr(kernels, "available", lambda: False)
    for k in range(2):
        slow = c.compress(x, c.init_state(k))
        assert fast[k].to_bytes() == slow.to_bytes()
        assert torch.equal(fast_dec[k], c.decompress(slow))
        assert torch.equal(fast_dec[k], ref[k])


def test_natural_dither_kernel_matches_the_per_element_definition() -> None:
    x = mixed_values(2000, 6)
    s = 5
    c = registry.create("natural_dither", s=s, p="inf")
    st = c.init_state(9)
    key = st.clone().randint64()
    out = c.decompress(c.compress(x, st))
    n = float(x.abs().max())
    assert torch.equal(out, dither_reference(x, n, s, kernels.uniforms(key, x.numel())))


def test_natural_dither_decode_rejects_a_level_above_s() -> None:
    """s = 3 and s = 2 share 3-bit fields; level 3 read under s = 2 is corrupt."""
    c = registry.create("natural_dither", s=3, p="inf")
    p = c.compress(torch.ones(16), c.init_state(0))  # every ratio is 1: level s = 3
    bad = Payload(p.codec, p.version, p.dtype, p.shape, p.data.clone(), {"s": 2})
    with pytest.raises(PayloadError, match="above s"):
        registry.create("natural_dither").decompress(bad)


def test_float16_top_binade_never_overflows_to_inf() -> None:
    from gcbench.compressors import registry

    comp = registry.create("natural")
    x = torch.tensor([40000.0, -60000.0, 65504.0, 33000.0, 1.5, -0.75, float("inf")], dtype=torch.float16).repeat(200)
    st = comp.init_state(3)
    decs = [comp.decompress(comp.compress(x, st)) for _ in range(20)]
    for dec in decs:
        assert dec.dtype == torch.float16
        finite = torch.isfinite(x)
        assert torch.isfinite(dec[finite]).all() and torch.isinf(dec[~finite]).all()
        top = finite & (x.float().abs() >= 2.0**15)
        assert (dec[top].float().abs() == 2.0**15).all()  # the top binade rounds down
        assert (torch.sign(dec[top].float()) == torch.sign(x[top].float())).all()
    # below 2^15 nothing changed: 1.5 still rounds to 1 or 2, both drawn
    vals = torch.stack([d[4::7].float() for d in decs]).unique().tolist()
    assert vals == [1.0, 2.0]
