"""The plots of train and bench files, and throughput against tensor size (run and bench files alike).

Train files (``gcbench train``) get held-out accuracy and loss per epoch, one line per compressor
on one plot with the target accuracy drawn, and a time-to-target bar chart whose grey bars are each
compressor's whole training time, so "not reached" stays visible.  Bench files (``gcbench bench``)
get compress×copy bars per compressor (one bar per size) with each compressor's target marked, and
— when a file has several sizes — the throughput-against-size plot of run files, fed with the bench
records (it needs one case label timed at two or more sizes within a run: one machine).  Time bars
start at zero on a linear axis (a bar's length is its value); ratio-to-copy bars follow the decade
rule of :func:`gcbench.report.html_plotkit.scale_axis`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from matplotlib.ticker import MaxNLocator

from gcbench.measure.bench_verdict import target_of
from gcbench.report.html_plotkit import (
    COLORS,
    MARKERS,
    PLOT_TITLE_MAX,
    Plot,
    add_legend,
    cases_that_ran,
    finite,
    new_figure,
    plot_text,
    png_uri,
    scale_axis,
    style_map,
    timing_flags,
)
from gcbench.report.numbers import size_text
from gcbench.report.views import bench_name, case_name
from gcbench.results.bench_record import BenchCase
from gcbench.results.parse import as_cases
from gcbench.results.record import BEATS_BOUND
from gcbench.results.run_record import RunCase
from gcbench.results.train_record import TrainCase


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
                     tuple(timing_flags(c, "compress")))


def bench_size_point(rec: BenchCase) -> SizePoint:
    """A bench record as a :class:`SizePoint` (copy GB/s from its copy median and element count)."""
    copy_s = finite(rec.copy_.median_s) if rec.copy_ else None
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
    fig, ax = new_figure()
    for i, (label, pts) in enumerate(series.items()):
        xs = sorted(pts)
        color, marker = COLORS[i % len(COLORS)], MARKERS[(i // len(COLORS)) % len(MARKERS)]  # no two series share both
        ax.plot(xs, [pts[x] for x in xs], marker=marker, ms=4, lw=1.2, color=color, label=plot_text(names[label]))
        flagged = [x for x in xs if (label, x) in hollow]
        if flagged:  # a flagged time: drawn, but not a speed to act on
            ax.scatter(flagged, [pts[x] for x in flagged], s=40, facecolors="white", edgecolors=color, linewidths=1.4, zorder=4)
    if copies:
        xs = sorted(copies)
        ax.plot(xs, [statistics.median(copies[x]) for x in xs], color="black", ls="--", lw=1.2, label="copy roofline")
    scale_axis(ax, "x", [x for pts in series.values() for x in pts])
    scale_axis(ax, "y", [g for pts in series.values() for g in pts.values()] + [statistics.median(v) for v in copies.values()])
    ax.set_xlabel("elements compressed per worker-step")
    ax.set_ylabel("compress GB/s of dense fp32 input")
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9)
    add_legend(ax, len(series) + bool(copies))
    caption = ("Compress throughput against tensor size for each case label timed at two or more sizes in this run "
               f"({len(series)} of {len(by_label)} labels); the dashed line is the median copy throughput at each size.")
    if any(label in series for label, _ in hollow):
        caption += " Hollow points: a flagged time (unstable or too short), not a speed to act on."
    if bound:
        caption += f" Not drawn ({BEATS_BOUND}, so no speed): " + ", ".join(bound) + "."
    return Plot("size", title, png_uri(fig), caption)


def train_curve_series(cases: Sequence[TrainCase], key: str) -> list[tuple[TrainCase, list[tuple[int, float]]]]:
    """(case, [(epoch, value), ...]) for every completed train case with ``key`` in its per-epoch curve."""
    series = []
    for c in cases_that_ran(cases, "train"):
        curve = c.training.curve if c.training else None
        if curve is None:
            continue
        pts = [(e.epoch, finite(getattr(e, key, None))) for e in curve if e.epoch is not None]
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
    fig, ax = new_figure()
    for c, pts in series:
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker=styles[c.label].marker, ms=4, lw=1.4, color=styles[c.label].color,
                label=plot_text(case_name(c)))
    targets = {c.metric("target_accuracy") for c, _ in series} - {None}
    n_legend = len(series)
    if accuracy and len(targets) == 1:
        target = targets.pop()
        ax.axhline(target, color="black", ls="--", lw=1.1, label=f"target {target:g}")
        n_legend += 1
    if not accuracy:
        scale_axis(ax, "y", [y for _, pts in series for _, y in pts])
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("held-out accuracy  (higher is better)" if accuracy else "held-out loss  (lower is better)")
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9)
    add_legend(ax, n_legend)
    what = "accuracy" if accuracy else "loss"
    caption = (f"Held-out {what} at the end of every epoch, one line per compressor (every compressor starts from the same "
               "seeded model and data order)" + ("; the dashed line is the target accuracy of time-to-target." if accuracy and
                                                 n_legend > len(series) else "."))
    return Plot("train_accuracy" if accuracy else "train_loss", title, png_uri(fig), caption)


def plot_time_to_target(cases: Sequence[TrainCase], title: str) -> Plot | None:
    """Training time to the target accuracy per compressor, over a grey bar of its whole training time."""
    rows = []
    for c in cases_that_ran(cases, "train"):
        total = c.metric("train_time_s")
        if total is None:
            continue
        rows.append((case_name(c), c.metric("time_to_target_s"), total, c.metric("best_accuracy")))
    if not rows:
        return None
    targets = {c.metric("target_accuracy") for c in cases_that_ran(cases, "train")} - {None}
    fig, ax = new_figure(5.6, max(1.9, 0.42 * len(rows) + 1.1))
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
    ax.set_yticklabels([plot_text(r[0]) for r in rows], fontsize=8)
    ax.grid(False, axis="y")
    target_text = f"accuracy {next(iter(targets)):g}" if len(targets) == 1 else "the target accuracy"
    ax.set_xlabel(f"training seconds to reach {target_text}  (← better)")
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9)
    add_legend(ax, 2)
    reached = sum(r[1] is not None for r in rows)
    caption = (f"Training time (evaluation excluded) until the held-out accuracy first reached {target_text}, checked at epoch "
               f"ends; grey bars are each compressor's whole training run. {reached} of {len(rows)} reached the target.")
    return Plot("time_to_target", title, png_uri(fig), caption)


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
    fig, ax = new_figure(min(9.0, max(4.6, 0.34 * len(value) + 0.5 * len(names) + 2.0)), 3.3)
    width = 0.8 / len(sizes)
    for j, size in enumerate(sizes):
        xs = [i - 0.4 + width * (j + 0.5) for i, n in enumerate(names) if (n, size) in value]
        vals = [value[(n, size)] for n in names if (n, size) in value]
        ax.bar(xs, vals, width * 0.92, color=COLORS[j % len(COLORS)], label=f"{size_text(size)} elements", zorder=3)
        if len(value) <= 24:
            for x, v in zip(xs, vals, strict=True):
                ax.text(x, v, f"{v:.2f}×" if v < 10 else f"{v:.0f}×", ha="center", va="bottom", fontsize=7, zorder=5)
    marked: list[float] = []
    untargeted: list[str] = []
    for i, n in enumerate(names):
        if n in bars.targets:
            ax.hlines(bars.targets[n], i - 0.46, i + 0.46, colors="#d62728", lw=2.4, zorder=4, label="target" if not marked else None)
            marked.append(bars.targets[n])
        else:
            t = target_of(n)
            untargeted.append(n + (f" ({t.text()})" if t is not None and t.text() else ""))
    ax.axhline(1.0, color="black", ls="--", lw=1.0, label="copy (1×)", zorder=2)
    scale_axis(ax, "y", [*value.values(), *marked, 1.0])
    ax.set_xticks(list(range(len(names))))
    ax.set_xticklabels([plot_text(n) for n in names], rotation=30 if len(names) > 6 else 0, ha="right" if len(names) > 6 else "center",
                       fontsize=8)
    ax.set_ylabel("compress×copy: compress time / copy time, ×  (← better)")
    ax.set_title(plot_text(title, PLOT_TITLE_MAX), fontsize=9)
    add_legend(ax, len(sizes) + bool(marked) + 1)
    caption = ("Median compress time as a multiple of a plain copy of the same tensor (timed in the same process); red marks are "
               "each compressor's compress×copy target in this gcbench version, the dashed line a copy.")
    if untargeted:
        caption += " No compress×copy target: " + "; ".join(untargeted) + "."
    failed = [f"{bench_name(c)} at {size_text(c.numel)}" for c in as_cases(cases, "bench") if not c.ok]
    if failed:
        caption += " Failed, not drawn: " + ", ".join(failed) + "."
    return Plot("bench_x_copy", title, png_uri(fig), caption)
