"""An edited or corrupted convergence file is refused on load, one line naming the file and the field.

Each case takes the hand-built convergence file of :mod:`tests.converge_fixture` (whose summaries are computed from
its seeds), breaks one number the way an edit would, and drives ``gcbench report`` and ``gcbench advise
--convergence`` through the CLI: exit 1, a single ``error:`` line with the file and the field, nothing printed as a
result.  The untouched file loads (so each refusal is the edit's doing).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.core.errors import ResultsError
from gcbench.results.store import load_run
from tests.converge_fixture import converge_record

runner = CliRunner()


def _case(d: dict[str, Any], label: str) -> dict[str, Any]:
    return next(c for c in d["cases"] if c["label"] == label)["convergence"]


def _set(path: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: path(d).__setitem__(key, value)


EDITS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "negative mean steps": (_set(lambda d: _case(d, "topk")["summary"]["steps_to_target"], "mean", -50.0),
                            "cases[2]: convergence.summary.steps_to_target.mean: -50 is outside [0, 200]"),
    "NaN mean steps": (_set(lambda d: _case(d, "topk")["summary"]["steps_to_target"], "mean", float("nan")),
                       "convergence.summary.steps_to_target.mean: nan is not a finite number"),
    "steps above the budget": (_set(lambda d: _case(d, "topk")["seeds"][0], "steps_to_target", 5000),
                               "convergence.seeds[0].steps_to_target: 5000 is outside [0, 200]"),
    "reached above the seeds": (_set(lambda d: _case(d, "signsgd")["summary"], "reached", 1000),
                                "cases[3]: convergence.summary.reached: 1000, more than the 3 seeds"),
    "reached not its seeds'": (_set(lambda d: _case(d, "signsgd")["summary"], "reached", 3),
                               "convergence.summary.reached: 3, but 1 of its seed runs say so"),
    "mean steps not its seeds'": (lambda d: _case(d, "topk")["summary"]["steps_to_target"].update(mean=150.0),
                                  "convergence.summary.steps_to_target.mean: 150, but its seeds' values average 153.333"),
    "final metric not its seeds'": (lambda d: _case(d, "topk")["summary"]["final_metric"].update(mean=0.879),
                                    "convergence.summary.final_metric.mean: 0.879, but its seeds' values average 0.876667"),
    "gap not the reference's": (lambda d: _case(d, "topk")["summary"]["gap"].update(mean=0.03),
                                "cases[2].convergence.summary.gap.mean: 0.03, but its seeds' values average 0.0233333"),
    "reached without steps": (_set(lambda d: _case(d, "randomk")["seeds"][1], "reached", True),
                              "convergence.seeds[1].reached: true, but steps_to_target is absent"),
}


@pytest.mark.parametrize("name", list(EDITS))
def test_an_edited_convergence_file_is_refused_naming_the_file_and_the_field(name: str, tmp_path: Path) -> None:
    edit, words = EDITS[name]
    data = converge_record()
    good = tmp_path / "good.json"
    good.write_text(json.dumps(data))
    load_run(good)  # the file before the edit is a valid one
    edit(data)
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ResultsError, match=r"edited\.json"):
        load_run(bad)
    for argv in (["report", str(bad)], ["advise", "--convergence", str(bad), "--compute-ms", "5"]):
        r = runner.invoke(app, argv)
        lines = r.stderr.strip().splitlines()
        assert r.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: ") and str(bad) in lines[0], r.output
        assert words in lines[0] and "Traceback" not in r.output and not r.stdout.strip(), lines[0]
