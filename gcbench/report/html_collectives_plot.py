"""The HTML report's view of a sharded-collectives sweep: its two tables and the error against N, one panel per scheme.

The tables are :func:`gcbench.report.collectives_table.grid`'s text; the plot draws one panel per
scheme/accumulation (ring with fp32 or bf16 partial sums, all-to-all, all-gather) with one line per
compressor, the aggregate's error against the worker count on log axes, so a ring's growth with N
and an all-to-all's flat line read at a glance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullFormatter

from gcbench.report.collectives_table import failure, grid
from gcbench.report.html_plotkit import DPI, Plot, plot_text, png_uri


def plot_collectives_error(sweep: Mapping[str, Any], title: str) -> Plot | None:
    """Error of the aggregate against N, a panel per scheme/accumulation, a line per compressor (None: nothing to draw)."""
    rows = [r for r in sweep.get("rows") or [] if r.get("error") is not None and math.isfinite(r["error"]) and r["error"] > 0]
    if not rows:
        return None
    panels = list(dict.fromkeys(f"{r['scheme']}/{r['accumulate']}" for r in rows))
    names = list(dict.fromkeys(r["compressor"] for r in rows))
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(3.3 * cols + 1.6, 2.5 * nrows + 0.4), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, cols, squeeze=False, sharex=True, sharey=True)
    colors = {n: f"C{i % 10}" for i, n in enumerate(names)}
    ns = sorted({int(r["workers"]) for r in rows})
    for k, panel in enumerate(panels):
        ax = axes[k // cols][k % cols]
        ax.grid(True, which="major", alpha=0.3)
        for name in names:
            pts = sorted((int(r["workers"]), float(r["error"])) for r in rows
                         if r["compressor"] == name and f"{r['scheme']}/{r['accumulate']}" == panel)
            if pts:
                ax.plot([n for n, _ in pts], [e for _, e in pts], marker="o", ms=3.5, lw=1.3, color=colors[name],
                        label=plot_text(name))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(FixedLocator(ns))
        ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(plot_text(panel), fontsize=8.5)
        if k % cols == 0:
            ax.set_ylabel("relative error")
        if k // cols == nrows - 1:
            ax.set_xlabel("workers N")
    for k in range(len(panels), nrows * cols):
        axes[k // cols][k % cols].set_axis_off()
    handles, labels = axes[0][0].get_legend_handles_labels()
    if len(panels) < nrows * cols:  # the legend in the first empty panel
        axes[-1][-1].legend(handles, labels, fontsize=7.5, loc="center", frameon=False)
    else:
        fig.legend(handles, labels, fontsize=7.5, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.suptitle(plot_text(title, 120), fontsize=9)
    caption = ("The aggregate's relative error ‖agg − mean‖/‖mean‖ against the exact mean as the number of workers grows, "
               "one panel per scheme and accumulation dtype, one line per compressor (mean over the sweep's draws; both axes "
               "logarithmic). A ring that re-encodes at every hop accumulates N − 1 roundings; an all-to-all encodes each "
               "contribution once.")
    return Plot("collectives_error", title, png_uri(fig), caption, wide=True)


def collectives_context(sweep: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    """What the page template shows of a sweep: its failure line, or its tables, the cells not run and the plot."""
    bad = failure(sweep)
    if bad is not None:
        return {"failure": bad}
    g = grid(sweep)
    headers = ["compressor", "scheme/acc", *(f"N={n}" for n in g.workers)]
    plot = plot_collectives_error(sweep, f"sharded collectives: error against N — {run_id}")
    return {"failure": None, "headers": headers,
            "tables": [{"title": g.error_title, "rows": g.error_rows}, {"title": g.bytes_title, "rows": g.bytes_rows}],
            "skipped": g.skipped, "plots": [plot] if plot else []}
