"""Compressors inside FSDP2's reduce-scatter (gcbench.distributed.fsdp) on a real 2-process gloo group, CPU.

One worker group runs every scenario: ``none`` against FSDP2's own reduce-scatter, then lossy
compressors trained a few steps (full parameters identical on every rank after each step, wire
verified, every shard the mean of the decoded payloads recomputed independently).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from gcbench.compressors import registry
from gcbench.distributed.hook_state import unit_seed
from gcbench.train.workers import WorkerContext, run_group
from tests.distributed.fakes import lying_topk

WORLD = 2
STEPS = 4
LOSSY = ("bf16", "qsgd", "topk:density=0.25,error_feedback=true")


def _model(ctx: WorkerContext) -> nn.Module:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    # Linear(16, 3): 3 rows over 2 ranks, so FSDP pads dim 0 and the chunks hold padding
    model = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))
    mesh = DeviceMesh.from_group(ctx.group, "cpu")
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)  # the root: no parameters of its own
    return model


def _full(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()])


def _identical(ctx: WorkerContext, flat: torch.Tensor) -> bool:
    out = [torch.empty_like(flat) for _ in range(ctx.world_size)]
    dist.all_gather(out, flat, group=ctx.group)
    return all(torch.equal(o, out[0]) for o in out)


def _train(ctx: WorkerContext, model: nn.Module, steps: int = STEPS) -> tuple[list[bool], list[float]]:
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    identical, losses = [], []
    for t in range(steps):
        g = torch.Generator().manual_seed(100 * ctx.rank + t)
        x, y = torch.randn(16, 12, generator=g), torch.randint(0, 3, (16,), generator=g)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        identical.append(_identical(ctx, _full(model)))
        losses.append(float(loss.detach()))
    return identical, losses


def _scenarios(ctx: WorkerContext) -> dict[str, Any]:
    from gcbench.distributed.fsdp import CompressedReduceScatter, register_fsdp_compressor

    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    default = _model(ctx)
    _train(ctx, default)
    hooked = _model(ctx)
    shared = register_fsdp_compressor(hooked, "none", seed=3)
    identical, _ = _train(ctx, hooked)
    out["none"] = {"maxdiff": float((_full(default) - _full(hooked)).abs().max()), "identical": identical,
                   "modules": len(shared.comms), "wire": shared.stats.wire_summary(), "steps": len(shared.stats.steps),
                   "describe": shared.describe()}
    wide = _model(ctx)
    register_fsdp_compressor(wide, "none", seed=3, accum=torch.float64)
    _train(ctx, wide)
    out["none"]["maxdiff_float64"] = float((_full(default) - _full(wide)).abs().max())

    # every call's input and output, for the independent recomputation
    captured: list[dict[str, Any]] = []
    original = CompressedReduceScatter.__call__

    def spy(self: Any, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any, op: Any, async_op: bool = False) -> None:
        inp = input_tensor.detach().clone()
        original(self, output_tensor, input_tensor, group, op, async_op)
        captured.append({"index": self.index, "input": inp, "output": output_tensor.detach().clone(), "op": str(op)})

    for spec in LOSSY:
        model = _model(ctx)
        shared = register_fsdp_compressor(model, spec, seed=3)
        captured.clear()
        CompressedReduceScatter.__call__ = spy  # type: ignore[method-assign]
        try:
            identical, losses = _train(ctx, model)
        finally:
            CompressedReduceScatter.__call__ = original  # type: ignore[method-assign]
        # the first step's calls (fresh states): every shard = the mean of the world's decoded chunks, in rank order
        name, params = registry.parse_spec(spec)
        comp = registry.create(name, **params)
        exact = []
        for rec in captured[: len(shared.comms)]:
            inputs = [torch.empty_like(rec["input"]) for _ in range(ctx.world_size)]
            dist.all_gather(inputs, rec["input"], group=ctx.group)
            acc = torch.zeros(rec["output"].shape, dtype=torch.float32)
            for w, x in enumerate(inputs):
                chunk = x.reshape(ctx.world_size, -1)[ctx.rank]
                acc += comp.decompress(comp.compress(chunk, comp.init_state(unit_seed(3, w, rec["index"], ctx.rank))))
            exact.append(torch.equal(acc / ctx.world_size, rec["output"]))
        s = shared.stats.summary()
        out[spec] = {"identical": identical, "losses": losses, "exact": exact, "steps": s["steps"], "wire": s["wire"],
                     "payload": s["payload_bytes_per_step"], "dense": s["dense_bytes_per_step"], "ops": sorted({c["op"] for c in captured}),
                     "hash": hashlib.sha256(_full(model).numpy().tobytes()).hexdigest()}

    # a codec whose payloads serialise four bytes for each one they declare: the reduce-scatter raises, naming it
    model = _model(ctx)
    register_fsdp_compressor(model, lying_topk(), seed=3)
    try:
        _train(ctx, model, steps=1)
        out["lying"] = ""
    except Exception as exc:
        out["lying"] = f"{type(exc).__name__}: {exc}"
    dist.barrier(group=ctx.group)
    return out


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return run_group(_scenarios, (), WORLD, timeout_s=300)


def test_none_matches_fsdp2s_own_reduce_scatter(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        res = r["none"]
        assert res["modules"] == 2  # the two Linear layers; the parameterless root never reduce-scatters
        assert res["maxdiff"] < 1e-6, res["maxdiff"]  # the same mean, summed in another order
        assert res["maxdiff_float64"] < 1e-6, res["maxdiff_float64"]  # summed in float64, rounded once
        assert res["identical"] == [True] * STEPS
        assert res["steps"] == STEPS
        assert res["wire"]["verified"] is True and res["wire"]["ratio"] == 1.0
        assert res["describe"]["wire_verified"] is True


def test_lossy_compressors_train_with_identical_full_parameters_and_verified_bytes(ranks: list[dict[str, Any]]) -> None:
    for spec in LOSSY:
        for r in ranks:
            res = r[spec]
            assert res["identical"] == [True] * STEPS, spec  # every rank unshards the same full parameters after every step
            assert res["steps"] == STEPS, spec
            assert res["wire"]["verified"] is True and res["wire"]["ratio"] == 1.0, (spec, res["wire"])
            w = res["wire"]
            assert w["wire_bytes"] == w["promised_bytes"] + w["overhead_bytes"] + w["padding_bytes"]
            assert res["payload"] < res["dense"], spec  # fewer bytes than FSDP's dense reduce-scatter sends
            assert res["ops"] == ["RedOpType.AVG"], spec  # float32 gradients: FSDP asks for the average
            assert all(res["exact"]) and len(res["exact"]) == 2, spec  # independent recomputation, to the bit
        assert len({r[spec]["hash"] for r in ranks}) == 1, spec


def test_a_payload_that_declares_fewer_bytes_than_it_sends_is_an_error(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        msg = r["lying"]
        assert msg.startswith("WireMismatchError: topk: wire check failed on leg 0 (alltoall, phase 'reduce-scatter')"), msg


def test_misuse_is_one_clear_error() -> None:
    from gcbench.core.errors import GcbenchError, ParamError
    from gcbench.distributed.fsdp import FSDPCompression, register_fsdp_compressor

    with pytest.raises(GcbenchError, match=r"initialised torch\.distributed process group"):
        register_fsdp_compressor(nn.Linear(2, 2), "topk")
    with pytest.raises(ParamError, match=r"accum must be torch\.float32 or torch\.float64"):
        FSDPCompression(registry.create("none"), accum=torch.float16)
