"""Selection and accumulation helpers shared by the threshold sparsifiers.

Used by ``graddrop`` (Aji & Heafield 2017), ``dgc`` (Lin et al. 2018), ``sdagc`` (Chen et al. 2020,
reconstructed) and ``threshold``:

* :func:`strided_sample` — Marian's gradient-dropping sample: every ``(D // m)``-th magnitude of
  (possibly several concatenated) tensors (the cut-off rank is in :mod:`gcbench.compressors.graddrop`).
* :func:`dgc_sample_plan` / :func:`dgc_select` — DGC's sampled top-k threshold with the official
  code's adaptation loop (re-select exactly among the passing entries above 1.3× the target,
  lower the threshold ×0.8 below 0.8×, at most 10 rounds, then truncate to the target).
* :func:`clip_local`, :func:`momentum_buffers` — DGC/SDAGC local clipping and the momentum (u) and
  velocity (v) buffers of momentum correction.
* :func:`sparse_or_dense_body` / :func:`sparse_or_dense_decode` — the DGC/SDAGC wire format: a
  sparse (value, index) body in any :data:`gcbench.core.params.SPARSE_CODINGS`, or a dense float32 body
  for tensors that are not sparsified (:func:`gcbench.compressors.dgc.sent_dense`).
* :func:`form_counting` — error feedback's ``a = x + e`` with the counts of ``|a| >= t`` in the
  same pass, for a threshold known before ``a`` is formed (``threshold``, ``graddrop``: their
  :meth:`~gcbench.core.compressor.Compressor._form_corrected`).
* :func:`dgc_step_fast` — DGC's momentum correction, sampled threshold and masking on CPU with the
  kernels of :mod:`gcbench.kernels`: the same selection as :func:`dgc_select`
  (tested equal), in one update-and-count pass plus one selection pass.

The torch functions (:func:`dgc_select`, :func:`accumulate`, :func:`above`) are the reference
implementations and the path for non-CPU tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors import _sparse
from gcbench.compressors._common import dense_from_sparse, k_of, sparse_body, sparse_body_nbytes, sparse_decode
from gcbench.core.compressor import ErrorFeedback, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_numpy, body_tensor, meta_int, meta_keys, meta_str
from gcbench.core.params import SPARSE_CODINGS
from gcbench.core.payload import MetaValue, Payload
from gcbench.kernels.topk import kth_largest_torch

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


def strided_sample(gathers: Sequence[Callable[[torch.Tensor], torch.Tensor]], sizes: Sequence[int], sample_size: int,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """|values| at positions ``j·stride`` (j < m) of the concatenation of several tensors.

    ``m = min(sample_size, D)`` and ``stride = D // m`` with ``D = sum(sizes)`` (Marian's
    ``randomSampling`` with ``len / sortSize``).  ``gathers[i](pos)`` returns tensor i's values at
    the int64 local positions ``pos`` (made on ``device``: the tensors' own on the torch path);
    nothing is concatenated, so a global sample over a whole model costs only the sampled elements.
    """
    total = int(sum(sizes))
    if total == 0:
        return torch.zeros(0, device=device)
    m = min(int(sample_size), total)
    stride = total // m
    out: list[torch.Tensor] = []
    offset = 0
    for gather, n in zip(gathers, sizes, strict=True):
        first = -(-offset // stride)  # first j with j·stride >= offset
        last = min(m, -(-(offset + n) // stride))  # first j with j·stride >= offset + n (capped at m)
        if last > first:
            pos = torch.arange(first, last, dtype=torch.int64, device=device) * stride - offset
            out.append(gather(pos).float().abs())
        offset += n
    return torch.cat(out)


def above(flat: torch.Tensor, threshold: float | torch.Tensor) -> torch.Tensor:
    """Sorted int64 indices of ``|flat| > threshold`` (``torch.nonzero``: faster than masked_select; on a device
    its size is the one host read).  A tensor threshold is a 0-d one on ``flat``'s device."""
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


def sample_top(num_samples: int, density: float) -> int:
    """How many sampled entries the DGC threshold keeps: k of the sample, by the one rule :func:`k_of`.

    The official code writes ``ceil(num_samples·density)``; computing it with :func:`k_of` (which
    forgives a floating-point error in ``density·d``, e.g. 0.07·100 = 7.000000000000001) makes it
    equal to the target k whenever the sample is the whole tensor, so the exact path
    (``sample_ratio = 1``) selects exactly k entries.  With two different roundings, k + 1
    entries passed and the truncation by position could drop one of the k largest.
    """
    return min(k_of(density, num_samples), num_samples)


def ties_by_position(strictly_above: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean keep-mask over passing entries: all strictly above the threshold, then ties in position order, k in all.

    ``strictly_above[j]`` says whether passing entry j (in position order) exceeds the threshold;
    the others equal it.  Fewer than k entries exceed a k-th-largest threshold, so the result is a
    top-k by magnitude (the official truncation ``indices[:k]`` by position is not, when a tie
    at the threshold comes before a larger entry).
    """
    ties = ~strictly_above
    room = k - int(strictly_above.sum())
    return strictly_above | (ties & (torch.cumsum(ties.to(torch.int64), 0) <= room))


def _stat(index: int, cast: Callable[[float], Any], doc: str) -> Any:
    """A read-only property: ``stats[index]`` as ``cast`` turns it (a device's tensor is read only when asked)."""
    return property(lambda self: cast(float(self.stats[index])), doc=doc)


class SelectionStats:
    """What a DGC selection reports besides its indices: the last threshold, the count before the truncation to k,
    whether the exact top-k was taken, the adaptation rounds.

    ``stats`` is a float64 tensor ``[threshold, count_before, exact_topk, rounds]`` where the selection ran (a
    device's, on the torch path): it is read only when a caller asks for one of them (tests, diagnostics),
    never by the encoder.
    """

    stats: torch.Tensor

    threshold = _stat(0, float, "The last threshold used (``|v| >= threshold`` passed it).")
    count_before = _stat(1, int, "Entries selected before the final truncation to ``k``.")
    exact_topk = _stat(2, bool, "The exact top-k among the passing entries was taken (count exceeded 1.3·k).")
    rounds = _stat(3, int, "Adaptation rounds run (0 when the first threshold was accepted).")


def selection_stats(threshold: float, count_before: int, exact_topk: bool, rounds: int) -> torch.Tensor:
    """The ``stats`` tensor of :class:`SelectionStats` from host values (the CPU path's)."""
    return torch.tensor([threshold, count_before, float(exact_topk), rounds], dtype=torch.float64)


@dataclass(frozen=True)
class DGCSelection(SelectionStats):
    """Outcome of :func:`dgc_select`: the sorted int64 positions sent (at most the target ``k``) and its
    :class:`SelectionStats`."""

    indices: torch.Tensor
    stats: torch.Tensor


def _full_keep(imp: torch.Tensor, thr32: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(keep-mask, count of ``imp >= thr``) of the exact path: every entry above the threshold, then ties at it in
    position order, at most k in all (:func:`ties_by_position` without reading the counts)."""
    above = imp > thr32
    ties = (imp >= thr32) & ~above
    count = above.sum() + ties.sum()
    rank = torch.cumsum(ties, 0, dtype=torch.int32 if ties.numel() < 1 << 31 else torch.int64)  # 4 bytes an element, not 8
    return above | (ties & (rank <= k - above.sum())), count


def _adapted(imp: torch.Tensor, thr0: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The adaptation loop of :func:`dgc_select` without a scalar read: its 11 possible thresholds
    ``thr_r = max(thr_{r−1}·0.8, TINY)`` (float64, as the loop computes them), each one's count, and the round
    the loop stops at.  Returns (thresholds, code = count·64 + round·2 + exact), both on ``imp``'s device."""
    thrs = [thr0]
    for _ in range(DGC_MAX_ITERS):
        thrs.append(torch.clamp(thrs[-1] * DGC_LOWER, min=TINY))
    thr = torch.stack(thrs)
    counts = torch.stack([(imp >= t.float()).sum() for t in thr])
    c = counts.double()
    stop = (c[:-1] >= k * DGC_LOWER) | (thr[:-1] <= TINY)  # count > k implies count >= 0.8·k
    r = torch.argmax(torch.cat([stop, stop.new_ones(1)]).to(torch.int8)).reshape(1)  # the first round that stops (10: none)
    count = counts.gather(0, r)[0]  # a tensor index, not a Python one: no read
    exact = (r[0] < DGC_MAX_ITERS) & (c.gather(0, r)[0] > k * DGC_UPPER)
    return thr, count * 64 + r[0] * 2 + exact.to(torch.int64)


def dgc_select(imp: torch.Tensor, k: int, density: float, num_samples: int, stride: int, start: int) -> DGCSelection:
    """DGC's sampled threshold selection on ``imp = |v|`` (1-D), following the official ``_sparsify``.

    ``samples = imp[start::stride][:num_samples]``; ``thr`` = the :func:`sample_top`-th largest
    sample (``ceil(num_samples·density)`` by :func:`k_of`, so it is k itself when the sample is the
    whole tensor); ``mask = imp >= thr``; on that exact path, ties at ``thr`` beyond k are dropped
    by position (:func:`ties_by_position`), so exactly a top-k is sent.  If the sample is not the
    whole tensor, adapt: more than 1.3·k passing → keep the exact top-k among them and stop;
    between k and 1.3·k, or between 0.8·k and k → accept; fewer than 0.8·k → ``thr ×= 0.8`` and
    re-select (at most 10 rounds).
    Finally keep the first ``k`` passing positions (the official ``indices[:num_selects]``, which
    truncates by position, not magnitude).  Zeros are never selected (``thr >= TINY``).

    Torch operations on ``imp``'s device with one scalar read, the number of positions to list (the
    adaptation's counts and its stopping round are computed for all its thresholds at once and read
    together, packed in one integer).
    """
    d = imp.numel()
    if d == 0 or k <= 0:
        return DGCSelection(torch.zeros(0, dtype=torch.int64, device=imp.device), selection_stats(0.0, 0, False, 0))
    full = num_samples >= d
    samples = imp if full else imp[start : start + num_samples * stride : stride]
    thr0 = torch.clamp(kth_largest_torch(samples, sample_top(samples.numel(), density)).double(), min=TINY)
    if full:
        keep, count = _full_keep(imp, thr0.float(), k)
        n = min(k, int(count))  # the one scalar read: how many positions to list
        idx = torch.nonzero_static(keep, size=n).reshape(-1)
        stats = torch.stack([thr0, count.double(), thr0.new_zeros(()), thr0.new_zeros(())])
        return DGCSelection(idx, stats)
    thr, code = _adapted(imp, thr0, k)
    packed = int(code)  # the one scalar read: the count (a size), the round and the exact flag
    passed, r, exact = packed >> 6, (packed >> 1) & 31, bool(packed & 1)
    t32 = thr[r].float()
    if exact:
        passing = torch.nonzero_static(imp >= t32, size=passed).reshape(-1)
        idx = passing[torch.topk(imp[passing], k, sorted=False).indices].sort().values
        passed = k
    else:
        idx = torch.nonzero_static(imp >= t32, size=min(k, passed)).reshape(-1)
    stats = torch.stack([thr[r], thr.new_tensor(float(passed)), thr.new_tensor(float(exact)), thr.new_tensor(float(r))])
    return DGCSelection(idx, stats)


# ----------------------------------------------------------------------------- momentum correction


def clip_coef(x: torch.Tensor, clip_norm: float | None, workers: int) -> float | None:
    """DGC's local clipping factor, or None when ``x`` is not scaled (see :func:`clip_local`); the CPU path's
    (one host read of the norm; :func:`clip_scale` is the device's)."""
    if clip_norm is None:
        return None
    max_norm = float(clip_norm) / math.sqrt(workers)
    norm = float(torch.linalg.vector_norm(x, dtype=torch.float64))
    coef = max_norm / (norm + 1e-6)
    return coef if coef < 1.0 else None


def clip_scale(x: torch.Tensor, clip_norm: float | None, workers: int) -> torch.Tensor | None:
    """:func:`clip_coef` as a float64 0-d tensor on ``x``'s device, 1 where ``x`` is not scaled (no scalar read):
    ``x * clip_scale(...)`` is ``x * clip_coef(...)`` where that scales, and ``x`` to the bit where it does not."""
    if clip_norm is None:
        return None
    coef = (float(clip_norm) / math.sqrt(workers)) / (torch.linalg.vector_norm(x, dtype=torch.float64) + 1e-6)
    return torch.where(coef < 1.0, coef, torch.ones_like(coef))


def clip_local(x: torch.Tensor, clip_norm: float | None, workers: int) -> torch.Tensor:
    """DGC's local gradient clipping: scale ``x`` so ‖x‖₂ ≤ clip_norm·N^(−1/2) (new tensor if clipping is on).

    As the official ``clip_grad_norm_``: ``coef = max_norm / (‖x‖ + 1e-6)``, applied when < 1 (by a factor
    computed on ``x``'s device: no host read).  ``x`` itself is never modified.
    """
    scale = clip_scale(x, clip_norm, workers)
    return x if scale is None else x * scale


@overload
def momentum_buffers(state: State, like: torch.Tensor, velocity: Literal[True]) -> tuple[torch.Tensor, torch.Tensor]: ...


@overload
def momentum_buffers(state: State, like: torch.Tensor, velocity: Literal[False]) -> tuple[torch.Tensor, None]: ...


def momentum_buffers(state: State, like: torch.Tensor, velocity: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The state's momentum ``u`` (and velocity ``v``) float32 buffers, zero-initialised on first use.

    Buffers live in ``state.tensors["momentum"]`` / ``["velocity"]`` and are updated in place.
    """
    u = state.tensors.get("momentum")
    if u is None or u.shape != like.shape or u.device != like.device:
        u = state.tensors["momentum"] = _zeros_like(like)
    if not velocity:
        return u, None
    v = state.tensors.get("velocity")
    if v is None or v.shape != like.shape or v.device != like.device:
        v = state.tensors["velocity"] = _zeros_like(like)
    return u, v


def _zeros_like(like: torch.Tensor) -> torch.Tensor:
    """A float32 zero tensor shaped like ``like`` (NumPy-allocated on CPU: no 4 KiB page-fault storm)."""
    if kernels.cpu_fast(like):
        return torch.from_numpy(kernels.prefault(np.zeros(tuple(like.shape), np.float32)))
    return torch.zeros_like(like, dtype=torch.float32)


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
) -> tuple[torch.Tensor, dict[str, MetaValue]]:
    """Body (a uint8 tensor on the values' device) and header of a DGC/SDAGC payload: dense float32, or sparse
    (values, sorted idx) in ``coding``."""
    if dense is not None:
        return dense.reshape(-1).to(torch.float32, copy=True).view(torch.uint8), {"coding": DENSE}
    assert values is not None and idx is not None
    return sparse_body(values, idx, d, coding, is_sorted=True), {"k": int(idx.numel()), "coding": coding}


def sparse_or_dense_nbytes(payload: Payload) -> int | tuple[int, int]:
    """Body size of a :func:`sparse_or_dense_body` payload, its header checked (the codec's
    ``_expected_body_nbytes``): 4·d for a dense body, else the sparse coding's range."""
    if meta_str(payload, "coding") == DENSE:
        meta_keys(payload, "coding")
        return 4 * payload.numel
    return sparse_body_nbytes(payload, SPARSE_CODINGS)


def sparse_or_dense_decode(payload: Payload) -> torch.Tensor:
    """Inverse of :func:`sparse_or_dense_body` (payload only): with the kernels on the CPU, with torch operations
    where the body lies otherwise (the torch path: a dense body is one copy, a sparse one :func:`sparse_decode`)."""
    d = payload.numel
    coding = meta_str(payload, "coding")
    if coding != DENSE and coding not in SPARSE_CODINGS:
        raise PayloadError(f"{payload.codec} payload has unknown coding {coding!r}")
    k = meta_int(payload, "k") if coding != DENSE else d
    if not 0 <= k <= d:
        raise PayloadError(f"{payload.codec} payload says {k} nonzeros in {d} elements")
    if not kernels.cpu_fast(payload.data):
        if coding != DENSE:
            return sparse_decode(payload)
        data = body_tensor(payload)
        if data.numel() != 4 * d:
            raise PayloadError(f"{payload.codec} dense body has {data.numel()} bytes, expected {4 * d}")
        return data.clone().view(torch.float32)  # a fresh, aligned copy
    body = body_numpy(payload)
    if coding == DENSE:
        if len(body) != 4 * d:
            raise PayloadError(f"{payload.codec} dense body has {len(body)} bytes, expected {4 * d}")
        return torch.from_numpy(body.view("<f4").astype(np.float32))
    return _sparse.decode_sparse(body, d, k, coding, payload.codec)


class MomentumSGDReference:
    """Mixin for DGC/SDAGC: fidelity is measured against uncompressed momentum SGD.

    Both apply momentum locally and send (sparse parts of) the velocity, so comparing what they
    send with the raw gradient would count the momentum itself as error.  The reference is the
    update an uncompressed momentum-SGD worker would apply, ``u_t = m·u_{t−1} + x_t``
    (Nesterov: ``x_t + m·u_t``), kept in the runner's per-(worker, unit) ``ref_state``.
    """

    params: Any
    #: what they send is already the momentum update: the stream takes their aggregate as the update
    applies_momentum = True

    def reference_update(self, x: torch.Tensor, ref_state: dict[str, Any]) -> torch.Tensor:
        u = ref_state.get("u")
        if u is None or u.shape != x.shape:
            u = ref_state["u"] = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        return dense_momentum_update(u, x.float(), self.params["momentum"], bool(self.params.get("nesterov", False)))

    def reference_name(self) -> str:
        return "momentum-SGD update u_t = m·u_{t-1} + g_t"


# ----------------------------------------------------------------------------- error feedback with a count


def form_counting(x32: torch.Tensor, e: torch.Tensor, has_e: bool, t: np.float32 | None) -> np.ndarray | None:
    """``a = x + e`` in the residual buffer ``e`` and, on CPU, the per-chunk counts of ``|a| >= t`` in that pass.

    A ``_form_corrected`` for a threshold ``t`` (from :func:`~gcbench.kernels.f32_threshold`)
    known before ``a`` is formed; the counts go to :func:`~gcbench.compressors._sparse.select_encode`.
    None (the selection counts for itself) where nothing is fused: no previous residual (``a``
    is a copy of ``x``), no threshold, or tensors the kernels do not take.
    """
    if has_e and t is not None and kernels.fast_cpu(e, x32):
        return kernels.add_count(kernels.as_numpy(e).reshape(-1), kernels.as_numpy(x32).reshape(-1), t)
    ErrorFeedback.form(x32, e, has_e)
    return None


# ----------------------------------------------------------------------------- DGC, fast


@dataclass
class DGCStep(SelectionStats):
    """Outcome of :func:`dgc_step_fast` / :func:`dgc_step_torch`: the payload body, the number sent, the decoded
    tensor when asked, and what :class:`DGCSelection` reports (its :class:`SelectionStats`)."""

    body: np.ndarray | torch.Tensor
    sent: int
    decoded: torch.Tensor | None
    stats: torch.Tensor


def dgc_step_torch(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, momentum: float, nesterov: bool, coef: float | torch.Tensor | None,
                   k: int,
                   density: float, num_samples: int, stride: int, start: int, coding: str, masking: bool, want_decoded: bool) -> DGCStep:
    """One DGC step with torch ops (any device): :func:`accumulate`, :func:`dgc_select`, zeroing, the body.

    The straightforward version of :func:`dgc_step_fast` (same arguments, same result); everything stays on
    the tensors' device, the body included (one scalar read, :func:`dgc_select`'s).
    """
    accumulate(u, v, x if coef is None else x * coef, momentum, nesterov)
    flat = v.reshape(-1)
    d = flat.numel()
    sel = dgc_select(flat.abs(), k, density, num_samples, stride, start)
    idx = sel.indices
    vals = flat[idx]  # advanced indexing copies, so zeroing v below does not touch vals
    decoded = dense_from_sparse(vals, idx, d) if want_decoded else None
    flat[idx] = 0
    if masking:
        u.reshape(-1)[idx] = 0
    body = sparse_body(vals, idx, d, coding, is_sorted=True)
    return DGCStep(body, int(idx.numel()), decoded, sel.stats)


def dgc_step_fast(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, momentum: float, nesterov: bool, coef: float | None, k: int,
                  density: float, num_samples: int, stride: int, start: int, coding: str, masking: bool, want_decoded: bool) -> DGCStep:
    """One DGC step on contiguous CPU float32 tensors: momentum correction, :func:`dgc_select`, masking.

    Same arithmetic and the same selection as :func:`accumulate` + :func:`dgc_select` + zeroing
    (the tests compare them bit for bit), with these passes over the tensor: the sampled |v| is
    computed ahead of the update (only the samples), so the update of u and v and the count of
    ``|v| >= thr`` are one pass; each ×0.8 round is a count pass; the selection pass writes the
    body, zeroes v at the sent positions and fills the decoded tensor when asked.  Nesterov
    momentum updates with the torch ops (their rounding of ``v + m·u`` is the reference).
    """
    xn, un, vn = kernels.as_numpy(x).reshape(-1), kernels.as_numpy(u).reshape(-1), kernels.as_numpy(v).reshape(-1)
    d = vn.size
    full = num_samples >= d
    counts: np.ndarray | None = None
    if nesterov or full:
        if nesterov:
            accumulate(u, v, x if coef is None else x * coef, momentum, True)
        else:
            kernels.momentum_update_count(un, vn, xn, momentum, coef, np.float32(np.inf))
        samples = torch.from_numpy(np.abs(vn) if full else np.abs(vn[start : start + num_samples * stride : stride]))
    else:
        samples = torch.from_numpy(kernels.momentum_sample(un, vn, xn, momentum, coef, start, stride, num_samples))
    thr = max(kernels.kth_largest_np(samples.numpy(), sample_top(samples.numel(), density)), TINY)  # kth_largest's value
    if nesterov or full:
        counts = kernels.count_chunks(vn, kernels.f32_threshold(thr, False))
    else:
        counts = kernels.momentum_update_count(un, vn, xn, momentum, coef, kernels.f32_threshold(thr, False))
    exact = False
    rounds = 0
    if not full:
        for _ in range(DGC_MAX_ITERS):
            count = int(counts.sum())
            if count > k:
                exact = count > k * DGC_UPPER
                break
            if count >= k * DGC_LOWER:
                break
            if thr <= TINY:
                break
            thr = max(thr * DGC_LOWER, TINY)
            rounds += 1
            counts = kernels.count_chunks(vn, kernels.f32_threshold(thr, False))
    t = kernels.f32_threshold(thr, False)
    ties = full and int(counts.sum()) > k  # the exact path with ties at the k-th largest: keep a true top-k
    if exact or ties:
        # the official exact top-k among the passing entries, with torch.topk's own choice among ties;
        # or, on the exact path, every entry above the threshold and then ties in position order
        sel = _sparse.select_encode(vn, t, None, counts=counts, want_idx=True)
        assert sel.idx is not None and sel.vals is not None
        cval = torch.from_numpy(sel.vals)
        if exact:
            pick = torch.topk(cval.abs(), k, sorted=False).indices.sort().values.numpy()
        else:
            pick = ties_by_position(cval.abs() > thr, k).numpy()
        idx, vals = sel.idx[pick], sel.vals[pick]
        body = _sparse.encode_sorted(vals, idx, d, coding)
        decoded = _sparse.dense_from(idx, vals, d) if want_decoded else None
        kernels.scatter_zero(vn, idx)
        if masking:
            kernels.scatter_zero(un, idx)
        return DGCStep(body, k, decoded, selection_stats(thr, k, exact, rounds))
    sel = _sparse.select_encode(vn, t, coding, counts=counts, limit=k, zero_mode=kernels.ZERO_SET, want_decoded=want_decoded,
                             want_idx=masking)
    if masking:
        assert sel.idx is not None
        kernels.scatter_zero(un, sel.idx)
    decoded = torch.from_numpy(sel.decoded) if sel.decoded is not None else None
    return DGCStep(sel.body, sel.k, decoded, selection_stats(thr, sel.count, False, rounds))
