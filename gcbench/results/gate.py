"""The regression gate of CI (``--fail-on-regression``): whether a new measurement passes against its baseline, and why not.

A gate passes only on evidence: ``bench`` fails on a case slower than its baseline's and on a
sweep that matched no baseline case at all; ``report`` fails on every reason
:func:`gate_failures` gives (worse, missing, failed, unfinished, nothing compared).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gcbench.results.judge import BETTER, FAILING, MISSING, NEW_FAILURE, NOT_COMPARABLE, NOT_SIGNIFICANT, WORSE, Comparison
from gcbench.results.parse import as_record
from gcbench.results.record import RunRecord


@dataclass(frozen=True)
class GateVerdict:
    """``fails``: the gate does not pass; ``reasons``: one line each, beyond the regressions a command lists itself."""

    fails: bool
    reasons: tuple[str, ...]


def bench_gate(regressions: Sequence[Any], compared: int, baseline: str) -> GateVerdict:
    """The gate of a bench against the stored bench ``baseline``: ``compared`` cases matched one of its cases.

    A gate that compared nothing (other sizes or labels than the baseline's) must not pass.
    """
    reasons = () if compared else (f"no case of this bench matches a case of {baseline} (same label and element count)",)
    return GateVerdict(bool(regressions) or bool(reasons), reasons)


def run_gate(baseline: RunRecord | Mapping[str, Any], new: RunRecord | Mapping[str, Any], cmp: Comparison) -> GateVerdict:
    """The gate of run ``new`` against ``baseline`` (``cmp`` compares them): missing, failed or unfinished fails it too."""
    reasons = tuple(gate_failures(baseline, new, cmp))
    return GateVerdict(bool(reasons), reasons)


def gate_failures(baseline: RunRecord | Mapping[str, Any], new: RunRecord | Mapping[str, Any], cmp: Comparison) -> list[str]:
    """Why ``new`` fails a regression gate against ``baseline`` (empty: it passes); one line per reason.

    A gate passes only on evidence: the new run must have finished, run every case of the
    baseline, and run each without failure, besides having no metric worse.  So an empty
    ``running`` file, an interrupted run missing cases, or a run whose cases failed in both runs
    (``failing``) does not pass vacuously.
    """
    out = []
    for what, data in (("run", as_record(new)), ("baseline", as_record(baseline))):
        if not data.finished:
            out.append(f"the {what} {data.run_id or '?'} did not finish (status {data.status!r}): "
                       "an unfinished run cannot pass a regression gate")
    missing = [r for r in cmp.rows if r.verdict == MISSING]
    if missing:
        out.append(f"{len(missing)} case(s) of the baseline missing from {cmp.new_id}: "
                   + ", ".join(f"{r.case} [{r.source}]" for r in missing[:5]) + (", ..." if len(missing) > 5 else ""))
    failed = [r for r in cmp.rows if r.verdict in (NEW_FAILURE, FAILING)]
    if failed:
        out.append(f"{len(failed)} case(s) failed in {cmp.new_id}: " + ", ".join(f"{r.case} [{r.source}]" for r in failed[:5])
                   + (", ..." if len(failed) > 5 else ""))
    worse = [r for r in cmp.rows if r.verdict == WORSE]
    if worse:
        out.append(f"{len(worse)} metric(s) worse than the baseline")
    if not out:
        out.extend(_nothing_compared(as_record(baseline), cmp))
    return out


# verdicts that are evidence: a metric measured in both runs and compared (``fixed`` compares no number)
COMPARED_VERDICTS = (BETTER, WORSE, NOT_SIGNIFICANT)


def _nothing_compared(baseline: RunRecord, cmp: Comparison) -> list[str]:
    """Why a gate compared nothing (empty when at least one metric of one case was compared).

    A baseline with no cases makes every case ``new``, and a baseline whose metrics are all null
    makes every metric ``not comparable``: neither has any number the new run could regress from,
    so such a gate would pass whatever the new run measured.
    """
    if any(r.verdict in COMPARED_VERDICTS for r in cmp.rows):
        return []
    if not baseline.cases:
        return [f"the baseline {cmp.baseline_id} has no cases: nothing to compare {cmp.new_id} with"]
    counts = ", ".join(f"{n} {v}" for v, n in cmp.counts().items())
    reasons = sorted({r.reason for r in cmp.rows if r.verdict == NOT_COMPARABLE and r.reason})
    why = f" ({'; '.join(reasons[:3])}{'; ...' if len(reasons) > 3 else ''})" if reasons else ""
    return [f"no metric of {cmp.new_id} could be compared with the baseline {cmp.baseline_id}: "
            f"{counts or 'no rows'}{why}"]
