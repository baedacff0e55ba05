"""What ``gcbench advise`` answers: each compressor's predicted step (:class:`Step`), the compressors on one cluster
(:class:`Scenario`) and the whole answer with the inputs it came from (:class:`Advice`).

The types only: :func:`gcbench.predict.advise.advise` makes them, :mod:`gcbench.predict.advise_text` says them in
sentences, :mod:`gcbench.report.advice` renders them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

from gcbench.predict.accuracy import ConvergenceInput, ScenarioTime
from gcbench.predict.network import Topology
from gcbench.predict.step_kernels import KernelSet, StepKernels
from gcbench.results.calibration import Calibration
from gcbench.results.recommend import DELIVERED_FLOOR

#: a compressor whose predicted speed-up is within this factor of the best one's could be moved above it by a flagged
#: kernel (a flag means the median's 95% CI is wider than ±10%), so its flags put the answer in doubt
CONTENDER_MARGIN = 1.25


@dataclass(frozen=True)
class Delivered:
    """A compressor's delivered fraction of the dense update over a stream (with its CI over workers), from a results file."""

    value: float
    ci_lo: float | None
    ci_hi: float | None
    steps: int | None
    # False: an error-feedback compressor on a stream shorter than its residual needs to drain (recommend.Point.judged),
    # whose fraction is no verdict on it: never "under the floor", named as not judged
    judged: bool = True
    drain: int | None = None  # the steps its residual needs to drain, where its configuration says (1/density)


@dataclass(frozen=True)
class Step:
    """One compressor's predicted step on one cluster (seconds)."""

    label: str
    compressor: str
    collective: str
    compute_s: float
    compress_s: float
    communicate_s: float
    decompress_s: float
    step_s: float
    speedup: float  # the reference step over this one: above 1 compression pays
    delivered: Delivered | None = None
    flags: tuple[str, ...] = ()
    speedup_bf16: float | None = None  # the bf16 all-reduce's step over this one (:attr:`Scenario.bf16_step_s`)
    larger_than_bf16: bool = False  # one worker's payload is larger than the bf16 cast's
    payload_bytes: float | None = None  # one worker's payload of the step on this cluster's workers (THC's widen with N)

    def speedup_vs(self, baseline: str) -> float:
        """The speed-up over the ``baseline`` all-reduce (``bf16`` or ``fp32``; fp32 where bf16 was not priced)."""
        return self.speedup_bf16 if baseline == "bf16" and self.speedup_bf16 is not None else self.speedup


@dataclass(frozen=True)
class ComputeDrift:
    """One cluster's answer priced at each end of a compute time that drifted during the run (the lowest and highest
    medians measured): the compute time adds to every step alike, so the ranking and whether compression pays seldom
    move with it while the speed-ups do.  Where the answer is the same at both ends the drift is no reason to distrust
    it; the sentence gives the speed-up at both."""

    low_s: float
    high_s: float
    answer_low: str  # :attr:`Scenario.answer` priced at ``low_s``
    answer_high: str
    claim_low: float  # the speed-up over the claims' baseline at ``low_s`` of :attr:`Scenario.lead` at the median
    claim_high: float

    @property
    def holds(self) -> bool:
        return self.answer_low == self.answer_high


@dataclass(frozen=True)
class Scenario:
    """Every compressor on one cluster: workers × bandwidth, the reference step, the steps ranked fastest first."""

    workers: int
    bandwidth_gbps: float
    reference_step_s: float
    reference_communicate_s: float
    steps: tuple[Step, ...]
    bf16_step_s: float | None = None  # the bf16 all-reduce's step (:func:`gcbench.predict.advise.bf16_of_kernels`)
    baseline: str = "bf16"  # the reference claims are made against (:data:`gcbench.predict.step.BASELINES`)
    drift: ComputeDrift | None = None  # the answer at each end of a compute time that drifted during the run

    @property
    def answer(self) -> str:
        """What the scenario's sentence answers: the compressor it recommends, else that none pays or none both pays and
        delivers enough."""
        if self.recommendable:
            return self.recommendable[0].label
        return "none pays" if not self.paying else "none both pays and delivers enough"

    @property
    def lead(self) -> Step:
        """The compressor the sentence gives a speed-up for: the one recommended, else the fastest."""
        return self.recommendable[0] if self.recommendable else self.steps[0]

    @property
    def claim_baseline(self) -> str:
        """The baseline the claims are made against: :attr:`baseline`, fp32 where bf16 was not priced."""
        return self.baseline if self.baseline == "fp32" or self.bf16_step_s is not None else "fp32"

    @property
    def baseline_step_s(self) -> float:
        """The step of :attr:`claim_baseline`."""
        return self.bf16_step_s if self.claim_baseline == "bf16" and self.bf16_step_s is not None else self.reference_step_s

    def claim(self, s: Step) -> float:
        """``s``'s speed-up over :attr:`claim_baseline`."""
        return s.speedup_vs(self.claim_baseline)

    @property
    def paying(self) -> list[Step]:
        """The compressors faster than the claims' baseline all-reduce (bf16 by default), fastest first."""
        return [s for s in self.steps if self.claim(s) > 1.0]

    @property
    def recommendable(self) -> list[Step]:
        """The paying compressors that deliver at least :data:`DELIVERED_FLOOR` of the dense update, were not measured, or
        whose fraction is no verdict on them (:attr:`not_judged`)."""
        return [s for s in self.paying if s.delivered is None or not s.delivered.judged or s.delivered.value >= DELIVERED_FLOOR]

    @property
    def below_floor(self) -> list[Step]:
        """The paying compressors whose measured delivered fraction is under :data:`DELIVERED_FLOOR`: never recommended."""
        return [s for s in self.paying if s.delivered is not None and s.delivered.judged and s.delivered.value < DELIVERED_FLOOR]

    @property
    def not_judged(self) -> list[Step]:
        """The paying error-feedback compressors under the floor on a stream shorter than their residual needs to drain:
        their open-loop fraction is no verdict (they send the rest later), so neither rejected nor vouched for."""
        return [s for s in self.paying if s.delivered is not None and not s.delivered.judged and s.delivered.value < DELIVERED_FLOOR]


def is_bf16(k: StepKernels) -> bool:
    """Whether ``k`` is the bf16 cast at its defaults: the kernels of the 16-bit baseline claims are made against."""
    return k.compressor == "bf16" and not k.params


@dataclass(frozen=True)
class Advice:
    """The answer of ``gcbench advise``: scenarios and the inputs they came from."""

    model: str
    kernels: KernelSet
    compute_s: float
    compute_origin: str  # "given" or "measured on this machine (…)"
    latency_s: float
    scenarios: tuple[Scenario, ...]
    fidelity_origin: str | None = None
    topology: Topology = field(default_factory=Topology)
    overlap: bool = False
    calibration: Calibration | None = None  # collectives priced as measured on the network (else the α–β model)
    compute_flags: tuple[str, ...] = ()  # what was wrong with the measured compute time, after its re-measurement
    baseline: str = "bf16"  # the all-reduce claims are made against (:data:`gcbench.predict.step.BASELINES`)
    bf16_origin: str = ""  # how the bf16 all-reduce was priced (:func:`gcbench.predict.advise.bf16_of_kernels`)
    convergence_origin: str | None = None  # the convergence file time to accuracy was ranked with (else accuracy unmeasured)
    # which compressors were timed and why (:meth:`gcbench.predict.inputs.Candidates.text`; "" when the user named them)
    candidates: str = ""
    convergence: ConvergenceInput | None = None  # the convergence file read for time to accuracy
    times: tuple[ScenarioTime, ...] = ()  # per scenario, time to the convergence file's target (with ``convergence``)
    compute_drift_s: tuple[float, float] | None = None  # the compute time drifted: its lowest and highest medians

    @property
    def drift_holds(self) -> bool:
        """The compute time drifted and every cluster's answer is the same at both ends (:class:`ComputeDrift`); with a
        convergence file never, since the times to accuracy are not priced at both ends."""
        return (self.compute_drift_s is not None and not self.times and bool(self.scenarios)
                and all(sc.drift is not None and sc.drift.holds for sc in self.scenarios))

    def _compute_flags(self, drift_holds: bool) -> list[str]:
        """The compute time's flags by name, less ``drifted`` where the answers hold at both ends of the drift."""
        names = dict.fromkeys(r.split(":")[0] for r in self.compute_flags)
        return [f"compute per step ({f})" for f in names if not (drift_holds and f == "drifted")]

    def untrusted(self) -> list[str]:
        """The flagged timings every scenario's answer rests on, by name: the compute time (its drift only where some
        answer moves with it), and any compressor's kernels (a flagged kernel could move a compressor above or below the
        one named best).  :meth:`untrusted_reasons` says why."""
        out = self._compute_flags(self.drift_holds)
        out += [f"{k.label} ({', '.join(k.flags)})" for k in self.kernels.kernels if k.flags]
        return out

    def untrusted_reasons(self) -> list[str]:
        """Each flagged timing of :meth:`untrusted` with what triggered its flags (measured values and thresholds)."""
        holds = "; every answer is the same at both ends, its speed-up given at each" if self.drift_holds else ""
        out = [f"compute per step — {r}" + (holds if r.startswith("drifted") else "") for r in self.compute_flags]
        out += [f"{k.label} — {'; '.join(k.reasons) if k.reasons else ', '.join(k.flags)}" for k in self.kernels.kernels if k.flags]
        return out

    def untrusted_for(self, sc: Scenario) -> list[str]:
        """The flagged timings one scenario's sentence rests on: the compute time, and the kernels of the compressors it
        names (the best and the next two that pay) or that come within :data:`CONTENDER_MARGIN` of the best, which a
        flagged kernel could move above it.  A flagged kernel of a compressor far behind changes no answer: calling
        every sentence untrustworthy for it made the caveat ride on nearly every quiet run (one of 19 kernels just over
        ±10% is common on a machine whose cores other processes share)."""
        ranked = list(sc.recommendable) or list(sc.paying) or list(sc.steps)
        if not ranked:
            return self.untrusted()
        lead = ranked[0].speedup
        relevant = {s.label for s in ranked[:3]} | {s.label for s in sc.steps if s.speedup * CONTENDER_MARGIN >= lead}
        if self.bf16_origin.startswith("measured"):  # the bf16 kernels price the baseline every claim is made against
            relevant |= {k.label for k in self.kernels.kernels if is_bf16(k)}
        out = self._compute_flags(sc.drift is not None and sc.drift.holds)
        out += [f"{k.label} ({', '.join(k.flags)})" for k in self.kernels.kernels if k.flags and k.label in relevant]
        return out

    def to_dict(self) -> dict[str, Any]:
        """The advice's fields, its kernels and what is untrusted (the convergence and the times are rendered apart:
        :func:`gcbench.report.advice.advice_json`)."""
        d = asdict(dataclasses.replace(self, convergence=None, times=()))
        del d["convergence"], d["times"]
        d["kernels"]["kernels"] = [asdict(k) for k in self.kernels.kernels]
        d["untrusted"] = self.untrusted()
        d["untrusted_reasons"] = self.untrusted_reasons()
        return d


@dataclass(frozen=True)
class Pricing:
    """A convergence file priced on named clusters (``report --cluster``): the advice per cluster and the times."""

    conv: ConvergenceInput
    advice: Advice
    times: tuple[ScenarioTime, ...]
