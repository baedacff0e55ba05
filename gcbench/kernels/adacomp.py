"""AdaComp (Chen et al. 2018): per-bin max, selection, residue update and the decode scatter.
"""

from __future__ import annotations

import numpy as np
import torch

from gcbench.kernels.bits import _copy
from gcbench.kernels.buffers import empty_maybe_zero, prefault, zeros_f32
from gcbench.kernels.runtime import KERNEL, bounds, njit, run_chunks
from gcbench.kernels.scatter import _fill_zero
from gcbench.kernels.select import _E_F32

# ----------------------------------------------------------------------------- AdaComp


@njit(nogil=True, cache=True, fastmath={"nnan", "nsz"})
def _absmax_nonan(b):  # pragma: no cover - numba
    """max |b| for NaN-free ``b`` (the no-NaN flag lets LLVM vectorise the reduction; callers check NaN)."""
    mx = np.float32(0.0)
    for i in range(b.size):
        ag = abs(b[i])
        mx = ag if ag > mx else mx
    return mx


@njit(**KERNEL)
def _count_nan(b):  # pragma: no cover - numba
    cnt = 0
    for i in range(b.size):
        cnt += b[i] != b[i]
    return cnt


@njit(**KERNEL)
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


@njit(**KERNEL)
def _adacomp_pass1(b0, b1, e, x, L, gmax, counts):  # pragma: no cover - numba
    """Bins b0..b1: e = G = e + x in place, gmax_b = max |G| (NaN if any), counts_b = #{|G + x| >= gmax_b, G != 0}."""
    d = e.size
    for b in range(b0, b1):
        lo, hi = bounds(b, L, d)
        mx, cnt = _adacomp_bin1(e[lo:hi], x[lo:hi])
        gmax[b] = mx
        counts[b] = cnt


@njit(**KERNEL)
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


@njit(**KERNEL)
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
        lo, hi = bounds(b, L, d)
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



@njit(**KERNEL)
def _adacomp_scatter_kernel(b0, b1, fields, counts, offsets, L, sign_mode, scale, vals, out, bad, clear):  # pragma: no cover - numba
    """out[b·L + within] = ±scale (sign bit) or vals[pos] for the fields of bins b0..b1, each bin
    first cleared when ``clear`` (a reused buffer: cleared while in cache); counts bad indices."""
    d = out.size
    nscale = -scale
    for b in range(b0, b1):
        if clear:
            lo, hi = bounds(b, L, d)
            _fill_zero(out[lo:hi])
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
                    d: int) -> tuple[torch.Tensor, int]:
    """The dense AdaComp decode from parsed fields (fresh float32) and how many fields lay outside their bin (skipped).

    The bins cover the output, so a reused buffer is cleared bin by bin inside the scatter, not by
    a separate fill (a torch fill's OpenMP workers spin against the scatter's threads afterwards:
    the decode took 5.6x a copy that way against 4.0x before the package).
    """
    buf, zero = empty_maybe_zero(d)
    out = buf.numpy()
    if zero and fields.size >= d // (1 << 16):
        prefault(out)  # many writes: fault the fresh pages on this thread first
    offsets = np.zeros(counts.size, np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    bad = np.zeros(counts.size, np.int64)
    run_chunks(_adacomp_scatter_kernel, counts.size, max(d, 1), fields, counts, offsets, L, sign_mode, np.float32(scale),
               vals, out, bad, not zero)
    return buf, int(bad.sum())
