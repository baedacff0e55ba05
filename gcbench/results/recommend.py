"""One answer per source of a run: which compressor to use, weighing bytes, delivered update and kernel cost.

A run's table lists every case in suite order; a reader wants the answer.  Per source, from the cases that
ran: those that deliver less than nothing over the stream are *worse than sending nothing*; those under
:data:`DELIVERED_FLOOR` are faster at sending something else and never recommended; the rest are held to
three axes — compression ratio (higher is better), delivered fraction of the dense update (higher), and
compress time as a multiple of a copy (lower; left out where untimed or flagged) — and their Pareto front
kept.  The recommendation is the front's member that saves the most bytes; the sentence also names the most
faithful member of the front when it is another one.  This is the step-level answer: whether a compressor
pays on a cluster is ``gcbench advise``'s, and whether training still reaches its accuracy is a training
run's.  Without a stream (a suite that recorded none) there is no delivered fraction, and the sentence says
so instead of recommending on bytes alone.

Two kinds of evidence, never contradicted:

* **Closed loop** (a ``gcbench converge`` file of the same model or task, :class:`ClosedEvidence`): whether training
  with the compressor reaches the target accuracy, in how many seeds and steps.  Where it covers a case it decides: a
  case that reached the target in every seed is recommendable whatever its open-loop fraction, ranked by steps to the
  target (then bytes); one that did not is never recommended, and the sentence says why.
* **Open loop** (the stream): the fraction of the dense update a case's updates delivered over the stream's N steps
  while the model stepped with the dense mean.  An error-feedback compressor sends the rest of its update later, by
  design: on a stream shorter than its residual needs to drain (about 1/density steps; unknown without a density) its
  fraction is not a verdict, so it is *not judged* rather than "not recommended", and the sentence points to
  ``gcbench converge``.  ``gcbench compare dgc sdagc --model resnet50`` called both "not recommended" at 0.0528 and
  0.0214 after 10 steps, while gcbench's own closed loop shows top-k 1% with error feedback reaching the reference's
  accuracy.

Bytes are stated against both uncompressed baselines: the compression ratio is against the fp32 gradient, and the
sentence adds the factor against a bf16 all-reduce (half the bytes, :data:`BF16_RATIO`), the reference a claim should
beat (Han et al. 2024); a recommended compressor whose payload is larger than bf16's is said to be.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gcbench.results.run_record import RunCase

#: the least fraction of the dense update a recommended compressor delivers over the stream (advise's floor too)
DELIVERED_FLOOR = 0.5

#: the compression ratio of a bf16 cast against fp32: a compressor below it sends more than a bf16 all-reduce
BF16_RATIO = 2.0
#: a payload at most this fraction over half the dense bytes is a bf16 cast's own size, not larger: a cast's payload
#: carries a 13-byte header per tensor (16.002 bits an element on the mlp), so held to exactly half, bf16's and fp16's
#: own rows were marked "larger than bf16's payload"
BF16_SLACK = 0.01


def larger_than_bf16(payload_bytes: float, dense_bytes: float) -> bool:
    """Whether a payload is larger than a bf16 all-reduce's of the same gradient (half its fp32 bytes, :data:`BF16_SLACK`
    over it for the cast's own headers)."""
    return payload_bytes > dense_bytes / BF16_RATIO * (1 + BF16_SLACK)


def bf16_text(ratio: float) -> str:
    """``16× vs bf16``, or ``larger than bf16's payload`` when the payload is (:func:`larger_than_bf16`)."""
    r = ratio / BF16_RATIO
    return f"{r:.3g}× vs bf16: larger than bf16's payload" if larger_than_bf16(1.0, ratio) else f"{r:.3g}× vs bf16"


@dataclass(frozen=True)
class ClosedLoop:
    """One compressor's outcome in a convergence file: reached the target in every seed, in some, never, diverged, failed."""

    status: str  # "reached" (every seed), "partial", "never", "diverged", "failed"
    reached: int
    seeds: int
    steps: float | None = None  # mean steps to the target over the seeds that reached it
    final: float | None = None  # mean final metric

    def text(self, budget: int) -> str:
        """``reaches it in 3/3 seeds, 153 steps`` or why it does not."""
        if self.status in ("reached", "partial"):
            return f"reaches it in {self.reached}/{self.seeds} seeds" + (f", {self.steps:.0f} steps" if self.steps is not None else "")
        return {"never": f"does not reach it within {budget} steps ({self.seeds} seeds)",
                "diverged": f"diverged ({self.seeds} seeds)"}.get(self.status, f"failed in every seed ({self.seeds})")


@dataclass(frozen=True)
class ClosedEvidence:
    """A convergence file's outcomes for the cases of one source, matched by configuration (case label → outcome)."""

    origin: str  # the file, and how it was found
    target: str  # "accuracy 0.972"
    budget: int  # the steps every seed was given
    reference_steps: float | None  # the uncompressed reference's mean steps to the target
    outcomes: Mapping[str, ClosedLoop] = field(default_factory=dict)


#: error-feedback modes whose residual carries the unsent part of the update to later steps
EF_MODES = ("own", "always", "on")


#: the steps an error-feedback residual is given to drain where its configuration does not say what share of the
#: coordinates a step sends (a threshold, sign or low-rank compressor): a 10-step stream judged none of them fairly
UNKNOWN_DRAIN_STEPS = 100


def residual_drain_steps(compressor: str | None, params: Mapping[str, object] | None) -> int | None:
    """About how many steps an error-feedback residual needs before every coordinate has been sent: 1/density (a
    top-k of density 0.001 sends each coordinate about once in 1,000 steps), 1/(1 − drop ratio) for gradient dropping;
    None where the configuration says nothing of what share it sends (a threshold, a quantizer)."""
    from gcbench.compressors import registry

    if compressor == "plan":  # a plan's residuals drain as its slowest rule's
        return _plan_drain_steps(params)
    try:
        rec = registry.get(str(compressor)).resolve(dict(params or {}))
    except Exception:  # an unknown or plugin compressor's card is not here: nothing to say
        return None
    density, drop = rec.get("density"), rec.get("drop_ratio")
    sent = density if isinstance(density, int | float) and 0 < density <= 1 else \
        1 - drop if isinstance(drop, int | float) and 0 <= drop < 1 else None
    return math.ceil(1 / sent) if sent else None


def _plan_drain_steps(params: Mapping[str, object] | None) -> int | None:
    """The drain steps of a plan case (its params, :func:`gcbench.plan.reader.plan_of_params`): the most any of its rules
    needs; None where one of its error-feedback rules says nothing of what share it sends."""
    from gcbench.compressors import registry
    from gcbench.core.errors import GcbenchError
    from gcbench.plan.reader import plan_of_params

    try:
        specs = [registry.parse_spec(r.compressor) for r in plan_of_params(dict(params or {}), "plan").rules]
    except GcbenchError:  # a plan this installation cannot read
        return None
    steps = []
    for name, p in specs:
        flags = registry.get(name).resolve_flags(p)
        if flags.stateful and flags.error_feedback in EF_MODES:
            steps.append(residual_drain_steps(name, p))
    return None if not steps or None in steps else max(s for s in steps if s is not None)


def _error_feedback(c: RunCase) -> bool:
    """Whether the case keeps an error-feedback residual (its recorded flags; else its card's at its parameters)."""
    f = c.flags
    if f is None or f.error_feedback is None:
        from gcbench.compressors import registry

        try:
            rf = registry.get(str(c.compressor or c.label)).resolve_flags(dict(c.params or {}))
        except Exception:  # not a compressor of this installation
            return False
        return bool(rf.stateful and rf.error_feedback in EF_MODES)
    return bool(f.stateful is not False and f.error_feedback in EF_MODES)


@dataclass(frozen=True)
class Point:
    """One case on the three axes, with what decides whether its open-loop fraction can judge it."""

    label: str
    ratio: float
    delivered: float
    x_copy: float | None  # compress ×copy; None where untimed or flagged (then it constrains nothing)
    steps: int | None = None  # the stream's steps (open loop)
    error_feedback: bool = False
    drain: int | None = None  # steps its residual needs to drain (:func:`residual_drain_steps`); None: unknown
    closed: ClosedLoop | None = None  # its outcome in a convergence file of the same model, where one covers it
    spec: str | None = None  # the SPEC a user types for it (a case label such as 'topk+ef' is not one); None: the label

    @property
    def judged(self) -> bool:
        """Whether its open-loop delivered fraction can judge it: not an error-feedback compressor, or one whose stream
        was at least as long as its residual needs to drain (:data:`UNKNOWN_DRAIN_STEPS` where that is not known)."""
        return not self.error_feedback or (self.steps is not None and self.steps >= (self.drain or UNKNOWN_DRAIN_STEPS))

    def open_text(self) -> str:
        """``delivers 0.0528 of the dense update over 10 open-loop steps``: the fraction and what it was measured over."""
        over = f" over {self.steps} open-loop steps" if self.steps else " over the open-loop stream"
        return f"delivers {self.delivered:.3g} of the dense update{over}"

    def not_judged_text(self) -> str:
        drain = (f"its residual needs about {self.drain:,} steps to drain" if self.drain is not None
                 else f"how long its residual takes to drain is not known: {UNKNOWN_DRAIN_STEPS} steps assumed")
        return f"{self.label} ({self.open_text()}; {drain})"


@dataclass(frozen=True)
class Recommendation:
    """The answer for one source."""

    source: str
    best: Point | None
    most_faithful: Point | None  # the front's most faithful member, where it is not ``best``
    front: tuple[Point, ...]
    below_floor: tuple[Point, ...]
    worse_than_nothing: tuple[Point, ...]
    no_stream: bool = False
    short: bool = False  # some stream was too short to rank stateful compressors on (``stream.enough`` False)
    not_judged: tuple[Point, ...] = ()  # error feedback on a stream shorter than its residual's drain: no verdict
    closed: ClosedEvidence | None = None  # the convergence file that judged the cases it covers
    closed_failed: tuple[Point, ...] = ()  # cases the closed loop shows not reaching the target in every seed

    def sentence(self) -> str:
        src = self.source
        if self.no_stream:
            return (f"{src}: no recommendation — these results have no stream (delivered update), so bytes could only be "
                    "weighed against one-shot error; run a suite with steps to get one")
        cl = self.closed
        if self.best is None:
            text = (f"{src}: no compressor's open-loop delivered fraction (the share of the dense update its updates "
                    f"delivered over the stream, the model stepping with the dense mean) reaches the {DELIVERED_FLOOR:g} floor")
            if cl is not None and self.closed_failed:
                text = f"{src}: no compressor reaches {cl.target} in every seed in the closed loop ({cl.origin})"
            elif self.not_judged and not (self.front or self.below_floor or self.worse_than_nothing or self.closed_failed):
                text = f"{src}: no recommendation from this stream"  # nothing it could judge: none was found wanting
        elif self.best.closed is not None and cl is not None:
            b = self.best
            ref = f" (the reference: {cl.reference_steps:.0f})" if cl.reference_steps is not None else ""
            text = (f"{src}: use {b.label} — in closed-loop training ({cl.origin}) it {self.best.closed.text(cl.budget)} to {cl.target}"
                    f"{ref}; {b.ratio:.3g}× fewer bytes ({bf16_text(b.ratio)})")
        else:
            b = self.best
            text = (f"{src}: use {b.label} — {b.ratio:.3g}× fewer bytes ({bf16_text(b.ratio)}), {b.open_text()}"
                    + (f", compress {b.x_copy:.3g}× a copy" if b.x_copy is not None else ""))
            if self.most_faithful is not None:
                m = self.most_faithful
                text += f"; {m.label} delivers more ({m.delivered:.3g}) at {m.ratio:.3g}×"
            if cl is not None:
                text += f"; no closed-loop evidence for it in {cl.origin}"
        if self.closed_failed and cl is not None:
            text += f"; not recommended (closed loop, {cl.target}): " + ", ".join(
                f"{p.label} {p.closed.text(cl.budget)}" for p in self.closed_failed[:4] if p.closed is not None)
        if self.below_floor:
            text += "; not recommended: " + ", ".join(f"{p.label} ({p.open_text()}, under the {DELIVERED_FLOOR:g} floor)"
                                                      for p in self.below_floor[:3])
            text += f" and {len(self.below_floor) - 3} more" if len(self.below_floor) > 3 else ""
        if self.worse_than_nothing:
            text += "; worse than sending nothing: " + ", ".join(p.label for p in self.worse_than_nothing[:4])
            text += f" and {len(self.worse_than_nothing) - 4} more" if len(self.worse_than_nothing) > 4 else ""
        if self.not_judged:
            specs = " ".join(f"-c {shlex.quote(p.spec or p.label)}" for p in self.not_judged)
            text += ("; not judged on this stream: " + ", ".join(p.not_judged_text() for p in self.not_judged[:3])
                     + (f" and {len(self.not_judged) - 3} more" if len(self.not_judged) > 3 else "")
                     + " — error feedback delivers the rest of the update in later steps; closed-loop training says whether "
                     f"it reaches the accuracy (`gcbench converge {specs}`, then --convergence FILE)")
        if self.short:
            text += (" — but the stream was too short to rank stateful compressors on (marked (short) in the table): "
                     "rerun with more steps before acting on it")
        return text + "."


def open_loop_verdict(c: RunCase) -> tuple[bool, int | None, int | None]:
    """(whether the case's open-loop delivered fraction can judge it, its residual's drain steps, its stream's steps):
    :attr:`Point.judged` for a case with or without a ratio (the pair verdict's delivered axis asks it too)."""
    steps = c.stream.steps if c.stream is not None and c.stream.steps else None
    ef = _error_feedback(c)
    drain = residual_drain_steps(c.compressor or c.label, c.params)
    judged = not ef or (steps is not None and steps >= (drain or UNKNOWN_DRAIN_STEPS))
    return judged, drain, int(steps) if steps else None


def case_point(c: RunCase, closed: ClosedEvidence | None = None) -> Point | None:
    """A run case as a :class:`Point` (None without a ratio and a delivered fraction), with its closed-loop outcome."""
    from gcbench.compressors.registry import short_spec

    ratio, delivered = c.metric("ratio"), c.metric("delivered")
    if ratio is None or delivered is None:
        return None
    x = c.metric("comp_over_copy")
    compress_x_copy = c.timing.x_copy("compress") if c.timing is not None else None
    flagged = compress_x_copy is not None and bool(compress_x_copy.flags)
    steps = c.stream.steps if c.stream is not None else None
    return Point(c.label, ratio, delivered, None if flagged else x, int(steps) if steps else None, _error_feedback(c),
                 residual_drain_steps(c.compressor or c.label, c.params), closed.outcomes.get(c.label) if closed else None,
                 _spec(c, short_spec))


def _spec(c: RunCase, spec_of: Callable[[str, Any], str]) -> str | None:
    """The SPEC that names the case on a command line: a plan's ``plan:FILE``, a compressor's name and the parameters
    that differ from its defaults."""
    if c.compressor == "plan":
        return f"plan:{c.params['file']}" if c.params and c.params.get("file") else None
    return spec_of(c.compressor, c.params) if c.compressor else None


def _dominates(a: Point, b: Point) -> bool:
    """``a`` is at least as good as ``b`` on every axis both have, and better on one."""
    ge = [a.ratio >= b.ratio, a.delivered >= b.delivered]
    gt = [a.ratio > b.ratio, a.delivered > b.delivered]
    if a.x_copy is not None and b.x_copy is not None:
        ge.append(a.x_copy <= b.x_copy)
        gt.append(a.x_copy < b.x_copy)
    return all(ge) and any(gt)


def recommend(source: str, cases: Sequence[RunCase], closed: ClosedEvidence | None = None) -> Recommendation:
    """The :class:`Recommendation` for the cases of one source, judged by ``closed`` (a convergence file's outcomes)
    where it covers a case and by the open-loop stream elsewhere (see the module docstring)."""
    ran = [c for c in cases if c.ok]
    points = [p for p in (case_point(c, closed) for c in ran) if p is not None]
    if ran and not points:
        return Recommendation(source, None, None, (), (), (), no_stream=True)
    by_closed = [p for p in points if p.closed is not None]
    reached = sorted((p for p in by_closed if p.closed is not None and p.closed.status == "reached" and p.ratio > 1),
                     key=lambda p: (p.closed.steps if p.closed and p.closed.steps is not None else math.inf, -p.ratio))
    failed = tuple(p for p in by_closed if p.closed is not None and p.closed.status != "reached")
    open_ = [p for p in points if p.closed is None]
    worse = tuple(p for p in open_ if p.delivered < 0 and p.judged)
    unjudged = tuple(p for p in open_ if p.delivered < DELIVERED_FLOOR and not p.judged)
    low = tuple(sorted((p for p in open_ if 0 <= p.delivered < DELIVERED_FLOOR and p.judged), key=lambda p: -p.ratio))
    ok = [p for p in open_ if p.delivered >= DELIVERED_FLOOR]
    front = tuple(sorted((p for p in ok if not any(_dominates(q, p) for q in ok)), key=lambda p: (-p.ratio, -p.delivered)))
    best = reached[0] if reached else front[0] if front else None
    faithful = max(front, key=lambda p: (p.delivered, p.ratio)) if front and not reached else None
    short = any(c.stream is not None and c.stream.enough is False for c in ran) and not reached
    return Recommendation(source, best, faithful if faithful is not best else None, front, low, worse, short=short,
                          not_judged=unjudged, closed=closed, closed_failed=failed)


def recommendations(cases: Sequence[RunCase], closed: Mapping[str, ClosedEvidence] | None = None) -> list[Recommendation]:
    """One :class:`Recommendation` per source, in the order the sources first appear (``closed``: per source label, the
    closed-loop evidence of its model, where there is one)."""
    by: dict[str, list[RunCase]] = {}
    for c in cases:
        by.setdefault(c.source_label, []).append(c)
    return [recommend(src, cs, (closed or {}).get(src)) for src, cs in by.items()]
