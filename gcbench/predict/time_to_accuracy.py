"""Time to accuracy: ``advise --convergence``'s ranking by predicted wall time to a convergence run's target.

A convergence file (:func:`gcbench.predict.accuracy.read_convergence`) measured, per compressor and over several
seeds, how many steps training took to reach a target metric (mean with a 95% interval over the seeds that reached
it), how many seeds reached it within the budget of steps, and how many diverged.
:func:`gcbench.predict.advise.advise_kernels` predicts each compressor's step time on a cluster.  Their product is the
time to the target on that cluster:

* **time** = steps to target (mean) × predicted step; **low** = the steps' interval low × the step priced at the low
  ends of its kernels' ×copy 95% CIs, **high** = the steps' high × the step at the high ends.  The product of the two
  intervals' ends is conservative (wider than the product's own 95% interval); the compute time, the network model and
  the calibration are taken as given (they carry no interval).
* **Reference**: the file's uncompressed case is priced at DDP's fp32 step; the bf16 all-reduce (the default baseline
  of claims, :data:`gcbench.predict.step.BASELINES`) at its own step, with the steps of the file's ``bf16`` case
  or, without one, the reference's (said so: a bf16 all-reduce is assumed to train as fp32 does).
* **Ranking**: compressors that reached the target in every seed, fastest first; then those that reached it in only
  some seeds (their time is over those seeds alone: an optimistic number, marked k/n); then those that never reached it
  within the budget; then those that diverged.  Only the first group is ever recommended.
* A compressor of the file that the kernels do not hold (matched by label: the same compressor at the same
  parameters) cannot be priced and is listed as such; a compressor of the kernels that the file does not hold has no
  measured accuracy and is listed too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gcbench.core.errors import ResultsError
from gcbench.predict.accuracy import STATUSES, ConvergenceInput, Outcome, ScenarioTime, Span, TimeRow, same_spec, spec_key
from gcbench.predict.advice_model import Advice, Scenario, Step
from gcbench.predict.network import Network
from gcbench.predict.step import price_step
from gcbench.predict.step_kernels import StepKernels, reference_copy


def _spread(k: StepKernels, n: int, net: Network, adv: Advice) -> tuple[float, float]:
    copy_s = reference_copy(adv.kernels.kernels)
    lo, hi = (price_step(k.at_ci(e).cost(adv.compute_s, copy_s), n, net, adv.topology, adv.overlap, adv.calibration).step_s
              for e in (0, 1))
    return min(lo, hi), max(lo, hi)


def _find(sc: Scenario, o: Outcome) -> Step | None:
    """The predicted step of the same configuration: matched by label (a compressor's spec, ``topk:density=0.01``), never
    by name alone, which would price one density's convergence with another density's kernels."""
    return next((s for s in sc.steps if same_spec(s.label, o.label)), None)


def _time(o: Outcome, step: Span) -> Span | None:
    if o.steps is None or not o.reached:
        return None
    return Span(o.steps.mean * step.mean, o.steps.low * step.low, o.steps.high * step.high)


def _speedup(base_s: float | None, time: Span | None) -> float | None:
    """The baseline's time to the target over this row's; None where either is missing.

    A target met at step 0 (the first evaluation, before any update: ``--target-value`` at or below the untrained
    model's metric) is a real outcome with a time of 0 s: two such times are the same time (1×), and a finite time
    over 0 s is no number to print, so it is left out (:func:`time_sentence` says why).
    """
    if base_s is None or time is None:
        return None
    if time.mean <= 0:
        return 1.0 if base_s <= 0 else None
    return base_s / time.mean


def _is_bf16(o: Outcome) -> bool:
    return o.compressor == "bf16" and o.label == "bf16"


def scenario_time(adv: Advice, sc: Scenario, conv: ConvergenceInput) -> ScenarioTime:
    """:class:`ScenarioTime` of one scenario of ``adv`` (see the module docstring)."""
    net = Network(sc.bandwidth_gbps, adv.latency_s)
    rows: list[TimeRow] = []
    unpriced = []
    ref = next((o for o in conv.outcomes if o.reference), None) or next((o for o in conv.outcomes if o.compressor == "none"), None)
    for o in conv.outcomes:
        if o is ref:
            st = Span(sc.reference_step_s, sc.reference_step_s, sc.reference_step_s)
            rows.append(TimeRow(o.label, "fp32 reference", o, st, _time(o, st), note="DDP's fp32 all-reduce step"))
            continue
        s = _find(sc, o)
        if s is None and _is_bf16(o) and sc.bf16_step_s is not None:
            st = Span(sc.bf16_step_s, sc.bf16_step_s, sc.bf16_step_s)
            rows.append(TimeRow(o.label, "bf16 baseline", o, st, _time(o, st), note=adv.bf16_origin))
            continue
        if s is None:
            unpriced.append(o.label)
            continue
        k = adv.kernels.get(s.label)
        lo, hi = _spread(k, sc.workers, net, adv) if k is not None else (s.step_s, s.step_s)
        st = Span(s.step_s, min(lo, s.step_s), max(hi, s.step_s))
        rows.append(TimeRow(o.label, "bf16 baseline" if _is_bf16(o) else "compressor", o, st, _time(o, st)))
    if sc.bf16_step_s is not None and ref is not None and not any(r.role == "bf16 baseline" for r in rows):
        st = Span(sc.bf16_step_s, sc.bf16_step_s, sc.bf16_step_s)
        o = dataclasses.replace(ref, label="bf16 all-reduce", compressor="bf16", reference=False,
                                sent_bytes=ref.sent_bytes / 2 if ref.sent_bytes else None,
                                payload_bytes=ref.dense_bytes / 2 if ref.dense_bytes else None)
        rows.append(TimeRow(o.label, "bf16 baseline", o, st, _time(o, st),
                            note=f"steps assumed the fp32 reference's (no bf16 case in the convergence file); {adv.bf16_origin}"))
    times = {r.role: r.time.mean for r in rows if r.role != "compressor" and r.time is not None}
    rows = [dataclasses.replace(r, vs_fp32=_speedup(times.get("fp32 reference"), r.time),
                                vs_bf16=_speedup(times.get("bf16 baseline"), r.time))
            for r in rows]
    rows.sort(key=lambda r: (STATUSES.index(r.status), r.time.mean if r.time else float("inf"), r.step.mean))
    in_file = {spec_key(o.label) for o in conv.outcomes}
    unmeasured = tuple(s.label for s in sc.steps if spec_key(s.label) not in in_file and s.compressor != "bf16")  # bf16: the baseline
    base = sc.claim_baseline
    return ScenarioTime(sc.workers, sc.bandwidth_gbps, base, tuple(rows), tuple(unpriced), unmeasured)


def time_to_accuracy(adv: Advice, conv: ConvergenceInput) -> list[ScenarioTime]:
    """:func:`scenario_time` of every scenario of ``adv``."""
    return [scenario_time(adv, sc, conv) for sc in adv.scenarios]


# ----------------------------------------------------------------------------- the sentence


def _seconds(s: Span) -> str:
    return s.text(1.0, ".3g") + " s"


def _names(rows: Sequence[TimeRow], limit: int = 4) -> str:
    out = ", ".join(r.label for r in rows[:limit])
    return out + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _vs(st: ScenarioTime, r: TimeRow) -> str:
    first, other = (r.vs_bf16, r.vs_fp32) if st.baseline == "bf16" else (r.vs_fp32, r.vs_bf16)
    o_name = "fp32" if st.baseline == "bf16" else "bf16"
    if first is None:
        return ""
    return f"{first:.2f}× vs {st.baseline}" + (f" ({other:.2f}× vs {o_name})" if other is not None else "")


def time_sentence(st: ScenarioTime, conv: ConvergenceInput) -> str:
    """One sentence for one cluster: the compressor fastest to the target and how its time is made (steps × step, each
    with its interval), its speed-up over the baseline all-reduce (bf16 by default, fp32 in brackets) — or that none
    reaches the target sooner — then who is faster per step but slower to accuracy, who reaches it only in some seeds,
    never within the budget, or diverged, and who could not be priced."""
    where = f"on {st.workers} × {st.bandwidth_gbps:g} Gbit/s, to {conv.target_text}"
    at_start = [r for r in st.rows if r.time is not None and r.outcome.steps is not None and r.outcome.steps.high <= 0]
    if at_start:  # the first evaluation already meets it: a time of 0 s is an outcome, but it ranks nothing
        where += (f" (met at step 0, before any update, by {_names(at_start)}: time to accuracy 0 s, which tells "
                  "compressors apart by nothing; a higher --target-value does)")
    base = st.baseline_row()
    ranked = [r for r in st.compressors if r.status == "reached" and r.time is not None]
    parts = []
    if base is None or base.time is None:
        head = f"{where}: the {st.baseline} baseline has no time to the target (its run did not reach it)"
        if ranked:
            b = ranked[0]
            head += (f"; fastest compressor {b.label}, {_seconds(b.time)} = {b.outcome.steps.text(spec='.0f')} steps × "  # type: ignore[arg-type, union-attr]  # ranked: outcomes with a time
                     f"{b.step.text(1e3)} ms")
    elif not ranked or ranked[0].time.mean >= base.time.mean:  # type: ignore[union-attr]  # ranked: outcomes with a time
        head = (f"{where}: no compressor reaches it sooner than the {st.baseline} all-reduce ({_seconds(base.time)} = "
                f"{base.outcome.steps.text(spec='.0f')} steps × {base.step.text(1e3)} ms)")  # type: ignore[union-attr]  # the baseline has a time here
        if ranked:
            head += f"; the fastest compressor, {ranked[0].label}, takes {_seconds(ranked[0].time)}"  # type: ignore[arg-type]  # ranked: outcomes with a time
    else:
        b = ranked[0]
        assert b.time is not None and b.outcome.steps is not None
        head = (f"{where}: fastest {b.label}, {_seconds(b.time)} = {b.outcome.steps.text(spec='.0f')} steps × "
                f"{b.step.text(1e3)} ms, {_vs(st, b)}; the {st.baseline} all-reduce takes {_seconds(base.time)}")
        if b.time.high >= base.time.low:
            head += " (the intervals overlap: not a clear win)"
    slow = st.faster_step_slower_to_target
    if slow:
        parts.append("faster per step but slower to accuracy: " + _names(slow))
    partial = [r for r in st.compressors if r.status == "partial"]
    if partial:
        parts.append("reach it in only some seeds (time over those): "
                     + ", ".join(f"{r.label} {r.outcome.reached}/{r.outcome.seeds}" for r in partial[:4]))
    never = [r for r in st.compressors if r.status == "never"]
    if never:
        parts.append(f"does not reach it within the budget of {conv.budget} steps: " + _names(never))
    div = [r for r in st.compressors if r.status == "diverged"]
    if div:
        parts.append("diverged: " + ", ".join(f"{r.label} ({r.outcome.diverged}/{r.outcome.seeds} seeds)" for r in div[:4]))
    failed = [r for r in st.compressors if r.status == "failed"]
    if failed:
        parts.append("failed in every seed: " + _names(failed))
    if st.unpriced:
        parts.append("not priced (not in the kernels advise has): " + ", ".join(st.unpriced))
    if st.unmeasured:
        parts.append("accuracy not measured (not in the convergence file): " + ", ".join(st.unmeasured[:6])
                     + (f" and {len(st.unmeasured) - 6} more" if len(st.unmeasured) > 6 else ""))
    return head + "".join(f"; {p}" for p in parts)


def parse_cluster(text: str) -> tuple[int, float]:
    """``16x10`` → (16 workers, 10 Gbit/s per worker); a one-line :class:`ResultsError` for anything else."""
    workers, sep, gbps = text.lower().replace("×", "x").partition("x")
    try:
        n, bw = int(workers), float(gbps)
    except ValueError:
        n, bw = 0, 0.0
    if not sep or n < 2 or not 0 < bw < float("inf"):
        raise ResultsError(f"--cluster takes WORKERSxGBITS with at least 2 workers and a positive bandwidth, e.g. 16x10; got {text!r}")
    return n, bw
