"""The self-contained HTML report: sortable tables and matplotlib plots in one offline file (``gcbench report --html``).

The report is one file with no network fetches: tables plus plots of ratio vs error (Pareto front),
throughput bars against the copy roofline, per-layer ratio and EF drift over steps.  It must read at
suite scale (60 cases, 161 layers, a 1,400-px window).  Styles and the few lines of table-sorting
JavaScript are inline in the template; no ``src``/``href`` points outside the file (an empty inline
icon keeps browsers from asking for ``/favicon.ico``).

The page is built in layers, none of which imports the terminal renderer:

* :mod:`gcbench.report.html_plotkit` — how plots are drawn (canvas, PNG, a style per case, labels);
* :mod:`gcbench.report.html_plots` — the plots of a run or compare file's gradient sources;
* :mod:`gcbench.report.html_train_bench_plots` — the plots of train and bench files;
* :mod:`gcbench.report.html_page` — the template's context from the views of
  :mod:`gcbench.report.views`, and the rendering of ``templates/report.html.j2``.

This module writes the page; the names of those modules are found here too, where they were
before the page was split.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gcbench.predict.decision import DECISION_BANDWIDTHS, DECISION_LATENCY_S, decision_curves
from gcbench.report.html_page import (
    HTML_DETAIL_COLUMNS,
    HTML_ONESHOT_COLUMNS,
    HTML_SUMMARY_COLUMNS,
    LAYER_HEADERS,
    SUMMARY_KEYS,
    TEMPLATE_FILE,
    layer_rows,
    page_template,
    render_html,
)
from gcbench.report.html_plotkit import DPI, PAGE_TEXT_MAX, PLOT_TITLE_MAX, Plot, Style, label_points, style_map
from gcbench.report.html_plots import (
    LAYER_METRICS,
    NOTHING,
    FrontPoints,
    front_points,
    layer_matrix,
    oneshot_plots,
    plot_aggregate_drift,
    plot_decision,
    plot_ef_drift,
    plot_layers,
    plot_oneshot_pareto,
    plot_pareto,
    plot_phase_pareto,
    plot_phase_ratio,
    plot_stream,
    plot_throughput,
    source_plots,
    throughput_rows,
    undelivered,
)
from gcbench.report.html_train_bench_plots import (
    BenchBars,
    SizePoint,
    bench_bars,
    bench_size_point,
    plot_bench_x_copy,
    plot_size_scaling,
    plot_time_to_target,
    plot_train_curves,
    run_size_point,
    train_curve_series,
)
from gcbench.report.load import LoadedRun
from gcbench.results.atomic import atomic_write
from gcbench.results.baselines import ClaimResult
from gcbench.results.compare import Comparison

__all__ = [
    "DECISION_BANDWIDTHS",
    "DECISION_LATENCY_S",
    "DPI",
    "HTML_DETAIL_COLUMNS",
    "HTML_ONESHOT_COLUMNS",
    "HTML_SUMMARY_COLUMNS",
    "LAYER_HEADERS",
    "LAYER_METRICS",
    "NOTHING",
    "PAGE_TEXT_MAX",
    "PLOT_TITLE_MAX",
    "SUMMARY_KEYS",
    "TEMPLATE_FILE",
    "BenchBars",
    "FrontPoints",
    "Plot",
    "SizePoint",
    "Style",
    "bench_bars",
    "bench_size_point",
    "decision_curves",
    "front_points",
    "label_points",
    "layer_matrix",
    "layer_rows",
    "oneshot_plots",
    "page_template",
    "plot_aggregate_drift",
    "plot_bench_x_copy",
    "plot_decision",
    "plot_ef_drift",
    "plot_layers",
    "plot_oneshot_pareto",
    "plot_pareto",
    "plot_phase_pareto",
    "plot_phase_ratio",
    "plot_size_scaling",
    "plot_stream",
    "plot_throughput",
    "plot_time_to_target",
    "plot_train_curves",
    "render_html",
    "run_size_point",
    "source_plots",
    "style_map",
    "throughput_rows",
    "train_curve_series",
    "undelivered",
    "write_html",
]


def write_html(path: str | Path, runs: Sequence[LoadedRun], claims: Sequence[ClaimResult] | None = None,
               comparison: Comparison | None = None, detailed: Sequence[LoadedRun] | None = None,
               claims_missing: str = "No claims file was loaded.", index: Sequence[dict[str, str]] | None = None,
               history: Sequence[dict[str, Any]] | None = None) -> Path:
    """Render and write the report atomically (:func:`gcbench.results.atomic.atomic_write`); ``index`` as :func:`render_html`."""
    text = render_html(runs, claims, comparison, claims_missing=claims_missing, detailed=detailed, index=index, history=history)
    return atomic_write(Path(path), text)
