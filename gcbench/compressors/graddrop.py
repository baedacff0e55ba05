"""Gradient dropping — Aji & Heafield 2017, Sparse Communication for Distributed Gradient Descent
(EMNLP 2017), as implemented in Marian (``training/dropper``).

Algorithm (one worker, one step)::

    a = x + e                                   # e: the dropped residual of earlier steps
    m = min(sample_size, D); sample every (D // m)-th |a_i|, positions 0, s, 2s, …
    T = sorted(sample)[max(0, (int)(m·R) − 1)]  # R = drop_ratio, default 0.99 (Marian's rank)
    keep = |a| > T ; send a[keep] as (value, index) ; e = a − decoded

Choices made here (and why):

* **Residual.** The residual is the shared error-feedback mechanism (``error_feedback="always"``):
  ``e = a − decoded`` is exactly Marian's "a with the kept entries zeroed" when values are sent in
  fp32, and it also carries the quantization error when survivors are quantized (as the paper
  asks).
* **Scope.** ``scope="global"`` (default, as Marian, which drops on the whole flattened gradient)
  uses one threshold for every tensor the worker sends in the step: :meth:`GradDrop.compress_group`
  samples the concatenation of all of them (every (D // m)-th element in tensor order, without
  building the concatenation) and each tensor is then encoded with that threshold.  A single
  ``compress`` call, or ``scope="layer"``, uses the tensor's own threshold.
* **Cut-off rank (Marian).**  The strided sample of m = min(sample_size, D) magnitudes is sorted
  ascending and T = sorted[c] with ``c = max(0, (int)(m·R) − 1)``, the product taken in float32
  as Marian does (``int cut_index = std::max(0, (int)(sortSize * rate) - 1)`` in
  ``grad_drop_do``, marian-dev ``src/training/dropper.h`` at 82fc5bf1 and every later version up
  to ``gradient_dropping/gpu/dropper.cu``'s ``find_threshold``): :func:`marian_cut_index`.  Then
  ``keep = |a| > T``.  This is the "lower" R-quantile ``sorted[floor(R·(m − 1))]`` except when
  frac(R·m) ≥ R (at R = 0.99: m = 101, 201, …, where Marian's rank is one lower).
* **Small tensors.**  For 2 ≤ m ≤ 100 at R = 0.99, c = (int)(0.99·m) − 1 ≤ m − 2, so T is at most
  the second-largest sampled magnitude and a tensor of 100 elements or fewer (layer scope) sends
  at least its largest entry (ties aside); only a one-element tensor (c = 0, T = the element
  itself) never sends alone — its residual keeps growing; use global scope, as Marian does.
* **Sampling** is strided from position 0 (deterministic): every (D // m)-th magnitude, as
  Marian's ``randomSampling`` with ``len / sortSize``.
* **Quantization of survivors** (``quantize``):

  - ``none``: fp32 values.  Body bits: nnz·(32 + index bits).
  - ``1bit``: one sign bit per survivor and one fp32 scale ``s``; survivors decode to ±s with
    ``s`` = min kept |a| (``quant_scale="min"``) or mean kept |a| (``"mean"``), as
    the card defines it.  (Marian's one-bucket setting would use T itself, or the mean of
    the sorted sample from rank c up; not implemented.)  Body: 32 + nnz·1 bits + index bits, each
    section rounded up to whole bytes.
  - ``2bit``: the authors' scheme, marian-dev ``src/training/dropper.h`` at commit 82fc5bf1
    ("Integrated Alham's code"; the quantized kernels were removed again in later versions):
    ``grad_drop_do`` (lines 219–285) with ``bits = 2``, then ``bits--`` for the sign (line 247),
    so two buckets; ``min_val = tmp[cut_index]``, ``max_val = tmp[sortSize − 1]`` (line 249),
    ``bucket_size = (max_val − min_val) / 2`` (lines 250–251); kernels ``grad_drop_quantized``
    (lines 99–119) and ``grad_drop_quantized_mean`` (lines 121–146), ``locate`` (lines 191–197).  The
    maximum is the **largest sampled magnitude** ``max_val = sorted[m − 1]`` (not the largest
    kept |a|), the bucket width is ``w = (max_val − T) / 2`` (float32), and a survivor falls in
    bucket ``min(1, (int)((|a| − T) / w))`` (``grad_drop_quantized``; w = 0 puts every survivor in
    bucket 1, CUDA's saturating conversion of +inf).  Representatives:

    * ``quant_scale="min"`` (Marian's ``min-drop``): the bucket floors, T and T + w
      (``replace_to = (bucket_id * bucket_size + min_val) * sign``);
    * ``quant_scale="mean"`` (Marian's average variant, ``grad_drop_quantized_mean``): the means
      of the **sorted sample** in each bucket, mean1 over ranks c … i − 1 and mean2 over ranks
      i … m − 1, with i the number of sampled magnitudes ≤ T + w (``locate`` + 1); mean1 includes
      the cut-off value itself, as Marian's ``thrust::reduce(ptr + cut_index, ptr + idx)``.  When no
      sampled magnitude lies above T + w, mean2 is T + w, Marian's initial value.  The means are
      accumulated in float64 here (Marian: a float32 ``thrust::reduce``) and rounded to float32.

    Each survivor is sent as its sign bit and its bucket bit with the two representatives as fp32
    scales: body 64 + nnz·2 bits + index bits.  Under global scope T, max_val and the means come
    from the one sample of the whole step (Marian drops on the flattened model); under layer scope
    from the tensor's own sample.  (Version 1 split the kept values at their median instead, and
    used the min or mean of each half: not the authors' scheme.)

  The quantization error goes into the residual through error feedback (Marian's ``errors``).
* Index coding is selectable (``index_coding``, default ``fixed`` = ceil(log2 d) bits).

Version 2: Marian's cut-off rank (version 1 used the "lower" quantile ``floor(R·(m − 1))``) and
Marian's 2-bit buckets (version 1: a split at the median of the kept values); payload bytes change
for 2-bit survivors and for sample sizes where the two ranks differ.

Biased; with error feedback the sum of what is sent tracks the sum of gradients
(Σ decoded = Σ x − e_T).

Speed: ``x + e`` is formed in the residual buffer itself, and on CPU the selection is
:func:`gcbench.compressors._sparse.select_encode` — a count pass and one pass that writes
the body, leaves the residual in place and fills the decoded tensor only when asked.
:func:`graddrop_reference_encode` is the plain torch version (the tests compare bodies).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors import _sparse
from gcbench.compressors._common import dense_from_sparse, sparse_body, sparse_decode, to_numpy
from gcbench.compressors._sparsify import above, form_counting, strided_sample
from gcbench.compressors.cards.graddrop import GRADDROP_CARD, QUANTIZE
from gcbench.core import codec, codec_torch
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, ErrorFeedback, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_numpy, body_tensor, meta_int, meta_keys, meta_str
from gcbench.core.params import INDEX_CODINGS
from gcbench.core.payload import MetaValue, Payload

_SCALES = {"none": 0, "1bit": 1, "2bit": 2}  # fp32 scales in the body
_CODE_BITS = {"1bit": 1, "2bit": 2}
# state.values key through which compress_group hands the group's global levels to _encode
_GROUP_LEVELS = "graddrop_group_levels"


def marian_cut_index(m: int, drop_ratio: float) -> int:
    """Marian's rank of the cut-off in the ascending sorted sample: ``max(0, (int)(m·R) − 1)``, in float32.

    ``int cut_index = std::max(0, (int)(sortSize * rate) - 1)`` with ``float rate``: the product is
    rounded to float32 before the truncation, so 0.29·100 gives 29, as the authors' code does.
    """
    return max(0, int(np.float32(m) * np.float32(drop_ratio)) - 1)


@dataclass(frozen=True)
class DropLevels:
    """What one sample decides: the cut-off T and, for 2-bit survivors, Marian's two buckets.

    Attributes:
        threshold: T; entries with |a| > T are kept.
        width: 2-bit bucket width w = (max sampled |a| − T) / 2 (float32); 0 when not quantizing.
        reps: the two buckets' magnitudes (float32), lower bucket first (see the module docstring).
    """

    threshold: float
    width: float = 0.0
    reps: tuple[float, float] = (0.0, 0.0)


def drop_levels(sample: np.ndarray, drop_ratio: float, two_bit: bool = False, quant_scale: str = "min") -> DropLevels:
    """T (and, with ``two_bit``, Marian's buckets) from a sample of magnitudes, as ``grad_drop_do``."""
    m = sample.size
    if m == 0:
        return DropLevels(0.0)
    cut = marian_cut_index(m, drop_ratio)
    if not two_bit:
        return DropLevels(float(np.partition(sample, cut)[cut]))
    srt = np.sort(sample.astype(np.float32, copy=False))
    t, top = srt[cut], srt[m - 1]
    width = np.float32((top - t) / np.float32(2))  # range / bucket_count, in float32
    mid = np.float32(t + width)
    if quant_scale == "min":  # bucket floors: bucket_id * bucket_size + min_val
        reps = (float(t), float(mid))
    else:
        i = int(np.searchsorted(srt, mid, side="right"))  # locate(tmp, min + bucket) + 1: ranks with value <= T + w
        low = np.float32(srt[cut:i].mean(dtype=np.float64))  # i > cut: srt[cut] = T <= T + w
        high = np.float32(srt[i:].mean(dtype=np.float64)) if i < m else mid
        reps = (float(low), float(high))
    return DropLevels(float(t), float(width), reps)


@dataclass(frozen=True)
class DeviceLevels:
    """:class:`DropLevels` as float32 tensors on the device (the torch path's: no host read).

    Attributes:
        threshold: T, 0-d.
        width: the 2-bit bucket width, 0-d (0 when not quantizing).
        reps: the two buckets' magnitudes, shape (2,).
    """

    threshold: torch.Tensor
    width: torch.Tensor
    reps: torch.Tensor


def drop_levels_torch(sample: torch.Tensor, drop_ratio: float, two_bit: bool = False, quant_scale: str = "min") -> DeviceLevels:
    """:func:`drop_levels` with torch operations on the sample's device (no scalar read): the sample sorted
    ascending as NumPy sorts it (NaN last), the same float32 arithmetic; the ``mean`` representatives are
    float64 sums of the same ranks (torch's summation order, rounded to float32 as there)."""
    m = sample.numel()
    zero = torch.zeros((), dtype=torch.float32, device=sample.device)
    if m == 0:
        return DeviceLevels(zero, zero, zero.new_zeros(2))
    cut = marian_cut_index(m, drop_ratio)
    srt = torch.sort(sample.float()).values
    t = srt[cut]
    if not two_bit:
        return DeviceLevels(t, zero, zero.new_zeros(2))
    width = (srt[m - 1] - t) / 2  # range / bucket_count, in float32
    mid = t + width
    if quant_scale == "min":  # bucket floors: bucket_id * bucket_size + min_val
        return DeviceLevels(t, width, torch.stack([t, mid]))
    i = torch.searchsorted(srt, mid.reshape(1), right=True)  # ranks with value <= T + w (> cut)
    ranks = torch.arange(m, device=srt.device)
    s64 = srt.double()
    low_rank = (ranks >= cut) & (ranks < i)
    high_rank = ranks >= i
    low = torch.where(low_rank, s64, 0).sum() / low_rank.sum()
    high = torch.where(high_rank, s64, 0).sum() / torch.clamp(high_rank.sum(), min=1)
    high = torch.where(i[0] < m, high, mid.double())
    return DeviceLevels(t, width, torch.stack([low, high]).float())


def graddrop_levels(gathers: Sequence[Callable[[torch.Tensor], torch.Tensor]], sizes: Sequence[int],
                    params: Mapping[str, Any]) -> DropLevels:
    """Marian's cut-off (and 2-bit buckets) from a strided sample of the |values| of one or more tensors."""
    sample = strided_sample(gathers, sizes, params["sample_size"])
    return drop_levels(to_numpy(sample), params["drop_ratio"], params["quantize"] == "2bit", params["quant_scale"])


def graddrop_levels_torch(gathers: Sequence[Callable[[torch.Tensor], torch.Tensor]], sizes: Sequence[int],
                          params: Mapping[str, Any], device: torch.device) -> DeviceLevels:
    """:func:`graddrop_levels` on ``device`` (the tensors'): the sample and the levels never leave it."""
    sample = strided_sample(gathers, sizes, params["sample_size"], device)
    return drop_levels_torch(sample, params["drop_ratio"], params["quantize"] == "2bit", params["quant_scale"])


def quantize_survivors(vals: torch.Tensor, mode: str, scale: str,
                       levels: DropLevels | DeviceLevels) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes int64, scales float32, decoded float32) of the kept values ``vals`` (nnz >= 1).

    ``1bit``: code = negative, one scale (min or mean kept |a|); ``2bit``: code = negative |
    bucket << 1 with Marian's buckets and representatives from ``levels`` (see the module docstring).
    """
    mag = vals.abs()
    neg = (vals < 0).to(torch.int64)
    sign = torch.where(vals < 0, -1.0, 1.0)
    if mode == "1bit":
        s = (mag.min() if scale == "min" else mag.mean()).reshape(1)
        return neg, s, sign * s
    if isinstance(levels, DeviceLevels):
        t, w, scales = levels.threshold, levels.width, levels.reps
    else:
        t = torch.tensor(levels.threshold, dtype=torch.float32, device=vals.device)
        w = torch.tensor(levels.width, dtype=torch.float32, device=vals.device)
        scales = torch.tensor(levels.reps, dtype=torch.float32, device=vals.device)
    # (int)((|a| − T) / w) capped at 1: the upper bucket iff the quotient reaches 1 (+inf when w = 0)
    high = ((mag - t) / w >= 1).to(torch.int64)
    return neg | (high << 1), scales, sign * scales[high]


def quantized_body(codes: np.ndarray, scales: np.ndarray, idx: np.ndarray, d: int, mode: str, coding: str) -> np.ndarray:
    """The body of quantized survivors: fp32 scales, packed codes, then the index coding."""
    return np.concatenate([
        np.ascontiguousarray(scales, dtype=np.float32).astype("<f4").view(np.uint8),
        codec.pack_bits(codes, _CODE_BITS[mode]),
        _sparse.encode_indices(idx, d, coding),
    ])


def quantized_body_torch(codes: torch.Tensor, scales: torch.Tensor, idx: torch.Tensor, d: int, mode: str, coding: str) -> torch.Tensor:
    """:func:`quantized_body` on the tensors' device (:mod:`gcbench.core.codec_torch`; ``idx`` sorted)."""
    return torch.cat([
        scales.to(torch.float32).contiguous().view(torch.uint8),
        codec_torch.pack_bits(codes, _CODE_BITS[mode]),
        codec_torch.encode_indices(idx, d, coding, validate=False),
    ])


def _layer_levels(flat: torch.Tensor, params: Mapping[str, Any], res: torch.Tensor | None = None,
                  buckets: bool = True) -> DropLevels:
    """The tensor's own levels, of ``flat + res`` (``res`` None: of ``flat``), as :func:`graddrop_levels`.

    On CPU the strided sample is a NumPy slice on the calling thread (the same sample, the same
    values as the torch route).  ``buckets=False`` gives the threshold alone (no sort).
    """
    d = flat.numel()
    two_bit = buckets and params["quantize"] == "2bit"
    if kernels.fast_cpu(flat) and (res is None or kernels.fast_cpu(res)) and d:
        m = min(int(params["sample_size"]), d)
        stride = d // m
        sample = kernels.as_numpy(flat)[: m * stride : stride]
        if res is not None:
            sample = sample + kernels.as_numpy(res)[: m * stride : stride]
        return drop_levels(np.abs(sample), params["drop_ratio"], two_bit, params["quant_scale"])
    sampled = strided_sample([_corrected_gather(flat, res)], [d], params["sample_size"])
    return drop_levels(to_numpy(sampled), params["drop_ratio"], two_bit, params["quant_scale"])


def graddrop_reference_encode(comp: Compressor, x32: torch.Tensor, state: State,
                              levels: DropLevels | None = None) -> tuple[np.ndarray, dict[str, MetaValue], torch.Tensor]:
    """(body, header, decoded) the plain torch way: ``a = x + e``, keep ``|a| > T``, quantize (state untouched).

    ``levels`` are the group's global levels; None uses the tensor's own (layer scope, or a
    single ``compress``).
    """
    p = comp.params
    a = ErrorFeedback.corrected(x32, state)
    flat = a.reshape(-1)
    d = flat.numel()
    if levels is None:  # the torch route of the strided sample (the fast path reads it with NumPy)
        levels = graddrop_levels([lambda pos: flat[pos.to(flat.device)]], [d], p)
    idx = above(flat, levels.threshold)
    vals = flat[idx]
    mode, coding = p["quantize"], p["index_coding"]
    meta: dict[str, MetaValue] = {"k": int(idx.numel()), "coding": coding, "q": mode}
    if idx.numel() == 0:
        return np.zeros(0, np.uint8), meta, torch.zeros(x32.shape, dtype=torch.float32, device=flat.device)
    if mode == "none":
        body = codec.encode_sparse(to_numpy(vals), to_numpy(idx), d, coding)
        return body, meta, dense_from_sparse(vals, idx, d).reshape(x32.shape)
    codes, scales, dec_vals = quantize_survivors(vals, mode, p["quant_scale"], levels)
    body = quantized_body(to_numpy(codes), to_numpy(scales), to_numpy(idx), d, mode, coding)
    return body, meta, dense_from_sparse(dec_vals, idx, d).reshape(x32.shape)


def graddrop_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """The decoded tensor of :func:`graddrop_reference_encode` (the class's ``reference``)."""
    return graddrop_reference_encode(comp, x32, state)[2]


class GradDrop(Compressor):
    """Gradient dropping (Aji & Heafield, EMNLP 2017, as implemented in Marian): a sampled quantile threshold drops
    the small entries of ``a = x + e``, which stay in the residual."""

    info = GRADDROP_CARD

    reference = graddrop_reference

    def compress_group(
        self, xs: Sequence[torch.Tensor], states: Sequence[State], need_decoded: bool = True
    ) -> list[tuple[Payload, torch.Tensor | None]]:
        """Global scope: one threshold from a strided sample of all ``x + e`` of the step."""
        if self.params["scope"] != "global" or len(xs) < 2:
            return super().compress_group(xs, states, need_decoded)
        gathers: list[Callable[[torch.Tensor], torch.Tensor]] = []
        sizes: list[int] = []
        for x, st in zip(xs, states, strict=True):
            if not x.is_floating_point():
                raise TypeError(f"{self.name}: gradients must be floating point, got {x.dtype}")
            flat = x.detach().reshape(-1)
            e = ErrorFeedback.previous(st, x.shape)
            res = e.reshape(-1) if e is not None else None
            gathers.append(_corrected_gather(flat, res))
            sizes.append(flat.numel())
        levels: DropLevels | DeviceLevels
        if kernels.cpu_fast(*xs):
            levels = graddrop_levels(gathers, sizes, self.params)
        else:  # the torch path: the sample and the levels stay on the tensors' device
            levels = graddrop_levels_torch(gathers, sizes, self.params, xs[0].device)
        for st in states:
            st.values[_GROUP_LEVELS] = levels
        try:
            return super().compress_group(xs, states, need_decoded)
        finally:  # never leave the hand-over value behind (e.g. empty tensors skip _encode)
            for st in states:
                st.values.pop(_GROUP_LEVELS, None)

    def _form_corrected(self, x32: torch.Tensor, e: torch.Tensor, has_e: bool, state: State) -> np.ndarray | None:
        """a = x + e with the counts of |a| > T in one pass: T is the group's threshold (left for
        :meth:`_encode` to take) or the layer threshold of x + e, from its strided sample."""
        if not kernels.fast_cpu(x32, e):  # the torch path: nothing to fuse (the encoder samples a = x + e itself)
            ErrorFeedback.form(x32, e, has_e)
            return None
        levels = state.values.get(_GROUP_LEVELS)
        if levels is None:
            levels = _layer_levels(x32.reshape(-1), self.params, e.reshape(-1) if has_e else None, buckets=False)
        return form_counting(x32, e, has_e, kernels.f32_threshold(levels.threshold, strict=True))

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        p = self.params
        flat = a.reshape(-1)
        d = flat.numel()
        levels = state.values.pop(_GROUP_LEVELS, None)
        if not kernels.fast_cpu(flat):
            if not isinstance(levels, DeviceLevels):  # a = x + e: its own levels (layer scope, or one tensor)
                sample = strided_sample([_corrected_gather(flat, None)], [d], p["sample_size"], flat.device)
                levels = drop_levels_torch(sample, p["drop_ratio"], p["quantize"] == "2bit", p["quant_scale"])
            return _select_torch(self.params, flat, levels, ctx)
        if levels is None:
            levels = _layer_levels(flat, p)  # a = x + e: the threshold _form_corrected found
        thr = levels.threshold
        mode, coding = p["quantize"], p["index_coding"]
        if mode == "none":
            sel = _sparse.select_encode(kernels.as_numpy(flat), kernels.f32_threshold(thr, strict=True), coding, counts=ctx.fused,
                                     zero_mode=kernels.ZERO_SUB if ctx.ef else kernels.ZERO_NONE, want_decoded=ctx.need_decoded)
            body = sel.body if sel.k else np.zeros(0, np.uint8)
            decoded = torch.from_numpy(sel.decoded) if sel.decoded is not None else None
            return body, {"k": sel.k, "coding": coding, "q": mode}, decoded
        sel = _sparse.select_encode(kernels.as_numpy(flat), kernels.f32_threshold(thr, strict=True), None, counts=ctx.fused,
                                    want_idx=True)
        assert sel.idx is not None and sel.vals is not None
        idx, vals = torch.from_numpy(sel.idx), torch.from_numpy(sel.vals)
        meta: dict[str, MetaValue] = {"k": int(idx.numel()), "coding": coding, "q": mode}
        if idx.numel() == 0:
            return np.zeros(0, np.uint8), meta, (torch.zeros(d, dtype=torch.float32) if ctx.need_decoded else None)
        codes, scales, dec_vals = quantize_survivors(vals, mode, p["quant_scale"], levels)
        body = quantized_body(to_numpy(codes), to_numpy(scales), sel.idx, d, mode, coding)
        decoded = _sparse.dense_from(sel.idx, dec_vals.numpy(), d) if ctx.need_decoded else None
        if ctx.ef:
            kernels.scatter_sub(kernels.as_numpy(flat), sel.idx, dec_vals.numpy())  # the residual a − decoded
        return body, meta, decoded

    def _expected_body_nbytes(self, payload: Payload) -> int | tuple[int, int]:
        meta_keys(payload, "k", "coding", "q")
        d = payload.numel
        k, coding, mode = meta_int(payload, "k", 0, d), meta_str(payload, "coding", INDEX_CODINGS), meta_str(payload, "q", QUANTIZE)
        if k == 0:
            return 0  # nothing survived: an empty body
        if mode == "none":
            return codec.sparse_nbytes_range(d, k, coding)
        lo, hi = codec.index_nbytes_range(d, k, coding)  # fp32 scales, packed codes, then the indices
        head = 4 * _SCALES[mode] + codec.packed_nbytes(k, _CODE_BITS[mode])
        return head + lo, head + hi

    def _decode(self, payload: Payload) -> torch.Tensor:
        d = payload.numel
        k, coding, mode = meta_int(payload, "k"), meta_str(payload, "coding"), meta_str(payload, "q")
        if mode not in QUANTIZE or coding not in INDEX_CODINGS or not 0 <= k <= d:
            raise PayloadError(f"graddrop payload header is invalid (k={k}, coding={coding!r}, q={mode!r})")
        if not kernels.cpu_fast(payload.data):
            return _decode_torch(payload, d, k, coding, mode)
        body = body_numpy(payload)
        if k == 0:
            return torch.from_numpy(kernels.zeros_f32(d))
        if mode == "none":
            return _sparse.decode_sparse(body, d, k, coding, payload.codec)
        ns, width = _SCALES[mode], _CODE_BITS[mode]
        nc = codec.packed_nbytes(k, width)
        if len(body) < 4 * ns + nc:
            raise PayloadError("graddrop quantized body is truncated")
        scales = torch.from_numpy(body[: 4 * ns].view("<f4").astype(np.float32))
        codes = torch.from_numpy(codec.unpack_bits(body[4 * ns : 4 * ns + nc], width, k))
        idx = _sparse.decode_indices(body[4 * ns + nc :], d, k, coding, payload.codec)
        sign = torch.where((codes & 1).bool(), -1.0, 1.0)
        return _sparse.dense_from(idx, (sign * scales[codes >> 1]).numpy(), d)


def _select_torch(p: Mapping[str, Any], flat: torch.Tensor, levels: DeviceLevels, ctx: EncodeContext) -> Encoded:
    """GradDrop's encoder on the torch path: selection, quantization and body on ``flat``'s device (one scalar read, the
    number of survivors; one more for a variable-length index coding's length)."""
    d = flat.numel()
    mode, coding = p["quantize"], p["index_coding"]
    idx = above(flat, levels.threshold)
    vals = flat[idx]
    meta: dict[str, MetaValue] = {"k": int(idx.numel()), "coding": coding, "q": mode}
    if idx.numel() == 0:
        empty = torch.zeros(0, dtype=torch.uint8, device=flat.device)
        return empty, meta, (torch.zeros(d, dtype=torch.float32, device=flat.device) if ctx.need_decoded else None)
    if mode == "none":
        body, dec_vals = sparse_body(vals, idx, d, coding, is_sorted=True), vals
    else:
        codes, scales, dec_vals = quantize_survivors(vals, mode, p["quant_scale"], levels)
        body = quantized_body_torch(codes, scales, idx, d, mode, coding)
    decoded = dense_from_sparse(dec_vals, idx, d) if ctx.need_decoded else None
    if ctx.ef:
        flat[idx] = flat[idx] - dec_vals  # the residual a − decoded
    return body, meta, decoded


def _decode_torch(payload: Payload, d: int, k: int, coding: str, mode: str) -> torch.Tensor:
    """The torch path's decoder (header checked): torch operations where the body lies.

    Scalar reads: the index check (one, folded); a variable-length index coding's length (one more).
    """
    body = body_tensor(payload)
    if k == 0:
        return torch.zeros(d, dtype=torch.float32, device=body.device)
    if mode == "none":
        return sparse_decode(payload)
    ns, width = _SCALES[mode], _CODE_BITS[mode]
    nc = codec.packed_nbytes(k, width)
    if body.numel() < 4 * ns + nc:
        raise PayloadError("graddrop quantized body is truncated")
    scales = body[: 4 * ns].clone().view(torch.float32)
    codes = codec_torch.unpack_bits(body[4 * ns : 4 * ns + nc], width, k)
    rest = body[4 * ns + nc :]
    idx, used = codec_torch.decode_indices(rest, d, k, coding)
    if used != rest.numel():
        raise PayloadError(f"{payload.codec} body has {rest.numel() - used} bytes after its {k} indices")
    if bool(((idx < 0) | (idx >= d)).any()):
        raise PayloadError(f"{payload.codec} body has an index outside the tensor")
    sign = torch.where((codes & 1).bool(), -1.0, 1.0)
    return dense_from_sparse(sign * scales[codes >> 1], idx, d)


def _corrected_gather(flat: torch.Tensor, res: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """Gather ``x + e`` at given positions without forming ``x + e`` for the whole tensor."""

    def gather(pos: torch.Tensor) -> torch.Tensor:
        pos = pos.to(flat.device)
        vals = flat[pos].float()
        return vals + res[pos] if res is not None else vals

    return gather
