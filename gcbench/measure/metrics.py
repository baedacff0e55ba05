"""How the metrics are measured: size, fidelity and timing, exactly as README ("What the metrics mean") defines them.

What each recorded metric means (unit, direction) is :data:`gcbench.results.metrics.METRICS`.

For a gradient x and R independent compressions C_1(x)..C_R(x) with errors e_r = C_r(x) − x:

* bias² (relative)   ‖mean_r C_r − x‖² / ‖x‖², estimated without the variance/R inflation by
  the U-statistic Σ_{r≠s}⟨e_r, e_s⟩ / (R(R−1)) (unbiased for ‖E e‖²), with a jackknife standard
  error over the repeats;
* variance (relative) (1/(R−1)) Σ‖C_r − mean‖² / ‖x‖²;
* q (relative MSE)   (1/R) Σ‖e_r‖² / ‖x‖²;  ω̂ = q for unbiased compressors;
* δ (Beznosikov)     1/(1 − q) when q < 1 (else ∞);  α = 1 − q;
* cosine             mean over r of ⟨C_r, x⟩ / (‖C_r‖‖x‖).

Everything is computed from the R×R Gram matrix of the errors and the products ⟨C_r, x⟩, ‖C_r‖²
(float64), taken in one chunked pass over x and the C_r (:func:`moments`), so one read of the data
serves every quantity.  Ratios of zero-norm inputs are undefined and reported as ``None``
(an all-zero tensor in gives all-zero out; there is nothing to divide by).

Timing follows timm's and pyperf's habits: warm-up, device synchronisation, medians and
interquartile ranges, raw samples kept.  :func:`time_interleaved` times a plain copy of the same
tensors (the copy baseline) and the kernels round by round — copy, compress, decompress, copy, …
— so load that comes and goes hits both alike, and each kernel's **×copy** is taken per round
(kernel_i / copy_i).  Rounds continue until the ×copy medians are pinned down (their 95% CI,
:func:`median_ci`, within ±:attr:`TimingPolicy.stable_rel_ci` of them), the time budget is spent or
the maximum count is reached.
:func:`timing_flags` then says which numbers cannot be read as speeds: ``unstable`` (spread or
machine load over their thresholds), ``too short`` (under the timer's useful resolution) and
``beats traffic bound`` (faster than the memory traffic the compressor must do).
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from gcbench import kernels
from gcbench.core.compressor import Compressor, State
from gcbench.core.payload import Payload, dense_bytes
from gcbench.results.record import BEATS_BOUND, TOO_SHORT, UNSTABLE


def ratio(numel: int, wire_bytes: float) -> float | None:
    """Compression ratio: dense float32 bytes / wire bytes."""
    return dense_bytes(numel) / wire_bytes if wire_bytes > 0 else None


def bits_per_element(numel: int, wire_bytes: float) -> float | None:
    return 8.0 * wire_bytes / numel if numel else None


# ----------------------------------------------------------------------------- fidelity


@dataclass
class Fidelity:
    """Fidelity of one tensor (sums kept so tensors can be pooled energy-weighted)."""

    numel: int
    repeats: int
    x_sq: float  # ‖x‖²
    err_sq_mean: float  # (1/R) Σ‖e_r‖²
    bias_sq: float  # U-statistic estimate of ‖E e‖² (== ‖e‖² when R = 1)
    bias_sq_se: float | None  # jackknife standard error of bias_sq (None when R < 3)
    var_sum: float  # (1/(R−1)) Σ‖C_r − mean‖² (0 when R = 1)
    cosine: float | None
    q_samples: list[float] = field(default_factory=list)  # per-repeat ‖e_r‖²/‖x‖²
    dots: list[float] = field(default_factory=list)  # per-repeat ⟨C_r, x⟩ (cosine terms, pooled over units)
    d_sq: list[float] = field(default_factory=list)  # per-repeat ‖C_r‖²

    def cosine_terms(self, repeat: int = 0) -> tuple[float, float, float]:
        """⟨C_r, x⟩, ‖C_r‖² and ‖x‖² of one repeat: the terms a whole-model cosine sums over units."""
        return self.dots[repeat], self.d_sq[repeat], self.x_sq

    @property
    def q(self) -> float | None:
        return self.err_sq_mean / self.x_sq if self.x_sq > 0 else None

    @property
    def q_scaled(self) -> float | None:
        """The scale-free error: mean over repeats of min_s ‖s·C_r − x‖²/‖x‖² = 1 − cos²(C_r, x) (1 for an all-zero C_r)."""
        if self.x_sq <= 0 or not self.dots:
            return None
        return float(np.mean([scaled_error(d, c, self.x_sq) for d, c in zip(self.dots, self.d_sq, strict=True)]))

    @property
    def bias2(self) -> float | None:
        return self.bias_sq / self.x_sq if self.x_sq > 0 else None

    @property
    def variance(self) -> float | None:
        return self.var_sum / self.x_sq if self.x_sq > 0 else None

    def to_dict(self) -> dict[str, Any]:
        q = self.q
        return {
            "numel": self.numel,
            "repeats": self.repeats,
            "q": q,
            "bias2": self.bias2,
            "bias2_se": (self.bias_sq_se / self.x_sq) if (self.bias_sq_se is not None and self.x_sq > 0) else None,
            "variance": self.variance,
            "cosine": self.cosine,
            "q_scaled": self.q_scaled,
            "delta": delta_beznosikov(q),
            "alpha": (1.0 - q) if q is not None else None,
        }


def scaled_error(dot: float, c_sq: float, x_sq: float) -> float:
    """min_s ‖s·c − x‖² / ‖x‖² = 1 − ⟨c, x⟩²/(‖c‖²‖x‖²): the relative error left after the best scalar rescaling of c.

    Scale-free: an unscaled sign compressor is not charged for its scale alone.  1 when c is all
    zeros (the best rescaling of nothing is nothing).  ``x_sq`` must be positive.
    """
    return 1.0 - (dot * dot / (c_sq * x_sq) if c_sq > 0 else 0.0)


def delta_beznosikov(q: float | None) -> float | None:
    """δ_B = 1/(1 − q) for q < 1; ``inf`` is reported as None (not contractive)."""
    if q is None or q >= 1.0:
        return None
    return 1.0 / (1.0 - q)


#: elements per chunk of the fused passes: a chunk's float64 rows (x, and one error per repeat)
#: stay in cache while every product over them is taken, so no full-size float64 copy is made
CHUNK = 1 << 16


def _fast(*tensors: torch.Tensor) -> bool:
    """Whether the numba passes of :mod:`gcbench.kernels` apply: float32 CPU tensors, numba present."""
    return kernels.cpu_fast(*tensors) and all(t.dtype == torch.float32 for t in tensors)


def sq_norm64(t: torch.Tensor) -> float:
    """‖t‖², accumulated in float64 in one pass (no full-size float64 copy of ``t``)."""
    if _fast(t):
        return kernels.sq_norm(kernels.flat_f32(t))
    flat = t.detach().reshape(-1)
    total = 0.0
    for lo in range(0, flat.numel(), CHUNK):
        c = flat[lo : lo + CHUNK].double()
        total += float(torch.dot(c, c))
    return total


def sq_dist64(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖²: the difference taken in the inputs' dtype (as ``a - b`` would), squared and summed in
    float64, chunk by chunk, so no full-size difference tensor is made."""
    fa, fb = a.detach().reshape(-1), b.detach().reshape(-1)
    if fa.numel() != fb.numel():
        raise ValueError(f"sq_dist64 needs tensors of one size, got {fa.numel()} and {fb.numel()}")
    if _fast(fa, fb):
        return kernels.sq_dist(kernels.flat_f32(fa), kernels.flat_f32(fb))
    total = 0.0
    for lo in range(0, fa.numel(), CHUNK):
        c = (fa[lo : lo + CHUNK] - fb[lo : lo + CHUNK]).double()
        total += float(torch.dot(c, c))
    return total


def accumulate64(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor | None = None) -> float:
    """``acc += a − b`` (``b`` None: ``acc += a``) in place and ‖acc‖² in float64, in one pass: a running
    sum and its squared norm, the two things a stream needs at every step, from one read of the data.

    float32 ``acc``; the difference and the sum are each rounded to float32, chunk by chunk here and
    element by element in the numba kernel, so both leave the same bits in ``acc``.
    """
    flat, fa = acc.view(-1), a.detach().reshape(-1)
    fb = None if b is None else b.detach().reshape(-1)
    if fa.numel() != flat.numel() or (fb is not None and fb.numel() != flat.numel()):
        raise ValueError(f"accumulate64 needs tensors of one size, got {flat.numel()}, {fa.numel()} and "
                         f"{flat.numel() if fb is None else fb.numel()}")
    if _fast(flat, fa) and (fb is None or _fast(fb)):
        return kernels.accumulate(flat.numpy(), kernels.flat_f32(fa), None if fb is None else kernels.flat_f32(fb))
    total = 0.0
    for lo in range(0, flat.numel(), CHUNK):
        c = flat[lo : lo + CHUNK]
        c.add_(fa[lo : lo + CHUNK] if fb is None else fa[lo : lo + CHUNK] - fb[lo : lo + CHUNK])
        d = c.double()
        total += float(torch.dot(d, d))
    return total


@dataclass(frozen=True)
class Moments:
    """The inner products fidelity needs, from one pass over x and its R decoded versions (float64)."""

    x_sq: float  # ‖x‖²
    gram: np.ndarray  # R×R ⟨e_r, e_s⟩ with e_r = d_r − x
    dots: np.ndarray  # ⟨d_r, x⟩
    d_sq: np.ndarray  # ‖d_r‖²


def moments(x: torch.Tensor, decoded: Sequence[torch.Tensor]) -> Moments:
    """Every inner product of :func:`fidelity` in a single pass over ``x`` and ``decoded``: the numba
    kernel :func:`gcbench.kernels.moments` for float32 CPU tensors, :func:`moments_torch` otherwise."""
    for d in decoded:
        if d.numel() != x.numel():
            raise ValueError(f"decoded tensor has {d.numel()} elements, the gradient {x.numel()}")
    if _fast(x, *decoded):
        x_sq, gram, dots, d_sq = kernels.moments(kernels.flat_f32(x), tuple(kernels.flat_f32(d) for d in decoded))
        return Moments(x_sq=x_sq, gram=gram, dots=dots, d_sq=d_sq)
    return moments_torch(x, decoded)


def moments_torch(x: torch.Tensor, decoded: Sequence[torch.Tensor]) -> Moments:
    """:func:`moments` in torch, chunk by chunk (any device and dtype; the numba kernel's reference).

    Each chunk of x and of every d_r is converted to float64 once; the errors are formed from the
    float64 chunks (as d.double() − x.double() would), and all products are taken while the chunk
    is in cache, so the cost is one read of each tensor and no full-size temporary.
    """
    r = len(decoded)
    fx = x.detach().reshape(-1)
    fds = [d.detach().reshape(-1) for d in decoded]
    pairs = [(i, j) for i in range(r) for j in range(i, r)]
    # sums stay on the tensors' device until the end: one synchronisation per call, not per product
    acc = torch.zeros(1 + 2 * r + len(pairs), dtype=torch.float64, device=fx.device)
    for lo in range(0, fx.numel(), CHUNK):
        xc = fx[lo : lo + CHUNK].double()
        dcs = [f[lo : lo + CHUNK].to(torch.float64, copy=True) for f in fds]  # own copies: changed below
        prods = [torch.dot(xc, xc)] + [torch.dot(dc, xc) for dc in dcs] + [torch.dot(dc, dc) for dc in dcs]
        ecs = [dc.sub_(xc) for dc in dcs]  # in place: the chunk's d_r is no longer needed
        prods += [torch.dot(ecs[i], ecs[j]) for i, j in pairs]
        acc += torch.stack(prods)
    sums = acc.cpu().numpy()
    gram = np.zeros((r, r))
    for (i, j), v in zip(pairs, sums[1 + 2 * r :], strict=True):
        gram[i, j] = gram[j, i] = v
    return Moments(x_sq=float(sums[0]), gram=gram, dots=sums[1 : 1 + r].copy(), d_sq=sums[1 + r : 1 + 2 * r].copy())


def fidelity(x: torch.Tensor, decoded: Sequence[torch.Tensor]) -> Fidelity:
    """All fidelity quantities of R decoded versions of ``x`` (see the module docstring)."""
    r = len(decoded)
    if r == 0:
        raise ValueError("fidelity needs at least one decoded tensor")
    m = moments(x, decoded)
    x_sq, g = m.x_sq, m.gram
    diag = np.diag(g)
    err_sq_mean = float(diag.mean())
    if r == 1:
        bias_sq, se, var_sum = float(g[0, 0]), None, 0.0
    else:
        off = float(g.sum() - diag.sum())
        bias_sq = off / (r * (r - 1))
        var_sum = float((diag.sum() - g.sum() / r) / (r - 1))
        se = None
        if r >= 3:  # jackknife over repeats: leave-one-out U-statistics from the same Gram matrix
            row = g.sum(1) - diag
            loo = [(off - 2 * row[i]) / ((r - 1) * (r - 2)) for i in range(r)]
            se = math.sqrt((r - 1) / r * sum((v - np.mean(loo)) ** 2 for v in loo))
    cos = []
    for dot, dsq in zip(m.dots, m.d_sq, strict=True):
        nd = math.sqrt(dsq)
        if x_sq > 0 and nd > 0:
            cos.append(float(dot) / (nd * math.sqrt(x_sq)))
        elif x_sq > 0:
            cos.append(0.0)
    q_samples = [float(v / x_sq) for v in diag] if x_sq > 0 else []
    return Fidelity(
        numel=x.numel(),
        repeats=r,
        x_sq=x_sq,
        err_sq_mean=err_sq_mean,
        bias_sq=bias_sq,
        bias_sq_se=se,
        var_sum=var_sum,
        cosine=float(np.mean(cos)) if cos else None,
        q_samples=q_samples,
        dots=[float(v) for v in m.dots],
        d_sq=[float(v) for v in m.d_sq],
    )


def pooled(fids: Sequence[Fidelity]) -> dict[str, Any]:
    """Whole-model quantities: numerators and ‖x‖² summed over tensors (energy-weighted)."""
    x_sq = sum(f.x_sq for f in fids)
    if x_sq <= 0:
        return {"q": None, "bias2": None, "variance": None, "delta": None, "alpha": None, "cosine": None, "q_scaled": None}
    q = sum(f.err_sq_mean for f in fids) / x_sq
    # cosine and its scale-free error, whole model: per repeat, ⟨C_r, x⟩ and ‖C_r‖² summed over tensors first
    repeats = min((len(f.dots) for f in fids), default=0)
    dots = [sum(f.dots[r] for f in fids) for r in range(repeats)]
    c_sq = [sum(f.d_sq[r] for f in fids) for r in range(repeats)]
    cos = [d / math.sqrt(c * x_sq) for d, c in zip(dots, c_sq, strict=True) if c > 0]
    return {
        "q": q,
        "bias2": sum(f.bias_sq for f in fids) / x_sq,
        "variance": sum(f.var_sum for f in fids) / x_sq,
        "delta": delta_beznosikov(q),
        "alpha": 1.0 - q,
        "cosine": float(np.mean(cos)) if cos else None,
        "q_scaled": float(np.mean([scaled_error(d, c, x_sq) for d, c in zip(dots, c_sq, strict=True)])) if repeats else None,
    }


def mean_ci(samples: Sequence[float], confidence: float = 0.95) -> dict[str, float | None]:
    """Mean with a Student-t confidence interval (scipy); worst = max."""
    vals = [v for v in samples if v is not None and math.isfinite(v)]
    if not vals:
        return {"mean": None, "lo": None, "hi": None, "worst": None, "n": 0}
    m = float(np.mean(vals))
    if len(vals) < 2 or float(np.std(vals)) == 0.0:
        return {"mean": m, "lo": m, "hi": m, "worst": float(max(vals)), "n": len(vals)}
    # the t quantile from scipy.special, on use: scipy.stats (whose t.interval this equals) costs 1-2.5 s to import, a third
    # of a quick run's start; scipy.special about a third of that
    from scipy.special import stdtrit

    half = float(stdtrit(len(vals) - 1, 0.5 + confidence / 2)) * float(np.std(vals, ddof=1)) / math.sqrt(len(vals))
    lo, hi = m - half, m + half
    return {"mean": m, "lo": float(lo), "hi": float(hi), "worst": float(max(vals)), "n": len(vals)}


def summarise(values: Sequence[float | None], worst: str = "max") -> dict[str, float | None]:
    """Mean and worst case (max, or min for higher-is-better metrics) over tensors and steps."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {"mean": None, "worst": None}
    return {"mean": float(np.mean(vals)), "worst": float(max(vals) if worst == "max" else min(vals))}


# ----------------------------------------------------------------------------- timing


def flat_like(xs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Uninitialised tensors shaped like ``xs``, laid out in one buffer from :func:`gcbench.kernels.empty`.

    The memory every timed copy reads and writes (the copy baseline's destination, the run's
    cached gradients) comes from the same huge-page allocator as the kernels' outputs.  Tensors
    from ``torch.empty`` land on whatever 4 KiB pages the C allocator holds: in two back-to-back
    cnn runs the copy of the same ResNet gradients was 12% slower in the second run (the median
    over 60 cases) while the compressors' own times were equal to 1%, which moved every ×copy
    by 12%.  Mixed dtypes, non-CPU tensors and an empty list get ``torch.empty_like`` each.
    """
    if not xs or any(x.device.type != "cpu" or x.dtype != xs[0].dtype for x in xs):
        return [torch.empty_like(x) for x in xs]
    sizes = [x.numel() for x in xs]
    flat = kernels.empty(sum(sizes), xs[0].dtype)
    return [part.view(x.shape) for part, x in zip(flat.split(sizes), xs, strict=True)]


def synchronize(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Timing:
    """Raw timing samples (seconds) with their robust summaries."""

    samples: list[float]
    warmup: int

    @property
    def median(self) -> float:
        return float(statistics.median(self.samples))

    @property
    def iqr(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        q1, q3 = np.percentile(self.samples, [25, 75])
        return float(q3 - q1)

    def to_dict(self) -> dict[str, Any]:
        return {"median_s": self.median, "iqr_s": self.iqr, "samples_s": list(self.samples), "warmup": self.warmup}


def time_call(fn: Callable[[], Any], repeats: int, warmup: int, device: torch.device | str = "cpu",
              setup: Callable[[], Any] | None = None) -> Timing:
    """Time ``fn`` ``repeats`` times after ``warmup`` untimed calls; ``setup`` runs untimed before each."""
    samples = []
    for i in range(warmup + repeats):
        if setup is not None:
            setup()
        synchronize(device)
        t0 = time.perf_counter()
        out = fn()
        synchronize(device)
        dt = time.perf_counter() - t0
        del out  # freed after the clock stops (see time_interleaved)
        if i >= warmup:
            samples.append(dt)
    return Timing(samples, warmup)


def throughput(numel: int, t: Timing) -> dict[str, float | None]:
    """GB/s of dense float32 input and elements/s at the median time."""
    med = t.median
    if med <= 0:
        return {"gbps": None, "elements_per_s": None}
    return {"gbps": dense_bytes(numel) / med / 1e9, "elements_per_s": numel / med}


# ----------------------------------------------------------------------------- interleaved, calibrated timing


@dataclass(frozen=True)
class TimingPolicy:
    """How kernel timings are taken and when they are flagged (every threshold stated here, recorded with each run).

    Calibration stops at the first of: every ×copy stable, ``max_rounds``, ``budget_s`` — so a
    case's timing costs its ``min_rounds`` and at most about a second more.
    """

    warmup: int = 1  # untimed rounds first: first touch of output buffers, numba compilation, caches
    min_rounds: int = 5  # timed rounds at least (the suite's ``timing_repeats``)
    max_rounds: int = 60  # … and at most
    budget_s: float = 1.0  # calibration stops after this much wall time, stable or not
    # the precision of the median, not the scatter of the rounds, decides: the half-width of the median's 95% CI
    # (distribution-free, :func:`median_ci`) over the median.  More rounds narrow it; a scatter that does not shrink
    # with more rounds (load that comes and goes) keeps it wide
    stable_rel_ci: float = 0.05  # calibration stops once every kernel's ×copy CI half-width / median is under this
    unstable_rel_ci: float = 0.10  # a ×copy CI half-width / median above this flags the timing ``unstable``
    # a 1-minute load average per core above this flags ``unstable``: more runnable threads than cores (this process's
    # own included), so parallel regions wait a scheduler slice for a core (a 5 MB copy: 15 ms instead of 0.3)
    load_per_core: float = 1.0
    # the share of the machine's CPU time that other processes (and the hypervisor: steal) took while timing above this
    # flags ``unstable``: measured from /proc/stat minus this process's own CPU time, so the timing's own threads never
    # count.  The load average above counts them: a bench with 2 threads on 2 cores sits near 1.0 per core by itself,
    # so any neighbour tipped every later row over.  Only where /proc/stat cannot be read is the load average used
    foreign_cpu: float = 0.25
    resolution_s: float = 50e-6  # a median kernel time under this is flagged ``too short``
    # a case whose own copy median drifted from its source's pooled copy (over the whole run) far enough to move a
    # kernel held against the pooled copy by this much (drift x the share of its time its traffic explains) ran
    # while the machine was in another state (a neighbour's memory traffic, another tenant's burst): ``unstable``
    copy_drift: float = 0.15

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, recorded: dict[str, float]) -> TimingPolicy:
        """The policy a results file recorded (:meth:`to_dict`); thresholds it predates take today's defaults."""
        return cls(**{k: type(getattr(cls, k))(v) for k, v in recorded.items() if hasattr(cls, k)})


def last_level_cache_bytes() -> int:
    """The size of the CPU's largest cache (Linux sysfs), or 32 MiB where it cannot be read."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            try:
                with open(os.path.join(base, entry, "size")) as f:
                    text = f.read().strip().upper()
            except OSError:
                continue
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            digits = text[:-1] if text[-1:] in "KMG" else text
            if digits.isdigit():
                best = max(best, int(digits) * mult)
    except OSError:
        pass
    return best or 32 << 20


def load_per_core() -> float | None:
    """The 1-minute load average divided by the CPU count; None where the platform has none."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return None


def _proc_stat_cpu() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine since boot, every CPU summed (Linux /proc/stat); None elsewhere.

    Busy is user + nice + system + irq + softirq + steal: steal is time the hypervisor gave this
    VM's CPUs to someone else, which slows a timed kernel as surely as a neighbour process does.
    """
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 8:
        return None
    v = [float(x) for x in fields[1:9]] + [0.0] * max(0, 9 - len(fields))
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    busy = user + nice + system + irq + softirq + steal
    return busy / hz, (busy + idle + iowait) / hz


@dataclass
class CpuMeter:
    """How much of the machine's CPU other processes used between :meth:`start` and :meth:`share` (0 = none, 1 = all).

    This process's own CPU time (every thread: :func:`time.process_time`) is taken off the
    machine's busy time, so a timing's own threads never count as load — the 1-minute load
    average counts them.  ``read`` and ``own`` are injectable for tests.
    """

    read: Callable[[], tuple[float, float] | None] = _proc_stat_cpu
    own: Callable[[], float] = time.process_time
    _start: tuple[float, float, float] | None = None

    def start(self) -> CpuMeter:
        m = self.read()
        self._start = None if m is None else (m[0], m[1], self.own())
        return self

    def share(self) -> float | None:
        """Other processes' share of the machine's CPU time since :meth:`start`; None where it cannot be measured."""
        if self._start is None:
            return None
        m = self.read()
        if m is None:
            return None
        busy0, total0, own0 = self._start
        total = m[1] - total0
        if total <= 0:
            return None
        foreign = (m[0] - busy0) - (self.own() - own0)
        return min(1.0, max(0.0, foreign / total))


def median_ci(samples: Sequence[float], z: float = 1.96) -> tuple[float, float] | None:
    """The distribution-free 95% confidence interval of the median: order statistics at ranks n/2 ∓ z·√n/2.

    No assumption about the samples' distribution (timings are skewed); for n ≤ 5 it is the whole
    range [min, max].  None without samples.
    """
    n = len(samples)
    if n == 0:
        return None
    s = sorted(samples)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return float(s[lo]), float(s[hi])


def rel_ci(samples: Sequence[float]) -> float | None:
    """Half the width of :func:`median_ci` over the median: how precisely the rounds fix the median; None when undefined."""
    ci = median_ci(samples)
    med = float(np.median(samples)) if samples else 0.0
    if ci is None or len(samples) < 2 or med <= 0:
        return None
    return (ci[1] - ci[0]) / (2 * med)


def rel_iqr(samples: Sequence[float]) -> float | None:
    """Interquartile range / median: the spread of samples relative to their size; None when undefined."""
    if len(samples) < 2:
        return None
    q1, med, q3 = np.percentile(samples, [25, 50, 75])
    return float((q3 - q1) / med) if med > 0 else None


def calibration_done(x_copy: Mapping[str, Sequence[float]], elapsed_s: float, policy: TimingPolicy) -> str | None:
    """Why timing can stop after the rounds so far (``stable``, ``budget``, ``max rounds``), or None to go on.

    ``x_copy`` holds each kernel's per-round ×copy.  Stability is judged on every kernel, as the
    precision of the median of the per-round ratios (:func:`rel_ci`): the number reported.
    """
    rounds = min((len(v) for v in x_copy.values()), default=0)
    if rounds < policy.min_rounds:
        return None
    spreads = [rel_ci(v) for v in x_copy.values()]
    if all(s is not None and s <= policy.stable_rel_ci for s in spreads):
        return "stable"
    if rounds >= max(policy.max_rounds, policy.min_rounds):
        return "max rounds"
    if elapsed_s >= policy.budget_s:
        return "budget"
    return None


@dataclass
class Interleaved:
    """Interleaved timings of a copy baseline and named kernels: ``copy[i]`` and ``kernels[k][i]`` share round i."""

    copy: list[float]
    kernels: dict[str, list[float]]
    warmup: int
    stopped: str  # why calibration stopped (:func:`calibration_done`)
    load_per_core: float | None  # the highest 1-minute load per core seen during the measurement
    foreign_cpu: float | None = None  # other processes' share of the machine's CPU during the rounds (:class:`CpuMeter`)

    def x_copy(self, kernel: str) -> list[float]:
        """The kernel's time as a multiple of the copy of the same round, round by round."""
        return [k / c for k, c in zip(self.kernels[kernel], self.copy, strict=True) if c > 0]

    def timing(self, kernel: str) -> Timing:
        return Timing(self.kernels[kernel], self.warmup)

    @property
    def copy_timing(self) -> Timing:
        return Timing(self.copy, self.warmup)


def time_interleaved(copy: Callable[[], Any], kernels: Mapping[str, Callable[[], Any]], policy: TimingPolicy,
                     device: torch.device | str = "cpu", setup: Callable[[], Any] | None = None,
                     clock: Callable[[], float] = time.perf_counter,
                     load: Callable[[], float | None] = load_per_core, meter: CpuMeter | None = None) -> Interleaved:
    """Time ``copy`` and each kernel in rounds (setup, copy, kernel 1, kernel 2, …) until :func:`calibration_done`.

    ``setup`` runs untimed at the start of every round (fresh state clones, so each compress starts
    from the same state).  ``policy.warmup`` whole rounds run first, untimed.  The load is sampled
    before and after, and the CPU other processes took during the timed rounds (:class:`CpuMeter`);
    ``clock``, ``load`` and ``meter`` are injectable so the calibration can be tested.
    """
    copy_s: list[float] = []
    kern_s: dict[str, list[float]] = {k: [] for k in kernels}
    loads = [load()]
    cpu = meter if meter is not None else CpuMeter()

    def timed(fn: Callable[[], Any]) -> float:
        synchronize(device)
        t0 = clock()
        out = fn()
        synchronize(device)
        dt = clock() - t0
        # the result is freed after the clock stops: freeing a step's outputs is the caller's
        # cost when it is done with them, not the kernel's (the copy baseline frees nothing)
        del out
        return dt

    start = clock()
    stopped: str | None = None
    rounds = 0
    while stopped is None:
        if rounds == policy.warmup:
            cpu.start()  # the timed rounds only: warm-up compiles and faults pages in, on this process's own CPU
        if setup is not None:
            setup()
        c = timed(copy)
        ks = {name: timed(fn) for name, fn in kernels.items()}
        rounds += 1
        if rounds <= policy.warmup:
            start = clock()  # the budget is for timed rounds
            continue
        copy_s.append(c)
        for name, dt in ks.items():
            kern_s[name].append(dt)
        x = {name: [k / c_ for k, c_ in zip(v, copy_s, strict=True) if c_ > 0] for name, v in kern_s.items()}
        stopped = calibration_done(x, clock() - start, policy)
    loads.append(load())
    seen = [v for v in loads if v is not None]
    return Interleaved(copy_s, kern_s, policy.warmup, stopped, max(seen) if seen else None, cpu.share())


_FROZEN = {"done": False}


def collect_garbage() -> None:
    """Collect the garbage earlier work left, before a timed region.

    The first call also freezes what survives (:func:`gc.freeze`: torch, numba, scipy and the modules
    — about 260,000 objects once the compressors are imported), so later calls scan only what was made
    since: a full collection cost 0.1–1 s per case, a tenth of the quick suite's run spent on
    objects that live as long as the process.  Garbage made after the first call is collected as before.
    """
    gc.collect()
    if not _FROZEN["done"]:
        gc.freeze()
        _FROZEN["done"] = True


def time_step(comp: Compressor, xs: Sequence[torch.Tensor], states: Sequence[State], policy: TimingPolicy,
              device: torch.device | str = "cpu", payloads: Sequence[Payload] | None = None,
              copy_into: Sequence[torch.Tensor] | None = None) -> Interleaved:
    """Time one worker-step of ``comp`` — compress of every tensor of ``xs`` as a group, and decode of
    its payloads — interleaved with a copy of the same tensors (:func:`time_interleaved`).

    What ``run`` and ``compare`` time for every case and ``gcbench bench --model`` for a model's
    tensors.  Kept apart from other work by discipline rather than by a process (a worker process
    per case would cost more than the quick suite's whole run; ``bench`` adds one): the garbage
    earlier work left is collected first and the collector stays off while timing; payloads, the
    copy's destination and the state clones each round starts from are made outside the timed
    region, and warm-up rounds touch every buffer first.  ``states`` are left untouched.  ``payloads`` (the step's,
    compressed from clones of ``states``) are what the decompress decodes; made here when not given.  ``copy_into``
    (shaped like ``xs``): the copy baseline's destination, one for all cases of a source (:func:`flat_like` here when
    not given), so every case's copy writes the same memory.
    """
    if payloads is None:
        payloads = [p for p, _ in comp.compress_group(xs, [s.clone() for s in states], need_decoded=False)]
    bufs = list(copy_into) if copy_into is not None else flat_like(xs)
    shapes = [x.shape for x in xs]  # what a receiver waits for (a tiny payload of a large tensor decodes only with it)
    holder: dict[str, list[State]] = {}

    def setup() -> None:
        holder["st"] = [s.clone() for s in states]

    def copy() -> None:
        for b, x in zip(bufs, xs, strict=True):
            b.copy_(x)

    kernels_ = {"compress": lambda: comp.compress_group(xs, holder["st"], need_decoded=False),
                "decompress": lambda: comp.decompress_group(payloads, shapes)}
    collect_garbage()
    gc.disable()  # a collection inside a timed call would be charged to whichever kernel it hit
    try:
        return time_interleaved(copy, kernels_, policy, device, setup)
    finally:
        gc.enable()


def settle_copy(xs: Sequence[torch.Tensor], into: Sequence[torch.Tensor], *, batch: int = 5, tolerance: float = 0.03,
                max_s: float = 10.0, clock: Callable[[], float] = time.perf_counter,
                copy_once: Callable[[], float] | None = None) -> tuple[int, float]:
    """Copy ``xs`` into ``into`` in batches until two batches in a row agree (their medians within ``tolerance``) or
    ``max_s`` has passed; returns (copies made, the last batch's median seconds).

    Run before a source's first timed case: the copy is every kernel's baseline, and right after a large
    run freed its memory the machine copied the same tensors 20% faster or slower from case to case
    (the kernel reclaiming and compacting pages) while the run before it had not.  Settling costs
    a few copies on a quiet machine and waits out such a state on a busy one, at most ``max_s``.
    ``copy_once`` (one timed copy, its seconds) is injectable for tests.
    """
    def one() -> float:
        t0 = clock()
        for b, x in zip(into, xs, strict=True):
            b.copy_(x)
        return clock() - t0

    timed = copy_once or one
    if not xs:
        return 0, 0.0
    start, made, last = clock(), 0, None
    while True:
        med = float(np.median([timed() for _ in range(batch)]))
        made += batch
        if (last and abs(med / last - 1) <= tolerance) or clock() - start > max_s or med <= 0:
            return made, med
        last = med


def flag_reasons(x_copy: Sequence[float], median_s: float, load: float | None, policy: TimingPolicy,
                 bound_x_copy: float | None = None, foreign: float | None = None) -> dict[str, str]:
    """Each flag of :func:`timing_flags` with what triggered it, in words with the measured value and the threshold.

    The text goes into the results file (``reasons`` beside ``flags``) and under the tables, so a
    reader sees why a number was flagged, not only that it was.
    """
    why: dict[str, list[str]] = {}
    spread = rel_ci(x_copy)
    if spread is not None and spread > policy.unstable_rel_ci:
        why.setdefault(UNSTABLE, []).append(
            f"the median's 95% CI is ±{spread:.0%} of it (over ±{policy.unstable_rel_ci:.0%}) after {len(x_copy)} rounds")
    if foreign is not None:
        if foreign > policy.foreign_cpu:
            why.setdefault(UNSTABLE, []).append(
                f"other processes took {foreign:.0%} of the machine's CPU while timing (over {policy.foreign_cpu:.0%})")
    elif load is not None and load > policy.load_per_core:
        why.setdefault(UNSTABLE, []).append(f"the load per core was {load:.2f} (over {policy.load_per_core:g})")
    if median_s < policy.resolution_s:
        why.setdefault(TOO_SHORT, []).append(f"median {1e6 * median_s:.0f} µs (under {1e6 * policy.resolution_s:.0f} µs)")
    if bound_x_copy is not None and x_copy:
        q3 = float(np.percentile(x_copy, 75))
        if q3 < bound_x_copy:
            why.setdefault(BEATS_BOUND, []).append(f"upper quartile {q3:.2f}× copy under the card's traffic bound {bound_x_copy:.2f}×")
    return {flag: "; ".join(texts) for flag, texts in why.items()}


def timing_flags(x_copy: Sequence[float], median_s: float, load: float | None, policy: TimingPolicy,
                 bound_x_copy: float | None = None, foreign: float | None = None) -> list[str]:
    """What keeps a kernel timing from being read as a speed (empty: nothing).

    * ``unstable``: the median ×copy is not pinned down — its 95% CI half-width over the median
      (:func:`rel_ci`) is over ``policy.unstable_rel_ci`` after calibration's rounds — or other
      processes took over ``policy.foreign_cpu`` of the machine's CPU while timing (``foreign``,
      :class:`CpuMeter`; where that was not measured, the 1-minute load per core ``load`` over
      ``policy.load_per_core``);
    * ``too short``: the median kernel time is under ``policy.resolution_s``;
    * ``beats traffic bound``: even the upper quartile of ×copy is under ``bound_x_copy`` — the
      kernel moved less memory than its card says it must (traffic_bytes / the copy's 8 bytes
      per element), so the number measures something else (a lazy result, a cache, a bug).

    :func:`flag_reasons` says what triggered each.
    """
    return list(flag_reasons(x_copy, median_s, load, policy, bound_x_copy, foreign))


def x_copy_summary(x_copy: Sequence[float], flags: Sequence[str], reasons: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The record's ×copy block of one kernel: median with its 95% CI, IQR, relative IQR, per-round samples, flags and
    (when given) what triggered each flag (:func:`flag_reasons`)."""
    extra = {"reasons": {f: reasons[f] for f in flags if f in reasons}} if reasons is not None else {}
    if not x_copy:
        return {"median": None, "ci_lo": None, "ci_hi": None, "iqr": None, "rel_iqr": None, "samples": [], "flags": list(flags),
                **extra}
    q1, med, q3 = np.percentile(x_copy, [25, 50, 75])
    lo, hi = median_ci(x_copy) or (None, None)
    return {"median": float(med), "ci_lo": lo, "ci_hi": hi, "iqr": float(q3 - q1), "rel_iqr": rel_iqr(x_copy),
            "samples": [float(v) for v in x_copy], "flags": list(flags), **extra}
