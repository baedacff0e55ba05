"""The results record of one compressor's training run, from every rank's summary (``gcbench train``).

:func:`build_record` turns the per-rank summaries of :func:`gcbench.train.driver.train_one`
into one case of a ``kind = "train"`` results file (:class:`gcbench.results.train_record.TrainCase`):
the accuracy curve, time to target, the step time split into compute, compress, communicate and
decompress (medians over steps after the first, averaged over ranks), the bytes each worker sent,
the gap to the uncompressed reference, and whether the replicas stayed bit-identical.
:func:`failed_record` is the case of a compressor whose run failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gcbench.compressors import registry
from gcbench.core.errors import GcbenchError
from gcbench.train.config import TrainConfig
from gcbench.train.plan_cases import plan_fields, plan_identity
from gcbench.train.prediction import predict_case
from gcbench.workloads.specs import PLAN, Spec, reference_name


def _median(vals: Sequence[float]) -> float | None:
    return float(np.median(vals)) if len(vals) else None


def peer_wait(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How long each worker waited per step for the slowest one to finish its backward pass: per step, the latest
    ``ready_at`` of any rank less this rank's (the first step, which builds DDP's buckets, left out), as each rank's
    mean and their mean.  The mean, not the median: which worker is slower changes from step to step (on two CPU
    workers each waited 0 in over half the steps and up to 4 ms in the others), so a median of zero hides what the
    waiting adds to the run.  The step model prices workers in step, so this is the part of a measured step (inside the
    hook's communicate time) it leaves out.  None with one worker, or where the ranks' clocks cannot be compared (not
    one host, or a step without a time)."""
    clocks = {r.get("clock") for r in ranks}
    if len(ranks) < 2 or len(clocks) != 1 or not next(iter(clocks)):
        return None
    n = min(len(r["steps"]) for r in ranks)
    if n == 0:
        return None
    waits: list[list[float]] = [[] for _ in ranks]
    for i in range(1 if n > 1 else 0, n):
        ready = [r["steps"][i].get("ready_at") for r in ranks]
        if any(t is None for t in ready):
            return None
        last = max(ready)
        for w, t in zip(waits, ready, strict=True):
            w.append(last - t)
    per_rank = [float(np.mean(w)) for w in waits]
    return {"mean_s": float(np.mean(per_rank)), "per_rank_s": per_rank}


def _hook_info(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Rank 0's hook description, with the wire verification of every rank (verified only if every rank's was;
    the largest ratio of bytes on the wire to promised bytes).  Summaries without it (older workers) keep theirs."""
    hook = dict(ranks[0]["hook"])
    if all("wire_verified" in r["hook"] for r in ranks):
        flags = [r["hook"]["wire_verified"] for r in ranks]
        hook["wire_verified"] = None if None in flags else all(flags)
        ratios = [r["hook"].get("wire_bytes_ratio") for r in ranks]
        hook["wire_bytes_ratio"] = max((x for x in ratios if x is not None), default=None)
    return hook


def _size(numel: int, dense: float | None, per_step: float | None) -> dict[str, Any]:
    """The same keys as ``gcbench run`` records, so size readers (reports, simulate) work on both."""
    return {"numel": numel, "dense_bytes": dense, "wire_bytes": per_step, "ratio": dense / per_step if dense and per_step else None,
            "bits_per_element": 8.0 * per_step / numel if per_step and numel else None}


def _identity(spec: Spec, ranks: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the record says the compressor is (name, version, resolved parameters, flags), and a plan's own fields."""
    if spec.name == PLAN:  # a compression plan: its rules' compressors, its table per rule
        return plan_identity(spec), plan_fields(ranks)
    info = registry.get(spec.name)
    comp = registry.create(spec.name, **spec.params)  # resolved parameters, and flags by the registry's one rule
    return {"compressor": info.name, "version": info.version, "params": dict(comp.params), "flags": comp.flags.to_dict()}, {}


def build_record(spec: Spec, ranks: list[dict[str, Any]], cfg: TrainConfig, task_info: dict[str, Any],
                 reference: dict[str, Any] | None) -> dict[str, Any]:
    """The results record of one compressor from every rank's summary."""
    identity, extra = _identity(spec, ranks)
    r0 = ranks[0]
    curve = r0["curve"]
    final = curve[-1] if curve else {}
    keys = ("total_s", "compute_s", "compress_s", "communicate_s", "decompress_s")
    per_rank = []
    for r in ranks:
        st = r["steps"][1:] if len(r["steps"]) > 1 else r["steps"]  # the first step builds DDP's buckets
        per_rank.append({k: _median([s[k] for s in st]) for k in keys})
    step_time = {k: float(np.mean([p[k] for p in per_rank if p[k] is not None])) if per_rank else None for k in keys}
    payload_totals = [sum(s["payload_bytes"] for s in r["steps"]) for r in ranks]
    sent_totals = [sum(s["sent_bytes"] for s in r["steps"]) for r in ranks]
    n_steps = len(r0["steps"])
    per_step = float(np.mean(payload_totals)) / n_steps if n_steps else None
    dense = float(r0["steps"][0]["dense_bytes"]) if n_steps else None
    numel = int(r0["numel"])
    target = float(cfg.target)  # type: ignore[arg-type]  # a resolved config has a target
    hit = next((c for c in curve if c["test_accuracy"] >= target), None)
    acc = final.get("test_accuracy")
    ref_final = None
    if spec.name == reference_name() and not spec.params:
        ref_final = acc  # the reference's own gap is zero by definition
    elif reference is not None and reference.get("status") == "ok":
        ref_final = reference["training"]["final_accuracy"]
    training = {
        "task": task_info,
        "metric": task_info.get("metric", "accuracy"),  # a model without class labels: the negated held-out loss
        "workers": len(ranks),
        "epochs": len(curve),
        "steps": n_steps,
        "batch_size_per_worker": cfg.batch_size,
        "lr": cfg.lr,
        "curve": curve,
        "final_accuracy": acc,
        "final_loss": final.get("test_loss"),
        "best_accuracy": max((c["test_accuracy"] for c in curve), default=None),
        "reference": reference_name(),
        "accuracy_gap": (ref_final - acc) if ref_final is not None and acc is not None else None,
        "target_accuracy": target,
        "time_to_target_s": hit["train_time_s"] if hit else None,
        "epochs_to_target": hit["epoch"] if hit else None,
        "train_time_s": r0["train_time_s"],
        "step_time": step_time,
        "step_time_per_rank": per_rank,
        "peer_wait": peer_wait(ranks),
        # rank 0's raw per-step samples (the first step included), so runs can be compared statistically
        "step_samples_rank0": {k: [s[k] for s in r0["steps"]] for k in (*keys, "payload_bytes")},
        "bytes": {
            "payload_bytes_per_step": per_step,
            "payload_bytes_per_worker": float(np.mean(payload_totals)),
            "payload_bytes_per_worker_max": int(max(payload_totals)),
            "sent_bytes_per_worker": float(np.mean(sent_totals)),
            "dense_bytes_per_step": dense,
        },
        "decoded_payloads_per_step": r0["decoded_payloads"],
        "collectives": r0["collectives"],
        "buckets": r0["buckets"],
        "replicas_consistent": len({r["replica_hash"] for r in ranks}) == 1, "diverged": any(r["diverged"] for r in ranks),
        "threads_per_worker": r0["threads"],
        "hook": _hook_info(ranks),
        "device": r0.get("device"),
        "transport": r0.get("transport"),
    }
    record = {
        "label": spec.label,
        **identity,
        "workers": len(ranks),
        "status": "ok",
        "size": _size(numel, dense, per_step),
        "training": training,
        **extra,
    }
    training["prediction"] = predict_case(record, reference)
    return record


def failed_record(spec: Spec, message: str) -> dict[str, Any]:
    rec: dict[str, Any] = {"label": spec.label, "compressor": spec.name, "params": spec.params, "status": "error", "error": message}
    try:
        rec["version"] = registry.get(spec.name).version
    except GcbenchError:
        pass
    return rec
