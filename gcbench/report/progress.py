"""The overall ETA of a run shown in the progress display, from the cases' measured times.

The runner reports progress as ``progress(stage, done, total, message)`` (see
:mod:`gcbench.measure.runner`): stage ``case`` counts finished cases out of the suite's total and
stage ``step`` counts the steps of the case that is running.  :class:`RunEta` turns those calls
into "cases done / total, elapsed, time left":

* a case is timed from its first step to the call that counts it done, so building a source and
  computing its gradients (paid once per source, before its first case) is not charged to a case;
* the time per case is the mean of the cases timed so far (cases counted without running a step,
  those of a source that failed to build, are not timed);
* before any case has finished, the running case's own rate stands in: its elapsed time divided by
  the fraction of its steps done;
* the time left is the mean case time times the cases not started, plus the unfinished fraction of
  the running case;
* with the runner's plan (stage ``plan``: each source's work — elements × workers × steps — and the
  compressors, cases source-major), cases are weighed instead: each compressor's seconds per unit of
  work are learned from its cases done and priced at the work of the cases left, and building each
  source not started is priced at the rate the started ones took per unit of their build work (a
  live model's activations × workers × steps).  On the quick suite the unweighted
  ETA was 80% short a quarter in: a cast takes milliseconds, a sparsifier seconds.

The clock is injected, so the arithmetic is tested without waiting.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable


def format_seconds(seconds: float) -> str:
    """``H:MM:SS`` (or ``M:SS`` under an hour) of a non-negative duration, rounded up to a whole second."""
    s = int(-(-seconds // 1))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class RunEta:
    """Overall time left of a run, fed with the runner's progress calls (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.total = 0  # cases in the run (0 until the first ``case`` call)
        self.done = 0  # cases counted done
        self.durations: list[float] = []  # seconds of each timed case
        self._case_start: float | None = None  # when the running case's first step began
        self._fraction = 0.0  # steps done / steps of the running case
        # the runner's plan (stage ``plan``): each source's work and the compressor labels, cases source-major
        self._work: list[float | None] | None = None
        self._build: list[float | None] | None = None  # what building each source costs (a live model: its activations)
        self._labels: list[str] = []
        self._timed: dict[int, float] = {}  # case index -> seconds, for the plan's weighting
        self._gaps: dict[int, float] = {}  # source index -> seconds before its first case's first step (building it)
        self._last_done_at: float | None = None  # when the previous case was counted done (or the plan came)

    def update(self, stage: str, done: int, total: int, message: str = "") -> None:
        """Take one progress call (other stages than ``plan``, ``case`` and ``step`` are ignored)."""
        now = self.clock()
        if stage == "plan":
            self._plan(message, total, now)
        elif stage == "case":
            self.total = total
            if done > self.done:
                if self._case_start is not None:
                    self.durations.append(now - self._case_start)
                    self._timed[self.done] = now - self._case_start
                self.done = done
                self._case_start, self._fraction = None, 0.0
                self._last_done_at = now
        elif stage == "step" and total > 0:
            if self._case_start is None:
                self._case_start = now
                n = len(self._labels)
                if self._last_done_at is not None and n and self.done % n == 0:  # a source's first case: it was built
                    self._gaps[self.done // n] = now - self._last_done_at
            self._fraction = min(1.0, done / total)

    def _plan(self, message: str, total: int, now: float) -> None:
        try:
            plan = json.loads(message)
            work = [None if w is None else float(w) for w in plan["work"]]
            build = [None if w is None else float(w) for w in plan.get("build") or plan["work"]]
            labels = [str(x) for x in plan["cases"]]
        except (ValueError, KeyError, TypeError):
            return  # no plan: every case weighs the same
        if labels and len(work) * len(labels) == total and len(build) == len(work) and all(
                w is None or w > 0 for w in (*work, *build)):
            self._work, self._build, self._labels, self.total, self._last_done_at = work, build, labels, total, now

    def _weighted_left(self) -> float | None:
        """Seconds left by the plan: each case's seconds per unit of its source's work, learned per compressor from
        the cases done (a compressor not yet timed: the mean rate), times its work; plus building each source not
        yet started, at the rate the started ones took.  None where the plan cannot say (a source of unknown work)."""
        work, labels = self._work, self._labels
        if work is None or not self._timed or any(w is None for w in work):
            return None
        n = len(labels)
        rates: dict[str, list[float]] = {}
        for i, secs in self._timed.items():
            rates.setdefault(labels[i % n], []).append(secs / work[i // n])  # type: ignore[operator]
        mean_rate = sum(r for rs in rates.values() for r in rs) / sum(len(rs) for rs in rates.values())
        left = 0.0
        for i in range(self.done, self.total):
            rs = rates.get(labels[i % n])
            cost = (sum(rs) / len(rs) if rs else mean_rate) * work[i // n]  # type: ignore[operator]
            left += cost * (1.0 - self._fraction) if i == self.done and self._case_start is not None else cost
        build = self._build or work
        if self._gaps and all(build[s] is not None for s in range(len(build))):
            gap_rate = sum(self._gaps.values()) / sum(build[s] for s in self._gaps)  # type: ignore[misc]
            started = (self.done + (1 if self._case_start is not None else 0) + n - 1) // n
            left += sum(gap_rate * build[s] for s in range(started, len(build)))  # type: ignore[operator]
        return left

    def per_case(self) -> float | None:
        """Estimated seconds per case: the mean of the timed cases, else the running case's rate."""
        if self.durations:
            return sum(self.durations) / len(self.durations)
        if self._case_start is not None and self._fraction > 0:
            return (self.clock() - self._case_start) / self._fraction
        return None

    def remaining(self) -> float | None:
        """Estimated seconds until every case is done; ``None`` while nothing has been measured."""
        if self.total <= 0:
            return None
        if self.done >= self.total:
            return 0.0
        weighted = self._weighted_left()
        if weighted is not None:
            return max(0.0, weighted)
        per = self.per_case()
        if per is None:
            return None
        left = self.total - self.done
        if self._case_start is not None:  # the running case is partly done
            left -= self._fraction
        return max(0.0, per * left)

    def text(self) -> str:
        """The display's ETA cell: ``ETA 1:05``, or ``ETA …`` before a first estimate."""
        left = self.remaining()
        return "ETA …" if left is None else f"ETA {format_seconds(left)}"
