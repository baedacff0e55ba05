"""How the HTML report draws: figures on matplotlib's Agg canvas embedded as PNG ``data:`` URIs, one style per case.

* Plots are drawn with matplotlib's Agg canvas (no display, no global pyplot state) at 100 dpi and
  embedded as base64 PNG ``data:`` URIs — small, and identical in every browser.
* Every point and line can be named: each case of a section has a marker × colour pair of its own
  (:func:`style_map`: a compressor's variants share a colour and differ by marker) kept across the
  section's plots, points are named beside themselves wherever the name fits without covering
  another (:func:`label_points`), and lines are named at their right ends (:func:`label_line_ends`).
* Text drawn into plots escapes ``$`` so matplotlib never parses a label as mathtext, and is
  clipped (:func:`plot_text`); text the page shows is bounded to :data:`PAGE_TEXT_MAX` (:func:`page_text`).
* Axes are logarithmic when the values span a decade or more, linear otherwise (:func:`scale_axis`).
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import markupsafe
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullFormatter
from matplotlib.transforms import Bbox

from gcbench.report.text import NAME_MAX, clip
from gcbench.report.views import case_name, pareto_front
from gcbench.results.converge_record import ConvergeCase
from gcbench.results.parse import as_cases
from gcbench.results.run_record import RunCase
from gcbench.results.train_record import TrainCase

DPI = 100


# matplotlib's tab10, then six darker companions: sixteen colours that stay apart on white and in a legend
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
           "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#000000")


# twelve markers that stay apart at 6 px: with the colours, 192 cases get a marker × colour of their own
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*")


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
    #: what the figure leaves out, on demand: a folded table (its summary line, headers, rows) under the caption
    more: tuple[str, tuple[str, ...], tuple[tuple[str, ...], ...]] | None = None


#: the most characters of a plot's title (it names a run and a source, both users' text)
PLOT_TITLE_MAX = 120


#: the most characters of any text the page shows (a table cell, a caption, a title attribute): a
#: 200,000-character label made every table, caption and tooltip carry it, many times over
PAGE_TEXT_MAX = 4096


def plot_text(text: str, limit: int = NAME_MAX) -> str:
    """Plain text for matplotlib, clipped to ``limit`` characters (:func:`clip`): a ``$`` would otherwise start mathtext.

    Clipped because matplotlib lays out every character it is given: a 200,000-character label
    took minutes and gigabytes to place beside a point, and no plot has room for more than a line.
    """
    return clip(str(text), limit).replace("$", r"\$")


def page_text(value: Any) -> Any:
    """Jinja's ``finalize``: every string the page shows bounded to :data:`PAGE_TEXT_MAX` (the plots' data URIs excepted).

    A macro's output is ``Markup`` (HTML already rendered, its own values bounded): cutting it would cut tags.
    """
    if (isinstance(value, str) and not isinstance(value, markupsafe.Markup) and len(value) > PAGE_TEXT_MAX
            and not value.startswith("data:")):
        return clip(value, PAGE_TEXT_MAX)
    return value


def new_figure(width: float = 5.0, height: float = 3.1) -> tuple[Figure, Any]:
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def png_uri(fig: Figure) -> str:
    """The figure as a ``data:`` URI; every log axis whose label does not say so gets "(log scale)" first."""
    for ax in fig.axes:
        for scale, get, put in ((ax.get_xscale, ax.get_xlabel, ax.set_xlabel), (ax.get_yscale, ax.get_ylabel, ax.set_ylabel)):
            if scale() == "log" and get() and "log" not in get():
                put(get() + "  (log scale)")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def finite(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def cases_that_ran(cases: Sequence[Any], kind: str = "run") -> list[Any]:
    """The cases that ran (case dicts handed by a library caller are validated into the models of ``kind``)."""
    return [c for c in as_cases(cases, kind) if c.ok]


def timing_flags(case: RunCase, kernel: str) -> list[str]:
    """The flags of a case's ``kernel`` timing (``[]`` when it has none): a flagged bar is hatched."""
    x = case.timing.x_copy(kernel) if case.timing else None
    return list(x.flags or []) if x is not None else []


def style_map(cases: Sequence[RunCase | TrainCase | ConvergeCase]) -> dict[str, Style]:
    """A marker × colour per case label, no pair used twice: a reader names any point or line by its look alone.

    A compressor's cases share a colour (topk, topk@0.1, topk@0.01 are one hue) and differ by marker;
    a compressor with more variants than markers spills into the next colour.  Beyond
    ``len(COLORS) × len(MARKERS)`` labels pairs repeat (no suite is near that).
    """
    out: dict[str, Style] = {}
    used: set[tuple[int, int]] = set()
    families: dict[str, int] = {}
    for c in cases:
        if c.label in out:
            continue
        fam = families.setdefault(str(getattr(c, "compressor", None) or c.label), len(families))
        pair = next(((ci % len(COLORS), mi) for ci in range(fam, fam + len(COLORS)) for mi in range(len(MARKERS))
                     if (ci % len(COLORS), mi) not in used), None)
        if pair is None:  # every pair taken: cycle
            pair = (len(out) % len(COLORS), (len(out) // len(COLORS)) % len(MARKERS))
        used.add(pair)
        out[c.label] = Style(COLORS[pair[0]], MARKERS[pair[1]])
    return out


def label_points(ax: Any, pts: Sequence[tuple[float, float, str]], fontsize: float = 7.5, radius_pt: float = 4.0,
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
            t = ax.annotate(plot_text(name), (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va, fontsize=fontsize,
                            color="#24292f", zorder=6)
            box = t.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(o) for o in taken):
                taken.append(box)
                named += 1
                break
            t.remove()
    return named


def label_line_ends(ax: Any, ends: Sequence[tuple[float, float, str, str]], fontsize: float = 7.5) -> None:
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
        ax.annotate(plot_text(name), (x, y), xytext=(1.03, ys[k]), textcoords="axes fraction", va="center", ha="left", fontsize=fontsize,
                    color=color, annotation_clip=False, arrowprops={"arrowstyle": "-", "lw": 0.5, "color": color, "alpha": 0.7})


def scale_axis(ax: Any, axis: str, values: Sequence[float]) -> bool:
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


def add_legend(ax: Any, n: int) -> None:
    if n:
        ax.legend(fontsize=7.5, ncol=1 if n <= 12 else 2, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False,
                  handletextpad=0.3, columnspacing=1.0, borderaxespad=0.2)


def styles_of(cases: Sequence[Any]) -> dict[str, Style]:
    """The style of every case handed to a plot (all of a section's cases: each keeps its look across the section)."""
    return style_map(as_cases(cases, "run"))


def scatter_front(ax: Any, pts: Sequence[tuple[float, float, RunCase]], styles: dict[str, Style]) -> set[int]:
    """One point per case (x = error, y = ratio); points on the Pareto front outlined; returns the front."""
    front = set(pareto_front([(q, r) for q, r, _ in pts]))
    scatter_points(ax, pts, front, styles)
    scale_axis(ax, "x", [p[0] for p in pts])
    scale_axis(ax, "y", [p[1] for p in pts])
    return front


def scatter_points(ax: Any, pts: Sequence[tuple[float, float, RunCase]], front: set[int], styles: dict[str, Style],
             suffix: dict[str, str] | None = None, hollow: bool = False) -> None:
    """The points of a ratio-against-error plot, each in its case's marker × colour: front members outlined in black,
    ``hollow`` points (no claim to the front) unfilled."""
    for i, (q, r, c) in enumerate(pts):
        on, st = i in front, styles[c.label]
        ax.scatter([q], [r], s=58 if on else 40, marker=st.marker, facecolors="none" if hollow else st.color,
                   edgecolors="black" if on else st.color, linewidths=1.4 if on or hollow else 0.6, zorder=4 if on else 3,
                   label=plot_text(case_name(c) + (suffix or {}).get(c.label, "")))


def step_lines(ax: Any, series: Sequence[tuple[RunCase, Sequence[float | None]]], styles: dict[str, Style], ms: float = 4,
                suffix: str = "", **line: Any) -> None:
    """One line per case over steps (numbered from 1) in its case's colour, its marker on at most a dozen steps."""
    for c, vals in series:
        xs = [i + 1 for i, v in enumerate(vals) if v is not None]
        st = styles[c.label]
        ax.plot(xs, [v for v in vals if v is not None], marker=st.marker, ms=ms, lw=1.1, color=st.color,
                markevery=max(1, len(xs) // 12), label=plot_text(case_name(c) + suffix), **line)
    ax.set_xlabel("step (from 1)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
