"""The renderer of ``gcbench advise``: predicted speed-ups per cluster, the inputs behind them, one sentence per scenario."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from gcbench.predict.accuracy import ConvergenceInput, ScenarioTime, TimeRow
from gcbench.predict.advice_model import Advice, Scenario, Step
from gcbench.predict.advise_text import summaries, summary_for
from gcbench.predict.time_to_accuracy import time_sentence
from gcbench.report.columns import Label

#: the collectives' short names in the table (the legend under it spells them out): the protocol column of a two-leg
#: compressor ("alltoall (pairwise) + allgather (ring)") alone took 38 of the 120 columns a table may use
SHORT_COLLECTIVES = {"allgather": "AG", "allreduce": "AR", "alltoall": "A2A", "reduce_scatter": "RS", "broadcast": "BC",
                     "gather": "G", "scatter": "S"}
COLLECTIVE_LEGEND = ("protocol: AG all-gather, AR all-reduce, A2A all-to-all, RS reduce-scatter, BC broadcast, G gather, "
                     "S scatter; ring, tree, pairwise: the algorithm priced; * = a flagged timing (unstable, cut short by the budget, …; "
                     "why: --detail); "
                     "† = a payload larger than bf16's (half the fp32 bytes): a plain bf16 all-reduce sends less")


def short_protocol(text: str) -> str:
    """``alltoall (pairwise) + allgather (ring)`` as ``A2A pairwise + AG ring``."""
    legs = []
    for leg in text.split(" + "):
        name, _, algo = leg.partition(" (")
        legs.append(" ".join(filter(None, (SHORT_COLLECTIVES.get(name, name), algo.rstrip(")")))))
    return " + ".join(legs)


def _speedup(sc: Scenario, s: Step) -> str:
    x = sc.claim(s)
    text = f"{x:.2f}×"
    return f"[green]{text}[/]" if x > 1.0 else text


def baselines_line(adv: Advice, scs: list[Scenario]) -> str:
    """The two uncompressed baselines' steps at each link speed, and how the bf16 one was priced."""
    steps = "; ".join(f"{sc.bandwidth_gbps:g}G: fp32 {1e3 * sc.reference_step_s:.3g} ms"
                      + (f", bf16 {1e3 * sc.bf16_step_s:.3g} ms" if sc.bf16_step_s is not None else "") for sc in scs)
    base = scs[0].claim_baseline if scs else adv.baseline
    return (f"uncompressed steps — {steps}. Claims are against the {base} all-reduce (--baseline fp32|bf16); bf16 all-reduce "
            f"{adv.bf16_origin or 'not priced'}.")


def trust_line(adv: Advice) -> str:
    """One line on how far the answer can be trusted: the flagged timings behind it (by name; why: ``--detail``), and
    where the compute time and the kernels come from."""
    flagged = adv.untrusted()
    names = ", ".join(flagged[:4]) + (f" and {len(flagged) - 4} more" if len(flagged) > 4 else "")
    head = (f"Trust: {len(flagged)} timing{'s' if len(flagged) != 1 else ''} flagged ({names}; --detail says why): rerun on a "
            "quiet machine before acting on it" if flagged else "Trust: no timing behind the answer was flagged")
    compute = "given" if adv.compute_origin == "given" else "this machine's CPU (--compute-ms prices the cluster's devices)"
    drift = adv.compute_drift_s
    if drift is not None and adv.drift_holds:  # the drift is said, and why it is not among the flags
        compute += f", drifted {1e3 * drift[0]:.3g}–{1e3 * drift[1]:.3g} ms: every answer above is the same at both ends"
    return f"{head}; compute {1e3 * adv.compute_s:.3g} ms a step, {compute}; kernels on {adv.kernels.device}."


def advice_json(adv: Advice) -> dict[str, Any]:
    """``advise --json``: the advice's fields, what is untrusted, the sentences and, with a convergence file, its
    settings and the time to its target per cluster with that cluster's sentence."""
    d = adv.to_dict()
    d["summaries"] = summaries(adv)
    conv = adv.convergence
    if conv is not None:
        d["convergence"] = {"origin": conv.origin, "task": conv.task, "metric": conv.metric, "target": conv.target,
                            "budget_steps": conv.budget, "seeds": conv.seeds}
        d["time_to_accuracy"] = [st.to_dict() | {"summary": time_sentence(st, conv)} for st in adv.times]
    return d


def _times(adv: Advice) -> tuple[ConvergenceInput, list[ScenarioTime]] | None:
    """The advice's convergence file and time to its target per cluster, None without a convergence file."""
    return (adv.convergence, list(adv.times)) if adv.convergence is not None else None


def advice_output(adv: Advice, detail: bool = False) -> list[Table | str]:
    """Tables and lines to print, in order (strings are plain text, not markup).

    By default the answer, the table that supports it and one line on trust (:func:`trust_line`): with a convergence
    file (``advise --convergence``, :attr:`Advice.times`) one table of every compressor's time to the target on every
    cluster and the sentence of each cluster; without, the step tables and their sentences.  ``detail`` (``--detail``)
    prints everything: the step tables, the baselines' steps, why each flagged timing was flagged, the model's terms
    and, with a convergence file, a time-to-accuracy table per cluster (``advise --convergence`` printed about 100 lines and 8 tables for a
    4-sentence answer)."""
    if detail:
        return detail_output(adv)
    out = _preamble(adv)
    times = _times(adv)
    if times is not None:
        conv, per = times
        out.append(time_summary_table(conv, per))
        out.append(TIME_SUMMARY_LEGEND)
        out.extend(time_sentence(st, conv) for st in per)
    else:
        for n in sorted({sc.workers for sc in adv.scenarios}):
            out.append(_step_table(adv, n))
            out.append(COLLECTIVE_LEGEND)
            out.extend(summary_for(adv, sc) for sc in adv.scenarios if sc.workers == n)
    out.append(trust_line(adv))
    return out


def _preamble(adv: Advice) -> list[Table | str]:
    """The lines every advice starts with, short or ``--detail``: what was measured, the kernel budget, and the network
    calibration where one was given (an input the answer rests on)."""
    out: list[Table | str] = [_header(adv)]
    timing = _timing_line(adv)
    if timing:
        out.append(timing)
    if adv.calibration is not None:
        out.append(adv.calibration.describe() + "; kinds it did not measure: the α–β model.")
    return out


def _header(adv: Advice) -> str:
    ks = adv.kernels
    return (f"{adv.model}: kernels measured on {ks.device} ({ks.machine}) by `gcbench bench --model` ({ks.origin}); "
            f"compute {1e3 * adv.compute_s:.1f} ms per step ({adv.compute_origin}); latency α = {1e6 * adv.latency_s:g} µs per "
            "message; " + ("a flat network" if adv.topology.flat else
                           f"nodes of {adv.topology.gpus_per_node} GPUs ({adv.topology.intra_gbps:g} Gbit/s inside a node, "
                           "the bandwidth between nodes)")
            + ("; communication overlapped with the backward pass" if adv.overlap else "") + ".")


def _timing_line(adv: Advice) -> str:
    timing = "; ".join(filter(None, (adv.kernels.budget_text(), adv.candidates)))
    return timing[0].upper() + timing[1:] + "." if timing else ""


def _step_table(adv: Advice, n: int) -> Table:
    """The step table of ``n`` workers: every compressor's predicted speed-up at each link speed."""
    ks = adv.kernels
    bws = sorted({sc.bandwidth_gbps for sc in adv.scenarios})
    scs = {sc.bandwidth_gbps: sc for sc in adv.scenarios if sc.workers == n}
    base = scs[bws[0]].claim_baseline
    t = Table(title=f"{n} workers — predicted speed-up over the {base} all-reduce at each link speed "
                    "(G = Gbit/s; above 1× compression pays)", title_justify="left")
    # names and protocols may wrap; numbers never do: the table keeps within 120 columns at four link speeds
    for col, just, wrap in (("compressor", "left", True), ("protocol", "left", True), ("MB/step", "right", False),
                            ("comp ms", "right", False), ("dec ms", "right", False), ("delivered", "right", False)):
        t.add_column(col, justify=just, no_wrap=not wrap)  # type: ignore[arg-type]  # the triples above hold rich's justify names
    for bw in bws:
        t.add_column(f"{bw:g}G", justify="right", no_wrap=True)
    first = scs[bws[0]]
    order = sorted(first.steps, key=lambda s: -max(scs[b].claim(next(x for x in scs[b].steps if x.label == s.label)) for b in bws))
    for s in order:
        cells = [_speedup(scs[b], next(x for x in scs[b].steps if x.label == s.label)) for b in bws]
        k = ks.get(s.label)
        flags = "*" if s.flags else ""  # which flags, and why: the "Flagged timings" lines under the table
        big = "†" if s.larger_than_bf16 else ""
        t.add_row(Label(s.label), short_protocol(s.collective), f"{(s.payload_bytes or (k.wire_bytes if k else 0)) / 1e6:.3g}{big}",
                  f"{1e3 * s.compress_s:.1f}{flags}",
                  f"{1e3 * s.decompress_s:.1f}", "—" if s.delivered is None else f"{s.delivered.value:.3f}", *cells)
    return t


def detail_output(adv: Advice) -> list[Table | str]:
    """Everything ``advise --detail`` prints: :func:`advice_output`'s lines and, with a convergence file, the
    time-to-accuracy table and sentence of every cluster after the step tables."""
    out = _preamble(adv)
    bws = sorted({sc.bandwidth_gbps for sc in adv.scenarios})
    for n in sorted({sc.workers for sc in adv.scenarios}):
        scs = {sc.bandwidth_gbps: sc for sc in adv.scenarios if sc.workers == n}
        out.append(_step_table(adv, n))
        out.append(COLLECTIVE_LEGEND)
        out.append(baselines_line(adv, [scs[bw] for bw in bws]))
        out.extend(summary_for(adv, scs[bw]) for bw in bws)
    why = adv.untrusted_reasons()
    if why:
        out.append("Flagged timings (what triggered each flag):\n" + "\n".join(f"  {w}" for w in why))
    fid = (f"delivered = fraction of the dense update delivered over a stream, from {adv.fidelity_origin}"
           if adv.fidelity_origin else "delivered: not measured (pass a `gcbench run`/`compare` results file of this model)")
    out.append("step = compute + compress + communication of the compressor's protocol + decode of the payloads it receives "
               "(comp ms: compress; dec ms: decoding all of them); uncompressed = compute + copy into buckets + all-reduce of fp32 "
               "(ring or tree) + copy back; "
               + ("communication overlaps the backward pass (2/3 of compute) bucket by bucket, the last bucket's never"
                  if adv.overlap else "no overlap of communication with the backward pass (--overlap models DDP's)") + f". {fid}.")
    times = _times(adv)
    if times is not None:
        out.extend(time_output(*times))
    return out


#: the note marks of the time-to-accuracy table (its legend under it)
TIME_MARKS = {"slower": "a", "assumed": "b", "modelled": "c"}
TIME_LEGEND = ("time to target = steps to target (mean over the seeds that reached it, 95% CI) × predicted step (CI: the "
               "kernels' ×copy CIs; compute and network as given); low/high multiply the ends. reached: seeds that reached "
               "the target within the budget / seeds. a: faster per step than the baseline but slower to the target; "
               "b: steps assumed the fp32 reference's (no bf16 case in the file); c: bf16 all-reduce modelled, not measured")


def _time_marks(st: ScenarioTime, r: TimeRow) -> str:
    marks = []
    if r in st.faster_step_slower_to_target:
        marks.append(TIME_MARKS["slower"])
    if r.note.startswith("steps assumed"):
        marks.append(TIME_MARKS["assumed"])
    if r.role == "bf16 baseline" and "modelled" in r.note:
        marks.append(TIME_MARKS["modelled"])
    return ",".join(marks)


def _time_cell(r: TimeRow, budget: int) -> str:
    if r.time is not None:
        return r.time.text()
    return {"diverged": "diverged", "failed": "failed"}.get(r.status, f"not in {budget}")


def time_table(st: ScenarioTime, conv: ConvergenceInput) -> Table:
    """One cluster's compressors ranked by predicted time to the target (within 120 columns)."""
    t = Table(title=f"{st.workers} workers × {st.bandwidth_gbps:g} Gbit/s — predicted time to {conv.target_text} "
                    f"(seconds; {conv.seeds} seeds, budget {conv.budget} steps)", title_justify="left")
    for col, just, wrap in (("compressor", "left", True), ("reached", "right", False), ("steps to target", "right", False),
                            ("step ms", "right", False), ("time to target s", "right", False), ("vs bf16", "right", False),
                            ("vs fp32", "right", False), ("note", "left", False)):
        t.add_column(col, justify=just, no_wrap=not wrap)  # type: ignore[arg-type]  # the triples above hold rich's justify names
    for r in st.rows:
        o = r.outcome
        name = Label(r.label + ("" if r.role == "compressor" else f" ({r.role.split()[0]})" if r.role == "fp32 reference" else ""))
        t.add_row(name, f"{o.reached}/{o.seeds}", o.steps.text(spec=".0f") if o.steps else "—", r.step.text(1e3),
                  _time_cell(r, conv.budget), f"{r.vs_bf16:.2f}×" if r.vs_bf16 is not None else "—",
                  f"{r.vs_fp32:.2f}×" if r.vs_fp32 is not None else "—", _time_marks(st, r))
    return t


TIME_SUMMARY_LEGEND = ("time to target = steps to target (mean over the seeds that reached it) × predicted step, in seconds; "
                       "reached: seeds that reached the target within the budget / seeds; --detail gives each cluster's table "
                       "with the intervals, the step times and both baselines' ratios")


def time_summary_table(conv: ConvergenceInput, times: Sequence[ScenarioTime]) -> Table:
    """One table of every compressor's predicted time to the target on every cluster (a column each), ranked as the
    first cluster ranks them: the table behind ``advise --convergence``'s sentences."""
    t = Table(title=f"predicted time to {conv.target_text} (seconds; {conv.seeds} seeds, budget {conv.budget} steps; "
                    "G = Gbit/s)", title_justify="left")
    for col, just in (("compressor", "left"), ("reached", "right"), ("steps to target", "right")):
        t.add_column(col, justify=just, no_wrap=col != "compressor")  # type: ignore[arg-type]  # the pairs above hold rich's justify names
    for st in times:
        t.add_column(f"{st.workers}×{st.bandwidth_gbps:g}G", justify="right", no_wrap=True)
    if not times:
        return t
    for r in times[0].rows:
        o = r.outcome
        name = Label(r.label + (" (fp32)" if r.role == "fp32 reference" else ""))
        cells = []
        for st in times:
            same = next((x for x in st.rows if x.label == r.label), None)
            cells.append(_time_cell(same, conv.budget).split(" (")[0] if same is not None else "—")
        t.add_row(name, f"{o.reached}/{o.seeds}", f"{o.steps.mean:.0f}" if o.steps else "—", *cells)
    return t


def time_output(conv: ConvergenceInput, times: list[ScenarioTime]) -> list[Table | str]:
    """The time-to-accuracy tables and sentences of ``advise --convergence``."""
    out: list[Table | str] = [f"time to accuracy: steps to the target from {conv.origin} ({conv.task}, {conv.workers} workers "
                              f"simulated, {conv.seeds} seeds)"]
    for st in times:
        out.append(time_table(st, conv))
    out.append(TIME_LEGEND)
    out.extend(time_sentence(st, conv) for st in times)
    return out
