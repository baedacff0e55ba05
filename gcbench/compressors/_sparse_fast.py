"""Fast CPU kernels shared by the sparsifiers (topk, dgc, sdagc, graddrop, threshold, adacomp).

Each kernel has a plain torch/NumPy counterpart — the ``*_reference`` functions of the compressor
modules, :func:`gcbench.compressors._select.dgc_select`, :func:`gcbench.core.codec.encode_sparse` —
and the tests compare them bit for bit.  What makes them fast, on a 25.6M-element float32
tensor with 2 threads (environment.md):

* **Few passes, no full-size temporaries.**  A threshold selection is two passes over the
  tensor: a count per chunk (a vectorised loop, about the cost of reading the tensor), then a
  write pass that puts each selected value straight into the payload body, packs its index into
  the ``fixed`` bit field (or writes it as int32/int64 for the other codings), updates the state
  tensor in place (momentum masking, the error-feedback residual) and fills the decoded tensor
  only when the caller wants it.  Before, ``flat.abs()``, boolean masks, ``torch.nonzero``,
  gathers and ``dense_from_sparse`` each allocated and faulted in a new 25–100 MB buffer.
* **Fresh outputs from NumPy.**  A payload body or a decoded tensor handed to the caller must be
  new memory (the caller may keep it).  ``torch.zeros``/``torch.empty`` of 100 MB pays 4 KiB
  page faults (3.5–4.5× a copy here); NumPy asks the kernel for transparent huge pages on large
  blocks (``madvise(MADV_HUGEPAGE)``, NumPy's default on Linux) and ``np.zeros`` gets memory the
  kernel already zeroed: ``np.zeros`` + fill measured 1.0–1.1× a copy.  Per allocation; no
  process-wide allocator setting is changed.
* **Threads.**  Kernels are serial ``numba.njit(nogil=True)`` functions over a range of chunks;
  :func:`run_chunks` splits the chunks over ``torch.get_num_threads()`` Python threads (the GIL
  is released inside).  numba's own ``parallel=True`` was 5–10× slower here: its OpenMP pool
  and torch's (a second libgomp) spin against each other on two cores, and each parallel kernel
  took 2.5–3 s to compile cold against 0.2–0.5 s for a serial one.
* Inner loops run over slices with ``range(n)``: with ``range(lo, hi)`` numba keeps a
  negative-index check in the loop and LLVM does not vectorise it (10× slower counts).  Loops
  that index with computed positions (bit-field reads, scatters) compute them as ``uint64``,
  for which numba emits no negative-index fix-up (the fused decode ran 2.3× faster so).
* **Decode** of a ``fixed`` body (:func:`unpack_scatter`) is one pass split by output element:
  each 64K-element part of the output clears itself (when the buffer is a reused one from
  :func:`gcbench.kernels.empty_maybe_zero`), finds its share of the sorted index fields by
  bisection and writes them straight from the packed stream (two 32-bit words per field, no
  index array).  A body whose fields are not sorted, unique and in range (never an encoder's)
  is scattered again in field order; :func:`decode_sparse_reference` is the plain version.

Bit streams are :func:`gcbench.core.codec.pack_bits`'s layout (LSB first, field i at bits
``[i·w, (i+1)·w)``).  Chunks of a parallel writer start at arbitrary bit offsets, so each writes
the bytes it owns and hands the partial bytes it shares with a neighbour to a short serial fix-up
(:func:`_fixup`); tests check the result against :func:`gcbench.core.codec.pack_bits_reference`.

Thresholds compare as torch compares a float32 tensor with a Python float: the threshold is first
rounded to float32 (``x.abs() > 0.99999999`` is False for x = 1) and ``|a| > t`` is
``|a| >= nextafter(t)`` in float32 (:func:`f32_threshold`).  NaN never passes a threshold, as in
torch, except in the top-k candidate scan (see :func:`topk_select`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gcbench import kernels
from gcbench.core import codec
from gcbench.core.compressor import body_numpy, meta_int, meta_str
from gcbench.core.errors import PayloadError
from gcbench.core.payload import Payload

try:  # numba is a dependency; without it (or under GCBENCH_KERNELS=torch) every caller takes its torch path
    if not kernels.NUMBA:
        raise ImportError("numba kernels off")
    from numba import njit

    HAVE_NUMBA = True
except Exception:  # numba missing or broken, or the kernel switch set to torch
    HAVE_NUMBA = False

    def njit(*args: Any, **kwargs: Any) -> Any:  # type: ignore[no-redef]
        return (lambda f: f) if not args or not callable(args[0]) else args[0]


CHUNK = 1 << 16  # elements per work item: 256 KiB of float32, hundreds of items per thread at 25.6M
SERIAL_BELOW = 1 << 18  # smaller inputs run on the calling thread (thread hand-off costs ~50 µs)
_F32_INF = np.float32(np.inf)
_KERNEL = dict(nogil=True, cache=True)


def fast_cpu(*tensors: torch.Tensor) -> bool:
    """True when the numba kernels apply: numba present, every tensor a contiguous CPU float32 tensor."""
    return HAVE_NUMBA and all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in tensors)


# ----------------------------------------------------------------------------- threads


_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_lock = threading.Lock()


def _workers(n_items: int, numel: int) -> int:
    if numel < SERIAL_BELOW:
        return 1
    return max(1, min(torch.get_num_threads(), n_items))


def _get_pool(size: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < size:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="gcbench-sparse")
            _pool_size = size
        return _pool


def run_chunks(kernel: Callable[..., Any], n_items: int, numel: int, *args: Any) -> None:
    """Run ``kernel(i0, i1, *args)`` over ``[0, n_items)`` split into one contiguous range per thread.

    ``numel`` (the elements the items cover) decides whether threads are worth starting.
    """
    t = _workers(n_items, numel)
    if t <= 1:
        kernel(0, n_items, *args)
        return
    bounds = [n_items * i // t for i in range(t + 1)]
    pool = _get_pool(t - 1)
    futures = [pool.submit(kernel, bounds[i], bounds[i + 1], *args) for i in range(1, t)]
    kernel(bounds[0], bounds[1], *args)
    for f in futures:
        f.result()


def n_chunks(n: int, chunk: int = CHUNK) -> int:
    return max(1, -(-n // chunk))


# ----------------------------------------------------------------------------- allocation, views


_HUGE_PAGE = 2 << 20


def prefault(arr: np.ndarray) -> np.ndarray:
    """Touch one byte per 2 MiB of a fresh array on the calling thread, so its pages are faulted in.

    Worker threads that fault fresh huge pages of one buffer at the same time were 3–6× slower
    here than one thread faulting them first (the decode of a 25.6M-element payload: 130 ms from
    2 threads on fresh memory, 26 ms with this, 7 ms of it the kernel zeroing the pages).
    """
    if arr.nbytes >= 2 * _HUGE_PAGE:
        arr.reshape(-1).view(np.uint8)[::_HUGE_PAGE] = 0
    return arr


def zeros_f32(n: int, touch: bool = True) -> np.ndarray:
    """A fresh zero float32 array (kernel-zeroed, huge-page backed when large; see the module doc).

    ``touch`` faults its pages in on the calling thread (:func:`prefault`); leave it False when
    only a few entries will be written.
    """
    out = np.zeros(n, np.float32)
    return prefault(out) if touch else out


def empty_f32_tensor(n: int) -> torch.Tensor:
    """A fresh uninitialised float32 CPU tensor in NumPy-allocated memory (cheap page faults)."""
    return torch.from_numpy(prefault(np.empty(n, np.float32)))


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """NumPy view of a contiguous CPU tensor (shares memory: writes go to the tensor)."""
    return t.detach().numpy()


def f32_threshold(thr: float, strict: bool) -> np.float32 | None:
    """The float32 bound ``t`` with ``|a| >= t`` ⇔ torch's ``|a| > thr`` (strict) or ``|a| >= thr``.

    None when nothing can pass (a strict comparison with +inf).
    """
    t = np.float32(thr)
    if strict:
        if t == _F32_INF:
            return None
        t = np.nextafter(t, _F32_INF)
    return t


# ----------------------------------------------------------------------------- counting


@njit(**_KERNEL)
def _copy(dst, src):  # pragma: no cover - numba
    """dst[:] = src[:] as a plain loop (numba's slice assignment took 9 s to compile cold here)."""
    for i in range(src.size):
        dst[i] = src[i]



@njit(**_KERNEL)
def _count_ge(b, t):  # pragma: no cover - numba
    cnt = 0
    for i in range(b.size):
        cnt += abs(b[i]) >= t
    return cnt


@njit(**_KERNEL)
def _count_not_lt(b, t):  # pragma: no cover - numba
    cnt = 0
    for i in range(b.size):
        cnt += not (abs(b[i]) < t)
    return cnt


@njit(**_KERNEL)
def _count_kernel(c0, c1, a, t, nan_pass, chunk, counts):  # pragma: no cover - numba
    """counts[c] = #{|a| >= t} in chunk c (NaN counts too when ``nan_pass``)."""
    n = a.size
    for c in range(c0, c1):
        lo = c * chunk
        b = a[lo : min(lo + chunk, n)]
        counts[c] = _count_not_lt(b, t) if nan_pass else _count_ge(b, t)


@njit(**_KERNEL)
def _add_count_kernel(c0, c1, e, x, t, chunk, counts):  # pragma: no cover - numba
    """e += x over chunks c0..c1 (float32, as torch's ``add_``), then counts[c] = #{|e| >= t} of the chunk."""
    n = e.size
    for c in range(c0, c1):
        lo = c * chunk
        hi = min(lo + chunk, n)
        eb = e[lo:hi]
        xb = x[lo:hi]
        for i in range(eb.size):
            eb[i] = eb[i] + xb[i]
        counts[c] = _count_ge(eb, t)


def add_count(e: np.ndarray, x: np.ndarray, t: np.float32) -> np.ndarray:
    """``e += x`` in place and the per-chunk counts of ``|e| >= t``, in one pass."""
    nch = n_chunks(e.size)
    counts = np.zeros(nch, np.int64)
    run_chunks(_add_count_kernel, nch, e.size, e, x, t, CHUNK, counts)
    return counts


def count_chunks(a: np.ndarray, t: np.float32 | None, nan_pass: bool = False) -> np.ndarray:
    """Per-chunk counts of ``|a| >= t`` (``t`` from :func:`f32_threshold`; None counts nothing)."""
    nch = n_chunks(a.size)
    counts = np.zeros(nch, np.int64)
    if t is not None and a.size:
        run_chunks(_count_kernel, nch, a.size, a, t, nan_pass, CHUNK, counts)
    return counts


# ----------------------------------------------------------------------------- bit writing


@njit(**_KERNEL)
def _fixup(out, heads, tails, tail_pos, firsts, shared):  # pragma: no cover - numba
    """OR the bytes that chunks share with a neighbour into the stream (serial, one per chunk)."""
    for c in range(heads.size):
        if shared[c]:
            out[firsts[c]] |= heads[c]
        if tail_pos[c] >= 0:
            out[tail_pos[c]] |= tails[c]


class BitWriterSides:
    """Side arrays of the parallel bit writer (one slot per work item)."""

    def __init__(self, n: int) -> None:
        self.heads = np.zeros(n, np.uint8)
        self.tails = np.zeros(n, np.uint8)
        self.tail_pos = np.full(n, -1, np.int64)
        self.firsts = np.zeros(n, np.int64)
        self.shared = np.zeros(n, np.bool_)

    def fixup(self, out: np.ndarray) -> None:
        _fixup(out, self.heads, self.tails, self.tail_pos, self.firsts, self.shared)


# A work item packs its fields into a local word buffer (``l32``), starting at bit ``s`` = its
# start bit mod 8 of the stream, so the hot loop stores whole aligned 32-bit words with no checks;
# :func:`_place` then copies the bytes the item owns into the stream and sets aside the partial first
# byte (shared with the previous item when s != 0) and the partial last byte (shared with the next).
# Shared bytes of the stream start at zero and are OR-ed in by :func:`_fixup`.


@njit(**_KERNEL)
def _place(l8, s, nbits, first, c, out, heads, tails, tail_pos, firsts, shared):  # pragma: no cover - numba
    """Copy item c's packed bits (``nbits``, counting the ``s`` leading bits) to stream byte ``first`` on."""
    nb = (nbits + 7) >> 3
    firsts[c] = first
    if nb == 0:
        return
    j_lo = 0
    if s != 0:  # the first byte starts with the previous item's bits
        heads[c] = l8[0]
        shared[c] = True
        j_lo = 1
    j_hi = nb
    if nbits & 7:  # the last byte ends with the next item's bits
        if nb - 1 >= j_lo:
            tails[c] = l8[nb - 1]
            tail_pos[c] = first + nb - 1
        j_hi = nb - 1
    if j_hi > j_lo:
        _copy(out[first + j_lo : first + j_hi], l8[j_lo:j_hi])


@njit(**_KERNEL)
def _drain(l8, jb, acc, nacc):  # pragma: no cover - numba
    """Write the pending bits of the accumulator as bytes from ``l8[jb]`` on."""
    while nacc > 0:
        l8[jb] = np.uint8(acc & np.uint64(0xFF))
        jb += 1
        acc >>= np.uint64(8)
        nacc -= 8


# ----------------------------------------------------------------------------- threshold selection

ZERO_NONE, ZERO_SET, ZERO_SUB = 0, 1, 2  # what the write pass does to a selected a[i]: nothing, 0, a[i] − a[i]


@njit(**_KERNEL)
def _collect_dense(b, t, nan_pass, loc, lval):  # pragma: no cover - numba
    """Positions and values of ``|b| >= t`` into loc/lval, branch-free (for dense chunks)."""
    m = 0
    if nan_pass:
        for j in range(b.size):
            v = b[j]
            loc[m] = j
            lval[m] = v
            m += not (abs(v) < t)
    else:
        for j in range(b.size):
            v = b[j]
            loc[m] = j
            lval[m] = v
            m += abs(v) >= t
    return m


@njit(**_KERNEL)
def _collect_sparse(b, t, nan_pass, loc, lval, want):  # pragma: no cover - numba
    """As :func:`_collect_dense` for sparse chunks: 64-element blocks without a hit are skipped by a
    vectorised count, and the scan stops once the chunk's ``want`` entries are found."""
    m = 0
    n = b.size
    for j0 in range(0, n, 64):
        blk = b[j0 : min(j0 + 64, n)]
        hits = _count_not_lt(blk, t) if nan_pass else _count_ge(blk, t)
        if hits == 0:
            continue
        for j in range(blk.size):
            v = blk[j]
            if abs(v) >= t or (nan_pass and not (abs(v) < t)):
                loc[m] = j0 + j
                lval[m] = v
                m += 1
        if m >= want:
            break
    return m


@njit(**_KERNEL)
def _write_kernel(c0, c1, a, t, nan_pass, chunk, counts, offsets, limit, vals, idx, idx32, packed, width,
                  heads, tails, tail_pos, firsts, shared, zero_mode, dec):  # pragma: no cover - numba
    """Second pass over chunks c0..c1: for the first ``limit`` positions with ``|a| >= t`` (index order)

    write the value to ``vals[pos]``, the index to ``idx``/``idx32`` or as ``width`` packed bits
    at bit ``pos·width`` of ``packed`` (each when non-empty), ``dec[i] = a[i]`` (when non-empty),
    and update ``a[i]`` per ``zero_mode``.  ``counts[c]``/``offsets[c]``: chunk c's count and first
    position (from the count pass with the same ``t``).
    """
    n = a.size
    do_vals = vals.size > 0
    do_idx = idx.size > 0
    do_idx32 = idx32.size > 0
    do_pack = packed.size > 0
    do_dec = dec.size > 0
    loc = np.empty(chunk, np.int64)
    lval = np.empty(chunk, np.float32)
    l32 = np.empty((chunk * width + 7) // 32 + 2, np.uint32)
    l8 = l32.view(np.uint8)
    for c in range(c0, c1):
        pos = offsets[c]
        if pos >= limit or counts[c] == 0:
            continue
        lo = c * chunk
        b = a[lo : min(lo + chunk, n)]
        want = counts[c]
        if 32 * want < b.size:
            m = _collect_sparse(b, t, nan_pass, loc, lval, want)
        else:
            m = _collect_dense(b, t, nan_pass, loc, lval)
        take = min(m, limit - pos)
        # one simple loop per output (the compiler vectorises the contiguous ones)
        if do_vals:
            _copy(vals[pos : pos + take], lval[:take])
        if do_idx:
            dst = idx[pos : pos + take]
            for q in range(take):
                dst[q] = lo + loc[q]
        if do_idx32:
            dst32 = idx32[pos : pos + take]
            for q in range(take):
                dst32[q] = lo + loc[q]
        if do_dec:
            dd = dec[lo : lo + b.size]
            for q in range(take):
                dd[loc[q]] = lval[q]
        if zero_mode == 1:
            for q in range(take):
                b[loc[q]] = 0.0
        elif zero_mode == 2:
            for q in range(take):
                v = lval[q]
                b[loc[q]] = v - v  # the residual a − decoded: 0, or NaN for ±inf/NaN as torch gives
        if do_pack:
            bit = pos * width
            sbit = bit & 7
            nacc = sbit
            acc = np.uint64(0)
            wq = 0
            for q in range(take):
                acc |= np.uint64(lo + loc[q]) << np.uint64(nacc)
                nacc += width
                if nacc >= 32:
                    l32[wq] = np.uint32(acc & np.uint64(0xFFFFFFFF))
                    wq += 1
                    acc >>= np.uint64(32)
                    nacc -= 32
            _drain(l8, 4 * wq, acc, nacc)
            _place(l8, sbit, 32 * wq + nacc, bit >> 3, c, packed, heads, tails, tail_pos, firsts, shared)


@dataclass
class Selection:
    """Outcome of :func:`select_encode` (host arrays).

    Attributes:
        body: the payload body in the requested coding (float32 values, then the index coding).
        k: entries selected (at most ``limit``).
        count: entries passing the threshold (before ``limit``).
        idx: sorted int64 indices (when asked for, or for codings other than fixed/int32).
        vals: their float32 values (with ``idx``).
        decoded: the dense float32 decoded vector (when asked for).
    """

    body: np.ndarray
    k: int
    count: int
    idx: np.ndarray | None
    vals: np.ndarray | None
    decoded: np.ndarray | None


_E_F32 = np.zeros(0, np.float32)
_E_I64 = np.zeros(0, np.int64)
_E_I32 = np.zeros(0, np.int32)
_E_U8 = np.zeros(0, np.uint8)


def select_encode(a: np.ndarray, t: np.float32 | None, coding: str | None, *, counts: np.ndarray | None = None,
                  limit: int | None = None, zero_mode: int = ZERO_NONE, want_decoded: bool = False, want_idx: bool = False,
                  nan_pass: bool = False) -> Selection:
    """Select ``|a| >= t`` (the first ``limit`` in index order) and encode it as a sparse body.

    ``a`` is a flat float32 array, written only per ``zero_mode``; ``t`` comes from
    :func:`f32_threshold`; ``counts`` may be passed when the caller already counted with the same
    ``t``.  The body equals :func:`gcbench.core.codec.encode_sparse` of the selection in ``coding``
    (``fixed`` and ``int32`` are written by the selection pass itself); ``coding=None`` makes no
    body and returns the indices and values.
    """
    d = a.size
    if counts is None:
        counts = count_chunks(a, t, nan_pass)
    total = int(counts.sum())
    k = total if limit is None else min(total, int(limit))
    offsets = np.zeros(counts.size, np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    direct = coding == "int32" or (coding == "fixed" and codec.index_width(d) <= 32)
    want_idx = want_idx or not direct
    idx = prefault(np.empty(k, np.int64)) if want_idx else _E_I64
    dec = zeros_f32(d, touch=k >= d // (1 << 16)) if want_decoded else _E_F32
    width = codec.index_width(d)
    body, packed, idx32 = _E_U8, _E_U8, _E_I32
    if coding == "fixed" and direct:
        body = prefault(np.zeros(4 * k + codec.packed_nbytes(k, width), np.uint8))  # zeroed: shared bytes are OR-ed in
        vals, packed = body[: 4 * k].view(np.float32), body[4 * k :]
    elif coding == "int32":
        body = prefault(np.empty(8 * k, np.uint8))
        vals, idx32 = body[: 4 * k].view(np.float32), body[4 * k :].view(np.int32)
    else:
        vals = prefault(np.empty(k, np.float32))
    if k and t is not None:
        sides = BitWriterSides(counts.size)
        run_chunks(_write_kernel, counts.size, d, a, t, nan_pass, CHUNK, counts, offsets, k, vals, idx, idx32, packed, width,
                   sides.heads, sides.tails, sides.tail_pos, sides.firsts, sides.shared, zero_mode, dec)
        if packed.size:
            sides.fixup(packed)
    if coding is not None and not direct:
        body = codec.encode_sparse(vals, idx, d, coding)
    return Selection(body, k, total, idx if want_idx else None, vals if want_idx else None, dec if want_decoded else None)


# ----------------------------------------------------------------------------- encode / decode from arrays

_PACK_ITEM = 1 << 15  # fields per packing work item (a multiple of 8: items start at the same bit of a byte)


@njit(**_KERNEL)
def _pack_kernel(c0, c1, values, width, bit0, out, heads, tails, tail_pos, firsts, shared):  # pragma: no cover - numba
    """Pack fields of items c0..c1 (item c: fields [c·_PACK_ITEM, …)) LSB first at stream bit ``bit0 + i·width``."""
    n = values.size
    mask = np.uint64((1 << width) - 1)
    l32 = np.empty((_PACK_ITEM * width + 7) // 32 + 2, np.uint32)
    l8 = l32.view(np.uint8)
    for c in range(c0, c1):
        lo = c * _PACK_ITEM
        v = values[lo : min(lo + _PACK_ITEM, n)]
        bit = bit0 + lo * width
        sbit = bit & 7
        nacc = sbit
        acc = np.uint64(0)
        wq = 0
        for j in range(v.size):
            acc |= (np.uint64(v[j]) & mask) << np.uint64(nacc)
            nacc += width
            if nacc >= 32:
                l32[wq] = np.uint32(acc & np.uint64(0xFFFFFFFF))
                wq += 1
                acc >>= np.uint64(32)
                nacc -= 32
        _drain(l8, 4 * wq, acc, nacc)
        _place(l8, sbit, 32 * wq + nacc, bit >> 3, c, out, heads, tails, tail_pos, firsts, shared)


def pack_into(values: np.ndarray, width: int, out: np.ndarray, bit0: int = 0) -> None:
    """Write :func:`gcbench.core.codec.pack_bits` of non-negative ``values`` into ``out`` from stream bit ``bit0``.

    ``out`` must be zero wherever bits outside ``[bit0, bit0 + len·width)`` share a byte with the
    written range (those bytes are OR-ed); ``1 <= width <= 32``.
    """
    if not values.size:
        return
    items = n_chunks(values.size, _PACK_ITEM)
    sides = BitWriterSides(items)
    if values.dtype.kind not in "iu":
        raise TypeError(f"pack_into packs integers, got {values.dtype}")
    run_chunks(_pack_kernel, items, values.size, np.ascontiguousarray(values), width, int(bit0), out,
               sides.heads, sides.tails, sides.tail_pos, sides.firsts, sides.shared)
    sides.fixup(out)


def encode_sorted(vals: np.ndarray, idx: np.ndarray, d: int, coding: str) -> np.ndarray:
    """:func:`gcbench.core.codec.encode_sparse` of indices already sorted and unique (no argsort; fast ``fixed``)."""
    vals = np.ascontiguousarray(vals, dtype=np.float32)
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    if coding != "fixed" or not HAVE_NUMBA or idx.size == 0 or codec.index_width(d) > 32:
        return codec.encode_sparse(vals, idx, d, coding)
    if idx[0] < 0 or idx[-1] >= d:
        raise ValueError("indices must be sorted, unique and within [0, d)")
    k = idx.size
    width = codec.index_width(d)
    body = prefault(np.zeros(4 * k + codec.packed_nbytes(k, width), np.uint8))
    body[: 4 * k].view(np.float32)[:] = vals
    pack_into(idx, width, body[4 * k :])
    return body


_U64 = np.uint64


@njit(**_KERNEL)
def _field_at(w, width, bit):  # pragma: no cover - numba
    """The width-bit field at bit ``bit`` of the words ``w`` (both its words inside ``w``)."""
    q = bit >> 5
    v = (_U64(w[q]) | (_U64(w[q + 1]) << _U64(32))) >> _U64(bit & 31)
    return np.int64(v & ((_U64(1) << _U64(width)) - _U64(1)))


@njit(**_KERNEL)
def _stream_field(words, tailwords, n_main, width, j):  # pragma: no cover - numba
    """Field ``j`` of a stream split as in :func:`unpack_scatter` (main words, then the tail copy)."""
    if j < n_main:
        return _field_at(words, width, j * width)
    return _field_at(tailwords, width, ((n_main * width) & 31) + (j - n_main) * width)


@njit(**_KERNEL)
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


@njit(**_KERNEL)
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


@njit(**_KERNEL)
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


@njit(**_KERNEL)
def _fill_zero(b):  # pragma: no cover - numba
    for i in range(b.size):
        b[i] = 0.0


@njit(**_KERNEL)
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
        lo = p * part
        hi = min(lo + part, d)
        if clear:
            _fill_zero(out[lo:hi])
        j0 = 0 if p == 0 else _first_at_least(words, tailwords, n_main, width, k, lo)
        j1 = k if p == nparts - 1 else _first_at_least(words, tailwords, n_main, width, k, hi)
        if j1 < j0:  # the fields do not rise
            skipped[p] = 1
            continue
        skipped[p] = _scatter_span(words, tailwords, n_main, width, vals, out, j0, j1, lo, hi - 1 - lo)


def unpack_scatter(data: np.ndarray, width: int, vals: np.ndarray, out: np.ndarray, clear: bool) -> int:
    """``out[f_i] = vals[i]`` in field order for the ``vals.size`` width-bit (1..32) fields f_i packed
    LSB first in ``data`` (at least ``packed_nbytes(vals.size, width)`` bytes), every other element
    of ``out`` zero (``clear``: ``out`` may hold anything; else it reads as zero already).

    Fields ≥ out.size are skipped and counted (the return value).  The work is split by output
    element: each part of :data:`CHUNK` elements is cleared while in cache and receives the fields
    that fall in it, located by bisection in the (sorted) stream.  A stream whose fields do not
    rise, or reach past the tensor (never an encoder's: its indices are sorted, unique and in
    range), is scattered again in field order on the calling thread, so a repeated field keeps its
    last value as in a sequential ``out[idx] = vals`` (:func:`decode_sparse_reference`).
    """
    k = vals.size
    d = out.size
    if k == 0:
        if clear:
            run_chunks(_fill_kernel, n_chunks(d), d, out, CHUNK)
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
    run_chunks(_unpack_scatter_kernel, nparts, d if clear else k * 64, words, tailwords, n_main, width, vals, out, CHUNK, clear,
               skipped)
    if not skipped.any():
        return 0
    # Every part was cleared and the parallel pass wrote only at fields below d, each of which the
    # sequential pass writes again, in field order: the result is the sequential scatter's.
    return int(_scatter_span(words, tailwords, n_main, width, vals, out, 0, k, 0, d - 1))


@njit(**_KERNEL)
def _fill_kernel(c0, c1, out, chunk):  # pragma: no cover - numba
    n = out.size
    for c in range(c0, c1):
        lo = c * chunk
        _fill_zero(out[lo : min(lo + chunk, n)])


def as_words(data: np.ndarray) -> tuple[np.ndarray, np.uint32]:
    """A byte stream as little-endian uint32 words plus its last partial word (zero padded)."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    full = (data.size // 4) * 4
    tail = np.zeros(4, np.uint8)
    tail[: data.size - full] = data[full:]
    return data[:full].view("<u4"), tail.view("<u4")[0]


@njit(**_KERNEL)
def _scatter_kernel(c0, c1, out, idx, vals, bad):  # pragma: no cover - numba
    """out[idx[i]] = vals[i] for items c0..c1 (4096 entries each); counts indices outside ``out``."""
    d = out.size
    n = idx.size
    for c in range(c0, c1):
        lo = c * 4096
        for i in range(lo, min(lo + 4096, n)):
            j = idx[i]
            if 0 <= j < d:
                out[j] = vals[i]
            else:
                bad[c] += 1


@njit(**_KERNEL)
def _scatter_sub_kernel(c0, c1, a, idx, vals):  # pragma: no cover - numba
    n = idx.size
    for c in range(c0, c1):
        lo = c * 4096
        for i in range(lo, min(lo + 4096, n)):
            a[idx[i]] -= vals[i]


@njit(**_KERNEL)
def _scatter_zero_kernel(c0, c1, a, idx):  # pragma: no cover - numba
    n = idx.size
    for c in range(c0, c1):
        lo = c * 4096
        for i in range(lo, min(lo + 4096, n)):
            a[idx[i]] = 0.0


def scatter(out: np.ndarray, idx: np.ndarray, vals: np.ndarray) -> int:
    """``out[idx] = vals`` in place; returns how many indices fell outside ``out`` (they are skipped)."""
    if not idx.size:
        return 0
    items = n_chunks(idx.size, 4096)
    bad = np.zeros(items, np.int64)
    run_chunks(_scatter_kernel, items, idx.size * 64, out, np.ascontiguousarray(idx, dtype=np.int64),
               np.ascontiguousarray(vals, dtype=np.float32), bad)
    return int(bad.sum())


def scatter_sub(a: np.ndarray, idx: np.ndarray, vals: np.ndarray) -> None:
    """``a[idx] -= vals`` in place (unique indices; float32, as torch's ``a − decoded`` there)."""
    if idx.size:
        run_chunks(_scatter_sub_kernel, n_chunks(idx.size, 4096), idx.size * 64, a, np.ascontiguousarray(idx, dtype=np.int64),
                   np.ascontiguousarray(vals, dtype=np.float32))


def scatter_zero(a: np.ndarray, idx: np.ndarray) -> None:
    """``a[idx] = 0`` in place."""
    if idx.size:
        run_chunks(_scatter_zero_kernel, n_chunks(idx.size, 4096), idx.size * 64, a, np.ascontiguousarray(idx, dtype=np.int64))


def encode_indices(idx: np.ndarray, d: int, coding: str) -> np.ndarray:
    """:func:`gcbench.core.codec.encode_indices` of sorted unique indices (the ``fixed`` packing in parallel)."""
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    width = codec.index_width(d)
    if coding != "fixed" or not HAVE_NUMBA or width > 32 or idx.size == 0:
        return codec.encode_indices(idx, d, coding)
    if idx[0] < 0 or idx[-1] >= d:
        raise ValueError("indices must be sorted, unique and within [0, d)")
    out = prefault(np.zeros(codec.packed_nbytes(idx.size, width), np.uint8))
    pack_into(idx, width, out)
    return out


def decode_indices(data: np.ndarray, d: int, k: int, coding: str, codec_name: str) -> np.ndarray:
    """:func:`gcbench.core.codec.decode_indices` (indices only) with the ``fixed`` fields read in parallel; checks the
    range, and that the indices fill ``data`` exactly (an encoder writes nothing after them)."""
    width = codec.index_width(d)
    if coding == "fixed" and HAVE_NUMBA and width <= 32:
        need = codec.packed_nbytes(k, width)
        if len(data) < need:
            raise PayloadError(f"{codec_name} index list is truncated: need {need} bytes, have {len(data)}")
        idx, used = read_fixed(data[:need], width, k), need
    else:
        idx, used = codec.decode_indices(data, d, k, coding)
    if used != len(data):
        raise PayloadError(f"{codec_name} body has {len(data) - used} bytes after its {k} indices")
    if idx.size and (idx.min() < 0 or idx.max() >= d):
        raise PayloadError(f"{codec_name} body has an index outside the tensor")
    return idx


def decode_payload(payload: Payload) -> torch.Tensor:
    """Dense float32 tensor of a payload whose body is :func:`gcbench.core.codec.encode_sparse` (header k, coding)."""
    return decode_sparse(body_numpy(payload), payload.numel, meta_int(payload, "k"), meta_str(payload, "coding"), payload.codec)


def dense_from(idx: np.ndarray, vals: np.ndarray, d: int) -> torch.Tensor:
    """A fresh dense float32 CPU tensor with ``vals`` at ``idx`` and zeros elsewhere."""
    out = zeros_f32(d, touch=idx.size >= d // (1 << 16))
    if HAVE_NUMBA:
        scatter(out, idx, vals)
    else:  # pragma: no cover - numba missing
        out[idx] = vals
    return torch.from_numpy(out)


def decode_sparse(body: np.ndarray, d: int, k: int, coding: str, codec_name: str) -> torch.Tensor:
    """Dense float32 CPU tensor from a :func:`gcbench.core.codec.encode_sparse` body (new memory).

    The ``fixed`` coding decodes in one fused pass (:func:`unpack_scatter`) into a buffer from
    :func:`gcbench.kernels.empty_maybe_zero`: a freed earlier output of the same size is reused
    (no page faults) and cleared part by part inside that pass.  The other codings parse the
    indices first (:func:`gcbench.core.codec.decode_sparse`) and scatter them.
    """
    if not 0 <= k <= d:
        raise PayloadError(f"{codec_name} payload says {k} nonzeros in {d} elements")
    if k == 0:
        return torch.from_numpy(zeros_f32(d, touch=False))
    touch = k >= d // (1 << 16)  # fault the pages first unless very few are written
    if coding == "fixed" and HAVE_NUMBA and codec.index_width(d) <= 32:
        width = codec.index_width(d)
        need = 4 * k + codec.packed_nbytes(k, width)
        if len(body) < need:
            raise PayloadError(f"{codec_name} sparse body is truncated: need {need} bytes, have {len(body)}")
        result, is_zero = kernels.empty_maybe_zero(d)
        out = result.numpy()
        if is_zero and touch:
            prefault(out)
        vals = np.ascontiguousarray(body[: 4 * k]).view("<f4")
        bad = unpack_scatter(body[4 * k : need], width, vals, out, clear=not is_zero)
    else:
        out = zeros_f32(d, touch=touch)
        result = torch.from_numpy(out)
        vals, idx = codec.decode_sparse(body, d, k, coding)
        bad = scatter(out, idx, vals) if HAVE_NUMBA else 0
        if not HAVE_NUMBA:
            out[idx] = vals
    if bad:
        raise PayloadError(f"{codec_name} sparse body has an index outside the tensor")
    return result


def decode_sparse_reference(body: np.ndarray, d: int, k: int, coding: str) -> np.ndarray:
    """The plain decode :func:`decode_sparse` is checked against: parse every field (``fixed``
    bit by bit with ``np.unpackbits``; the other codings by :mod:`gcbench.core.codec`), then write the
    values in field order (a repeated index keeps its last value); raises like the fast path."""
    data = np.ascontiguousarray(body, dtype=np.uint8).ravel()
    if not 0 <= k <= d:
        raise PayloadError(f"payload says {k} nonzeros in {d} elements")
    if coding == "fixed":
        width = codec.index_width(d)
        need = 4 * k + codec.packed_nbytes(k, width)
        if len(data) < need:
            raise PayloadError("sparse body is truncated")
        vals = data[: 4 * k].view("<f4").astype(np.float32)
        bits = np.unpackbits(data[4 * k : need], count=k * width, bitorder="little").reshape(k, width).astype(np.int64)
        idx = (bits << np.arange(width, dtype=np.int64)).sum(axis=1)
        if idx.size and idx.max() >= d:
            raise PayloadError("sparse body has an index outside the tensor")
    else:
        vals, idx = codec.decode_sparse(data, d, k, coding)
    out = np.zeros(d, np.float32)
    last = idx.size - 1 - np.unique(idx[::-1], return_index=True)[1]  # each index's last occurrence
    out[idx[last]] = vals[last]
    return out


# ----------------------------------------------------------------------------- exact top-k

TOPK_SAMPLE = 1 << 18  # strided sample for the candidate threshold (≈ 1–2 ms to rank), at most a quarter of d
TOPK_MIN_SAMPLED = 1 << 16  # below this, the exact top-k is one np.partition of |x|
TOPK_SIGMAS = 6.0  # the threshold's sample rank sits this many binomial deviations past the target


@njit(**_KERNEL)
def _strided_abs(a, start, stride, m):  # pragma: no cover - numba
    out = np.empty(m, np.float32)
    for j in range(m):
        out[j] = abs(a[start + j * stride])
    return out


def topk_candidate_rank(m: int, k: int, d: int, widen: int) -> int:
    """Rank j (1 = largest) in a sample of ``m`` of d whose value should have at least k entries above it.

    A uniform sample holds about m·k/d entries at or above the k-th largest value, with a binomial
    spread of √(m·k/d); the rank ``TOPK_SIGMAS``·4^widen spreads further keeps more than k
    candidates with overwhelming probability.  The count is always checked, so no rank is unsafe:
    a too-high threshold costs a retry, never a wrong result.
    """
    mean = m * k / d
    return min(m, math.ceil(mean + TOPK_SIGMAS * 4**widen * math.sqrt(mean + 1.0)) + 1)


def kth_largest_np(values: np.ndarray, k: int) -> float:
    """The k-th largest entry of a 1-D array (k = 1 is the maximum), by ``np.partition``.

    The same value as ``torch.kthvalue(values, n − k + 1)`` (an order statistic does not depend on
    how ties are broken), computed on the calling thread: small torch ops right after the kernels
    wait for torch's worker threads to wake, which cost milliseconds each on a loaded machine.
    """
    n = values.size
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    return float(np.partition(values, n - k)[n - k])


def topk_among_np(vals: np.ndarray, k: int) -> np.ndarray:
    """Positions (ascending) of the k largest |vals|; among values equal to the k-th, the earliest."""
    mag = np.abs(vals)
    kth = np.partition(mag, mag.size - k)[mag.size - k]
    keep = mag > kth
    need = k - int(np.count_nonzero(keep))
    keep[np.flatnonzero(mag == kth)[:need]] = True
    return np.flatnonzero(keep)


def topk_among(vals: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`topk_among_np` in torch ops (any device)."""
    mag = vals.abs()
    kth = torch.kthvalue(mag, mag.numel() - k + 1).values
    keep = mag > kth
    need = k - int(keep.sum())
    keep[torch.nonzero(mag == kth).reshape(-1)[:need]] = True
    return torch.nonzero(keep).reshape(-1)


def topk_select(flat: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k of ``|flat|`` (1-D float32): (sorted int64 indices, their values).

    Candidates are all ``|x| >= t`` for a threshold ``t`` read from a strided sample of
    min(``TOPK_SAMPLE``, d/4) magnitudes; when at least k pass, the top k are all among them (the k-th
    largest |x| is then ≥ t), so the exact top-k of the candidates is the exact top-k of ``flat``.
    Among magnitudes equal to the k-th largest the lowest indices are kept (``torch.topk`` leaves
    that order unspecified).  If fewer than k pass, the threshold is lowered twice (×4 margin
    each), then ``torch.topk`` decides.  A NaN magnitude passes the scan; a NaN candidate hands the
    whole selection to ``torch.topk``, which ranks NaN first.
    """
    d = flat.numel()
    if k >= d:
        return torch.arange(d, dtype=torch.int64, device=flat.device), flat.clone()
    if not fast_cpu(flat):
        return topk_select_torch(flat, k)
    a = as_numpy(flat)
    if d < TOPK_MIN_SAMPLED:  # small: one partial sort on the calling thread
        if np.isnan(a).any():
            return topk_select_torch_exact(flat, k)
        keep = topk_among_np(a, k)
        return torch.from_numpy(keep), torch.from_numpy(a[keep])
    m = min(TOPK_SAMPLE, d // 4)
    stride = d // m
    sample = _strided_abs(a, stride // 2, stride, m)
    for widen in range(3):
        j = topk_candidate_rank(m, k, d, widen)
        t = np.float32(kth_largest_np(sample, j))
        counts = count_chunks(a, t, nan_pass=True)
        if int(counts.sum()) >= k:
            sel = select_encode(a, t, None, counts=counts, want_idx=True, nan_pass=True)
            assert sel.idx is not None and sel.vals is not None
            if np.isnan(sel.vals).any():
                break
            keep = topk_among_np(sel.vals, k)
            return torch.from_numpy(sel.idx[keep]), torch.from_numpy(sel.vals[keep])
        if j >= m:
            break
    return topk_select_torch_exact(flat, k)


def topk_select_torch(flat: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same selection in torch ops (any device): the same indices as :func:`topk_select`."""
    d = flat.numel()
    if k >= d:
        return torch.arange(d, dtype=torch.int64, device=flat.device), flat.clone()
    mag = flat.abs()
    if bool(torch.isnan(mag).any()):
        return topk_select_torch_exact(flat, k)
    keep = topk_among(flat, k)
    return keep, flat[keep]


def topk_select_torch_exact(flat: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk`` itself, indices sorted: the fallback (and what inputs holding NaN get)."""
    idx = torch.topk(flat.abs(), k, sorted=False).indices.sort().values
    return idx, flat[idx]


# ----------------------------------------------------------------------------- momentum correction (DGC, SDAGC)
#
# Element-wise arithmetic is written to round exactly like the torch ops it replaces
# (``x * coef``, ``u.mul_(m).add_(x)``, ``v.add_(u)``): float32 operands, one rounding per
# operation, no fused multiply-add (numba contracts nothing without fastmath).


@njit(**_KERNEL)
def _momentum_chunk(u, v, x, m, coef, use_coef):  # pragma: no cover - numba
    """u = m·u + x·coef; v = v + u on one chunk (float32, torch's rounding)."""
    for i in range(u.size):
        xi = x[i] * coef if use_coef else x[i]
        un = u[i] * m
        un = un + xi
        u[i] = un
        v[i] = v[i] + un


@njit(**_KERNEL)
def _momentum_count_kernel(c0, c1, u, v, x, m, coef, use_coef, t, chunk, counts):  # pragma: no cover - numba
    """Momentum update of chunks c0..c1, then counts[c] = #{|v| >= t} over the updated chunk (in cache)."""
    n = u.size
    for c in range(c0, c1):
        lo = c * chunk
        hi = min(lo + chunk, n)
        vb = v[lo:hi]
        _momentum_chunk(u[lo:hi], vb, x[lo:hi], m, coef, use_coef)
        counts[c] = _count_ge(vb, t)


@njit(**_KERNEL)
def _momentum_stats_kernel(c0, c1, u, v, x, m, coef, use_coef, chunk, means, m2s):  # pragma: no cover - numba
    """Momentum update of chunks c0..c1, then each chunk's mean and Σ(v − mean)² of v in float64."""
    n = u.size
    for c in range(c0, c1):
        lo = c * chunk
        hi = min(lo + chunk, n)
        vb = v[lo:hi]
        _momentum_chunk(u[lo:hi], vb, x[lo:hi], m, coef, use_coef)
        s = 0.0
        for i in range(vb.size):
            s += np.float64(vb[i])
        mean = s / vb.size
        q = 0.0
        for i in range(vb.size):
            dv = np.float64(vb[i]) - mean
            q += dv * dv
        means[c] = mean
        m2s[c] = q


@njit(**_KERNEL)
def _stats_kernel(c0, c1, v, chunk, means, m2s):  # pragma: no cover - numba
    """Each chunk's mean and Σ(v − mean)² in float64 (no update)."""
    n = v.size
    for c in range(c0, c1):
        lo = c * chunk
        vb = v[lo : min(lo + chunk, n)]
        s = 0.0
        for i in range(vb.size):
            s += np.float64(vb[i])
        mean = s / vb.size
        q = 0.0
        for i in range(vb.size):
            dv = np.float64(vb[i]) - mean
            q += dv * dv
        means[c] = mean
        m2s[c] = q


@njit(**_KERNEL)
def _momentum_sample_kernel(c0, c1, u, v, x, m, coef, use_coef, start, stride, out):  # pragma: no cover - numba
    """out[j] = |v_new| at position start + j·stride (items of 4096 samples), without writing u or v."""
    ns = out.size
    for c in range(c0, c1):
        lo = c * 4096
        for j in range(lo, min(lo + 4096, ns)):
            i = start + j * stride
            xi = x[i] * coef if use_coef else x[i]
            un = u[i] * m
            un = un + xi
            out[j] = abs(v[i] + un)


def _f32(value: float | None) -> tuple[np.float32, bool]:
    return (np.float32(1.0), False) if value is None else (np.float32(value), True)


def momentum_sample(u: np.ndarray, v: np.ndarray, x: np.ndarray, m: float, coef: float | None, start: int, stride: int,
                    count: int) -> np.ndarray:
    """|v| after the momentum update at positions ``start + j·stride`` (j < count), computed ahead of it."""
    out = np.empty(count, np.float32)
    c32, use = _f32(coef)
    items = n_chunks(count, 4096)
    run_chunks(_momentum_sample_kernel, items, count * 16, u, v, x, np.float32(m), c32, use, int(start), int(stride), out)
    return out


def momentum_update_count(u: np.ndarray, v: np.ndarray, x: np.ndarray, m: float, coef: float | None, t: np.float32) -> np.ndarray:
    """``u = m·u + coef·x``; ``v += u`` in place (one pass), returning per-chunk counts of ``|v| >= t``."""
    nch = n_chunks(u.size)
    counts = np.zeros(nch, np.int64)
    c32, use = _f32(coef)
    run_chunks(_momentum_count_kernel, nch, u.size, u, v, x, np.float32(m), c32, use, t, CHUNK, counts)
    return counts


def _combine_std(counts: np.ndarray, means: np.ndarray, m2s: np.ndarray) -> float:
    """Population std from per-chunk (count, mean, M2) by Chan et al.'s pairwise formula, float64."""
    n = counts.sum()
    mean = float((counts * means).sum() / n)
    m2 = float(m2s.sum() + (counts * (means - mean) ** 2).sum())
    return math.sqrt(max(m2, 0.0) / n)


def _chunk_sizes(n: int) -> np.ndarray:
    nch = n_chunks(n)
    sizes = np.full(nch, CHUNK, np.float64)
    sizes[-1] = n - CHUNK * (nch - 1)
    return sizes


def momentum_update_std(u: np.ndarray, v: np.ndarray, x: np.ndarray, m: float, coef: float | None) -> float:
    """``u = m·u + coef·x``; ``v += u`` in place (one pass), returning the population std of the new v.

    Per-chunk two-pass moments in float64 (the chunk is still in cache), combined exactly; equals
    ``torch.std(v, correction=0)`` after rounding to float32 (torch: float32 mean, then Σ(v − mean)²
    in float64 — both are within a few float64 ulps of the true value).
    """
    nch = n_chunks(u.size)
    means = np.zeros(nch, np.float64)
    m2s = np.zeros(nch, np.float64)
    c32, use = _f32(coef)
    run_chunks(_momentum_stats_kernel, nch, u.size, u, v, x, np.float32(m), c32, use, CHUNK, means, m2s)
    return _combine_std(_chunk_sizes(u.size), means, m2s)


def population_std(v: np.ndarray) -> float:
    """Population std of ``v`` (float64, chunked two-pass moments; see :func:`momentum_update_std`)."""
    nch = n_chunks(v.size)
    means = np.zeros(nch, np.float64)
    m2s = np.zeros(nch, np.float64)
    run_chunks(_stats_kernel, nch, v.size, v, CHUNK, means, m2s)
    return _combine_std(_chunk_sizes(v.size), means, m2s)


# ----------------------------------------------------------------------------- AdaComp


@njit(nogil=True, cache=True, fastmath={"nnan", "nsz"})
def _absmax_nonan(b):  # pragma: no cover - numba
    """max |b| for NaN-free ``b`` (the no-NaN flag lets LLVM vectorise the reduction; callers check NaN)."""
    mx = np.float32(0.0)
    for i in range(b.size):
        ag = abs(b[i])
        mx = ag if ag > mx else mx
    return mx


@njit(**_KERNEL)
def _count_nan(b):  # pragma: no cover - numba
    cnt = 0
    for i in range(b.size):
        cnt += b[i] != b[i]
    return cnt


@njit(**_KERNEL)
def _adacomp_bin1(eb, xb):  # pragma: no cover - numba
    """One bin of pass 1: eb = G = eb + xb; returns (gmax = max |G|, NaN if any NaN; #{|G + x| >= gmax, G != 0})."""
    for i in range(eb.size):
        eb[i] = eb[i] + xb[i]
    mx = np.float32(np.nan) if _count_nan(eb) else _absmax_nonan(eb)
    cnt = 0
    for i in range(eb.size):
        g = eb[i]
        cnt += (abs(g + xb[i]) >= mx) & (g != 0)
    return mx, cnt


@njit(**_KERNEL)
def _adacomp_pass1(b0, b1, e, x, L, gmax, counts):  # pragma: no cover - numba
    """Bins b0..b1: e = G = e + x in place, gmax_b = max |G| (NaN if any), counts_b = #{|G + x| >= gmax_b, G != 0}."""
    d = e.size
    for b in range(b0, b1):
        lo = b * L
        hi = min(lo + L, d)
        mx, cnt = _adacomp_bin1(e[lo:hi], x[lo:hi])
        gmax[b] = mx
        counts[b] = cnt


@njit(**_KERNEL)
def _adacomp_bin2(eb, xb, mx, scale, sign_mode, lf, lv, db):  # pragma: no cover - numba
    """One bin of pass 2: fields (and values) of the selected entries into lf/lv (branch-free), then
    eb = G − Gq and, when ``db`` is non-empty, db = Gq at the selected entries.  Returns how many."""
    m = 0
    for i in range(eb.size):
        g = eb[i]
        sel = (abs(g + xb[i]) >= mx) & (g != 0)
        lf[m] = (i << 1) | np.int32(g < 0) if sign_mode else i
        lv[m] = g
        m += sel
    nscale = -scale
    for i in range(eb.size):  # branch-free: the selection is unpredictable at AdaComp's densities
        g = eb[i]
        sel = (abs(g + xb[i]) >= mx) & (g != 0)
        q = (scale if g > 0 else nscale) if sign_mode else g
        eb[i] = g - q if sel else g
        if db.size > 0 and sel:
            db[i] = q
    return m


@njit(**_KERNEL)
def _adacomp_pass2(b0, b1, e, x, L, gmax, counts, offsets, scale, sign_mode, fields, vals, dec):  # pragma: no cover - numba
    """Bins b0..b1: the selected elements' fields (index in bin, sign bit) and new residue e = G − Gq."""
    d = e.size
    do_dec = dec.size > 0
    do_vals = vals.size > 0
    lf = np.empty(L + 1, np.int32)
    lv = np.empty(L + 1, np.float32)
    empty = np.empty(0, np.float32)
    for b in range(b0, b1):
        if counts[b] == 0:
            continue
        lo = b * L
        hi = min(lo + L, d)
        m = _adacomp_bin2(e[lo:hi], x[lo:hi], gmax[b], scale, sign_mode, lf, lv, dec[lo:hi] if do_dec else empty)
        pos = offsets[b]
        _copy(fields[pos : pos + m], lf[:m])
        if do_vals:
            _copy(vals[pos : pos + m], lv[:m])


def adacomp_select(e: np.ndarray, x: np.ndarray, L: int) -> tuple[np.ndarray, np.ndarray]:
    """Pass 1 of AdaComp on flat float32 arrays: ``e`` becomes G = e + x; returns (gmax, counts) per bin."""
    nbins = -(-e.size // L)
    gmax = np.empty(nbins, np.float32)
    counts = np.empty(nbins, np.int64)
    run_chunks(_adacomp_pass1, nbins, e.size, e, x, L, gmax, counts)
    return gmax, counts


def adacomp_finish(e: np.ndarray, x: np.ndarray, L: int, gmax: np.ndarray, counts: np.ndarray, scale: np.float32, sign_mode: bool,
                   want_decoded: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Pass 2: (fields, values for 'none' mode, decoded or None); ``e`` becomes the residue G − Gq."""
    offsets = np.zeros(counts.size, np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    nsel = int(counts.sum())
    fields = prefault(np.empty(nsel, np.int32))  # index in bin (< 2^31) and sign bit
    vals = prefault(np.empty(0 if sign_mode else nsel, np.float32))
    dec = zeros_f32(e.size) if want_decoded else _E_F32
    run_chunks(_adacomp_pass2, counts.size, e.size, e, x, L, gmax, counts, offsets, np.float32(scale), sign_mode, fields, vals, dec)
    return fields, vals, (dec if want_decoded else None)


@njit(**_KERNEL)
def _read_fixed_kernel(c0, c1, words, tailword, width, bit0, out):  # pragma: no cover - numba
    """out[i] = the width-bit field at stream bit ``bit0 + i·width`` (items of 4096 fields; see :func:`as_words`)."""
    n = out.size
    nw = words.size
    mask = np.uint64((1 << width) - 1)
    for c in range(c0, c1):
        lo = c * 4096
        hi = min(lo + 4096, n)
        bit = bit0 + lo * width
        wpos = bit >> 5
        w0 = words[wpos] if wpos < nw else tailword
        acc = np.uint64(w0) >> np.uint64(bit & 31)
        nacc = 32 - (bit & 31)
        wpos += 1
        for i in range(lo, hi):
            if nacc < width:
                w = words[wpos] if wpos < nw else tailword
                acc |= np.uint64(w) << np.uint64(nacc)
                wpos += 1
                nacc += 32
            out[i] = np.int64(acc & mask)
            acc >>= np.uint64(width)
            nacc -= width


def read_fixed(data: np.ndarray, width: int, count: int, bit0: int = 0) -> np.ndarray:
    """``count`` fields of ``width`` bits (1..32) from stream bit ``bit0`` (the caller checks the length)."""
    out = prefault(np.empty(count, np.int64))
    if count:
        items = n_chunks(count, 4096)
        words, tailword = as_words(data)
        run_chunks(_read_fixed_kernel, items, count * 8, words, tailword, width, int(bit0), out)
    return out


@njit(**_KERNEL)
def _adacomp_scatter_kernel(b0, b1, fields, counts, offsets, L, sign_mode, scale, vals, out, bad):  # pragma: no cover - numba
    """out[b·L + within] = ±scale (sign bit) or vals[pos] for the fields of bins b0..b1; counts bad indices."""
    d = out.size
    nscale = -scale
    for b in range(b0, b1):
        pos = offsets[b]
        for j in range(counts[b]):
            f = fields[pos + j]
            within = f >> 1 if sign_mode else f
            i = b * L + within
            if within >= L or i >= d:
                bad[b] += 1
                continue
            if sign_mode:
                out[i] = nscale if (f & 1) else scale
            else:
                out[i] = vals[pos + j]


def adacomp_scatter(fields: np.ndarray, counts: np.ndarray, L: int, sign_mode: bool, scale: float, vals: np.ndarray,
                    d: int) -> torch.Tensor:
    """The dense AdaComp decode from parsed fields (fresh NumPy-backed float32); raises on bad indices."""
    out = zeros_f32(d, touch=fields.size >= d // (1 << 16))
    offsets = np.zeros(counts.size, np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    bad = np.zeros(counts.size, np.int64)
    run_chunks(_adacomp_scatter_kernel, counts.size, max(d, 1), fields, counts, offsets, L, sign_mode, np.float32(scale),
               vals, out, bad)
    if bad.any():
        raise PayloadError("adacomp body has an index outside its bin")
    return torch.from_numpy(out)
