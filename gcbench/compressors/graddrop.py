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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from gcbench import codec
from gcbench.compressor import Compressor, ErrorFeedback, State, body_numpy, meta_int, meta_str
from gcbench.compressors._common import coding_param, dense_from_sparse, to_numpy
from gcbench.compressors._select import above, lower_quantile, strided_sample
from gcbench.errors import PayloadError
from gcbench.payload import Payload
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
class GradDrop(Compressor):
    """Gradient dropping with a sampled quantile threshold and error feedback."""

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

    def _encode(self, a: torch.Tensor, state: State):
        p = self.params
        flat = a.reshape(-1)
        d = flat.numel()
        thr = state.values.pop(_GROUP_THRESHOLD, None)
        if thr is None:
            thr = graddrop_threshold([lambda pos: flat[pos.to(flat.device)]], [d], p["drop_ratio"], p["sample_size"])
        idx = above(flat, thr)
        vals = flat[idx]
        mode, coding = p["quantize"], p["index_coding"]
        meta = {"k": int(idx.numel()), "coding": coding, "q": mode}
        if idx.numel() == 0:
            return np.zeros(0, np.uint8), meta, torch.zeros(d, dtype=torch.float32, device=flat.device)
        if mode == "none":
            body = codec.encode_sparse(to_numpy(vals), to_numpy(idx), d, coding)
            return body, meta, dense_from_sparse(vals, idx, d)
        codes, scales, dec_vals = quantize_survivors(vals, mode, p["quant_scale"])
        body = np.concatenate([
            to_numpy(scales).astype("<f4").view(np.uint8),
            codec.pack_bits(to_numpy(codes), _CODE_BITS[mode]),
            codec.encode_indices(to_numpy(idx), d, coding),
        ])
        return body, meta, dense_from_sparse(dec_vals, idx, d)

    def _decode(self, payload: Payload) -> torch.Tensor:
        d = payload.numel
        k, coding, mode = meta_int(payload, "k"), meta_str(payload, "coding"), meta_str(payload, "q")
        if mode not in QUANTIZE or coding not in codec.INDEX_CODINGS or not 0 <= k <= d:
            raise PayloadError(f"graddrop payload header is invalid (k={k}, coding={coding!r}, q={mode!r})")
        out = torch.zeros(d, dtype=torch.float32)
        body = body_numpy(payload)
        if k == 0:
            return out
        if mode == "none":
            vals, idx = codec.decode_sparse(body, d, k, coding)
            out[torch.from_numpy(idx)] = torch.from_numpy(vals)
            return out
        ns, width = _SCALES[mode], _CODE_BITS[mode]
        nc = codec.packed_nbytes(k, width)
        if len(body) < 4 * ns + nc:
            raise PayloadError("graddrop quantized body is truncated")
        scales = torch.from_numpy(body[: 4 * ns].view("<f4").astype(np.float32))
        codes = torch.from_numpy(codec.unpack_bits(body[4 * ns : 4 * ns + nc], width, k))
        idx, _ = codec.decode_indices(body[4 * ns + nc :], d, k, coding)
        if idx.size and (idx.min() < 0 or idx.max() >= d):
            raise PayloadError("graddrop body has an index outside the tensor")
        sign = torch.where((codes & 1).bool(), -1.0, 1.0)
        out[torch.from_numpy(idx)] = sign * scales[codes >> 1]
        return out


def _corrected_gather(flat: torch.Tensor, res: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """Gather ``x + e`` at given positions without forming ``x + e`` for the whole tensor."""

    def gather(pos: torch.Tensor) -> torch.Tensor:
        pos = pos.to(flat.device)
        vals = flat[pos].float()
        return vals + res[pos] if res is not None else vals

    return gather
