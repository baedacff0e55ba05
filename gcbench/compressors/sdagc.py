"""SDAGC — Chen et al. 2020 (the SDAGC gradient sparsification paper, as its card in ``compressors/cards/sdagc.py`` states it).
**RECONSTRUCTED**: only the abstract is public.  It names a per-layer threshold
from the standard deviation of the gradient that adapts with training progress, residual
accumulation, local gradient clipping, momentum compensation and an adaptive learning-rate
revision.  gcbench ships this reconstruction, not a verified reproduction; compare with the
paper's 433×–2021× claim, never call it a reproduction.

Per tensor (layer) and step::

    x = clip(x)                              # optional local clipping, as DGC
    u = m·u + x ; v = v + u                  # momentum compensation + residual accumulation
    thr = λ(t) · std(v)                      # sdagc_threshold()
    mask = |v| > thr ; send v[mask] ; v[mask] = 0 ; u[mask] = 0

Reconstruction choices (all documented, all parameters):

* ``std`` is the population standard deviation of the accumulated ``v`` of the tensor
  (``torch.std(correction=0)``; defined for one element).  An all-zero ``v`` gives thr = 0 and,
  with the strict ``>``, sends nothing.
* λ(t) rises linearly from ``lambda_start`` (2.0) at step 0 to ``lambda_final`` (3.3) at step
  ``warmup_steps`` and stays there; ``warmup_steps = 0`` (default) means λ = ``lambda_final``
  from the first step.  Under a Gaussian assumption λ = 3.3 gives about 0.1% density; real,
  heavy-tailed gradients give more; the measured density is what results report.
* Learning-rate revision (``lr_revision``, off by default): the abstract's idea is to revise the
  step taken with the accumulated (delayed) residual.  Here the released update is scaled by
  ``s = min(1, ‖u_t‖₂ / ‖v[mask]‖₂)``, where ``u_t`` is this step's dense momentum update of the
  tensor: a burst of accumulated residual is released at most at the length of a normal
  momentum-SGD step, the effect of a locally revised learning rate.  The held-back part
  ``(1 − s)·v[mask]`` stays in ``v`` (nothing is lost: Σ sent + v_T is still Σ u_t over the
  masked momentum), so it is released over the following steps.
* Tensors with fewer than ``min_dims`` (default 2) dimensions and at most ``dense_max`` (default
  65536) elements are sent dense, the momentum-SGD update ``u = m·u + x`` (fp32, 32·d bits),
  exactly as in gcbench's DGC (:func:`gcbench.compressors.dgc.sent_dense`).  The element bound
  keeps flattened 1-D buckets (``--granularity bucket``/``model``, DDP buckets) sparsified;
  ``dense_max=0`` sparsifies every 1-D tensor.
* Wire format and index codings as DGC (default ``fixed``: nnz·(32 + ceil(log2 d)) bits).

Version 2 (version 1 sent every tensor of fewer than ``min_dims`` dimensions dense, so flattened
buckets came out at ratio 1): adds ``dense_max``; results under ``bucket``/``model`` granularity
change, those of layers up to 65536 elements do not.

As for DGC, fidelity is measured against the update u_t of uncompressed momentum SGD.

Speed: on CPU (:func:`sdagc_step_fast`) the momentum update and the moments of v (per-chunk
float64 mean and Σ(v − mean)², combined exactly) are one pass, the selection another that writes
the body and releases v in place; :func:`sdagc_step_torch` is the torch version (other devices,
and the tests' reference).  The std is torch's up to a few float64 ulps before its rounding to
float32, so the threshold, and the selection, are the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors import _sparse
from gcbench.compressors._common import dense_from_sparse
from gcbench.compressors._sparsify import (
    MomentumSGDReference,
    above,
    accumulate,
    clip_coef,
    clip_local,
    clip_scale,
    dense_momentum_update,
    momentum_buffers,
    sparse_or_dense_body,
    sparse_or_dense_decode,
    sparse_or_dense_nbytes,
)
from gcbench.compressors.cards.sdagc import SDAGC_CARD
from gcbench.compressors.dgc import sent_dense
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, State
from gcbench.core.payload import MetaValue, Payload


def sdagc_lambda(step: int, params: Mapping[str, Any]) -> float:
    """λ(t): linear from ``lambda_start`` to ``lambda_final`` over ``warmup_steps``, then constant."""
    start, final, period = float(params["lambda_start"]), float(params["lambda_final"]), int(params["warmup_steps"])
    if period <= 0 or step >= period:
        return final
    return start + (final - start) * step / period


def sdagc_threshold(v: torch.Tensor, step: int, params: Mapping[str, Any]) -> float:
    """The threshold λ(t)·std(v) (population std of the whole tensor), as a host float (one read)."""
    return float(sdagc_threshold_tensor(v, step, params))


def sdagc_threshold_tensor(v: torch.Tensor, step: int, params: Mapping[str, Any]) -> torch.Tensor:
    """:func:`sdagc_threshold` as a float64 0-d tensor on ``v``'s device (no scalar read): λ(t) times torch's float32
    std, in float64 as the host computes it."""
    if v.numel() == 0:
        return torch.zeros((), dtype=torch.float64, device=v.device)
    return sdagc_lambda(step, params) * torch.std(v.float(), correction=0).double()


def _revision_scale(vals: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """min(1, ‖u_t‖₂ / ‖v[mask]‖₂) of the learning-rate revision (1 when nothing is sent), a float64 0-d tensor on
    the values' device (no scalar read; multiplying by 1 leaves the values to the bit)."""
    sent_norm = torch.linalg.vector_norm(vals, dtype=torch.float64)
    step_norm = torch.linalg.vector_norm(u, dtype=torch.float64)
    ratio = torch.clamp(step_norm / torch.where(sent_norm > 0, sent_norm, torch.ones_like(sent_norm)), max=1.0)
    return torch.where(sent_norm > 0, ratio, torch.ones_like(ratio))


def sdagc_step_torch(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, coef: float | torch.Tensor | None, step: int,
                     params: Mapping[str, Any], want_decoded: bool) -> tuple[torch.Tensor, dict[str, MetaValue], torch.Tensor | None]:
    """One SDAGC step on a sparsified tensor with torch ops (any device); u and v are updated in place.

    Everything stays on the tensors' device, the body included; the one scalar read is the number of
    entries above the threshold (``torch.nonzero``), plus the body length of a variable-length index coding.
    """
    accumulate(u, v, x if coef is None else x * coef, params["momentum"], nesterov=False)
    flat = v.reshape(-1)
    d = flat.numel()
    idx = above(flat, sdagc_threshold_tensor(flat, step, params).float())  # float32(thr), as a host float compares
    vals = flat[idx]
    if params["lr_revision"] and idx.numel():
        vals = vals * _revision_scale(vals, u)
    decoded = dense_from_sparse(vals, idx, d) if want_decoded else None
    flat[idx] -= vals  # zero when released in full; (1 − s)·v stays when lr_revision held some back
    if params["masking"]:
        u.reshape(-1)[idx] = 0
    body, meta = sparse_or_dense_body(vals, idx, None, d, params["index_coding"])
    return body, meta, decoded


def sdagc_step_fast(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, coef: float | None, step: int, params: Mapping[str, Any],
                    want_decoded: bool) -> tuple[np.ndarray | torch.Tensor, dict[str, MetaValue], torch.Tensor | None]:
    """:func:`sdagc_step_torch` on contiguous CPU float32 tensors with the kernels of :mod:`gcbench.kernels`."""
    xn, un, vn = kernels.as_numpy(x).reshape(-1), kernels.as_numpy(u).reshape(-1), kernels.as_numpy(v).reshape(-1)
    d = vn.size
    coding = params["index_coding"]
    std = kernels.momentum_update_std(un, vn, xn, params["momentum"], coef)
    thr = sdagc_lambda(step, params) * float(np.float32(std))  # torch.std's float32 result, as sdagc_threshold
    t = kernels.f32_threshold(thr, strict=True)
    if not params["lr_revision"]:
        sel = _sparse.select_encode(vn, t, coding, zero_mode=kernels.ZERO_SUB, want_decoded=want_decoded, want_idx=params["masking"])
        if params["masking"]:
            assert sel.idx is not None
            kernels.scatter_zero(un, sel.idx)
        decoded = torch.from_numpy(sel.decoded) if sel.decoded is not None else None
        return sel.body, {"k": sel.k, "coding": coding}, decoded
    sel = _sparse.select_encode(vn, t, None, want_idx=True)
    assert sel.idx is not None and sel.vals is not None
    idx, vals = sel.idx, sel.vals
    if idx.size:
        scale = float(_revision_scale(torch.from_numpy(vals), u))
        if scale < 1.0:
            vals = (torch.from_numpy(vals) * scale).numpy()
    decoded = _sparse.dense_from(idx, vals, d) if want_decoded else None
    kernels.scatter_sub(vn, idx, vals)
    if params["masking"]:
        kernels.scatter_zero(un, idx)
    return _sparse.encode_sorted(vals, idx, d, coding), {"k": int(idx.size), "coding": coding}, decoded


def sdagc_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """One step with :func:`sdagc_step_torch` on copies of the state's u and v (the class's ``reference``)."""
    p = comp.params
    zero = torch.zeros(x32.shape, dtype=torch.float32, device=x32.device)
    u0, v0 = state.tensors.get("momentum"), state.tensors.get("velocity")
    u = u0.clone() if u0 is not None and u0.shape == x32.shape else zero.clone()
    if sent_dense(x32, p):
        return dense_momentum_update(u, clip_local(x32, p["clip_norm"], p["workers"]), p["momentum"], nesterov=False)
    v = v0.clone() if v0 is not None and v0.shape == x32.shape else zero.clone()
    decoded = sdagc_step_torch(x32, u, v, clip_scale(x32, p["clip_norm"], p["workers"]), state.step, p, True)[2]
    assert decoded is not None
    return decoded.reshape(x32.shape)


class SDAGC(MomentumSGDReference, Compressor):
    """SDAGC (Chen et al. 2020), RECONSTRUCTED from its abstract: a per-layer threshold from the standard deviation of
    the gradient; state: momentum ``u`` and accumulated residual ``v``."""

    info = SDAGC_CARD

    reference = sdagc_reference

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        p = self.params
        d = a.numel()
        if sent_dense(a, p):
            u, _ = momentum_buffers(state, a, velocity=False)
            out = dense_momentum_update(u, clip_local(a, p["clip_norm"], p["workers"]), p["momentum"], nesterov=False)
            body, meta = sparse_or_dense_body(None, None, out, d, p["index_coding"])
            return body, meta, out
        u, v = momentum_buffers(state, a, velocity=True)
        x = a.contiguous()
        if kernels.fast_cpu(x, u, v):
            return sdagc_step_fast(x, u, v, clip_coef(x, p["clip_norm"], p["workers"]), state.step, p, ctx.need_decoded)
        return sdagc_step_torch(x, u, v, clip_scale(x, p["clip_norm"], p["workers"]), state.step, p, ctx.need_decoded)

    def _expected_body_nbytes(self, payload: Payload) -> int | tuple[int, int]:
        return sparse_or_dense_nbytes(payload)

    def _decode(self, payload: Payload) -> torch.Tensor:
        return sparse_or_dense_decode(payload)
