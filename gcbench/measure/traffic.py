"""The traffic of one case: the bytes each worker sends and receives per (exchange phase, step), and their means."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gcbench.results.phases import Window


def allgather_traffic(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(sent, received) bytes of each worker in an all-gather of payloads of ``sizes`` bytes (one per worker)."""
    total = sum(sizes)
    return [(s, total - s) for s in sizes]


class TrafficLog:
    """Bytes each worker sent and received at each step, per exchange phase, and the payload-body bytes it sent.

    ``rows[phase][step * workers + worker]`` is ``[sent, received, body]``; ``body`` is −1 once the
    protocol has not said how many of the bytes it sent are payload bodies (then there is no
    body-only ratio for that phase).  Phases keep the order in which they first appear.
    """

    def __init__(self, steps: int, workers: int) -> None:
        self.steps, self.workers = steps, workers
        self.rows: dict[str, list[list[int]]] = {}

    def add(self, phase: str, step: int, worker: int, sent: int, received: int, body: int | None) -> None:
        """Count one message exchange of ``worker`` at ``step`` in ``phase`` (``body`` None: not known)."""
        rows = self.rows.setdefault(phase, [[0, 0, 0] for _ in range(self.steps * self.workers)])
        row = rows[step * self.workers + worker]
        row[0] += sent
        row[1] += received
        row[2] = -1 if body is None or row[2] < 0 else row[2] + body

    def add_allgather(self, step: int, sizes: Sequence[int], bodies: Sequence[int]) -> None:
        """The default exchange: every worker's payloads (``sizes`` bytes, ``bodies`` of them bodies) go to every other."""
        for w, ((sent, received), body) in enumerate(zip(allgather_traffic(sizes), bodies, strict=True)):
            self.add("allgather", step, w, sent, received, body)

    def _per_step(self, rows: list[list[int]], column: int) -> list[float]:
        return [float(np.mean([rows[t * self.workers + w][column] for w in range(self.workers)])) for t in range(self.steps)]

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per phase: mean and max bytes a worker sent, mean received, and the mean sent at each step (all, bodies only)."""
        return {
            ph: {"sent_mean": float(np.mean([r[0] for r in rows])), "received_mean": float(np.mean([r[1] for r in rows])),
                 "sent_max": int(max(r[0] for r in rows)),
                 # bytes per worker at each step: phases that run only in some steps (LGC) stay readable
                 "per_step_sent": self._per_step(rows, 0),
                 # the same, payload bodies only (headers excluded: papers count bodies); None if the protocol did not say
                 "per_step_sent_body": self._per_step(rows, 2) if all(r[2] >= 0 for r in rows) else None}
            for ph, rows in self.rows.items()
        }

    def mean_sent(self) -> float:
        """Bytes a worker sends per step in the exchange, every phase counted (mean over workers and steps)."""
        return float(sum(float(np.mean([r[0] for r in rows])) for rows in self.rows.values()))

    def by_worker(self, steps: range) -> dict[str, list[float]]:
        """Mean bytes each worker sent and received per step over ``steps``, every phase but one-time ``setup:*``."""
        sent, recv = [0.0] * self.workers, [0.0] * self.workers
        n = max(len(steps), 1)
        for ph, rows in self.rows.items():
            if ph.startswith("setup"):
                continue
            for t in steps:
                for w in range(self.workers):
                    sent[w] += rows[t * self.workers + w][0] / n
                    recv[w] += rows[t * self.workers + w][1] / n
        return {"sent_by_worker": sent, "received_by_worker": recv}

    def windows(self, windows: Sequence[Window]) -> list[dict[str, Any]]:
        """Each phase window with the bytes each worker sent and received per step within it (clipped to the stream)."""
        return [{"name": w.name, "first": w.first, "last": w.last, **self.by_worker(range(w.first, min(w.last, self.steps - 1) + 1))}
                for w in windows]
