"""Run comparison on golden pairs: each verdict where it belongs, and wrong under plausible bugs.

The golden files (tests/golden/README.md) carry one designed change per verdict: a higher-is-better
metric that rises, a lower-is-better one that falls, a significant change under the threshold, a
change over the threshold that is not significant, a version bump, a machine change, new, missing
and newly failing cases.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from gcbench.core.errors import ResultsError
from gcbench.results.bench_diff import smallest_p
from gcbench.results.gate import gate_failures
from gcbench.results.judge import (
    BETTER,
    FAILING,
    MISSING,
    NEW,
    NEW_FAILURE,
    NOT_COMPARABLE,
    NOT_SIGNIFICANT,
    WORSE,
    relative_change,
    z_test,
)
from gcbench.results.parse import as_case, as_record
from gcbench.results.run_diff import COMPARED, Compared, compare_metric, compare_runs, match_cases
from gcbench.results.run_record import EfDrift

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
S2 = "synthetic <img src=x onerror=alert(1)> normal"


def _load(name: str) -> dict[str, Any]:
    return json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    return _load("run_base")


@pytest.fixture(scope="module")
def rows(base: dict[str, Any]) -> dict[tuple[str, str], Any]:
    cmp = compare_runs(base, _load("run_new"))
    return {(r.case, r.metric): r for r in cmp.rows if r.source == S2 or r.metric == ""}


def test_higher_is_better_metric_that_rises_is_better(rows: dict[tuple[str, str], Any]) -> None:
    # ratio and cosine rose 10%: a comparator that ignored direction (bigger = worse) fails here
    assert rows[("topk", "ratio")].verdict == BETTER
    assert rows[("topk", "cosine")].verdict == BETTER
    assert rows[("topk", "ratio")].change == pytest.approx(0.10)
    # bits per element fell 9%: lower is better
    assert rows[("topk", "bits_per_element")].verdict == BETTER
    assert rows[("topk", "bits_per_element")].change == pytest.approx(1 / 1.1 - 1)


def test_timing_direction_and_significance(rows: dict[tuple[str, str], Any]) -> None:
    # a run times its cases in one process: +50% and −30% ×copy are within the 2× one process can move alone, however
    # separated the rounds inside each process (7 a side here; Mann–Whitney on them gave p = 0.0006)
    slower, faster = rows[("topk", "comp_over_copy")], rows[("topk", "decomp_over_copy")]
    assert slower.change == pytest.approx(0.5) and faster.change == pytest.approx(-0.3)
    for r in (slower, faster):
        assert r.verdict == NOT_SIGNIFICANT and r.p_value is None and "one process a side" in r.reason


def test_q_samples_shift_is_worse(rows: dict[tuple[str, str], Any]) -> None:
    r = rows[("qsgd", "q")]
    assert r.verdict == WORSE and r.p_value is not None and r.p_value < 0.05
    assert r.change == pytest.approx(0.3)


def test_change_over_threshold_but_not_significant(rows: dict[tuple[str, str], Any]) -> None:
    # the median is 19% slower: past the threshold, which alone would call it worse; one process a side cannot
    r = rows[("qsgd", "comp_over_copy")]
    assert r.change is not None and r.change > 0.05
    assert r.verdict == NOT_SIGNIFICANT and "within the 2×" in r.reason


def test_bias2_within_its_standard_error_is_not_significant(rows: dict[tuple[str, str], Any]) -> None:
    # −7.7e-7 → 9.9e-6 is a relative change of more than 1000%, but the jackknife SE is ~5e-5
    r = rows[("qsgd", "bias2")]
    assert r.change is not None and abs(r.change) > 10
    assert r.p_value is not None and r.p_value > 0.5
    assert r.verdict == NOT_SIGNIFICANT


def test_significant_change_under_threshold(rows: dict[tuple[str, str], Any]) -> None:
    # every sample 3% slower: below the 5% threshold, which is checked first
    r = rows[("onebit", "comp_over_copy")]
    assert r.change == pytest.approx(0.03)
    assert r.verdict == NOT_SIGNIFICANT and r.reason == "|change| < 5%"


def test_version_change_makes_every_metric_not_comparable(rows: dict[tuple[str, str], Any]) -> None:
    tern = [r for (case, _), r in rows.items() if case == "terngrad"]
    assert len(tern) >= 9
    assert all(r.verdict == NOT_COMPARABLE and "version 1 → 2" in r.reason for r in tern)


def test_case_level_verdicts(rows: dict[tuple[str, str], Any]) -> None:
    assert rows[("efsignsgd", "")].verdict == NEW_FAILURE  # matched although the failed record lacks the source label
    assert rows[("graddrop-bad", "")].verdict == FAILING
    assert rows[("none", "")].verdict == MISSING
    assert rows[("fp16", "")].verdict == NEW
    assert not any(case == "efsignsgd" and metric for case, metric in rows)


def test_regressions_are_worse_and_new_failures(base: dict[str, Any]) -> None:
    cmp = compare_runs(base, _load("run_new"))
    assert {(r.case, r.metric) for r in cmp.regressions} == {("qsgd", "q"), ("efsignsgd", "")}
    counts = cmp.counts()
    assert counts[WORSE] == 1 and counts[NEW_FAILURE] == 1 and counts[BETTER] == 3  # ratio, cosine, bits
    assert any("only a change past 2×" in n for n in cmp.notes)


def test_machine_change_makes_only_timings_not_comparable(base: dict[str, Any]) -> None:
    cmp = compare_runs(base, _load("run_other_machine"))
    timing = {c.name for c in COMPARED if c.timing}
    ok_rows = [r for r in cmp.rows if r.metric]
    assert ok_rows
    for r in ok_rows:
        if r.metric in timing:
            # every time doubled: a comparator that ignored the machine would call these worse
            assert r.verdict == NOT_COMPARABLE and "machine changed" in r.reason, r
        else:
            assert r.verdict == NOT_SIGNIFICANT and r.change == 0, r
    assert any("different machines" in n for n in cmp.notes)
    assert not cmp.regressions


def test_identical_runs_have_no_changes(base: dict[str, Any]) -> None:
    cmp = compare_runs(base, copy.deepcopy(base))
    assert {r.verdict for r in cmp.rows} == {NOT_SIGNIFICANT, FAILING}
    assert all(r.change == 0 for r in cmp.rows if r.metric)


def test_threshold_option(base: dict[str, Any]) -> None:
    cmp = compare_runs(base, _load("run_new"), threshold=0.6)
    by = {(r.case, r.metric): r for r in cmp.rows}
    assert by[("topk", "ratio")].verdict == NOT_SIGNIFICANT  # +10% < 60%
    assert by[("topk", "comp_over_copy")].verdict == NOT_SIGNIFICANT  # +50% < 60%


def test_params_and_source_changes_are_not_comparable(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    for c in new["cases"]:
        if c["label"] == "topk":
            c["params"]["density"] = 0.05
        if c["label"] == "qsgd":
            c["source"]["seed"] = 12345
    by = {(r.case, r.metric): r for r in compare_runs(base, new).rows}
    assert by[("topk", "ratio")].verdict == NOT_COMPARABLE and by[("topk", "ratio")].reason == "parameters changed: density"
    assert by[("qsgd", "q")].verdict == NOT_COMPARABLE and by[("qsgd", "q")].reason == "source changed: seed"


def test_timing_threads_change_is_not_comparable(base: dict[str, Any]) -> None:
    new = copy.deepcopy(base)
    for c in new["cases"]:
        if c["label"] == "topk":
            c["timing"]["threads"] = 1
    by = {(r.case, r.metric): r for r in compare_runs(base, new).rows}
    assert by[("topk", "comp_over_copy")].verdict == NOT_COMPARABLE
    assert by[("topk", "ratio")].verdict == NOT_SIGNIFICANT


def _with_x_copy(base: dict[str, Any], label: str, scale: float, flags: list[str] | None = None) -> dict[str, Any]:
    """A copy of ``base`` whose ``label`` case has per-round compress ×copy samples (5 around 10×, times ``scale``)."""
    out = copy.deepcopy(base)
    for c in out["cases"]:
        if c["label"] == label:
            samples = [scale * v for v in (9.8, 10.0, 10.1, 9.9, 10.2)]
            c["timing"]["compress_x_copy"] = {"median": scale * 10.0, "iqr": scale * 0.2, "samples": samples, "flags": flags or []}
    return out


def test_timings_compare_as_x_copy_samples_not_raw_seconds(base: dict[str, Any]) -> None:
    # raw compress seconds 3× slower but the per-round ×copy unchanged (the machine was loaded): not worse
    slow_machine = _with_x_copy(base, "topk", 1.0)
    for c in slow_machine["cases"]:
        if c["label"] == "topk":
            c["timing"]["compress"]["samples_s"] = [3 * v for v in c["timing"]["compress"]["samples_s"]]
            c["timing"]["compress"]["median_s"] *= 3
    rows = {(r.case, r.metric): r for r in compare_runs(_with_x_copy(base, "topk", 1.0), slow_machine).rows}
    assert rows[("topk", "comp_over_copy")].verdict == NOT_SIGNIFICANT
    assert ("topk", "compress_s") not in rows
    # the ×copy 40% higher in every round: one process a side, within what a process moves alone
    rows = {(r.case, r.metric): r for r in compare_runs(_with_x_copy(base, "topk", 1.0), _with_x_copy(base, "topk", 1.4)).rows}
    assert rows[("topk", "comp_over_copy")].verdict == NOT_SIGNIFICANT
    # 2.5× higher: past it, worse; 2.5× lower: better
    for scale, verdict in ((2.5, WORSE), (0.4, BETTER)):
        rows = {(r.case, r.metric): r for r in compare_runs(_with_x_copy(base, "topk", 1.0), _with_x_copy(base, "topk", scale)).rows}
        r = rows[("topk", "comp_over_copy")]
        assert r.verdict == verdict and r.p_value is None and "past the 2×" in r.reason


@pytest.mark.parametrize(("side", "flag"), [("new", "unstable"), ("baseline", "beats traffic bound"), ("new", "too short")])
def test_flagged_timing_is_not_comparable_and_does_not_fail_the_gate(base: dict[str, Any], side: str, flag: str) -> None:
    old = _with_x_copy(base, "topk", 1.0, [flag] if side == "baseline" else None)
    new = _with_x_copy(base, "topk", 3.0, [flag] if side == "new" else None)
    for rec in (old, new):  # a run that passes apart from this timing: no failed cases in either
        rec["cases"] = [c for c in rec["cases"] if c["status"] == "ok"]
    cmp = compare_runs(old, new)
    r = next(r for r in cmp.rows if (r.case, r.metric) == ("topk", "comp_over_copy") and "img" in r.source)
    assert r.verdict == NOT_COMPARABLE and r.reason == f"flagged: {side} {flag}"
    assert not [f for f in gate_failures(old, new, cmp) if "worse" in f]
    # the same change unflagged is a regression the gate catches
    cmp = compare_runs(_with_x_copy(old, "topk", 1.0), _with_x_copy(new, "topk", 3.0))
    assert any("worse" in f for f in gate_failures(old, new, cmp))


def test_delivered_and_q_scaled_are_compared() -> None:
    def rec(delivered: float, workers: list[float], q_scaled: float, reference: str = "dense SGD update") -> dict[str, Any]:
        return {"schema_version": 1, "kind": "run", "run_id": "r", "status": "complete", "cases": [{
            "label": "dgc", "status": "ok", "source": {"label": "s"},
            "fidelity": {"q_scaled": {"model": q_scaled}},
            "stream": {"reference": reference, "delivered": delivered, "worker_delivered": workers}}]}

    by = {r.metric: r for r in compare_runs(rec(0.9, [0.89, 0.9, 0.91, 0.92], 0.2), rec(0.7, [0.69, 0.7, 0.71, 0.72], 0.3)).rows}
    assert by["delivered"].verdict == WORSE and by["delivered"].p_value == pytest.approx(smallest_p(4, 4))
    assert by["q_scaled"].verdict == WORSE
    assert {c.name for c in COMPARED} >= {"delivered", "q_scaled"}
    by = {r.metric: r for r in compare_runs(rec(0.9, [0.9] * 4, 0.2), rec(0.7, [0.7] * 4, 0.2, "dense momentum-SGD update (m=0.9)")).rows}
    assert by["delivered"].verdict == NOT_COMPARABLE and "stream reference changed" in by["delivered"].reason


def test_compare_metric_directions_without_samples() -> None:
    hi = Compared("ratio")
    lo = Compared("bits_per_element")
    b = as_case({"label": "x", "status": "ok", "source": {"label": "s"}, "size": {"ratio": 10.0, "bits_per_element": 3.2}})
    n = as_case({"label": "x", "status": "ok", "source": {"label": "s"}, "size": {"ratio": 8.0, "bits_per_element": 4.0}})
    assert compare_metric(hi, b, n, 0.05, 0.05).verdict == WORSE  # type: ignore[union-attr]
    assert compare_metric(lo, b, n, 0.05, 0.05).verdict == WORSE  # type: ignore[union-attr]
    assert compare_metric(hi, n, b, 0.05, 0.05).verdict == BETTER  # type: ignore[union-attr]
    assert compare_metric(lo, n, b, 0.05, 0.05).verdict == BETTER  # type: ignore[union-attr]
    # a metric in neither run gives no row; in one run only, not comparable
    assert compare_metric(Compared("ef_drift"), b, n, 0.05, 0.05) is None
    m = compare_metric(Compared("ef_drift"), b, n.model_copy(update={"ef_drift": EfDrift(sum_drift=[0.5])}), 0.05, 0.05)
    assert m is not None and m.verdict == NOT_COMPARABLE


def test_relative_change_and_z_test_edges() -> None:
    assert relative_change(0.0, 0.0) == 0.0
    assert relative_change(0.0, 1e-9) == math.inf
    assert relative_change(-2.0, -1.0) == pytest.approx(0.5)  # measured from |base|
    assert z_test(1.0, 1.0, 0.0, 0.0) is None
    assert z_test(0.0, 1.96, 1.0, 0.0) == pytest.approx(0.05, abs=1e-3)


def test_match_cases_pairs_failed_records_by_source_name(base: dict[str, Any]) -> None:
    pairs, only_new, only_base = match_cases(as_record(base).cases, as_record(_load("run_new")).cases)
    labels = [n.label for _, n in pairs]
    assert "efsignsgd" in labels and "graddrop-bad" in labels
    assert [c.label for c in only_new] == ["fp16"] and [c.label for c in only_base] == ["none"]
    # dgc-paper appears on two sources and pairs with the right one each time
    assert sum(1 for b, n in pairs if n.label == "dgc-paper" and b.source.label == n.source.label) == 2


# ----------------------------------------------------------------------------- kernel benchmarks (kind = "bench")

COPY_S = 0.01
SPREAD = (0.99, 0.995, 1.0, 1.005, 1.01)


def _bench_base() -> dict[str, Any]:
    """The golden bench file with designed timings: copy 10 ms, each kernel's 5 samples ±1% around its ×copy median."""
    data = _load("bench_small")
    for c in data["cases"]:
        if c.get("error"):
            continue
        c["copy"].update(median_s=COPY_S, samples_s=[COPY_S * f for f in SPREAD])
        for section in ("compress", "decompress"):
            x = round(c[f"{section}_x_copy"], 2)
            c[section].update(median_s=COPY_S * x, samples_s=[COPY_S * x * f for f in SPREAD])
            c[f"{section}_x_copy"] = x
    return data


def _bench_case(data: dict[str, Any], name: str, numel: int) -> dict[str, Any]:
    return next(c for c in data["cases"] if c["compressor"] == name and c.get("numel") == numel)


def _scale(c: dict[str, Any], section: str, factor: float) -> None:
    c[section]["samples_s"] = [s * factor for s in c[section]["samples_s"]]
    c[section]["median_s"] *= factor
    if section == "copy":  # the ratios to the copy move the other way
        c["compress_x_copy"] /= factor
        c["decompress_x_copy"] /= factor
    else:
        c[f"{section}_x_copy"] *= factor


@pytest.fixture(scope="module")
def bench_rows() -> dict[tuple[str, str, str], Any]:
    base = _bench_base()
    new = copy.deepcopy(base)
    new["run_id"] = "bench-new"
    _scale(_bench_case(new, "signsgd", 100_000), "compress", 0.4)  # 2.5 times as fast: better (one process a side)
    _scale(_bench_case(new, "topk", 1_000_000), "compress", 2.5)  # 2.5 times as slow: worse
    slow = _bench_case(new, "signsgd", 1_000_000)  # the whole process twice as slow (a loaded machine): unchanged
    for section in ("copy", "compress", "decompress"):
        _scale(slow, section, 2.0)
    _scale(_bench_case(new, "topk", 100_000), "compress", 1.04)  # 4% slower, every sample: significant but under 5%
    cmp = compare_runs(base, new)
    return {(r.case, r.source, r.metric): r for r in cmp.rows}


def test_bench_faster_kernel_is_better_and_slower_is_worse(bench_rows: dict[tuple[str, str, str], Any]) -> None:
    r = bench_rows[("signsgd", "100,000 elements", "compress_x_copy")]
    assert r.verdict == BETTER and r.change == pytest.approx(-0.6) and r.higher_is_better is False
    assert r.p_value is None  # one process a side: no test, the factor decides
    r = bench_rows[("topk", "1,000,000 elements", "compress_x_copy")]
    assert r.verdict == WORSE and r.change == pytest.approx(1.5)
    # the untouched decompress timings are unchanged
    assert bench_rows[("topk", "1,000,000 elements", "decompress_x_copy")].verdict == NOT_SIGNIFICANT


def test_bench_samples_are_normalised_by_the_copy_of_the_same_process(bench_rows: dict[tuple[str, str, str], Any]) -> None:
    # every raw sample doubled with the copy: raw seconds would say twice as slow; per copy nothing changed
    for metric in ("compress_x_copy", "decompress_x_copy"):
        r = bench_rows[("signsgd", "1,000,000 elements", metric)]
        assert r.verdict == NOT_SIGNIFICANT and r.change == pytest.approx(0.0, abs=1e-12)


def _processes(c: dict[str, Any], medians: list[float]) -> None:
    """Give a bench case the per-process compress medians ``bench --processes`` records (its ×copy their median)."""
    c["compress_x_copy"] = sorted(medians)[len(medians) // 2]
    c["x_copy"] = {"compress": {"median": c["compress_x_copy"], "process_medians": medians}}
    c["processes"] = len(medians)


def test_bench_significant_change_under_threshold() -> None:
    base, new = _bench_base(), _bench_base()
    _processes(_bench_case(base, "topk", 100_000), [10 * f for f in SPREAD])
    _processes(_bench_case(new, "topk", 100_000), [10.4 * f for f in SPREAD])  # 4% slower, in every process
    r = next(r for r in compare_runs(base, new).rows if (r.case, r.source, r.metric) == ("topk", "100,000 elements", "compress_x_copy"))
    assert r.p_value is not None and r.p_value < 0.05 and r.change == pytest.approx(0.04)
    assert r.verdict == NOT_SIGNIFICANT


def test_bench_failures_and_cases_in_one_file_only(bench_rows: dict[tuple[str, str, str], Any]) -> None:
    assert bench_rows[("qsgd", "100,000 elements", "")].verdict == FAILING
    base = _bench_base()
    new = copy.deepcopy(base)
    new["cases"] = [c for c in new["cases"] if not (c["compressor"] == "topk" and c["numel"] == 100_000)]
    new["cases"].append({"compressor": "onebit", "numel": 100_000, "error": "boom"})
    _bench_case(new, "signsgd", 100_000).update(error="RuntimeError: crashed")
    by = {(r.case, r.source, r.metric): r for r in compare_runs(base, new).rows}
    assert by[("topk", "100,000 elements", "")].verdict == MISSING
    assert by[("onebit", "100,000 elements", "")].verdict == NEW_FAILURE
    assert by[("signsgd", "100,000 elements", "")].verdict == NEW_FAILURE
    assert ("signsgd", "100,000 elements", "compress_x_copy") not in by


def test_bench_on_another_machine_is_not_comparable() -> None:
    base = _bench_base()
    new = copy.deepcopy(base)
    new["environment"]["cpu_model"] = "Intel Xeon"
    for c in new["cases"]:
        if not c.get("error"):
            _scale(c, "compress", 3.0)  # would be "worse" everywhere on one machine
    cmp = compare_runs(base, new)
    metric_rows = [r for r in cmp.rows if r.metric]
    assert len(metric_rows) == 8
    assert all(r.verdict == NOT_COMPARABLE and "machine changed" in r.reason for r in metric_rows)
    assert any("different machines" in n for n in cmp.notes) and not cmp.regressions


def test_bench_version_params_and_threads_changes_are_not_comparable() -> None:
    base = _bench_base()
    new = copy.deepcopy(base)
    _bench_case(new, "topk", 100_000)["version"] = 2
    _bench_case(new, "topk", 1_000_000)["params"]["density"] = 0.1
    _bench_case(new, "signsgd", 100_000)["threads"] = 1
    by = {(r.case, r.source, r.metric): r for r in compare_runs(base, new).rows}
    assert by[("topk", "100,000 elements", "compress_x_copy")].verdict == NOT_COMPARABLE
    assert "version 1 → 2" in by[("topk", "100,000 elements", "compress_x_copy")].reason
    assert by[("topk", "1,000,000 elements", "decompress_x_copy")].reason == "parameters changed: density"
    assert "threads 2 → 1" in by[("signsgd", "100,000 elements", "compress_x_copy")].reason
    assert by[("signsgd", "1,000,000 elements", "compress_x_copy")].verdict == NOT_SIGNIFICANT


def test_bench_processes_are_tested_and_one_process_a_side_is_said() -> None:
    base, new = _bench_base(), _bench_base()
    cmp = compare_runs(base, new)
    assert any("8 timing(s) rest on one process a side" in n and "--processes 5" in n for n in cmp.notes)
    spread = (0.93, 1.05, 0.97, 1.08, 1.0)  # processes 15% apart, as a quiet 2-core machine gives at 1M
    _processes(_bench_case(base, "topk", 1_000_000), [20 * f for f in spread])
    _processes(_bench_case(new, "topk", 1_000_000), [26 * f for f in reversed(spread)])  # 30% slower
    wide = (0.85, 1.1, 0.95, 1.15, 1.0)  # and 30% apart
    _processes(_bench_case(base, "signsgd", 1_000_000), [3 * f for f in wide])
    _processes(_bench_case(new, "signsgd", 1_000_000), [3.3 * f for f in wide])  # 10%: within that spread
    cmp = compare_runs(base, new)
    by = {(r.case, r.source, r.metric): r for r in cmp.rows}
    r = by[("topk", "1,000,000 elements", "compress_x_copy")]
    assert r.verdict == WORSE and r.reason == "5 vs 5 processes" and r.p_value is not None and r.p_value < 0.01
    r = by[("signsgd", "1,000,000 elements", "compress_x_copy")]
    assert r.verdict == NOT_SIGNIFICANT and r.p_value is not None and r.p_value > 0.05
    assert any("6 timing(s) rest on one process a side" in n for n in cmp.notes)


def test_mixed_kinds_are_refused_and_run_vs_compare_is_not(base: dict[str, Any]) -> None:
    bench = _load("bench_small")
    with pytest.raises(ResultsError, match=r"cannot compare a bench results file .* against a run baseline"):
        compare_runs(base, bench)
    with pytest.raises(ResultsError, match="same kind"):
        compare_runs(bench, _load("train_digits"))
    as_compare = {**copy.deepcopy(base), "kind": "compare"}
    cmp = compare_runs(base, as_compare)  # `gcbench compare` files hold the same records as runs
    assert {r.verdict for r in cmp.rows} == {NOT_SIGNIFICANT, FAILING}


def test_train_runs_compare_accuracy_and_loss() -> None:
    base = _load("train_digits")
    new = copy.deepcopy(base)
    new["run_id"] = "train-new"
    first, second = new["cases"][0], new["cases"][1]
    first["training"]["final_accuracy"] = base["cases"][0]["training"]["final_accuracy"] * 0.8  # 20% lower: worse
    second["training"]["epochs"] = base["cases"][1]["training"]["epochs"] + 1  # different training: not comparable
    cmp = compare_runs(base, new)
    rows = {(r.case, r.metric): r for r in cmp.rows}
    assert rows[(first["label"], "final_accuracy")].verdict == WORSE
    assert rows[(first["label"], "final_loss")].verdict == NOT_SIGNIFICANT
    assert rows[(first["label"], "ratio")].verdict == NOT_SIGNIFICANT
    assert {r.verdict for (case, _), r in rows.items() if case == second["label"]} == {NOT_COMPARABLE}
    assert "epochs" in rows[(second["label"], "final_accuracy")].reason
    assert [r for r in cmp.regressions if r.metric == "final_accuracy"]
    # run-only metrics do not appear for training files
    assert not [r for r in cmp.rows if r.metric in ("q", "aggregate_q", "comp_over_copy")]
