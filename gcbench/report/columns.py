"""The columns of every table the report draws: header, the metric of a case it shows, its format, its meaning.

A :class:`Column` names a metric of a case (``case.metric(name)``, the names of
:data:`gcbench.results.metrics.METRICS` and of the record's derived metrics), the format kind
:func:`gcbench.report.numbers.fmt` writes it in, its direction (the catalogue's, for a catalogued
metric: :data:`CATALOGUE`) and its help text; a few carry a richer cell (a timing's spread and
flags, the delivered fraction's worker interval).  The terminal, Markdown and HTML renderers read
these tuples, so adding a column to their tables is a line here (the CSV files of
:mod:`gcbench.report.export` keep their own, wider, column lists).  One reference per table
(docs/metrics.md): the main table is on the suite's common reference, the one-shot table on
each case's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions
from rich.measure import Measurement
from rich.text import Text

from gcbench.report.notes import X_COPY_DEC_HEADER, X_COPY_HEADER
from gcbench.report.numbers import fmt, fraction_text, or_unknown, range_text, spread_text
from gcbench.report.text import NAME_MAX, term
from gcbench.results.bench_record import BenchCase
from gcbench.results.metrics import METRICS
from gcbench.results.record import BEATS_BOUND, XCopy
from gcbench.results.run_record import RunCase

#: a label piece: up to and including a run of separators (a spec's ``,`` ``:`` ``=``, or a space), or the tail
_LABEL_PIECE = re.compile(r"[^,:= ]*[,:= ]+|[^,:= ]+")


class Label:
    """A case label (a compressor spec such as ``topk:density=0.01,error_feedback=true``) as a table cell that wraps
    only after ``,`` ``:`` ``=`` or a space, never inside a name or value.

    Rich wraps at spaces and folds anything else at the column's edge, which cut ``error_`` from ``feedback=true``
    and made a narrow table look like it named another parameter.  Its minimum width is the longest piece, so
    rich's column sizing keeps every piece whole; only a piece wider than the whole column is folded (nothing
    else could fit).  The text is plain, never markup: ``[`` in a user's label is shown as it is.
    """

    def __init__(self, text: str, limit: int = NAME_MAX, style: str = "") -> None:
        # term's text (clipped, control characters written out) read back from its markup: plain, as a cell shows it
        self.text = Text.from_markup(term(text, limit)).plain
        self.style = style
        self.pieces = _LABEL_PIECE.findall(self.text) or [""]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        longest = max(cell_len(p.rstrip(" ")) for p in self.pieces)
        return Measurement(longest, cell_len(self.text)).with_maximum(options.max_width)

    def lines(self, width: int) -> list[str]:
        """The label cut into lines of at most ``width`` cells, at piece boundaries (a longer piece folded)."""
        width = max(width, 1)
        out: list[str] = []
        line = ""
        for piece in self.pieces:
            if line and cell_len((line + piece).rstrip(" ")) > width:
                out.append(line.rstrip(" "))
                line = ""
            line += piece
            while cell_len(line.rstrip(" ")) > width:  # one piece wider than the column: fold it, nothing else fits
                out.append(line[:width])
                line = line[width:]
        if line.rstrip(" ") or not out:
            out.append(line.rstrip(" "))
        return out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        yield Text("\n".join(self.lines(options.max_width)), style=self.style, no_wrap=True, overflow="fold")

    def __str__(self) -> str:
        return self.text


#: a column's direction read from the metrics catalogue (:data:`gcbench.results.metrics.METRICS`), not spelled again
CATALOGUE = "catalogue"
_DIRECTION = {m.name: m.higher_is_better for m in METRICS}


@dataclass(frozen=True)
class Column:
    """A summary column: header, the metric of a case it shows (``case.metric(name)``), how to write it.

    ``higher_is_better`` is :data:`CATALOGUE` for a metric of the catalogue: its direction is the
    catalogue's (a column of a metric the catalogue lacks — bytes, speeds, train times — gives its own).
    """

    key: str
    header: str
    metric: str  # a name of RunCase.metric / TrainCase.metric / BenchCase.metric
    kind: str  # format kind for fmt()
    higher_is_better: bool | str | None
    help: str
    missing: str = "—"  # the text of a missing value in a case that ran (e.g. "not reached")
    cell: Callable[[Any], str] | None = None  # a cell richer than the number (a timing's spread and flags)

    def __post_init__(self) -> None:
        if self.higher_is_better == CATALOGUE:
            if self.metric not in _DIRECTION:
                raise ValueError(f"column {self.key!r}: {self.metric!r} is not in the metrics catalogue; give its direction")
            object.__setattr__(self, "higher_is_better", _DIRECTION[self.metric])

    @property
    def titled(self) -> str:
        """The header with its direction: ``ratio ↑``, ``q ↓`` (a column without one: the bare header)."""
        return self.header + (" ↑" if self.higher_is_better else " ↓" if self.higher_is_better is not None else "")

    def get(self, case: Any) -> float | None:
        return case.metric(self.metric)

    def text(self, case: Any) -> str:
        if self.cell is not None:
            return self.cell(case)
        v = self.get(case)
        return self.missing if v is None else fmt(v, self.kind)


def x_copy_text(x: XCopy | None) -> str:
    """A kernel's ×copy as tables write it: ``3.14× ±0.40`` (median ± half the IQR), its flags in brackets.

    A timing that beat its traffic bound shows no number: what it timed is not the work the compressor must do.
    """
    if x is None or x.median is None:
        return "—"
    flags = list(x.flags or [])
    n = x.rounds if x.rounds is not None else (len(x.samples) if x.samples is not None else None)
    if x.beats_bound:
        text = "—"
    elif n == 1:  # one round has no spread: "±<0.01" would claim a precision nobody measured
        text, flags = spread_text(x.median, None, "×"), ["1 round", *flags]
    else:
        text = spread_text(x.median, x.iqr / 2 if x.iqr is not None else None, "×")
    return text + (f" ({', '.join(flags)})" if flags else "")


def bench_x_copy_text(rec: BenchCase, kernel: str) -> str:
    """A bench row's ×copy cell: with spread and flags where the file has them, else the bare median."""
    x = (rec.x_copy or {}).get(kernel)
    return x_copy_text(x if x is not None else XCopy(median=rec.metric(f"{kernel}_x_copy")))


def compress_x_copy_text(case: RunCase) -> str:
    """The compress ×copy cell of a run case (:func:`x_copy_text`)."""
    return x_copy_text(case.timing.x_copy("compress") if case.timing else None)


def compress_gbps_text(case: RunCase) -> str:
    """The compress GB/s cell: no speed for a timing that beat its traffic bound."""
    return f"— ({BEATS_BOUND})" if case.beats_bound else fmt(case.metric("compress_gbps"), "g")


def delivered_text(case: RunCase) -> str:
    """The delivered cell of a run case: ``0.931 ± 0.012``, the aggregate's figure with its own 95% interval.

    The interval is the record's ``stream.delivered_ci``: the headline ± t(W−1) × the jackknife
    standard error over the W workers (each left out in turn), so it is the spread of this very
    figure and always holds it.  A case whose aggregate is not the workers' mean (PowerSGD), or one
    worker, has no interval: the number alone.  Each worker's OWN delivered fraction (its stream
    against its own dense update) is another quantity, lower where the workers' errors average out
    (top-k on ResNet-50: 0.090 vs workers 0.060–0.077): it is in its own detail column
    (:func:`worker_delivered_text`).

    A stream shorter than the steps that rank stateful compressors reads ``0.931 ± 0.012 (short: 2 steps)``:
    a number, but not one to rank on.
    """
    st = case.stream
    v = case.metric("delivered")
    if st is None or v is None:
        return "—"
    text = fraction_text(v)
    ci = st.delivered_ci
    if ci is not None and ci.lo is not None and ci.hi is not None:
        text += f" ± {half_width_text(v, (ci.hi - ci.lo) / 2)}"
    if st.enough is False:
        text += f" (short: {or_unknown(st.steps)} step{'' if st.steps == 1 else 's'})"
    return text


def half_width_text(v: float, half: float) -> str:
    """An interval's half-width at the headline's precision: three decimals beside a fraction near [0, 1] (three
    significant digits when it would round to nothing but is not zero: ``4.2e-05``), three digits otherwise."""
    if half == 0:
        return "0"
    if abs(v) < 10 and half >= 0.0005:
        return f"{half:.3f}"
    return fmt(half, "g")


def worker_delivered_text(case: RunCase) -> str:
    """The workers' own delivered fractions: the 95% interval of their mean, ``0.060–0.077``; ``—`` where
    the workers' contributions are not observable (a protocol whose aggregate is not their mean)."""
    ci = case.stream.worker_ci if case.stream else None
    if ci is None or ci.lo is None or ci.hi is None:
        return "—"
    return range_text(fraction_text(ci.lo), fraction_text(ci.hi))


#: the main run table: bytes, fidelity on the suite's ONE common reference (the stream view), kernel time
SUMMARY_COLUMNS: tuple[Column, ...] = (
    Column("ratio", "ratio", "ratio", "ratio", CATALOGUE, "dense float32 bytes / wire bytes (headers included)"),
    Column("bits", "bits/el", "bits_per_element", "g", CATALOGUE, "wire bits per gradient element"),
    Column("delivered", "delivered", "delivered", "g", CATALOGUE,
           "1 − ‖Σ_t(U_t − D_t)‖/‖Σ_t D_t‖ after the last step: the fraction of the summed dense update D (the common "
           "reference) that the case's updates U delivered, ± its 95% interval (t × the jackknife standard error over "
           "workers, each left out in turn); (short) = too few steps to rank on",
           cell=delivered_text),
    Column("step_err", "step err", "stream_error", "g", CATALOGUE,
           "mean over steps of ‖U_t − D_t‖²/‖D_t‖², whole model, against the common reference"),
    Column("scaled_err", "scaled err", "stream_error_scaled", "g", CATALOGUE,
           "mean over steps of 1 − cos²(U_t, D_t): the step error after the best scalar rescaling (scale-free)"),
    Column("comp_ms", "comp ms", "compress_s", "ms", CATALOGUE, "median compress time per worker-step"),
    Column("dec_ms", "dec ms", "decompress_s", "ms", CATALOGUE, "median decompress time per worker-step"),
    Column("comp_copy", X_COPY_HEADER, "comp_over_copy", "x", CATALOGUE,
           "×copy: compress time / time of a plain copy of the same tensors, the copy timed in rounds interleaved with the "
           "kernels (lower is better; 1× = as fast as a copy): median ± half the IQR, flags",
           cell=compress_x_copy_text),
)


#: the one-shot table: one compression of one gradient, each compressor against its OWN reference
ONESHOT_COLUMNS: tuple[Column, ...] = (
    Column("q", "q", "q", "g", CATALOGUE, "relative MSE ‖C(x)−x‖²/‖x‖², whole model, against the case's own reference"),
    Column("q_scaled", "q scaled", "q_scaled", "g", CATALOGUE,
           "scale-free one-shot error 1 − cos²(C(x), x): q after the best scalar rescaling, whole model"),
    Column("bias2", "bias²", "bias2", "g", CATALOGUE, "relative bias² from R compressions, whole model"),
    Column("cosine", "cosine", "cosine", "g", CATALOGUE, "cosine of C(x) and x, whole model (sums over tensors before the division)"),
    Column("agg_q", "agg q", "aggregate_q", "g", CATALOGUE,
           "relative MSE of the exchanged aggregate vs the true worker mean (own reference), mean over steps"),
)


# extra columns of the HTML tables (the terminal stays narrow)
DETAIL_COLUMNS: tuple[Column, ...] = (
    Column("workers_delivered", "workers' own", "delivered_workers", "g", True,
           "each worker's OWN delivered fraction (its compressed stream against its own dense update): 95% CI of their "
           "mean; another quantity than the aggregate's, lower where the workers' errors average out in the aggregate",
           cell=worker_delivered_text),
    Column("wire", "wire bytes", "wire_bytes", "int", False, "bytes one worker sends per step"),
    Column("comp_gbps", "comp GB/s", "compress_gbps", "g", CATALOGUE, "dense input bytes / median compress time",
           cell=compress_gbps_text),
    Column("dec_gbps", "dec GB/s", "decompress_gbps", "g", True, "dense input bytes / median decompress time"),
)


ONESHOT_DETAIL_COLUMNS: tuple[Column, ...] = (
    Column("variance", "variance", "variance", "g", CATALOGUE, "relative variance, whole model"),
    Column("delta", "δ", "delta", "g", CATALOGUE, "Beznosikov δ = 1/(1 − q)"),
    Column("ef", "EF drift", "ef_drift", "g", CATALOGUE, "‖Σ C_t − Σ g_t‖/‖Σ g_t‖ after the last step (worker 0, own reference)"),
)


TRAIN_COLUMNS: tuple[Column, ...] = (
    Column("final_acc", "final acc", "final_accuracy", "acc", CATALOGUE, "held-out accuracy after the last epoch"),
    Column("final_loss", "final loss", "final_loss", "g", CATALOGUE, "held-out loss after the last epoch"),
    Column("gap", "gap (pp)", "accuracy_gap", "pp", False,
           "final accuracy of the uncompressed run ('none') minus this one's, in percentage points"),
    Column("to_target", "to target (s)", "time_to_target_s", "s", False,
           "training time (evaluation excluded) until the held-out accuracy first reached the target, checked at epoch ends",
           missing="not reached"),
    Column("step", "step ms", "step_total_s", "ms", False, "median step time over steps after the first, mean over workers"),
    Column("compute", "compute", "step_compute_s", "ms", False, "step time minus the communication hook (forward, backward, optimizer)"),
    Column("compress", "compress", "step_compress_s", "ms", False, "median compress time per step"),
    Column("comm", "comm", "step_communicate_s", "ms", False, "median time in collectives per step"),
    Column("decomp", "decomp", "step_decompress_s", "ms", False, "median decompress time per step (every decoded payload)"),
    Column("mb", "MB/worker", "payload_bytes_per_worker", "mb", False,
           "payload bytes one worker sent over the whole run, in MB (10⁶ bytes)"),
    Column("ratio", "ratio", "ratio", "ratio", CATALOGUE, "dense float32 bytes / payload bytes per step"),
)


# extra columns of the HTML train tables
TRAIN_DETAIL_COLUMNS: tuple[Column, ...] = (
    Column("best_acc", "best acc", "best_accuracy", "acc", True, "best held-out accuracy over the epochs"),
    Column("epoch_target", "target epoch", "epochs_to_target", "int", False,
           "the epoch at whose end the target accuracy was first reached", missing="—"),
    Column("train_s", "train s", "train_time_s", "s", False, "training time of the whole run (evaluation excluded)"),
    Column("bits", "bits/el", "bits_per_element", "g", CATALOGUE, "payload bits per gradient element per step"),
)


BENCH_COLUMNS: tuple[Column, ...] = (
    Column("numel", "elements", "numel", "int", None, "elements of the dense float32 tensor timed"),
    Column("ratio", "ratio", "ratio", "ratio", CATALOGUE, "dense float32 bytes / wire bytes (headers included)"),
    Column("comp_ms", "comp ms", "compress_ms", "ms", False, "median compress time"),
    Column("comp_copy", X_COPY_HEADER, "compress_x_copy", "x", False,
           "×copy: compress time / time of a plain copy of the same tensor in the same round (lower is better): "
           "median ± half the IQR, flags",
           cell=lambda c: bench_x_copy_text(c, "compress")),
    Column("x_bound", "×bound", "x_bound", "x", False,
           "compress ×copy ÷ the compressor's traffic bound (its card's bytes read and written per element ÷ a copy's "
           "8): 1× = as fast as the memory traffic it must do allows; what is left over it is compute (lower is better)"),
    Column("dec_copy", X_COPY_DEC_HEADER, "decompress_x_copy", "x", False,
           "×copy of decompress: decompress time / copy time, per round (lower is better): median ± half the IQR",
           cell=lambda c: bench_x_copy_text(c, "decompress")),
    Column("vs_ref", "vs ref", "speedup_vs_reference", "x", True,
           "speed-up over the compressor's straightforward reference implementation"),
    Column("gbps", "GB/s", "gbps_compress", "g", True, "dense input bytes / median compress time"),
    Column("peak", "peak/input", "peak_over_input", "g", False, "peak extra resident memory during compress / input bytes"),
)


BENCH_TEXT_HEADERS = ("target", "verdict")


WORKER_HEADERS = ("case", "phase", "sent per worker (w0 / w1 / …)", "received per worker")


@dataclass(frozen=True)
class LayerMetric:
    """A per-layer table's metric: the :class:`Layer` field, the whole-model metric, format and meaning."""

    field: str
    metric: str
    kind: str
    title: str
    bad: float | None = None  # a value at or above it is marked (q ≥ 1: worse than sending nothing)


LAYER_METRICS: tuple[LayerMetric, ...] = (
    LayerMetric("ratio", "ratio", "ratio", "ratio = dense fp32 bytes / wire bytes of each layer (headers included); higher is better"),
    LayerMetric("q", "q", "g", "one-shot q = ‖C(x)−x‖²/‖x‖² of each layer, against the case's own reference; lower is better, "
                "≥ 1 (marked) is worse than sending nothing", bad=1.0),
)


COMPARE_HEADERS = ("case", "metric", "baseline", "new", "change", "p", "verdict", "note")
