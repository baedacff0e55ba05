"""The device guard over the real transport: the DDP hook's step on a 2-process gloo group, counted on every rank.

The workers run the torch path (``GCBENCH_KERNELS=torch``, the path a CUDA tensor takes) and count one training step
(forward, backward with the hook's exchange, optimizer step) after a first one (DDP rebuilds its buckets after it)
with :func:`gcbench.core.host_sync.count_host_syncs`, which counts in every thread (the protocol resumes in gloo's
callback threads).  Per rank: no tensor/NumPy conversion (a Python number or list given a device counts too), host
uploads within the legs' :data:`gcbench.distributed.transport.HOST_UPLOADS`, and scalar reads within the budget of
the legs the step ran (:data:`gcbench.distributed.transport.HOST_READS`) plus its compressor's (per unit: a compress and a decode per
payload delivered, each within the card's ``scalar_reads``, and :data:`gcbench.core.info.PROTOCOL_SCALAR_READS`).

Every registered compressor runs whose codec passes the compressor guard on every check
(``tests/compressors/test_device_guard.py``'s ``NOT_YET``): a conversion here is then the transport's or the hook's.
So do the sharded schemes of :mod:`gcbench.core.sharded` (the ring's addressed messages, the all-to-all), on one codec.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from gcbench.compressors import registry
from gcbench.core.info import PROTOCOL_SCALAR_READS
from gcbench.train.workers import WorkerContext, run_group
from tests.compressors.test_device_guard import NOT_YET

WORLD = 2
NAMES = [n for n in registry.names() if not any(n in names for names in NOT_YET.values())]
#: the sharded schemes run on the real transport too, with one stateless codec that stays on the device
SHARDED = ("ring", "alltoall")
SHARDED_CODEC = "qsgd"


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(24, 20), nn.Tanh(), nn.Linear(20, 3))  # a (20, 24) matrix for PowerSGD


def _step(ddp: nn.Module, opt: torch.optim.Optimizer, rank: int, t: int) -> None:
    g = torch.Generator().manual_seed(100 * rank + t)
    x, y = torch.randn(16, 24, generator=g), torch.randint(0, 3, (16,), generator=g)
    opt.zero_grad()
    nn.functional.cross_entropy(ddp(x), y).backward()
    opt.step()


def _callback_conversion_is_counted(ctx: WorkerContext) -> int:
    """The counter's own check, on gloo: a conversion in a collective's completion callback (another thread) is counted."""
    from gcbench.core.host_sync import count_host_syncs

    t = torch.ones(4)
    with count_host_syncs() as counted:
        fut = dist.all_reduce(t, group=ctx.group, async_op=True).get_future()
        fut.then(lambda f: f.value()[0].numpy().sum()).wait()
    return counted.conversions


def _counts(ctx: WorkerContext, names: list[str]) -> dict[str, Any]:
    from gcbench.core.host_sync import count_host_syncs
    from gcbench.distributed import transport
    from gcbench.distributed.ddp import register_compressor_hook

    torch.set_num_threads(1)
    legs: list[str] = []
    leg = transport.TorchTransport._leg

    def spy(self: Any, kind: str, phase: str, op: str = "") -> Any:
        legs.append(kind)
        return leg(self, kind, phase, op)

    transport.TorchTransport._leg = spy  # type: ignore[method-assign]  # counts the legs this rank ran
    out: dict[str, Any] = {"__callback__": _callback_conversion_is_counted(ctx)}
    for scheme in SHARDED:
        legs.clear()
        out[f"sharded:{scheme}"] = _sharded(ctx, scheme) | {"legs": list(legs)}
    for name in names:
        model = _model()
        ddp = DDP(model, process_group=ctx.group)
        state = register_compressor_hook(ddp, name, process_group=ctx.group)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        _step(ddp, opt, ctx.rank, 0)
        legs.clear()
        with count_host_syncs() as counted:
            _step(ddp, opt, ctx.rank, 1)
        buckets = state.stats.steps[-1].buckets
        out[name] = {"conversions": counted.conversions, "scalar_reads": counted.scalar_reads, "sites": counted.sites[:6],
                     "uploads": counted.uploads,
                     "legs": list(legs), "units": sum(b.units for b in buckets),
                     "decoded": sum(b.decoded_payloads * b.units for b in buckets)}
    return out


def _sharded(ctx: WorkerContext, scheme: str) -> dict[str, Any]:
    """A sharded scheme (core/sharded.py: its ring's Send legs, its all-to-all) of :data:`SHARDED_CODEC` on the real transport."""
    from gcbench.core.host_sync import count_host_syncs
    from gcbench.core.protocol import Context
    from gcbench.core.sharded import sharded_protocol
    from gcbench.distributed.transport import ChainTimes, TorchTransport, drive

    comp = registry.create(SHARDED_CODEC)
    x = torch.randn(1000, generator=torch.Generator().manual_seed(ctx.rank))
    transport = TorchTransport(ctx.group, ctx.rank, ctx.world_size, torch.device("cpu"))
    with count_host_syncs() as counted:
        drive(sharded_protocol(comp, [x], [comp.init_state(ctx.rank)], Context(ctx.rank, ctx.world_size), scheme), transport,
              ChainTimes()).wait()
    world = ctx.world_size
    return {"conversions": counted.conversions, "scalar_reads": counted.scalar_reads, "sites": counted.sites[:6],
            "uploads": counted.uploads, "units": 1,
            "decoded": 2 * world + 1}  # at most: the ring's hops and the mean, the all-gather's chunks


@pytest.fixture(scope="module")
def ranks(monkeypatch_module: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    monkeypatch_module.setenv("GCBENCH_KERNELS", "torch")  # the spawned workers choose their kernels at import
    return run_group(_counts, (NAMES,), WORLD, timeout_s=300)


@pytest.fixture(scope="module")
def monkeypatch_module() -> Any:
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_the_counter_sees_the_collectives_callback_threads(ranks: list[dict[str, Any]]) -> None:
    assert [r["__callback__"] for r in ranks] == [1] * WORLD


@pytest.mark.parametrize("name", NAMES + [f"sharded:{s}" for s in SHARDED])
def test_the_real_exchange_stays_on_the_device(ranks: list[dict[str, Any]], name: str) -> None:
    from gcbench.distributed.transport import HOST_READS, HOST_UPLOADS

    reads = registry.get(SHARDED_CODEC if name.startswith("sharded:") else name).scalar_reads
    for rank, res in enumerate(ranks):
        got = res[name]
        assert got["legs"], f"{name}: rank {rank} ran no leg"
        budget = sum(HOST_READS[k] for k in got["legs"]) + reads * (got["units"] + got["decoded"]) \
            + PROTOCOL_SCALAR_READS * got["units"]
        where = "; ".join(got["sites"])
        assert got["conversions"] == 0, f"{name}: rank {rank}: {got['conversions']} conversion(s) at {where}"
        uploads = sum(HOST_UPLOADS[k] for k in got["legs"])
        assert got["uploads"] <= uploads, f"{name}: rank {rank}: {got['uploads']} uploads, budget {uploads} ({got['legs']})"
        assert got["scalar_reads"] <= budget, f"{name}: rank {rank}: {got['scalar_reads']} scalar reads, budget {budget}, at {where}"
    print(f"{name:<16} legs {'+'.join(ranks[0][name]['legs'])}: scalar reads per rank "
          f"{[r[name]['scalar_reads'] for r in ranks]}, conversions {[r[name]['conversions'] for r in ranks]}")
