"""Where the engine runs (``converge --device``): the model, its batches, the compressors and their states on one device.

On the CPU nothing here moves or wraps anything (every function returns its input as it is), so a
CPU run's numbers are those of an engine without a device option, to the bit.  On a GPU the
model is moved once, each worker's batch is moved before its forward pass, and the compressors
follow their input tensors (the gradients, on the device).  A problem's own evaluation (a
``train`` task's held-out tensors, a model's held-out batches) stays as it is written: during an
evaluation the model's inputs are moved to the device and its outputs back to the CPU, where
the problem's loss and accuracy are computed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


def on_cpu(device: str) -> bool:
    return torch.device(device).type == "cpu"


def moved(obj: Any, device: str) -> Any:
    """``obj`` (a tensor, or tuples, lists and dicts of them) on ``device``; anything else as it is."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple | list):
        return type(obj)(moved(o, device) for o in obj)
    if isinstance(obj, dict):
        for k in list(obj):  # in place: a model output (transformers' ModelOutput) keeps its type
            obj[k] = moved(obj[k], device)
        return obj
    return obj


def rng_devices(device: str) -> list[int]:
    """The CUDA devices whose random state a seed's run forks (none on the CPU)."""
    d = torch.device(device)
    if d.type != "cuda":
        return []
    return [d.index if d.index is not None else torch.cuda.current_device()]


@contextlib.contextmanager
def evaluating_on(model: nn.Module, device: str) -> Iterator[None]:
    """While it lasts, ``model`` takes CPU inputs and gives CPU outputs though it lives on ``device`` (nothing on the CPU)."""
    if on_cpu(device):
        yield
        return

    def inputs(_m: nn.Module, args: Any, kwargs: Any) -> Any:
        return moved(args, device), moved(kwargs, device)

    def outputs(_m: nn.Module, _args: Any, out: Any) -> Any:
        return moved(out, "cpu")

    hooks = [model.register_forward_pre_hook(inputs, with_kwargs=True), model.register_forward_hook(outputs)]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()
