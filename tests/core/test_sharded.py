"""Compression inside sharded collectives: ring hops, all-to-all reduce, all-gather, on the simulated transport."""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import registry
from gcbench.core.compressor import Compressor
from gcbench.core.protocol import Context, ring_allreduce_bytes, simulate
from gcbench.core.sharded import CollectiveError, check_fits, chunk_sizes, sharded_protocol, simulate_sharded


def grads(n: int, d: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(d, generator=g) for _ in range(n)]


def rel_err(agg: torch.Tensor, xs: list[torch.Tensor]) -> float:
    exact = torch.stack(xs).double().mean(0)
    return float((agg.double() - exact).norm() / exact.norm())


def run(comp: Compressor, xs: list[torch.Tensor], scheme: str, acc: str = "fp32"):  # type: ignore[no-untyped-def]
    return simulate_sharded(comp, xs, [comp.init_state(w) for w in range(len(xs))], scheme, acc)


def test_chunks_split_like_a_ring_allreduce() -> None:
    assert chunk_sizes(10, 3) == [4, 3, 3] and sum(chunk_sizes(1001, 7)) == 1001 and chunk_sizes(2, 4) == [1, 1, 0, 0]


@pytest.mark.parametrize("scheme", ["ring", "alltoall"])
def test_none_in_fp32_is_the_exact_mean_and_costs_a_ring_allreduce(scheme: str) -> None:
    comp = registry.create("none")
    for n in (1, 2, 5):
        xs = grads(n, 1000, seed=n)
        res = run(comp, xs, scheme)
        assert torch.allclose(res.aggregate, torch.stack(xs).mean(0), rtol=0, atol=1e-6)
        # equal chunks: the bodies are exactly a ring all-reduce's bytes per worker; headers come on top
        ring = ring_allreduce_bytes(1000, n)
        chunk = 4 * (1000 // n)
        for w in range(n):
            assert res.traffic.sent_body(w, "allgather") == (n - 1) * chunk  # one copy per receiving peer
            if scheme == "ring":
                assert res.traffic.sent_body(w) == ring[w][0]
            else:  # an all-to-all leg counts whole messages: N − 1 chunks, each with its header
                assert (n - 1) * chunk <= res.traffic.sent(w, "alltoall") <= (n - 1) * (chunk + 64)
            assert res.traffic.sent(w) > ring[w][0] or n == 1


def test_allgather_is_todays_exchange_exactly_with_per_peer_bytes() -> None:
    for name in ("bf16", "qsgd", "thc"):
        comp = registry.create(name)
        xs = grads(4, 777, seed=3)
        res = run(comp, xs, "allgather")
        memo: dict = {}
        today = simulate([comp.gather_protocol([xs[w]], [comp.init_state(w)], Context(w, 4, (), memo)) for w in range(4)])
        assert torch.equal(res.aggregate, today.outcomes[0].aggregates[0]), name
        for w in range(4):
            assert res.traffic.sent(w) == 3 * today.legs[0][1][w].sent, name  # each payload once per receiving peer
            assert res.traffic.received(w) == today.legs[0][1][w].received, name


def test_ring_counts_every_hop_by_its_sender() -> None:
    comp = registry.create("bf16")
    n, d = 4, 4000
    res = run(comp, grads(n, d), "ring")
    # N − 1 reduce-scatter hops of a 1000-element bf16 chunk, then this worker's chunk to N − 1 peers
    assert res.traffic.phases() == ["reduce-scatter", "allgather"]
    for w in range(n):
        assert res.traffic.sent_body(w, "reduce-scatter") == (n - 1) * 2000
        assert res.traffic.sent_body(w, "allgather") == (n - 1) * 2000


def test_bf16_ring_error_grows_with_n_while_alltoall_fp32_stays_flat() -> None:
    comp = registry.create("bf16")
    ring, a2a = [], []
    for n in (2, 8, 32):
        per_seed_ring, per_seed_a2a = [], []
        for seed in range(3):
            xs = grads(n, 4096, seed=100 * n + seed)
            per_seed_ring.append(rel_err(run(comp, xs, "ring").aggregate, xs))
            per_seed_a2a.append(rel_err(run(comp, xs, "alltoall").aggregate, xs))
        ring.append(sum(per_seed_ring) / 3)
        a2a.append(sum(per_seed_a2a) / 3)
    assert ring[0] < ring[1] < ring[2] and ring[2] > 2.0 * ring[0]  # ~ sqrt(N) requantizations: x2.8 over 2 -> 32 (x4 in N)
    assert max(a2a) < 1.3 * min(a2a)  # one quantization per contribution, whatever N
    assert a2a[2] < 0.5 * ring[2]


def test_bf16_accumulation_grows_the_alltoall_error() -> None:
    comp = registry.create("none")
    xs = grads(32, 4096, seed=9)
    assert rel_err(run(comp, xs, "alltoall", "bf16").aggregate, xs) > 100 * rel_err(run(comp, xs, "alltoall", "fp32").aggregate, xs)


def test_unfit_compressors_and_dtypes_are_one_line_errors() -> None:
    with pytest.raises(CollectiveError, match="keeps state"):
        check_fits(registry.create("dgc"), "ring")
    with pytest.raises(CollectiveError, match="keeps state"):
        check_fits(registry.create("topk", error_feedback=True), "alltoall")
    check_fits(registry.create("topk"), "alltoall")  # without its optional residual, a plain codec
    with pytest.raises(CollectiveError, match="shape"):
        check_fits(registry.create("onebit"), "ring")
    with pytest.raises(CollectiveError, match="whole model"):
        check_fits(registry.create("lgc", preset="reference"), "alltoall")
    with pytest.raises(CollectiveError, match="fp32 only"):
        check_fits(registry.create("bf16"), "allgather", "bf16")
    with pytest.raises(CollectiveError, match="unknown"):
        check_fits(registry.create("bf16"), "tree")
    with pytest.raises(CollectiveError, match="unknown accumulation"):
        check_fits(registry.create("bf16"), "ring", "fp8")


def test_generators_refuse_before_yielding() -> None:
    comp = registry.create("dgc")
    gen = sharded_protocol(comp, [torch.ones(4)], [comp.init_state(0)], Context(0, 2), "ring")
    with pytest.raises(CollectiveError):
        next(gen)


def test_empty_and_tiny_tensors() -> None:
    comp = registry.create("bf16")
    for d in (0, 1, 3):
        xs = grads(4, d)
        for scheme in ("ring", "alltoall", "allgather"):
            res = run(comp, xs, scheme)
            assert res.aggregate.shape == (d,)
