"""One compressor's cost of one worker-step of a model, read from a bench or a run file (:mod:`gcbench.predict.advise`'s input).

* :class:`StepKernels`: compress and decode seconds, their ×copy medians (what a step is priced by) and those medians'
  95% CIs (a step's spread), the copy of the same tensors, the bytes one worker sends, the timing flags and why.
* :func:`kernels_from_bench`: the whole-model cases of ``gcbench bench --model`` (one isolated process per compressor).
* :func:`step_kernels_of` / :func:`kernels_from_run`: the in-run timings of one source of a ``run``/``compare`` file.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gcbench.core.errors import ResultsError
from gcbench.predict.step import StepCost
from gcbench.results.bench_record import BenchCase
from gcbench.results.record import RunRecord, XCopy
from gcbench.results.run_record import RunCase


@dataclass(frozen=True)
class StepKernels:
    """One compressor's cost of one worker-step of the model (seconds and bytes), from one bench case."""

    label: str
    compressor: str
    compress_s: float
    decompress_s: float  # decoding one worker's payloads of a step
    copy_s: float  # a plain copy of the same tensors, measured beside the kernels
    wire_bytes: float  # what one worker sends per step (its payloads)
    dense_bytes: float  # the step's gradient in fp32
    flags: tuple[str, ...] = ()  # the bench's timing flags of compress and decompress (unstable, …)
    tensors: int = 1  # tensors one step compresses (TernGrad's shared scaler: one float each)
    params: tuple[tuple[str, Any], ...] = ()  # the configuration: the protocol can depend on it (TernGrad's share_scaler)
    # the kernels' median ×copy (time / the copy of the same rounds): what they are priced by (:meth:`priced`); None in
    # hand-made inputs, which are priced by their seconds
    compress_x_copy: float | None = None
    decompress_x_copy: float | None = None
    reasons: tuple[str, ...] = ()  # what triggered each flag ("compress unstable: …"), for the caveat sentence
    # the 95% CIs of those medians (bench's distribution-free interval): the step time's spread (:meth:`at_ci`)
    compress_x_copy_ci: tuple[float, float] | None = None
    decompress_x_copy_ci: tuple[float, float] | None = None
    measured_workers: int = 1  # the workers whose exchange ``wire_bytes`` was measured in (1: a bench's compress alone)

    @property
    def larger_than_bf16(self) -> bool:
        """Whether one worker's payload of a step is larger than the bf16 cast's (half the dense fp32 bytes)."""
        from gcbench.results.recommend import larger_than_bf16

        return larger_than_bf16(self.wire_bytes, self.dense_bytes)

    def at_ci(self, end: int) -> StepKernels:
        """These kernels priced at the low (``end`` 0) or high (1) end of their ×copy 95% CIs (unchanged where there is none)."""
        c = self.compress_x_copy_ci[end] if self.compress_x_copy_ci and self.compress_x_copy is not None else self.compress_x_copy
        d = self.decompress_x_copy_ci[end] if self.decompress_x_copy_ci and self.decompress_x_copy is not None else self.decompress_x_copy
        return dataclasses.replace(self, compress_x_copy=c, decompress_x_copy=d)

    def priced(self, copy_s: float) -> tuple[float, float]:
        """(compress, decompress) seconds charged a step: ×copy × ``copy_s`` (the reference's copy), else the raw seconds."""
        c = self.compress_x_copy * copy_s if self.compress_x_copy is not None else self.compress_s
        d = self.decompress_x_copy * copy_s if self.decompress_x_copy is not None else self.decompress_s
        return c, d

    def cost(self, compute_s: float, copy_s: float | None = None) -> StepCost:
        """The cost description a step is priced by (:func:`gcbench.predict.step.price_step`): the kernels
        :meth:`priced` against ``copy_s`` (the reference's copy; default: this case's own copy), ``compute_s`` a step."""
        copy = self.copy_s if copy_s is None else copy_s
        comp_s, dec_s = self.priced(copy)
        return StepCost(self.label, self.compressor, self.wire_bytes, self.dense_bytes, compute_s, comp_s, dec_s, copy,
                        self.tensors, self.params, self.measured_workers)


@dataclass(frozen=True)
class KernelSet:
    """Every compressor's step kernels on one model and one device, and where they come from."""

    model: str
    device: str
    machine: str
    origin: str  # the bench file
    kernels: tuple[StepKernels, ...]
    budget_s: float | None = None  # the time budget the bench's timing had (advise's --budget; None: a bench's own)
    timing_s: float | None = None  # … and the seconds it took

    def get(self, label: str) -> StepKernels | None:
        return next((k for k in self.kernels if k.label == label), None)

    @property
    def cut_short(self) -> list[str]:
        """The compressors whose kernels the time budget stopped before their rounds were pinned down."""
        from gcbench.measure.bench import CUT_SHORT  # here: the bench's imports are not every reader's

        return [k.label for k in self.kernels if CUT_SHORT in k.flags]

    def budget_text(self) -> str:
        """The clause that states the timing's budget, what it took and what it cut short ("" without a budget)."""
        if self.budget_s is None:
            return ""
        took = f", took {self.timing_s:.0f} s" if self.timing_s is not None else ""
        cut = self.cut_short
        return (f"kernels timed within a {self.budget_s:g} s budget (--budget SECONDS{took}); "
                + (f"{len(cut)} of {len(self.kernels)} cut short by it (flagged *: {', '.join(cut[:6])}"
                   + (f" and {len(cut) - 6} more" if len(cut) > 6 else "") + ")" if cut else "none cut short by it"))


def reference_copy(kernels: Sequence[StepKernels]) -> float:
    """The copy of the step's tensors DDP's bucket copies are charged and every ×copy is priced against: the fastest
    of the kernels' copies (load only ever slows a copy down: a case timed while the machine stalled measured its copy
    at 4 ms against 0.12)."""
    return min(k.copy_s for k in kernels)


def _machine(record: RunRecord) -> str:
    """The machine a results record was measured on, for the output's provenance line."""
    env = record.env
    return f"{env.cpu_model or 'unknown CPU'}, {env.cpu_count or '?'} cores"


def kernels_from_bench(record: RunRecord, model: str | None = None, origin: str = "") -> KernelSet:
    """The :class:`KernelSet` of a bench results record made with ``--model`` (one model; ``model`` picks one when it holds several)."""
    cases = [c for c in record.cases if isinstance(c, BenchCase) and c.ok and c.model]
    models = sorted({str(c.model) for c in cases})
    if not models:
        raise ResultsError(f"{origin or 'the bench file'} has no whole-model cases: make one with `gcbench bench --model NAME`")
    if model is None:
        if len(models) > 1:
            raise ResultsError(f"{origin or 'the bench file'} holds steps of {', '.join(models)}: name one with --model")
        model = models[0]
    elif model not in models:
        raise ResultsError(f"{origin or 'the bench file'} has no cases of {model} (it has {', '.join(models)})")
    out = []
    for c in cases:
        if c.model != model or c.compress is None or c.decompress is None or c.copy_ is None or not c.ratio or not c.input_bytes:
            continue
        xc = c.x_copy or {}
        flags, reasons = _flags_of({k: xc.get(k) for k in ("compress", "decompress")})
        out.append(StepKernels(c.name, c.compressor, float(c.compress.median_s or 0.0), float(c.decompress.median_s or 0.0),
                               float(c.copy_.median_s or 0.0), float(c.input_bytes) / float(c.ratio), float(c.input_bytes),
                               flags, int(c.tensors or 1), tuple(sorted((c.params or {}).items())),
                               _median_of(xc.get("compress")), _median_of(xc.get("decompress")), reasons,
                               _ci_of(xc.get("compress")), _ci_of(xc.get("decompress"))))
    device = next((str(c.device) for c in cases if c.model == model and c.device), "cpu")
    machine = _machine(record)
    setup = (record.suite.model_extra or {}) if record.suite is not None else {}
    budget, took = setup.get("budget_s"), setup.get("timing_s")
    return KernelSet(model, device, machine, origin, tuple(out), float(budget) if isinstance(budget, int | float) else None,
                     float(took) if isinstance(took, int | float) else None)


def _median_of(x: XCopy | None) -> float | None:
    """A ×copy block's median where it is a usable price (finite, positive), else None (priced by seconds)."""
    v = x.median if x is not None else None
    return float(v) if v is not None and math.isfinite(v) and v > 0 else None


def _ci_of(x: XCopy | None) -> tuple[float, float] | None:
    """A ×copy block's median 95% CI where both ends are usable prices around a usable median, else None."""
    if x is None or _median_of(x) is None or x.ci_lo is None or x.ci_hi is None:
        return None
    lo, hi = float(x.ci_lo), float(x.ci_hi)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi else None


def _flags_of(blocks: Mapping[str, XCopy | None]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The flags of a case's kernels (sorted, each once) and, per kernel and flag, what triggered it."""
    flags: set[str] = set()
    reasons: list[str] = []
    for kernel, x in blocks.items():
        for f in (x.flags or []) if x is not None else []:
            flags.add(f)
            why = (x.reasons or {}).get(f) if x is not None else None
            reasons.append(f"{kernel} {f}" + (f" ({why})" if why else ""))
    return tuple(sorted(flags)), tuple(reasons)


def step_kernels_of(cases: Sequence[Any]) -> tuple[list[StepKernels], float | None]:
    """The step kernels of ``cases`` (one source's cases of a ``run``/``compare`` record: the in-run timings of worker 0's
    step, against the pooled copy) and that source's measured compute time per worker-step (live sources; else None)."""
    out = []
    ok = [c for c in cases if isinstance(c, RunCase) and c.ok]
    for c in ok:
        t, size = c.timing, c.size
        comp_s, dec_s = c.metric("compress_s"), c.metric("decompress_s")
        if t is None or size is None or comp_s is None or dec_s is None or not size.wire_bytes or not size.dense_bytes:
            continue
        copy_s = t.pooled_copy_s or (t.copy_.median_s if t.copy_ is not None else None)
        if not copy_s:
            continue
        blocks = {k: t.x_copy(k) for k in ("compress", "decompress")}
        flags, reasons = _flags_of(blocks)
        # ×copy against the copy its baseline chose (a memory-bound kernel's own rounds', else the pooled one): the price
        out.append(StepKernels(c.label, str(c.compressor or c.label), float(comp_s), float(dec_s), float(copy_s),
                               float(size.wire_bytes), float(size.dense_bytes), flags, len(c.layers or []) or 1,
                               tuple(sorted((c.params or {}).items())), _median_of(blocks["compress"]),
                               _median_of(blocks["decompress"]), reasons, _ci_of(blocks["compress"]), _ci_of(blocks["decompress"]),
                               int(c.source.workers or 1) if c.source is not None else 1))
    compute = next((c.source.compute_s for c in ok if c.source is not None and c.source.compute_s), None)
    return out, float(compute) if compute else None


def kernels_from_run(record: RunRecord, source_label: str, origin: str = "") -> tuple[KernelSet, float | None]:
    """:func:`step_kernels_of` the cases of one source of a results record, as a :class:`KernelSet`."""
    cases = [c for c in record.cases if isinstance(c, RunCase) and c.source_label == source_label]
    kernels, compute = step_kernels_of(cases)
    model = next((str(c.source.model) for c in cases if c.source is not None and c.source.model), source_label)
    device = next((str(c.timing.device) for c in cases if c.timing is not None and c.timing.device), "cpu")
    return KernelSet(model, device, _machine(record), origin, tuple(kernels)), compute
