"""The results record's shared header: the models every kind of results file has, its schema version and upgrades.

A results file (``reports/runs/*.json``) is one record: a header (schema version, kind, gcbench
version, times, environment, git, suite, metrics catalogue, status and its writer: :class:`RunRecord`)
and its cases.  What a case holds depends on the file's ``kind``, so the record is a union
discriminated by it, one module per kind:

* ``run`` and ``compare`` (:class:`gcbench.results.run_record.MeasureRecord`):
  :class:`~gcbench.results.run_record.RunCase`, one per (source, compressor) of
  :mod:`gcbench.measure.runner` — size, fidelity, aggregate, traffic, timing, per-unit rows, phase windows;
* ``train`` (:class:`gcbench.results.train_record.TrainRecord`):
  :class:`~gcbench.results.train_record.TrainCase`, one per compressor of :mod:`gcbench.train.driver`
  — the training results besides the size;
* ``bench`` (:class:`gcbench.results.bench_record.BenchRecord`):
  :class:`~gcbench.results.bench_record.BenchCase`, one per (compressor, size) of :mod:`gcbench.measure.bench`;
* ``converge`` (:class:`gcbench.results.converge_record.ConvergeRecord`):
  :class:`~gcbench.results.converge_record.ConvergeCase`, one per compressor (and the uncompressed
  reference) of ``gcbench converge`` — settings, every seed's closed-loop curve and outcome, and the
  summary across seeds with 95% intervals.

This module holds what they share: the :class:`Model` base, the header's parts, a case's identity
(:class:`CaseBase`: label, status, flags, size; :class:`Source`), and the timing parts both run and
bench cases hold (:class:`Timing`, :class:`XCopy` and their flags).

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

Reading a file into its kind's record (upgrade, dispatch by kind, validation, one-line problems:
``parse_record``, ``as_record``, ``as_case`` ...) is :mod:`gcbench.results.parse`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from gcbench.core import signals
from gcbench.results.fields import Bool, Count, FlagValue, Int, Num, Series, Str

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
    device: Str | None = None  # where the run computed: cpu, cuda, cuda:N
    device_name: Str | None = None  # the GPU's name (torch.cuda.get_device_name) or the CPU model; older files: none
    backend: Str | None = None  # torch.distributed backend of a run with processes (gloo, nccl); None: one process
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
    #: bench --processes N: each process's median, the values a comparison tests (the median above is theirs)
    process_medians: Series | None = None

    @property
    def beats_bound(self) -> bool:
        """Faster than the memory traffic the compressor must do: what was timed is not that work, so not a speed."""
        return BEATS_BOUND in (self.flags or [])


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


def finite(v: Any) -> float | None:
    """``v`` as a float when it is a finite int or float (not a bool), else None: how every case reads a number."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if f == f and f not in (float("inf"), float("-inf")) else None


# ----------------------------------------------------------------------------- the record


class RunRecord(Model):
    """The header every results file has; each kind's record (``MeasureRecord``, ``TrainRecord``, ``BenchRecord``,
    ``ConvergeRecord``) adds its typed cases."""

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
