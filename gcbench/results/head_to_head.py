"""The head-to-head tables of ``gcbench compare``: every case's metrics side by side, the best of each row, and the JSON.

Each row of :data:`MAIN_METRICS` (bytes, the stream on the suite's one common reference, kernel time as ×copy) and
of :data:`FIDELITY_METRICS` (one compression of one gradient, each case against its own reference) names the best
case where a best means something (:func:`head_to_head`), and which timings are within noise of it.  The verdict of
each pair, the other half of the command, is :mod:`gcbench.results.verdict`; :func:`compare_json` writes both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gcbench.results.judge import DIRECTION, UNIT
from gcbench.results.process_spread import of_case
from gcbench.results.run_record import RunCase
from gcbench.results.verdict import PairVerdict, baseline_bytes, bytes_per_step, kernel_ratio


@dataclass(frozen=True)
class SideMetric:
    """A row of a head-to-head table: its text, the metric (``RunCase.metric``), direction, format and what decides "best".

    ``kernel``: a timing of that kernel, whose flagged cases are never the best and whose others are judged against
    the best one as the time verdict judges a pair; ``stream``: a stream metric, with no best unless every stream
    is long enough to rank.
    """

    label: str
    metric: str
    format: str  # a format kind of gcbench.report.terminal.fmt
    kernel: str | None = None
    stream: bool = False

    @property
    def higher_is_better(self) -> bool:
        """The metric's direction, as the catalogue (:data:`gcbench.results.metrics.METRICS`) states it."""
        return DIRECTION[self.metric]


#: the main table of ``gcbench compare``: bytes, the stream on the suite's one common reference, kernel time as ×copy
MAIN_METRICS: tuple[SideMetric, ...] = (
    SideMetric("ratio (payload)", "ratio", "ratio"),
    SideMetric("ratio (all traffic)", "traffic_ratio", "ratio"),
    SideMetric("bits / element", "bits_per_element", "g"),
    SideMetric("delivered update", "delivered", "g", stream=True),
    SideMetric("per-step error", "stream_error", "g", stream=True),
    SideMetric("per-step error (scale-free)", "stream_error_scaled", "g", stream=True),
    SideMetric("compress ×copy", "comp_over_copy", "x", kernel="compress"),
    SideMetric("decompress ×copy", "decomp_over_copy", "x", kernel="decompress"),
    SideMetric("compress GB/s", "compress_gbps", "g", kernel="compress"),
)

#: the one-shot fidelity of ``gcbench compare``: one compression of one gradient, each case against its own reference
FIDELITY_METRICS: tuple[SideMetric, ...] = (
    SideMetric("q = rel. MSE", "q", "g"),
    SideMetric("bias² (rel.)", "bias2", "g"),
    SideMetric("variance (rel.)", "variance", "g"),
    SideMetric("ω̂ (unbiased)", "omega_hat", "g"),
    SideMetric("δ (Beznosikov)", "delta", "g"),
    SideMetric("cosine", "cosine", "g"),
    SideMetric("q_scaled = 1 − cos²", "q_scaled", "g"),
)


@dataclass(frozen=True)
class SideRow:
    """One metric of every case side by side, the best case's index, and which others are within timing noise of it."""

    spec: SideMetric
    values: list[float | None]
    best: int | None
    not_significant: list[bool]


def fidelity_references(cases: Sequence[RunCase]) -> list[str | None]:
    """Each case's one-shot reference ("gradient", DGC/SDAGC's momentum-SGD update ...)."""
    return [c.fidelity.reference if c.fidelity else None for c in cases]


def _rankable(spec: SideMetric, case: RunCase) -> bool:
    """Whether a case's value may be called the best of its row: not a timing flagged unstable, too short or beating its bound."""
    if spec.kernel is not None:
        x = case.timing.x_copy(spec.kernel) if case.timing else None
        return x is None or not x.flags
    return True


def head_to_head(cases: Sequence[RunCase], metrics: Sequence[SideMetric] = MAIN_METRICS) -> list[SideRow]:
    """Side-by-side rows of ``gcbench compare``: the best value per row where a best means something, and timings not
    significantly different from the best one: the 95% interval of the ratio of the kernel's median ×copy (the rounds'
    bootstrap widened by each side's spread between processes, :func:`gcbench.results.verdict.kernel_ratio`) covers 1,
    the rule the time verdict applies, so the table and the verdict never disagree.  The GB/s row is the compress
    kernel's speed on the same tensors, so it is judged as compress ×copy.

    No best: in a row of a timing for the cases whose timing is flagged (unstable, too short, beats its
    traffic bound: not a speed); in a stream row when a stream is too short to rank; in a one-shot row
    when the cases are measured against different references.
    """
    one_reference = len(set(fidelity_references([c for c in cases if c.ok]))) <= 1
    short_stream = any(c.ok and c.stream is not None and c.stream.enough is False for c in cases)
    rows = []
    for spec in metrics:
        vals = [c.metric(spec.metric) if c.ok else None for c in cases]
        present = [(i, v) for i, v in enumerate(vals) if v is not None and _rankable(spec, cases[i])]
        meaningful = not (spec.stream and short_stream) and (spec in MAIN_METRICS or one_reference)
        best = None
        if len(present) > 1 and meaningful:
            best = (max if spec.higher_is_better else min)(present, key=lambda iv: iv[1])[0]
        same_as_best = [False] * len(cases)
        if best is not None and spec.kernel is not None:  # within noise of the best, as the time verdict judges it
            for i, _ in present:
                if i != best:
                    ratio = kernel_ratio(cases[i], cases[best], spec.kernel)
                    same_as_best[i] = ratio is not None and ratio[1] <= 1.0 <= ratio[2]
        rows.append(SideRow(spec, vals, best, same_as_best))
    return rows


def _row_json(row: SideRow, cases: Sequence[RunCase]) -> dict[str, Any]:
    """One row as JSON: values in the order of ``cases``, the best case's label, and what a value needs beside it."""
    out: dict[str, Any] = {"higher_is_better": row.spec.higher_is_better, "unit": UNIT.get(row.spec.metric, ""),
                           "values": row.values, "best": None if row.best is None else cases[row.best].label,
                           "not_significantly_different_from_best": row.not_significant}
    if row.spec.metric == "delivered":
        cis = [c.stream.worker_ci if c.ok and c.stream else None for c in cases]
        out["ci95"] = [[ci.lo, ci.hi] if ci is not None and ci.lo is not None else None for ci in cis]
        out["enough_steps"] = [c.stream.enough if c.ok and c.stream else None for c in cases]
    if row.spec.kernel is not None:
        xs = [c.timing.x_copy(row.spec.kernel) if c.ok and c.timing else None for c in cases]
        out["iqr"] = [x.iqr if x is not None else None for x in xs] if row.spec.metric.endswith("_over_copy") else None
        out["flags"] = [list(x.flags or []) if x is not None else [] for x in xs]
        if out["iqr"] is None:
            del out["iqr"]
    return out


def compare_json(cases: Sequence[RunCase], results: str, verdicts: Sequence[PairVerdict],
                 sweep: Sequence[RunCase] | None = None) -> dict[str, Any]:
    """``gcbench compare --json``: the verdicts, the main rows on the common reference and the one-shot rows, by metric name.

    Keys are snake_case metric and field names, never display labels; per-case lists follow ``cases``.
    """
    first = next((c for c in cases if c.ok), None)
    out: dict[str, Any] = {
        "results": results,
        "source": cases[0].source_label if cases else None,
        "reference": first.stream.reference if first is not None and first.stream else None,
        "cases": [c.label for c in cases],
        "failed": [{"label": c.label, "error": c.error_text} for c in cases if not c.ok],
        "summary": [v.summary for v in verdicts],
        "baselines": [b.to_dict() for b in baseline_bytes(cases)],
        "verdicts": [v.to_dict() for v in verdicts],
        # the spread between processes the time axes add: this machine's (its bench file) or the built-in one
        "process_spread": next((of_case(c).to_dict() for c in cases if c.ok and c.timing is not None), None),
        "rows": {r.spec.metric: _row_json(r, cases) for r in head_to_head(cases, MAIN_METRICS)},
        "fidelity": {
            "references": fidelity_references(cases),
            "rows": {r.spec.metric: _row_json(r, cases) for r in head_to_head(cases, FIDELITY_METRICS)},
        },
    }
    if sweep is not None:
        out["sweep"] = [{"label": c.label, "compressor": c.compressor, "density": (c.params or {}).get("density"),
                         "bytes_per_step": bytes_per_step(c), "delivered": c.metric("delivered"),
                         "enough_steps": c.stream.enough if c.stream else None, "status": c.status}
                        for c in sweep]
    return out
