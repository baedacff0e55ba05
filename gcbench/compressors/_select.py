"""Selection and accumulation helpers shared by the threshold sparsifiers.

Used by ``graddrop`` (Aji & Heafield 2017), ``dgc`` (Lin et al. 2018), ``sdagc`` (Chen et al. 2020,
reconstructed) and ``threshold``:

* :func:`strided_sample` / :func:`lower_quantile` — Marian's gradient-dropping threshold: every
  ``(D // m)``-th magnitude of (possibly several concatenated) tensors, then a sample quantile
  computed with ``torch.kthvalue`` (``torch.quantile`` fails above 2^24 elements).
* :func:`dgc_sample_plan` / :func:`dgc_select` — DGC's sampled top-k threshold with the official
  code's adaptation loop (re-select exactly among the passing entries above 1.3× the target,
  lower the threshold ×0.8 below 0.8×, at most 10 rounds, then truncate to the target).
* :func:`clip_local`, :func:`momentum_buffers` — DGC/SDAGC local clipping and the momentum (u) and
  velocity (v) buffers of momentum correction.
* :func:`sparse_or_dense_body` / :func:`sparse_or_dense_decode` — the DGC/SDAGC wire format: a
  sparse (value, index) body in any :data:`gcbench.codec.SPARSE_CODINGS`, or a dense float32 body
  for tensors that are not sparsified (fewer than ``min_dims`` dimensions).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gcbench import codec
from gcbench.compressor import State, body_numpy, meta_int, meta_str
from gcbench.compressors._common import sparse_body, to_numpy
from gcbench.errors import PayloadError
from gcbench.payload import MetaValue, Payload

# Smallest positive float32 (a subnormal).  A threshold is never allowed below it, so ``|v| >= thr``
# never selects exact zeros: sending a zero changes nothing but costs 32 + index bits, and an
# all-zero tensor must produce an empty selection.
TINY = float(np.nextafter(np.float32(0), np.float32(1)))

DENSE = "dense"  # the ``coding`` header value of a dense float32 body

# DGC's adaptation constants (official code: compress_upper_bound, compress_lower_bound,
# max_adaptation_iters).
DGC_UPPER = 1.3
DGC_LOWER = 0.8
DGC_MAX_ITERS = 10


# ----------------------------------------------------------------------------- order statistics


def kth_largest(values: torch.Tensor, k: int) -> float:
    """The k-th largest entry of a 1-D tensor (k = 1 is the maximum), via ``torch.kthvalue``."""
    n = values.numel()
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    return float(torch.kthvalue(values, n - k + 1).values)


def lower_quantile(sample: torch.Tensor, q: float) -> float:
    """The q-quantile of a 1-D sample, "lower" convention: sorted[floor(q·(m − 1))] (0-based).

    This equals ``numpy.quantile(sample, q, method="lower")``.
    """
    m = sample.numel()
    if m == 0:
        raise ValueError("quantile of an empty sample")
    # round() first so that e.g. 0.99 * 100 does not floor to 98 through representation error
    pos = math.floor(round(q * (m - 1), 9))
    return float(torch.kthvalue(sample, pos + 1).values)


def strided_sample(gathers: Sequence[Callable[[torch.Tensor], torch.Tensor]], sizes: Sequence[int], sample_size: int) -> torch.Tensor:
    """|values| at positions ``j·stride`` (j < m) of the concatenation of several tensors.

    ``m = min(sample_size, D)`` and ``stride = D // m`` with ``D = sum(sizes)`` (Marian's
    ``randomSampling`` with ``len / sortSize``).  ``gathers[i](pos)`` returns tensor i's values at
    the (int64, CPU) local positions ``pos``; nothing is concatenated, so a global sample over a
    whole model costs only the sampled elements.
    """
    total = int(sum(sizes))
    if total == 0:
        return torch.zeros(0)
    m = min(int(sample_size), total)
    stride = total // m
    out: list[torch.Tensor] = []
    offset = 0
    for gather, n in zip(gathers, sizes, strict=True):
        first = -(-offset // stride)  # first j with j·stride >= offset
        last = min(m, -(-(offset + n) // stride))  # first j with j·stride >= offset + n (capped at m)
        if last > first:
            pos = torch.arange(first, last, dtype=torch.int64) * stride - offset
            out.append(gather(pos).float().abs())
        offset += n
    return torch.cat(out)


def above(flat: torch.Tensor, threshold: float) -> torch.Tensor:
    """Sorted int64 indices of ``|flat| > threshold`` (``torch.nonzero``: faster than masked_select)."""
    return torch.nonzero(flat.abs() > threshold).reshape(-1)


# ----------------------------------------------------------------------------- DGC selection


def dgc_sample_plan(d: int, density: float, sample_ratio: float) -> tuple[int, int]:
    """(number of samples, stride) exactly as DGC's ``DGCCompressor.initialize``.

    The sample holds at least ``ceil(d·sample_ratio)`` and at least ``ceil(2/density)`` elements
    (so its top ``density`` fraction has two or more entries).  The stride starts at
    ``32·ceil(d/target/32) + 1`` and shrinks by 8 until enough samples fit: it is odd and
    ≡ 1 (mod 8), so it rarely aligns with rows or kernel windows of the tensor.  Tensors with
    at most ``ceil(2/density)`` elements, and ``sample_ratio >= 1``, use every element (stride 1).
    """
    if d <= 0:
        return 0, 1
    if sample_ratio >= 1.0:
        return d, 1
    pct = math.ceil(d * sample_ratio)
    cpr = math.ceil(2 / density)
    if d <= cpr:
        return d, 1
    target = max(pct, cpr)
    stride = math.ceil(d / target / 32) * 32 + 1
    n = d // stride
    while n < target:  # terminates: stride ≡ 1 (mod 8) reaches 1, where n = d >= target
        stride -= 8
        n = d // stride
    return n, stride


@dataclass(frozen=True)
class DGCSelection:
    """Outcome of :func:`dgc_select`.

    Attributes:
        indices: sorted int64 positions that are sent (at most the target ``k``).
        threshold: the last threshold used (``|v| >= threshold`` passed it).
        count_before: entries selected before the final truncation to ``k``.
        exact_topk: the exact top-k among the passing entries was taken (count exceeded 1.3·k).
        rounds: adaptation rounds run (0 when the first threshold was accepted).
    """

    indices: torch.Tensor
    threshold: float
    count_before: int
    exact_topk: bool
    rounds: int


def dgc_select(imp: torch.Tensor, k: int, density: float, num_samples: int, stride: int, start: int) -> DGCSelection:
    """DGC's sampled threshold selection on ``imp = |v|`` (1-D), following the official ``_sparsify``.

    ``samples = imp[start::stride][:num_samples]``; ``thr`` = the ``ceil(num_samples·density)``-th
    largest sample; ``mask = imp >= thr``.  If the sample is not the whole tensor, adapt: more
    than 1.3·k passing → keep the exact top-k among them and stop; between k and 1.3·k, or between
    0.8·k and k → accept; fewer than 0.8·k → ``thr ×= 0.8`` and re-select (at most 10 rounds).
    Finally keep the first ``k`` passing positions (the official ``indices[:num_selects]``, which
    truncates by position, not magnitude).  Zeros are never selected (``thr >= TINY``).
    """
    d = imp.numel()
    if d == 0 or k <= 0:
        return DGCSelection(torch.zeros(0, dtype=torch.int64, device=imp.device), 0.0, 0, False, 0)
    full = num_samples >= d
    samples = imp if full else imp[start : start + num_samples * stride : stride]
    top = max(1, math.ceil(samples.numel() * density))
    thr = max(kth_largest(samples, min(top, samples.numel())), TINY)
    idx = torch.nonzero(imp >= thr).reshape(-1)
    exact = False
    rounds = 0
    if not full:
        for _ in range(DGC_MAX_ITERS):
            count = idx.numel()
            if count > k:
                if count > k * DGC_UPPER:
                    idx = idx[torch.topk(imp[idx], k, sorted=False).indices].sort().values
                    exact = True
                break
            if count >= k * DGC_LOWER:
                break
            if thr <= TINY:  # every nonzero already passes: lowering cannot select more
                break
            thr = max(thr * DGC_LOWER, TINY)
            rounds += 1
            idx = torch.nonzero(imp >= thr).reshape(-1)
    before = idx.numel()
    return DGCSelection(idx[:k], thr, before, exact, rounds)


# ----------------------------------------------------------------------------- momentum correction


def clip_local(x: torch.Tensor, clip_norm: float | None, workers: int) -> torch.Tensor:
    """DGC's local gradient clipping: scale ``x`` so ‖x‖₂ ≤ clip_norm·N^(−1/2) (new tensor if scaled).

    As the official ``clip_grad_norm_``: ``coef = max_norm / (‖x‖ + 1e-6)``, applied when < 1.
    ``x`` itself is never modified.
    """
    if clip_norm is None:
        return x
    max_norm = float(clip_norm) / math.sqrt(workers)
    norm = float(torch.linalg.vector_norm(x, dtype=torch.float64))
    coef = max_norm / (norm + 1e-6)
    return x * coef if coef < 1.0 else x


def momentum_buffers(state: State, like: torch.Tensor, velocity: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The state's momentum ``u`` (and velocity ``v``) float32 buffers, zero-initialised on first use.

    Buffers live in ``state.tensors["momentum"]`` / ``["velocity"]`` and are updated in place.
    """
    u = state.tensors.get("momentum")
    if u is None or u.shape != like.shape or u.device != like.device:
        u = state.tensors["momentum"] = torch.zeros_like(like, dtype=torch.float32)
    if not velocity:
        return u, None
    v = state.tensors.get("velocity")
    if v is None or v.shape != like.shape or v.device != like.device:
        v = state.tensors["velocity"] = torch.zeros_like(like, dtype=torch.float32)
    return u, v


def accumulate(u: torch.Tensor, v: torch.Tensor, x: torch.Tensor, momentum: float, nesterov: bool) -> None:
    """Momentum correction in place: ``u = m·u + x``; ``v += u`` (Nesterov: ``v += x + m·u``).

    The official code keeps ``m·u`` in its momentum buffer for Nesterov; storing ``u`` itself
    gives the same ``v`` and the same masking, and one buffer meaning for both variants.
    """
    u.mul_(momentum).add_(x)
    if nesterov:
        v.add_(x).add_(u, alpha=momentum)
    else:
        v.add_(u)


def dense_momentum_update(u: torch.Tensor, x: torch.Tensor, momentum: float, nesterov: bool) -> torch.Tensor:
    """What a non-sparsified tensor sends: the momentum-SGD update (official ``compensate(accumulate=False)``).

    ``u = m·u + x`` in place; returns ``u`` (a copy) or, for Nesterov, ``x + m·u``.  Momentum is
    kept across steps (nothing is masked), so this equals uncompressed momentum SGD.
    """
    u.mul_(momentum).add_(x)
    return x + momentum * u if nesterov else u.clone()


# ----------------------------------------------------------------------------- wire format


def sparse_or_dense_body(
    values: torch.Tensor | None, idx: torch.Tensor | None, dense: torch.Tensor | None, d: int, coding: str
) -> tuple[np.ndarray, dict[str, MetaValue]]:
    """Body and header of a DGC/SDAGC payload: dense float32, or sparse (values, idx) in ``coding``."""
    if dense is not None:
        return to_numpy(dense.reshape(-1)).astype("<f4").view(np.uint8), {"coding": DENSE}
    assert values is not None and idx is not None
    return sparse_body(values, idx, d, coding), {"k": int(idx.numel()), "coding": coding}


def sparse_or_dense_decode(payload: Payload) -> torch.Tensor:
    """Inverse of :func:`sparse_or_dense_body` (payload only)."""
    d = payload.numel
    coding = meta_str(payload, "coding")
    body = body_numpy(payload)
    if coding == DENSE:
        if len(body) != 4 * d:
            raise PayloadError(f"{payload.codec} dense body has {len(body)} bytes, expected {4 * d}")
        return torch.from_numpy(body.view("<f4").astype(np.float32))
    if coding not in codec.SPARSE_CODINGS:
        raise PayloadError(f"{payload.codec} payload has unknown coding {coding!r}")
    k = meta_int(payload, "k")
    if not 0 <= k <= d:
        raise PayloadError(f"{payload.codec} payload says {k} nonzeros in {d} elements")
    vals, idx = codec.decode_sparse(body, d, k, coding)
    out = torch.zeros(d, dtype=torch.float32)
    out[torch.from_numpy(idx)] = torch.from_numpy(vals)
    return out


class MomentumSGDReference:
    """Mixin for DGC/SDAGC: fidelity is measured against uncompressed momentum SGD.

    Both apply momentum locally and send (sparse parts of) the velocity, so comparing what they
    send with the raw gradient would count the momentum itself as error.  The reference is the
    update an uncompressed momentum-SGD worker would apply, ``u_t = m·u_{t−1} + x_t``
    (Nesterov: ``x_t + m·u_t``), kept in the runner's per-(worker, unit) ``ref_state``.
    """

    params: Any

    def reference_update(self, x: torch.Tensor, ref_state: dict[str, Any]) -> torch.Tensor:
        u = ref_state.get("u")
        if u is None or u.shape != x.shape:
            u = ref_state["u"] = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        return dense_momentum_update(u, x.float(), self.params["momentum"], bool(self.params.get("nesterov", False)))

    def reference_name(self) -> str:
        return "momentum-SGD update u_t = m·u_{t-1} + g_t"
