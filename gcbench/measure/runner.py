"""The runner: feeds gradients from a suite's sources through each compressor and measures.

For every (source, compressor) case it keeps one compressor state per (worker, unit) — a unit is
a layer, a DDP-style bucket or the whole flattened model — and feeds the steps in order, so error
feedback, momentum and warm-up schedules see a real stream of gradients.  At each step:

1. *Fidelity* on worker 0: R independent compressions of every unit from copies of its current
   state (R = the suite's ``repeats`` for stochastic compressors, 1 for deterministic ones), against
   the compressor's reference (the gradient itself, or the momentum-SGD update for DGC/SDAGC).
2. *The stream*: every worker compresses its units (``compress_group``, so model-wide selection
   works); the aggregate is the mean of the decoded payloads — or the compressor's own
   ``exchange`` protocol where its paper defines one (TernGrad's shared scaler, 1-bit SGD's two
   legs, PowerSGD's all-reduces).  Sizes and traffic come from the real payloads.
3. *Aggregate fidelity* against the true worker mean, and *error-feedback drift* over steps.
4. *Timing* (first ``timing_steps`` steps): compress and decompress of all units of one worker,
   and a copy of the same tensors into preallocated buffers, all in this process.

The runner never prints: it reports progress through a callback, ``progress(stage, done, total,
message)``, which the CLI turns into a rich progress bar.  A failing case is recorded with its
error and the run goes on.
"""

from __future__ import annotations

import math
import os
import traceback
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gcbench.compressors import registry
from gcbench.core.compressor import Compressor, Payload, State
from gcbench.core.errors import GcbenchError, SourceError
from gcbench.core.payload import dense_bytes
from gcbench.measure.granularity import Unit, gather, make_units
from gcbench.measure.metrics import (
    Fidelity,
    bits_per_element,
    copy_roofline,
    fidelity,
    mean_ci,
    pooled,
    ratio,
    summarise,
    throughput,
    time_call,
)
from gcbench.measure.suite import CompressorSpec, SourceSpec, Suite
from gcbench.results.phases import Window, case_phases, phase_windows
from gcbench.results.store import RunWriter
from gcbench.sources.base import GradientSource, check_finite

Progress = Callable[[str, int, int, str], None]

CACHE_LIMIT_BYTES = int(float(os.environ.get("GCBENCH_CACHE_GB", "6")) * 2**30)


def _noop(stage: str, done: int, total: int, message: str) -> None:
    return None


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed derived deterministically from its parts (stable across processes)."""
    words = [zlib.crc32(p.encode()) if isinstance(p, str) else int(p) % (2**32) for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> np.uint64(1))


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise GcbenchError("device 'cuda' requested but no CUDA device is available (use --device cpu)")
    return torch.device(device)


# ----------------------------------------------------------------------------- sources


def build_source(spec: SourceSpec, seed: int, progress: Progress = _noop) -> GradientSource:
    """Instantiate the gradient source a suite names."""
    if spec.kind == "synthetic":
        from gcbench.sources.synthetic import SyntheticSource

        if spec.shapes:
            shapes, names = [tuple(s) for s in spec.shapes], None
        else:
            from gcbench.sources.zoo import layer_shapes

            specs = layer_shapes(spec.model or "")
            shapes, names = [s.shape for s in specs], [s.name for s in specs]
        return SyntheticSource(shapes, spec.distribution, workers=spec.workers or 1, steps=spec.steps or 1, seed=seed,
                               scale=spec.scale, names=names, df=spec.df, sparsity_density=spec.sparsity_density)
    if spec.kind == "live":
        from gcbench.sources.live import LiveSource

        kwargs: dict[str, Any] = {}
        if spec.batch_size is not None:
            kwargs["batch_size"] = spec.batch_size
        if spec.image_size is not None:
            kwargs["image_size"] = spec.image_size
        return LiveSource(spec.model or "", workers=spec.workers or 4, steps=spec.steps or 2, seed=seed,
                          warmup_steps=spec.warmup_steps, lr=spec.lr, progress=lambda d, t, m: progress("gradients", d, t, m), **kwargs)
    from gcbench.sources.trace import TraceSource

    src = TraceSource(Path(spec.path or ""))
    if spec.workers is not None or spec.steps is not None:
        return _Limited(src, spec.workers, spec.steps)
    return src


class _Limited(GradientSource):
    """The first ``workers`` workers and ``steps`` steps of another source."""

    def __init__(self, inner: GradientSource, workers: int | None, steps: int | None) -> None:
        if workers is not None and workers > inner.workers:
            raise SourceError(f"{inner.name}: has {inner.workers} workers, {workers} requested")
        if steps is not None and steps > inner.steps:
            raise SourceError(f"{inner.name}: has {inner.steps} steps, {steps} requested")
        self.inner = inner
        self.name = inner.name
        self.workers = workers or inner.workers
        self.steps = steps or inner.steps

    def layout(self):
        return self.inner.layout()

    def gradients(self, step: int, worker: int):
        return self.inner.gradients(step, worker)

    def describe(self) -> dict[str, object]:
        return {**self.inner.describe(), "workers": self.workers, "steps": self.steps}


class SourceData:
    """Units of every (step, worker), computed once and cached in memory when they fit.

    Live gradients are expensive (ResNet-50: ~1.7 s per worker-step on 2 cores) and every case
    needs the same tensors, so they are computed once per run.  Traces too large for the cache
    are re-read lazily, one unit at a time, for each case.
    """

    def __init__(self, source: GradientSource, units: list[Unit], device: torch.device, progress: Progress) -> None:
        self.source, self.units, self.device = source, units, device
        self.numel = sum(u.numel for u in units)
        total = dense_bytes(self.numel) * source.workers * source.steps
        self.cache: dict[tuple[int, int], list[torch.Tensor]] | None = {} if total <= CACHE_LIMIT_BYTES else None
        if self.cache is not None:
            n = source.steps * source.workers
            for t in range(source.steps):
                for w in range(source.workers):
                    self.cache[(t, w)] = self._load(t, w)
                    progress("load", t * source.workers + w + 1, n, f"{source.name}: step {t} worker {w}")

    def _load(self, step: int, worker: int) -> list[torch.Tensor]:
        grads = self.source.gradients(step, worker)
        out = []
        for u in self.units:
            x = gather(u, grads).to(self.device)
            check_finite(u.name, x, f"{self.source.name} step {step} worker {worker}")
            out.append(x)
        return out

    def get(self, step: int, worker: int) -> list[torch.Tensor]:
        if self.cache is not None:
            return self.cache[(step, worker)]
        return self._load(step, worker)


# ----------------------------------------------------------------------------- one case


@dataclass
class _UnitAcc:
    """Per-unit accumulators over steps (worker 0)."""

    bytes: list[int]
    fids: list[Fidelity]
    agg: list[Fidelity]
    sum_dec: torch.Tensor | None = None
    sum_ref: torch.Tensor | None = None
    sum_agg_err: torch.Tensor | None = None  # Σ_t (aggregate_t − true mean_t)
    sum_mean: torch.Tensor | None = None  # Σ_t true mean_t
    win_err: torch.Tensor | None = None  # the same two sums restarted at every phase window's first step
    win_mean: torch.Tensor | None = None


def _unit_states(comp: Compressor, seed: int, workers: int, n_units: int) -> list[list[State]]:
    return [[comp.init_state(derive_seed(seed, "state", w, u)) for u in range(n_units)] for w in range(workers)]


def suite_windows(suite: Suite, steps: int) -> list[Window]:
    """The phase windows of the suite's first compressor whose protocol changes by step (LGC), else []."""
    for c in suite.compressors:
        try:
            comp = registry.create(c.name, **c.params)
        except GcbenchError:
            continue  # the case itself reports the bad name or parameter
        names = [comp.step_phase(t) for t in range(steps)]
        if any(n is not None for n in names):
            return phase_windows(names)
    return []


def run_case(spec: CompressorSpec, data: SourceData, suite: Suite, progress: Progress = _noop,
             windows: Sequence[Window] = ()) -> dict[str, Any]:
    """Measure one compressor configuration on one source; returns the case record.

    ``windows`` (the source's phase windows, :func:`suite_windows`) restart a second cumulative
    aggregate error at each window's first step, so every case is measured over the same phases.
    """
    comp = registry.create(spec.name, **spec.params)
    info = comp.info
    src = data.source
    W, T, units = src.workers, src.steps, data.units
    if W < info.min_workers:
        raise GcbenchError(f"{info.name} needs at least {info.min_workers} workers ({info.exchange}); this source has {W} "
                           f"(use --workers {info.min_workers} or a source with more workers)")
    seed = suite.seed
    repeats = 1 if info.deterministic else suite.metrics.repeats
    states = _unit_states(comp, seed, W, len(units))
    ref_states: list[list[dict[str, Any]]] = [[{} for _ in units] for _ in range(W)]
    custom_exchange = W > 1 and type(comp).exchange is not Compressor.exchange
    accs = [_UnitAcc([], [], []) for _ in units]
    traffic_phase: dict[str, list[list[int]]] = {}  # phase -> [[sent, received] per (step, worker)]
    drift, resid = [], []
    agg_drift: list[float | None] = []
    agg_cos: list[float | None] = []  # whole-model cosine(aggregate, true mean) per step
    win_drift: list[float | None] = []
    starts = {w.first for w in windows}
    step_phases: list[str | None] = []
    timing: dict[str, Any] | None = None

    for t in range(T):
        progress("step", t, T, f"{spec.label}: step {t + 1}/{T}")
        xs = [data.get(t, w) for w in range(W)]
        refs = [[comp.reference_update(x, ref_states[w][u]) for u, x in enumerate(xs[w])] for w in range(W)]

        if suite.metrics.timing and t < suite.metrics.timing_steps:
            timing = _time_case(comp, xs[0], states[0], suite)

        # 1. fidelity repeats from copies of the current state (worker 0)
        single: list[tuple[Payload, torch.Tensor] | None] = [None] * len(units)
        first_states: list[State] = []
        if repeats > 1 or custom_exchange:
            for u, x in enumerate(xs[0]):
                decs = []
                for r in range(repeats):
                    st = states[0][u].clone()
                    if repeats > 1:
                        st.reseed(derive_seed(seed, "repeat", t, u, r))
                    p, dec = comp.compress_and_decode(x, st)
                    decs.append(dec)
                    if r == 0:
                        single[u] = (p, dec)
                        first_states.append(st)
                accs[u].fids.append(fidelity(refs[0][u], decs))

        # 2. the stream: every worker compresses; aggregate by the default or the paper's protocol
        if custom_exchange:
            aggregates = []
            for u, res in enumerate(comp.exchange_group(xs, states)):
                aggregates.append(res.aggregate)
                if u == 0:  # a protocol with phases by step (LGC) names the step's phase
                    step_phases.append(getattr(res, "phase", None))
                for ph in res.traffic.phases():
                    rows = traffic_phase.setdefault(ph, [[0, 0, 0] for _ in range(T * W)])
                    for w in range(W):
                        rows[t * W + w][0] += res.traffic.sent(w, ph)
                        rows[t * W + w][1] += res.traffic.received(w, ph)
                        body = res.traffic.sent_body(w, ph)  # -1: the protocol did not say (no body-only ratio)
                        rows[t * W + w][2] = -1 if body is None or rows[t * W + w][2] < 0 else rows[t * W + w][2] + body
            dec0 = [s[1] for s in single]  # type: ignore[index]
            bytes0 = [s[0].nbytes for s in single]  # type: ignore[union-attr]
        elif single[0] is not None and type(comp).compress_group is Compressor.compress_group:
            # worker 0's stream step is its first fidelity repeat (an independent draw from the same
            # state), so stochastic compressors do not compress worker 0's tensors once more
            states[0] = first_states
            outs = [list(single)] + [comp.compress_group(xs[w], states[w], need_decoded=True) for w in range(1, W)]
        else:
            outs = [comp.compress_group(xs[w], states[w], need_decoded=True) for w in range(W)]
        if not custom_exchange:
            aggregates = [sum(outs[w][u][1].float() for w in range(W)) / W for u in range(len(units))]
            sizes = [[p.nbytes for p, _ in outs[w]] for w in range(W)]
            total = sum(sum(s) for s in sizes)
            rows = traffic_phase.setdefault("allgather", [[0, 0, 0] for _ in range(T * W)])
            for w in range(W):
                rows[t * W + w][0] += sum(sizes[w])
                rows[t * W + w][1] += total - sum(sizes[w])
                rows[t * W + w][2] += sum(p.body_nbytes for p, _ in outs[w])
            dec0 = [d for _, d in outs[0]]
            bytes0 = sizes[0]
            if repeats == 1:
                for u in range(len(units)):
                    accs[u].fids.append(fidelity(refs[0][u], [dec0[u]]))

        # 3. aggregate fidelity, the aggregate's cumulative error and EF drift
        num = den = agg_num = agg_den = dot = n_agg = n_mean = win_num = win_den = 0.0
        for u in range(len(units)):
            a = accs[u]
            a.bytes.append(bytes0[u])
            true_mean = sum(refs[w][u].float() for w in range(W)) / W
            a.agg.append(fidelity(true_mean, [aggregates[u]]))
            agg64, mean64 = aggregates[u].double(), true_mean.double()
            dot += float((agg64 * mean64).sum())
            n_agg += float(agg64.pow(2).sum())
            n_mean += float(mean64.pow(2).sum())
            err = aggregates[u].float() - true_mean
            a.sum_agg_err = err if a.sum_agg_err is None else a.sum_agg_err.add_(err)
            a.sum_mean = true_mean.clone() if a.sum_mean is None else a.sum_mean.add_(true_mean)
            agg_num += float(a.sum_agg_err.double().pow(2).sum())
            agg_den += float(a.sum_mean.double().pow(2).sum())
            if windows:
                fresh = t in starts or a.win_err is None
                a.win_err = err.clone() if fresh else a.win_err.add_(err)  # type: ignore[union-attr]
                a.win_mean = true_mean.clone() if fresh else a.win_mean.add_(true_mean)  # type: ignore[union-attr]
                win_num += float(a.win_err.double().pow(2).sum())
                win_den += float(a.win_mean.double().pow(2).sum())
            if comp.stateful:
                a.sum_dec = dec0[u].float().clone() if a.sum_dec is None else a.sum_dec + dec0[u].float()
                a.sum_ref = refs[0][u].float().clone() if a.sum_ref is None else a.sum_ref + refs[0][u].float()
                num += float((a.sum_dec - a.sum_ref).double().pow(2).sum())
                den += float(a.sum_ref.double().pow(2).sum())
        agg_drift.append(math.sqrt(agg_num / agg_den) if agg_den > 0 else None)
        agg_cos.append(dot / math.sqrt(n_agg * n_mean) if n_agg > 0 and n_mean > 0 else None)
        if windows:
            win_drift.append(math.sqrt(win_num / win_den) if win_den > 0 else None)
        if comp.stateful:
            g_now = math.sqrt(sum(float(refs[0][u].double().pow(2).sum()) for u in range(len(units))))
            drift.append(math.sqrt(num / den) if den > 0 else None)
            resid.append(math.sqrt(num) / g_now if g_now > 0 else None)
    progress("step", T, T, f"{spec.label}: done")
    rec = _case_record(spec, comp, data, suite, repeats, accs, traffic_phase, drift, resid, timing)
    # the whole model's aggregate per step: cosine with the true worker mean, and the cumulative
    # error ‖Σ_s≤t (aggregate_s − mean_s)‖ / ‖Σ_s≤t mean_s‖ (what error feedback eventually delivers)
    rec["aggregate"]["per_step_cosine"] = agg_cos
    rec["aggregate"]["sum_drift"] = agg_drift
    if windows:
        rec["windows"] = [{"name": w.name, "first": w.first, "last": w.last,
                           **_worker_traffic(traffic_phase, W, range(w.first, min(w.last, T - 1) + 1))} for w in windows]
        rec["aggregate"]["window_drift"] = win_drift
    if any(p is not None for p in step_phases):
        rec["step_phases"] = step_phases
        rec["phases"] = case_phases(rec, phase_windows(step_phases))
    return rec


def _worker_traffic(traffic_phase: dict[str, list[list[int]]], workers: int, steps: range) -> dict[str, list[float]]:
    """Mean bytes each worker sent and received per step over ``steps``, every traffic phase but one-time ``setup:*``."""
    sent, recv = [0.0] * workers, [0.0] * workers
    n = max(len(steps), 1)
    for ph, rows in traffic_phase.items():
        if ph.startswith("setup"):
            continue
        for t in steps:
            for w in range(workers):
                sent[w] += rows[t * workers + w][0] / n
                recv[w] += rows[t * workers + w][1] / n
    return {"sent_by_worker": sent, "received_by_worker": recv}


def _time_case(comp: Compressor, xs: Sequence[torch.Tensor], states: Sequence[State], suite: Suite) -> dict[str, Any]:
    """Compress/decompress timing of one worker-step and the copy roofline, in this process."""
    m = suite.metrics
    device = xs[0].device if xs else torch.device("cpu")
    holder: dict[str, list[State]] = {}

    def setup() -> None:
        holder["st"] = [s.clone() for s in states]

    t_c = time_call(lambda: comp.compress_group(xs, holder["st"], need_decoded=False), m.timing_repeats, m.warmup, device, setup)
    payloads = [p for p, _ in comp.compress_group(xs, [s.clone() for s in states], need_decoded=False)]
    t_d = time_call(lambda: [comp.decompress(p) for p in payloads], m.timing_repeats, m.warmup, device)
    t_copy = copy_roofline(xs, m.timing_repeats, m.warmup)
    numel = sum(x.numel() for x in xs)
    return {
        "numel": numel,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "compress": {**t_c.to_dict(), **throughput(numel, t_c)},
        "decompress": {**t_d.to_dict(), **throughput(numel, t_d)},
        "copy": {**t_copy.to_dict(), **throughput(numel, t_copy)},
        "copy_fraction_compress": t_copy.median / t_c.median if t_c.median > 0 else None,
        "copy_fraction_decompress": t_copy.median / t_d.median if t_d.median > 0 else None,
    }


def _case_record(spec: CompressorSpec, comp: Compressor, data: SourceData, suite: Suite, repeats: int, accs: list[_UnitAcc],
                 traffic_phase: dict[str, list[list[int]]], drift: list[Any], resid: list[Any],
                 timing: dict[str, Any] | None) -> dict[str, Any]:
    info = comp.info
    numel = data.numel
    steps = data.source.steps
    wire = sum(sum(a.bytes) for a in accs) / steps  # worker 0's bytes per step
    all_fids = [f for a in accs for f in a.fids]
    all_agg = [f for a in accs for f in a.agg]
    per_step_pooled = [pooled([a.fids[t] for a in accs]) for t in range(steps)]
    per_step_agg = [pooled([a.agg[t] for a in accs]) for t in range(steps)]
    fd = [f.to_dict() for f in all_fids]
    flags = comp.flags  # from the resolved parameters: TernGrad with clipping is biased
    unbiased = not flags.biased
    fidelity_rec = {
        "repeats": repeats,
        "reference": comp.reference_name(),
        "q": {**mean_ci([d["q"] for d in fd]), "model": _mean([p["q"] for p in per_step_pooled])},
        "bias2": {**mean_ci([d["bias2"] for d in fd]), "model": _mean([p["bias2"] for p in per_step_pooled]),
                  "se_mean": _mean([d["bias2_se"] for d in fd])},
        "variance": {**mean_ci([d["variance"] for d in fd]), "model": _mean([p["variance"] for p in per_step_pooled])},
        "omega_hat": ({**mean_ci([d["q"] for d in fd]), "model": _mean([p["q"] for p in per_step_pooled])} if unbiased else None),
        "delta": {**summarise([d["delta"] for d in fd]), "model": _mean([p["delta"] for p in per_step_pooled])},
        "alpha": {**summarise([d["alpha"] for d in fd], worst="min"), "model": _mean([p["alpha"] for p in per_step_pooled])},
        "cosine": summarise([d["cosine"] for d in fd], worst="min"),
        "q_samples": [s for f in all_fids for s in f.q_samples][:2000],
    }
    aggregate_rec = {
        "q": {**summarise([f.q for f in all_agg]), "model": _mean([p["q"] for p in per_step_agg])},
        "cosine": summarise([f.cosine for f in all_agg], worst="min"),
        "per_step_q": [p["q"] for p in per_step_agg],
    }
    workers = data.source.workers
    sent = sum(float(np.mean([r[0] for r in rows])) for rows in traffic_phase.values())
    traffic_rec = {
        ph: {"sent_mean": float(np.mean([r[0] for r in rows])), "received_mean": float(np.mean([r[1] for r in rows])),
             "sent_max": int(max(r[0] for r in rows)),
             # bytes per worker at each step: phases that run only in some steps (LGC) stay readable
             "per_step_sent": [float(np.mean([rows[t * workers + w][0] for w in range(workers)])) for t in range(steps)],
             # the same, payload bodies only (headers excluded: papers count bodies); None if the protocol did not say
             "per_step_sent_body": ([float(np.mean([rows[t * workers + w][2] for w in range(workers)])) for t in range(steps)]
                                    if all(r[2] >= 0 for r in rows) else None)}
        for ph, rows in traffic_phase.items()
    }
    layers = []
    for u, a in zip(data.units, accs, strict=True):
        ufd = [f.to_dict() for f in a.fids]
        b = float(np.mean(a.bytes))
        layers.append({
            "name": u.name, "numel": u.numel, "wire_bytes": b, "ratio": ratio(u.numel, b),
            "q": _mean([d["q"] for d in ufd]), "bias2": _mean([d["bias2"] for d in ufd]),
            "variance": _mean([d["variance"] for d in ufd]), "cosine": _mean([d["cosine"] for d in ufd]),
        })
    return {
        "label": spec.label,
        "compressor": info.name,
        "version": info.version,
        "params": dict(comp.params),
        "flags": flags.to_dict(),
        "source": data.source.describe(),
        "granularity": suite.granularity,
        "units": len(data.units),
        "workers": data.source.workers,
        "steps": steps,
        "status": "ok",
        "size": {"numel": numel, "dense_bytes": dense_bytes(numel), "wire_bytes": wire,
                 "ratio": ratio(numel, wire), "bits_per_element": bits_per_element(numel, wire),
                 # what a worker really sends per step in the exchange, every phase counted (scalers,
                 # both legs of 1-bit SGD, LGC's latents and innovations)
                 "traffic_sent_bytes": sent, "traffic_ratio": ratio(numel, sent) if sent else None},
        "fidelity": fidelity_rec,
        "aggregate": aggregate_rec,
        "traffic": traffic_rec,
        "ef_drift": {"sum_drift": drift, "residual_ratio": resid} if comp.stateful else None,
        "timing": timing,
        "layers": layers,
    }


def _mean(vals: Sequence[float | None]) -> float | None:
    v = [x for x in vals if x is not None and math.isfinite(x)]
    return float(np.mean(v)) if v else None


def _failed_record(spec: CompressorSpec, source_name: str, exc: BaseException, source_label: str | None = None) -> dict[str, Any]:
    error = str(exc) if isinstance(exc, GcbenchError) else f"{type(exc).__name__}: {exc}"
    rec: dict[str, Any] = {"label": spec.label, "compressor": spec.name, "params": spec.params, "status": "error",
                           "source": {"name": source_name, "label": source_label or source_name}, "error": error}
    try:
        info = registry.get(spec.name)
        rec["version"] = info.version
    except GcbenchError:
        pass
    if not isinstance(exc, GcbenchError):
        rec["traceback"] = traceback.format_exc()
    return rec


# ----------------------------------------------------------------------------- whole run


@dataclass
class RunOutcome:
    """The results file of a run (None when no case was recorded: no file is written) and its case records."""

    path: Path | None
    records: list[dict[str, Any]]

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("status") != "ok"]


def run_suite(suite: Suite, out_dir: Path | str = "reports/runs", progress: Progress | None = None, suite_path: str | None = None,
              kind: str = "run") -> RunOutcome:
    """Run every (source, compressor) case of ``suite``; the results file is kept current on disk.

    The file is created exclusively in ``out_dir`` when the first case is recorded (see
    :class:`gcbench.results.store.RunWriter`) and ends with status ``complete``, ``complete-with-errors``,
    ``interrupted`` (KeyboardInterrupt, SIGTERM under the CLI) or ``failed`` (an error outside any case).
    """
    progress = progress or _noop
    device = resolve_device(suite.metrics.device)
    if suite.metrics.threads:
        torch.set_num_threads(suite.metrics.threads)
    writer = RunWriter(Path(out_dir), suite.to_dict(), suite.hash(), suite_path, str(device), kind=kind)
    total = len(suite.sources) * len(suite.compressors)
    done = 0
    status = "complete"
    try:
        for s_idx, src_spec in enumerate(suite.sources):
            try:
                src_seed = derive_seed(suite.seed, "source", s_idx) if src_spec.kind != "trace" else suite.seed
                source = build_source(src_spec, src_seed, progress)
                units = make_units(source.layout(), suite.granularity, suite.bucket_mb)
                data = SourceData(source, units, device, progress)
                windows = suite_windows(suite, source.steps)
            except SourceError as exc:
                for c in suite.compressors:
                    writer.add_case(_failed_record(c, src_spec.display(), exc, src_spec.display()))
                    done += 1
                    progress("case", done, total, f"{c.label}: source failed")
                continue
            for c in suite.compressors:
                progress("case", done, total, f"{c.label} on {source.name}")
                try:
                    rec = run_case(c, data, suite, progress, windows)
                    rec["source"]["label"] = src_spec.display()
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # one failing case does not abort the sweep
                    rec = _failed_record(c, source.name, exc, src_spec.display())
                writer.add_case(rec)
                done += 1
                progress("case", done, total, f"{c.label} done")
            source.close()
    except KeyboardInterrupt:  # SIGINT, or SIGTERM through gcbench.core.signals: keep every completed case
        writer.finish("interrupted")
        raise
    except BaseException:  # a bug outside any one case: the file must not keep saying "running"
        writer.finish("failed")
        raise
    writer.finish(status if not any(r.get("status") != "ok" for r in writer.data["cases"]) else "complete-with-errors")
    return RunOutcome(writer.path, writer.data["cases"])
