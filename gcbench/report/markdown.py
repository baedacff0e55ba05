"""The Markdown renderer: the report as GitHub-flavoured Markdown (``gcbench report --md``), for a paper draft or a pull request.

It lays out the views of :mod:`gcbench.report.views` over the columns of :mod:`gcbench.report.columns`;
every user-supplied name is escaped for Markdown (:func:`md_escape`), and names are kept whole.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gcbench.core.errors import ResultsError
from gcbench.report import views
from gcbench.report.collectives_table import failure, grid, sweep_of
from gcbench.report.columns import (
    BENCH_COLUMNS,
    BENCH_TEXT_HEADERS,
    COMPARE_HEADERS,
    LAYER_METRICS,
    ONESHOT_COLUMNS,
    SUMMARY_COLUMNS,
    TRAIN_COLUMNS,
    WORKER_HEADERS,
    Column,
)
from gcbench.report.load import LoadedRun, run_facts
from gcbench.report.notes import BENCH_FOOTNOTE, FOOTNOTE, LAYER_NOTE, PHASE_NOTE, TRAIN_FOOTNOTE, WORKER_NOTE
from gcbench.report.numbers import fmt
from gcbench.results.baselines import ClaimResult
from gcbench.results.judge import Comparison
from gcbench.results.phases import phase_rows, source_windows, worker_traffic
from gcbench.results.run_record import RunCase
from gcbench.results.train_record import TrainCase


def markdown_phases(cases: Sequence[RunCase]) -> str:
    """The per-phase table of one source as Markdown ('' if no case of it has phases)."""
    windows = source_windows(cases)
    if not windows:
        return ""
    cols = views.phase_columns(windows)
    rows = [[md_escape(views.case_name(r.case)), *[fmt(v, c[2]) for v, c in zip(views.phase_values(r, windows), cols, strict=True)]]
            for r in phase_rows(cases, windows)]
    head = "Per phase: " + ", ".join(md_escape(w.text()) for w in windows) + "."
    parts = [head, "", md_table(["case", *[md_escape(c[1]) for c in cols]], rows, [False] + [True] * len(cols)), "",
             md_escape(PHASE_NOTE), ""]
    workers = worker_traffic(cases)
    if workers:
        rows = [[md_escape(t) for t in views.worker_cells(wt)] for wt in workers]
        parts += [md_table(WORKER_HEADERS, rows, [False, False, True, True]), "", md_escape(WORKER_NOTE), ""]
    return "\n".join(parts)


def markdown_layers(runs: Sequence[LoadedRun], per_table: int = 10) -> str:
    """The per-layer tables as Markdown: per run, source and metric, ``per_table`` cases per table ('' when none)."""
    parts = []
    for run in runs:
        if run.kind in ("train", "bench", "converge"):  # no per-layer rows
            continue
        for src, group in views.by_source(run.cases).items():
            ok = [c for c in group if c.ok and c.layers]
            units = views.layer_units(ok)
            if not units:
                continue
            parts += [f"### {md_escape(run.run_id)} — {md_escape(src)}: per layer", ""]
            for metric in LAYER_METRICS:
                parts += [md_escape(metric.title) + ".", ""]
                for i in range(0, len(ok), per_table):
                    page = ok[i:i + per_table]
                    rows = [[md_escape(name), fmt(numel, "int"), *[fmt(views.layer_value(c, name, metric), metric.kind) for c in page]]
                            for name, numel in units]
                    rows.append(["**whole model**", fmt(sum(n or 0 for _, n in units), "int"),
                                 *[fmt(c.metric(metric.metric), metric.kind) for c in page]])
                    parts += [md_table(["layer", "elements", *[md_escape(views.case_name(c)) for c in page]], rows,
                                       [False] + [True] * (len(page) + 1)), ""]
    return "\n".join([*parts, md_escape(LAYER_NOTE), ""]) if parts else ""


def markdown_layers_report(runs: Sequence[LoadedRun]) -> str:
    """What ``gcbench report --layers --md`` writes; :class:`ResultsError` when no case recorded per-layer rows."""
    body = markdown_layers(runs)
    if not body:
        raise ResultsError("no per-layer rows in these results (only run and compare files record them)")
    return "\n".join(["# gcbench report — per layer", "", body])


# "<" and ">" become entities: every Markdown renderer shows them as text (a backslash escape of "<" is not one in
# Python-Markdown, which would pass "\\<img onerror=...>" on as HTML).  "&" is escaped only where it would start an
# entity: "Aji & Heafield" reads as written (it read "Aji &amp; Heafield" in the raw file)
_MD_SPECIALS = str.maketrans({"\\": "\\\\", "|": "\\|", "*": "\\*", "_": "\\_", "`": "\\`", "[": "\\[", "]": "\\]",
                              "<": "&lt;", ">": "&gt;", "\n": " ", "\r": " "})
#: an ampersand that would start an entity ("&lt;", "&#60;") in the text before escaping
_ENTITY_START = re.compile(r"&(?=#?\w+;)")


def md_escape(text: str) -> str:
    """Text safe inside a Markdown table cell: pipes, emphasis, links, raw HTML and entities neutralised."""
    return _ENTITY_START.sub("&amp;", str(text)).translate(_MD_SPECIALS)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None) -> str:
    """A GitHub-flavoured Markdown table; cells must already be escaped."""
    right = right or [False] * len(headers)
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---:" if r else "---" for r in right) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_train(run: LoadedRun) -> str:
    """A train file as Markdown: its settings, one row per compressor, failures and notes."""
    f = run_facts(run)
    parts = [f"## Training run {md_escape(run.run_id)}", "",
             f"{md_escape(views.train_description(run))}; {md_escape(f['date'])}, {md_escape(f['cases'])}; machine "
             f"{md_escape(f['machine'])}; gcbench {md_escape(f['gcbench'])}, commit {md_escape(f['commit'])}, "
             f"torch {md_escape(f['torch'])}.", ""]
    parts += [_md_cases(run.cases, TRAIN_COLUMNS, "compressor"), ""]
    notes = views.train_notes(run)
    if notes:
        parts += [*(f"* {md_escape(n)}" for n in notes), ""]
    return "\n".join([*parts, md_escape(TRAIN_FOOTNOTE), ""])


def markdown_bench(run: LoadedRun) -> str:
    """A bench file as Markdown: the target table."""
    f = run_facts(run)
    parts = [f"## Kernel benchmark {md_escape(run.run_id)}", "",
             f"{md_escape(views.bench_description(run))}; {md_escape(f['date'])}, {md_escape(f['cases'])}; "
             f"gcbench {md_escape(f['gcbench'])}, commit {md_escape(f['commit'])}, torch {md_escape(f['torch'])}.", ""]
    rows = []
    for c in run.cases:
        if not c.ok:
            rows.append([md_escape(views.bench_name(c)), fmt(c.metric("numel"), "int"), f"failed: {md_escape(c.error_text)}",
                         *[""] * (len(BENCH_COLUMNS) - 2), "", "error"])
        else:
            target, mark = views.bench_target(c)
            cells = [md_escape(col.text(c)) for col in BENCH_COLUMNS]
            rows.append([md_escape(views.bench_name(c)), *cells, md_escape(target), md_escape(mark)])
    headers = ["compressor", *[md_escape(c.header) for c in BENCH_COLUMNS], *BENCH_TEXT_HEADERS]
    parts += [md_table(headers, rows, [False] + [True] * len(BENCH_COLUMNS) + [False, False]), ""]
    reasons = [f"- {md_escape(line)}" for line in views.flag_reason_lines(run.cases)]
    roofline = [md_escape(line) for line in views.bench_roofline(run.cases)]
    procs = views.bench_processes_lines(run.cases)
    roofline += ["\n".join([md_escape(procs[0]), "", *(f"- {md_escape(line.strip())}" for line in procs[1:])])] if procs else []
    return "\n".join([*parts, md_escape(BENCH_FOOTNOTE), *(x for line in roofline for x in ("", line)),
                      *(["", *reasons] if reasons else []), ""])


def markdown_summary(run: LoadedRun) -> str:
    if run.kind == "train":
        return markdown_train(run)
    if run.kind == "bench":
        return markdown_bench(run)
    if run.kind == "converge":
        from gcbench.report.convergence import markdown_convergence

        return markdown_convergence(run, md_escape, md_table, run_facts(run))
    f = run_facts(run)
    parts = [f"## Run {md_escape(run.run_id)}", "",
             f"Suite {md_escape(f['suite'])}, {md_escape(f['date'])}, {md_escape(f['cases'])}; machine {md_escape(f['machine'])}, "
             f"device {md_escape(f['device'])}; gcbench {md_escape(f['gcbench'])}, commit {md_escape(f['commit'])}, "
             f"torch {md_escape(f['torch'])}.", ""]
    for src, cases in views.by_source(run.cases).items():
        parts += [f"### {md_escape(src)}", "", md_escape(views.stream_caption(cases)), "", _md_cases(cases, SUMMARY_COLUMNS), ""]
        parts += [f"**{md_escape(line)}**" if i == 0 else f"* {md_escape(line)}" for i, line in
                  enumerate(views.source_answers(run.kind, cases))] + [""]
        if any(c.ok and c.fidelity is not None for c in cases):
            parts += ["One-shot fidelity (own reference): " + md_escape(views.oneshot_caption(cases).removeprefix("one shot: ")), "",
                      _md_cases(cases, ONESHOT_COLUMNS), ""]
        phases = markdown_phases(cases)
        if phases:
            parts.append(phases)
        for pt in views.plan_tables(cases):
            parts += [f"**{md_escape(pt.title)}**", "", md_table(views.PLAN_HEADERS, [[md_escape(x) for x in r] for r in pt.rows],
                                                                 views.PLAN_RIGHT), "", md_escape(pt.note), ""]
    sweep = sweep_of(run.data)
    if sweep is not None:
        parts.append(markdown_collectives(sweep))
    return "\n".join(parts)


def markdown_collectives(sweep: Mapping[str, Any]) -> str:
    """A results file's sharded-collectives sweep: the error table, the bytes table and the cells not run."""
    parts = ["### Sharded collectives: error and bytes as N grows", ""]
    bad = failure(sweep)
    if bad is not None:
        return "\n".join([*parts, md_escape(bad), ""])
    g = grid(sweep)
    headers = ["compressor", "scheme/acc", *(f"N={n}" for n in g.workers)]
    right = [False, False] + [True] * len(g.workers)
    for title, rows in ((g.error_title, g.error_rows), (g.bytes_title, g.bytes_rows)):
        table = md_table(headers, [[md_escape(c) for c in r] for r in rows], right)
        parts += [md_escape(title[0].upper() + title[1:]) + ":", "", table, ""]
    parts += [f"* {md_escape(line)}" for line in g.skipped]
    return "\n".join([*parts, ""])


def _md_cases(cases: Sequence[RunCase | TrainCase], columns: Sequence[Column], first: str = "case") -> str:
    """One Markdown row per case over ``columns`` (a failed case: its error in the first column)."""
    rows = [[md_escape(r.name), *([md_escape(t) for t in r.texts] if r.ok else
                                   [f"failed: {md_escape(r.error)}", *[""] * (len(columns) - 1)])]
            for r in views.case_rows(cases, columns)]
    return md_table([first, *[md_escape(c.header) for c in columns]], rows, [False] + [True] * len(columns))


def markdown_comparison(cmp: Comparison, all_rows: bool = False) -> str:
    rows = [[md_escape(c) for c in views.row_cells(r)] for r in views.visible_rows(cmp, all_rows)]
    parts = [f"## {md_escape(cmp.new_id)} vs baseline {md_escape(cmp.baseline_id)}", "",
             f"Threshold {cmp.threshold:.0%}, significance α = {cmp.alpha:g} (Mann–Whitney on raw samples where they exist). "
             f"{md_escape(views.counts_text(cmp))}.", ""]
    parts += [f"* {md_escape(n)}" for n in cmp.notes]
    if cmp.notes:
        parts.append("")
    if rows:
        parts += [md_table(COMPARE_HEADERS, rows, [h in ("baseline", "new", "change", "p") for h in COMPARE_HEADERS]), ""]
    elif cmp.rows:
        parts += ["No metric changed significantly.", ""]
    return "\n".join(parts)


def markdown_claims(results: Sequence[ClaimResult]) -> str:
    rows = [[md_escape(r.claim.paper), md_escape(r.claim.compressor), md_escape(f"{r.claim.model} / {r.claim.data}"),
             md_escape(f"{r.claim.value_text()} {r.claim.metric}"), md_escape(r.claim.source), md_escape(views.measured_text(r))]
            for r in results]
    return "\n".join(["## Paper claims", "", md_table(("paper", "compressor", "model / data", "claim", "source", "gcbench"), rows), ""])


def markdown_report(runs: Sequence[LoadedRun], claims: Sequence[ClaimResult] | None = None,
                    comparison: Comparison | None = None, all_rows: bool = False) -> str:
    """The whole report as GitHub-flavoured Markdown (for a paper draft or a pull request).

    ``runs`` each get their tables; a comparison report passes only the new run (the baseline's
    values are in the comparison rows).
    """
    parts = ["# gcbench report", ""]
    if comparison is not None:
        parts.append(markdown_comparison(comparison, all_rows))
    for r in runs:
        parts.append(markdown_summary(r))
    if claims:
        parts.append(markdown_claims(claims))
    if not runs or any(r.kind not in ("train", "bench", "converge") for r in runs):  # these sections carry their own notes
        parts += [md_escape(FOOTNOTE), ""]
    return "\n".join(parts)
