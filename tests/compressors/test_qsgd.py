"""QSGD (Alistarh et al. 2017): exact fixed and Elias body sizes, unbiasedness, the variance bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench.compressors import registry
from gcbench.compressors.qsgd import qsgd_fixed_bits
from gcbench.compressors.registry import decompress
from gcbench.core.compressor import State
from gcbench.core.errors import PayloadError
from gcbench.core.payload import Payload
from tests.conftest import looks_unbiased, normal, omega, unbiasedness_statistic
from tests.kernels.helpers import torch_only


def norms64(x: torch.Tensor, bucket: int, norm: str) -> torch.Tensor:
    """Per-bucket norms in float64, computed here (the last bucket may be shorter)."""
    v = x.reshape(-1).double()
    parts = torch.split(v, bucket)
    return torch.stack([p.norm() if norm == "2" else p.abs().max() for p in parts])


def levels_of(out: torch.Tensor, x: torch.Tensor, s: int, bucket: int, norm: str) -> torch.Tensor:
    """Recover the integer level of each decoded entry: |decoded|·s/n (must be an integer)."""
    n = norms64(x, bucket, norm).float().double().repeat_interleave(bucket)[: x.numel()]
    lv = out.reshape(-1).double().abs() * s / torch.where(n > 0, n, 1.0)
    rounded = lv.round()
    assert torch.allclose(lv, rounded, atol=1e-3), "decoded values are not n·level/s"
    return rounded.long()


def samples(x: torch.Tensor, reps: int, **params: object) -> torch.Tensor:
    comp = registry.create("qsgd", **params)
    return torch.stack([decompress(comp.compress(x, State(500 + r))).reshape(-1).double() for r in range(reps)])


@pytest.mark.parametrize(
    ("shape", "s", "bucket"),
    [
        ((1,), 16, 512),
        ((7,), 1, 512),
        ((1000,), 16, 512),
        ((1000,), 4, 64),
        ((64, 3, 3, 3), 255, 100),
        ((512, 512), 16, 512),
        ((513,), 2, 512),
    ],
    ids=str,
)
def test_fixed_body_size(shape: tuple[int, ...], s: int, bucket: int) -> None:
    x = normal(shape, seed=1)
    d = x.numel()
    p = registry.create("qsgd", s=s, bucket=bucket).compress(x, State(0))
    bits = 32 * math.ceil(d / bucket) + d * (1 + s.bit_length())  # ceil(log2(s+1)) = bit_length(s)
    assert qsgd_fixed_bits(d, s, bucket) == bits
    assert p.body_nbytes == math.ceil(bits / 8)


@pytest.mark.parametrize(("s", "bucket", "norm"), [(16, 512, "inf"), (4, 64, "2"), (1, 100, "inf"), (300, 1000, "2"), (2, 7, "2")])
def test_elias_body_size_is_the_sum_of_code_lengths(s: int, bucket: int, norm: str) -> None:
    x = normal((1000,), seed=s)
    x[100:200] = 0.0  # a long zero run: a large gap
    comp = registry.create("qsgd", s=s, bucket=bucket, norm=norm, encoding="elias")
    p = comp.compress(x, State(3))
    out = decompress(Payload.from_bytes(p.to_bytes()))
    levels = levels_of(out, x, s, bucket, norm)
    assert int(levels.max()) <= s
    nz = torch.nonzero(levels).reshape(-1).tolist()
    gaps = np.diff(np.array(nz, dtype=np.int64), prepend=-1)
    bits = sum(len(omega(int(g))) + 1 + len(omega(int(levels[i]))) for g, i in zip(gaps, nz, strict=True))
    assert p.body_nbytes == 4 * math.ceil(1000 / bucket) + math.ceil(bits / 8)
    # and the fixed coding of the same draw carries the same levels
    fixed = registry.create("qsgd", s=s, bucket=bucket, norm=norm).compress(x, State(3))
    torch.testing.assert_close(decompress(fixed), out, rtol=0, atol=0)


def test_elias_all_zero_levels_send_only_the_norms() -> None:
    p = registry.create("qsgd", bucket=100, encoding="elias").compress(torch.zeros(1000), State(0))
    assert p.body_nbytes == 4 * 10
    assert torch.count_nonzero(decompress(p)) == 0


@pytest.mark.parametrize("norm", ["2", "inf"])
def test_decoded_values_are_levels_of_the_bucket_norm(norm: str) -> None:
    x = normal((777,), seed=4)
    s, bucket = 5, 100
    out = decompress(registry.create("qsgd", s=s, bucket=bucket, norm=norm).compress(x, State(1)))
    levels = levels_of(out, x, s, bucket, norm)
    assert int(levels.min()) >= 0 and int(levels.max()) <= s
    nz = out != 0
    assert torch.equal(torch.sign(out[nz]), torch.sign(x[nz]))
    # each level is floor(r) or floor(r) + 1 with r = s·|x|/n
    r = x.double().abs() * s / norms64(x, bucket, norm).repeat_interleave(bucket)[:777]
    assert ((levels == r.floor().long()) | (levels == r.floor().long() + 1)).all()
    if norm == "inf":  # the bucket maximum has r = s exactly: always decoded as itself (up to float32 rounding)
        for b in range(8):
            i = b * bucket + int(x[b * bucket : (b + 1) * bucket].abs().argmax())
            assert out[i].item() == pytest.approx(x[i].item(), rel=1e-6)


@pytest.mark.parametrize(("norm", "s", "bucket"), [("2", 4, 64), ("inf", 16, 512), ("inf", 2, 100)])
def test_unbiased(norm: str, s: int, bucket: int) -> None:
    x = normal((1000,), seed=7)
    got = samples(x, 400, s=s, bucket=bucket, norm=norm)
    t, n_eff = unbiasedness_statistic(got, x.double())
    assert looks_unbiased(got, x.double()), f"T = {t:.3f}, n_eff = {n_eff:.0f}"


def _biased_qsgd(x: torch.Tensor, s: int, bucket: int, norm: str, gen: np.random.Generator, how: str) -> torch.Tensor:
    n = norms64(x, bucket, norm).repeat_interleave(bucket)[: x.numel()]
    r = x.double().abs() * s / n
    lo = r.floor()
    if how == "floor":  # rounding down
        lv = lo
    else:  # stochastic, but rounds up with probability (r − l)² instead of r − l
        lv = lo + (torch.from_numpy(gen.random(x.numel())) < (r - lo) ** 2).double()
    return torch.sign(x.double()) * n * lv / s


@pytest.mark.parametrize("how", ["floor", "squared-probability"])
def test_statistic_rejects_biased_quantizers(how: str) -> None:
    x = normal((1000,), seed=7)
    gen = np.random.Generator(np.random.PCG64(1))
    got = torch.stack([_biased_qsgd(x, 4, 64, "2", gen, how) for _ in range(400)])
    assert not looks_unbiased(got, x.double())


@pytest.mark.parametrize(("s", "bucket"), [(2, 64), (8, 64), (16, 16), (1, 256)])
def test_variance_within_bound_per_bucket(s: int, bucket: int) -> None:
    """Norm 2: E‖C(v) − v‖² = Σ (n/s)² p(1−p) ≤ min(B/s², √B/s)·‖v‖² for every bucket."""
    d = 4 * bucket
    x = normal((d,), seed=s + bucket)
    n = norms64(x, bucket, "2")
    r = x.double().abs() * s / n.repeat_interleave(bucket)
    p = r - r.floor()
    exact = ((n.repeat_interleave(bucket) / s) ** 2 * p * (1 - p)).reshape(4, bucket).sum(1)
    bound = min(bucket / s**2, math.sqrt(bucket) / s) * n**2
    assert (exact <= bound).all()
    reps = 400
    err = ((samples(x, reps, s=s, bucket=bucket, norm="2") - x.double()) ** 2).reshape(reps, 4, bucket).sum(2)
    mean, se = err.mean(0), err.std(0) / math.sqrt(reps)
    assert (abs(mean - exact) < 5 * se + 1e-9).all(), (mean, exact, se)
    assert (mean <= bound * 1.05).all()


def test_min_numel_sends_small_tensors_raw() -> None:
    comp = registry.create("qsgd", min_numel=10_000)
    x = normal((64, 3, 3, 3), seed=2)
    p = comp.compress(x, State(0))
    assert p.body_nbytes == 4 * x.numel()
    assert torch.equal(decompress(p), x)
    big = normal((10_000,), seed=2)
    assert comp.compress(big, State(0)).body_nbytes == math.ceil(qsgd_fixed_bits(10_000, 16, 512) / 8)


def test_corrupt_elias_stream_raises() -> None:
    p = registry.create("qsgd", encoding="elias", bucket=100).compress(normal((1000,), seed=1), State(0))
    body = p.data.clone()
    body[40:] = 0xFF  # after the norms: a run of 1 bits announces ever longer Elias groups
    with pytest.raises(PayloadError):
        decompress(Payload(p.codec, p.version, p.dtype, p.shape, body, p.meta))
    fewer = dict(p.meta)
    fewer["nnz"] = int(p.meta["nnz"]) + 5
    with pytest.raises(PayloadError):
        decompress(Payload(p.codec, p.version, p.dtype, p.shape, p.data, fewer))


# ---------------------------------------------------------------------------- fast paths


@pytest.mark.parametrize(
    ("d", "params"),
    [
        (1000, {}),
        (1000, {"s": 4, "bucket": 64, "norm": "2"}),
        (7, {"s": 1, "bucket": 3}),
        (70_001, {"s": 300, "bucket": 1000, "norm": "2"}),  # 10-bit fields: the wide packer
        (70_001, {"bucket": 70_001, "norm": "2"}),  # one bucket larger than a kernel part
        (150_003, {"bucket": 100_000}),
        (1000, {"encoding": "elias"}),
        (5000, {"s": 7, "bucket": 33, "encoding": "elias", "norm": "2"}),
    ],
    ids=str,
)
def test_fast_path_matches_the_torch_path(d: int, params: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    """Same key, same uniforms: the fused kernel and the plain torch definition send the same bytes."""
    x = normal((d,), seed=d)
    x[: d // 10] = 0.0  # zero runs (and, with bucket < d/10, all-zero buckets)
    comp = registry.create("qsgd", **params)
    fast = [comp.compress(x, State(s)) for s in range(2)]
    fast_dec = [decompress(p) for p in fast]
    ref = [type(comp).reference(comp, x, State(s)) for s in range(2)]
    torch_only(monkeypatch)
    for s in range(2):
        slow = comp.compress(x, State(s))
        assert fast[s].to_bytes() == slow.to_bytes()
        assert torch.equal(fast_dec[s], decompress(slow))
        assert torch.equal(fast_dec[s], ref[s])


@pytest.mark.parametrize("params", [{}, {"encoding": "elias"}, {"norm": "2", "bucket": 4}], ids=str)
def test_values_near_float32s_max_quantize_and_decode_finite_on_both_paths(params: dict[str, object],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """|x|·s and n·level overflowed float32 for |x| > max/s (the decoded tensor went ±inf at |x| ~ 2e37): the levels
    are those of the same tensor at unit scale, the decoded tensor finite, and both paths send the same bytes."""
    x = normal((4096,), seed=5)
    big = x * (3.0e38 / float(x.abs().max()))
    comp = registry.create("qsgd", min_numel=0, **params)
    fast = comp.compress(big, State(1))
    fast_dec = decompress(fast)
    assert torch.isfinite(fast_dec).all()
    rel = float((fast_dec.double() - big.double()).norm() / big.double().norm())
    unit = decompress(comp.compress(x, State(1)))
    assert rel == pytest.approx(float((unit.double() - x.double()).norm() / x.double().norm()), rel=1e-3)
    torch_only(monkeypatch)
    slow = comp.compress(big, State(1))
    assert fast.to_bytes() == slow.to_bytes()
    assert torch.equal(fast_dec, decompress(slow))
