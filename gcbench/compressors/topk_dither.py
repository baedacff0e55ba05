"""Top-k followed by natural dithering — the composition studied by Beznosikov et al. 2020,
"On Biased Compression for Distributed Learning", built from Horváth et al. 2019's natural
dithering.

``S`` = indices of the k largest |x_i| (k = ceil(density·d), exact ``torch.topk``); ``y = x[S]``;
``n = ‖y‖_p`` (p = 2 by default, or inf); each ``u_i = |y_i|/n`` is dithered to the levels
0, 2^(1−s), …, 1/2, 1 exactly as in ``natural_dither`` (see :mod:`gcbench.compressors.natural`).
Decoded: zeros except ``x̂[S] = n·sign(y)·level``.  Biased (top-k) composed with an unbiased
quantizer, so it is used with error feedback, on by default (the shared mechanism: the compressor
encodes ``a = x + e`` and keeps ``e = a − x̂``).

Wire format (body; decode-time settings k, s and the index coding travel in the header):
the float32 norm, then the sorted indices and one (level << 1) | sign field of
1 + ceil(log2(s+1)) bits per kept element, written so the body is exactly
``ceil((k·index_bits + 32 + k·(1 + ceil(log2(s+1))))/8)`` bytes:

* ``fixed`` — per element one packed field ``index·2^w + (level << 1 | sign)``, index in
  ceil(log2 d) bits (so no byte is lost between the two parts);
* ``int32`` / ``delta-varint`` — the index coding (whole bytes), then the packed fields;
* ``elias`` — per element the Elias-ω code of the index gap followed by the field, in one
  MSB-first stream.

Defaults: density 0.01, s = 8, p = 2, fixed index coding, error feedback on.

Speed (CPU, :mod:`gcbench.kernels`): error feedback is fused with an exact top-k select — the
pass that forms a = x + e in the residual buffer (:meth:`TopKDither._form_corrected`) also counts
the magnitudes above a sampled threshold, one more pass collects the k indices in ascending order
(:func:`gcbench.kernels.topk_select`) — then dithers the k kept values with counter-based
uniforms (one 64-bit key per compression from the state's generator; kept value j uses uniform
j) and subtracts the decoded values from the
residual at those k positions only.  Ties at the k-th magnitude keep the lowest indices.  The
plain torch composition (``torch.topk``, then :func:`gcbench.compressors.natural.dither_encode`)
is the class's ``reference`` and the path on other devices, where the body is written and read
with :mod:`gcbench.core.codec_torch` on the input's device (:func:`encode_body_torch`,
:func:`decode_body_torch`: the decoder's checks folded into one scalar read).  Version 2: the uniforms come from
this generator (version 1 drew them from the state's PCG64).
"""

from __future__ import annotations

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors._common import flat_and_k, k_of
from gcbench.compressors.cards.topk_dither import TOPK_DITHER_CARD
from gcbench.compressors.natural import dither_encode, dither_values, level_bits, tensor_norm
from gcbench.compressors.topk import topk_indices
from gcbench.core import codec, codec_torch
from gcbench.core.codec_torch_elias import Check, read_fields_lazy, settle
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, ErrorFeedback, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_numpy, body_tensor, meta_int, meta_keys, meta_str
from gcbench.core.params import INDEX_CODINGS
from gcbench.core.payload import MetaValue, Payload


def encode_body(n: float, idx: np.ndarray, field: np.ndarray, d: int, w: int, coding: str) -> np.ndarray:
    """Body bytes: float32 norm, then sorted ``idx`` and ``w``-bit ``field`` values with ``coding``."""
    head = np.array([n], "<f4").view(np.uint8)
    if coding == "fixed":
        iw = codec.index_width(d)
        rest = codec.pack_bits((idx.astype(np.int64) << w) | field.astype(np.int64), iw + w)
    elif coding == "elias":
        rec = np.stack([np.diff(idx, prepend=-1), field.astype(np.int64)], axis=1)
        rest = codec.write_records(rec, (0, w))
    else:  # int32 and delta-varint are whole bytes already
        rest = np.concatenate([codec.encode_indices(idx, d, coding), codec.pack_bits(field.astype(np.int64), w)])
    return np.concatenate([head, rest])


def decode_body(body: np.ndarray, d: int, k: int, w: int, coding: str) -> tuple[float, np.ndarray, np.ndarray]:
    """Inverse of :func:`encode_body`: (norm, indices int64, fields int64)."""
    if len(body) < 4:
        raise PayloadError("topk_dither body is truncated")
    n = float(body[:4].view("<f4")[0])
    rest = body[4:]
    if coding == "fixed":
        iw = codec.index_width(d)
        if len(rest) != codec.packed_nbytes(k, iw + w):
            raise PayloadError("topk_dither body has the wrong size")
        rec = codec.unpack_bits(rest, iw + w, k)
        idx, field = rec >> w, rec & ((1 << w) - 1)
    elif coding == "elias":
        rec, used = codec.read_fields(rest, k, (0, w))
        if (used + 7) // 8 != len(rest):
            raise PayloadError("topk_dither Elias stream has the wrong size")
        if k and rec[:, 0].max() > d:  # a gap past the tensor (and the running sum below cannot wrap around)
            raise PayloadError("topk_dither body has an index outside the tensor")
        idx, field = np.cumsum(rec[:, 0]) - 1, rec[:, 1]
    elif coding in ("int32", "delta-varint"):
        idx, used = codec.decode_indices(rest, d, k, coding)
        if len(rest) - used != codec.packed_nbytes(k, w):
            raise PayloadError("topk_dither body has the wrong size")
        field = codec.unpack_bits(rest[used:], w, k)
    else:
        raise PayloadError(f"topk_dither payload has unknown index coding {coding!r}")
    if k and (idx.min() < 0 or idx.max() >= d):
        raise PayloadError("topk_dither body has an index outside the tensor")
    return n, idx, field


def encode_body_torch(n: torch.Tensor, idx: torch.Tensor, field: torch.Tensor, d: int, w: int, coding: str) -> torch.Tensor:
    """:func:`encode_body` with torch ops on the indices' device (``n`` a float32 0-dim tensor, ``idx`` sorted int64):
    no host read for ``fixed`` and ``int32``, the stream length's one for ``delta-varint`` and ``elias``."""
    head = n.reshape(1).view(torch.uint8)
    if coding == "fixed":
        rest = codec_torch.pack_bits((idx << w) | field, codec.index_width(d) + w)
    elif coding == "elias":
        gaps = torch.diff(idx, prepend=idx.new_full((1,), -1))
        rest = codec_torch.write_records(torch.stack([gaps, field], 1), (0, w))
    else:  # int32 and delta-varint are whole bytes already; the indices were just sorted (no check needed)
        rest = torch.cat([codec_torch.encode_indices(idx, d, coding, validate=False), codec_torch.pack_bits(field, w)])
    return torch.cat([head, rest])


def fills(used_bits: torch.Tensor | int, nbytes: int, message: str) -> list[Check]:
    """The check that a bit stream of ``used_bits`` bits fills ``nbytes`` bytes exactly: made now when the count is a
    number, else returned to be folded into the decoder's one read."""
    if isinstance(used_bits, int):
        if (used_bits + 7) // 8 != nbytes:
            raise PayloadError(message)
        return []
    return [(torch.ne((used_bits + 7) // 8, nbytes), message)]


def decode_body_torch(body: torch.Tensor, d: int, k: int, s: int, coding: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`encode_body_torch`, checked: (norm as a 0-dim tensor, indices, fields), on the body's device.

    Every validity condition of the body (its stream filling it exactly, indices inside the tensor, no level above s)
    is folded into one scalar read, before any of it is used; ``delta-varint`` reads its stream length first (two).
    """
    w = 1 + level_bits(s)
    if body.numel() < 4:
        raise PayloadError("topk_dither body is truncated")
    rest = body[4:]
    checks: list[Check] = []
    if coding == "fixed":
        iw = codec.index_width(d)
        if rest.numel() != codec.packed_nbytes(k, iw + w):
            raise PayloadError("topk_dither body has the wrong size")
        rec = codec_torch.unpack_bits(rest, iw + w, k)
        idx, field = rec >> w, rec & ((1 << w) - 1)
    elif coding == "elias":
        rec, used, checks = read_fields_lazy(rest, k, (0, w))
        checks += fills(used, rest.numel(), "topk_dither Elias stream has the wrong size")
        if k:  # a gap past the tensor (and the running sum below cannot wrap around)
            checks.append((rec[:, 0].max() > d, "topk_dither body has an index outside the tensor"))
        idx, field = torch.cumsum(rec[:, 0], 0) - 1, rec[:, 1]
    elif coding in ("int32", "delta-varint"):
        fb = codec.packed_nbytes(k, w)  # the fields end the body
        if rest.numel() < fb:
            raise PayloadError("topk_dither body has the wrong size")
        idx, used = codec_torch.decode_indices(rest[: rest.numel() - fb], d, k, coding)
        if used != rest.numel() - fb:
            raise PayloadError("topk_dither body has the wrong size")
        field = codec_torch.unpack_bits(rest[used:], w, k)
    else:
        raise PayloadError(f"topk_dither payload has unknown index coding {coding!r}")
    if k:
        checks.append(((idx.min() < 0) | (idx.max() >= d), "topk_dither body has an index outside the tensor"))
        checks.append(((field >> 1).max() > s, "topk_dither body has a level index above s"))
    settle(checks)
    return body[:4].clone().view(torch.float32).reshape(()), idx, field


def topk_dither_parts(payload: Payload) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """(norm, sorted indices, level indices, negative mask) carried by a payload (for tests and tools)."""
    s = meta_int(payload, "s")
    n, idx, field = decode_body(body_numpy(payload), payload.numel, meta_int(payload, "k"), 1 + level_bits(s), meta_str(payload, "coding"))
    return n, idx, field >> 1, (field & 1).astype(bool)


def topk_dither_torch(comp: Compressor, a: torch.Tensor, state: State) -> tuple[torch.Tensor, dict[str, MetaValue], torch.Tensor]:
    """(body, header, decoded) of float32 ``a`` (read only) with torch ops on its device, and the reference's encoder."""
    flat, d, k = flat_and_k(a, comp.params["density"])
    s, coding = comp.params["s"], comp.params["index_coding"]
    idx = torch.sort(topk_indices(flat, k)).values  # sorted: the delta codings need it
    y = flat[idx]
    n, levels, neg = dither_encode(y, s, comp.params["p"], kernels.uniforms(state.randint64(), k, flat.device))
    w = 1 + level_bits(s)
    body = encode_body_torch(n, idx, (levels << 1) | neg.to(torch.int64), d, w, coding)
    decoded = torch.zeros(d, dtype=torch.float32, device=flat.device)
    decoded[idx] = dither_values(levels, neg, n, s)
    return body, {"k": k, "s": s, "coding": coding}, decoded


def topk_dither_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """One step of the plain torch composition (error feedback included when on): decoded."""
    ef = comp.uses_error_feedback()
    a = ErrorFeedback.corrected(x32, state) if ef else x32
    decoded = topk_dither_torch(comp, a, state)[2]
    if ef:
        state.tensors[ErrorFeedback.KEY] = (a.reshape(-1) - decoded).reshape(x32.shape)
    state.step += 1
    return decoded


class TopKDither(Compressor):
    """Top-k followed by natural dithering of the k values (Beznosikov et al. 2020, with Horváth et al.
    2019's natural dithering)."""

    info = TOPK_DITHER_CARD
    reference = topk_dither_reference

    def _form_corrected(self, x32: torch.Tensor, e: torch.Tensor, has_e: bool, state: State) -> tuple[int, np.ndarray] | None:
        """On CPU, a = x + e and the count of the top-k candidates in one pass (:func:`gcbench.kernels.topk_count`)."""
        if not kernels.fused_ef_ok(x32):
            return super()._form_corrected(x32, e, has_e, state)
        return kernels.topk_count(kernels.flat_f32(x32), k_of(self.params["density"], x32.numel()), e.reshape(-1).numpy(), has_e)

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        if not kernels.fused_ef_ok(a):
            wire, meta, decoded = topk_dither_torch(self, a, state)
            ctx.keep_residual(a, decoded)
            return wire, meta, decoded
        d = a.numel()
        k = k_of(self.params["density"], d)
        s, coding = self.params["s"], self.params["index_coding"]
        af = kernels.flat_f32(a)  # under error feedback: a view of the residual buffer, which holds a = x + e
        idx = kernels.topk_collect(af, k, *ctx.fused) if ctx.ef else kernels.topk_select(af, k)
        y = kernels.gather(af, idx)
        n = tensor_norm(torch.from_numpy(y), self.params["p"])
        field = kernels.dither_fields(y, n, s, state.randint64())
        body = encode_body(n, idx, field, d, 1 + level_bits(s), coding)
        if ctx.ef:
            kernels.scatter_sub(af, idx, kernels.dither_values(field, s, n)[0])  # e = a − decoded: only k entries change
        return body, {"k": k, "s": s, "coding": coding}, None

    def _expected_body_nbytes(self, payload: Payload) -> int | tuple[int, int]:
        meta_keys(payload, "k", "s", "coding")
        d = payload.numel
        w = 1 + level_bits(meta_int(payload, "s", 1, 120))
        k = meta_int(payload, "k", 0, d)
        coding = meta_str(payload, "coding", INDEX_CODINGS)
        if coding == "fixed":  # one (index, field) record of ceil(log2 d) + w bits each
            return 4 + codec.packed_nbytes(k, codec.index_width(d) + w)
        if coding == "elias":  # records of an Elias-ω gap and a w-bit field, one stream
            return 4 + (k * (1 + w) + 7) // 8, 4 + (k * (codec.elias_omega_length(d) + w) + 7) // 8
        lo, hi = codec.index_nbytes_range(d, k, coding)  # whole-byte indices, then the packed fields
        return 4 + lo + codec.packed_nbytes(k, w), 4 + hi + codec.packed_nbytes(k, w)

    def _decode(self, payload: Payload) -> torch.Tensor:
        s = meta_int(payload, "s")
        if not 1 <= s <= 120:
            raise PayloadError(f"topk_dither payload has an invalid level count s={s}")
        k, coding = meta_int(payload, "k"), meta_str(payload, "coding")
        if not (kernels.available() and payload.data.device.type == "cpu"):
            n_t, idx_t, field_t = decode_body_torch(body_tensor(payload), payload.numel, k, s, coding)
            out_t = torch.zeros(payload.numel, dtype=torch.float32, device=payload.data.device)
            out_t[idx_t] = dither_values(field_t >> 1, (field_t & 1).bool(), n_t, s)
            return out_t
        n, idx, field = decode_body(body_numpy(payload), payload.numel, k, 1 + level_bits(s), coding)
        vals, top = kernels.dither_values(field.astype(np.uint32), s, n)
        if top > s:
            raise PayloadError("topk_dither body has a level index above s")
        out = kernels.zeros(payload.numel)
        kernels.scatter(out.numpy(), idx, vals)
        return out


def topk_dither_bits(idx: np.ndarray, d: int, s: int, coding: str) -> int:
    """Body bits (tests' oracle): k·(index bits) + 32 + k·(1 + ceil(log2(s+1)))."""
    k = len(idx)
    return codec.index_bits(np.sort(idx), d, coding) + 32 + k * (1 + level_bits(s))
