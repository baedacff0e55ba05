"""The maths of one benchmark case: the numbers the runner derives from a stream of steps.

The runner (:mod:`gcbench.measure.runner`) feeds a source's steps through a compressor and hands
the tensors here; this module turns them into the per-step numbers of the case.  Per-tensor fidelity
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
  the **residual ratio** ‖Σ_{s≤t} C_s − Σ_{s≤t} g_s‖ / ‖g_t‖ (the error still owed, against this step).

The rest of a case's numbers have modules of their own: the stream on the suite's common reference
(:mod:`gcbench.measure.stream`), the traffic log (:mod:`gcbench.measure.traffic`), the summaries into
the record's blocks (:mod:`gcbench.measure.case_summary`) and the timing block with its copy baseline
(:mod:`gcbench.measure.copy_baseline`).

Running sums are kept in float32 (the tensors' dtype), every squared norm is taken in float64.  A
ratio whose denominator is zero is undefined and reported as ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from gcbench.core.errors import GcbenchError
from gcbench.core.finite import all_finite
from gcbench.measure.fidelity import Fidelity, accumulate64, fidelity, first_sum_sq64, sq_norm64
from gcbench.sources.base import FLOAT32_MAX

# ----------------------------------------------------------------------------- tensors and norms


class Scratch:
    """Float32 buffers lent to one case at a time and taken back at its end, so the next case reuses their memory.

    Every case of an open-loop source keeps the same model-sized sums and aggregates; allocating them afresh per
    case made the kernel map and zero those pages again each time (a one-step gpt2 run spent ~30 s of system time
    on it).  :meth:`empty` lends a buffer (a free one of the same shape and device, or a new one), :meth:`release`
    takes back everything lent since the last release: the caller (the runner, after a case's record is made)
    guarantees that nothing lent is read afterwards.  The memory held is one case's peak, which it held anyway.
    """

    def __init__(self) -> None:
        self._free: dict[tuple[tuple[int, ...], torch.device], list[torch.Tensor]] = {}
        self._lent: dict[int, torch.Tensor] = {}  # by id()

    def empty(self, shape: torch.Size | Sequence[int], device: torch.device) -> torch.Tensor:
        """An uninitialised float32 tensor of ``shape`` on ``device``, lent until the next :meth:`release`."""
        free = self._free.get((tuple(shape), torch.device(device)))
        t = free.pop() if free else torch.empty(tuple(shape), dtype=torch.float32, device=device)
        self._lent[id(t)] = t
        return t

    def zeros(self, shape: torch.Size | Sequence[int], device: torch.device) -> torch.Tensor:
        """:meth:`empty`, filled with zeros."""
        return self.empty(shape, device).zero_()

    def give_back(self, tensors: Iterable[torch.Tensor]) -> None:
        """Take back those of ``tensors`` this scratch lent (others are ignored): the caller reads none of them again."""
        for t in tensors:
            if self._lent.pop(id(t), None) is not None:
                self._free.setdefault((tuple(t.shape), t.device), []).append(t)

    def release(self) -> None:
        """Take back every buffer lent since the last release (none of them may be read again)."""
        self.give_back(list(self._lent.values()))


def _f32_buffer(like: torch.Tensor, scratch: Scratch | None) -> torch.Tensor:
    """An uninitialised float32 tensor shaped like ``like``: lent by ``scratch``, or new."""
    if scratch is None:
        return torch.empty(like.shape, dtype=torch.float32, device=like.device)
    return scratch.empty(like.shape, like.device)


def worker_mean(tensors: Sequence[torch.Tensor], scratch: Scratch | None = None) -> torch.Tensor:
    """The element-wise mean of the workers' tensors, in float32 (an all-gather's aggregate, the true mean).

    Summed in place into one new buffer, in worker order (the same roundings as ``sum(...) / W``,
    without a temporary per worker).  Where that float32 sum overflows although every input is
    finite (gradients near float32's max), the mean is taken again in float64 and rounded once: the
    mean of finite values is finite, and must not turn into ±inf on the way.  ``scratch`` lends the result's buffer."""
    out = _f32_buffer(tensors[0], scratch).copy_(tensors[0])
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

    def __init__(self, units: int, scratch: Scratch | None = None, one_step: bool = False) -> None:
        self.sums: list[torch.Tensor | None] = [None] * units
        self._sq: list[float] = [0.0] * units
        self._scratch = scratch  # lends the sums' buffers (the case's, reused by the next case)
        # a one-step stream: each unit's sum is its only term, so only its norm is taken (no buffer zeroed, written or
        # read back: three of a model-sized sum's five passes); a second add to a unit is refused
        self._one_step = one_step
        self._added = [False] * units

    def add(self, unit: int, a: torch.Tensor, b: torch.Tensor | None = None) -> None:
        """Add this step's ``a`` (minus ``b`` when given) of ``unit`` to its sum."""
        if self._one_step:
            if self._added[unit]:
                raise RuntimeError("a one-step running sum takes one term per unit")
            self._added[unit] = True
            self._sq[unit] = first_sum_sq64(a, b)  # what accumulate64 gives on a zeroed sum, the same bits
            return
        s = self.sums[unit]
        if s is None:
            s = self.sums[unit] = _f32_buffer(a, self._scratch).zero_()
        self._sq[unit] = accumulate64(s, a, b)

    def restart(self) -> None:
        """Start every sum again from zero (a new phase window): the buffers are cleared and kept."""
        for s in self.sums:
            if s is not None:
                s.zero_()
        self._sq = [0.0] * len(self._sq)
        self._added = [False] * len(self._added)

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

    def __init__(self, units: int, stateful: bool, windowed: bool, scratch: Scratch | None = None, one_step: bool = False) -> None:
        self.stateful, self.windowed = stateful, windowed
        self.bytes: list[list[int]] = [[] for _ in range(units)]
        self.fids: list[list[Fidelity]] = [[] for _ in range(units)]
        self.agg: list[list[Fidelity]] = [[] for _ in range(units)]
        self.agg_cosine: list[float | None] = []
        self.agg_drift: list[float | None] = []
        self.window_drift: list[float | None] = []
        self.drift: list[float | None] = []
        self.residual: list[float | None] = []
        # ``one_step``: a stream of one step, whose running sums are read for their norms alone (:class:`RunningSum`)
        self._err, self._mean = RunningSum(units, scratch, one_step), RunningSum(units, scratch, one_step)
        self._win_err, self._win_mean = RunningSum(units, scratch, one_step), RunningSum(units, scratch, one_step)
        self._ef, self._ref = RunningSum(units, scratch, one_step), RunningSum(units, scratch, one_step)

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
