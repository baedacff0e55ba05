"""AdaComp's torch path on the input's device: the scale summed in NumPy's order, the bit stream packed and read
with :mod:`gcbench.core.codec_torch`, no host copy (used by :mod:`gcbench.compressors.adacomp`).

* :func:`pairwise_sum` — ``np.sum`` of a float64 vector, bit for bit, with torch operations: NumPy's pairwise
  summation (blocks of at most 128 summed with 8 accumulators, halves split at a multiple of 8) planned on the
  host from the length alone and run level by level on the device.  The scale's last float64 bit then equals the
  CPU path's, so its float32 rounding, and the body, are the same.
* :func:`pack_fields` / :func:`read_fields` — fixed-width fields of several widths in one LSB-first bit stream
  that need not start or end on a byte (AdaComp's per-bin counts, then its per-element fields).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from gcbench.core import codec_torch
from gcbench.core.errors import PayloadError

_BLOCK = 128  # NumPy's PW_BLOCKSIZE
_UNROLL = 8


@dataclass(frozen=True)
class _Plan:
    """NumPy's summation tree for one length: the leaves (start, length) in tree order, and per level from the deepest
    the (node, left, right) triples that add two finished nodes."""

    leaves: tuple[tuple[int, int, int], ...]  # (node id, start, length)
    levels: tuple[tuple[tuple[int, int, int], ...], ...]
    nodes: int


@lru_cache(maxsize=64)
def _plan(n: int) -> _Plan:
    leaves: list[tuple[int, int, int]] = []
    joins: dict[int, list[tuple[int, int, int]]] = {}
    count = 0

    def build(start: int, length: int, depth: int) -> int:
        nonlocal count
        node = count
        count += 1
        if length <= _BLOCK:
            leaves.append((node, start, length))
            return node
        half = length // 2
        half -= half % _UNROLL
        left = build(start, half, depth + 1)
        right = build(start + half, length - half, depth + 1)
        joins.setdefault(depth, []).append((node, left, right))
        return node

    build(0, n, 0)
    levels = tuple(tuple(joins[d]) for d in sorted(joins, reverse=True))
    return _Plan(tuple(leaves), levels, count)


def _leaf_sums(x: torch.Tensor, start: torch.Tensor, length: int) -> torch.Tensor:
    """NumPy's sum of each block ``x[s : s + length]`` (one per start), vectorised over the blocks."""
    blocks = x[start.reshape(-1, 1) + torch.arange(length, device=x.device)]
    if length < _UNROLL:
        res = torch.zeros(blocks.shape[0], dtype=x.dtype, device=x.device)
        for i in range(length):
            res = res + blocks[:, i]
        return res
    r = blocks[:, :_UNROLL].clone()
    i = _UNROLL
    while i < length - length % _UNROLL:
        r += blocks[:, i : i + _UNROLL]
        i += _UNROLL
    res = ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + ((r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7]))
    for j in range(i, length):
        res = res + blocks[:, j]
    return res


@lru_cache(maxsize=64)
def _plan_on(n: int, device: torch.device) -> tuple[list[tuple[int, torch.Tensor, torch.Tensor]], list[tuple[torch.Tensor, ...]], int]:
    """:func:`_plan` as index tensors on ``device`` (made once per length and device): per leaf length its nodes
    and starts, per level its (node, left, right)."""
    plan = _plan(n)
    by_length: dict[int, list[tuple[int, int]]] = {}
    for node, start, length in plan.leaves:
        by_length.setdefault(length, []).append((node, start))
    leaves = [(length, torch.tensor([i for i, _ in items], device=device), torch.tensor([s for _, s in items], device=device))
              for length, items in by_length.items()]
    levels = [tuple(torch.tensor(col, device=device) for col in zip(*level, strict=True)) for level in plan.levels]
    return leaves, levels, plan.nodes


def pairwise_sum(x: torch.Tensor) -> torch.Tensor:
    """``np.sum`` of the float64 vector ``x`` as a 0-d tensor on its device, in NumPy's order (no scalar read)."""
    x = x.reshape(-1).to(torch.float64)
    n = x.numel()
    if n == 0:
        return torch.zeros((), dtype=torch.float64, device=x.device)
    leaves, levels, nodes = _plan_on(n, x.device)
    val = torch.zeros(nodes, dtype=torch.float64, device=x.device)
    for length, ids, starts in leaves:
        val[ids] = _leaf_sums(x, starts, length)
    for node, left, right in levels:
        val[node] = val[left] + val[right]
    return val[0]


def _bits(values: torch.Tensor, width: int) -> torch.Tensor:
    """The LSB-first bits (uint8 0/1) of fixed-width fields, field after field."""
    shifts = torch.arange(width, device=values.device)
    return ((values.to(torch.int64).reshape(-1, 1) >> shifts) & 1).to(torch.uint8).reshape(-1)


def pack_fields(segments: list[tuple[torch.Tensor, int]], device: torch.device) -> torch.Tensor:
    """:func:`gcbench.compressors.adacomp.pack_segments` on the device: the segments' fields in one LSB-first stream,
    ceil(total bits / 8) bytes."""
    parts = [_bits(v, w) for v, w in segments if w and v.numel()]
    if not parts:
        return torch.zeros(0, dtype=torch.uint8, device=device)
    return codec_torch.pack_bits(torch.cat(parts), 1)


def read_fields(stream: torch.Tensor, start: int, count: int, width: int) -> torch.Tensor:
    """``count`` fields of ``width`` bits from bit ``start`` of an LSB-first byte stream (int64; checked to fit)."""
    if width == 0 or count == 0:
        return torch.zeros(count, dtype=torch.int64, device=stream.device)
    end = start + count * width
    if end > 8 * stream.numel():
        raise PayloadError("adacomp bit stream is truncated")
    first, last = start // 8, (end + 7) // 8
    bits = _bits(stream[first:last], 8)[start - 8 * first : end - 8 * first].reshape(count, width).to(torch.int64)
    return (bits << torch.arange(width, device=stream.device)).sum(1)


def select_count_fields(counts: torch.Tensor, L: int, last: int) -> int:
    """The number of selected elements (the bins' counts summed: a size the decoder must know), read once with the
    check that no count exceeds its bin (``L``, the last bin ``last``) folded in."""
    bad = (counts.max() > L) | (counts[-1] > last)
    code = int(torch.where(bad, torch.full_like(counts[0], -1), counts.sum()))
    if code < 0:
        raise PayloadError("adacomp body has a bin count larger than its bin")
    return code
