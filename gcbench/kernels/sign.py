"""Sign and 1-bit SGD: the sign bits, scales and error-feedback residual, fused.

The kernels work in the error-feedback residual buffer: the first pass forms a = x + e there with
the sums the scales need, the second writes the bits and leaves the new residual.
"""

from __future__ import annotations

import numpy as np

from gcbench.kernels.bits import load_le, store_le
from gcbench.kernels.runtime import PARALLEL, PART, bounds, n_chunks, n_parts, njit, prange, run_parallel

# ----------------------------------------------------------------------------- sign / 1-bit


@njit(cache=True)
def _sign_bits(a, out):  # pragma: no cover - compiled
    """Bits (a >= 0) of a (NaN gives 0) LSB-first into out[:ceil(m/8)], 64 per register."""
    m = a.size
    full = m // 64
    for g in range(full):
        s = a[g * 64 : g * 64 + 64]
        acc = np.uint64(0)
        for t in range(64):
            acc |= np.uint64(s[t] >= 0) << np.uint64(t)
        store_le(acc, out[g * 8 : g * 8 + 8], 8)
    if full * 64 < m:
        s = a[full * 64 : m]
        o = out[full * 8 : (m + 7) // 8]
        for b in range(o.size):
            o[b] = 0
        for t in range(s.size):
            if s[t] >= 0:
                o[t >> 3] |= np.uint8(1 << (t & 7))


@njit(cache=True)
def _any_nonzero(a):  # pragma: no cover - compiled
    nz = np.uint8(0)
    for i in range(a.size):
        nz |= np.uint8(a[i] != 0)
    return nz


@njit(cache=True)
def _bits_to_values(bits, pos, neg, out):  # pragma: no cover - compiled
    """out[i] = pos where bit i is set, else neg."""
    m = out.size
    full = m // 64
    for g in range(full):
        acc = load_le(bits[g * 8 : g * 8 + 8], 8)
        o = out[g * 64 : g * 64 + 64]
        for t in range(64):
            o[t] = pos if (acc >> np.uint64(t)) & np.uint64(1) else neg
    if full * 64 < m:
        d = bits[full * 8 : (m + 7) // 8]
        o = out[full * 64 : m]
        for t in range(o.size):
            o[t] = pos if (d[t >> 3] >> (t & 7)) & 1 else neg


@njit(**PARALLEL)
def _sign_pack_kernel(x, out, nz):  # pragma: no cover - compiled
    n = x.size
    for p in prange(nz.size):
        lo, hi = bounds(p, PART, n)
        _sign_bits(x[lo:hi], out[lo // 8 : (hi + 7) // 8])
        nz[p] = _any_nonzero(x[lo:hi])


def sign_pack(x: np.ndarray, out: np.ndarray) -> bool:
    """Write the bits ``x >= 0`` of float32 ``x`` into ``out`` (ceil(n/8) bytes, LSB first).

    Returns whether any element is nonzero (signSGD's all-zero flag), from the same pass.
    """
    if x.size == 0:
        return False
    nz = np.empty(n_chunks(x.size), np.uint8)
    run_parallel(_sign_pack_kernel, x.size, x, out, nz)
    return bool(nz.any())


@njit(**PARALLEL)
def _sign_unpack_kernel(bits, pos, neg, out):  # pragma: no cover - compiled
    n = out.size
    for p in prange(n_parts(n)):
        lo, hi = bounds(p, PART, n)
        _bits_to_values(bits[lo // 8 : (hi + 7) // 8], pos, neg, out[lo:hi])


def sign_unpack(bits: np.ndarray, pos: float, neg: float, out: np.ndarray) -> None:
    """out[i] = pos where bit i is set else neg (float32 ``out``)."""
    if out.size:
        run_parallel(_sign_unpack_kernel, out.size, bits, np.float32(pos), np.float32(neg), out)


@njit(cache=True, fastmath={"reassoc"})
def _add_abs(x, e, has_e):  # pragma: no cover - compiled
    """e <- a = x + e (or x); returns Σ|a| in float64."""
    acc = 0.0
    if has_e:
        for i in range(x.size):
            a = x[i] + e[i]
            e[i] = a
            acc += abs(np.float64(a))
    else:
        for i in range(x.size):
            a = x[i]
            e[i] = a
            acc += abs(np.float64(a))
    return acc


@njit(cache=True)
def _sub_sign_scale(e, scale):  # pragma: no cover - compiled
    """e <- a − (scale if a >= 0 else −scale), float32."""
    neg = -scale
    for i in range(e.size):
        a = e[i]
        e[i] = a - (scale if a >= 0 else neg)


@njit(**PARALLEL)
def _ef_add_abs_kernel(x, e, has_e, parts):  # pragma: no cover - compiled
    n = x.size
    for p in prange(parts.size):
        lo, hi = bounds(p, PART, n)
        parts[p] = _add_abs(x[lo:hi], e[lo:hi], has_e)


@njit(**PARALLEL)
def _ef_sign_kernel(e, scale, out):  # pragma: no cover - compiled
    n = e.size
    for p in prange(n_parts(n)):
        lo, hi = bounds(p, PART, n)
        _sign_bits(e[lo:hi], out[lo // 8 : (hi + 7) // 8])
        _sub_sign_scale(e[lo:hi], scale)


def ef_sign_form(x: np.ndarray, e: np.ndarray, has_e: bool) -> np.float32:
    """Pass 1 of EF-signSGD: a = x + e written into ``e`` (``has_e`` False: a = x), with ‖a‖₁ in
    the same pass.  Returns the float32 scale ‖a‖₁/d that is sent (pass 2: :func:`ef_sign_apply`)."""
    parts = np.empty(n_chunks(x.size), np.float64)
    run_parallel(_ef_add_abs_kernel, x.size, x, e, bool(has_e), parts)
    return np.float32(float(parts.sum()) / x.size)


def ef_sign_apply(e: np.ndarray, scale: np.float32, out: np.ndarray) -> None:
    """Pass 2 of EF-signSGD on ``e`` holding a: the bits a >= 0 into ``out``, then e <- a − sign(a)·scale."""
    run_parallel(_ef_sign_kernel, e.size, e, np.float32(scale), out)


# 1-bit SGD: the flat tensor is a rows × cols matrix (row-major); each element's group is its
# column (``by_row`` False) or its row.  One group for the whole tensor is one long row.


@njit(cache=True, fastmath={"reassoc"})
def _add_col_sums(x, e, has_e, sa, sp, cp):  # pragma: no cover - compiled
    """e <- a = x (+ e); per position j (a column): sa += a, sp += a·[a ≥ 0], cp += [a ≥ 0]."""
    for j in range(x.size):
        a = x[j] + e[j] if has_e else x[j]
        e[j] = a
        a64 = np.float64(a)
        pos = a >= 0
        sa[j] += a64
        sp[j] += a64 if pos else 0.0
        cp[j] += 1.0 if pos else 0.0


@njit(cache=True, fastmath={"reassoc"})
def _add_row_sums(x, e, has_e):  # pragma: no cover - compiled
    """e <- a = x (+ e); returns (Σ a, Σ a·[a ≥ 0], #[a ≥ 0]) in float64."""
    sa = 0.0
    sp = 0.0
    cp = 0.0
    for j in range(x.size):
        a = x[j] + e[j] if has_e else x[j]
        e[j] = a
        a64 = np.float64(a)
        pos = a >= 0
        sa += a64
        sp += a64 if pos else 0.0
        cp += 1.0 if pos else 0.0
    return sa, sp, cp


@njit(cache=True, fastmath={"reassoc"})
def _add_col_sums4(x0, x1, x2, x3, e0, e1, e2, e3, has_e, sa, sp, cp):  # pragma: no cover - compiled
    """:func:`_add_col_sums` for four rows at once: the accumulators are read and written once
    per four elements (the column sums ran at half the speed of a copy one row at a time)."""
    for j in range(x0.size):
        a0 = x0[j] + e0[j] if has_e else x0[j]
        a1 = x1[j] + e1[j] if has_e else x1[j]
        a2 = x2[j] + e2[j] if has_e else x2[j]
        a3 = x3[j] + e3[j] if has_e else x3[j]
        e0[j] = a0
        e1[j] = a1
        e2[j] = a2
        e3[j] = a3
        b0 = np.float64(a0)
        b1 = np.float64(a1)
        b2 = np.float64(a2)
        b3 = np.float64(a3)
        sa[j] += (b0 + b1) + (b2 + b3)
        sp[j] += ((b0 if a0 >= 0 else 0.0) + (b1 if a1 >= 0 else 0.0)) + ((b2 if a2 >= 0 else 0.0) + (b3 if a3 >= 0 else 0.0))
        cp[j] += ((1.0 if a0 >= 0 else 0.0) + (1.0 if a1 >= 0 else 0.0)) + ((1.0 if a2 >= 0 else 0.0) + (1.0 if a3 >= 0 else 0.0))


@njit(**PARALLEL)
def _onebit_colstats_kernel(x, e, has_e, cols, nchunks, sums):  # pragma: no cover - compiled
    """Column groups: chunk c (a fixed range of whole rows) accumulates sums[c, 0..2, :]."""
    rows = x.size // cols
    for c in prange(nchunks):
        r0 = rows * c // nchunks
        r1 = rows * (c + 1) // nchunks
        r = r0
        while r + 4 <= r1:
            lo = r * cols
            _add_col_sums4(
                x[lo : lo + cols], x[lo + cols : lo + 2 * cols], x[lo + 2 * cols : lo + 3 * cols], x[lo + 3 * cols : lo + 4 * cols],
                e[lo : lo + cols], e[lo + cols : lo + 2 * cols], e[lo + 2 * cols : lo + 3 * cols], e[lo + 3 * cols : lo + 4 * cols],
                has_e, sums[c, 0], sums[c, 1], sums[c, 2],
            )  # fmt: skip
            r += 4
        for rr in range(r, r1):
            lo = rr * cols
            _add_col_sums(x[lo : lo + cols], e[lo : lo + cols], has_e, sums[c, 0], sums[c, 1], sums[c, 2])


@njit(**PARALLEL)
def _onebit_rowstats_kernel(x, e, has_e, cols, per_row, sums):  # pragma: no cover - compiled
    """Row groups: segment q = (row, piece of ≤ PART columns) writes sums[q, 0..2]."""
    rows = x.size // cols
    for q in prange(rows * per_row):
        r = q // per_row
        lo = r * cols + (q - r * per_row) * PART
        hi = min((r + 1) * cols, lo + PART)
        sa, sp, cp = _add_row_sums(x[lo:hi], e[lo:hi], has_e)
        sums[q, 0] = sa
        sums[q, 1] = sp
        sums[q, 2] = cp


@njit(cache=True)
def _sub_group_means(e, m0, m1):  # pragma: no cover - compiled
    """e[j] <- a − (m1[j] if a >= 0 else m0[j]) (per-column means of one row segment).

    Both means are loaded unconditionally: a select of two loads vectorises, a conditional
    load did not (4× slower here).
    """
    for j in range(e.size):
        a = e[j]
        v1 = m1[j]
        v0 = m0[j]
        e[j] = a - (v1 if a >= 0 else v0)


@njit(cache=True)
def _sub_row_mean(e, m0, m1):  # pragma: no cover - compiled
    for j in range(e.size):
        a = e[j]
        e[j] = a - (m1 if a >= 0 else m0)


@njit(cache=True)
def _expand_bits(bits, m, out):  # pragma: no cover - compiled
    """out[i] = bit i of ``bits`` (LSB first) as 0/1 bytes, i < m."""
    full = m // 8
    for g in range(full):
        b = np.uint32(bits[g])
        for t in range(8):
            out[8 * g + t] = np.uint8((b >> np.uint32(t)) & np.uint32(1))
    for i in range(full * 8, m):
        out[i] = np.uint8((bits[i >> 3] >> (i & 7)) & 1)


@njit(cache=True)
def _select_groups(msk, m0, m1, out):  # pragma: no cover - compiled
    for j in range(out.size):
        v1 = m1[j]
        v0 = m0[j]
        out[j] = v1 if msk[j] else v0


@njit(cache=True)
def _select_row(msk, m0, m1, out):  # pragma: no cover - compiled
    for j in range(out.size):
        out[j] = m1 if msk[j] else m0


@njit(**PARALLEL)
def _onebit_apply_kernel(e, cols, by_row, mu0, mu1, out, decode):  # pragma: no cover - compiled
    """Per part: the bits (a >= 0) of e and e <- a − decoded; or, with ``decode``, e <- decoded
    from the bits in ``out`` (the receiver)."""
    n = e.size
    for p in prange(n_parts(n)):
        lo, hi = bounds(p, PART, n)
        msk = np.empty(hi - lo if decode else 0, np.uint8)
        if decode:
            _expand_bits(out[lo // 8 : (hi + 7) // 8], hi - lo, msk)
        else:
            _sign_bits(e[lo:hi], out[lo // 8 : (hi + 7) // 8])
        i = lo
        while i < hi:
            r = i // cols
            c0 = i - r * cols
            end = min(hi, (r + 1) * cols)
            seg = e[i:end]
            if by_row and decode:
                _select_row(msk[i - lo : end - lo], mu0[r], mu1[r], seg)
            elif by_row:
                _sub_row_mean(seg, mu0[r], mu1[r])
            elif decode:
                _select_groups(msk[i - lo : end - lo], mu0[c0 : c0 + end - i], mu1[c0 : c0 + end - i], seg)
            else:
                _sub_group_means(seg, mu0[c0 : c0 + end - i], mu1[c0 : c0 + end - i])
            i = end


def _group_layout(n: int, cols: int, by_row: bool) -> tuple[int, bool, int]:
    """(cols, by_row, groups), a single group mapped to one long row (reduced in parallel)."""
    groups = n // cols if by_row else cols
    if groups == 1:
        return n, True, 1
    return cols, by_row, groups


def onebit_form(x: np.ndarray, e: np.ndarray, has_e: bool, cols: int, by_row: bool) -> tuple[np.ndarray, np.ndarray]:
    """Pass 1 of 1-bit SGD over the rows × cols matrix of flat ``x``: a = x + e written into ``e``
    (``has_e`` False: a = x), with each group's sums in the same pass.

    Each group (column, or row when ``by_row``) gets mu1 = mean of its a >= 0 and mu0 = mean of
    its a < 0 (0 when empty; float64 sums rounded to float32, as the torch path).  Returns
    (mu0, mu1) per group; pass 2 is :func:`onebit_apply`.
    """
    n = x.size
    cols, by_row, groups = _group_layout(n, cols, by_row)
    if by_row:
        per_row = (cols + PART - 1) // PART
        seg = np.empty((groups * per_row, 3), np.float64)
        run_parallel(_onebit_rowstats_kernel, n, x, e, bool(has_e), cols, per_row, seg)
        tot = seg.reshape(groups, per_row, 3).sum(axis=1).T
    else:
        rows = n // cols
        # chunks of whole rows, a count fixed by the shape: the float64 sums do not depend on threads
        nchunks = max(1, min(64, rows, n // 4096))
        sums = np.zeros((nchunks, 3, cols), np.float64)
        run_parallel(_onebit_colstats_kernel, n, x, e, bool(has_e), cols, nchunks, sums)
        tot = sums.sum(axis=0)
    cnt_pos = tot[2]
    cnt_neg = (n // groups) - cnt_pos
    mu1 = np.where(cnt_pos > 0, tot[1] / np.maximum(cnt_pos, 1), 0.0).astype(np.float32)
    mu0 = np.where(cnt_neg > 0, (tot[0] - tot[1]) / np.maximum(cnt_neg, 1), 0.0).astype(np.float32)
    return mu0, mu1


def onebit_apply(e: np.ndarray, cols: int, by_row: bool, mu0: np.ndarray, mu1: np.ndarray, out: np.ndarray) -> None:
    """Pass 2 of 1-bit SGD on ``e`` holding a: the bits a >= 0 into ``out`` in flat order, then e <- a − decoded."""
    cols, by_row, _ = _group_layout(e.size, cols, by_row)
    run_parallel(_onebit_apply_kernel, e.size, e, cols, by_row, mu0, mu1, out, False)


def onebit_decode(bits: np.ndarray, cols: int, by_row: bool, mu0: np.ndarray, mu1: np.ndarray, out: np.ndarray) -> None:
    """out[i] = mu1[g] where bit i is set else mu0[g], g the group of flat index i."""
    if out.size:
        cols, by_row, _ = _group_layout(out.size, cols, by_row)
        run_parallel(_onebit_apply_kernel, out.size, out, cols, by_row, mu0, mu1, bits, True)


