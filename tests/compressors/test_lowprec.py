"""Block-scaled low-precision formats (fp8, mxfp8, mxfp4, nvfp4, blockint): torch's float8 dtypes as the oracle,
exact byte counts, tail blocks, saturation, non-finite input, unbiased stochastic rounding, hostile payloads."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from gcbench import kernels
from gcbench.compressors import registry
from gcbench.compressors.lowprec import encode_cpu, encode_torch, multipliers
from gcbench.compressors.registry import decompress
from gcbench.core.compressor import State
from gcbench.core.errors import ParamError, PayloadError
from gcbench.core.payload import Payload
from gcbench.kernels import lowprec as lp
from tests.conftest import looks_unbiased, normal
from tests.kernels.helpers import torch_only

NAMES = ("fp8", "mxfp8", "mxfp4", "nvfp4", "blockint")
needs_numba = pytest.mark.skipif(not kernels.available(), reason="numba kernels unavailable")
F8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def probe_values(fmt: lp.ElemFormat, seed: int = 0) -> torch.Tensor:
    """Values that exercise every rounding case of ``fmt``: random magnitudes over all its binades and its
    subnormals, every exact midpoint between neighbouring codes (ties), the codes themselves, zeros of both
    signs, and values beyond its largest finite one."""
    g = torch.Generator().manual_seed(seed)
    lut = torch.from_numpy(fmt.lut()).double()
    grid = torch.unique(lut[torch.isfinite(lut) & (lut >= 0)])
    mids = (grid[1:] + grid[:-1]) / 2
    lo, hi = (-3, math.log2(fmt.maxv) + 1) if fmt.is_int else (fmt.emin - fmt.m - 3, fmt.emax + 2)
    spread = torch.exp2(torch.empty(4000, dtype=torch.float64).uniform_(lo, hi, generator=g))
    beyond = torch.tensor([fmt.maxv * 1.01, fmt.maxv * 1.1, fmt.maxv * 4, 1e30, math.inf])
    mag = torch.cat([spread, mids, grid, beyond.double(), torch.tensor([0.0])])
    vals = torch.cat([mag, -mag]).float()
    return torch.cat([vals, torch.tensor([-0.0])])


def nearest_even_codes(y: torch.Tensor, fmt: lp.ElemFormat) -> torch.Tensor:
    """Round to nearest, ties to the even code, saturating: by search over the format's table (the oracle where torch
    has no conversion, e2m1 and the integers)."""
    lut = torch.from_numpy(fmt.lut()).double()
    codes = torch.arange(lut.numel())
    ok = torch.isfinite(lut) & ~((lut == 0) & (codes >= lut.numel() // 2))  # one zero code per sign handled below
    a = y.double().abs().clamp(max=fmt.maxv)
    pos = ok & (lut >= 0)
    cand, cval = codes[pos], lut[pos]
    dist = (a[:, None] - cval[None, :]).abs()
    best = dist.min(1, keepdim=True).values
    tie = dist == best
    # among equidistant codes prefer the even mantissa (float) or the even integer
    pick = torch.where(tie, (cand[None, :] & 1) == 0, False)
    choice = torch.where(pick.any(1), pick.float().argmax(1), tie.float().argmax(1))
    mag_code = cand[choice]
    neg = torch.signbit(y)
    if fmt.is_int:
        q = torch.where(neg, -lut[mag_code], lut[mag_code]).long()
        return (q & ((1 << fmt.bits) - 1)).to(torch.uint8)
    return (mag_code | (neg.long() << (fmt.bits - 1))).to(torch.uint8)


def numba_codes(y: torch.Tensor, fmt: lp.ElemFormat, seed: int | None = None) -> torch.Tensor:
    """The numba kernel's codes of ``y`` (factor 1: one block, multiplier 1), unpacked."""
    out = np.empty(y.numel() if fmt.store == 8 else (y.numel() + 1) // 2, np.uint8)  # the kernels' storage: bytes or nibbles
    lp.encode_elements(y.numpy(), y.numel(), np.ones(1, np.float32), fmt, seed, out)
    c = torch.from_numpy(out)
    return c if fmt.store == 8 else lp.unpack_nibbles_torch(c, y.numel())


# ------------------------------------------------------------------ oracles


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
def test_nearest_codes_equal_torchs_float8_cast(name: str) -> None:
    fmt = lp.FORMATS[name]
    y = probe_values(fmt)
    want = y.clamp(-fmt.maxv, fmt.maxv).to(F8[name]).view(torch.uint8)
    assert torch.equal(lp.quantize_torch(y, fmt), want)
    if kernels.available():
        assert torch.equal(numba_codes(y, fmt), want)


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
def test_decode_table_is_torchs_float8(name: str) -> None:
    want = torch.arange(256, dtype=torch.uint8).view(F8[name]).float()
    torch.testing.assert_close(torch.from_numpy(lp.FORMATS[name].lut()), want, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["e2m1", "int8", "int4", "int5", "int2"])
def test_nearest_codes_of_formats_torch_cannot_cast(name: str) -> None:
    fmt = lp.FORMATS[name]
    y = probe_values(fmt)
    want = nearest_even_codes(y, fmt)
    assert torch.equal(lp.quantize_torch(y, fmt), want)
    if kernels.available():
        assert torch.equal(numba_codes(y, fmt), want)


def test_e2m1_table_is_the_ocp_value_set() -> None:
    lut = lp.E2M1.lut().tolist()
    assert lut[:8] == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0] and lut[8:] == [-v for v in lut[:8]]


def test_e8m0_scales_are_torchs_e8m0() -> None:
    codes = np.arange(256, dtype=np.uint8)
    want = torch.from_numpy(codes).view(torch.float8_e8m0fnu).float().numpy()
    got = multipliers(codes, lp.SCALE_E8M0, 0.0)
    assert np.array_equal(got[:255], want[:255]) and np.isnan(got[255]) and np.isnan(want[255])


@pytest.mark.parametrize("name,emax", [("mxfp8", 8), ("mxfp4", 2)])
def test_mx_scale_is_floor_log2_amax_minus_emax(name: str, emax: int) -> None:
    """OCP MX v1.0: shared_exp = floor(log2(amax)) − emax_elem, the scale byte shared_exp + 127 (clamped at 0)."""
    g = torch.Generator().manual_seed(5)
    amax = torch.exp2(torch.empty(300, dtype=torch.float64).uniform_(-140, 120, generator=g)).float()
    amax = torch.cat([amax, torch.tensor([1.0, 2.0, 448.0, 0.0, 2.0**-126, 1e-45])])
    x = torch.zeros(32 * amax.numel())
    x[::32] = amax
    p = registry.create(name).compress(x, State(0))
    got = p.data[: amax.numel()].long()
    want = torch.tensor([max(0, math.frexp(float(a))[1] - 1 - emax + 127) if a > 0 else 0 for a in amax])
    assert torch.equal(got, want)


def test_fp8_payload_codes_are_torchs_cast_of_x_times_the_scales_inverse() -> None:
    x = normal((5000,), seed=1) * torch.logspace(-3, 3, 5000)
    for fmt_name, scale in (("e4m3", "tensor"), ("e5m2", "tensor"), ("e4m3", "block")):
        comp = registry.create("fp8", format=fmt_name, scale=scale, block=100)
        p = comp.compress(x, State(0))
        block = 5000 if scale == "tensor" else 100
        nb = 5000 // block
        s = p.data[: 4 * nb].view(torch.float32)
        assert torch.equal(s, x.reshape(nb, block).abs().amax(1) / torch.tensor(lp.FORMATS[fmt_name].maxv))
        inv = (1 / s).repeat_interleave(block)
        want = (x * inv).clamp(-lp.FORMATS[fmt_name].maxv, lp.FORMATS[fmt_name].maxv).to(F8[fmt_name]).view(torch.uint8)
        assert torch.equal(p.data[4 * nb:], want)


def test_mxfp8_payload_is_torchs_e8m0_scales_and_e4m3_cast() -> None:
    """Elements: torch's e4m3 cast of x / X (saturated), X the E8M0 scale read back with torch's float8_e8m0fnu."""
    x = normal((32 * 200,), seed=3) * torch.logspace(-30, 30, 32 * 200)
    p = registry.create("mxfp8").compress(x, State(0))
    X = p.data[:200].view(torch.float8_e8m0fnu).float().repeat_interleave(32)
    want = (x / X).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    assert torch.equal(p.data[200:], want)


def test_nvfp4_block_scales_are_torchs_e4m3_cast() -> None:
    x = normal((16 * 300,), seed=8) * torch.logspace(-3, 3, 16 * 300)
    p = registry.create("nvfp4").compress(x, State(0))
    ts = p.data[:4].view(torch.float32)
    assert torch.equal(ts, (x.abs().max() / torch.tensor(448.0 * 6.0)).reshape(1))
    v = x.reshape(300, 16).abs().amax(1) / torch.tensor(6.0) / ts
    assert torch.equal(p.data[4:304], v.clamp(max=448).to(torch.float8_e4m3fn).view(torch.uint8))


# ------------------------------------------------------------------ exact sizes, tails, both paths

SIZES = (1, 7, 16, 31, 33, 1000, 4097, (1 << 16) + 3, (1 << 17) + 1)


def body_formula(name: str, params: dict, d: int) -> int:
    """The body bytes each format's definition implies (the docs' formulas)."""
    c = lambda b: -(-d // b)  # noqa: E731
    if name == "fp8":
        return 4 * (1 if params.get("scale", "tensor") == "tensor" else c(params.get("block", 128))) + d
    if name == "mxfp8":
        return c(32) + d
    if name == "mxfp4":
        return c(32) + c(2)
    if name == "nvfp4":
        return 4 + c(16) + c(2)
    return 4 * c(params.get("block", 256)) + (d * params.get("bits", 8) + 7) // 8


CONFIGS = [
    ("fp8", {}), ("fp8", {"format": "e5m2", "rounding": "stochastic"}), ("fp8", {"scale": "block", "block": 33}),
    ("fp8", {"scale": "block", "block": 100_001}), ("mxfp8", {}), ("mxfp4", {}), ("mxfp4", {"rounding": "stochastic"}),
    ("nvfp4", {}), ("nvfp4", {"rounding": "stochastic"}), ("blockint", {}), ("blockint", {"bits": 4, "block": 33}),
    ("blockint", {"bits": 4, "block": 70_001, "rounding": "stochastic"}), ("blockint", {"bits": 5, "block": 33}),
    ("blockint", {"bits": 2, "rounding": "stochastic"}), ("blockint", {"bits": 7, "block": 70_001}),
]
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in p.items()) or 'default'}" for n, p in CONFIGS]


@pytest.mark.parametrize(("name", "params"), CONFIGS, ids=IDS)
def test_wire_bytes_are_the_formula(name: str, params: dict) -> None:
    comp = registry.create(name, **params)
    for d in SIZES:
        p = comp.compress(normal((d,), seed=d), State(1))
        assert p.body_nbytes == body_formula(name, params, d), (d, p.body_nbytes)
        assert p.nbytes == len(p.to_bytes()) == len(p.header) + p.body_nbytes
        assert torch.equal(decompress(Payload.from_bytes(p.to_bytes())), comp.decompress(p))


@needs_numba
@pytest.mark.parametrize(("name", "params"), CONFIGS, ids=IDS)
def test_numba_path_sends_the_torch_paths_bytes(name: str, params: dict) -> None:
    comp = registry.create(name, **params)
    for d in SIZES:
        x = normal((d,), seed=d + 1) * torch.logspace(-4, 4, d)
        block = min(comp._block(d), d)
        seed = 77 if params.get("rounding") == "stochastic" else None
        body, _ = encode_torch(x, comp._fmt(), comp.kind, block, seed)
        assert np.array_equal(encode_cpu(x.numpy(), comp._fmt(), comp.kind, block, seed), body.numpy()), d
        p = comp.compress(x, State(3))
        assert torch.equal(comp.decompress(p).reshape(-1), comp.reference(x, State(3)))


@pytest.mark.parametrize(("name", "params"), CONFIGS, ids=IDS)
def test_torch_path_decodes_like_the_kernels(name: str, params: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    comp = registry.create(name, **params)
    x = normal((4097,), seed=9)
    p = comp.compress(x, State(2))
    fast = comp.decompress(p)
    torch_only(monkeypatch)
    assert torch.equal(comp.decompress(p), fast) and p.to_bytes() == comp.compress(x, State(2)).to_bytes()


@pytest.mark.parametrize("name", ["mxfp8", "blockint"])
def test_tail_block_has_its_own_scale(name: str) -> None:
    """d = block + 1: the last element is a block of one, scaled by itself (sent exactly), whatever the big block holds."""
    block = 32 if name == "mxfp8" else 256
    x = torch.full((block + 1,), 1000.0)
    x[-1] = 0.001
    p = registry.create(name).compress(x, State(0))
    out = decompress(p)
    assert p.body_nbytes == body_formula(name, {}, block + 1)
    assert abs(float(out[-1]) - 0.001) <= 0.001 * 2**-3  # within one e4m3 / int8 step of its own scale


# ------------------------------------------------------------------ saturation and non-finite input


def test_e4m3_saturates_at_448_and_e5m2_never_sends_inf() -> None:
    for fmt, top in ((lp.E4M3, 0x7E), (lp.E5M2, 0x7B)):
        y = fmt.maxv * torch.tensor([1.0001, 1.05, 1.1, 1e3, math.inf, -1e3, -math.inf])
        want = torch.tensor([top] * 5 + [top | 0x80] * 2, dtype=torch.uint8)
        assert torch.equal(lp.quantize_torch(y, fmt), want)
        if kernels.available():
            assert torch.equal(numba_codes(y, fmt), want)
        assert float(torch.from_numpy(fmt.lut())[top]) == fmt.maxv


@pytest.mark.parametrize(("name", "amax", "sent"), [("mxfp8", 500.0, 448.0), ("mxfp4", 7.5, 6.0)])
def test_mx_floor_rule_saturates_the_top_of_a_block(name: str, amax: float, sent: float) -> None:
    """floor(log2 500) − 8 = 0: the block's scale is 1, and 500 saturates at e4m3's 448 (7.5 at e2m1's 6)."""
    x = torch.full((32,), 1.0)
    x[3] = amax
    out = decompress(registry.create(name).compress(x, State(0)))
    assert float(out[3]) == sent and float(out[0]) == 1.0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(("name", "params", "block"), [("mxfp8", {}, 32), ("mxfp4", {}, 32), ("blockint", {"bits": 4}, 256),
                                                      ("fp8", {"scale": "block", "block": 64}, 64), ("fp8", {}, None),
                                                      ("nvfp4", {}, None)])
def test_a_non_finite_element_makes_its_block_nan(name: str, params: dict, block: int | None, bad: float) -> None:
    """The block (the whole tensor for a per-tensor scale) decodes to NaN; every other block as without it; nothing raises."""
    x = normal((1000,), seed=4)
    clean = decompress(registry.create(name, **params).compress(x, State(0)))
    x[300] = bad
    p = registry.create(name, **params).compress(x, State(0))
    out = decompress(p)
    nan = torch.zeros(1000, dtype=torch.bool)
    if block is None:
        nan[:] = True
    else:
        nan[300 // block * block:(300 // block + 1) * block] = True
    assert torch.isnan(out[nan]).all() and torch.equal(out[~nan], clean[~nan])
    if name.startswith("mx"):
        assert int(p.data[300 // 32]) == 0xFF


def test_scale_underflow_sends_zeros() -> None:
    x = torch.tensor([1e-45, 0.0, -1e-45, 0.0])
    for name in NAMES:
        out = decompress(registry.create(name).compress(x, State(0)))
        assert torch.isfinite(out).all() and float(out.abs().max()) <= 2e-45


# ------------------------------------------------------------------ bias of the rounding modes


@pytest.mark.parametrize(("name", "params"), [("fp8", {}), ("fp8", {"format": "e5m2"}), ("fp8", {"scale": "block", "block": 64}),
                                              ("blockint", {}), ("blockint", {"bits": 4}), ("blockint", {"bits": 3})])
def test_stochastic_rounding_is_unbiased_and_nearest_is_not(name: str, params: dict) -> None:
    """A value between two codes: nearest always sends the lower one (biased); the mean of stochastic rounding over
    repeated compressions is the value (the Monte-Carlo statistic of tests/conftest.py)."""
    x = torch.full((2048,), 0.3)
    x[::64] = 1.0  # every block's amax: 0.3 lands between codes in every format here
    nearest = registry.create(name, **params)
    stoch = registry.create(name, **params, rounding="stochastic")
    near_out = decompress(nearest.compress(x, State(0))).double()
    assert float((near_out - x.double()).abs().max()) > 0
    samples = torch.stack([decompress(stoch.compress(x, State(100 + r))).double() for r in range(200)])
    assert looks_unbiased(samples, x)
    assert not looks_unbiased(near_out.expand(2, -1), x)  # deterministic and off: T = inf
    assert nearest.flags.biased and not stoch.flags.biased


@pytest.mark.parametrize("name", ["mxfp8", "mxfp4", "nvfp4"])
def test_mx_and_nvfp4_stay_biased_with_stochastic_rounding(name: str) -> None:
    assert registry.get(name).resolve_flags({"rounding": "stochastic"}).biased
    x = torch.full((32,), 1.0)
    if name == "nvfp4":  # tensor scale 2688 / 2688 = 1; block 2's scale (102 / 6) / 1 = 17 rounds (a tie) to e4m3's 16
        x[0], top = 2688.0, 16
    else:  # the floor rule: 500 at scale 1 saturates at 448, 7.5 at 6
        top = 0
    x[top] = {"mxfp8": 500.0, "mxfp4": 7.5, "nvfp4": 102.0}[name]
    comp = registry.create(name, rounding="stochastic")
    mean = torch.stack([decompress(comp.compress(x, State(r))) for r in range(50)]).mean(0)
    assert float(mean[top]) < float(x[top]) - 1.0  # E[C(x)] < x whatever the rounding


# ------------------------------------------------------------------ parameters and hostile payloads


@pytest.mark.parametrize(("name", "params"), [("fp8", {"block": 0}), ("fp8", {"block": -4}), ("blockint", {"block": 0}),
                                              ("blockint", {"bits": 1}), ("blockint", {"bits": 9}), ("fp8", {"format": "e3m4"})])
def test_bad_parameters_are_one_line_param_errors(name: str, params: dict) -> None:
    with pytest.raises(ParamError) as exc:
        registry.create(name, **params)
    assert "\n" not in str(exc.value) and name in str(exc.value)


def _with_meta(p: Payload, **meta: object) -> Payload:
    return Payload(p.codec, p.version, p.dtype, p.shape, p.data, {**p.meta, **meta})


@pytest.mark.parametrize(("name", "params", "meta"), [
    ("fp8", {}, {"fmt": "e6m1"}), ("fp8", {}, {"B": 0}), ("fp8", {}, {"B": -1}), ("fp8", {}, {"extra": 1}),
    ("blockint", {}, {"bits": 5}), ("blockint", {}, {"bits": 16}), ("blockint", {}, {"B": 2**62 + 1}), ("mxfp8", {}, {"B": 32}),
    ("fp8", {"scale": "block", "block": 10}, {"B": 20}), ("blockint", {}, {"bits": 4}),
])
def test_hostile_headers_raise_payload_error(name: str, params: dict, meta: dict) -> None:
    p = registry.create(name, **params).compress(normal((100,), seed=2), State(0))
    bad = Payload.from_bytes(_with_meta(p, **meta).to_bytes())
    with pytest.raises(PayloadError):
        decompress(bad)


@pytest.mark.parametrize("name", NAMES)
def test_hostile_scale_bytes_decode_without_raising(name: str) -> None:
    """Any scale bytes are a valid encoding of something (a NaN or huge scale): decoding returns a tensor."""
    p = registry.create(name).compress(normal((100,), seed=2), State(0))
    data = p.data.clone()
    data[:8] = 0xFF
    out = decompress(Payload(p.codec, p.version, p.dtype, p.shape, data, p.meta))
    assert out.shape == (100,)


@pytest.mark.parametrize("name", NAMES)
def test_flags_follow_the_rounding(name: str) -> None:
    """Deterministic with round to nearest, randomised with stochastic rounding (the card's ``random_when``)."""
    info = registry.get(name)
    assert info.resolve_flags().deterministic and not info.resolve_flags({"rounding": "stochastic"}).deterministic
    assert info.resolve_flags().biased
    assert info.resolve_flags({"rounding": "stochastic"}).biased == (name in ("mxfp8", "mxfp4", "nvfp4"))


@needs_numba
@pytest.mark.parametrize(("name", "params"), [("fp8", {}), ("nvfp4", {}), ("blockint", {"bits": 4, "block": 33, "rounding": "stochastic"}),
                                              ("mxfp4", {}), ("blockint", {"bits": 5})])
def test_one_and_two_threads_send_the_same_bytes(name: str, params: dict) -> None:
    """Work is cut into fixed parts and groups of whole blocks (an even number of odd blocks), never by thread count."""
    from gcbench.kernels import runtime

    x = normal((runtime.SERIAL_MAX + 12_345,), seed=6)  # above the serial cut-off: the parallel kernels run
    n = torch.get_num_threads()
    try:
        wires = []
        for t in (1, 2):
            torch.set_num_threads(t)
            wires.append(registry.create(name, **params).compress(x, State(4)).to_bytes())
    finally:
        torch.set_num_threads(n)
    assert wires[0] == wires[1]


@needs_numba
def test_kernels_refuse_a_short_output_buffer() -> None:
    x = np.ones(100, np.float32)
    with pytest.raises(ValueError, match="need 50 bytes"):
        lp.encode_elements(x, 100, np.ones(1, np.float32), lp.E2M1, None, np.empty(49, np.uint8))
    with pytest.raises(ValueError, match="fewer codes"):
        lp.decode_blocks(np.zeros(99, np.uint8), 8, lp.E4M3.lut(), 100, np.ones(1, np.float32), np.empty(100, np.float32))


@pytest.mark.parametrize("name", NAMES)
def test_determinism_matches_the_resolved_flag(name: str) -> None:
    """Nearest: the same bytes from states of other seeds; stochastic: other bytes (as the per-configuration flag says)."""
    x = normal((1000,), seed=4)
    for rounding in ("nearest", "stochastic"):
        comp = registry.create(name, rounding=rounding)
        same = comp.compress(x, State(1)).to_bytes() == comp.compress(x, State(2)).to_bytes()
        assert same == comp.flags.deterministic == (rounding == "nearest")


def test_the_e2m1_compare_coder_is_the_bit_arithmetic() -> None:
    """The fast e2m1 path (seven midpoint compares) gives :func:`_code_nearest`'s codes on every probe value and on
    every float32 near each midpoint (one ulp either side), both signs."""
    if not kernels.available():
        pytest.skip("numba kernels unavailable")
    from numba import njit

    fast = njit(lambda y: np.array([lp._code_e2m1(v) for v in y], dtype=np.uint8))
    slow = njit(lambda y: np.array([lp._code_nearest(v, 1, 0, 1, np.float32(6.0), 4, False) for v in y], dtype=np.uint8))
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
    near = np.concatenate([mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(10))])
    y = np.concatenate([probe_values(lp.E2M1).numpy(), near, -near]).astype(np.float32)
    assert np.array_equal(fast(y), slow(y))


@pytest.mark.parametrize("kernel_path", [True, False])
@pytest.mark.parametrize("ts", [3e38, -3e38, float("inf"), float("-inf"), float("nan"), 1e-45])
def test_a_hostile_nvfp4_tensor_scale_decodes_quietly(ts: float, kernel_path: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor scale no encoder writes decodes to ±inf/NaN by the non-finite rule, with no NumPy warning on stderr
    (warnings are errors here: before the fix, 3e38 times the block scales printed "overflow encountered in multiply")."""
    x = normal((100,), seed=2)
    x[:16] = 0.0  # a zero block scale: inf times it is NaN, numpy's "invalid value" case
    p = registry.create("nvfp4").compress(x, State(0))
    data = p.data.clone()
    data[:4] = torch.from_numpy(np.array([ts], "<f4").view(np.uint8))
    if not kernel_path:
        monkeypatch.setattr(kernels, "available", lambda: False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = decompress(Payload(p.codec, p.version, p.dtype, p.shape, data, p.meta))
    assert out.shape == (100,)
    if ts in (3e38, -3e38, float("inf"), float("-inf")):
        assert not torch.isfinite(out[16:]).any(), "a scale past float32's range decodes to ±inf (or NaN), not to a number"
