"""The HTML page's context: every results file's tables, plots and notes as the template's values, and the rendering.

Tables fit the window: a source's summary table holds the columns that decide (ratio, delivered,
step error, comp×copy); the rest, and the per-layer table, are folded in ``<details>``.  Kernel time
over copy time has one name, ×copy (the shared columns of :mod:`gcbench.report.columns`).  The rows
come from :func:`gcbench.report.views.case_rows`, so a failed case is decided where every other
renderer decides it.  The page is the jinja2 template ``templates/report.html.j2``, shipped as package
data and rendered with autoescaping on, so suite labels, parameters and error messages cannot inject
markup.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import jinja2

import gcbench
from gcbench.report.collectives_table import sweep_of
from gcbench.report.columns import (
    BENCH_COLUMNS,
    DETAIL_COLUMNS,
    ONESHOT_COLUMNS,
    ONESHOT_DETAIL_COLUMNS,
    SUMMARY_COLUMNS,
    TRAIN_COLUMNS,
    TRAIN_DETAIL_COLUMNS,
    WORKER_HEADERS,
    Column,
)
from gcbench.report.html_collectives_plot import collectives_context
from gcbench.report.html_plotkit import cases_that_ran, finite, page_text
from gcbench.report.html_plots import oneshot_plots, source_plots
from gcbench.report.html_train_bench_plots import (
    bench_size_point,
    plot_bench_x_copy,
    plot_size_scaling,
    plot_time_to_target,
    plot_train_curves,
    run_size_point,
)
from gcbench.report.load import LoadedRun, run_facts
from gcbench.report.notes import BENCH_FOOTNOTE, DAGGER, FOOTNOTE, PHASE_NOTE, TRAIN_FOOTNOTE, WORKER_NOTE, X_COPY_HEADER
from gcbench.report.numbers import fmt
from gcbench.report.text import clip
from gcbench.report.views import (
    PLAN_HEADERS,
    PLAN_RIGHT,
    CaseRow,
    bench_description,
    bench_name,
    bench_processes_lines,
    bench_roofline,
    bench_target,
    by_source,
    case_name,
    case_rows,
    counts_text,
    flag_reason_lines,
    is_reconstructed,
    measured_text,
    oneshot_caption,
    oneshot_reference,
    params_text,
    phase_columns,
    phase_values,
    plan_tables,
    row_cells,
    source_answers,
    stream_caption,
    train_description,
    train_notes,
    worker_cells,
)
from gcbench.results.baselines import ClaimResult
from gcbench.results.judge import Comparison
from gcbench.results.metrics import METRICS
from gcbench.results.phases import phase_rows, source_windows, worker_traffic
from gcbench.results.run_record import RunCase
from gcbench.results.train_record import TrainCase

#: the page's template, shipped as package data (``[tool.setuptools.package-data]`` in pyproject.toml)
TEMPLATE_FILE = "templates/report.html.j2"


def page_template() -> str:
    """The text of the page's jinja2 template (package data, read with :mod:`importlib.resources`)."""
    return resources.files("gcbench.report").joinpath(TEMPLATE_FILE).read_text(encoding="utf-8")


def _phase_context(cases: Sequence[RunCase]) -> dict[str, Any] | None:
    """The per-phase table of a source (every case over the phased case's windows), or ``None``."""
    windows = source_windows(cases)
    if not windows:
        return None
    cols = phase_columns(windows, detail=True)
    rows = []
    for r in phase_rows(cases, windows):
        vals = phase_values(r, windows, detail=True)
        rows.append({"name": case_name(r.case), "recon": is_reconstructed(r.case),
                     "cells": [{"text": fmt(v, c[2]), "v": "" if v is None else repr(float(v))} for v, c in zip(vals, cols, strict=True)]})
    workers = [{"recon": is_reconstructed(wt.case), "cells": worker_cells(wt)} for wt in worker_traffic(cases)]
    return {"windows": ", ".join(w.text() for w in windows), "headers": [{"header": c[1], "help": c[3]} for c in cols],
            "rows": rows, "note": PHASE_NOTE, "workers": workers, "worker_headers": WORKER_HEADERS, "worker_note": WORKER_NOTE}


def _headers(cols: Sequence[Column]) -> list[dict[str, Any]]:
    return [{"header": c.titled, "help": c.help, "left": False} for c in cols]


def _case_rows(cases: Sequence[RunCase], cols: Sequence[Column], reference: bool = False) -> list[dict[str, Any]]:
    """Run cases as table rows over ``cols`` (numbers sort by value); ``reference``: each one's own one-shot reference last."""
    out = []
    for r in case_rows(cases, cols):
        c = r.case
        cells = _num_cells(cols, r)
        if r.ok and reference:
            cells.append({"text": oneshot_reference(c), "v": "", "cls": "wrap"})
        out.append({
            "name": r.name,
            "compressor": str(c.compressor or "?"),
            "version": "?" if c.version is None else str(c.version),
            "params": params_text(c),
            "reconstructed": is_reconstructed(c),
            "ok": r.ok,
            "error": r.error,
            "cells": cells,
        })
    return out


#: the summary table's columns, the ones that decide: bytes, fidelity on the common reference, kernel time against a copy
SUMMARY_KEYS = ("ratio", "delivered", "step_err", "comp_copy")


HTML_SUMMARY_COLUMNS = tuple(c for c in SUMMARY_COLUMNS if c.key in SUMMARY_KEYS)


#: every other column of the main view, in a folded detail table under the summary
HTML_DETAIL_COLUMNS = (*(c for c in SUMMARY_COLUMNS if c.key not in SUMMARY_KEYS), *DETAIL_COLUMNS)


HTML_ONESHOT_COLUMNS = (*ONESHOT_COLUMNS, *ONESHOT_DETAIL_COLUMNS)


#: the per-layer table: one row per case × unit
LAYER_HEADERS = (("case", "the case", True), ("#", "unit index in model order", False), ("unit", "layer (or bucket) name", True),
                 ("elements", "elements of the unit", False), ("ratio ↑", "dense float32 bytes / wire bytes of the unit", False),
                 ("bits/el ↓", "wire bits per element of the unit", False),
                 ("q ↓", "one-shot relative MSE ‖C(x)−x‖²/‖x‖² of the unit, against the case's own reference", False))


def _short(v: float | None, digits: int = 4) -> str:
    """A number as the per-layer table writes it: plain digits a browser's parseFloat sorts by (no units, no separators)."""
    return "" if v is None else f"{v:.{digits}g}"


def layer_rows(cases: Sequence[RunCase]) -> list[list[str]]:
    """The per-layer table of a source: ``[case, index, unit, elements, ratio, bits/el, q]`` per case × unit (text cells)."""
    rows = []
    for c in cases_that_ran(cases):
        for i, u in enumerate(c.layers or []):
            numel, wire = finite(u.numel), finite(u.wire_bytes)
            bits = 8 * wire / numel if numel and wire is not None else None
            rows.append([case_name(c), str(i), str(u.name or ""), "" if numel is None else str(int(numel)), _short(finite(u.ratio)),
                         _short(bits, 3), _short(finite(u.q), 3)])
    return rows


def _run_context(i: int, run: LoadedRun) -> dict[str, Any]:
    sources = []
    for j, (src, cases) in enumerate(by_source(run.cases).items()):
        main = {"headers": _headers(HTML_SUMMARY_COLUMNS), "rows": _case_rows(cases, HTML_SUMMARY_COLUMNS),
                "caption": stream_caption(cases, clip), "compact": True}
        detail = {"headers": _headers(HTML_DETAIL_COLUMNS), "rows": _case_rows(cases, HTML_DETAIL_COLUMNS),
                  "compact": False}
        oneshot = None
        if any(c.ok and c.fidelity is not None for c in cases):
            headers = [*_headers(HTML_ONESHOT_COLUMNS), {"header": "reference", "help": "the case's own one-shot reference", "left": True}]
            oneshot = {"headers": headers, "rows": _case_rows(cases, HTML_ONESHOT_COLUMNS, reference=True),
                       "caption": oneshot_caption(cases, label=clip), "plots": oneshot_plots(cases, src), "compact": True}
        sources.append({"anchor": f"run{i}-src{j}", "name": src, "main": main, "detail": detail, "oneshot": oneshot,
                        "layers": layer_rows(cases), "layer_headers": LAYER_HEADERS,
                        "plots": source_plots(cases, src), "phases": _phase_context(cases),
                        "plans": [{"title": t.title, "rows": t.rows, "note": t.note} for t in plan_tables(cases)],
                        "plan_headers": [{"header": h, "left": not r} for h, r in zip(PLAN_HEADERS, PLAN_RIGHT, strict=True)],
                        "workers": _first(cases, "workers"), "steps": _first(cases, "steps"),
                        "granularity": _first(cases, "granularity"), "answers": source_answers(run.kind, cases)})
    size_plot = plot_size_scaling([run_size_point(c) for c in run.cases if c.ok], f"throughput vs tensor size — {run.run_id}")
    sweep = sweep_of(run.data)
    return {"anchor": f"run{i}", "facts": run_facts(run), "sources": sources, "size_plot": size_plot,
            "any_reconstructed": any(is_reconstructed(c) for c in run.cases),
            "collectives": collectives_context(sweep, run.run_id) if sweep is not None else None}


def _table(first: str, cols: Sequence[Column], text_headers: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    headers = [{"header": c.titled, "help": c.help, "left": False} for c in cols]
    headers += [{"header": h, "help": help_, "left": True} for h, help_ in text_headers]
    return {"first": first, "headers": headers, "rows": []}


def _num_cells(cols: Sequence[Column], row: CaseRow) -> list[dict[str, Any]]:
    """The numeric cells of a row that ran (none for a failed one): the text shown, the value the table sorts by."""
    return [{"text": text, "v": "" if v is None else repr(float(v)), "cls": ""}
            for text, v in zip(row.texts, row.values(cols), strict=True)]


def _train_rows(table: dict[str, Any], cases: Sequence[TrainCase], cols: Sequence[Column], params: bool) -> dict[str, Any]:
    """Fill a train table's rows over ``cols`` (and the parameters last when ``params``)."""
    for r in case_rows(cases, cols):
        if r.ok:
            cells = [*_num_cells(cols, r), *([{"text": params_text(r.case), "v": "", "cls": "params"}] if params else [])]
            table["rows"].append({"ok": True, "name": r.name, "recon": is_reconstructed(r.case), "cells": cells})
        else:
            table["rows"].append({"ok": False, "name": r.name, "recon": is_reconstructed(r.case), "lead": [],
                                  "colspan": len(cols) + params, "error": r.error})
    return table


def _train_context(i: int, run: LoadedRun) -> dict[str, Any]:
    # the accuracy, time and traffic columns in view; the rest folded under them (the page stays within 1,400 px)
    table = _train_rows(_table("compressor", TRAIN_COLUMNS), run.cases, TRAIN_COLUMNS, params=False)
    detail = _train_rows(_table("compressor", TRAIN_DETAIL_COLUMNS, (("params", "the compressor's parameters"),)), run.cases,
                         TRAIN_DETAIL_COLUMNS, params=True)
    plots = [plot_train_curves(run.cases, "test_accuracy", f"held-out accuracy per epoch — {run.run_id}"),
             plot_train_curves(run.cases, "test_loss", f"held-out loss per epoch — {run.run_id}"),
             plot_time_to_target(run.cases, f"time to target — {run.run_id}")]
    return {"kind": "train", "anchor": f"run{i}", "facts": run_facts(run), "description": train_description(run), "table": table,
            "detail": detail, "plots": [p for p in plots if p is not None], "notes": train_notes(run), "footnote": TRAIN_FOOTNOTE,
            "any_reconstructed": any(is_reconstructed(c) for c in run.cases)}


def _bench_context(i: int, run: LoadedRun) -> dict[str, Any]:
    table = _table("compressor", BENCH_COLUMNS, (("target", "the fast-kernels issue's target; pass = within every limit"),
                                                 ("verdict", "pass, short (a limit missed), — (no target) or error")))
    for r in case_rows(run.cases, BENCH_COLUMNS, bench_name):
        if r.ok:
            target, mark = bench_target(r.case)
            cells = [*_num_cells(BENCH_COLUMNS, r), {"text": target, "v": "", "cls": "wrap"},
                     {"text": mark, "v": "", "cls": "l b-" + mark if mark in ("pass", "short") else "l"}]
            table["rows"].append({"ok": True, "name": r.name, "recon": False, "cells": cells})
        else:
            numel = r.case.numel
            lead = [{"text": fmt(numel, "int"), "v": "" if numel is None else repr(numel), "cls": ""}]
            table["rows"].append({"ok": False, "name": r.name, "recon": False, "lead": lead, "colspan": len(BENCH_COLUMNS) + 1,
                                  "error": r.error})
    plots = [plot_bench_x_copy(run.cases, f"compress×copy against targets — {run.run_id}"),
             plot_size_scaling([bench_size_point(c) for c in run.cases], f"throughput vs tensor size — {run.run_id}")]
    return {"kind": "bench", "anchor": f"run{i}", "facts": run_facts(run), "description": bench_description(run), "table": table,
            "detail": None, "plots": [p for p in plots if p is not None], "footnote": BENCH_FOOTNOTE,
            "notes": [*bench_roofline(run.cases), *bench_processes_lines(run.cases), *flag_reason_lines(run.cases)],
            "any_reconstructed": False}


def _converge_context(i: int, run: LoadedRun) -> dict[str, Any]:
    from gcbench.report import convergence as cv
    from gcbench.report.converge_plans import html_tables
    from gcbench.report.html_converge_plots import convergence_plots

    table: dict[str, Any] = {"first": "compressor", "headers": [{"header": h, "help": help_, "left": False} for h, help_ in cv.HEADERS],
                             "rows": []}
    for r in cv.convergence_rows(run):
        if r.ok:
            cells = [{"text": t, "v": "" if v is None else repr(float(v)), "cls": ""} for t, v in zip(r.cells, r.values, strict=True)]
            table["rows"].append({"ok": True, "name": r.name, "recon": False, "cells": cells})
        else:
            table["rows"].append({"ok": False, "name": r.name, "recon": False, "lead": [], "colspan": len(cv.HEADERS),
                                  "error": r.error})
    notes = [cv.answer(run), *cv.priced_sentences(run), *([cv.pricing_origin(run)] if run.pricing is not None else [])]
    return {"kind": "converge", "anchor": f"run{i}", "facts": run_facts(run), "description": cv.description(run), "table": table,
            "detail": None, "plots": convergence_plots(run.cases, run.run_id, run.pricing), "notes": notes,
            "footnote": cv.footnote(run), "any_reconstructed": False, "plan_tables": html_tables(cv.plan_sections(run))}


def _section_context(i: int, run: LoadedRun) -> dict[str, Any]:
    """The template context of one results file, by its kind."""
    if run.kind == "converge":
        return _converge_context(i, run)
    if run.kind == "train":
        return _train_context(i, run)
    if run.kind == "bench":
        return _bench_context(i, run)
    return {"kind": "run", **_run_context(i, run)}


def _first(cases: Sequence[RunCase], key: str) -> str:
    for c in cases:
        if getattr(c, key) is not None:
            return str(getattr(c, key))
    return "?"


def _comparison_context(cmp: Comparison) -> dict[str, Any]:
    rows = []
    for r in cmp.rows:
        cells = row_cells(r)
        rows.append({"cells": cells, "verdict": r.verdict, "cls": "v-" + r.verdict.replace(" ", "-").replace("~", "ns"),
                     "change_v": "" if r.change is None or not math.isfinite(r.change) else repr(r.change)})
    return {"baseline": cmp.baseline_id, "new": cmp.new_id, "threshold": f"{cmp.threshold:.0%}", "alpha": f"{cmp.alpha:g}",
            "counts": counts_text(cmp), "notes": cmp.notes, "rows": rows, "regressions": len(cmp.regressions)}


def _claims_context(results: Sequence[ClaimResult]) -> list[dict[str, Any]]:
    out = []
    for res in results:
        c = res.claim
        out.append({"paper": c.paper, "compressor": c.compressor, "model": c.model if c.model != "*" else "any model",
                    "data": c.data, "claim": f"{c.value_text()} {c.metric}", "source": c.source, "note": c.note,
                    "measured": measured_text(res), "status": res.status,
                    "cls": "c-" + res.status.split(" ")[0] + ("-other" if "other" in res.status else "")})
    return out


_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=False, lstrip_blocks=False,
                          finalize=page_text)


#: the most runs the history table shows (the newest ones)
HISTORY_RUNS = 12


def _history_context(history: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The history table: one row per case of the newest run, one column per run of its suite (oldest → newest)."""
    shown = list(history)[-HISTORY_RUNS:]
    labels = list(shown[-1]["values"])
    rows = [{"label": label, "cells": [fmt(h["values"].get(label), "x") for h in shown]} for label in labels]
    return {"suite": shown[-1]["suite"], "metric": X_COPY_HEADER, "total": len(history),
            "columns": [{"run": h["run"], "date": str(h["date"])[:16], "commit": h["commit"]} for h in shown], "rows": rows}


def render_html(runs: Sequence[LoadedRun], claims: Sequence[ClaimResult] | None = None, comparison: Comparison | None = None,
                title: str = "gcbench report", claims_missing: str = "No claims file was loaded.",
                detailed: Sequence[LoadedRun] | None = None, index: Sequence[dict[str, str]] | None = None,
                history: Sequence[dict[str, Any]] | None = None, pages: Mapping[str, str] | None = None) -> str:
    """The whole report as one self-contained HTML document.

    ``runs`` are listed in the summary; ``detailed`` (default: all of them) get their tables and plots.
    A comparison report details only the new run: the baseline's values are in the comparison rows.
    ``index`` (:func:`gcbench.report.load.newest_with_index`): the facts of every run of the
    folder, listed in the summary instead of ``runs``; a run of ``runs`` links to its section.
    ``pages`` (``report --html --all``, :mod:`gcbench.report.html_all`): results file -> the relative link of
    that run's own page, which a listed run not detailed here links to.
    """
    template = _ENV.from_string(page_template())
    show = [detailed is None or any(r is d for d in detailed) for r in runs]
    listed = [{"anchor": f"run{i}", "facts": run_facts(r), "detailed": show[i], "note": " (baseline)", "href": ""}
              for i, r in enumerate(runs)]
    index_note = ""
    if index is not None:
        anchors = {str(r.path): f"run{i}" for i, r in enumerate(runs) if show[i]}
        listed = [{"anchor": anchors.get(f["file"], ""), "facts": f, "detailed": f["file"] in anchors, "note": "",
                   "href": (pages or {}).get(f["file"], "")} for f in index]
        if pages:
            folder = next(iter(pages.values())).split("/")[0]
            index_note = (f" The newest is shown in detail; each run links to its own page in {folder}/, rendered once and "
                          "reused while its results file is unchanged.")
        elif len(index) > len(anchors):
            index_note = (f" The newest is shown in detail, the {len(index) - len(anchors)} other"
                          f"{'s' if len(index) - len(anchors) != 1 else ''} listed only: name runs "
                          "(gcbench report --html RUN ...) or add --all to render them.")
    return template.render(
        history=_history_context(history) if history else None,
        index_note=index_note,
        title=title,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        version=gcbench.__version__,
        runs=listed,
        sections=[_section_context(i, r) for i, r in enumerate(runs) if show[i]],
        comparison=_comparison_context(comparison) if comparison is not None else None,
        claims=_claims_context(claims or []),
        claims_missing=claims_missing,
        metrics=METRICS,
        footnote=FOOTNOTE,
        dagger=DAGGER,
        fact_keys=("kind", "suite", "date", "status", "cases", "machine", "device", "gcbench", "commit", "torch"),
        recon_help="reconstructed definition (the paper body was unavailable)",
    )
