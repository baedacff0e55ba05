"""``gcbench advise --csv FILE``: the prediction as one tidy CSV table, one row per cluster × compressor.

Every row names its cluster (workers, bandwidth) and compressor and carries the predicted step split into its terms,
the two uncompressed baselines' steps (fp32 and bf16 all-reduce) and the speed-up over each, whether the payload is
larger than bf16's, the delivered fraction where a run file gave one, and — with ``--convergence`` — the convergence
outcome (seeds, reached, diverged, steps to target with its 95% bounds) and the predicted time to the target with its
bounds and its ratio to each baseline's time (:mod:`gcbench.predict.time_to_accuracy`).  A baseline that is not
a compressor of the bench (the bf16 all-reduce when ``bf16`` was not benched) gets a row of its own with its time.
Values and quoting follow ``report --csv`` (:func:`gcbench.report.export.csv_text`).
"""

from __future__ import annotations

from typing import Any

from gcbench.predict.accuracy import Span, TimeRow
from gcbench.predict.advice_model import Advice, Scenario, Step
from gcbench.report.export import columns_of, csv_text

#: the columns every row has, in this order (the convergence columns follow when a convergence file was given)
COLUMNS = ("workers", "bandwidth_gbps", "compressor", "compressor_name", "protocol", "payload_bytes", "larger_than_bf16",
           "compute_ms", "compress_ms", "communicate_ms", "decompress_ms", "step_ms", "fp32_step_ms", "bf16_step_ms",
           "speedup_vs_fp32", "speedup_vs_bf16", "claims_baseline", "delivered", "flags")


def _ms(v: float | None) -> float | None:
    return None if v is None else 1e3 * v


def _span(prefix: str, s: Span | None, scale: float = 1.0) -> dict[str, Any]:
    return {prefix: s.mean * scale if s else None, f"{prefix}_low": s.low * scale if s else None,
            f"{prefix}_high": s.high * scale if s else None}


def _time_fields(r: TimeRow | None) -> dict[str, Any]:
    if r is None:
        return {"accuracy_measured": False}
    o = r.outcome
    return {"accuracy_measured": True, "role": r.role, "status": r.status, "seeds": o.seeds, "reached": o.reached,
            "diverged": o.diverged, **_span("steps_to_target", o.steps), **_span("step_ms_spread", r.step, 1e3),
            **_span("time_to_target_s", r.time), "time_vs_fp32": r.vs_fp32, "time_vs_bf16": r.vs_bf16}


def _step_row(adv: Advice, sc: Scenario, s: Step) -> dict[str, Any]:
    k = adv.kernels.get(s.label)
    return {"workers": sc.workers, "bandwidth_gbps": sc.bandwidth_gbps, "compressor": s.label, "compressor_name": s.compressor,
            "protocol": s.collective, "larger_than_bf16": s.larger_than_bf16,
            "payload_bytes": s.payload_bytes if s.payload_bytes is not None else (k.wire_bytes if k else None),
            "compute_ms": _ms(s.compute_s), "compress_ms": _ms(s.compress_s), "communicate_ms": _ms(s.communicate_s),
            "decompress_ms": _ms(s.decompress_s), "step_ms": _ms(s.step_s), "fp32_step_ms": _ms(sc.reference_step_s),
            "bf16_step_ms": _ms(sc.bf16_step_s), "speedup_vs_fp32": s.speedup, "speedup_vs_bf16": s.speedup_bf16,
            "claims_baseline": sc.claim_baseline, "delivered": s.delivered.value if s.delivered else None,
            "flags": list(s.flags)}


def advice_rows(adv: Advice) -> list[dict[str, Any]]:
    """One row per cluster × compressor of ``adv`` (and, with a convergence file, per baseline row of its times that no
    compressor stands for)."""
    rows = []
    per = list(adv.times) if adv.convergence is not None else [None] * len(adv.scenarios)
    for sc, st in zip(adv.scenarios, per, strict=True):
        by_label = {r.label: r for r in st.rows} if st is not None else {}
        for s in sc.steps:
            row = _step_row(adv, sc, s)
            if st is not None:
                row.update(_time_fields(by_label.pop(s.label, None)))
            rows.append(row)
        for r in by_label.values():  # a baseline priced without a compressor of its own (the bf16 all-reduce, the reference)
            rows.append({"workers": sc.workers, "bandwidth_gbps": sc.bandwidth_gbps, "compressor": r.label,
                         "compressor_name": r.outcome.compressor, "step_ms": _ms(r.step.mean),
                         "fp32_step_ms": _ms(sc.reference_step_s), "bf16_step_ms": _ms(sc.bf16_step_s),
                         "claims_baseline": sc.claim_baseline, **_time_fields(r)})
    return rows


def advice_csv(adv: Advice) -> str:
    """:func:`advice_rows` as CSV text."""
    rows = advice_rows(adv)
    return csv_text(rows, columns_of(rows, COLUMNS))
