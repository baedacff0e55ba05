"""A convergence file as the prediction reads it (:func:`read_convergence`), and the rows of time to its target.

A convergence file (``kind = "converge"``, schema in :mod:`gcbench.results.converge_record`) measured, per
compressor and over several seeds, how many steps training took to reach a target metric (mean with a 95% interval
over the seeds that reached it), how many seeds reached it within the budget of steps, and how many diverged: one
:class:`Outcome` per compressor.  :mod:`gcbench.predict.time_to_accuracy` multiplies those steps by predicted step
times into :class:`TimeRow` and :class:`ScenarioTime`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gcbench.core.errors import ResultsError
from gcbench.core.intervals import UNBOUNDED, Domain, clip, domain
from gcbench.results.converge_record import ConvergeCase, ConvergeRecord, Interval
from gcbench.results.record import RunRecord


@dataclass(frozen=True)
class Span:
    """A mean with the low and high ends of its interval."""

    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, iv: Interval | None, bounds: Domain = UNBOUNDED) -> Span | None:
        """The interval's span, its ends clipped to ``bounds`` (files written before the writer clipped them hold ends
        outside what the quantity can be: "4 (-3–10) steps", an accuracy up to 1.3)."""
        if iv is None or iv.mean is None:
            return None
        m = float(iv.mean)
        lo, hi = clip(iv.low, bounds), clip(iv.high, bounds)
        return cls(m, float(lo) if lo is not None else m, float(hi) if hi is not None else m)

    def text(self, scale: float = 1.0, spec: str = ".3g") -> str:
        """``12.3 (10.1–14.9)``, or the mean alone when the interval is a point."""
        m, lo, hi = (format(v * scale, spec) for v in (self.mean, self.low, self.high))
        return m if lo == hi == m else f"{m} ({lo}–{hi})"


#: the outcome classes of a compressor's convergence, in ranking order
STATUSES = ("reached", "partial", "never", "diverged", "failed")


@dataclass(frozen=True)
class Outcome:
    """One compressor's convergence across seeds, from a convergence file's summary."""

    label: str
    compressor: str
    reference: bool
    seeds: int
    reached: int
    diverged: int
    failed: int
    steps: Span | None  # steps to target over the seeds that reached it
    final: Span | None  # final metric over the seeds that finished
    gap: Span | None  # reference minus this compressor, paired by seed (positive: worse)
    sent_bytes: float | None = None  # per worker per step: the protocol's traffic
    dense_bytes: float | None = None
    payload_bytes: float | None = None  # per worker per step: its payloads (what is held against bf16's)

    @property
    def larger_than_bf16(self) -> bool | None:
        """Whether the payload per worker-step is larger than a bf16 cast's (half the dense bytes); None without sizes."""
        p = self.payload_bytes if self.payload_bytes is not None else self.sent_bytes
        return None if p is None or not self.dense_bytes else p > self.dense_bytes / 2

    @property
    def status(self) -> str:
        """One of :data:`STATUSES`: reached in every seed, in some, in none (within the budget), diverged, or every seed failed."""
        if self.seeds and self.failed >= self.seeds:
            return "failed"
        if self.reached and self.reached >= self.seeds:
            return "reached"
        if self.reached:
            return "partial"
        return "diverged" if self.diverged else "never"


@dataclass(frozen=True)
class ConvergenceInput:
    """What a convergence file says about every compressor, and the settings that decide it."""

    task: str
    metric: str
    target: float | None
    budget: int  # the steps every seed was given
    seeds: int
    workers: int
    origin: str
    outcomes: tuple[Outcome, ...]
    task_path: str | None = None  # a file factory's file as the run resolved it (settings.task_path)

    @property
    def target_text(self) -> str:
        return f"{self.metric} {self.target:.4g}" if self.target is not None else f"the {self.metric} target"

    def get(self, label: str) -> Outcome | None:
        return next((o for o in self.outcomes if same_spec(o.label, label)), None)


def spec_key(label: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A compressor spec's name and its ``key=value`` settings, sorted, booleans in one case: ``topk:error_feedback=true``
    as a user wrote it and ``topk:error_feedback=True`` as a bench file labels the same configuration are one key."""
    name, _, rest = label.partition(":")
    items = []
    for item in filter(None, rest.split(",")):
        k, _, v = item.partition("=")
        v = v.strip()
        items.append((k.strip(), v.lower() if v.lower() in ("true", "false") else v))
    return name.strip(), tuple(sorted(items))


def same_spec(a: str, b: str) -> bool:
    """Whether two labels name the same configuration (:func:`spec_key`)."""
    return a == b or spec_key(a) == spec_key(b)


def _file_spec(spec: str) -> tuple[str, str] | None:
    """``(file, factory)`` of a ``path/to/file.py:factory`` model, None for any other name."""
    file, sep, factory = spec.rpartition(":")
    return (file, factory) if sep and file.endswith(".py") else None


def model_identity(spec: str, recorded: str | None = None) -> str:
    """What names one model whatever its spelling: a file factory's absolute ``path.py:factory`` (``recorded``, the
    run's ``settings.task_path``, when there is one: the file as the run resolved it), a zoo model without ``zoo:``,
    anything else as it is.  Imports nothing."""
    if recorded:
        return recorded
    f = _file_spec(spec)
    if f is not None:
        return f"{Path(f[0]).expanduser().resolve()}:{f[1]}"
    return spec[4:] if spec.startswith("zoo:") else spec


def _module_file(spec: str) -> str | None:
    """The ``file.py:factory`` a ``package.module:factory`` name loads, found without running the module (a package's
    ``__init__`` does run); None when it is not a module on the path."""
    import importlib.util

    module, sep, factory = spec.partition(":")
    if not sep or spec.startswith("hf:"):
        return None
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError, AttributeError):
        return None
    origin = getattr(found, "origin", None)
    return f"{Path(origin).resolve()}:{factory}" if origin and origin.endswith(".py") else None


def same_model(task: str, model: str, task_path: str | None = None) -> bool:
    """Whether a convergence run's ``task`` is ``model``: a zoo model is recorded as ``zoo:NAME``; a
    ``path/to/file.py:factory`` run (its file in ``task_path``) is the same file and factory however it is spelled
    — relative, absolute, or as the ``module:factory`` that loads that file."""
    if _file_spec(task) is None and not task_path:
        return model_identity(task) == model_identity(model)
    want = model_identity(task, task_path)
    return (model_identity(model) if _file_spec(model) is not None else _module_file(model)) == want


def mismatch_text(where: str, task: str, task_path: str | None, model: str, what: str, fix: str) -> str:
    """One line: ``where`` is a run of ``task``, not of ``model`` (``what``); for a file factory, both files and ``fix``
    (how to name the run's model: ``{model}`` in it stands for the run's file)."""
    if _file_spec(task) is None and not task_path:
        return f"{where} is a convergence run of {task}, not of {model}, {what}"
    ran = model_identity(task, task_path)
    asked = model_identity(model) if _file_spec(model) is not None else _module_file(model)
    return (f"{where} is a convergence run of {task} ({ran}), not of {model}"
            + (f" ({asked})" if asked and asked != model else "") + f", {what}; " + fix.format(model=ran))


def run_model(conv: ConvergenceInput) -> str:
    """The model to price a convergence run's steps with when none is named: its task (a zoo model without ``zoo:``),
    or a file factory's recorded absolute path, refused in one line with the fix when that file is gone."""
    f = _file_spec(conv.task_path or conv.task)
    if f is None:
        return model_identity(conv.task)
    ran = model_identity(conv.task, conv.task_path)
    file = ran.rpartition(":")[0]
    if not Path(file).is_file():
        raise ResultsError(f"{conv.origin} is a convergence run of {conv.task}, whose file {file} is no longer there: give "
                           f"--model path/to/{Path(file).name}:{f[1]} where it is now, or --kernels BENCH with --compute-ms "
                           "MS (advise then imports nothing)")
    return ran


def _outcome(c: ConvergeCase) -> Outcome:
    conv = c.convergence
    assert conv is not None
    s, runs = conv.summary, conv.seeds or []
    seeds = (s.seeds if s is not None and s.seeds is not None else len(runs)) or len(runs)
    reached = s.reached if s is not None and s.reached is not None else sum(bool(r.reached) for r in runs)
    diverged = s.diverged if s is not None and s.diverged is not None else sum(r.status == "diverged" for r in runs)
    failed = s.failed if s is not None and s.failed is not None else sum(r.status == "error" for r in runs)
    if not c.ok:
        failed = seeds = max(seeds, 1)
    b = conv.bytes
    metric, budget = conv.settings.metric, int(conv.settings.steps)
    return Outcome(c.label, str(c.compressor or c.label), bool(conv.reference), int(seeds), int(reached), int(diverged),
                   int(failed), Span.of(s.steps_to_target, domain("steps", budget=budget)) if s else None,
                   Span.of(s.final_metric, domain("metric", metric)) if s else None,
                   Span.of(s.gap, domain("gap", metric)) if s else None, b.sent_per_worker_per_step if b else None,
                   b.dense_per_step if b else None, b.payload_per_worker_per_step if b else None)


def read_convergence(record: RunRecord, model: str | None = None, origin: str = "") -> ConvergenceInput:
    """The :class:`ConvergenceInput` of a convergence file; one-line :class:`ResultsError` for a file of another kind,
    without cases, or of another model or task than ``model`` (naming both)."""
    where = origin or "the convergence file"
    if not isinstance(record, ConvergeRecord):
        raise ResultsError(f"{where} is a {record.kind} results file, not a convergence file of `gcbench converge` (kind converge)")
    cases = [c for c in record.cases if c.convergence is not None]
    if not cases:
        raise ResultsError(f"{where} has no convergence cases")
    settings = next((c.convergence.settings for c in cases if c.convergence.reference), cases[0].convergence.settings)  # type: ignore[union-attr]  # kept: cases with a convergence
    if model is not None and not same_model(settings.task, model, settings.task_path):
        raise ResultsError(mismatch_text(where, settings.task, settings.task_path, model, "the model advise was asked about",
                                         "give --model {model}, or leave --model out (advise takes the run's own model)"))
    return ConvergenceInput(settings.task, settings.metric, settings.target, int(settings.steps), len(settings.seeds),
                            int(settings.workers), where, tuple(_outcome(c) for c in cases), settings.task_path)


@dataclass(frozen=True)
class TimeRow:
    """One compressor (or baseline) on one cluster: steps to target × predicted step = time to target."""

    label: str
    role: str  # "fp32 reference", "bf16 baseline" or "compressor"
    outcome: Outcome
    step: Span  # predicted step, s (low/high: the kernels' ×copy CI ends)
    time: Span | None  # to target, s; None where no seed reached it
    vs_fp32: float | None = None  # the fp32 reference's time over this one
    vs_bf16: float | None = None
    note: str = ""  # how this row was priced, when not as the others

    @property
    def status(self) -> str:
        return self.outcome.status


@dataclass(frozen=True)
class ScenarioTime:
    """Every compressor of a convergence file on one cluster, ranked by time to the target."""

    workers: int
    bandwidth_gbps: float
    baseline: str  # the baseline claims are made against ("bf16" or "fp32")
    rows: tuple[TimeRow, ...]  # ranked: reached in every seed by time, then partial, never, diverged, failed
    unpriced: tuple[str, ...]  # in the file, not in the kernels
    unmeasured: tuple[str, ...]  # in the kernels, not in the file

    def baseline_row(self, which: str | None = None) -> TimeRow | None:
        role = "bf16 baseline" if (which or self.baseline) == "bf16" else "fp32 reference"
        return next((r for r in self.rows if r.role == role), None)

    @property
    def compressors(self) -> list[TimeRow]:
        return [r for r in self.rows if r.role == "compressor"]

    @property
    def faster_step_slower_to_target(self) -> list[TimeRow]:
        """Compressors whose step beats the baseline's but that reach the target later (or never)."""
        base = self.baseline_row()
        if base is None or base.time is None:
            return []
        return [r for r in self.compressors if r.step.mean < base.step.mean
                and (r.time is None or r.time.mean > base.time.mean)]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
