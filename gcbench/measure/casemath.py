"""The maths of one benchmark case: the numbers the runner derives from a stream of steps.

The runner (:mod:`gcbench.measure.runner`) feeds a source's steps through a compressor and hands
the tensors here; this module turns them into the numbers of the case record.  Per-tensor fidelity
(q, bias², variance, cosine, δ, α) is :mod:`gcbench.measure.fidelity`; what spans units, workers and
steps is defined here (docs/metrics.md):

* **aggregate** of the default exchange: the element-wise mean of the workers' decoded tensors;
  the **true mean** is the same mean of the workers' references;
* **whole-model cosine** of the aggregate with the true mean at each step, dot products and
  squared norms summed over units before the division;
* **aggregate drift** after step t: ‖Σ_{s≤t}(aggregate_s − mean_s)‖ / ‖Σ_{s≤t} mean_s‖, norms over the
  whole model (one minus the delivered fraction of the summed true update); the **window drift** is
  the same with both sums restarted at each phase window's first step;
* **EF drift** of a stateful compressor on worker 0: ‖Σ_{s≤t} C_s − Σ_{s≤t} g_s‖ / ‖Σ_{s≤t} g_s‖, and
  the **residual ratio** ‖Σ_{s≤t} C_s − Σ_{s≤t} g_s‖ / ‖g_t‖ (the error still owed, against this step);
* **traffic**: the bytes each worker sends and receives per (exchange phase, step), and their means;
* the **summaries** of per-unit, per-step fidelities into the record's fidelity, aggregate, size,
  per-layer and timing blocks (mean over tensors and steps, worst case, and the pooled whole model).

Running sums are kept in float32 (the tensors' dtype), every squared norm is taken in float64.  A
ratio whose denominator is zero is undefined and reported as ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gcbench.core.errors import GcbenchError
from gcbench.core.finite import all_finite
from gcbench.core.intervals import jackknife
from gcbench.core.payload import dense_bytes
from gcbench.measure.fidelity import (
    Fidelity,
    _fast,
    accumulate64,
    bits_per_element,
    fidelity,
    mean_ci,
    pooled,
    ratio,
    scaled_error,
    sq_dist64,
    sq_norm64,
    summarise,
)
from gcbench.measure.timing import Interleaved, TimingPolicy, flag_reasons, last_level_cache_bytes, throughput, x_copy_summary
from gcbench.results.phases import Window
from gcbench.results.record import UNSTABLE
from gcbench.sources.base import FLOAT32_MAX

# ----------------------------------------------------------------------------- tensors and norms


def worker_mean(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The element-wise mean of the workers' tensors, in float32 (an all-gather's aggregate, the true mean).

    Summed in place into one new buffer, in worker order (the same roundings as ``sum(...) / W``,
    without a temporary per worker).  Where that float32 sum overflows although every input is
    finite (gradients near float32's max), the mean is taken again in float64 and rounded once: the
    mean of finite values is finite, and must not turn into ±inf on the way."""
    out = tensors[0].to(torch.float32, copy=True)
    for t in tensors[1:]:
        out.add_(t.float())
    out.div_(len(tensors))
    if len(tensors) > 1 and not all_finite(out) and all(all_finite(t) for t in tensors):
        acc = tensors[0].to(torch.float64, copy=True)
        for t in tensors[1:]:
            acc.add_(t.double())
        out.copy_(acc.div_(len(tensors)))
    return out


def max_abs(t: torch.Tensor) -> float:
    """max |t| as a Python float (0 for an empty tensor)."""
    return float(t.detach().abs().max()) if t.numel() else 0.0


class NonFiniteError(GcbenchError):
    """A case whose numbers cannot be finite although its input is: the case fails with this reason."""


def check_decoded(compressor: str, unit: str, x: torch.Tensor, decoded: torch.Tensor, where: str,
                  wire_max: float | None = None) -> int:
    """Check one decoded tensor of finite input ``x``; returns how many of its elements saturated.

    A compressor whose wire format is a narrower float (fp16, bf16: ``wire_max`` its largest value)
    maps an input beyond that max to ±inf, exactly as a real fp16 all-reduce would: those elements
    are counted (the case is flagged ``saturated``).  Any other non-finite element (NaN, or ±inf
    from an input the format could hold) means an intermediate (a norm, a scale) overflowed:
    :class:`NonFiniteError` says so, with the count and the input's range, so the case fails with
    a reason instead of recording empty metrics.
    """
    if all_finite(decoded):
        return 0
    bad = ~torch.isfinite(decoded)
    n_nan, n_inf = int(torch.isnan(decoded).sum()), int(torch.isinf(decoded).sum())
    if wire_max is not None and n_nan == 0:
        # the elements the format saturates: ±inf exactly where the input was beyond its max
        beyond = x.detach().reshape(decoded.shape).abs() > wire_max
        if not bool((bad & ~beyond).any()):
            return n_inf
    peak = max_abs(x)
    raise NonFiniteError(f"{compressor}: decompressed gradient is not finite ({n_nan} NaN and {n_inf} ±Inf of {decoded.numel()} "
                         f"elements of {unit!r}, {where}) though its input is finite (max |g| = {peak:.3g}): a norm or scale "
                         f"overflowed float32 (max {FLOAT32_MAX:.3g})" + (" or the format cannot hold the result" if peak > 1e30 else ""))


def check_numbers(compressor: str, values: Iterable[float | None], what: str, x_peak: Callable[[], float]) -> None:
    """Raise :class:`NonFiniteError` when a metric of finite tensors came out NaN or ±inf.

    ``None`` is a metric that is undefined (a zero denominator); a non-finite float is a float32
    running sum or difference that overflowed (gradients near float32's max leave no headroom).
    ``x_peak()`` (the inputs' max |g|, for the message) is called only then.
    """
    if any(v is not None and not math.isfinite(v) for v in values):
        raise NonFiniteError(f"{compressor}: the {what} is not finite although every gradient and decoded tensor is "
                             f"(max |g| = {x_peak():.3g}): its float32 sums overflow near float32's max ({FLOAT32_MAX:.3g}); "
                             "rescale the source")


def sq_norm(t: torch.Tensor) -> float:
    """‖t‖², computed in float64 (one pass, no float64 copy of ``t``)."""
    return sq_norm64(t)


def sum_sq_norms(tensors: Iterable[torch.Tensor]) -> float:
    """Σ ‖t‖² over tensors (units): the squared norm of the whole model they make up."""
    return float(sum(sq_norm(t) for t in tensors))


def norm_ratio(num_sq: float, den_sq: float) -> float | None:
    """√(num_sq / den_sq): a relative norm from two squared norms; ``None`` when the denominator is 0."""
    return math.sqrt(num_sq / den_sq) if den_sq > 0 else None


def cosine_terms(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float]:
    """⟨a, b⟩, ‖a‖² and ‖b‖² of one unit (float64): the terms :func:`model_cosine` sums over units."""
    a64, b64 = a.double(), b.double()
    return float((a64 * b64).sum()), float(a64.pow(2).sum()), float(b64.pow(2).sum())


def model_cosine(terms: Iterable[tuple[float, float, float]]) -> float | None:
    """cos(a, b) of two whole models from their units' :func:`cosine_terms`; ``None`` when either is all zeros."""
    dot = n_a = n_b = 0.0
    for d, sa, sb in terms:
        dot += d
        n_a += sa
        n_b += sb
    return dot / math.sqrt(n_a * n_b) if n_a > 0 and n_b > 0 else None


# ----------------------------------------------------------------------------- sums over steps


class RunningSum:
    """Σ_s (a_s − b_s) of each unit over the steps since the last :meth:`restart`, in float32, with its norm.

    Each :meth:`add` updates one unit's sum in place and takes its squared norm in the same pass
    (:func:`gcbench.measure.fidelity.accumulate64`), so :meth:`sq_norm` costs nothing; one
    model-sized buffer per sum, whatever the stream length.  A caller's tensor is never modified.
    """

    def __init__(self, units: int) -> None:
        self.sums: list[torch.Tensor | None] = [None] * units
        self._sq: list[float] = [0.0] * units

    def add(self, unit: int, a: torch.Tensor, b: torch.Tensor | None = None) -> None:
        """Add this step's ``a`` (minus ``b`` when given) of ``unit`` to its sum."""
        s = self.sums[unit]
        if s is None:
            s = self.sums[unit] = torch.zeros(a.shape, dtype=torch.float32, device=a.device)
        self._sq[unit] = accumulate64(s, a, b)

    def restart(self) -> None:
        """Start every sum again from zero (a new phase window)."""
        self.sums = [None] * len(self.sums)
        self._sq = [0.0] * len(self._sq)

    def sq_norm(self) -> float:
        """‖Σ_s x_s‖² over the whole model."""
        return float(sum(self._sq))


def cumulative_drift(errors: RunningSum, means: RunningSum) -> float | None:
    """‖Σ_s e_s‖ / ‖Σ_s m_s‖ over the whole model: the aggregate (or window) drift from its two running sums."""
    return norm_ratio(errors.sq_norm(), means.sq_norm())


def ef_drift(errors: RunningSum, reference: RunningSum, current: Sequence[torch.Tensor]) -> tuple[float | None, float | None]:
    """EF drift ‖Σ C_s − Σ g_s‖ / ‖Σ g_s‖ and residual ratio ‖Σ C_s − Σ g_s‖ / ‖g_t‖ from the running sums of
    C_s − g_s and of g_s (``current`` = g_t by unit)."""
    num = errors.sq_norm()
    g_now = math.sqrt(sum_sq_norms(current))
    return norm_ratio(num, reference.sq_norm()), (math.sqrt(num) / g_now if g_now > 0 else None)


class StreamStats:
    """The per-step numbers of one case, accumulated step by step (worker 0's units, and the aggregate).

    Per unit and step it keeps worker 0's wire bytes, its fidelity and the aggregate's fidelity
    against the true worker mean; per step the whole-model cosine, the aggregate drift, the window
    drift (when the case has phase windows) and, for stateful compressors, the EF drift and
    residual ratio (see the module docstring for the definitions).
    """

    def __init__(self, units: int, stateful: bool, windowed: bool) -> None:
        self.stateful, self.windowed = stateful, windowed
        self.bytes: list[list[int]] = [[] for _ in range(units)]
        self.fids: list[list[Fidelity]] = [[] for _ in range(units)]
        self.agg: list[list[Fidelity]] = [[] for _ in range(units)]
        self.agg_cosine: list[float | None] = []
        self.agg_drift: list[float | None] = []
        self.window_drift: list[float | None] = []
        self.drift: list[float | None] = []
        self.residual: list[float | None] = []
        self._err, self._mean = RunningSum(units), RunningSum(units)
        self._win_err, self._win_mean = RunningSum(units), RunningSum(units)
        self._ef, self._ref = RunningSum(units), RunningSum(units)

    def add_step(self, refs: Sequence[Sequence[torch.Tensor]], aggregates: Sequence[torch.Tensor],
                 decoded0: Sequence[torch.Tensor], bytes0: Sequence[int], fids0: Sequence[Fidelity] | None,
                 window_start: bool = False, true_means: Sequence[torch.Tensor] | None = None,
                 common: CommonStep | None = None) -> None:
        """One step: ``refs[w][u]`` every worker's reference, the aggregate, worker 0's decoded tensors,
        wire bytes and (on the one-shot steps; None after them) fidelity by unit; ``window_start``
        restarts the window sums before this step; ``true_means`` the workers' mean reference by unit
        when the caller has it already (the common reference's ḡ_t).  ``common``: this step's aggregate
        fidelities and running sums as the case's :class:`DeliveredStream` took them, where its dense update
        is this true mean (:meth:`DeliveredStream.common_step`): the same passes are not made twice."""
        if window_start:
            self._win_err.restart()
            self._win_mean.restart()
        cos_terms = []
        for u, agg in enumerate(aggregates):  # unit by unit: one unit's temporaries alive at a time
            true_mean = true_means[u] if true_means is not None else worker_mean([r[u] for r in refs])
            self.bytes[u].append(bytes0[u])
            if fids0 is not None:
                self.fids[u].append(fids0[u])
            if common is None:
                fid = fidelity(true_mean, [agg])  # one draw: the exchange happens once
                self._err.add(u, agg, true_mean)
                self._mean.add(u, true_mean)
            else:
                fid = common.fids[u]
            self.agg[u].append(fid)
            if self.windowed:
                self._win_err.add(u, agg, true_mean)
                self._win_mean.add(u, true_mean)
            if self.stateful:
                self._ef.add(u, decoded0[u], refs[0][u])
                self._ref.add(u, refs[0][u])
            cos_terms.append(fid.cosine_terms())  # = cosine_terms(agg, true_mean), from the fidelity pass
        self.agg_cosine.append(model_cosine(cos_terms))
        if common is None:
            self.agg_drift.append(cumulative_drift(self._err, self._mean))
        else:
            self.agg_drift.append(norm_ratio(common.err_sq, common.mean_sq))
        if self.windowed:
            self.window_drift.append(cumulative_drift(self._win_err, self._win_mean))
        if self.stateful:
            drift, resid = ef_drift(self._ef, self._ref, refs[0])
            self.drift.append(drift)
            self.residual.append(resid)


@dataclass(frozen=True)
class CommonStep:
    """One step of a case's stream on the common reference, where its dense update is the workers' true mean (plain
    SGD): the aggregate's fidelity against it by unit, ‖Σ_s (U_s − ḡ_s)‖² and ‖Σ_s ḡ_s‖² — exactly what
    :class:`StreamStats` would otherwise take again from the same tensors."""

    fids: Sequence[Fidelity]
    err_sq: float
    mean_sq: float


# ----------------------------------------------------------------------------- the stream on the common reference


def stream_weights(steps: int, momentum: float) -> list[float]:
    """w_s = Σ_{t=s}^{T−1} m^{t−s} = (1 − m^{T−s})/(1 − m): how much step s's input weighs in the sum of T momentum updates.

    Momentum is linear, so the sum of the updates u_t = m·u_{t−1} + x_t over T steps is Σ_s w_s·x_s;
    with m = 0 every weight is 1.
    """
    if momentum == 0:
        return [1.0] * steps
    return [(1.0 - momentum ** (steps - s)) / (1.0 - momentum) for s in range(steps)]


def weighted_add(sums: list[torch.Tensor], tensors: Sequence[torch.Tensor], weight: float) -> list[torch.Tensor]:
    """Σ += weight·x unit by unit, in float32 and in place (an empty ``sums`` starts from the first step's tensors)."""
    if not sums:
        return [x.float() * weight for x in tensors]
    for acc, x in zip(sums, tensors, strict=True):
        acc.add_(x.float(), alpha=weight)
    return sums


class DenseReference:
    """The suite's one common reference for a source: the dense update of the suite's optimizer, shared by every case.

    D_t = u_t = m·u_{t−1} + ḡ_t (m = 0: plain SGD, D_t = ḡ_t), with ḡ_t the true worker mean of the
    gradients; kept per step and unit with its squared norm, the squared norm of its running sum
    Σ_{s≤t} D_s, and each worker's own dense-update sum R^w = Σ_s w_s·g^w_s over the whole stream
    (:func:`stream_weights`).  Built once per source from its cached gradients (no compressor involved).
    """

    def __init__(self, grads: Callable[[int, int], Sequence[torch.Tensor]] | None, steps: int, workers: int, momentum: float) -> None:
        self.steps, self.workers, self.momentum = steps, workers, momentum
        self.weights = stream_weights(steps, momentum)
        self.mean: list[list[torch.Tensor]] = []
        self.dense: list[list[torch.Tensor]] = []
        self.dense_sq: list[float] = []
        self.sum_sq: list[float] = []
        self._running: RunningSum | None = None
        self.worker_sums: list[list[torch.Tensor]] = [[] for _ in range(workers)]
        self._u_buf: list[torch.Tensor] = []
        self._worker_sum_sq: list[float] | None = None
        if grads is not None:  # an open-loop source: every step is known up front
            for t in range(steps):
                self.add_step(t, [grads(t, w) for w in range(workers)])

    def add_step(self, t: int, per_worker: Sequence[Sequence[torch.Tensor]]) -> None:
        """Step ``t``'s gradients of every worker, by unit (steps in order; a closed-loop source feeds them one step
        at a time, as its model moves with the case's own aggregate)."""
        if t != len(self.mean):
            raise ValueError(f"dense reference: step {t} added after {len(self.mean)} steps")
        momentum = self.momentum
        mean = [worker_mean([g[u] for g in per_worker]) for u in range(len(per_worker[0]))]
        if self._running is None:
            self._running = RunningSum(len(mean))
        if momentum == 0:
            dense = mean
        else:  # the dense update keeps its own buffer: u_t = m·u_{t−1} + ḡ_t
            if t == 0:
                self._u_buf = [g.clone() for g in mean]
            else:
                self._u_buf = [b.mul_(momentum).add_(g) for b, g in zip(self._u_buf, mean, strict=True)]
            dense = [b.clone() for b in self._u_buf]
        for u, d in enumerate(dense):
            self._running.add(u, d)
        for w, g in enumerate(per_worker):
            self.worker_sums[w] = weighted_add(self.worker_sums[w], g, self.weights[t])
        self.mean.append(mean)
        self.dense.append(dense)
        self.dense_sq.append(sum_sq_norms(dense))
        self.sum_sq.append(self._running.sq_norm())
        self._worker_sum_sq = None

    @property
    def worker_sum_sq(self) -> list[float]:
        """‖R^w‖² of each worker's dense-update sum over the steps added so far."""
        if self._worker_sum_sq is None:
            self._worker_sum_sq = [sum_sq_norms(r) for r in self.worker_sums]
        return self._worker_sum_sq

    def describe(self) -> str:
        return "dense SGD update" if self.momentum == 0 else f"dense momentum-SGD update (m={self.momentum:g})"


class DeliveredStream:
    """One case's stream on the common reference: what its updates U_t deliver of the dense updates D_t.

    U_t is the aggregate itself when the compressor applies momentum of its own (DGC, SDAGC: what
    they send is already the momentum update) or the suite's optimizer is plain SGD; otherwise the
    suite optimizer's update of the aggregate, u_t = m·u_{t−1} + aggregate_t.  Per step it keeps the
    whole-model ‖U_t − D_t‖²/‖D_t‖², the scale-free 1 − cos²(U_t, D_t) and the delivered fraction
    1 − ‖Σ_{s≤t}(U_s − D_s)‖/‖Σ_{s≤t} D_s‖.  When each worker's decoded contribution C^w_t is known,
    it also sums Σ_s w_s·C^w_s per worker (the same update filter, :func:`stream_weights`), so
    each worker's own delivered fraction against R^w gives a spread over workers.
    """

    def __init__(self, ref: DenseReference, units: int, own_momentum: bool) -> None:
        self.ref, self.own_momentum = ref, own_momentum
        self.filtered = ref.momentum != 0 and not own_momentum
        self._u: list[torch.Tensor | None] = [None] * units
        self._err = RunningSum(units)
        self._workers: list[list[torch.Tensor]] | None = [[] for _ in range(ref.workers)]
        self.error: list[float | None] = []
        self.error_scaled: list[float | None] = []
        self.delivered: list[float | None] = []
        self._gram_cache: tuple[int, tuple[np.ndarray, np.ndarray]] | None = None  # (steps taken, Gram matrices)
        self._fids: list[Fidelity] = []  # the last step's, by unit

    def _update(self, unit: int, aggregate: torch.Tensor) -> torch.Tensor:
        if not self.filtered:
            return aggregate
        b = self._u[unit]
        self._u[unit] = aggregate.float().clone() if b is None else b.mul_(self.ref.momentum).add_(aggregate)
        return self._u[unit]  # type: ignore[return-value]

    def add_step(self, t: int, aggregates: Sequence[torch.Tensor], contributions: Sequence[Sequence[torch.Tensor]] | None) -> None:
        """Step ``t``'s aggregate by unit, and each worker's decoded contribution by unit (None: not observable)."""
        err_sq = dot = u_sq = 0.0
        self._fids = []
        for u, agg in enumerate(aggregates):
            upd = self._update(u, agg)
            dense = self.ref.dense[t][u]
            f = fidelity(dense, [upd])  # one fused pass: ‖U − D‖², ⟨U, D⟩, ‖U‖²
            self._fids.append(f)
            err_sq += f.err_sq_mean
            dot += f.dots[0]
            u_sq += f.d_sq[0]
            self._err.add(u, upd, dense)  # Σ_s (U_s − D_s) and its norm, one pass
        d_sq = self.ref.dense_sq[t]
        self.error.append(err_sq / d_sq if d_sq > 0 else None)
        self.error_scaled.append(scaled_error(dot, u_sq, d_sq) if d_sq > 0 else None)
        r = norm_ratio(self._err.sq_norm(), self.ref.sum_sq[t])
        self.delivered.append(None if r is None else 1.0 - r)
        if contributions is None or self._workers is None:
            self._workers = None  # one step without them and the per-worker sums are incomplete
            return
        ws = 1.0 if self.own_momentum else self.ref.weights[t]
        for w, contrib in enumerate(contributions):
            self._workers[w] = weighted_add(self._workers[w], contrib, ws)

    def common_step(self, t: int) -> CommonStep | None:
        """Step ``t``'s (the last added) passes for :class:`StreamStats`, where they are its own: the dense update D_t is the
        workers' true mean ḡ_t (no momentum) and U_t the aggregate; None otherwise."""
        if self.ref.momentum != 0 or self.filtered or t != len(self.delivered) - 1:
            return None
        return CommonStep(tuple(self._fids), self._err.sq_norm(), self.ref.sum_sq[t])

    def worker_delivered(self) -> list[float | None] | None:
        """Each worker's delivered fraction 1 − ‖Σ_s w_s C^w_s − R^w‖/‖R^w‖ after the last step (None: not observable).

        With several workers ‖E^w‖² is the diagonal of the jackknife's Gram matrix of the errors (:meth:`_grams`: one
        pass over the workers' sums serves both figures); with one worker it is summed directly."""
        if self._workers is None or any(not s for s in self._workers):
            return None
        grams = self._grams()
        out: list[float | None] = []
        for w, (sums, ref, ref_sq) in enumerate(zip(self._workers, self.ref.worker_sums, self.ref.worker_sum_sq, strict=True)):
            e_sq = max(float(grams[0][w, w]), 0.0) if grams is not None else sum(sq_dist64(a, b) for a, b in zip(sums, ref, strict=True))
            r = norm_ratio(e_sq, ref_sq)
            out.append(None if r is None else 1.0 - r)
        return out

    def _grams(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The W×W Gram matrices of the workers' errors E^w = Σ_s w_s C^w_s − R^w and of R^w (float64), computed once
        after the last step; None with one worker or contributions not observable."""
        sums = self._workers
        W = self.ref.workers
        if W < 2 or sums is None or any(not s for s in sums):
            return None
        if self._gram_cache is not None and self._gram_cache[0] == len(self.delivered):
            return self._gram_cache[1]
        g_e = np.zeros((W, W))
        g_r = np.zeros((W, W))
        chunk = 1 << 20
        for u in range(len(sums[0])):
            n = sums[0][u].numel()
            refs = [self.ref.worker_sums[w][u] for w in range(W)]
            mine = [sums[w][u] for w in range(W)]
            if _fast(*refs, *mine):  # one float32 read per tensor: the float64 copies cost 17x more (30M elements, 2 workers)
                from gcbench import kernels
                from gcbench.kernels.stats import grams

                grams(tuple(kernels.flat_f32(t) for t in refs), tuple(kernels.flat_f32(t) for t in mine), g_e, g_r)
                continue
            for lo in range(0, n, chunk):
                r = torch.stack([self.ref.worker_sums[w][u].reshape(-1)[lo:lo + chunk].double() for w in range(W)])
                e = torch.stack([sums[w][u].reshape(-1)[lo:lo + chunk].double() for w in range(W)]) - r
                g_e += (e @ e.T).cpu().numpy()
                g_r += (r @ r.T).cpu().numpy()
        self._gram_cache = (len(self.delivered), (g_e, g_r))
        return g_e, g_r

    def delivered_jackknife(self) -> list[float | None] | None:
        """The aggregate's delivered fraction with each worker left out in turn, from the workers' own sums.

        Where the aggregate is the workers' mean (contributions observable), Σ_t(U_t − D_t) is the mean
        over workers of E^w = Σ_s w_s C^w_s − R^w and Σ_t D_t the mean of R^w, so leaving worker w out gives
        1 − ‖Σ_{v≠w} E^v‖/‖Σ_{v≠w} R^v‖; both norms come from the W×W Gram matrices of E and R (float64,
        summed in chunks).  None with one worker or contributions not observable.
        """
        grams = self._grams()
        if grams is None:
            return None
        g_e, g_r = grams
        W = self.ref.workers
        out: list[float | None] = []
        for w in range(W):
            keep = [v for v in range(W) if v != w]
            e_sq, r_sq = g_e[np.ix_(keep, keep)].sum(), g_r[np.ix_(keep, keep)].sum()
            ratio = norm_ratio(max(float(e_sq), 0.0), float(r_sq))
            out.append(None if ratio is None else 1.0 - ratio)
        return out

    def delivered_ci(self, loo: Sequence[float | None] | None, confidence: float = 0.95) -> dict[str, Any] | None:
        """A 95% interval of the aggregate's own delivered fraction: the headline ± t(W−1) × the jackknife standard
        error over workers, √((W−1)/W · Σ_w (d_(−w) − mean d_(−·))²).  It is the sampling spread of the figure over
        the workers' batches and the compressor's draws (each worker draws its own), centred on the headline.
        None where the leave-one-out values are not all known."""
        headline = self.delivered[-1] if self.delivered else None
        if headline is None or not loo or any(v is None or not math.isfinite(v) for v in loo):
            return None
        iv = jackknife(headline, [float(v) for v in loo if v is not None], confidence)
        return {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": iv.n, "se_mean": iv.se}

    def summary(self, stateful: bool, min_steps: int) -> dict[str, Any]:
        """The record's stream block (:class:`gcbench.results.run_record.Stream`)."""
        workers = self.worker_delivered()
        steps = len(self.delivered)
        ci = mean_ci([v for v in workers if v is not None]) if workers else None
        loo = self.delivered_jackknife()
        return {
            "reference": self.ref.describe(), "momentum": self.ref.momentum, "own_momentum": self.own_momentum,
            "steps": steps, "min_steps": min_steps, "enough": steps >= min_steps or not stateful,
            "delivered": self.delivered[-1] if self.delivered else None,
            "per_step_delivered": self.delivered, "per_step_error": self.error, "per_step_error_scaled": self.error_scaled,
            "worker_delivered": workers,
            "worker_ci": None if ci is None else {k: ci[k] for k in ("mean", "lo", "hi", "n")},
            "delivered_jackknife": loo, "delivered_ci": self.delivered_ci(loo),
        }


# ----------------------------------------------------------------------------- traffic


def allgather_traffic(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(sent, received) bytes of each worker in an all-gather of payloads of ``sizes`` bytes (one per worker)."""
    total = sum(sizes)
    return [(s, total - s) for s in sizes]


class TrafficLog:
    """Bytes each worker sent and received at each step, per exchange phase, and the payload-body bytes it sent.

    ``rows[phase][step * workers + worker]`` is ``[sent, received, body]``; ``body`` is −1 once the
    protocol has not said how many of the bytes it sent are payload bodies (then there is no
    body-only ratio for that phase).  Phases keep the order in which they first appear.
    """

    def __init__(self, steps: int, workers: int) -> None:
        self.steps, self.workers = steps, workers
        self.rows: dict[str, list[list[int]]] = {}

    def add(self, phase: str, step: int, worker: int, sent: int, received: int, body: int | None) -> None:
        """Count one message exchange of ``worker`` at ``step`` in ``phase`` (``body`` None: not known)."""
        rows = self.rows.setdefault(phase, [[0, 0, 0] for _ in range(self.steps * self.workers)])
        row = rows[step * self.workers + worker]
        row[0] += sent
        row[1] += received
        row[2] = -1 if body is None or row[2] < 0 else row[2] + body

    def add_allgather(self, step: int, sizes: Sequence[int], bodies: Sequence[int]) -> None:
        """The default exchange: every worker's payloads (``sizes`` bytes, ``bodies`` of them bodies) go to every other."""
        for w, ((sent, received), body) in enumerate(zip(allgather_traffic(sizes), bodies, strict=True)):
            self.add("allgather", step, w, sent, received, body)

    def _per_step(self, rows: list[list[int]], column: int) -> list[float]:
        return [float(np.mean([rows[t * self.workers + w][column] for w in range(self.workers)])) for t in range(self.steps)]

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per phase: mean and max bytes a worker sent, mean received, and the mean sent at each step (all, bodies only)."""
        return {
            ph: {"sent_mean": float(np.mean([r[0] for r in rows])), "received_mean": float(np.mean([r[1] for r in rows])),
                 "sent_max": int(max(r[0] for r in rows)),
                 # bytes per worker at each step: phases that run only in some steps (LGC) stay readable
                 "per_step_sent": self._per_step(rows, 0),
                 # the same, payload bodies only (headers excluded: papers count bodies); None if the protocol did not say
                 "per_step_sent_body": self._per_step(rows, 2) if all(r[2] >= 0 for r in rows) else None}
            for ph, rows in self.rows.items()
        }

    def mean_sent(self) -> float:
        """Bytes a worker sends per step in the exchange, every phase counted (mean over workers and steps)."""
        return float(sum(float(np.mean([r[0] for r in rows])) for rows in self.rows.values()))

    def by_worker(self, steps: range) -> dict[str, list[float]]:
        """Mean bytes each worker sent and received per step over ``steps``, every phase but one-time ``setup:*``."""
        sent, recv = [0.0] * self.workers, [0.0] * self.workers
        n = max(len(steps), 1)
        for ph, rows in self.rows.items():
            if ph.startswith("setup"):
                continue
            for t in steps:
                for w in range(self.workers):
                    sent[w] += rows[t * self.workers + w][0] / n
                    recv[w] += rows[t * self.workers + w][1] / n
        return {"sent_by_worker": sent, "received_by_worker": recv}

    def windows(self, windows: Sequence[Window]) -> list[dict[str, Any]]:
        """Each phase window with the bytes each worker sent and received per step within it (clipped to the stream)."""
        return [{"name": w.name, "first": w.first, "last": w.last, **self.by_worker(range(w.first, min(w.last, self.steps - 1) + 1))}
                for w in windows]


# ----------------------------------------------------------------------------- summaries for the case record


def finite_mean(values: Iterable[float | None]) -> float | None:
    """The mean of the finite values (``None`` and ±inf/NaN skipped); ``None`` when there are none."""
    v = [x for x in values if x is not None and math.isfinite(x)]
    return float(np.mean(v)) if v else None


def _by_step(per_unit: Sequence[Sequence[Fidelity]]) -> list[dict[str, Any]]:
    """The whole model's pooled fidelity at each step (energy-weighted over units)."""
    return [pooled([unit[t] for unit in per_unit]) for t in range(len(per_unit[0]))]


def fidelity_summary(per_unit: Sequence[Sequence[Fidelity]], repeats: int, reference: str, unbiased: bool) -> dict[str, Any]:
    """The record's fidelity block from worker 0's fidelity per unit and step (``per_unit[u][t]``).

    Every statistic appears twice: over tensors and steps (mean with a CI or worst case), and as
    ``model``, the mean over steps of the whole model's pooled value.  ω̂ is q, given only for
    unbiased compressors.
    """
    fids = [f for unit in per_unit for f in unit]
    fd = [f.to_dict() for f in fids]
    model = _by_step(per_unit)

    def col(key: str) -> list[Any]:
        return [d[key] for d in fd]

    def model_mean(key: str) -> float | None:
        return finite_mean(p[key] for p in model)

    return {
        "repeats": repeats,
        "reference": reference,
        "q": {**mean_ci(col("q")), "model": model_mean("q")},
        "bias2": {**mean_ci(col("bias2")), "model": model_mean("bias2"), "se_mean": finite_mean(col("bias2_se"))},
        "variance": {**mean_ci(col("variance")), "model": model_mean("variance")},
        "omega_hat": {**mean_ci(col("q")), "model": model_mean("q")} if unbiased else None,
        "delta": {**summarise(col("delta")), "model": model_mean("delta")},
        "alpha": {**summarise(col("alpha"), worst="min"), "model": model_mean("alpha")},
        "cosine": {**summarise(col("cosine"), worst="min"), "model": model_mean("cosine")},
        "q_scaled": {**summarise(col("q_scaled")), "model": model_mean("q_scaled")},
        "q_samples": [s for f in fids for s in f.q_samples][:2000],
    }


def aggregate_summary(stats: StreamStats) -> dict[str, Any]:
    """The record's aggregate block: the aggregate's q and cosine against the true mean, and its stream per step."""
    fids = [f for unit in stats.agg for f in unit]
    per_step_q = [p["q"] for p in _by_step(stats.agg)]
    rec: dict[str, Any] = {
        "q": {**summarise([f.q for f in fids]), "model": finite_mean(per_step_q)},
        "cosine": {**summarise([f.cosine for f in fids], worst="min"), "model": finite_mean(stats.agg_cosine)},
        "per_step_q": per_step_q,
        "per_step_cosine": stats.agg_cosine,
        "sum_drift": stats.agg_drift,
    }
    if stats.windowed:
        rec["window_drift"] = stats.window_drift
    return rec


def unit_summary(name: str, numel: int, wire_bytes: Sequence[int], fids: Sequence[Fidelity]) -> dict[str, Any]:
    """One unit's row of the record's per-layer table: mean wire bytes and ratio, mean fidelity over steps."""
    fd = [f.to_dict() for f in fids]
    b = float(np.mean(wire_bytes))
    return {"name": name, "numel": numel, "wire_bytes": b, "ratio": ratio(numel, b),
            **{k: finite_mean(d[k] for d in fd) for k in ("q", "bias2", "variance", "cosine")}}


def size_summary(numel: int, unit_bytes: Sequence[Sequence[int]], traffic_sent: float) -> dict[str, Any]:
    """The record's size block from worker 0's wire bytes per unit and step and what a worker sends per step.

    ``wire_bytes`` (and the ratio) is worker 0's payload bytes per step; ``traffic_sent_bytes`` is
    what a worker really sends per step in the exchange, every phase counted (scalers, both legs
    of 1-bit SGD, LGC's latents and innovations).
    """
    wire = sum(sum(b) for b in unit_bytes) / len(unit_bytes[0])
    return {"numel": numel, "dense_bytes": dense_bytes(numel), "wire_bytes": wire,
            "ratio": ratio(numel, wire), "bits_per_element": bits_per_element(numel, wire),
            "traffic_sent_bytes": traffic_sent, "traffic_ratio": ratio(numel, traffic_sent) if traffic_sent else None}


def timing_summary(numel: int, device: str, threads: int, timed: Interleaved, traffic_bytes: float | None,
                   policy: TimingPolicy) -> dict[str, Any]:
    """The record's timing block from an interleaved measurement (:func:`gcbench.measure.timing.time_interleaved`).

    Each kernel's times with their throughput; its per-round ×copy (median, IQR, samples) with its
    flags (:func:`gcbench.measure.timing.timing_flags`) — compress is also held against the card's
    traffic bound, ``traffic_bytes`` per element against the copy's 8; the load seen and the
    policy whose thresholds the flags used.  ``copy_fraction_*`` (1 / median ×copy) is kept for
    readers of older files.
    """
    bound = traffic_bytes / 8.0 if traffic_bytes is not None else None
    rec: dict[str, Any] = {"numel": numel, "device": device, "threads": threads, "method": "interleaved", "baseline": "round",
                           "rounds": len(timed.copy), "stopped": timed.stopped, "load_per_core": timed.load_per_core,
                           "foreign_cpu": timed.foreign_cpu,
                           "traffic_bound_x_copy": bound, "policy": policy.to_dict(),
                           "copy": {**timed.copy_timing.to_dict(), **throughput(numel, timed.copy_timing)}}
    for kernel in ("compress", "decompress"):
        t = timed.timing(kernel)
        x = timed.x_copy(kernel)
        why = flag_reasons(x, t.median, timed.load_per_core, policy, bound if kernel == "compress" else None, timed.foreign_cpu)
        rec[kernel] = {**t.to_dict(), **throughput(numel, t)}
        _set_x_copy(rec, kernel, x, why)
    return rec


def _set_x_copy(rec: dict[str, Any], kernel: str, x_copy: Sequence[float], why: Mapping[str, str]) -> None:
    """Write a kernel's ×copy block (its flags with what triggered each) and, for readers of older files, its inverse
    ``copy_fraction_<kernel>``."""
    block = x_copy_summary(x_copy, list(why), why)
    rec[f"{kernel}_x_copy"] = block
    rec[f"copy_fraction_{kernel}"] = 1.0 / block["median"] if block["median"] else None


#: pool the copy baseline only when the copy's traffic (read + write) is this many times the last-level cache
CACHE_RESIDENT_FACTOR = 4

#: a cache-resident source whose cases' copies (the same bytes) spread by more than this factor gives ×copy numbers that
#: will not repeat: the copy is the yardstick, and it moved.  On this 2-core VM (a 32 MB L3 shared with other tenants) the
#: quick suite's 5.4 MB copy took 0.11-0.46 ms by case and by run while the kernels beside it repeated within ±11%
#: (qsgd 0.93-1.16 ms in seven runs, read as 3.07× to 7.85× a copy); no other yardstick tried held (a warm copy, a
#: 128 MiB streaming copy scaled to the source: ±15% run to run on its own)
COPY_SPREAD_LIMIT = 1.3

#: a kernel within this many times its traffic bound is limited by its memory traffic: it speeds and slows with the
#: copy beside it, so its own rounds' copy is its baseline (the issue's "within 2x of its traffic bound")
MEMORY_BOUND_FACTOR = 2.0

#: the least memory traffic of any decompress, in copies: it writes the dense float32 output (4 of a copy's 8 bytes
#: per element).  Cards declare compress's traffic only; this places a decompress as memory- or compute-bound.
DECOMPRESS_BOUND_X_COPY = 0.5


def pool_copy_baseline(timings: Sequence[dict[str, Any]]) -> None:
    """Hold each kernel of one source's cases against the copy it moves with: its own rounds' copy for a kernel
    limited by memory traffic, the run's pooled copy of the same tensors for one limited by compute.

    Each case times a copy of the source's tensors interleaved with its kernels
    (:func:`timing_summary`); the cases of one source copy the same tensors, so the copy time should
    not change between them.  It does: on these machines the copy of the same tensors runs in two
    states about 18% apart, for minutes at a time (ResNet-50: 6.1 or 7.5 ms, ResNet-18: 2.8 or 3.5 ms,
    in runs of consecutive cases).  A compute-bound kernel (top-k, DGC, TernGrad) does not move with
    it, so against its own few copy rounds it moved with the copy (back-to-back cnn runs: DGC 11.1×
    then 8.3×, its copy 21% faster than the run's median in the first); the median over every case's
    copy rounds (hundreds) is its baseline.  A kernel that is itself a copy does move with it: the
    identity compressor on ResNet-50 was 1.22, 1.22, 1.21 and 1.22× its own rounds' copy in two
    back-to-back pairs whose copies ran 0–24% from the pooled one (0.93–1.21× against the pooled
    copy).  So a kernel whose per-round ×copy is within :data:`MEMORY_BOUND_FACTOR` of its traffic
    bound (the card's for compress, :data:`DECOMPRESS_BOUND_X_COPY` for decompress) keeps its
    per-round ratio (``<kernel>_baseline = "round"``); any other is held against the pooled copy
    (``"pooled"``) and flagged ``unstable`` when the case's own copy ran so far from the pooled one
    (``copy_off_pooled``) that the drift, weighted by the share of the kernel's time its traffic
    can explain (bound ÷ ×copy; all of it where no bound is declared), exceeds ``copy_drift`` (15%):
    the machine was in a state that could have moved this kernel too.  Against the previous rule
    (every case whose copy was 15% off flagged) the two back-to-back cnn pairs of 2026-11-24 had
    1 of 60 cases flagged each instead of 12 and 16, with none disagreeing by more than 20%.

    Changes ``timings`` in place: ``<kernel>_x_round_copy`` keeps the per-round block,
    ``<kernel>_x_copy`` is the ratio against the chosen baseline, flagged also when the kernel's own
    median is not pinned down (its 95% CI half-width over ``unstable_rel_ci``) or the load was high.
    A single case, and a source whose copy the caches can hold (read + write under
    :data:`CACHE_RESIDENT_FACTOR` × the last-level cache), keep the per-round ratio.
    """
    timings = [t for t in timings if t and t.get("copy") and t["copy"].get("samples_s")]
    if len(timings) < 2:
        return
    numel = timings[0].get("numel") or 0
    if 2 * dense_bytes(numel) < CACHE_RESIDENT_FACTOR * last_level_cache_bytes():
        # a copy the caches can hold runs at the speed the previous kernel left the caches in, so only the copy of
        # the same round is its baseline (the quick suite's 4 MB: 0.31-0.49 ms by the case it ran beside); how far
        # the cases' copies spread is recorded, and past COPY_SPREAD_LIMIT the report says ×copy will not repeat
        copies = [float(t["copy"]["median_s"]) for t in timings if t["copy"].get("median_s")]
        if copies and min(copies) > 0:
            spread = max(copies) / min(copies)
            for t in timings:
                t["copy_spread"] = spread
                t["copy_range_s"] = [min(copies), max(copies)]
        return
    pooled_copy = float(np.median([v for t in timings for v in t["copy"]["samples_s"]]))
    rounds = sum(len(t["copy"]["samples_s"]) for t in timings)
    if pooled_copy <= 0:
        return
    for t in timings:
        policy = TimingPolicy.from_dict(t.get("policy") or {})
        declared = t.get("traffic_bound_x_copy")
        t["baseline"] = "pooled"
        t["pooled_copy_s"] = pooled_copy
        t["pooled_copy_rounds"] = rounds
        t["copy_off_pooled"] = off = float(t["copy"]["median_s"]) / pooled_copy - 1.0
        for kernel in ("compress", "decompress"):
            samples = (t.get(kernel) or {}).get("samples_s") or []
            if not samples:
                continue
            per_round = t.get(f"{kernel}_x_copy")
            t[f"{kernel}_x_round_copy"] = per_round
            bound = declared if kernel == "compress" else DECOMPRESS_BOUND_X_COPY
            x_round = (per_round or {}).get("median")
            if bound and x_round is not None and x_round <= MEMORY_BOUND_FACTOR * bound:
                t[f"{kernel}_baseline"] = "round"  # the per-round block (and its flags) stands
                continue
            t[f"{kernel}_baseline"] = "pooled"
            x = [v / pooled_copy for v in samples]
            why = flag_reasons(x, float(np.median(samples)), t.get("load_per_core"), policy,
                               declared if kernel == "compress" else None, t.get("foreign_cpu"))
            x_med = float(np.median(x))
            share = min(1.0, bound / x_med) if bound and x_med > 0 else 1.0  # of the kernel's time its traffic explains
            if abs(off) * share > policy.copy_drift:
                drift = (f"the case's copy ran {off:+.0%} off the run's pooled copy, enough to move this kernel by "
                         f"{abs(off) * share:.0%} (over {policy.copy_drift:.0%})")
                why = {UNSTABLE: "; ".join(v for v in (why.get(UNSTABLE), drift) if v),
                       **{k: v for k, v in why.items() if k != UNSTABLE}}
            _set_x_copy(t, kernel, x, why)
