"""Per-phase views of a case: traffic ratio and aggregate error over windows of steps.

A compressor whose protocol changes by step (LGC: dense, then top-k while its autoencoder trains,
then compressed) names each step's phase in its exchange result; the runner stores the names as
``step_phases`` in the case record and the windows of equal consecutive names as ``phases``.  A
single amortised number hides what matters there — the compressed phase's ratio — so the report
shows every phase, and shows the other cases of the same source over the *same* step windows, so
that LGC's phase 3 is compared with DGC over those very steps of the same gradient stream.

Per window (steps ``first..last`` inclusive), from the case record alone:

* ``sent_per_worker`` — mean bytes a worker sends per step in the window, every traffic phase
  summed (one-time ``setup:*`` bytes are excluded: the server sends them; they are in the
  amortised ``overall`` ratio of the size record);
* ``ratio`` — dense fp32 bytes / ``sent_per_worker`` (payload headers counted, as gcbench counts);
* ``body_ratio`` — the same with payload bodies only (``per_step_sent_body``: headers excluded, as
  papers count); ``None`` for a protocol that does not record its body bytes.  On LGC's small
  compressed-phase messages the headers are a large share, so the two differ a lot;
* ``aggregate_q`` — mean over the window's steps of the whole model's aggregate error
  ‖aggregate − true worker mean‖² / ‖true worker mean‖² (``aggregate.per_step_q``);
* ``aggregate_cosine`` — mean over the window of the whole-model cosine(aggregate, true mean);
* ``drift`` — the window's cumulative aggregate error, ‖Σ_{first≤s≤last} (aggregate_s − mean_s)‖ /
  ‖Σ_{first≤s≤last} mean_s‖.  Error feedback delays what it does not send, so its per-step error
  can exceed 1 while the sum still arrives; this is the number that says whether it does, and the
  one to compare compressors at equal error.  The runner restarts the sums at each window of the
  suite's first phased compressor (``aggregate.window_drift``), so it exists for those windows only;
* ``sum_drift`` — the same from step 0 to the window's last step (``aggregate.sum_drift``).

Per-step q and these drifts are measured against each compressor's own reference update (the
gradient; momentum SGD's update for DGC and SDAGC, which fold momentum into what they send).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from gcbench.core.payload import dense_bytes
from gcbench.results.parse import as_case, as_cases
from gcbench.results.run_record import Aggregate, PhaseWindow, RunCase, TrafficPhase


@dataclass(frozen=True)
class Window:
    """Steps ``first..last`` (inclusive) of one phase."""

    name: str
    first: int
    last: int

    @property
    def steps(self) -> int:
        return self.last - self.first + 1

    def text(self) -> str:
        return f"{self.name} (steps {self.first}–{self.last})" if self.steps > 1 else f"{self.name} (step {self.first})"


def phase_windows(step_phases: Sequence[str | None]) -> list[Window]:
    """Runs of equal consecutive phase names; a name that returns later gets ``#2``, ``#3``…"""
    windows: list[Window] = []
    seen: dict[str, int] = {}
    for t, ph in enumerate(step_phases):
        name = ph or "—"
        if windows and windows[-1].last == t - 1 and windows[-1].name.split("#")[0] == name:
            windows[-1] = Window(windows[-1].name, windows[-1].first, t)
            continue
        seen[name] = seen.get(name, 0) + 1
        windows.append(Window(name if seen[name] == 1 else f"{name}#{seen[name]}", t, t))
    return windows


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def _mean(vals: Sequence[Any]) -> float | None:
    v = [x for x in (_finite(y) for y in vals) if x is not None]
    return sum(v) / len(v) if v else None


def _run_case(case: RunCase | Mapping[str, Any]) -> RunCase:
    """A run case as it is, or a case dict validated as one (:func:`as_case`'s default kind)."""
    return cast(RunCase, as_case(case))


def _phases(case: RunCase) -> list[TrafficPhase]:
    """The per-step traffic phases of a case: all but the one-time ``setup:*`` bytes."""
    return [rec for ph, rec in (case.traffic or {}).items() if not ph.startswith("setup")]


def per_step_sent(case: RunCase | Mapping[str, Any]) -> list[float]:
    """Mean bytes a worker sent at each step, every traffic phase but one-time ``setup:*`` summed."""
    case = _run_case(case)
    out = [0.0] * (case.steps or 0)
    for rec in _phases(case):
        for t, v in enumerate((rec.per_step_sent or [])[:len(out)]):
            out[t] += float(v)
    return out


def per_step_sent_body(case: RunCase | Mapping[str, Any]) -> list[float] | None:
    """Like :func:`per_step_sent` with payload bodies only; ``None`` if a traffic phase lacks body counts."""
    case = _run_case(case)
    out = [0.0] * (case.steps or 0)
    for rec in _phases(case):
        if rec.per_step_sent_body is None:
            return None
        for t, v in enumerate(rec.per_step_sent_body[:len(out)]):
            out[t] += float(v)
    return out


def window_metrics(case: RunCase | Mapping[str, Any], w: Window) -> dict[str, Any] | None:
    """The case's numbers over window ``w``; ``None`` if the case has fewer steps."""
    case = _run_case(case)
    steps = case.steps
    if steps is None or w.last >= steps:
        return None
    sent_steps = per_step_sent(case)[w.first:w.last + 1]
    sent = sum(sent_steps) / len(sent_steps)
    body_steps = per_step_sent_body(case)
    body = sum(body_steps[w.first:w.last + 1]) / w.steps if body_steps is not None else None
    agg = case.aggregate or Aggregate()
    numel = (case.size.numel if case.size else None) or 0
    drift = agg.sum_drift or []
    recorded = {(r.first, r.last) for r in case.windows or []}
    win = agg.window_drift or []
    return {
        "first": w.first, "last": w.last, "steps": w.steps,
        "sent_per_worker": sent,
        "ratio": dense_bytes(numel) / sent if sent > 0 else None,
        "body_per_worker": body,
        "body_ratio": dense_bytes(numel) / body if body else None,
        "aggregate_q": _mean((agg.per_step_q or [])[w.first:w.last + 1]),
        "aggregate_cosine": _mean((agg.per_step_cosine or [])[w.first:w.last + 1]),
        "drift": _finite(win[w.last]) if (w.first, w.last) in recorded and w.last < len(win) else None,
        "sum_drift": _finite(drift[w.last]) if w.last < len(drift) else None,
    }


def case_phases(case: RunCase | Mapping[str, Any], windows: Sequence[Window]) -> dict[str, Any]:
    """``{window name: window_metrics}`` for a case record (the runner stores this as ``phases``)."""
    case = _run_case(case)
    return {w.name: m for w in windows if (m := window_metrics(case, w)) is not None}


def _window(r: PhaseWindow) -> Window:
    return Window(r.name, r.first, r.last)


def source_windows(cases: Sequence[RunCase | Mapping[str, Any]]) -> list[Window]:
    """A source's phase windows: those the runner measured its cases over (``windows``), else those
    of its first case with ``step_phases``; [] when no phased case ran (e.g. LGC failed)."""
    ok = [c for c in as_cases(cases) if c.ok]
    if not any(c.step_phases for c in ok):
        return []
    for c in ok:
        if c.windows:
            return [_window(r) for r in c.windows]
    for c in ok:
        if c.step_phases:
            return phase_windows(c.step_phases)
    return []


@dataclass(frozen=True)
class PhaseRow:
    """One case over a source's phase windows, plus its whole-run numbers."""

    case: RunCase
    windows: list[dict[str, Any] | None]
    overall_ratio: float | None
    overall_q: float | None
    final_drift: float | None


def phase_rows(cases: Sequence[RunCase | Mapping[str, Any]], windows: Sequence[Window]) -> list[PhaseRow]:
    """Every case that ran, measured over the same ``windows`` (the phases of the source's phased case)."""
    rows = []
    for c in as_cases(cases):
        if not c.ok:
            continue
        agg = c.aggregate or Aggregate()
        rows.append(PhaseRow(
            case=c,
            windows=[window_metrics(c, w) for w in windows],
            overall_ratio=c.metric("traffic_ratio"),
            overall_q=_mean(agg.per_step_q or []),
            final_drift=c.metric("aggregate_drift"),
        ))
    return rows


@dataclass(frozen=True)
class WorkerTraffic:
    """Bytes each worker sent and received per step in one window of a phased case."""

    case: RunCase
    window: Window
    sent: list[float]
    received: list[float]


def worker_traffic(cases: Sequence[RunCase | Mapping[str, Any]]) -> list[WorkerTraffic]:
    """Per-worker traffic by window of every phased case that ran (its protocol's asymmetry: LGC's PS leader)."""
    out = []
    for c in as_cases(cases):
        if not c.ok or not c.step_phases:
            continue
        for r in c.windows or []:
            out.append(WorkerTraffic(c, _window(r), [float(v) for v in r.sent_by_worker], [float(v) for v in r.received_by_worker or []]))
    return out
