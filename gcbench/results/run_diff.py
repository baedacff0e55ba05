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
* **Better / worse** by the threshold-and-test rule of :func:`gcbench.results.judge.judge`; the delivered
  update (``stream.delivered``) is tested on its per-worker values, and is not comparable when the stream's
  reference changed.
* **Timings are compared as ×copy, never as raw milliseconds.**  Compress and decompress time are
  compared as multiples of a copy timed in the same round (``timing.compress_x_copy``), which cancels
  most of the machine's load of the moment; files from before interleaved timing: each kernel timing
  divided by the case's median copy.  A run times every case in one process, and the same build's
  ×copy moves from process to process further than its rounds inside one process show, so a timing is
  called better or worse only past :data:`gcbench.results.judge.ONE_PROCESS_FACTOR` (:func:`gcbench.results.judge.judge_timing`);
  a speed gate finer than that is ``gcbench bench --processes``.  A timing flagged on either side (``unstable``,
  ``too short``, ``beats traffic bound``: :class:`gcbench.results.record.XCopy`) is ``not comparable (flagged:
  ...)``, never better or worse: it is not a speed to act on.
* **Cases that appear or fail.** ``new`` / ``missing`` for cases in only one run; ``new failure``
  when a case that ran in the baseline fails now; ``fixed`` when it ran again; ``failing`` when it
  failed in both.  ``worse`` and ``new failure`` are regressions (``--fail-on-regression``).

Samples-based tests need enough samples: with 3 timing repeats per run the smallest two-sided
Mann–Whitney p-value is 0.1, so such timings are never significant at 5% — use ≥ 5 repeats.

**Kernel benchmarks** (``kind = "bench"``) are compared by :func:`gcbench.results.bench_diff.compare_bench`,
chosen by :func:`compare_runs` from the files' kinds.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gcbench.core.errors import ResultsError
from gcbench.results.bench_diff import compare_bench
from gcbench.results.bench_record import BenchRecord
from gcbench.results.judge import (
    DEFAULT_ALPHA,
    DEFAULT_THRESHOLD,
    DIRECTION,
    FAILING,
    FIXED,
    MISSING,
    NEW,
    NEW_FAILURE,
    NOT_COMPARABLE,
    ONE_PROCESS_FACTOR,
    TIMING_METRICS,
    UNIT,
    Comparison,
    Row,
    judge,
    judge_timing,
    keys_diff,
    version_params_diff,
)
from gcbench.results.parse import as_record
from gcbench.results.record import RunRecord
from gcbench.results.run_record import RunCase
from gcbench.results.train_record import TrainCase


@dataclass(frozen=True)
class Compared:
    """A metric that comparisons look at, by its name in :data:`gcbench.results.metrics.METRICS`.

    Its value, raw samples and standard error are read from a case by name
    (:meth:`gcbench.results.run_record.RunCase.metric`, ``samples``, ``standard_error``).
    """

    name: str
    timing: bool = False
    kernel: str | None = None  # a timing: the kernel whose ×copy flags decide whether it is comparable
    stream: bool = False  # measured on the stream: not comparable when the stream's reference changed

    @property
    def higher_is_better(self) -> bool:
        return DIRECTION[self.name]


COMPARED: tuple[Compared, ...] = (
    *(Compared(n) for n in ("ratio", "bits_per_element", "q", "q_scaled", "bias2", "variance", "cosine", "aggregate_q",
                            "ef_drift", "aggregate_drift")),
    Compared("delivered", stream=True),
    Compared("comp_over_copy", timing=True, kernel="compress"),
    Compared("decomp_over_copy", timing=True, kernel="decompress"),
)


# training runs (kind = "train", gcbench.train.driver): what training reached, besides the bytes it sent
COMPARED_TRAIN: tuple[Compared, ...] = tuple(Compared(n) for n in ("final_accuracy", "final_loss", "ratio", "bits_per_element"))


def source_label(case: RunCase | TrainCase) -> str:
    """The source's label of a run case (its name for a failed one), the task's name of a train case."""
    return case.source_label



def _case_config_diff(base: RunCase | TrainCase, new: RunCase | TrainCase) -> str:
    """Why two cases measure different things ("" when they measure the same thing)."""
    if base.compressor != new.compressor:
        return f"compressor {base.compressor} → {new.compressor}"
    sb, sn = (c.source.identity() if c.source else {} for c in (base, new))
    why = version_params_diff(base, new) or keys_diff("source", sb, sn)
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
              "higher_is_better": spec.higher_is_better, "unit": UNIT[spec.name]}
    if b is None and n is None:
        return None
    if spec.timing:  # one process a side (see the module docstring)
        return judge_timing(common, b, n, [] if b is None else [b], [] if n is None else [n], threshold, alpha,
                            not_comparable or _not_comparable(spec, base, new))
    se_b, se_n = base.standard_error(spec.name), new.standard_error(spec.name)
    se = (se_b, se_n) if se_b is not None and se_n is not None else None
    return judge(common, b, n, base.samples(spec.name), new.samples(spec.name), se, threshold, alpha,
                 not_comparable or _not_comparable(spec, base, new))



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
        case_row: dict[str, Any] = {"source": src, "case": n.label, "metric": "", "baseline": None, "new": None, "change": None,
                                    "p_value": None}
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
    if any(r.metric in TIMING_METRICS and r.verdict != NOT_COMPARABLE for r in cmp.rows):
        cmp.notes.append(f"timings rest on one process a side (a run times its cases in one process): only a change past "
                         f"{ONE_PROCESS_FACTOR:g}× ×copy is called; for a finer speed gate compare `gcbench bench "
                         "--processes 5` files")
    for n in only_new:
        cmp.rows.append(Row(source_label(n), n.label, "", None, None, None, None, NEW if n.ok else NEW_FAILURE,
                            "" if n.ok else n.error_text or "failed"))
    for b in only_base:
        cmp.rows.append(Row(source_label(b), b.label, "", None, None, None, None, MISSING, "not in the new run"))
    return cmp
