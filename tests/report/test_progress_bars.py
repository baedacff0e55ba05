"""The progress display (gcbench.cli.progress.StageBars): one bar per stage, one numbering, an ETA on every bar,
finished bars collapsed, nothing but the bars when stderr is not a terminal; and the ETAs of bench and train."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress, TextColumn

from gcbench.cli.progress import RunEta, StageBars
from gcbench.measure.runner import run_suite
from gcbench.measure.suite import parse_suite


def _display(terminal: bool) -> tuple[StageBars, Progress, io.StringIO, list[float]]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200, color_system=None)
    prog = Progress(TextColumn("{task.fields[stage]}"), TextColumn("{task.fields[eta]}"), console=console, auto_refresh=False)
    now = [0.0]
    return StageBars(prog, clock=lambda: now[0]), prog, out, now


def _rows(prog: Progress) -> dict[str, tuple[float, float | None, str]]:
    return {t.fields["stage"]: (t.completed, t.total, t.fields["eta"]) for t in prog.tasks}


def test_a_finished_bar_collapses_to_one_line_and_the_step_bar_just_goes() -> None:
    bars, prog, out, now = _display(terminal=True)
    bars.update("plan", 0, 2, json.dumps({"work": [10.0], "cases": ["a", "b"]}))
    for d in range(1, 5):
        now[0] = float(d)
        bars.update("gradients", d, 4, "m: forward + backward passes")
        if d == 1:  # its first call already counts one pass done: no rate from it alone
            assert _rows(prog)["gradients"][2] == "ETA …"
        elif d == 2:
            assert _rows(prog)["gradients"][2] == "ETA 0:02"  # 1 s a pass since the first call, 2 left
    assert "gradients" not in _rows(prog)  # built: its bar went
    assert "gradients m: forward + backward passes: 4 done in 0:03" in out.getvalue()  # timed from its first call
    bars.update("case", 0, 2, "a on s")
    bars.update("step", 0, 2, "a")
    now[0] = 6.0
    bars.update("step", 1, 2, "a")
    rows = _rows(prog)
    assert rows["step"][:2] == (1, 2) and rows["step"][2] == "ETA 0:02"  # its own rate: 2 s a step, one left
    assert rows["case"][2] == "ETA 0:06"  # a's rate (4 s for the case) on case b's equal work, plus a's last step
    now[0] = 8.0
    bars.update("step", 2, 2, "a")
    bars.update("case", 1, 2, "a done")
    assert set(_rows(prog)) == {"case"}  # the step bar went, without a line: it comes back with the next case
    assert "step" not in out.getvalue()
    bars.update("case", 1, 2, "b on s")
    bars.update("step", 0, 2, "b")
    assert set(_rows(prog)) == {"case", "step"}
    now[0] = 12.0
    bars.update("step", 2, 2, "b")
    bars.update("case", 2, 2, "b done")
    assert _rows(prog) == {} and "case 2 done in 0:08" in out.getvalue()  # from its first call (after the build)


def test_off_a_terminal_nothing_but_the_bars_is_written() -> None:
    bars, prog, out, now = _display(terminal=False)
    for d in range(1, 3):
        now[0] = float(d)
        bars.update("load", d, 2, "s: gradients into memory")
    bars.update("case", 0, 1, "a on s")
    bars.update("case", 1, 1, "a done")
    assert _rows(prog) == {} and out.getvalue() == ""


def test_a_bar_without_units_done_says_it_has_no_estimate_and_a_restart_starts_its_rate_over() -> None:
    bars, prog, _, now = _display(terminal=True)
    bars.update("compute", 0, 10, "m: forward + backward passes")
    assert _rows(prog)["compute"][2] == "ETA …"
    now[0] = 5.0
    bars.update("compute", 5, 10, "m")
    assert _rows(prog)["compute"][2] == "ETA 0:05"
    now[0] = 100.0
    bars.update("compute", 0, 10, "m")  # a second measurement: its clock starts again
    now[0] = 101.0
    bars.update("compute", 1, 10, "m")
    assert _rows(prog)["compute"][2] == "ETA 0:09"


def test_bench_cases_cost_their_compressors_fixed_part_plus_a_slope_per_element() -> None:
    """bench's plan (stage bench, one compressor and element count per case).  A bench case is a fresh process whose
    rounds stop at a budget: topk took 10 s at 100K elements and at 1M, and pricing elements proportionally said 3:40 left
    for 30 s of work.  Until a compressor is timed at two sizes every case of a compressor costs the same; then the slope
    it shows prices the sizes left, over each compressor's fixed part (a compressor not yet timed: the mean one)."""
    now = [0.0]
    eta = RunEta(clock=lambda: now[0], stage="bench")
    eta.update("plan", 0, 4, json.dumps({"stage": "bench", "labels": ["a", "a", "b", "b"], "case_work": [1e5, 1e6, 1e5, 1e6]}))
    eta.update("plan", 0, 4, json.dumps({"work": [1.0], "cases": ["x", "y", "z", "w"]}))  # the runner's plan: not bench's
    eta.update("bench", 0, 4, "a @ 100,000")  # no step calls: a bench case runs from its own call on
    now[0] = 10.0
    eta.update("bench", 1, 4, "a @ 1,000,000")
    assert eta.remaining() == pytest.approx(30.0)  # one size seen: a's 10 s for each case left
    now[0] = 20.0
    eta.update("bench", 2, 4, "b @ 100,000")
    assert eta.remaining() == pytest.approx(20.0)  # a took 10 s at both sizes: no slope; b at a's fixed part
    eta2 = RunEta(clock=lambda: now[0], stage="bench")
    now[0] = 0.0
    eta2.update("plan", 0, 4, json.dumps({"stage": "bench", "labels": ["a", "a", "b", "b"], "case_work": [1e5, 1e6, 1e5, 1e6]}))
    eta2.update("bench", 0, 4, "a")
    now[0] = 10.0
    eta2.update("bench", 1, 4, "a")
    now[0] = 28.0  # a: 10 s at 100K, 18 s at 1M: 8 s more for 900K elements
    eta2.update("bench", 2, 4, "b")
    slope = 8.0 / 9e5
    fixed_a = (10.0 - slope * 1e5 + 18.0 - slope * 1e6) / 2
    assert eta2.remaining() == pytest.approx(2 * fixed_a + slope * 1.1e6)
    assert eta2.text().startswith("ETA ")


def test_train_gets_an_eta_after_its_first_compressor() -> None:
    """train sends no plan and no steps: every compressor trains the same epochs, so each weighs the same."""
    now = [0.0]
    eta = RunEta(clock=lambda: now[0], stage="train")
    eta.update("train", 0, 3, "none: step 0")
    now[0] = 30.0
    eta.update("train", 0, 3, "none: step 40")
    assert eta.text() == "ETA …"
    now[0] = 60.0
    eta.update("train", 1, 3, "none done")
    assert eta.remaining() == pytest.approx(120.0)


def test_the_runners_bars_count_one_way(tmp_path: Path) -> None:
    """Every stage's count is units done (never going back within a bar, ending at its total) and no message carries
    a counter of its own (the old "step 4/10" beside a bar at 3/10)."""
    calls: list[tuple[str, int, int, str]] = []
    suite = parse_suite({"name": "t", "seed": 0, "metrics": {"timing": False, "repeats": 2},
                         "sources": [{"kind": "synthetic", "shapes": [[8, 4]], "workers": 2, "steps": 3}],
                         "compressors": [{"name": "none"}, {"name": "topk"}]})
    run_suite(suite, tmp_path, progress=lambda *c: calls.append(c))
    last: dict[str, int] = {}
    for stage, done, total, message in calls:
        if stage == "plan":
            continue
        assert not re.search(r"\b\d+ ?/ ?\d+\b", message), message
        assert 0 <= done <= total
        if stage in last and done < last[stage]:
            assert last[stage] == total and done == 0, (stage, last[stage], done)  # only a finished bar starts over
        last[stage] = done
    steps = [d for s, d, _, _ in calls if s == "step"]
    assert steps == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [d for s, d, _, _ in calls if s == "load"] == [1, 2, 3, 4, 5, 6]


def test_a_second_plan_of_a_stage_starts_its_eta_over() -> None:
    """advise times flagged kernels once more: a second bench sweep, with its own plan, after the first ended."""
    bars, prog, _, now = _display(terminal=False)
    plan = {"stage": "bench", "labels": ["a", "b"], "case_work": [1.0, 1.0]}
    bars.update("plan", 0, 2, json.dumps(plan))
    bars.update("bench", 0, 2, "a")
    now[0] = 4.0
    bars.update("bench", 1, 2, "b")
    now[0] = 8.0
    bars.update("bench", 2, 2, "done")
    bars.update("plan", 0, 1, json.dumps({**plan, "labels": ["b"], "case_work": [1.0]}))
    bars.update("bench", 0, 1, "b")
    assert _rows(prog)["bench"][:2] == (0, 1)
    assert bars.etas["bench"].done == 0 and bars.etas["bench"].total == 1
