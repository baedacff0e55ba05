"""The regression gate of CI (``--fail-on-regression``): whether a new measurement passes against its baseline, and why not.

A gate passes only on evidence: ``bench`` fails on a case slower than its baseline's and on a
sweep that matched no baseline case at all; ``report`` fails on every reason
:func:`gcbench.results.compare.gate_failures` gives (worse, missing, failed, unfinished, nothing compared).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gcbench.results.compare import Comparison, gate_failures
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
