"""QSGD — Alistarh et al. 2017, Communication-Efficient SGD via Gradient Quantization and Encoding.

Split the flat tensor into buckets of B elements (the last may be shorter).  For bucket v with
norm n (‖v‖₂ for ``norm="2"``, max|v| for ``norm="inf"``): ``r = s·|v_i|/n``, ``l = floor(r)``,
level ``l + 1`` with probability ``r − l`` else ``l``; decoded ``n·sign(v_i)·level_i/s``.
Unbiased; per bucket (norm 2) E‖C(v) − v‖² ≤ min(B/s², √B/s)·‖v‖².

Encodings:
* ``fixed`` — per bucket a float32 norm and, per element, 1 sign bit + ceil(log2(s+1)) level bits:
  32 + B·(1 + ceil(log2(s+1))) bits per bucket.
* ``elias`` — the paper's code: the norms, then for every nonzero level its position gap, sign
  bit and level, gaps and levels in Elias-ω (positions run across the whole tensor).

Defaults are the paper's experiments (s = 16, B = 512, norm = inf).  ``min_numel`` reproduces the
paper's choice of not quantizing tensors under 10,000 elements (they are sent as float32).

Random numbers: each compression draws one 64-bit key from the state's generator; element i
compares the i-th counter-based uniform of that key (SplitMix64, :mod:`gcbench.kernels`) with
r − ⌊r⌋.  The CPU kernel computes each part's bucket norms while the part is in cache, then
draws, quantizes and packs the fields in the same pass; the Elias stream is written by a numba
bit writer.  The plain torch definition (:func:`qsgd_torch`, the class's ``reference`` and the
path on other devices) draws the same uniforms and produces the same bytes.  Version 2: the
uniforms come from this generator (version 1 drew them from the state's PCG64).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors.cards.qsgd import QSGD_CARD
from gcbench.compressors.topk_dither import fills
from gcbench.core import codec, codec_torch
from gcbench.core.codec_torch_elias import read_fields_lazy, settle
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_numpy, body_tensor, meta_flag, meta_int, meta_keys, meta_str
from gcbench.core.payload import MetaValue, Payload


def level_bits(s: int) -> int:
    return max(1, math.ceil(math.log2(s + 1)))


def bucket_norms(flat: torch.Tensor, bucket: int, norm: str) -> torch.Tensor:
    """Norm of each bucket (float32), the last bucket possibly shorter."""
    d = flat.numel()
    nb = -(-d // bucket)
    pad = nb * bucket - d
    v = torch.nn.functional.pad(flat, (0, pad)).reshape(nb, bucket) if pad else flat.reshape(nb, bucket)
    if norm == "2":
        return v.double().pow(2).sum(1).sqrt().float()
    return v.abs().amax(1)


def quantize(flat: torch.Tensor, norms: torch.Tensor, s: int, bucket: int, u: torch.Tensor) -> torch.Tensor:
    """Stochastic levels (int64, 0..s) given uniforms ``u``."""
    d = flat.numel()
    n_el = norms.repeat_interleave(bucket)[:d]
    n_safe = torch.where(n_el > 0, n_el, 1.0)
    num = flat.abs() * s
    # |x|·s overflows float32 for |x| > max/s although r <= s: then |x|/n first (the kernels' rule, the same bits)
    r = torch.where(num.isinf(), flat.abs() / n_safe * s, num / n_safe)
    r = torch.where(n_el > 0, r, 0.0).clamp(max=s)
    lo = r.floor()
    return (lo + (u < (r - lo)).to(r.dtype)).to(torch.int64)


def _elias_body(norms_np: np.ndarray, nz: np.ndarray, neg: np.ndarray, levels_nz: np.ndarray) -> np.ndarray:
    """Norms, then per nonzero level: Elias-ω(gap), sign bit, Elias-ω(level)."""
    gaps = np.diff(nz, prepend=-1)
    rec = np.stack([gaps, neg.astype(np.int64), levels_nz.astype(np.int64)], axis=1)
    return np.concatenate([norms_np.astype("<f4").view(np.uint8), codec.write_records(rec, (0, 1, 0))])


def _elias_body_torch(norms: torch.Tensor, levels: torch.Tensor, neg: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(body, nnz) of :func:`_elias_body` on the levels' device: one scalar read for the count of nonzero levels
    (the header's ``nnz``, and the size of the positions), and the Elias writer's own one for its stream length."""
    nnz = int(torch.count_nonzero(levels))
    nz = torch.nonzero_static(levels, size=nnz).reshape(-1)
    gaps = torch.diff(nz, prepend=nz.new_full((1,), -1))
    rec = torch.stack([gaps, neg[nz].to(torch.int64), levels[nz]], 1)
    return torch.cat([norms.reshape(-1).view(torch.uint8), codec_torch.write_records(rec, (0, 1, 0))]), nnz


def qsgd_torch(flat: torch.Tensor, s: int, bucket: int, norm: str, enc: str, seed: int) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """(body, meta, decoded) of QSGD in plain torch with the kernels' uniforms, on ``flat``'s device (the fixed
    coding reads nothing to the host; the Elias coding its sizes)."""
    d = flat.numel()
    norms = bucket_norms(flat, bucket, norm)
    levels = quantize(flat, norms, s, bucket, kernels.uniforms(seed, d, flat.device))
    neg = flat < 0
    meta: dict[str, MetaValue]
    if enc == "fixed":
        field = (levels << 1) | neg.to(torch.int64)
        body = torch.cat([norms.view(torch.uint8), codec_torch.pack_bits(field, 1 + level_bits(s))])
        meta = {"s": s, "B": bucket, "enc": "fixed"}
    else:
        body, nnz = _elias_body_torch(norms, levels, neg)
        meta = {"s": s, "B": bucket, "enc": "elias", "nnz": nnz}
    decoded = qsgd_values(norms.repeat_interleave(bucket)[:d], levels, s)
    return body, meta, torch.where(neg, -decoded, decoded)


def qsgd_values(n_el: torch.Tensor, levels: torch.Tensor, s: int) -> torch.Tensor:
    """|decoded| = n·level/s in float32: (n·level)/s, or n·(level/s) where n·level overflows (the value is at most n).

    ``s`` divides as a tensor on the values' device: on a GPU, torch divides by a Python number as a
    multiplication by its reciprocal, which for s = 7 or 300 is an ulp off the CPU decoder's
    division (the device check caught it: the sender's decoded tensor differed from its payload's).
    """
    lv = levels.to(torch.float32)
    v = n_el * lv
    sf = torch.full((), float(s), dtype=torch.float32, device=v.device)
    return torch.where(v.isinf(), n_el * (lv / sf), v / sf)


def qsgd_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """Decoded QSGD of ``x32`` by the plain torch definition (draws the key like ``compress``)."""
    p = comp.params
    flat = x32.reshape(-1)
    if flat.numel() < p["min_numel"]:
        return flat.clone()
    return qsgd_torch(flat, p["s"], p["bucket"], p["norm"], p["encoding"], state.randint64())[2]


class QSGD(Compressor):
    """QSGD at the card's s, bucket, norm and encoding: the fused CPU kernel on CPU tensors, :func:`qsgd_torch`
    (the same bytes) elsewhere; tensors under ``min_numel`` elements are sent as float32."""

    info = QSGD_CARD
    reference = qsgd_reference

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        flat = a.reshape(-1)
        d = flat.numel()
        s, bucket, enc, norm = self.params["s"], self.params["bucket"], self.params["encoding"], self.params["norm"]
        if d < self.params["min_numel"]:
            return flat.detach().to(torch.float32, copy=True).view(torch.uint8), {"raw": 1}, None  # a copy: no alias of a
        seed = state.randint64()
        if not kernels.cpu_fast(flat):
            return qsgd_torch(flat, s, bucket, norm, enc, seed)
        x = kernels.flat_f32(flat)
        nb = -(-d // bucket)
        if enc == "fixed":
            w = 1 + level_bits(s)
            body = np.empty(4 * nb + codec.packed_nbytes(d, w), np.uint8)
            norms = body[: 4 * nb].view("<f4")
            kernels.qsgd_encode(x, bucket, norm == "inf", s, seed, w, norms, body[4 * nb :])
            return body, {"s": s, "B": bucket, "enc": "fixed"}, None
        norms = kernels.qsgd_norms(x, bucket, norm == "inf")
        field = kernels.qsgd_fields(x, bucket, norms, s, seed)
        nz = np.flatnonzero(field >> np.uint32(1))
        f_nz = field[nz]
        body = _elias_body(norms, nz, f_nz & np.uint32(1), f_nz >> np.uint32(1))
        return body, {"s": s, "B": bucket, "enc": "elias", "nnz": int(nz.size)}, None

    def _expected_body_nbytes(self, payload: Payload) -> int | tuple[int, int]:
        d = payload.numel
        if meta_flag(payload, "raw"):
            meta_keys(payload, "raw")
            return 4 * d
        enc = meta_str(payload, "enc", ("fixed", "elias"))
        meta_keys(payload, "s", "B", "enc", *(("nnz",) if enc == "elias" else ()))
        s = meta_int(payload, "s", 1, int(self.info.param("s").high or 2**20))
        nb = -(-d // meta_int(payload, "B", 1, 2**62))  # norms: one float32 per bucket
        if enc == "fixed":
            return 4 * nb + codec.packed_nbytes(d, 1 + level_bits(s))
        # per nonzero level: Elias-ω gap (at most d), a sign bit, Elias-ω level (at most s)
        nnz = meta_int(payload, "nnz", 0, d)
        return 4 * nb + (3 * nnz + 7) // 8, 4 * nb + (nnz * (codec.elias_omega_length(d) + 1 + codec.elias_omega_length(s)) + 7) // 8

    def _decode(self, payload: Payload) -> torch.Tensor:
        d = payload.numel
        n = payload.data.numel()
        if meta_flag(payload, "raw"):
            if n != 4 * d:
                raise PayloadError("qsgd raw body has the wrong size")
            return body_tensor(payload).clone().view(torch.float32)
        s, bucket = meta_int(payload, "s"), meta_int(payload, "B")
        if s < 1 or bucket < 1:
            raise PayloadError(f"qsgd payload has invalid settings s={s}, B={bucket}")
        bucket = min(bucket, d)  # a bucket longer than the tensor is one bucket (the encoder's B may exceed d)
        nb = -(-d // bucket)
        if n < 4 * nb:
            raise PayloadError("qsgd body is truncated")
        fixed = meta_str(payload, "enc") == "fixed"
        if fixed and n - 4 * nb != codec.packed_nbytes(d, 1 + level_bits(s)):
            raise PayloadError("qsgd fixed body has the wrong size")
        if not (kernels.available() and payload.data.device.type == "cpu"):
            return _decode_torch(body_tensor(payload), d, s, bucket, nb, None if fixed else meta_int(payload, "nnz"))
        body = body_numpy(payload)
        norms_np = body[: 4 * nb].view("<f4").astype(np.float32)
        rest = body[4 * nb :]
        if fixed:
            out = kernels.empty(d)
            kernels.qsgd_decode(rest, 1 + level_bits(s), bucket, norms_np, s, out.numpy())
            return out
        nnz = meta_int(payload, "nnz")
        rec, used = codec.read_fields(rest, nnz, (0, 1, 0))
        if (used + 7) // 8 != len(rest):
            raise PayloadError("qsgd Elias stream does not fill its body exactly")
        # each gap is at most d, so the running sum cannot wrap around before the range check
        if nnz and (rec[:, 0].max() > d or rec[:, 2].max() > s):
            raise PayloadError("qsgd Elias stream is corrupt")
        pos = np.cumsum(rec[:, 0]) - 1
        if nnz and pos[-1] >= d:
            raise PayloadError("qsgd Elias stream is corrupt")
        out = kernels.zeros(d)
        kernels.qsgd_scatter(pos, (rec[:, 2] << 1) | rec[:, 1], bucket, norms_np, s, out.numpy())
        return out


def _decode_torch(body: torch.Tensor, d: int, s: int, bucket: int, nb: int, nnz: int | None) -> torch.Tensor:
    """A QSGD body (fixed coding when ``nnz`` is None, else Elias) decoded with torch ops on its device: no host read
    for the fixed coding; for the Elias coding one, the stream's validity checks folded together before any scatter."""
    norms = body[: 4 * nb].clone().view(torch.float32)
    rest = body[4 * nb :]
    if nnz is None:
        field = codec_torch.unpack_bits(rest, 1 + level_bits(s), d)
        out = qsgd_values(norms.repeat_interleave(bucket)[:d], field >> 1, s)
        return torch.where((field & 1).bool(), -out, out)
    rec, used, checks = read_fields_lazy(rest, nnz, (0, 1, 0))
    pos = torch.cumsum(rec[:, 0], 0) - 1
    checks += fills(used, rest.numel(), "qsgd Elias stream does not fill its body exactly")
    if nnz:
        # each gap is at most d, so the running sum cannot wrap around before the range check
        bad = (rec[:, 0].max() > d) | (rec[:, 2].max() > s) | (pos[-1] >= d)
        checks.append((bad, "qsgd Elias stream is corrupt"))
    settle(checks)
    out = torch.zeros(d, dtype=torch.float32, device=body.device)
    v = qsgd_values(norms[pos // bucket], rec[:, 2], s)
    out[pos] = torch.where(rec[:, 1].bool(), -v, v)
    return out


def qsgd_fixed_bits(d: int, s: int, bucket: int) -> int:
    """The paper's fixed-width bit count (tests' oracle): 32 + B(1 + ceil(log2(s+1))) per bucket."""
    nb = -(-d // bucket)
    return 32 * nb + d * (1 + level_bits(s))
