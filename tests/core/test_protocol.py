"""The protocol legs and the simulated transport (gcbench.core.protocol), in one process."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gcbench.compressors import registry
from gcbench.core.protocol import AllGather, AllReduce, AllToAll, Context, Outcome, WorkerProtocol, simulate


def _summing(rank: int, world: int, values: list[float]) -> WorkerProtocol:
    got = yield AllReduce([torch.tensor(values) * (rank + 1)], "sum")
    top = yield AllReduce([torch.tensor([float(rank)])], "max", op="max", count="once")
    return Outcome([got[0] / world, top[0]], [])


def test_all_reduce_sums_and_maxes_across_workers_and_counts_ring_chunks() -> None:
    run = simulate([_summing(w, 3, [1.0, 2.0, 3.0, 4.0]) for w in range(3)])
    for o in run.outcomes:
        assert torch.equal(o.aggregates[0], torch.tensor([2.0, 4.0, 6.0, 8.0]))  # (1 + 2 + 3) × v / 3
        assert o.aggregates[1].item() == 2.0
    (ph1, ring), (ph2, once) = run.legs
    assert (ph1, ph2) == ("sum", "max")
    # 16 bytes in chunks of 8, 4, 4: over the two sweeps worker w sends 2 × 16 less chunks w + 1 and w + 2,
    # and receives what its left neighbour sends
    assert [(c.sent, c.received) for c in ring] == [(24, 20), (20, 24), (20, 20)]
    assert [(c.sent, c.received) for c in once] == [(4, 8)] * 3


def _gather_and_scatter(rank: int, world: int) -> WorkerProtocol:
    me = registry.create("none").compress(torch.full((rank + 1,), float(rank)), registry.create("none").init_state())
    rows = yield AllGather([me], "gather", per_peer=True)
    to = [[me if j != rank else None] for j in range(world)]
    cols = yield AllToAll(to, "scatter")
    return Outcome([torch.tensor([float(len(rows)), float(sum(r[0] is not None for r in cols))])], [me])


def test_gather_and_all_to_all_deliver_every_workers_slots_and_count_per_peer() -> None:
    run = simulate([_gather_and_scatter(w, 3) for w in range(3)])
    assert all(torch.equal(o.aggregates[0], torch.tensor([3.0, 2.0])) for o in run.outcomes)  # own all-to-all slot: None here
    sizes = [o.sent[0].nbytes for o in run.outcomes]
    (_, gather), (_, scatter) = run.legs
    assert [c.sent for c in gather] == [2 * s for s in sizes]  # per peer: one copy to each of the 2 others
    assert [c.received for c in gather] == [sum(sizes) - s for s in sizes]
    assert [c.sent for c in scatter] == [2 * s for s in sizes] and [c.received for c in scatter] == [sum(sizes) - s for s in sizes]


def _diverging(rank: int) -> Any:
    yield AllReduce([torch.zeros(1)], "a" if rank == 0 else "b")
    return Outcome([], [])


def _short(rank: int) -> Any:
    if rank:
        yield AllReduce([torch.zeros(1)], "a")
    return Outcome([], [])


def test_workers_that_disagree_on_the_legs_are_a_protocol_bug() -> None:
    with pytest.raises(RuntimeError, match="different legs"):
        simulate([_diverging(w) for w in range(2)])
    with pytest.raises(RuntimeError, match="finished at different legs"):
        simulate([_short(w) for w in range(2)])


def test_once_computes_a_shared_value_once_per_simulated_group() -> None:
    memo: dict[Any, Any] = {}
    calls: list[int] = []
    ctxs = [Context(w, 3, (), memo) for w in range(3)]
    assert [c.once("k", lambda w=c.rank: calls.append(w) or w) for c in ctxs] == [0, 0, 0]
    assert calls == [0]
    assert Context(1, 3).once("k", lambda: 7) == 7  # no memo (a real transport): computed by each worker
