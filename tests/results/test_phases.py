"""Per-phase views: windows from step phases, window metrics, the runner's records and the reports.

The runner records, for every case, the whole model's per-step aggregate error, cosine and the
cumulative aggregate error; LGC's exchange names each step's phase.  The numbers checked here are
recomputed from first principles (the compressors' own decode of what they send, plain sums), not
read back from the implementation.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.compressors import registry
from gcbench.measure.runner import derive_seed, run_suite, suite_windows
from gcbench.measure.source_data import build_source
from gcbench.measure.suite import parse_suite
from gcbench.report.html_page import render_html
from gcbench.report.load import LoadedRun
from gcbench.report.markdown import markdown_summary
from gcbench.report.terminal import phase_table
from gcbench.results.phases import Window, case_phases, per_step_sent, phase_rows, phase_windows, source_windows, window_metrics

# ----------------------------------------------------------------------------- windows


def test_windows_are_runs_of_equal_names() -> None:
    assert phase_windows(["dense", "dense", "topk", "topk", "topk", "compressed"]) == [
        Window("dense", 0, 1), Window("topk", 2, 4), Window("compressed", 5, 5)]
    # a phase that comes back is a new window with its own name
    assert phase_windows(["a", "b", "a", "a"]) == [Window("a", 0, 0), Window("b", 1, 1), Window("a#2", 2, 3)]
    assert phase_windows([None, None]) == [Window("—", 0, 1)]
    assert phase_windows([]) == []
    assert Window("topk", 2, 4).steps == 3 and Window("topk", 2, 4).text() == "topk (steps 2–4)"


def _case(steps: int = 4, **extra: Any) -> dict[str, Any]:
    case = {
        "label": "c", "status": "ok", "steps": steps, "size": {"numel": 1000, "traffic_ratio": 7.0},
        "traffic": {
            "a:push": {"per_step_sent": [4000.0, 4000.0, 0.0, 0.0]},
            "b:push": {"per_step_sent": [0.0, 0.0, 100.0, 300.0]},
            "b:extra": {"per_step_sent": [0.0, 0.0, 100.0, 100.0]},
            "setup:weights": {"per_step_sent": [0.0, 0.0, 5000.0, 0.0]},  # one-time: never in a window
        },
        "aggregate": {"per_step_q": [0.0, 0.0, 0.5, 1.5], "per_step_cosine": [1.0, 1.0, 0.5, None],
                      "sum_drift": [0.0, 0.0, 0.2, 0.4]},
    }
    case.update(extra)
    return case


def test_window_metrics_sum_every_message_but_setup() -> None:
    c = _case()
    assert per_step_sent(c) == [4000.0, 4000.0, 200.0, 400.0]
    m = window_metrics(c, Window("b", 2, 3))
    assert m is not None
    assert m["sent_per_worker"] == 300.0 and m["ratio"] == pytest.approx(4000 / 300)
    assert m["aggregate_q"] == 1.0 and m["aggregate_cosine"] == 0.5  # a missing value is skipped, not zero
    assert m["sum_drift"] == 0.4 and m["steps"] == 2
    first = window_metrics(c, Window("a", 0, 1))
    assert first is not None and first["ratio"] == 1.0 and first["aggregate_q"] == 0.0
    assert window_metrics(c, Window("late", 3, 5)) is None  # beyond the case's steps
    assert set(case_phases(c, [Window("a", 0, 1), Window("b", 2, 3), Window("x", 4, 4)])) == {"a", "b"}
    assert m["body_ratio"] is None  # the traffic did not record body bytes: no body-only ratio, not a guess


def test_body_ratio_counts_payload_bodies_only() -> None:
    c = _case()
    bodies = {"a:push": [3990.0, 3990.0, 0.0, 0.0], "b:push": [0.0, 0.0, 60.0, 260.0], "b:extra": [0.0, 0.0, 40.0, 40.0],
              "setup:weights": [0.0, 0.0, 4980.0, 0.0]}
    for ph, body in bodies.items():
        c["traffic"][ph]["per_step_sent_body"] = body
    m = window_metrics(c, Window("b", 2, 3))
    assert m is not None and m["body_per_worker"] == 200.0  # (100 + 300) / 2 steps, setup excluded
    assert m["body_ratio"] == pytest.approx(4000 / 200) and m["ratio"] == pytest.approx(4000 / 300)
    c["traffic"]["b:extra"]["per_step_sent_body"] = None  # one phase without body counts: none for the case
    assert window_metrics(c, Window("b", 2, 3))["body_ratio"] is None


def test_phase_rows_measure_every_case_over_the_phased_cases_windows() -> None:
    phased = _case(step_phases=["a", "a", "b", "b"])
    other = _case(label="other")
    failed = {"label": "f", "status": "error", "error": "boom"}
    assert source_windows([other, failed]) == []
    windows = source_windows([other, phased, failed])
    assert windows == [Window("a", 0, 1), Window("b", 2, 3)]
    rows = phase_rows([phased, other, failed], windows)
    assert [r.case.label for r in rows] == ["c", "other"]
    assert rows[1].windows[1]["ratio"] == pytest.approx(4000 / 300)
    assert rows[0].overall_ratio == 7.0 and rows[0].final_drift == 0.4 and rows[0].overall_q == 0.5


# ----------------------------------------------------------------------------- the runner's records

SUITE = {
    "name": "phases", "seed": 5,
    "sources": [{"kind": "synthetic", "shapes": [[100, 200]], "workers": 4, "steps": 5}],
    "metrics": {"repeats": 1, "timing": False},
    "compressors": [
        {"name": "lgc", "label": "lgc", "params": {"density": 0.01, "dense_steps": 1, "train_steps": 2, "ae_iters": 1}},
        {"name": "topk", "label": "topk+ef", "params": {"density": 0.01, "error_feedback": True}},
        {"name": "none", "label": "none"},
    ],
}


@pytest.fixture(scope="module")
def phased_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    torch.set_num_threads(1)
    out = run_suite(parse_suite(SUITE), tmp_path_factory.mktemp("runs"))
    assert not out.failed, out.failed
    return out.path, out.records


def test_suite_windows_come_from_the_first_phased_compressor() -> None:
    suite = parse_suite(SUITE)
    assert suite_windows(suite, 5) == [Window("dense", 0, 0), Window("topk", 1, 2), Window("compressed", 3, 4)]
    assert suite_windows(suite, 2) == [Window("dense", 0, 0), Window("topk", 1, 1)]
    plain = parse_suite({**SUITE, "compressors": SUITE["compressors"][1:]})
    assert suite_windows(plain, 5) == []


def test_lgc_case_records_its_phases(phased_run: tuple[Path, list[dict[str, Any]]]) -> None:
    lgc, topk, none = phased_run[1]
    assert lgc["step_phases"] == ["dense", "topk", "topk", "compressed", "compressed"]
    assert "step_phases" not in topk and "phases" not in none
    spans = [(r["name"], r["first"], r["last"]) for r in topk["windows"]]
    assert spans == [(r["name"], r["first"], r["last"]) for r in none["windows"]] == [("dense", 0, 0), ("topk", 1, 2), ("compressed", 3, 4)]
    # per-worker traffic by window: all-gather is symmetric; LGC's PS leader (w0) sends latent + indices + innovation
    sym = topk["windows"][2]["sent_by_worker"]
    assert len(sym) == 4 and max(sym) - min(sym) <= 0.02 * max(sym)
    lead = lgc["windows"][2]["sent_by_worker"]
    assert lead[0] > 2 * max(lead[1:]) and len(set(lead[1:])) == 1
    # they add up to the per-step means the phase ratio is computed from
    assert sum(lead) / 4 == pytest.approx(lgc["phases"]["compressed"]["sent_per_worker"])
    ph = lgc["phases"]
    assert list(ph) == ["dense", "topk", "compressed"]
    assert (ph["dense"]["first"], ph["dense"]["last"], ph["compressed"]["first"], ph["compressed"]["last"]) == (0, 0, 3, 4)
    # the dense phase pushes fp32 (a header more than the dense bytes) and aggregates exactly
    assert 0.99 < ph["dense"]["ratio"] < 1.0 and ph["dense"]["aggregate_q"] < 1e-12 and ph["dense"]["sum_drift"] < 1e-6
    # phase 3 sends less than phase 2's own top-k (the leader's latent + innovations)
    assert ph["compressed"]["ratio"] > ph["topk"]["ratio"] > 20
    # body-only: every message's body, headers excluded — more than the with-header ratio, never less
    for rec in (lgc, topk):
        for tr in rec["traffic"].values():
            assert all(0 <= b < s or b == s == 0 for b, s in zip(tr["per_step_sent_body"], tr["per_step_sent"], strict=True))
    assert ph["compressed"]["body_ratio"] > ph["compressed"]["ratio"]


def test_aggregate_records_match_a_direct_computation(phased_run: tuple[Path, list[dict[str, Any]]]) -> None:
    """top-k + EF aggregated by all-gather: recompute agg q, cosine and the cumulative error by hand."""
    topk_rec, none_rec = phased_run[1][1], phased_run[1][2]
    suite = parse_suite(SUITE)
    src = build_source(suite.sources[0], derive_seed(suite.seed, "source", 0))
    comp = registry.create("topk", density=0.01, error_feedback=True)
    states = [comp.init_state(w) for w in range(4)]  # top-k is deterministic: the seeds do not matter
    sum_err = sum_mean = win_err = win_mean = None
    starts = {0, 1, 3}  # LGC's phases: dense 0, topk 1–2, compressed 3–4
    for t in range(5):
        xs = [next(iter(src.gradients(t, w).values())).float() for w in range(4)]
        agg = sum(comp.compress_and_decode(x, s)[1] for x, s in zip(xs, states, strict=True)) / 4
        mean = sum(xs) / 4
        q = float((agg - mean).double().pow(2).sum() / mean.double().pow(2).sum())
        cos = float((agg.double() * mean.double()).sum() / (agg.double().norm() * mean.double().norm()))
        sum_err = agg - mean if sum_err is None else sum_err + (agg - mean)
        sum_mean = mean if sum_mean is None else sum_mean + mean
        drift = float(sum_err.double().norm() / sum_mean.double().norm())
        win_err = agg - mean if t in starts else win_err + (agg - mean)
        win_mean = mean if t in starts else win_mean + mean
        assert topk_rec["aggregate"]["window_drift"][t] == pytest.approx(float(win_err.double().norm() / win_mean.double().norm()),
                                                                         rel=1e-5)
        assert topk_rec["aggregate"]["per_step_q"][t] == pytest.approx(q, rel=1e-5)
        assert topk_rec["aggregate"]["per_step_cosine"][t] == pytest.approx(cos, rel=1e-5)
        assert topk_rec["aggregate"]["sum_drift"][t] == pytest.approx(drift, rel=1e-5)
    assert none_rec["aggregate"]["sum_drift"] == [0.0] * 5 == none_rec["aggregate"]["window_drift"]
    # the window metrics read the restarted drift at each window's last step
    m = window_metrics(topk_rec, Window("compressed", 3, 4))
    assert m is not None and m["drift"] == topk_rec["aggregate"]["window_drift"][4] != m["sum_drift"]
    assert window_metrics(topk_rec, Window("other", 2, 4))["drift"] is None  # not a window the runner restarted at
    assert all(math.isclose(c, 1.0, rel_tol=1e-9) for c in none_rec["aggregate"]["per_step_cosine"])


def test_reports_show_the_phase_table(phased_run: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    path, records = phased_run
    run = LoadedRun(path, json.loads(path.read_text()))
    md = markdown_summary(run)
    assert "Per phase: dense (step 0), topk (steps 1–2), compressed (steps 3–4)." in md
    header = next(line for line in md.splitlines() if line.startswith("| case | dense ratio"))
    assert "compressed agg q" in header and "run ratio" in header and "compressed body ratio" in header
    rows = [line for line in md.splitlines() if line.startswith("| lgc") or line.startswith("| topk+ef") or line.startswith("| none")]
    assert len([r for r in rows if r.count("|") == header.count("|")]) == 3  # every case, over the same windows
    assert "| lgc † | compressed (steps 3–4) |" in md  # the per-worker table of the phased case
    table = phase_table(records, "t")
    assert table is not None and table.row_count == 3
    assert phase_table(records[1:], "t") is None  # the phased case did not run (failed): no table
    bare = [{k: v for k, v in c.items() if k != "windows"} for c in records]
    assert phase_table(bare, "t") is not None  # an older record without windows: the phased case's own

    html = render_html([run])
    for kind in ("phase_ratio", "aggregate_drift", "phase_pareto"):
        assert f'data-plot="{kind}"' in html
    assert "Per phase: dense (step 0)" in html

    r = CliRunner().invoke(app, ["report", str(path)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "per phase: dense (step 0), topk (steps 1–2), compressed (steps 3–4)" in r.output
    assert "compressed agg q" in r.output and "Σ drift (end)" in r.output
    assert "compressed ratio (body)" in r.output  # each window's ratio and body-only ratio share a cell
