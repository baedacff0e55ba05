"""The ``run`` and ``compare`` kind of results file: one :class:`RunCase` per (source, compressor) of
:mod:`gcbench.measure.runner` — size, fidelity, aggregate, stream, traffic, timing, per-unit rows, phase windows —
and the numbers tables and comparisons name (:data:`RUN_METRICS`, :data:`RUN_SAMPLES`).

The header and the parts every kind shares are :mod:`gcbench.results.record`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from gcbench.results.fields import Bool, Count, Int, Num, Numbers, Series, Str
from gcbench.results.record import CaseBase, Model, RunRecord, Source, Timing, XCopy, finite


class Stat(Model):
    """A metric over units: mean with its interval, worst unit, count, whole-model value, standard error."""

    mean: Num | None = None
    lo: Num | None = None
    hi: Num | None = None
    worst: Num | None = None
    n: Num | None = None
    model: Num | None = None
    se_mean: Num | None = None


class Fidelity(Model):
    repeats: Int | None = None
    reference: Str | None = None
    q_samples: Series | None = None
    q: Stat | None = None
    bias2: Stat | None = None
    variance: Stat | None = None
    omega_hat: Stat | None = None
    delta: Stat | None = None
    alpha: Stat | None = None
    cosine: Stat | None = None
    q_scaled: Stat | None = None  # scale-free error 1 − cos²: the relative error after the best scalar rescaling


class Aggregate(Model):
    q: Stat | None = None
    cosine: Stat | None = None
    per_step_q: Series | None = None
    per_step_cosine: Series | None = None
    sum_drift: Series | None = None
    window_drift: Series | None = None


class Stream(Model):
    """The stream view of a case: what its aggregate delivers of the dense update over the steps.

    U_t is the update the case applies at step t (the suite optimizer's update of the aggregate, or
    the aggregate itself for a compressor that applies momentum of its own), D_t the dense update
    (the suite optimizer on the true worker mean: the suite's one common reference).
    """

    reference: Str | None = None  # "dense SGD update", "dense momentum-SGD update (m=0.9)"
    momentum: Num | None = None  # the suite optimizer's momentum (0: plain SGD)
    own_momentum: Bool | None = None  # the compressor applies momentum itself: U_t is its aggregate
    steps: Count | None = None
    min_steps: Count | None = None  # the fewest steps that rank stateful compressors
    enough: Bool | None = None  # steps >= min_steps, or the case keeps no state across steps
    delivered: Num | None = None  # 1 − ‖Σ_t (U_t − D_t)‖ / ‖Σ_t D_t‖ after the last step
    per_step_delivered: Series | None = None  # the same after each step
    per_step_error: Series | None = None  # ‖U_t − D_t‖² / ‖D_t‖² (whole model)
    per_step_error_scaled: Series | None = None  # 1 − cos²(U_t, D_t): the error after the best rescaling
    worker_delivered: Series | None = None  # each worker's own update stream against its own dense update
    worker_ci: Stat | None = None  # mean, lo, hi (95 %, Student t over workers), n of worker_delivered
    # the aggregate's delivered fraction with each worker left out in turn (contributions observable, 2+ workers)
    delivered_jackknife: Series | None = None
    # the headline's own 95% interval: delivered ± t(n−1) × the jackknife standard error over the n workers (se_mean)
    delivered_ci: Stat | None = None
    loop: Str | None = None  # "open": the model stepped with the dense mean; "closed": with this case's aggregate (absent: open)


class TrafficPhase(Model):
    """Bytes of one traffic phase (a collective, or a protocol's message kind) per worker."""

    sent_mean: Num | None = None
    received_mean: Num | None = None
    sent_max: Num | None = None
    per_step_sent: Numbers | None = None
    per_step_sent_body: Numbers | None = None


class EfDrift(Model):
    sum_drift: Series | None = None
    residual_ratio: Series | None = None


class ProcessSpreadInfo(Model):
    """The spread between processes a case's timing is judged with (:mod:`gcbench.results.process_spread`): the sd of
    log ×copy, its degrees of freedom and timings, and the bench file that measured it (None: the built-in figure)."""

    log_sd: Num | None = None
    df: Count | None = None
    timings: Count | None = None
    processes: Count | None = None
    file: Str | None = None


class CaseTiming(Model):
    """A run case's kernel timing.  Files before interleaved timing have only the three timings and copy fractions."""

    numel: Int | None = None
    device: Str | None = None
    threads: Int | None = None
    method: Str | None = None  # "interleaved": copy and kernels timed round by round
    rounds: Count | None = None  # timed rounds after calibration
    stopped: Str | None = None  # why calibration stopped: stable, budget, max rounds
    load_per_core: Num | None = None  # highest 1-minute load average per core seen while timing
    foreign_cpu: Num | None = None  # other processes' share of the machine's CPU while timing (the flag's load measure)
    traffic_bound_x_copy: Num | None = None  # the card's traffic_bytes / 8: the least ×copy compress can honestly take
    policy: dict[str, Num] | None = None  # the thresholds the flags used (TimingPolicy)
    compress: Timing | None = None
    decompress: Timing | None = None
    copy_: Timing | None = Field(default=None, alias="copy")
    compress_x_copy: XCopy | None = None
    decompress_x_copy: XCopy | None = None
    # "round": ×copy against the copy of the same round; "pooled": the source's cases were held against the median
    # copy of every case of this source in the run (gcbench.measure.copy_baseline.pool_copy_baseline), the per-round
    # blocks kept beside; <kernel>_baseline says which copy each kernel's ×copy is against
    baseline: Str | None = None
    pooled_copy_s: Num | None = None
    pooled_copy_rounds: Count | None = None
    copy_off_pooled: Num | None = None  # this case's own copy median / the pooled one - 1
    # a cache-resident source (no pooling): its cases' copy medians, largest / smallest, and the two; past
    # gcbench.measure.copy_baseline.COPY_SPREAD_LIMIT the yardstick moved and ×copy will not repeat run to run
    copy_spread: Num | None = None
    copy_range_s: list[Num] | None = None
    compress_x_round_copy: XCopy | None = None
    decompress_x_round_copy: XCopy | None = None
    # per kernel, the copy its ×copy is against: "round" (memory-bound: it moves with its own rounds' copy) or
    # "pooled" (compute-bound); absent in files written before 2026-11-25 (every kernel then "pooled")
    compress_baseline: Str | None = None
    decompress_baseline: Str | None = None
    copy_fraction_compress: Num | None = None
    copy_fraction_decompress: Num | None = None
    # how far this machine's ×copy moves between processes, which compare's time interval adds; absent in files
    # before 2026-12-02 (the built-in figure then)
    process_spread: ProcessSpreadInfo | None = None

    def x_copy(self, kernel: str) -> XCopy | None:
        """``compress`` or ``decompress`` ×copy; for an older file, its median from the copy fraction (no spread, no flags)."""
        block = getattr(self, f"{kernel}_x_copy")
        if block is not None:
            return block
        f = getattr(self, f"copy_fraction_{kernel}")
        return XCopy(median=1.0 / f) if isinstance(f, int | float) and f > 0 else None


class Layer(Model):
    """One unit (layer or bucket) of a run case."""

    name: Str | None = None
    numel: Int | None = None
    wire_bytes: Num | None = None
    ratio: Num | None = None
    q: Num | None = None
    bias2: Num | None = None
    variance: Num | None = None
    cosine: Num | None = None


class PhaseWindow(Model):
    """Steps ``first..last`` of one phase and the bytes each worker sent and received per step in it."""

    name: Str
    first: Count
    last: Count
    sent_by_worker: Numbers
    received_by_worker: Numbers | None = None

    @model_validator(mode="after")
    def _range(self) -> PhaseWindow:
        if self.first > self.last:  # readers average over the window: it must not be empty
            raise PydanticCustomError("window", "first step {first} after last step {last}", {"first": self.first, "last": self.last})
        return self



class PlanRule(Model):
    """One rule of a plan case (``gcbench.plan``): the tensors it took, their elements and the bytes they sent per step."""

    rule: Count
    label: Str
    compressor: Str
    tensors: Count
    elements: Int  # a model's elements: past the bound of counts a reader builds lists of
    bytes: Num | None = None
    bytes_share: Num | None = None


def _last(series: Sequence[Any] | None) -> Any:
    return series[-1] if series else None


class RunCase(CaseBase):
    """One (source, compressor) case of ``gcbench run`` / ``gcbench compare``."""

    source: Source | None = None
    granularity: Str | None = None
    units: Count | None = None
    fidelity: Fidelity | None = None
    aggregate: Aggregate | None = None
    traffic: dict[str, TrafficPhase] | None = None
    ef_drift: EfDrift | None = None
    stream: Stream | None = None
    timing: CaseTiming | None = None
    layers: list[Layer] | None = None
    windows: list[PhaseWindow] | None = None
    step_phases: list[Str | None] | None = None
    phases: dict[str, dict[str, Any]] | None = None
    plan: dict[str, Any] | None = None  # a plan case's plan (gcbench.plan.Plan.describe)
    assignment: dict[str, Count] | None = None  # a plan case's rule (1-based) of each tensor
    plan_rules: list[PlanRule] | None = None  # a plan case's per-rule table

    @property
    def beats_bound(self) -> bool:
        """Whether its compress timing beat the compressor's traffic bound (:attr:`XCopy.beats_bound`)."""
        x = self.timing.x_copy("compress") if self.timing else None
        return x is not None and x.beats_bound

    @property
    def source_label(self) -> str:
        """The source's label (its name for a failed case, which records only that)."""
        s = self.source
        return str(s.label or s.name) if s and (s.label or s.name) else "?"

    @property
    def source_name(self) -> str:
        s = self.source
        return str(s.name or s.label) if s and (s.name or s.label) else "?"

    def metric(self, name: str) -> float | None:
        """A metric of :data:`gcbench.results.metrics.METRICS` (or a report column) by name; None when absent or not finite."""
        get = RUN_METRICS.get(name)
        return None if get is None else finite(get(self))

    def samples(self, name: str) -> list[float]:
        """The raw samples behind a metric (timing samples, per-tensor q), non-finite ones left out."""
        get = RUN_SAMPLES.get(name)
        vals = get(self) if get is not None else None
        return [float(v) for v in vals or [] if finite(v) is not None]

    def standard_error(self, name: str) -> float | None:
        """The standard error of a metric where the record has one (bias²'s jackknife)."""
        if name == "bias2" and self.fidelity and self.fidelity.bias2:
            return finite(self.fidelity.bias2.se_mean)
        return None


def _mean_finite(series: Sequence[Any] | None) -> float | None:
    vals = [f for f in (finite(v) for v in series or []) if f is not None]
    return sum(vals) / len(vals) if vals else None



def _stat(part: Callable[[RunCase], Stat | None], key: str) -> Callable[[RunCase], Any]:
    return lambda c: getattr(part(c), key) if part(c) is not None else None


def _fid(name: str) -> Callable[[RunCase], Stat | None]:
    return lambda c: getattr(c.fidelity, name) if c.fidelity else None


def _size(name: str) -> Callable[[RunCase], Any]:
    return lambda c: getattr(c.size, name) if c.size else None


def _timing(section: str, key: str) -> Callable[[RunCase], Any]:
    def get(c: RunCase) -> Any:
        t = getattr(c.timing, section) if c.timing else None
        return getattr(t, key) if t is not None else None

    return get


def _x_copy(kernel: str, key: str) -> Callable[[RunCase], Any]:
    def get(c: RunCase) -> Any:
        x = c.timing.x_copy(kernel) if c.timing else None
        return getattr(x, key) if x is not None else None

    return get


#: every number of a run case that tables and comparisons name: one place for where each lives
RUN_METRICS: dict[str, Callable[[RunCase], Any]] = {
    "ratio": _size("ratio"),
    "traffic_ratio": _size("traffic_ratio"),
    "bits_per_element": _size("bits_per_element"),
    "wire_bytes": _size("wire_bytes"),
    "q": _stat(_fid("q"), "model"),
    "bias2": _stat(_fid("bias2"), "model"),
    "variance": _stat(_fid("variance"), "model"),
    "omega_hat": _stat(_fid("omega_hat"), "model"),
    "delta": _stat(_fid("delta"), "model"),
    "cosine": _stat(_fid("cosine"), "model"),
    "q_scaled": _stat(_fid("q_scaled"), "model"),
    "delivered": lambda c: c.stream.delivered if c.stream else None,
    "delivered_workers": lambda c: c.stream.worker_ci.mean if c.stream and c.stream.worker_ci else None,  # a report column
    "stream_error": lambda c: _mean_finite(c.stream.per_step_error if c.stream else None),
    "stream_error_scaled": lambda c: _mean_finite(c.stream.per_step_error_scaled if c.stream else None),
    "aggregate_q": _stat(lambda c: c.aggregate.q if c.aggregate else None, "model"),
    "aggregate_drift": lambda c: _last(c.aggregate.sum_drift if c.aggregate else None),
    "ef_drift": lambda c: _last(c.ef_drift.sum_drift if c.ef_drift else None),
    "compress_s": _timing("compress", "median_s"),
    "decompress_s": _timing("decompress", "median_s"),
    "compress_gbps": _timing("compress", "gbps"),
    "decompress_gbps": _timing("decompress", "gbps"),
    "copy_gbps": _timing("copy_", "gbps"),
    "comp_over_copy": _x_copy("compress", "median"),
    "decomp_over_copy": _x_copy("decompress", "median"),
}
RUN_SAMPLES: dict[str, Callable[[RunCase], Any]] = {
    "q": lambda c: c.fidelity.q_samples if c.fidelity else None,
    "delivered": lambda c: c.stream.worker_delivered if c.stream else None,
    "compress_s": _timing("compress", "samples_s"),
    "decompress_s": _timing("decompress", "samples_s"),
    "comp_over_copy": _x_copy("compress", "samples"),
    "decomp_over_copy": _x_copy("decompress", "samples"),
}



class MeasureRecord(RunRecord):
    kind: Literal["run", "compare"] = "run"
    cases: list[RunCase]
