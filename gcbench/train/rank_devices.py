"""Where ``gcbench train``'s ranks compute (``--device``) and which backend their training group uses.

``cpu`` trains over gloo.  ``cuda`` puts rank ``r`` on ``cuda:LOCAL_RANK`` (its rank on its node;
a spawned rank's local rank is its rank) and trains over NCCL; ``cuda:N`` names one GPU, so it
takes one worker on this node.  Before any training every rank says what it resolved to in one
all-gather over the gloo group: a rank without its GPU (NCCL needs one GPU per rank) or ranks on
different kinds of device end the run on every rank with the same line, before any model is built.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from gcbench.core.errors import TrainError


def local_rank(rank: int) -> int:
    """This process's rank on its node: torchrun's ``LOCAL_RANK``, else (spawned workers) its rank."""
    text = os.environ.get("LOCAL_RANK", "").strip()
    return int(text) if text.isdigit() else rank


def rank_device(text: str, local: int) -> tuple[torch.device | None, str | None]:
    """(the device this rank trains on, None) or (None, why it cannot) for ``--device text``; never raises."""
    kind, _, index = text.strip().lower().partition(":")
    if kind == "cpu":
        return torch.device("cpu"), None
    if not torch.cuda.is_available():
        return None, "no CUDA device is available (torch.cuda.is_available() is False)"
    count = torch.cuda.device_count()
    gpu = int(index) if index.isdigit() else local
    if gpu >= count:
        need = f"cuda:{gpu}" if index else f"GPU {gpu} for local rank {local}"
        return None, f"NCCL needs one GPU per rank and this node has {count} ({need} is not there)"
    return torch.device("cuda", gpu), None


def backend_of(device: torch.device) -> str:
    """The training group's backend: NCCL when every rank has a GPU, gloo otherwise."""
    return "nccl" if device.type == "cuda" else "gloo"


def agree_on_devices(text: str, rank: int, world: int, group: Any = None) -> torch.device:
    """This rank's device, once every rank of ``group`` (gloo) resolved ``--device text``; the same line on every rank
    when one cannot (no GPU for it) or the ranks' devices are of different kinds (NCCL on some, gloo on others)."""
    device, problem = rank_device(text, local_rank(rank))
    mine = {"device": str(device) if device is not None else None, "problem": problem}
    every: list[Any] = [None] * world
    dist.all_gather_object(every, mine, group=group)
    bad = [f"rank {r}: {e['problem']}" for r, e in enumerate(every) if e["problem"]]
    if bad:
        raise TrainError(f"--device {text}: " + "; ".join(bad))
    kinds = {torch.device(e["device"]).type for e in every}
    if len(kinds) > 1:
        listed = ", ".join(f"rank {r} {e['device']}" for r, e in enumerate(every))
        raise TrainError(f"mixed devices across ranks ({listed}): every rank must train on a GPU (NCCL) or every rank on "
                         "the CPU (gloo)")
    assert device is not None
    return device


def moved(obj: Any, device: torch.device) -> Any:
    """``obj`` (a tensor, or tuples, lists and dicts of them) on ``device``; the object itself on the CPU."""
    if device.type == "cpu":
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, tuple | list):
        return type(obj)(moved(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: moved(v, device) for k, v in obj.items()}
    return obj


def on_cpu(model: nn.Module) -> nn.Module:
    """``model`` for a task's evaluation, which computes on the CPU: itself there, a CPU copy of a GPU model."""
    first = next(model.parameters(), None)
    if first is None or first.device.type == "cpu":
        return model
    return copy.deepcopy(model).to("cpu")


def check_local_devices(text: str, workers: int) -> None:
    """Before spawning ``workers`` local ranks on ``--device text``: one GPU for each (NCCL), or one line naming why not."""
    kind, _, index = text.strip().lower().partition(":")
    if kind != "cuda":
        return
    if index and workers > 1:
        raise TrainError(f"--device {text} names one GPU and NCCL needs one GPU per rank: {workers} workers need --device cuda "
                         f"(rank r on cuda:r) and {workers} GPUs, or --workers 1")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not index and workers > count:
        raise TrainError(f"--device cuda: NCCL needs one GPU per rank and this machine has {count} for {workers} workers; "
                         f"use --workers {count} or --device cpu" if count else
                         "--device cuda: no CUDA device is available here (torch.cuda.is_available() is False); use --device cpu")
