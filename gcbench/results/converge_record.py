"""The ``converge`` kind of results file (``gcbench converge``): its schema, and what a file must satisfy beyond its
types, checked when it is read.

A convergence run trains one problem (a *task*: a zoo, Hugging Face or user model with its loss,
or one of the ``train`` tasks) with N simulated workers, once uncompressed (the *reference*) and
once per compressor, each over several seeds.  Every step's update is made from the compressed
aggregate (the compressor's own protocol), so a compressor's errors change the trajectory it is
measured on.  One :class:`ConvergeCase` per compressor holds:

* ``convergence.settings`` (:class:`ConvergeSettings`): what decides the numbers — task, metric
  and its direction, workers, steps, batch, optimizer, learning rate, evaluation interval, seeds,
  the target rule.  Every case of one file has the same settings (the reference's are the file's);
  ``advise --convergence`` refuses a file whose ``task`` is not the model it is asked about.
* ``convergence.seeds`` (:class:`SeedRun`): one per seed — its outcome (``ok``, ``diverged``,
  ``error``), its curve (:class:`ConvergePoint` at every evaluation), the final metric, and the
  steps it took to reach the target (``None`` when it did not reach it within the budget:
  :attr:`SeedRun.reached` tells the two apart from a missing number).
* ``convergence.summary`` (:class:`ConvergeSummary`): across seeds — the final metric's mean and
  95% CI, the final gap to the reference (reference minus compressor, paired by seed where both
  finished) with its 95% CI, the steps to target over the seeds that reached it with a CI, how
  many seeds reached it, how many diverged, and the mean curve with its band.

A :class:`Interval` is ``mean`` with ``low``/``high`` (a 95% Student-t interval over seeds; equal
to the mean with one seed) and ``n`` the number of values it is over.

The metric is always "higher is better" on the file (accuracy; a loss-only task records the
negated loss as ``metric`` and says so in ``settings.metric``/``settings.metric_direction``), so
readers compare one way.

**Checked when read.**  The types let through a file that was edited or corrupted into numbers no run can
produce: steps to the target below 0, above the budget or NaN, more seeds reaching the target than were run, a summary
that says something its own per-seed records do not.  ``advise --convergence`` and ``report`` would print such a
file's numbers as measurements ("fastest topk, -4.87 s = -50 steps", "reached 1000/2"), so a file is refused on load
with one line naming the field, and its readers can take every number it holds at its word:

* **bounds**: a seed's ``steps_to_target`` and ``steps_run``, and the summary's mean steps to the target, lie in
  ``[0, settings.steps]``; every number checked here is finite; ``reached``, ``diverged`` and ``failed`` are at most
  the seeds; an interval's ``low <= mean <= high`` and its ``n`` at most the seeds;
* **one story per seed**: a seed has ``reached`` exactly when it has ``steps_to_target``;
* **the summary is its seeds'**: where the per-seed records are there, the summary's counts are recounted from them
  and its final metric and steps to the target (their means and ``n``) recomputed, within float tolerance
  (:data:`REL_TOL`); the gap to the reference is recomputed against the reference case's own seeds
  (:func:`record_problem`).

The interval ends are not recomputed: files written before the intervals were clipped to their quantity's domain
(:mod:`gcbench.converge.seed_summary`) hold ends outside it, and they are real files; readers clip them for display.
Each function returns the first problem as text (the field's path from the case's ``convergence``), or None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import model_validator
from pydantic_core import PydanticCustomError

from gcbench.results.fields import Bool, Count, Int, Num, Series, Str
from gcbench.results.record import CaseBase, Model, RunRecord

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
    device: Str | None = None  # where the engine ran ("cpu", "cuda:0"); absent in files before converge --device


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


class PlanPart(Model):
    """One rule of a plan as it ran: the tensors it took and the bytes they sent (one worker, per inner step)."""

    rule: Count  # 1-based, as tables show it
    label: Str  # "numel < 1000 → none", "default → topk:density=0.01"
    compressor: Str
    tensors: Int
    elements: Int
    sent_per_worker_per_step: Num | None = None
    payload_per_worker_per_step: Num | None = None
    bytes_share: Num | None = None  # of the plan's sent bytes


class ConvergePlan(Model):
    """A compression plan's case (:mod:`gcbench.plan`): the plan, each tensor's rule and the bytes per rule."""

    name: Str
    label: Str  # "plan:<name>"
    warmup_steps: Int
    warmup: Str
    local_steps: Count
    outer: dict[str, Any] | None = None
    rules: list[dict[str, Any]]  # the plan's rules as its file holds them, each with its label
    source: Str | None = None  # the plan file as given
    parts: list[PlanPart]
    assignment: dict[str, Int]  # tensor name → its rule (1-based)
    warmup_sent_per_worker_per_step: Num | None = None  # the warm-up's share of sent_per_worker_per_step


class Convergence(Model):
    settings: ConvergeSettings
    reference: Bool | None = None  # this case is the uncompressed reference
    seeds: list[SeedRun] | None = None
    summary: ConvergeSummary | None = None
    bytes: ConvergeBytes | None = None
    plan: ConvergePlan | None = None  # a plan's case: its rules and their parts


# ----------------------------------------------------------------------------- checked when read

#: how far a summary's mean may differ from the one recomputed from its seeds (relative; an absolute 1e-9 near 0)
REL_TOL = 1e-6
_ABS_TOL = 1e-9


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=_ABS_TOL)


def _interval_problem(where: str, iv: Interval | None, seeds: int | None, lo: float | None = None,
                      hi: float | None = None, domain: str = "") -> str | None:
    """An interval's own consistency: finite ends around its mean, ``n`` at most the seeds, the mean in ``[lo, hi]``."""
    if iv is None or iv.mean is None:
        return None
    for name in ("mean", "low", "high"):
        v = getattr(iv, name)
        if v is not None and not math.isfinite(v):
            return f"{where}.{name}: {v} is not a finite number"
    m = float(iv.mean)
    if (lo is not None and m < lo) or (hi is not None and m > hi):
        return f"{where}.mean: {m:g} is outside [{lo:g}, {hi:g}]{domain}"
    if iv.low is not None and iv.low > m + _ABS_TOL * max(1.0, abs(m)):
        return f"{where}.low: {iv.low:g} is above its mean {m:g}"
    if iv.high is not None and iv.high < m - _ABS_TOL * max(1.0, abs(m)):
        return f"{where}.high: {iv.high:g} is below its mean {m:g}"
    if seeds is not None and iv.n is not None and iv.n > seeds:
        return f"{where}.n: {iv.n}, more than the {seeds} seeds"
    return None


def _against(where: str, iv: Interval | None, values: Sequence[float]) -> str | None:
    """``iv`` against the values it summarises: absent exactly when there are none, else the same mean and ``n``."""
    if not values:
        if iv is not None and iv.mean is not None:
            return f"{where}: {iv.mean:g} over no seed (no per-seed value to summarise)"
        return None
    mean = math.fsum(values) / len(values)
    if iv is None or iv.mean is None:
        return f"{where}: missing, while {len(values)} seeds have a value (mean {mean:g})"
    if not _close(float(iv.mean), mean):
        return f"{where}.mean: {iv.mean:g}, but its seeds' values average {mean:g}"
    if iv.n is not None and iv.n != len(values):
        return f"{where}.n: {iv.n}, but {len(values)} seeds have a value"
    return None


def convergence_problem(conv: Convergence) -> str | None:
    """The first problem of one case's ``convergence`` (see the module docstring), as ``path: what``; None if none."""
    budget = int(conv.settings.steps)
    span = f" (the budget of {budget} steps)"
    runs = conv.seeds
    for i, r in enumerate(runs or []):
        where = f"convergence.seeds[{i}]"
        if r.status not in ("ok", "diverged", "error"):
            return f"{where}.status: expected one of ok, diverged, error, got {r.status!r}"
        for name in ("steps_to_target", "steps_run", "diverged_at_step"):
            v = getattr(r, name)
            if v is not None and not 0 <= v <= budget:
                return f"{where}.{name}: {v} is outside [0, {budget}]{span}"
        for name in ("final_metric", "final_loss"):
            v = getattr(r, name)
            if v is not None and not math.isfinite(v):
                return f"{where}.{name}: {v} is not a finite number"
        if r.reached is not None and r.reached != (r.steps_to_target is not None):
            return (f"{where}.reached: {str(r.reached).lower()}, but steps_to_target is "
                    f"{'absent' if r.steps_to_target is None else r.steps_to_target}")
    s = conv.summary
    if s is None:
        return None
    n = s.seeds if s.seeds is not None else (len(runs) if runs is not None else None)
    if runs is not None and s.seeds is not None and s.seeds != len(runs):
        return f"convergence.summary.seeds: {s.seeds}, but the case holds {len(runs)} seed runs"
    for name in ("reached", "diverged", "failed"):
        v = getattr(s, name)
        if v is not None and n is not None and v > n:
            return f"convergence.summary.{name}: {v}, more than the {n} seeds"
    for name, lo, hi, domain in (("steps_to_target", 0.0, float(budget), span), ("final_metric", None, None, ""),
                                 ("gap", None, None, "")):
        problem = _interval_problem(f"convergence.summary.{name}", getattr(s, name), n, lo, hi, domain)
        if problem:
            return problem
    if runs is None:
        return None
    counts = {"reached": sum(1 for r in runs if r.reached), "diverged": sum(1 for r in runs if r.status == "diverged"),
              "failed": sum(1 for r in runs if r.status == "error")}
    for name, want in counts.items():
        v = getattr(s, name)
        if v is not None and v != want:
            return f"convergence.summary.{name}: {v}, but {want} of its seed runs say so"
    finals = [float(r.final_metric) for r in runs if r.status == "ok" and r.final_metric is not None]
    hits = [float(r.steps_to_target) for r in runs if r.reached and r.steps_to_target is not None]
    problem = _against("convergence.summary.final_metric", s.final_metric, finals)
    if problem is None and s.reached is not None:  # a summary without `reached` was made without a target
        problem = _against("convergence.summary.steps_to_target", s.steps_to_target, hits)
    return problem


def record_problem(cases: Sequence[ConvergeCase]) -> str | None:
    """The first gap of a case that its seeds and the reference's do not give (``cases[i].convergence.summary.gap``).

    The gap is reference minus compressor of the final metric, paired by seed, over the seeds where both finished
    (:func:`gcbench.converge.seed_summary.summarize`); the reference's own gap is 0.
    """
    ref = next((c for c in cases if c.convergence is not None and c.convergence.reference), None)
    if ref is None or ref.convergence is None or ref.convergence.seeds is None:
        return None
    # every reference seed with a final metric, as the writer pairs them (gcbench.converge.sweep)
    ref_finals = {r.seed: float(r.final_metric) for r in ref.convergence.seeds if r.final_metric is not None}
    for i, c in enumerate(cases):
        conv = c.convergence
        if conv is None or conv.seeds is None or conv.summary is None or conv.summary.gap is None:
            continue
        if conv.reference:
            gaps = [0.0 for r in conv.seeds if r.status == "ok" and r.final_metric is not None]
        else:
            gaps = [ref_finals[r.seed] - float(r.final_metric) for r in conv.seeds
                    if r.status == "ok" and r.final_metric is not None and r.seed in ref_finals]
        problem = _against(f"cases[{i}].convergence.summary.gap", conv.summary.gap, gaps)
        if problem:
            return problem
    return None


# ----------------------------------------------------------------------------- the case and the record


def _converge_problem(problem: str | None) -> None:
    """Refuse a convergence file whose numbers no run can produce (the module docstring)."""
    if problem:
        raise PydanticCustomError("converge", "{problem}", {"problem": problem})


class ConvergeCase(CaseBase):
    """One compressor (or the reference) of ``gcbench converge``."""

    convergence: Convergence | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ConvergeCase:
        # on the case, not on Convergence: a bad number is then reported as cases[i]: convergence.summary...
        if self.convergence is not None:
            _converge_problem(convergence_problem(self.convergence))
        return self

    @property
    def source_label(self) -> str:
        return self.convergence.settings.task if self.convergence else "?"

    @property
    def source_name(self) -> str:
        return self.source_label

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


class ConvergeRecord(RunRecord):
    kind: Literal["converge"]
    cases: list[ConvergeCase]

    @model_validator(mode="after")
    def _gaps(self) -> ConvergeRecord:
        _converge_problem(record_problem(self.cases))
        return self
