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
  the running case.

The clock is injected, so the arithmetic is tested without waiting.
"""

from __future__ import annotations

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

    def update(self, stage: str, done: int, total: int) -> None:
        """Take one progress call (other stages than ``case`` and ``step`` are ignored)."""
        now = self.clock()
        if stage == "case":
            self.total = total
            if done > self.done:
                if self._case_start is not None:
                    self.durations.append(now - self._case_start)
                self.done = done
                self._case_start, self._fraction = None, 0.0
        elif stage == "step" and total > 0:
            if self._case_start is None:
                self._case_start = now
            self._fraction = min(1.0, done / total)

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
