"""Gathers and scatters of sparse sets: ``a[idx]``, ``out[idx] = vals·scale``, ``e[idx] -= vals``,
``a[idx] = 0``, and the fused decode of a packed index stream (:func:`unpack_scatter`).
"""

from __future__ import annotations

import numpy as np

from gcbench.kernels.bits import _U64, _stream_field, as_words
from gcbench.kernels.runtime import KERNEL, PART, bounds, launches, n_chunks, njit, prange, run_chunks
from gcbench.kernels.select import _E_F32


@njit(cache=True)
def _gather(a, idx, out):  # pragma: no cover - compiled
    for j in range(idx.size):
        out[j] = a[idx[j]]


def gather(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """a[idx] as float32 (serial: cheaper than NumPy's fancy indexing for sparse sets)."""
    out = np.empty(idx.size, np.float32)
    _gather(a, idx, out)
    return out





@njit(**KERNEL)
def _scatter_fields(w, width, bit0, vb, out, lo, span):  # pragma: no cover - numba
    """out[f_i] = vb[i] for the ``vb.size`` width-bit fields f_i from bit ``bit0`` of the words ``w``
    that lie in [lo, lo + span]; returns how many did not (those are skipped).

    Every field's two words must lie inside ``w`` (the caller reads a stream's last fields from a
    padded copy of its last words).  The index arithmetic is unsigned: with signed indices numba
    keeps a negative-index fix-up on every load, which made this loop 2.3× slower.
    """
    mask = (_U64(1) << _U64(width)) - _U64(1)
    wd = _U64(width)
    b0 = _U64(bit0)
    ulo = _U64(lo)
    uspan = _U64(span)
    skipped = 0
    for i in range(vb.size):
        p = b0 + _U64(i) * wd
        q = p >> _U64(5)
        f = ((_U64(w[q]) | (_U64(w[q + _U64(1)]) << _U64(32))) >> (p & _U64(31))) & mask
        if f - ulo <= uspan:  # lo <= f <= lo + span (below lo wraps around to a huge difference)
            out[f] = vb[i]
        else:
            skipped += 1
    return skipped


@njit(**KERNEL)
def _scatter_span(words, tailwords, n_main, width, vals, out, j0, j1, lo, span):  # pragma: no cover - numba
    """:func:`_scatter_fields` for fields [j0, j1) of a stream split as in :func:`unpack_scatter`."""
    mid = max(j0, min(j1, n_main))
    n = 0
    if mid > j0:
        bit = j0 * width
        n += _scatter_fields(words[bit >> 5 :], width, bit & 31, vals[j0:mid], out, lo, span)
    if j1 > mid:
        n += _scatter_fields(tailwords, width, ((n_main * width) & 31) + (mid - n_main) * width, vals[mid:j1], out, lo, span)
    return n


@njit(**KERNEL)
def _first_at_least(words, tailwords, n_main, width, k, target):  # pragma: no cover - numba
    """The first j in [0, k] with field_j >= target, by bisection (meaningful for rising fields)."""
    lo = 0
    hi = k
    while lo < hi:
        m = (lo + hi) >> 1
        if _stream_field(words, tailwords, n_main, width, m) < target:
            lo = m + 1
        else:
            hi = m
    return lo


@njit(**KERNEL)
def _fill_zero(b):  # pragma: no cover - numba
    for i in range(b.size):
        b[i] = 0.0


@njit(**KERNEL)
def _unpack_scatter_kernel(p0, p1, words, tailwords, n_main, width, vals, out, part, clear, skipped):  # pragma: no cover - numba
    """Output parts p0..p1 of ``part`` elements: clear the part (when ``clear``), then write its share
    of the fields, [first field >= part start, first field >= part end), found by bisection as if the
    fields rose.  ``skipped[p]`` counts the fields of that share outside the part (nonzero: the
    caller redoes the whole stream in order).

    Neighbouring parts bisect for the same boundary, so the shares tile [0, k) unless a share comes
    out reversed (counted as skipped); with nothing skipped every element is written by one part
    only, in field order, and the result is the sequential scatter's.
    """
    k = vals.size
    d = out.size
    nparts = skipped.size
    for p in range(p0, p1):
        lo, hi = bounds(p, part, d)
        if clear:
            _fill_zero(out[lo:hi])
        j0 = 0 if p == 0 else _first_at_least(words, tailwords, n_main, width, k, lo)
        j1 = k if p == nparts - 1 else _first_at_least(words, tailwords, n_main, width, k, hi)
        if j1 < j0:  # the fields do not rise
            skipped[p] = 1
            continue
        skipped[p] = _scatter_span(words, tailwords, n_main, width, vals, out, j0, j1, lo, hi - 1 - lo)


@launches(_unpack_scatter_kernel)
def _unpack_scatter_kernel_par(nth, n, *args):  # pragma: no cover - numba
    for p in prange(nth):
        _unpack_scatter_kernel(n * p // nth, n * (p + 1) // nth, *args)


def unpack_scatter(data: np.ndarray, width: int, vals: np.ndarray, out: np.ndarray, clear: bool) -> int:
    """``out[f_i] = vals[i]`` in field order for the ``vals.size`` width-bit (1..32) fields f_i packed
    LSB first in ``data`` (at least ``packed_nbytes(vals.size, width)`` bytes), every other element
    of ``out`` zero (``clear``: ``out`` may hold anything; else it reads as zero already).

    Fields ≥ out.size are skipped and counted (the return value).  The work is split by output
    element: each part of :data:`PART` elements is cleared while in cache and receives the fields
    that fall in it, located by bisection in the (sorted) stream.  A stream whose fields do not
    rise, or reach past the tensor (never an encoder's: its indices are sorted, unique and in
    range), is scattered again in field order on the calling thread, so a repeated field keeps its
    last value as in a sequential ``out[idx] = vals`` (:func:`decode_sparse_reference`).
    """
    k = vals.size
    d = out.size
    if k == 0:
        if clear:
            run_chunks(_fill_kernel, n_chunks(d), d, out, PART)
        return 0
    words, tailword = as_words(data)
    nw = words.size
    # fields [0, n_main) have both their words in ``words``: start bit < 32·(nw − 1)
    n_main = min(k, max(0, (32 * (nw - 1) + width - 1) // width))
    q_tail = (n_main * width) >> 5
    tailwords = np.zeros(nw - q_tail + 2, np.uint32)
    tailwords[: nw - q_tail] = words[q_tail:]
    tailwords[nw - q_tail] = tailword
    nparts = n_chunks(d)
    skipped = np.zeros(nparts, np.int64)
    run_chunks(_unpack_scatter_kernel, nparts, d if clear else k * 64, words, tailwords, n_main, width, vals, out, PART, clear,
               skipped)
    if not skipped.any():
        return 0
    # Every part was cleared and the parallel pass wrote only at fields below d, each of which the
    # sequential pass writes again, in field order: the result is the sequential scatter's.
    return int(_scatter_span(words, tailwords, n_main, width, vals, out, 0, k, 0, d - 1))


@njit(**KERNEL)
def _fill_kernel(c0, c1, out, chunk):  # pragma: no cover - numba
    n = out.size
    for c in range(c0, c1):
        lo = c * chunk
        _fill_zero(out[lo : min(lo + chunk, n)])


@launches(_fill_kernel)
def _fill_kernel_par(nth, n, *args):  # pragma: no cover - numba
    for p in prange(nth):
        _fill_kernel(n * p // nth, n * (p + 1) // nth, *args)


_SET, _SUB, _ZERO = 0, 1, 2  # what :func:`_scatter_kernel` does at each index
_ITEM = 4096  # entries per work item of the scatters


@njit(**KERNEL)
def _scatter_kernel(c0, c1, out, idx, vals, scale, use_scale, mode, bad):  # pragma: no cover - numba
    """For the entries of items c0..c1: out[j] = vals[i]·scale (_SET), out[j] -= vals[i] (_SUB) or out[j] = 0
    (_ZERO) at j = idx[i]; indices outside ``out`` are skipped and counted in ``bad``."""
    d = out.size
    n = idx.size
    for c in range(c0, c1):
        lo = c * _ITEM
        for i in range(lo, min(lo + _ITEM, n)):
            j = idx[i]
            if j < 0 or j >= d:
                bad[c] += 1
            elif mode == _SET:
                out[j] = vals[i] * scale if use_scale else vals[i]
            elif mode == _SUB:
                out[j] = out[j] - vals[i]
            else:
                out[j] = 0.0


@launches(_scatter_kernel)
def _scatter_kernel_par(nth, n, *args):  # pragma: no cover - numba
    for p in prange(nth):
        _scatter_kernel(n * p // nth, n * (p + 1) // nth, *args)


def _scatter(out: np.ndarray, idx: np.ndarray, vals: np.ndarray | None, scale: float, mode: int, parallel: bool) -> int:
    if not idx.size:
        return 0
    items = n_chunks(idx.size, _ITEM)
    bad = np.zeros(items, np.int64)
    v = _E_F32 if vals is None else np.ascontiguousarray(vals, dtype=np.float32)
    # threads only when no two entries can write one element (each item writes its own indices)
    run_chunks(_scatter_kernel, items, out.size if parallel else 0, out, np.ascontiguousarray(idx, dtype=np.int64), v,
               np.float32(scale), scale != 1.0, mode, bad)
    return int(bad.sum())


def scatter(out: np.ndarray, idx: np.ndarray, vals: np.ndarray, scale: float = 1.0) -> int:
    """``out[idx] = vals·scale`` in place (float32 product); returns how many indices fell outside ``out`` (skipped).

    Strictly ascending ``idx`` scatter in parallel; any other order runs on the calling thread, in
    order, so a repeated index keeps its last value as in ``out[idx] = vals``.
    """
    ascending = idx.size < 2 or bool(np.all(idx[1:] > idx[:-1]))
    return _scatter(out, idx, vals, scale, _SET, ascending)


def scatter_sub(a: np.ndarray, idx: np.ndarray, vals: np.ndarray) -> None:
    """``a[idx] -= vals`` in place (unique indices; float32, as torch's ``a − decoded`` there)."""
    _scatter(a, idx, vals, 1.0, _SUB, True)


def scatter_zero(a: np.ndarray, idx: np.ndarray) -> None:
    """``a[idx] = 0`` in place (unique indices)."""
    _scatter(a, idx, None, 1.0, _ZERO, True)
