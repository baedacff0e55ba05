"""The stream view of a case on the suite's one common reference: what its updates deliver of the dense updates.

:class:`DenseReference` is the dense update of the suite's optimizer on the workers' true mean, built once per
source and shared by every case; :class:`DeliveredStream` follows one case's updates against it step by step: the
per-step error, the scale-free error, the delivered fraction of the summed dense update, each worker's own
delivered fraction and the aggregate's jackknife over workers (docs/metrics.md, "delivered").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from gcbench.core.intervals import jackknife
from gcbench.measure.casemath import CommonStep, RunningSum, Scratch, norm_ratio, sum_sq_norms, worker_mean
from gcbench.measure.fidelity import Fidelity, _fast, fidelity, mean_ci, scaled_error, sq_dist64


def stream_weights(steps: int, momentum: float) -> list[float]:
    """w_s = Σ_{t=s}^{T−1} m^{t−s} = (1 − m^{T−s})/(1 − m): how much step s's input weighs in the sum of T momentum updates.

    Momentum is linear, so the sum of the updates u_t = m·u_{t−1} + x_t over T steps is Σ_s w_s·x_s;
    with m = 0 every weight is 1.
    """
    if momentum == 0:
        return [1.0] * steps
    return [(1.0 - momentum ** (steps - s)) / (1.0 - momentum) for s in range(steps)]


def weighted_add(sums: list[torch.Tensor], tensors: Sequence[torch.Tensor], weight: float,
                 scratch: Scratch | None = None) -> list[torch.Tensor]:
    """Σ += weight·x unit by unit, in float32 and in place (an empty ``sums`` starts from the first step's tensors,
    in buffers ``scratch`` lends where given)."""
    if not sums:
        if scratch is None:
            return [x.float() * weight for x in tensors]
        return [torch.mul(x.float(), weight, out=scratch.empty(x.shape, x.device)) for x in tensors]
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
        self._sums_shared = False  # worker_sums are the first step's gradients themselves (:meth:`_add_worker_sums`)
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
            self._running = RunningSum(len(mean), one_step=self.steps == 1)
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
        self._add_worker_sums(t, per_worker)
        self.mean.append(mean)
        self.dense.append(dense)
        self.dense_sq.append(sum_sq_norms(dense))
        self.sum_sq.append(self._running.sq_norm())
        self._worker_sum_sq = None

    def _add_worker_sums(self, t: int, per_worker: Sequence[Sequence[torch.Tensor]]) -> None:
        """R^w += w_t·g^w_t.  A first step of weight 1 in float32 is its own sum (x·1 is x, bit for bit): the step's
        tensors are held, not copied (a model-sized copy per worker saved), until a second step needs sums of their own."""
        if t == 0 and self.weights[0] == 1.0 and all(x.dtype == torch.float32 for g in per_worker for x in g):
            self.worker_sums = [list(g) for g in per_worker]
            self._sums_shared = True
            return
        if self._sums_shared:  # the gradients themselves must not be added to: copies from here on
            self.worker_sums = [[x.clone() for x in sums] for sums in self.worker_sums]
            self._sums_shared = False
        for w, g in enumerate(per_worker):
            self.worker_sums[w] = weighted_add(self.worker_sums[w], g, self.weights[t])

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

    def __init__(self, ref: DenseReference, units: int, own_momentum: bool, scratch: Scratch | None = None) -> None:
        self.ref, self.own_momentum = ref, own_momentum
        self.filtered = ref.momentum != 0 and not own_momentum
        self._scratch = scratch  # lends the case's model-sized sums (taken back by the runner at the case's end)
        self._u: list[torch.Tensor | None] = [None] * units
        self._err = RunningSum(units, scratch, one_step=ref.steps == 1)
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
        if b is None:
            own = self._scratch.empty(aggregate.shape, aggregate.device) if self._scratch is not None else None
            self._u[unit] = aggregate.float().clone() if own is None else own.copy_(aggregate)
        else:
            b.mul_(self.ref.momentum).add_(aggregate)
        return self._u[unit]  # type: ignore[return-value]  # set on the line above

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
        if ws == 1.0 and self.ref.steps == 1 and not any(self._workers):
            # a one-step stream: each worker's sum is its contribution itself, read by the Gram matrices right after
            # this last step (no later exchange can reuse its memory); the copy cost 2 × 0.1 s a case on gpt2
            self._workers = [[x.float() for x in contrib] for contrib in contributions]
            return
        for w, contrib in enumerate(contributions):
            self._workers[w] = weighted_add(self._workers[w], contrib, ws, self._scratch)

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
