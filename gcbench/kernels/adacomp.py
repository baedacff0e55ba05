"""AdaComp (Chen et al. 2018): the encode in two passes over the bins, and the decode scatter.

The encode reads the residue ``e`` and the gradient ``x`` twice and writes ``e`` once, about 20
bytes per element against a copy's 8 (the least a bin maximum that every selection of its bin
depends on allows, with the scale a mean over all bins): pass 1 (:func:`adacomp_bin_stats`) only
reads, for each bin's max |G| and selection count; pass 2 (:func:`adacomp_encode`) recomputes G
bin by bin, packs the selected fields straight into the bit stream (no field array) and leaves the
residue G − Gq in place.  Both passes keep one bin in L1 between their loops over it.
"""

from __future__ import annotations

import numpy as np
import torch

from gcbench.kernels.bits import BitWriterSides, _copy, _pack_place, as_words
from gcbench.kernels.buffers import empty_f32_tensor, empty_maybe_zero, prefault
from gcbench.kernels.runtime import KERNEL, bits_f32, bounds, ctz64, f32_bits, launches, njit, prange, run_chunks
from gcbench.kernels.scatter import _fill_zero

_ABS = np.int32(0x7FFFFFFF)  # the sign bit cleared: |v| as an int32 bit pattern
_INF = np.int32(0x7F800000)  # patterns above this are NaN
_ITEM = 1 << 15  # elements (whole bins) per pass-2 work item: its fields are packed and placed at once

# ----------------------------------------------------------------------------- AdaComp


@njit(**KERNEL)
def _bin_max(eb, xb):  # pragma: no cover - numba
    """max |eb + xb| of one bin, NaN if any sum is NaN (an integer max of the bit patterns)."""
    m = np.int32(0)
    for i in range(eb.size):
        b = f32_bits(eb[i] + xb[i]) & _ABS
        m = b if b > m else m
    return np.float32(np.nan) if m > _INF else bits_f32(m)


@njit(**KERNEL)
def _bin_count(eb, xb, mx):  # pragma: no cover - numba
    """#{i : |G_i + x_i| >= mx, G_i != 0} with G = eb + xb (nothing when ``mx`` is NaN)."""
    cnt = 0
    for i in range(eb.size):
        g = eb[i] + xb[i]
        cnt += (abs(g + xb[i]) >= mx) & (g != 0)
    return cnt


@njit(**KERNEL)
def _adacomp_stats(b0, b1, e, x, L, gmax, counts):  # pragma: no cover - numba
    """Bins b0..b1 of pass 1: gmax_b = max |G| (NaN if any), counts_b = #selected; ``e`` is only read."""
    d = e.size
    for b in range(b0, b1):
        lo, hi = bounds(b, L, d)
        mx = _bin_max(e[lo:hi], x[lo:hi])
        gmax[b] = mx
        counts[b] = _bin_count(e[lo:hi], x[lo:hi], mx)


@launches(_adacomp_stats)
def _adacomp_stats_par(nth, n, *args):  # pragma: no cover - numba
    for p in prange(nth):
        _adacomp_stats(n * p // nth, n * (p + 1) // nth, *args)


@njit(**KERNEL)
def _bin_fields(eb, xb, mx, sign_mode, lf, lv, m, s64):  # pragma: no cover - numba
    """Append the bin's selected fields (index in bin, then the sign bit in ``sign_mode``) to lf from
    ``m`` on, and their G to lv when lv is not empty; returns the new m.

    A vectorised loop marks the selection as bytes (``s64``: scratch of ≥ ceil(n/64)·8 words), eight
    bytes become eight bits by one multiplication, and the selected entries are visited by their
    bit positions: the scalar work is per selected entry, not per element (a branch-free compaction
    over every element took 1.8 ns per element here, three quarters of the encode).
    """
    n = eb.size
    s8 = s64.view(np.uint8)
    for i in range(n):
        g = eb[i] + xb[i]
        s8[i] = np.uint8((abs(g + xb[i]) >= mx) & (g != 0))
    npad = ((n + 63) >> 6) << 6
    for i in range(n, npad):
        s8[i] = 0
    with_vals = lv.size > 0
    for w in range(npad >> 6):
        mask = np.uint64(0)
        for t in range(8):  # bytes 0/1 -> bits: byte j of the product's top byte is byte j's bit
            mask |= ((s64[8 * w + t] * np.uint64(0x0102040810204080)) >> np.uint64(56)) << np.uint64(8 * t)
        while mask:
            i = (w << 6) + np.int64(ctz64(mask))
            mask &= mask - np.uint64(1)
            g = eb[i] + xb[i]
            lf[m] = (i << 1) | np.int64(g < 0) if sign_mode else i
            if with_vals:
                lv[m] = g
            m += 1
    return m


@njit(**KERNEL)
def _bin_signs(eb, xb, mx, scale, lf, m, s64, db):  # pragma: no cover - numba
    """:func:`_bin_fields` and :func:`_bin_update` of one bin in ``sign_scale`` mode, fused: one
    vectorised loop forms G, selects, leaves the residue G − Gq in ``eb`` (and Gq in ``db`` when
    not empty) and marks each element's byte with its selection (bit 0) and sign (bit 1); the
    selected fields are then read off those bytes.  The bin's elements are read and written once
    instead of G being formed three times (pass 2 of the bench row: 1.51 → 1.33 ns per element
    on one thread).  Returns the new m.
    """
    n = eb.size
    s8 = s64.view(np.uint8)
    nscale = -scale
    if db.size > 0:
        for i in range(n):
            g = eb[i] + xb[i]
            sel = (abs(g + xb[i]) >= mx) & (g != 0)
            q = (scale if g > 0 else nscale) if sel else np.float32(0.0)
            eb[i] = g - q
            db[i] = q
            s8[i] = np.uint8(sel) | (np.uint8(g < 0) << np.uint8(1))
    else:
        for i in range(n):
            g = eb[i] + xb[i]
            sel = (abs(g + xb[i]) >= mx) & (g != 0)
            q = (scale if g > 0 else nscale) if sel else np.float32(0.0)
            eb[i] = g - q
            s8[i] = np.uint8(sel) | (np.uint8(g < 0) << np.uint8(1))
    npad = ((n + 63) >> 6) << 6
    for i in range(n, npad):
        s8[i] = 0
    low = np.uint64(0x0101010101010101)
    for w in range(npad >> 6):
        mask = np.uint64(0)
        for t in range(8):  # bit 0 of bytes -> bits, as in :func:`_bin_fields`
            mask |= (((s64[8 * w + t] & low) * np.uint64(0x0102040810204080)) >> np.uint64(56)) << np.uint64(8 * t)
        while mask:
            i = (w << 6) + np.int64(ctz64(mask))
            mask &= mask - np.uint64(1)
            lf[m] = (i << 1) | np.int64(s8[i] >> np.uint8(1))
            m += 1
    return m


@njit(**KERNEL)
def _bin_update(eb, xb, mx, scale, sign_mode, db):  # pragma: no cover - numba
    """eb = G − Gq for one bin (Gq = ±scale, or G when not ``sign_mode``, at the selected entries),
    and db = Gq (zero elsewhere) when ``db`` is not empty."""
    nscale = -scale
    if db.size > 0:
        for i in range(eb.size):
            g = eb[i] + xb[i]
            sel = (abs(g + xb[i]) >= mx) & (g != 0)
            q = ((scale if g > 0 else nscale) if sign_mode else g) if sel else np.float32(0.0)
            eb[i] = g - q
            db[i] = q
    else:
        for i in range(eb.size):
            g = eb[i] + xb[i]
            sel = (abs(g + xb[i]) >= mx) & (g != 0)
            q = ((scale if g > 0 else nscale) if sign_mode else g) if sel else np.float32(0.0)
            eb[i] = g - q


@njit(**KERNEL)
def _adacomp_encode(c0, c1, e, x, L, per_item, gmax, item_pos, scale, sign_mode, width, bit0, out, heads, tails, tail_pos,
                    firsts, shared, vals, dec):  # pragma: no cover - numba
    """Items c0..c1 of pass 2 (item c: bins [c·per_item, …)): each bin's fields into a local list, the
    residue G − Gq (and ``dec`` = Gq) written while the bin is in cache, then the item's fields packed
    ``width`` bits each at stream bit ``bit0 + item_pos[c]·width`` (the fields before it) and placed."""
    d = e.size
    nbins = gmax.size
    n_item = per_item * L
    lf = np.empty(n_item + 1, np.int32)
    lv = np.empty(n_item + 1 if vals.size > 0 else 0, np.float32)
    l32 = np.empty((n_item * width + 7) // 32 + 2, np.uint32)
    mask = np.uint64((1 << width) - 1)
    s64 = np.empty((L + 63) // 64 * 8, np.uint64)
    empty = np.empty(0, np.float32)
    for c in range(c0, c1):
        m = 0
        for b in range(c * per_item, min(nbins, (c + 1) * per_item)):
            lo, hi = bounds(b, L, d)
            mx = gmax[b]
            db = dec[lo:hi] if dec.size > 0 else empty
            if sign_mode:
                m = _bin_signs(e[lo:hi], x[lo:hi], mx, scale, lf, m, s64, db)
            else:
                m = _bin_fields(e[lo:hi], x[lo:hi], mx, sign_mode, lf, lv, m, s64)
                _bin_update(e[lo:hi], x[lo:hi], mx, scale, sign_mode, db)
        pos = item_pos[c]
        if width > 0:
            _pack_place(lf[:m], 0, mask, width, bit0 + pos * width, c, l32, out, heads, tails, tail_pos, firsts, shared)
        if vals.size > 0:
            _copy(vals[pos : pos + m], lv[:m])


@launches(_adacomp_encode)
def _adacomp_encode_par(nth, n, *args):  # pragma: no cover - numba
    for p in prange(nth):
        _adacomp_encode(n * p // nth, n * (p + 1) // nth, *args)


def _items(counts: np.ndarray, L: int) -> tuple[int, np.ndarray]:
    """The work items of pass 2 and of the decode: (bins per item, fields before each item)."""
    per_item = max(1, _ITEM // L)
    items = -(-counts.size // per_item)
    item_pos = np.zeros(items, np.int64)
    if items > 1:
        np.cumsum(counts[: (items - 1) * per_item].reshape(items - 1, per_item).sum(axis=1), out=item_pos[1:])
    return per_item, item_pos


def adacomp_bin_stats(e: np.ndarray, x: np.ndarray, L: int) -> tuple[np.ndarray, np.ndarray]:
    """Pass 1 of AdaComp on flat float32 arrays (``e`` the residue, unchanged): (gmax, counts) per bin
    of G = e + x — gmax_b = max |G| over bin b (NaN if any G is), counts_b = #{|G + x| >= gmax_b, G != 0}."""
    nbins = -(-e.size // L)
    gmax = np.empty(nbins, np.float32)
    counts = np.empty(nbins, np.int64)
    run_chunks(_adacomp_stats, nbins, e.size, e, x, L, gmax, counts)
    return gmax, counts


def adacomp_encode(e: np.ndarray, x: np.ndarray, L: int, gmax: np.ndarray, counts: np.ndarray, scale: np.float32, sign_mode: bool,
                   width: int, stream: np.ndarray, bit0: int, want_decoded: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Pass 2: the selected fields (index in bin, then the sign bit in ``sign_mode``), ``width`` bits each,
    LSB first into ``stream`` from bit ``bit0`` (zero there: shared bytes are OR-ed), and ``e`` the
    residue G − Gq in place.  Returns (the selected G in 'none' mode, else empty; Gq or None)."""
    per_item, item_pos = _items(counts, L)
    items = item_pos.size
    vals = prefault(np.empty(0 if sign_mode else int(counts.sum()), np.float32))
    dec = empty_f32_tensor(e.size).numpy() if want_decoded else np.empty(0, np.float32)
    sides = BitWriterSides(items)
    run_chunks(_adacomp_encode, items, e.size, e, x, L, per_item, gmax, item_pos, np.float32(scale), sign_mode, width, int(bit0),
               stream, sides.heads, sides.tails, sides.tail_pos, sides.firsts, sides.shared, vals, dec)
    sides.fixup(stream)
    return vals, (dec if want_decoded else None)


@njit(**KERNEL)
def _adacomp_decode(c0, c1, words, tailword, width, bit0, counts, per_item, item_pos, L, sign_mode, scale, vals, out, bad,
                    clear):  # pragma: no cover - numba
    """Items c0..c1 (bins [c·per_item, …)) of the decode: each item's output cleared while in cache when
    ``clear`` (a reused buffer), then its fields read from stream bit ``bit0 + item_pos[c]·width`` on
    (see :func:`gcbench.kernels.bits.as_words`) and written: ±scale by the sign bit, or ``vals``;
    ``bad[c]`` counts the fields that point outside their bin (skipped)."""
    d = out.size
    nbins = counts.size
    nw = words.size
    mask = np.uint64((1 << width) - 1)
    uw = np.uint64(width)
    sbits = f32_bits(scale)
    for c in range(c0, c1):
        b_lo = c * per_item
        b_hi = min(nbins, b_lo + per_item)
        if clear:
            _fill_zero(out[b_lo * L : min(d, b_hi * L)])
        pos = item_pos[c]
        bit = bit0 + pos * width
        wpos = bit >> 5
        acc = np.uint64(words[wpos] if wpos < nw else tailword) >> np.uint64(bit & 31)
        nacc = 32 - (bit & 31)
        wpos += 1
        for b in range(b_lo, b_hi):
            base = b * L
            for _ in range(counts[b]):
                if nacc < width:
                    acc |= np.uint64(words[wpos] if wpos < nw else tailword) << np.uint64(nacc)
                    wpos += 1
                    nacc += 32
                f = np.int64(acc & mask)
                acc >>= uw
                nacc -= width
                within = f >> 1 if sign_mode else f
                i = base + within
                if within >= L or i >= d:
                    bad[c] += 1
                elif sign_mode:  # ±scale by flipping the sign bit: a branch on the (random) sign bit
                    out[i] = bits_f32(sbits ^ (np.int32(f & 1) << np.int32(31)))  # was 9.6 ns per field, this 2.9
                else:
                    out[i] = vals[pos]
                pos += 1


@launches(_adacomp_decode)
def _adacomp_decode_par(nth, n, *args):  # pragma: no cover - numba
    for p in prange(nth):
        _adacomp_decode(n * p // nth, n * (p + 1) // nth, *args)


def adacomp_decode(stream: np.ndarray, bit0: int, width: int, counts: np.ndarray, L: int, sign_mode: bool, scale: float,
                   vals: np.ndarray, d: int) -> tuple[torch.Tensor, int]:
    """The dense AdaComp decode (fresh float32) straight from the bit stream — fields of ``width`` bits
    from ``bit0`` on, ``counts`` per bin — and how many fields lay outside their bin (skipped).

    The bins cover the output, so a reused buffer is cleared item by item inside the kernel, not by
    a separate fill (a torch fill's OpenMP workers spin against the kernel's threads afterwards: the
    decode took 5.6x a copy that way against 4.0x before the package).
    """
    buf, zero = empty_maybe_zero(d)
    out = buf.numpy()
    nsel = int(counts.sum())
    if zero and nsel >= d // (1 << 16):
        prefault(out)  # many writes: fault the fresh pages on this thread first
    per_item, item_pos = _items(counts, L)
    items = item_pos.size
    bad = np.zeros(items, np.int64)
    words, tailword = as_words(stream)
    run_chunks(_adacomp_decode, items, max(d, 1), words, tailword, width, int(bit0), counts, per_item, item_pos, L, sign_mode,
               np.float32(scale), vals, out, bad, not zero)
    return buf, int(bad.sum())
