"""The progress display's numbers: the ETA of a command's cases (:class:`RunEta`) and the bars (:class:`StageBars`).

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
* the machine's load is followed (:meth:`RunEta.speed`): once more than :data:`RECENT` cases are timed, the
  time left is scaled by how long the last :data:`RECENT` cases took against what the whole run's rates predict
  for them, so a machine that became loaded mid-run (other jobs, a shared CI runner) gets a longer ETA within
  a few cases, and one that became quiet a shorter one, instead of the run-long mean lagging behind;
* with the runner's plan (stage ``plan``: each source's work — elements × workers × steps — and the
  compressors, cases source-major), cases are weighed instead: each compressor's seconds per unit of
  work are learned from its cases done and priced at the work of the cases left, and building each
  source not started is priced at the rate the started ones took per unit of their build work (a
  live model's activations × workers × steps).  On the quick suite the unweighted
  ETA was 80% short a quarter in: a cast takes milliseconds, a sparsifier seconds.

Other commands count their cases on their own stage (``RunEta(stage=...)``): ``bench`` (bench, and
advise's kernels) sends a per-case plan (each case's compressor and element count) and times a case
from its own call to the next.  A bench case is a fresh process whose rounds stop at a time budget,
so its seconds are not proportional to its elements (topk took 10 s at 100K elements and at 1M
here): a case costs its compressor's fixed part plus a slope per element shared by all compressors,
the slope learned from a compressor timed at two sizes (none yet: 0, every case of a compressor
the same), the fixed part from each compressor's cases (one not yet timed: the mean of those that
are); ``train`` sends no plan
(every compressor trains the same epochs on the same task, so each weighs the same) and gets its
estimate once its first compressor is done.

The clock is injected, so the arithmetic is tested without waiting.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, cast


def format_seconds(seconds: float) -> str:
    """``H:MM:SS`` (or ``M:SS`` under an hour) of a non-negative duration, rounded up to a whole second."""
    s = int(-(-seconds // 1))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


#: the cases whose durations say how fast the machine is now (:meth:`RunEta.speed`)
RECENT = 3
#: the most the recent cases may scale the estimate either way (one odd case must not multiply it by 100)
SPEED_BOUNDS = (0.25, 4.0)


class RunEta:
    """Overall time left of a run, fed with the runner's progress calls (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, stage: str = "case") -> None:
        self.clock = clock
        self.stage = stage  # the stage that counts this command's cases: case (run, compare), bench, train
        self.total = 0  # cases in the run (0 until the first ``case`` call)
        self.done = 0  # cases counted done
        self.durations: list[float] = []  # seconds of each timed case
        self._case_start: float | None = None  # when the running case's first step began
        self._fraction = 0.0  # steps done / steps of the running case
        # the runner's plan (stage ``plan``): each source's work and the compressor labels, cases source-major
        # per case, in order: its compressor label, its work and its source (None: no source to build, a bench case)
        self._work: list[float | None] | None = None
        self._labels: list[str] = []
        self._sources: list[int | None] = []
        self._build: list[float | None] = []  # what building each source costs (a live model: its activations)
        self._affine = False  # a per-case plan (bench): a case costs its compressor's fixed part + a slope × its elements
        self._timed: dict[int, float] = {}  # case index -> seconds, for the plan's weighting
        self._gaps: dict[int, float] = {}  # source index -> seconds before its first case's first step (building it)
        self._last_done_at: float | None = None  # when the previous case was counted done (or the plan came)

    def update(self, stage: str, done: int, total: int, message: str = "") -> None:
        """Take one progress call (other stages than ``plan``, the counting stage and ``step`` are ignored)."""
        now = self.clock()
        if stage == "plan":
            self._plan(message, total, now)
        elif stage == self.stage:
            self.total = total
            if done > self.done:
                if self._case_start is not None:
                    self.durations.append(now - self._case_start)
                    self._timed[self.done] = now - self._case_start
                self.done = done
                self._case_start, self._fraction = None, 0.0
                self._last_done_at = now
            if self._case_start is None and self.stage != "case" and done < total:
                self._case_start = now  # a stage without step calls (bench, train): the next case runs from this call on
        elif stage == "step" and total > 0:
            if self._case_start is None:
                self._case_start = now
                src = self._source_of(self.done)
                if self._last_done_at is not None and src is not None and self._source_of(self.done - 1) != src:
                    self._gaps[src] = now - self._last_done_at  # a source's first case: the gap was building it
            self._fraction = min(1.0, done / total)

    def _source_of(self, case: int) -> int | None:
        return self._sources[case] if self._work is not None and 0 <= case < len(self._sources) else None

    def _plan(self, message: str, total: int, now: float) -> None:
        """Read a plan: the runner's (``work`` and ``build`` per source, ``cases`` the compressor labels, cases
        source-major) or a per-case one (``labels`` and ``case_work``, one each per case: a bench's sizes)."""
        try:
            plan = json.loads(message)
            if plan.get("stage", "case") != self.stage:
                return  # another stage's plan
            affine = "case_work" in plan
            if affine:
                work = [None if w is None else float(w) for w in plan["case_work"]]
                labels = [str(x) for x in plan["labels"]]
                sources: list[int | None] = [None] * len(work)
                build: list[float | None] = []
                ok = len(work) == len(labels) == total
            else:
                per_source = [None if w is None else float(w) for w in plan["work"]]
                build = [None if w is None else float(w) for w in plan.get("build") or plan["work"]]
                names = [str(x) for x in plan["cases"]]
                ok = bool(names) and len(per_source) * len(names) == total and len(build) == len(per_source)
                work = [w for w in per_source for _ in names]
                labels = [c for _ in per_source for c in names]
                sources = [s for s in range(len(per_source)) for _ in names]
        except (ValueError, KeyError, TypeError):
            return  # no plan: every case weighs the same
        if ok and labels and all(w is None or w > 0 for w in (*work, *build)):
            self._work, self._build, self._labels, self._sources = work, build, labels, sources
            self._affine = affine
            self.total, self._last_done_at = total, now

    def _weighted_left(self) -> float | None:
        """Seconds left by the plan: each case's seconds per unit of its work, learned per compressor from the cases
        done (a compressor not yet timed: the mean rate), times its work; plus building each source not yet started,
        at the rate the started ones took.  None where the plan cannot say (a case of unknown work)."""
        if self._work is None or not self._timed or any(w is None for w in self._work):
            return None
        work, labels = cast(list[float], self._work), self._labels  # every case's work is known (checked above)
        if self._affine:
            return self._affine_left()
        rates: dict[str, list[float]] = {}
        for i, secs in self._timed.items():
            rates.setdefault(labels[i], []).append(secs / work[i])
        mean_rate = sum(r for rs in rates.values() for r in rs) / sum(len(rs) for rs in rates.values())
        left = 0.0
        for i in range(self.done, self.total):
            rs = rates.get(labels[i])
            cost = (sum(rs) / len(rs) if rs else mean_rate) * work[i]
            left += cost * (1.0 - self._fraction) if i == self.done and self._case_start is not None else cost
        if self._gaps and self._build and all(b is not None for b in self._build):
            build = cast(list[float], self._build)  # every source's cost is known (checked above)
            gap_rate = sum(self._gaps.values()) / sum(build[s] for s in self._gaps)
            running = self.done if self._case_start is not None else self.done - 1
            started = max((s for s in self._sources[:running + 1] if s is not None), default=-1)
            left += sum(gap_rate * build[s] for s in range(started + 1, len(build)))
        return left

    def _affine_left(self) -> float:
        """Seconds left of a per-case plan: case i costs fixed[label_i] + slope × work_i (see the module docstring)."""
        work, labels = self._work or [], self._labels
        by_label: dict[str, list[tuple[float, float]]] = {}  # label -> (work, seconds) of its cases done
        for i, secs in self._timed.items():
            by_label.setdefault(labels[i], []).append((float(work[i] or 0.0), secs))
        slopes = []
        for pts in by_label.values():  # a compressor timed at two sizes or more: its least-squares slope
            ws = [w for w, _ in pts]
            if len(set(ws)) > 1:
                mw, mt = sum(ws) / len(ws), sum(t for _, t in pts) / len(pts)
                slopes.append(sum((w - mw) * (t - mt) for w, t in pts) / sum((w - mw) ** 2 for w in ws))
        slope = max(0.0, sum(slopes) / len(slopes)) if slopes else 0.0
        fixed = {lab: sum(t - slope * w for w, t in pts) / len(pts) for lab, pts in by_label.items()}
        mean_fixed = sum(fixed.values()) / len(fixed)
        left = 0.0
        for i in range(self.done, self.total):
            cost = max(0.0, fixed.get(labels[i], mean_fixed) + slope * float(work[i] or 0.0))
            left += cost * (1.0 - self._fraction) if i == self.done and self._case_start is not None else cost
        return left

    def _predicted(self, i: int) -> float | None:
        """Seconds the whole run's history predicts for timed case ``i``: its compressor's mean rate × its work
        under a plan, else the mean of every timed case (None: the plan cannot price it)."""
        if self._work is None or self._affine:
            return sum(self._timed.values()) / len(self._timed)
        work = self._work[i]
        rates = [secs / w for j, secs in self._timed.items() if self._labels[j] == self._labels[i] and (w := self._work[j])]
        return None if work is None or not rates else sum(rates) / len(rates) * work

    def speed(self) -> float:
        """How much slower (above 1) or faster the machine runs now than over the run: the last :data:`RECENT` timed
        cases' seconds over what the run's history predicts for them, bounded by :data:`SPEED_BOUNDS`; 1.0 until
        more than :data:`RECENT` cases are timed (no history to compare with)."""
        if len(self._timed) <= RECENT or self._affine:  # a bench case stops at a time budget: its seconds are not the load's
            return 1.0
        last = sorted(self._timed)[-RECENT:]
        predictions = [self._predicted(i) for i in last]
        if any(p is None for p in predictions):
            return 1.0
        predicted = cast(list[float], predictions)  # every one known (checked above)
        if not sum(predicted):
            return 1.0
        lo, hi = SPEED_BOUNDS
        return min(hi, max(lo, sum(self._timed[i] for i in last) / sum(predicted)))

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
            return max(0.0, weighted * self.speed())
        per = self.per_case()
        if per is None:
            return None
        left: float = self.total - self.done
        if self._case_start is not None:  # the running case is partly done
            left -= self._fraction
        return max(0.0, per * left * self.speed())

    def text(self) -> str:
        """The display's ETA cell: ``ETA 1:05``, or ``ETA …`` before a first estimate."""
        left = self.remaining()
        return "ETA …" if left is None else f"ETA {format_seconds(left)}"


#: the stages that count a command's cases (run and compare: ``case``; bench and advise's kernels: ``bench``; train:
#: ``train``): their bar's ETA is a :class:`RunEta`, which weighs the cases left by the command's plan where it sent one
COUNTING_STAGES = ("case", "bench", "train")


class StageBars:
    """The progress display: one bar per stage, one numbering, an ETA on every bar, finished bars collapsed.

    Fed the library's ``progress(stage, done, total, message)`` calls (``plan`` calls feed the ETAs only):

    * every bar counts units DONE: ``3/10`` is three steps (cases, passes, rounds) finished, and the
      message names what runs, never a second counter of its own;
    * a bar of a counting stage (:data:`COUNTING_STAGES`) shows its :class:`RunEta`; any other bar
      the rate of its own units so far (elapsed / done × units left), ``ETA …`` before the first;
    * a bar whose units are all done disappears; one of a stage that runs once per source or
      command (building gradients, loading them, a compute measurement, the cases) leaves one
      summary line above the display, on a terminal only (``gradients  live smallcnn: 40 in 0:12``);
      the per-case ``step`` bar just goes, and comes back for the next case.

    ``bars`` is a :class:`rich.progress.Progress` with fields ``stage`` and ``eta`` (the CLI's,
    :func:`gcbench.cli.output.progress_bar`); ``clock`` is injected for tests.
    """

    #: stages whose finished bar leaves no summary line (it restarts with every case)
    QUIET_STAGES = ("step",)

    def __init__(self, bars: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.bars, self.clock = bars, clock
        self.etas: dict[str, RunEta] = {}
        self._tasks: dict[str, Any] = {}
        self._started: dict[str, float] = {}  # stage -> when its current bar began
        self._done: dict[str, int] = {}  # stage -> units done at its last call
        self._base: dict[str, int] = {}  # stage -> units already done at its bar's first call (its rate counts from there)

    def _eta(self, stage: str) -> RunEta:
        if stage not in self.etas:
            self.etas[stage] = RunEta(self.clock, stage=stage)
        return self.etas[stage]

    def update(self, stage: str, done: int, total: int, message: str = "") -> None:
        """Take one progress call (see the class docstring)."""
        if stage == "plan":
            try:
                planned = str(json.loads(message).get("stage", "case"))
            except (ValueError, AttributeError):
                planned = "case"
            self.etas[planned] = RunEta(self.clock, stage=planned)  # a new plan is a new sweep (advise re-times flagged kernels)
        if stage in COUNTING_STAGES:
            self._eta(stage)
        for eta in self.etas.values():
            eta.update(stage, done, total, message)
        if stage == "plan":
            return
        from rich.markup import escape

        text = escape(message)
        now = self.clock()
        if stage not in self._tasks:
            self._tasks[stage] = self.bars.add_task(text, total=total, stage=escape(stage), eta="ETA …")
            self._started[stage], self._base[stage] = now, done
        task = self._tasks[stage]
        if done < self._done.get(stage, 0):  # the stage started over (a second measurement): its rate starts over too
            self._started[stage], self._base[stage] = now, done
        self._done[stage] = done
        self.bars.update(task, completed=done, total=total, description=text)
        for name, t in list(self._tasks.items()):
            self.bars.update(t, eta=self._eta_text(name))
        if total > 0 and done >= total:
            self._collapse(stage, total, message, now)

    def _eta_text(self, stage: str) -> str:
        if stage in self.etas:
            return self.etas[stage].text()
        task = self.bars.tasks[[t.id for t in self.bars.tasks].index(self._tasks[stage])]
        done, total = task.completed, task.total or 0
        since = done - self._base[stage]  # units done since the bar's first call (the first may report one already done)
        if since <= 0:
            return "ETA …"
        return f"ETA {format_seconds((self.clock() - self._started[stage]) / since * max(0.0, total - done))}"

    def _collapse(self, stage: str, total: int, message: str, now: float) -> None:
        """A stage whose units are all done: its bar goes; a summary line stays unless it is a per-case stage."""
        self.bars.remove_task(self._tasks.pop(stage))
        self._done.pop(stage, None)
        self._base.pop(stage, None)
        took = now - self._started.pop(stage)
        console = self.bars.console
        if stage not in self.QUIET_STAGES and console.is_terminal:
            from rich.markup import escape

            what = "" if stage in COUNTING_STAGES else f"{escape(message)}: "  # a counting stage's last message is its last case's
            console.print(f"[bold blue]{escape(stage):>9}[/] {what}{total} done in {format_seconds(took)}", highlight=False)
