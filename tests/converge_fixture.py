"""Hand-built convergence results files (kind ``converge``), valid per :func:`gcbench.results.parse.parse_record`.

Built from the schema in gcbench/results/converge_record.py for the tests of
``advise --convergence`` and of the reports, independently of ``gcbench converge`` itself.  The numbers are invented
test inputs, not measurements: each compressor is given per-seed steps to the target and final metrics, and the
summary is computed from them (mean and 95% Student-t interval) the way the schema describes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scipy import stats

STEPS = 200
EVAL_EVERY = 20


def interval(values: Sequence[float]) -> dict[str, Any] | None:
    """Mean and 95% Student-t interval of ``values`` (the schema's Interval); None without values."""
    vs = [float(v) for v in values]
    if not vs:
        return None
    m = sum(vs) / len(vs)
    if len(vs) == 1:
        return {"mean": m, "low": m, "high": m, "n": 1}
    sd = math.sqrt(sum((v - m) ** 2 for v in vs) / (len(vs) - 1))
    half = float(stats.t.ppf(0.975, len(vs) - 1)) * sd / math.sqrt(len(vs))
    return {"mean": m, "low": m - half, "high": m + half, "n": len(vs)}


def _curve(final: float, reach: int | None, target: float) -> list[dict[str, Any]]:
    """A rising metric curve ending at ``final`` that first reaches ``target`` at step ``reach`` (never when None)."""
    pts = []
    for step in range(EVAL_EVERY, STEPS + 1, EVAL_EVERY):
        if reach is not None:
            m = target + (final - target) * max(0.0, (step - reach)) / max(1, STEPS - reach) if step >= reach else \
                target * step / (reach + EVAL_EVERY)
        else:
            m = final * step / STEPS
        pts.append({"step": step, "train_loss": 2.0 - m, "eval_loss": 2.1 - m, "metric": m})
    return pts


def case(label: str, compressor: str, seeds: Mapping[int, tuple[str, float | None, int | None]], *, task: str = "zoo:mlp",
         target: float = 0.8, reference: bool = False, ref_finals: Mapping[int, float] | None = None,
         sent: float | None = None, dense: float = 4.0e6) -> dict[str, Any]:
    """One case: ``seeds`` maps seed -> (status, final metric, steps to target or None)."""
    runs = []
    for seed, (status, final, reach) in seeds.items():
        run: dict[str, Any] = {"seed": seed, "status": status, "steps_run": STEPS if status == "ok" else 60}
        if status == "ok":
            run.update(curve=_curve(float(final or 0.0), reach, target), final_metric=final, final_loss=2.0 - float(final or 0),
                       reached=reach is not None, steps_to_target=reach)
        elif status == "diverged":
            run.update(diverged_at_step=60, diverged_reason="non-finite loss", reached=False)
        runs.append(run)
    ok = [r for r in runs if r["status"] == "ok"]
    gaps = [ref_finals[r["seed"]] - r["final_metric"] for r in ok if ref_finals and r["seed"] in ref_finals]
    steps = [r["steps_to_target"] for r in ok if r["reached"]]
    curve_steps = [p["step"] for p in ok[0]["curve"]] if ok else []
    bands = [interval([r["curve"][i]["metric"] for r in ok]) for i in range(len(curve_steps))]
    summary = {
        "final_metric": interval([r["final_metric"] for r in ok]), "gap": interval(gaps) if ref_finals else None,
        "steps_to_target": interval(steps), "reached": len(steps), "diverged": sum(r["status"] == "diverged" for r in runs),
        "failed": sum(r["status"] == "error" for r in runs), "seeds": len(runs), "curve_steps": curve_steps,
        "curve_mean": [b["mean"] for b in bands if b], "curve_low": [b["low"] for b in bands if b],
        "curve_high": [b["high"] for b in bands if b],
    }
    settings = {"task": task, "dataset": "synthetic", "metric": "accuracy", "workers": 4, "steps": STEPS, "batch_per_worker": 32,
                "optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "eval_every": EVAL_EVERY, "seeds": sorted(seeds),
                "target_rule": "fraction", "target_fraction": 0.95, "target": target, "parameters": int(dense / 4)}
    out: dict[str, Any] = {"label": label, "status": "ok", "compressor": compressor, "version": 1, "params": {}, "workers": 4,
                           "steps": STEPS, "convergence": {"settings": settings, "reference": reference, "seeds": runs,
                                                           "summary": summary}}
    if sent is not None:
        # the traffic a ring exchange sends is about twice the payload: the two differ, as in gcbench converge's files
        out["convergence"]["bytes"] = {"sent_per_worker_per_step": 2 * sent, "payload_per_worker_per_step": sent,
                                       "dense_per_step": dense}
    return out


def converge_record(task: str = "zoo:mlp", extra: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """A convergence file of the reference (none) and five compressors with every outcome the readers must handle:
    ``topk`` reaches the target later than the reference in every seed, ``signsgd`` in 1 of 3 seeds, ``randomk`` never,
    ``qsgd`` diverges in every seed, ``fp16`` as fast as the reference; ``extra`` cases are appended."""
    ref_finals = {0: 0.90, 1: 0.91, 2: 0.89}
    dense = 4.0e6
    cases = [
        case("none", "none", {s: ("ok", f, 100 + 20 * s) for s, f in ref_finals.items()}, task=task, reference=True,
             ref_finals=ref_finals, sent=dense, dense=dense),
        case("fp16", "fp16", {s: ("ok", f, 100 + 20 * s) for s, f in ref_finals.items()}, task=task, ref_finals=ref_finals,
             sent=dense / 2, dense=dense),
        case("topk", "topk", {0: ("ok", 0.88, 140), 1: ("ok", 0.87, 160), 2: ("ok", 0.88, 160)}, task=task,
             ref_finals=ref_finals, sent=dense / 50, dense=dense),
        case("signsgd", "signsgd", {0: ("ok", 0.85, 180), 1: ("ok", 0.70, None), 2: ("ok", 0.72, None)}, task=task,
             ref_finals=ref_finals, sent=dense / 32, dense=dense),
        case("randomk", "randomk", {s: ("ok", 0.4, None) for s in ref_finals}, task=task, ref_finals=ref_finals,
             sent=dense / 100, dense=dense),
        case("qsgd", "qsgd", {s: ("diverged", None, None) for s in ref_finals}, task=task, ref_finals=ref_finals,
             sent=dense / 8, dense=dense),
        *extra,
    ]
    return {"schema_version": 1, "kind": "converge", "run_id": "conv-test", "gcbench_version": "0.1.0",
            "created_utc": "2026-11-27T12:00:00+00:00", "finished_utc": "2026-11-27T12:10:00+00:00", "status": "complete",
            "environment": {"hostname": "test", "cpu_model": "AMD EPYC", "cpu_count": 2, "torch_threads": 2, "device": "cpu"},
            "suite": {"name": "converge", "kind": "converge"}, "cases": cases}


def write_converge(path: Path, task: str = "zoo:mlp", extra: Sequence[dict[str, Any]] = ()) -> Path:
    """:func:`converge_record` written as a results file at ``path``."""
    path.write_text(json.dumps(converge_record(task, extra), indent=1))
    return path
