"""Run-to-run comparison: each metric of each case marked better / worse / not significant / not comparable.

Modelled on asv's ``compare`` (Droettboom et al., airspeed velocity): rows carry the baseline and
new values, the relative change, a p-value where raw samples exist, and a verdict.  The choices:

* **Matching.** Cases are matched by (source label, case label).  A failed case records only its
  source's name, so unmatched cases are matched a second time by (source name, case label).
* **Not comparable.** A case whose compressor, compressor version, parameters, source description
  (kind, shapes/model, seed, workers, steps; a trace's manifest facts but not its folder, which may
  move between machines), granularity or unit count changed is not comparable on any metric: the
  numbers measure different things.  Timing metrics are also not comparable
  across machines (:func:`gcbench.results.store.machine_key`: CPU model, cores, threads, GPU) or when
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
  suite's seed, so the threshold alone decides.
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
* A pair is not comparable when the machine (:func:`gcbench.results.store.machine_key`), the
  compressor's version or parameters, or the benchmark's thread count or device differ.
* The same threshold-and-test rule as above decides better / worse / ~.

**Training runs** (``kind = "train"``, :mod:`gcbench.distributed.train`) are compared on the final held-out
accuracy and loss besides ratio and bits per element; a case whose training settings (task,
workers, epochs, steps, batch size, learning rate) changed is not comparable.

``run`` and ``compare`` files hold the same case records and compare with each other; any other
pair of different kinds (a bench file against a run, a train file against a bench) is refused
with one :class:`~gcbench.core.errors.ResultsError` line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scipy import stats

from gcbench.core.errors import ResultsError
from gcbench.results.metrics import METRICS, mann_whitney
from gcbench.results.store import machine_key, run_finished

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
    """A metric that comparisons look at: where its value, raw samples and standard error live."""

    name: str  # a name in gcbench.results.metrics.METRICS (gives direction and unit)
    path: tuple[str | int, ...]
    samples: tuple[str, ...] | None = None
    se: tuple[str, ...] | None = None
    timing: bool = False

    @property
    def higher_is_better(self) -> bool:
        return _DIRECTION[self.name]


COMPARED: tuple[Compared, ...] = (
    Compared("ratio", ("size", "ratio")),
    Compared("bits_per_element", ("size", "bits_per_element")),
    Compared("q", ("fidelity", "q", "model"), samples=("fidelity", "q_samples")),
    Compared("bias2", ("fidelity", "bias2", "model"), se=("fidelity", "bias2", "se_mean")),
    Compared("variance", ("fidelity", "variance", "model")),
    Compared("cosine", ("fidelity", "cosine", "mean")),
    Compared("aggregate_q", ("aggregate", "q", "model")),
    Compared("ef_drift", ("ef_drift", "sum_drift", -1)),
    Compared("aggregate_drift", ("aggregate", "sum_drift", -1)),
    Compared("compress_s", ("timing", "compress", "median_s"), samples=("timing", "compress", "samples_s"), timing=True),
    Compared("decompress_s", ("timing", "decompress", "median_s"), samples=("timing", "decompress", "samples_s"), timing=True),
)


# training runs (kind = "train", gcbench.distributed.train): what training reached, besides the bytes it sent
COMPARED_TRAIN: tuple[Compared, ...] = (
    Compared("final_accuracy", ("training", "final_accuracy")),
    Compared("final_loss", ("training", "final_loss")),
    Compared("ratio", ("size", "ratio")),
    Compared("bits_per_element", ("size", "bits_per_element")),
)
# the training settings that decide a train case's numbers (its curve and results are not settings)
_TRAIN_SETTINGS = ("task", "metric", "workers", "epochs", "steps", "batch_size_per_worker", "lr")


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


def dig(rec: Any, path: Sequence[str | int]) -> Any:
    """``rec[path[0]][path[1]]...`` or None when any step is missing (ints index lists)."""
    for key in path:
        if rec is None:
            return None
        if isinstance(key, int):
            rec = rec[key] if isinstance(rec, list) and -len(rec) <= key < len(rec) else None
        else:
            rec = rec.get(key) if isinstance(rec, dict) else None
    return rec


def source_label(case: dict[str, Any]) -> str:
    src = case.get("source") or {}
    task = ((case.get("training") or {}).get("task") or {}).get("name")  # a training run names its task instead
    return str(src.get("label") or src.get("name") or task or "?")


def _source_name(case: dict[str, Any]) -> str:
    src = case.get("source") or {}
    return str(src.get("name") or src.get("label") or "?")


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
    return float(2.0 * stats.norm.sf(abs(new - base) / s))


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _samples(case: dict[str, Any], path: tuple[str, ...] | None) -> list[float]:
    vals = dig(case, path) if path else None
    if not isinstance(vals, list):
        return []
    return [float(v) for v in vals if _number(v) is not None]


def _case_config_diff(base: dict[str, Any], new: dict[str, Any]) -> str:
    """Why two cases measure different things ("" when they measure the same thing)."""
    if base.get("compressor") != new.get("compressor"):
        return f"compressor {base.get('compressor')} → {new.get('compressor')}"
    if base.get("version") != new.get("version"):
        return f"{new.get('compressor')} version {base.get('version')} → {new.get('version')}"
    if (base.get("params") or {}) != (new.get("params") or {}):
        changed = sorted(k for k in set(base.get("params") or {}) | set(new.get("params") or {})
                         if (base.get("params") or {}).get(k) != (new.get("params") or {}).get(k))
        return "parameters changed: " + ", ".join(changed)
    # the label is presentation and a trace's folder may move between machines; everything else identifies the gradients
    sb = {k: v for k, v in (base.get("source") or {}).items() if k not in ("label", "path")}
    sn = {k: v for k, v in (new.get("source") or {}).items() if k not in ("label", "path")}
    if sb != sn:
        changed = sorted(k for k in set(sb) | set(sn) if sb.get(k) != sn.get(k))
        return "source changed: " + ", ".join(changed)
    for key in ("granularity", "units", "workers", "steps"):
        if base.get(key) != new.get(key):
            return f"{key} {base.get(key)} → {new.get(key)}"
    tb, tn = base.get("training") or {}, new.get("training") or {}
    changed = [k for k in _TRAIN_SETTINGS if tb.get(k) != tn.get(k)]
    if changed:
        return "training settings changed: " + ", ".join(changed)
    return ""


def _timing_diff(base_run: dict[str, Any], new_run: dict[str, Any], base: dict[str, Any], new: dict[str, Any]) -> str:
    """Why timings of two cases are not comparable ("" when they are)."""
    mb, mn = machine_key(base_run.get("environment") or {}), machine_key(new_run.get("environment") or {})
    if mb != mn:
        return f"machine changed: {mb} → {mn}"
    tb, tn = base.get("timing") or {}, new.get("timing") or {}
    for key in ("device", "threads"):
        if tb.get(key) != tn.get(key):
            return f"timing {key} {tb.get(key)} → {tn.get(key)}"
    return ""


def compare_metric(spec: Compared, base: dict[str, Any], new: dict[str, Any], threshold: float, alpha: float,
                   not_comparable: str = "") -> Row | None:
    """The row of one metric of one matched pair of cases (None when neither run has the metric)."""
    b, n = _number(dig(base, spec.path)), _number(dig(new, spec.path))
    common = {"source": source_label(new), "case": str(new.get("label")), "metric": spec.name, "baseline": b, "new": n,
              "higher_is_better": spec.higher_is_better, "unit": _UNIT[spec.name]}
    if b is None and n is None:
        return None
    se: tuple[float, float] | None = None
    if spec.se is not None:
        se_b, se_n = _number(dig(base, spec.se)), _number(dig(new, spec.se))
        if se_b is not None and se_n is not None:
            se = (se_b, se_n)
    return judge(common, b, n, _samples(base, spec.samples), _samples(new, spec.samples), se, threshold, alpha, not_comparable)


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


def _index(cases: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for c in cases:
        out.setdefault((source_label(c), str(c.get("label"))), c)
    return out


def match_cases(base_cases: Sequence[dict[str, Any]], new_cases: Sequence[dict[str, Any]]
                ) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(matched pairs in the new run's order, new-only cases, baseline-only cases)."""
    bi = _index(base_cases)
    used: set[int] = set()
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    unmatched_new = []
    for c in new_cases:
        b = bi.get((source_label(c), str(c.get("label"))))
        if b is not None and id(b) not in used:
            used.add(id(b))
            pairs.append((b, c))
        else:
            unmatched_new.append(c)
    # second pass: failed records carry only the source's name, not its label
    rest_base = [b for b in base_cases if id(b) not in used]
    only_new = []
    for c in unmatched_new:
        hits = [b for b in rest_base if id(b) not in used and str(b.get("label")) == str(c.get("label"))
                and _source_name(b) == _source_name(c)]
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


def results_kind(data: dict[str, Any]) -> str:
    """The kind of a loaded results file (files from before kinds existed are runs)."""
    return str(data.get("kind") or "run")


def compare_runs(baseline: dict[str, Any], new: dict[str, Any], threshold: float = DEFAULT_THRESHOLD,
                 alpha: float = DEFAULT_ALPHA) -> Comparison:
    """Compare two loaded results dicts (see the module docstring for every rule).

    Two bench files go to :func:`compare_bench`; files of different kinds raise :class:`ResultsError`.
    """
    if threshold < 0:
        raise ValueError(f"threshold must be ≥ 0, got {threshold}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    kb, kn = results_kind(baseline), results_kind(new)
    if _CASE_FAMILY.get(kb, kb) != _CASE_FAMILY.get(kn, kn):
        raise ResultsError(f"cannot compare a {kn} results file ({new.get('run_id', '?')}) against a {kb} baseline "
                           f"({baseline.get('run_id', '?')}): --baseline needs two results files of the same kind")
    if kb == "bench":
        return compare_bench(baseline, new, threshold, alpha)
    cmp = Comparison(str(baseline.get("run_id", "baseline")), str(new.get("run_id", "new")), threshold, alpha)
    mb, mn = machine_key(baseline.get("environment") or {}), machine_key(new.get("environment") or {})
    if mb != mn:
        cmp.notes.append(f"different machines ({mb} vs {mn}): timings are not comparable")
    if baseline.get("suite_hash") != new.get("suite_hash"):
        cmp.notes.append(f"suite hash {baseline.get('suite_hash')} → {new.get('suite_hash')}: cases are compared one by one "
                         "and any case whose settings changed is marked not comparable")
    if baseline.get("gcbench_version") != new.get("gcbench_version"):
        cmp.notes.append(f"gcbench {baseline.get('gcbench_version')} → {new.get('gcbench_version')}")

    pairs, only_new, only_base = match_cases(baseline.get("cases", []), new.get("cases", []))
    for b, n in pairs:
        b_ok, n_ok = b.get("status") == "ok", n.get("status") == "ok"
        # a failed record names only its source; its partner may carry the label
        src = source_label(n) if (n.get("source") or {}).get("label") else source_label(b)
        case_row = {"source": src, "case": str(n.get("label")), "metric": "", "baseline": None, "new": None,
                    "change": None, "p_value": None}
        if not n_ok:
            verdict = NEW_FAILURE if b_ok else FAILING
            cmp.rows.append(Row(**case_row, verdict=verdict, reason=str(n.get("error", "failed"))))
            continue
        if not b_ok:
            cmp.rows.append(Row(**case_row, verdict=FIXED, reason=f"failed in the baseline: {b.get('error', 'failed')}"))
            continue
        config = _case_config_diff(b, n)
        timing = config or _timing_diff(baseline, new, b, n)
        for spec in COMPARED_TRAIN if kb == "train" else COMPARED:
            row = compare_metric(spec, b, n, threshold, alpha, not_comparable=timing if spec.timing else config)
            if row is not None:
                cmp.rows.append(row)
    for n in only_new:
        cmp.rows.append(Row(source_label(n), str(n.get("label")), "", None, None, None, None,
                            NEW if n.get("status") == "ok" else NEW_FAILURE,
                            "" if n.get("status") == "ok" else str(n.get("error", "failed"))))
    for b in only_base:
        cmp.rows.append(Row(source_label(b), str(b.get("label")), "", None, None, None, None, MISSING, "not in the new run"))
    return cmp


# ----------------------------------------------------------------------------- regression gate

def gate_failures(baseline: dict[str, Any], new: dict[str, Any], cmp: Comparison) -> list[str]:
    """Why ``new`` fails a regression gate against ``baseline`` (empty: it passes); one line per reason.

    A gate passes only on evidence: the new run must have finished, run every case of the
    baseline, and run each without failure, besides having no metric worse.  So an empty
    ``running`` file, an interrupted run missing cases, or a run whose cases failed in both runs
    (``failing``) does not pass vacuously.
    """
    out = []
    for what, data in (("run", new), ("baseline", baseline)):
        if not run_finished(data):
            out.append(f"the {what} {data.get('run_id', '?')} did not finish (status {data.get('status')!r}): "
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
    if not any(r.verdict not in (MISSING, NEW_FAILURE, FAILING) for r in cmp.rows) and not out:
        out.append(f"no case of {cmp.new_id} was compared with the baseline")
    return out


# ----------------------------------------------------------------------------- kernel benchmarks (kind = "bench")

# (metric, timing section whose samples it is built from); both are "× copy": lower is better
BENCH_METRICS: tuple[tuple[str, str], ...] = (("compress_x_copy", "compress"), ("decompress_x_copy", "decompress"))
BENCH_UNIT = "× copy"


def bench_ok(rec: dict[str, Any]) -> bool:
    """A bench record that measured something (failed records carry ``error`` and nothing else)."""
    return not rec.get("error")


def bench_source(rec: dict[str, Any]) -> str:
    """The size a bench record was timed at, as the row's "source" ("1,000,000 elements")."""
    n = rec.get("numel")
    return f"{n:,} elements" if isinstance(n, int) else "? elements"


def copy_normalised_samples(rec: dict[str, Any], section: str) -> list[float]:
    """``rec[section].samples_s`` divided by the median copy time of the same process ([] without both)."""
    copy_med = _number(dig(rec, ("copy", "median_s")))
    if copy_med is None or copy_med <= 0:
        return []
    return [s / copy_med for s in _samples(rec, (section, "samples_s"))]


def _bench_diff(base_file: dict[str, Any], new_file: dict[str, Any], b: dict[str, Any], n: dict[str, Any]) -> str:
    """Why two bench records are not comparable ("" when they are)."""
    mb, mn = machine_key(base_file.get("environment") or {}), machine_key(new_file.get("environment") or {})
    if mb != mn:
        return f"machine changed: {mb} → {mn}"
    if b.get("version") != n.get("version"):
        return f"{n.get('compressor')} version {b.get('version')} → {n.get('version')}"
    if (b.get("params") or {}) != (n.get("params") or {}):
        changed = sorted(k for k in set(b.get("params") or {}) | set(n.get("params") or {})
                         if (b.get("params") or {}).get(k) != (n.get("params") or {}).get(k))
        return "parameters changed: " + ", ".join(changed)
    for key in ("threads", "device"):
        if b.get(key) != n.get(key):
            return f"{key} {b.get(key)} → {n.get(key)}"
    return ""


def compare_bench(baseline: dict[str, Any], new: dict[str, Any], threshold: float = DEFAULT_THRESHOLD,
                  alpha: float = DEFAULT_ALPHA) -> Comparison:
    """Compare two ``gcbench bench`` results files per (compressor, element count); see the module docstring."""
    cmp = Comparison(str(baseline.get("run_id", "baseline")), str(new.get("run_id", "new")), threshold, alpha)
    mb, mn = machine_key(baseline.get("environment") or {}), machine_key(new.get("environment") or {})
    if mb != mn:
        cmp.notes.append(f"different machines ({mb} vs {mn}): kernel timings are not comparable")
    if baseline.get("gcbench_version") != new.get("gcbench_version"):
        cmp.notes.append(f"gcbench {baseline.get('gcbench_version')} → {new.get('gcbench_version')}")
    cmp.notes.append("kernel times are compared as multiples of a copy timed in the same process; the Mann–Whitney test "
                     "runs on each timing sample divided by that process's copy median")

    def key(rec: dict[str, Any]) -> tuple[str, Any]:  # older files have no label: the compressor name is theirs
        return (str(rec.get("label") or rec.get("compressor")), rec.get("numel"))

    base_index: dict[tuple[str, Any], dict[str, Any]] = {}
    for rec in baseline.get("cases", []):
        base_index.setdefault(key(rec), rec)
    seen: set[tuple[str, Any]] = set()
    untestable: list[int] = []  # sample counts of the pairs whose test can never reach alpha
    for n in new.get("cases", []):
        k = key(n)
        if k in seen:  # a duplicate (compressor, size) in one file: only the first is compared
            continue
        seen.add(k)
        ident = {"source": bench_source(n), "case": k[0]}
        case_row = {**ident, "metric": "", "baseline": None, "new": None, "change": None, "p_value": None}
        b = base_index.get(k)
        if b is None:
            cmp.rows.append(Row(**case_row, verdict=NEW if bench_ok(n) else NEW_FAILURE,
                                reason="" if bench_ok(n) else str(n.get("error"))))
            continue
        if not bench_ok(n):
            cmp.rows.append(Row(**case_row, verdict=NEW_FAILURE if bench_ok(b) else FAILING, reason=str(n.get("error"))))
            continue
        if not bench_ok(b):
            cmp.rows.append(Row(**case_row, verdict=FIXED, reason=f"failed in the baseline: {b.get('error')}"))
            continue
        diff = _bench_diff(baseline, new, b, n)
        for metric, section in BENCH_METRICS:
            vb, vn = _number(b.get(metric)), _number(n.get(metric))
            if vb is None and vn is None:
                continue
            sb, sn = copy_normalised_samples(b, section), copy_normalised_samples(n, section)
            if not diff and len(sb) >= 2 and len(sn) >= 2 and smallest_p(len(sb), len(sn)) >= alpha:
                untestable.append(min(len(sb), len(sn)))
            common = {**ident, "metric": metric, "baseline": vb, "new": vn, "higher_is_better": False, "unit": BENCH_UNIT}
            cmp.rows.append(judge(common, vb, vn, sb, sn, None, threshold, alpha, diff))
    for b in baseline.get("cases", []):
        if key(b) not in seen:
            seen.add(key(b))
            cmp.rows.append(Row(bench_source(b), str(b.get("label") or b.get("compressor")), "", None, None, None, None, MISSING,
                                "not in the new run"))
    if untestable:
        cmp.notes.append(f"{len(untestable)} comparison(s) have only {min(untestable)}–{max(untestable)} timing samples per side: "
                         f"no Mann–Whitney p can fall below α = {alpha:g}, so those timings are never called better or worse; "
                         "rerun `gcbench bench` with --repeats 5 or more")
    return cmp


def smallest_p(m: int, n: int) -> float:
    """The smallest exact two-sided Mann–Whitney p-value with ``m`` and ``n`` samples (fully separated samples)."""
    return min(1.0, 2.0 / math.comb(m + n, m))
