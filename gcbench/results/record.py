"""The results record: typed (pydantic v2) models of a results file, its schema version and upgrades.

A results file (``reports/runs/*.json``) is one :class:`RunRecord`: a header (schema version,
kind, gcbench version, times, environment, git, suite, metrics catalogue, status and its writer) and its cases.
What a case holds depends on the file's ``kind``, so the record is a union discriminated by it:

* ``run`` and ``compare`` (:class:`MeasureRecord`): :class:`RunCase`, one per (source,
  compressor) of :mod:`gcbench.measure.runner` — size, fidelity, aggregate, traffic, timing,
  per-unit rows, phase windows;
* ``train`` (:class:`TrainRecord`): :class:`TrainCase`, one per compressor of
  :mod:`gcbench.train.driver` — the :class:`Training` results besides the size;
* ``bench`` (:class:`BenchRecord`): :class:`BenchCase`, one per (compressor, size) of
  :mod:`gcbench.measure.bench`;
* ``converge`` (:class:`ConvergeRecord`): :class:`ConvergeCase`, one per compressor (and the
  uncompressed reference) of ``gcbench converge`` — settings, every seed's closed-loop curve and
  outcome, and the summary across seeds with 95% intervals.

Choices:

* **Field names are the JSON names**: the layout of the files is unchanged, so every file written
  since schema 1 loads, and a record dumps back to the same JSON (:meth:`RunRecord.to_json_dict`
  writes the fields a file or a writer set, in the models' order, unknown fields kept).
* **Tolerant where files differ, strict where readers rely on a type.**  Every field but a few
  identifying ones is optional (older files lack some, and failed cases hold only their label,
  status and error), unknown fields are kept (a newer gcbench of the same schema may add some),
  numbers may be null (NaN and infinity are stored as null).  But a field that is present must
  have the type its readers use (:data:`Num`, :data:`Int` ... of :mod:`gcbench.results.fields`).
* **Versioned**: :data:`SCHEMA_VERSION`, and :data:`UPGRADES` to bring an older file up to it.

This module declares the schema; reading a file into it (upgrade, validation, one-line problems:
``parse_record``, ``as_record``, ``as_case`` ...) is :mod:`gcbench.results.parse`, whose functions
are importable from here too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from gcbench.core import signals
from gcbench.results.fields import (  # noqa: F401  (COUNT_MAX, FLOAT_INT_MAX, INT_MAX, show: re-exported, defined here before)
    COUNT_MAX,
    FLOAT_INT_MAX,
    INT_MAX,
    Bool,
    Count,
    FlagValue,
    Int,
    Num,
    Numbers,
    Series,
    Str,
    show,
)

SCHEMA_VERSION = 1

KINDS = ("run", "compare", "train", "bench", "converge")

#: ``UPGRADES[v]`` turns a schema-``v`` dict into a schema-``v + 1`` one (:func:`gcbench.results.parse.upgrade` applies
#: them).  Schema 1 is the first and still the newest: a change of the layout bumps SCHEMA_VERSION and adds its step
#: here, so every older file still loads
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}

class Model(BaseModel):
    """Every part of the record: unknown fields kept, assignments validated, no type coercion."""

    model_config = ConfigDict(extra="allow", strict=True, validate_assignment=True, populate_by_name=True)

    def to_json_dict(self) -> dict[str, Any]:
        """The fields that were set (by the file or the writer), as JSON-ready Python values.

        Stop signals are held while pydantic serialises (:func:`gcbench.core.signals.deferred`): it
        calls Python functions for some fields, and a Ctrl-C or SIGTERM raised inside one would come
        out as a ``PydanticSerializationError`` instead of the interrupt it is.
        """
        with signals.deferred():
            return self.model_dump(mode="python", exclude_unset=True, by_alias=True)

    def extra(self, name: str, default: Any = None) -> Any:
        """A field of the file that no model declares (a newer gcbench's, or a source's own description)."""
        return (self.model_extra or {}).get(name, default)


# ----------------------------------------------------------------------------- header


class Environment(Model):
    """Machine and software facts that decide whether two runs are comparable (:func:`gcbench.results.store.environment`)."""

    hostname: Str | None = None
    cpu_model: Str | None = None
    cpu_count: Int | None = None
    torch_threads: Int | None = None
    platform: Str | None = None
    python: Str | None = None
    torch: Str | None = None
    numpy: Str | None = None
    cuda_device: Str | None = None
    cuda_version: Str | None = None
    device: Str | None = None
    kernels: Str | None = None  # "numba" or "torch" (GCBENCH_KERNELS=torch, or numba missing); older files: none
    numba_error: Str | None = None  # why numba failed and the kernels ran the slow path; absent when numba works

    def machine_key(self) -> str:
        """What must match for timings to be comparable: CPU model, cores, threads, GPU, kernel path."""
        key = f"{self.cpu_model}|{self.cpu_count}|{self.torch_threads}|{self.cuda_device}"
        return key if self.kernels in (None, "numba") else f"{key}|{self.kernels}"


class Writer(Model):
    """The process writing the file (:func:`gcbench.core.liveness.identity`): a ``running`` file whose writer is gone was cut off."""

    pid: Int | None = None
    host: Str | None = None
    process_start: Num | None = None  # seconds since the epoch; tells a reused pid apart (None off Linux)


class Git(Model):
    commit: Str | None = None
    dirty: Bool | None = None


class SuiteInfo(Model):
    """The resolved suite of a run (``Suite.to_dict()``), a train run's settings, or a bench run's sizes."""

    name: Str | None = None
    description: Str | None = None
    sizes: list[Any] | None = None  # bench: element counts
    repeats: Int | None = None  # bench
    threads: Int | None = None  # bench
    config: dict[str, Any] | None = None  # train: TrainConfig


class MetricInfo(Model):
    """One entry of the metrics catalogue (:data:`gcbench.results.metrics.METRICS`)."""

    name: Str | None = None
    unit: Str | None = None
    higher_is_better: Bool | None = None
    description: Str | None = None


# ----------------------------------------------------------------------------- case parts


class Flags(Model):
    """The compressor's flags at its resolved parameters (``Flags.to_dict()``)."""

    biased: Bool | None = None
    stateful: Bool | None = None
    error_feedback: Str | None = None
    deterministic: Bool | None = None
    reconstructed: Bool | None = None
    exchange: Str | None = None

    __pydantic_extra__: dict[str, FlagValue]  # other flags: scalars too


class Source(Model):
    """The gradient source a case ran on (``Source.describe()``; a failed case has its name and label only)."""

    name: Str | None = None
    label: Str | None = None
    kind: Str | None = None
    workers: Int | None = None
    steps: Int | None = None
    model: Str | None = None
    loop: Str | None = None  # live sources: "closed" when each case's model stepped with its own aggregate (absent: open)
    compute_s: Num | None = None  # live sources: median seconds of one worker's forward + backward, on the machine that ran

    def identity(self) -> dict[str, Any]:
        """What identifies the gradients: every fact but the label (presentation), a trace's folder (it may move)
        and the compute time (a measurement of the machine, not of the gradients)."""
        return {k: v for k, v in self.to_json_dict().items() if k not in ("label", "path", "compute_s")}


class Size(Model):
    numel: Num | None = None
    dense_bytes: Num | None = None
    wire_bytes: Num | None = None
    ratio: Num | None = None
    bits_per_element: Num | None = None
    traffic_sent_bytes: Num | None = None
    traffic_ratio: Num | None = None


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


class Timing(Model):
    """Timed calls of one kind: median, spread, raw samples."""

    median_s: Num | None = None
    iqr_s: Num | None = None
    samples_s: Series | None = None
    gbps: Num | None = None
    elements_per_s: Num | None = None
    warmup: Int | None = None


# the flags of a kernel timing (:func:`gcbench.measure.timing.timing_flags` sets them; tables and comparisons read them)
UNSTABLE = "unstable"
TOO_SHORT = "too short"
BEATS_BOUND = "beats traffic bound"
#: fewer timed rounds than the policy's least: a whole run's (or sweep's) time budget stopped them first
CUT_SHORT = "cut short"


class XCopy(Model):
    """A kernel's time as a multiple of the copy timed in the same round: per-round samples, their spread, its flags.

    ``flags`` are :func:`gcbench.measure.timing.timing_flags`'s (``unstable``, ``too short``,
    ``beats traffic bound``); a flagged number is not a speed to act on.
    """

    median: Num | None = None
    ci_lo: Num | None = None  # the median's 95% CI (distribution-free): how precisely the rounds fix it
    ci_hi: Num | None = None
    iqr: Num | None = None
    rel_iqr: Num | None = None
    samples: Series | None = None
    flags: list[Str] | None = None
    reasons: dict[str, Str] | None = None  # per flag, what triggered it (measured value, threshold); files since 2026-11-27
    rounds: Count | None = None  # bench: the timed rounds calibration took for this kernel

    @property
    def beats_bound(self) -> bool:
        """Faster than the memory traffic the compressor must do: what was timed is not that work, so not a speed."""
        return BEATS_BOUND in (self.flags or [])


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
    # copy of every case of this source in the run (gcbench.measure.casemath.pool_copy_baseline), the per-round
    # blocks kept beside; <kernel>_baseline says which copy each kernel's ×copy is against
    baseline: Str | None = None
    pooled_copy_s: Num | None = None
    pooled_copy_rounds: Count | None = None
    copy_off_pooled: Num | None = None  # this case's own copy median / the pooled one - 1
    # a cache-resident source (no pooling): its cases' copy medians, largest / smallest, and the two; past
    # gcbench.measure.casemath.COPY_SPREAD_LIMIT the yardstick moved and ×copy will not repeat run to run
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


# ----------------------------------------------------------------------------- cases


class CaseBase(Model):
    """What every run and train case has: identity, status and the size of what it sent."""

    label: Str
    status: Str
    compressor: Str | None = None
    version: Int | None = None
    params: dict[str, Any] | None = None
    flags: Flags | None = None
    error: Any = None
    workers: Count | None = None
    steps: Count | None = None
    size: Size | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def reconstructed(self) -> bool:
        return bool(self.flags and self.flags.reconstructed)

    @property
    def error_text(self) -> str:
        return "" if self.error is None else str(self.error)


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
        return None if get is None else _finite(get(self))

    def samples(self, name: str) -> list[float]:
        """The raw samples behind a metric (timing samples, per-tensor q), non-finite ones left out."""
        get = RUN_SAMPLES.get(name)
        vals = get(self) if get is not None else None
        return [float(v) for v in vals or [] if _finite(v) is not None]

    def standard_error(self, name: str) -> float | None:
        """The standard error of a metric where the record has one (bias²'s jackknife)."""
        if name == "bias2" and self.fidelity and self.fidelity.bias2:
            return _finite(self.fidelity.bias2.se_mean)
        return None


def _mean_finite(series: Sequence[Any] | None) -> float | None:
    vals = [f for f in (_finite(v) for v in series or []) if f is not None]
    return sum(vals) / len(vals) if vals else None


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if f == f and f not in (float("inf"), float("-inf")) else None


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


class TaskInfo(Model):
    name: Str | None = None
    dataset: Str | None = None
    model: Str | None = None


class CurvePoint(Model):
    """The held-out numbers at the end of one epoch."""

    epoch: Int | None = None
    step: Int | None = None
    train_time_s: Num | None = None
    train_loss: Num | None = None
    test_loss: Num | None = None
    test_accuracy: Num | None = None


class StepTime(Model):
    total_s: Num | None = None
    compute_s: Num | None = None
    compress_s: Num | None = None
    communicate_s: Num | None = None
    decompress_s: Num | None = None


class TrainBytes(Model):
    payload_bytes_per_step: Num | None = None
    payload_bytes_per_worker: Num | None = None
    payload_bytes_per_worker_max: Num | None = None
    sent_bytes_per_worker: Num | None = None
    dense_bytes_per_step: Num | None = None


class HookInfo(Model):
    """The DDP hook's description of itself (compressor, protocol, granularity, world size...)."""

    protocol: Str | None = None
    #: files written before every protocol ran on the real transport: why the hook all-gathered instead (None now)
    protocol_note: Str | None = None


class Training(Model):
    task: TaskInfo | None = None
    metric: Str | None = None
    workers: Int | None = None
    epochs: Int | None = None
    steps: Int | None = None
    batch_size_per_worker: Int | None = None
    lr: Num | None = None
    threads_per_worker: Int | None = None
    target_accuracy: Num | None = None
    reference: Str | None = None
    curve: list[CurvePoint] | None = None
    final_accuracy: Num | None = None
    final_loss: Num | None = None
    best_accuracy: Num | None = None
    accuracy_gap: Num | None = None
    time_to_target_s: Num | None = None
    epochs_to_target: Num | None = None
    train_time_s: Num | None = None
    step_time: StepTime | None = None
    step_time_per_rank: list[StepTime] | None = None
    bytes: TrainBytes | None = None
    replicas_consistent: Bool | None = None
    diverged: Bool | None = None
    hook: HookInfo | None = None
    decoded_payloads_per_step: Num | None = None
    step_samples_rank0: dict[str, Series] | None = None
    collectives: list[Str] | None = None
    buckets: Int | None = None

    def settings(self) -> dict[str, Any]:
        """The training settings that decide a train case's numbers (its curve and results are not settings)."""
        return {k: getattr(self, k) for k in ("task", "metric", "workers", "epochs", "steps", "batch_size_per_worker", "lr")}


class TrainCase(CaseBase):
    """One compressor of ``gcbench train``."""

    training: Training | None = None
    source: Source | None = None  # train files have none; declared so readers of any case may ask

    @property
    def source_label(self) -> str:
        return str(self.training.task.name) if self.training and self.training.task and self.training.task.name else "?"

    source_name = source_label

    def metric(self, name: str) -> float | None:
        get = TRAIN_METRICS.get(name)
        return None if get is None else _finite(get(self))

    def samples(self, name: str) -> list[float]:
        return []

    def standard_error(self, name: str) -> float | None:
        return None


def _tr(name: str) -> Callable[[TrainCase], Any]:
    return lambda c: getattr(c.training, name) if c.training else None


def _step(name: str) -> Callable[[TrainCase], Any]:
    return lambda c: getattr(c.training.step_time, name) if c.training and c.training.step_time else None


TRAIN_METRICS: dict[str, Callable[[TrainCase], Any]] = {
    "ratio": lambda c: c.size.ratio if c.size else None,
    "bits_per_element": lambda c: c.size.bits_per_element if c.size else None,
    **{k: _tr(k) for k in ("final_accuracy", "final_loss", "best_accuracy", "accuracy_gap", "time_to_target_s",
                           "epochs_to_target", "train_time_s", "target_accuracy")},
    **{f"step_{k}": _step(k) for k in ("total_s", "compute_s", "compress_s", "communicate_s", "decompress_s")},
    "payload_bytes_per_worker": lambda c: c.training.bytes.payload_bytes_per_worker if c.training and c.training.bytes else None,
}


class TopkSpeedup(Model):
    speedup: Num


class BenchCase(Model):
    """One (compressor, element count) of ``gcbench bench``; a failed one holds its compressor, size and error."""

    compressor: Str
    label: Str | None = None
    params: dict[str, Any] | None = None
    version: Int | None = None
    numel: Int | None = None
    shape: list[Int] | None = None
    model: Str | None = None  # ``bench --model``: a whole step of this model's tensors (numel: its parameter count)
    tensors: Int | None = None  # ``bench --model``: how many tensors one step compresses
    threads: Int | None = None
    device: Str | None = None
    copy_: Timing | None = Field(default=None, alias="copy")
    compress: Timing | None = None
    decompress: Timing | None = None
    error: Any = None
    compress_x_copy: Num | None = None
    decompress_x_copy: Num | None = None
    gbps_compress: Num | None = None
    gbps_decompress: Num | None = None
    ratio: Num | None = None
    peak_extra_bytes: Num | None = None
    input_bytes: Num | None = None
    speedup_vs_reference: Num | None = None
    baseline_change: Num | None = None
    reference: Any = None
    vs_torch_topk: dict[str, TopkSpeedup] | None = None
    x_copy: dict[str, XCopy] | None = None  # per kernel: per-round ×copy, spread and flags (files before it: none)
    load_per_core: Num | None = None  # highest 1-minute load average per core seen while timing
    foreign_cpu: Num | None = None  # other processes' share of the machine's CPU while timing (the flag's load measure)
    traffic_bound: Num | None = None  # the compressor's declared traffic ÷ a copy's 8 bytes: the least ×copy it can take
    x_bound: Num | None = None  # median compress ×copy ÷ traffic_bound (1: at the memory-traffic bound; files before it: none)

    @property
    def ok(self) -> bool:
        """Whether the record measured something (a failed one carries ``error``)."""
        return not self.error

    @property
    def name(self) -> str:
        """The row name: the label (the compressor, or ``name:key=value`` when the benchmark set parameters)."""
        return str(self.label or self.compressor)

    @property
    def error_text(self) -> str:
        return "" if self.error is None else str(self.error)

    def metric(self, name: str) -> float | None:
        """A number of the record by field name (``compress_x_copy``, ``ratio`` ...), or ``peak_over_input``."""
        if name == "peak_over_input":
            peak, size = _finite(self.peak_extra_bytes), _finite(self.input_bytes)
            return peak / size if peak is not None and size else None
        if name == "compress_ms":
            return _finite(self.compress.median_s) if self.compress else None
        return _finite(getattr(self, name, None)) if name in type(self).model_fields else None

    def copy_normalised_samples(self, section: str) -> list[float]:
        """``section``'s timing samples divided by the median copy time of the same process ([] without both)."""
        copy_med = _finite(self.copy_.median_s) if self.copy_ else None
        timing = getattr(self, section, None)
        if copy_med is None or copy_med <= 0 or not isinstance(timing, Timing):
            return []
        return [float(s) / copy_med for s in timing.samples_s or [] if _finite(s) is not None]


# ----------------------------------------------------------------------------- convergence (gcbench converge)

# The schema of a closed-loop convergence results file (``kind = "converge"``, ``gcbench converge``).
#
# A convergence run trains one problem (a *task*: a zoo, Hugging Face or user model with its loss,
# or one of the ``train`` tasks) with N simulated workers, once uncompressed (the *reference*) and
# once per compressor, each over several seeds.  Every step's update is made from the compressed
# aggregate (the compressor's own protocol), so a compressor's errors change the trajectory it is
# measured on.  One :class:`ConvergeCase` per compressor holds:
#
# * ``convergence.settings`` (:class:`ConvergeSettings`): what decides the numbers — task, metric
#   and its direction, workers, steps, batch, optimizer, learning rate, evaluation interval, seeds,
#   the target rule.  Every case of one file has the same settings (the reference's are the file's);
#   ``advise --convergence`` refuses a file whose ``task`` is not the model it is asked about.
# * ``convergence.seeds`` (:class:`SeedRun`): one per seed — its outcome (``ok``, ``diverged``,
#   ``error``), its curve (:class:`ConvergePoint` at every evaluation), the final metric, and the
#   steps it took to reach the target (``None`` when it did not reach it within the budget:
#   :attr:`SeedRun.reached` tells the two apart from a missing number).
# * ``convergence.summary`` (:class:`ConvergeSummary`): across seeds — the final metric's mean and
#   95% CI, the final gap to the reference (reference minus compressor, paired by seed where both
#   finished) with its 95% CI, the steps to target over the seeds that reached it with a CI, how
#   many seeds reached it, how many diverged, and the mean curve with its band.
#
# A :class:`Interval` is ``mean`` with ``low``/``high`` (a 95% Student-t interval over seeds; equal
# to the mean with one seed) and ``n`` the number of values it is over.
#
# The metric is always "higher is better" on the file (accuracy; a loss-only task records the
# negated loss as ``metric`` and says so in ``settings.metric``/``settings.metric_direction``), so
# readers compare one way.

#: the outcomes of one seed's run
SEED_STATUSES = ("ok", "diverged", "error")


class Interval(Model):
    """A mean over seeds with its 95% confidence interval (Student t); ``n`` values."""

    mean: Num | None = None
    low: Num | None = None
    high: Num | None = None
    n: Count | None = None


class ConvergePoint(Model):
    """The numbers at one evaluation of one seed's run."""

    step: Int
    train_loss: Num | None = None
    eval_loss: Num | None = None
    metric: Num | None = None
    #: the simulated wall time so far is not stored: it depends on the cluster (advise computes it)


class SeedRun(Model):
    """One seed of one compressor: outcome, curve, final metric, steps to the target."""

    seed: Int
    status: Str  # one of SEED_STATUSES
    error: Str | None = None
    diverged_at_step: Int | None = None
    diverged_reason: Str | None = None  # "non-finite loss", "loss above 10x its start" ...
    steps_run: Int | None = None
    curve: list[ConvergePoint] | None = None
    final_metric: Num | None = None
    final_loss: Num | None = None
    reached: Bool | None = None  # whether the metric reached the target within the budget
    steps_to_target: Int | None = None  # the first evaluated step at or above the target; None when not reached
    wall_s: Num | None = None  # this machine's time for the seed (simulation cost, not a cluster prediction)


class ConvergeSettings(Model):
    """What decides a convergence run's numbers (the same for every case of a file)."""

    task: Str  # "zoo:smallcnn", "hf:gpt2", "digits", "module:pkg:factory" ...
    #: a ``path/file.py:factory`` task's file made absolute when it ran (``task`` keeps the user's spelling): how
    #: advise and report find the model again from another folder, and compare by the file, not by its spelling
    task_path: Str | None = None
    dataset: Str | None = None
    metric: Str  # "accuracy", "neg_loss" ...
    metric_direction: Literal["higher"] = "higher"
    workers: Count
    steps: Count
    batch_per_worker: Count | None = None
    optimizer: Str  # "sgd", "adam", "adamw"
    lr: Num
    momentum: Num | None = None
    weight_decay: Num | None = None
    eval_every: Count | None = None
    seeds: list[Int]
    #: how the target was set: "fraction" (of the reference's final metric) or "value"
    target_rule: Str | None = None
    target_fraction: Num | None = None
    target: Num | None = None  # the metric value to reach (resolved from the reference when a fraction)
    parameters: Int | None = None  # the model's parameter count
    divergence_factor: Num | None = None  # loss above this × its first value counts as divergence


class ConvergeSummary(Model):
    """Across seeds: final metric, gap to the reference, steps to target, divergence, mean curve with a band."""

    final_metric: Interval | None = None
    gap: Interval | None = None  # reference minus this compressor (positive: worse), paired by seed
    steps_to_target: Interval | None = None  # over the seeds that reached the target
    reached: Count | None = None
    diverged: Count | None = None
    failed: Count | None = None
    seeds: Count | None = None
    curve_steps: list[Int] | None = None
    curve_mean: Series | None = None
    curve_low: Series | None = None
    curve_high: Series | None = None
    loss_mean: Series | None = None


class ConvergeBytes(Model):
    """Bytes each worker sent per step (the protocol's traffic, as ``run`` counts it)."""

    sent_per_worker_per_step: Num | None = None
    payload_per_worker_per_step: Num | None = None
    dense_per_step: Num | None = None


class Convergence(Model):
    settings: ConvergeSettings
    reference: Bool | None = None  # this case is the uncompressed reference
    seeds: list[SeedRun] | None = None
    summary: ConvergeSummary | None = None
    bytes: ConvergeBytes | None = None


def _converge_problem(problem: str | None) -> None:
    """Refuse a convergence file whose numbers no run can produce (:mod:`gcbench.results.converge_checks`)."""
    if problem:
        raise PydanticCustomError("converge", "{problem}", {"problem": problem})


class ConvergeCase(CaseBase):
    """One compressor (or the reference) of ``gcbench converge``."""

    convergence: Convergence | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ConvergeCase:
        # on the case, not on Convergence: a bad number is then reported as cases[i]: convergence.summary...
        if self.convergence is not None:
            from gcbench.results.converge_checks import convergence_problem

            _converge_problem(convergence_problem(self.convergence))
        return self

    @property
    def source_label(self) -> str:
        return self.convergence.settings.task if self.convergence else "?"

    source_name = source_label

    def metric(self, name: str) -> float | None:
        s = self.convergence.summary if self.convergence else None
        if s is None:
            return None
        get: dict[str, Any] = {
            "final_metric": s.final_metric.mean if s.final_metric else None,
            "gap": s.gap.mean if s.gap else None,
            "steps_to_target": s.steps_to_target.mean if s.steps_to_target else None,
            "reached": s.reached,
            "diverged": s.diverged,
        }
        v = get.get(name)
        return None if v is None else float(v)

    def samples(self, name: str) -> list[float]:
        return []

    def standard_error(self, name: str) -> float | None:
        return None




# ----------------------------------------------------------------------------- the record


class RunRecord(Model):
    """The header every results file has; :class:`MeasureRecord`, :class:`TrainRecord` and :class:`BenchRecord` add typed cases."""

    schema_version: Int
    kind: Str = "run"
    run_id: Str | None = None
    gcbench_version: Str | None = None
    created_utc: Str | None = None
    finished_utc: Str | None = None
    status: Str | None = None
    writer: Writer | None = None  # older files have none: their "running" cannot be checked
    environment: Environment | None = None
    git: Git | None = None
    suite: SuiteInfo | None = None
    suite_hash: Str | None = None
    suite_path: Str | None = None
    metrics: list[MetricInfo] | None = None
    cases: list[Any]

    @property
    def env(self) -> Environment:
        """The environment (an empty one when the file has none)."""
        return self.environment or Environment()

    @property
    def finished(self) -> bool:
        """Whether the run ran to its end (not ``running``, ``interrupted`` or ``failed``; a bench file has no status)."""
        return self.status in FINISHED_STATUSES

    def to_json_dict(self) -> dict[str, Any]:
        out = super().to_json_dict()
        out["cases"] = [c.to_json_dict() if isinstance(c, Model) else c for c in self.cases]
        return out


#: what a ``running`` file shows once its writer is known to be gone (killed before it could record an end)
WRITER_GONE = "interrupted (writer gone)"

# the statuses of a run that ran to its end (a bench file, written once at its end by older gcbench, has none)
FINISHED_STATUSES = ("complete", "complete-with-errors", None)


class MeasureRecord(RunRecord):
    kind: Literal["run", "compare"] = "run"
    cases: list[RunCase]


class TrainRecord(RunRecord):
    kind: Literal["train"]
    cases: list[TrainCase]


class BenchRecord(RunRecord):
    kind: Literal["bench"]
    cases: list[BenchCase]


class ConvergeRecord(RunRecord):
    kind: Literal["converge"]
    cases: list[ConvergeCase]

    @model_validator(mode="after")
    def _gaps(self) -> ConvergeRecord:
        from gcbench.results.converge_checks import record_problem

        _converge_problem(record_problem(self.cases))
        return self


CASE_MODELS: dict[str, type[Model]] = {"run": RunCase, "compare": RunCase, "train": TrainCase, "bench": BenchCase,
                                       "converge": ConvergeCase}
Case = RunCase | TrainCase | BenchCase | ConvergeCase
