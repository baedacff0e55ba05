"""The self-contained HTML report: sortable tables and matplotlib plots in one offline file.

The report is one file with no network fetches: tables plus plots of
ratio vs error (Pareto front), throughput bars against the copy roofline, per-layer ratio and EF
drift over steps.  It must read at suite scale (60 cases, 161 layers, a 1,400-px window).  Choices:

* Plots are drawn with matplotlib's Agg canvas (no display, no global pyplot state) at 100 dpi and
  embedded as base64 PNG ``data:`` URIs — small, and identical in every browser.  Styles and the
  few lines of table-sorting JavaScript are inline; no ``src``/``href`` points outside the file
  (an empty inline icon keeps browsers from asking for ``/favicon.ico``).
* Every point and line can be named: each case of a section has a marker × colour pair of its own
  (:func:`style_map`: a compressor's variants share a colour and differ by marker) kept across the
  section's plots, points are named beside themselves wherever the name fits without covering
  another (:func:`_label_points`), and lines are named at their right ends (:func:`_end_labels`).
* Per-layer views are heatmaps (case × unit, log colour scale, labelled colour bar) — one cell per
  value reads at 161 layers where overlaid lines did not — with a folded per-layer table.
* Tables fit the window: a source's summary table holds the columns that decide (ratio, delivered,
  step error, comp×copy); the rest, and the per-layer table, are folded in ``<details>``.  Kernel
  time over copy time has one name, ×copy (the shared column definitions of :mod:`gcbench.report.terminal`).
* The template is a string in this module (no package data to ship) rendered by jinja2 with
  autoescaping on, so suite labels, parameters and error messages cannot inject markup.  Text
  drawn into plots escapes ``$`` so matplotlib never parses a label as mathtext.
* One reference per plot and table (README, "What the metrics mean").  A source's main table and plots use
  the suite's common reference (the dense update of its optimizer): ratio against 1 − delivered,
  the share of the summed dense update a case's stream did not deliver, and the delivered
  fraction over steps.  The one-shot numbers, each case against its own reference (DGC's
  momentum-SGD update, the gradient for most), go to a detail section under a heading that says
  so.  A point no better than sending nothing (error ≥ 1, delivered ≤ 0) is drawn hollow in a
  shaded region and never joins the Pareto front, whatever its ratio.
* A timing is drawn as a speed only when it is one: a case whose compress timing beat its traffic
  bound is left out of the throughput plots (the caption names it); flagged bars are hatched.
* A plot is drawn only where its data exist, and its caption says what was left out: errors
  are on a log axis, so lossless cases (error 0) are listed instead of plotted; per-layer
  heatmaps need two or more units; EF drift needs a stateful compressor and two or more steps;
  throughput against tensor size needs one case label timed at two or more sizes within a run
  (one machine).  Axes are logarithmic when the values span a decade or more, linear otherwise.
* Train files (``gcbench train``) get held-out accuracy and loss per epoch, one line per
  compressor on one plot with the target accuracy drawn, and a time-to-target bar chart whose
  grey bars are each compressor's whole training time, so "not reached" stays visible.  Bench
  files (``gcbench bench``) get compress×copy bars per compressor (one bar per size) with each
  compressor's target marked, and — when a file has several sizes — the throughput-against-size
  plot of run files, fed with the bench records.  Time bars start at zero on a linear axis (a
  bar's length is its value); ratio-to-copy bars follow the decade rule above.
"""

from __future__ import annotations

import base64
import io
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator, NullFormatter
from matplotlib.transforms import Bbox

import gcbench
from gcbench.distributed.advise import KernelSet, advise, step_kernels_of
from gcbench.measure.bench import target_of
from gcbench.report.terminal import (
    BENCH_COLUMNS,
    BENCH_FOOTNOTE,
    DAGGER,
    DETAIL_COLUMNS,
    FOOTNOTE,
    ONESHOT_COLUMNS,
    ONESHOT_DETAIL_COLUMNS,
    PHASE_NOTE,
    SUMMARY_COLUMNS,
    TRAIN_COLUMNS,
    TRAIN_DETAIL_COLUMNS,
    TRAIN_FOOTNOTE,
    WORKER_HEADERS,
    WORKER_NOTE,
    Column,
    LoadedRun,
    bench_description,
    bench_name,
    bench_target,
    by_source,
    case_name,
    counts_text,
    fmt,
    is_reconstructed,
    measured_text,
    oneshot_caption,
    oneshot_reference,
    params_text,
    pareto_front,
    phase_columns,
    phase_values,
    row_cells,
    run_facts,
    size_text,
    stream_caption,
    stream_reference,
    train_description,
    train_notes,
    worker_cells,
)
from gcbench.report.text import NAME_MAX, clip
from gcbench.results.atomic import atomic_write
from gcbench.results.baselines import ClaimResult
from gcbench.results.compare import Comparison
from gcbench.results.metrics import METRICS
from gcbench.results.phases import Window, per_step_sent, per_step_sent_body, phase_rows, source_windows, window_metrics, worker_traffic
from gcbench.results.record import BEATS_BOUND, BenchCase, RunCase, TrainCase, as_cases

DPI = 100
# matplotlib's tab10, then six darker companions: sixteen colours that stay apart on white and in a legend
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
           "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#000000")
# twelve markers that stay apart at 6 px: with the colours, 192 cases get a marker × colour of their own
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*")


@dataclass(frozen=True)
class Style:
    """How one case is drawn in every plot of its section: a colour and a marker (the pair never repeats in a section)."""

    color: str
    marker: str


@dataclass(frozen=True)
class Plot:
    """One embedded figure: ``kind`` names the plot type (tests and CSS use it); ``wide`` plots take a row of their own."""

    kind: str
    title: str
    uri: str
    caption: str
    wide: bool = False


# ----------------------------------------------------------------------------- plot helpers


#: the most characters of a plot's title (it names a run and a source, both users' text)
PLOT_TITLE_MAX = 120
#: the most characters of any text the page shows (a table cell, a caption, a title attribute): a
#: 200,000-character label made every table, caption and tooltip carry it, many times over
PAGE_TEXT_MAX = 4096


def _mpl(text: str, limit: int = NAME_MAX) -> str:
    """Plain text for matplotlib, clipped to ``limit`` characters (:func:`clip`): a ``$`` would otherwise start mathtext.

    Clipped because matplotlib lays out every character it is given: a 200,000-character label
    took minutes and gigabytes to place beside a point, and no plot has room for more than a line.
    """
    return clip(str(text), limit).replace("$", r"\$")


def _page_text(value: Any) -> Any:
    """Jinja's ``finalize``: every string the page shows bounded to :data:`PAGE_TEXT_MAX` (the plots' data URIs excepted).

    A macro's output is ``Markup`` (HTML already rendered, its own values bounded): cutting it would cut tags.
    """
    if (isinstance(value, str) and not isinstance(value, markupsafe.Markup) and len(value) > PAGE_TEXT_MAX
            and not value.startswith("data:")):
        return clip(value, PAGE_TEXT_MAX)
    return value


def _figure(width: float = 5.0, height: float = 3.1) -> tuple[Figure, Any]:
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def _png(fig: Figure) -> str:
    """The figure as a ``data:`` URI; every log axis whose label does not say so gets "(log scale)" first."""
    for ax in fig.axes:
        for scale, get, put in ((ax.get_xscale, ax.get_xlabel, ax.set_xlabel), (ax.get_yscale, ax.get_ylabel, ax.set_ylabel)):
            if scale() == "log" and get() and "log" not in get():
                put(get() + "  (log scale)")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def _ok(cases: Sequence[Any], kind: str = "run") -> list[Any]:
    """The cases that ran (case dicts handed by a library caller are validated into the models of ``kind``)."""
    return [c for c in as_cases(cases, kind) if c.ok]


def style_map(cases: Sequence[RunCase | TrainCase]) -> dict[str, Style]:
    """A marker × colour per case label, no pair used twice: a reader names any point or line by its look alone.

    A compressor's cases share a colour (topk, topk@0.1, topk@0.01 are one hue) and differ by marker;
    a compressor with more variants than markers spills into the next colour.  Beyond
    ``len(_COLORS) × len(_MARKERS)`` labels pairs repeat (no suite is near that).
    """
    out: dict[str, Style] = {}
    used: set[tuple[int, int]] = set()
    families: dict[str, int] = {}
    for c in cases:
        if c.label in out:
            continue
        fam = families.setdefault(str(getattr(c, "compressor", None) or c.label), len(families))
        pair = next(((ci % len(_COLORS), mi) for ci in range(fam, fam + len(_COLORS)) for mi in range(len(_MARKERS))
                     if (ci % len(_COLORS), mi) not in used), None)
        if pair is None:  # every pair taken: cycle
            pair = (len(out) % len(_COLORS), (len(out) // len(_COLORS)) % len(_MARKERS))
        used.add(pair)
        out[c.label] = Style(_COLORS[pair[0]], _MARKERS[pair[1]])
    return out


def _label_points(ax: Any, pts: Sequence[tuple[float, float, str]], fontsize: float = 7.5, radius_pt: float = 4.0,
                  obstacles: Sequence[Bbox] = ()) -> int:
    """Write each point's name beside it where the text overlaps no other name, no point and no axes edge.

    Tries eight positions around a point in turn (right first); a point with no free position keeps its
    name in the legend only.  ``obstacles``: display boxes already drawn (a region's label) that no name
    may cover.  Call after the axes' scales and limits are final.  Returns how many points were named.
    """
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    xy = ax.transData.transform([(x, y) for x, y, _ in pts]) if pts else []
    r = radius_pt * fig.dpi / 72
    taken = [Bbox.from_extents(px - r, py - r, px + r, py + r) for px, py in xy] + list(obstacles)
    frame = ax.get_window_extent(renderer)
    offsets = ((5, 3, "left", "bottom"), (5, -3, "left", "top"), (-5, 3, "right", "bottom"), (-5, -3, "right", "top"),
               (0, 6, "center", "bottom"), (0, -6, "center", "top"), (7, 0, "left", "center"), (-7, 0, "right", "center"))
    named = 0
    for x, y, name in pts:
        for dx, dy, ha, va in offsets:
            t = ax.annotate(_mpl(name), (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va, fontsize=fontsize,
                            color="#24292f", zorder=6)
            box = t.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(o) for o in taken):
                taken.append(box)
                named += 1
                break
            t.remove()
    return named


def _end_labels(ax: Any, ends: Sequence[tuple[float, float, str, str]], fontsize: float = 7.5) -> None:
    """Name each line at the right of the axes, beside its last point: names spread apart vertically, thin leaders.

    ``ends`` are ``(x, y, name, colour)`` of each line's last point.  Call after the limits are final.
    """
    if not ends:
        return
    fig = ax.figure
    frame = ax.get_window_extent(fig.canvas.get_renderer())
    order = sorted(range(len(ends)), key=lambda i: ax.transData.transform((ends[i][0], ends[i][1]))[1])
    want = [(ax.transData.transform((ends[i][0], ends[i][1]))[1] - frame.y0) / frame.height for i in order]
    gap = min(fontsize * 1.25 * fig.dpi / 72 / frame.height, 1.0 / len(ends))
    ys: list[float] = []
    for w in want:  # bottom up: no name closer than ``gap`` to the one below
        ys.append(max(w, ys[-1] + gap) if ys else max(w, 0.0))
    top = 1.0
    for k in range(len(ys) - 1, -1, -1):  # then top down: inside the axes
        ys[k] = min(ys[k], top)
        top = ys[k] - gap
    for k, i in enumerate(order):
        x, y, name, color = ends[i]
        ax.annotate(_mpl(name), (x, y), xytext=(1.03, ys[k]), textcoords="axes fraction", va="center", ha="left", fontsize=fontsize,
                    color=color, annotation_clip=False, arrowprops={"arrowstyle": "-", "lw": 0.5, "color": color, "alpha": 0.7})


def _scale(ax: Any, axis: str, values: Sequence[float]) -> bool:
    """Log scale when the values span a decade or more; linear otherwise (log ticks over 267–277 are unreadable).

    Returns whether the axis is logarithmic (axis labels say so).
    """
    pos = [v for v in values if v > 0]
    if pos and len(pos) == len(values) and max(pos) / min(pos) >= 10:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        # label decades only: matplotlib labels minor ticks of short log spans (6×10⁰, 4×10⁰, ...), which clutters
        (ax.xaxis if axis == "x" else ax.yaxis).set_minor_formatter(NullFormatter())
        return True
    return False


def _legend(ax: Any, n: int) -> None:
    if n:
        ax.legend(fontsize=7.5, ncol=1 if n <= 12 else 2, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False,
                  handletextpad=0.3, columnspacing=1.0, borderaxespad=0.2)


def _styles(cases: Sequence[Any]) -> dict[str, Style]:
    """The style of every case handed to a plot (all of a section's cases: each keeps its look across the section)."""
    return style_map(as_cases(cases, "run"))


def _scatter_front(ax: Any, pts: Sequence[tuple[float, float, RunCase]], styles: dict[str, Style]) -> set[int]:
    """One point per case (x = error, y = ratio); points on the Pareto front outlined; returns the front."""
    front = set(pareto_front([(q, r) for q, r, _ in pts]))
    _scatter(ax, pts, front, styles)
    _scale(ax, "x", [p[0] for p in pts])
    _scale(ax, "y", [p[1] for p in pts])
    return front


def _scatter(ax: Any, pts: Sequence[tuple[float, float, RunCase]], front: set[int], styles: dict[str, Style],
             suffix: dict[str, str] | None = None, hollow: bool = False) -> None:
    """The points of a ratio-against-error plot, each in its case's marker × colour: front members outlined in black,
    ``hollow`` points (no claim to the front) unfilled."""
    for i, (q, r, c) in enumerate(pts):
        on, st = i in front, styles[c.label]
        ax.scatter([q], [r], s=58 if on else 40, marker=st.marker, facecolors="none" if hollow else st.color,
                   edgecolors="black" if on else st.color, linewidths=1.4 if on or hollow else 0.6, zorder=4 if on else 3,
                   label=_mpl(case_name(c) + (suffix or {}).get(c.label, "")))


def _step_lines(ax: Any, series: Sequence[tuple[RunCase, Sequence[float | None]]], styles: dict[str, Style], ms: float = 4,
                suffix: str = "", **line: Any) -> None:
    """One line per case over steps (numbered from 1) in its case's colour, its marker on at most a dozen steps."""
    for c, vals in series:
        xs = [i + 1 for i, v in enumerate(vals) if v is not None]
        st = styles[c.label]
        ax.plot(xs, [v for v in vals if v is not None], marker=st.marker, ms=ms, lw=1.1, color=st.color,
                markevery=max(1, len(xs) // 12), label=_mpl(case_name(c) + suffix), **line)
    ax.set_xlabel("step (from 1)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


# ----------------------------------------------------------------------------- plots


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
    for c in _ok(cases):
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
    fig, ax = _figure(7.6, 4.8)
    every = fp.drawn + fp.worse
    _scatter(ax, fp.drawn, set(fp.front), styles, suffix)
    _scatter(ax, fp.worse, set(), styles, suffix, hollow=True)  # shown, but no claim to the front
    log_x = _scale(ax, "x", [p[0] for p in every])
    log_y = _scale(ax, "y", [p[1] for p in every])
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
        taken.append(region.get_window_extent(fig.canvas.get_renderer()))
    ax.set_xlim(lo, hi)
    ax.set_xlabel(xlabel + ("  (log scale; ← better)" if log_x else "  (← better)"), fontsize=8.5)
    ax.set_ylabel("compression ratio, ×  (dense / wire bytes" + ("; log scale" if log_y else "") + "; better →)", fontsize=8.5)
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9.5)
    _legend(ax, len(every) + (len(fpts) > 1) + shaded)
    front_first = [fp.drawn[i] for i in fp.front] + [p for i, p in enumerate(fp.drawn) if i not in fp.front] + fp.worse
    named = _label_points(ax, [(e, r, case_name(c)) for e, r, c in front_first], obstacles=taken)
    caption += (f" Every point has a marker × colour of its own (the key); {named} of {len(every)} are also named beside the point "
                f"where the name fits. Outlined in black: the Pareto front ({len(fp.front)} of {len(fp.drawn)}).")
    if fp.worse:
        caption += (f" No better than sending nothing (error ≥ {NOTHING:g}; hollow, in the shaded region, left out of the front): "
                    f"{_names([p[2] for p in fp.worse])}.")
    if fp.lossless:
        caption += f" Not drawn (lossless: an error of 0 has no place on a log axis): {_names(fp.lossless)}."
    return Plot(kind, title, _png(fig), caption, wide=True)


def plot_pareto(cases: Sequence[RunCase], title: str) -> Plot | None:
    """The main plot: ratio against 1 − delivered on the suite's common reference (the stream view), front marked."""
    ok = _ok(cases)
    fp = front_points(ok, undelivered)
    ref = stream_reference(ok) or "the common reference"
    short = {c.label: " (short)" for c in ok if c.stream is not None and c.stream.enough is False}
    caption = (f"Ratio against 1 − delivered: the share of the summed {ref} that a case's stream of updates did not "
               "deliver after its last step (‖Σ_t(U_t − D_t)‖/‖Σ_t D_t‖, whole model); every case on this one reference.")
    if short:
        caption += (" (short) = a stream with too few steps to rank stateful compressors: "
                    + _names([c for c in ok if c.label in short]) + ".")
    return _plot_front(fp, "pareto", title, "1 − delivered = ‖Σ(U − D)‖ / ‖Σ D‖ after the last step, fraction of ‖Σ D‖", caption,
                       _styles(cases), short)


def plot_oneshot_pareto(cases: Sequence[RunCase], title: str) -> Plot | None:
    """The detail plot: ratio against one-shot q, each case against its OWN reference (not one axis of one reference)."""
    ok = _ok(cases)
    fp = front_points(ok, lambda c: c.metric("q"))
    caption = f"Ratio against one-shot q (whole model), {oneshot_caption(ok, 'the main plot', clip).removeprefix('one shot: ')}"
    return _plot_front(fp, "pareto_oneshot", title, "one-shot q = ‖C(x)−x‖²/‖x‖², own reference, fraction of ‖x‖²", caption,
                       _styles(cases))


def plot_stream(cases: Sequence[RunCase], title: str) -> Plot | None:
    """Delivered fraction after every step, one line per case, on the common reference (two steps or more)."""
    series = []
    for c in _ok(cases):
        vals = [_num(v) for v in (c.stream.per_step_delivered or [])] if c.stream else []
        if sum(v is not None for v in vals) >= 2:
            series.append((c, vals))
    if not series:
        return None
    floor = -1.0  # below this a case is far worse than sending nothing: clip, name it, keep the others readable
    clipped = [c for c, vals in series if any(v is not None and v < floor for v in vals)]
    styles = _styles(cases)
    fig, ax = _figure(7.6, 5.6)
    drawn = [(c, [None if v is None else max(v, floor) for v in vals]) for c, vals in series]
    _step_lines(ax, drawn, styles, ms=3.5)
    ax.axhline(1.0, color="black", ls="--", lw=1)
    ax.axhline(0.0, color="#8c959f", ls=":", lw=1.2)
    trans = ax.get_yaxis_transform()
    boxed = {"boxstyle": "square,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85}
    ax.text(0.01, 1.0, "dense update (1)", transform=trans, fontsize=7.5, va="bottom", color="#24292f", bbox=boxed, zorder=5)
    ax.text(0.01, 0.0, "sending nothing (0)", transform=trans, fontsize=7.5, va="top", color="#424a53", bbox=boxed, zorder=5)
    low = min(v for _, vals in series for v in vals if v is not None)
    ax.set_ylim(max(low, floor) - 0.05, 1.07)
    ax.set_ylabel("delivered fraction of ‖Σ D‖, linear  (higher is better)", fontsize=8.5)
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9.5)
    _end_labels(ax, [(xs[-1], ys[-1], case_name(c), styles[c.label].color) for c, vals in drawn
                     for xs, ys in [([i + 1 for i, v in enumerate(vals) if v is not None], [v for v in vals if v is not None])]],
                fontsize=7)
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
    return Plot("stream", title, _png(fig), caption, wide=True)


def _timing_flags(case: RunCase, kernel: str) -> list[str]:
    x = case.timing.x_copy(kernel) if case.timing else None
    return list(x.flags or []) if x is not None else []


def throughput_rows(cases: Sequence[RunCase]) -> tuple[list[tuple[RunCase, float | None, float | None, float | None]], list[RunCase]]:
    """``(case, compress GB/s, decompress GB/s, copy GB/s)`` of the cases a throughput plot draws, and those it leaves out.

    Left out: a case whose compress timing beat its traffic bound (:attr:`RunCase.beats_bound`) — what
    was timed is not the work the compressor must do, so neither of its numbers is drawn as a speed.
    """
    ok = _ok(cases)
    rows = [(c, c.metric("compress_gbps"), c.metric("decompress_gbps"), c.metric("copy_gbps")) for c in ok if not c.beats_bound]
    return [r for r in rows if r[1] is not None or r[2] is not None], [c for c in ok if c.beats_bound]


def plot_throughput(cases: Sequence[RunCase], title: str) -> Plot | None:
    """Compress and decompress GB/s per case (log axis) with the copy roofline drawn.

    A case whose compress timing beat its traffic bound is not drawn (what was timed is not the work
    the compressor must do, so it is no speed) and the caption names it; a flagged bar (unstable, too
    short) is hatched and its flags follow its name.
    """
    rows, bound = throughput_rows(cases)
    if not rows:
        return None
    fig, ax = _figure(min(8.0, max(4.2, 0.42 * len(rows) + 1.5)), 3.1)
    xs = list(range(len(rows)))
    w = 0.38
    flagged: dict[str, list[str]] = {}  # "compress, unstable" → case names
    handles = []
    for kernel, shift, color, col in (("compress", -w / 2, "#1f77b4", 1), ("decompress", w / 2, "#ff7f0e", 2)):
        bars = ax.bar([x + shift for x in xs], [r[col] or 0 for r in rows], w, color=color, zorder=3)
        handles.append(Patch(facecolor=color, label=kernel))
        for bar, r in zip(bars, rows, strict=True):
            if r[col] is not None and _timing_flags(r[0], kernel):
                bar.set_hatch("///")  # a flagged time: drawn, but not a speed to act on
                bar.set_edgecolor("black")
                flagged.setdefault(f"{kernel} {', '.join(_timing_flags(r[0], kernel))}", []).append(case_name(r[0]))
    if flagged:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="flagged time"))
    copies = [r[3] for r in rows if r[3] is not None]
    roof = statistics.median(copies) if copies else None
    if roof is not None:
        handles.append(ax.axhline(roof, color="black", ls="--", lw=1.2, label=f"copy roofline {roof:.3g} GB/s", zorder=4))
    log_y = _scale(ax, "y", [v for r in rows for v in (r[1], r[2]) if v is not None] + ([roof] if roof is not None else []))
    ax.set_xticks(xs)
    ax.set_xticklabels([_mpl(case_name(r[0]) + (" *" if any(_timing_flags(r[0], k) for k in ("compress", "decompress")) else ""))
                        for r in rows], rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("GB/s of dense fp32 input" + ("  (log scale)" if log_y else ""))
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9)
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
    return Plot("throughput", title, _png(fig), caption)


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
    rows = [c for c in _ok(cases) if len(c.layers or []) >= 2]
    if not rows:
        return [], [], []
    widest = max(rows, key=lambda c: len(c.layers or []))
    names = [str(u.name) if u.name is not None else f"unit {i}" for i, u in enumerate(widest.layers or [])]
    values = []
    for c in rows:
        vals: list[float | None] = [None] * len(names)
        for i, u in enumerate(c.layers or []):
            v = _num(getattr(u, metric))
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
    fig, ax = _figure(10.5, 1.9 + 0.17 * len(rows))
    ax.grid(False)
    cmap = matplotlib.colormaps["viridis" if higher else "viridis_r"].with_extremes(bad="#ffffff")
    lo, hi = float(data.min()), float(data.max())
    log = hi / lo >= 10
    image = ax.imshow(data, aspect="auto", interpolation="nearest", cmap=cmap,
                      norm=LogNorm(lo, hi) if log else Normalize(lo, hi if hi > lo else lo + 1))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_mpl(case_name(c)) for c in rows], fontsize=7)
    every = max(1, math.ceil(len(names) / 28))
    ticks = list(range(0, len(names), every))
    ax.set_xticks(ticks)
    ax.set_xticklabels([_mpl(f"{i} {names[i]}") for i in ticks], rotation=90, fontsize=6.5)
    ax.set_xlabel(f"unit: index and name (every {every}{'th' if every > 1 else ''} of {len(names)}, in model order)"
                  if every > 1 else f"unit: index and name ({len(names)}, in model order)", fontsize=8.5)
    bar = fig.colorbar(image, ax=ax, pad=0.01, fraction=0.035)
    bar.set_label(f"{label}  ({'log colour scale; ' if log else ''}{'higher' if higher else 'lower'} is better)", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9.5)
    missing = sum(v is None for vals in values for v in vals)
    caption = (f"{label[0].upper()}{label[1:]} of each unit ({rows[0].granularity or 'layer'} granularity) of each case: one row per "
               "case, one column per unit; the source's per-layer table (folded under its plots) lists every unit by name.")
    if missing:
        caption += f" White: no value, or one that is not positive (a lossless unit's q of 0): {missing} cells."
    return Plot(kind, title, _png(fig), caption, wide=True)


def plot_ef_drift(cases: Sequence[RunCase], title: str) -> Plot | None:
    """‖Σ C_t − Σ g_t‖/‖Σ g_t‖ over steps for the stateful cases (two steps or more: a drift needs a stream)."""
    series = []
    for c in _ok(cases):
        drift = c.ef_drift.sum_drift if c.ef_drift else None
        if drift is not None and sum(_num(v) is not None for v in drift) >= 2:
            series.append((c, [_num(v) for v in drift]))
    if not series:
        return None
    styles = _styles(cases)
    fig, ax = _figure(6.0, 3.6)
    _step_lines(ax, series, styles)
    log_y = _scale(ax, "y", [v for _, vals in series for v in vals if v is not None])
    ax.set_ylabel("‖Σ C_t − Σ g_t‖ / ‖Σ g_t‖, fraction" + ("  (log scale)" if log_y else ""), fontsize=8.5)
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9.5)
    _end_labels(ax, [(i + 1, v, case_name(c), styles[c.label].color) for c, vals in series
                     for i, v in [max(((i, v) for i, v in enumerate(vals) if v is not None), key=lambda t: t[0])]], fontsize=7)
    caption = ("Error-feedback drift of worker 0 over steps: how far the sum of what was sent is from the sum of the reference "
               "updates (stateful compressors only; each case against its own reference). Lines are named at the right.")
    return Plot("ef_drift", title, _png(fig), caption)


def _phase_marks(ax: Any, windows: Sequence[Window]) -> None:
    """Dotted lines between phase windows, each window named at the top of the axes."""
    trans = ax.get_xaxis_transform()
    for w in windows:
        if w.first > 0:
            ax.axvline(w.first + 0.5, color="#57606a", ls=":", lw=1)
        ax.text((w.first + w.last) / 2 + 1, 1.0, _mpl(w.name), transform=trans, ha="center", va="bottom", fontsize=7, color="#57606a")


def plot_phase_ratio(cases: Sequence[RunCase], windows: Sequence[Window], title: str) -> Plot | None:
    """Traffic ratio at every step (dense bytes / bytes a worker sent that step), phases marked."""
    series = []
    for c in _ok(cases):
        dense = 4.0 * float((c.size.numel if c.size else None) or 0)
        sent = per_step_sent(c)
        if dense > 0 and sent and any(v > 0 for v in sent):
            series.append((c, [dense / v if v > 0 else None for v in sent]))
    if not series or not windows:
        return None
    styles = _styles(cases)
    fig, ax = _figure()
    _step_lines(ax, series, styles, ms=3)
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
                    label=_mpl(case_name(c) + " (bodies only)"))
    _scale(ax, "y", [v for _, vals in series for v in vals if v is not None] + bodies)
    _phase_marks(ax, windows)
    ax.set_ylabel("ratio at the step, ×  (better →)")
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9, pad=12)
    _legend(ax, len(series) + (1 if bodies else 0))
    caption = ("Dense fp32 bytes / bytes a worker sent at each step, every message of the exchange counted (payload headers included); "
               "dashed: the phased cases with payload bodies only (headers excluded, as papers count); dotted lines separate the "
               "phases of the source's phased case (steps numbered from 1).")
    return Plot("phase_ratio", title, _png(fig), caption)


def plot_aggregate_drift(cases: Sequence[RunCase], windows: Sequence[Window], title: str) -> Plot | None:
    """Cumulative aggregate error ‖Σ(aggregate − mean)‖/‖Σ mean‖ over steps, phases marked."""
    series = []
    ok = _ok(cases)
    restarted = all(c.aggregate is not None and c.aggregate.window_drift is not None for c in ok)
    for c in ok:
        drift = (c.aggregate.window_drift if restarted else c.aggregate.sum_drift) if c.aggregate else None
        if drift is not None and sum(_num(v) is not None for v in drift) >= 2:
            series.append((c, [_num(v) for v in drift]))
    if not series or not windows:
        return None
    fig, ax = _figure()
    _step_lines(ax, series, _styles(cases), ms=3)
    _phase_marks(ax, windows)
    ax.set_ylabel("‖Σ(agg − mean)‖ / ‖Σ mean‖  (← better)")
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9, pad=12)
    _legend(ax, len(series))
    caption = ("Cumulative error of the exchanged aggregate against the true worker mean, "
               + ("the sums restarted at each phase's first step" if restarted else "summed from the first step")
               + ": error feedback delays what it does not send, so this shows whether it arrives.")
    return Plot("aggregate_drift", title, _png(fig), caption)


def plot_phase_pareto(cases: Sequence[RunCase], window: Window, title: str) -> Plot | None:
    """Ratio against aggregate error over one phase window (LGC's compressed phase) for every case."""
    metrics = [(c, window_metrics(c, window)) for c in _ok(cases)]
    key = "drift" if all(m is not None and _num(m.get("drift")) is not None for _, m in metrics) else "aggregate_q"
    pts = []
    for c, m in metrics:
        if m is None or _num(m.get("ratio")) is None or _num(m.get(key)) is None or m[key] <= 0:
            continue
        pts.append((float(m[key]), float(m["ratio"]), c))
    if not pts:
        return None
    fig, ax = _figure()
    _scatter_front(ax, pts, _styles(cases))
    ax.set_xlabel(("‖Σ(agg − mean)‖ / ‖Σ mean‖" if key == "drift" else "mean aggregate q") + " over the phase  (← better)")
    ax.set_ylabel("ratio over the phase, ×  (better →)")
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9)
    _legend(ax, len(pts))
    what = ("the phase's cumulative aggregate error ‖Σ(agg − mean)‖/‖Σ mean‖" if key == "drift"
            else "the mean aggregate error ‖agg − mean‖²/‖mean‖²")
    caption = (f"Every case over {window.text()}: {what} against the ratio of the bytes sent in those steps; outlined points are "
               f"on the Pareto front. A compressor beats another at equal error when it sits higher at the same x.")
    return Plot("phase_pareto", title, _png(fig), caption)


@dataclass(frozen=True)
class SizePoint:
    """One timed case for :func:`plot_size_scaling`: its label and name, the elements timed, compress and copy GB/s, flags."""

    label: str
    name: str
    numel: int | None
    gbps: float | None
    copy_gbps: float | None
    flags: tuple[str, ...] = ()  # the compress timing's flags (unstable, too short, beats traffic bound)


def run_size_point(c: RunCase) -> SizePoint:
    """A run case as a :class:`SizePoint` (its timing's element count, GB/s and compress flags)."""
    return SizePoint(c.label, case_name(c), c.timing.numel if c.timing else None, c.metric("compress_gbps"), c.metric("copy_gbps"),
                     tuple(_timing_flags(c, "compress")))


def bench_size_point(rec: BenchCase) -> SizePoint:
    """A bench record as a :class:`SizePoint` (copy GB/s from its copy median and element count)."""
    copy_s = _num(rec.copy_.median_s) if rec.copy_ else None
    copy_gbps = 4 * rec.numel / copy_s / 1e9 if rec.numel is not None and copy_s else None
    x = (rec.x_copy or {}).get("compress")
    return SizePoint(bench_name(rec), bench_name(rec), rec.numel, rec.metric("gbps_compress") if rec.ok else None, copy_gbps,
                     tuple(x.flags or []) if x is not None else ())


def plot_size_scaling(points: Sequence[SizePoint], title: str) -> Plot | None:
    """Compress GB/s against the number of elements timed, per case label (one run, one machine).

    A point whose timing beat its traffic bound is no speed: left out, and the caption names it; other
    flagged points (unstable, too short) are drawn hollow.
    """
    by_label: dict[str, dict[int, float]] = {}
    names: dict[str, str] = {}
    copies: dict[int, list[float]] = {}
    hollow: set[tuple[str, int]] = set()
    bound = list(dict.fromkeys(f"“{pt.name}”" for pt in points if BEATS_BOUND in pt.flags))
    for pt in points:
        if pt.numel is None or pt.numel <= 0 or pt.gbps is None or BEATS_BOUND in pt.flags:
            continue
        by_label.setdefault(pt.label, {})[pt.numel] = pt.gbps
        names[pt.label] = pt.name
        if pt.flags:
            hollow.add((pt.label, pt.numel))
        if pt.copy_gbps is not None:
            copies.setdefault(pt.numel, []).append(pt.copy_gbps)
    series = {k: v for k, v in by_label.items() if len(v) >= 2}
    if not series:
        return None
    fig, ax = _figure()
    for i, (label, pts) in enumerate(series.items()):
        xs = sorted(pts)
        color = _COLORS[i % len(_COLORS)]
        ax.plot(xs, [pts[x] for x in xs], marker="o", ms=4, lw=1.2, color=color, label=_mpl(names[label]))
        flagged = [x for x in xs if (label, x) in hollow]
        if flagged:  # a flagged time: drawn, but not a speed to act on
            ax.scatter(flagged, [pts[x] for x in flagged], s=40, facecolors="white", edgecolors=color, linewidths=1.4, zorder=4)
    if copies:
        xs = sorted(copies)
        ax.plot(xs, [statistics.median(copies[x]) for x in xs], color="black", ls="--", lw=1.2, label="copy roofline")
    _scale(ax, "x", [x for pts in series.values() for x in pts])
    _scale(ax, "y", [g for pts in series.values() for g in pts.values()] + [statistics.median(v) for v in copies.values()])
    ax.set_xlabel("elements compressed per worker-step")
    ax.set_ylabel("compress GB/s of dense fp32 input")
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9)
    _legend(ax, len(series) + bool(copies))
    caption = ("Compress throughput against tensor size for each case label timed at two or more sizes in this run "
               f"({len(series)} of {len(by_label)} labels); the dashed line is the median copy throughput at each size.")
    if any(label in series for label, _ in hollow):
        caption += " Hollow points: a flagged time (unstable or too short), not a speed to act on."
    if bound:
        caption += f" Not drawn ({BEATS_BOUND}, so no speed): " + ", ".join(bound) + "."
    return Plot("size", title, _png(fig), caption)


def train_curve_series(cases: Sequence[TrainCase], key: str) -> list[tuple[TrainCase, list[tuple[int, float]]]]:
    """(case, [(epoch, value), ...]) for every completed train case with ``key`` in its per-epoch curve."""
    series = []
    for c in _ok(cases, "train"):
        curve = c.training.curve if c.training else None
        if curve is None:
            continue
        pts = [(e.epoch, _num(getattr(e, key, None))) for e in curve if e.epoch is not None]
        pts_ok = [(x, y) for x, y in pts if y is not None]
        if pts_ok:
            series.append((c, pts_ok))
    return series


def plot_train_curves(cases: Sequence[TrainCase], key: str, title: str) -> Plot | None:
    """Held-out ``test_accuracy`` or ``test_loss`` after every epoch, one line per compressor of a train file."""
    series = train_curve_series(cases, key)
    if not series:
        return None
    accuracy = key == "test_accuracy"
    styles = style_map([c for c, _ in series])
    fig, ax = _figure()
    for c, pts in series:
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker=styles[c.label].marker, ms=4, lw=1.4, color=styles[c.label].color,
                label=_mpl(case_name(c)))
    targets = {c.metric("target_accuracy") for c, _ in series} - {None}
    n_legend = len(series)
    if accuracy and len(targets) == 1:
        target = targets.pop()
        ax.axhline(target, color="black", ls="--", lw=1.1, label=f"target {target:g}")
        n_legend += 1
    if not accuracy:
        _scale(ax, "y", [y for _, pts in series for _, y in pts])
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("held-out accuracy  (higher is better)" if accuracy else "held-out loss  (lower is better)")
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9)
    _legend(ax, n_legend)
    what = "accuracy" if accuracy else "loss"
    caption = (f"Held-out {what} at the end of every epoch, one line per compressor (every compressor starts from the same "
               "seeded model and data order)" + ("; the dashed line is the target accuracy of time-to-target." if accuracy and
                                                 n_legend > len(series) else "."))
    return Plot("train_accuracy" if accuracy else "train_loss", title, _png(fig), caption)


def plot_time_to_target(cases: Sequence[TrainCase], title: str) -> Plot | None:
    """Training time to the target accuracy per compressor, over a grey bar of its whole training time."""
    rows = []
    for c in _ok(cases, "train"):
        total = c.metric("train_time_s")
        if total is None:
            continue
        rows.append((case_name(c), c.metric("time_to_target_s"), total, c.metric("best_accuracy")))
    if not rows:
        return None
    targets = {c.metric("target_accuracy") for c in _ok(cases, "train")} - {None}
    fig, ax = _figure(5.6, max(1.9, 0.42 * len(rows) + 1.1))
    ys = list(range(len(rows)))[::-1]  # the first compressor on top
    ax.barh(ys, [r[2] for r in rows], 0.62, color="#d0d7de", label="whole training run", zorder=2)
    ax.barh(ys, [r[1] or 0.0 for r in rows], 0.62, color="#2ca02c", label="time to target", zorder=3)
    right = max(r[2] for r in rows)
    for y, (_, ttt, total, best) in zip(ys, rows, strict=True):
        if ttt is not None:
            ax.text(ttt + right * 0.01, y, f"{ttt:.3g} s", va="center", fontsize=8, zorder=4)
        else:
            ax.text(total + right * 0.01, y, "not reached" + (f" (best {best:.3f})" if best is not None else ""), va="center",
                    fontsize=8, color="#b42318", zorder=4)
    ax.set_xlim(0, right * 1.45)
    ax.set_yticks(ys)
    ax.set_yticklabels([_mpl(r[0]) for r in rows], fontsize=8)
    ax.grid(False, axis="y")
    target_text = f"accuracy {next(iter(targets)):g}" if len(targets) == 1 else "the target accuracy"
    ax.set_xlabel(f"training seconds to reach {target_text}  (← better)")
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9)
    _legend(ax, 2)
    reached = sum(r[1] is not None for r in rows)
    caption = (f"Training time (evaluation excluded) until the held-out accuracy first reached {target_text}, checked at epoch "
               f"ends; grey bars are each compressor's whole training run. {reached} of {len(rows)} reached the target.")
    return Plot("time_to_target", title, _png(fig), caption)


@dataclass(frozen=True)
class BenchBars:
    """What the compress×copy bar chart draws: compressors in file order, sizes, bar heights, targets."""

    names: list[str]
    sizes: list[int]
    values: dict[tuple[str, int], float]  # (compressor, numel) → compress×copy
    targets: dict[str, float]  # compressor → compress×copy target (compressors without one are absent)


def bench_bars(cases: Sequence[RunCase]) -> BenchBars:
    ok = [c for c in as_cases(cases, "bench") if c.ok and c.metric("compress_x_copy") is not None and c.numel is not None]
    names = list(dict.fromkeys(bench_name(c) for c in ok))
    targets = {}
    for n in names:
        t = target_of(n)
        if t is not None and t.compress_x_copy is not None:
            targets[n] = float(t.compress_x_copy)
    return BenchBars(names, sorted({c.numel for c in ok}), {(bench_name(c), c.numel): float(c.compress_x_copy) for c in ok}, targets)


def plot_bench_x_copy(cases: Sequence[RunCase], title: str) -> Plot | None:
    """compress×copy per compressor of a bench file (one bar per size), each compressor's target marked."""
    bars = bench_bars(cases)
    if not bars.values:
        return None
    names, sizes, value = bars.names, bars.sizes, bars.values
    fig, ax = _figure(min(9.0, max(4.6, 0.34 * len(value) + 0.5 * len(names) + 2.0)), 3.3)
    width = 0.8 / len(sizes)
    for j, size in enumerate(sizes):
        xs = [i - 0.4 + width * (j + 0.5) for i, n in enumerate(names) if (n, size) in value]
        vals = [value[(n, size)] for n in names if (n, size) in value]
        ax.bar(xs, vals, width * 0.92, color=_COLORS[j % len(_COLORS)], label=f"{size_text(size)} elements", zorder=3)
        if len(value) <= 24:
            for x, v in zip(xs, vals, strict=True):
                ax.text(x, v, f"{v:.2f}×" if v < 10 else f"{v:.0f}×", ha="center", va="bottom", fontsize=7, zorder=5)
    marked, untargeted = [], []
    for i, n in enumerate(names):
        if n in bars.targets:
            ax.hlines(bars.targets[n], i - 0.46, i + 0.46, colors="#d62728", lw=2.4, zorder=4, label="target" if not marked else None)
            marked.append(bars.targets[n])
        else:
            t = target_of(n)
            untargeted.append(n + (f" ({t.text()})" if t is not None and t.text() else ""))
    ax.axhline(1.0, color="black", ls="--", lw=1.0, label="copy (1×)", zorder=2)
    _scale(ax, "y", [*value.values(), *marked, 1.0])
    ax.set_xticks(list(range(len(names))))
    ax.set_xticklabels([_mpl(n) for n in names], rotation=30 if len(names) > 6 else 0, ha="right" if len(names) > 6 else "center",
                       fontsize=8)
    ax.set_ylabel("compress×copy: compress time / copy time, ×  (← better)")
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9)
    _legend(ax, len(sizes) + bool(marked) + 1)
    caption = ("Median compress time as a multiple of a plain copy of the same tensor (timed in the same process); red marks are "
               "each compressor's compress×copy target in this gcbench version, the dashed line a copy.")
    if untargeted:
        caption += " No compress×copy target: " + "; ".join(untargeted) + "."
    failed = [f"{bench_name(c)} at {size_text(c.numel)}" for c in as_cases(cases, "bench") if not c.ok]
    if failed:
        caption += " Failed, not drawn: " + ", ".join(failed) + "."
    return Plot("bench_x_copy", title, _png(fig), caption)


#: the decision plot's bandwidth axis (Gbit/s) and the latency it charges per message
DECISION_BANDWIDTHS = tuple(float(b) for b in np.logspace(-1, math.log10(400), 49))
DECISION_LATENCY_S = 5e-6


def decision_curves(cases: Sequence[RunCase]) -> tuple[int, float | None, dict[str, list[float]], dict[str, float | None]] | None:
    """(workers, compute time, per case label its predicted speed-up at every :data:`DECISION_BANDWIDTHS`, its break-even
    bandwidth) from :mod:`gcbench.distributed.advise`'s model on the source's own kernels; None without two timed cases."""
    kernels, compute = step_kernels_of(cases)
    workers = next((int(c.source.workers) for c in _ok(cases) if c.source is not None and c.source.workers), 0)
    if len(kernels) < 2 or workers < 2:
        return None
    ks = KernelSet("", "", "", "", tuple(kernels))
    adv = advise(ks, compute or 0.0, [workers], DECISION_BANDWIDTHS, DECISION_LATENCY_S)
    curves: dict[str, list[float]] = {k.label: [] for k in kernels}
    for sc in adv.scenarios:
        for st in sc.steps:
            curves[st.label].append(st.speedup)
    even: dict[str, float | None] = {}
    logs = [math.log10(b) for b in DECISION_BANDWIDTHS]
    for label, ys in curves.items():  # where the curve crosses 1×, interpolated on the log axis
        even[label] = None
        for i in range(len(ys) - 1):
            a, b = ys[i] - 1.0, ys[i + 1] - 1.0
            if a > 0 >= b or a < 0 <= b:
                even[label] = 10 ** (logs[i] + (logs[i + 1] - logs[i]) * a / (a - b))
                break
    return workers, compute, curves, even


def plot_decision(cases: Sequence[RunCase], title: str) -> Plot | None:
    """Predicted speed-up over uncompressed all-reduce against link bandwidth at the source's worker count, break-evens marked."""
    got = decision_curves(cases)
    if got is None:
        return None
    workers, compute, curves, even = got
    styles = _styles(cases)
    by_label = {c.label: c for c in _ok(cases)}
    fig, ax = _figure(7.6, 5.2)
    ends = []
    for label, ys in curves.items():
        st = styles[label]
        ax.plot(DECISION_BANDWIDTHS, ys, color=st.color, lw=1.2)
        if even[label] is not None:
            ax.plot([even[label]], [1.0], marker=st.marker, color=st.color, ms=6, ls="none", zorder=4)
        ends.append((DECISION_BANDWIDTHS[-1], ys[-1], case_name(by_label[label]) if label in by_label else label, st.color))
    ax.axhline(1.0, color="black", ls="--", lw=1)
    ax.set_xscale("log")
    _scale(ax, "y", [y for ys in curves.values() for y in ys])
    ax.set_xlabel("link bandwidth per worker, Gbit/s", fontsize=8.5)
    ax.set_ylabel("predicted speed-up over uncompressed (above 1: compression pays)", fontsize=8.5)
    ax.set_title(_mpl(title, PLOT_TITLE_MAX), fontsize=9.5)
    _end_labels(ax, ends, fontsize=7)
    comp = (f"compute {1e3 * compute:.0f} ms per step (forward + backward measured on this machine)" if compute
            else "no compute time (this source measured none): communication and kernels only, an upper bound on any speed-up")
    caption = (f"gcbench advise's model on {workers} workers, α = {DECISION_LATENCY_S * 1e6:g} µs, {comp}; kernels from this run's "
               "timings on this machine. step = compute + compress + the compressor's protocol + decode; uncompressed = compute "
               "+ copy into buckets + all-reduce (ring or tree) + copy back; no overlap. A marker on the dashed line is a break-even "
               "bandwidth: compression pays on slower links. For another cluster or device run `gcbench advise`.")
    return Plot("decision", title, _png(fig), caption, wide=True)


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


# ----------------------------------------------------------------------------- context


def _header(c: Column) -> str:
    return c.header + (" ↑" if c.higher_is_better else " ↓" if c.higher_is_better is not None else "")


def _headers(cols: Sequence[Column]) -> list[dict[str, Any]]:
    return [{"header": _header(c), "help": c.help, "left": False} for c in cols]


def _case_row(c: RunCase, cols: Sequence[Column], reference: bool = False) -> dict[str, Any]:
    """A run case as a table row over ``cols`` (numbers sort by value); ``reference``: its own one-shot reference last."""
    cells = _num_cells(cols, c) if c.ok else []
    if c.ok and reference:
        cells.append({"text": oneshot_reference(c), "v": "", "cls": "wrap"})
    return {
        "name": case_name(c),
        "compressor": str(c.compressor or "?"),
        "version": "?" if c.version is None else str(c.version),
        "params": params_text(c),
        "reconstructed": is_reconstructed(c),
        "ok": c.ok,
        "error": c.error_text if not c.ok else "",
        "cells": cells,
    }


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
    for c in _ok(cases):
        for i, u in enumerate(c.layers or []):
            numel, wire = _num(u.numel), _num(u.wire_bytes)
            bits = 8 * wire / numel if numel and wire is not None else None
            rows.append([case_name(c), str(i), str(u.name or ""), "" if numel is None else str(int(numel)), _short(_num(u.ratio)),
                         _short(bits, 3), _short(_num(u.q), 3)])
    return rows


def _run_context(i: int, run: LoadedRun) -> dict[str, Any]:
    sources = []
    for j, (src, cases) in enumerate(by_source(run.cases).items()):
        main = {"headers": _headers(HTML_SUMMARY_COLUMNS), "rows": [_case_row(c, HTML_SUMMARY_COLUMNS) for c in cases],
                "caption": stream_caption(cases, clip), "compact": True}
        detail = {"headers": _headers(HTML_DETAIL_COLUMNS), "rows": [_case_row(c, HTML_DETAIL_COLUMNS) for c in cases],
                  "compact": False}
        oneshot = None
        if any(c.ok and c.fidelity is not None for c in cases):
            headers = [*_headers(HTML_ONESHOT_COLUMNS), {"header": "reference", "help": "the case's own one-shot reference", "left": True}]
            oneshot = {"headers": headers, "rows": [_case_row(c, HTML_ONESHOT_COLUMNS, reference=True) for c in cases],
                       "caption": oneshot_caption(cases, label=clip), "plots": oneshot_plots(cases, src), "compact": True}
        sources.append({"anchor": f"run{i}-src{j}", "name": src, "main": main, "detail": detail, "oneshot": oneshot,
                        "layers": layer_rows(cases), "layer_headers": LAYER_HEADERS,
                        "plots": source_plots(cases, src), "phases": _phase_context(cases),
                        "workers": _first(cases, "workers"), "steps": _first(cases, "steps"),
                        "granularity": _first(cases, "granularity")})
    size_plot = plot_size_scaling([run_size_point(c) for c in run.cases if c.ok], f"throughput vs tensor size — {run.run_id}")
    return {"anchor": f"run{i}", "facts": run_facts(run), "sources": sources, "size_plot": size_plot,
            "any_reconstructed": any(is_reconstructed(c) for c in run.cases)}


def _table(first: str, cols: Sequence[Column], text_headers: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    headers = [{"header": _header(c), "help": c.help, "left": False} for c in cols]
    headers += [{"header": h, "help": help_, "left": True} for h, help_ in text_headers]
    return {"first": first, "headers": headers, "rows": []}


def _num_cells(cols: Sequence[Column], case: Any) -> list[dict[str, Any]]:
    out = []
    for col in cols:
        v = col.get(case)
        out.append({"text": col.text(case), "v": "" if v is None else repr(float(v)), "cls": ""})
    return out


def _train_rows(table: dict[str, Any], cases: Sequence[TrainCase], cols: Sequence[Column], params: bool) -> dict[str, Any]:
    """Fill a train table's rows over ``cols`` (and the parameters last when ``params``)."""
    for c in cases:
        if c.ok:
            cells = [*_num_cells(cols, c), *([{"text": params_text(c), "v": "", "cls": "params"}] if params else [])]
            table["rows"].append({"ok": True, "name": case_name(c), "recon": is_reconstructed(c), "cells": cells})
        else:
            table["rows"].append({"ok": False, "name": case_name(c), "recon": is_reconstructed(c), "lead": [],
                                  "colspan": len(cols) + params, "error": c.error_text})
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
    for c in run.cases:
        numel = c.numel
        if c.ok:
            target, mark = bench_target(c)
            cells = [*_num_cells(BENCH_COLUMNS, c), {"text": target, "v": "", "cls": "wrap"},
                     {"text": mark, "v": "", "cls": "l b-" + mark if mark in ("pass", "short") else "l"}]
            table["rows"].append({"ok": True, "name": bench_name(c), "recon": False, "cells": cells})
        else:
            lead = [{"text": fmt(numel, "int"), "v": "" if numel is None else repr(numel), "cls": ""}]
            table["rows"].append({"ok": False, "name": bench_name(c), "recon": False, "lead": lead, "colspan": len(BENCH_COLUMNS) + 1,
                                  "error": c.error_text})
    plots = [plot_bench_x_copy(run.cases, f"compress×copy against targets — {run.run_id}"),
             plot_size_scaling([bench_size_point(c) for c in run.cases], f"throughput vs tensor size — {run.run_id}")]
    return {"kind": "bench", "anchor": f"run{i}", "facts": run_facts(run), "description": bench_description(run), "table": table,
            "detail": None, "plots": [p for p in plots if p is not None], "notes": [], "footnote": BENCH_FOOTNOTE,
            "any_reconstructed": False}


def _section_context(i: int, run: LoadedRun) -> dict[str, Any]:
    """The template context of one results file, by its kind."""
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


# ----------------------------------------------------------------------------- template

TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<link rel="icon" href="data:,">
<style>
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1b1f24; margin: 0;
       background: #fafbfc; }
main { max-width: 1500px; margin: 0 auto; padding: 12px 28px 40px; }
h1 { font-size: 24px; margin: 18px 0 4px; }
h2 { font-size: 20px; margin: 34px 0 8px; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
h3 { font-size: 16px; margin: 22px 0 6px; }
.muted { color: #57606a; } nav a { margin-right: 12px; } a { color: #0969da; text-decoration: none; }
.tablewrap { overflow-x: auto; }
table { border-collapse: collapse; margin: 6px 0 10px; background: #fff; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: #f0f3f6; }
table.sortable th { cursor: pointer; }
table.sortable th[data-dir="asc"]::after { content: " ▲"; }
table.sortable th[data-dir="desc"]::after { content: " ▼"; }
td.l, th.l { text-align: left; } td.wrap { white-space: normal; max-width: 420px; text-align: left; }
td.params { white-space: normal; min-width: 240px; max-width: 420px; text-align: left; font-size: 11px; color: #57606a;
            overflow-wrap: anywhere; }
tr.failed td { background: #fff0f0; } td.err { color: #b42318; text-align: left; white-space: normal; }
.recon { color: #9a6700; font-weight: 600; }
.plots { display: flex; flex-wrap: wrap; gap: 14px; }
figure.plot { margin: 0; background: #fff; border: 1px solid #d0d7de; padding: 8px; max-width: 700px; }
figure.plot.wide { max-width: 100%; flex-basis: 100%; box-sizing: border-box; }
details.fold { margin: 4px 0 12px; } details.fold > summary { cursor: pointer; color: #0969da; }
table.layers td, table.layers th { padding: 1px 6px; font-size: 12px; }
/* case and unit names left-aligned by position, not by a class on each of the thousands of cells */
table.layers td:nth-child(1), table.layers td:nth-child(3) { text-align: left; }
figure.plot img { max-width: 100%; height: auto; display: block; }
figcaption { font-size: 12px; color: #57606a; margin-top: 4px; }
/* a caption takes the width of its plot instead of widening the figure: plots then sit side by side */
figure.plot figcaption { width: 0; min-width: 100%; }
.v-better, .v-fixed { background: #e6f6e6; } .v-worse, .v-new-failure { background: #ffe3e3; font-weight: 600; }
table.hide-ns tr.v-ns { display: none; }
.v-not-comparable { background: #fff6d6; } .v-ns { color: #57606a; } .v-new, .v-missing, .v-failing { background: #eef2ff; }
td.b-pass { color: #1a7f37; font-weight: 600; } td.b-short { color: #b42318; font-weight: 600; }
.c-measured { background: #e6f6e6; } .c-measured-other { background: #fff6d6; } .c-not { color: #57606a; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; margin: 6px 0; }
dl.facts dt { color: #57606a; } dl.facts dd { margin: 0; }
p.ref { margin: 4px 0; font-weight: 600; }
h4.detail { margin: 26px 0 4px; color: #57606a; border-top: 1px dashed #d0d7de; padding-top: 8px; }
</style>
</head>
<body>
{% macro plot_list(plots) %}<div class="plots">
{% for p in plots %}<figure class="plot{{ ' wide' if p.wide }}" data-plot="{{ p.kind }}"><img src="{{ p.uri }}" alt="{{ p.title }}">
<figcaption>{{ p.caption }}</figcaption></figure>
{% endfor %}</div>{% endmacro %}
{% macro case_table(t) %}<div class="tablewrap"><table class="sortable cases">
<thead><tr><th class="l">case</th>{% if not t.compact %}<th class="l">compressor</th>{% endif %}
{% for h in t.headers %}<th{% if h.left %} class="l"{% endif %} title="{{ h.help }}">{{ h.header }}</th>{% endfor %}
{% if not t.compact %}<th class="l">params</th>{% endif %}</tr></thead>
<tbody>
{% for row in t.rows %}{% if row.ok %}<tr>
<td class="l{{ ' recon' if row.reconstructed }}"{% if row.reconstructed %} title="{{ recon_help }}"{% endif %}>{{ row.name }}</td>
{% if not t.compact %}<td class="l">{{ row.compressor }} v{{ row.version }}</td>{% endif %}
{% for c in row.cells %}<td{% if c.cls %} class="{{ c.cls }}"{% endif %}{% if c.v %} data-v="{{ c.v }}"{% endif %}>
{{- c.text }}</td>{% endfor %}
{% if not t.compact %}<td class="params">{{ row.params }}</td>{% endif %}</tr>
{% else %}<tr class="failed">
<td class="l{{ ' recon' if row.reconstructed }}">{{ row.name }}</td>
{% if not t.compact %}<td class="l">{{ row.compressor }} v{{ row.version }}</td>{% endif %}
<td class="err" colspan="{{ t.headers|length }}">failed: {{ row.error }}</td>
{% if not t.compact %}<td class="params">{{ row.params }}</td>{% endif %}</tr>
{% endif %}{% endfor %}</tbody></table></div>{% endmacro %}
{% macro kind_table(t) %}<div class="tablewrap"><table class="sortable cases">
<thead><tr><th class="l">{{ t.first }}</th>
{% for h in t.headers %}<th{% if h.left %} class="l"{% endif %} title="{{ h.help }}">{{ h.header }}</th>{% endfor %}</tr></thead>
<tbody>
{% for row in t.rows %}{% if row.ok %}<tr>
<td class="l{{ ' recon' if row.recon }}"{% if row.recon %} title="{{ recon_help }}"{% endif %}>{{ row.name }}</td>
{% for c in row.cells %}<td{% if c.cls %} class="{{ c.cls }}"{% endif %}{% if c.v %} data-v="{{ c.v }}"{% endif %}>
{{- c.text }}</td>{% endfor %}</tr>
{% else %}<tr class="failed">
<td class="l{{ ' recon' if row.recon }}">{{ row.name }}</td>
{% for c in row.lead %}<td{% if c.v %} data-v="{{ c.v }}"{% endif %}>{{ c.text }}</td>{% endfor %}
<td class="err" colspan="{{ row.colspan }}">failed: {{ row.error }}</td></tr>
{% endif %}{% endfor %}</tbody></table></div>{% endmacro %}
<main>
<h1>{{ title }}</h1>
<p class="muted">Rendered {{ generated }} by gcbench {{ version }} from {{ runs|length }} stored results
file{{ "s" if runs|length != 1 }}. Reports read only stored results; re-rendering an old run gives the same numbers.{{ index_note }}</p>
<nav>
{% if comparison %}<a href="#comparison">comparison</a>{% endif %}
<a href="#runs">runs</a>
{% for run in sections %}<a href="#{{ run.anchor }}">{{ run.facts.run }}</a>
{% if run.kind == "run" %}{% for src in run.sources %}<a href="#{{ src.anchor }}">{{ src.name }}</a>{% endfor %}{% endif %}
{% endfor %}
<a href="#claims">paper claims</a>
<a href="#metrics">metrics</a>
</nav>

{% if comparison %}
<h2 id="comparison">Comparison: {{ comparison.new }} vs baseline {{ comparison.baseline }}</h2>
<p>Threshold {{ comparison.threshold }} and, where raw samples exist (timings, per-tensor q), a two-sided
Mann–Whitney test at α = {{ comparison.alpha }}. {{ comparison.counts }}.
{% if comparison.regressions %}<strong>{{ comparison.regressions }}
regression{{ "s" if comparison.regressions != 1 }}.</strong>{% endif %}</p>
{% if comparison.notes %}<ul>{% for n in comparison.notes %}<li>{{ n }}</li>{% endfor %}</ul>{% endif %}
<label><input type="checkbox" id="show-ns"> show unchanged (~) rows</label>
<div class="tablewrap"><table class="sortable" id="comparison-table">
<thead><tr><th class="l">case</th><th class="l">metric</th><th>baseline</th><th>new</th><th>change</th><th>p</th>
<th class="l">verdict</th><th class="l">note</th></tr></thead>
<tbody>
{% for r in comparison.rows %}<tr class="{{ r.cls }}">
<td class="l">{{ r.cells[0] }}</td><td class="l">{{ r.cells[1] }}</td><td>{{ r.cells[2] }}</td><td>{{ r.cells[3] }}</td>
<td data-v="{{ r.change_v }}">{{ r.cells[4] }}</td><td>{{ r.cells[5] }}</td><td class="l">{{ r.verdict }}</td>
<td class="wrap">{{ r.cells[7] }}</td></tr>
{% endfor %}</tbody></table></div>
{% endif %}

<h2 id="runs">Runs</h2>
<div class="tablewrap"><table class="sortable">
<thead><tr><th class="l">run</th><th class="l">kind</th><th class="l">suite</th><th class="l">date (UTC)</th><th class="l">status</th>
<th class="l">cases</th><th class="l">machine</th><th class="l">device</th><th class="l">gcbench</th><th class="l">commit</th>
<th class="l">torch</th></tr></thead>
<tbody>
{% for run in runs %}<tr><td class="l">
{% if run.detailed %}<a href="#{{ run.anchor }}">{{ run.facts.run }}</a>{% else %}{{ run.facts.run }}{{ run.note }}{% endif %}</td>
{% for key in fact_keys %}<td class="l">{{ run.facts[key] }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table></div>

{% for run in sections %}
{% if run.kind == "train" or run.kind == "bench" %}
<h2 id="{{ run.anchor }}">{{ "Training run" if run.kind == "train" else "Kernel benchmark" }} {{ run.facts.run }}</h2>
<dl class="facts">
<dt>{{ "training" if run.kind == "train" else "settings" }}</dt><dd>{{ run.description }}</dd>
<dt>date</dt><dd>{{ run.facts.date }} ({{ run.facts.status }}; {{ run.facts.cases }})</dd>
<dt>machine</dt><dd>{{ run.facts.machine }}; device {{ run.facts.device }}; torch {{ run.facts.torch }}</dd>
<dt>gcbench</dt><dd>{{ run.facts.gcbench }}, commit {{ run.facts.commit }}</dd>
<dt>file</dt><dd>{{ run.facts.file }}</dd>
</dl>
<p class="muted">Click a column header to sort; hover a header for its definition.</p>
{{ kind_table(run.table) }}
{% if run.detail %}<details class="fold"><summary>More columns: {{ run.detail.headers|map(attribute="header")|join(", ") }}</summary>
{{ kind_table(run.detail) }}
</details>{% endif %}
{% if run.notes %}<ul>{% for n in run.notes %}<li>{{ n }}</li>{% endfor %}</ul>{% endif %}
<p class="muted">{{ run.footnote }}</p>
{{ plot_list(run.plots) }}
{% if run.any_reconstructed %}<p class="muted"><span class="recon">{{ dagger }}</span> {{ recon_help }}: the best public
reconstruction (see <code>gcbench list</code>).</p>{% endif %}
{% else %}
<h2 id="{{ run.anchor }}">Run {{ run.facts.run }}</h2>
<dl class="facts">
<dt>suite</dt><dd>{{ run.facts.suite }}</dd>
<dt>date</dt><dd>{{ run.facts.date }} ({{ run.facts.status }})</dd>
<dt>machine</dt><dd>{{ run.facts.machine }}; device {{ run.facts.device }}; torch {{ run.facts.torch }}</dd>
<dt>gcbench</dt><dd>{{ run.facts.gcbench }}, commit {{ run.facts.commit }}</dd>
<dt>file</dt><dd>{{ run.facts.file }}</dd>
</dl>
{% for src in run.sources %}
<h3 id="{{ src.anchor }}">{{ src.name }}</h3>
<p class="muted">{{ src.workers }} workers × {{ src.steps }} steps, granularity {{ src.granularity }}.
Click a column header to sort; hover a header for its definition.</p>
<p class="ref">{{ src.main.caption }}</p>
{{ case_table(src.main) }}
<details class="fold"><summary>All columns of the main view: compressor, bits/el, scaled err, kernel times and GB/s, wire bytes,
parameters ({{ src.detail.rows|length }} cases)</summary>
{{ case_table(src.detail) }}
</details>
{% if src.phases %}<h4>Per phase: {{ src.phases.windows }}</h4>
<div class="tablewrap"><table class="sortable cases">
<thead><tr><th class="l">case</th>
{% for h in src.phases.headers %}<th title="{{ h.help }}">{{ h.header }}</th>{% endfor %}</tr></thead>
<tbody>
{% for row in src.phases.rows %}<tr>
<td class="l{{ ' recon' if row.recon }}"{% if row.recon %} title="{{ recon_help }}"{% endif %}>{{ row.name }}</td>
{% for c in row.cells %}<td data-v="{{ c.v }}">{{ c.text }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table></div>
<p class="muted">{{ src.phases.note }}</p>
{% if src.phases.workers %}<div class="tablewrap"><table class="sortable">
<thead><tr>{% for h in src.phases.worker_headers %}<th class="l">{{ h }}</th>{% endfor %}</tr></thead>
<tbody>
{% for row in src.phases.workers %}<tr>
{% for c in row.cells %}<td class="l{{ ' recon' if loop.first and row.recon }}">{{ c }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table></div>
<p class="muted">{{ src.phases.worker_note }}</p>
{% endif %}
{% endif %}
{{ plot_list(src.plots) }}
{% if src.layers %}<details class="fold"><summary>Per layer: ratio, bits/el and one-shot q of every case × unit
({{ src.layers|length }} rows; click a header to sort)</summary>
<div class="tablewrap"><table class="sortable layers">
<thead><tr>{% for h, help, left in src.layer_headers %}<th{% if left %} class="l"{% endif %} title="{{ help }}">{{ h }}</th>{% endfor %}
</tr></thead>
<tbody>
{% for r in src.layers %}<tr><td>{{ r[0] }}</td><td>{{ r[1] }}</td><td>{{ r[2] }}</td><td>{{ r[3] }}</td><td>{{ r[4] }}</td>
<td>{{ r[5] }}</td><td>{{ r[6] }}</td></tr>
{% endfor %}</tbody></table></div>
</details>{% endif %}
{% if src.oneshot %}<h4 class="detail">Detail: one-shot fidelity, each case against its own reference — {{ src.name }}</h4>
<p class="muted">{{ src.oneshot.caption }}</p>
{{ case_table(src.oneshot) }}
{{ plot_list(src.oneshot.plots) }}
{% endif %}
{% endfor %}
{% if run.size_plot %}<h3>Throughput against tensor size</h3>
<div class="plots"><figure class="plot" data-plot="{{ run.size_plot.kind }}">
<img src="{{ run.size_plot.uri }}" alt="{{ run.size_plot.title }}">
<figcaption>{{ run.size_plot.caption }}</figcaption></figure></div>
{% endif %}
{% if run.any_reconstructed %}<p class="muted"><span class="recon">{{ dagger }}</span> {{ recon_help }}: the best public
reconstruction (see <code>gcbench list</code>).</p>{% endif %}
{% endif %}
{% endfor %}

<h2 id="claims">Paper claims</h2>
{% if claims %}
<p>Published numbers matched to the cases above: a claim is measured by a case of the same compressor on gradients of the
same model (live or recorded; "any model" for wire-format claims). Ratio claims are reproduced only with the paper's wire
format (the claim's parameters); other parameters are shown as such. Hover a claim for the paper's details.</p>
<div class="tablewrap"><table class="sortable">
<thead><tr><th class="l">paper</th><th class="l">compressor</th><th class="l">model / data</th><th class="l">claim</th>
<th class="l">source</th><th class="l">gcbench</th></tr></thead>
<tbody>
{% for c in claims %}<tr class="{{ c.cls }}">
<td class="l">{{ c.paper }}</td><td class="l">{{ c.compressor }}</td><td class="wrap">{{ c.model }} / {{ c.data }}</td>
<td class="wrap" title="{{ c.note }}">{{ c.claim }}</td><td class="wrap">{{ c.source }}</td><td class="wrap">{{ c.measured }}</td></tr>
{% endfor %}</tbody></table></div>
{% else %}<p class="muted">{{ claims_missing }}</p>{% endif %}

<h2 id="metrics">Metrics</h2>
<div class="tablewrap"><table>
<thead><tr><th class="l">metric</th><th class="l">unit</th><th class="l">better</th><th class="l">definition</th></tr></thead>
<tbody>{% for m in metrics %}<tr><td class="l">{{ m.name }}</td><td class="l">{{ m.unit }}</td>
<td class="l">{{ "higher" if m.higher_is_better else "lower" }}</td><td class="wrap">{{ m.description }}</td></tr>
{% endfor %}</tbody></table></div>
<p class="muted">{{ footnote }}</p>
</main>
<script>
(function () {
  var cmp = document.getElementById("comparison-table"), box = document.getElementById("show-ns");
  if (cmp && box) {  // without JavaScript every row stays visible
    cmp.classList.add("hide-ns");
    box.addEventListener("change", function () { cmp.classList.toggle("hide-ns", !box.checked); });
  }
  function key(td) {
    if (!td) return Infinity;
    var v = td.getAttribute("data-v");
    if (v !== null && v !== "") { var f = parseFloat(v); if (!isNaN(f)) return f; }
    var t = td.textContent.trim();  // a bare number (the per-layer table) sorts as one
    if (/^[-+]?\d*\.?\d+(e[-+]?\d+)?$/i.test(t)) return parseFloat(t);
    return t.toLowerCase();
  }
  document.querySelectorAll("table.sortable").forEach(function (t) {
    var heads = t.tHead ? t.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, i) {
      th.addEventListener("click", function () {
        var asc = th.getAttribute("data-dir") !== "asc";
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("data-dir"); });
        th.setAttribute("data-dir", asc ? "asc" : "desc");
        var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[i]), y = key(b.cells[i]);
          if (typeof x !== typeof y) return typeof x === "number" ? -1 : 1;
          return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
</script>
</body>
</html>
"""

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=False, lstrip_blocks=False,
                          finalize=_page_text)


def render_html(runs: Sequence[LoadedRun], claims: Sequence[ClaimResult] | None = None, comparison: Comparison | None = None,
                title: str = "gcbench report", claims_missing: str = "No claims file was loaded.",
                detailed: Sequence[LoadedRun] | None = None, index: Sequence[dict[str, str]] | None = None) -> str:
    """The whole report as one self-contained HTML document.

    ``runs`` are listed in the summary; ``detailed`` (default: all of them) get their tables and plots.
    A comparison report details only the new run: the baseline's values are in the comparison rows.
    ``index`` (:func:`gcbench.report.terminal.newest_with_index`): the facts of every run of the
    folder, listed in the summary instead of ``runs``; a run of ``runs`` links to its section.
    """
    template = _ENV.from_string(TEMPLATE)
    show = [detailed is None or any(r is d for d in detailed) for r in runs]
    listed = [{"anchor": f"run{i}", "facts": run_facts(r), "detailed": show[i], "note": " (baseline)"} for i, r in enumerate(runs)]
    index_note = ""
    if index is not None:
        anchors = {str(r.path): f"run{i}" for i, r in enumerate(runs) if show[i]}
        listed = [{"anchor": anchors.get(f["file"], ""), "facts": f, "detailed": f["file"] in anchors, "note": ""} for f in index]
        if len(index) > len(anchors):
            index_note = (f" The newest is shown in detail, the {len(index) - len(anchors)} other"
                          f"{'s' if len(index) - len(anchors) != 1 else ''} listed only: name runs "
                          "(gcbench report --html RUN ...) or add --all to render them.")
    return template.render(
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


def write_html(path: str | Path, runs: Sequence[LoadedRun], claims: Sequence[ClaimResult] | None = None,
               comparison: Comparison | None = None, detailed: Sequence[LoadedRun] | None = None,
               claims_missing: str = "No claims file was loaded.", index: Sequence[dict[str, str]] | None = None) -> Path:
    """Render and write the report atomically (:func:`gcbench.results.atomic.atomic_write`); ``index`` as :func:`render_html`."""
    text = render_html(runs, claims, comparison, claims_missing=claims_missing, detailed=detailed, index=index)
    return atomic_write(Path(path), text)
