"""The verdict of ``gcbench compare`` on constructed cases: each axis where it belongs, and wrong under plausible bugs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.results.head_to_head import FIDELITY_METRICS, MAIN_METRICS, compare_json, head_to_head
from gcbench.results.parse import as_case
from gcbench.results.process_spread import MEASURE_HINT, PROCESS_LOG_SD
from gcbench.results.run_record import RUN_METRICS, RunCase
from gcbench.results.verdict import (
    BYTES,
    DELIVERED,
    EQUAL_DELIVERED,
    EXACT,
    FLAGGED,
    INTERPOLATED,
    NO_CI,
    NO_DIFFERENCE,
    NO_OVERLAP,
    NO_SWEEP,
    SIGNIFICANT,
    SWEEP_DENSITIES,
    TIME,
    TOO_SHORT,
    CurvePoint,
    bootstrap_ratio,
    bytes_at,
    pair_verdict,
    process_spread_note,
    sweep_curve,
    sweep_entries,
    verdicts,
    with_process_spread,
)

runner = CliRunner()

FAST = [1.0, 1.04, 0.97, 1.02, 0.99, 1.01, 0.98]
SLOW = [2.0 * v for v in FAST]


def case(label: str, *, sent: float = 1000.0, delivered: float | None = 0.9, workers: list[float] | None = None,
         steps: int = 10, enough: bool = True, x_copy: list[float] | None = None, flags: list[str] | None = None,
         compressor: str | None = None, density: float | None = None, reference: str = "gradient",
         spread: dict[str, Any] | None = None) -> RunCase:
    """A compare case with the fields the verdict reads."""
    data: dict[str, Any] = {
        "label": label, "status": "ok", "compressor": compressor or label,
        "params": {} if density is None else {"density": density},
        "source": {"name": "synthetic", "label": "synthetic normal 8×8"},
        "size": {"wire_bytes": sent * 0.9, "traffic_sent_bytes": sent},
        "fidelity": {"reference": reference, "q": {"model": 0.5}},
    }
    if delivered is not None:
        data["stream"] = {"reference": "dense SGD update", "steps": steps, "min_steps": 10, "enough": enough,
                          "delivered": delivered, "worker_delivered": workers}
    if x_copy is not None:
        data["timing"] = {"compress_x_copy": {"median": sorted(x_copy)[len(x_copy) // 2], "samples": x_copy,
                                              "flags": flags or []}}
        if spread is not None:
            data["timing"]["process_spread"] = spread
    return as_case(data)  # type: ignore[return-value]


# ----------------------------------------------------------------------------- the three axes


def test_clear_winner_on_every_axis() -> None:
    # workers differ a lot from one another, but A beats B by 0.01 on every worker: only a PAIRED test sees it
    base = [0.5, 0.7, 0.9, 0.99]
    a = case("a", sent=1000, delivered=0.80, workers=[w + 0.010 + e for w, e in zip(base, (0, 1e-3, -1e-3, 5e-4), strict=True)],
             x_copy=SLOW)
    b = case("b", sent=500, delivered=0.79, workers=base, x_copy=FAST)
    v = pair_verdict(a, b)
    by, de, ti = v.axis(BYTES), v.axis(DELIVERED), v.axis(TIME)
    assert by is not None and by.status == EXACT and by.better == "b" and by.estimate == pytest.approx(2.0)
    assert "exact" in by.text
    assert de is not None and de.status == SIGNIFICANT and de.better == "a"
    assert de.estimate == pytest.approx(0.010 + 1.25e-4) and 0 < de.lo < de.estimate < de.hi  # type: ignore[operator]
    assert ti is not None and ti.status == SIGNIFICANT and ti.better == "b"
    assert ti.estimate == pytest.approx(2.0) and 1 < ti.lo < 2 < ti.hi  # type: ignore[operator]
    assert v.axis(EQUAL_DELIVERED) is None  # no sweep: no statement at equal delivered update
    assert v.summary.startswith("a vs b: b sends 2× fewer bytes; a delivers 0.0101 more of the dense update (95% CI ")
    assert "a compress 2× slower (CI " in v.summary


def test_unpaired_workers_would_not_separate_the_clear_winner() -> None:
    # the same numbers, with B's workers shuffled: the pairs no longer line up, so the paired CI must widen past 0
    base = [0.5, 0.7, 0.9, 0.99]
    a = case("a", workers=[w + 0.01 for w in base])
    b = case("b", workers=[base[3], base[2], base[1], base[0]])
    de = pair_verdict(a, b).axis(DELIVERED)
    assert de is not None and de.status == NO_DIFFERENCE and de.better is None


def test_overlapping_intervals_are_no_significant_difference() -> None:
    base = [0.80, 0.82, 0.85, 0.83]
    a = case("a", delivered=0.826, workers=[w + d for w, d in zip(base, (0.01, -0.012, 0.008, -0.009), strict=True)],
             x_copy=FAST)
    b = case("b", delivered=0.825, workers=base, x_copy=[v * 1.01 for v in reversed(FAST)])
    v = pair_verdict(a, b)
    de, ti = v.axis(DELIVERED), v.axis(TIME)
    assert de is not None and de.status == NO_DIFFERENCE and de.better is None and de.lo < 0 < de.hi  # type: ignore[operator]
    assert ti is not None and ti.status == NO_DIFFERENCE and ti.better is None and ti.lo < 1 < ti.hi  # type: ignore[operator]
    assert "delivered update: no significant difference" in v.summary
    assert "compress time: no significant difference" in v.summary


def test_short_stream_cannot_conclude() -> None:
    a = case("dgc", workers=[0.9, 0.91], steps=2, enough=False)
    b = case("sdagc", workers=[0.5, 0.51], steps=2, enough=False)
    de = pair_verdict(a, b).axis(DELIVERED)
    assert de is not None and de.status == TOO_SHORT and de.better is None and de.estimate is None
    assert "stream too short to conclude (2 steps, need ≥ 10; use --steps 10)" in de.short


def test_error_feedback_on_a_stream_shorter_than_its_residual_drains_cannot_conclude() -> None:
    """Third audit, item 2: compare dgc sdagc --model resnet50 said "dgc delivers 0.0291 more of the dense update" after
    10 open-loop steps, a stream DGC's 0.001 density needs about 1,000 steps to drain."""
    a = case("dgc", workers=[0.05, 0.06], steps=10, density=0.001)
    b = case("sdagc", workers=[0.02, 0.025], steps=10)
    de = pair_verdict(a, b).axis(DELIVERED)
    assert de is not None and de.status == TOO_SHORT and de.better is None and de.estimate is None
    assert "dgc: 10 steps, its residual needs about 1,000 steps to drain" in de.short
    assert "sdagc: 10 steps, its residual's drain time unknown: 100 steps assumed" in de.short and "gcbench converge" in de.text
    drained = pair_verdict(case("topk", workers=[0.9, 0.91], steps=100, compressor="topk:error_feedback=True", density=0.01),
                           case("qsgd", workers=[0.5, 0.51], steps=100)).axis(DELIVERED)
    assert drained is not None and drained.status != TOO_SHORT  # 100 steps drain a 0.01 density: judged


@pytest.mark.parametrize("flag", ["unstable", "beats traffic bound", "too short"])
def test_flagged_timing_cannot_say(flag: str) -> None:
    a, b = case("a", x_copy=SLOW, flags=[flag]), case("b", x_copy=FAST)
    ti = pair_verdict(a, b).axis(TIME)
    assert ti is not None and ti.status == FLAGGED and ti.better is None and ti.estimate is None
    assert ti.short == f"compress time: cannot say (flagged: a {flag})"


def test_no_per_worker_values_gives_the_point_difference_without_ci() -> None:
    a = case("powersgd", delivered=0.7, workers=None, steps=100)  # error feedback: a stream long enough to judge it
    b = case("topk", delivered=0.9, workers=[0.88, 0.9, 0.92], steps=100)
    de = pair_verdict(a, b).axis(DELIVERED)
    assert de is not None and de.status == NO_CI and de.better is None
    assert de.estimate == pytest.approx(0.2) and de.lo is None and de.hi is None
    assert "no CI (protocol has no per-worker view: powersgd)" in de.text and de.short.startswith("topk delivers 0.2 more")


def test_bootstrap_is_reproducible_and_brackets_the_ratio() -> None:
    r1, r2 = bootstrap_ratio(SLOW, FAST), bootstrap_ratio(SLOW, FAST)
    assert r1 == r2  # fixed seed
    assert r1[0] == pytest.approx(2.0) and r1[1] <= r1[0] <= r1[2]


# ----------------------------------------------------------------------------- at equal delivered update


def _sweep_cases(shift: float) -> tuple[RunCase, RunCase, list[RunCase]]:
    """topk at 0.01 (configured) with two sweep points; randomk at 0.01 with one, its curve shifted by ``shift``."""
    topk = case("topk", sent=200, delivered=0.6, density=0.01)
    randomk = case("randomk", sent=200, delivered=0.4 + shift, density=0.01)
    sweep = [case("topk@0.1", compressor="topk", sent=2000, delivered=0.9, density=0.1),
             case("topk@0.001", compressor="topk", sent=20, delivered=0.3, density=0.001),
             case("topk@0.003", compressor="topk", sent=60, delivered=0.45, density=0.003, steps=2, enough=False),
             case("randomk@0.1", compressor="randomk", sent=2000, delivered=0.8 + shift, density=0.1)]
    return topk, randomk, sweep


def test_sweep_interpolates_log_bytes_linearly_in_delivered() -> None:
    topk, randomk, sweep = _sweep_cases(0.0)
    curve = sweep_curve(topk, sweep)
    # the too-short point is no level of the curve; randomk's points are not topk's
    assert [p.label for p in curve] == ["topk@0.001", "topk", "topk@0.1"]
    eq = pair_verdict(topk, randomk, sweep).axis(EQUAL_DELIVERED)
    # overlap 0.4–0.8; topk's own delivered 0.6 lies in it: topk needs 200, randomk exp(mid of log 200, log 2000)
    assert eq is not None and eq.status == INTERPOLATED and eq.better == "topk"
    assert eq.estimate == pytest.approx(math.sqrt(200 * 2000) / 200)
    assert "at equal delivered update 0.6, topk needs 3.16× fewer bytes per step than randomk" in eq.text


def test_sweeps_that_do_not_overlap_say_so() -> None:
    topk, randomk, sweep = _sweep_cases(-0.35)  # randomk's curve now covers 0.05–0.45
    high = [s for s in sweep if s.label != "topk@0.001"]  # and topk's 0.6–0.9 (its 0.45 point is too short to count)
    eq = pair_verdict(topk, randomk, high).axis(EQUAL_DELIVERED)
    assert eq is not None and eq.status == NO_OVERLAP and eq.better is None and eq.estimate is None
    assert "do not overlap" in eq.text and "0.6–0.9" in eq.text and "0.05–0.45" in eq.text


def test_a_compressor_without_a_sweep_gets_no_equal_delivered_statement() -> None:
    topk, _, sweep = _sweep_cases(0.0)
    sdagc = case("sdagc", sent=100, delivered=0.7)
    eq = pair_verdict(topk, sdagc, sweep).axis(EQUAL_DELIVERED)
    assert eq is not None and eq.status == NO_SWEEP and "sdagc" in eq.text and eq.estimate is None


def test_bytes_at_meets_the_points_and_refuses_to_extrapolate() -> None:
    curve = [CurvePoint("a", 0.1, 10.0, 0.2), CurvePoint("b", 0.01, 1000.0, 0.6)]
    assert bytes_at(curve, 0.2) == pytest.approx(10) and bytes_at(curve, 0.6) == pytest.approx(1000)
    assert bytes_at(curve, 0.4) == pytest.approx(100)  # halfway in delivered = geometric mean in bytes
    with pytest.raises(ValueError, match="outside"):
        bytes_at(curve, 0.7)


def test_sweep_entries_add_density_compressors_only_and_skip_the_configured_density() -> None:
    entries = sweep_entries([("topk", {}), ("sdagc", {}), ("dgc", {"density": 0.01}), ("topk", {"density": 0.1})])
    labels = [e["label"] for e in entries]
    assert not [lab for lab in labels if lab.startswith("sdagc")]  # no density parameter on its card
    topk = [e for e in entries if e["name"] == "topk"]
    # the two compared topk run 0.01 (its default) and 0.1 already: the sweep adds the other densities once
    assert [e["params"]["density"] for e in topk] == [d for d in SWEEP_DENSITIES if d not in (0.01, 0.1)]
    assert len(labels) == len(set(labels)) and "topk@0.001" in labels and "dgc@0.001" in labels and "dgc@0.01" not in labels


# ----------------------------------------------------------------------------- tables and JSON


def test_a_best_only_where_it_means_something() -> None:
    a = case("a", x_copy=FAST, flags=["unstable"], reference="gradient")
    b = case("b", x_copy=SLOW, reference="momentum-SGD update")
    c = case("c", x_copy=[v * 3 for v in FAST], reference="gradient", steps=2, enough=False)
    main = {r.spec.metric: r for r in head_to_head([a, b, c], MAIN_METRICS)}
    assert main["comp_over_copy"].best == 1  # a is fastest but flagged: never the best
    assert main["delivered"].best is None  # c's stream is too short to rank
    one_shot = head_to_head([a, b, c], FIDELITY_METRICS)
    assert all(r.best is None for r in one_shot)  # b is measured against another reference
    same_ref = head_to_head([a, c], FIDELITY_METRICS)
    assert [r.best for r in same_ref if r.spec.metric == "q"] == [0]


def test_the_tables_within_noise_of_the_best_is_the_verdicts_rule() -> None:
    """A 2× slower case is marked ≈ the best exactly when the time verdict finds no significant difference: on a
    machine whose processes move by half, not on a quiet one (the rounds alone separate them either way)."""
    for spread, same in (({"log_sd": 0.02}, False), ({"log_sd": 0.5}, True)):
        fast, slow = case("fast", x_copy=FAST, spread=spread), case("slow", x_copy=SLOW, spread=spread)
        verdict = pair_verdict(fast, slow).axis(TIME)
        assert verdict is not None and (verdict.status == NO_DIFFERENCE) is same
        main = {r.spec.metric: r for r in head_to_head([fast, slow], MAIN_METRICS)}
        assert main["comp_over_copy"].best == 0 and main["comp_over_copy"].not_significant == [False, same]


def _keys(obj: Any, path: str = "") -> list[tuple[str, str]]:
    if isinstance(obj, dict):
        return [(path, k) for k in obj] + [kp for k, v in obj.items() for kp in _keys(v, f"{path}.{k}")]
    if isinstance(obj, list):
        return [kp for v in obj for kp in _keys(v, path)]
    return []


def test_json_keys_are_snake_case_metric_names() -> None:
    a = case("a <b>", sent=1000, workers=[0.9, 0.91, 0.92], x_copy=SLOW)
    b = case("topk(density=0.1)", sent=500, workers=[0.8, 0.82, 0.81], x_copy=FAST)
    out = json.loads(json.dumps(compare_json([a, b], "r.json", verdicts([a, b]), [])))
    bad = [f"{p}.{k}" for p, k in _keys(out) if not re.fullmatch(r"[a-z][a-z0-9_]*", k)]
    assert not bad, bad
    assert {"results", "source", "reference", "cases", "verdicts", "summary", "rows", "fidelity"} <= set(out)
    assert set(out["rows"]) <= set(RUN_METRICS) and set(out["fidelity"]["rows"]) <= set(RUN_METRICS)
    assert out["cases"] == ["a <b>", "topk(density=0.1)"] and out["reference"] == "dense SGD update"
    assert out["summary"] == [out["verdicts"][0]["summary"]] and out["verdicts"][0]["axes"][0]["axis"] == "bytes"
    assert out["rows"]["delivered"]["best"] == "a <b>" and out["rows"]["comp_over_copy"]["best"] == "topk(density=0.1)"


def test_compare_output_puts_the_verdict_first_and_names_the_references() -> None:
    from gcbench.report.terminal import head_to_head_output

    a = case("dgc", sent=1000, workers=[0.9, 0.91, 0.92], x_copy=SLOW, reference="momentum-SGD update")
    b = case("topk", sent=500, workers=[0.8, 0.82, 0.81], x_copy=FAST)
    console = Console(record=True, width=300)
    for part in head_to_head_output([a, b], "layer"):
        console.print(part)
    text = console.export_text()
    assert text.index("dgc vs topk: topk sends 2× fewer bytes") < text.index("reference: dense SGD update")
    assert text.index("reference: dense SGD update") < text.index("one-shot fidelity — each against its own reference")
    ref_row = next(line for line in text.splitlines() if line.startswith("│ reference"))
    assert "momentum-SGD update" in ref_row and "gradient" in ref_row


# ----------------------------------------------------------------------------- the command


def test_compare_with_one_compressor_is_a_usage_error(tmp_path: Path) -> None:
    r = runner.invoke(app, ["compare", "topk", "--shape", "8x8", "--out", str(tmp_path), "-q"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "compare needs two or more compressors" in r.output
    assert not list(tmp_path.glob("*.json"))  # nothing ran
    h = runner.invoke(app, ["compare", "--help"])
    assert "two or more" in " ".join(h.output.split()).lower()


def test_compare_json_from_a_real_run(tmp_path: Path) -> None:
    r = runner.invoke(app, ["compare", "topk", "randomk", "--shape", "16x16", "--steps", "2", "--rounds", "1",
                            "--repeats", "2", "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["cases"] == ["topk", "randomk"] and len(out["verdicts"]) == 1
    assert not [f"{p}.{k}" for p, k in _keys(out) if not re.fullmatch(r"[a-z][a-z0-9_]*", k)]
    assert out["verdicts"][0]["summary"].startswith("topk vs randomk: ")
    assert Path(out["results"]).exists()


def test_compared_cases_of_one_family_are_points_of_each_others_curve() -> None:
    low = case("topk", sent=200, delivered=0.6, density=0.01)
    high = case("topk(density=0.1)", compressor="topk", sent=2000, delivered=0.9, density=0.1)
    randomk = case("randomk", sent=200, delivered=0.5, density=0.01)
    sweep = [case("randomk@0.1", compressor="randomk", sent=2000, delivered=0.8, density=0.1)]
    by_pair = {(v.a, v.b): v for v in verdicts([low, high, randomk], sweep)}
    eq = by_pair[("topk", "randomk")].axis(EQUAL_DELIVERED)
    # topk's curve is its two compared densities (the sweep skipped both): 0.6–0.9 overlaps randomk's 0.5–0.8
    assert eq is not None and eq.status == INTERPOLATED and eq.better == "topk"
    same = by_pair[("topk", "topk(density=0.1)")].axis(EQUAL_DELIVERED)
    assert same is not None and same.estimate == pytest.approx(1.0) and same.better is None and "the same bytes" in same.text


def test_payloads_are_stated_against_bf16_and_fp32_and_larger_than_bf16_flagged() -> None:
    """Issue 31: against a 16-bit baseline too; a payload over half the dense fp32 bytes is larger than bf16's."""
    from gcbench.results.verdict import baseline_bytes, baseline_bytes_line

    small, big = case("topk", sent=1000.0), case("natural", sent=1000.0)
    small.size.dense_bytes = 900.0 * 64  # payload 900 bytes: 64× smaller than fp32, 32× than bf16
    big.size.dense_bytes = 900.0 * 1.5  # payload 900 of 1350 fp32 bytes: larger than bf16's 675
    rows = {b.label: b for b in baseline_bytes([small, big])}
    assert rows["topk"].vs_fp32 == pytest.approx(64) and rows["topk"].vs_bf16 == pytest.approx(32)
    assert rows["natural"].larger_than_bf16 and not rows["topk"].larger_than_bf16
    line = baseline_bytes_line([small, big])
    assert "topk 32× smaller (64×)" in line and "larger than bf16: natural (1.33× bf16's payload)" in line
    d = compare_json([small, big], "r.json", [])
    assert [b["larger_than_bf16"] for b in d["baselines"]] == [False, True]


def test_the_time_interval_adds_the_spread_between_processes() -> None:
    # four runs of `gcbench compare topk qsgd signsgd` on one quiet machine (2026-12-02): (ratio, rounds-only 95% CI)
    runs = {"topk/qsgd": [(1.54, 1.42, 1.69), (2.24, 2.07, 2.32), (1.67, 1.56, 1.80), (1.87, 1.72, 1.95)],
            "topk/signsgd": [(4.19, 3.91, 4.49), (6.91, 6.44, 7.16), (6.10, 5.80, 6.57), (7.15, 6.64, 7.63)]}
    for pair, seen in runs.items():
        assert max(lo for _, lo, _ in seen) > min(hi for _, _, hi in seen), pair  # rounds alone: they do not overlap
        wide = [with_process_spread(*t, PROCESS_LOG_SD, PROCESS_LOG_SD) for t in seen]
        assert max(lo for _, lo, _ in wide) < min(hi for _, _, hi in wide), pair  # widened: one value sits in all four
        assert all(lo > 1 for _, lo, _ in wide)  # the direction holds in every run
    r, lo, hi = with_process_spread(1.2, 1.15, 1.25, PROCESS_LOG_SD, PROCESS_LOG_SD)  # 20% apart in one process: within what a rerun moves
    assert r == 1.2 and lo < 1 < hi
    # each half grows by z·√2·PROCESS_LOG_SD in quadrature, on the log scale
    assert math.log(hi / r) == pytest.approx(math.hypot(math.log(1.25 / 1.2), 1.959964 * math.sqrt(2) * PROCESS_LOG_SD), rel=1e-5)


def test_each_side_adds_its_own_recorded_spread() -> None:
    r, lo, hi = with_process_spread(1.2, 1.15, 1.25, 0.05, 0.2)
    assert math.log(hi / r) == pytest.approx(math.hypot(math.log(1.25 / 1.2), 1.959964 * math.hypot(0.05, 0.2)), rel=1e-5)
    assert math.log(r / lo) == pytest.approx(math.hypot(math.log(1.2 / 1.15), 1.959964 * math.hypot(0.05, 0.2)), rel=1e-5)
    assert with_process_spread(1.2, 1.15, 1.25, 0.0, 0.0) == (1.2, 1.15, 1.25)  # no spread: the rounds' interval


def test_the_time_verdict_uses_the_spread_recorded_with_each_timing() -> None:
    """A 2× ratio is a clear call on a quiet machine and none on one whose processes move by half; the method and the
    note name where the figure came from, and a file from before it was recorded gets the built-in one."""
    quiet = {"log_sd": 0.02, "df": 24, "timings": 12, "processes": 3, "file": "runs/2026-12-02T10-00-00Z-bench.json"}
    noisy = {"log_sd": 0.5, "df": 24, "timings": 12, "processes": 3, "file": "runs/x-bench.json"}
    calm = pair_verdict(case("a", x_copy=SLOW, spread=quiet), case("b", x_copy=FAST, spread=quiet)).axis(TIME)
    assert calm is not None and calm.status == SIGNIFICANT and calm.better == "b"
    assert "0.02 in log terms, this machine's, pooled over 12 timings in up to 3 processes (24 df)" in calm.method
    assert "2026-12-02T10-00-00Z-bench.json" in calm.method
    jumpy = pair_verdict(case("a", x_copy=SLOW, spread=noisy), case("b", x_copy=FAST, spread=noisy)).axis(TIME)
    assert jumpy is not None and jumpy.status == NO_DIFFERENCE and jumpy.lo is not None and jumpy.lo < 1 < jumpy.hi
    old = pair_verdict(case("a", x_copy=SLOW), case("b", x_copy=FAST)).axis(TIME)
    assert old is not None and f"{PROCESS_LOG_SD:g} in log terms, built in" in old.method and MEASURE_HINT in old.method
    timed = [case("a", x_copy=SLOW), case("b", x_copy=FAST)]
    built_in = process_spread_note(timed, verdicts(timed))
    assert built_in is not None and "built in" in built_in and MEASURE_HINT in built_in
    untimed = [case("a"), case("b")]
    assert process_spread_note(untimed, verdicts(untimed)) is None  # nothing timed: nothing to say
    flagged = [case("a", x_copy=SLOW, flags=["unstable"]), case("b", x_copy=FAST)]
    assert process_spread_note(flagged, verdicts(flagged)) is None  # "cannot say": no interval to explain
    d = compare_json([case("a", x_copy=SLOW, spread=quiet), case("b", x_copy=FAST, spread=quiet)], "r.json", [])
    assert d["process_spread"] == quiet
