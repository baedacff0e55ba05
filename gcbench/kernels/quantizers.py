"""The stochastic quantizers: TernGrad, QSGD, natural compression and natural dithering.

At most one read-only statistics pass (std and max, or norms; QSGD's bucket norms inside its one
pass while the bucket is in cache), then one pass that draws the counter-based uniforms
(:mod:`gcbench.kernels.rng`), quantizes and writes the packed fields.
"""

from __future__ import annotations

import math

import numpy as np

from gcbench.kernels.bits import _pack_le, _pack_wide, _unpack_le, _unpack_wide, load_le
from gcbench.kernels.rng import _TWO_M24, _fill_rand24, key_of
from gcbench.kernels.runtime import PARALLEL, PART, SUB, bounds, n_chunks, n_parts, njit, prange, run_parallel
from gcbench.kernels.stats import _absmax_bits, _sumsq

# ----------------------------------------------------------------------------- TernGrad


@njit(cache=True)
def _tern_codes(x, r, cb, s32, code):  # pragma: no cover - compiled
    """code[j] = 0, 1 (+) or 2 (−): xc = clamp(x, −cb, cb), kept when u < |xc|/s32 (float32)."""
    for j in range(x.size):
        xc = x[j]
        xc = -cb if xc < -cb else xc  # written out so that NaN stays NaN, as in torch.clamp
        xc = cb if xc > cb else xc
        keep = np.float32(r[j]) * _TWO_M24 < abs(xc) / s32
        sign = np.uint8(1) if xc >= 0 else np.uint8(2)
        code[j] = sign if keep else np.uint8(0)


@njit(**PARALLEL)
def _uniform_codes_kernel(x, natural, cb, s32, key, out):  # pragma: no cover - compiled
    """One uniform and one byte code per element of float32 ``x``, SUB elements at a time, packed into ``out``:
    TernGrad's 2-bit codes (clip bound ``cb``, scaler ``s32``), or with ``natural`` natural compression's body
    (:func:`_natural_codes`: n code bytes, then the signs, one bit each, from byte n on)."""
    n = x.size
    xb = x.view(np.uint32)
    for p in prange(n_parts(n)):
        r = np.empty(SUB, np.uint32)
        code = np.empty(SUB, np.uint8)
        words = np.empty(SUB // 8 + 1, np.uint64)
        for lo in range(p * PART, min(n, (p + 1) * PART), SUB):
            m = min(SUB, n - lo)
            _fill_rand24(key, lo, r, m)
            if natural:  # the exponent codes straight into the body; ``code`` holds the signs
                _natural_codes(xb[lo : lo + m], r, out[lo : lo + m], code)
                _pack_le(code, m, 1, out[n + lo // 8 : n + (lo + m + 7) // 8], words)
            else:
                _tern_codes(x[lo : lo + m], r, cb, s32, code)
                _pack_le(code, m, 2, out[lo // 4 : (lo + m + 3) // 4], words)


def terngrad_codes(x: np.ndarray, cb: float, s32: float, seed: int, out: np.ndarray) -> None:
    """TernGrad's 2-bit codes of float32 ``x`` (clip bound ``cb``, scaler ``s32`` > 0) into ``out``."""
    if x.size:
        run_parallel(_uniform_codes_kernel, x.size, x, False, np.float32(cb), np.float32(s32), key_of(seed), out)


@njit(cache=True)
def _tern_values(codes, m, s32, out):  # pragma: no cover - compiled
    """out[:m] = s·t from 2-bit codes: t = (c & 1) − (c >> 1), so 0 → 0, 1 → +1, 2 → −1 (and the
    never-sent 3 → 0); 32 codes per 8-byte register."""
    full = m // 32
    for g in range(full):
        acc = load_le(codes[g * 8 : g * 8 + 8], 8)
        o = out[g * 32 : g * 32 + 32]
        for t in range(32):
            c = np.int32((acc >> np.uint64(2 * t)) & np.uint64(3))
            o[t] = np.float32((c & 1) - (c >> 1)) * s32
    for i in range(full * 32, m):
        c = np.int32((codes[i >> 2] >> (2 * (i & 3))) & 3)
        out[i] = np.float32((c & 1) - (c >> 1)) * s32


@njit(**PARALLEL)
def _terngrad_decode_kernel(codes, s32, out):  # pragma: no cover - compiled
    n = out.size
    for p in prange(n_parts(n)):
        lo, hi = bounds(p, PART, n)
        _tern_values(codes[lo // 4 : (hi + 3) // 4], hi - lo, s32, out[lo:hi])


def terngrad_decode(codes: np.ndarray, s32: float, out: np.ndarray) -> None:
    """out = s·t for the packed 2-bit codes."""
    if out.size:
        run_parallel(_terngrad_decode_kernel, out.size, codes, np.float32(s32), out)


# ----------------------------------------------------------------------------- QSGD


@njit(cache=True)
def _qsgd_segment(x, r, nb, sf, field):  # pragma: no cover - compiled
    """Fields of one bucket's elements with norm ``nb`` (the torch path's float32 arithmetic)."""
    for t in range(x.size):
        v = x[t]
        num = abs(v) * sf
        # |v|·s overflows float32 for |v| > max/s although r <= s: then |v|/n first (never above 1), as the torch path does
        rr = (num / nb if num != np.inf else (abs(v) / nb) * sf) if nb > 0 else np.float32(0.0)
        rr = sf if rr > sf else rr
        fl = np.floor(rr)
        lv = fl + (np.float32(1.0) if np.float32(r[t]) * _TWO_M24 < rr - fl else np.float32(0.0))
        lvi = np.uint32(lv) if lv == lv else np.uint32(0)  # a NaN input sends level 0
        field[t] = (lvi << np.uint32(1)) | np.uint32(v < 0)


@njit(cache=True)
def _qsgd_fields(x, start, bucket, norms, sf, r, field):  # pragma: no cover - compiled
    """field[j] = (level << 1) | (x < 0) for x[j] at flat index start + j.

    r = s·|x|/n (0 when n = 0), clamped to s; level = ⌊r⌋ + [u < r − ⌊r⌋].
    """
    m = x.size
    j = 0
    while j < m:
        b = (start + j) // bucket
        end = min(m, (b + 1) * bucket - start)
        _qsgd_segment(x[j:end], r[j:end], norms[b], sf, field[j:end])
        j = end


@njit(cache=True)
def _bucket_norm(x, xb, inf_norm):  # pragma: no cover - compiled
    if inf_norm:
        return np.array([_absmax_bits(xb)], np.uint32).view(np.float32)[0]
    return np.float32(math.sqrt(_sumsq(x)))


@njit(**PARALLEL)
def _qsgd_kernel(x, bucket, part, norms, own_norms, inf_norm, sf, key, width, out):  # pragma: no cover - compiled
    """QSGD fixed-width fields, packed.  With ``own_norms`` each part (whole buckets) first
    computes its buckets' norms while they are in cache; otherwise ``norms`` is given."""
    n = x.size
    xb = x.view(np.uint32)
    for p in prange((n + part - 1) // part):
        lo0 = p * part
        hi0 = min(n, lo0 + part)
        if own_norms:
            for b in range(lo0 // bucket, (hi0 + bucket - 1) // bucket):
                b0 = b * bucket
                b1 = min(n, b0 + bucket)
                norms[b] = _bucket_norm(x[b0:b1], xb[b0:b1], inf_norm)
        r = np.empty(SUB, np.uint32)
        field = np.empty(SUB, np.uint32)
        words = np.empty(SUB // 8 + 1, np.uint64)
        for lo in range(lo0, hi0, SUB):
            m = min(SUB, hi0 - lo)
            _fill_rand24(key, lo, r, m)
            _qsgd_fields(x[lo : lo + m], lo, bucket, norms, sf, r, field)
            dst = out[(lo // 8) * width : min(out.size, ((lo + m) // 8 + 1) * width)]
            if width <= 8:
                _pack_le(field, m, width, dst, words)
            else:
                _pack_wide(field, m, width, dst)


@njit(**PARALLEL)
def _bucket_norm_kernel(x, bucket, inf_norm, partial, per):  # pragma: no cover - compiled
    """Buckets larger than a part: partial[q] = max-bits or Σx² of piece q (``per`` per bucket)."""
    n = x.size
    xb = x.view(np.uint32)
    for q in prange(partial.size):
        b = q // per
        lo = b * bucket + (q - b * per) * PART
        hi = min(min(n, (b + 1) * bucket), lo + PART)
        if lo >= hi:
            partial[q] = 0.0
        elif inf_norm:
            partial[q] = np.float64(_absmax_bits(xb[lo:hi]))
        else:
            partial[q] = _sumsq(x[lo:hi])


def qsgd_plan(n: int, bucket: int) -> tuple[int, bool]:
    """(part size, whether each part computes its own bucket norms) for :func:`qsgd_encode`.

    Parts are whole buckets and a multiple of 8 elements (so each part owns whole bytes of
    the packed fields) when a bucket fits a part; larger buckets get their norms first.
    """
    if bucket <= PART:
        unit = bucket * 8 // math.gcd(bucket, 8)
        return unit * max(1, PART // unit), True
    return PART, False


def qsgd_norms(x: np.ndarray, bucket: int, inf_norm: bool) -> np.ndarray:
    """float32 bucket norms (max|x| exactly, or sqrt of the float64 Σx²) in parallel pieces."""
    n = x.size
    nb = -(-n // bucket)
    per = -(-bucket // PART)
    partial = np.empty(nb * per, np.float64)
    run_parallel(_bucket_norm_kernel, n, x, np.int64(bucket), bool(inf_norm), partial, np.int64(per))
    pieces = partial.reshape(nb, per)
    if inf_norm:
        return pieces.max(axis=1).astype(np.uint32).view(np.float32)
    return np.sqrt(pieces.sum(axis=1)).astype(np.float32)


def qsgd_encode(x: np.ndarray, bucket: int, inf_norm: bool, s: int, seed: int, width: int, norms: np.ndarray, out: np.ndarray) -> None:
    """Fill ``norms`` (float32 per bucket) and the packed fixed-width QSGD fields ``out``."""
    if x.size == 0:
        return
    part, own = qsgd_plan(x.size, bucket)
    if not own:
        norms[:] = qsgd_norms(x, bucket, inf_norm)
    run_parallel(_qsgd_kernel, x.size, x, np.int64(bucket), np.int64(part), norms, own, bool(inf_norm), np.float32(s), key_of(seed),
                np.int64(width), out)


@njit(**PARALLEL)
def _qsgd_levels_kernel(x, bucket, norms, sf, key, field):  # pragma: no cover - compiled
    n = x.size
    for p in prange(n_parts(n)):
        r = np.empty(SUB, np.uint32)
        for lo in range(p * PART, min(n, (p + 1) * PART), SUB):
            m = min(SUB, n - lo)
            _fill_rand24(key, lo, r, m)
            _qsgd_fields(x[lo : lo + m], lo, bucket, norms, sf, r, field[lo : lo + m])


def qsgd_fields(x: np.ndarray, bucket: int, norms: np.ndarray, s: int, seed: int) -> np.ndarray:
    """Unpacked fields (level << 1) | sign, uint32 — the same draws as :func:`qsgd_encode`."""
    field = np.empty(x.size, np.uint32)
    if x.size:
        run_parallel(_qsgd_levels_kernel, x.size, x, np.int64(bucket), norms, np.float32(s), key_of(seed), field)
    return field


@njit(cache=True)
def _qsgd_value(nb, level, sf):  # pragma: no cover - compiled
    """n·level/s in float32: (n·level)/s, or n·(level/s) where n·level overflows although the value (at most n) does not."""
    v = nb * level
    return v / sf if v != np.inf else nb * (level / sf)


@njit(cache=True)
def _qsgd_value_segment(field, nb, sf, out):  # pragma: no cover - compiled
    for t in range(out.size):
        f = field[t]
        v = _qsgd_value(nb, np.float32(f >> np.uint32(1)), sf)
        out[t] = -v if f & np.uint32(1) else v


@njit(cache=True)
def _qsgd_values(field, start, bucket, norms, sf, out):  # pragma: no cover - compiled
    """out[j] = ±(n_b·level)/s for field j at flat index start + j."""
    m = out.size
    j = 0
    while j < m:
        b = (start + j) // bucket
        end = min(m, (b + 1) * bucket - start)
        _qsgd_value_segment(field[j:end], norms[b], sf, out[j:end])
        j = end


@njit(**PARALLEL)
def _qsgd_decode_kernel(data, width, bucket, norms, sf, out):  # pragma: no cover - compiled
    n = out.size
    for p in prange(n_parts(n)):
        field = np.empty(SUB, np.uint32)
        wide = np.empty(SUB, np.uint64)  # the wide fields, or the narrow path's words (SUB // 8 + 1 of them)
        for lo in range(p * PART, min(n, (p + 1) * PART), SUB):
            m = min(SUB, n - lo)
            src = data[(lo // 8) * width : min(data.size, ((lo + m) // 8 + 1) * width)]
            if width <= 8:
                _unpack_le(src, m, width, field, wide)
            else:  # into uint64 and then narrowed: faster than _unpack_wide's stores into uint32 (measured)
                _unpack_wide(src, m, width, wide)
                for j in range(m):
                    field[j] = np.uint32(wide[j] & np.uint64(0xFFFFFFFF))
            _qsgd_values(field, lo, bucket, norms, sf, out[lo : lo + m])


def qsgd_decode(data: np.ndarray, width: int, bucket: int, norms: np.ndarray, s: int, out: np.ndarray) -> None:
    """out[i] = ±n_b·level_i/s from the packed fixed-width fields."""
    if out.size:
        run_parallel(_qsgd_decode_kernel, out.size, data, np.int64(width), np.int64(bucket), norms, np.float32(s), out)


@njit(**PARALLEL)
def _qsgd_scatter_kernel(pos, field, bucket, norms, sf, out):  # pragma: no cover - compiled
    for j in prange(pos.size):
        i = pos[j]
        f = field[j]
        v = _qsgd_value(norms[i // bucket], np.float32(f >> np.uint32(1)), sf)
        out[i] = -v if f & np.uint32(1) else v


def qsgd_scatter(pos: np.ndarray, field: np.ndarray, bucket: int, norms: np.ndarray, s: int, out: np.ndarray) -> None:
    """Write ±n_b·level/s at ``pos`` of zero-filled ``out`` (QSGD's Elias coding)."""
    if pos.size:
        run_parallel(_qsgd_scatter_kernel, pos.size, pos, field.astype(np.uint32), np.int64(bucket), norms, np.float32(s), out)


# ----------------------------------------------------------------------------- natural compression


@njit(cache=True)
def _natural_codes(xb, r, code, sign):  # pragma: no cover - compiled
    """Exponent code E (+1 when rounding up) and sign of each float32 bit pattern.

    Rounding up ⇔ u < M/2^23 ⇔ r24 < 2M for u = r24/2^24: the exact integer form of the float
    comparison; the top binade (E = 254) and inf/NaN (255) never round up; no sign on code 0.
    """
    for j in range(xb.size):
        b = xb[j]
        e = (b >> np.uint32(23)) & np.uint32(0xFF)
        up = (r[j] < ((b & np.uint32(0x7FFFFF)) << np.uint32(1))) and (e < np.uint32(254))
        c = e + np.uint32(up)
        code[j] = np.uint8(c)
        sign[j] = np.uint8((b >> np.uint32(31)) != 0 and c > 0)


def natural_encode(x: np.ndarray, seed: int, out: np.ndarray) -> None:
    """Natural compression body of float32 ``x``: n code bytes, then ceil(n/8) sign bytes."""
    if x.size:
        run_parallel(_uniform_codes_kernel, x.size, x, True, np.float32(0.0), np.float32(1.0), key_of(seed), out)


@njit(cache=True)
def _natural_values(code, signs, out):  # pragma: no cover - compiled
    """out = (code << 23) | (sign << 31) with the sign dropped for code 0 (uint32 patterns)."""
    m = out.size
    full = m // 64
    for g in range(full):
        acc = load_le(signs[g * 8 : g * 8 + 8], 8)
        c = code[g * 64 : g * 64 + 64]
        o = out[g * 64 : g * 64 + 64]
        for t in range(64):
            ci = np.uint32(c[t])
            sg = np.uint32((acc >> np.uint64(t)) & np.uint64(1)) if ci > 0 else np.uint32(0)
            o[t] = (ci << np.uint32(23)) | (sg << np.uint32(31))
    for i in range(full * 64, m):
        ci = np.uint32(code[i])
        sg = np.uint32((signs[i >> 3] >> (i & 7)) & 1) if ci > 0 else np.uint32(0)
        out[i] = (ci << np.uint32(23)) | (sg << np.uint32(31))


@njit(**PARALLEL)
def _natural_decode_kernel(body, n, out):  # pragma: no cover - compiled
    for p in prange(n_parts(n)):
        lo, hi = bounds(p, PART, n)
        _natural_values(body[lo:hi], body[n + lo // 8 : n + (hi + 7) // 8], out[lo:hi])


def natural_decode(body: np.ndarray, out: np.ndarray) -> None:
    """float32 values ±2^(code−127) (0 for code 0) into ``out``."""
    if out.size:
        run_parallel(_natural_decode_kernel, out.size, body, out.size, out.view(np.uint32))


# ----------------------------------------------------------------------------- natural dithering


@njit(cache=True)
def _dither_ratio(x, n32, ab):  # pragma: no cover - compiled
    """ab[j] = min(|x_j| / n, 1) in float32 (0 when n = 0)."""
    for j in range(x.size):
        a = abs(x[j]) / n32 if n32 > 0 else np.float32(0.0)
        ab[j] = np.float32(1.0) if a > 1 else a


@njit(cache=True)
def _dither_fields(x, ab, r, s, small, inv_small, field):  # pragma: no cover - compiled
    """field[j] = (level << 1) | sign of natural dithering, from the ratio ab[j] = u.

    A normal u = (1 + M/2^23)·2^(E−127) ≥ 2^(1−s) lies between level indices E−127+s and one
    above and rounds up with probability M/2^23 ⇔ r24 < 2M (exact); below 2^(1−s) the bracket
    is [0, 2^(1−s)] and the probability u·2^(s−1) (a float32 comparison, as the torch path).
    The sign bit is sent only with a nonzero level.
    """
    abits = ab.view(np.uint32)
    for j in range(x.size):
        a = ab[j]
        b = abits[j]
        hi_up = np.uint32(r[j] < ((b & np.uint32(0x7FFFFF)) << np.uint32(1)))
        lv_hi = ((b >> np.uint32(23)) & np.uint32(0xFF)) + np.uint32(s) - np.uint32(127) + hi_up
        lv_lo = np.uint32(np.float32(r[j]) * _TWO_M24 < a * inv_small)
        lv = lv_lo if a < small else lv_hi
        ng = np.uint32(x[j] < 0) & np.uint32(lv > 0)
        field[j] = (lv << np.uint32(1)) | ng


@njit(**PARALLEL)
def _dither_kernel(x, n32, s, small, inv_small, key, width, out):  # pragma: no cover - compiled
    """Natural dithering fields of ``width`` ≤ 8 bits, packed into ``out``."""
    n = x.size
    for p in prange(n_parts(n)):
        r = np.empty(SUB, np.uint32)
        ab = np.empty(SUB, np.float32)
        field = np.empty(SUB, np.uint32)
        words = np.empty(SUB // 8 + 1, np.uint64)
        for lo in range(p * PART, min(n, (p + 1) * PART), SUB):
            m = min(SUB, n - lo)
            xs = x[lo : lo + m]
            _fill_rand24(key, lo, r, m)
            _dither_ratio(xs, n32, ab)
            _dither_fields(xs, ab, r, s, small, inv_small, field)
            _pack_le(field, m, width, out[(lo // 8) * width : min(out.size, ((lo + m) // 8 + 1) * width)], words)


@njit(cache=True)
def _dither_fields_serial(x, n32, s, small, inv_small, key, out):  # pragma: no cover - compiled
    """The same fields unpacked, on one thread (top-k's k values: too few to share out)."""
    r = np.empty(SUB, np.uint32)
    ab = np.empty(SUB, np.float32)
    for lo in range(0, x.size, SUB):
        m = min(SUB, x.size - lo)
        _fill_rand24(key, lo, r, m)
        _dither_ratio(x[lo : lo + m], n32, ab)
        _dither_fields(x[lo : lo + m], ab, r, s, small, inv_small, out[lo : lo + m])


def _dither_args(s: int) -> tuple[np.int64, np.float32, np.float32]:
    return np.int64(s), np.float32(2.0 ** (1 - s)), np.float32(2.0 ** (s - 1))


def dither_pack(x: np.ndarray, n32: float, s: int, seed: int, width: int, out: np.ndarray) -> None:
    """Natural dithering of float32 ``x`` with norm ``n32``; fields of ``width`` ≤ 8 bits packed
    into ``out``.  Element j draws number j of stream ``seed``."""
    if x.size:
        run_parallel(_dither_kernel, x.size, x, np.float32(n32), *_dither_args(s), key_of(seed), np.int64(width), out)


def dither_fields(x: np.ndarray, n32: float, s: int, seed: int) -> np.ndarray:
    """The fields of :func:`dither_pack`, unpacked (uint32), for codings that interleave them."""
    out = np.empty(x.size, np.uint32)
    if x.size:
        _dither_fields_serial(x, np.float32(n32), *_dither_args(s), key_of(seed), out)
    return out


@njit(cache=True)
def _dither_values(field, s, n32, out, pw):  # pragma: no cover - compiled
    """out[j] = ±2^(level−s)·n (0 for level 0); returns the largest level index.

    The level value is built as float32 bits, (level + 127 − s) << 23 — exactly the table value
    2^(level−s) (s ≤ 120 keeps it normal) — which vectorises where a table lookup did not (3×).
    Levels above s (a corrupt body: the caller rejects it) decode as s.  ``pw`` is scratch.
    """
    su = np.uint32(s)
    top = np.uint32(0)
    for j in range(out.size):
        lv = field[j] >> np.uint32(1)
        top = max(top, lv)
        lvc = min(lv, su)
        pw[j] = ((lvc + np.uint32(127) - su) << np.uint32(23)) if lvc > 0 else np.uint32(0)
    pf = pw.view(np.float32)
    for j in range(out.size):
        v = pf[j] * n32
        out[j] = -v if field[j] & np.uint32(1) else v
    return top


@njit(**PARALLEL)
def _dither_decode_kernel(data, width, s, n32, out, top):  # pragma: no cover - compiled
    n = out.size
    for p in prange(top.size):
        field = np.empty(SUB, np.uint32)
        pw = np.empty(SUB, np.uint32)
        words = np.empty(SUB // 8 + 1, np.uint64)
        mx = np.uint32(0)
        for lo in range(p * PART, min(n, (p + 1) * PART), SUB):
            m = min(SUB, n - lo)
            _unpack_le(data[(lo // 8) * width : min(data.size, ((lo + m) // 8 + 1) * width)], m, width, field, words)
            mx = max(mx, _dither_values(field[:m], s, n32, out[lo : lo + m], pw))
        top[p] = mx


def dither_decode(data: np.ndarray, width: int, s: int, n32: float, out: np.ndarray) -> int:
    """Decode packed natural dithering fields into float32 ``out``; returns the largest level read."""
    if out.size == 0:
        return 0
    top = np.zeros(n_chunks(out.size), np.uint32)
    run_parallel(_dither_decode_kernel, out.size, data, np.int64(width), np.int64(s), np.float32(n32), out, top)
    return int(top.max())


def dither_values(fields: np.ndarray, s: int, n32: float) -> tuple[np.ndarray, int]:
    """(float32 ±level·n of unpacked fields, largest level index) — serial: k values of top-k."""
    f = np.ascontiguousarray(fields, dtype=np.uint32)
    out = np.empty(f.size, np.float32)
    if f.size == 0:
        return out, 0
    top = int(_dither_values(f, np.int64(s), np.float32(n32), out, np.empty(f.size, np.uint32)))
    return out, top


