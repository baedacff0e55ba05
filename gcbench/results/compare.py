"""Run-to-run comparison: each metric of each case marked better / worse / not significant / not comparable.

Modelled on asv's ``compare`` (Droettboom et al., airspeed velocity): rows carry the baseline and
new values, the relative change, a p-value where raw samples exist, and a verdict.  The choices:

* **Matching.** Cases are matched by (source label, case label).  A failed case records only its
  source's name, so unmatched cases are matched a second time by (source name, case label).
* **Not comparable.** A case whose compressor, compressor version, parameters, source description
  (kind, shapes/model, seed, workers, steps; a trace's manifest facts but not its folder, which may
  move between machines), granularity or unit count changed is not comparable on any metric: the
  numbers measure different things.  Timing metrics are also not comparable
  across machines (:meth:`gcbench.results.record.Environment.machine_key`: CPU model, cores, threads, GPU) or when
  the case was timed on another device or thread count.  The suite hash itself is reported as a
  note, not used as a verdict: adding a compressor to a suite changes the hash but not the other
  cases, and every setting that decides a case is checked per case above.
* **Better / worse.** Each metric's direction comes from :data:`gcbench.results.metrics.METRICS`.  A change
  counts only if its relative size reaches ``threshold`` (default 5%) AND, where raw samples exist
  in both runs, a two-sided Mann–Whitney test (:func:`gcbench.results.metrics.mann_whitney`) gives
  p < ``alpha``: timing samples for compress/decompress times, the per-tensor ``q_samples`` for q.
  bias² has no samples but a jackknife standard error; it is tested with a two-sided z-test on the
  difference (the mean of the per-tensor standard errors stands in for the standard error of the
  pooled value, which it bounds from above, so the test is conservative).  Metrics without samples
  (ratio, bits per element, variance, cosine, aggregate q, EF drift) are deterministic given the
  suite's seed, so the threshold alone decides.  The delivered update (``stream.delivered``) is
  tested on its per-worker values, and is not comparable when the stream's reference changed.
* **Timings are compared as ×copy, never as raw milliseconds.**  Compress and decompress time are
  compared as multiples of a copy timed in the same round (``timing.compress_x_copy``; its samples
  are the per-round ×copy), which cancels most of the machine's load of the moment.  Files from
  before interleaved timing have no per-round ×copy: their samples are each kernel timing divided
  by the case's median copy.  A timing flagged on either side (``unstable``, ``too short``,
  ``beats traffic bound``: :class:`gcbench.results.record.XCopy`) is ``not comparable (flagged:
  ...)``, never better or worse: it is not a speed to act on.
* **Cases that appear or fail.** ``new`` / ``missing`` for cases in only one run; ``new failure``
  when a case that ran in the baseline fails now; ``fixed`` when it ran again; ``failing`` when it
  failed in both.  ``worse`` and ``new failure`` are regressions (``--fail-on-regression``).

Samples-based tests need enough samples: with 3 timing repeats per run the smallest two-sided
Mann–Whitney p-value is 0.1, so such timings are never significant at 5% — use ≥ 5 repeats.

**Kernel benchmarks** (``kind = "bench"``, :mod:`gcbench.measure.bench`) are compared by
:func:`compare_bench`, chosen by :func:`compare_runs` from the files' kinds:

* Cases are matched by (row label, element count), like ``gcbench bench --baseline``; the label is
  the compressor, or its spec ``name:key=value`` when the benchmark set parameters.
* The metrics are compress×copy and decompress×copy (lower is better): kernel time as a multiple
  of a plain copy of the same tensor timed in the same process, which cancels most of the
  machine's load of the moment.  For the same reason the Mann–Whitney test runs on the raw
  samples divided by that process's copy median (``samples_s / copy.median_s``), not on raw
  seconds: a uniformly slower process is not a slower kernel.
* A pair is not comparable when the machine (:meth:`gcbench.results.record.Environment.machine_key`), the
  compressor's version or parameters, or the benchmark's thread count or device differ.
* The same threshold-and-test rule as above decides better / worse / ~.

**Convergence files** (``kind = "converge"``) are refused with one line: their numbers are intervals over seeds,
not samples of one measurement, and ``gcbench report A B`` shows two of them side by side.

**Training runs** (``kind = "train"``, :mod:`gcbench.train.driver`) are compared on the final held-out
accuracy and loss besides ratio and bits per element; a case whose training settings (task,
workers, epochs, steps, batch size, learning rate) changed is not comparable.

``run`` and ``compare`` files hold the same case records and compare with each other; any other
pair of different kinds (a bench file against a run, a train file against a bench) is refused
with one :class:`~gcbench.core.errors.ResultsError` line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gcbench.core.errors import ResultsError
from gcbench.results.metrics import METRICS, mann_whitney
from gcbench.results.parse import as_record
from gcbench.results.record import BenchCase, BenchRecord, RunCase, RunRecord, TrainCase
from gcbench.results.verdict import PairVerdict, baseline_bytes, bytes_per_step

BETTER = "better"
WORSE = "worse"
NOT_SIGNIFICANT = "~"
NOT_COMPARABLE = "not comparable"
NEW = "new"
MISSING = "missing"
NEW_FAILURE = "new failure"
FIXED = "fixed"
FAILING = "failing"
VERDICTS = (WORSE, NEW_FAILURE, BETTER, FIXED, NOT_COMPARABLE, NEW, MISSING, FAILING, NOT_SIGNIFICANT)
REGRESSIONS = (WORSE, NEW_FAILURE)

DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.05

_DIRECTION = {m.name: m.higher_is_better for m in METRICS}
_UNIT = {m.name: m.unit for m in METRICS}


@dataclass(frozen=True)
class Compared:
    """A metric that comparisons look at, by its name in :data:`gcbench.results.metrics.METRICS`.

    Its value, raw samples and standard error are read from a case by name
    (:meth:`gcbench.results.record.RunCase.metric`, ``samples``, ``standard_error``).
    """

    name: str
    timing: bool = False
    kernel: str | None = None  # a timing: the kernel whose ×copy flags decide whether it is comparable
    stream: bool = False  # measured on the stream: not comparable when the stream's reference changed

    @property
    def higher_is_better(self) -> bool:
        return _DIRECTION[self.name]


COMPARED: tuple[Compared, ...] = (
    *(Compared(n) for n in ("ratio", "bits_per_element", "q", "q_scaled", "bias2", "variance", "cosine", "aggregate_q",
                            "ef_drift", "aggregate_drift")),
    Compared("delivered", stream=True),
    Compared("comp_over_copy", timing=True, kernel="compress"),
    Compared("decomp_over_copy", timing=True, kernel="decompress"),
)


# training runs (kind = "train", gcbench.train.driver): what training reached, besides the bytes it sent
COMPARED_TRAIN: tuple[Compared, ...] = tuple(Compared(n) for n in ("final_accuracy", "final_loss", "ratio", "bits_per_element"))


@dataclass(frozen=True)
class Row:
    """One line of a comparison: a metric of a case (metric is ``""`` for case-level verdicts)."""

    source: str
    case: str
    metric: str
    baseline: float | None
    new: float | None
    change: float | None  # (new − baseline) / |baseline|; ±inf when the baseline is 0
    p_value: float | None
    verdict: str
    reason: str = ""
    higher_is_better: bool | None = None
    unit: str = ""


@dataclass
class Comparison:
    """The rows of a comparison and what the two runs are."""

    baseline_id: str
    new_id: str
    threshold: float
    alpha: float
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict in REGRESSIONS]

    def counts(self) -> dict[str, int]:
        out = {v: 0 for v in VERDICTS}
        for r in self.rows:
            out[r.verdict] += 1
        return {k: v for k, v in out.items() if v}


def source_label(case: RunCase | TrainCase) -> str:
    """The source's label of a run case (its name for a failed one), the task's name of a train case."""
    return case.source_label


def relative_change(base: float, new: float) -> float:
    """(new − base)/|base|; 0 when both are 0; ±inf when only the baseline is 0."""
    if base == new:
        return 0.0
    if base == 0:
        return math.copysign(math.inf, new)
    return (new - base) / abs(base)


def z_test(base: float, new: float, se_base: float, se_new: float) -> float | None:
    """Two-sided p-value of ``new − base`` given the two standard errors (None without them)."""
    s = math.hypot(se_base, se_new)
    if not math.isfinite(s) or s <= 0:
        return None
    # 2·P(Z > z) = erfc(z/√2): the normal tail without importing scipy.stats (1-2.5 s of every command that prints a table)
    return math.erfc(abs(new - base) / s / math.sqrt(2.0))


def _keys_diff(what: str, base: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """``"<what> changed: k1, k2"``, the keys whose values differ ("" when none does)."""
    keys = sorted(k for k in set(base) | set(new) if base.get(k) != new.get(k))
    return f"{what} changed: " + ", ".join(keys) if keys else ""


def _version_params_diff(base: RunCase | TrainCase | BenchCase, new: RunCase | TrainCase | BenchCase) -> str:
    """The compressor version or parameters that changed between two cases of one compressor ("" when neither did)."""
    if base.version != new.version:
        return f"{new.compressor} version {base.version} → {new.version}"
    return _keys_diff("parameters", base.params or {}, new.params or {})


def _case_config_diff(base: RunCase | TrainCase, new: RunCase | TrainCase) -> str:
    """Why two cases measure different things ("" when they measure the same thing)."""
    if base.compressor != new.compressor:
        return f"compressor {base.compressor} → {new.compressor}"
    sb, sn = (c.source.identity() if c.source else {} for c in (base, new))
    why = _version_params_diff(base, new) or _keys_diff("source", sb, sn)
    if why:
        return why
    for key in ("granularity", "units", "workers", "steps"):
        vb, vn = getattr(base, key, None), getattr(new, key, None)
        if vb != vn:
            return f"{key} {vb} → {vn}"
    tb = base.training.settings() if isinstance(base, TrainCase) and base.training else {}
    tn = new.training.settings() if isinstance(new, TrainCase) and new.training else {}
    changed = [k for k in (tb or tn) if tb.get(k) != tn.get(k)]
    if changed:
        return "training settings changed: " + ", ".join(changed)
    return ""


def _timing_diff(base_run: RunRecord, new_run: RunRecord, base: RunCase, new: RunCase) -> str:
    """Why timings of two cases are not comparable ("" when they are)."""
    mb, mn = base_run.env.machine_key(), new_run.env.machine_key()
    if mb != mn:
        return f"machine changed: {mb} → {mn}"
    for key in ("device", "threads"):
        vb, vn = getattr(base.timing, key, None), getattr(new.timing, key, None)
        if vb != vn:
            return f"timing {key} {vb} → {vn}"
    return ""


def timing_flags(case: RunCase | TrainCase, kernel: str) -> list[str]:
    """The flags of a case's ``kernel`` ×copy (``unstable``, ``too short``, ``beats traffic bound``); [] when none."""
    x = case.timing.x_copy(kernel) if isinstance(case, RunCase) and case.timing else None
    return list(x.flags or []) if x is not None else []


def metric_samples(spec: Compared, case: RunCase | TrainCase) -> list[float]:
    """The samples a metric is tested on; a timing of a file from before per-round ×copy: its samples over its copy median."""
    samples = case.samples(spec.name)
    if samples or spec.kernel is None or not isinstance(case, RunCase) or case.timing is None:
        return samples
    timing, copy = getattr(case.timing, spec.kernel), case.timing.copy_
    copy_med = copy.median_s if copy is not None else None
    if timing is None or not isinstance(copy_med, int | float) or not copy_med > 0:
        return []
    return [float(v) / copy_med for v in timing.samples_s or [] if v is not None and math.isfinite(v)]


def _not_comparable(spec: Compared, base: RunCase | TrainCase, new: RunCase | TrainCase) -> str:
    """Why this metric of two otherwise comparable cases is not comparable: a flagged timing, a changed stream reference."""
    if spec.kernel is not None:
        flagged = [f"{side} {', '.join(flags)}" for side, flags in (("baseline", timing_flags(base, spec.kernel)),
                                                                     ("new", timing_flags(new, spec.kernel))) if flags]
        if flagged:
            return "flagged: " + "; ".join(flagged)
    if spec.stream and isinstance(base, RunCase) and isinstance(new, RunCase) and base.stream and new.stream:
        if base.stream.reference != new.stream.reference:
            return f"stream reference changed: {base.stream.reference} → {new.stream.reference}"
    return ""


def compare_metric(spec: Compared, base: RunCase | TrainCase, new: RunCase | TrainCase, threshold: float, alpha: float,
                   not_comparable: str = "") -> Row | None:
    """The row of one metric of one matched pair of cases (None when neither run has the metric)."""
    b, n = base.metric(spec.name), new.metric(spec.name)
    common = {"source": source_label(new), "case": new.label, "metric": spec.name, "baseline": b, "new": n,
              "higher_is_better": spec.higher_is_better, "unit": _UNIT[spec.name]}
    if b is None and n is None:
        return None
    se_b, se_n = base.standard_error(spec.name), new.standard_error(spec.name)
    se = (se_b, se_n) if se_b is not None and se_n is not None else None
    return judge(common, b, n, metric_samples(spec, base), metric_samples(spec, new), se, threshold, alpha,
                 not_comparable or _not_comparable(spec, base, new))


def judge(common: dict[str, Any], b: float | None, n: float | None, sb: Sequence[float], sn: Sequence[float],
          se: tuple[float, float] | None, threshold: float, alpha: float, not_comparable: str = "") -> Row:
    """The verdict row of one metric: ``common`` holds the row's identity (source, case, metric, values, direction, unit).

    ``sb``/``sn`` are raw samples (Mann–Whitney when both have some), ``se`` the two standard errors
    (a z-test, used only without samples).  See the module docstring for the rule.
    """
    if not_comparable:
        return Row(**common, change=None, p_value=None, verdict=NOT_COMPARABLE, reason=not_comparable)
    if b is None or n is None:
        return Row(**common, change=None, p_value=None, verdict=NOT_COMPARABLE,
                   reason=f"only the {'new' if b is None else 'baseline'} run has this metric")
    change = relative_change(b, n)
    p: float | None = None
    if sb and sn:
        p = mann_whitney(sb, sn)
    elif se is not None:
        p = z_test(b, n, se[0], se[1])
    if abs(change) < threshold:
        return Row(**common, change=change, p_value=p, verdict=NOT_SIGNIFICANT, reason=f"|change| < {threshold:.0%}")
    if p is not None and p >= alpha:
        return Row(**common, change=change, p_value=p, verdict=NOT_SIGNIFICANT, reason=f"p = {p:.2g} ≥ {alpha:g}")
    if (sb or sn) and p is None:
        # samples exist but too few for a test: a change within noise cannot be told from a real one
        reason = "too few samples for a significance test; threshold alone"
    else:
        reason = ""
    improved = (n > b) == bool(common["higher_is_better"])
    return Row(**common, change=change, p_value=p, verdict=BETTER if improved else WORSE, reason=reason)


Case = RunCase | TrainCase


def _index(cases: Sequence[Case]) -> dict[tuple[str, str], Case]:
    out: dict[tuple[str, str], Case] = {}
    for c in cases:
        out.setdefault((source_label(c), c.label), c)
    return out


def match_cases(base_cases: Sequence[Case], new_cases: Sequence[Case]) -> tuple[list[tuple[Case, Case]], list[Case], list[Case]]:
    """(matched pairs in the new run's order, new-only cases, baseline-only cases)."""
    bi = _index(base_cases)
    used: set[int] = set()
    pairs: list[tuple[Case, Case]] = []
    unmatched_new = []
    for c in new_cases:
        b = bi.get((source_label(c), c.label))
        if b is not None and id(b) not in used:
            used.add(id(b))
            pairs.append((b, c))
        else:
            unmatched_new.append(c)
    # second pass: failed records carry only the source's name, not its label
    rest_base = [b for b in base_cases if id(b) not in used]
    only_new = []
    for c in unmatched_new:
        hits = [b for b in rest_base if id(b) not in used and b.label == c.label and b.source_name == c.source_name]
        if len(hits) == 1:
            used.add(id(hits[0]))
            pairs.append((hits[0], c))
        else:
            only_new.append(c)
    order = {id(c): i for i, c in enumerate(new_cases)}
    pairs.sort(key=lambda bc: order[id(bc[1])])
    only_base = [b for b in base_cases if id(b) not in used]
    return pairs, only_new, only_base


# kinds whose case records share one schema (``gcbench run`` and ``gcbench compare`` both write runner records)
_CASE_FAMILY = {"run": "run", "compare": "run"}


def compare_runs(baseline: RunRecord | Mapping[str, Any], new: RunRecord | Mapping[str, Any], threshold: float = DEFAULT_THRESHOLD,
                 alpha: float = DEFAULT_ALPHA) -> Comparison:
    """Compare two results records (or results dicts, validated here; see the module docstring for every rule).

    Two bench files go to :func:`compare_bench`; files of different kinds raise :class:`ResultsError`.
    """
    if threshold < 0:
        raise ValueError(f"threshold must be ≥ 0, got {threshold}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    base_rec, new_rec = as_record(baseline), as_record(new)
    kb, kn = base_rec.kind, new_rec.kind
    if _CASE_FAMILY.get(kb, kb) != _CASE_FAMILY.get(kn, kn):
        raise ResultsError(f"cannot compare a {kn} results file ({new_rec.run_id or '?'}) against a {kb} baseline "
                           f"({base_rec.run_id or '?'}): --baseline needs two results files of the same kind")
    if kb == "converge":
        raise ResultsError(f"--baseline does not compare convergence files ({base_rec.run_id or '?'}, {new_rec.run_id or '?'}): "
                           "name both to `gcbench report` to see their tables side by side")
    if isinstance(base_rec, BenchRecord) and isinstance(new_rec, BenchRecord):
        return compare_bench(base_rec, new_rec, threshold, alpha)
    cmp = Comparison(str(base_rec.run_id or "baseline"), str(new_rec.run_id or "new"), threshold, alpha)
    mb, mn = base_rec.env.machine_key(), new_rec.env.machine_key()
    if mb != mn:
        cmp.notes.append(f"different machines ({mb} vs {mn}): timings are not comparable")
    if base_rec.suite_hash != new_rec.suite_hash:
        cmp.notes.append(f"suite hash {base_rec.suite_hash} → {new_rec.suite_hash}: cases are compared one by one "
                         "and any case whose settings changed is marked not comparable")
    if base_rec.gcbench_version != new_rec.gcbench_version:
        cmp.notes.append(f"gcbench {base_rec.gcbench_version} → {new_rec.gcbench_version}")

    pairs, only_new, only_base = match_cases(base_rec.cases, new_rec.cases)
    for b, n in pairs:
        # a failed record names only its source; its partner may carry the label
        src = source_label(n) if n.source and n.source.label else source_label(b)
        case_row = {"source": src, "case": n.label, "metric": "", "baseline": None, "new": None, "change": None, "p_value": None}
        if not n.ok:
            cmp.rows.append(Row(**case_row, verdict=NEW_FAILURE if b.ok else FAILING, reason=n.error_text or "failed"))
            continue
        if not b.ok:
            cmp.rows.append(Row(**case_row, verdict=FIXED, reason=f"failed in the baseline: {b.error_text or 'failed'}"))
            continue
        config = _case_config_diff(b, n)
        timing = config or (_timing_diff(base_rec, new_rec, b, n) if isinstance(b, RunCase) and isinstance(n, RunCase) else "")
        for spec in COMPARED_TRAIN if kb == "train" else COMPARED:
            row = compare_metric(spec, b, n, threshold, alpha, not_comparable=timing if spec.timing else config)
            if row is not None:
                cmp.rows.append(row)
    for n in only_new:
        cmp.rows.append(Row(source_label(n), n.label, "", None, None, None, None, NEW if n.ok else NEW_FAILURE,
                            "" if n.ok else n.error_text or "failed"))
    for b in only_base:
        cmp.rows.append(Row(source_label(b), b.label, "", None, None, None, None, MISSING, "not in the new run"))
    return cmp


# ----------------------------------------------------------------------------- head to head (``gcbench compare``)


@dataclass(frozen=True)
class SideMetric:
    """A row of a head-to-head table: its text, the metric (``RunCase.metric``), direction, format and what decides "best".

    ``samples``: the timing samples that decide "within noise of the best"; ``kernel``: a timing whose
    flagged cases are never the best; ``stream``: a stream metric, with no best unless every stream
    is long enough to rank.
    """

    label: str
    metric: str
    format: str  # a format kind of gcbench.report.terminal.fmt
    samples: str | None = None
    kernel: str | None = None
    stream: bool = False

    @property
    def higher_is_better(self) -> bool:
        """The metric's direction, as the catalogue (:data:`gcbench.results.metrics.METRICS`) states it."""
        return _DIRECTION[self.metric]


#: the main table of ``gcbench compare``: bytes, the stream on the suite's one common reference, kernel time as ×copy
MAIN_METRICS: tuple[SideMetric, ...] = (
    SideMetric("ratio (payload)", "ratio", "ratio"),
    SideMetric("ratio (all traffic)", "traffic_ratio", "ratio"),
    SideMetric("bits / element", "bits_per_element", "g"),
    SideMetric("delivered update", "delivered", "g", stream=True),
    SideMetric("per-step error", "stream_error", "g", stream=True),
    SideMetric("per-step error (scale-free)", "stream_error_scaled", "g", stream=True),
    SideMetric("compress ×copy", "comp_over_copy", "x", samples="comp_over_copy", kernel="compress"),
    SideMetric("decompress ×copy", "decomp_over_copy", "x", samples="decomp_over_copy", kernel="decompress"),
    SideMetric("compress GB/s", "compress_gbps", "g", samples="compress_s", kernel="compress"),
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
    significantly different from the best one (two-sided Mann–Whitney p ≥ 0.05 on the raw samples).

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
        if best is not None and spec.samples is not None:  # within noise of the best?
            b_samples = cases[best].samples(spec.samples)
            for i, _ in present:
                if i != best:
                    p = mann_whitney(b_samples, cases[i].samples(spec.samples))
                    same_as_best[i] = p is not None and p >= 0.05
        rows.append(SideRow(spec, vals, best, same_as_best))
    return rows


def _row_json(row: SideRow, cases: Sequence[RunCase]) -> dict[str, Any]:
    """One row as JSON: values in the order of ``cases``, the best case's label, and what a value needs beside it."""
    out: dict[str, Any] = {"higher_is_better": row.spec.higher_is_better, "unit": _UNIT.get(row.spec.metric, ""),
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


# ----------------------------------------------------------------------------- regression gate

def gate_failures(baseline: RunRecord | Mapping[str, Any], new: RunRecord | Mapping[str, Any], cmp: Comparison) -> list[str]:
    """Why ``new`` fails a regression gate against ``baseline`` (empty: it passes); one line per reason.

    A gate passes only on evidence: the new run must have finished, run every case of the
    baseline, and run each without failure, besides having no metric worse.  So an empty
    ``running`` file, an interrupted run missing cases, or a run whose cases failed in both runs
    (``failing``) does not pass vacuously.
    """
    out = []
    for what, data in (("run", as_record(new)), ("baseline", as_record(baseline))):
        if not data.finished:
            out.append(f"the {what} {data.run_id or '?'} did not finish (status {data.status!r}): "
                       "an unfinished run cannot pass a regression gate")
    missing = [r for r in cmp.rows if r.verdict == MISSING]
    if missing:
        out.append(f"{len(missing)} case(s) of the baseline missing from {cmp.new_id}: "
                   + ", ".join(f"{r.case} [{r.source}]" for r in missing[:5]) + (", ..." if len(missing) > 5 else ""))
    failed = [r for r in cmp.rows if r.verdict in (NEW_FAILURE, FAILING)]
    if failed:
        out.append(f"{len(failed)} case(s) failed in {cmp.new_id}: " + ", ".join(f"{r.case} [{r.source}]" for r in failed[:5])
                   + (", ..." if len(failed) > 5 else ""))
    worse = [r for r in cmp.rows if r.verdict == WORSE]
    if worse:
        out.append(f"{len(worse)} metric(s) worse than the baseline")
    if not out:
        out.extend(_nothing_compared(as_record(baseline), cmp))
    return out


# verdicts that are evidence: a metric measured in both runs and compared (``fixed`` compares no number)
COMPARED_VERDICTS = (BETTER, WORSE, NOT_SIGNIFICANT)


def _nothing_compared(baseline: RunRecord, cmp: Comparison) -> list[str]:
    """Why a gate compared nothing (empty when at least one metric of one case was compared).

    A baseline with no cases makes every case ``new``, and a baseline whose metrics are all null
    makes every metric ``not comparable``: neither has any number the new run could regress from,
    so such a gate would pass whatever the new run measured.
    """
    if any(r.verdict in COMPARED_VERDICTS for r in cmp.rows):
        return []
    if not baseline.cases:
        return [f"the baseline {cmp.baseline_id} has no cases: nothing to compare {cmp.new_id} with"]
    counts = ", ".join(f"{n} {v}" for v, n in cmp.counts().items())
    reasons = sorted({r.reason for r in cmp.rows if r.verdict == NOT_COMPARABLE and r.reason})
    why = f" ({'; '.join(reasons[:3])}{'; ...' if len(reasons) > 3 else ''})" if reasons else ""
    return [f"no metric of {cmp.new_id} could be compared with the baseline {cmp.baseline_id}: "
            f"{counts or 'no rows'}{why}"]


# ----------------------------------------------------------------------------- kernel benchmarks (kind = "bench")

# (metric, timing section whose samples it is built from); both are "× copy": lower is better
BENCH_METRICS: tuple[tuple[str, str], ...] = (("compress_x_copy", "compress"), ("decompress_x_copy", "decompress"))
BENCH_UNIT = "× copy"


def bench_source(rec: BenchCase) -> str:
    """The size a bench record was timed at, as the row's "source" ("1,000,000 elements")."""
    return f"{rec.numel:,} elements" if rec.numel is not None else "? elements"


def _bench_diff(base_file: RunRecord, new_file: RunRecord, b: BenchCase, n: BenchCase) -> str:
    """Why two bench records are not comparable ("" when they are)."""
    mb, mn = base_file.env.machine_key(), new_file.env.machine_key()
    if mb != mn:
        return f"machine changed: {mb} → {mn}"
    why = _version_params_diff(b, n)
    if why:
        return why
    for key in ("threads", "device"):
        if getattr(b, key) != getattr(n, key):
            return f"{key} {getattr(b, key)} → {getattr(n, key)}"
    return ""


def compare_bench(baseline: RunRecord | Mapping[str, Any], new: RunRecord | Mapping[str, Any], threshold: float = DEFAULT_THRESHOLD,
                  alpha: float = DEFAULT_ALPHA) -> Comparison:
    """Compare two ``gcbench bench`` results files per (compressor, element count); see the module docstring."""
    base_rec, new_rec = as_record(baseline), as_record(new)
    cmp = Comparison(str(base_rec.run_id or "baseline"), str(new_rec.run_id or "new"), threshold, alpha)
    mb, mn = base_rec.env.machine_key(), new_rec.env.machine_key()
    if mb != mn:
        cmp.notes.append(f"different machines ({mb} vs {mn}): kernel timings are not comparable")
    if base_rec.gcbench_version != new_rec.gcbench_version:
        cmp.notes.append(f"gcbench {base_rec.gcbench_version} → {new_rec.gcbench_version}")
    cmp.notes.append("kernel times are compared as multiples of a copy timed in the same process; the Mann–Whitney test "
                     "runs on each timing sample divided by that process's copy median")

    def key(rec: BenchCase) -> tuple[str, int | None]:  # older files have no label: the compressor name is theirs
        return (rec.name, rec.numel)

    base_index: dict[tuple[str, int | None], BenchCase] = {}
    for rec in base_rec.cases:
        base_index.setdefault(key(rec), rec)
    seen: set[tuple[str, int | None]] = set()
    untestable: list[int] = []  # sample counts of the pairs whose test can never reach alpha
    for n in new_rec.cases:
        k = key(n)
        if k in seen:  # a duplicate (compressor, size) in one file: only the first is compared
            continue
        seen.add(k)
        ident = {"source": bench_source(n), "case": k[0]}
        case_row = {**ident, "metric": "", "baseline": None, "new": None, "change": None, "p_value": None}
        b = base_index.get(k)
        if b is None:
            cmp.rows.append(Row(**case_row, verdict=NEW if n.ok else NEW_FAILURE, reason="" if n.ok else n.error_text))
            continue
        if not n.ok:
            cmp.rows.append(Row(**case_row, verdict=NEW_FAILURE if b.ok else FAILING, reason=n.error_text))
            continue
        if not b.ok:
            cmp.rows.append(Row(**case_row, verdict=FIXED, reason=f"failed in the baseline: {b.error_text}"))
            continue
        diff = _bench_diff(base_rec, new_rec, b, n)
        for metric, section in BENCH_METRICS:
            vb, vn = b.metric(metric), n.metric(metric)
            if vb is None and vn is None:
                continue
            sb, sn = b.copy_normalised_samples(section), n.copy_normalised_samples(section)
            if not diff and len(sb) >= 2 and len(sn) >= 2 and smallest_p(len(sb), len(sn)) >= alpha:
                untestable.append(min(len(sb), len(sn)))
            common = {**ident, "metric": metric, "baseline": vb, "new": vn, "higher_is_better": False, "unit": BENCH_UNIT}
            cmp.rows.append(judge(common, vb, vn, sb, sn, None, threshold, alpha, diff))
    for b in base_rec.cases:
        if key(b) not in seen:
            seen.add(key(b))
            cmp.rows.append(Row(bench_source(b), b.name, "", None, None, None, None, MISSING, "not in the new run"))
    if untestable:
        cmp.notes.append(f"{len(untestable)} comparison(s) have only {min(untestable)}–{max(untestable)} timing samples per side: "
                         f"no Mann–Whitney p can fall below α = {alpha:g}, so those timings are never called better or worse; "
                         "rerun `gcbench bench` with --rounds 5 or more")
    return cmp


def smallest_p(m: int, n: int) -> float:
    """The smallest exact two-sided Mann–Whitney p-value with ``m`` and ``n`` samples (fully separated samples)."""
    return min(1.0, 2.0 / math.comb(m + n, m))
