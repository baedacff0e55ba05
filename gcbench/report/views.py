"""The view model of a report: records turned into the rows, groups, captions and notes every renderer draws.

``gcbench report`` reads only results files (docs/usage.md, "Measuring and comparing").  What every output
format shares is here, once: how cases group by gradient source (:func:`by_source`), the rows of a
case table with failed cases handled in one place (:func:`case_rows`), each case's name (a dagger
for a reconstructed compressor), the captions that name a table's reference, the per-phase and
per-layer rows, a bench record's target and verdict, a train file's description and notes, and the
rows of a comparison with a baseline.  The columns are :mod:`gcbench.report.columns`, the notes
:mod:`gcbench.report.notes`; the renderers — :mod:`gcbench.report.terminal` (rich),
:mod:`gcbench.report.markdown`, :mod:`gcbench.report.export` (CSV) and :mod:`gcbench.report.html`
— only lay these out and escape user text for their format.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from gcbench.measure.bench_verdict import kernel_verdict, target_of
from gcbench.measure.copy_baseline import COPY_SPREAD_LIMIT
from gcbench.report.columns import Column, LayerMetric
from gcbench.report.load import LoadedRun, machine_text
from gcbench.report.notes import DAGGER
from gcbench.report.numbers import fmt, or_unknown, size_text
from gcbench.report.text import clip
from gcbench.results.baselines import ClaimResult, format_measured
from gcbench.results.bench_diff import BENCH_UNIT
from gcbench.results.bench_record import BenchCase
from gcbench.results.judge import NOT_SIGNIFICANT, Comparison, Row
from gcbench.results.phases import PhaseRow, Window, WorkerTraffic
from gcbench.results.record import CUT_SHORT
from gcbench.results.run_record import RunCase
from gcbench.results.train_record import TrainCase


@dataclass(frozen=True)
class CaseRow:
    """One row of a case table: the case, its name, and its column texts when it ran or its error when it failed.

    Every renderer lays a failed case out its own way (the terminal puts the error under the table,
    Markdown in the first cell, the page across the row), but which cases failed and what they say
    is decided here.
    """

    case: Any
    name: str
    ok: bool
    texts: tuple[str, ...]  # one per column (empty for a failed case)
    error: str  # the error text of a failed case ("" for one that ran)

    def values(self, columns: Sequence[Column]) -> list[float | None]:
        """The numbers behind :attr:`texts` (empty for a failed case): what a sortable table sorts by."""
        return [col.get(self.case) for col in columns] if self.ok else []


def case_rows(cases: Sequence[Any], columns: Sequence[Column], name: Callable[[Any], str] | None = None) -> list[CaseRow]:
    """The rows of ``cases`` over ``columns``, in order; ``name`` writes a row's name (default :func:`case_name`)."""
    name = name or case_name
    return [CaseRow(c, name(c), True, tuple(col.text(c) for col in columns), "") if c.ok
            else CaseRow(c, name(c), False, (), c.error_text) for c in cases]


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
                "the one-shot table has each compressor against its own reference." + copy_caveat(ok) + cut_caveat(ok))
    steps = sorted({c.stream.steps for c in ok if c.stream and c.stream.steps is not None})
    text = f"fidelity on the common reference: {ref}"
    if steps:
        text += (f", over {steps[0]} step{'' if steps[0] == 1 else 's'}" if len(steps) == 1 else f", over {steps[0]}–{steps[-1]} steps")
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
    return text + "." + copy_caveat(ok) + cut_caveat(ok)


def cut_caveat(cases: Sequence[RunCase]) -> str:
    """A sentence when the run's timing budget cut most compress figures short (a big model on a small budget), else "":
    one line that says what the per-row flags say, and where the full timing is."""
    timed = [x for c in cases if c.timing is not None for x in (c.timing.x_copy("compress"),) if x is not None]
    cut = [x for x in timed if CUT_SHORT in (x.flags or [])]
    if not timed or 2 * len(cut) < len(timed):
        return ""
    once = sum(1 for x in cut if (x.rounds if x.rounds is not None else len(x.samples or ())) == 1)
    return (f" comp ×copy: {len(cut)} of {len(timed)} figures were cut short by the run's timing budget "
            f"(metrics.timing_run_budget_s){f', {once} of them from one round' if once else ''}: rough speeds, not ones "
            "to act on; `gcbench bench --model` times each compressor in a fresh process with its full rounds.")


def copy_caveat(cases: Sequence[RunCase]) -> str:
    """A sentence when the cases' copy yardstick moved (:data:`gcbench.measure.copy_baseline.COPY_SPREAD_LIMIT`), else ""."""
    moved = [c.timing for c in cases if c.timing is not None and c.timing.copy_spread is not None
             and c.timing.copy_spread > COPY_SPREAD_LIMIT and c.timing.copy_range_s]
    if not moved:
        return ""
    lo, hi = moved[0].copy_range_s[0], moved[0].copy_range_s[-1]  # type: ignore[index]  # kept: cases with a copy range
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


def bench_target(rec: BenchCase) -> tuple[str, str]:
    """(target text, ``pass``/``short``/``—``/``error``) of a bench record:
    :func:`gcbench.measure.bench_verdict.kernel_verdict` with details.

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
    """The case's parameters as ``key=value, ...``; a plan's, its rules (``numel < 1000 → none; default → topk``)."""
    params = case.params or {}
    if case.compressor == "plan" and isinstance(params.get("plan"), dict):
        from gcbench.plan.reader import PlanError, parse_plan

        try:
            return "; ".join(r.label() for r in parse_plan(params["plan"], str(case.label)).rules)
        except PlanError:  # a file written by another version: its table as it is
            pass
    return ", ".join(f"{k}={v}" for k, v in params.items())


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


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the (q, ratio) points no other point dominates (lower q and higher ratio are better)."""
    front = []
    for i, (qi, ri) in enumerate(points):
        dominated = any((qj <= qi and rj >= ri) and (qj < qi or rj > ri) for j, (qj, rj) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return front


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


def worker_cells(wt: WorkerTraffic) -> list[str]:
    """Case, phase and the per-worker byte lists of one :class:`WorkerTraffic` row (unescaped)."""
    return [case_name(wt.case), wt.window.text(), " / ".join(fmt(v, "int") for v in wt.sent),
            " / ".join(fmt(v, "int") for v in wt.received)]


# 161 layers × 30 cases do not fit one screen in any orientation: layers are the rows (they are
# many, and a terminal scrolls down), cases the columns in pages that fit the width, one metric per
# table — the ratio (where the bytes go) and the one-shot q (where the error goes).  The last row is
# the whole model, so each column ends with the number of the summary table.


@dataclass(frozen=True)
class PlanTable:
    """A plan case's per-rule table (``gcbench.plan``): which tensors each rule took, their elements and bytes."""

    title: str
    rows: list[list[str]]  # one per rule, in PLAN_HEADERS order
    note: str


#: the per-rule table's columns; bytes are the rule's tensors' mean payload bytes per step (worker 0)
PLAN_HEADERS = ("rule", "matches", "tensors", "elements", "bytes / step", "bytes share", "compressor")
PLAN_RIGHT = (True, False, True, True, True, True, False)


def plan_tables(cases: Sequence[RunCase] | Sequence[TrainCase], trained: bool = False) -> list[PlanTable]:
    """One table per plan case that ran; its note says what a one-shot run leaves out (warm-up, local steps), or, for
    ``gcbench train``'s (``trained``), that the bytes are the steps after the warm-up, averaged over the ranks."""
    tables = []
    for c in cases:
        if not c.ok or not c.plan_rules:
            continue
        rows = [[str(r.rule), r.label.partition(" → ")[0], fmt(r.tensors, "int"), fmt(r.elements, "int"), fmt(r.bytes, "int"),
                 "—" if r.bytes_share is None else f"{r.bytes_share:.1%}", r.compressor] for r in c.plan_rules]
        plan = c.plan or {}
        later = [f"a {plan['warmup_steps']}-step {plan.get('warmup', 'bf16')} warm-up"] if plan.get("warmup_steps") else []
        later += [f"local_steps = {plan['local_steps']}"] if (plan.get("local_steps") or 1) > 1 else []
        note = "each tensor by the first rule that matches it; bytes: its tensors' payloads per step"
        if trained:
            note += " after the warm-up, the mean over the ranks"
        elif later:
            note += f"; this run measures the rules only, not {' or '.join(later)}: converge and train run those"
        tables.append(PlanTable(f"{case_name(c)} — per rule", rows, note))
    return tables


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
    """Per element count, the median copy time of the cases that ran (the roofline every kernel time of that size is a
    multiple of), and where the caches held that copy, whether ×copy there can repeat ([] when none ran)."""
    by_size: dict[Any, list[BenchCase]] = {}
    for c in cases:
        if c.ok and c.copy_ is not None and c.copy_.median_s is not None:
            by_size.setdefault(c.numel, []).append(c)
    lines = []
    for numel, group in by_size.items():
        at = f" at {size_text(numel)}" if len(by_size) > 1 else ""
        ms = 1e3 * statistics.median(float(c.copy_.median_s) for c in group if c.copy_ and c.copy_.median_s is not None)
        lines.append(f"copy roofline{at} (same tensor into a preallocated buffer): median {ms:.2f} ms." + _cache_caveat(group, at))
    return lines


def bench_processes_lines(cases: Sequence[BenchCase]) -> list[str]:
    """Where cases ran in several processes (``bench --processes``): what their ×copy is, and how far the processes'
    medians lay apart ([] when every case ran in one)."""
    multi = [c for c in cases if c.ok and (c.processes or 1) > 1]
    if not multi:
        return []
    counts = sorted({int(c.processes or 1) for c in multi})
    lines = [f"each case ran in {'/'.join(map(str, counts))} fresh processes: ×copy is the median of their medians, ± half "
             "the interquartile range of all their rounds; the processes' medians (what a --baseline comparison tests):"]
    for c in multi:
        parts = []
        for kernel in ("compress", "decompress"):
            meds = c.process_medians(kernel)
            if len(meds) > 1:
                parts.append(f"{kernel} {min(meds):.3g}–{max(meds):.3g}×")
        if parts:
            at = f" @ {size_text(c.numel)}" if c.numel else ""
            lines.append(f"  {bench_name(c)}{at}: " + ", ".join(parts))
    return lines


def _cache_caveat(group: Sequence[BenchCase], at: str) -> str:
    """What a size's cases recorded about a copy the caches held (:func:`gcbench.measure.copy_baseline.bench_copy_spread`):
    ×copy there will not repeat (its copies spread past the limit across the cases' processes), or may not (one case)."""
    first = group[0]
    if not first.copy_cache_resident:
        return ""
    if first.copy_spread is not None and first.copy_spread > COPY_SPREAD_LIMIT and first.copy_range_s:
        lo, hi = first.copy_range_s[0], first.copy_range_s[-1]
        return (f" ×copy{at} will not repeat run to run: this copy, which the caches hold, took {lo * 1e3:.3g}–"
                f"{hi * 1e3:.3g} ms across the {first.copy_cases} cases' processes (each at the speed the kernel before it "
                "left the caches in); GB/s, the kernels' own speed, is what repeats.")
    if (first.copy_cases or 0) < 2:
        return (f" ×copy{at} may not repeat run to run: the caches hold this copy, which runs at the speed the kernel "
                "before it left them in, and one case cannot show how far it moves between processes (bench two "
                "compressors at this size to see it); GB/s, the kernel's own speed, is what repeats.")
    return ""


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
    return (f"{or_unknown(task and task.name)} ({or_unknown(task and task.model)}), {or_unknown(tr.workers)} workers × "
            f"{or_unknown(tr.threads_per_worker)} thread(s), {or_unknown(tr.epochs)} epochs, batch {or_unknown(tr.batch_size_per_worker)} "
            f"per worker, lr {or_unknown(tr.lr)}, target {'?' if target is None else f'{target:g}'} accuracy")


def bench_description(run: LoadedRun) -> str:
    suite = run.data.suite
    steps = sorted({f"{c.model} ({c.tensors} tensors)" for c in run.cases if isinstance(c, BenchCase) and c.model})
    what = f"a whole step of {', '.join(steps)} per case; " if steps else ""
    return (f"{what}{or_unknown(suite and suite.threads)} threads, {or_unknown(run.data.env.device)}; "
            f"times are medians of at least {or_unknown(suite and suite.repeats)} timed rounds per case, more until the median "
            f"is pinned down (each case's rounds are in its record); {machine_text(run.data)}")


def train_notes(cases: LoadedRun | Sequence[TrainCase]) -> list[str]:
    """What a reader of a train table must know: diverged losses, replicas that disagree, protocol notes."""
    notes = []
    for c in cases.cases if isinstance(cases, LoadedRun) else cases:
        tr = c.training if c.ok else None
        if tr is None:
            continue
        if tr.diverged:
            notes.append(f"{case_name(c)}: the training loss became NaN or infinite; training stopped after epoch {or_unknown(tr.epochs)}")
        if tr.replicas_consistent is False:
            notes.append(f"{case_name(c)}: the workers' parameters differ at the end (replicas diverged)")
        note = tr.hook.protocol_note if tr.hook else None
        if note:
            notes.append(f"{case_name(c)}: {note}")
    return notes


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


def counts_text(cmp: Comparison) -> str:
    return ", ".join(f"{n} {v if v != NOT_SIGNIFICANT else 'not significant (~)'}" for v, n in cmp.counts().items()) or "nothing to compare"


def measured_text(res: ClaimResult) -> str:
    """What gcbench measured for a claim, in one cell."""
    status = res.status
    if status == "not measurable":
        return "end-to-end training result; not measured by gcbench"
    if status == "not measured in these runs":
        failed = [m for m in res.measurements if m.error]
        return "not measured in these runs" + (f" (matching case failed: {failed[0].error})" if failed else "")
    # measured() keeps the measurements with a value
    return "; ".join(f"{format_measured(cast(float, m.value), res.claim.unit)} {m.how()} — {m.where()}" for m in res.measured())


def source_answers(kind: str | None, cases: Sequence[RunCase]) -> list[str]:
    """The sentences a report puts under a source's table: the recommendation
    (:func:`gcbench.results.recommend.recommend`) and, for a ``compare`` run, each pair's verdict — the same the
    terminal prints, so the Markdown and HTML of a compare run carry its answer too."""
    from gcbench.results.recommend import recommend
    from gcbench.results.verdict import process_spread_note, verdicts

    run_cases = [c for c in cases if isinstance(c, RunCase)]
    if not run_cases:
        return []
    out = [recommend(run_cases[0].source_label, run_cases).sentence()]
    if kind == "compare":
        try:
            pairs = verdicts(run_cases)
        except ValueError:  # cases of several sources: a verdict compares one
            pairs = []
        out += [f"verdict: {v.summary}" for v in pairs]
        spread = process_spread_note(run_cases, pairs)
        out += [spread] if spread else []
    return out
