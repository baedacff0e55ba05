"""The DDP communication hook (gcbench.distributed.ddp) on a real 2-process gloo group.

One worker group runs every scenario (process start-up dominates on a 2-core machine); each test
then checks one scenario's measurements against an independent recomputation.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from gcbench.compressors import registry
from gcbench.core.compressor import State
from gcbench.distributed.ddp import compressor_hook, register_compressor_hook
from gcbench.distributed.hook_state import unit_seed
from gcbench.distributed.hook_stats import HookStats
from gcbench.train.workers import WorkerContext, run_group

WORLD = 2


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)


def _spy(captured: list[dict[str, Any]]):
    """A hook that records each bucket's input and the gcbench hook's output, then passes it on."""

    def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        inp = bucket.buffer().detach().clone()
        names = tuple(state.param_names[id(p)] for p in bucket.parameters())
        base = bucket.buffer().data_ptr()
        where = {n: ((g.data_ptr() - base) // g.element_size(), g.numel()) for n, g in zip(names, bucket.gradients(), strict=True)}
        fut = compressor_hook(state, bucket)
        captured.append({"index": bucket.index(), "names": names, "where": where, "input": inp, "output": fut.wait().clone()})
        return fut

    hook.__annotations__ = {"state": object, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
    return hook


def _train(ddp: nn.Module, rank: int, steps: int, lr: float = 0.1) -> None:
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    for t in range(steps):
        x, y = _batch(rank, t)
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()


def _learn_teacher(ddp: nn.Module, student: nn.Module, teacher: nn.Module, rank: int, steps: int) -> tuple[float, float]:
    """Train ``student`` (inside ``ddp``) on ``teacher``'s labels of random inputs; its held-out loss (first, last)."""
    opt = torch.optim.SGD(ddp.parameters(), lr=0.2, momentum=0.9)
    gen = torch.Generator().manual_seed(rank)
    x_eval = torch.randn(256, 12, generator=torch.Generator().manual_seed(99))
    y_eval = teacher(x_eval).argmax(1)
    with torch.no_grad():
        first = float(nn.functional.cross_entropy(student(x_eval), y_eval))
    for _ in range(steps):
        x = torch.randn(32, 12, generator=gen)
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), teacher(x).argmax(1).detach()).backward()
        opt.step()
    with torch.no_grad():
        last = float(nn.functional.cross_entropy(student(x_eval), y_eval))
    return first, last


def _gather(ctx: WorkerContext, t: torch.Tensor) -> list[torch.Tensor]:
    out = [torch.empty_like(t) for _ in range(ctx.world_size)]
    dist.all_gather(out, t.contiguous(), group=ctx.group)
    return out


def _scenario_none(ctx: WorkerContext) -> dict[str, Any]:
    """`none` through the hook vs DDP's own all-reduce, same model, data and optimizer."""
    plain, hooked = _mlp(), _mlp()
    d1 = DDP(plain, process_group=ctx.group)
    d2 = DDP(hooked, process_group=ctx.group)
    state = register_compressor_hook(d2, "none", process_group=ctx.group)
    _train(d1, ctx.rank, 4)
    _train(d2, ctx.rank, 4)
    diff = max(float((a - b).detach().abs().max()) for a, b in zip(plain.parameters(), hooked.parameters(), strict=True))
    numel = sum(p.numel() for p in hooked.parameters())
    expected = registry.create("none").compress(torch.zeros(numel), registry.create("none").init_state()).nbytes
    return {"maxdiff": diff, "payload_bytes": [s.total("payload_bytes") for s in state.stats.steps], "expected_bytes": expected,
            "steps": len(state.stats.steps)}


def _scenario_qsgd(ctx: WorkerContext) -> dict[str, Any]:
    """Variable-size payloads over several buckets: bytes and the average, recomputed independently."""
    model = _mlp(1)
    ddp = DDP(model, process_group=ctx.group, bucket_cap_mb_list=[0.0005, 0.0005])  # ~500-byte caps: several buckets
    comp = registry.create("qsgd", encoding="elias", s=4, bucket=64)
    stats = HookStats()
    from gcbench.distributed.hook_state import HookState

    state = HookState(comp, process_group=ctx.group, seed=7, stats=stats)
    state.name_parameters(model)
    captured: list[dict[str, Any]] = []
    ddp.register_comm_hook(state, _spy(captured))
    _train(ddp, ctx.rank, 3)
    # mirror states: fresh when a bucket index gets other parameters (DDP's rebuild), as documented
    mirror: dict[int, tuple[tuple[str, ...], list[Any]]] = {}
    bad_avg, bad_bytes, checked = [], [], 0
    per_step = [b for s in stats.steps for b in s.buckets]
    assert len(per_step) == len(captured)
    for rec, bs in zip(captured, per_step, strict=True):
        idx = rec["index"]
        if idx not in mirror or mirror[idx][0] != rec["names"]:
            mirror[idx] = (rec["names"], [comp.init_state(unit_seed(7, r, idx, 0)) for r in range(ctx.world_size)])
        inputs = _gather(ctx, rec["input"])
        payloads = [comp.compress(x, st) for x, st in zip(inputs, mirror[idx][1], strict=True)]
        mean = sum(comp.decompress(p) for p in payloads) / ctx.world_size
        if not torch.equal(mean, rec["output"]):
            bad_avg.append(idx)
        sizes = [len(p.to_bytes()) for p in payloads]
        if bs.payload_bytes != sizes[ctx.rank] or bs.sent_bytes != 8 + max(sizes) or bs.decoded_payloads != ctx.world_size:
            bad_bytes.append((idx, bs.payload_bytes, sizes, bs.sent_bytes))
        checked += 1
    return {"bad_avg": bad_avg, "bad_bytes": bad_bytes, "checked": checked, "buckets": [len(s.buckets) for s in stats.steps],
            "steps": len(stats.steps), "sizes_vary": len({b.payload_bytes for b in per_step}) > 1}


def _scenario_topk_ef(ctx: WorkerContext) -> dict[str, Any]:
    """Top-k + error feedback: Σ sent + residual = Σ gradients (per worker), and training converges."""
    model = _mlp(2)
    ddp = DDP(model, process_group=ctx.group)
    comp = registry.create("topk", density=0.1, error_feedback=True)
    from gcbench.distributed.hook_state import HookState

    state = HookState(comp, process_group=ctx.group, seed=3)
    state.name_parameters(model)
    captured: list[dict[str, Any]] = []
    ddp.register_comm_hook(state, _spy(captured))
    steps = 6
    _train(ddp, ctx.rank, steps)
    # per parameter over every step, across DDP's bucket rebuild after step 0 (the residual follows its parameters into
    # the new layout: a reset there would leave step 0's unsent mass out of the identity)
    def per_name(key: str) -> dict[str, torch.Tensor]:
        sums: dict[str, torch.Tensor] = {}
        for r in captured:
            for n, (off, k) in r["where"].items():
                sums[n] = sums.get(n, 0) + r[key][off:off + k]
        return sums

    g_sum, out_sum = per_name("input"), per_name("output")
    residual = {}
    for b, units in state.bucket_parts.items():
        res = state.bucket_states[b][0].tensors["residual"].reshape(-1)
        residual.update({p.name: res[p.offset:p.offset + p.numel] for p in units[0]})
    names = sorted(g_sum)
    flat = lambda d: torch.cat([d[n] for n in names])  # noqa: E731
    lhs = sum(_gather(ctx, flat(g_sum) - flat(residual))) / ctx.world_size
    err = float((lhs - flat(out_sum)).abs().max() / flat(out_sum).abs().max())
    layouts = len({tuple(sorted(r["where"].items())) for r in captured})
    # a checkpoint keeps where each parameter's state is: a restored hook can carry the residuals through a later rebuild
    restored = HookState(comp, process_group=ctx.group, seed=3)
    restored.load_state_dict(state.state_dict())
    carried_ok = all(
        torch.equal(restored.places.carry(units[0], restored.bucket_numels[b][0], State(0)).tensors["residual"].reshape(-1),
                    state.bucket_states[b][0].tensors["residual"].reshape(-1))
        for b, units in restored.bucket_parts.items()) and bool(restored.bucket_parts)

    # the same hook on a learnable problem: a teacher MLP's labels, loss must drop well below its start
    student = _mlp(4)
    teacher = _mlp(5)
    ddp2 = DDP(student, process_group=ctx.group)
    register_compressor_hook(ddp2, "topk:density=0.1,error_feedback=true", seed=3, process_group=ctx.group)
    first, last = _learn_teacher(ddp2, student, teacher, ctx.rank, 150)
    return {"ef_rel_err": err, "residual_norm": float(flat(residual).norm()), "resets": state.state_resets,
            "layouts": layouts, "checkpoint_carries": carried_ok, "loss_first": first, "loss_last": last}


def _scenario_protocols(ctx: WorkerContext) -> dict[str, Any]:
    """TernGrad (shared scaler) and PowerSGD through the hook vs their single-process exchange()."""
    out: dict[str, Any] = {}
    for name in ("terngrad", "powersgd"):
        model = _mlp(6)
        ddp = DDP(model, process_group=ctx.group)
        comp = registry.create(name)
        from gcbench.distributed.hook_state import HookState

        state = HookState(comp, process_group=ctx.group, seed=11)
        state.name_parameters(model)
        captured: list[dict[str, Any]] = []
        ddp.register_comm_hook(state, _spy(captured))
        _train(ddp, ctx.rank, 1)
        rec = captured[0]
        inputs = _gather(ctx, rec["input"])
        if name == "terngrad":
            states = [comp.init_state(unit_seed(11, r, rec["index"], 0)) for r in range(ctx.world_size)]
            agg = comp.exchange(inputs, states).aggregate
            scalers = [float(p.data[-4:].clone().view(torch.float32)) for p in comp.exchange(inputs, [s.clone() for s in states]).payloads]
            b0 = state.stats.steps[0].buckets[0]
            out[name] = {"err": float((agg - rec["output"]).abs().max()), "protocol": state.protocol,
                         "bytes": b0.sent_bytes, "payload": b0.payload_bytes, "collective": b0.collective,
                         "shared": len(set(scalers)) == 1}
        else:
            by_name = dict(model.named_parameters())
            errs = []
            pos = 0
            # the bucket layout follows bucket.parameters() order
            for u, n in enumerate(rec["names"]):
                shape = by_name[n].shape
                k = by_name[n].numel()
                xs = [x[pos : pos + k].reshape(shape) for x in inputs]
                states = [comp.init_state(unit_seed(11, None, rec["index"], u)) for _ in range(ctx.world_size)]
                agg = comp.exchange(xs, states).aggregate.reshape(-1)
                errs.append(float((agg - rec["output"][pos : pos + k]).abs().max() / (agg.abs().max() + 1e-30)))
                pos += k
            out[name] = {"err": max(errs), "protocol": state.protocol, "collective": state.stats.steps[0].buckets[0].collective}
    return out


def _scenario_onebit(ctx: WorkerContext) -> dict[str, Any]:
    """1-bit SGD's two legs through the hook vs OneBitSGD.exchange on the same tensors and mirrored states."""
    from gcbench.distributed.hook_state import HookState

    model = _mlp(7)
    ddp = DDP(model, process_group=ctx.group)
    comp = registry.create("onebit")
    state = HookState(comp, process_group=ctx.group, seed=13)  # granularity "bucket" is overridden: per tensor
    state.name_parameters(model)
    captured: list[dict[str, Any]] = []
    ddp.register_comm_hook(state, _spy(captured))
    _train(ddp, ctx.rank, 3)
    by_name = dict(model.named_parameters())
    per_step = [b for s in state.stats.steps for b in s.buckets]
    # parameter -> every worker's state: per-tensor units keep their states across DDP's bucket rebuild
    mirror: dict[str, list[Any]] = {}
    errs, bad_bytes = [], []
    for rec, bs in zip(captured, per_step, strict=True):
        idx = rec["index"]
        inputs = _gather(ctx, rec["input"])
        pos, sent = 0, 0
        for name in rec["names"]:
            shape, k = by_name[name].shape, by_name[name].numel()
            states = mirror.setdefault(name, [comp.init_state(0) for _ in range(ctx.world_size)])
            res = comp.exchange([x[pos : pos + k].reshape(shape) for x in inputs], states)
            errs.append(float((res.aggregate.reshape(-1) - rec["output"][pos : pos + k]).abs().max()))
            # leg 1 to the other owners, plus this owner's leg-2 stripe handed once to the all-gather
            sent += res.traffic.sent(ctx.rank, "reduce-scatter") + res.traffic.sent(ctx.rank, "allgather") // (ctx.world_size - 1)
            pos += k
        if bs.payload_bytes != sent or bs.units != len(rec["names"]):
            bad_bytes.append((idx, bs.payload_bytes, sent))
    residual = state.bucket_states[captured[-1]["index"]][0].tensors.get("residual")
    return {"err": max(errs), "protocol": state.protocol, "collective": per_step[0].collective, "bad_bytes": bad_bytes,
            "checked": len(captured), "granularity": state.describe()["granularity"],
            "residual": None if residual is None else float(residual.norm())}


#: compressors of every protocol shape: all-reduce of bodies, scaler + all-gather, P/Q all-reduces, all-to-all + all-gather, all-gather
ASYNC_TRAINING = ("fp16", "terngrad", "powersgd", "onebit", "qsgd")
#: LGC's parameter server (hosted by rank 0) and ring protocols, shortened so 60 steps reach its compressed phase;
#: the buckets are small, so min_k lets them use the autoencoder.  The reference preset's protocols span the whole
#: model: its first and last tensors dense, the two middle ones (K = 8 + 24 values) through its autoencoder
LGC_SHORT = {"density": 0.5, "dense_steps": 5, "train_steps": 10, "ae_iters": 1, "min_k": 8, "window": 64}
ASYNC_LGC = {f"lgc:{mode}": {**LGC_SHORT, "mode": mode} for mode in ("ps", "ring")}
ASYNC_LGC |= {f"lgc:reference-{mode}": {"preset": "reference", "density": 0.5, "dense_steps": 5, "train_steps": 10, "mode": mode,
                                        "dense_first": 1, "dense_last": 1} for mode in ("ps", "ring")}


def _scenario_async_training(ctx: WorkerContext) -> dict[str, Any]:
    """Train a student MLP on a teacher's labels through the asynchronous hook, several buckets per step."""
    out: dict[str, Any] = {}
    teacher = _mlp(5)
    for name, params in [(n, {}) for n in ASYNC_TRAINING] + list(ASYNC_LGC.items()):
        student = _mlp(8)
        ddp = DDP(student, process_group=ctx.group, bucket_cap_mb_list=[0.0005, 0.0005])  # ~500-byte caps: several buckets
        from gcbench.distributed.hook_state import HookState

        state = HookState(registry.create(name.split(":")[0], **params), process_group=ctx.group, seed=5)
        state.name_parameters(student)
        pending: list[bool] = []

        def hook(st: Any, bucket: dist.GradBucket, pending: list[bool] = pending) -> torch.futures.Future[torch.Tensor]:
            fut = compressor_hook(st, bucket)
            pending.append(not fut.done())  # the hook returned before its exchange completed
            return fut

        hook.__annotations__ = {"st": object, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
        ddp.register_comm_hook(state, hook)
        first, last = _learn_teacher(ddp, student, teacher, ctx.rank, 60)
        flat = torch.cat([p.detach().reshape(-1) for p in student.parameters()])
        replicas = _gather(ctx, flat)
        out[name] = {"first": first, "last": last, "identical": all(torch.equal(r, replicas[0]) for r in replicas),
                     "pending": sum(pending), "hooks": len(pending), "steps": len(state.stats.steps),
                     "buckets": max(len(s.buckets) for s in state.stats.steps),
                     "protocol": state.protocol, "collectives": state.stats.summary()["collectives"]}
    return out


#: LGC's reference preset through its phases: dense (1 step), top-k while the autoencoder trains (2), compressed (2);
#: on _six_tensors its first and last tensors are dense, the middle four (K = 4 + 103 + 4 + 10) go through the autoencoder
LGC_REFERENCE = {"preset": "reference", "density": 0.1, "innovation_density": 0.02, "dense_steps": 1, "train_steps": 2,
                 "dense_first": 1, "dense_last": 1}
LGC_REFERENCE_STEPS = 5


def _six_tensors(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 3))


def _scenario_lgc_reference(ctx: WorkerContext) -> dict[str, Any]:
    """LGC's whole-model protocol through the hook, several buckets per step, vs the simulated ``exchange_group``.

    The hook's gradients (what DDP wrote into ``.grad``) must be the simulated aggregate of every
    worker's local gradients, unit by unit in model order, with states mirrored from the hook's seeds.
    """
    from gcbench.distributed.hook_state import WHOLE_MODEL, HookState

    out: dict[str, Any] = {}
    for mode in ("ps", "ring"):
        model = _six_tensors(9)
        # ~1 kB buckets, in the first step too (the list; DDP's own first bucket would hold 1 MiB): several per step
        ddp = DDP(model, process_group=ctx.group, bucket_cap_mb=0.001, bucket_cap_mb_list=[0.001] * 6)
        comp = registry.create("lgc", mode=mode, **LGC_REFERENCE)
        state = HookState(comp, process_group=ctx.group, seed=5)
        state.name_parameters(model)
        calls: list[tuple[int, dict[str, torch.Tensor], bool]] = []

        def hook(st: Any, bucket: dist.GradBucket, calls: list[Any] = calls) -> torch.futures.Future[torch.Tensor]:
            local = {st.param_names[id(p)]: g.detach().clone() for p, g in zip(bucket.parameters(), bucket.gradients(), strict=True)}
            fut = compressor_hook(st, bucket)
            calls.append((bucket.index(), local, not fut.done()))
            return fut

        hook.__annotations__ = {"st": object, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
        ddp.register_comm_hook(state, hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        names = [n for n, _ in model.named_parameters()]
        steps: list[tuple[list[tuple[int, dict[str, torch.Tensor], bool]], dict[str, torch.Tensor]]] = []
        for t in range(LGC_REFERENCE_STEPS):
            x, y = _batch(ctx.rank, t)
            opt.zero_grad()
            before = len(calls)
            nn.functional.cross_entropy(ddp(x), y).backward()
            steps.append((calls[before:], {n: p.grad.detach().clone() for n, p in model.named_parameters()}))
            opt.step()
        mirror = [[comp.init_state(unit_seed(5, None, WHOLE_MODEL, u)) for u in range(len(names))] for _ in range(ctx.world_size)]
        diffs, phases, sent_ok = [], [], True
        for (step_calls, hooked), stats in zip(steps, state.stats.steps, strict=True):
            local = {n: g for _, grads, _ in step_calls for n, g in grads.items()}
            grads = [[_gather(ctx, local[n])[w] for n in names] for w in range(ctx.world_size)]
            res = comp.exchange_group(grads, mirror)
            phases.append(res[0].phase)
            diffs.append(max(float((r.aggregate - hooked[n]).abs().max()) for r, n in zip(res, names, strict=True)))
            # the hook's bytes by the protocol's rules: every message this worker sent, over all units
            sent_ok &= stats.total("payload_bytes") == sum(r.traffic.sent(ctx.rank) for r in res)
        rec = state.bucket_states[WHOLE_MODEL][0].values.get("lgc")
        out[mode] = {"diffs": diffs, "phases": phases, "sent_ok": sent_ok, "resets": state.state_resets,
                     "buckets": [len({b for b, _, _ in c}) for c, _ in steps], "held": [sum(h for _, _, h in c) for c, _ in steps],
                     "records": [[b.bucket for b in s.buckets] for s in state.stats.steps],
                     "units": state.stats.steps[-1].buckets[0].units, "granularity": state.describe()["granularity"],
                     "trained": None if rec is None else rec["train_updates"]}
    return out


def _scenario_simulation_only(ctx: WorkerContext) -> dict[str, Any]:
    """A (plugin) compressor that overrides ``exchange`` but writes no ``worker_protocol``: refused, unless gather is asked for."""
    from gcbench.core.errors import ParamError
    from gcbench.distributed.hook_state import HookState

    class SimulationOnly(type(registry.create("topk"))):  # type: ignore[misc]
        def exchange(self, grads: Any, states: Any) -> Any:
            return super().exchange(grads, states)

    try:
        HookState(SimulationOnly(), process_group=ctx.group)
        refused = ""
    except ParamError as exc:
        refused = str(exc)
    return {"refused": refused, "forced": HookState(SimulationOnly(), process_group=ctx.group, protocol="gather").protocol}


def _all_scenarios(ctx: WorkerContext) -> dict[str, Any]:
    torch.set_num_threads(1)
    return {"none": _scenario_none(ctx), "qsgd": _scenario_qsgd(ctx), "topk_ef": _scenario_topk_ef(ctx),
            "protocols": _scenario_protocols(ctx), "onebit": _scenario_onebit(ctx), "async": _scenario_async_training(ctx),
            "lgc_reference": _scenario_lgc_reference(ctx), "simulation_only": _scenario_simulation_only(ctx)}


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return run_group(_all_scenarios, (), WORLD, timeout_s=300)


def test_none_hook_equals_plain_ddp(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        res = r["none"]
        assert res["steps"] == 4
        assert res["maxdiff"] < 1e-6  # the same mean, summed in another order
        # the bytes of the dense fp32 payload: 4 per element plus the header, every step
        assert res["payload_bytes"] == [res["expected_bytes"]] * 4


def test_bytes_and_average_match_independent_recomputation(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        res = r["qsgd"]
        # DDP's first step uses the per-bucket caps (two buckets), its rebuild merges them into one
        assert res["steps"] == 3 and max(res["buckets"]) >= 2
        assert res["checked"] == sum(res["buckets"])
        assert res["sizes_vary"]  # elias-coded QSGD: data-dependent sizes, so padding matters
        assert res["bad_bytes"] == []
        assert res["bad_avg"] == []


def test_topk_error_feedback_residual_persists_and_training_converges(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        res = r["topk_ef"]
        assert res["layouts"] >= 2  # DDP rebuilt the bucket after the first step (the parameters moved)
        assert res["resets"] == 0  # ... and the residual followed them
        assert res["checkpoint_carries"]  # state_dict / load_state_dict keep where each parameter's residual is
        assert res["residual_norm"] > 0
        assert res["ef_rel_err"] < 1e-5  # Σ_t C_t + e_T = Σ_t g_t over every step, averaged over the workers
        assert res["loss_last"] < 0.5 * res["loss_first"]


def test_terngrad_and_powersgd_use_their_protocols(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        tg = r["protocols"]["terngrad"]
        assert tg["protocol"] == "terngrad" and tg["shared"]
        assert tg["err"] < 1e-7
        # the payload bytes count the shared scaler's 4 bytes (as the simulation does); handed to collectives: + the size exchange
        assert tg["bytes"] == tg["payload"] + 8 and tg["collective"] == "allreduce+allgather"
        ps = r["protocols"]["powersgd"]
        assert ps["protocol"] == "powersgd" and ps["collective"] == "allreduce"
        assert ps["err"] < 1e-4


def test_onebit_runs_its_two_leg_protocol(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        ob = r["onebit"]
        assert ob["protocol"] == "onebit" and ob["collective"] == "alltoall+allgather"
        assert ob["granularity"] == "layer"  # the column view needs each tensor's shape
        assert ob["checked"] >= 3
        assert ob["err"] == 0.0  # the same quantizations, in the same order, as the single-process exchange
        assert ob["bad_bytes"] == []
        assert ob["residual"] is not None and ob["residual"] > 0  # the worker residual persists in the hook's state


def test_asynchronous_hook_trains_with_identical_replicas_for_every_protocol_shape(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        for name in ASYNC_TRAINING:
            res = r["async"][name]
            assert res["identical"], name  # every worker decoded the same bytes in the same order
            assert res["last"] < 0.7 * res["first"], (name, res)
            assert res["steps"] == 60 and res["buckets"] >= 2
            assert res["pending"] > 0, name  # futures returned before their collectives completed: the exchange overlaps the backward


def test_lgc_runs_its_own_protocols_in_the_hook(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        for name in ASYNC_LGC:
            res = r["async"][name]
            assert res["protocol"] == "lgc", name  # its own protocol, no all-gather fallback
            # the parameter server's rounds / the ring's addressed messages (ring all-reduces, index broadcast)
            assert res["collectives"] == (["server"] if name.endswith("ps") else ["send"]), name
            # every worker ends each step with the same aggregate: in ring mode each trains its own replica of the autoencoder
            assert res["identical"], name
            assert res["steps"] == 60 and res["pending"] > 0, name
            assert res["last"] < res["first"], (name, res)


def test_lgc_reference_runs_its_whole_model_protocol_in_the_hook(ranks: list[dict[str, Any]]) -> None:
    from gcbench.distributed.hook_state import WHOLE_MODEL

    for rank, r in enumerate(ranks):
        for mode, res in r["lgc_reference"].items():
            assert res["phases"] == ["dense", "topk", "topk", "compressed", "compressed"], mode
            assert min(res["buckets"]) >= 2, mode  # DDP handed the hook several buckets every step
            # every bucket's future but the last was held until the last bucket arrived (the last one's exchange may have
            # completed by the time the hook returned); one exchange of the six tensors per step
            assert all(h >= b - 1 for h, b in zip(res["held"], res["buckets"], strict=True)), mode
            assert res["records"] == [[WHOLE_MODEL]] * LGC_REFERENCE_STEPS and res["units"] == 6, mode
            assert res["granularity"] == "layer" and res["resets"] == 0, mode  # DDP's bucket rebuild leaves the model's states alone
            # the hook's gradients are the simulated exchange's aggregates, to the bit (the same bytes decoded in the same order)
            assert res["diffs"] == [0.0] * LGC_REFERENCE_STEPS, (mode, res["diffs"])
            assert res["sent_ok"], mode
            # the autoencoder trained twice: at the server (rank 0) in ps mode, in every worker's replica in ring mode
            assert res["trained"] == (2 if mode == "ring" or rank == 0 else None), mode


def test_an_exchange_that_is_a_simulation_only_is_refused_not_replaced(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        res = r["simulation_only"]
        assert "simulation only" in res["refused"] and "protocol='gather'" in res["refused"]
        assert res["forced"] == "gather"


def test_register_rejects_bad_settings_without_a_group() -> None:
    from gcbench.core.errors import GcbenchError, UnknownNameError

    model = DDP.__new__(DDP)  # never used: the state check fails first
    with pytest.raises(GcbenchError, match="process group"):
        register_compressor_hook(model, "topk")
    with pytest.raises(UnknownNameError, match="did you mean"):
        register_compressor_hook(model, "topkk")


def _bucket(compress_s: float) -> Any:
    from gcbench.distributed.hook_stats import BucketStats

    return BucketStats(bucket=0, numel=100, units=1, protocol="allgather", collective="allgather", payload_bytes=40,
                       sent_bytes=40, dense_bytes=400, decoded_payloads=2, compress_s=compress_s, communicate_s=0.002,
                       decompress_s=0.001)


def test_hook_summary_gives_each_time_its_spread_and_flags() -> None:
    from gcbench.measure.timing import TimingPolicy

    calm = TimingPolicy(load_per_core=1e9)  # judge the spread alone, whatever this machine's load
    stats = HookStats()
    for c in (0.010, 0.011, 0.010, 0.012, 0.010, 0.011):
        stats.add(_bucket(c), last=True)
    s = stats.summary(skip=0, policy=calm)
    assert s["ratio"] == 10.0  # 400 dense bytes / 40 payload bytes
    comp = s["timing"]["compress"]
    assert comp["median_s"] == pytest.approx(0.0105) and comp["n"] == 6
    assert comp["iqr_s"] == pytest.approx(0.001)  # sorted: .010 .010 .010 .011 .011 .012 → q1 .010, q3 .011
    assert comp["flags"] == []
    noisy = HookStats()
    for c in (0.010, 0.030, 0.010, 0.050, 0.020, 0.010):
        noisy.add(_bucket(c), last=True)
    assert "unstable" in noisy.summary(policy=calm)["timing"]["compress"]["flags"]
    short = HookStats()
    for c in (0.010, 0.010):
        short.add(_bucket(c), last=True)
    assert "too few steps" in short.summary(policy=calm)["timing"]["compress"]["flags"]
    loaded = stats.summary(policy=TimingPolicy(load_per_core=-1.0))  # any load is over this threshold
    assert loaded["load_per_core"] is None or "unstable" in loaded["timing"]["compress"]["flags"]


def test_hook_summary_prints_as_readable_lines_and_stays_a_dict_for_scripts() -> None:
    """print(hook.stats.summary()) was one nested dict of about 1,000 characters; now a few short lines, while
    summary()["wire"] and as_dict() give the numbers (JSON-ready)."""
    import json

    from gcbench.measure.timing import TimingPolicy

    stats = HookStats()
    for c in (0.010, 0.011, 0.010, 0.012, 0.010, 0.011):
        stats.add(_bucket(c), last=True)
    s = stats.summary(policy=TimingPolicy(load_per_core=1e9))
    text = str(s)
    lines = text.splitlines()
    assert len(lines) >= 6 and max(len(line) for line in lines) <= 140, text
    assert lines[0].startswith("hook summary: 6 steps") and "allgather" in lines[0]
    assert any(line.strip().startswith("compress:") and "10.5 ms" in line for line in lines), text
    assert any("dense/payload 10x" in line for line in lines), text  # 400 dense bytes / 40 payload bytes
    assert repr(s) == text and "{" not in text
    assert s["ratio"] == 10.0 and s["timing"]["compress"]["n"] == 6  # still indexed like the dict it was
    plain = s.as_dict()
    again = stats.as_dict(policy=TimingPolicy(load_per_core=1e9))
    assert type(plain) is dict and plain == again | {"load_per_core": plain["load_per_core"]}  # the load is read at each call
    json.dumps(plain)
    assert str(HookStats().summary()) == "hook summary: no step recorded"
