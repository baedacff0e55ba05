"""1-bit SGD (Seide et al. 2014): d + 64·columns bits, per-column means, error feedback, two-leg exchange."""

from __future__ import annotations

import math
import struct
from itertools import pairwise

import numpy as np
import pytest
import torch

from gcbench.compressors import registry
from gcbench.compressors.cards.onebit import GRANULARITIES
from gcbench.compressors.onebit import OWNER_KEY, onebit_reference, split_stripes
from gcbench.compressors.registry import decompress
from gcbench.core.compressor import ErrorFeedback, State
from gcbench.core.payload import Payload, encode_header
from tests.conftest import normal
from tests.kernels.helpers import torch_only


def column_view(x: torch.Tensor, granularity: str = "column") -> torch.Tensor:
    """The matrix whose columns share one pair of means (float64), built here from the definition."""
    flat = x.reshape(-1).double()
    if granularity == "tensor" or x.dim() <= 1:
        return flat.reshape(-1, 1)
    m = flat.reshape(x.shape[0], -1)
    return m if granularity == "column" else m.t()


def means_by_loop(m: torch.Tensor) -> torch.Tensor:
    """Decoded matrix from plain per-column means of the non-negative and negative entries."""
    out = torch.empty_like(m)
    for j in range(m.shape[1]):
        col = m[:, j].tolist()
        pos = [v for v in col if v >= 0]
        neg = [v for v in col if v < 0]
        mu1 = sum(pos) / len(pos) if pos else 0.0
        mu0 = sum(neg) / len(neg) if neg else 0.0
        out[:, j] = torch.tensor([mu1 if v >= 0 else mu0 for v in col], dtype=m.dtype)
    return out


def from_view(m: torch.Tensor, granularity: str, shape: tuple[int, ...]) -> torch.Tensor:
    if granularity == "row" and len(shape) > 1:
        m = m.t()
    return m.reshape(shape)


@pytest.mark.parametrize(
    ("shape", "granularity", "columns"),
    [
        ((1,), "column", 1),
        ((7,), "column", 1),
        ((1000,), "column", 1),
        ((64, 3, 3, 3), "column", 27),
        ((512, 512), "column", 512),
        ((64, 3, 3, 3), "row", 64),
        ((100, 7), "row", 100),
        ((64, 3, 3, 3), "tensor", 1),
        ((512, 512), "tensor", 1),
        ((1000,), "row", 1),
    ],
    ids=str,
)
def test_body_size(shape: tuple[int, ...], granularity: str, columns: int) -> None:
    x = normal(shape, seed=1)
    d = x.numel()
    p = registry.create("onebit", granularity=granularity).compress(x, State(0))
    assert p.body_nbytes == math.ceil((d + 64 * columns) / 8) == math.ceil(d / 8) + 8 * columns


def test_hand_worked() -> None:
    # columns: [1, 3, -2] -> means (-2, 2); [-1, -3, 5] -> means (-2, 5)
    x = torch.tensor([[1.0, -1.0], [3.0, -3.0], [-2.0, 5.0]])
    p = registry.create("onebit").compress(x, State(0))
    # sign bits of the row-major tensor, LSB first: 1 0 1 0 0 1 -> 0b100101; then (mu0, mu1) per column
    assert p.to_bytes()[-17:] == bytes([0b100101]) + struct.pack("<4f", -2.0, 2.0, -2.0, 5.0)
    assert decompress(p).tolist() == [[2.0, -2.0], [2.0, -2.0], [-2.0, 5.0]]
    # a column without negative entries decodes its (absent) negative mean as 0 and sends 0.0
    pos = registry.create("onebit").compress(torch.tensor([[1.0], [3.0]]), State(0))
    assert pos.to_bytes()[-9:] == bytes([0b11]) + struct.pack("<2f", 0.0, 2.0)


@pytest.mark.parametrize("granularity", ["column", "row", "tensor"])
@pytest.mark.parametrize("shape", [(1000,), (64, 3, 3, 3), (33, 17), (5, 1)], ids=str)
def test_reconstruction_is_the_per_column_means(granularity: str, shape: tuple[int, ...]) -> None:
    x = normal(shape, seed=sum(shape)) + 0.3
    out = decompress(registry.create("onebit", granularity=granularity).compress(x, State(0)))
    m = column_view(x, granularity)
    want = from_view(means_by_loop(m), granularity, shape)
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-7)
    # and the module's own reference agrees with the loop
    torch.testing.assert_close(onebit_reference(m.float()).double(), means_by_loop(m), rtol=1e-6, atol=1e-7)


def test_reference_on_random_matrices() -> None:
    for seed in range(5):
        m = normal((20 + seed, 9 - seed), seed=seed) * (seed + 1) - 0.5 * seed
        out = decompress(registry.create("onebit").compress(m, State(0)))
        torch.testing.assert_close(out, onebit_reference(m), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("granularity", ["column", "row", "tensor"])
def test_error_feedback_identity_and_residual_applied(granularity: str) -> None:
    """x + e_old == decoded + e_new (float64), and each step quantizes x + e_old."""
    comp = registry.create("onebit", granularity=granularity)
    state = comp.init_state(0)
    shape = (16, 3, 5)
    e_old = torch.zeros(shape, dtype=torch.float64)
    for step in range(6):
        x = normal(shape, seed=step) + 0.2 * step
        p, decoded = comp.compress_and_decode(x, state)
        e_new = state.tensors[ErrorFeedback.KEY].double()
        a = x.double() + e_old
        torch.testing.assert_close(decoded.double() + e_new, a, rtol=0, atol=1e-5)
        want = from_view(means_by_loop(column_view(a.float(), granularity)), granularity, shape)
        torch.testing.assert_close(decompress(p).double(), want, rtol=1e-5, atol=1e-6)
        e_old = e_new
    assert float(e_old.abs().max()) > 0


def _stripe_nbytes(rows: int, cols: int) -> int:
    """Wire size of one stripe payload: header of a float32 (rows, cols) column-granularity payload + body."""
    return len(encode_header("onebit", registry.get("onebit").version, torch.float32, (rows, cols), {"g": "column"})) + (
        math.ceil(rows * cols / 8) + 8 * cols
    )


@pytest.mark.parametrize("workers", [2, 3, 4])
@pytest.mark.parametrize("granularity", ["column", "row"])
def test_exchange_traffic_and_aggregate(workers: int, granularity: str) -> None:
    comp = registry.create("onebit", granularity=granularity)
    shape = (64, 3, 3, 3)
    common = normal(shape, seed=99)
    grads = [normal(shape, seed=w) + common for w in range(workers)]
    mean = torch.stack(grads).mean(0)
    states = [comp.init_state(w) for w in range(workers)]
    res = comp.exchange(grads, states)
    assert res.aggregate.shape == shape and res.aggregate.dtype == torch.float32
    # one step of two 1-bit quantizations: far from exact, but clearly the mean (a sum would be ≥ 1 off)
    rel = float((res.aggregate - mean).norm() / mean.norm())
    assert rel < 0.85, rel

    # stripes: whole columns of the view, one per worker, covering every column once
    rows, ncols = column_view(grads[0], granularity).shape
    stripes = [p.shape for p in res.payloads]
    assert len(stripes) == workers and all(r == rows for r, _ in stripes)
    assert sum(c for _, c in stripes) == ncols
    size = [_stripe_nbytes(rows, c) for _, c in stripes]
    assert [p.nbytes for p in res.payloads] == size
    assert res.traffic.phases() == ["reduce-scatter", "allgather"]
    for w in range(workers):
        others = sum(size) - size[w]
        assert res.traffic.sent(w, "reduce-scatter") == others  # its stripe j to each owner j ≠ w
        assert res.traffic.received(w, "reduce-scatter") == (workers - 1) * size[w]
        assert res.traffic.sent(w, "allgather") == (workers - 1) * size[w]  # its re-quantized stripe to all
        assert res.traffic.received(w, "allgather") == others
    for p in res.payloads:
        assert decompress(Payload.from_bytes(p.to_bytes())).shape == p.shape


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_exchange_error_feedback_over_steps(workers: int) -> None:
    """Both residuals are kept: Σ_t aggregate_t = Σ_t mean_t − mean_w(e_w) − E_owner exactly, and the
    time-average of the aggregate approaches the true mean."""
    comp = registry.create("onebit")
    shape = (32, 4, 3)
    grads = [normal(shape, seed=10 + w) + 0.5 for w in range(workers)]
    mean = torch.stack(grads).mean(0).double()
    states = [comp.init_state(w) for w in range(workers)]
    total = torch.zeros(shape, dtype=torch.float64)
    steps = 40
    for _ in range(steps):
        total += comp.exchange(grads, states).aggregate.double()
    # the worker residual is the state's own error-feedback residual; the owner's is a second tensor
    worker_res = torch.stack([column_view(st.tensors[ErrorFeedback.KEY]) for st in states])
    owner_res = torch.cat([st.tensors[OWNER_KEY] for st in states], dim=1).double()
    view = column_view(torch.zeros(shape))
    lhs = total.reshape(view.shape)
    rhs = steps * mean.reshape(view.shape) - worker_res.mean(0) - owner_res
    torch.testing.assert_close(lhs, rhs, rtol=0, atol=1e-3)
    assert float((total / steps - mean).norm() / mean.norm()) < 0.25
    assert all(st.step == steps for st in states)


def _exchange_grads(shape: tuple[int, ...], workers: int, step: int) -> list[torch.Tensor]:
    common = normal(shape, seed=500 + step)
    return [normal(shape, seed=600 + 10 * step + w) + common + 0.1 * step for w in range(workers)]


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("granularity", ["column", "row", "tensor"])
@pytest.mark.parametrize("shape", [(64, 3, 3, 3), (33, 17), (1000,)], ids=str)
def test_exchange_leaves_the_residual_of_a_plain_compression(workers: int, granularity: str, shape: tuple[int, ...]) -> None:
    """After each exchange, every worker's state holds exactly the residual (and step) that
    ``compress_and_decode`` from a copy of its state before the step leaves — what the runner's
    fidelity and EF-drift measurements, taken on copies of that state, rely on."""
    comp = registry.create("onebit", granularity=granularity)
    states = [comp.init_state(w) for w in range(workers)]
    for step in range(3):
        grads = _exchange_grads(shape, workers, step)
        before = [st.clone() for st in states]
        comp.exchange(grads, states)
        for w in range(workers):
            comp.compress_and_decode(grads[w], before[w])
            assert torch.equal(states[w].tensors[ErrorFeedback.KEY], before[w].tensors[ErrorFeedback.KEY])
            assert states[w].step == before[w].step == step + 1
        assert float(states[0].tensors[ErrorFeedback.KEY].abs().max()) > 0
    assert "worker_stripes" not in states[0].values


@pytest.mark.parametrize("workers", [2, 3, 4])
@pytest.mark.parametrize("granularity", ["column", "row", "tensor"])
@pytest.mark.parametrize("shape", [(64, 3, 3, 3), (100, 7), (5000,)], ids=str)
def test_stripe_payloads_decode_to_the_whole_decode(workers: int, granularity: str, shape: tuple[int, ...]) -> None:
    """The stripes cut from a worker's message are real payloads (they survive to_bytes/from_bytes)
    that concatenate to the whole-tensor decode; each equals the stateless column encoding of the
    same columns of a = x + e (per-column quantization: sign bits exact, means to float64
    summation order, 1 ulp)."""
    comp = registry.create("onebit", granularity=granularity)
    col = registry.create("onebit", granularity="column")
    st = comp.init_state(0)
    comp.compress(normal(shape, seed=7), st)  # a nonzero residual, so a = x + e differs from x
    x = normal(shape, seed=8) + 0.2
    a = x + st.tensors[ErrorFeedback.KEY]
    whole, whole_dec = comp.compress_and_decode(x, st)
    view = column_view(a, granularity).float()
    ncols = view.shape[1]
    bounds = [int(b) for b in np.linspace(0, ncols, workers + 1).astype(int)]
    stripes = split_stripes(whole, bounds)
    assert [p is None for p in stripes] == [hi == lo for lo, hi in pairwise(bounds)]
    decs = []
    for j, p in enumerate(stripes):
        if p is None:
            continue
        lo, hi = bounds[j], bounds[j + 1]
        again = Payload.from_bytes(p.to_bytes())
        assert p.shape == (view.shape[0], hi - lo) and p.nbytes == len(p.to_bytes()) == _stripe_nbytes(view.shape[0], hi - lo)
        dec = decompress(again)
        decs.append(dec)
        stateless = col.compress(view[:, lo:hi].contiguous(), State(0))
        nbits = math.ceil(p.numel / 8)
        assert stateless.nbytes == p.nbytes
        assert stateless.to_bytes()[-p.body_nbytes :][:nbits] == p.to_bytes()[-p.body_nbytes :][:nbits]  # the sign bits
        torch.testing.assert_close(decompress(stateless), dec, rtol=1.2e-7, atol=0)
    whole_view = column_view(whole_dec, granularity).float()
    assert torch.equal(torch.cat(decs, dim=1), whole_view)


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("granularity", ["column", "row", "tensor"])
def test_exchange_traffic_is_the_sum_of_its_real_payloads(workers: int, granularity: str) -> None:
    """Rebuild both legs from scratch — every worker's stripes cut from its own compression, every
    owner's re-quantized average — and check that traffic counts exactly their serialized sizes
    and that the aggregate is the concatenation of the owners' decodes."""
    comp = registry.create("onebit", granularity=granularity)
    col = registry.create("onebit", granularity="column")
    shape = (48, 5, 3)
    states = [comp.init_state(w) for w in range(workers)]
    comp.exchange(_exchange_grads(shape, workers, 0), states)  # residuals of both kinds are nonzero now
    grads = _exchange_grads(shape, workers, 1)
    shadow = [st.clone() for st in states]
    res = comp.exchange(grads, states)

    ncols = column_view(grads[0], granularity).shape[1]
    bounds = [int(b) for b in np.linspace(0, ncols, workers + 1).astype(int)]
    stripes = [split_stripes(comp.compress(g, s), bounds) for g, s in zip(grads, shadow, strict=True)]
    sent1 = [sum(len(p.to_bytes()) for j, p in enumerate(stripes[w]) if p is not None and j != w) for w in range(workers)]
    recv1 = [sum(len(stripes[v][w].to_bytes()) for v in range(workers) if v != w and stripes[v][w] is not None) for w in range(workers)]
    owner_bytes, owner_decs = [0] * workers, []
    for j in range(workers):
        if stripes[0][j] is None:
            continue
        acc = decompress(stripes[0][j])
        for w in range(1, workers):
            acc = acc + decompress(stripes[w][j])  # float32, in worker order: the owner's arithmetic
        avg = acc / workers
        owner = State(0)
        owner.tensors[ErrorFeedback.KEY] = shadow[j].tensors[OWNER_KEY].clone()  # the owner residual before the step
        p = col.compress(avg, owner)
        owner_bytes[j] = len(p.to_bytes())
        owner_decs.append(decompress(p))
    for w in range(workers):
        assert res.traffic.sent(w, "reduce-scatter") == sent1[w]
        assert res.traffic.received(w, "reduce-scatter") == recv1[w]
        assert res.traffic.sent(w, "allgather") == (workers - 1) * owner_bytes[w]
        assert res.traffic.received(w, "allgather") == sum(owner_bytes) - owner_bytes[w]
    assert sum(sent1) > 0 and sum(owner_bytes) > 0
    assert res.traffic.sent() == sum(sent1) + (workers - 1) * sum(owner_bytes) == res.traffic.received()
    assert torch.equal(res.aggregate, from_view(torch.cat(owner_decs, dim=1), granularity, shape))  # the owners' decodes


@pytest.mark.parametrize("granularity", ["column", "row"])
def test_exchange_state_dict_round_trip_is_bit_exact(granularity: str) -> None:
    """Both residuals live in plain state tensors: states restored from state_dict() reproduce the
    next exchange bit for bit (aggregate, payloads, traffic, and the states after it)."""
    comp = registry.create("onebit", granularity=granularity)
    shape, workers = (40, 6, 2), 3
    states = [comp.init_state(w) for w in range(workers)]
    for step in range(2):
        comp.exchange(_exchange_grads(shape, workers, step), states)
    assert all(OWNER_KEY in st.tensors for st in states)
    saved = [st.state_dict() for st in states]
    assert all(not any(isinstance(v, State) for v in sd["values"].values()) for sd in saved)  # nothing but plain data
    restored = [State.from_state_dict(sd) for sd in saved]
    grads = _exchange_grads(shape, workers, 2)
    a = comp.exchange(grads, states)
    b = comp.exchange(grads, restored)
    assert torch.equal(a.aggregate, b.aggregate)
    assert [p.to_bytes() for p in a.payloads] == [p.to_bytes() for p in b.payloads]
    assert a.traffic.to_dict() == b.traffic.to_dict()
    for s1, s2 in zip(states, restored, strict=True):
        assert s1.step == s2.step and s1.tensors.keys() == s2.tensors.keys()
        assert all(torch.equal(s1.tensors[k], s2.tensors[k]) for k in s1.tensors)
    # and a fresh set of states would have given another aggregate: the residuals matter
    fresh = comp.exchange(grads, [comp.init_state(w) for w in range(workers)])
    assert not torch.equal(fresh.aggregate, a.aggregate)


def test_exchange_single_worker_is_plain_compression() -> None:
    comp = registry.create("onebit")
    x = normal((10, 4), seed=3)
    res = comp.exchange([x], [comp.init_state(0)])
    assert torch.equal(res.aggregate, decompress(comp.compress(x, comp.init_state(0))))
    assert res.traffic.sent(0) == res.payloads[0].nbytes and res.traffic.received(0) == 0


def test_bits_are_sign_of_corrected_input() -> None:
    x = normal((50, 8), seed=4)
    p = registry.create("onebit").compress(x, State(0))
    bits = np.unpackbits(np.frombuffer(p.to_bytes()[-p.body_nbytes :][: math.ceil(400 / 8)], np.uint8), bitorder="little")[:400]
    assert np.array_equal(bits.astype(bool), (x.reshape(-1) >= 0).numpy())


# ---------------------------------------------------------------------------- fast paths


@pytest.mark.parametrize("granularity", ["column", "row", "tensor"])
@pytest.mark.parametrize("shape", [(7,), (64, 3, 3, 3), (300, 301), (5, 1), (1, 9)], ids=str)
def test_fused_step_matches_the_torch_path(granularity: str, shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels' two passes (formation with the group sums, then bits and residual) and the
    torch path (base formation, torch ``_encode``) give the same bytes (up to float64 summation
    order, checked to 1 ulp of the means), the same decoded tensors and residuals, step after step."""
    comp = registry.create("onebit", granularity=granularity)
    fused, generic, ref = comp.init_state(0), comp.init_state(0), comp.init_state(0)
    for step in range(3):
        x = normal(shape, seed=30 + step) + 0.3 * step
        p1, d1 = comp.compress_and_decode(x, fused)
        with monkeypatch.context() as m:
            torch_only(m)
            p2, d2 = comp.compress_and_decode(x, generic)
        d3 = type(comp).reference(comp, x, ref)
        assert p1.nbytes == p2.nbytes
        torch.testing.assert_close(d1, d2, rtol=1.2e-7, atol=0)
        torch.testing.assert_close(d1.reshape(-1), d3.reshape(-1), rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(fused.tensors["residual"], generic.tensors["residual"], rtol=0, atol=1e-6)
        nbits = math.ceil(x.numel() / 8)
        assert p1.to_bytes()[-p1.body_nbytes :][:nbits] == p2.to_bytes()[-p2.body_nbytes :][:nbits]  # the sign bits
    assert fused.step == generic.step == 3


def test_fused_decode_matches_the_torch_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    payloads = {g: registry.create("onebit", granularity=g).compress(normal((70, 1001), seed=2), State(0)) for g in GRANULARITIES}
    fast = {g: decompress(p) for g, p in payloads.items()}
    torch_only(monkeypatch)
    for g, p in payloads.items():
        assert torch.equal(fast[g], decompress(p)), g
