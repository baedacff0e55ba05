"""Per-phase and amortised compression ratios of a run of LGC exchanges (:func:`phase_summary`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gcbench.compressors.lgc.contract import PHASES
from gcbench.core.compressor import ExchangeResult
from gcbench.core.payload import dense_bytes


def phase_summary(results: Sequence[ExchangeResult], numel: int) -> dict[str, Any]:
    """Per-phase and amortised compression ratios of a run of LGC exchanges (one tensor or unit).

    ``results`` are the per-step results, in order; ``numel`` the tensor's element count.  Per
    LGC phase: steps, mean bytes a worker sent and received per step, ``ratio`` = dense fp32
    bytes / bytes a worker sent per step (the runner's convention), and ``body_ratio`` the same
    with payload bodies only (headers excluded, as papers count).  ``setup`` holds one-time
    bytes (the PS encoder transfer, received by the leader).  ``overall`` amortises everything
    over the run, with the one-time bytes added to the receiving worker's traffic.
    """
    if not results:
        raise ValueError("phase_summary needs at least one exchange result")
    out: dict[str, Any] = {}
    per_phase: dict[str, list[tuple[float, float, float]]] = {}
    setup_received = 0
    total_sent = total_recv = 0.0
    workers = 1 + max((r.worker for res in results for r in res.traffic.records), default=0)
    for res in results:
        names = res.traffic.phases()
        step_phase = getattr(res, "phase", None) or next((nm.split(":")[0] for nm in names if not nm.startswith("setup")), "dense")
        steady = [nm for nm in names if not nm.startswith("setup")]
        sent = sum(res.traffic.sent(phase=nm) for nm in steady) / workers
        body = sum(res.traffic.sent_body(phase=nm) or 0 for nm in steady) / workers
        recv = sum(res.traffic.received(phase=nm) for nm in steady) / workers
        one_time = sum(res.traffic.received(phase=nm) for nm in names if nm.startswith("setup"))
        setup_received += one_time
        per_phase.setdefault(step_phase, []).append((sent, recv, body))
        total_sent += sent
        total_recv += recv + one_time / workers
    dense = dense_bytes(numel)
    for ph in PHASES:
        rows = per_phase.get(ph)
        if not rows:
            continue
        sent_mean = float(np.mean([r[0] for r in rows]))
        body_mean = float(np.mean([r[2] for r in rows]))
        out[ph] = {"steps": len(rows), "sent_per_worker": sent_mean, "received_per_worker": float(np.mean([r[1] for r in rows])),
                   "body_per_worker": body_mean, "ratio": dense / sent_mean if sent_mean > 0 else None,
                   "body_ratio": dense / body_mean if body_mean > 0 else None}
    steps = len(results)
    out["setup"] = {"received_total": setup_received}
    out["overall"] = {"steps": steps, "sent_per_worker": total_sent / steps, "received_per_worker": total_recv / steps,
                      "ratio": dense * steps / total_sent if total_sent > 0 else None}
    return out
