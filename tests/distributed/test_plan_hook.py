"""A compression plan in the DDP hook (gcbench.distributed.plan_hook) on 2 gloo processes.

One worker group trains a small model three ways (a two-rule plan, a one-rule plan beside the plain hook, a plan
with a warm-up) and hands back what each rank saw; the tests read it.  Replicas must stay bit-identical, each rule's
bytes must add up to the hook's, and the warm-up must switch at its step.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from gcbench.core.errors import GcbenchError, TrainError
from gcbench.distributed.ddp import register_compressor_hook
from gcbench.distributed.plan_hook import check_hook_plan
from gcbench.plan import PlanError, load_plan
from gcbench.train.workers import WorkerContext, run_group

DEADLINE_S = 180.0
STEPS = 4
TOPK = "topk:density=0.1,error_feedback=true"
SMALL_DENSE = f"""[plan]
name = "small-dense"
[[plan.rule]]
numel_below = 100
compressor = "none"
[[plan.rule]]
default = true
compressor = "{TOPK}"
"""
ONE_RULE = f"""[plan]
name = "one-rule"
[[plan.rule]]
default = true
compressor = "{TOPK}"
"""
WARM = SMALL_DENSE.replace('name = "small-dense"', 'name = "warm"\nwarmup_steps = 2\nwarmup = "bf16"')
MIXED = """[plan]
name = "mixed"
[[plan.rule]]
kind = "norm"
compressor = "none"
[[plan.rule]]
numel_below = 100
compressor = "qsgd"
[[plan.rule]]
default = true
compressor = "powersgd:rank=1"
"""


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.LayerNorm(32), nn.Tanh(), nn.Linear(32, 3))


def _hash(model: nn.Module) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _train(ctx: WorkerContext, compressor: str, **kw: Any) -> dict[str, Any]:
    """STEPS SGD steps on rank-dependent batches through the hook; what this rank saw."""
    model = _model()
    ddp = DDP(model, process_group=ctx.group)
    hook = register_compressor_hook(ddp, compressor, process_group=ctx.group, **kw)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(ctx.rank)
    for _ in range(STEPS):
        x, y = torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    steps = [{"payload_bytes": s.total("payload_bytes"), "collectives": sorted({b.collective for b in s.buckets})}
             for s in hook.stats.steps]
    restored = register_compressor_hook(DDP(_model(), process_group=ctx.group), compressor, process_group=ctx.group, **kw)
    restored.load_state_dict(hook.state_dict())  # a checkpoint's states come back where they were
    held = any(sd["bucket_states"] for sd in hook.state_dict().get("rules", []))  # a plan's states after training
    same = held and _same_states(hook.state_dict(), restored.state_dict())
    return {"hash": _hash(model), "steps": steps, "describe": hook.describe(), "restored": same}


def _same_states(a: Any, b: Any) -> bool:
    """Whether two state dicts hold the same values (tensors compared by their bytes)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_states(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(_same_states(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _all(ctx: WorkerContext, files: dict[str, str]) -> dict[str, Any]:
    torch.set_num_threads(1)
    return {"plan": _train(ctx, f"plan:{files['small']}"), "one_rule": _train(ctx, f"plan:{files['one']}"),
            "plain": _train(ctx, TOPK, granularity="layer"), "warm": _train(ctx, f"plan:{files['warm']}"),
            "mixed": _train(ctx, f"plan:{files['mixed']}")}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("plans")
    files = {}
    for key, text in (("small", SMALL_DENSE), ("one", ONE_RULE), ("warm", WARM), ("mixed", MIXED)):
        (folder / f"{key}.toml").write_text(text, encoding="utf-8")
        files[key] = str(folder / f"{key}.toml")
    return run_group(_all, (files,), 2, timeout_s=DEADLINE_S)


def test_a_plan_trains_with_bit_identical_replicas(ranks: list[dict[str, Any]]) -> None:
    for key in ("plan", "one_rule", "warm", "mixed"):
        assert ranks[0][key]["hash"] == ranks[1][key]["hash"], key
    assert ranks[0]["plan"]["hash"] != ranks[0]["plain"]["hash"]  # the dense rule changed the training


def test_each_tensor_gets_its_rule_and_bytes_are_counted_per_rule(ranks: list[dict[str, Any]]) -> None:
    d = ranks[0]["plan"]["describe"]
    assert d["compressor"] == "plan" and d["plan"]["name"] == "small-dense"
    assert d["assignment"] == {"0.weight": 2, "0.bias": 1, "1.weight": 1, "1.bias": 1, "3.weight": 1, "3.bias": 1}
    rows = d["plan_rules"]
    assert [r["tensors"] for r in rows] == [5, 1] and [r["elements"] for r in rows] == [32 * 3 + 3 + 32 * 3, 384]
    assert [r["protocol"] for r in rows] == ["allreduce", "allgather"]
    per_step = [s["payload_bytes"] for s in ranks[0]["plan"]["steps"]]
    assert sum(r["bytes"] for r in rows) * STEPS == pytest.approx(sum(per_step))  # the rules' bytes are the hook's
    assert all(r["bytes"] > 0 for r in rows)
    assert rows[1]["bytes"] < 384 * 4  # top-k at 10% sends less than its tensor dense
    assert sum(r["bytes_share"] for r in rows) == pytest.approx(1.0)
    assert all(set(s["collectives"]) == {"allreduce", "allgather"} for s in ranks[0]["plan"]["steps"])


def test_a_one_rule_plan_is_the_plain_hook_at_layer_granularity(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        assert r["one_rule"]["hash"] == r["plain"]["hash"]
        assert [s["payload_bytes"] for s in r["one_rule"]["steps"]] == [s["payload_bytes"] for s in r["plain"]["steps"]]


def test_the_warm_up_switches_at_its_step(ranks: list[dict[str, Any]]) -> None:
    steps = ranks[0]["warm"]["steps"]
    assert [s["collectives"] for s in steps[:2]] == [["allreduce"], ["allreduce"]]  # bf16 for every tensor
    assert all("allgather" in s["collectives"] for s in steps[2:])  # then top-k's all-gather for the default rule
    d = ranks[0]["warm"]["describe"]
    assert d["steps"] == {"warmup": 2, "rules": STEPS - 2}
    assert d["warmup_payload_bytes_per_step"] == pytest.approx(sum(s["payload_bytes"] for s in steps[:2]) / 2)
    assert sum(r["bytes"] for r in d["plan_rules"]) * (STEPS - 2) == pytest.approx(sum(s["payload_bytes"] for s in steps[2:]))


def _mismatch(ctx: WorkerContext, files: list[str]) -> dict[str, Any]:
    torch.set_num_threads(1)
    try:
        _train(ctx, f"plan:{files[ctx.rank]}")
    except GcbenchError as exc:
        return {"type": type(exc).__name__, "message": str(exc)}
    return {"type": None, "message": ""}


@pytest.mark.slow  # ~7 s; the agreement check itself is tested by tests/distributed/test_ddp_agreement.py; -m slow
def test_ranks_with_different_plans_all_fail_in_one_line(tmp_path: Path) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(SMALL_DENSE, encoding="utf-8")
    b.write_text(SMALL_DENSE.replace("density=0.1", "density=0.2"), encoding="utf-8")
    try:
        ranks = run_group(_mismatch, ([str(a), str(b)],), 2, timeout_s=DEADLINE_S)
    except TrainError as exc:
        pytest.fail(f"the mismatch was not reported by every rank: {exc}")
    assert [r["type"] for r in ranks] == ["RankMismatchError"] * 2
    msg = ranks[0]["message"]
    assert "\n" not in msg and msg.startswith("ranks disagree on the compression plan: ") and msg == ranks[1]["message"]


def _refused(ctx: WorkerContext, files: list[str]) -> list[str]:
    out = []
    for f in files:
        try:
            _train(ctx, f"plan:{f}")
            out.append("")
        except GcbenchError as exc:
            out.append(str(exc))
    return out


def test_a_plan_the_hook_cannot_run_is_one_line_before_any_exchange(tmp_path: Path) -> None:
    local = tmp_path / "local.toml"
    local.write_text(ONE_RULE.replace("[plan]\n", "[plan]\nlocal_steps = 4\n"), encoding="utf-8")
    nomatch = tmp_path / "nomatch.toml"
    nomatch.write_text(SMALL_DENSE.replace("numel_below = 100", 'kind = "embedding"'), encoding="utf-8")
    with pytest.raises(PlanError, match="gcbench converge"):
        check_hook_plan(load_plan(local))
    [msg_local, msg_none] = run_group(_refused, ([str(local), str(nomatch)],), 1, timeout_s=DEADLINE_S)[0]
    assert "local_steps = 4" in msg_local and "gcbench converge" in msg_local and "\n" not in msg_local
    assert "matches no tensor" in msg_none and "\n" not in msg_none


def test_three_protocols_run_side_by_side_in_one_bucket(ranks: list[dict[str, Any]]) -> None:
    d = ranks[0]["mixed"]["describe"]
    assert [r["protocol"] for r in d["plan_rules"]] == ["allreduce", "allgather", "powersgd"]
    assert [r["tensors"] for r in d["plan_rules"]] == [1, 4, 1]  # the LayerNorm's bias is kind bias, not norm
    assert all(r["bytes"] > 0 for r in d["plan_rules"])


def test_a_plan_hook_state_round_trips_through_its_state_dict(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        assert all(r[key]["restored"] for key in ("plan", "warm", "mixed")), r
