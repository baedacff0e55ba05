"""The HTML report's plots of a convergence file: the metric against the step, mean over seeds with its band.

One line per compressor (the mean curve of the seeds, :attr:`gcbench.results.converge_record.ConvergeSummary.curve_mean`) over a
shaded band (``curve_low``–``curve_high``, the 95% interval over seeds), in the compressor's colour and marker from
:func:`gcbench.report.html_plotkit.style_map` (kept across the section), the target as a dashed line.  The x axis is the
step: a convergence file holds no wall time (a step's time depends on the cluster; ``gcbench advise --convergence``
prices it), and the caption says so.  Given clusters (``report --cluster``), the same curves are drawn against the
predicted wall time on each: every step at the compressor's predicted step time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.ticker import MaxNLocator

from gcbench.core.intervals import UNBOUNDED, clip, domain
from gcbench.predict.accuracy import ScenarioTime
from gcbench.predict.advice_model import Pricing
from gcbench.report.html_plotkit import (
    PLOT_TITLE_MAX,
    Plot,
    add_legend,
    finite,
    new_figure,
    plot_text,
    png_uri,
    style_map,
)
from gcbench.results.converge_record import ConvergeCase


def curve_series(cases: Sequence[ConvergeCase]) -> list[tuple[ConvergeCase, list[tuple[int, float, float | None, float | None]]]]:
    """(case, [(step, mean, low, high), ...]) for every case with a mean curve; points without a finite mean are skipped."""
    out = []
    for c in cases:
        s = c.convergence.summary if c.convergence is not None else None
        if s is None or not s.curve_steps or not s.curve_mean:
            continue
        # the band clipped to the metric's domain: files written before the writer clipped it hold accuracies above 1
        bounds = domain("metric", c.convergence.settings.metric) if c.convergence is not None else UNBOUNDED
        pts = []
        for i, step in enumerate(s.curve_steps):
            m = finite(s.curve_mean[i]) if i < len(s.curve_mean) else None
            if m is None:
                continue
            lo = clip(finite(s.curve_low[i]), bounds) if s.curve_low and i < len(s.curve_low) else None
            hi = clip(finite(s.curve_high[i]), bounds) if s.curve_high and i < len(s.curve_high) else None
            pts.append((int(step), m, lo, hi))
        if pts:
            out.append((c, pts))
    return out


def plot_convergence(cases: Sequence[ConvergeCase], title: str, priced: bool = False) -> Plot | None:
    """The metric against the step for every compressor of a convergence file (None when no case has a curve)."""
    series = curve_series(cases)
    if not series:
        return None
    styles = style_map(list(cases))
    fig, ax = new_figure(7.0, 3.6)
    for c, pts in series:
        st = styles[c.label]
        xs = [p[0] for p in pts]
        band = [(x, lo, hi) for x, _, lo, hi in pts if lo is not None and hi is not None]
        if band:
            ax.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band], color=st.color, alpha=0.15, lw=0)
        name = c.label + (" (reference)" if c.convergence is not None and c.convergence.reference else "")
        ax.plot(xs, [p[1] for p in pts], color=st.color, marker=st.marker, ms=4, lw=1.3, markevery=max(1, len(xs) // 10),
                label=plot_text(name), ls="--" if c.convergence is not None and c.convergence.reference else "-")
    settings = series[0][0].convergence.settings if series[0][0].convergence is not None else None
    target = finite(settings.target) if settings is not None else None
    n_legend = len(series)
    if target is not None:
        ax.axhline(target, color="black", ls=":", lw=1.0, label=f"target {target:.4g}")
        n_legend += 1
    metric = settings.metric if settings is not None else "metric"
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"{metric}  (higher is better)")
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9)
    add_legend(ax, n_legend)
    caption = (f"{metric} at every evaluation, the mean over seeds (line) and its 95% interval (band), one colour and marker "
               "per compressor; the reference dashed" + (", the target dotted" if target is not None else "") + "."
               + (" Against wall time on each cluster given: the plots below." if priced else
                  " Against steps only: this report is given no cluster, and a step's wall time depends on it — `gcbench "
                  "report FILE --cluster WORKERSxGBITS --kernels BENCH` or `gcbench advise --convergence FILE` price it."))
    return Plot("converge_curves", title, png_uri(fig), caption, wide=True)


#: the most clusters a section draws the metric against wall time for (one plot each)
MAX_CLUSTER_PLOTS = 4


def plot_against_time(cases: Sequence[ConvergeCase], st: ScenarioTime, title: str) -> Plot | None:
    """The metric against predicted wall time on one cluster: each compressor's mean curve with its steps scaled by its
    predicted step (:class:`gcbench.predict.time_to_accuracy.TimeRow`); compressors the cluster could not price are
    left out (the caption names them)."""
    steps = {r.label: r.step.mean for r in st.rows}
    series = [(c, pts) for c, pts in curve_series(cases) if c.label in steps]
    if not series:
        return None
    styles = style_map(list(cases))
    fig, ax = new_figure(7.0, 3.6)
    for c, pts in series:
        sty, step_s = styles[c.label], steps[c.label]
        xs = [p[0] * step_s for p in pts]
        band = [(p[0] * step_s, p[2], p[3]) for p in pts if p[2] is not None and p[3] is not None]
        if band:
            ax.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band], color=sty.color, alpha=0.15, lw=0)
        ref = c.convergence is not None and bool(c.convergence.reference)
        ax.plot(xs, [p[1] for p in pts], color=sty.color, marker=sty.marker, ms=4, lw=1.3, markevery=max(1, len(xs) // 10),
                label=plot_text(c.label + (" (reference, fp32)" if ref else "")), ls="--" if ref else "-")
    settings = series[0][0].convergence.settings if series[0][0].convergence is not None else None
    target = finite(settings.target) if settings is not None else None
    if target is not None:
        ax.axhline(target, color="black", ls=":", lw=1.0, label=f"target {target:.4g}")
    ax.set_xlabel(f"predicted wall time on {st.workers} workers × {st.bandwidth_gbps:g} Gbit/s, s")
    ax.set_ylabel(f"{settings.metric if settings is not None else 'metric'}  (higher is better)")
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9)
    add_legend(ax, len(series) + (target is not None))
    left_out = [c.label for c in cases if c.label not in steps]
    caption = (f"The same curves against predicted wall time on {st.workers} workers × {st.bandwidth_gbps:g} Gbit/s: each "
               "step at the compressor's predicted step time (gcbench advise's model on the kernels given with --kernels)"
               + (f"; not priced (no kernels): {', '.join(left_out)}" if left_out else "") + ".")
    return Plot("converge_time", title, png_uri(fig), caption, wide=True)


def convergence_plots(cases: Sequence[Any], run_id: str, pricing: Pricing | None = None) -> list[Plot]:
    """Every plot of a convergence file's section: against steps, and against wall time on each cluster priced."""
    cc = [c for c in cases if isinstance(c, ConvergeCase)]
    plots = [plot_convergence(cc, f"convergence — {run_id}", pricing is not None)]
    for st in (pricing.times if pricing is not None else ())[:MAX_CLUSTER_PLOTS]:
        plots.append(plot_against_time(cc, st, f"convergence on {st.workers} × {st.bandwidth_gbps:g} Gbit/s — {run_id}"))
    return [p for p in plots if p is not None]
