"""A convergence file with long curves is reported from a bounded number of points per curve, its numbers exact.

The file is synthetic (generated here, consistent with the schema: every summary computed from its seeds by
:func:`gcbench.converge.seed_summary.summarize`), with curves of :data:`EVALS` evaluations each, several times
:data:`~gcbench.results.converge_thin.MAX_CURVE_POINTS`.  What the report keeps is counted, not timed: each seed's
curve and each summary curve at most the cap (plus a seed's point at its steps to the target), the CSV's curve rows
the cap per compressor, and every summary number equal to the one read without thinning.
"""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.converge import seed_summary
from gcbench.report.load import LoadedRun, load_runs
from gcbench.results.converge_record import ConvergeCase
from gcbench.results.converge_thin import MAX_CURVE_POINTS, THINNED_FROM, kept_indices
from gcbench.results.store import load_run

runner = CliRunner()

EVALS = 4 * MAX_CURVE_POINTS + 7  # not a multiple of the cap: the spacing is uneven
STEPS = EVALS - 1
TARGET = 0.5


def _big_record() -> dict[str, Any]:
    settings = {"task": "digits", "metric": "accuracy", "workers": 2, "steps": STEPS, "optimizer": "sgd", "lr": 0.1,
                "eval_every": 1, "seeds": [0, 1], "target_rule": "value", "target": TARGET}
    cases, ref_finals = [], None
    for ci, label in enumerate(("none", "topk", "qsgd")):
        seeds = []
        for s in (0, 1):
            top = 0.9 - 0.05 * ci - 0.01 * s
            curve = [{"step": t, "train_loss": 2.0 - t / STEPS, "eval_loss": 2.1 - t / STEPS, "metric": top * t / STEPS}
                     for t in range(STEPS + 1)]
            hit = seed_summary.steps_to_target(curve, TARGET)
            seeds.append({"seed": s, "status": "ok", "steps_run": STEPS, "curve": curve, "final_metric": curve[-1]["metric"],
                          "final_loss": curve[-1]["eval_loss"], "reached": hit is not None, "steps_to_target": hit})
        summary = seed_summary.summarize(seeds, ref_finals, TARGET, "accuracy", STEPS)
        if ref_finals is None:
            ref_finals = {r["seed"]: r["final_metric"] for r in seeds}
        cases.append({"label": label, "status": "ok", "compressor": label,
                      "convergence": {"settings": settings, "reference": ci == 0, "seeds": seeds, "summary": summary}})
    return {"schema_version": 1, "kind": "converge", "run_id": "big", "status": "complete", "cases": cases}


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.json"
    path.write_text(json.dumps(_big_record()))
    return path


def test_a_long_convergence_file_keeps_a_bounded_number_of_points_and_exact_numbers(big: Path) -> None:
    (run,) = load_runs([str(big)])
    full = load_run(big)  # the file as it is, every point
    for case, whole in zip(run.cases, full.cases, strict=True):
        assert isinstance(case, ConvergeCase) and case.convergence is not None and whole.convergence is not None
        s, w = case.convergence.summary, whole.convergence.summary
        assert s is not None and w is not None and len(w.curve_steps or []) == EVALS
        assert len(s.curve_steps or []) == MAX_CURVE_POINTS and s.extra(THINNED_FROM) == EVALS
        assert all(len(getattr(s, k) or []) == MAX_CURVE_POINTS for k in ("curve_mean", "curve_low", "curve_high", "loss_mean"))
        assert (s.curve_steps or [])[0] == 0 and (s.curve_steps or [])[-1] == STEPS
        for name in ("final_metric", "gap", "steps_to_target"):  # what the report prints: the summary, exact
            assert getattr(s, name) == getattr(w, name)
        assert (s.reached, s.diverged, s.seeds) == (w.reached, w.diverged, w.seeds)
        for seed in case.convergence.seeds or []:
            steps = [p.step for p in seed.curve or []]
            assert len(steps) <= MAX_CURVE_POINTS + 1 and seed.steps_to_target in steps and steps[-1] == STEPS
    assert "drawn at 1,000 evenly spaced evaluations of the file's 4,007" in _footnote(run)


def _footnote(run: LoadedRun) -> str:
    from gcbench.report.convergence import footnote

    return footnote(run)


def test_the_reports_csv_holds_the_kept_points_of_each_curve(big: Path, tmp_path: Path) -> None:
    out = tmp_path / "csv"
    r = runner.invoke(app, ["report", str(big), "--csv", str(out)])
    assert r.exit_code == 0, r.output
    with (out / "steps.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {c: sum(row["case"] == c for row in rows) for c in ("none", "topk", "qsgd")} == dict.fromkeys(
        ("none", "topk", "qsgd"), MAX_CURVE_POINTS)


def test_kept_indices_are_evenly_spaced_with_both_ends_and_the_must_haves() -> None:
    assert kept_indices(10, 20) == list(range(10))
    idx = kept_indices(EVALS, MAX_CURVE_POINTS, must=[1234])
    assert idx[0] == 0 and idx[-1] == EVALS - 1 and 1234 in idx and len(idx) <= MAX_CURVE_POINTS + 1
    assert idx == sorted(set(idx)) and max(b - a for a, b in itertools.pairwise(idx)) <= 5
