"""The decision curves of the HTML report: :func:`gcbench.predict.advise.advise_kernels`'s model over a sweep of link speeds.

A source of a run with live gradients has its own kernels (:func:`gcbench.predict.step_kernels.step_kernels_of`); this
predicts each case's speed-up over the fp32 or the bf16 all-reduce at every bandwidth of :data:`DECISION_BANDWIDTHS` and where it
crosses 1× (the break-even bandwidth: compression pays on slower links).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from gcbench.predict.advice_model import Advice
from gcbench.predict.advise import advise_kernels
from gcbench.predict.step_kernels import KernelSet, step_kernels_of
from gcbench.results.parse import as_cases

#: the decision curves' bandwidth axis (Gbit/s) and the latency they charge per message
DECISION_BANDWIDTHS = tuple(float(b) for b in np.logspace(-1, math.log10(400), 49))
DECISION_LATENCY_S = 5e-6


def crossing(xs: Sequence[float], ys: Sequence[float], level: float = 1.0) -> float | None:
    """The first ``x`` where the curve ``ys`` over log-spaced ``xs`` crosses ``level``, interpolated on the log axis (None: never)."""
    logs = [math.log10(x) for x in xs]
    for i in range(len(ys) - 1):
        a, b = ys[i] - level, ys[i + 1] - level
        if a > 0 >= b or a < 0 <= b:
            return 10 ** (logs[i] + (logs[i + 1] - logs[i]) * a / (a - b))
    return None


def _advice(cases: Sequence[Any]) -> tuple[int, float | None, Advice] | None:
    kernels, compute = step_kernels_of(cases)
    workers = next((int(c.source.workers) for c in as_cases(cases, "run") if c.ok and c.source is not None and c.source.workers), 0)
    if len(kernels) < 2 or workers < 2:
        return None
    ks = KernelSet("", "", "", "", tuple(kernels))
    return workers, compute, advise_kernels(ks, compute or 0.0, [workers], DECISION_BANDWIDTHS, DECISION_LATENCY_S)


def decision_curves(cases: Sequence[Any], baseline: str = "fp32"
                    ) -> tuple[int, float | None, dict[str, list[float]], dict[str, float | None]] | None:
    """(workers, compute time, per case label its predicted speed-up over the ``baseline`` all-reduce (``fp32`` or
    ``bf16``) at every :data:`DECISION_BANDWIDTHS`, its break-even bandwidth) from :func:`advise_kernels`'s model on a source's
    own kernels (:func:`step_kernels_of`); None without two timed cases or two workers.  The break-even is where the
    curve crosses 1× (:func:`crossing`): compression pays on slower links."""
    got = _advice(cases)
    if got is None:
        return None
    workers, compute, adv = got
    curves: dict[str, list[float]] = {k.label: [] for k in adv.kernels.kernels}
    for sc in adv.scenarios:
        for st in sc.steps:
            curves[st.label].append(st.speedup_vs(baseline))
    even = {label: crossing(DECISION_BANDWIDTHS, ys) for label, ys in curves.items()}
    return workers, compute, curves, even


def fp32_against_bf16(cases: Sequence[Any]) -> tuple[list[float], str] | None:
    """The fp32 all-reduce's speed-up over the bf16 all-reduce at every :data:`DECISION_BANDWIDTHS` (under 1: bf16's half
    bytes are faster) and how bf16 was priced (:func:`gcbench.predict.advise.bf16_of_kernels`); None as :func:`decision_curves`."""
    got = _advice(cases)
    if got is None:
        return None
    adv = got[2]
    return [sc.bf16_step_s / sc.reference_step_s for sc in adv.scenarios if sc.bf16_step_s is not None], adv.bf16_origin
