"""The terminal renderer: the report's views as rich tables, and what ``gcbench run``/``compare``/``report`` print.

It lays out the views of :mod:`gcbench.report.views` (rows, captions, failed cases) over the columns
of :mod:`gcbench.report.columns`; user text is clipped and markup-escaped (:func:`gcbench.report.text.term`).
Loading runs is :mod:`gcbench.report.load`, Markdown :mod:`gcbench.report.markdown`, the HTML page
:mod:`gcbench.report.html`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rich.console import RenderableType
from rich.markup import escape as rich_escape
from rich.table import Table
from rich.text import Text

from gcbench.core.errors import ResultsError
from gcbench.report import views
from gcbench.report.columns import (
    BENCH_COLUMNS,
    COMPARE_HEADERS,
    LAYER_METRICS,
    ONESHOT_COLUMNS,
    SUMMARY_COLUMNS,
    TRAIN_COLUMNS,
    Label,
    LayerMetric,
    half_width_text,
    x_copy_text,
)
from gcbench.report.load import LoadedRun, ReportInput, run_facts
from gcbench.report.notes import (
    BENCH_FOOTNOTE,
    COMPARE_STREAM_NOTE,
    DAGGER,
    LAYER_NOTE,
    LEGEND,
    ONE_SHOT_NOTE,
    PHASE_NOTE,
    TIMING_NOTE,
    TRAIN_FOOTNOTE,
    X_COPY_HEADER,
)
from gcbench.report.numbers import fmt, size_text
from gcbench.report.text import NAME_MAX, TEXT_MAX, clip, term
from gcbench.results.baselines import ClaimResult
from gcbench.results.head_to_head import FIDELITY_METRICS, MAIN_METRICS, SideRow, fidelity_references, head_to_head
from gcbench.results.judge import BETTER, FIXED, NEW_FAILURE, NOT_COMPARABLE, WORSE, Comparison
from gcbench.results.phases import phase_rows, source_windows
from gcbench.results.recommend import ClosedEvidence
from gcbench.results.record import BEATS_BOUND
from gcbench.results.run_record import RunCase
from gcbench.results.train_record import TrainCase
from gcbench.results.verdict import PairVerdict, baseline_bytes_line, bytes_per_step, process_spread_note, verdicts


def summary_tables(run: LoadedRun) -> list[Any]:
    """The tables of one results file: one per gradient source of a run, one for a train or bench file; a convergence
    file's table, then its time to accuracy on each cluster given (``report --cluster``)."""
    if run.kind == "train":
        return [train_table(run.cases, f"{run.run_id} — training: {views.train_description(run)}"),
                *[plan_table(pt) for pt in views.plan_tables(run.cases, trained=True)]]
    if run.kind == "bench":
        return [bench_table(run)]
    if run.kind == "converge":
        from gcbench.report.convergence import convergence_output

        return convergence_output(run)
    from gcbench.report.collectives_table import sweep_of, terminal_tables

    sweep = sweep_of(run.data)
    extra = [f"{run.run_id} — sharded collectives: the aggregate's error and the bytes per worker as N grows",
             *terminal_tables(sweep)] if sweep is not None else []
    return [*case_tables(run.cases, run.run_id), *extra]


def case_tables(cases: Sequence[RunCase], title: str) -> list[Table]:
    """Per gradient source of run/compare cases: the main table, the one-shot table, then the per-phase table if any.

    The main table sets every case on the suite's one common reference (its caption names it); the
    one-shot numbers, each against the case's own reference, are a second table so that no column
    mixes references.
    """
    tables = []
    for src, group in views.by_source(cases).items():
        src = clip(src)  # the titles name the source: a long one would fill them
        main = _cases_table(f"{clip(title)} — {src}", group, SUMMARY_COLUMNS)
        main.caption = "\n".join(x for x in (rich_escape(views.stream_caption(group, clip)), main.caption) if x)  # type: ignore[misc]  # plain text
        main.caption_justify = "left"
        tables.append(main)
        if any(c.ok and c.fidelity is not None for c in group):
            oneshot = _cases_table(f"{clip(title)} — {src} — one-shot fidelity (own reference)", group, ONESHOT_COLUMNS,
                                   with_errors=False)
            oneshot.caption = rich_escape(views.oneshot_caption(group, label=clip))
            oneshot.caption_justify = "left"
            tables.append(oneshot)
        phases = phase_table(group, f"{clip(title)} — {src}")
        if phases is not None:
            phases.caption = rich_escape(PHASE_NOTE)
            phases.caption_justify = "left"
            tables.append(phases)
        tables += [plan_table(pt) for pt in views.plan_tables(group)]
    return tables


def plan_table(pt: views.PlanTable) -> Table:
    """A plan case's per-rule table (:func:`gcbench.report.views.plan_tables`)."""
    t = Table(title=term(pt.title, TEXT_MAX), title_justify="left", caption=rich_escape(pt.note), caption_justify="left")
    for header, right in zip(views.PLAN_HEADERS, views.PLAN_RIGHT, strict=True):
        t.add_column(header, justify="right" if right else "left")
    for row in pt.rows:
        t.add_row(*[rich_escape(x) for x in row])
    return t


def _cases_table(title: str, cases: Sequence[Any], columns: Sequence[Any], with_errors: bool = True, first: str = "case",
                 escape: bool = True) -> Table:
    """One row per case over ``columns``; a failed case's error goes in the caption (``with_errors``), not in a cell.

    ``escape`` False leaves the columns' markup (train's coloured cells) as it is."""
    t = Table(title=term(title, TEXT_MAX), title_justify="left")
    t.add_column(first, no_wrap=True)
    for col in columns:
        t.add_column(col.header, justify="right", no_wrap=True)
    rows = views.case_rows(cases, columns)
    for r in rows:
        if not r.ok:  # the error goes under the table: in a cell it would stretch one numeric column
            t.add_row(term(r.name), "[red]failed[/]", *[""] * (len(columns) - 1))
        else:
            t.add_row(term(r.name), *[rich_escape(text) if escape else text for text in r.texts])
    errors = [(r.name, r.error) for r in rows if not r.ok]
    if errors and with_errors:
        t.caption = _failure_caption(errors)
        t.caption_justify = "left"
    return t


def recommendation_output(cases: Sequence[RunCase], closed: ClosedEvidence | None = None) -> list[RenderableType]:
    """One sentence per source: which compressor to use (:func:`gcbench.results.recommend.recommendations`; ``closed``:
    a convergence file's outcomes for the one source of ``gcbench compare``, which decide where they cover a case)."""
    from gcbench.results.recommend import recommendations

    per = {c.source_label: closed for c in cases} if closed is not None else None
    return [Text(clip(r.sentence(), 2000), style="bold") for r in recommendations(cases, per)]


def run_output(cases: Sequence[RunCase], title: str) -> list[RenderableType]:
    """What ``gcbench run`` prints after a run: the per-source tables of its cases, the footnote, one recommendation per source."""
    return [*case_tables(cases, title), Text(LEGEND), *recommendation_output(cases)]


def verdict_output(pairs: Sequence[PairVerdict]) -> list[RenderableType]:
    """The verdict of ``gcbench compare``: each pair's one-line summary, then its axes one sentence each."""
    out: list[RenderableType] = []
    for v in pairs:
        out.append(Text(v.summary, style="bold"))
        out += [Text(f"  • {axis.text}") for axis in v.axes]
    return out


def _side_cell(row: SideRow, i: int, case: RunCase) -> str:
    """One cell of a head-to-head row (markup, escaped): the number, with its interval, spread or flags where it has them."""
    v, metric = row.values[i], row.spec.metric
    if v is None:
        text = fmt(v, row.spec.format)
    elif metric in ("comp_over_copy", "decomp_over_copy") and case.timing is not None:  # with its spread and flags
        text = x_copy_text(case.timing.x_copy(row.spec.kernel or "compress"))
    elif metric == "compress_gbps" and case.beats_bound:
        text = f"— ({BEATS_BOUND})"  # not the work the compressor must do: no speed
    elif metric == "delivered" and case.stream is not None:
        ci = case.stream.delivered_ci  # the aggregate's own interval (jackknife over workers)
        text = fmt(v, "g") + (f" ± {half_width_text(v, (ci.hi - ci.lo) / 2)}" if ci is not None and ci.lo is not None
                              and ci.hi is not None else "")
        text += " (too short)" if case.stream.enough is False else ""
    else:
        text = fmt(v, row.spec.format)
    text = rich_escape(text)
    if row.best == i:
        return f"[bold green]{text}[/]"
    return f"{text} ≈" if row.not_significant[i] else text


def _side_table(title: str, cases: Sequence[RunCase], rows: Sequence[SideRow]) -> Table:
    t = Table(title=term(title, TEXT_MAX) or None, title_justify="left")
    t.add_column("metric")
    for c in cases:
        t.add_column(term(views.case_name(c)), justify="right")
    for r in rows:
        t.add_row(rich_escape(r.spec.label) + (" ↑" if r.spec.higher_is_better else " ↓"),
                  *[_side_cell(r, i, c) for i, c in enumerate(cases)])
    return t


def sweep_table(sweep: Sequence[RunCase], cases: Sequence[RunCase]) -> Table:
    """The density sweep of ``gcbench compare --sweep``: bytes per step and delivered update of each point."""
    t = Table(title="density sweep — bytes vs delivered update (for 'at equal delivered update')", title_justify="left")
    for h in ("case", "density", "bytes / step", "delivered update"):
        t.add_column(h, justify="left" if h == "case" else "right")
    for c in sorted([*[c for c in cases if c.ok], *sweep], key=lambda c: (c.compressor or "", -((c.params or {}).get("density") or 0))):
        if not c.ok:
            t.add_row(Label(views.case_name(c)), "", "[red]failed[/]", "")
            continue
        d = c.stream.delivered if c.stream else None
        short = " (too short)" if c.stream is not None and c.stream.enough is False else ""
        t.add_row(Label(views.case_name(c)), fmt((c.params or {}).get("density"), "g"), fmt(bytes_per_step(c), "int"),
                  fmt(d, "g") + short)
    return t


def head_to_head_output(cases: Sequence[RunCase], granularity: str, sweep: Sequence[RunCase] | None = None,
                        closed: ClosedEvidence | None = None) -> list[RenderableType]:
    """What ``gcbench compare`` prints: the verdict of each pair, the recommendation (held to ``closed``, a convergence
    file's outcomes, where given), the main table on the suite's common reference, the one-shot fidelity (each case
    against its own reference), the density sweep when one ran, failures, notes, phases."""
    src = cases[0].source_label if cases else ""
    first = next((c for c in cases if c.ok), None)
    workers = "?" if first is None or first.workers is None else first.workers
    steps = "?" if first is None or first.steps is None else first.steps
    reference = first.stream.reference if first is not None and first.stream and first.stream.reference else None
    src = clip(src)
    pairs = verdicts(cases, sweep)
    out: list[RenderableType] = [Text(f"verdict — {src}", style="bold underline"), *verdict_output(pairs)]
    spread = process_spread_note(cases, pairs)
    if spread:
        out.append(Text(f"({spread})"))
    out += recommendation_output(cases, closed)
    if sweep is None:
        out.append(Text("(no statement at equal delivered update: that needs a density sweep, --sweep)"))
    against = baseline_bytes_line(cases)
    if against:
        out.append(Text(against))
    main = head_to_head(cases, MAIN_METRICS)
    # the heading is a line of its own: as a table title it wraps at the width of a narrow two-case table
    out.append(Text(f"gcbench compare — {src}, {workers} workers × {steps} steps, granularity {granularity} — "
                    f"reference: {reference or 'none recorded'}", style="bold"))
    out.append(_side_table("", cases, main))
    out.append(Text(COMPARE_STREAM_NOTE))
    refs = fidelity_references(cases)
    one_shot = _side_table("one-shot fidelity — each against its own reference", cases, head_to_head(cases, FIDELITY_METRICS))
    one_shot.add_row("reference", *[term(r or "—") for r in refs])
    out += [one_shot, Text(ONE_SHOT_NOTE)]
    if sweep is not None:
        out.append(sweep_table(sweep, cases))
    out += [plan_table(pt) for pt in views.plan_tables(cases)]
    failed = [c for c in (*cases, *(sweep or ())) if not c.ok]
    out += [Text.from_markup(f"[red]{term(c.label)} failed:[/] {term(c.error_text, TEXT_MAX)}") for c in failed]
    out.append(Text("green = best in row, only where a best means something (no flagged timing, no too-short stream, one "
                    "reference for the one-shot rows); ≈ = timing not significantly different from the best (as the verdict "
                    f"judges it: the 95% CI of the ratio covers 1); {DAGGER} = reconstructed definition; "
                    + TIMING_NOTE.replace(X_COPY_HEADER, "compress ×copy", 1)))
    phases = phase_table(cases, "gcbench compare")
    if phases is not None:
        out += [phases, Text(PHASE_NOTE)]
    return out


def phase_table(cases: Sequence[RunCase], title: str) -> Table | None:
    """The per-phase table of one source (terminal), or ``None`` if no case of it has phases."""
    windows = source_windows(cases)
    if not windows:
        return None
    cols = views.phase_columns(windows)
    t = Table(title=f"{term(title, TEXT_MAX)} — per phase: " + ", ".join(rich_escape(w.text()) for w in windows), title_justify="left")
    t.add_column("case", no_wrap=True)
    # a terminal is narrow: each window's ratio and body-only ratio share one cell, "ratio (body)"
    merged = [i for i, c in enumerate(cols) if c[0] == "body_ratio"]
    for i, (_, header, _, _) in enumerate(cols):
        if i in merged:
            continue
        t.add_column(rich_escape(header + (" (body)" if i + 1 in merged else "")), justify="right")
    for r in phase_rows(cases, windows):
        cells = [fmt(v, c[2]) for v, c in zip(views.phase_values(r, windows), cols, strict=True)]
        row = [f"{cells[i]} ({cells[i + 1]})" if i + 1 in merged else cells[i] for i in range(len(cells)) if i not in merged]
        t.add_row(term(views.case_name(r.case)), *row)
    return t


def _layer_cell(v: float | None, metric: LayerMetric) -> str:
    text = rich_escape(fmt(v, metric.kind))
    return f"[red]{text}[/]" if v is not None and metric.bad is not None and v >= metric.bad else text


def layer_tables(cases: Sequence[RunCase], title: str, width: int = 160) -> list[Table]:
    """The per-layer tables of one source's cases: per metric of :data:`LAYER_METRICS`, pages of cases that fit ``width``."""
    ok = [c for c in cases if c.ok and c.layers]
    units = views.layer_units(ok)
    if not units:
        return []
    name_w = max(len(clip(n)) for n, _ in units)
    fixed = name_w + len(f"{max((n or 0) for _, n in units):,}") + 7
    pages = views.layer_pages(ok, width, fixed)
    tables = []
    for metric in LAYER_METRICS:
        for i, page in enumerate(pages):
            part = f" (cases {i + 1}/{len(pages)})" if len(pages) > 1 else ""
            t = Table(title=f"{term(title, TEXT_MAX)} — per layer: {metric.field}{part}", title_justify="left",
                      caption=rich_escape(metric.title), caption_justify="left")
            t.add_column("layer", no_wrap=True)
            t.add_column("elements", justify="right", no_wrap=True)
            for c in page:
                t.add_column(term(views.case_name(c)), justify="right", no_wrap=True)
            for name, numel in units:
                t.add_row(term(name), fmt(numel, "int"), *[_layer_cell(views.layer_value(c, name, metric), metric) for c in page])
            t.add_section()
            t.add_row("whole model", fmt(sum(n or 0 for _, n in units), "int"),
                      *[_layer_cell(c.metric(metric.metric), metric) for c in page])
            tables.append(t)
    return tables


def layers_report(runs: Sequence[LoadedRun], width: int = 160) -> list[RenderableType | str]:
    """What ``gcbench report --layers`` prints: the per-layer tables of every source of every run, then their note.

    Raises :class:`ResultsError` when no case of these runs recorded per-layer rows (train and bench
    files never do).
    """
    out: list[RenderableType | str] = []
    for run in runs:
        if run.kind in ("train", "bench", "converge"):  # no per-layer rows
            continue
        for src, group in views.by_source(run.cases).items():
            out += layer_tables(group, f"{clip(run.run_id)} — {clip(src)}", width)
    if not out:
        raise ResultsError("no per-layer rows in these results (only run and compare files record them)")
    return [*out, LAYER_NOTE]


def _failure_caption(names_errors: Sequence[tuple[str, str]]) -> str:
    return "\n".join(f"[red]{term(n)} failed:[/] {term(e, TEXT_MAX)}" for n, e in names_errors)


def train_table(cases: Sequence[TrainCase], title: str) -> Table:
    """Train cases: one row per compressor (the columns of ``gcbench train``), notes and failures under it."""
    t = _cases_table(title, cases, TRAIN_COLUMNS, with_errors=False, first="compressor", escape=False)
    errors = [(views.case_name(c), c.error_text) for c in cases if not c.ok]
    lines = [_failure_caption(errors)] if errors else []
    lines += [f"[yellow]note:[/] {rich_escape(n)}" for n in views.train_notes(cases)]
    lines.append(rich_escape(TRAIN_FOOTNOTE))
    t.caption = "\n".join(lines)
    t.caption_justify = "left"
    return t


_FLAGS_IN_CELL = re.compile(r" \(([^()]*)\)$")


def _marked(text: str) -> str:
    """A cell's bracketed flags as one mark, ``*``: which flags and why are listed under the table (keeps it in 120 columns)."""
    return _FLAGS_IN_CELL.sub("*", text)


def bench_table(run: LoadedRun) -> Table:
    """A bench file: the target table of ``gcbench bench`` (one row per compressor and size).

    Each compressor's target is written once under the table, not in a column of every row: the column wrapped onto
    eight lines at 120 columns.  Flagged timings carry ``*``; the lines under the table say which flag and why.
    """
    t = Table(title=f"{term(run.run_id)} — kernel benchmark: {term(views.bench_description(run), TEXT_MAX)}", title_justify="left")
    t.add_column("compressor", no_wrap=True)
    for col in BENCH_COLUMNS:
        t.add_column(col.header, justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    errors = []
    targets: dict[str, str] = {}
    for c in run.cases:
        if not c.ok:
            t.add_row(term(views.bench_name(c)), fmt(c.metric("numel"), "int"), "[red]failed[/]", *[""] * (len(BENCH_COLUMNS) - 2),
                      "[red]error[/]")
            errors.append((views.bench_name(c), c.error_text))
            continue
        target, mark = views.bench_target(c)
        targets.setdefault(str(c.name), target)
        style = {"pass": "green", "short": "red", "flagged": "yellow"}.get(mark)
        change = "" if c.baseline_change is None else f" ({100 * c.baseline_change:+.0f}% vs base)"  # `bench --baseline`
        cells = [size_text(c.numel) if col.key == "numel" else _marked(col.text(c)) for col in BENCH_COLUMNS]  # 1M, not 1,000,000
        t.add_row(term(views.bench_name(c)), *cells,
                  (f"[{style}]{mark}[/]" if style else mark) + change)
    target_line = "targets: " + "; ".join(f"{name} {text}" for name, text in targets.items() if text and text != "—")
    t.caption = "\n".join(([_failure_caption(errors)] if errors else []) + [rich_escape(target_line)] * bool(targets)
                          + ["* = a flagged timing (which flag and why: the lines below)", rich_escape(BENCH_FOOTNOTE)]
                          + views.bench_roofline(run.cases)
                          + [rich_escape(line) for line in [*views.bench_processes_lines(run.cases), *views.flag_reason_lines(run.cases)]])
    t.caption_justify = "left"
    return t


RUN_FACT_KEYS = ("run", "kind", "suite", "date", "status", "cases", "machine", "gcbench", "commit")


def runs_table(runs: Sequence[LoadedRun]) -> Table:
    t = Table(title="runs", title_justify="left")
    for col in RUN_FACT_KEYS:
        t.add_column(col)
    for r in runs:
        f = run_facts(r)
        t.add_row(*[term(f[k]) for k in RUN_FACT_KEYS])
    return t


_VERDICT_STYLE = {BETTER: "green", FIXED: "green", WORSE: "bold red", NEW_FAILURE: "bold red", NOT_COMPARABLE: "yellow"}


def comparison_table(cmp: Comparison, all_rows: bool = False) -> Table:
    t = Table(title=f"{term(cmp.new_id)} vs baseline {term(cmp.baseline_id)} "
                    f"(threshold {cmp.threshold:.0%}, α = {cmp.alpha:g})", title_justify="left")
    for h in COMPARE_HEADERS:
        t.add_column(h, justify="right" if h in ("baseline", "new", "change", "p") else "left")
    for r in views.visible_rows(cmp, all_rows):
        cells = [term(c, NAME_MAX if i == 0 else TEXT_MAX) for i, c in enumerate(views.row_cells(r))]
        style = _VERDICT_STYLE.get(r.verdict)
        if style:
            cells[6] = f"[{style}]{cells[6]}[/]"
        t.add_row(*cells)
    return t


def claims_table(results: Sequence[ClaimResult]) -> Table:
    t = Table(title="paper claims", title_justify="left")
    for h in ("paper", "compressor", "model / data", "claim", "gcbench"):
        t.add_column(h, overflow="fold")
    for res in results:
        c = res.claim
        t.add_row(term(c.paper), term(c.compressor), term(f"{c.model} / {c.data}"),
                  term(f"{c.value_text()} {c.metric} ({c.source})", TEXT_MAX), term(views.measured_text(res), TEXT_MAX))
    return t


def terminal_report(inp: ReportInput, claims: Sequence[ClaimResult], claims_missing: str | None,
                    all_metrics: bool = False) -> list[RenderableType | str]:
    """The terminal report, in print order (strings are plain text lines, not markup)."""
    if inp.comparison is not None:
        return [comparison_table(inp.comparison, all_metrics), *(f"note: {n}" for n in inp.comparison.notes),
                views.counts_text(inp.comparison)]
    out: list[RenderableType | str] = [runs_table(inp.loaded)]
    for r in inp.loaded:
        out.extend(summary_tables(r))
    measured = [c for c in claims if c.status.startswith("measured")]
    if measured:
        out.append(claims_table(measured))
    if claims:
        out.append(f"{len(claims) - len(measured)}{' other' if measured else ''} paper claim(s) not measured by these runs "
                   "(see --md or --html).")
    elif claims_missing:
        out.append(claims_missing)
    if any(r.kind not in ("train", "bench", "converge") for r in inp.loaded):  # these tables carry their own notes
        out.append(LEGEND)
    return out
