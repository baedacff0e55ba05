"""How true is the run's ETA?  Record a suite's progress calls once, then replay them through the ETA.

Usage::

    python benchmarks/eta_replay.py record SUITE TRACE.json    # runs the suite (results to a temporary folder)
    python benchmarks/eta_replay.py replay TRACE.json          # the ETA at each quarter of the cases vs the truth

``record`` keeps every ``progress(stage, done, total, message)`` call of :func:`gcbench.measure.runner.run_suite`
with its time.  ``replay`` feeds them to :class:`gcbench.cli.progress.RunEta` on a replayed clock and prints,
when 25%, 50% and 75% of the cases are done, the ETA it showed against the time the run really still took.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path


def record(suite: str, trace: Path) -> None:
    from gcbench.measure.runner import run_suite
    from gcbench.measure.suite import find_suite, load_suite

    calls: list[list] = []
    t0 = time.monotonic()

    def progress(stage: str, done: int, total: int, message: str) -> None:
        calls.append([time.monotonic() - t0, stage, done, total, message])

    with tempfile.TemporaryDirectory() as tmp:
        run_suite(load_suite(find_suite(suite)), tmp, progress)
    trace.write_text(json.dumps({"suite": suite, "calls": calls}), encoding="utf-8")
    print(f"{len(calls)} progress calls over {calls[-1][0]:.0f} s written to {trace}")


def replay(trace: Path) -> None:
    from gcbench.cli.progress import RunEta

    data = json.loads(trace.read_text(encoding="utf-8"))
    calls = data["calls"]
    if not any(c[1] == "plan" for c in calls):  # recorded before the runner announced its plan: the same plan, from the suite
        from gcbench.measure.footprint import source_build_work, source_work
        from gcbench.measure.suite import find_suite, load_suite

        suite = load_suite(find_suite(data["suite"]))
        plan = {"work": [source_work(s) for s in suite.sources], "build": [source_build_work(s) for s in suite.sources],
                "cases": [c.label for c in suite.compressors]}
        calls.insert(0, [0.0, "plan", 0, len(suite.sources) * len(suite.compressors), json.dumps(plan)])
    now = [0.0]
    eta = RunEta(clock=lambda: now[0])
    end = calls[-1][0]
    total = max(c[3] for c in calls if c[1] == "case")
    marks = {round(total * q) for q in (0.25, 0.5, 0.75)}
    print(f"{data['suite']}: {total} cases, {end:.0f} s")
    for t, stage, done, tot, message in calls:
        now[0] = t
        eta.update(stage, done, tot, message)
        if stage == "case" and done in marks and message.endswith("done"):
            marks.discard(done)
            left = eta.remaining()
            truth = end - t
            err = "" if left is None or truth <= 0 else f"{100 * (left / truth - 1):+.0f}%"
            print(f"  {done}/{total} cases at {t:.0f} s: ETA said {left or 0:.0f} s left, it took {truth:.0f} s ({err})")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "record":
        record(sys.argv[2], Path(sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[1] == "replay":
        replay(Path(sys.argv[2]))
    else:
        print(__doc__.split("Usage::")[1].split("``record``")[0].strip(), file=sys.stderr)
        raise SystemExit(2)
