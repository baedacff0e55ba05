"""How kernels are timed: interleaved with a copy of the same tensors, until the ×copy medians are pinned down.

Timing follows timm's and pyperf's habits: warm-up, device synchronisation, medians and
interquartile ranges, raw samples kept.  :func:`time_interleaved` times a plain copy of the same
tensors (the copy baseline) and the kernels round by round — copy, compress, decompress, copy, …
— so load that comes and goes hits both alike, and each kernel's **×copy** is taken per round
(kernel_i / copy_i).  Rounds continue until the ×copy medians are pinned down (their 95% CI,
:func:`median_ci`, within ±:attr:`TimingPolicy.stable_rel_ci` of them), the time budget is spent or
the maximum count is reached.
:func:`timing_flags` then says which numbers cannot be read as speeds: ``unstable`` (spread or
machine load over their thresholds), ``too short`` (under the timer's useful resolution) and
``beats traffic bound`` (faster than the memory traffic the compressor must do) and ``cut short`` (a
whole run's timing budget stopped the rounds before their least count).
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
from gcbench.results.record import BEATS_BOUND, CUT_SHORT, TOO_SHORT, UNSTABLE


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


#: times one call: its seconds (the call's result is freed after the clock stops)
Timer = Callable[[Callable[[], Any]], float]


def host_timer(device: torch.device | str = "cpu", clock: Callable[[], float] = time.perf_counter) -> Timer:
    """The CPU's timer: the device synchronised, then ``clock`` read around the call."""

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

    return timed


class CudaEventTimer:
    """A GPU's timer: CUDA events recorded on the stream before and after the call, their elapsed time.

    No host clock: what is measured is the stream's own time from the first event to the second,
    kernels and the gaps the host leaves between them (a scalar read that stalls the stream is
    counted), not the host's launch queue.  ``event`` (``torch.cuda.Event``) and ``stream`` are
    injectable so a CPU test can drive this path with a fake event class.
    """

    def __init__(self, device: torch.device | str, event: Callable[..., Any] | None = None, stream: Any = None) -> None:
        self.device = torch.device(device)
        self.event = event if event is not None else torch.cuda.Event
        self.stream = stream if stream is not None or event is not None else torch.cuda.current_stream(self.device)

    def __call__(self, fn: Callable[[], Any]) -> float:
        start, end = self.event(enable_timing=True), self.event(enable_timing=True)
        self._record(start)
        out = fn()
        self._record(end)
        end.synchronize()
        del out
        return float(start.elapsed_time(end)) / 1e3  # milliseconds

    def _record(self, event: Any) -> None:
        if self.stream is None:
            event.record()
        else:
            event.record(self.stream)


def timer_name(device: torch.device | str) -> str:
    """What times a call on ``device``, as results files record it: ``cuda events`` or ``host clock``."""
    return "cuda events" if torch.device(device).type == "cuda" else "host clock"


def timer_for(device: torch.device | str, clock: Callable[[], float] = time.perf_counter) -> Timer:
    """CUDA events on a GPU (:class:`CudaEventTimer`), the synchronised host ``clock`` elsewhere (:func:`host_timer`)."""
    return CudaEventTimer(device) if torch.device(device).type == "cuda" else host_timer(device, clock)


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
              setup: Callable[[], Any] | None = None, timer: Timer | None = None) -> Timing:
    """Time ``fn`` ``repeats`` times after ``warmup`` untimed calls; ``setup`` runs untimed before each.  ``timer``:
    :func:`timer_for` the device unless given (CUDA events on a GPU)."""
    samples = []
    timed = timer if timer is not None else timer_for(device)
    for i in range(warmup + repeats):
        if setup is not None:
            setup()
        dt = timed(fn)
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
    # a whole run's timing budget's share for this case (0: none).  Once the timed rounds have taken it they stop even
    # before ``min_rounds`` (one round at least), and the kernels are flagged ``cut short``: a one-step run of a 124M-
    # parameter model spent minutes in rounds of a second or more each, which no per-case budget could stop
    cap_s: float = 0.0

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


#: the least ticks per CPU a :class:`CpuMeter` window must span to give a share (10: 100 ms at 100 Hz)
MIN_TICKS = 10


def _tick_s() -> float:
    """The seconds of one /proc/stat tick (1 / USER_HZ; 10 ms where the system does not say)."""
    try:
        return 1.0 / float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, AttributeError):
        return 0.01


@dataclass
class CpuMeter:
    """How much of the machine's CPU other processes used between :meth:`start` and :meth:`share` (0 = none, 1 = all).

    This process's own CPU time (every thread: :func:`time.process_time`) is taken off the
    machine's busy time, so a timing's own threads never count as load — the 1-minute load
    average counts them.  ``read`` and ``own`` are injectable for tests.

    /proc/stat counts in ticks (10 ms at the usual 100 Hz), charged to whatever ran when each tick fell, while
    this process's own time is exact: over a window of a few ticks the difference is tick noise, not load.  On a
    quiet 2-core machine 5 ms windows of one busy thread read a median foreign share of 24% (46% of them over the
    25% flag), 20 ms windows at most 20%, 100 ms at most 10%.  So a window shorter than :data:`MIN_TICKS` ticks per
    CPU has no share (None): the load average still judges it.
    """

    read: Callable[[], tuple[float, float] | None] = _proc_stat_cpu
    own: Callable[[], float] = time.process_time
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)  # the CPUs /proc/stat's first line sums
    tick_s: float = field(default_factory=_tick_s)
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
        if total <= 0 or total < MIN_TICKS * self.cpus * self.tick_s:  # too few ticks to tell load from tick noise
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
    """Why timing can stop after the rounds so far (``stable``, ``budget``, ``max rounds``, or ``cut short``: the
    run's share :attr:`TimingPolicy.cap_s` spent before ``min_rounds``), or None to go on.

    ``x_copy`` holds each kernel's per-round ×copy.  Stability is judged on every kernel, as the
    precision of the median of the per-round ratios (:func:`rel_ci`): the number reported.
    """
    rounds = min((len(v) for v in x_copy.values()), default=0)
    if rounds < policy.min_rounds:
        return "cut short" if rounds >= 1 and 0 < policy.cap_s <= elapsed_s else None
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
                     load: Callable[[], float | None] = load_per_core, meter: CpuMeter | None = None,
                     timer: Timer | None = None) -> Interleaved:
    """Time ``copy`` and each kernel in rounds (setup, copy, kernel 1, kernel 2, …) until :func:`calibration_done`.

    ``setup`` runs untimed at the start of every round (fresh state clones, so each compress starts
    from the same state).  ``policy.warmup`` whole rounds run first, untimed.  The load is sampled
    before and after, and the CPU other processes took during the timed rounds (:class:`CpuMeter`);
    ``clock``, ``load`` and ``meter`` are injectable so the calibration can be tested.  Each call is
    timed by ``timer``, default :func:`timer_for` the device: ``clock`` around it on the CPU, CUDA
    events on a GPU (``clock`` then only keeps the calibration's budget).
    """
    copy_s: list[float] = []
    kern_s: dict[str, list[float]] = {k: [] for k in kernels}
    loads = [load()]
    cpu = meter if meter is not None else CpuMeter()
    timed = timer if timer is not None else timer_for(device, clock)

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
    if policy.cap_s > 0 and 0 < len(x_copy) < policy.min_rounds:
        why.setdefault(CUT_SHORT, []).append(
            f"the run's timing budget left {policy.cap_s:.2g} s for this case's rounds: {len(x_copy)} of at least "
            f"{policy.min_rounds} taken")
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
