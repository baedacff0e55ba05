"""The terminal table of a convergence run (``gcbench converge``) and its one-sentence verdict.

One row per compressor (the reference first): the final metric with its 95% interval over seeds
(written ``mean ± half-width``: a Student-t interval is symmetric),
the final gap to the reference (paired by seed), the steps to the target with their interval and
how many seeds reached it, how many diverged, and the bytes one worker sent per step.  Under 120
columns.  :func:`verdict` names the compressors that fail to reach the reference's accuracy, held
against the reference's own outcome: those that reached the target on fewer seeds than the reference
did (a diverged seed does not reach it), diverged where the reference did not, or whose gap's
interval lies above zero.  A compressor whose every seed ran the reference's very curve is the
reference's outcome, never a failure; and a reference that reached the target on only some seeds is
said first (the target is not reliably reached by the reference itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from gcbench.report.columns import Label
from gcbench.report.numbers import fmt
from gcbench.report.text import term


def _iv(iv: Mapping[str, Any] | None, kind: str = "acc", signed: bool = False) -> str:
    """``mean ± half-width`` of a 95% t-interval, ``mean (low–high)`` where clipping to the quantity's domain made it
    asymmetric (:func:`gcbench.core.intervals.domain`), the mean alone over one value, ``—`` when absent."""
    if not iv or iv.get("mean") is None:
        return "—"
    mean = float(iv["mean"])

    def num(v: float, sign: bool = signed) -> str:
        return fmt(v, "int") if kind == "int" else (f"{v:+.3f}" if sign else f"{v:.3f}")

    text = num(mean)
    if iv.get("n", 0) < 2 or iv.get("low") is None or iv.get("high") is None:
        return text
    low, high = float(iv["low"]), float(iv["high"])
    if num(mean - low, False) != num(high - mean, False):  # clipped at a bound: the two halves differ
        return f"{text} ({num(low)}–{num(high)})"
    return f"{text} ± {num((high - low) / 2, False)}"


def _bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for div, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"


def _conv(case: Mapping[str, Any]) -> Mapping[str, Any]:
    return case.get("convergence") or {}


def metric_name(settings: Mapping[str, Any]) -> str:
    return "−loss" if settings.get("metric") == "neg_loss" else str(settings.get("metric", "metric"))


def converge_table(cases: Sequence[Mapping[str, Any]], title: str) -> Table:
    """The table of a convergence run's cases (JSON-ready dicts of :class:`~gcbench.results.converge_record.ConvergeCase`)."""
    settings = _conv(cases[0]).get("settings", {}) if cases else {}
    metric = metric_name(settings)
    t = Table(title=term(title, 116), title_justify="left")
    t.add_column("compressor", max_width=22)  # a Label: wrapped after , : = only, never inside a name or value
    t.add_column(f"final {metric}", justify="right", no_wrap=True)
    t.add_column("gap to ref", justify="right", no_wrap=True)
    t.add_column("steps to target", justify="right", no_wrap=True)
    t.add_column("reached", justify="right", no_wrap=True)
    t.add_column("diverged", justify="right", no_wrap=True)
    t.add_column("bytes/worker/step", justify="right", no_wrap=True)
    for case in cases:
        conv = _conv(case)
        s = conv.get("summary") or {}
        n = s.get("seeds", 0)
        name = Label(str(case.get("label", "?"))[:60] + (" (ref)" if conv.get("reference") else ""))
        if case.get("status") != "ok" and not s.get("final_metric"):
            t.add_row(name, "[red]failed[/]", "", "", "", "", "")
            continue
        reached = "—" if s.get("reached") is None else f"{s['reached']}/{n}"
        diverged = f"{s.get('diverged', 0)}/{n}"
        if s.get("diverged"):
            diverged = f"[red]{diverged}[/]"
        t.add_row(name, _iv(s.get("final_metric")), "0" if conv.get("reference") else _iv(s.get("gap"), signed=True),
                  _iv(s.get("steps_to_target"), "int"), reached, diverged,
                  _bytes((conv.get("bytes") or {}).get("sent_per_worker_per_step")))
    target = settings.get("target")
    if target is not None:
        rule = (f"{settings.get('target_fraction'):g} of the reference's final mean" if settings.get("target_rule") == "fraction"
                else "given value")
        t.caption = (f"± = half-width of the 95% t-interval over seeds (low–high where clipped to what the quantity can "
                     f"be); gap = reference − compressor, paired by seed; "
                     f"target {metric} {target:.4f} ({rule}), steps to target over the seeds that reached it")
        t.caption_justify = "left"
    return t


def _curves(conv: Mapping[str, Any]) -> dict[Any, tuple[Any, ...]]:
    """Per seed: its status and every evaluation's (step, metric, loss) — what "trained as the reference did" compares."""
    return {r.get("seed"): (r.get("status"), tuple((p.get("step"), p.get("metric"), p.get("eval_loss"))
                                                   for p in r.get("curve") or []))
            for r in conv.get("seeds") or []}


def same_as_reference(case: Mapping[str, Any], reference: Mapping[str, Any] | None) -> bool:
    """Whether every seed of ``case`` ran exactly the reference's curve (same seeds, statuses and evaluations): a
    compressor that changed nothing (fp8 of gradients fp8 holds exactly, a lossless one) is the reference's outcome."""
    if reference is None:
        return False
    mine, ref = _curves(_conv(case)), _curves(_conv(reference))
    return bool(mine) and all(seed in ref and ref[seed] == run and run[1] for seed, run in mine.items())


def failing(cases: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(label, why)`` of every compressor that fails to reach the reference's accuracy (see the module docstring).

    Held against the reference's own outcome, not against every seed: a compressor whose curves are the reference's,
    or that reached the target on as many seeds as the reference did, has not failed where the reference did not.
    """
    ref = next((c for c in cases if _conv(c).get("reference")), None)
    rs = (_conv(ref).get("summary") or {}) if ref is not None else {}
    ref_reached, ref_diverged = rs.get("reached"), rs.get("diverged") or 0
    out = []
    for case in cases:
        conv = _conv(case)
        if conv.get("reference") or same_as_reference(case, ref):
            continue
        s = conv.get("summary") or {}
        n = s.get("seeds", 0)
        reasons = []
        if case.get("status") != "ok":
            reasons.append("failed")
        bar = n if ref_reached is None else min(n, ref_reached)  # the seeds the reference itself reached it on
        if s.get("reached") is not None and s["reached"] < bar:
            reasons.append(f"reached the target on {s['reached']} of {n} seeds"
                           + (f", the reference on {ref_reached}" if ref_reached is not None and ref_reached < n else ""))
        if (s.get("diverged") or 0) > ref_diverged:
            reasons.append(f"diverged on {s['diverged']}")
        gap = s.get("gap")
        if gap and gap.get("n", 0) >= 2 and gap.get("low") is not None and gap["low"] > 0:
            reasons.append(f"final gap {gap['mean']:+.4f}, interval above 0")
        if reasons:
            out.append((str(case.get("label")), "; ".join(reasons)))
    return out


def verdict(cases: Sequence[Mapping[str, Any]]) -> str:
    """One plain sentence naming the compressors that fail to reach the reference's accuracy (or saying none does),
    after saying so when the reference itself did not reach the target on every seed."""
    settings = _conv(cases[0]).get("settings", {}) if cases else {}
    steps = settings.get("steps")
    bad = failing(cases)
    ref = next((c for c in cases if _conv(c).get("reference")), None)
    rs = (_conv(ref).get("summary") or {}) if ref is not None else {}
    unreliable = rs.get("reached") is not None and rs["reached"] < rs.get("seeds", 0)
    tail = (f" The target is not reliably reached by the reference itself ({rs.get('reached')} of {rs.get('seeds')} seeds "
            f"within {steps} steps): compressors are held against that, and more --steps or a lower --target tells them "
            "apart better.") if unreliable else ""
    stt = rs.get("steps_to_target") or {}
    if stt.get("high") == 0 and rs.get("reached") == rs.get("seeds") and rs.get("seeds"):
        # the reference met the target before its first step (a model that never learns: 0.95 of a final 0 is 0)
        return (f"The target ({settings.get('target')}) was met at step 0 by the reference on every seed: it tells the "
                f"compressors apart by nothing; set --target-value or train longer.")
    if not bad:
        if unreliable:
            return (f"Every compressor reached the target on as many seeds as the reference within {steps} steps, with no "
                    f"final gap significantly above 0.{tail}")
        return f"Every compressor reached the target on every seed within {steps} steps, with no final gap significantly above 0."
    names = ", ".join(f"{label} ({why})" for label, why in bad)
    return f"Fail to reach the reference's {metric_name(settings)} within {steps} steps: {names}.{tail}"
