"""The collectives sweep: the aggregate's error and the bytes per worker of sharded compressed collectives as N grows.

For each compressor, scheme (:mod:`gcbench.core.sharded`: ``ring``, ``alltoall``, ``allgather``),
accumulation dtype and worker count N, the N workers' gradients of one flat tensor are exchanged on
the simulated transport, and the row records:

* ``error``: ‖aggregate − exact mean‖ / ‖exact mean‖, the exact mean computed in float64; its mean,
  standard deviation and a 95% interval (t) over ``draws`` runs that differ in the compressors'
  seeds only (the gradients are the same), so a stochastic codec's spread is its own;
* ``bias``: ‖mean over the draws of (aggregate − exact mean)‖ / ‖exact mean‖: about ``error``/√draws
  for an unbiased codec, ``error`` itself for a deterministic one;
* ``bytes_per_worker``: bytes sent per worker, the mean over workers (and draws) of what the legs
  count (:mod:`gcbench.core.protocol`), and ``x_fp32_ring``: that over an fp32 ring all-reduce's
  bytes sent per worker for the same tensor (:func:`gcbench.core.protocol.ring_allreduce_bytes`).

The gradients: worker w's is ``c + e_w``, a part ``c`` common to all workers plus its own part
``e_w``, both drawn from ``distribution`` (:func:`gcbench.sources.synthetic.sample`) with equal
scale, so the workers agree as minibatch gradients of one model partly do and the mean does not
shrink to noise as N grows.  With a gradient source instead (``gcbench collectives --model`` or
``--trace``), worker w's gradient is the source's step-0 gradient of worker w, every tensor of the
model flattened and concatenated in layout order (:func:`source_gradients`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from gcbench.compressors import registry
from gcbench.core.errors import GcbenchError
from gcbench.core.intervals import mean_interval
from gcbench.core.protocol import ring_allreduce_bytes
from gcbench.core.sharded import ACCUMULATE, SCHEMES, CollectiveError, check_fits, simulate_sharded
from gcbench.sources.base import GradientSource
from gcbench.sources.synthetic import DISTRIBUTIONS, sample

DEFAULT_WORKERS = (2, 4, 8, 16, 32, 64)
DEFAULT_NUMEL = 1 << 20
#: the compressors swept when none are named: those of these that are registered (the block formats where installed)
DEFAULT_COMPRESSORS = ("bf16", "fp16", "fp8", "mxfp8", "mxfp4", "nvfp4", "blockint", "qsgd", "thc")

Progress = Callable[[str, int, int, str], None]

#: the ranges of a suite's ``[collectives]`` table (gcbench.measure.suite.CollectivesSpec; a test ties them): the
#: command line's sweep and a suite's take the same
MAX_WORKERS = 4096
MAX_NUMEL = 1 << 30
MAX_DRAWS = 1000
#: seeds are NumPy PCG64 seed words: non-negative, and at most 63 bits as a suite's seed
MAX_SEED = 2**63 - 1


def sweep_bytes(numel: int, workers: int) -> int:
    """A floor of the memory one cell of the synthetic sweep holds at ``workers`` workers, in bytes.

    Per element: the workers' float32 gradients and their float64 copies for the exact mean (12 per
    worker), what the exchange decodes (4 per worker), and the float64 draw, mean, error and its sum.
    """
    return numel * (16 * workers + 40)


def check_sweep(workers: Sequence[int], numel: int, draws: int, seed: int, synthetic: bool = True) -> None:
    """Refuse a sweep that cannot run here, before any gradient is drawn: one :class:`GcbenchError` line naming the option.

    Ranges: ``--workers`` in [1, :data:`MAX_WORKERS`], ``--numel`` in [1, :data:`MAX_NUMEL`],
    ``--draws`` in [1, :data:`MAX_DRAWS`], ``--seed`` in [0, 2**63 - 1]; and a synthetic sweep whose
    largest cell (:func:`sweep_bytes`) needs more than this machine's physical memory, which the
    message states with the estimate (a 10**12-element tensor was a 7.28 TiB allocation traceback).
    """
    from gcbench.measure.footprint import machine_memory

    bad = [n for n in workers if not 1 <= n <= MAX_WORKERS]
    if bad or not workers:
        raise GcbenchError(f"--workers: each worker count must be in [1, {MAX_WORKERS}], got {bad[0] if bad else 'none'}")
    for option, value, low, high in (("--numel", numel, 1, MAX_NUMEL), ("--draws", draws, 1, MAX_DRAWS),
                                     ("--seed", seed, 0, MAX_SEED)):
        if not low <= value <= high:
            raise GcbenchError(f"{option} must be in [{low}, {high}], got {value}")
    if synthetic:
        need = sweep_bytes(numel, max(workers))
        total, _ = machine_memory()
        if total is not None and need > total:
            raise GcbenchError(f"--numel {numel} with --workers up to {max(workers)} needs at least {need / 2**30:.1f} GiB of "
                               f"memory, more than this machine's {total / 2**30:.1f} GiB; use fewer elements or workers")


@dataclass(frozen=True)
class Combo:
    """One compressor under one scheme and accumulation dtype."""

    compressor: str  # the spec's label
    scheme: str
    accumulate: str

    @property
    def label(self) -> str:
        return f"{self.compressor} {self.scheme}/{self.accumulate}"


@dataclass
class Row:
    """One combo at one worker count (see the module docstring for each number)."""

    compressor: str
    scheme: str
    accumulate: str
    workers: int
    error: float
    error_std: float
    error_lo: float
    error_hi: float
    bias: float
    bytes_per_worker: float
    x_fp32_ring: float | None  # None at one worker: an fp32 ring all-reduce sends nothing, so there is no ratio
    draws: int


@dataclass
class Sweep:
    """What :func:`run_sweep` returns (``to_dict``: the JSON of ``gcbench collectives`` and of a suite's results file)."""

    numel: int
    distribution: str
    draws: int
    seed: int
    workers: list[int]
    combos: list[Combo]
    rows: list[Row] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"numel": self.numel, "distribution": self.distribution, "draws": self.draws, "seed": self.seed,
                "workers": self.workers, "rows": [asdict(r) for r in self.rows], "skipped": self.skipped}


def default_compressors() -> list[str]:
    """The registered ones of :data:`DEFAULT_COMPRESSORS`, in that order."""
    names = set(registry.names())
    return [n for n in DEFAULT_COMPRESSORS if n in names]


def plan(specs: Sequence[str], schemes: Sequence[str], accumulate: Sequence[str]) -> tuple[list[Combo], list[dict[str, str]]]:
    """Every (compressor, scheme, accumulation) to run, and the combinations left out with why.

    ``allgather`` averages in fp32 only: with fp32 among ``accumulate`` it runs once (fp32), else it is
    an error.  A named compressor that cannot run under a named scheme is an error
    (:class:`~gcbench.core.sharded.CollectiveError`), as are unknown names.
    """
    if not specs or not schemes or not accumulate:
        raise GcbenchError("the sweep needs at least one compressor, one scheme and one accumulation dtype")
    for s in schemes:
        if s not in SCHEMES:
            raise CollectiveError(f"unknown collective scheme {s!r}; choose from {', '.join(SCHEMES)}")
    for a in accumulate:
        if a not in ACCUMULATE:
            raise CollectiveError(f"unknown accumulation dtype {a!r}; choose from {', '.join(ACCUMULATE)}")
    combos, skipped = [], []
    for spec in specs:
        comp = _create(spec)
        label = _label(spec)
        for scheme in dict.fromkeys(schemes):
            for acc in dict.fromkeys(accumulate):
                if scheme == "allgather" and acc != "fp32":
                    if "fp32" not in accumulate:
                        check_fits(comp, scheme, acc)  # raises: allgather takes fp32 only
                    skipped.append({"compressor": label, "scheme": scheme, "accumulate": acc,
                                    "reason": "allgather decodes and averages in fp32"})
                    continue
                check_fits(comp, scheme, acc)
                combos.append(Combo(label, scheme, acc))
    return combos, skipped


def _create(spec: str) -> Any:
    name, params = registry.parse_spec(spec)
    return registry.create(name, **params)


def _label(spec: str) -> str:
    return spec.strip()


def worker_gradients(numel: int, world: int, distribution: str, seed: int) -> list[torch.Tensor]:
    """Worker w's gradient ``c + e_w`` (module docstring), float32; seeded by (seed, world, part)."""
    if distribution not in DISTRIBUTIONS:
        raise GcbenchError(f"unknown distribution {distribution!r}; choose from {', '.join(DISTRIBUTIONS)}")
    common = sample((numel,), distribution, np.random.Generator(np.random.PCG64([seed, world, 0])))
    return [common + sample((numel,), distribution, np.random.Generator(np.random.PCG64([seed, world, 1 + w])))
            for w in range(world)]


def source_gradients(source: GradientSource, world: int) -> list[torch.Tensor]:
    """The first ``world`` workers' step-0 gradients of ``source``, each one flat float32 tensor (layout order)."""
    if world > source.workers:
        raise GcbenchError(f"{source.name} has {source.workers} workers; the sweep asks for {world}")
    names = [t.name for t in source.layout()]
    out = []
    for w in range(world):
        grads = source.gradients(0, w)
        out.append(torch.cat([grads[n].detach().reshape(-1).float().cpu() for n in names]))
    return out


def measure(comp: Any, combo: Combo, grads: Sequence[torch.Tensor], draws: int, seed: int,
            step: Callable[[int], None] | None = None) -> Row:
    """One row: ``draws`` exchanges of ``grads`` under ``combo``, the compressors seeded by (seed, draw, worker)."""
    n = len(grads)
    exact = torch.stack([g.double() for g in grads]).mean(0)
    norm = float(exact.norm()) or 1.0
    errors, sent, diff_sum = [], [], torch.zeros_like(exact)
    for d in range(draws):
        states = [comp.init_state(1_000_003 * (seed + 1) + 1009 * d + w) for w in range(n)]
        res = simulate_sharded(comp, grads, states, combo.scheme, combo.accumulate)
        diff = res.aggregate.double().reshape(-1) - exact
        diff_sum += diff
        errors.append(float(diff.norm()) / norm)
        sent.append(res.traffic.sent() / n)
        if step is not None:
            step(d + 1)
    iv = mean_interval(errors)  # the 95% t interval (the value itself for one draw or no spread)
    if iv is None:
        raise ValueError("a collectives row needs at least one draw")
    ring = sum(s for s, _ in ring_allreduce_bytes(exact.numel(), n)) / n
    per_worker = float(np.mean(sent))
    return Row(combo.compressor, combo.scheme, combo.accumulate, n, iv.mean, iv.sd or 0.0, iv.lo, iv.hi,
               float((diff_sum / draws).norm()) / norm,
               per_worker, per_worker / ring if ring else None, draws)


def run_sweep(specs: Sequence[str], *, workers: Sequence[int] = DEFAULT_WORKERS, schemes: Sequence[str] = SCHEMES,
              accumulate: Sequence[str] = tuple(ACCUMULATE), numel: int = DEFAULT_NUMEL, distribution: str = "laplace",
              draws: int = 3, seed: int = 0, progress: Progress | None = None, source: GradientSource | None = None) -> Sweep:
    """Measure every combination of :func:`plan` at every worker count (progress: a plan, then cases of draws as steps).

    ``source``: real gradients (:func:`source_gradients`) instead of the synthetic ones; ``numel`` and
    ``distribution`` then describe nothing and the sweep records the source's element count and name.
    """
    check_sweep([int(n) for n in workers], numel, draws, seed, synthetic=source is None)
    ns = sorted(dict.fromkeys(int(n) for n in workers))
    combos, skipped = plan(specs, schemes, accumulate)
    if source is not None:
        if ns[-1] > source.workers:
            raise GcbenchError(f"{source.name} has {source.workers} workers; --workers asks for up to {ns[-1]}")
        numel, distribution = sum(t.numel for t in source.layout()), source.name
    sweep = Sweep(numel, distribution, draws, seed, ns, combos, skipped=skipped)
    comps = {c.compressor: _create(c.compressor) for c in combos}
    report = progress or (lambda *a: None)
    total = len(ns) * len(combos)
    # the ETA's plan: a case's work grows with N (every worker encodes and decodes its share of the tensor)
    report("plan", 0, total, json.dumps({"work": [n * numel for n in ns], "build": [numel] * len(ns), "cases": [c.label for c in combos]}))
    done = 0
    for n in ns:
        grads = worker_gradients(numel, n, distribution, seed) if source is None else source_gradients(source, n)
        for combo in combos:
            report("case", done, total, f"{combo.label} N={n}")
            def step(d: int, label: str = combo.label, n: int = n) -> None:
                report("step", d, draws, f"{label} N={n}")

            row = measure(comps[combo.compressor], combo, grads, draws, seed, step)
            sweep.rows.append(row)
            done += 1
            report("case", done, total, f"{combo.label} N={n}")
    return sweep


def csv_rows(sweep: Sweep) -> list[dict[str, Any]]:
    """The rows as flat records (one line each in a CSV), with the sweep's settings repeated on each."""
    return [{**asdict(r), "numel": sweep.numel, "distribution": sweep.distribution, "seed": sweep.seed} for r in sweep.rows]
