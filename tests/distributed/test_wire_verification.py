"""Wire verification of the DDP hook (gcbench.distributed.transport / ddp): what reaches torch.distributed is what was promised.

The unit tests check the declared sizes (framing, ratios, the codec's body check) in one process;
one 2-process gloo group then runs legitimate exchanges (verified, with their padding reported
apart) and three broken ones that must raise: a transport that widens the all-reduce to float64,
a ``bf16`` whose protocol sends its summable body as float32 (the silent 2x fallback), and a codec
whose payload declares fewer bytes than it serialises.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from gcbench.compressors import registry
from gcbench.core.payload import Payload
from gcbench.core.protocol import AllReduce, Message, Outcome
from gcbench.distributed.ddp import register_compressor_hook
from gcbench.distributed.framing import frame_messages, frame_overhead
from gcbench.distributed.hook_state import check_payload_sizes
from gcbench.distributed.hook_stats import HookStats
from gcbench.distributed.transport import LegBytes, TorchTransport, WireMismatchError
from gcbench.train.workers import WorkerContext, run_group
from tests.distributed.fakes import lying_topk

WORLD = 2
VERIFIED = ("none", "bf16", "topk", "qsgd", "powersgd", "terngrad", "onebit", "lgc")


def test_frame_overhead_is_the_framing_around_the_payloads() -> None:
    comp = registry.create("topk", density=0.25)
    p = comp.compress(torch.arange(12.0), comp.init_state())
    msgs = [Message("phase-a", 0, (1,), p), Message("b", 0, (0, 1), p)]
    assert frame_overhead(msgs) == len(frame_messages(msgs)) - 2 * p.nbytes
    assert frame_overhead([]) == 0


def test_leg_verified_and_ratio() -> None:
    ok = LegBytes("allgather", [], 0, promised=100, overhead=8, padding=12, wire=120)
    assert ok.verified and ok.ratio == 1.0
    wide = LegBytes("allreduce", [], 0, promised=400, wire=800)
    assert not wide.verified and wide.ratio == 2.0
    assert LegBytes("send", [], 0, overhead=8, wire=8).ratio is None  # nothing promised, nothing sent: verified
    stats = HookStats()
    assert stats.wire_summary()["verified"] is None  # nothing checked yet


def test_a_payload_whose_body_is_not_what_its_header_declares_is_refused() -> None:
    comp = registry.create("bf16")
    good = comp.compress(torch.randn(10), comp.init_state())
    assert check_payload_sizes(comp, [good, None])
    forged = Payload(good.codec, good.version, good.dtype, good.shape, torch.zeros(40, dtype=torch.uint8))  # float32-sized body
    assert not check_payload_sizes(comp, [forged], verify=False)
    with pytest.raises(WireMismatchError, match=r"bf16: wire check failed: a payload's body has 40 bytes where its header promises 20"):
        check_payload_sizes(comp, [forged])
    other = registry.create("none").compress(torch.randn(10), registry.create("none").init_state())
    assert check_payload_sizes(comp, [other])  # another codec's message is its receivers' business


# ----------------------------------------------------------------------------- two gloo workers


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))


def _train(ctx: WorkerContext, comp: Any, steps: int = 3, **kw: Any) -> Any:
    model = _mlp()
    ddp = DDP(model, process_group=ctx.group, bucket_cap_mb_list=[0.0005, 0.0005])  # ~500-byte caps: several buckets
    state = register_compressor_hook(ddp, comp, seed=1, process_group=ctx.group, **kw)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for t in range(steps):
        g = torch.Generator().manual_seed(100 * ctx.rank + t)
        x, y = torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)
        opt.zero_grad()
        try:
            nn.functional.cross_entropy(ddp(x), y).backward()
        except Exception as exc:  # the hook's error reaches backward() through DDP's future, rewrapped by DDP
            state.queue.wait()  # the step's later buckets still run their collectives: let them finish before anything else
            return f"{type(exc).__name__}: {exc}"
        opt.step()
    return state


def _wide_bf16() -> Any:
    """``bf16`` whose summable protocol all-reduces its body widened to float32: the silent 2x fallback."""

    class WideBF16(type(registry.create("bf16"))):  # type: ignore[misc]
        def allreduce_protocol(self, xs: Any, states: Any, ctx: Any) -> Any:
            payloads = [p for p, _ in self.compress_group(xs, states, need_decoded=False)]
            means = yield AllReduce([p.data.view(torch.bfloat16).float() for p in payloads], "allgather", op="mean", count="once",
                                    nbytes=[p.nbytes for p in payloads], body=True)
            return Outcome([m.reshape(x.shape) for m, x in zip(means, xs, strict=True)], payloads)

    return WideBF16()


def _widening(self: TorchTransport, t: torch.Tensor) -> torch.Tensor:
    return t.double() if t.is_floating_point() else t


def _scenarios(ctx: WorkerContext) -> dict[str, Any]:
    torch.set_num_threads(1)
    out: dict[str, Any] = {"ok": {}}
    for name in VERIFIED:
        state = _train(ctx, name if name != "qsgd" else "qsgd:encoding=elias,s=4,bucket=64")
        out["ok"][name] = {"summary": state.stats.summary()["wire"], "steps": [s.wire_verified for s in state.stats.steps],
                           "describe": state.describe(), "collectives": state.stats.summary()["collectives"]}
    original = TorchTransport._on_wire
    TorchTransport._on_wire = _widening  # type: ignore[method-assign]
    try:
        out["float64"] = _train(ctx, "none", steps=1)
        recorded = _train(ctx, "none", steps=2, verify_wire=False)
        out["float64_recorded"] = recorded.stats.summary()["wire"]
    finally:
        TorchTransport._on_wire = original  # type: ignore[method-assign]
    out["wide_bf16"] = _train(ctx, _wide_bf16(), steps=1)
    out["lying_topk"] = _train(ctx, lying_topk(), steps=1)
    dist.barrier(group=ctx.group)
    return out


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return run_group(_scenarios, (), WORLD, timeout_s=300)


def test_legitimate_exchanges_are_verified(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        for name in VERIFIED:
            res = r["ok"][name]
            wire = res["summary"]
            assert wire["verified"] is True and res["steps"] == [True] * 3, (name, wire)
            assert wire["ratio"] == 1.0, (name, wire)
            assert wire["wire_bytes"] == wire["promised_bytes"] + wire["overhead_bytes"] + wire["padding_bytes"]
            assert res["describe"]["wire_verified"] is True and res["describe"]["wire_bytes_ratio"] == 1.0
        # the summable casts all-reduce their bodies: the header every receiver knows is counted, never sent
        assert r["ok"]["none"]["summary"]["overhead_bytes"] == 0 and r["ok"]["none"]["summary"]["padding_bytes"] == 0
        assert r["ok"]["powersgd"]["collectives"] == ["allreduce"]
    # elias-coded QSGD's payloads differ in size between the workers: the shorter one is padded, and it is reported
    assert sum(r["ok"]["qsgd"]["summary"]["padding_bytes"] for r in ranks) > 0


def test_a_transport_that_widens_the_wire_is_an_error(ranks: list[dict[str, Any]]) -> None:
    for rank, r in enumerate(ranks):
        msg = r["float64"]
        assert "none: wire check failed on leg 0 (allreduce" in msg and f"of rank {rank}" in msg, msg
        assert "(2x the promised bytes)" in msg, msg
        promised = int(msg.split("promised ")[1].split(" ")[0])
        sent = int(msg.split("sent ")[1].split(" ")[0])
        assert sent == 2 * promised > 0
        # without raising, the stats say the same
        rec = r["float64_recorded"]
        assert rec["verified"] is False and rec["ratio"] == 2.0


def test_a_summable_body_sent_wider_than_its_payload_is_an_error(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        msg = r["wide_bf16"]
        assert "bf16: wire check failed on leg 0 (allreduce, phase 'allgather')" in msg, msg
        sent = int(msg.split("sent ")[1].split(" ")[0])
        promised = int(msg.split("promised ")[1].split(" ")[0])
        assert 1.8 < sent / promised < 2.0  # the float32 body vs the bf16 payload (its header included)


def test_a_payload_that_declares_fewer_bytes_than_it_sends_is_an_error(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        msg = r["lying_topk"]
        assert "topk: wire check failed on leg 0 (allgather, phase 'allgather')" in msg, msg
        assert "PayloadError" not in msg  # caught at the sender's leg, before any peer decoded the bytes
