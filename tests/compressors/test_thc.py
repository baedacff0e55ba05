"""THC-style homomorphic quantization: rotation, exact bytes, unbiasedness, the summed all-reduce protocol."""

from __future__ import annotations

import math

import pytest
import torch

from gcbench.compressors import registry
from gcbench.compressors.registry import decompress
from gcbench.compressors.thc import pack, per_word, range_factor, sum_width, unpack
from gcbench.core.compressor import State
from gcbench.core.errors import GcbenchError, PayloadError
from gcbench.core.payload import Payload
from gcbench.kernels import hadamard
from tests.conftest import looks_unbiased, normal, unbiasedness_statistic


def sylvester(b: int) -> torch.Tensor:
    """H_b / sqrt(b) in float64 by the definition H_b[i, j] = (−1)^popcount(i & j) (independent of the kernel)."""
    i = torch.arange(b)
    bits = (i.unsqueeze(1) & i.unsqueeze(0)).numpy()
    pop = torch.tensor([[bin(int(v)).count("1") for v in row] for row in bits])
    return (1.0 - 2.0 * (pop % 2)).double() / math.sqrt(b)


@pytest.mark.parametrize("b", [1, 2, 8, 128, 4096])
def test_fwht_is_the_orthonormal_hadamard_matrix(b: int) -> None:
    rows = normal((3, b), seed=b).double()
    want = rows @ sylvester(b) if b <= 128 else None
    got = hadamard.fwht(rows)
    if want is not None:
        assert torch.allclose(got, want, atol=1e-12)
    assert torch.allclose(hadamard.fwht(got), rows, atol=1e-10)  # its own inverse
    assert torch.allclose(got.norm(dim=1), rows.norm(dim=1), rtol=1e-12)


@pytest.mark.parametrize("n,block", [(1, 64), (7, 64), (1000, 256), (5000, 4096)])
def test_rotation_round_trip_and_norm(n: int, block: int) -> None:
    x = normal((n,), seed=n)
    y = hadamard.rotate(x, 99, block)
    assert y.shape[1] == hadamard.block_size(n, block) and y.numel() == hadamard.padded_numel(n, block) < 2 * n + block
    assert float(y.norm()) == pytest.approx(float(x.norm()), rel=1e-5)
    assert torch.allclose(hadamard.unrotate(y, 99, n), x, atol=1e-5)
    s = hadamard.signs(5, 64 * 50)
    assert set(s.unique().tolist()) == {-1.0, 1.0} and abs(float(s.mean())) < 0.1


@pytest.mark.parametrize("width", [4, 5, 7, 9, 21, 62])
def test_packed_words_add_field_by_field(width: int) -> None:
    """The homomorphism: N packed messages added as int64 words unpack to the fieldwise sums (no carry crosses a field)."""
    bits = 4
    world = min(1 << (width - bits), 50)
    assert world * ((1 << bits) - 1) <= (1 << width) - 1
    gen = torch.Generator().manual_seed(width)
    levels = [torch.randint(0, 1 << bits, (1001,), generator=gen) for _ in range(world)]
    words = torch.stack([pack(lv, width) for lv in levels]).sum(0)
    assert words.min() >= 0  # the top bit is never reached
    assert torch.equal(unpack(words, width, 1001), torch.stack(levels).sum(0))
    assert per_word(width) == 63 // width


def test_payload_bytes_are_exact() -> None:
    comp = registry.create("thc", bits=3, block=256)
    x = normal((1000,), seed=1)
    p = comp.compress(x, comp.init_state(1))
    padded = 1024  # 4 blocks of 256
    assert p.body_nbytes == 4 + 8 * math.ceil(padded / (63 // 3))
    assert p.nbytes == len(p.to_bytes())
    assert torch.equal(decompress(Payload.from_bytes(p.to_bytes())), decompress(p))


def test_round_trip_error_shrinks_with_bits() -> None:
    x = normal((4096,), seed=3)
    errs = []
    for bits in (2, 4, 8):
        comp = registry.create("thc", bits=bits)
        out = decompress(comp.compress(x, comp.init_state(0)))
        errs.append(float((out - x).norm() / x.norm()))
    assert errs[0] > errs[1] > errs[2] and errs[2] < 0.02


def test_unbiased_statistically() -> None:
    x = normal((300,), seed=11) * torch.linspace(0.1, 3.0, 300)  # uneven magnitudes
    comp = registry.create("thc", bits=2, block=64)
    got = torch.stack([decompress(comp.compress(x, State(500 + r))).double() for r in range(200)])
    t, n_eff = unbiasedness_statistic(got, x.double())
    assert looks_unbiased(got, x.double()), f"T = {t:.3f} (n_eff {n_eff:.0f})"
    # the check has power: the same draws shifted by a tenth of their spread are rejected
    shift = 0.1 * got.std(0).mean()
    assert not looks_unbiased(got + shift, x.double())


def test_exchange_sums_integers_and_counts_bytes() -> None:
    comp = registry.create("thc", bits=4, block=512)
    n, d = 5, 3000
    xs = [normal((d,), seed=20 + w) for w in range(n)]
    res = comp.exchange(xs, [comp.init_state(w) for w in range(n)])
    width = sum_width(4, n)
    assert width == 7
    for p in res.payloads:
        assert p.meta["w"] == width and p.meta["c"] == 1
        assert p.body_nbytes == 4 + 8 * math.ceil(3072 / (63 // width))
    # the aggregate is the mean of the workers' own messages, each decoded alone (the sum is homomorphic)
    each = torch.stack([decompress(p) for p in res.payloads]).mean(0)
    assert torch.allclose(res.aggregate, each, atol=1e-5)
    exact = torch.stack(xs).mean(0)
    assert float((res.aggregate - exact).norm() / exact.norm()) < 0.3
    for w in range(n):
        assert res.traffic.sent(w, "range") == 4
        assert res.traffic.sent(w, "allreduce") == res.payloads[w].nbytes
        assert res.traffic.received(w, "allreduce") == sum(p.nbytes for p in res.payloads) - res.payloads[w].nbytes


def test_exchange_is_unbiased_for_the_mean() -> None:
    comp = registry.create("thc", bits=2, block=64)
    xs = [normal((200,), seed=40 + w) for w in range(3)]
    exact = torch.stack(xs).mean(0).double()
    got = torch.stack([comp.exchange(xs, [State(1000 * r + w) for w in range(3)]).aggregate.double() for r in range(150)])
    assert looks_unbiased(got, exact)


def test_hostile_headers_raise_payload_error() -> None:
    comp = registry.create("thc")
    p = comp.compress(normal((100,), seed=1), comp.init_state(0))
    for meta in ({**p.meta, "w": 3}, {**p.meta, "c": 2}, {**p.meta, "B": 20}, {**p.meta, "extra": 1}, {**p.meta, "b": 0}):
        bad = Payload(p.codec, p.version, p.dtype, p.shape, p.data, meta)
        with pytest.raises(PayloadError):
            decompress(bad)
    with pytest.raises(GcbenchError, match="power of two"):
        registry.create("thc", block=100)
    with pytest.raises(GcbenchError, match=r"thc\.block: must be a power of two in \[1, .*\], got 3"):
        registry.parse_spec("thc:block=3")  # refused where every spec is checked, before any work (bench, run, suites)
    assert registry.parse_spec("thc:block=1")[1] == {"block": 1}


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_element_decodes_the_tensor_to_nan(bad: float) -> None:
    """The documented rule: a NaN or Inf anywhere makes the range non-finite, every level 0, and the decode NaN."""
    comp = registry.create("thc", block=256)
    x = normal((1000,), seed=5)
    x[17] = bad
    out = decompress(Payload.from_bytes(comp.compress(x, comp.init_state(0)).to_bytes()))
    assert out.shape == x.shape and bool(torch.isnan(out).all())


@pytest.mark.parametrize("m", [3.0, 1.5e-3, 1e-37, 1e-39, 1e-44, 3.4e38])
@pytest.mark.parametrize("bits", [1, 4, 16])
def test_the_device_factor_is_the_kernels(m: float, bits: int) -> None:
    """:func:`thc.range_factor` (the torch path's, on a 0-d tensor) gives the kernel's (up, m·up, factor) to the bit,
    subnormal ranges (scaled by 2^100) included."""
    top = (1 << bits) - 1
    want = hadamard.quant_factor(m, top)
    got = range_factor(torch.tensor(m, dtype=torch.float32), top)
    assert all(g.dtype == torch.float32 and g.dim() == 0 for g in got)
    assert [float(g) for g in got] == [float(torch.tensor(w, dtype=torch.float32)) for w in want]


@pytest.mark.parametrize("offset", [1, 4, 5])
def test_a_body_at_any_offset_of_its_buffer_decodes_alike(offset: int) -> None:
    """A body sliced out of a received buffer at an offset that is not a multiple of 8 decodes as the payload itself
    (the words' int64 view needs aligned bytes: the decoder copies them first)."""
    comp = registry.create("thc")
    p = comp.compress(normal((1000,), seed=offset), State(0))
    buf = torch.cat([torch.zeros(offset, dtype=torch.uint8), p.data])
    q = Payload.trusted(p.codec, p.version, p.dtype, p.shape, buf[offset:], dict(p.meta))
    assert torch.equal(comp.decompress(q), comp.decompress(p))
