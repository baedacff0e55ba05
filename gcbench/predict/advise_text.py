"""The sentence ``gcbench advise`` says per cluster (:func:`summary_line`), and the caveat of flagged timings.

Speed-ups are claimed against the scenario's baseline all-reduce (bf16 by default,
:data:`gcbench.predict.step.BASELINES`) with the other one's in brackets; a compressor under the delivered floor
(:data:`gcbench.results.recommend.DELIVERED_FLOOR`) is never the one recommended.
"""

from __future__ import annotations

from collections.abc import Sequence

from gcbench.predict.advice_model import Advice, Scenario, Step
from gcbench.results.recommend import DELIVERED_FLOOR, UNKNOWN_DRAIN_STEPS

#: flagged inputs named in a caveat before "and N more"
CAVEAT_NAMES = 4


def caveat(flagged: Sequence[str]) -> str:
    """The clause a sentence ends with when the timings behind it were flagged ("" when none was)."""
    if not flagged:
        return ""
    named = ", ".join(flagged[:CAVEAT_NAMES]) + (f" and {len(flagged) - CAVEAT_NAMES} more" if len(flagged) > CAVEAT_NAMES else "")
    return (f" — but this answer cannot be trusted: the timings behind it were flagged after re-measuring: {named} "
            "(--detail says why); rerun on a quiet machine before acting on it")


def _over(s: Step) -> str:
    """`` over 10 open-loop steps``: what a delivered fraction was measured over."""
    steps = s.delivered.steps if s.delivered else None
    return f" over {steps} open-loop steps" if steps else " over the open-loop stream"


def _floor_text(sc: Scenario, s: Step) -> str:
    d = s.delivered.value if s.delivered else float("nan")
    why = "worse than sending nothing" if d < 0 else f"under the {DELIVERED_FLOOR:g} floor"
    return f"{s.label} {sc.claim(s):.2f}× (delivers {d:.3g} of the dense update{_over(s)}, {why})"


def _unjudged_text(s: Step) -> str:
    d = s.delivered
    assert d is not None
    drain = (f"its residual needs about {d.drain:,} steps to drain" if d.drain
             else f"how long its residual takes to drain is not known: {UNKNOWN_DRAIN_STEPS} steps assumed")
    return f"{s.label} (delivers {d.value:.3g}{_over(s)}; {drain})"


#: what a sentence says of error-feedback compressors its open-loop fractions cannot judge
NOT_JUDGED = ("error feedback delivers the rest of the update in later steps: `gcbench converge` says whether it reaches the "
              "accuracy, --convergence FILE ranks by it")


#: the clause a step sentence carries when a convergence file was given: its time-to-accuracy sentences rank by the
#: closed loop, and a step sentence naming a compressor "best" that never reaches the target contradicted them
STEP_ONLY = "; by step time alone (the time-to-accuracy sentences rank by the convergence file)"

#: the clause a sentence carries when no convergence file was given: the ranking is of step time alone
ACCURACY_NOT_MEASURED = "; accuracy not measured (a faster step may reach it later: --convergence FILE ranks by time to it)"


def both_speedups(sc: Scenario, s: Step) -> str:
    """``1.20× vs bf16 (2.10× vs fp32)``: the speed-up over the claims' baseline, then over the other all-reduce."""
    b = sc.claim_baseline
    other = "fp32" if b == "bf16" else "bf16"
    o = s.speedup if other == "fp32" else s.speedup_bf16
    return f"{sc.claim(s):.2f}× vs {b}" + (f" ({o:.2f}× vs {other})" if o is not None else "")


def baseline_steps(sc: Scenario) -> str:
    """``bf16 all-reduce 96.1 ms, fp32 168 ms``: the uncompressed steps, the claims' baseline first."""
    ms = {"fp32": sc.reference_step_s, "bf16": sc.bf16_step_s}
    order = (sc.claim_baseline, "fp32" if sc.claim_baseline == "bf16" else "bf16")
    parts = [f"{b} {1e3 * ms[b]:.3g} ms" for b in order if ms[b] is not None]  # type: ignore[operator]  # kept: steps with a time
    return parts[0].replace(" ", " all-reduce ", 1) + "".join(f", {p}" for p in parts[1:])


def summary_line(sc: Scenario, flagged: Sequence[str] = (), compute_note: str = "", accuracy_note: str = "") -> str:
    """One sentence for a scenario: the best compressor and what it costs, or that none pays; when any timing behind
    it is ``flagged`` (:meth:`Advice.untrusted`), the sentence says the answer cannot be trusted and why.  A compressor
    that delivers less than :data:`DELIVERED_FLOOR` of the dense update is never the one recommended; the sentence names
    it as faster but not recommended.  Speed-ups are claimed against the scenario's baseline all-reduce (bf16 by
    default) with the other one's in brackets ("1.20× vs bf16 (2.10× vs fp32)"); a best compressor whose payload is
    larger than bf16's is said to be.  ``accuracy_note``: :data:`ACCURACY_NOT_MEASURED` where no convergence was given."""
    where = f"on {sc.workers} × {sc.bandwidth_gbps:g} Gbit/s"
    low = sc.below_floor[:3]
    not_rec = f"; faster but not recommended: {', '.join(_floor_text(sc, s) for s in low)}" if low else ""
    unjudged = sc.not_judged[:3]
    if unjudged:
        not_rec += f"; not judged by their open-loop fraction: {', '.join(_unjudged_text(s) for s in unjudged)} — {NOT_JUDGED}"
    tail = compute_note + accuracy_note + caveat(flagged)
    if not sc.paying:
        best = sc.steps[0]
        return (f"{where}: no compressor pays against the {sc.claim_baseline} all-reduce ({baseline_steps(sc)}); "
                f"the fastest compressor, {best.label}, is {both_speedups(sc, best)}" + tail)
    if not sc.recommendable:
        return (f"{where}: no compressor both pays and delivers enough of the update ({baseline_steps(sc)}){not_rec}" + tail)
    best = sc.recommendable[0]
    fid = (f", delivering {best.delivered.value:.3f} of the dense update{_over(best)}"
           if best.delivered and best not in unjudged else "")
    big = ", its payload larger than bf16's" if best.larger_than_bf16 else ""
    others = ", ".join(f"{s.label} {sc.claim(s):.2f}×" for s in sc.recommendable[1:3])
    lead = "fastest step" if accuracy_note == STEP_ONLY else "best"
    return (f"{where}: {lead} {best.label}, {both_speedups(sc, best)} ({1e3 * best.step_s:.3g} ms a step; {baseline_steps(sc)})"
            f"{fid}{big}" + (f"; also faster: {others}" if others else "") + not_rec + tail)


def compute_note(adv: Advice) -> str:
    """The clause a sentence carries when compute was timed on this machine rather than given for the cluster."""
    if adv.compute_origin == "given":
        return ""
    return f" (compute: this machine's {1e3 * adv.compute_s:.1f} ms a step; --compute-ms prices the cluster's devices)"


def summary_for(adv: Advice, sc: Scenario) -> str:
    """:func:`summary_line` of one scenario of ``adv``, with the caveat when the timings behind it were flagged
    (:meth:`Advice.untrusted_for`) and the clause saying accuracy was not measured, or, with a convergence file, that it
    ranks by step time alone (its fastest step is no "best": the time-to-accuracy sentence is the answer)."""
    acc = STEP_ONLY if adv.convergence_origin else ACCURACY_NOT_MEASURED
    return summary_line(sc, adv.untrusted_for(sc), compute_note(adv) + drift_note(sc), acc)


def drift_note(sc: Scenario) -> str:
    """The clause of a cluster whose compute time drifted during the run (:class:`ComputeDrift`): the answer and its
    speed-up at both ends, or how the answer moves between them ("" without a drift)."""
    d = sc.drift
    if d is None:
        return ""
    span = f"compute drifted {1e3 * d.low_s:.3g}–{1e3 * d.high_s:.3g} ms a step"
    if not d.holds:
        return (f"; {span}, and the answer moves with it: {d.answer_low} at {1e3 * d.low_s:.3g} ms, "
                f"{d.answer_high} at {1e3 * d.high_s:.3g} ms")
    lo, hi = sorted((d.claim_low, d.claim_high))
    return f"; {span}: the same answer at both ends, {sc.lead.label} {lo:.2f}–{hi:.2f}× vs {sc.claim_baseline}"


def summaries(adv: Advice) -> list[str]:
    """:func:`summary_for` every scenario of ``adv``."""
    return [summary_for(adv, sc) for sc in adv.scenarios]

