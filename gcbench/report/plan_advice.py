"""``gcbench advise --plan``: the plan's rules (tensors, elements, bytes share, compressor), its predicted step against the
best single compressor and the bf16 all-reduce, and why each exempt tensor is exempt — as text, JSON and CSV."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from gcbench.predict.plan_advise import PlanAdvice, Single
from gcbench.predict.plan_search import PlanStep
from gcbench.report.export import csv_text

#: the columns of advise --plan's CSV: its first three are advise's (cmd_advise.CSV_HEADER), so advise replaces it
PLAN_CSV_COLUMNS = ("workers", "bandwidth_gbps", "compressor", "row", "rule", "tensors", "elements", "bytes", "bytes_share",
                    "step_ms", "compute_ms", "compress_ms", "communicate_ms", "decompress_ms", "below_floor",
                    "steps_to_target", "speedup_of_plan")


def _ms(v: float) -> str:
    """Seconds as ms, or as s from one second up (a CPU's ResNet-50 step: 23.8 s, not 2.38e+04 ms)."""
    return f"{v:.3g} s" if v >= 1 else f"{v * 1e3:.3g} ms"


def _terms(s: PlanStep) -> str:
    return (f"{_ms(s.step_s)} (compute {_ms(s.compute_s)}, compress {_ms(s.compress_s)}, communicate "
            f"{_ms(s.communicate_s)}, decode {_ms(s.decompress_s)})")


def _tta(adv: PlanAdvice, steps: float | None, s: PlanStep) -> str:
    if adv.convergence_origin is None:
        return ""
    return f"; to target: {steps:.0f} steps × step = {steps * s.step_s:.3g} s" if steps is not None else "; never reached"


def _rival_line(adv: PlanAdvice, what: str, r: Single) -> str:
    floor = (f", below the floor on {r.below_floor} tensor{'s' if r.below_floor != 1 else ''}" if r.below_floor else "")
    return (f"  {what} {r.spec}: {_terms(r.step)}{floor}{_tta(adv, r.steps_to_target, r.step)} — the plan is "
            f"{r.step.step_s / adv.step.step_s:.2f}×")


def rules_table(adv: PlanAdvice) -> Table:
    """One row per rule: what it matches, its compressor, its tensors, elements and share of the bytes sent."""
    n = len(adv.plan.rules)
    t = Table(title=f"{adv.plan.label}: {n} rule{'s' if n != 1 else ''}")
    for col in ("rule", "matches", "compressor", "tensors", "elements", "bytes", "bytes share"):
        t.add_column(col, justify="right" if col in ("tensors", "elements", "bytes", "bytes share") else "left")
    for r in adv.rows:
        rule = adv.plan.rules[r["rule"] - 1]
        share = r.get("bytes_share")
        t.add_row(str(r["rule"]), "default" if rule.default else " and ".join(rule.matchers()), r["compressor"],
                  str(r["tensors"]), f"{r['elements']:,}", f"{r.get('bytes', 0):,.0f}",
                  f"{share:.1%}" if share is not None else "")
    return t


def plan_advice_output(adv: PlanAdvice) -> list[Table | str]:
    """The answer as text: header, the rules' table, the plan's step against its rivals, the exempt tensors."""
    how = "chosen per tensor" if adv.auto else "given"
    out: list[Table | str] = [
        f"{adv.model} on {adv.workers} workers × {adv.bandwidth_gbps:g} Gbit/s: plan {how} "
        f"(fidelity floor: cosine ≥ {adv.floor:g} per tensor)" if adv.auto else
        f"{adv.model} on {adv.workers} workers × {adv.bandwidth_gbps:g} Gbit/s: {adv.plan.label} priced",
        rules_table(adv),
        f"  plan: {_terms(adv.step)}{_tta(adv, adv.plan_steps_to_target, adv.step)}",
        _rival_line(adv, "best single compressor", adv.best_single),
        _rival_line(adv, "bf16 all-reduce", adv.bf16),
    ]
    if adv.best_within_floor is not None:
        out.insert(-1, _rival_line(adv, "best single meeting the floor everywhere", adv.best_within_floor))
    out += [f"  note: {n}" for n in adv.notes]
    if adv.plan_steps_to_target is not None:
        out.append("  the plan's steps to target are the most of the compressors it mixes (it was not trained itself)")
    if adv.exempt:
        out.append(f"exempt (no compressor meets cosine ≥ {adv.floor:g}): {len(adv.exempt)} tensors")
        for e in adv.exempt[:20]:
            out.append(f"  {e.name} ({e.numel:,} elements) → {e.codec}: best {e.best} at cosine {e.best_fidelity:.3f}")
        if len(adv.exempt) > 20:
            out.append(f"  … and {len(adv.exempt) - 20} more (--json lists all)")
    if adv.dense_by_choice:
        out.append(f"{adv.dense_by_choice} tensors left dense though a compressor met the floor: dense was faster there")
    if adv.left_out:
        out.append("not candidates: " + "; ".join(adv.left_out))
    out.append(f"fidelity: {adv.fidelity_origin}")
    out.append(f"kernels: {adv.kernels_origin} ({adv.device}); compute {_ms(adv.compute_s)}: {adv.compute_origin}")
    if adv.plan_file:
        out.append(f"plan written: {adv.plan_file} (use it as -c plan:{adv.plan_file} or --plan {adv.plan_file})")
    return out


def _step_dict(s: PlanStep) -> dict[str, Any]:
    return {"step_s": s.step_s, "compute_s": s.compute_s, "compress_s": s.compress_s, "communicate_s": s.communicate_s,
            "decompress_s": s.decompress_s, "wire_bytes": s.wire_bytes, "local_steps": s.local_steps}


def plan_advice_json(adv: PlanAdvice) -> dict[str, Any]:
    """The answer as JSON: the plan (as results files record it), its rules' table, every step and the exempt tensors."""
    return {"model": adv.model, "workers": adv.workers, "bandwidth_gbps": adv.bandwidth_gbps, "auto": adv.auto,
            "fidelity_floor": adv.floor, "plan": adv.plan.describe(), "plan_file": adv.plan_file, "rules": list(adv.rows),
            "step": _step_dict(adv.step), "plan_steps_to_target": adv.plan_steps_to_target,
            "best_single": adv.best_single.spec, "speedup_vs_best_single": adv.speedup_single,
            "best_single_within_floor": adv.best_within_floor.spec if adv.best_within_floor else None,
            "speedup_vs_bf16": adv.speedup_bf16,
            "singles": [{"compressor": r.spec, "below_floor": r.below_floor, "steps_to_target": r.steps_to_target,
                         **_step_dict(r.step)} for r in adv.singles],
            "exempt": [{"name": e.name, "numel": e.numel, "codec": e.codec, "best": e.best,
                        "best_fidelity": e.best_fidelity} for e in adv.exempt],
            "dense_by_choice": adv.dense_by_choice, "not_candidates": list(adv.left_out), "notes": list(adv.notes),
            "fidelity_origin": adv.fidelity_origin, "kernels": adv.kernels_origin, "device": adv.device,
            "compute_s": adv.compute_s, "compute_origin": adv.compute_origin, "convergence": adv.convergence_origin}


def _step_cells(s: PlanStep) -> dict[str, Any]:
    return {"step_ms": s.step_s * 1e3, "compute_ms": s.compute_s * 1e3, "compress_ms": s.compress_s * 1e3,
            "communicate_ms": s.communicate_s * 1e3, "decompress_ms": s.decompress_s * 1e3}


def plan_advice_csv(adv: PlanAdvice) -> str:
    """The answer as CSV: one ``rule`` row per rule of the plan, one ``plan`` row, one ``single`` row per compressor."""
    base = {"workers": adv.workers, "bandwidth_gbps": adv.bandwidth_gbps}
    rows = [{**base, "row": "rule", "compressor": r["compressor"], "rule": r["label"], "tensors": r["tensors"],
             "elements": r["elements"], "bytes": r.get("bytes"), "bytes_share": r.get("bytes_share")} for r in adv.rows]
    rows.append({**base, "row": "plan", "compressor": adv.plan.label, **_step_cells(adv.step),
                 "steps_to_target": adv.plan_steps_to_target, "speedup_of_plan": 1.0})
    rows += [{**base, "row": "single", "compressor": r.spec, **_step_cells(r.step), "below_floor": r.below_floor,
              "steps_to_target": r.steps_to_target, "speedup_of_plan": r.step.step_s / adv.step.step_s} for r in adv.singles]
    return csv_text(rows, PLAN_CSV_COLUMNS)
