"""Reports from stored results files: loading, per-source summaries, terminal tables and Markdown.

``gcbench report`` reads only results files (README, "Measuring and comparing"), so any old run can
be re-rendered.  This module holds what every output format shares — which runs to load, how cases
group by gradient source, which columns a summary shows and how numbers are written — plus the
terminal (rich) and Markdown renderers.  The HTML renderer with plots is :mod:`gcbench.report.html`, run
comparison is :mod:`gcbench.results.compare`, paper claims are :mod:`gcbench.results.baselines`.

Choices:

* Columns are the ones the runner prints, so a report and a run's own output agree number for
  number.  One reference per table (README, "What the metrics mean"): the main table has the ratio, the
  stream view on the suite's common reference (delivered fraction with its CI over workers, mean
  per-step error and its scale-free version) and the kernel times; the one-shot numbers (q, q
  scaled, bias², cosine — whole model — and aggregate q), each against the case's own reference,
  are a second table whose caption names every reference that is not the gradient.
* Every user-supplied name (suite labels, source labels, parameters, error messages) is escaped
  for the output format: rich markup for the terminal, Markdown/HTML specials for Markdown.
* Failed cases are shown with their error; reconstructed compressors carry a dagger (†).
* Each kind of results file gets its own tables, so one report can cover a folder holding all of
  them: ``run``/``compare`` files the per-source summary above; ``train`` files
  (:mod:`gcbench.distributed.train`) the final accuracy and loss, the gap to the uncompressed run, the time
  to the target accuracy, the step time split and the bytes each worker sent — the columns of
  ``gcbench train``'s own table; ``bench`` files (:mod:`gcbench.measure.bench`) the target table of
  ``gcbench bench``, judged by :func:`gcbench.measure.bench.kernel_verdict`, whose target text here also names
  the decompress limit that ``pass`` includes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import RenderableType
from rich.markup import escape as rich_escape
from rich.table import Table
from rich.text import Text

from gcbench.core.errors import ResultsError
from gcbench.measure.bench import BENCH_BUDGET_S, BENCH_MAX_ROUNDS, kernel_verdict, target_of
from gcbench.measure.casemath import COPY_SPREAD_LIMIT
from gcbench.measure.timing import TimingPolicy
from gcbench.report.text import NAME_MAX, TEXT_MAX, clip, term
from gcbench.results.baselines import ClaimResult, format_measured
from gcbench.results.compare import (
    BENCH_UNIT,
    BETTER,
    FIDELITY_METRICS,
    FIXED,
    MAIN_METRICS,
    NEW_FAILURE,
    NOT_COMPARABLE,
    NOT_SIGNIFICANT,
    WORSE,
    Comparison,
    Row,
    SideRow,
    compare_runs,
    fidelity_references,
    head_to_head,
)
from gcbench.results.phases import PhaseRow, Window, WorkerTraffic, phase_rows, source_windows, worker_traffic
from gcbench.results.record import (
    BEATS_BOUND,
    FLOAT_INT_MAX,
    TOO_SHORT,
    UNSTABLE,
    BenchCase,
    RunCase,
    RunRecord,
    TrainCase,
    XCopy,
    as_record,
)
from gcbench.results.store import DEFAULT_RUNS_DIR, list_runs, load_run, resolve_run
from gcbench.results.verdict import PairVerdict, bytes_per_step, verdicts

DAGGER = "†"


# ----------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class LoadedRun:
    """A results file and its typed record (a results dict handed here is validated into one)."""

    path: Path
    data: RunRecord

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", as_record(self.data))

    @property
    def run_id(self) -> str:
        return str(self.data.run_id or self.path.stem)

    @property
    def cases(self) -> list[Any]:
        return list(self.data.cases)

    @property
    def kind(self) -> str:
        """``run``, ``compare``, ``train`` or ``bench`` (what wrote the file; decides how it is rendered)."""
        return self.data.kind


def load_runs(refs: Sequence[str] | None = None, runs_dir: str | Path = DEFAULT_RUNS_DIR,
              on_skip: Callable[[ResultsError], None] | None = None) -> list[LoadedRun]:
    """The named runs (path, id, id prefix or ``latest``), or every run in ``runs_dir`` oldest first.

    A file the user named must load (its :class:`ResultsError` is raised).  When the whole folder
    is read and ``on_skip`` is given, a file that does not load is skipped and its error handed
    to ``on_skip`` (the CLI prints a warning naming it): one corrupt file must not hide every
    other run.  A folder in which no file loads is an error.
    """
    if refs:
        return [LoadedRun(p, load_run(p)) for p in (resolve_run(r, runs_dir) for r in refs)]
    paths = list_runs(runs_dir)
    if not paths:
        raise ResultsError(f"no results files in {runs_dir} (run `gcbench run` first, or name results files)")
    loaded = []
    for p in paths:
        try:
            loaded.append(LoadedRun(p, load_run(p)))
        except ResultsError as exc:
            if on_skip is None:
                raise
            on_skip(exc)
    if not loaded:
        raise ResultsError(f"no readable results files in {runs_dir} ({len(paths)} skipped)")
    return loaded


def newest_with_index(runs_dir: str | Path, on_skip: Callable[[ResultsError], None] | None = None) -> ReportInput:
    """The newest readable run of ``runs_dir`` to render, and the facts of every run for an index of them.

    What ``report --html`` shows by default: rendering a run in full (tables, a dozen plots) costs
    about 0.75 s, so a folder of 1,000 runs took over 12 minutes; listing one costs its loading
    only (:func:`run_facts` of its header and case statuses), and only the newest run is kept in
    memory.  Files that do not load are handed to ``on_skip`` as :func:`load_runs` does.
    """
    paths = list_runs(runs_dir)
    if not paths:
        raise ResultsError(f"no results files in {runs_dir} (run `gcbench run` first, or name results files)")
    index: list[dict[str, str]] = []
    newest: LoadedRun | None = None
    for p in paths:
        try:
            run = LoadedRun(p, load_run(p))
        except ResultsError as exc:
            if on_skip is None:
                raise
            on_skip(exc)
            continue
        index.append(run_facts(run))
        newest = run  # oldest first: the last that loads is the newest
    if newest is None:
        raise ResultsError(f"no readable results files in {runs_dir} ({len(paths)} skipped)")
    return ReportInput([newest], [newest], index=index)


def latest_run(runs_dir: str | Path = DEFAULT_RUNS_DIR) -> Path:
    return resolve_run("latest", runs_dir)


# ----------------------------------------------------------------------------- shared row model


@dataclass(frozen=True)
class Column:
    """A summary column: header, the metric of a case it shows (``case.metric(name)``), how to write it."""

    key: str
    header: str
    metric: str  # a name of RunCase.metric / TrainCase.metric / BenchCase.metric
    kind: str  # format kind for fmt()
    higher_is_better: bool | None
    help: str
    missing: str = "—"  # the text of a missing value in a case that ran (e.g. "not reached")
    cell: Callable[[Any], str] | None = None  # a cell richer than the number (a timing's spread and flags)

    def get(self, case: Any) -> float | None:
        return case.metric(self.metric)

    def text(self, case: Any) -> str:
        if self.cell is not None:
            return self.cell(case)
        v = self.get(case)
        return self.missing if v is None else fmt(v, self.kind)


def spread_text(v: float, spread: float | None, unit: str = "") -> str:
    """A value and its spread written to the same decimals: ``1.14× ±0.03``, ``12.4× ±0.9``, ``1.00× ±<0.01``.

    Three significant digits for the value from 0.1 up (two decimals under 10, one under 100, none
    above), at least two below (``0.023×``), and the spread at the value's last decimal, so the two
    read as one measurement; a spread that rounds to zero there is written as under one unit of that
    decimal rather than as a false ``±0.00``.
    """
    a = abs(v)
    d = 2 if 0.1 <= a < 10 or a == 0 else 1 if 10 <= a < 100 else 0 if a >= 100 else min(6, 1 - math.floor(math.log10(a)))
    text = f"{v:,.{d}f}{unit}"
    if spread is None or not math.isfinite(spread):
        return text
    step = 10.0 ** -d
    return text + (f" ±{abs(spread):,.{d}f}" if round(abs(spread), d) >= step else f" ±<{step:.{d}f}")


def x_copy_text(x: XCopy | None) -> str:
    """A kernel's ×copy as tables write it: ``3.14× ±0.40`` (median ± half the IQR), its flags in brackets.

    A timing that beat its traffic bound shows no number: what it timed is not the work the compressor must do.
    """
    if x is None or x.median is None:
        return "—"
    flags = list(x.flags or [])
    if x.beats_bound:
        text = "—"
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
    """The delivered cell of a run case: ``0.931 (workers 0.902–0.960)``, a short stream marked.

    The headline is the aggregate's stream; the parenthesis is the 95% CI of the mean of each
    worker's OWN delivered fraction (its compressed stream against its own dense update), another
    quantity: the average of the workers' sparse updates delivers more than one worker's alone, so
    the headline may lie outside it (top-k on ResNet-50: 0.090 vs workers 0.060–0.077).  It is
    written as a range of the workers, not a bracket after the number, so it is not read as the
    headline's interval.

    A stream shorter than the steps that rank stateful compressors reads ``0.931 (short: 2 steps)``:
    a number, but not one to rank on.
    """
    st = case.stream
    v = case.metric("delivered")
    if st is None or v is None:
        return "—"
    text = fraction_text(v)
    ci = st.worker_ci
    if ci is not None and ci.lo is not None and ci.hi is not None:
        text += f" (workers {fraction_text(ci.lo)}–{fraction_text(ci.hi)})"
    if st.enough is False:
        text += f" (short: {_or(st.steps)} step{'' if st.steps == 1 else 's'})"
    return text


def fraction_text(v: float) -> str:
    """A delivered fraction: three decimals near [0, 1] (EF methods differ in the third), else three digits."""
    return f"{v:.3f}" if abs(v) < 10 else fmt(v, "g")


#: the one name of a kernel's time over the copy's time (lower is better) in every table: run, compare, bench
X_COPY_HEADER = "comp ×copy"
X_COPY_DEC_HEADER = "dec ×copy"

#: the main run table: bytes, fidelity on the suite's ONE common reference (the stream view), kernel time
SUMMARY_COLUMNS: tuple[Column, ...] = (
    Column("ratio", "ratio", "ratio", "ratio", True, "dense float32 bytes / wire bytes (headers included)"),
    Column("bits", "bits/el", "bits_per_element", "g", False, "wire bits per gradient element"),
    Column("delivered", "delivered", "delivered", "g", True,
           "1 − ‖Σ_t(U_t − D_t)‖/‖Σ_t D_t‖ after the last step: the fraction of the summed dense update D (the common "
           "reference) that the case's updates U delivered; (workers lo–hi) = 95% CI of the mean of each worker's own "
           "delivered fraction; (short) = too few steps to rank on",
           cell=delivered_text),
    Column("step_err", "step err", "stream_error", "g", False,
           "mean over steps of ‖U_t − D_t‖²/‖D_t‖², whole model, against the common reference"),
    Column("scaled_err", "scaled err", "stream_error_scaled", "g", False,
           "mean over steps of 1 − cos²(U_t, D_t): the step error after the best scalar rescaling (scale-free)"),
    Column("comp_ms", "comp ms", "compress_s", "ms", False, "median compress time per worker-step"),
    Column("dec_ms", "dec ms", "decompress_s", "ms", False, "median decompress time per worker-step"),
    Column("comp_copy", X_COPY_HEADER, "comp_over_copy", "x", False,
           "×copy: compress time / time of a plain copy of the same tensors, the copy timed in rounds interleaved with the "
           "kernels (lower is better; 1× = as fast as a copy): median ± half the IQR, flags",
           cell=compress_x_copy_text),
)

#: the one-shot table: one compression of one gradient, each compressor against its OWN reference
ONESHOT_COLUMNS: tuple[Column, ...] = (
    Column("q", "q", "q", "g", False, "relative MSE ‖C(x)−x‖²/‖x‖², whole model, against the case's own reference"),
    Column("q_scaled", "q scaled", "q_scaled", "g", False,
           "scale-free one-shot error 1 − cos²(C(x), x): q after the best scalar rescaling, whole model"),
    Column("bias2", "bias²", "bias2", "g", False, "relative bias² from R compressions, whole model"),
    Column("cosine", "cosine", "cosine", "g", True, "cosine of C(x) and x, whole model (sums over tensors before the division)"),
    Column("agg_q", "agg q", "aggregate_q", "g", False,
           "relative MSE of the exchanged aggregate vs the true worker mean (own reference), mean over steps"),
)

# extra columns of the HTML tables (the terminal stays narrow)
DETAIL_COLUMNS: tuple[Column, ...] = (
    Column("wire", "wire bytes", "wire_bytes", "int", False, "bytes one worker sends per step"),
    Column("comp_gbps", "comp GB/s", "compress_gbps", "g", True, "dense input bytes / median compress time",
           cell=compress_gbps_text),
    Column("dec_gbps", "dec GB/s", "decompress_gbps", "g", True, "dense input bytes / median decompress time"),
)
ONESHOT_DETAIL_COLUMNS: tuple[Column, ...] = (
    Column("variance", "variance", "variance", "g", False, "relative variance, whole model"),
    Column("delta", "δ", "delta", "g", False, "Beznosikov δ = 1/(1 − q)"),
    Column("ef", "EF drift", "ef_drift", "g", False, "‖Σ C_t − Σ g_t‖/‖Σ g_t‖ after the last step (worker 0, own reference)"),
)


def stream_reference(cases: Sequence[RunCase]) -> str | None:
    """The common reference the stream columns of these cases are measured against (``None``: no case has a stream)."""
    refs = list(dict.fromkeys(str(c.stream.reference) for c in cases if c.ok and c.stream and c.stream.reference))
    return "; ".join(refs) if refs else None


def stream_caption(cases: Sequence[RunCase], label: Callable[[str], str] = str) -> str:
    """The main table's caption: which reference its fidelity columns use, over how many steps, and who applies momentum.

    ``label`` writes a case's label (:func:`clip` for the terminal and the HTML page; a Markdown file keeps it whole)."""
    ok = [c for c in cases if c.ok]
    ref = stream_reference(ok)
    if ref is None:
        return ("delivered / step err / scaled err: no stream in these results (recorded before the stream view); "
                "the one-shot table has each compressor against its own reference.")
    steps = sorted({c.stream.steps for c in ok if c.stream and c.stream.steps is not None})
    text = f"fidelity on the common reference: {ref}"
    if steps:
        text += f", over {steps[0] if len(steps) == 1 else f'{steps[0]}–{steps[-1]}'} steps"
    own = [label(c.label) for c in ok if c.stream and c.stream.own_momentum]
    if own:
        one = len(own) == 1
        text += (f" ({', '.join(own)} appl{'ies' if one else 'y'} momentum {'itself' if one else 'themselves'}: "
                 f"{'its' if one else 'their'} aggregate is the update)")
    short = [c for c in ok if c.stream and c.stream.enough is False]
    if short:
        least = next((c.stream.min_steps for c in short if c.stream and c.stream.min_steps), None)
        text += (f"; short = a stream of fewer than the {f'{least} ' if least else ''}steps that rank stateful "
                 "compressors: do not rank on it")
    return text + "." + copy_caveat(ok)


def copy_caveat(cases: Sequence[RunCase]) -> str:
    """A sentence when the cases' copy yardstick moved (:data:`gcbench.measure.casemath.COPY_SPREAD_LIMIT`), else ""."""
    moved = [c.timing for c in cases if c.timing is not None and c.timing.copy_spread is not None
             and c.timing.copy_spread > COPY_SPREAD_LIMIT and c.timing.copy_range_s]
    if not moved:
        return ""
    lo, hi = moved[0].copy_range_s[0], moved[0].copy_range_s[-1]  # type: ignore[index]
    return (f" comp ×copy will not repeat run to run: the copy of these tensors, which the caches hold, took "
            f"{lo * 1e3:.3g}–{hi * 1e3:.3g} ms across the cases (each at the speed the kernel before it left the caches "
            "in); the kernels' own times (timing.compress.median_s in the results file) are what repeats.")


def oneshot_reference(case: RunCase) -> str:
    """A case's own one-shot reference (``gradient`` unless its compressor names another, e.g. DGC's momentum-SGD update)."""
    return str(case.fidelity.reference) if case.fidelity and case.fidelity.reference else "gradient"


def oneshot_caption(cases: Sequence[RunCase], main: str = "the main table", label: Callable[[str], str] = str) -> str:
    """The one-shot table's caption: each case against its own reference, naming those that are not the gradient.

    ``main``: what to read instead when the references differ (the main table, or the main plot).
    """
    other: dict[str, list[str]] = {}
    for c in cases:
        if c.ok and oneshot_reference(c) != "gradient":
            other.setdefault(oneshot_reference(c), []).append(label(c.label))
    text = "one shot: one compression of one gradient, each case against its own reference: the gradient"
    if not other:
        return text + "."
    return (text + ", except " + "; ".join(f"{', '.join(labels)}: {ref}" for ref, labels in other.items())
            + f" — not comparable across references; {main} is.")


TRAIN_COLUMNS: tuple[Column, ...] = (
    Column("final_acc", "final acc", "final_accuracy", "acc", True, "held-out accuracy after the last epoch"),
    Column("final_loss", "final loss", "final_loss", "g", False, "held-out loss after the last epoch"),
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
    Column("ratio", "ratio", "ratio", "ratio", True, "dense float32 bytes / payload bytes per step"),
)

# extra columns of the HTML train tables
TRAIN_DETAIL_COLUMNS: tuple[Column, ...] = (
    Column("best_acc", "best acc", "best_accuracy", "acc", True, "best held-out accuracy over the epochs"),
    Column("epoch_target", "target epoch", "epochs_to_target", "int", False,
           "the epoch at whose end the target accuracy was first reached", missing="—"),
    Column("train_s", "train s", "train_time_s", "s", False, "training time of the whole run (evaluation excluded)"),
    Column("bits", "bits/el", "bits_per_element", "g", False, "payload bits per gradient element per step"),
)


BENCH_COLUMNS: tuple[Column, ...] = (
    Column("numel", "elements", "numel", "int", None, "elements of the dense float32 tensor timed"),
    Column("ratio", "ratio", "ratio", "ratio", True, "dense float32 bytes / wire bytes (headers included)"),
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


def bench_target(rec: BenchCase) -> tuple[str, str]:
    """(target text, ``pass``/``short``/``—``/``error``) of a bench record: :func:`gcbench.measure.bench.kernel_verdict` with details.

    The text names every limit that ``pass`` checks (verdict's own text leaves the decompress limit
    out) and, for topk/dgc, the measured speed-ups over ``torch.topk``.
    """
    if not rec.ok:
        return ("", "error")
    if rec.compress_x_copy is None or rec.decompress_x_copy is None:
        return ("—", "—")  # an incomplete record (hand-edited or from another tool): nothing to judge
    text, mark = kernel_verdict(rec.to_json_dict())
    t = target_of(rec.compressor)
    if t is not None and t.decompress_x_copy is not None:
        text = ", ".join(x for x in (text, f"decompress ≤ {t.decompress_x_copy:g}× copy") if x)
    if rec.vs_torch_topk:
        text += " (measured " + ", ".join(f"{d}: {v.speedup:.2f}×" for d, v in rec.vs_torch_topk.items()) + ")"
    return text, mark


def size_text(n: Any) -> str:
    """An element count the way ``gcbench bench --sizes`` takes it: 100000 → 100K, 25600000 → 25.6M."""
    if not isinstance(n, int):
        return str(n)
    for div, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "K")):
        if n >= div:
            return f"{n / div:.4g}{suffix}"
    return str(n)


#: the kinds of :func:`fmt` that are one format spec and a suffix
_FIXED_FORMATS: dict[str, tuple[str, str]] = {
    "x": (",.1f", "×"), "x2": (",.2f", "×"), "acc": (".4f", ""), "s": (".2f", ""), "int": (",.0f", ""), "pct": ("+.1%", ""),
}


def fmt(v: float | None, kind: str = "g") -> str:
    """A number as reports write it; ``—`` for missing values (and NaN), ``∞`` for an infinite one.

    An infinite value is a change from a baseline of exactly 0, or a number a file holds beyond
    the float range (``1e999``, a 400-digit integer: the record reads both as infinity).
    """
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > FLOAT_INT_MAX:
        v = math.inf if v > 0 else -math.inf  # a number no float holds (a parameter's value): float formats would raise
    if v is not None and isinstance(v, float) and math.isinf(v):
        return ("+∞" if v > 0 else "−∞") if kind == "pct" else ("∞" if v > 0 else "−∞")
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if kind == "ratio":
        return f"{v:,.1f}×" if v < 1000 else f"{v:,.0f}×"
    if kind == "ms":
        ms = 1e3 * v
        return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}" if ms >= 0.1 else f"{ms:.3g}"
    if kind == "pp":  # a fraction shown in percentage points
        return f"{100 * v:+.2f}"
    if kind == "mb":
        return f"{v / 1e6:.3f}"
    if kind in _FIXED_FORMATS:
        spec, suffix = _FIXED_FORMATS[kind]
        return f"{v:{spec}}{suffix}"
    if v == 0:
        return "0"
    return f"{v:.3g}" if 1e-3 <= abs(v) < 1e5 else f"{v:.2e}"


def is_reconstructed(case: RunCase | TrainCase) -> bool:
    return case.reconstructed


def case_name(case: RunCase | TrainCase) -> str:
    """The case label with a dagger for reconstructed compressors and, where a narrower float format (fp16) mapped
    inputs beyond its max to ±inf, the count of those elements: their metrics are not finite, and this says why
    (unescaped)."""
    saturated = (case.flags.model_extra or {}).get("saturated") if case.flags is not None else None
    return (case.label + (f" {DAGGER}" if case.reconstructed else "")
            + (f" (saturated: {saturated} elements)" if saturated else ""))


def params_text(case: RunCase | TrainCase | BenchCase) -> str:
    return ", ".join(f"{k}={v}" for k, v in (case.params or {}).items())


def by_source(cases: Sequence[RunCase]) -> dict[str, list[RunCase]]:
    """Cases grouped by gradient source label, in first-seen order.

    A case that failed inside the runner records only its source's *name*; it joins the group of
    the labelled source with that name when exactly one exists, so it shows in its source's table.
    """
    labels_of: dict[str, set[str]] = {}
    for c in cases:
        src = c.source
        if src and src.label and src.name:
            labels_of.setdefault(src.name, set()).add(src.label)
    out: dict[str, list[RunCase]] = {}
    for c in cases:
        src = c.source
        key = c.source_label
        name = str(src.name) if src else "None"
        if not (src and src.label) and len(labels_of.get(name, ())) == 1:
            key = next(iter(labels_of[name]))
        out.setdefault(key, []).append(c)
    return out


def _or(v: Any, default: str = "?") -> str:
    return default if v is None else str(v)


def short_commit(run: RunRecord) -> str:
    git = run.git
    if git is None or not git.commit:
        return "—"
    return git.commit[:10] + ("+dirty" if git.dirty else "")


def machine_text(run: RunRecord) -> str:
    env = run.env
    parts = [_or(env.cpu_model), f"{_or(env.cpu_count)} cores", f"{_or(env.torch_threads)} threads"]
    if env.cuda_device:
        parts.append(env.cuda_device)
    return ", ".join(parts)


def run_facts(run: LoadedRun) -> dict[str, str]:
    """The summary facts of one run, as text (unescaped)."""
    d = run.data
    cases = run.cases
    failed = sum(1 for c in cases if not c.ok)
    suite = d.suite
    env = d.env
    if run.kind == "bench":
        # a bench file has no suite: its settings are the sizes, repeats and threads
        sizes = ", ".join(size_text(n) for n in (suite.sizes if suite else None) or [])
        suite_text = f"bench: sizes {sizes or '?'}, {_or(suite and suite.repeats)} repeats, {_or(suite and suite.threads)} threads"
    else:
        suite_text = f"{_or(suite and suite.name)} (hash {_or(d.suite_hash)[:8]})"
    status = d.status
    if status is None and run.kind == "bench":
        status = "complete"  # `gcbench bench` wrote its file once, after every case, without a status before 0.2
    return {
        "run": run.run_id,
        "kind": run.kind,
        "suite": suite_text,
        "date": _or(d.created_utc),
        "status": str(status or "?"),
        "cases": f"{len(cases) - failed} ok" + (f", {failed} failed" if failed else ""),
        "machine": machine_text(d),
        "device": _or(env.device),
        "gcbench": _or(d.gcbench_version),
        "commit": short_commit(d),
        "torch": _or(env.torch),
        "file": str(run.path),
    }


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the (q, ratio) points no other point dominates (lower q and higher ratio are better)."""
    front = []
    for i, (qi, ri) in enumerate(points):
        dominated = any((qj <= qi and rj >= ri) and (qj < qi or rj > ri) for j, (qj, rj) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return front


# ----------------------------------------------------------------------------- terminal


def summary_tables(run: LoadedRun) -> list[Table]:
    """The tables of one results file: one per gradient source of a run, one for a train or bench file."""
    if run.kind == "train":
        return [train_table(run.cases, f"{run.run_id} — training: {train_description(run)}")]
    if run.kind == "bench":
        return [bench_table(run)]
    return case_tables(run.cases, run.run_id)


def case_tables(cases: Sequence[RunCase], title: str) -> list[Table]:
    """Per gradient source of run/compare cases: the main table, the one-shot table, then the per-phase table if any.

    The main table sets every case on the suite's one common reference (its caption names it); the
    one-shot numbers, each against the case's own reference, are a second table so that no column
    mixes references.
    """
    tables = []
    for src, group in by_source(cases).items():
        src = clip(src)  # the titles name the source: a long one would fill them
        main = _cases_table(f"{clip(title)} — {src}", group, SUMMARY_COLUMNS)
        main.caption = "\n".join(x for x in (rich_escape(stream_caption(group, clip)), main.caption) if x)
        main.caption_justify = "left"
        tables.append(main)
        if any(c.ok and c.fidelity is not None for c in group):
            oneshot = _cases_table(f"{clip(title)} — {src} — one-shot fidelity (own reference)", group, ONESHOT_COLUMNS,
                                   with_errors=False)
            oneshot.caption = rich_escape(oneshot_caption(group, label=clip))
            oneshot.caption_justify = "left"
            tables.append(oneshot)
        phases = phase_table(group, f"{clip(title)} — {src}")
        if phases is not None:
            phases.caption = rich_escape(PHASE_NOTE)
            phases.caption_justify = "left"
            tables.append(phases)
    return tables


def _cases_table(title: str, cases: Sequence[Any], columns: Sequence[Any], with_errors: bool = True, first: str = "case",
                 escape: bool = True) -> Table:
    """One row per case over ``columns``; a failed case's error goes in the caption (``with_errors``), not in a cell.

    ``escape`` False leaves the columns' markup (train's coloured cells) as it is."""
    t = Table(title=term(title, TEXT_MAX), title_justify="left")
    t.add_column(first, no_wrap=True)
    for col in columns:
        t.add_column(col.header, justify="right", no_wrap=True)
    errors = []
    for c in cases:
        if not c.ok:
            # the error goes under the table: in a cell it would stretch one numeric column
            t.add_row(term(case_name(c)), "[red]failed[/]", *[""] * (len(columns) - 1))
            errors.append((case_name(c), c.error_text))
            continue
        t.add_row(term(case_name(c)), *[rich_escape(col.text(c)) if escape else col.text(c) for col in columns])
    if errors and with_errors:
        t.caption = _failure_caption(errors)
        t.caption_justify = "left"
    return t


def run_output(cases: Sequence[RunCase], title: str) -> list[RenderableType]:
    """What ``gcbench run`` prints after a run: the per-source tables of its cases and the footnote."""
    return [*case_tables(cases, title), Text(LEGEND)]


def verdict_output(pairs: Sequence[PairVerdict]) -> list[RenderableType]:
    """The verdict of ``gcbench compare``: each pair's one-line summary, then its axes one sentence each."""
    out: list[RenderableType] = []
    for v in pairs:
        out.append(Text(v.summary, style="bold"))
        out += [Text(f"  • {axis.text}") for axis in v.axes]
    return out


def _side_cell(row: SideRow, i: int, case: RunCase) -> str:
    """One cell of a head-to-head row (markup, escaped): the number, with its interval, spread or flags where it has them."""
    v, metric = row.values[i], row.spec.metric
    if v is None:
        text = fmt(v, row.spec.format)
    elif metric in ("comp_over_copy", "decomp_over_copy") and case.timing is not None:  # with its spread and flags
        text = x_copy_text(case.timing.x_copy(row.spec.kernel or "compress"))
    elif metric == "compress_gbps" and case.beats_bound:
        text = f"— ({BEATS_BOUND})"  # not the work the compressor must do: no speed
    elif metric == "delivered" and case.stream is not None:
        ci = case.stream.worker_ci
        # the bracket is over each worker's own stream, not an interval of the aggregate's value beside it
        text = fmt(v, "g") + (f" (workers {fmt(ci.lo, 'g')}–{fmt(ci.hi, 'g')})" if ci is not None and ci.lo is not None
                              and ci.hi is not None else "")
        text += " (too short)" if case.stream.enough is False else ""
    else:
        text = fmt(v, row.spec.format)
    text = rich_escape(text)
    if row.best == i:
        return f"[bold green]{text}[/]"
    return f"{text} ≈" if row.not_significant[i] else text


def _side_table(title: str, cases: Sequence[RunCase], rows: Sequence[SideRow]) -> Table:
    t = Table(title=term(title, TEXT_MAX) or None, title_justify="left")
    t.add_column("metric")
    for c in cases:
        t.add_column(term(case_name(c)), justify="right")
    for r in rows:
        t.add_row(rich_escape(r.spec.label) + (" ↑" if r.spec.higher_is_better else " ↓"),
                  *[_side_cell(r, i, c) for i, c in enumerate(cases)])
    return t


def sweep_table(sweep: Sequence[RunCase], cases: Sequence[RunCase]) -> Table:
    """The density sweep of ``gcbench compare --sweep``: bytes per step and delivered update of each point."""
    t = Table(title="density sweep — bytes vs delivered update (for 'at equal delivered update')", title_justify="left")
    for h in ("case", "density", "bytes / step", "delivered update"):
        t.add_column(h, justify="left" if h == "case" else "right")
    for c in sorted([*[c for c in cases if c.ok], *sweep], key=lambda c: (c.compressor or "", -((c.params or {}).get("density") or 0))):
        if not c.ok:
            t.add_row(term(case_name(c)), "", "[red]failed[/]", "")
            continue
        d = c.stream.delivered if c.stream else None
        short = " (too short)" if c.stream is not None and c.stream.enough is False else ""
        t.add_row(term(case_name(c)), fmt((c.params or {}).get("density"), "g"), fmt(bytes_per_step(c), "int"),
                  fmt(d, "g") + short)
    return t


COMPARE_STREAM_NOTE = ("delivered update = 1 − ‖Σ_t(U_t − D_t)‖/‖Σ_t D_t‖ after the last step (U: the case's update, D: the "
                       "dense update on the true worker mean); (workers lo–hi) = the 95% interval of the mean of each worker's "
                       "own delivered fraction (its own updates against its own dense update: a different number from the "
                       "aggregate's); per-step error = mean over steps of ‖U_t − D_t‖²/‖D_t‖²; scale-free = 1 − cos²(U_t, D_t).")
ONE_SHOT_NOTE = ("One compression of one gradient, R repeats, on the first steps only; each case against its own reference "
                 "(DGC and SDAGC against their momentum-SGD update), so these rows rank cases only where the references agree.")


def head_to_head_output(cases: Sequence[RunCase], granularity: str, sweep: Sequence[RunCase] | None = None) -> list[RenderableType]:
    """What ``gcbench compare`` prints: the verdict of each pair, the main table on the suite's common reference, the
    one-shot fidelity (each case against its own reference), the density sweep when one ran, failures, notes, phases."""
    src = cases[0].source_label if cases else ""
    first = next((c for c in cases if c.ok), None)
    workers = "?" if first is None or first.workers is None else first.workers
    steps = "?" if first is None or first.steps is None else first.steps
    reference = first.stream.reference if first is not None and first.stream and first.stream.reference else None
    src = clip(src)
    out: list[RenderableType] = [Text(f"verdict — {src}", style="bold underline"), *verdict_output(verdicts(cases, sweep))]
    if sweep is None:
        out.append(Text("(no statement at equal delivered update: that needs a density sweep, --sweep)"))
    main = head_to_head(cases, MAIN_METRICS)
    # the heading is a line of its own: as a table title it wraps at the width of a narrow two-case table
    out.append(Text(f"gcbench compare — {src}, {workers} workers × {steps} steps, granularity {granularity} — "
                    f"reference: {reference or 'none recorded'}", style="bold"))
    out.append(_side_table("", cases, main))
    out.append(Text(COMPARE_STREAM_NOTE))
    refs = fidelity_references(cases)
    one_shot = _side_table("one-shot fidelity — each against its own reference", cases, head_to_head(cases, FIDELITY_METRICS))
    one_shot.add_row("reference", *[term(r or "—") for r in refs])
    out += [one_shot, Text(ONE_SHOT_NOTE)]
    if sweep is not None:
        out.append(sweep_table(sweep, cases))
    failed = [c for c in (*cases, *(sweep or ())) if not c.ok]
    out += [Text.from_markup(f"[red]{term(c.label)} failed:[/] {term(c.error_text, TEXT_MAX)}") for c in failed]
    out.append(Text("green = best in row, only where a best means something (no flagged timing, no too-short stream, one "
                    "reference for the one-shot rows); ≈ = timing not significantly different from the best (Mann–Whitney "
                    f"p ≥ 0.05); {DAGGER} = reconstructed definition; "
                    + TIMING_NOTE.replace(X_COPY_HEADER, "compress ×copy", 1)))
    phases = phase_table(cases, "gcbench compare")
    if phases is not None:
        out += [phases, Text(PHASE_NOTE)]
    return out


# ----------------------------------------------------------------------------- phases (LGC)

PHASE_NOTE = ("Per phase: the phases of the suite's phased compressor (LGC); every case of the source is measured over "
              "the same steps of the same gradient stream. ratio = dense fp32 bytes / bytes a worker sends per step in the "
              "phase (every message counted, payload headers included); body ratio = the same with payload bodies only (headers "
              "excluded, as papers count: on LGC's small compressed-phase messages headers are a large share); "
              "agg q = mean over the phase's steps of ‖aggregate − true mean‖²/‖true mean‖²; "
              "drift = ‖Σ(aggregate − mean)‖/‖Σ mean‖ summed over the phase's steps (what error feedback eventually "
              "delivers: compare compressors at equal drift); Σ drift (end) = the same over the whole run; errors are against "
              "each compressor's own reference (momentum SGD's update for DGC); run ratio = dense bytes × steps / every byte "
              "a worker sent in the run (what the server sends — aggregates, LGC's one-time encoder transfer — is received, "
              "not sent).")


def phase_columns(windows: Sequence[Window], detail: bool = False) -> list[tuple[str, str, str, str]]:
    """``(key, header, format kind, help)`` of a phase table: per window, then whole-run columns."""
    cols = []
    for w in windows:
        span = f"steps {w.first}–{w.last}"
        cols.append(("ratio", f"{w.name} ratio", "ratio", f"{w.name} ({span}): dense fp32 bytes / bytes a worker sends per step"))
        cols.append(("body_ratio", f"{w.name} body ratio", "ratio",
                     f"{w.name} ({span}): dense fp32 bytes / payload body bytes a worker sends per step (headers excluded)"))
        cols.append(("aggregate_q", f"{w.name} agg q", "g", f"{w.name} ({span}): mean aggregate error vs the true worker mean"))
        cols.append(("drift", f"{w.name} drift", "g", f"{w.name} ({span}): ‖Σ(aggregate − mean)‖/‖Σ mean‖ over the phase's steps"))
        if detail:
            cols.append(("aggregate_cosine", f"{w.name} agg cos", "g", f"{w.name} ({span}): mean cosine(aggregate, true mean)"))
            cols.append(("sum_drift", f"{w.name} Σ drift", "g", f"cumulative aggregate error from step 0 to step {w.last}"))
    cols.append(("overall_ratio", "run ratio", "ratio", "whole run: dense bytes × steps / every byte a worker sent"))
    cols.append(("final_drift", "Σ drift (end)", "g", "‖Σ(aggregate − mean)‖/‖Σ mean‖ over the whole run"))
    return cols


def phase_values(row: PhaseRow, windows: Sequence[Window], detail: bool = False) -> list[float | None]:
    """The numbers of :func:`phase_columns` for one case."""
    vals: list[float | None] = []
    keys = (("ratio", "body_ratio", "aggregate_q", "drift", "aggregate_cosine", "sum_drift") if detail
            else ("ratio", "body_ratio", "aggregate_q", "drift"))
    for m in row.windows:
        vals += [None if m is None else m.get(k) for k in keys]
    return [*vals, row.overall_ratio, row.final_drift]


def phase_table(cases: Sequence[RunCase], title: str) -> Table | None:
    """The per-phase table of one source (terminal), or ``None`` if no case of it has phases."""
    windows = source_windows(cases)
    if not windows:
        return None
    cols = phase_columns(windows)
    t = Table(title=f"{term(title, TEXT_MAX)} — per phase: " + ", ".join(rich_escape(w.text()) for w in windows), title_justify="left")
    t.add_column("case", no_wrap=True)
    # a terminal is narrow: each window's ratio and body-only ratio share one cell, "ratio (body)"
    merged = [i for i, c in enumerate(cols) if c[0] == "body_ratio"]
    for i, (_, header, _, _) in enumerate(cols):
        if i in merged:
            continue
        t.add_column(rich_escape(header + (" (body)" if i + 1 in merged else "")), justify="right")
    for r in phase_rows(cases, windows):
        cells = [fmt(v, c[2]) for v, c in zip(phase_values(r, windows), cols, strict=True)]
        row = [f"{cells[i]} ({cells[i + 1]})" if i + 1 in merged else cells[i] for i in range(len(cells)) if i not in merged]
        t.add_row(term(case_name(r.case)), *row)
    return t


WORKER_HEADERS = ("case", "phase", "sent per worker (w0 / w1 / …)", "received per worker")
WORKER_NOTE = ("Mean bytes per step, by worker, of the phased cases (one-time set-up messages excluded): LGC's parameter-server "
               "leader (w0) sends its latent, indices and innovation, the others their innovation only.")


def worker_cells(wt: WorkerTraffic) -> list[str]:
    """Case, phase and the per-worker byte lists of one :class:`WorkerTraffic` row (unescaped)."""
    return [case_name(wt.case), wt.window.text(), " / ".join(fmt(v, "int") for v in wt.sent),
            " / ".join(fmt(v, "int") for v in wt.received)]


def markdown_phases(cases: Sequence[RunCase]) -> str:
    """The per-phase table of one source as Markdown ('' if no case of it has phases)."""
    windows = source_windows(cases)
    if not windows:
        return ""
    cols = phase_columns(windows)
    rows = [[md_escape(case_name(r.case)), *[fmt(v, c[2]) for v, c in zip(phase_values(r, windows), cols, strict=True)]]
            for r in phase_rows(cases, windows)]
    head = "Per phase: " + ", ".join(md_escape(w.text()) for w in windows) + "."
    parts = [head, "", md_table(["case", *[md_escape(c[1]) for c in cols]], rows, [False] + [True] * len(cols)), "",
             md_escape(PHASE_NOTE), ""]
    workers = worker_traffic(cases)
    if workers:
        parts += [md_table(WORKER_HEADERS, [[md_escape(t) for t in worker_cells(wt)] for wt in workers], [False, False, True, True]), "",
                  md_escape(WORKER_NOTE), ""]
    return "\n".join(parts)


# ----------------------------------------------------------------------------- per layer
#
# 161 layers × 30 cases do not fit one screen in any orientation: layers are the rows (they are
# many, and a terminal scrolls down), cases the columns in pages that fit the width, one metric per
# table — the ratio (where the bytes go) and the one-shot q (where the error goes).  The last row is
# the whole model, so each column ends with the number of the summary table.


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
LAYER_NOTE = ("Per layer: one row per unit the compressor saw (a layer, or a bucket at bucket granularity), the cases in "
              "column pages; the last row is the whole model (the summary table's number); — = no value for that case.")


def layer_units(cases: Sequence[RunCase]) -> list[tuple[str, int | None]]:
    """The units (name, elements) of these cases in first-seen order: the rows of their per-layer tables."""
    units: dict[str, int | None] = {}
    for c in cases:
        for u in c.layers or []:
            if u.name is not None and u.name not in units:
                units[u.name] = u.numel
    return list(units.items())


def layer_value(case: RunCase, unit: str, metric: LayerMetric) -> float | None:
    """``metric`` of one unit of a case (``None`` when the case has no such unit or no value)."""
    for u in case.layers or []:
        if u.name == unit:
            v = getattr(u, metric.field)
            return float(v) if isinstance(v, int | float) and math.isfinite(v) else None
    return None


def layer_pages(cases: Sequence[RunCase], width: int, fixed: int) -> list[list[RunCase]]:
    """The cases split into pages of columns whose table fits ``width`` characters beside ``fixed`` of row headers."""
    pages: list[list[RunCase]] = [[]]
    used = fixed
    for c in cases:
        w = max(len(clip(case_name(c))), 9) + 3  # a cell's text and its padding and border
        if pages[-1] and used + w > width:
            pages.append([])
            used = fixed
        pages[-1].append(c)
        used += w
    return [p for p in pages if p]


def _layer_cell(v: float | None, metric: LayerMetric) -> str:
    text = rich_escape(fmt(v, metric.kind))
    return f"[red]{text}[/]" if v is not None and metric.bad is not None and v >= metric.bad else text


def layer_tables(cases: Sequence[RunCase], title: str, width: int = 160) -> list[Table]:
    """The per-layer tables of one source's cases: per metric of :data:`LAYER_METRICS`, pages of cases that fit ``width``."""
    ok = [c for c in cases if c.ok and c.layers]
    units = layer_units(ok)
    if not units:
        return []
    name_w = max(len(clip(n)) for n, _ in units)
    fixed = name_w + len(f"{max((n or 0) for _, n in units):,}") + 7
    pages = layer_pages(ok, width, fixed)
    tables = []
    for metric in LAYER_METRICS:
        for i, page in enumerate(pages):
            part = f" (cases {i + 1}/{len(pages)})" if len(pages) > 1 else ""
            t = Table(title=f"{term(title, TEXT_MAX)} — per layer: {metric.field}{part}", title_justify="left",
                      caption=rich_escape(metric.title), caption_justify="left")
            t.add_column("layer", no_wrap=True)
            t.add_column("elements", justify="right", no_wrap=True)
            for c in page:
                t.add_column(term(case_name(c)), justify="right", no_wrap=True)
            for name, numel in units:
                t.add_row(term(name), fmt(numel, "int"), *[_layer_cell(layer_value(c, name, metric), metric) for c in page])
            t.add_section()
            t.add_row("whole model", fmt(sum(n or 0 for _, n in units), "int"),
                      *[_layer_cell(c.metric(metric.metric), metric) for c in page])
            tables.append(t)
    return tables


def layers_report(runs: Sequence[LoadedRun], width: int = 160) -> list[RenderableType | str]:
    """What ``gcbench report --layers`` prints: the per-layer tables of every source of every run, then their note.

    Raises :class:`ResultsError` when no case of these runs recorded per-layer rows (train and bench
    files never do).
    """
    out: list[RenderableType | str] = []
    for run in runs:
        if run.kind in ("train", "bench"):
            continue
        for src, group in by_source(run.cases).items():
            out += layer_tables(group, f"{clip(run.run_id)} — {clip(src)}", width)
    if not out:
        raise ResultsError("no per-layer rows in these results (only run and compare files record them)")
    return [*out, LAYER_NOTE]


def markdown_layers(runs: Sequence[LoadedRun], per_table: int = 10) -> str:
    """The per-layer tables as Markdown: per run, source and metric, ``per_table`` cases per table ('' when none)."""
    parts = []
    for run in runs:
        if run.kind in ("train", "bench"):
            continue
        for src, group in by_source(run.cases).items():
            ok = [c for c in group if c.ok and c.layers]
            units = layer_units(ok)
            if not units:
                continue
            parts += [f"### {md_escape(run.run_id)} — {md_escape(src)}: per layer", ""]
            for metric in LAYER_METRICS:
                parts += [md_escape(metric.title) + ".", ""]
                for i in range(0, len(ok), per_table):
                    page = ok[i:i + per_table]
                    rows = [[md_escape(name), fmt(numel, "int"), *[fmt(layer_value(c, name, metric), metric.kind) for c in page]]
                            for name, numel in units]
                    rows.append(["**whole model**", fmt(sum(n or 0 for _, n in units), "int"),
                                 *[fmt(c.metric(metric.metric), metric.kind) for c in page]])
                    parts += [md_table(["layer", "elements", *[md_escape(case_name(c)) for c in page]], rows,
                                       [False] + [True] * (len(page) + 1)), ""]
    return "\n".join([*parts, md_escape(LAYER_NOTE), ""]) if parts else ""


def markdown_layers_report(runs: Sequence[LoadedRun]) -> str:
    """What ``gcbench report --layers --md`` writes; :class:`ResultsError` when no case recorded per-layer rows."""
    body = markdown_layers(runs)
    if not body:
        raise ResultsError("no per-layer rows in these results (only run and compare files record them)")
    return "\n".join(["# gcbench report — per layer", "", body])


def _failure_caption(names_errors: Sequence[tuple[str, str]]) -> str:
    return "\n".join(f"[red]{term(n)} failed:[/] {term(e, TEXT_MAX)}" for n, e in names_errors)


def train_table(cases: Sequence[TrainCase], title: str) -> Table:
    """Train cases: one row per compressor (the columns of ``gcbench train``), notes and failures under it."""
    t = _cases_table(title, cases, TRAIN_COLUMNS, with_errors=False, first="compressor", escape=False)
    errors = [(case_name(c), c.error_text) for c in cases if not c.ok]
    lines = [_failure_caption(errors)] if errors else []
    lines += [f"[yellow]note:[/] {rich_escape(n)}" for n in train_notes(cases)]
    lines.append(rich_escape(TRAIN_FOOTNOTE))
    t.caption = "\n".join(lines)
    t.caption_justify = "left"
    return t


def bench_table(run: LoadedRun) -> Table:
    """A bench file: the target table of ``gcbench bench`` (one row per compressor and size)."""
    t = Table(title=f"{term(run.run_id)} — kernel benchmark: {term(bench_description(run), TEXT_MAX)}", title_justify="left")
    t.add_column("compressor", no_wrap=True)
    for col in BENCH_COLUMNS:
        t.add_column(col.header, justify="right", no_wrap=True)
    t.add_column("target")
    t.add_column("verdict", no_wrap=True)
    errors = []
    for c in run.cases:
        if not c.ok:
            t.add_row(term(bench_name(c)), fmt(c.metric("numel"), "int"), "[red]failed[/]", *[""] * (len(BENCH_COLUMNS) - 2),
                      "", "[red]error[/]")
            errors.append((bench_name(c), c.error_text))
            continue
        target, mark = bench_target(c)
        style = {"pass": "green", "short": "red", "flagged": "yellow"}.get(mark)
        change = "" if c.baseline_change is None else f" ({100 * c.baseline_change:+.0f}% vs base)"  # `bench --baseline`
        t.add_row(term(bench_name(c)), *[col.text(c) for col in BENCH_COLUMNS], rich_escape(target),
                  (f"[{style}]{mark}[/]" if style else mark) + change)
    t.caption = "\n".join(([_failure_caption(errors)] if errors else []) + [rich_escape(BENCH_FOOTNOTE)] + bench_roofline(run.cases)
                          + [rich_escape(line) for line in flag_reason_lines(run.cases)])
    t.caption_justify = "left"
    return t


def flag_reason_lines(cases: Sequence[BenchCase]) -> list[str]:
    """One line per flagged bench kernel: what triggered each flag (files before 2026-11-27 recorded no reasons: none)."""
    out = []
    for c in cases:
        for kernel in ("compress", "decompress"):
            x = (c.x_copy or {}).get(kernel) if c.ok else None
            if x is None or not x.flags or not x.reasons:
                continue
            why = "; ".join(f"{f}: {x.reasons[f]}" for f in x.flags if f in x.reasons)
            if why:
                out.append(f"{bench_name(c)} {kernel} — {why}.")
    return out


def bench_roofline(cases: Sequence[BenchCase]) -> list[str]:
    """The median copy time of the cases that ran, the roofline every kernel time is a multiple of ([] when none ran)."""
    copy_s = [c.copy_.median_s for c in cases if c.ok and c.copy_ is not None and c.copy_.median_s is not None]
    if not copy_s:
        return []
    return [f"copy roofline (same tensor into a preallocated buffer): median {1e3 * statistics.median(copy_s):.2f} ms."]


def bench_name(rec: BenchCase) -> str:
    """A bench record's row name: its label (the compressor, or ``name:key=value`` for a spec with parameters)."""
    return rec.name


def train_description(run: LoadedRun | Sequence[TrainCase]) -> str:
    """Task, workers, epochs and target of a train file (or of its cases), from its first completed case (else its settings)."""
    cases = run.cases if isinstance(run, LoadedRun) else run
    tr = next((c.training for c in cases if c.ok and c.training is not None), None)
    if tr is None:
        suite = run.data.suite if isinstance(run, LoadedRun) else None
        cfg = (suite.config if suite else None) or {}
        return f"task {cfg.get('task', '?')}, {cfg.get('workers', '?')} workers, target accuracy {cfg.get('target', '?')}"
    task = tr.task
    target = tr.target_accuracy
    return (f"{_or(task and task.name)} ({_or(task and task.model)}), {_or(tr.workers)} workers × "
            f"{_or(tr.threads_per_worker)} thread(s), {_or(tr.epochs)} epochs, batch {_or(tr.batch_size_per_worker)} "
            f"per worker, lr {_or(tr.lr)}, target {'?' if target is None else f'{target:g}'} accuracy")


def bench_description(run: LoadedRun) -> str:
    suite = run.data.suite
    steps = sorted({f"{c.model} ({c.tensors} tensors)" for c in run.cases if isinstance(c, BenchCase) and c.model})
    what = f"a whole step of {', '.join(steps)} per case; " if steps else ""
    return (f"{what}{_or(suite and suite.threads)} threads, {_or(run.data.env.device)}; "
            f"times are medians of {_or(suite and suite.repeats)} repeats; {machine_text(run.data)}")


def train_notes(cases: LoadedRun | Sequence[TrainCase]) -> list[str]:
    """What a reader of a train table must know: diverged losses, replicas that disagree, protocol notes."""
    notes = []
    for c in cases.cases if isinstance(cases, LoadedRun) else cases:
        tr = c.training if c.ok else None
        if tr is None:
            continue
        if tr.diverged:
            notes.append(f"{case_name(c)}: the training loss became NaN or infinite; training stopped after epoch {_or(tr.epochs)}")
        if tr.replicas_consistent is False:
            notes.append(f"{case_name(c)}: the workers' parameters differ at the end (replicas diverged)")
        note = tr.hook.protocol_note if tr.hook else None
        if note:
            notes.append(f"{case_name(c)}: {note}")
    return notes


RUN_FACT_KEYS = ("run", "kind", "suite", "date", "status", "cases", "machine", "gcbench", "commit")


def runs_table(runs: Sequence[LoadedRun]) -> Table:
    t = Table(title="runs", title_justify="left")
    for col in RUN_FACT_KEYS:
        t.add_column(col)
    for r in runs:
        f = run_facts(r)
        t.add_row(*[term(f[k]) for k in RUN_FACT_KEYS])
    return t


_VERDICT_STYLE = {BETTER: "green", FIXED: "green", WORSE: "bold red", NEW_FAILURE: "bold red", NOT_COMPARABLE: "yellow"}


def visible_rows(cmp: Comparison, all_rows: bool = False) -> list[Row]:
    """The rows worth showing: everything but "not significant" unless ``all_rows``."""
    return list(cmp.rows) if all_rows else [r for r in cmp.rows if r.verdict != NOT_SIGNIFICANT]


def row_cells(r: Row) -> list[str]:
    """case, metric, baseline, new, change, p, verdict, reason as text (unescaped)."""
    kind = "ms" if r.metric.endswith("_s") else "ratio" if r.metric == "ratio" else "x2" if r.unit == BENCH_UNIT else "g"
    metric = r.metric
    if metric.endswith("_s"):
        metric = metric[:-2] + " ms"
    elif r.unit == BENCH_UNIT:
        metric = metric.replace("_x_copy", " ×copy")  # "compress ×copy", as compare's tables name it
    if r.higher_is_better is not None and metric:
        metric += " ↑" if r.higher_is_better else " ↓"
    return [
        f"{r.case} ({r.source})", metric, fmt(r.baseline, kind), fmt(r.new, kind),
        fmt(r.change, "pct") if r.change is not None else "", f"{r.p_value:.2g}" if r.p_value is not None else "",
        r.verdict, r.reason,
    ]


COMPARE_HEADERS = ("case", "metric", "baseline", "new", "change", "p", "verdict", "note")


def comparison_table(cmp: Comparison, all_rows: bool = False) -> Table:
    t = Table(title=f"{term(cmp.new_id)} vs baseline {term(cmp.baseline_id)} "
                    f"(threshold {cmp.threshold:.0%}, α = {cmp.alpha:g})", title_justify="left")
    for h in COMPARE_HEADERS:
        t.add_column(h, justify="right" if h in ("baseline", "new", "change", "p") else "left")
    for r in visible_rows(cmp, all_rows):
        cells = [term(c, NAME_MAX if i == 0 else TEXT_MAX) for i, c in enumerate(row_cells(r))]
        style = _VERDICT_STYLE.get(r.verdict)
        if style:
            cells[6] = f"[{style}]{cells[6]}[/]"
        t.add_row(*cells)
    return t


def counts_text(cmp: Comparison) -> str:
    return ", ".join(f"{n} {v if v != NOT_SIGNIFICANT else 'not significant (~)'}" for v, n in cmp.counts().items()) or "nothing to compare"


def claims_table(results: Sequence[ClaimResult]) -> Table:
    t = Table(title="paper claims", title_justify="left")
    for h in ("paper", "compressor", "model / data", "claim", "gcbench"):
        t.add_column(h, overflow="fold")
    for res in results:
        c = res.claim
        t.add_row(term(c.paper), term(c.compressor), term(f"{c.model} / {c.data}"),
                  term(f"{c.value_text()} {c.metric} ({c.source})", TEXT_MAX), term(measured_text(res), TEXT_MAX))
    return t


def measured_text(res: ClaimResult) -> str:
    """What gcbench measured for a claim, in one cell."""
    status = res.status
    if status == "not measurable":
        return "end-to-end training result; not measured by gcbench"
    if status == "not measured in these runs":
        failed = [m for m in res.measurements if m.error]
        return "not measured in these runs" + (f" (matching case failed: {failed[0].error})" if failed else "")
    return "; ".join(f"{format_measured(m.value, res.claim.unit)} {m.how()} — {m.where()}" for m in res.measured())


_POLICY = TimingPolicy()
TIMING_NOTE = (f"{X_COPY_HEADER} = compress time / the time of a plain copy of the same tensors (×copy: lower is better; 1× = as "
               f"fast as a copy), the copy timed in rounds interleaved with each case's kernels, pooled over every case of "
               f"the source for a compute-bound kernel, its own rounds' for one within 2× of its traffic bound: median over "
               f"rounds ± half the interquartile "
               f"range; ({UNSTABLE}) = the median's 95% CI is still wider than ±{_POLICY.unstable_rel_ci:.0%} of it after "
               f"the rounds calibration took (more rounds until it is within ±{_POLICY.stable_rel_ci:.0%}, up to a cap), the "
               f"case's own copy drifted from the pooled one enough to move the kernel by over {_POLICY.copy_drift:.0%}, or "
               f"other processes took over {_POLICY.foreign_cpu:.0%} of the machine's CPU while timing (the 1-minute load per "
               f"core over {_POLICY.load_per_core:g} where that cannot be read); ({TOO_SHORT}) = median under "
               f"{1e6 * _POLICY.resolution_s:.0f} µs; ({BEATS_BOUND}) = faster than the memory traffic the compressor's card "
               "says it must do, so no speed is shown.")
STREAM_NOTE = ("Main table, on the suite's common reference (the dense update D_t of the suite's optimizer on the true worker "
               "mean): delivered = 1 − ‖Σ_t(U_t − D_t)‖/‖Σ_t D_t‖ after the last step, U_t the update the case applies "
               "(1 = all of the dense update arrived, ≤ 0 = no better than sending nothing); (workers lo–hi) = 95% CI of "
               "the mean of each worker's own delivered fraction, its own compressed stream against its own dense update "
               "(another quantity: the aggregate of several workers' sparse updates can deliver more than any one); "
               "step err = mean over steps of "
               "‖U_t − D_t‖²/‖D_t‖² (≥ 1 = no better than sending nothing); scaled err = the same after the best scalar "
               "rescaling (1 − cos²), so a compressor is not penalised for its scale alone.")
ONESHOT_NOTE = ("One-shot table, each case against its own reference: q = relative MSE ‖C(x)−x‖²/‖x‖² (whole model, "
                "energy-weighted); q scaled = 1 − cos²; bias² from R compressions; cosine whole model; agg q = exchanged "
                "aggregate vs the true worker mean.")
#: every definition the run tables need, in full: the Markdown and HTML reports print it under their tables
FOOTNOTE = f"{STREAM_NOTE} {ONESHOT_NOTE} {TIMING_NOTE} {DAGGER} = reconstructed definition (paper body unavailable)."
#: the terminal's short legend under the run tables: what each mark means, and where the full definitions are (FOOTNOTE
#: in --md and --html, `gcbench list metrics`, the README) — a wall of text under 60 rows is not read
LEGEND = ("Legend: delivered = fraction of the dense update (the common reference) that arrived, 1 = all, ≤ 0 = no better "
          "than sending nothing, (workers lo–hi) = 95% CI of the workers' own delivered fractions, (short) = too few "
          "steps to rank on; step err / scaled err = mean "
          "per-step error, raw / after the best rescaling (≥ 1 = no better than nothing); one-shot table: each case against "
          f"its own reference; {X_COPY_HEADER} = compress time / copy time, lower is better, ± half the IQR; "
          f"({UNSTABLE}), ({TOO_SHORT}), ({BEATS_BOUND}) = not a speed to act on; {DAGGER} = reconstructed definition. "
          "Full definitions: gcbench report --md, `gcbench list metrics`, README \"What the metrics mean\" and \"How timings "
          "are taken\".")
TRAIN_FOOTNOTE = ("gap = final accuracy of 'none' minus this compressor's, in percentage points; to target = training time until "
                  "the held-out accuracy first reached the target (checked at epoch ends); step ms = median step time = compute + "
                  "compress + comm + decomp; MB/worker = payload bytes one worker sent over the whole run.")
BENCH_FOOTNOTE = (f"{X_COPY_HEADER} / {X_COPY_DEC_HEADER} = compress / decompress time as a multiple of a plain copy of the "
                  "same tensor into a "
                  "preallocated buffer, the two interleaved round by round in one process per case: median over rounds ± half "
                  f"the interquartile range, over at least --rounds rounds and more until the median's 95% CI is within "
                  f"±{_POLICY.stable_rel_ci:.0%} (at most {BENCH_MAX_ROUNDS} rounds or {BENCH_BUDGET_S:g} s per kernel); "
                  f"({UNSTABLE}) = that CI still wider than ±{_POLICY.unstable_rel_ci:.0%}, or other processes took over "
                  f"{_POLICY.foreign_cpu:.0%} of the machine's CPU while timing (each flagged row says which, under the table); "
                  f"({TOO_SHORT}) = median under {1e6 * _POLICY.resolution_s:.0f} µs; ({BEATS_BOUND}) = faster than the "
                  "card's memory traffic; "
                  "×bound = compress ×copy ÷ the traffic bound (the card's bytes read and written per element ÷ a copy's 8): "
                  "1× = at the memory traffic the compressor must do; "
                  "vs ref = speed-up over the straightforward reference "
                  "implementation; GB/s = dense input bytes / median compress time; peak/input = peak extra resident memory during "
                  "compress / input bytes; pass = within every limit of the target; flagged = a timing the target checks is "
                  "flagged, so neither pass nor short can be claimed.")


# ----------------------------------------------------------------------------- Markdown


_MD_SPECIALS = str.maketrans({"\\": "\\\\", "|": "\\|", "*": "\\*", "_": "\\_", "`": "\\`", "[": "\\[", "]": "\\]",
                              "<": "&lt;", ">": "&gt;", "&": "&amp;", "\n": " ", "\r": " "})


def md_escape(text: str) -> str:
    """Text safe inside a Markdown table cell: pipes, emphasis, links and raw HTML neutralised."""
    return str(text).translate(_MD_SPECIALS)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None) -> str:
    """A GitHub-flavoured Markdown table; cells must already be escaped."""
    right = right or [False] * len(headers)
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---:" if r else "---" for r in right) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_train(run: LoadedRun) -> str:
    """A train file as Markdown: its settings, one row per compressor, failures and notes."""
    f = run_facts(run)
    parts = [f"## Training run {md_escape(run.run_id)}", "",
             f"{md_escape(train_description(run))}; {md_escape(f['date'])}, {md_escape(f['cases'])}; machine "
             f"{md_escape(f['machine'])}; gcbench {md_escape(f['gcbench'])}, commit {md_escape(f['commit'])}, "
             f"torch {md_escape(f['torch'])}.", ""]
    rows = []
    for c in run.cases:
        if not c.ok:
            rows.append([md_escape(case_name(c)), f"failed: {md_escape(c.error_text)}", *[""] * (len(TRAIN_COLUMNS) - 1)])
        else:
            rows.append([md_escape(case_name(c)), *[md_escape(col.text(c)) for col in TRAIN_COLUMNS]])
    headers = ["compressor", *[md_escape(c.header) for c in TRAIN_COLUMNS]]
    parts += [md_table(headers, rows, [False] + [True] * len(TRAIN_COLUMNS)), ""]
    notes = train_notes(run)
    if notes:
        parts += [*(f"* {md_escape(n)}" for n in notes), ""]
    return "\n".join([*parts, md_escape(TRAIN_FOOTNOTE), ""])


def markdown_bench(run: LoadedRun) -> str:
    """A bench file as Markdown: the target table."""
    f = run_facts(run)
    parts = [f"## Kernel benchmark {md_escape(run.run_id)}", "",
             f"{md_escape(bench_description(run))}; {md_escape(f['date'])}, {md_escape(f['cases'])}; gcbench {md_escape(f['gcbench'])}, "
             f"commit {md_escape(f['commit'])}, torch {md_escape(f['torch'])}.", ""]
    rows = []
    for c in run.cases:
        if not c.ok:
            rows.append([md_escape(bench_name(c)), fmt(c.metric("numel"), "int"), f"failed: {md_escape(c.error_text)}",
                         *[""] * (len(BENCH_COLUMNS) - 2), "", "error"])
        else:
            target, mark = bench_target(c)
            rows.append([md_escape(bench_name(c)), *[md_escape(col.text(c)) for col in BENCH_COLUMNS], md_escape(target), md_escape(mark)])
    headers = ["compressor", *[md_escape(c.header) for c in BENCH_COLUMNS], *BENCH_TEXT_HEADERS]
    parts += [md_table(headers, rows, [False] + [True] * len(BENCH_COLUMNS) + [False, False]), ""]
    reasons = [f"- {md_escape(line)}" for line in flag_reason_lines(run.cases)]
    return "\n".join([*parts, md_escape(BENCH_FOOTNOTE), *(["", *reasons] if reasons else []), ""])


def markdown_summary(run: LoadedRun) -> str:
    if run.kind == "train":
        return markdown_train(run)
    if run.kind == "bench":
        return markdown_bench(run)
    f = run_facts(run)
    parts = [f"## Run {md_escape(run.run_id)}", "",
             f"Suite {md_escape(f['suite'])}, {md_escape(f['date'])}, {md_escape(f['cases'])}; machine {md_escape(f['machine'])}, "
             f"device {md_escape(f['device'])}; gcbench {md_escape(f['gcbench'])}, commit {md_escape(f['commit'])}, "
             f"torch {md_escape(f['torch'])}.", ""]
    for src, cases in by_source(run.cases).items():
        parts += [f"### {md_escape(src)}", "", md_escape(stream_caption(cases)), "", _md_cases(cases, SUMMARY_COLUMNS), ""]
        if any(c.ok and c.fidelity is not None for c in cases):
            parts += ["One-shot fidelity (own reference): " + md_escape(oneshot_caption(cases).removeprefix("one shot: ")), "",
                      _md_cases(cases, ONESHOT_COLUMNS), ""]
        phases = markdown_phases(cases)
        if phases:
            parts.append(phases)
    return "\n".join(parts)


def _md_cases(cases: Sequence[RunCase], columns: Sequence[Column]) -> str:
    """One Markdown row per case over ``columns`` (a failed case: its error in the first column)."""
    rows = []
    for c in cases:
        if not c.ok:
            rows.append([md_escape(case_name(c)), f"failed: {md_escape(c.error_text)}", *[""] * (len(columns) - 1)])
        else:
            rows.append([md_escape(case_name(c)), *[md_escape(col.text(c)) for col in columns]])
    return md_table(["case", *[md_escape(c.header) for c in columns]], rows, [False] + [True] * len(columns))


def markdown_comparison(cmp: Comparison, all_rows: bool = False) -> str:
    rows = [[md_escape(c) for c in row_cells(r)] for r in visible_rows(cmp, all_rows)]
    parts = [f"## {md_escape(cmp.new_id)} vs baseline {md_escape(cmp.baseline_id)}", "",
             f"Threshold {cmp.threshold:.0%}, significance α = {cmp.alpha:g} (Mann–Whitney on raw samples where they exist). "
             f"{md_escape(counts_text(cmp))}.", ""]
    parts += [f"* {md_escape(n)}" for n in cmp.notes]
    if cmp.notes:
        parts.append("")
    if rows:
        parts += [md_table(COMPARE_HEADERS, rows, [h in ("baseline", "new", "change", "p") for h in COMPARE_HEADERS]), ""]
    elif cmp.rows:
        parts += ["No metric changed significantly.", ""]
    return "\n".join(parts)


def markdown_claims(results: Sequence[ClaimResult]) -> str:
    rows = [[md_escape(r.claim.paper), md_escape(r.claim.compressor), md_escape(f"{r.claim.model} / {r.claim.data}"),
             md_escape(f"{r.claim.value_text()} {r.claim.metric}"), md_escape(r.claim.source), md_escape(measured_text(r))]
            for r in results]
    return "\n".join(["## Paper claims", "", md_table(("paper", "compressor", "model / data", "claim", "source", "gcbench"), rows), ""])


def markdown_report(runs: Sequence[LoadedRun], claims: Sequence[ClaimResult] | None = None,
                    comparison: Comparison | None = None, all_rows: bool = False) -> str:
    """The whole report as GitHub-flavoured Markdown (for a paper draft or a pull request).

    ``runs`` each get their tables; a comparison report passes only the new run (the baseline's
    values are in the comparison rows).
    """
    parts = ["# gcbench report", ""]
    if comparison is not None:
        parts.append(markdown_comparison(comparison, all_rows))
    for r in runs:
        parts.append(markdown_summary(r))
    if claims:
        parts.append(markdown_claims(claims))
    if not runs or any(r.kind not in ("train", "bench") for r in runs):  # train and bench sections carry their own notes
        parts += [md_escape(FOOTNOTE), ""]
    return "\n".join(parts)


@dataclass
class ReportInput:
    """What ``gcbench report`` renders: the runs, the ones shown in detail, and the comparison with a baseline if asked."""

    loaded: list[LoadedRun]
    detailed: list[LoadedRun]
    comparison: Comparison | None = None
    #: every run of the folder as :func:`run_facts` (oldest first) when only the newest is loaded (``report --html``)
    index: list[dict[str, str]] | None = None


def report_input(refs: Sequence[str] | None, runs_dir: str | Path, baseline: str | None = None, threshold: float = 0.05,
                 alpha: float = 0.05, finished_only: bool = False,
                 on_skip: Callable[[ResultsError], None] | None = None, newest_only: bool = False) -> ReportInput:
    """Load the runs a report shows; with ``baseline``, compare the newest (or the one named) against it.

    ``finished_only``: "latest" never picks an unfinished run (what a regression gate needs).  A
    comparison report details the new run only: the baseline's values are in the comparison rows.
    ``newest_only`` (no runs named, no baseline): only the newest run is kept, every other one
    listed in :attr:`ReportInput.index` (:func:`newest_with_index`).
    """
    if baseline is None and newest_only and not refs:
        return newest_with_index(runs_dir, on_skip)
    if baseline is None:
        loaded = load_runs(refs, runs_dir, on_skip=on_skip)
        return ReportInput(loaded, loaded)
    if refs and len(refs) > 1:
        raise ResultsError(f"--baseline compares one run against the baseline; got {len(refs)} runs")
    base_path = resolve_run(baseline, runs_dir)
    new_path = resolve_run(refs[0] if refs else "latest", runs_dir, finished=finished_only, on_skip=on_skip)
    if base_path.resolve() == new_path.resolve():
        raise ResultsError(f"the baseline and the run to compare are the same file ({new_path}); name the run to compare")
    loaded = [LoadedRun(base_path, load_run(base_path)), LoadedRun(new_path, load_run(new_path))]
    comparison = compare_runs(loaded[0].data, loaded[1].data, threshold, alpha)
    for r in loaded:
        if not r.data.finished:
            comparison.notes.append(f"{r.run_id} did not finish (status {r.data.status!r}): its cases may be incomplete")
    return ReportInput(loaded, loaded[1:], comparison)


def terminal_report(inp: ReportInput, claims: Sequence[ClaimResult], claims_missing: str | None,
                    all_metrics: bool = False) -> list[RenderableType | str]:
    """The terminal report, in print order (strings are plain text lines, not markup)."""
    if inp.comparison is not None:
        return [comparison_table(inp.comparison, all_metrics), *(f"note: {n}" for n in inp.comparison.notes),
                counts_text(inp.comparison)]
    out: list[RenderableType | str] = [runs_table(inp.loaded)]
    for r in inp.loaded:
        out.extend(summary_tables(r))
    measured = [c for c in claims if c.status.startswith("measured")]
    if measured:
        out.append(claims_table(measured))
    if claims:
        out.append(f"{len(claims) - len(measured)}{' other' if measured else ''} paper claim(s) not measured by these runs "
                   "(see --md or --html).")
    elif claims_missing:
        out.append(claims_missing)
    if any(r.kind not in ("train", "bench") for r in inp.loaded):  # train and bench tables carry their own notes
        out.append(LEGEND)
    return out
