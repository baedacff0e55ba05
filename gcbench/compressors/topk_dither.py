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
"""

from __future__ import annotations

import numpy as np
import torch

from gcbench import codec
from gcbench.compressor import Compressor, State, body_numpy, meta_int, meta_str
from gcbench.compressors._common import coding_param, density_param, k_of, to_numpy
from gcbench.compressors.natural import dither_encode, dither_values, level_bits, p_param, s_param
from gcbench.compressors.topk import topk_indices
from gcbench.errors import PayloadError
from gcbench.payload import Payload
from gcbench.registry import Param, register


def encode_body(n: float, idx: np.ndarray, field: np.ndarray, d: int, w: int, coding: str) -> np.ndarray:
    """Body bytes: float32 norm, then sorted ``idx`` and ``w``-bit ``field`` values with ``coding``."""
    head = np.array([n], "<f4").view(np.uint8)
    if coding == "fixed":
        iw = codec.index_width(d)
        rest = codec.pack_bits((idx.astype(np.int64) << w) | field, iw + w)
    elif coding == "elias":
        gv, gw = codec.elias_omega_fields(np.diff(idx, prepend=-1))
        vals = np.concatenate([gv, field[:, None]], axis=1)
        widths = np.concatenate([gw, np.full((len(idx), 1), w, np.int64)], axis=1)
        rest = codec.write_fields(vals, widths)
    else:  # int32 and delta-varint are whole bytes already
        rest = np.concatenate([codec.encode_indices(idx, d, coding), codec.pack_bits(field, w)])
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


def topk_dither_parts(payload: Payload) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """(norm, sorted indices, level indices, negative mask) carried by a payload (for tests and tools)."""
    s = meta_int(payload, "s")
    n, idx, field = decode_body(body_numpy(payload), payload.numel, meta_int(payload, "k"), 1 + level_bits(s), meta_str(payload, "coding"))
    return n, idx, field >> 1, (field & 1).astype(bool)


@register(
    name="topk_dither",
    version=1,
    description="exact top-k, then natural dithering of the kept values (norm + sign + level), error feedback on",
    paper="Beznosikov et al. 2020, On Biased Compression for Distributed Learning (top-k ∘ natural dithering of Horváth et al. 2019)",
    biased=True,
    stateful=False,
    error_feedback="optional",
    deterministic=False,
    params=(
        density_param(0.01),
        s_param(8),
        p_param("2"),
        coding_param("fixed"),
        Param("error_feedback", bool, True, "apply error feedback (residual) across steps; on by default for this biased compressor"),
    ),
)
class TopKDither(Compressor):
    def _encode(self, a: torch.Tensor, state: State):
        flat = a.reshape(-1)
        d = flat.numel()
        k = k_of(self.params["density"], d)
        s, coding = self.params["s"], self.params["index_coding"]
        idx = torch.sort(topk_indices(flat, k)).values  # sorted: the delta codings need it
        y = flat[idx]
        n, levels, neg = dither_encode(y, s, self.params["p"], state.uniform(k, flat.device))
        w = 1 + level_bits(s)
        field = to_numpy((levels << 1) | neg.to(torch.int64))
        body = encode_body(n, to_numpy(idx).astype(np.int64), field, d, w, coding)
        decoded = torch.zeros(d, dtype=torch.float32, device=flat.device)
        decoded[idx] = dither_values(levels, neg, n, s)
        return body, {"k": k, "s": s, "coding": coding}, decoded

    def _decode(self, payload: Payload) -> torch.Tensor:
        s = meta_int(payload, "s")
        if not 1 <= s <= 120:
            raise PayloadError(f"topk_dither payload has an invalid level count s={s}")
        n, idx, levels, neg = topk_dither_parts(payload)
        if levels.size and int(levels.max()) > s:
            raise PayloadError("topk_dither body has a level index above s")
        out = torch.zeros(payload.numel, dtype=torch.float32)
        out[torch.from_numpy(idx)] = dither_values(torch.from_numpy(levels), torch.from_numpy(neg), n, s)
        return out


def topk_dither_bits(idx: np.ndarray, d: int, s: int, coding: str) -> int:
    """Body bits (tests' oracle): k·(index bits) + 32 + k·(1 + ceil(log2(s+1)))."""
    k = len(idx)
    return codec.index_bits(np.sort(idx), d, coding) + 32 + k * (1 + level_bits(s))
