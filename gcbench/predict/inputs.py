"""What ``gcbench advise`` prices with, read or measured: the kernels, the compute time, the delivered fractions and the
closed-loop evidence.

Inputs, each measured apart from anything it predicts (nothing is fitted):

* **Kernels and bytes of one worker-step** on the model's own tensors, per compressor: the cases of
  ``gcbench bench --model NAME`` (an isolated process per compressor; compress of every tensor as
  a group, decode of all its payloads, and a copy of the same tensors), run here or read from a
  bench file measured elsewhere (``--kernels FILE``, e.g. ``gcbench bench --model resnet50 --device
  cuda --json`` on a GPU machine).  The device the kernels ran on is named in every output.
* **Compute time of one step**: given (``--compute-ms``: a GPU's, for a GPU cluster), or measured
  here — forward and backward of the zoo model at its default batch, median of steps after a warm-up
  — and then called this machine's.
* **Fidelity**: the fraction of the dense update a compressor delivers over a stream, from a
  ``run``/``compare`` results file with a source of the same model (``--results FILE``); without
  one the ranking says fidelity was not measured.

Timings that cannot be trusted are re-measured once (compute when its rounds disagree or other
processes took the CPU, a compressor's kernels when bench flagged them), and what is still flagged
is named in the scenario's sentence (:func:`gcbench.predict.advise_text.summary_line`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gcbench.compressors import registry
from gcbench.core.errors import ResultsError
from gcbench.predict.advice_model import Delivered
from gcbench.predict.compute_time import (
    COMPUTE_KEY,
    ComputeTiming,
    against_previous,
    combine_compute,
    measure_compute,
    store_compute,
    stored_compute,
)
from gcbench.predict.step_kernels import KernelSet, kernels_from_bench
from gcbench.results.bench_cache import find_recent_bench
from gcbench.results.recommend import ClosedEvidence, ClosedLoop, case_point
from gcbench.results.record import RunRecord
from gcbench.results.run_record import RunCase

Progress = Callable[[str, int, int, str], None]


#: the most rounds a kernel of advise's bench takes: bench's own cap, still bounded by its 3 s budget per case.  At 15
#: rounds a small model's 0.05-0.2 ms kernels (mlp) could not pin their medians down on a quiet machine: 11 of 19
#: compressors stayed flagged after re-measuring and the answer was called untrustworthy on every run; 40 rounds of
#: them cost milliseconds, while a large model's rounds stop at the budget
ADVISE_MAX_ROUNDS = 40


#: the time advise's kernel measurement may take by default (``--budget``), the second timing of flagged kernels
#: included: without it a cold advise of the mlp benched 26 compressors for 546 s on a busy machine, every figure
#: flagged and re-timed; within this budget the rounds of each case get its share and a figure the budget stopped early
#: is flagged ``cut short``.  At 60 s a cold advise of the mlp with two busy processes beside other work (load 4-6) took
#: 120 s in all (the compute time, measured before and after the kernels, and the command's start are the rest)
KERNEL_BUDGET_S = 45.0


def measure_kernels(model: str, specs: Sequence[str], out_dir: Path | str, *, rounds: int = 3, threads: int = 2,
                    device: str = "cpu", progress: Progress | None = None, budget_s: float | None = KERNEL_BUDGET_S) -> KernelSet:
    """Run ``gcbench bench --model`` for ``specs`` here (one worker process for all of them) within ``budget_s`` and
    read its file; a compressor whose timing was flagged ``unstable`` is timed once more, while the budget lasts, and the
    less flagged of the two kept."""
    from gcbench.measure.bench import bench_to_file

    outcome = bench_to_file(specs, [], out_dir, repeats=rounds, warmup=1, threads=threads, device=device, model=model,
                            progress=progress, remeasure=True, max_rounds=ADVISE_MAX_ROUNDS, budget_s=budget_s,
                            shared_worker=True)
    failed = [c for c in outcome.record.cases if not c.ok]
    if failed:
        raise ResultsError(f"bench --model {model} failed for {', '.join(c.name for c in failed)}: {failed[0].error_text}")
    return kernels_from_bench(outcome.record, model, str(outcome.path))


def family_of(name: str) -> str:
    """The family of a registered compressor: the module that implements it (``gcbench.compressors.lowprec`` holds
    blockint, fp8, mxfp4, mxfp8 and nvfp4), as its card names it — the registry's own unit, so a new card joins its
    family without a list to update."""
    return registry.get(name).impl.partition(":")[0]


def baseline_names() -> list[str]:
    """The compressors every advise weighs: the identity (the fp32 reference, DDP's own path) and the bf16 cast (the
    16-bit baseline claims are made against, measured rather than modelled)."""
    return [n for n in registry.names() if registry.get(n).identity] + [n for n in registry.names() if n == "bf16"]


@dataclass(frozen=True)
class Candidates:
    """The compressors a cold advise times by default, and the registered ones it leaves out (``--all`` times them)."""

    specs: tuple[str, ...]
    left_out: tuple[str, ...]

    def text(self) -> str:
        """What was timed and why, for the output's header."""
        if not self.left_out:
            return f"compressors: all {len(self.specs)} registered (--all)"
        return (f"compressors: the baselines and, per family (the module implementing it), the member whose card declares "
                f"the least memory traffic per element: {len(self.specs)} of {len(self.specs) + len(self.left_out)} "
                f"(left out: {', '.join(self.left_out)}; --all times every one, -c names them)")


def default_candidates(names: Sequence[str]) -> Candidates:
    """Of ``names`` (registered compressors), the baselines (:func:`baseline_names`) and one member per other family
    (:func:`family_of`): the one whose card declares the least memory traffic per element of its compress (the cheapest
    kernel; ties to the first name).  A family that holds a baseline is represented by it (the casts: fp16 is bf16's
    twin).  Timing every registered compressor cost a cold advise 26 cases for the answer of about 17 families."""
    base = [n for n in baseline_names() if n in names]
    fams: dict[str, list[str]] = {}
    for n in names:
        fams.setdefault(family_of(n), []).append(n)
    keep = set(base)
    for members in fams.values():
        if not keep.intersection(members):
            keep.add(min(members, key=lambda n: (registry.get(n).traffic_bytes, n)))
    chosen = [*base, *(n for n in names if n in keep and n not in base)]
    return Candidates(tuple(chosen), tuple(n for n in names if n not in keep))


def select_kernels(kernels: KernelSet, compressors: Sequence[str]) -> KernelSet:
    """``kernels`` with only the step kernels of the compressors ``compressors`` names (SPECs: their names count)."""
    wanted = {registry.parse_spec(sp)[0] for sp in compressors}
    return dataclasses.replace(kernels, kernels=tuple(k for k in kernels.kernels if k.compressor in wanted))


@dataclass(frozen=True)
class StepInputs:
    """What :func:`gcbench.predict.advise.advise` prices a step with: the kernels, the compute time, where that time comes
    from and its flags."""

    kernels: KernelSet
    compute_s: float
    compute_origin: str
    compute_flags: tuple[str, ...] = ()
    compute_drift_s: tuple[float, float] | None = None  # drifted: the lowest and highest medians measured (ComputeTiming)


def _age_text(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def step_inputs(model: str | None, specs: Sequence[str], out_dir: Path | str, *, kernels_file: Path | None = None,
                only: Sequence[str] | None = None, compute_s: float | None = None, rounds: int = 3,
                progress: Progress | None = None, remeasure: bool = False,
                budget_s: float | None = KERNEL_BUDGET_S, device: str = "cpu") -> StepInputs:
    """The kernels and the compute time of :func:`gcbench.predict.advise.advise`.

    The kernels are read from the bench file ``kernels_file`` (only those of the compressors ``only`` names, when
    given), else from a recent bench in ``out_dir`` of the same model, compressors, machine and gcbench version
    (:func:`gcbench.results.bench_cache.find_recent_bench`; not with ``remeasure``), else measured here for ``specs``
    on ``model`` within ``budget_s`` (:func:`measure_kernels`; the bench file goes to ``out_dir``).  The compute time
    is ``compute_s`` when given; else the one
    stored with a reused bench (measured with its kernels); else measured here: before and after the kernels when
    they are measured too, since two measurements a minute apart show a machine whose speed moved under the run
    (:func:`combine_compute`), and stored in the new bench file for the next call.  ``device`` (``cpu``, ``cuda``,
    ``cuda:N``) is where both are measured; a bench reused from ``out_dir`` is one measured on that device.
    """
    from gcbench.results.store import load_run

    before: ComputeTiming | None = None
    cached = (None if kernels_file is not None or remeasure or model is None
              else find_recent_bench(model, specs, out_dir, device=device))
    stored: ComputeTiming | None = None
    if kernels_file is not None:
        ks = kernels_from_bench(load_run(kernels_file), model, str(kernels_file))
        if only is not None:
            ks = select_kernels(ks, only)
    elif cached is not None:
        record, path, age_s = cached
        ks = select_kernels(kernels_from_bench(record, model, f"{path}, reused: measured {_age_text(age_s)} ago by this gcbench "
                                                             "on this machine; --remeasure times them again"), specs)
        stored = stored_compute(record, ks.model)
    else:
        assert model is not None
        before = measure_compute(model, progress=progress, device=device) if compute_s is None else None
        ks = measure_kernels(model, specs, out_dir, rounds=rounds, progress=progress, budget_s=budget_s, device=device)
    if compute_s is not None:
        return StepInputs(ks, compute_s, "given")
    if stored is not None:
        return StepInputs(ks, stored.median_s, f"measured on this machine's CPU with the reused kernels, median of "
                          f"{len(stored.samples)} steps; give --compute-ms for the cluster's devices", stored.reasons,
                          stored.drift_s)
    ct = measure_compute(ks.model, progress=progress, device=device if kernels_file is None else "cpu")
    if before is not None:
        ct = combine_compute(before, ct)
        store_compute(Path(ks.origin), ks.model, ct)
    if model is not None and kernels_file is None:  # a fresh measurement: does it agree with the last one stored here?
        last = find_recent_bench(model, [], out_dir, device=device, stored=COMPUTE_KEY,
                                 skip=Path(ks.origin) if before is not None else None)
        if last is not None:
            ct = against_previous(ct, stored_compute(last[0], model), f"the bench of {_age_text(last[2])} ago ({last[1]})")
    where = "this machine's CPU" if device == "cpu" or kernels_file is not None else f"this machine's {device}"
    origin = (f"measured on {where}, median of {len(ct.samples)} steps"
              + (f" in {ct.attempts} measurements" if ct.attempts > 1 else "")
              + "; give --compute-ms for the cluster's devices")
    return StepInputs(ks, ct.median_s, origin, ct.reasons, ct.drift_s)


def find_convergence(model: str, runs_dir: Path | str) -> tuple[RunRecord, Path] | None:
    """The newest convergence file (``gcbench converge``) in ``runs_dir`` of ``model`` (a zoo model is recorded as
    ``zoo:NAME``), or None: the closed-loop evidence a recommendation is held to when none was named.  Only files whose
    head says ``converge`` are parsed: a runs folder holds hundreds of run and bench files."""
    from gcbench.core.errors import GcbenchError
    from gcbench.predict.accuracy import read_convergence
    from gcbench.results.store import list_runs, load_run

    for path in reversed(list_runs(runs_dir)):
        try:
            with path.open(encoding="utf-8") as fh:
                if '"converge"' not in fh.read(4096):
                    continue
            record = load_run(path)
            read_convergence(record, model, str(path))
        except (OSError, UnicodeDecodeError, GcbenchError):
            continue  # unreadable, another kind or another model: not this model's evidence
        return record, path
    return None


def closed_evidence(record: RunRecord, model: str, origin: str, labels: Sequence[str]) -> ClosedEvidence:
    """The outcomes of a convergence file of ``model`` for the case ``labels`` (matched by configuration:
    ``topk:error_feedback=true`` as typed and ``=True`` as a file labels it are one), for
    :func:`gcbench.results.recommend.recommend`.  A file of another model is refused in one line."""
    from gcbench.predict.accuracy import read_convergence

    conv = read_convergence(record, model, origin)
    outcomes = {}
    for label in labels:
        o = conv.get(label)
        if o is not None:
            outcomes[label] = ClosedLoop(o.status, o.reached, o.seeds, o.steps.mean if o.steps else None,
                                         o.final.mean if o.final else None)
    ref = next((o for o in conv.outcomes if o.reference), None)
    return ClosedEvidence(f"{origin}: {conv.task}, {conv.seeds} seeds", conv.target_text, conv.budget,
                          ref.steps.mean if ref is not None and ref.steps is not None else None, outcomes)


def delivered_from_results(record: RunRecord, model: str, origin: str = "") -> dict[str, Delivered]:
    """Per case label, the delivered fraction on the one source of ``record`` that ran ``model`` (sources are never mixed)."""
    cases = [c for c in record.cases if isinstance(c, RunCase) and c.ok]
    labels = sorted({c.source_label for c in cases if c.source is not None and c.source.model == model})
    if not labels:
        raise ResultsError(f"{origin or 'the results file'} has no source of model {model}")
    if len(labels) > 1:
        raise ResultsError(f"{origin or 'the results file'} has {len(labels)} sources of {model} ({', '.join(labels)}); "
                           "keep one per file")
    out = {}
    for c in cases:
        if c.source_label != labels[0]:
            continue
        v = c.metric("delivered")
        if v is None:
            continue
        st = c.stream
        ci = st.worker_ci if st is not None else None
        p = case_point(c)
        out[c.label] = Delivered(float(v), ci.lo if ci else None, ci.hi if ci else None, st.steps if st is not None else None,
                                 p.judged if p is not None else True, p.drain if p is not None else None)
    return out
