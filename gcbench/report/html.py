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

This module writes the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gcbench.report.html_page import render_html
from gcbench.report.load import LoadedRun
from gcbench.results.atomic import atomic_write
from gcbench.results.baselines import ClaimResult
from gcbench.results.judge import Comparison


def write_html(path: str | Path, runs: Sequence[LoadedRun], claims: Sequence[ClaimResult] | None = None,
               comparison: Comparison | None = None, detailed: Sequence[LoadedRun] | None = None,
               claims_missing: str = "No claims file was loaded.", index: Sequence[dict[str, str]] | None = None,
               history: Sequence[dict[str, Any]] | None = None) -> Path:
    """Render and write the report atomically (:func:`gcbench.results.atomic.atomic_write`); ``index`` as :func:`render_html`."""
    text = render_html(runs, claims, comparison, claims_missing=claims_missing, detailed=detailed, index=index, history=history)
    return atomic_write(Path(path), text)
