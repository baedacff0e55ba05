"""The DDP hook's accounting: per bucket and step what was sent, what was promised and on the wire, and the times.

:class:`HookStats` collects one :class:`BucketStats` per bucket a step (:mod:`gcbench.distributed.ddp` and
:mod:`gcbench.distributed.fsdp` record into it); :meth:`HookStats.summary` gives totals and per-step medians with
their spread as a :class:`HookSummary`, a dict that prints as readable lines.  The meaning of each byte count and
time is in :mod:`gcbench.distributed.ddp`'s docstring.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from gcbench.measure.timing import TimingPolicy, load_per_core, rel_ci, rel_iqr
from gcbench.results.record import UNSTABLE

#: a hook timing over fewer steps than this has no spread worth the name
TOO_FEW_STEPS = "too few steps"


@dataclass
class BucketStats:
    """One bucket's exchange in one step, seen from this worker."""

    bucket: int
    numel: int
    units: int
    protocol: str
    collective: str  # the legs' collectives, "+"-joined in order ("allreduce", "alltoall+allgather" …)
    payload_bytes: int
    sent_bytes: int
    dense_bytes: int  # the bucket uncompressed (numel × element size)
    decoded_payloads: int  # payloads delivered per unit (N for gather, 2N for 1-bit SGD's two legs; 1 for all-reduce)
    compress_s: float
    communicate_s: float
    decompress_s: float
    # wire verification (module doc): declared bytes, measured bytes, and whether they add up
    promised_bytes: int = 0
    overhead_bytes: int = 0
    padding_bytes: int = 0
    wire_bytes: int = 0
    wire_verified: bool | None = None
    # time.monotonic() when DDP handed this worker the bucket (its gradients were ready): held against the other workers'
    # on one host, the time this worker waited for a slower one (gcbench.train.case.peer_wait)
    ready_at: float | None = None


def wire_ratio(wire: float, overhead: float, padding: float, promised: float) -> float | None:
    """Bytes on the wire for the messages (overhead and padding off) per promised byte: 1.0 when verified."""
    return (wire - overhead - padding) / promised if promised else None


@dataclass
class StepStats:
    """All buckets of one backward pass."""

    step: int
    buckets: list[BucketStats] = field(default_factory=list)

    def total(self, key: str) -> float:
        return sum(getattr(b, key) for b in self.buckets)

    def to_dict(self) -> dict[str, Any]:
        keys = ("payload_bytes", "sent_bytes", "dense_bytes", "compress_s", "communicate_s", "decompress_s", "promised_bytes",
                "overhead_bytes", "padding_bytes", "wire_bytes")
        return {"step": self.step, **{k: self.total(k) for k in keys}, "wire_verified": self.wire_verified,
                "buckets": [asdict(b) for b in self.buckets]}

    @property
    def ready_at(self) -> float | None:
        """When this worker's backward pass handed over its last bucket (time.monotonic(); None where a bucket has none)."""
        ready = [b.ready_at for b in self.buckets if b.ready_at is not None]
        return max(ready) if ready and len(ready) == len(self.buckets) else None

    @property
    def wire_verified(self) -> bool | None:
        """Every bucket's wire check passed (None: no bucket was checked)."""
        checked = [b.wire_verified for b in self.buckets if b.wire_verified is not None]
        return all(checked) if checked else None


class HookStats:
    """Per-step records of the hook; a step closes when DDP hands over its last bucket."""

    def __init__(self) -> None:
        self.steps: list[StepStats] = []
        self._pending: list[BucketStats] = []

    def add(self, rec: BucketStats, last: bool) -> None:
        self._pending.append(rec)
        if last:
            self.steps.append(StepStats(len(self.steps), self._pending))
            self._pending = []

    def reset(self) -> None:
        self.steps = []
        self._pending = []

    def summary(self, skip: int = 0, policy: TimingPolicy | None = None) -> HookSummary:
        """:meth:`as_dict`'s numbers as a :class:`HookSummary`: ``print()`` shows readable lines, and it is still the dict
        (``summary()["wire"]``) that scripts and the docs index; ``.as_dict()`` gives a plain one (JSON)."""
        return HookSummary(self.as_dict(skip, policy))

    def as_dict(self, skip: int = 0, policy: TimingPolicy | None = None) -> dict[str, Any]:
        """Totals, and per-step medians with their spread, over the steps after the first ``skip`` (warm-up).

        Each of compress, communicate and decompress gets ``{median_s, iqr_s, rel_iqr, rel_ci, n, flags}``
        under ``timing``: flagged ``unstable`` when its median's CI half-width / median is over the policy's threshold
        or the machine was loaded when the summary was taken, and ``too few steps`` under 5 steps.
        ``ratio`` is dense bytes / payload bytes per step.  ``wire`` is the wire verification over
        every step (module doc): verified or not, the byte totals, and ``ratio`` (1.0 when verified).
        """
        steps = self.steps[skip:] or self.steps
        if not steps:
            return {"steps": 0}
        policy = policy or TimingPolicy()

        def med(key: str) -> float:
            return float(np.median([s.total(key) for s in steps]))

        load = load_per_core()
        timing = {}
        for key in ("compress_s", "communicate_s", "decompress_s"):
            vals = [s.total(key) for s in steps]
            spread = rel_ci(vals)
            q1, q3 = np.percentile(vals, [25, 75])
            flags = []
            if (spread is not None and spread > policy.unstable_rel_ci) or (load is not None and load > policy.load_per_core):
                flags.append(UNSTABLE)
            if len(vals) < 5:
                flags.append(TOO_FEW_STEPS)
            timing[key.removesuffix("_s")] = {"median_s": float(np.median(vals)), "iqr_s": float(q3 - q1), "rel_iqr": rel_iqr(vals),
                                              "rel_ci": spread,
                                              "n": len(vals), "flags": flags}
        payload = float(np.mean([s.total("payload_bytes") for s in self.steps]))
        dense = float(np.mean([s.total("dense_bytes") for s in self.steps]))
        return {
            "ratio": dense / payload if payload > 0 else None,
            "timing": timing,
            "load_per_core": load,
            "steps": len(self.steps),
            "payload_bytes_total": int(sum(s.total("payload_bytes") for s in self.steps)),
            "sent_bytes_total": int(sum(s.total("sent_bytes") for s in self.steps)),
            "payload_bytes_per_step": float(np.mean([s.total("payload_bytes") for s in self.steps])),
            "sent_bytes_per_step": float(np.mean([s.total("sent_bytes") for s in self.steps])),
            "dense_bytes_per_step": float(np.mean([s.total("dense_bytes") for s in self.steps])),
            "compress_s_median": med("compress_s"),
            "communicate_s_median": med("communicate_s"),
            "decompress_s_median": med("decompress_s"),
            "buckets": len(steps[-1].buckets),
            "collectives": sorted({b.collective for s in steps for b in s.buckets}),
            "decoded_payloads": max(b.decoded_payloads for s in steps for b in s.buckets),
            "wire": self.wire_summary(),
        }

    to_dict = as_dict

    def wire_summary(self) -> dict[str, Any]:
        """The wire verification over every recorded step: ``verified`` (None when nothing was checked), totals, ``ratio``."""
        buckets = [b for s in self.steps for b in s.buckets]
        checked = [b.wire_verified for b in buckets if b.wire_verified is not None]
        tot = {k: int(sum(getattr(b, k) for b in buckets)) for k in ("promised_bytes", "overhead_bytes", "padding_bytes", "wire_bytes")}
        return {"verified": all(checked) if checked else None, **tot,
                "ratio": wire_ratio(tot["wire_bytes"], tot["overhead_bytes"], tot["padding_bytes"], tot["promised_bytes"])}


def _bytes_text(n: float) -> str:
    """A byte count at a readable scale (binary units, as the report tables)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _ms_text(s: float | None) -> str:
    return "?" if s is None else f"{s * 1e3:.3g} ms"


class HookSummary(dict[str, Any]):
    """:meth:`HookStats.summary`: the summary's dict, printed as a few readable lines instead of one nested dict.

    A ``dict`` subclass so that every existing ``summary()["wire"]`` keeps working; ``str()`` and ``repr()`` are the
    text (what ``print(hook.stats.summary())`` and an interactive session show), :meth:`as_dict` a plain dict.
    """

    def as_dict(self) -> dict[str, Any]:
        """The numbers as a plain dict (for JSON and scripts)."""
        return dict(self)

    to_dict = as_dict

    def text(self) -> str:
        """One line per subject: steps and buckets, bytes per step, each timed phase, the wire check, the load."""
        if not self.get("steps"):
            return "hook summary: no step recorded"
        lines = [f"hook summary: {self['steps']} steps, {self['buckets']} bucket(s) a step, "
                 f"collectives {', '.join(self['collectives']) or '-'}, {self['decoded_payloads']} payload(s) decoded per unit"]
        ratio = self.get("ratio")
        per_step = (f"payload {_bytes_text(self['payload_bytes_per_step'])}, sent {_bytes_text(self['sent_bytes_per_step'])}, "
                    f"dense {_bytes_text(self['dense_bytes_per_step'])}")
        lines.append(f"  bytes/step:  {per_step}" + (f" (dense/payload {ratio:.3g}x)" if ratio else ""))
        lines.append(f"  totals:      payload {_bytes_text(self['payload_bytes_total'])}, sent {_bytes_text(self['sent_bytes_total'])}")
        for name, t in self.get("timing", {}).items():
            flags = f"  [{', '.join(t['flags'])}]" if t.get("flags") else ""
            lines.append(f"  {name + ':':<12} median {_ms_text(t['median_s'])} a step, IQR {_ms_text(t['iqr_s'])} (n={t['n']}){flags}")
        wire = self.get("wire") or {}
        state = {True: "verified", False: "NOT verified", None: "not checked"}[wire.get("verified")]
        wr = wire.get("ratio")
        lines.append(f"  wire:        {state}" + ("" if wr is None else f", ratio {wr:.4g}")
                     + f" ({_bytes_text(wire.get('wire_bytes', 0))} on the wire, {_bytes_text(wire.get('overhead_bytes', 0))} overhead, "
                       f"{_bytes_text(wire.get('padding_bytes', 0))} padding)")
        load = self.get("load_per_core")
        lines.append(f"  load/core:   {'unknown' if load is None else f'{load:.2f}'} when summarised")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__
