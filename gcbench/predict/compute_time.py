"""The compute time advise prices a step with: one forward + backward of the model on this machine, timed like a kernel.

Calibrated rounds (:data:`COMPUTE_POLICY`), a flagged measurement repeated once, two measurements taken before and
after the kernels' bench and compared (:func:`combine_compute`), and a fresh measurement held against the one a recent
bench of the same model stored (:func:`against_previous`): a shared machine's speed can move between minutes while each
measurement looks steady alone.  :func:`store_compute` keeps the time beside the kernels in their bench file, so
advise reusing those kernels (:mod:`gcbench.results.bench_cache`) reuses the compute measured with them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcbench.measure.timing import CpuMeter, TimingPolicy, calibration_done, flag_reasons, load_per_core, rel_ci
from gcbench.results.record import TOO_SHORT, RunRecord

Progress = Callable[[str, int, int, str], None]


@dataclass(frozen=True)
class ComputeTiming:
    """One step's forward + backward time on this machine: the median over calibrated rounds, and whether to trust it."""

    median_s: float
    samples: tuple[float, ...]
    flags: tuple[str, ...] = ()  # unstable: the rounds disagreed, or other processes took the CPU, in every attempt
    reasons: tuple[str, ...] = ()  # what triggered each flag of the attempt kept
    attempts: int = 1  # measurements made: a flagged one is measured once more
    # drifted: the lowest and highest of the medians that disagreed (before and after the kernels, or now and the last
    # bench's), which advise prices each answer at (:class:`gcbench.predict.advice_model.ComputeDrift`); None: no drift
    drift_s: tuple[float, float] | None = None


#: compute is timed like a kernel (:func:`gcbench.measure.timing.calibration_done`): 5 steps at least, more until the
#: median's 95% CI is within ±5%, at most 30 steps or 20 s.  Three steps' median was 12.2-12.8 ms in three runs of
#: the mlp and 200 ms in a fourth, unflagged: nothing looked at the steps' agreement or at the machine.  Three warm-up
#: steps: the mlp's first steps take 3.5, 2.0 and 1.4 ms, then 1.3 (autograd's and the allocator's first use), and
#: one warm-up step left the second in the median of runs that stopped at 5 steps
COMPUTE_POLICY = TimingPolicy(warmup=3, min_rounds=5, max_rounds=30, budget_s=20.0)


def time_compute(step: Callable[[Any], Any], policy: TimingPolicy = COMPUTE_POLICY, attempts: int = 2, *,
                 clock: Callable[[], float] = time.perf_counter, meter: Callable[[], CpuMeter] = CpuMeter,
                 progress: Callable[[int], None] | None = None, prepare: Callable[[int], Any] | None = None) -> ComputeTiming:
    """Time ``step(prepare(i))`` (one forward + backward of batch i) in rounds until its median is pinned down; flagged
    (rounds disagree, or other processes took the CPU: :func:`gcbench.measure.timing.flag_reasons`), it is measured
    again, up to ``attempts`` times, and the least flagged attempt (then the tightest) is kept.

    ``prepare(i)`` (default: ``i`` itself) makes step i's input outside the timed region: a training loop's data
    loader works beside the step, so synthesising the batch (0.3-1 ms of the mlp's 1.3 ms step) is not compute."""
    make = prepare if prepare is not None else (lambda i: i)
    best: ComputeTiming | None = None
    best_key: tuple[int, float] = (0, 0.0)
    i = 0
    for attempt in range(1, attempts + 1):
        for _ in range(policy.warmup):
            step(make(i))
            i += 1
        cpu = meter().start()
        start, times = clock(), []
        while True:
            if progress:
                progress(i)
            batch = make(i)
            t0 = clock()
            step(batch)
            times.append(clock() - t0)
            i += 1
            if calibration_done({"compute": times}, clock() - start, policy) is not None:
                break
        med = statistics.median(times)
        why = flag_reasons(times, med, load_per_core(), policy, None, cpu.share())
        why.pop(TOO_SHORT, None)  # a step is not a kernel: the timer's resolution is no concern at its length
        got = ComputeTiming(med, tuple(times), tuple(why), tuple(f"{f}: {w}" for f, w in why.items()), attempt)
        key = (len(got.flags), rel_ci(times) or 0.0)
        if best is None or key < best_key:
            best, best_key = got, key
        if not got.flags:
            break
    assert best is not None
    return dataclasses.replace(best, attempts=attempt)


#: the most two measurements of the compute time, one before and one after the kernels are timed, may differ before
#: the answer says the machine changed speed under it: on a shared machine the mlp step took 1.3 ms in one minute and
#: 1.7-2.3 ms in the next, quiet both times, and each measurement alone looked steady
COMPUTE_DRIFT = 0.10


def combine_compute(before: ComputeTiming, after: ComputeTiming, limit: float = COMPUTE_DRIFT) -> ComputeTiming:
    """One compute time from two measurements taken apart in time (before and after the kernels' bench).

    The median is over both measurements' steps; flags and reasons of either stand, and the two medians
    differing by more than ``limit`` flags ``drifted``: a machine whose speed moved during the run gives
    a compute time (and so every speed-up) that the next run will not repeat, however steady each
    measurement was on its own.
    """
    samples = before.samples + after.samples
    flags = dict.fromkeys(before.flags + after.flags)
    reasons = list(dict.fromkeys(before.reasons + after.reasons))
    change = after.median_s / before.median_s - 1.0 if before.median_s > 0 else 0.0
    drift = None
    if abs(change) > limit:
        flags["drifted"] = None
        drift = (min(before.median_s, after.median_s), max(before.median_s, after.median_s))
        reasons.append(f"drifted: {before.median_s * 1e3:.3g} ms per step before the kernels were timed, "
                       f"{after.median_s * 1e3:.3g} ms after ({change:+.0%}, over ±{limit:.0%}): the machine changed speed "
                       "during the run, so the next run will not repeat these step times")
    return ComputeTiming(statistics.median(samples), samples, tuple(flags), tuple(reasons), before.attempts + after.attempts,
                         drift)


def against_previous(ct: ComputeTiming, previous: ComputeTiming | None, where: str, limit: float = COMPUTE_DRIFT) -> ComputeTiming:
    """``ct`` flagged ``drifted`` when it differs by more than ``limit`` from the compute time a recent bench of the same
    model on this machine stored (``previous``, from ``where``): each measurement can be steady on its own while the
    machine's speed moved between runs (the mlp's step: 1.3, 1.5 and 1.8 ms in three calls minutes apart, unflagged)."""
    if previous is None or previous.median_s <= 0:
        return ct
    change = ct.median_s / previous.median_s - 1.0
    if abs(change) <= limit:
        return ct
    reason = (f"drifted: {ct.median_s * 1e3:.3g} ms per step now, {previous.median_s * 1e3:.3g} ms in {where} ({change:+.0%}, "
              f"over ±{limit:.0%}): the machine's speed moved between runs, so another run will not repeat these step times")
    ends = (*(ct.drift_s or ()), ct.median_s, previous.median_s)
    return dataclasses.replace(ct, flags=tuple(dict.fromkeys((*ct.flags, "drifted"))), reasons=(*ct.reasons, reason),
                               drift_s=(min(ends), max(ends)))


def measure_compute(model: str, *, seed: int = 0, policy: TimingPolicy = COMPUTE_POLICY, attempts: int = 2,
                    progress: Progress | None = None, device: str = "cpu") -> ComputeTiming:
    """One forward + backward pass of zoo ``model`` at its default batch on ``device`` (:func:`time_compute`; on a GPU
    each step ends with a synchronisation, so the clock sees the kernels, not their launch)."""
    import torch

    from gcbench.sources.zoo import load_model

    zm = load_model(model, seed)
    module = zm.module.to(device)
    cuda = torch.device(device).type == "cuda"

    def step(batch: tuple[Any, Any]) -> None:
        inputs, targets = batch
        module.zero_grad(set_to_none=True)
        zm.loss_fn(module(inputs), targets).backward()
        if cuda:
            torch.cuda.synchronize(device)

    def prepare(i: int) -> tuple[Any, Any]:
        inputs, targets = zm.make_batch(i, 0)
        return inputs.to(device), targets.to(device)

    def tick(i: int) -> None:
        if progress:
            progress("compute", min(i, policy.max_rounds), policy.max_rounds, f"{model}: forward + backward passes")

    timed = time_compute(step, policy, attempts, progress=tick, prepare=prepare)
    if progress:  # stable before the last round: the measurement is done all the same (its bar closes)
        progress("compute", policy.max_rounds, policy.max_rounds, f"{model}: forward + backward passes")
    return timed


#: the key of a bench file under which advise stores the compute time it measured with the kernels
COMPUTE_KEY = "advise_compute"


def store_compute(path: Path, model: str, ct: ComputeTiming) -> None:
    """Add ``ct`` to the bench file advise just wrote (atomically), so a later call reusing its kernels reuses it too."""
    from gcbench.results.store import atomic_write_json

    data = json.loads(path.read_text(encoding="utf-8"))
    data[COMPUTE_KEY] = {"model": model, "median_s": ct.median_s, "samples": list(ct.samples), "flags": list(ct.flags),
                         "reasons": list(ct.reasons), "attempts": ct.attempts,
                         "drift_s": list(ct.drift_s) if ct.drift_s is not None else None}
    atomic_write_json(path, data)


def stored_compute(record: RunRecord, model: str) -> ComputeTiming | None:
    """The compute time :func:`store_compute` left in a bench record for ``model``, or None (a plain ``gcbench bench``)."""
    d = (record.model_extra or {}).get(COMPUTE_KEY)
    try:
        if not isinstance(d, dict) or d.get("model") != model or not float(d["median_s"]) > 0:
            return None
        return ComputeTiming(float(d["median_s"]), tuple(float(v) for v in d.get("samples") or ()),
                             tuple(str(f) for f in d.get("flags") or ()), tuple(str(r) for r in d.get("reasons") or ()),
                             int(d.get("attempts") or 1), _drift(d.get("drift_s")))
    except (KeyError, TypeError, ValueError):
        return None  # a hand-edited block: measure anew


def _drift(value: Any) -> tuple[float, float] | None:
    """A stored ``drift_s``: two medians, lowest first, each a positive finite number (else None, as in older files)."""
    if not isinstance(value, list) or len(value) != 2:
        return None
    lo, hi = float(value[0]), float(value[1])
    return (lo, hi) if 0 < lo <= hi < math.inf else None
