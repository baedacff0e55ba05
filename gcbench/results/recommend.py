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

Bytes are stated against both uncompressed baselines: the compression ratio is against the fp32 gradient, and the
sentence adds the factor against a bf16 all-reduce (half the bytes, :data:`BF16_RATIO`), the reference a claim should
beat (Han et al. 2024); a recommended compressor whose payload is larger than bf16's is said to be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gcbench.results.record import RunCase

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
class Point:
    """One case on the three axes."""

    label: str
    ratio: float
    delivered: float
    x_copy: float | None  # compress ×copy; None where untimed or flagged (then it constrains nothing)


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

    def sentence(self) -> str:
        src = self.source
        if self.no_stream:
            return (f"{src}: no recommendation — these results have no stream (delivered update), so bytes could only be "
                    "weighed against one-shot error; run a suite with steps to get one")
        if self.best is None:
            text = f"{src}: no compressor delivers at least {DELIVERED_FLOOR:g} of the dense update"
        else:
            b = self.best
            text = (f"{src}: use {b.label} — {b.ratio:.3g}× fewer bytes ({bf16_text(b.ratio)}), delivers {b.delivered:.3g} of the "
                    "dense update"
                    + (f", compress {b.x_copy:.3g}× a copy" if b.x_copy is not None else ""))
            if self.most_faithful is not None:
                m = self.most_faithful
                text += f"; {m.label} delivers more ({m.delivered:.3g}) at {m.ratio:.3g}×"
        if self.below_floor:
            text += "; not recommended: " + ", ".join(f"{p.label} (delivers {p.delivered:.3g}, under the {DELIVERED_FLOOR:g} floor)"
                                                      for p in self.below_floor[:3])
            text += f" and {len(self.below_floor) - 3} more" if len(self.below_floor) > 3 else ""
        if self.worse_than_nothing:
            text += "; worse than sending nothing: " + ", ".join(p.label for p in self.worse_than_nothing[:4])
            text += f" and {len(self.worse_than_nothing) - 4} more" if len(self.worse_than_nothing) > 4 else ""
        if self.short:
            text += (" — but the stream was too short to rank stateful compressors on (marked (short) in the table): "
                     "rerun with more steps before acting on it")
        return text + "."


def _point(c: RunCase) -> Point | None:
    ratio, delivered = c.metric("ratio"), c.metric("delivered")
    if ratio is None or delivered is None:
        return None
    x = c.metric("comp_over_copy")
    flagged = c.timing is not None and c.timing.x_copy("compress") is not None and bool(c.timing.x_copy("compress").flags)
    return Point(c.label, ratio, delivered, None if flagged else x)


def _dominates(a: Point, b: Point) -> bool:
    """``a`` is at least as good as ``b`` on every axis both have, and better on one."""
    ge = [a.ratio >= b.ratio, a.delivered >= b.delivered]
    gt = [a.ratio > b.ratio, a.delivered > b.delivered]
    if a.x_copy is not None and b.x_copy is not None:
        ge.append(a.x_copy <= b.x_copy)
        gt.append(a.x_copy < b.x_copy)
    return all(ge) and any(gt)


def recommend(source: str, cases: Sequence[RunCase]) -> Recommendation:
    """The :class:`Recommendation` for the cases of one source."""
    ran = [c for c in cases if c.ok]
    points = [p for p in (_point(c) for c in ran) if p is not None]
    if ran and not points:
        return Recommendation(source, None, None, (), (), (), no_stream=True)
    worse = tuple(p for p in points if p.delivered < 0)
    low = tuple(sorted((p for p in points if 0 <= p.delivered < DELIVERED_FLOOR), key=lambda p: -p.ratio))
    ok = [p for p in points if p.delivered >= DELIVERED_FLOOR]
    front = tuple(sorted((p for p in ok if not any(_dominates(q, p) for q in ok)), key=lambda p: (-p.ratio, -p.delivered)))
    best = front[0] if front else None
    faithful = max(front, key=lambda p: (p.delivered, p.ratio)) if front else None
    short = any(c.stream is not None and c.stream.enough is False for c in ran)
    return Recommendation(source, best, faithful if faithful is not best else None, front, low, worse, short=short)


def recommendations(cases: Sequence[RunCase]) -> list[Recommendation]:
    """One :class:`Recommendation` per source, in the order the sources first appear."""
    by: dict[str, list[RunCase]] = {}
    for c in cases:
        by.setdefault(c.source_label, []).append(c)
    return [recommend(src, cs) for src, cs in by.items()]
