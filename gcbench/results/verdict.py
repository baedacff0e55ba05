"""The verdict of ``gcbench compare``: for each pair of cases, which is better on bytes, delivered update and time.

Each pair (A, B) of the compared cases (one source, each compressor at its configured settings) is
judged on three axes, each with how sure the judgement is:

* **bytes** — bytes a worker sends per step (``size.traffic_sent_bytes``, every phase of the
  exchange counted; ``wire_bytes`` where a file has no traffic count).  Byte counts are exact
  given the gradients, so the factor carries no interval.
* **delivered update** — ``stream.delivered``: the fraction of the suite's dense update (the one
  common reference) that the case's updates delivered after the last step.  Both cases compress
  the same workers' gradients, so the interval is the 95 % Student-t interval (df = n − 1) of the
  PAIRED per-worker differences of ``stream.worker_delivered``.  An interval that excludes 0 names
  the case that delivers more; otherwise "no significant difference".  A stream shorter than its
  ``min_steps`` cannot rank error-feedback methods: "too short to conclude".  A protocol with no
  per-worker view (PowerSGD, LGC) gets the point difference of ``stream.delivered`` and no interval.
* **time** — compress time as a multiple of a copy timed in the same rounds
  (``timing.compress_x_copy``).  The estimate is the ratio of the two medians; its 95 % interval is
  a percentile bootstrap (fixed seed) that resamples each case's round samples independently (their
  rounds are not pairs), widened by what the rounds of one process cannot show: each case's ×copy
  moves from one process to the next (:func:`with_process_spread`): this machine's spread, measured by ``gcbench bench
  --processes N`` and recorded with each case's timing, else a built-in one (:mod:`gcbench.results.process_spread`).
  Without it, four runs of ``gcbench compare topk qsgd`` gave intervals that did not overlap.  A timing flagged
  unstable, too short, or faster than the compressor's traffic bound (:class:`XCopy` ``flags``)
  is not a speed: "cannot say (flagged: ...)".

**Against the uncompressed baselines** (:func:`baseline_bytes`): each case's payload per step (``size.wire_bytes``)
against the fp32 gradient (``size.dense_bytes``) and against a bf16 all-reduce's payload (half of it), the 16-bit
baseline claims should be made against (Han et al. 2024); a payload larger than bf16's is flagged.

A statement **at equal delivered update** needs a density sweep (``gcbench compare --sweep``): each
compressor whose card has a ``density`` parameter is also run at :data:`SWEEP_DENSITIES`; on each
one's curve, log bytes is interpolated linearly in delivered update, and the two curves are compared
at one delivered value inside the range both cover (A's configured one when it lies there), or the
verdict says that the curves do not overlap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gcbench.core.intervals import CONFIDENCE, paired_difference
from gcbench.results.process_spread import ProcessSpread, of_case
from gcbench.results.record import XCopy
from gcbench.results.run_record import RunCase

# the axes of a pair's verdict (the JSON "axis" values)
BYTES = "bytes"
DELIVERED = "delivered"
TIME = "time"
EQUAL_DELIVERED = "equal_delivered"

# how sure an axis is (the JSON "status" values)
EXACT = "exact"  # a deterministic count: no interval needed
SIGNIFICANT = "significant"  # the 95 % interval excludes "no difference"
NO_DIFFERENCE = "no_significant_difference"
TOO_SHORT = "too_short"  # a stream with fewer steps than its min_steps
NO_CI = "no_ci"  # a point difference without an interval (no per-worker view)
FLAGGED = "flagged"  # a timing that is not a speed to act on
MISSING = "missing"  # a case lacks the numbers (failed, no timing, no stream)
INTERPOLATED = "interpolated"  # read off the density sweeps
NO_OVERLAP = "no_overlap"  # the sweeps cover disjoint delivered ranges
NO_SWEEP = "no_sweep"  # a case has no density sweep to interpolate on

#: densities ``--sweep`` adds for each compressor whose card has a density parameter
SWEEP_DENSITIES: tuple[float, ...] = (0.1, 0.03, 0.01, 0.003, 0.001)
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 17
#: the fewest timing rounds per case for a bootstrap interval of a median
MIN_ROUNDS = 3


@dataclass(frozen=True)
class AxisVerdict:
    """One axis of a pair's verdict.

    ``estimate`` is the factor (bytes, time: the larger over the smaller, so ≥ 1; ``better`` names
    the cheaper case) or the difference (delivered: the better case's minus the other's);
    ``lo``/``hi`` its 95 % interval in the same orientation; ``better`` is None when neither is
    shown to be better.  ``text`` is the full sentence, ``short`` the clause of the summary line.
    """

    axis: str
    status: str
    better: str | None
    estimate: float | None
    lo: float | None
    hi: float | None
    method: str
    text: str
    short: str


@dataclass(frozen=True)
class PairVerdict:
    """The verdict of one pair: its axes and the one-line summary."""

    a: str
    b: str
    axes: tuple[AxisVerdict, ...]

    @property
    def summary(self) -> str:
        return f"{self.a} vs {self.b}: " + "; ".join(v.short for v in self.axes)

    def axis(self, name: str) -> AxisVerdict | None:
        return next((v for v in self.axes if v.axis == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "summary": self.summary, "axes": [asdict(v) for v in self.axes]}


def num(v: float) -> str:
    """A difference or level as verdicts write it: three significant digits, no exponent above 1e-4."""
    return f"{v:.3g}" if v == 0 or abs(v) >= 1e-4 else f"{v:.2e}"


def factor(v: float) -> str:
    return f"{v:.3g}×" if v < 1000 else f"{v:,.0f}×"


def _missing(axis: str, why: str) -> AxisVerdict:
    return AxisVerdict(axis, MISSING, None, None, None, None, "", f"{axis}: cannot say ({why})", f"{axis}: cannot say ({why})")


# ----------------------------------------------------------------------------- bytes


@dataclass(frozen=True)
class BaselineBytes:
    """One case's payload per step against the dense fp32 gradient and against a bf16 all-reduce's payload (half of it)."""

    label: str
    payload: float
    dense: float

    @property
    def vs_fp32(self) -> float:
        """How many times smaller than the fp32 gradient (above 1: smaller)."""
        return self.dense / self.payload

    @property
    def vs_bf16(self) -> float:
        """How many times smaller than a bf16 all-reduce's payload (under 1: larger than bf16)."""
        return self.dense / 2 / self.payload

    @property
    def larger_than_bf16(self) -> bool:
        from gcbench.results.recommend import larger_than_bf16  # the one rule (a cast's headers are not "larger")

        return larger_than_bf16(self.payload, self.dense)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "payload_bytes": self.payload, "dense_bytes": self.dense, "vs_fp32": self.vs_fp32,
                "vs_bf16": self.vs_bf16, "larger_than_bf16": self.larger_than_bf16}


def baseline_bytes(cases: Sequence[RunCase]) -> list[BaselineBytes]:
    """:class:`BaselineBytes` of every case that ran with a payload and a dense size."""
    out = []
    for c in cases:
        s = c.size if c.ok else None
        if s is not None and s.wire_bytes and s.dense_bytes:
            out.append(BaselineBytes(c.label, float(s.wire_bytes), float(s.dense_bytes)))
    return out


def baseline_bytes_line(cases: Sequence[RunCase]) -> str:
    """``payload per step against a bf16 all-reduce (fp32 in brackets): topk 16× smaller (32×); …; larger than bf16: …``
    ("" when no case has sizes)."""
    rows = baseline_bytes(cases)
    if not rows:
        return ""
    small = [r for r in rows if not r.larger_than_bf16]
    big = [r for r in rows if r.larger_than_bf16]
    text = "payload per step against a bf16 all-reduce's (fp32's in brackets): "
    text += "; ".join(f"{r.label} {factor(r.vs_bf16)} smaller ({factor(r.vs_fp32)})" for r in small) if small else "none smaller"
    if big:
        text += "; larger than bf16: " + ", ".join(f"{r.label} ({1 / r.vs_bf16:.3g}× bf16's payload)" for r in big)
    return text


def bytes_per_step(case: RunCase) -> float | None:
    """Bytes a worker sends per step: every phase of the exchange, or the payload where a file has no traffic count."""
    s = case.size
    if s is None:
        return None
    for v in (s.traffic_sent_bytes, s.wire_bytes):
        if isinstance(v, int | float) and math.isfinite(v) and v > 0:
            return float(v)
    return None


def bytes_verdict(a: RunCase, b: RunCase) -> AxisVerdict:
    """Which case sends fewer bytes per step, by what factor (exact: byte counts are deterministic)."""
    ba, bb = bytes_per_step(a), bytes_per_step(b)
    if ba is None or bb is None:
        return _missing(BYTES, f"no byte count for {a.label if ba is None else b.label}")
    method = "exact byte counts per worker-step (no interval needed)"
    if ba == bb:
        text = f"bytes: {a.label} and {b.label} send the same bytes per step ({ba:,.0f}; exact)"
        return AxisVerdict(BYTES, EXACT, None, 1.0, 1.0, 1.0, method, text, "same bytes per step")
    (win, w), (lose, lb) = sorted(((a.label, ba), (b.label, bb)), key=lambda t: t[1])
    f = lb / w
    text = f"bytes: {win} sends {factor(f)} fewer bytes per step than {lose} ({w:,.0f} vs {lb:,.0f}; exact)"
    return AxisVerdict(BYTES, EXACT, win, f, f, f, method, text, f"{win} sends {factor(f)} fewer bytes")


# ----------------------------------------------------------------------------- delivered update


def _worker_values(case: RunCase) -> list[float] | None:
    w = case.stream.worker_delivered if case.stream else None
    if not w or any(v is None or not math.isfinite(v) for v in w):
        return None
    return [float(v) for v in w if v is not None]


def _undrained(a: RunCase, b: RunCase) -> str:
    """Which of the two are error-feedback cases on a stream shorter than their residual needs to drain (the open-loop
    fraction is no verdict on them, :attr:`gcbench.results.recommend.Point.judged`), in words; "" when neither is."""
    from gcbench.results.recommend import UNKNOWN_DRAIN_STEPS, open_loop_verdict

    parts = []
    for c in (a, b):
        judged, drain, steps = open_loop_verdict(c)
        if not judged:
            why = (f"its residual needs about {drain:,} steps to drain" if drain
                   else f"its residual's drain time unknown: {UNKNOWN_DRAIN_STEPS} steps assumed")
            parts.append(f"{c.label}: {steps or '?'} steps, {why}")
    return "; ".join(parts)


def delivered_verdict(a: RunCase, b: RunCase) -> AxisVerdict:
    """Which case delivers more of the common reference's update: paired per-worker differences, Student t."""
    sa, sb = a.stream, b.stream
    if sa is None or sa.delivered is None or sb is None or sb.delivered is None:
        return _missing(DELIVERED, f"no stream for {a.label if sa is None or sa.delivered is None else b.label}")
    short = [(c.label, c.stream) for c in (a, b) if c.stream is not None and c.stream.enough is False]
    if short:
        need = max(s.min_steps or 0 for _, s in short) or 10
        steps = ", ".join(f"{label} {s.steps} steps" for label, s in short)
        text = f"delivered update: stream too short to conclude ({steps}, need ≥ {need}; use --steps {need})"
        return AxisVerdict(DELIVERED, TOO_SHORT, None, None, None, None, "", text,
                           f"delivered update: stream too short to conclude ({min(s.steps or 0 for _, s in short)} steps, "
                           f"need ≥ {need}; use --steps {need})")
    undrained = _undrained(a, b)
    if undrained:
        text = (f"delivered update: stream too short to conclude ({undrained}; error feedback delivers the rest later: "
                "`gcbench converge` compares them closed-loop)")
        return AxisVerdict(DELIVERED, TOO_SHORT, None, None, None, None, "", text,
                           f"delivered update: too short to conclude ({undrained})")
    wa, wb = _worker_values(a), _worker_values(b)
    iv = None if wa is None or wb is None or len(wa) != len(wb) or len(wa) < 2 else paired_difference(wa, wb)
    if iv is None:
        if wa is None or wb is None:
            why = f"protocol has no per-worker view: {a.label if wa is None else b.label}"
        else:
            why = f"{len(wa)} vs {len(wb)} workers" if len(wa) != len(wb) else "one worker"
        d = float(sa.delivered) - float(sb.delivered)
        win, other, gap = (a.label, b.label, d) if d >= 0 else (b.label, a.label, -d)
        text = (f"delivered update: {win} {num(sa.delivered if win == a.label else sb.delivered)} vs {other} "
                f"{num(sb.delivered if win == a.label else sa.delivered)}, point difference {num(gap)}; no CI ({why})")
        return AxisVerdict(DELIVERED, NO_CI, None, gap, None, None, "point difference of stream.delivered", text,
                           f"{win} delivers {num(gap)} more of the dense update (point difference; no CI ({why}))")
    mean, lo, hi = iv.mean, iv.lo, iv.hi
    method = f"mean of the paired per-worker differences over {iv.n} workers, 95% Student t (df = {iv.df})"
    ref = sa.reference or "the dense update"
    if lo > 0 or hi < 0:
        win, other = (a.label, b.label) if mean > 0 else (b.label, a.label)
        m, low, high = (mean, lo, hi) if mean > 0 else (-mean, -hi, -lo)
        clause = (f"{win} delivers {num(m)} more of the dense update than {other} (mean of the {iv.n} workers' paired "
                  f"differences, 95% CI {num(low)}–{num(high)})")
        return AxisVerdict(DELIVERED, SIGNIFICANT, win, m, low, high, method, f"delivered update vs the {ref}: {clause}",
                           f"{win} delivers {num(m)} more of the dense update (95% CI {num(low)}–{num(high)})")
    text = (f"delivered update vs the {ref}: no significant difference ({a.label} − {b.label} = {num(mean)}, "
            f"95% CI {num(lo)}–{num(hi)})")
    return AxisVerdict(DELIVERED, NO_DIFFERENCE, None, mean, lo, hi, method, text,
                       f"delivered update: no significant difference (95% CI {num(lo)}–{num(hi)})")


# ----------------------------------------------------------------------------- time


def _x_copy(case: RunCase, kernel: str = "compress") -> XCopy | None:
    return case.timing.x_copy(kernel) if case.timing else None


def _round_samples(x: XCopy) -> list[float]:
    return [float(v) for v in x.samples or [] if v is not None and math.isfinite(v) and v > 0]


def kernel_ratio(a: RunCase, b: RunCase, kernel: str = "compress") -> tuple[float, float, float] | None:
    """(ratio, lo, hi) of ``a``'s and ``b``'s median ``kernel`` ×copy: the rounds' bootstrap widened by each side's
    spread between processes, as the time verdict judges it; None when either has fewer than :data:`MIN_ROUNDS`
    rounds (flags are the caller's to judge)."""
    xa, xb = _x_copy(a, kernel), _x_copy(b, kernel)
    if xa is None or xb is None:
        return None
    sa, sb = _round_samples(xa), _round_samples(xb)
    if len(sa) < MIN_ROUNDS or len(sb) < MIN_ROUNDS:
        return None
    return with_process_spread(*bootstrap_ratio(sa, sb), of_case(a).log_sd, of_case(b).log_sd)


def bootstrap_ratio(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE,
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float, float]:
    """(median(a)/median(b), lo, hi): percentile bootstrap of the ratio of medians, each set resampled independently."""
    import numpy as np

    rng = np.random.default_rng(seed)
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ma = np.median(xa[rng.integers(0, len(xa), (resamples, len(xa)))], axis=1)
    mb = np.median(xb[rng.integers(0, len(xb), (resamples, len(xb)))], axis=1)
    tail = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(ma / mb, [tail, 100 - tail])
    return float(np.median(xa) / np.median(xb)), float(lo), float(hi)


def with_process_spread(r: float, lo: float, hi: float, log_sd_a: float, log_sd_b: float,
                        confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """A ratio's rounds-only interval ``lo..hi`` widened by what a rerun adds: each side's spread between processes
    (sd of log ×copy), added in quadrature to each half of the interval on the log scale."""
    extra = _z(confidence) ** 2 * (log_sd_a ** 2 + log_sd_b ** 2)
    down, up = math.log(r / lo), math.log(hi / r)
    return r, r * math.exp(-math.sqrt(down * down + extra)), r * math.exp(math.sqrt(up * up + extra))


def process_spread_note(cases: Sequence[RunCase], pairs: Sequence[PairVerdict]) -> str | None:
    """The line under a comparison's verdicts that says which spread between processes its time intervals add, or
    None when no pair's time axis has an interval (nothing timed, every timing flagged or too short)."""
    if not any(a.axis == TIME and a.status in (SIGNIFICANT, NO_DIFFERENCE) for v in pairs for a in v.axes):
        return None
    timed = [of_case(c) for c in cases if c.ok and c.timing is not None]
    return f"compress-time intervals add the spread between processes: {spread_text(*timed)}"


def spread_text(*spreads: ProcessSpread) -> str:
    """What the spread between processes was, in log terms, and where it came from (one phrase for equal ones)."""
    parts = list(dict.fromkeys(f"{p.log_sd:.3g} in log terms, {p.source()}" for p in spreads))
    return "; ".join(parts)


def _z(confidence: float) -> float:
    """The two-sided normal quantile for ``confidence`` (scipy.special's ndtri, on use)."""
    from scipy.special import ndtri

    return float(ndtri(0.5 + confidence / 2))


def time_verdict(a: RunCase, b: RunCase) -> AxisVerdict:
    """Which case compresses faster, as ×copy: ratio of medians with a bootstrap interval; flagged timings cannot say."""
    xa, xb = _x_copy(a), _x_copy(b)
    if xa is None or xb is None:
        return _missing(TIME, f"no compress timing for {a.label if xa is None else b.label}")
    flagged = [f"{c.label} {', '.join(x.flags or [])}" for c, x in ((a, xa), (b, xb)) if x.flags]
    if flagged:
        text = f"compress time: cannot say (flagged: {'; '.join(flagged)})"
        return AxisVerdict(TIME, FLAGGED, None, None, None, None, "", text, text)
    sa, sb = _round_samples(xa), _round_samples(xb)
    ratio = kernel_ratio(a, b)
    if ratio is None:
        why = f"too few timing rounds: {a.label} {len(sa)}, {b.label} {len(sb)}; need ≥ {MIN_ROUNDS}"
        return AxisVerdict(TIME, MISSING, None, None, None, None, "", f"compress time: cannot say ({why})",
                           f"compress time: cannot say ({why})")
    pa, pb = of_case(a), of_case(b)
    r, lo, hi = ratio
    method = (f"ratio of median compress ×copy, 95% percentile bootstrap ({BOOTSTRAP_RESAMPLES} resamples, seed "
              f"{BOOTSTRAP_SEED}) resampling each case's {len(sa)} and {len(sb)} round samples independently, widened "
              f"by the spread between processes ({spread_text(pa, pb)})")
    if lo > 1 or hi < 1:
        # orient on the slower case: "B compress 1.3× slower (CI 1.1–1.5×)"
        slow, fast, f, low, high = (a.label, b.label, r, lo, hi) if r > 1 else (b.label, a.label, 1 / r, 1 / hi, 1 / lo)
        text = (f"compress time: {slow} is {factor(f)} slower than {fast} (×copy, 95% CI {low:.2f}–{high:.2f}×: this "
                "run's rounds and the spread between processes)")
        return AxisVerdict(TIME, SIGNIFICANT, fast, f, low, high, method, text,
                           f"{slow} compress {factor(f)} slower (CI {low:.2f}–{high:.2f}×)")
    text = (f"compress time: no significant difference ({a.label}/{b.label} = {r:.2f}× of ×copy, 95% CI "
            f"{lo:.2f}–{hi:.2f}×: this run's rounds and the spread between processes)")
    return AxisVerdict(TIME, NO_DIFFERENCE, None, r, lo, hi, method, text,
                       f"compress time: no significant difference (CI {lo:.2f}–{hi:.2f}×)")


# ----------------------------------------------------------------------------- at equal delivered update (sweeps)


@dataclass(frozen=True)
class CurvePoint:
    """One point of a compressor's density sweep: bytes per step against delivered update."""

    label: str
    density: float | None
    bytes: float
    delivered: float


def _family(case: RunCase) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """What a sweep varies around: the compressor and its parameters other than density."""
    return case.compressor, tuple(sorted((k, repr(v)) for k, v in (case.params or {}).items() if k != "density"))


def sweep_curve(case: RunCase, sweep: Sequence[RunCase]) -> list[CurvePoint]:
    """``case`` and the cases of ``sweep`` of its family (same compressor and non-density parameters), by delivered update.

    Only points whose stream is long enough to rank count: a too-short stream's delivered value is not a level.
    """
    points = []
    for c in (case, *(s for s in sweep if s is not case and _family(s) == _family(case))):
        by, st = bytes_per_step(c), c.stream
        if c.ok and by is not None and st is not None and st.delivered is not None and st.enough is not False:
            d = (c.params or {}).get("density")
            points.append(CurvePoint(c.label, float(d) if isinstance(d, int | float) else None, by, float(st.delivered)))
    return sorted(points, key=lambda p: p.delivered)


def bytes_at(curve: Sequence[CurvePoint], delivered: float) -> float:
    """Bytes per step at ``delivered`` on a curve: log bytes interpolated linearly in delivered update."""
    xs = [p.delivered for p in curve]
    logs = [math.log(p.bytes) for p in curve]
    for i in range(1, len(xs)):
        if xs[i - 1] <= delivered <= xs[i]:
            span = xs[i] - xs[i - 1]
            t = 0.0 if span == 0 else (delivered - xs[i - 1]) / span
            return math.exp(logs[i - 1] + t * (logs[i] - logs[i - 1]))
    raise ValueError(f"delivered {delivered} outside the curve's range {xs[0]}–{xs[-1]}")


def equal_delivered_verdict(a: RunCase, b: RunCase, curve_a: Sequence[CurvePoint], curve_b: Sequence[CurvePoint]) -> AxisVerdict:
    """Bytes of the two at one equal delivered update, interpolated on their density sweeps; or why not."""
    method = "log bytes interpolated linearly in delivered update on each compressor's density sweep"
    lacking = [c.label for c, curve in ((a, curve_a), (b, curve_b)) if len(curve) < 2]
    if lacking:
        text = (f"at equal delivered update: cannot say (no density sweep for {', '.join(lacking)}: its card has no density "
                "parameter, or fewer than two sweep points with a long enough stream)")
        return AxisVerdict(EQUAL_DELIVERED, NO_SWEEP, None, None, None, None, method, text,
                           f"at equal delivered update: no sweep for {', '.join(lacking)}")
    lo = max(curve_a[0].delivered, curve_b[0].delivered)
    hi = min(curve_a[-1].delivered, curve_b[-1].delivered)
    if lo > hi:
        text = (f"at equal delivered update: the sweeps do not overlap ({a.label} delivers {num(curve_a[0].delivered)}–"
                f"{num(curve_a[-1].delivered)}, {b.label} {num(curve_b[0].delivered)}–{num(curve_b[-1].delivered)}): no comparison")
        return AxisVerdict(EQUAL_DELIVERED, NO_OVERLAP, None, None, None, None, method, text,
                           "at equal delivered update: the sweeps do not overlap")
    da = a.stream.delivered if a.stream else None
    db = b.stream.delivered if b.stream else None
    x = next((float(v) for v in (da, db) if v is not None and lo <= v <= hi), (lo + hi) / 2)
    ya, yb = bytes_at(curve_a, x), bytes_at(curve_b, x)
    (win, w), (lose, lb) = sorted(((a.label, ya), (b.label, yb)), key=lambda t: t[1])
    f = lb / w
    if math.isclose(f, 1.0, rel_tol=1e-9):  # one curve (two settings of one compressor) or curves that cross at x
        text = f"at equal delivered update {num(x)}, {a.label} and {b.label} need the same bytes per step ({w:,.0f})"
        return AxisVerdict(EQUAL_DELIVERED, INTERPOLATED, None, 1.0, None, None, method, text,
                           f"at equal delivered update {num(x)}, the same bytes")
    text = (f"at equal delivered update {num(x)}, {win} needs {factor(f)} fewer bytes per step than {lose} "
            f"({w:,.0f} vs {lb:,.0f}; the sweeps overlap on {num(lo)}–{num(hi)})")
    return AxisVerdict(EQUAL_DELIVERED, INTERPOLATED, win, f, None, None, method, text,
                       f"at equal delivered update {num(x)}, {win} needs {factor(f)} fewer bytes")


# ----------------------------------------------------------------------------- all pairs


def pair_verdict(a: RunCase, b: RunCase, sweep: Sequence[RunCase] | None = None) -> PairVerdict:
    """The verdict of one pair; with ``sweep`` (the cases ``--sweep`` added) also the bytes at equal delivered update."""
    axes = [bytes_verdict(a, b), delivered_verdict(a, b), time_verdict(a, b)]
    if sweep is not None:
        axes.append(equal_delivered_verdict(a, b, sweep_curve(a, sweep), sweep_curve(b, sweep)))
    return PairVerdict(a.label, b.label, tuple(axes))


def verdicts(cases: Sequence[RunCase], sweep: Sequence[RunCase] | None = None) -> list[PairVerdict]:
    """The verdict of each pair (i < j) of the cases that ran; all must share one source (a comparison is on one)."""
    ok = [c for c in cases if c.ok]
    sources = {c.source_label for c in ok}
    if len(sources) > 1:
        raise ValueError(f"a verdict compares cases of one source, got {len(sources)}: {', '.join(sorted(sources))}")
    # a compared case of a swept family (topk and topk:density=0.1) is a point of that family's curve too
    pool = None if sweep is None else [*ok, *sweep]
    return [pair_verdict(ok[i], ok[j], pool) for i in range(len(ok)) for j in range(i + 1, len(ok))]


def sweep_entries(compressors: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The suite compressor entries ``--sweep`` adds: each compressor whose card has a density parameter, at each of
    :data:`SWEEP_DENSITIES` but its configured one, labelled ``name@density`` (its other parameters kept)."""
    from gcbench.compressors import registry  # on use: the registry imports torch

    stems: dict[str, tuple[str, dict[str, Any], list[float]]] = {}  # family → (name, other params, configured densities)
    for name, params in compressors:
        density = next((p for p in registry.get(name).params if p.name == "density"), None)
        if density is None:
            continue
        rest = {k: v for k, v in params.items() if k != "density"}
        stem = name + ("(" + ",".join(f"{k}={v}" for k, v in rest.items()) + ")" if rest else "")
        configured = params.get("density", density.default)
        stems.setdefault(stem, (name, rest, []))[2].append(float(configured) if isinstance(configured, int | float) else math.nan)
    # a density some compared case of the family already runs is a point of its curve already
    return [{"name": name, "params": {**rest, "density": d}, "label": f"{stem}@{d:g}"}
            for stem, (name, rest, configured) in stems.items() for d in SWEEP_DENSITIES
            if not any(math.isclose(d, c) for c in configured)]
