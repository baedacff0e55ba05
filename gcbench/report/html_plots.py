"""The plots of one gradient source of a run or compare file: ratio against error, the stream, speed, layers, phases.

One reference per plot (docs/metrics.md).  A source's main plots use the suite's
common reference (the dense update of its optimizer): ratio against 1 − delivered, the share of the
summed dense update a case's stream did not deliver, and the delivered fraction over steps.  The
one-shot plots, each case against its own reference (DGC's momentum-SGD update, the gradient for
most), go to a detail section.  A point no better than sending nothing (error ≥ 1, delivered ≤ 0)
is drawn hollow in a shaded region and never joins the Pareto front, whatever its ratio.

A timing is drawn as a speed only when it is one: a case whose compress timing beat its traffic
bound is left out of the throughput plots (the caption names it); flagged bars are hatched.  A
plot is drawn only where its data exist, and its caption says what was left out: errors are on a
log axis, so lossless cases (error 0) are listed instead of plotted; per-layer heatmaps (case ×
unit, log colour scale) need two or more units; EF drift needs a stateful compressor and two or
more steps.  The decision plot draws :func:`gcbench.predict.decision.decision_curves`: the
report draws, the model computes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib
import numpy as np
from matplotlib.colors import LogNorm, Normalize
from matplotlib.patches import Patch

from gcbench.predict.decision import DECISION_BANDWIDTHS, DECISION_LATENCY_S, decision_curves, fp32_against_bf16
from gcbench.report.html_plotkit import (
    PLOT_TITLE_MAX,
    Plot,
    Style,
    add_legend,
    cases_that_ran,
    finite,
    label_line_ends,
    label_points,
    new_figure,
    plot_text,
    png_uri,
    scale_axis,
    scatter_front,
    scatter_points,
    step_lines,
    styles_of,
    timing_flags,
)
from gcbench.report.text import clip
from gcbench.report.views import case_name, oneshot_caption, pareto_front, stream_reference
from gcbench.results.phases import Window, per_step_sent, per_step_sent_body, source_windows, window_metrics
from gcbench.results.record import BEATS_BOUND
from gcbench.results.run_record import RunCase

#: an error at or above this is no better than sending nothing (‖0 − x‖²/‖x‖² = 1; delivered ≤ 0)
NOTHING = 1.0


@dataclass(frozen=True)
class FrontPoints:
    """What a ratio-against-error plot draws: ``(error, ratio, case)`` points split by what the front may hold.

    ``drawn`` may be on the Pareto front (``front`` indexes it); ``worse`` are no better than sending
    nothing (error ≥ :data:`NOTHING`): drawn in a shaded region, never on the front, however high their
    ratio; ``lossless`` (error 0) have no place on a log axis and are listed instead.
    """

    drawn: list[tuple[float, float, RunCase]]
    worse: list[tuple[float, float, RunCase]]
    lossless: list[RunCase]
    front: list[int]
    order: list[RunCase]  # every case above in the order given: colours follow it, as in the section's stream plot

    @property
    def front_labels(self) -> list[str]:
        return [self.drawn[i][2].label for i in self.front]


def front_points(cases: Sequence[RunCase], error: Callable[[RunCase], float | None]) -> FrontPoints:
    """The cases that ran with a ratio and an ``error`` (lower is better), split for :func:`plot_pareto`."""
    drawn, worse, lossless, order = [], [], [], []
    for c in cases_that_ran(cases):
        e, r = error(c), c.metric("ratio")
        if e is None or r is None or r <= 0:
            continue
        order.append(c)
        if e <= 0:
            lossless.append(c)
        elif e >= NOTHING:
            worse.append((e, r, c))
        else:
            drawn.append((e, r, c))
    return FrontPoints(drawn, worse, lossless, pareto_front([(e, r) for e, r, _ in drawn]), order)


def undelivered(case: RunCase) -> float | None:
    """1 − delivered: the share of the summed dense update the case's stream did not deliver (the stream plot's error)."""
    d = case.metric("delivered")
    return None if d is None else 1.0 - d


def _names(cases: Sequence[RunCase]) -> str:
    return ", ".join(f"“{case_name(c)}”" for c in cases)


def _plot_front(fp: FrontPoints, kind: str, title: str, xlabel: str, caption: str, styles: dict[str, Style],
                suffix: dict[str, str] | None = None) -> Plot | None:
    """Ratio against an error: the front of the cases better than nothing, the worse-than-nothing region shaded.

    Every point has its case's marker × colour (the legend) and, where there is room, its name beside it.
    """
    if not fp.drawn and not fp.worse:
        return None
    fig, ax = new_figure(7.6, 4.8)
    every = fp.drawn + fp.worse
    scatter_points(ax, fp.drawn, set(fp.front), styles, suffix)
    scatter_points(ax, fp.worse, set(), styles, suffix, hollow=True)  # shown, but no claim to the front
    log_x = scale_axis(ax, "x", [p[0] for p in every])
    log_y = scale_axis(ax, "y", [p[1] for p in every])
    fpts = sorted((fp.drawn[i][0], fp.drawn[i][1]) for i in fp.front)
    if len(fpts) > 1:
        ax.plot([p[0] for p in fpts], [p[1] for p in fpts], color="black", lw=1, ls="--", zorder=2, label="Pareto front")
    lo, hi = ax.get_xlim()
    if log_x:  # room on the right for the names of the rightmost points
        hi *= 3.0
    else:
        hi += 0.08 * (hi - lo)
    shaded = hi > NOTHING
    taken = []
    if shaded:
        ax.axvspan(NOTHING, hi, color="#8c959f", alpha=0.22, lw=0, zorder=1, label=f"worse than sending nothing (error ≥ {NOTHING:g})")
        region = ax.text(NOTHING, 0.985, " worse than sending nothing →", transform=ax.get_xaxis_transform(), ha="left", va="top",
                         fontsize=7.5, color="#424a53", zorder=5)
        taken.append(region.get_window_extent(fig.canvas.get_renderer()))  # type: ignore[attr-defined]  # the Agg canvas has one
    ax.set_xlim(lo, hi)
    ax.set_xlabel(xlabel + ("  (log scale; ← better)" if log_x else "  (← better)"), fontsize=8.5)
    ax.set_ylabel("compression ratio, ×  (dense / wire bytes" + ("; log scale" if log_y else "") + "; better →)", fontsize=8.5)
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9.5)
    add_legend(ax, len(every) + (len(fpts) > 1) + shaded)
    front_first = [fp.drawn[i] for i in fp.front] + [p for i, p in enumerate(fp.drawn) if i not in fp.front] + fp.worse
    named = label_points(ax, [(e, r, case_name(c)) for e, r, c in front_first], obstacles=taken)
    caption += (f" Every point has a marker × colour of its own (the key); {named} of {len(every)} are also named beside the point "
                f"where the name fits. Outlined in black: the Pareto front ({len(fp.front)} of {len(fp.drawn)}).")
    if fp.worse:
        caption += (f" No better than sending nothing (error ≥ {NOTHING:g}; hollow, in the shaded region, left out of the front): "
                    f"{_names([p[2] for p in fp.worse])}.")
    if fp.lossless:
        caption += f" Not drawn (lossless: an error of 0 has no place on a log axis): {_names(fp.lossless)}."
    return Plot(kind, title, png_uri(fig), caption, wide=True)


def plot_pareto(cases: Sequence[RunCase], title: str) -> Plot | None:
    """The main plot: ratio against 1 − delivered on the suite's common reference (the stream view), front marked."""
    ok = cases_that_ran(cases)
    fp = front_points(ok, undelivered)
    ref = stream_reference(ok) or "the common reference"
    short = {c.label: " (short)" for c in ok if c.stream is not None and c.stream.enough is False}
    caption = (f"Ratio against 1 − delivered: the share of the summed {ref} that a case's stream of updates did not "
               "deliver after its last step (‖Σ_t(U_t − D_t)‖/‖Σ_t D_t‖, whole model); every case on this one reference.")
    if short:
        caption += (" (short) = a stream with too few steps to rank stateful compressors: "
                    + _names([c for c in ok if c.label in short]) + ".")
    return _plot_front(fp, "pareto", title, "1 − delivered = ‖Σ(U − D)‖ / ‖Σ D‖ after the last step, fraction of ‖Σ D‖", caption,
                       styles_of(cases), short)


def plot_oneshot_pareto(cases: Sequence[RunCase], title: str) -> Plot | None:
    """The detail plot: ratio against one-shot q, each case against its OWN reference (not one axis of one reference)."""
    ok = cases_that_ran(cases)
    fp = front_points(ok, lambda c: c.metric("q"))
    caption = f"Ratio against one-shot q (whole model), {oneshot_caption(ok, 'the main plot', clip).removeprefix('one shot: ')}"
    return _plot_front(fp, "pareto_oneshot", title, "one-shot q = ‖C(x)−x‖²/‖x‖², own reference, fraction of ‖x‖²", caption,
                       styles_of(cases))


#: the tallest figure drawn, in inches (a suite of hundreds of cases still fits a browser's screenshot)
PLOT_MAX_HEIGHT_IN = 40.0


#: the size of the names at the end of the stream plot's lines, in points
STREAM_LABEL_PT = 7.0


def plot_stream(cases: Sequence[RunCase], title: str) -> Plot | None:
    """Delivered fraction after every step, one line per case, on the common reference (two steps or more)."""
    series = []
    for c in cases_that_ran(cases):
        vals = [finite(v) for v in (c.stream.per_step_delivered or [])] if c.stream else []
        if sum(v is not None for v in vals) >= 2:
            series.append((c, vals))
    if not series:
        return None
    floor = -1.0  # below this a case is far worse than sending nothing: clip, name it, keep the others readable
    clipped = [c for c, vals in series if any(v is not None and v < floor for v in vals)]
    styles = styles_of(cases)
    # every line is named at its end, one name per 1.25 font heights: past ~35 lines the axes grow to hold them (60 names
    # squeezed into 5.6 inches overlapped)
    fig, ax = new_figure(7.6, min(PLOT_MAX_HEIGHT_IN, max(5.6, len(series) * STREAM_LABEL_PT * 1.25 / 72 / 0.78 + 1.0)))
    drawn = [(c, [None if v is None else max(v, floor) for v in vals]) for c, vals in series]
    step_lines(ax, drawn, styles, ms=3.5)
    ax.axhline(1.0, color="black", ls="--", lw=1)
    ax.axhline(0.0, color="#8c959f", ls=":", lw=1.2)
    trans = ax.get_yaxis_transform()
    boxed = {"boxstyle": "square,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85}
    ax.text(0.01, 1.0, "dense update (1)", transform=trans, fontsize=7.5, va="bottom", color="#24292f", bbox=boxed, zorder=5)
    ax.text(0.01, 0.0, "sending nothing (0)", transform=trans, fontsize=7.5, va="top", color="#424a53", bbox=boxed, zorder=5)
    low = min(v for _, vals in series for v in vals if v is not None)
    ax.set_ylim(max(low, floor) - 0.05, 1.07)
    ax.set_ylabel("delivered fraction of ‖Σ D‖, linear  (higher is better)", fontsize=8.5)
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9.5)
    label_line_ends(ax, [(xs[-1], ys[-1], case_name(c), styles[c.label].color) for c, vals in drawn
                     for xs, ys in [([i + 1 for i, v in enumerate(vals) if v is not None], [v for v in vals if v is not None])]],
                fontsize=STREAM_LABEL_PT)
    ok = [c for c, _ in series]
    caption = (f"1 − ‖Σ_t(U_t − D_t)‖/‖Σ_t D_t‖ after each step (steps from 1): how much of the summed "
               f"{stream_reference(ok) or 'dense update'} the case's updates have delivered; error feedback delays what it "
               "does not send, so a stateful compressor's line rises as its residual arrives. Each line is named at the right, "
               "beside its last step, and keeps its case's colour and marker from the section's other plots.")
    short = [c for c in ok if c.stream is not None and c.stream.enough is False]
    if short:
        caption += f" Too short to rank on: {_names(short)}."
    if clipped:
        caption += f" Clipped at {floor:g} (far worse than sending nothing): {_names(clipped)}."
    return Plot("stream", title, png_uri(fig), caption, wide=True)


def throughput_rows(cases: Sequence[RunCase]) -> tuple[list[tuple[RunCase, float | None, float | None, float | None]], list[RunCase]]:
    """``(case, compress GB/s, decompress GB/s, copy GB/s)`` of the cases a throughput plot draws, and those it leaves out.

    Left out: a case whose compress timing beat its traffic bound (:attr:`RunCase.beats_bound`) — what
    was timed is not the work the compressor must do, so neither of its numbers is drawn as a speed.
    """
    ok = cases_that_ran(cases)
    rows = [(c, c.metric("compress_gbps"), c.metric("decompress_gbps"), c.metric("copy_gbps")) for c in ok if not c.beats_bound]
    return [r for r in rows if r[1] is not None or r[2] is not None], [c for c in ok if c.beats_bound]


#: the most cases a throughput plot draws as upright bars; more lie down, one named row each
THROUGHPUT_UPRIGHT_MAX = 12

def plot_throughput(cases: Sequence[RunCase], title: str) -> Plot | None:
    """Compress and decompress GB/s per case (log axis) with the copy roofline drawn.

    A case whose compress timing beat its traffic bound is not drawn (what was timed is not the work
    the compressor must do, so it is no speed) and the caption names it; a flagged bar (unstable, too
    short) is hatched and its flags follow its name.
    """
    rows, bound = throughput_rows(cases)
    if not rows:
        return None
    # past a dozen cases the bars lie down: one row per case, its name written out level (60 names slanted under a
    # 8-inch axis could not be read)
    across = len(rows) > THROUGHPUT_UPRIGHT_MAX
    if across:
        fig, ax = new_figure(7.6, min(PLOT_MAX_HEIGHT_IN, 0.24 * len(rows) + 1.3))
    else:
        fig, ax = new_figure(min(8.0, max(4.2, 0.42 * len(rows) + 1.5)), 3.1)
    xs = list(range(len(rows)))
    w = 0.38
    flagged: dict[str, list[str]] = {}  # "compress, unstable" → case names
    handles = []
    for kernel, shift, color, col in (("compress", -w / 2, "#1f77b4", 1), ("decompress", w / 2, "#ff7f0e", 2)):
        place = ax.barh if across else ax.bar
        bars = place([x + shift for x in xs], [r[col] or 0 for r in rows], w, color=color, zorder=3)
        handles.append(Patch(facecolor=color, label=kernel))
        for bar, r in zip(bars, rows, strict=True):
            if r[col] is not None and timing_flags(r[0], kernel):
                bar.set_hatch("///")  # a flagged time: drawn, but not a speed to act on
                bar.set_edgecolor("black")
                flagged.setdefault(f"{kernel} {', '.join(timing_flags(r[0], kernel))}", []).append(case_name(r[0]))
    if flagged:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="flagged time"))
    copies = [r[3] for r in rows if r[3] is not None]
    roof = statistics.median(copies) if copies else None
    if roof is not None:
        line = ax.axvline if across else ax.axhline
        handles.append(line(roof, color="black", ls="--", lw=1.2, label=f"copy roofline {roof:.3g} GB/s", zorder=4))
    log_y = scale_axis(ax, "x" if across else "y",
                       [v for r in rows for v in (r[1], r[2]) if v is not None] + ([roof] if roof is not None else []))
    names = [plot_text(case_name(r[0]) + (" *" if any(timing_flags(r[0], k) for k in ("compress", "decompress")) else ""))
             for r in rows]
    unit = "GB/s of dense fp32 input" + ("  (log scale)" if log_y else "")
    if across:
        ax.set_yticks(xs)
        ax.set_yticklabels(names, fontsize=7.5)
        ax.set_ylim(len(rows) - 0.5, -0.5)  # the table's order, top down
        ax.set_xlabel(unit)
    else:
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
        ax.set_ylabel(unit)
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9)
    ax.legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    caption = ("Median compress and decompress throughput (dense float32 bytes / time) of one worker-step; the dashed line "
               "is a plain copy of the same tensors into preallocated buffers, timed in the same process"
               + (f" (median of {len(copies)} measurements)." if copies else "."))
    if flagged:
        caption += (" Hatched (and * after the name): a flagged time, not a speed to act on — "
                    + "; ".join(f"{k}: {', '.join(names)}" for k, names in flagged.items()) + ".")
    if bound:
        caption += (f" Not drawn ({BEATS_BOUND}: faster than the memory traffic its card says compress must do, so what was "
                    f"timed is not that work): {_names(bound)}.")
    return Plot("throughput", title, png_uri(fig), caption, wide=across)


#: what a per-layer heatmap can show: the Layer field, its colour-bar label, which way is better, the plot kind
LAYER_METRICS = {
    "ratio": ("compression ratio, × (dense / wire bytes)", True, "layers"),
    "q": ("one-shot q = ‖C(x)−x‖²/‖x‖² of the layer, own reference", False, "layers_q"),
}


def layer_matrix(cases: Sequence[RunCase], metric: str = "ratio") -> tuple[list[RunCase], list[str], list[list[float | None]]]:
    """The cases with two or more units, the unit names (of the case with the most) and ``metric`` per case × unit.

    Units are matched by position (one source: one model, one unit order); a value that is missing or
    not positive is ``None`` (no place on a log colour scale).
    """
    rows = [c for c in cases_that_ran(cases) if len(c.layers or []) >= 2]
    if not rows:
        return [], [], []
    widest = max(rows, key=lambda c: len(c.layers or []))
    names = [str(u.name) if u.name is not None else f"unit {i}" for i, u in enumerate(widest.layers or [])]
    values = []
    for c in rows:
        vals: list[float | None] = [None] * len(names)
        for i, u in enumerate(c.layers or []):
            v = finite(getattr(u, metric))
            vals[i] = v if v is not None and v > 0 else None
        values.append(vals)
    return rows, names, values


def plot_layers(cases: Sequence[RunCase], title: str, metric: str = "ratio") -> Plot | None:
    """A heatmap of ``metric`` per unit (columns, in model order) and case (rows) on a log colour scale.

    One cell per case × unit reads at 161 layers where 29 overlaid lines did not: every Nth unit is
    named on the axis (the per-layer table below the plots names them all).
    """
    rows, names, values = layer_matrix(cases, metric)
    if not rows or not any(v is not None for vals in values for v in vals):
        return None
    label, higher, kind = LAYER_METRICS[metric]
    data = np.ma.masked_invalid(np.array([[np.nan if v is None else v for v in vals] for vals in values], dtype=float))
    fig, ax = new_figure(10.5, 1.9 + 0.17 * len(rows))
    ax.grid(False)
    cmap = matplotlib.colormaps["viridis" if higher else "viridis_r"].with_extremes(bad="#ffffff")
    lo, hi = float(data.min()), float(data.max())
    log = hi / lo >= 10
    image = ax.imshow(data, aspect="auto", interpolation="nearest", cmap=cmap,
                      norm=LogNorm(lo, hi) if log else Normalize(lo, hi if hi > lo else lo + 1))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([plot_text(case_name(c)) for c in rows], fontsize=7)
    every = max(1, math.ceil(len(names) / 28))
    ticks = list(range(0, len(names), every))
    ax.set_xticks(ticks)
    ax.set_xticklabels([plot_text(f"{i} {names[i]}") for i in ticks], rotation=90, fontsize=6.5)
    ax.set_xlabel(f"unit: index and name (every {every}{'th' if every > 1 else ''} of {len(names)}, in model order)"
                  if every > 1 else f"unit: index and name ({len(names)}, in model order)", fontsize=8.5)
    bar = fig.colorbar(image, ax=ax, pad=0.01, fraction=0.035)
    bar.set_label(f"{label}  ({'log colour scale; ' if log else ''}{'higher' if higher else 'lower'} is better)", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9.5)
    missing = sum(v is None for vals in values for v in vals)
    caption = (f"{label[0].upper()}{label[1:]} of each unit ({rows[0].granularity or 'layer'} granularity) of each case: one row per "
               "case, one column per unit; the source's per-layer table (folded under its plots) lists every unit by name.")
    if missing:
        caption += f" White: no value, or one that is not positive (a lossless unit's q of 0): {missing} cells."
    return Plot(kind, title, png_uri(fig), caption, wide=True)


def plot_ef_drift(cases: Sequence[RunCase], title: str) -> Plot | None:
    """‖Σ C_t − Σ g_t‖/‖Σ g_t‖ over steps for the stateful cases (two steps or more: a drift needs a stream)."""
    series = []
    for c in cases_that_ran(cases):
        drift = c.ef_drift.sum_drift if c.ef_drift else None
        if drift is not None and sum(finite(v) is not None for v in drift) >= 2:
            series.append((c, [finite(v) for v in drift]))
    if not series:
        return None
    styles = styles_of(cases)
    fig, ax = new_figure(6.0, 3.6)
    step_lines(ax, series, styles)
    log_y = scale_axis(ax, "y", [v for _, vals in series for v in vals if v is not None])
    ax.set_ylabel("‖Σ C_t − Σ g_t‖ / ‖Σ g_t‖, fraction" + ("  (log scale)" if log_y else ""), fontsize=8.5)
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9.5)
    label_line_ends(ax, [(i + 1, v, case_name(c), styles[c.label].color) for c, vals in series
                     for i, v in [max(((i, v) for i, v in enumerate(vals) if v is not None), key=lambda t: t[0])]], fontsize=7)
    caption = ("Error-feedback drift of worker 0 over steps: how far the sum of what was sent is from the sum of the reference "
               "updates (stateful compressors only; each case against its own reference). Lines are named at the right.")
    return Plot("ef_drift", title, png_uri(fig), caption)


def _phase_marks(ax: Any, windows: Sequence[Window]) -> None:
    """Dotted lines between phase windows, each window named at the top of the axes."""
    trans = ax.get_xaxis_transform()
    for w in windows:
        if w.first > 0:
            ax.axvline(w.first + 0.5, color="#57606a", ls=":", lw=1)
        ax.text((w.first + w.last) / 2 + 1, 1.0, plot_text(w.name), transform=trans, ha="center", va="bottom", fontsize=7, color="#57606a")


def plot_phase_ratio(cases: Sequence[RunCase], windows: Sequence[Window], title: str) -> Plot | None:
    """Traffic ratio at every step (dense bytes / bytes a worker sent that step), phases marked."""
    series = []
    for c in cases_that_ran(cases):
        dense = 4.0 * float((c.size.numel if c.size else None) or 0)
        sent = per_step_sent(c)
        if dense > 0 and sent and any(v > 0 for v in sent):
            series.append((c, [dense / v if v > 0 else None for v in sent]))
    if not series or not windows:
        return None
    styles = styles_of(cases)
    fig, ax = new_figure()
    step_lines(ax, series, styles, ms=3)
    # the phased cases (LGC) also body-only, dashed: their small compressed-phase messages are header-heavy
    bodies = []
    for c, _ in series:
        body = per_step_sent_body(c) if c.step_phases else None
        dense = 4.0 * float((c.size.numel if c.size else None) or 0)
        if body and any(v > 0 for v in body):
            vals = [dense / v if v > 0 else None for v in body]
            bodies += [v for v in vals if v is not None]
            xs = [i + 1 for i, v in enumerate(vals) if v is not None]
            ax.plot(xs, [v for v in vals if v is not None], ls="--", lw=1.0, color=styles[c.label].color,
                    label=plot_text(case_name(c) + " (bodies only)"))
    scale_axis(ax, "y", [v for _, vals in series for v in vals if v is not None] + bodies)
    _phase_marks(ax, windows)
    ax.set_ylabel("ratio at the step, ×  (better →)")
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9, pad=12)
    add_legend(ax, len(series) + (1 if bodies else 0))
    caption = ("Dense fp32 bytes / bytes a worker sent at each step, every message of the exchange counted (payload headers included); "
               "dashed: the phased cases with payload bodies only (headers excluded, as papers count); dotted lines separate the "
               "phases of the source's phased case (steps numbered from 1).")
    return Plot("phase_ratio", title, png_uri(fig), caption)


def plot_aggregate_drift(cases: Sequence[RunCase], windows: Sequence[Window], title: str) -> Plot | None:
    """Cumulative aggregate error ‖Σ(aggregate − mean)‖/‖Σ mean‖ over steps, phases marked."""
    series = []
    ok = cases_that_ran(cases)
    restarted = all(c.aggregate is not None and c.aggregate.window_drift is not None for c in ok)
    for c in ok:
        drift = (c.aggregate.window_drift if restarted else c.aggregate.sum_drift) if c.aggregate else None
        if drift is not None and sum(finite(v) is not None for v in drift) >= 2:
            series.append((c, [finite(v) for v in drift]))
    if not series or not windows:
        return None
    fig, ax = new_figure()
    step_lines(ax, series, styles_of(cases), ms=3)
    _phase_marks(ax, windows)
    ax.set_ylabel("‖Σ(agg − mean)‖ / ‖Σ mean‖  (← better)")
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9, pad=12)
    add_legend(ax, len(series))
    caption = ("Cumulative error of the exchanged aggregate against the true worker mean, "
               + ("the sums restarted at each phase's first step" if restarted else "summed from the first step")
               + ": error feedback delays what it does not send, so this shows whether it arrives.")
    return Plot("aggregate_drift", title, png_uri(fig), caption)


def plot_phase_pareto(cases: Sequence[RunCase], window: Window, title: str) -> Plot | None:
    """Ratio against aggregate error over one phase window (LGC's compressed phase) for every case."""
    metrics = [(c, window_metrics(c, window)) for c in cases_that_ran(cases)]
    key = "drift" if all(m is not None and finite(m.get("drift")) is not None for _, m in metrics) else "aggregate_q"
    pts = []
    for c, m in metrics:
        if m is None or finite(m.get("ratio")) is None or finite(m.get(key)) is None or m[key] <= 0:
            continue
        pts.append((float(m[key]), float(m["ratio"]), c))
    if not pts:
        return None
    fig, ax = new_figure()
    scatter_front(ax, pts, styles_of(cases))
    ax.set_xlabel(("‖Σ(agg − mean)‖ / ‖Σ mean‖" if key == "drift" else "mean aggregate q") + " over the phase  (← better)")
    ax.set_ylabel("ratio over the phase, ×  (better →)")
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9)
    add_legend(ax, len(pts))
    what = ("the phase's cumulative aggregate error ‖Σ(agg − mean)‖/‖Σ mean‖" if key == "drift"
            else "the mean aggregate error ‖agg − mean‖²/‖mean‖²")
    caption = (f"Every case over {window.text()}: {what} against the ratio of the bytes sent in those steps; outlined points are "
               f"on the Pareto front. A compressor beats another at equal error when it sits higher at the same x.")
    return Plot("phase_pareto", title, png_uri(fig), caption)


#: a decision plot names the compressors among the best this many at some bandwidth; the rest are drawn in grey:
#: 30 named curves fanned their labels out and could not be told apart
DECISION_FRONT = 3


def _nearest_bandwidth(b: float) -> int:
    """The index of the decision bandwidth nearest ``b`` Gbit/s on a log scale."""
    return min(range(len(DECISION_BANDWIDTHS)), key=lambda j: abs(math.log(DECISION_BANDWIDTHS[j] / b)))


def decision_front(curves: dict[str, list[float]], top: int = DECISION_FRONT) -> set[str]:
    """The labels among the ``top`` highest speed-ups at some bandwidth of the decision curves (all, for few curves)."""
    if len(curves) <= 2 * top:
        return set(curves)
    labels = list(curves)
    out: set[str] = set()
    for j in range(len(next(iter(curves.values())))):
        out.update(sorted(labels, key=lambda lab: -curves[lab][j])[:top])
    return out


def plot_decision(cases: Sequence[RunCase], title: str) -> Plot | None:
    """Predicted speed-up over the bf16 all-reduce against link bandwidth at the source's worker count (the fp32
    all-reduce drawn on the same scale), break-evens marked."""
    got = decision_curves(cases, "bf16")
    fp32 = fp32_against_bf16(cases)
    if got is None or fp32 is None:
        return None
    workers, compute, curves, even = got
    styles = styles_of(cases)
    by_label = {c.label: c for c in cases_that_ran(cases)}
    fig, ax = new_figure(7.6, 5.2)
    ends = []
    front = decision_front(curves)
    for i, (label, ys) in enumerate(curves.items()):
        st = styles[label]
        if label not in front:  # the rest: thin grey, unnamed (its break-even is in the run's tables via advise)
            ax.plot(DECISION_BANDWIDTHS, ys, color="#c9ced4", lw=0.8, zorder=1)
            continue
        # markers along the line too: two curves of one colour (topk, topk@0.001) differ by marker, as in the legend
        ax.plot(DECISION_BANDWIDTHS, ys, color=st.color, lw=1.2, marker=st.marker, ms=3.5, markevery=(i % 6, 6), zorder=3)
        if even[label] is not None:
            ax.plot([even[label]], [1.0], marker=st.marker, color=st.color, ms=6, ls="none", zorder=4)
        ends.append((DECISION_BANDWIDTHS[-1], ys[-1], case_name(by_label[label]) if label in by_label else label, st.color))
    ax.axhline(1.0, color="black", ls="--", lw=1)
    if len(fp32[0]) == len(DECISION_BANDWIDTHS):  # the fp32 all-reduce against bf16: a curve above it beats fp32 too
        ax.plot(DECISION_BANDWIDTHS, fp32[0], color="black", ls=":", lw=1.2, zorder=2)
        ends.append((DECISION_BANDWIDTHS[-1], fp32[0][-1], "fp32 all-reduce", "black"))
    ax.set_xscale("log")
    scale_axis(ax, "y", [y for ys in (*curves.values(), fp32[0]) for y in ys])
    ax.set_xlabel("link bandwidth per worker, Gbit/s", fontsize=8.5)
    ax.set_ylabel("predicted speed-up over the bf16 all-reduce (above 1: compression pays)", fontsize=8.5)
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9.5)
    label_line_ends(ax, ends, fontsize=7)
    comp = (f"compute {1e3 * compute:.0f} ms per step (forward + backward measured on this machine)" if compute
            else "no compute time (this source measured none): communication and kernels only, an upper bound on any speed-up")
    caption = (f"gcbench advise's model on {workers} workers, α = {DECISION_LATENCY_S * 1e6:g} µs, {comp}; kernels from this run's "
               "timings on this machine. step = compute + compress + the compressor's protocol + decode; uncompressed = compute "
               "+ copy into buckets + all-reduce (ring or tree) + copy back; no overlap. Speed-ups are over the bf16 all-reduce, "
               f"the 16-bit baseline claims are made against (bf16 {fp32[1]}); the dotted line is the fp32 all-reduce on the same "
               "scale: a curve between it and 1× beats fp32 but not bf16. A marker on the dashed line is a break-even "
               "bandwidth: compression pays on slower links. For another cluster or device run `gcbench advise`."
               + (f" In colour the front: the best {DECISION_FRONT} at some bandwidth ({len(front)} of {len(curves)}); the "
                  f"{len(curves) - len(front)} others in grey, each named in the table folded below." if len(front) < len(curves)
                  else ""))
    more = None
    if len(front) < len(curves):  # the grey curves, on demand: each named with its break-even and speed-ups
        picks = [_nearest_bandwidth(b) for b in (1.0, 10.0, 100.0)]
        rows = tuple(
            (case_name(by_label[label]) if label in by_label else label, "front" if label in front else "grey",
             _break_even_text(even[label], curves[label]), *(f"{curves[label][j]:.3g}×" for j in picks))
            for label in sorted(curves, key=lambda lab: -max(curves[lab])))
        more = (f"Every curve, named: break-even and predicted speed-up of all {len(curves)} (sortable)",
                ("case", "drawn", "break-even Gbit/s", *(f"at {DECISION_BANDWIDTHS[j]:.3g} Gbit/s" for j in picks)), rows)
    return Plot("decision", title, png_uri(fig), caption, wide=True, more=more)


def _break_even_text(bandwidth: float | None, ys: Sequence[float]) -> str:
    """A curve's break-even bandwidth, or where it has none in the plotted range: pays at every bandwidth, or at none."""
    if bandwidth is not None:
        return f"{bandwidth:.3g}"
    return "pays throughout" if min(ys) > 1.0 else "never pays" if max(ys) < 1.0 else "—"


def source_plots(cases: Sequence[RunCase], source: str) -> list[Plot]:
    """The main plots of one source: ratio vs stream error on the common reference, the stream, throughput, per unit, phases."""
    plots = [plot_pareto(cases, f"ratio vs undelivered update — {source}"), plot_stream(cases, f"delivered update — {source}"),
             plot_throughput(cases, f"throughput — {source}"), plot_layers(cases, f"per-layer ratio — {source}"),
             plot_decision(cases, f"does compression pay? — {source}")]
    windows = source_windows(cases)
    if windows:
        plots += [plot_phase_ratio(cases, windows, f"ratio per step — {source}"),
                  plot_aggregate_drift(cases, windows, f"cumulative aggregate error — {source}"),
                  plot_phase_pareto(cases, windows[-1], f"ratio vs aggregate error, {windows[-1].name} phase — {source}")]
    return [p for p in plots if p is not None]


def oneshot_plots(cases: Sequence[RunCase], source: str) -> list[Plot]:
    """The detail plots of one source, each case against its own reference: ratio vs one-shot q, per-layer q, EF drift."""
    plots = [plot_oneshot_pareto(cases, f"ratio vs one-shot q (own reference) — {source}"),
             plot_layers(cases, f"per-layer one-shot q (own reference) — {source}", "q"),
             plot_ef_drift(cases, f"EF drift (own reference) — {source}")]
    return [p for p in plots if p is not None]
