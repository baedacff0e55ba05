"""Kernel benchmarks: compress/decompress time as a multiple of a memory copy, per compressor.

``gcbench bench`` times every compressor on a dense float32 tensor (default 25.6M elements, the
size of ResNet-50's gradient, as a 6400×4000 matrix) and reports, all measured in the same
process: the compress and decompress medians, the copy roofline (a copy of the same tensor into a
preallocated buffer), their ratio, the speed-up over the compressor's straightforward reference
implementation, and the peak extra resident memory during compress.  The copy is timed interleaved
with each kernel, round by round (:func:`gcbench.measure.timing.time_interleaved`, as in ``gcbench
run``), so ×copy is a per-round ratio with its spread and flags.  Each (compressor, size) runs
in a fresh Python process by default, because allocator state left by one compressor changed the
next one's timings by up to 5×.

The targets come from the fast-kernels issue; a row is ``pass`` when the measured ratio is within
its target, ``short`` otherwise.  Timings vary 10–30% run to run: read ratios, not absolute times.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gcbench.compressors import registry
from gcbench.compressors._common import k_of
from gcbench.core import liveness
from gcbench.core.compressor import Compressor
from gcbench.core.errors import GcbenchError
from gcbench.measure.bench_processes import merge_passes, passes_progress, worst
from gcbench.measure.bench_worker import SharedWorker, run_isolated
from gcbench.measure.copy_baseline import bench_copy_spread
from gcbench.measure.timing import (
    Interleaved,
    Timing,
    TimingPolicy,
    collect_garbage,
    flag_reasons,
    flat_like,
    time_call,
    time_interleaved,
    time_step,
    timer_name,
    x_copy_summary,
)
from gcbench.plan.reader import PlanError, case_of_spec
from gcbench.results.bench_diff import bench_source, compare_bench
from gcbench.results.bench_record import BenchCase
from gcbench.results.record import CUT_SHORT as CUT_SHORT_FLAG
from gcbench.results.record import RunRecord
from gcbench.results.store import RunWriter, load_run
from gcbench.sources import zoo

DEFAULT_NUMEL = 25_600_000

#: bench's calibration per kernel: ``--rounds`` timed rounds at least, then more until the ×copy median's 95% CI is within
#: the policy's ``stable_rel_ci`` (±5%), at most this many rounds or :data:`BENCH_BUDGET_S` of rounds.  With exactly 5
#: rounds the median's CI is the whole range, so one slow round (a page-fault storm, a timer tick) flagged a row
#: ``unstable``: 2 of 19 rows of the quiet reference bench, and no number of quiet rounds could clear it
BENCH_MAX_ROUNDS = 40
BENCH_BUDGET_S = 3.0

#: the largest benchmarked tensor (elements): 8 GiB of float32, as for a suite's synthetic tensor;
#: a bigger one cannot be allocated, and ``--sizes 1e300`` ran the shape search for the whole
#: 1,800 s subprocess timeout
MAX_NUMEL = 2**31


def matrix_shape(numel: int) -> tuple[int, ...]:
    """A 2-D shape with exactly ``numel`` elements (rows ≈ columns × 0.625, like a large FC layer).

    Rows are the largest divisor of ``numel`` at most the target; the divisors come from
    ``numel``'s factorisation by trial division, O(sqrt(numel)) at worst (a prime) instead of a
    step-by-one search down from the target.  ``numel`` above :data:`MAX_NUMEL` is refused.
    """
    if not 0 <= numel <= MAX_NUMEL:
        raise GcbenchError(f"size {numel:,}: must be 0 to {MAX_NUMEL:,} (2**31) elements")
    if numel < 16:
        return (numel,)
    target = max(1, int(math.sqrt(numel / 0.625) * 0.625))
    factors: dict[int, int] = {}
    n, p = numel, 2
    while p * p <= n:
        while n % p == 0:
            n //= p
            factors[p] = factors.get(p, 0) + 1
        p += 1 if p == 2 else 2
    if n > 1:
        factors[n] = factors.get(n, 0) + 1
    divisors = [1]  # at most 1,536 divisors below 2**31
    for prime, power in factors.items():
        divisors = [d * prime**k for d in divisors for k in range(power + 1)]
    rows = max(d for d in divisors if d <= target)
    return (rows, numel // rows)


def _vm_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM (Linux >= 4.0)
        return True
    except OSError:
        return False


def bench_policy(repeats: int, warmup: int, max_rounds: int | None = None, budget_s: float | None = None) -> TimingPolicy:
    """The timing policy of a bench case: at least ``repeats`` rounds, more until the median is pinned down
    (at most ``max_rounds``, default :data:`BENCH_MAX_ROUNDS`, or ``budget_s``, default :data:`BENCH_BUDGET_S`)."""
    top = max(repeats, BENCH_MAX_ROUNDS if max_rounds is None else max_rounds)
    return TimingPolicy(warmup=warmup, min_rounds=repeats, max_rounds=top, budget_s=BENCH_BUDGET_S if budget_s is None else budget_s)


#: the flag of a kernel whose rounds a whole-sweep time budget stopped before they were pinned down (:func:`run_bench`'s
#: ``budget_s``, advise's ``--budget``): with a bench's own :data:`BENCH_BUDGET_S` it might have taken more rounds
CUT_SHORT = CUT_SHORT_FLAG
#: of a case's share of a sweep's budget, what its calibrated rounds may take: the rest pays for the warm-up round, the
#: payloads decoded and the model's tensors made, which the calibration's clock does not see
CALIBRATION_SHARE = 0.5
#: the least calibration budget a case gets however little of the sweep's budget is left: its minimum rounds still run
MIN_CASE_BUDGET_S = 0.05


def case_budget(budget_left_s: float, cases_left: int, overhead_s: float | None = None) -> float:
    """The calibration budget of the next case of a sweep with ``budget_left_s`` of its time budget left for
    ``cases_left`` cases: its even share less ``overhead_s`` (what a case has cost beyond its rounds so far), or
    :data:`CALIBRATION_SHARE` of it before any case has shown its overhead; never above a bench's own
    :data:`BENCH_BUDGET_S` nor under :data:`MIN_CASE_BUDGET_S`."""
    even = max(0.0, budget_left_s) / max(1, cases_left)
    share = even * CALIBRATION_SHARE if overhead_s is None else even - overhead_s
    return min(BENCH_BUDGET_S, max(MIN_CASE_BUDGET_S, share))


def mark_cut_short(x_copy: dict[str, dict[str, Any]], stopped: str, budget_s: float, rounds_cap: int) -> None:
    """Flag every kernel of a case :data:`CUT_SHORT` (with why) when a sweep's budget, smaller than a bench's own
    :data:`BENCH_BUDGET_S`, is what stopped its rounds; a case that stopped stable or at its round cap is left alone."""
    if stopped != "budget" or budget_s >= BENCH_BUDGET_S:
        return
    for block in x_copy.values():
        why = (f"the sweep's time budget left {budget_s:.2g} s for this case's rounds (a bench alone gives "
               f"{BENCH_BUDGET_S:g} s): stopped after {block.get('rounds')} of up to {rounds_cap}")
        block["flags"] = [*(block.get("flags") or []), CUT_SHORT]
        block["reasons"] = {**(block.get("reasons") or {}), CUT_SHORT: why}


def kernel_x_copy(timed: Interleaved, kernel: str, policy: TimingPolicy, bound: float | None = None,
                  foreign: float | None = None, load: float | None = None) -> dict[str, Any]:
    """One kernel's ×copy block of a bench record: per-round ratios, flags and what triggered them."""
    x = timed.x_copy(kernel)
    why = flag_reasons(x, timed.timing(kernel).median, timed.load_per_core if load is None else load, policy, bound,
                       timed.foreign_cpu if foreign is None else foreign)
    return {**x_copy_summary(x, list(why), why), "rounds": len(x), "stopped": timed.stopped}


def bench_case(name: str, params: dict[str, Any] | None = None, numel: int = DEFAULT_NUMEL, repeats: int = 5, warmup: int = 1,
               threads: int | None = 2, device: str = "cpu", seed: int = 0, reference: bool = True,
               label: str | None = None, model: str | None = None, max_rounds: int | None = None,
               budget_s: float | None = None) -> dict[str, Any]:
    """Time one compressor on one size in this process; returns a JSON-friendly record.

    ``label`` names the row (default: the compressor); a spec with parameters is labelled by its
    spec text, so two configurations of one compressor stay apart in tables and comparisons.
    With ``model`` the case is a whole step of that model instead (:func:`bench_model_case`).
    ``repeats`` is the least number of timed rounds (:func:`bench_policy`; ``max_rounds`` caps them, ``budget_s`` bounds
    each kernel's calibration, default :data:`BENCH_BUDGET_S`).
    """
    if threads:
        torch.set_num_threads(threads)
    if model is not None:
        return bench_model_case(name, params, model, repeats=repeats, warmup=warmup, device=device, seed=seed, label=label,
                                max_rounds=max_rounds, budget_s=budget_s)
    comp = registry.create(name, **(params or {}))
    shape = matrix_shape(numel)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen).to(device)
    state = comp.init_state(seed)
    comp.compress(x, state)  # one step first, so error feedback / momentum run in steady state
    # the copy is interleaved with each kernel, round by round, as in `gcbench run`; at least --rounds rounds, more until
    # the median is pinned down, so a row is flagged only when more rounds could not pin it (bench_policy)
    policy = bench_policy(repeats, warmup, max_rounds, budget_s)
    buf = flat_like([x])[0]
    holder: dict[str, Any] = {}

    def copy() -> None:
        buf.copy_(x)

    def setup() -> None:
        holder["st"] = state.clone()

    rss0 = _vm_kib("VmRSS")
    measured_peak = _reset_peak()
    timed_c = time_interleaved(copy, {"compress": lambda: comp.compress(x, holder["st"])}, policy, device, setup)
    peak = _vm_kib("VmHWM") if measured_peak else None
    payload = comp.compress(x, state.clone())
    # the receiver knows the tensor it waits for: a payload far smaller than it (threshold's below-tau tensor) decodes
    timed_d = time_interleaved(copy, {"decompress": lambda: comp.decompress(payload, x.shape)}, policy, device)
    t_copy, t_c, t_d = timed_c.copy_timing, timed_c.timing("compress"), timed_d.timing("decompress")
    load = worst(timed_c.load_per_core, timed_d.load_per_core)
    # the least ×copy the compress can honestly take: its declared bytes read and written per element over a copy's 8
    bound = comp.info.traffic_bytes / 8
    x_copy = {"compress": kernel_x_copy(timed_c, "compress", policy, bound), "decompress": kernel_x_copy(timed_d, "decompress", policy)}
    mark_cut_short({"compress": x_copy["compress"]}, timed_c.stopped, policy.budget_s, policy.max_rounds)
    mark_cut_short({"decompress": x_copy["decompress"]}, timed_d.stopped, policy.budget_s, policy.max_rounds)
    rec: dict[str, Any] = {
        "compressor": name, "label": label or name, "params": dict(params or {}) if name == "plan" else dict(comp.params),
        "version": comp.info.version, "numel": x.numel(),
        "shape": list(shape),
        "threads": torch.get_num_threads(), "device": device, "timer": timer_name(device),
        "copy": t_copy.to_dict(), "compress": t_c.to_dict(), "decompress": t_d.to_dict(),
        "compress_x_copy": x_copy["compress"]["median"], "decompress_x_copy": x_copy["decompress"]["median"],
        "x_copy": x_copy, "load_per_core": load, "foreign_cpu": worst(timed_c.foreign_cpu, timed_d.foreign_cpu),
        "policy": policy.to_dict(),
        "traffic_bound": bound, "x_bound": x_copy["compress"]["median"] / bound if bound > 0 else None,
        "gbps_compress": 4 * x.numel() / t_c.median / 1e9, "gbps_decompress": 4 * x.numel() / t_d.median / 1e9,
        "ratio": 4 * x.numel() / payload.nbytes,
        "peak_extra_bytes": (peak - rss0) * 1024 if (peak is not None and rss0 is not None) else None,
        "input_bytes": 4 * x.numel(),
    }
    if reference:
        _reference_row(rec, comp, x, t_c, repeats, device, holder, setup)
    _torch_topk_rows(rec, comp, name, params, x, repeats, device, seed)
    return rec


def _reference_row(rec: dict[str, Any], comp: Compressor, x: torch.Tensor, t_c: Timing, repeats: int, device: str,
                   holder: dict[str, Any], setup: Callable[[], None]) -> None:
    """The compressor's straightforward reference implementation timed on the same tensor, and the speed-up over it."""
    ref = type(comp).reference
    if ref is not None:
        x32 = x.float()
        r_rep = max(1, min(3, repeats))
        t_r = time_call(lambda: ref(comp, x32, holder["st"]), r_rep, 0, device, setup)
        rec["reference"] = t_r.to_dict()
        rec["speedup_vs_reference"] = t_r.median / t_c.median


def _torch_topk_rows(rec: dict[str, Any], comp: Compressor, name: str, params: dict[str, Any] | None, x: torch.Tensor,
                     repeats: int, device: str, seed: int) -> None:
    """The card's extra rows, where its target asks for them: compress against exact ``torch.topk`` at each density."""
    target = comp.info.target
    if target is not None and target.vs_torch_topk is not None:  # the card's extra rows: against exact torch.topk
        flat = x.reshape(-1)
        rec["vs_torch_topk"] = {}
        for density in target.topk_densities:
            k = k_of(density, flat.numel())  # the compressors' own k, so both rows select the same count
            t_t = time_call(lambda k=k: torch.topk(flat.abs(), k, sorted=False), max(1, min(3, repeats)), 0, device)  # type: ignore[misc]  # a default binds k
            c2 = registry.create(name, **{**(params or {}), "density": density})
            st2 = c2.init_state(seed)
            t_2 = time_call(lambda c2=c2, st2=st2: c2.compress(x, st2.clone()), max(1, min(3, repeats)), 1, device)  # type: ignore[misc]  # defaults bind the loop's
            rec["vs_torch_topk"][str(density)] = {"torch_topk_s": t_t.median, "compress_s": t_2.median, "speedup": t_t.median / t_2.median}


def model_tensors(model: str, seed: int = 0, device: str = "cpu") -> list[torch.Tensor]:
    """One step's gradient tensors of a model, in its layers' shapes (:func:`gcbench.sources.zoo.layer_shapes`),
    filled with seeded N(0, 1) values: the sizes a kernel meets in training, without training."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(spec.shape, generator=gen).to(device) for spec in zoo.layer_shapes(model)]


def bench_model_case(name: str, params: dict[str, Any] | None, model: str, *, repeats: int = 5, warmup: int = 1,
                     device: str = "cpu", seed: int = 0, label: str | None = None, max_rounds: int | None = None,
                     budget_s: float | None = None) -> dict[str, Any]:
    """Time one compressor on a whole step of ``model``: every gradient tensor compressed as one group
    (layer by layer, one state each, as ``gcbench run`` does at layer granularity), then all payloads
    decoded, interleaved with a copy of the same tensors (:func:`gcbench.measure.timing.time_step`).

    The per-step compress and decompress times a network prediction charges (``gcbench advise``);
    ``numel`` is the model's parameter count.  No reference or torch.topk rows: those are per tensor.
    """
    from gcbench.measure.plan_case import fresh_states, model_plan

    comp = model_plan(params or {}, model, seed) if name == "plan" else registry.create(name, **(params or {}))
    xs = model_tensors(model, seed, device)
    states = fresh_states(comp, [seed + i for i in range(len(xs))])
    comp.compress_group(xs, states, need_decoded=False)  # one step first: error feedback / momentum in steady state
    policy = bench_policy(repeats, warmup, max_rounds, budget_s)
    payloads = [p for p, _ in comp.compress_group(xs, [s.clone() for s in states], need_decoded=False)]
    timed = time_step(comp, xs, states, policy, device, payloads)
    numel = sum(x.numel() for x in xs)
    t_copy, t_c, t_d = timed.copy_timing, timed.timing("compress"), timed.timing("decompress")
    bound = comp.info.traffic_bytes / 8
    x_copy = {"compress": kernel_x_copy(timed, "compress", policy, bound), "decompress": kernel_x_copy(timed, "decompress", policy)}
    mark_cut_short(x_copy, timed.stopped, policy.budget_s, policy.max_rounds)
    return {
        "compressor": name, "label": label or name, "params": dict(params or {}) if name == "plan" else dict(comp.params),
        "version": comp.info.version,
        "numel": numel, "model": model, "tensors": len(xs), "threads": torch.get_num_threads(), "device": device,
        "timer": timer_name(device),
        "copy": t_copy.to_dict(), "compress": t_c.to_dict(), "decompress": t_d.to_dict(),
        "compress_x_copy": x_copy["compress"]["median"], "decompress_x_copy": x_copy["decompress"]["median"],
        "x_copy": x_copy, "load_per_core": timed.load_per_core, "foreign_cpu": timed.foreign_cpu, "policy": policy.to_dict(),
        "traffic_bound": bound, "x_bound": x_copy["compress"]["median"] / bound if bound > 0 else None,
        "gbps_compress": 4 * numel / t_c.median / 1e9, "gbps_decompress": 4 * numel / t_d.median / 1e9,
        "ratio": 4 * numel / sum(p.nbytes for p in payloads), "input_bytes": 4 * numel,
    }


def spec_label(name: str, params: dict[str, Any]) -> str:
    """``name`` or ``name:key=value,...`` — the row name of a benchmarked configuration (a plan's: ``plan:<name>``)."""
    if name == "plan" and isinstance(params.get("plan"), dict):
        return f"plan:{params['plan'].get('name')}"
    return name if not params else name + ":" + ",".join(f"{k}={v}" for k, v in params.items())


def run_bench(names: Sequence[str], sizes: Sequence[int], *, repeats: int = 5, warmup: int = 1, threads: int | None = 2,
              device: str = "cpu", isolate: bool = True, seed: int = 0, model: str | None = None,
              progress: Callable[[str, int, int, str], None] | None = None, max_rounds: int | None = None,
              budget_s: float | None = None, shared_worker: bool = False,
              clock: Callable[[], float] = time.monotonic) -> list[dict[str, Any]]:
    """Benchmark every (compressor, size); a failing case is recorded and the sweep goes on.

    ``names`` are compressor names or CLI specs ``name:key=value,...`` (e.g. ``threshold:tau=3.29``).
    With ``model``, one case per compressor: a whole step of that model's tensors (``sizes`` unused).
    ``max_rounds`` caps each kernel's calibrated rounds (:func:`bench_policy`; default :data:`BENCH_MAX_ROUNDS`).
    ``budget_s`` bounds the whole sweep's time: each case's calibration gets its share of what is left
    (:func:`case_budget`) and a kernel that share stopped is flagged :data:`CUT_SHORT`.  ``shared_worker`` (with
    ``isolate``) runs the cases one after another in one worker process instead of one process each: a process's
    start (imports, compiled kernels loaded) can cost 3-9 s under load, more than a small model's rounds.
    """
    specs = [case_of_spec(n) for n in names]  # unknown names, bad parameters and bad plans fail before any work
    if model is None and any(name == "plan" for name, _ in specs):
        raise PlanError("a plan assigns compressors to a model's tensors: bench it with --model NAME")
    model_numel = sum(t.numel for t in zoo.layer_shapes(model)) if model is not None else None  # an unknown model fails here
    cases = [(sp, model_numel) for sp in specs] if model is not None else [(sp, s) for sp in specs for s in sizes]
    total = len(cases)
    out = []
    if progress:  # the ETA's plan: each case's compressor and elements (a compressor's seconds per element, learned)
        progress("plan", 0, total, json.dumps({"stage": "bench", "labels": [name for (name, _), _ in cases],
                                               "case_work": [numel for _, numel in cases]}))
    start = clock()
    worker = SharedWorker(threads) if isolate and shared_worker else None
    overheads: list[float] = []  # per case whose rounds ran to their budget: its seconds beyond them (start, warm-up, payloads)
    try:
        for i, ((name, params), numel) in enumerate(cases):
            label = spec_label(name, params)
            if progress:
                progress("bench", i, total, f"{label} @ {model or f'{numel:,}'}")
            args: dict[str, Any] = {"name": name, "params": params, "label": label, "numel": numel, "repeats": repeats, "warmup": warmup,
                    "threads": threads, "device": device, "seed": seed, "model": model, "max_rounds": max_rounds}
            if budget_s is not None:
                args["budget_s"] = case_budget(budget_s - (clock() - start), total - i,
                                               sum(overheads) / len(overheads) if overheads else None)
            began = clock()
            try:
                out.append(worker.run(args) if worker is not None else run_isolated(args) if isolate else bench_case(**args))
                # the first case also paid the worker's start, which no later case pays again
                if budget_s is not None and i > 0 and ((out[-1].get("x_copy") or {}).get("compress") or {}).get("stopped") == "budget":
                    overheads.append(max(0.0, clock() - began - args["budget_s"]))
            except Exception as exc:  # recorded, the sweep goes on
                out.append({"compressor": name, "label": label, "params": params, "numel": numel, "model": model,
                            "error": f"{type(exc).__name__}: {exc}"})
    finally:
        if worker is not None:
            worker.close()
    if progress:
        progress("bench", total, total, "done")
    return out


def unstable_kernels(rec: dict[str, Any]) -> int:
    """How many of a bench record's kernels are flagged ``unstable`` (a failed case: more than any timed one)."""
    if rec.get("error"):
        return 3
    return sum("unstable" in ((rec.get("x_copy") or {}).get(k) or {}).get("flags", []) for k in ("compress", "decompress"))


def remeasure_unstable(recs: Sequence[dict[str, Any]], names: Sequence[str], *, repeats: int, warmup: int, threads: int | None,
                       device: str, isolate: bool, model: str | None,
                       progress: Callable[[str, int, int, str], None] | None = None,
                       max_rounds: int | None = None, budget_s: float | None = None,
                       shared_worker: bool = False, case_s: float | None = None) -> list[dict[str, Any]]:
    """``recs`` with every case flagged ``unstable`` timed once more, the less flagged record of the two kept.

    Only whole-model cases and single-size sweeps are matched back by label (``names`` are the specs ``recs`` ran).
    ``budget_s``: the time the second timing may take (:func:`run_bench`); under :data:`MIN_REMEASURE_S` none is taken,
    and with ``case_s`` (what a case took the first time) only as many cases as fit in it, the first flagged ones.
    """
    again = [n for n in names if any(r.get("label") == spec_label(*registry.parse_spec(n)) and unstable_kernels(r) for r in recs)]
    if budget_s is not None and case_s:
        again = again[:max(0, int(budget_s // case_s))]  # a case's start and warm-up cost what they cost, budget or not
    if not again or (budget_s is not None and budget_s < MIN_REMEASURE_S):
        return list(recs)
    sizes = sorted({int(r["numel"]) for r in recs if r.get("numel")})
    redo = run_bench(again, sizes, repeats=repeats, warmup=warmup, threads=threads, device=device, isolate=isolate,
                     model=model, progress=progress, max_rounds=max_rounds, budget_s=budget_s, shared_worker=shared_worker)
    by_key = {(r.get("label"), r.get("numel")): r for r in redo}
    out = []
    for r in recs:
        new = by_key.get((r.get("label"), r.get("numel")))
        if new is None:
            out.append(r)
            continue
        keep = new if unstable_kernels(new) <= unstable_kernels(r) else r
        out.append({**keep, "remeasured": 1})
    return out


#: the least of a sweep's time budget worth spending on timing flagged cases again: below it their second rounds would
#: be cut short in turn, and a cut-short figure is no better than the flagged one it would replace
MIN_REMEASURE_S = 5.0


def _serve() -> None:
    """The shared worker's loop (:class:`gcbench.measure.bench_worker.SharedWorker`): one case per stdin line, its record
    as one stdout line.  Anything else the cases print goes to stderr, so the reply channel carries records only."""
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        args = json.loads(line)
        try:
            rec: dict[str, Any] = bench_case(**args)
        except Exception as exc:  # the parent records the case as failed and goes on
            rec = {"worker_error": f"{type(exc).__name__}: {exc}"}
        reply.write(json.dumps(rec, default=_json_default) + "\n")
        reply.flush()
        collect_garbage()  # what this case left is not the next case's to collect while it is timed


def _json_default(o: Any) -> Any:
    return None if isinstance(o, float) and not np.isfinite(o) else str(o)


def parse_size(text: str) -> int:
    """'25.6M', '1K', '100M', '1000' → element count."""
    t = text.strip().upper().replace("_", "")
    mult = {"K": 1_000, "M": 1_000_000, "G": 1_000_000_000}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if t[-1:] in "KMG" else t) * mult
    except ValueError:
        raise GcbenchError(f"size {text!r}: expected a number like 1K, 25.6M or 100M") from None
    if not 1 <= value <= MAX_NUMEL:  # NaN and inf fail this too
        raise GcbenchError(f"size {text!r}: must be 1 to {MAX_NUMEL:,} (2**31) elements, 8 GiB of float32")
    return int(value)


@dataclass
class BenchOutcome:
    """A written bench results file: its path, typed record, and the cases slower than the baseline by the threshold."""

    path: Path | None
    record: RunRecord
    regressions: list[BenchCase]  # cases with a timing the comparison called worse (gcbench.results.bench_diff)
    compared: int  # cases matched with a baseline case (same label and element count)
    notes: list[str] = field(default_factory=list)  # the comparison's notes (what its verdicts rest on)

    @property
    def failed(self) -> list[BenchCase]:
        return [c for c in self.record.cases if not c.ok]


def bench_to_file(names: Sequence[str], sizes: Sequence[int], out_dir: Path | str, *, repeats: int = 5, warmup: int = 1,
                  threads: int = 2, device: str = "cpu", isolate: bool = True, baseline: Path | str | None = None,
                  threshold: float = 0.25, model: str | None = None,
                  progress: Callable[[str, int, int, str], None] | None = None, remeasure: bool = False,
                  max_rounds: int | None = None, budget_s: float | None = None, shared_worker: bool = False,
                  processes: int = 1, clock: Callable[[], float] = time.monotonic) -> BenchOutcome:
    """:func:`run_bench`, each case compared with ``baseline`` (a stored bench file) and written as one ``kind="bench"`` file.

    The baseline is read before anything is timed (a malformed file is one error, not a wasted sweep).  A case's
    ``baseline_change`` is its compress×copy relative to the baseline case of the same label and element count; above
    ``threshold`` it is a regression.  With ``remeasure`` every case flagged ``unstable`` is timed once more and the
    less flagged of the two kept (``remeasured``: how many times; what ``gcbench advise`` acts on must not rest on
    one disturbed minute).  ``budget_s`` bounds the timing of the whole sweep, the second timing of flagged cases
    included (it gets what the first left; :func:`run_bench`); the file's setup records it with the seconds the timing
    took (``budget_s``, ``timing_s``).  ``shared_worker``: as :func:`run_bench`.  ``processes``: each case timed in that
    many fresh processes, one pass of the sweep each (:mod:`gcbench.measure.bench_processes`), which the comparison
    with the baseline tests (:func:`gcbench.results.bench_diff.compare_bench`).
    """
    if processes > 1 and (not isolate or shared_worker or remeasure):
        raise GcbenchError("--processes times each case in fresh processes: not with one shared or in-process worker")
    base = load_run(baseline) if baseline is not None else None
    base_cases = {(c.name, c.numel, c.model): c for c in base.cases if isinstance(c, BenchCase) and c.ok} if base else {}
    start = clock()
    recs = merge_passes([run_bench(names, sizes, repeats=repeats, warmup=warmup, threads=threads, device=device,
                                   isolate=isolate, model=model, progress=passes_progress(progress, p, processes),
                                   max_rounds=max_rounds, budget_s=None if budget_s is None else budget_s / processes,
                                   shared_worker=shared_worker, clock=clock) for p in range(processes)])
    if remeasure:
        first_s = clock() - start
        left = None if budget_s is None else budget_s - first_s
        recs = remeasure_unstable(recs, names, repeats=repeats, warmup=warmup, threads=threads, device=device,
                                  isolate=isolate, model=model, progress=progress, max_rounds=max_rounds, budget_s=left,
                                  shared_worker=shared_worker, case_s=first_s / max(1, len(recs)))
    bench_copy_spread(recs)  # where the caches hold the copy: how far it moved between the cases' processes
    setup: dict[str, Any] = {"name": "bench", "sizes": [] if model else list(sizes), "repeats": repeats, "threads": threads}
    if budget_s is not None:
        setup.update(budget_s=budget_s, timing_s=round(clock() - start, 3))
    if model is not None:
        setup["model"] = model
    writer = RunWriter(Path(out_dir), setup, "", None, device, kind="bench")
    compared = 0
    for rec in recs:
        case = writer.add_case(rec)
        assert isinstance(case, BenchCase)
        b = base_cases.get((case.name, case.numel, case.model))
        if b is not None and case.ok and case.compress_x_copy is not None and b.compress_x_copy:
            compared += 1
            case.baseline_change = case.compress_x_copy / b.compress_x_copy - 1
    writer.finish("complete")  # rewrites the file with the baseline changes
    if base is None:
        return BenchOutcome(writer.path, writer.record, [], compared)
    cmp = compare_bench(base, writer.record, threshold)
    worse = {(r.case, r.source) for r in cmp.regressions}
    regressions = [c for c in writer.record.cases if isinstance(c, BenchCase) and (c.name, bench_source(c)) in worse]
    return BenchOutcome(writer.path, writer.record, regressions, compared, cmp.notes)


def main(argv: list[str]) -> None:  # the isolated worker
    parent = os.environ.get(liveness.PARENT_PID_ENV, "")
    if parent.isdigit():
        liveness.die_with_parent(int(parent))
    if argv[:1] == ["--serve"]:
        _serve()
        return
    args = json.loads(argv[0])
    rec = bench_case(**args)
    print(json.dumps(rec, default=_json_default))


if __name__ == "__main__":
    main(sys.argv[1:])
