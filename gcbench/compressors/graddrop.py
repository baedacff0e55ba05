"""Gradient dropping — Aji & Heafield 2017, Sparse Communication for Distributed Gradient Descent
(EMNLP 2017), as implemented in Marian (``training/dropper``).

Algorithm (one worker, one step)::

    a = x + e                                   # e: the dropped residual of earlier steps
    m = min(sample_size, D); sample every (D // m)-th |a_i|, positions 0, s, 2s, …
    T = R-quantile of the sample                # R = drop_ratio, default 0.99
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
* **Quantile.** The sample R-quantile is the order statistic ``sorted[floor(R·(m − 1))]``
  (NumPy's ``method="lower"``), computed with ``torch.kthvalue``.  Marian's kernel reads
  ``sorted[floor(R·m)]``; the two differ by at most one rank, which is negligible for m = 100,000,
  but Marian's index makes a tensor of at most 100 elements never send anything under layer scope
  (its threshold is its own maximum).  With the "lower" rule such a tensor sends its largest entry.
  A one-element tensor alone (layer scope) never sends (nothing exceeds the element itself); its
  residual keeps growing — use global scope, as Marian does.
* **Sampling** is strided from position 0 (deterministic), as "every (d/m)-th" in the spec.
* **Quantization of survivors** (``quantize``):

  - ``none``: fp32 values.  Body bits: nnz·(32 + index bits).
  - ``1bit``: one sign bit per survivor and one fp32 scale ``s``; survivors decode to ±s with
    ``s`` = min kept |a| (``quant_scale="min"``, the paper) or mean kept |a| (``"mean"``).
    Body: 32 + nnz·1 bits + index bits, each section rounded up to whole bytes.
  - ``2bit``: a sign bit and a magnitude bit per survivor, with two fp32 scales: survivors with
    |a| above the (lower) median of kept |a| form the "high" group, the rest the "low" group;
    each group decodes to ±(min or mean of its |a|).  Body: 64 + nnz·2 bits + index bits.

  The quantization error goes into the residual through error feedback.
* Index coding is selectable (``index_coding``, default ``fixed`` = ceil(log2 d) bits).

Biased; with error feedback the sum of what is sent tracks the sum of gradients
(Σ decoded = Σ x − e_T).

Speed: ``x + e`` is formed in the residual buffer itself, and on CPU the selection is
:func:`gcbench.compressors._sparse_fast.select_encode` — a count pass and one pass that writes
the body, leaves the residual in place and fills the decoded tensor only when asked.
:func:`graddrop_reference_encode` is the plain torch version (the tests compare bodies).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from gcbench import codec
from gcbench.compressor import Compressor, ErrorFeedback, State, body_numpy, meta_int, meta_keys, meta_str
from gcbench.compressors import _sparse_fast as fast
from gcbench.compressors._common import coding_param, dense_from_sparse, to_numpy
from gcbench.compressors._select import InPlaceEncoder, above, lower_quantile, strided_sample
from gcbench.errors import PayloadError
from gcbench.payload import MetaValue, Payload
from gcbench.registry import Param, register

QUANTIZE = ("none", "1bit", "2bit")
_SCALES = {"none": 0, "1bit": 1, "2bit": 2}  # fp32 scales in the body
_CODE_BITS = {"1bit": 1, "2bit": 2}
# state.values key through which compress_group hands the group's global threshold to _encode
_GROUP_THRESHOLD = "graddrop_group_threshold"


def graddrop_threshold(gathers: Sequence[Callable[[torch.Tensor], torch.Tensor]], sizes: Sequence[int], drop_ratio: float,
                       sample_size: int) -> float:
    """Marian's threshold: the ``drop_ratio``-quantile of a strided sample of |values|."""
    sample = strided_sample(gathers, sizes, sample_size)
    return lower_quantile(sample, drop_ratio) if sample.numel() else 0.0


def quantize_survivors(vals: torch.Tensor, mode: str, scale: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes int64, scales float32, decoded float32) of the kept values ``vals`` (nnz >= 1).

    ``1bit``: code = negative; ``2bit``: code = negative | high << 1 (see the module docstring).
    """
    mag = vals.abs()
    neg = (vals < 0).to(torch.int64)
    sign = torch.where(vals < 0, -1.0, 1.0)

    def pick(group: torch.Tensor) -> torch.Tensor:
        if group.numel() == 0:
            return torch.zeros((), dtype=torch.float32, device=vals.device)
        return group.min() if scale == "min" else group.mean()

    if mode == "1bit":
        s = pick(mag).reshape(1)
        return neg, s, sign * s
    n = mag.numel()
    median = torch.kthvalue(mag, (n + 1) // 2).values  # lower median
    high = mag > median
    scales = torch.stack([pick(mag[~high]), pick(mag[high])])
    codes = neg | (high.to(torch.int64) << 1)
    return codes, scales, sign * scales[high.to(torch.int64)]


def quantized_body(codes: np.ndarray, scales: np.ndarray, idx: np.ndarray, d: int, mode: str, coding: str) -> np.ndarray:
    """The body of quantized survivors: fp32 scales, packed codes, then the index coding."""
    return np.concatenate([
        np.ascontiguousarray(scales, dtype=np.float32).astype("<f4").view(np.uint8),
        codec.pack_bits(codes, _CODE_BITS[mode]),
        fast.encode_indices(idx, d, coding),
    ])


def _layer_threshold(flat: torch.Tensor, params: Mapping[str, Any], res: torch.Tensor | None = None) -> float:
    """The tensor's own threshold, of ``flat + res`` (``res`` None: of ``flat``), as :func:`graddrop_threshold`.

    On CPU the strided sample and its order statistic are NumPy operations on the calling thread
    (the same sample, the same value as the torch route).
    """
    d = flat.numel()
    if fast.fast_cpu(flat) and (res is None or fast.fast_cpu(res)) and d:
        m = min(int(params["sample_size"]), d)
        stride = d // m
        sample = fast.as_numpy(flat)[: m * stride : stride]
        if res is not None:
            sample = sample + fast.as_numpy(res)[: m * stride : stride]
        pos = math.floor(round(params["drop_ratio"] * (m - 1), 9))  # lower_quantile's rank
        return float(np.partition(np.abs(sample), pos)[pos])
    return graddrop_threshold([_corrected_gather(flat, res)], [d], params["drop_ratio"], params["sample_size"])


def graddrop_reference_encode(comp: Compressor, x32: torch.Tensor, state: State,
                              threshold: float | None = None) -> tuple[np.ndarray, dict[str, MetaValue], torch.Tensor]:
    """(body, header, decoded) the plain torch way: ``a = x + e``, keep ``|a| > T``, quantize (state untouched).

    ``threshold`` is the group's global threshold; None uses the tensor's own (layer scope, or a
    single ``compress``).
    """
    p = comp.params
    a = ErrorFeedback.corrected(x32, state)
    flat = a.reshape(-1)
    d = flat.numel()
    if threshold is None:  # the torch route of the strided-sample quantile (the fast path reads it with NumPy)
        threshold = graddrop_threshold([lambda pos: flat[pos.to(flat.device)]], [d], p["drop_ratio"], p["sample_size"])
    idx = above(flat, threshold)
    vals = flat[idx]
    mode, coding = p["quantize"], p["index_coding"]
    meta: dict[str, MetaValue] = {"k": int(idx.numel()), "coding": coding, "q": mode}
    if idx.numel() == 0:
        return np.zeros(0, np.uint8), meta, torch.zeros(x32.shape, dtype=torch.float32, device=flat.device)
    if mode == "none":
        body = codec.encode_sparse(to_numpy(vals), to_numpy(idx), d, coding)
        return body, meta, dense_from_sparse(vals, idx, d).reshape(x32.shape)
    codes, scales, dec_vals = quantize_survivors(vals, mode, p["quant_scale"])
    body = quantized_body(to_numpy(codes), to_numpy(scales), to_numpy(idx), d, mode, coding)
    return body, meta, dense_from_sparse(dec_vals, idx, d).reshape(x32.shape)


def graddrop_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """The decoded tensor of :func:`graddrop_reference_encode` (the class's ``reference``)."""
    return graddrop_reference_encode(comp, x32, state)[2]


@register(
    name="graddrop",
    version=1,
    description="gradient dropping: drop |x+e| below the sampled R-quantile (global or per layer), residual kept; 1/2-bit option",
    paper="Aji & Heafield 2017, Sparse Communication for Distributed Gradient Descent (Marian implementation)",
    biased=True,
    stateful=True,
    error_feedback="always",
    deterministic=True,
    params=(
        Param("drop_ratio", float, 0.99, "R: fraction of entries dropped; threshold = sampled R-quantile of |x+e|",
              low=0.0, high=1.0, high_open=True),
        Param("scope", str, "global", "one threshold over all tensors of the step (global, Marian) or per tensor (layer)",
              choices=("global", "layer")),
        Param("sample_size", int, 100000, "at most this many strided samples for the quantile", low=1),
        coding_param("fixed"),
        Param("quantize", str, "none", "survivor values: fp32 (none), sign + one scale (1bit), sign + magnitude bit + two scales (2bit)",
              choices=QUANTIZE),
        Param("quant_scale", str, "min", "scale of quantized survivors: min kept |a| (paper) or mean", choices=("min", "mean")),
    ),
)
class GradDrop(InPlaceEncoder):
    """Gradient dropping with a sampled quantile threshold and error feedback."""

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
            e = st.tensors.get(ErrorFeedback.KEY)
            # same rule as ErrorFeedback.corrected: a residual of another shape is ignored
            res = e.reshape(-1) if e is not None and e.shape == x.shape else None
            gathers.append(_corrected_gather(flat, res))
            sizes.append(flat.numel())
        thr = graddrop_threshold(gathers, sizes, self.params["drop_ratio"], self.params["sample_size"])
        for st in states:
            st.values[_GROUP_THRESHOLD] = thr
        try:
            return super().compress_group(xs, states, need_decoded)
        finally:  # never leave the hand-over value behind (e.g. empty tensors skip _encode)
            for st in states:
                st.values.pop(_GROUP_THRESHOLD, None)

    def _ef_count_threshold(self, x32: torch.Tensor, state: State) -> np.float32 | None:
        """The group's threshold (left for :meth:`_encode_inplace` to take), or the layer threshold of x + e."""
        thr = state.values.get(_GROUP_THRESHOLD)
        if thr is None:
            e = state.tensors.get(ErrorFeedback.KEY)
            res = e.reshape(-1) if e is not None and e.shape == x32.shape and e.dtype == torch.float32 else None
            thr = _layer_threshold(x32.reshape(-1), self.params, res)
        return fast.f32_threshold(thr, strict=True)

    def _encode_inplace(self, a: torch.Tensor, state: State, need_decoded: bool, ef: bool,
                        counts: np.ndarray | None) -> tuple[np.ndarray, dict[str, MetaValue], torch.Tensor | None]:
        p = self.params
        flat = a.reshape(-1)
        d = flat.numel()
        thr = state.values.pop(_GROUP_THRESHOLD, None)
        if thr is None:
            thr = _layer_threshold(flat, p)  # a = x + e: the value _ef_count_threshold found
        mode, coding = p["quantize"], p["index_coding"]
        cpu = fast.fast_cpu(flat)
        if cpu and mode == "none":
            sel = fast.select_encode(fast.as_numpy(flat), fast.f32_threshold(thr, strict=True), coding, counts=counts,
                                     zero_mode=fast.ZERO_SUB if ef else fast.ZERO_NONE, want_decoded=need_decoded)
            body = sel.body if sel.k else np.zeros(0, np.uint8)
            decoded = torch.from_numpy(sel.decoded) if sel.decoded is not None else None
            return body, {"k": sel.k, "coding": coding, "q": mode}, decoded
        if cpu:
            sel = fast.select_encode(fast.as_numpy(flat), fast.f32_threshold(thr, strict=True), None, counts=counts, want_idx=True)
            assert sel.idx is not None and sel.vals is not None
            idx, vals = torch.from_numpy(sel.idx), torch.from_numpy(sel.vals)
        else:
            idx = above(flat, thr)
            vals = flat[idx]
        meta: dict[str, MetaValue] = {"k": int(idx.numel()), "coding": coding, "q": mode}
        if idx.numel() == 0:
            return np.zeros(0, np.uint8), meta, (torch.zeros(d, dtype=torch.float32, device=flat.device) if need_decoded else None)
        if mode == "none":
            body = codec.encode_sparse(to_numpy(vals), to_numpy(idx), d, coding)
            dec_vals = vals
        else:
            codes, scales, dec_vals = quantize_survivors(vals, mode, p["quant_scale"])
            body = quantized_body(to_numpy(codes), to_numpy(scales), to_numpy(idx), d, mode, coding)
        if cpu:
            decoded = fast.dense_from(idx.numpy(), dec_vals.numpy(), d) if need_decoded else None
            if ef:
                fast.scatter_sub(fast.as_numpy(flat), idx.numpy(), dec_vals.numpy())  # the residual a − decoded
            return body, meta, decoded
        decoded = dense_from_sparse(dec_vals, idx, d) if need_decoded else None
        if ef:
            flat[idx] = flat[idx] - dec_vals
        return body, meta, decoded

    def _expected_body_nbytes(self, payload: Payload) -> int | tuple[int, int]:
        meta_keys(payload, "k", "coding", "q")
        d = payload.numel
        k, coding, mode = meta_int(payload, "k", 0, d), meta_str(payload, "coding", codec.INDEX_CODINGS), meta_str(payload, "q", QUANTIZE)
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
        if mode not in QUANTIZE or coding not in codec.INDEX_CODINGS or not 0 <= k <= d:
            raise PayloadError(f"graddrop payload header is invalid (k={k}, coding={coding!r}, q={mode!r})")
        body = body_numpy(payload)
        if k == 0:
            return torch.from_numpy(fast.zeros_f32(d))
        if mode == "none":
            return fast.decode_sparse(body, d, k, coding, payload.codec)
        ns, width = _SCALES[mode], _CODE_BITS[mode]
        nc = codec.packed_nbytes(k, width)
        if len(body) < 4 * ns + nc:
            raise PayloadError("graddrop quantized body is truncated")
        scales = torch.from_numpy(body[: 4 * ns].view("<f4").astype(np.float32))
        codes = torch.from_numpy(codec.unpack_bits(body[4 * ns : 4 * ns + nc], width, k))
        idx = fast.decode_indices(body[4 * ns + nc :], d, k, coding, payload.codec)
        sign = torch.where((codes & 1).bool(), -1.0, 1.0)
        return fast.dense_from(idx, (sign * scales[codes >> 1]).numpy(), d)


def _corrected_gather(flat: torch.Tensor, res: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """Gather ``x + e`` at given positions without forming ``x + e`` for the whole tensor."""

    def gather(pos: torch.Tensor) -> torch.Tensor:
        pos = pos.to(flat.device)
        vals = flat[pos].float()
        return vals + res[pos] if res is not None else vals

    return gather
