"""CSV export of stored results: one tidy file per table, for pandas, R or a spreadsheet (``gcbench report --csv DIR``).

Four files, each one observation per row (Wickham's "tidy data"), every row naming its run, source
and case so that files of several runs concatenate and join:

* ``cases.csv`` — one row per case: identity, size, the stream view on the common reference, the
  one-shot fidelity, the kernel times with their ×copy, its 95% CI and flags.  A bench file's cases
  have their own columns (element count, target, verdict); a folder mixing kinds gets the union of
  the columns, each kind's missing ones left empty.
* ``layers.csv`` — one row per case × unit (layer or bucket): its size and one-shot fidelity.
* ``steps.csv`` — one row per case × step: the stream (delivered so far, step error) and the
  aggregate's per-step numbers.
* ``timings.csv`` — one row per case × kernel × timed round: the raw samples behind every median.

A convergence file (``gcbench converge``) gives one ``cases.csv`` row per compressor (seeds, reached, diverged,
final metric, gap and steps to target each with ``_low``/``_high`` 95% bounds, bytes sent, ``larger_than_bf16``)
and one ``steps.csv`` row per compressor × evaluated step (``metric_mean``/``_low``/``_high``, ``loss_mean``):
:mod:`gcbench.report.convergence`.

Choices:

* **Names**: stable snake_case column names with the unit in the name where a value has one
  (``compress_ms``, ``wire_bytes``, ``compress_x_copy``); ×copy is kernel time / copy time, lower is
  better (the name every table uses).  Renaming a column breaks every reader's script: add, never rename.
* **Values**: numbers as Python writes them (``repr``, so a float reads back to the same float),
  booleans ``true``/``false`` (pandas and R's ``read.csv`` both read them as logical), lists joined
  with ``;``, an empty cell for a missing or non-finite value; RFC 4180 quoting by the ``csv`` module,
  UTF-8, ``\\r\\n`` line ends.
* **Formula injection**: labels, layer and source names come from users' models and suites, and a
  spreadsheet runs a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
  as a formula.  Such a *text* cell gets a leading ``'`` (OWASP's CSV-injection guidance); numbers
  are written as numbers and never prefixed, so ``-0.5`` stays a number.  A lone surrogate (JSON
  allows ``\\ud800``, UTF-8 does not) is written as ``?``.
* **One definition**: every metric column reads ``case.metric(name)`` (the one place that knows where a
  metric lives in the record), so a CSV number equals the table's number before formatting.
* **Writing**: the four files are always written together (a table without rows gets its header
  only), each to a temporary file beside its place and renamed into it only when all four are
  written, so a folder never holds a mix of two exports.  Only these four names are written: other
  files in the folder are left alone, these four are replaced (:func:`write_csv` says which).
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcbench.core import signals
from gcbench.core.errors import GcbenchError
from gcbench.report.convergence import converge_cases_rows, converge_steps_rows
from gcbench.report.load import LoadedRun
from gcbench.report.views import bench_target, oneshot_reference, params_text
from gcbench.results.atomic import write_temp
from gcbench.results.bench_record import BenchCase
from gcbench.results.record import XCopy
from gcbench.results.run_record import RunCase
from gcbench.results.train_record import TrainCase

#: the files one export writes, in this order
CSV_FILES = ("cases.csv", "layers.csv", "steps.csv", "timings.csv")


#: first characters that make a spreadsheet read a cell as a formula (OWASP: CSV injection)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def text_cell(text: str) -> str:
    """A text cell a spreadsheet shows as text: ``'`` before a formula start, lone surrogates as ``?``."""
    text = text.encode("utf-8", "replace").decode("utf-8")  # "\ud800" cannot be written as UTF-8
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def cell(value: Any) -> str:
    """One CSV cell: ``repr`` of a finite number, ``true``/``false``, lists joined by ``;``, empty for missing.

    Text (and a joined list, which a spreadsheet reads as text) goes through :func:`text_cell`;
    a number is never prefixed.
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list | tuple):
        # the joined text is neutralised as a whole: only its first character can start a formula
        return text_cell(";".join(v if isinstance(v, str) else cell(v) for v in value))
    return text_cell(str(value))


def _scaled(v: float | None, scale: float) -> float | None:
    return None if v is None else v * scale


# ----------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class MetricColumn:
    """A cases.csv column that is a metric of the record: ``case.metric(metric) × scale`` (ms from s)."""

    name: str
    metric: str
    scale: float = 1.0

    def value(self, case: Any) -> float | None:
        return _scaled(case.metric(self.metric), self.scale)


#: run/compare metric columns, grouped as the report's tables are: size, stream (main table), one shot, time
RUN_SIZE_COLUMNS: tuple[MetricColumn, ...] = (
    MetricColumn("wire_bytes", "wire_bytes"),
    MetricColumn("ratio", "ratio"),
    MetricColumn("bits_per_element", "bits_per_element"),
    MetricColumn("traffic_ratio", "traffic_ratio"),
)
RUN_STREAM_COLUMNS: tuple[MetricColumn, ...] = (
    MetricColumn("delivered", "delivered"),
    MetricColumn("step_error", "stream_error"),
    MetricColumn("step_error_scaled", "stream_error_scaled"),
)
RUN_ONESHOT_COLUMNS: tuple[MetricColumn, ...] = (
    MetricColumn("q", "q"),
    MetricColumn("q_scaled", "q_scaled"),
    MetricColumn("bias2", "bias2"),
    MetricColumn("variance", "variance"),
    MetricColumn("delta", "delta"),
    MetricColumn("cosine", "cosine"),
    MetricColumn("aggregate_q", "aggregate_q"),
    MetricColumn("aggregate_drift", "aggregate_drift"),
    MetricColumn("ef_drift", "ef_drift"),
)
RUN_TIME_COLUMNS: tuple[MetricColumn, ...] = (
    MetricColumn("compress_ms", "compress_s", 1e3),
    MetricColumn("decompress_ms", "decompress_s", 1e3),
    MetricColumn("compress_gbps", "compress_gbps"),
    MetricColumn("decompress_gbps", "decompress_gbps"),
    MetricColumn("copy_gbps", "copy_gbps"),
)
RUN_X_COPY = (MetricColumn("compress_x_copy", "comp_over_copy"), MetricColumn("decompress_x_copy", "decomp_over_copy"))
#: every metric column of a run case (what a reader may check against ``case.metric``)
RUN_METRIC_COLUMNS = (*RUN_SIZE_COLUMNS, *RUN_STREAM_COLUMNS, *RUN_ONESHOT_COLUMNS, *RUN_TIME_COLUMNS, *RUN_X_COPY)

#: train metric columns (``gcbench train`` files)
TRAIN_METRIC_COLUMNS: tuple[MetricColumn, ...] = (
    MetricColumn("ratio", "ratio"),
    MetricColumn("bits_per_element", "bits_per_element"),
    MetricColumn("final_accuracy", "final_accuracy"),
    MetricColumn("final_loss", "final_loss"),
    MetricColumn("best_accuracy", "best_accuracy"),
    MetricColumn("accuracy_gap", "accuracy_gap"),
    MetricColumn("target_accuracy", "target_accuracy"),
    MetricColumn("time_to_target_s", "time_to_target_s"),
    MetricColumn("epochs_to_target", "epochs_to_target"),
    MetricColumn("train_time_s", "train_time_s"),
    *(MetricColumn(f"step_{k}_ms", f"step_{k}_s", 1e3) for k in ("total", "compute", "compress", "communicate", "decompress")),
    MetricColumn("payload_bytes_per_worker", "payload_bytes_per_worker"),
)

#: bench metric columns (``gcbench bench`` files)
BENCH_MAIN_COLUMNS: tuple[MetricColumn, ...] = (
    MetricColumn("numel", "numel"),
    MetricColumn("ratio", "ratio"),
    MetricColumn("compress_ms", "compress_ms", 1e3),  # BenchCase's compress_ms is the median in seconds
    MetricColumn("speedup_vs_reference", "speedup_vs_reference"),
    MetricColumn("compress_gbps", "gbps_compress"),
    MetricColumn("decompress_gbps", "gbps_decompress"),
    MetricColumn("peak_over_input", "peak_over_input"),
)
BENCH_X_COPY = (MetricColumn("compress_x_copy", "compress_x_copy"), MetricColumn("decompress_x_copy", "decompress_x_copy"))
BENCH_METRIC_COLUMNS = (*BENCH_MAIN_COLUMNS, *BENCH_X_COPY)

ID_COLUMNS = ("run_id", "kind", "source", "case", "compressor", "version", "params", "status", "error")


def _x_copy_fields(case: Any, col: MetricColumn, x: XCopy | None) -> dict[str, Any]:
    """A kernel's ×copy (its median, ``col``) with the 95% CI of the median, its IQR and its flags."""
    p = col.name
    return {p: col.value(case), f"{p}_ci_lo": x.ci_lo if x else None, f"{p}_ci_hi": x.ci_hi if x else None,
            f"{p}_iqr": x.iqr if x else None, f"{p}_flags": (x.flags or None) if x else None}


def _metrics(case: Any, columns: Sequence[MetricColumn]) -> dict[str, Any]:
    return {c.name: c.value(case) for c in columns}


def run_case_row(run_id: str, kind: str, case: RunCase) -> dict[str, Any]:
    """cases.csv's row of a run or compare case, its columns in the order of the report's tables."""
    st, ti, fl = case.stream, case.timing, case.flags
    ci = st.worker_ci if st else None
    dci = st.delivered_ci if st else None  # the headline's own interval (jackknife over workers)
    return {
        "run_id": run_id, "kind": kind, "source": case.source_label, "case": case.label, "compressor": case.compressor,
        "version": case.version, "params": params_text(case), "status": case.status, "error": case.error_text or None,
        "reconstructed": case.reconstructed, "biased": fl.biased if fl else None, "stateful": fl.stateful if fl else None,
        "error_feedback": fl.error_feedback if fl else None, "workers": case.workers, "steps": case.steps,
        "granularity": case.granularity, "units": case.units, "numel": case.size.numel if case.size else None,
        **_metrics(case, RUN_SIZE_COLUMNS),
        "stream_reference": st.reference if st else None, "stream_steps": st.steps if st else None,
        "stream_enough": st.enough if st else None,
        **_metrics(case, RUN_STREAM_COLUMNS[:1]),
        "delivered_ci_lo": dci.lo if dci else None, "delivered_ci_hi": dci.hi if dci else None,
        "delivered_workers_ci_lo": ci.lo if ci else None, "delivered_workers_ci_hi": ci.hi if ci else None,
        **_metrics(case, RUN_STREAM_COLUMNS[1:]),
        "oneshot_reference": oneshot_reference(case) if case.fidelity else None,
        **_metrics(case, RUN_ONESHOT_COLUMNS),
        **_metrics(case, RUN_TIME_COLUMNS),
        **_x_copy_fields(case, RUN_X_COPY[0], ti.x_copy("compress") if ti else None),
        **_x_copy_fields(case, RUN_X_COPY[1], ti.x_copy("decompress") if ti else None),
        "timing_rounds": ti.rounds if ti else None, "timing_baseline": ti.baseline if ti else None,
        "load_per_core": ti.load_per_core if ti else None,
    }


def train_case_row(run_id: str, kind: str, case: TrainCase) -> dict[str, Any]:
    """cases.csv's row of a train case."""
    tr = case.training
    row: dict[str, Any] = {
        "run_id": run_id, "kind": kind, "source": case.source_label, "case": case.label, "compressor": case.compressor,
        "version": case.version, "params": params_text(case), "status": case.status, "error": case.error_text or None,
        "reconstructed": case.reconstructed, "workers": tr.workers if tr else case.workers,
        "epochs": tr.epochs if tr else None, "diverged": tr.diverged if tr else None,
    }
    row.update(_metrics(case, TRAIN_METRIC_COLUMNS))
    return row


def bench_case_row(run_id: str, kind: str, case: BenchCase) -> dict[str, Any]:
    """cases.csv's row of a bench case (one compressor at one size)."""
    target, verdict = bench_target(case)
    xs = case.x_copy or {}
    row: dict[str, Any] = {
        "run_id": run_id, "kind": kind, "source": None, "case": case.name, "compressor": case.compressor,
        "version": case.version, "params": params_text(case), "status": "ok" if case.ok else "failed",
        "error": case.error_text or None,
    }
    row.update(_metrics(case, BENCH_MAIN_COLUMNS))
    row.update({
        "decompress_ms": _scaled(case.decompress.median_s if case.decompress else None, 1e3),
        "copy_ms": _scaled(case.copy_.median_s if case.copy_ else None, 1e3),
        **_x_copy_fields(case, BENCH_X_COPY[0], xs.get("compress")),
        **_x_copy_fields(case, BENCH_X_COPY[1], xs.get("decompress")),
        "load_per_core": case.load_per_core, "target": target or None, "verdict": verdict,
    })
    return row


def cases_rows(runs: Sequence[LoadedRun]) -> list[dict[str, Any]]:
    """cases.csv: one row per case of every run."""
    rows = []
    for run in runs:
        if run.kind == "converge":
            rows += converge_cases_rows(run)
            continue
        for c in run.cases:
            if isinstance(c, BenchCase):
                rows.append(bench_case_row(run.run_id, run.kind, c))
            elif isinstance(c, TrainCase):
                rows.append(train_case_row(run.run_id, run.kind, c))
            else:
                rows.append(run_case_row(run.run_id, run.kind, c))
    return rows


# ----------------------------------------------------------------------------- layers, steps, timings


def _case_key(run: LoadedRun, case: RunCase) -> dict[str, Any]:
    return {"run_id": run.run_id, "source": case.source_label, "case": case.label}


def _run_cases(runs: Sequence[LoadedRun]) -> Iterator[tuple[LoadedRun, RunCase]]:
    for run in runs:
        for c in run.cases:
            if isinstance(c, RunCase) and c.ok:
                yield run, c


LAYER_COLUMNS = ("run_id", "source", "case", "unit_index", "unit", "numel", "wire_bytes", "ratio", "bits_per_element",
                 "q", "bias2", "variance", "cosine")


def layers_rows(runs: Sequence[LoadedRun]) -> list[dict[str, Any]]:
    """layers.csv: one row per case × unit (layer or bucket, in the record's order)."""
    rows = []
    for run, c in _run_cases(runs):
        for i, u in enumerate(c.layers or []):
            bits = 8 * u.wire_bytes / u.numel if u.wire_bytes is not None and u.numel else None
            rows.append({**_case_key(run, c), "unit_index": i, "unit": u.name, "numel": u.numel, "wire_bytes": u.wire_bytes,
                         "ratio": u.ratio, "bits_per_element": bits, "q": u.q, "bias2": u.bias2, "variance": u.variance,
                         "cosine": u.cosine})
    return rows


STEP_COLUMNS = ("run_id", "source", "case", "step", "phase", "delivered", "step_error", "step_error_scaled", "aggregate_q",
                "aggregate_cosine", "aggregate_drift", "ef_drift", "sent_bytes")


def _at(series: Sequence[Any] | None, i: int) -> Any:
    return series[i] if series is not None and i < len(series) else None


def _sent(c: RunCase, i: int) -> float | None:
    """Bytes one worker sent at step ``i`` over every traffic phase (None when no phase records that step)."""
    vals = [_at(p.per_step_sent, i) for p in (c.traffic or {}).values()]
    vals = [v for v in vals if v is not None]
    return float(sum(vals)) if vals else None


def steps_rows(runs: Sequence[LoadedRun]) -> list[dict[str, Any]]:
    """steps.csv: one row per case × step (step 1 is the first): the stream and the aggregate after that step; of a
    convergence file, one per compressor × evaluated step (:func:`gcbench.report.convergence.converge_steps_rows`)."""
    rows = [r for run in runs if run.kind == "converge" for r in converge_steps_rows(run)]
    for run, c in _run_cases(runs):
        st, ag, ef = c.stream, c.aggregate, c.ef_drift
        series = {
            "delivered": st.per_step_delivered if st else None,
            "step_error": st.per_step_error if st else None,
            "step_error_scaled": st.per_step_error_scaled if st else None,
            "aggregate_q": ag.per_step_q if ag else None,
            "aggregate_cosine": ag.per_step_cosine if ag else None,
            "aggregate_drift": ag.sum_drift if ag else None,
            "ef_drift": ef.sum_drift if ef else None,
        }
        n = max([len(s) for s in series.values() if s is not None], default=0)
        for i in range(n):
            rows.append({**_case_key(run, c), "step": i + 1, "phase": _at(c.step_phases, i),
                         **{k: _at(s, i) for k, s in series.items()}, "sent_bytes": _sent(c, i)})
    return rows


TIMING_COLUMNS = ("run_id", "source", "case", "numel", "kernel", "round", "time_ms", "x_copy")


def _timing_rows(key: dict[str, Any], numel: Any, timings: Iterable[tuple[str, Any, XCopy | None]]) -> list[dict[str, Any]]:
    """One row per kernel × round; ``x_copy`` is that round's sample where the record has one per round."""
    rows = []
    for kernel, t, x in timings:
        samples = (t.samples_s or []) if t is not None else []
        xs = x.samples if x is not None and x.samples is not None and len(x.samples) == len(samples) else None
        for i, s in enumerate(samples):
            rows.append({**key, "numel": numel, "kernel": kernel, "round": i + 1, "time_ms": _scaled(s, 1e3),
                         "x_copy": _at(xs, i)})
    return rows


def timings_rows(runs: Sequence[LoadedRun]) -> list[dict[str, Any]]:
    """timings.csv: every timed round of every kernel (compress, decompress, copy) of every case."""
    rows = []
    for run in runs:
        for c in run.cases:
            if isinstance(c, BenchCase) and c.ok:
                xs = c.x_copy or {}
                rows += _timing_rows({"run_id": run.run_id, "source": None, "case": c.name}, c.numel,
                                     [("compress", c.compress, xs.get("compress")), ("decompress", c.decompress, xs.get("decompress")),
                                      ("copy", c.copy_, None)])
            elif isinstance(c, RunCase) and c.ok and c.timing is not None:
                ti = c.timing
                rows += _timing_rows(_case_key(run, c), ti.numel,
                                     [("compress", ti.compress, ti.x_copy("compress")),
                                      ("decompress", ti.decompress, ti.x_copy("decompress")), ("copy", ti.copy_, None)])
    return rows


# ----------------------------------------------------------------------------- writing


def columns_of(rows: Sequence[dict[str, Any]], first: Sequence[str] = ()) -> list[str]:
    """The header of a table: ``first``, then every other key in first-seen order (a union over kinds)."""
    cols = list(first)
    seen = set(cols)
    for r in rows:
        for k in r:
            if k not in seen:
                seen.add(k)
                cols.append(k)
    return cols


def csv_text(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """The rows as RFC 4180 CSV text under ``columns`` (a key a row lacks is an empty cell)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    w.writerow([text_cell(c) for c in columns])
    for r in rows:
        w.writerow([cell(r.get(k)) for k in columns])
    return buf.getvalue()


@dataclass(frozen=True)
class Written:
    """One file an export wrote: where, how many rows, and whether it replaced an earlier file."""

    path: Path
    rows: int
    replaced: bool


TABLES: tuple[tuple[str, Callable[[Sequence[LoadedRun]], list[dict[str, Any]]], Sequence[str]], ...] = (
    ("cases.csv", cases_rows, ID_COLUMNS),
    ("layers.csv", layers_rows, LAYER_COLUMNS),
    ("steps.csv", steps_rows, STEP_COLUMNS),
    ("timings.csv", timings_rows, TIMING_COLUMNS),
)


def write_csv(folder: Path, runs: Sequence[LoadedRun]) -> list[Written]:
    """Write the four tables of ``runs`` into ``folder`` (created if needed); see the module docstring.

    Raises :class:`GcbenchError` (one line) when ``folder`` is a file, one of the four names is a
    folder, or the disk refuses.
    """
    if folder.exists() and not folder.is_dir():
        raise GcbenchError(f"cannot write CSV files into {folder}: it is a file, not a folder")
    for name, _, _ in TABLES:
        if (folder / name).is_dir():
            raise GcbenchError(f"cannot write {folder / name}: a folder of that name is in the way")
    texts = []
    for name, rows_of, first in TABLES:
        rows = rows_of(runs)
        texts.append((folder / name, csv_text(rows, columns_of(rows, first)), len(rows)))
    written: list[Written] = []
    temps: list[tuple[Path, Path]] = []
    current = folder  # the file being written, for the error line
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with signals.deferred():  # all four or none: a signal waits until the renames are done
            for path, text, _ in texts:
                current = path
                temps.append((write_temp(path, text), path))  # synced, 0644; renamed below, all four together
            for (tmp_path, path), (_, _, n) in zip(temps, texts, strict=True):
                current = path
                written.append(Written(path, n, path.exists()))
                os.replace(tmp_path, path)
    except OSError as exc:
        raise GcbenchError(f"cannot write {current}: {exc.strerror or type(exc).__name__}") from exc
    finally:
        for tmp_path, _ in temps:
            tmp_path.unlink(missing_ok=True)
    return written
