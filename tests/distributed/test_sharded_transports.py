"""The sharded collectives (:mod:`gcbench.core.sharded`) on real gloo groups give the simulated aggregate and bytes.

Each spawned worker runs every scheme for a few codecs on the ``torch.distributed`` transport and
simulates the whole group in-process on the same inputs and seeds; no leg of these schemes sums in a
collective, so the aggregates must agree to the bit, and the bytes per leg and worker exactly.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gcbench.compressors import registry
from gcbench.core.protocol import Context, simulate
from gcbench.core.sharded import sharded_protocol
from gcbench.distributed.transport import ChainTimes, TorchTransport, drive
from gcbench.train.workers import WorkerContext, run_group

CASES = [("none", "ring", "fp32"), ("bf16", "ring", "bf16"), ("qsgd", "ring", "fp32"), ("thc", "alltoall", "fp32"),
         ("bf16", "alltoall", "bf16"), ("qsgd", "allgather", "fp32"), ("bf16", "allgather", "fp32")]
NUMEL = 301  # chunks of unequal length


def _inputs(world: int) -> list[torch.Tensor]:
    return [torch.randn(NUMEL, generator=torch.Generator().manual_seed(17 + w)) * (1 + w) for w in range(world)]


def _compare(ctx: WorkerContext) -> dict[str, Any]:
    torch.set_num_threads(1)
    world, me = ctx.world_size, ctx.rank
    xs = _inputs(world)
    out: dict[str, Any] = {}
    for name, scheme, acc in CASES:
        comp = registry.create(name)
        memo: dict = {}
        run = simulate([sharded_protocol(comp, [xs[w]], [comp.init_state(w)], Context(w, world, (), memo), scheme, acc)
                        for w in range(world)])
        transport = TorchTransport(ctx.group, me, world, torch.device("cpu"))
        real = drive(sharded_protocol(comp, [xs[me]], [comp.init_state(me)], Context(me, world), scheme, acc), transport,
                     ChainTimes()).wait()
        simulated = [(ph, c[me].sent, c[me].received, c[me].sent_body) for ph, c in run.legs]
        measured = [(ph, c.sent, c.received, c.sent_body) for leg in transport.legs for ph, c in leg.counted]
        exact = torch.stack(xs).double().mean(0)
        out[f"{name}/{scheme}/{acc}"] = {
            "equal": bool(torch.equal(real.aggregates[0], run.outcomes[me].aggregates[0])),
            "bytes": [simulated, measured],
            "err": float((real.aggregates[0].double() - exact).norm() / exact.norm()),
        }
    return out


@pytest.fixture(scope="module", params=[2, 3], ids=["2-workers", "3-workers"])
def group(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return run_group(_compare, (), request.param, timeout_s=180)


def test_real_sharded_collectives_match_the_simulation(group: list[dict[str, Any]]) -> None:
    for rank in group:
        assert set(rank) == {f"{n}/{s}/{a}" for n, s, a in CASES}
        for label, res in rank.items():
            assert res["equal"], label
            simulated, measured = res["bytes"]
            assert [tuple(m) for m in measured] == [tuple(s) for s in simulated], label
            assert sum(m[1] for m in measured) > 0, label
            assert res["err"] < (1e-6 if label.startswith("none") else 0.5), label
