"""Granularity: what one compressor call sees — one layer, one DDP-style bucket, or the whole model.

Compression ratio, fidelity and speed all depend on it: top-k over a 25 MiB bucket picks different
coordinates than top-k per layer, a scale per bucket quantizes differently from a scale per layer,
and per-call overheads are paid per unit.  So a benchmark states it (docs/suites.md: `granularity`).

* ``layer`` — one unit per gradient tensor, with its own shape (what most papers describe).
* ``bucket`` — flat float32 buckets formed as PyTorch ``DistributedDataParallel`` forms them after its
  first iteration (``Reducer::rebuild_buckets`` over ``compute_bucket_assignment_by_size``): tensors
  are taken in REVERSE layout order (the order backward produces them, last layer first), appended
  to the current bucket, and the bucket is closed as soon as its size reaches the cap — so a bucket
  holds at least ``bucket_mb`` MiB (except the last) and overshoots it by less than its last tensor;
  a tensor is never split, and a tensor larger than the cap gets a bucket of its own (possibly shared
  with the small tensors before it).  Sizes count 4 bytes per element (float32) whatever the stored
  dtype.  DDP's default also caps the FIRST bucket at 1 MiB (``dist._DEFAULT_FIRST_BUCKET_BYTES``) so
  the last layers' gradients start communicating early; pass ``first_bucket_mb=1.0`` to reproduce
  that exactly; by default every bucket uses ``bucket_mb``.  DDP's readiness order can differ from
  strict reverse order for models whose forward reuses modules; the static reverse order is the
  documented approximation.
* ``model`` — one unit: every tensor flattened and concatenated in layout order.

:func:`gather` builds a unit's input tensor from a gradient mapping (reading each member once, so a
lazy trace mapping reads only the unit's tensors) and :func:`scatter` splits a unit's (decompressed)
tensor back into named tensors, exactly: ``scatter(u, gather(u, g))`` is bit-identical to ``g`` for
float32 gradients.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from gcbench.core.errors import ParamError, SourceError, UnknownNameError, did_you_mean
from gcbench.sources.base import TensorSpec

GRANULARITIES = ("layer", "bucket", "model")

#: bytes per element used for bucket sizes (buckets hold float32 gradients)
BUCKET_ELEMENT_BYTES = 4
MIB = 1 << 20


@dataclass(frozen=True)
class Unit:
    """One compression unit: the tensors it covers, their shapes, and its total element count.

    ``kind`` is the granularity that produced it: a ``layer`` unit is its tensor with its own
    shape; ``bucket`` and ``model`` units are flat float32 vectors of ``numel`` elements.
    """

    name: str
    members: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    numel: int
    kind: str = "layer"

    @property
    def nbytes(self) -> int:
        """Size in bytes as float32 (what the bucket cap counts)."""
        return self.numel * BUCKET_ELEMENT_BYTES

    @property
    def flat(self) -> bool:
        """Whether the unit is a flat vector (bucket, model) rather than one shaped tensor."""
        return self.kind != "layer"


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _unit(name: str, specs: list[TensorSpec], kind: str) -> Unit:
    return Unit(name, tuple(s.name for s in specs), tuple(tuple(s.shape) for s in specs), sum(_numel(s.shape) for s in specs), kind)


def bucket_assignment(layout: list[TensorSpec], bucket_mb: float = 25.0, first_bucket_mb: float | None = None) -> list[list[int]]:
    """DDP bucket assignment: layout indices per bucket, buckets in formation (reverse layout) order."""
    for key, v in (("bucket_mb", bucket_mb), ("first_bucket_mb", first_bucket_mb)):
        if v is not None and not (isinstance(v, (int, float)) and v > 0 and v != float("inf")):
            raise ParamError(f"granularity: {key} must be a finite number > 0, got {v!r}")
    cap = int(bucket_mb * MIB)
    limit = int(first_bucket_mb * MIB) if first_bucket_mb is not None else cap
    buckets: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i in range(len(layout) - 1, -1, -1):
        current.append(i)
        size += _numel(layout[i].shape) * BUCKET_ELEMENT_BYTES
        # DDP appends first, then closes the bucket once it reaches the limit (>=): never splits a tensor
        if size >= limit:
            buckets.append(current)
            current, size, limit = [], 0, cap
    if current:
        buckets.append(current)
    return buckets


def make_units(layout: list[TensorSpec], granularity: str, bucket_mb: float = 25.0, *, first_bucket_mb: float | None = None) -> list[Unit]:
    """Split ``layout`` into compression units at ``granularity`` (``layer``, ``bucket`` or ``model``).

    Layer units keep layout order and are named after their tensor; buckets are named
    ``bucket0``, ``bucket1``, … in formation order (bucket0 holds the last layers); the model unit is
    named ``model``.  An empty layout gives no units.
    """
    if granularity not in GRANULARITIES:
        raise UnknownNameError(did_you_mean(str(granularity), GRANULARITIES, "granularity"))
    names = [s.name for s in layout]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise SourceError(f"granularity: tensor name {dup!r} appears twice in the layout")
    if not layout:
        return []
    if granularity == "layer":
        return [_unit(s.name, [s], "layer") for s in layout]
    if granularity == "model":
        return [_unit("model", list(layout), "model")]
    return [_unit(f"bucket{b}", [layout[i] for i in idx], "bucket")
            for b, idx in enumerate(bucket_assignment(layout, bucket_mb, first_bucket_mb))]


def _member(unit: Unit, grads: Mapping[str, torch.Tensor], name: str, shape: tuple[int, ...]) -> torch.Tensor:
    try:
        t = grads[name]
    except KeyError:
        raise SourceError(f"unit {unit.name!r}: gradient {name!r} is missing") from None
    if tuple(t.shape) != shape:
        raise SourceError(f"unit {unit.name!r}: gradient {name!r} has shape {tuple(t.shape)}, expected {shape}")
    return t


def gather(unit: Unit, grads: Mapping[str, torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
    """The tensor one compressor call gets for ``unit``.

    A layer unit returns the gradient tensor itself (same object, shape and dtype; never copied).  A
    bucket or model unit returns one flat float32 vector, the members flattened in unit order; pass a
    float32 ``out`` of ``unit.numel`` elements to fill a reused buffer instead of allocating (a fresh
    100 MB result costs more in page faults than the copy itself).
    """
    if not unit.flat:
        return _member(unit, grads, unit.members[0], unit.shapes[0])
    if out is None:
        parts = [_member(unit, grads, n, s).reshape(-1).to(torch.float32) for n, s in zip(unit.members, unit.shapes, strict=True)]
        return torch.cat(parts) if parts else torch.zeros(0)
    if out.dtype != torch.float32 or out.dim() != 1 or out.numel() != unit.numel:
        raise ParamError(f"gather: out must be a 1-D float32 tensor of {unit.numel} elements, got {out.dtype} {tuple(out.shape)}")
    offset = 0
    for n, s in zip(unit.members, unit.shapes, strict=True):
        k = _numel(s)
        out[offset:offset + k].copy_(_member(unit, grads, n, s).reshape(-1))
        offset += k
    return out


def gather_reference(unit: Unit, grads: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Straightforward gather for tests: flatten-and-concatenate with no buffer reuse."""
    if not unit.flat:
        return grads[unit.members[0]]
    return torch.cat([grads[n].reshape(-1).float() for n in unit.members]) if unit.members else torch.zeros(0)


def scatter(unit: Unit, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """Split a unit's tensor back into ``{tensor name: tensor of its shape}`` in unit order.

    For a flat unit the results are views of ``flat`` (no copy; clone them if ``flat`` is reused).
    For a layer unit ``flat`` may be the shaped tensor or any tensor with the same element count.
    """
    if flat.numel() != unit.numel:
        raise ParamError(f"scatter: unit {unit.name!r} has {unit.numel} elements, got a tensor of {flat.numel()}")
    if not unit.flat:
        return {unit.members[0]: flat.reshape(unit.shapes[0])}
    v = flat.reshape(-1)
    out: dict[str, torch.Tensor] = {}
    offset = 0
    for n, s in zip(unit.members, unit.shapes, strict=True):
        k = _numel(s)
        out[n] = v[offset:offset + k].view(s)
        offset += k
    return out
