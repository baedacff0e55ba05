"""The gradients a case reads, by step and worker, as units: once per source (open loop) or the case's own (closed loop).

* :func:`build_source`: the gradient source a suite names (synthetic, live, a trace, or the first workers and steps
  of one).

* :class:`SourceData` (open loop): every case of a source reads the same tensors, so they are
  computed once per run and cached in memory when they fit, and the dense reference
  (:class:`~gcbench.measure.stream.DenseReference`) is built from them once.
* :class:`ClosedLoopData` (a live source with ``loop = "closed"``): the case owns its source's
  model; after each step the runner hands it the case's aggregate (:meth:`ClosedLoopData.advance`),
  the model takes ``p -= lr * aggregate`` (:meth:`gcbench.sources.live.LiveSource.feed`) and the
  next step's gradients are computed at the parameters that update produced.  Only the current
  step is held, and the dense reference is built step by step from the same gradients, so every
  stream metric compares the case's updates with the dense update on its own trajectory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from gcbench.core.errors import SourceError
from gcbench.core.payload import dense_bytes
from gcbench.measure.casemath import Scratch
from gcbench.measure.granularity import Unit, gather, scatter
from gcbench.measure.stream import DenseReference
from gcbench.measure.timing import flat_like, settle_copy
from gcbench.sources.base import GradientSource, check_finite

if TYPE_CHECKING:
    from gcbench.measure.suite import SourceSpec
    from gcbench.sources.live import LiveSource

Progress = Callable[[str, int, int, str], None]


def no_progress(stage: str, done: int, total: int, message: str) -> None:
    """A :data:`Progress` callback that shows nothing."""
    return None


#: ``GCBENCH_CACHE_GB`` (default 6) in bytes: the most gradient memory one source's cache may hold
CACHE_LIMIT_BYTES = int(float(os.environ.get("GCBENCH_CACHE_GB", "6")) * 2**30)


class SourceData:
    """Units of every (step, worker), computed once and cached in memory when they fit.

    Live gradients are expensive (ResNet-50: ~1.7 s per worker-step on 2 cores) and every case
    needs the same tensors, so they are computed once per run.  Traces too large for the cache
    are re-read lazily, one unit at a time, for each case.
    """

    #: the loop that produced the gradients (the record's ``stream.loop``)
    loop = "open"

    def __init__(self, source: GradientSource, units: list[Unit], device: torch.device, progress: Progress) -> None:
        self.source, self.units, self.device = source, units, device
        self.numel = sum(u.numel for u in units)
        self._reference: dict[float, DenseReference] = {}
        self._copy_into: tuple[Any, list[torch.Tensor]] | None = None
        self.scratch = Scratch()  # the model-sized buffers each case borrows, reused case after case
        total = dense_bytes(self.numel) * source.workers * source.steps
        self.cache: dict[tuple[int, int], list[torch.Tensor]] | None = {} if total <= CACHE_LIMIT_BYTES else None
        if self.cache is not None:
            n = source.steps * source.workers
            for t in range(source.steps):
                for w in range(source.workers):
                    self.cache[(t, w)] = self._load(t, w)
                    progress("load", t * source.workers + w + 1, n, f"{source.name}: gradients into memory")

    def _load(self, step: int, worker: int) -> list[torch.Tensor]:
        grads = self.source.gradients(step, worker)
        out = []
        for u in self.units:
            x = gather(u, grads).to(self.device)
            where = f"{self.source.name} step {step} worker {worker}"
            try:
                check_finite(u.name, x, where)
            except SourceError:
                # a bucket is float32: name the member behind it (a float64 value beyond float32's range becomes inf here)
                for name in u.members if u.flat else ():
                    check_finite(name, grads[name], where)
                raise
            out.append(x)
        if self.cache is None:
            return out
        # cached for the whole run: moved into one huge-page buffer, so the memory every case's
        # kernels and copy baseline read is laid out the same way in every run (see flat_like)
        packed = flat_like(out)
        if packed:
            torch._foreach_copy_(packed, out)
        return packed

    def copy_destination(self, xs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The copy baseline's destination for tensors shaped like ``xs``: one per source, made (and the copy settled,
        :func:`settle_copy`) on the first timed case and reused by every other, so every case's copy writes the
        same memory."""
        key = tuple((tuple(x.shape), x.dtype, x.device) for x in xs)
        if self._copy_into is None or self._copy_into[0] != key:
            bufs = flat_like(xs)
            settle_copy(xs, bufs)
            self._copy_into = (key, bufs)
        return self._copy_into[1]

    def get(self, step: int, worker: int) -> list[torch.Tensor]:
        if self.cache is not None:
            return self.cache[(step, worker)]
        return self._load(step, worker)

    def reference(self, momentum: float) -> DenseReference:
        """The dense update of the suite's optimizer on this source (the common reference), built on first use."""
        ref = self._reference.get(momentum)
        if ref is None:
            ref = self._reference[momentum] = DenseReference(self.get, self.source.steps, self.source.workers, momentum)
        return ref

    def advance(self, step: int, aggregates: Sequence[torch.Tensor]) -> None:
        """The case's aggregate of ``step`` by unit: an open-loop source does not take it."""


class ClosedLoopData(SourceData):
    """One case's gradients from its own closed-loop live source: one step held, each step after the aggregate is fed.

    The steps are read in order (every worker of step ``t`` before step ``t + 1``); the dense
    reference of each momentum asked for is fed the same gradients as they are computed.
    """

    loop = "closed"

    def __init__(self, source: Any, units: list[Unit], device: torch.device) -> None:
        if getattr(source, "loop", "open") != "closed":
            raise SourceError(f"{source.name}: closed-loop data needs a live source with loop = 'closed'")
        self.source, self.units, self.device = source, units, device
        self.numel = sum(u.numel for u in units)
        self._reference: dict[float, DenseReference] = {}
        self._copy_into: tuple[Any, list[torch.Tensor]] | None = None
        self.scratch = Scratch()
        self.cache = None
        self._held: tuple[int, list[list[torch.Tensor]]] | None = None

    def get(self, step: int, worker: int) -> list[torch.Tensor]:
        if self._held is None or self._held[0] != step:
            if step != (0 if self._held is None else self._held[0] + 1):
                raise SourceError(f"{self.source.name}: closed loop: step {step} read out of order")
            per_worker = [self._load(step, w) for w in range(self.source.workers)]
            for ref in self._reference.values():
                ref.add_step(step, per_worker)
            self._held = (step, per_worker)
        return self._held[1][worker]

    def reference(self, momentum: float) -> DenseReference:
        ref = self._reference.get(momentum)
        if ref is None:
            if self._held is not None:
                raise SourceError(f"{self.source.name}: closed loop: the dense reference is asked for after step {self._held[0]}")
            ref = self._reference[momentum] = DenseReference(None, self.source.steps, self.source.workers, momentum)
        return ref

    def advance(self, step: int, aggregates: Sequence[torch.Tensor]) -> None:
        """Feed the model the case's aggregate of ``step`` (by unit): its next step's gradients start from that update."""
        if step + 1 >= self.source.steps:
            return  # the last step's update would move a model no step reads
        update: dict[str, torch.Tensor] = {}
        for unit, agg in zip(self.units, aggregates, strict=True):
            update.update(scatter(unit, agg.detach().to("cpu", torch.float32)))
        cast("LiveSource", self.source).feed(step, update)  # __init__ took nothing but a closed-loop live source


# ----------------------------------------------------------------------------- sources


def build_source(spec: SourceSpec, seed: int, progress: Progress = no_progress) -> GradientSource:
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
        return LiveSource(spec.model or "", workers=spec.workers or 4, steps=spec.steps or 10, seed=seed,
                          warmup_steps=spec.warmup_steps, lr=spec.lr,
                          # the bar counts passes done; the source's own "step 3/10 worker 2/4" would be a second numbering
                          progress=lambda d, t, m: progress("gradients", d, t, f"{spec.model}: forward + backward passes"),
                          loop=spec.loop, **kwargs)
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
