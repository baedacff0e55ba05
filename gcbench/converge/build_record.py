"""A compressor's seed runs as one ``kind = "converge"`` case (:class:`gcbench.results.converge_record.ConvergeCase`).

:func:`seed_run` turns an engine :class:`~gcbench.converge.steps.SeedResult` into a
:class:`~gcbench.results.converge_record.SeedRun` (its ``reached`` / ``steps_to_target`` once the target is
known); :func:`build_case` adds the settings, the summary over seeds (:mod:`gcbench.converge.seed_summary`)
and the bytes per worker per step.  The reference is recorded like any compressor, with
``convergence.reference = true``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gcbench.compressors import registry
from gcbench.converge import seed_summary
from gcbench.converge.steps import SeedResult

if TYPE_CHECKING:
    from gcbench.plan.assign import Assignment
    from gcbench.plan.model import Plan


def seed_run(r: SeedResult, target: float | None) -> dict[str, Any]:
    """The SeedRun fields of one seed; ``reached``/``steps_to_target`` against ``target`` (left out while it is unknown)."""
    final = r.final
    run: dict[str, Any] = {
        "seed": r.seed, "status": r.status, "error": r.error, "diverged_at_step": r.diverged_at_step,
        "diverged_reason": r.diverged_reason, "steps_run": r.steps_run, "curve": r.curve,
        "final_metric": final["metric"] if final else None, "final_loss": final["eval_loss"] if final else None,
        "wall_s": r.wall_s, "state_resets": r.state_resets,
    }
    if target is not None and r.status != "error":
        hit = seed_summary.steps_to_target(r.curve, target)
        run["reached"] = hit is not None
        run["steps_to_target"] = hit
    return run


def bytes_per_step(results: Sequence[SeedResult], workers: int) -> dict[str, Any]:
    """Mean bytes one worker sent per step over the seeds' steps (the protocol's traffic), and the dense gradient's bytes."""
    steps = sum(r.steps_run for r in results)
    if not steps:
        return {}
    return {"sent_per_worker_per_step": sum(r.sent_bytes for r in results) / workers / steps,
            "payload_per_worker_per_step": sum(r.payload_bytes for r in results) / workers / steps,
            "dense_per_step": float(np.mean([r.dense_bytes for r in results]))}


def recorded_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings as the file records them: a ``path/file.py:factory`` task gets ``task_path``, its file made
    absolute against this process's folder (where the run imported it), so advise and report can find it from anywhere."""
    out = dict(settings)
    file, sep, factory = str(out.get("task", "")).rpartition(":")
    if sep and file.endswith(".py") and not out.get("task_path"):
        out["task_path"] = f"{Path(file).expanduser().resolve()}:{factory}"
    return out


def plan_record(plan: Plan, assignment: Assignment, results: Sequence[SeedResult], workers: int,
                source: str | None = None) -> dict[str, Any]:
    """A plan's part of its case: the plan as described, each tensor's rule, and per rule its tensors, elements and bytes
    (one worker's per inner step, over the seeds' steps, warm-up included) with its share of the plan's bytes."""
    steps = sum(r.steps_run for r in results)
    sent: dict[int, float] = {}
    payload: dict[int, float] = {}
    for r in results:
        for rule, (s_, p_) in r.rule_bytes.items():
            sent[rule] = sent.get(rule, 0.0) + s_
            payload[rule] = payload.get(rule, 0.0) + p_
    total = sum(sent.values())
    n = workers * steps  # one worker, one inner step
    rows = []
    for row in assignment.rows():
        i = row["rule"] - 1
        rows.append({**row, "sent_per_worker_per_step": sent.get(i, 0.0) / n if n else None,
                     "payload_per_worker_per_step": payload.get(i, 0.0) / n if n else None,
                     "bytes_share": sent.get(i, 0.0) / total if total else None})
    warm = sum(r.warmup_sent_bytes for r in results)
    return {**plan.describe(), "source": source, "parts": rows, "assignment": assignment.to_dict(),
            "warmup_sent_per_worker_per_step": warm / n if n else None}


def build_case(label: str, settings: Mapping[str, Any], results: Sequence[SeedResult], target: float | None,
               reference_finals: Mapping[int, float] | None, is_reference: bool, numel: int | None,
               plan: tuple[Plan, Assignment, str | None] | None = None) -> dict[str, Any]:
    """One compressor's (or plan's) case: identity and flags, settings, every seed's run, the summary and the bytes."""
    seeds = [seed_run(r, target) for r in results]
    summary = seed_summary.summarize(seeds, None if is_reference else reference_finals, target, str(settings.get("metric")),
                              int(settings["steps"]))
    size_bytes = bytes_per_step(results, int(settings["workers"]))
    ok = [s for s in seeds if s["status"] != "error"]
    if plan is None:
        name, params = registry.parse_spec(label)
        comp = registry.create(name, **params)
        identity: dict[str, Any] = {"compressor": comp.info.name, "version": comp.info.version, "params": dict(comp.params),
                                    "flags": comp.flags.to_dict()}
    else:
        identity = {"compressor": "plan", "params": {}}
    case: dict[str, Any] = {
        "label": label, **identity, "workers": settings["workers"], "steps": settings["steps"],
        "status": "ok" if ok else "error",
        "convergence": {"settings": recorded_settings(settings), "reference": is_reference, "seeds": seeds, "summary": summary,
                        "bytes": size_bytes},
    }
    if plan is not None:
        case["convergence"]["plan"] = plan_record(plan[0], plan[1], results, int(settings["workers"]), plan[2])
    if not ok:
        case["error"] = next((s["error"] for s in seeds if s.get("error")), "every seed failed")
    sent = size_bytes.get("payload_per_worker_per_step")
    dense = size_bytes.get("dense_per_step")
    if sent and dense:  # the same keys as run and train records, so size readers work on converge files too
        case["size"] = {"numel": numel, "dense_bytes": dense, "wire_bytes": sent, "ratio": dense / sent,
                        "bits_per_element": 8.0 * sent / numel if numel else None}
    return case
