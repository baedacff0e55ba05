"""Ranks that disagree on the compressor (a stale config on one machine) fail at once, on every rank, with one line.

Without the check a mismatch surfaced as a peer's decode error dressed as ``Unable to cast``, as
gloo aborting the process (``none`` all-reduces float32, ``fp16`` float16) or as a hang until the
collective timeout (PowerSGD's all-reduce meets TopK's all-gather).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from gcbench.core.errors import GcbenchError, TrainError
from gcbench.distributed.ddp import compressor_hook, register_compressor_hook
from gcbench.distributed.hook_state import HookState
from gcbench.train.workers import WorkerContext, run_group

# generous for a loaded 2-core machine, far below the collective timeout a hang would run into
DEADLINE_S = 90.0
COLLECTIVE_TIMEOUT_S = 240.0


def _step(ddp: nn.Module, rank: int) -> None:
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)
    nn.functional.cross_entropy(ddp(x), y).backward()


def _mismatched(ctx: WorkerContext, specs: list[str], via_state: bool) -> dict[str, Any]:
    """Rank r registers ``specs[r]`` and trains a step; the error each rank raised (or none)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 3))
    ddp = DDP(model, process_group=ctx.group)
    try:
        if via_state:  # a hand-built state registered directly: the check runs at the first bucket
            from gcbench.distributed.hook_state import make_compressor

            state = HookState(make_compressor(specs[ctx.rank]), process_group=ctx.group)
            state.name_parameters(model)
            ddp.register_comm_hook(state, compressor_hook)
        else:
            register_compressor_hook(ddp, specs[ctx.rank], process_group=ctx.group)
        for _ in range(2):
            _step(ddp, ctx.rank)
    except Exception as exc:
        return {"type": type(exc).__name__, "gcbench": isinstance(exc, GcbenchError), "message": str(exc)}
    return {"type": None, "message": ""}


@pytest.mark.parametrize(("specs", "via_state"), [
    (["none", "fp16"], False),
    (["powersgd", "topk"], False),
    (["topk:density=0.01", "topk:density=0.1"], False),
    (["qsgd", "qsgd:s=4"], True),
])
def test_ranks_with_different_compressors_all_fail_with_one_line_naming_both(specs: list[str], via_state: bool) -> None:
    try:
        ranks = run_group(_mismatched, (specs, via_state), 2, timeout_s=DEADLINE_S, collective_timeout_s=COLLECTIVE_TIMEOUT_S)
    except TrainError as exc:  # a crashed (SIGABRT) or hung rank: the symptom this test guards against
        pytest.fail(f"the mismatch was not reported by every rank: {exc}")
    messages = [r["message"] for r in ranks]
    for r in ranks:  # every rank, not only the one that noticed, and as the user-error type the CLI prints in one line
        assert r["type"] == "RankMismatchError" and r["gcbench"], r
    first = messages[0]
    assert "\n" not in first and first.startswith("ranks disagree on the gradient compressor: ")
    assert messages == [first] * len(messages)
    name0, name1 = (s.split(":")[0] for s in specs)
    assert f"rank 0: {name0}" in first and f"rank 1: {name1}" in first
    if name0 == name1:  # the differing parameter is named with its values
        assert first.count(name0) >= 2


def test_ranks_that_agree_train_as_before() -> None:
    ranks = run_group(_mismatched, (["topk:density=0.1", "topk:density=0.1"], False), 2, timeout_s=DEADLINE_S)
    assert [r["type"] for r in ranks] == [None, None]
