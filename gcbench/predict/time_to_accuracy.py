"""Time to accuracy: ``advise --convergence``'s ranking by predicted wall time to a convergence run's target.

A convergence file (``kind = "converge"``, schema in :mod:`gcbench.results.record`, section "convergence (gcbench
converge)") measured, per compressor and over several seeds, how many steps training took to reach a target metric
(mean with a 95% interval over the seeds that reached it), how many seeds reached it within the budget of steps, and
how many diverged.  :func:`gcbench.predict.advise.advise` predicts each compressor's step time on a cluster.  Their
product is the time to the target on that cluster:

* **time** = steps to target (mean) × predicted step; **low** = the steps' interval low × the step priced at the low
  ends of its kernels' ×copy 95% CIs, **high** = the steps' high × the step at the high ends.  The product of the two
  intervals' ends is conservative (wider than the product's own 95% interval); the compute time, the network model and
  the calibration are taken as given (they carry no interval).
* **Reference**: the file's uncompressed case is priced at DDP's fp32 step; the bf16 all-reduce (the default baseline
  of claims, :data:`gcbench.predict.advise.BASELINES`) at its own step, with the steps of the file's ``bf16`` case
  or, without one, the reference's (said so: a bf16 all-reduce is assumed to train as fp32 does).
* **Ranking**: compressors that reached the target in every seed, fastest first; then those that reached it in only
  some seeds (their time is over those seeds alone: an optimistic number, marked k/n); then those that never reached it
  within the budget; then those that diverged.  Only the first group is ever recommended.
* A compressor of the file that the kernels do not hold (matched by label: the same compressor at the same
  parameters) cannot be priced and is listed as such; a compressor of the kernels that the file does not hold has no
  measured accuracy and is listed too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gcbench.converge.seed_summary import domain
from gcbench.core.errors import ResultsError
from gcbench.core.intervals import UNBOUNDED, Domain, clip
from gcbench.predict.advise import Advice, KernelSet, Scenario, Step, StepKernels, advise, predict_step, reference_copy
from gcbench.predict.network import Network
from gcbench.results.record import ConvergeCase, ConvergeRecord, Interval, RunRecord


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
    settings = next((c.convergence.settings for c in cases if c.convergence.reference), cases[0].convergence.settings)  # type: ignore[union-attr]
    if model is not None and not same_model(settings.task, model, settings.task_path):
        raise ResultsError(mismatch_text(where, settings.task, settings.task_path, model, "the model advise was asked about",
                                         "give --model {model}, or leave --model out (advise takes the run's own model)"))
    return ConvergenceInput(settings.task, settings.metric, settings.target, int(settings.steps), len(settings.seeds),
                            int(settings.workers), where, tuple(_outcome(c) for c in cases), settings.task_path)


# ----------------------------------------------------------------------------- priced on a cluster


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


def _spread(k: StepKernels, n: int, net: Network, adv: Advice) -> tuple[float, float]:
    copy_s = reference_copy(adv.kernels.kernels)
    lo, hi = (predict_step(k.at_ci(e), n, net, adv.compute_s, adv.topology, adv.overlap, adv.calibration, copy_s).step_s
              for e in (0, 1))
    return min(lo, hi), max(lo, hi)


def _find(sc: Scenario, o: Outcome) -> Step | None:
    """The predicted step of the same configuration: matched by label (a compressor's spec, ``topk:density=0.01``), never
    by name alone, which would price one density's convergence with another density's kernels."""
    return next((s for s in sc.steps if same_spec(s.label, o.label)), None)


def _time(o: Outcome, step: Span) -> Span | None:
    if o.steps is None or not o.reached:
        return None
    return Span(o.steps.mean * step.mean, o.steps.low * step.low, o.steps.high * step.high)


def _speedup(base_s: float | None, time: Span | None) -> float | None:
    """The baseline's time to the target over this row's; None where either is missing.

    A target met at step 0 (the first evaluation, before any update: ``--target-value`` at or below the untrained
    model's metric) is a real outcome with a time of 0 s: two such times are the same time (1×), and a finite time
    over 0 s is no number to print, so it is left out (:func:`time_sentence` says why).
    """
    if base_s is None or time is None:
        return None
    if time.mean <= 0:
        return 1.0 if base_s <= 0 else None
    return base_s / time.mean


def _is_bf16(o: Outcome) -> bool:
    return o.compressor == "bf16" and o.label == "bf16"


def scenario_time(adv: Advice, sc: Scenario, conv: ConvergenceInput) -> ScenarioTime:
    """:class:`ScenarioTime` of one scenario of ``adv`` (see the module docstring)."""
    net = Network(sc.bandwidth_gbps, adv.latency_s)
    rows: list[TimeRow] = []
    unpriced = []
    ref = next((o for o in conv.outcomes if o.reference), None) or next((o for o in conv.outcomes if o.compressor == "none"), None)
    for o in conv.outcomes:
        if o is ref:
            st = Span(sc.reference_step_s, sc.reference_step_s, sc.reference_step_s)
            rows.append(TimeRow(o.label, "fp32 reference", o, st, _time(o, st), note="DDP's fp32 all-reduce step"))
            continue
        s = _find(sc, o)
        if s is None and _is_bf16(o) and sc.bf16_step_s is not None:
            st = Span(sc.bf16_step_s, sc.bf16_step_s, sc.bf16_step_s)
            rows.append(TimeRow(o.label, "bf16 baseline", o, st, _time(o, st), note=adv.bf16_origin))
            continue
        if s is None:
            unpriced.append(o.label)
            continue
        k = adv.kernels.get(s.label)
        lo, hi = _spread(k, sc.workers, net, adv) if k is not None else (s.step_s, s.step_s)
        st = Span(s.step_s, min(lo, s.step_s), max(hi, s.step_s))
        rows.append(TimeRow(o.label, "bf16 baseline" if _is_bf16(o) else "compressor", o, st, _time(o, st)))
    if sc.bf16_step_s is not None and ref is not None and not any(r.role == "bf16 baseline" for r in rows):
        st = Span(sc.bf16_step_s, sc.bf16_step_s, sc.bf16_step_s)
        o = dataclasses.replace(ref, label="bf16 all-reduce", compressor="bf16", reference=False,
                                sent_bytes=ref.sent_bytes / 2 if ref.sent_bytes else None,
                                payload_bytes=ref.dense_bytes / 2 if ref.dense_bytes else None)
        rows.append(TimeRow(o.label, "bf16 baseline", o, st, _time(o, st),
                            note=f"steps assumed the fp32 reference's (no bf16 case in the convergence file); {adv.bf16_origin}"))
    times = {r.role: r.time.mean for r in rows if r.role != "compressor" and r.time is not None}
    rows = [dataclasses.replace(r, vs_fp32=_speedup(times.get("fp32 reference"), r.time),
                                vs_bf16=_speedup(times.get("bf16 baseline"), r.time))
            for r in rows]
    rows.sort(key=lambda r: (STATUSES.index(r.status), r.time.mean if r.time else float("inf"), r.step.mean))
    in_file = {spec_key(o.label) for o in conv.outcomes}
    unmeasured = tuple(s.label for s in sc.steps if spec_key(s.label) not in in_file and s.compressor != "bf16")  # bf16: the baseline
    base = sc.claim_baseline
    return ScenarioTime(sc.workers, sc.bandwidth_gbps, base, tuple(rows), tuple(unpriced), unmeasured)


def time_to_accuracy(adv: Advice, conv: ConvergenceInput) -> list[ScenarioTime]:
    """:func:`scenario_time` of every scenario of ``adv``."""
    return [scenario_time(adv, sc, conv) for sc in adv.scenarios]


# ----------------------------------------------------------------------------- the sentence


def _seconds(s: Span) -> str:
    return s.text(1.0, ".3g") + " s"


def _names(rows: Sequence[TimeRow], limit: int = 4) -> str:
    out = ", ".join(r.label for r in rows[:limit])
    return out + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _vs(st: ScenarioTime, r: TimeRow) -> str:
    first, other = (r.vs_bf16, r.vs_fp32) if st.baseline == "bf16" else (r.vs_fp32, r.vs_bf16)
    o_name = "fp32" if st.baseline == "bf16" else "bf16"
    if first is None:
        return ""
    return f"{first:.2f}× vs {st.baseline}" + (f" ({other:.2f}× vs {o_name})" if other is not None else "")


def time_sentence(st: ScenarioTime, conv: ConvergenceInput) -> str:
    """One sentence for one cluster: the compressor fastest to the target and how its time is made (steps × step, each
    with its interval), its speed-up over the baseline all-reduce (bf16 by default, fp32 in brackets) — or that none
    reaches the target sooner — then who is faster per step but slower to accuracy, who reaches it only in some seeds,
    never within the budget, or diverged, and who could not be priced."""
    where = f"on {st.workers} × {st.bandwidth_gbps:g} Gbit/s, to {conv.target_text}"
    at_start = [r for r in st.rows if r.time is not None and r.outcome.steps is not None and r.outcome.steps.high <= 0]
    if at_start:  # the first evaluation already meets it: a time of 0 s is an outcome, but it ranks nothing
        where += (f" (met at step 0, before any update, by {_names(at_start)}: time to accuracy 0 s, which tells "
                  "compressors apart by nothing; a higher --target-value does)")
    base = st.baseline_row()
    ranked = [r for r in st.compressors if r.status == "reached" and r.time is not None]
    parts = []
    if base is None or base.time is None:
        head = f"{where}: the {st.baseline} baseline has no time to the target (its run did not reach it)"
        if ranked:
            b = ranked[0]
            head += (f"; fastest compressor {b.label}, {_seconds(b.time)} = {b.outcome.steps.text(spec='.0f')} steps × "  # type: ignore
                     f"{b.step.text(1e3)} ms")
    elif not ranked or ranked[0].time.mean >= base.time.mean:  # type: ignore[union-attr]
        head = (f"{where}: no compressor reaches it sooner than the {st.baseline} all-reduce ({_seconds(base.time)} = "
                f"{base.outcome.steps.text(spec='.0f')} steps × {base.step.text(1e3)} ms)")  # type: ignore[union-attr]
        if ranked:
            head += f"; the fastest compressor, {ranked[0].label}, takes {_seconds(ranked[0].time)}"  # type: ignore[arg-type]
    else:
        b = ranked[0]
        assert b.time is not None and b.outcome.steps is not None
        head = (f"{where}: fastest {b.label}, {_seconds(b.time)} = {b.outcome.steps.text(spec='.0f')} steps × "
                f"{b.step.text(1e3)} ms, {_vs(st, b)}; the {st.baseline} all-reduce takes {_seconds(base.time)}")
        if b.time.high >= base.time.low:
            head += " (the intervals overlap: not a clear win)"
    slow = st.faster_step_slower_to_target
    if slow:
        parts.append("faster per step but slower to accuracy: " + _names(slow))
    partial = [r for r in st.compressors if r.status == "partial"]
    if partial:
        parts.append("reach it in only some seeds (time over those): "
                     + ", ".join(f"{r.label} {r.outcome.reached}/{r.outcome.seeds}" for r in partial[:4]))
    never = [r for r in st.compressors if r.status == "never"]
    if never:
        parts.append(f"does not reach it within the budget of {conv.budget} steps: " + _names(never))
    div = [r for r in st.compressors if r.status == "diverged"]
    if div:
        parts.append("diverged: " + ", ".join(f"{r.label} ({r.outcome.diverged}/{r.outcome.seeds} seeds)" for r in div[:4]))
    failed = [r for r in st.compressors if r.status == "failed"]
    if failed:
        parts.append("failed in every seed: " + _names(failed))
    if st.unpriced:
        parts.append("not priced (not in the kernels advise has): " + ", ".join(st.unpriced))
    if st.unmeasured:
        parts.append("accuracy not measured (not in the convergence file): " + ", ".join(st.unmeasured[:6])
                     + (f" and {len(st.unmeasured) - 6} more" if len(st.unmeasured) > 6 else ""))
    return head + "".join(f"; {p}" for p in parts)


# ----------------------------------------------------------------------------- a convergence file priced on named clusters


@dataclass(frozen=True)
class Pricing:
    """A convergence file priced on named clusters (``report --cluster``): the advice per cluster and the times."""

    conv: ConvergenceInput
    advice: Advice
    times: tuple[ScenarioTime, ...]


def parse_cluster(text: str) -> tuple[int, float]:
    """``16x10`` → (16 workers, 10 Gbit/s per worker); a one-line :class:`ResultsError` for anything else."""
    workers, sep, gbps = text.lower().replace("×", "x").partition("x")
    try:
        n, bw = int(workers), float(gbps)
    except ValueError:
        n, bw = 0, 0.0
    if not sep or n < 2 or not 0 < bw < float("inf"):
        raise ResultsError(f"--cluster takes WORKERSxGBITS with at least 2 workers and a positive bandwidth, e.g. 16x10; got {text!r}")
    return n, bw


def price_convergence(conv: ConvergenceInput, kernels: KernelSet, compute_s: float, clusters: Sequence[tuple[int, float]],
                      latency_s: float, *, compute_origin: str = "given", baseline: str = "bf16") -> Pricing:
    """:func:`time_to_accuracy` on each (workers, Gbit/s) of ``clusters`` (not their cross product)."""
    if not same_model(conv.task, kernels.model, conv.task_path):
        raise ResultsError(mismatch_text(conv.origin, conv.task, conv.task_path, kernels.model,
                                         f"the model of the kernels ({kernels.origin})",
                                         "give --kernels of `gcbench bench --model {model}`"))
    parts = [advise(kernels, compute_s, [n], [bw], latency_s, compute_origin=compute_origin, baseline=baseline,
                    convergence_origin=conv.origin) for n, bw in clusters]
    adv = dataclasses.replace(parts[0], scenarios=tuple(sc for p in parts for sc in p.scenarios))
    return Pricing(conv, adv, tuple(time_to_accuracy(adv, conv)))
