"""The reports of a convergence file (``kind = "converge"``, ``gcbench converge``): its table, answer and CSV rows.

One row per compressor of the file (the uncompressed reference first): how many seeds reached the target within the
budget of steps, how many diverged, the final metric and the gap to the reference (reference minus compressor, paired
by seed) with their 95% intervals, the steps to the target over the seeds that reached it with its interval, and the
bytes a worker sent per step — marked where they exceed a bf16 all-reduce's (half the dense fp32 bytes).  The numbers
are the file's summary (:class:`gcbench.results.converge_record.ConvergeSummary`), read through
:func:`gcbench.predict.time_to_accuracy.read_convergence` as ``advise --convergence`` reads them.

A convergence file holds steps, not seconds: the time to the target depends on the cluster, which the report is not
given, so the report ranks by steps and says so; ``gcbench advise --convergence FILE`` prices the steps on a cluster.
Terminal, Markdown and HTML show the same rows (:func:`convergence_rows`); the HTML draws the curves
(:mod:`gcbench.report.html_converge_plots`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.markup import escape as rich_escape
from rich.table import Table

from gcbench.predict.accuracy import ConvergenceInput, Outcome, Span, read_convergence
from gcbench.report.columns import Label
from gcbench.report.load import LoadedRun
from gcbench.report.text import term
from gcbench.results.converge_record import ConvergeCase

#: the columns of the convergence table: (header, help)
HEADERS = (("reached", "seeds that reached the target within the budget of steps / seeds"),
           ("diverged", "seeds whose loss diverged / seeds"),
           ("final metric", "the metric at the last step, mean ± half its 95% CI over the seeds that finished"),
           ("gap", "reference minus this compressor at the last step, paired by seed (positive: worse), mean ± half its 95% CI"),
           ("steps to target", "steps to reach the target, mean ± half its 95% CI over the seeds that reached it"),
           ("MB/step", "payload bytes one worker sends per step; † larger than a bf16 all-reduce's (half the fp32 bytes)"))

FOOTNOTE = ("A convergence run trains with N simulated workers, each update made from the compressed aggregate, over several "
            "seeds; intervals are 95% Student t over seeds (± half-width). Ranked by steps only: a step's wall time depends on "
            "the cluster, which this report is not given — `gcbench report FILE --cluster 16x10 --kernels BENCH` or "
            "`gcbench advise --model MODEL --convergence FILE` price the steps on a cluster and rank by time to the target. "
            "† = more bytes per step than a bf16 all-reduce sends.")
PRICED_FOOTNOTE = ("A convergence run trains with N simulated workers, each update made from the compressed aggregate, over "
                   "several seeds; intervals are 95% Student t over seeds (± half-width). This table is by steps; the "
                   "time to the target on each cluster given (--cluster) follows it. † = more bytes per step than a bf16 "
                   "all-reduce sends.")


def footnote(run: LoadedRun) -> str:
    return (PRICED_FOOTNOTE if run.pricing is not None else FOOTNOTE) + thinned_note(run)


def thinned_note(run: LoadedRun) -> str:
    """`` Curves drawn at ...`` when the file's curves were cut on reading (:mod:`gcbench.results.converge_thin`), else ""."""
    from gcbench.results.converge_thin import MAX_CURVE_POINTS, THINNED_FROM

    most = max((int(c.convergence.summary.extra(THINNED_FROM) or 0) for c in run.cases
                if isinstance(c, ConvergeCase) and c.convergence is not None and c.convergence.summary is not None), default=0)
    if not most:
        return ""
    return (f" Curves (plots, steps.csv) drawn at {MAX_CURVE_POINTS:,} evenly spaced evaluations of the file's {most:,}, "
            "first and last kept; every number above is the file's summary, exact.")


def ci_text(s: Span | None, spec: str = ".3g") -> str:
    """``0.877 ±0.012`` for a symmetric interval, ``0.877 (0.85–0.89)`` otherwise, the mean alone for a point; — for none."""
    if s is None:
        return "—"
    m = format(s.mean, spec)
    half_lo, half_hi = s.mean - s.low, s.high - s.mean
    if max(abs(half_lo), abs(half_hi)) <= 1e-9 * max(1.0, abs(s.mean)):  # equal values: rounding noise, not spread
        return m
    if format(half_lo, spec) == format(half_hi, spec):
        return m if format(half_hi, spec) in ("0", "-0") else f"{m} ±{format(half_hi, spec)}"
    return f"{m} ({format(s.low, spec)}–{format(s.high, spec)})"


@dataclass(frozen=True)
class ConvergenceRow:
    """One compressor of a convergence file, as every report shows it."""

    name: str
    outcome: Outcome
    cells: tuple[str, ...]  # in :data:`HEADERS` order
    values: tuple[float | None, ...]  # what each cell sorts by
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


def _mb(o: Outcome) -> tuple[str, float | None]:
    p = o.payload_bytes if o.payload_bytes is not None else o.sent_bytes
    if p is None:
        return "—", None
    return f"{p / 1e6:.3g}" + ("†" if o.larger_than_bf16 else ""), p


def convergence_input(run: LoadedRun) -> ConvergenceInput:
    return read_convergence(run.data, None, str(run.path))


def convergence_rows(run: LoadedRun) -> list[ConvergenceRow]:
    """One row per compressor, the reference first, then by status (reached in every seed, some, none, diverged) and steps."""
    conv = convergence_input(run)
    errors = {c.label: c.error_text or "failed" for c in run.cases if isinstance(c, ConvergeCase) and not c.ok}
    rows = []
    for o in conv.outcomes:
        mb, sent = _mb(o)
        name = o.label + (" (reference)" if o.reference else "")
        cells = (f"{o.reached}/{o.seeds}", f"{o.diverged}/{o.seeds}", ci_text(o.final), ci_text(o.gap),
                 ci_text(o.steps, ".0f"), mb)
        values = (o.reached / o.seeds if o.seeds else None, o.diverged / o.seeds if o.seeds else None,
                  o.final.mean if o.final else None, o.gap.mean if o.gap else None, o.steps.mean if o.steps else None, sent)
        rows.append(ConvergenceRow(name, o, cells, values, errors.get(o.label, "")))
    from gcbench.predict.accuracy import STATUSES

    rows.sort(key=lambda r: (not r.outcome.reference, STATUSES.index(r.outcome.status),
                             r.outcome.steps.mean if r.outcome.steps else float("inf")))
    return rows


def description(run: LoadedRun) -> str:
    """The settings that decide a convergence file's numbers, as one line."""
    conv = convergence_input(run)
    case = next((c for c in run.cases if isinstance(c, ConvergeCase) and c.convergence is not None), None)
    s = case.convergence.settings if case is not None and case.convergence is not None else None
    if s is None:
        return conv.task
    opt = f"{s.optimizer} lr {s.lr:g}" + (f" momentum {s.momentum:g}" if s.momentum else "")
    target = (f"target {conv.target_text}" + (f" ({s.target_fraction:g} of the reference's final)" if s.target_rule == "fraction"
                                               and s.target_fraction is not None else ""))
    return (f"{s.task}" + (f" on {s.dataset}" if s.dataset else "") + f", {s.workers} workers, {s.steps} steps"
            + (f" × {s.batch_per_worker} per worker" if s.batch_per_worker else "") + f", {opt}, {len(s.seeds)} seeds, {target}")


def answer(run: LoadedRun) -> str:
    """The one-sentence reading of a convergence file (by steps: no cluster is priced here)."""
    conv = convergence_input(run)
    ref = next((o for o in conv.outcomes if o.reference), None)
    comps = [o for o in conv.outcomes if not o.reference]
    reached = sorted((o for o in comps if o.status == "reached" and o.steps), key=lambda o: o.steps.mean)  # type: ignore[union-attr]  # kept: outcomes with steps
    parts = [f"{conv.task}, to {conv.target_text} within {conv.budget} steps ({conv.seeds} seeds)"]
    if ref is not None and ref.steps is not None:
        parts.append(f"the reference takes {ci_text(ref.steps, '.0f')} steps")
    if ref is not None and ref.status in ("partial", "never", "diverged"):  # what every compressor is held against
        parts.append(f"the target is not reliably reached by the reference itself ({ref.reached}/{ref.seeds} seeds)")
    if reached:
        parts.append("fewest steps among compressors: " + ", ".join(f"{o.label} {ci_text(o.steps, '.0f')}" for o in reached[:3]))
    partial = [o for o in comps if o.status == "partial"]
    if partial:
        parts.append("reach it in only some seeds: " + ", ".join(f"{o.label} {o.reached}/{o.seeds}" for o in partial))
    never = [o.label for o in comps if o.status == "never"]
    if never:
        parts.append(f"do not reach it within the budget of {conv.budget} steps: " + ", ".join(never))
    div = [o for o in comps if o.status == "diverged"]
    if div:
        parts.append("diverged: " + ", ".join(f"{o.label} ({o.diverged}/{o.seeds} seeds)" for o in div))
    failed = [o.label for o in comps if o.status == "failed"]
    if failed:
        parts.append("failed: " + ", ".join(failed))
    if run.pricing is not None:
        return parts[0] + ": " + "; ".join(parts[1:]) + ". Time to the target on each cluster given: below."
    return parts[0] + ": " + "; ".join(parts[1:]) + (". Steps only: wall time depends on the cluster "
                                                     "(`gcbench advise --convergence FILE` prices it).")


def priced_sentences(run: LoadedRun) -> list[str]:
    """One sentence per cluster the file was priced on (``report --cluster``), none otherwise."""
    from gcbench.predict.time_to_accuracy import time_sentence

    p = run.pricing
    return [time_sentence(st, p.conv) for st in p.times] if p is not None else []


def pricing_origin(run: LoadedRun) -> str:
    """Where the step times of ``report --cluster`` come from, as one line ("" without a cluster)."""
    p = run.pricing
    if p is None:
        return ""
    a = p.advice
    return (f"step times: kernels measured on {a.kernels.device} ({a.kernels.machine}, {a.kernels.origin}); compute "
            f"{1e3 * a.compute_s:.3g} ms per step ({a.compute_origin}); α = {1e6 * a.latency_s:g} µs; bf16 all-reduce "
            f"{a.bf16_origin}.")


def convergence_table(run: LoadedRun) -> Table:
    """The terminal table of a convergence file (within 120 columns)."""
    t = Table(title=term(f"{run.run_id} — convergence: {description(run)}", 200), title_justify="left")
    t.add_column("compressor", no_wrap=False)
    for h, _ in HEADERS:
        t.add_column(h, justify="right", no_wrap=True)
    errors = []
    for r in convergence_rows(run):
        if r.ok:
            t.add_row(Label(r.name), *[rich_escape(c) for c in r.cells])
        else:
            t.add_row(Label(r.name), "[red]failed[/]", *[""] * (len(HEADERS) - 1))
            errors.append(f"{r.name}: {r.error}")
    t.caption = rich_escape("\n".join([answer(run), *errors, footnote(run)]))
    t.caption_justify = "left"
    return t


def plan_sections(run: LoadedRun) -> list[Any]:
    """Every plan case's rules and its parts (:mod:`gcbench.report.converge_plans`)."""
    from gcbench.report.converge_plans import plan_sections as sections

    return sections([c.model_dump() for c in run.cases if isinstance(c, ConvergeCase)])


def convergence_output(run: LoadedRun) -> list[Any]:
    """The terminal output of a convergence file: its table, each plan's rules and parts, then with ``--cluster`` the
    time-to-accuracy tables and one sentence per cluster (:func:`gcbench.report.advice.time_output`)."""
    from gcbench.report.converge_plans import rich_tables

    out: list[Any] = [convergence_table(run), *rich_tables(plan_sections(run))]
    if run.pricing is not None:
        from gcbench.report.advice import time_output

        out.append(pricing_origin(run))
        out.extend(time_output(run.pricing.conv, list(run.pricing.times)))
    return out


def markdown_convergence(run: LoadedRun, md_escape: Any, md_table: Any, facts: dict[str, str]) -> str:
    """The Markdown section of a convergence file (``md_escape``/``md_table``: :mod:`gcbench.report.markdown`'s)."""
    rows = [[md_escape(r.name), *([md_escape(c) for c in r.cells] if r.ok else
                                   [f"failed: {md_escape(r.error)}", *[""] * (len(HEADERS) - 1)])]
            for r in convergence_rows(run)]
    parts = [f"## Convergence run {md_escape(run.run_id)}", "",
             f"{md_escape(description(run))}; {md_escape(facts['date'])}, {md_escape(facts['cases'])}; machine "
             f"{md_escape(facts['machine'])}; gcbench {md_escape(facts['gcbench'])}, commit {md_escape(facts['commit'])}.", "",
             md_table(["compressor", *[md_escape(h) for h, _ in HEADERS]], rows, [False] + [True] * len(HEADERS)), "",
             f"**{md_escape(answer(run))}**", "", *[f"* {md_escape(s)}" for s in priced_sentences(run)],
             *([md_escape(pricing_origin(run)), ""] if run.pricing is not None else []), md_escape(footnote(run)), ""]
    plans = plan_sections(run)
    if plans:
        from gcbench.report.converge_plans import markdown_sections

        parts += [markdown_sections(plans, md_escape, md_table)]
    return "\n".join(parts)


# ----------------------------------------------------------------------------- CSV


def _span_fields(prefix: str, s: Span | None) -> dict[str, Any]:
    return {f"{prefix}": s.mean if s else None, f"{prefix}_low": s.low if s else None, f"{prefix}_high": s.high if s else None}


def converge_case_row(run: LoadedRun, case: ConvergeCase, outcome: Outcome | None) -> dict[str, Any]:
    """cases.csv: one row per compressor of a convergence file (the ID columns, then the summary)."""
    row: dict[str, Any] = {"run_id": run.run_id, "kind": run.kind, "source": case.source_label, "case": case.label,
                           "compressor": case.compressor, "version": case.version,
                           "params": ", ".join(f"{k}={v}" for k, v in sorted((case.params or {}).items())),
                           "status": "ok" if case.ok else "failed", "error": case.error_text or None}
    if outcome is None:
        return row
    row.update({"reference": outcome.reference, "seeds": outcome.seeds, "reached": outcome.reached, "diverged": outcome.diverged,
                **_span_fields("final_metric", outcome.final), **_span_fields("gap", outcome.gap),
                **_span_fields("steps_to_target", outcome.steps), "sent_bytes": outcome.sent_bytes,
                "payload_bytes": outcome.payload_bytes, "dense_bytes": outcome.dense_bytes,
                "larger_than_bf16": outcome.larger_than_bf16})
    return row


def converge_cases_rows(run: LoadedRun) -> list[dict[str, Any]]:
    conv = convergence_input(run)
    return [converge_case_row(run, c, conv.get(c.label)) for c in run.cases if isinstance(c, ConvergeCase)]


def converge_steps_rows(run: LoadedRun) -> list[dict[str, Any]]:
    """steps.csv: one row per compressor × evaluated step, the mean curve over seeds with its band."""
    from gcbench.core.intervals import clip, domain

    rows = []
    for c in run.cases:
        s = c.convergence.summary if isinstance(c, ConvergeCase) and c.convergence is not None else None
        if s is None or not s.curve_steps:
            continue
        bounds = domain("metric", c.convergence.settings.metric)  # band ends of older files
        for i, step in enumerate(s.curve_steps):
            rows.append({"run_id": run.run_id, "source": c.source_label, "case": c.label, "step": step,
                         "metric_mean": _at(s.curve_mean, i), "metric_low": clip(_at(s.curve_low, i), bounds),
                         "metric_high": clip(_at(s.curve_high, i), bounds), "loss_mean": _at(s.loss_mean, i)})
    return rows


def _at(series: Sequence[Any] | None, i: int) -> Any:
    return series[i] if series is not None and i < len(series) else None
