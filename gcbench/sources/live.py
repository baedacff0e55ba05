"""Live gradients: a zoo (or user) model trained data-parallel by N simulated workers, S steps.

This is synchronous data-parallel SGD (the setting of every compressor paper gcbench covers, e.g.
Lin et al., "Deep Gradient Compression", ICLR 2018) simulated in one process:

* At measured step ``t`` every worker ``w`` holds the same parameters and computes the gradient of
  the mean loss on its own batch ``make_batch(t, w)`` — different data per worker, as a sharded
  sampler gives.  The module is in training mode (dropout on, batch norm on batch statistics).
* Between measured steps the model takes one plain SGD step with the worker-mean gradient
  (``p -= lr * mean_w g_w``, what DDP's all-reduce average feeds the optimiser), so step ``t+1``'s
  gradients come from the updated model.  The update uses the true (uncompressed) mean: the source
  describes the gradients a compressor is given, independent of the compressor under test
  (``loop="open"``, the default).
* ``loop="closed"``: the model takes the update it is fed instead (:meth:`LiveSource.feed`: the
  compressed aggregate of the case under test, ``p -= lr * update``), so step ``t+1``'s gradients
  come from the trajectory that compressor's errors produce, as training with it would.  One closed
  source serves one case (the runner builds one per case from the same seed, warm-up included), and
  its steps can only go forward.
* ``warmup_steps`` optional steps of plain SGD come first, each on one batch
  ``make_batch(WARMUP_BATCH_OFFSET + i, 0)`` (single-worker: it is only meant to move the model away
  from initialisation, at 1/N of the cost), with batch indices far from the measured ones.

User models (``package.module:factory``): anything their factory, ``make_batch``, forward pass or
loss raises becomes one :class:`~gcbench.core.errors.SourceError` naming the model, chained to the
original exception; the same failure in a zoo model is a bug and keeps its traceback.

Determinism: the model is initialised under ``torch.manual_seed(seed)``; each forward/backward runs
under a forked RNG seeded from ``(seed, phase, step, worker)`` (dropout), so gradients are
bit-identical for a seed (same machine, same thread count) and never depend on the caller's RNG,
which is left untouched.  Parameters that receive no gradient in a step are reported as zeros
(DDP's ``find_unused_parameters`` semantics) so the layout stays fixed.

Caching: ``gradients(step, w)`` computes all workers of ``step`` at once and keeps that step only.
Steps are meant to be requested in order; asking for a later step advances through the steps in
between (their gradients are needed for the updates), and asking for an earlier step than the cached
one rebuilds the model from the seed, re-runs the warm-up and recomputes — the same values, at the
cost of computing them again (no copy of the start model is kept: VGG-16's would take 553 MB).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from gcbench.core.errors import ParamError, SourceError
from gcbench.core.finite import all_finite
from gcbench.sources.base import GradientSource, TensorSpec, check_finite
from gcbench.sources.batches import batch_generator
from gcbench.sources.catalog import is_user_model
from gcbench.sources.zoo import gradient_layout, load_model, user_code_error

#: ``progress(done, total, message)`` after each forward/backward
Progress = Callable[[int, int, str], None]

#: warm-up batch indices start here so they never coincide with measured batches 0, 1, 2, …
WARMUP_BATCH_OFFSET = 1 << 30

# RNG phase tags for dropout seeds: warm-up and measured passes draw from disjoint streams
_PHASE_WARMUP, _PHASE_MEASURE = 1, 2


class LiveSource(GradientSource):
    """Gradients of ``model`` for ``workers`` data-parallel workers over ``steps`` SGD steps."""

    def __init__(self, model: str, workers: int = 4, steps: int = 2, seed: int = 0, warmup_steps: int = 0, lr: float = 0.1,
                 progress: Progress | None = None, loop: str = "open", device: str = "cpu", **model_kwargs: object) -> None:
        for key, v, low in (("workers", workers, 1), ("steps", steps, 1), ("warmup_steps", warmup_steps, 0)):
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ParamError(f"live source: {key} must be an integer >= {low}, got {v!r}")
        if not (isinstance(lr, (int, float)) and lr >= 0 and lr == lr and lr != float("inf")):
            raise ParamError(f"live source: lr must be a finite number >= 0, got {lr!r}")
        if loop not in ("open", "closed"):
            raise ParamError(f"live source: loop must be 'open' or 'closed', got {loop!r}")
        self.loop = loop
        self.device = torch.device(device)  # where forward and backward run; the gradients are handed over on the CPU
        self._fed: dict[int, Mapping[str, torch.Tensor]] = {}  # closed loop: step -> the update taken after it
        self.model_name, self.workers, self.steps, self.seed = model, workers, steps, seed
        self.warmup_steps, self.lr, self.progress = warmup_steps, float(lr), progress
        self.model_kwargs = dict(model_kwargs)
        self._total = warmup_steps + steps * workers
        self._step: int | None = None  # step held in _cache (None: nothing yet); the model is pre-update
        self._cache: list[dict[str, torch.Tensor]] = []
        self._compute_s: list[float] = []  # each measured worker-step's forward + backward, seconds
        self._start()
        self.name = f"live {self._zoo_name}"
        self._layout = gradient_layout(self.module)

    # -- GradientSource -----------------------------------------------------------------------

    def layout(self) -> list[TensorSpec]:
        return list(self._layout)

    def gradients(self, step: int, worker: int) -> Mapping[str, torch.Tensor]:
        if not 0 <= step < self.steps:
            raise ParamError(f"{self.name}: step {step} out of range 0..{self.steps - 1}")
        if not 0 <= worker < self.workers:
            raise ParamError(f"{self.name}: worker {worker} out of range 0..{self.workers - 1}")
        if self._step is not None and step < self._step:
            if self.loop == "closed":
                raise SourceError(f"{self.name}: a closed-loop source cannot go back from step {self._step} to {step} "
                                  "(its trajectory depends on the updates it was fed)")
            # going back: rebuild and re-warm from the seed rather than keep a copy of the start model
            # (VGG-16's would be 553 MB); deterministic, so the values are the same as the first time
            self._start()
        if self._step is None:
            self._cache = self._compute_step(0)
            self._step = 0
        while self._step < step:
            if self.loop == "closed":
                self._closed_update(self._step)
            else:
                self._sgd_update(self._cache)
            self._step += 1
            self._cache = self._compute_step(self._step)
        # a shallow copy: a consumer that replaces entries cannot corrupt the cached step
        return dict(self._cache[worker])

    def feed(self, step: int, update: Mapping[str, torch.Tensor]) -> None:
        """Closed loop: the update (by parameter name, the shapes of :meth:`layout`) the model takes after ``step``,
        in place of the workers' true mean; it is applied when step ``step + 1`` is first asked for."""
        if self.loop != "closed":
            raise ParamError(f"{self.name}: feed() is for a closed-loop source (loop='closed')")
        if not 0 <= step < self.steps:
            raise ParamError(f"{self.name}: step {step} out of range 0..{self.steps - 1}")
        self._fed[step] = update

    def describe(self) -> dict[str, object]:
        # an open-loop source's description is what it was before the loop existed (its identity across runs)
        loop = {"loop": "closed"} if self.loop == "closed" else {}
        if self.device.type != "cpu":  # a CPU source describes itself as before devices existed
            loop["device"] = str(self.device)
            loop["device_name"] = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else str(self.device)
        return {**super().describe(), "kind": "live", **loop, "model": self.model_name, "seed": self.seed,
                "warmup_steps": self.warmup_steps, "lr": self.lr, "model_kwargs": {k: _jsonable(v) for k, v in self.model_kwargs.items()},
                "parameters": sum(t.numel for t in self._layout),
                # what a step of training costs before any exchange, on this machine (gcbench advise, the report's decision)
                "compute_s": statistics.median(self._compute_s) if self._compute_s else None}

    def close(self) -> None:
        self._cache = []
        self._step = None
        self._fed = {}

    # -- internals ----------------------------------------------------------------------------

    def _tick(self, message: str) -> None:
        self._done += 1
        if self.progress is not None:
            self.progress(self._done, self._total, message)

    def _forward_backward(self, batch_index: int, worker: int, phase: int, label: str) -> dict[str, torch.Tensor]:
        """One worker's gradient on ``make_batch(batch_index, worker)`` at the current parameters."""
        self.module.zero_grad(set_to_none=True)
        inputs, targets = self.make_batch(batch_index, worker)
        # dropout draws from the global generator: seed it per pass, and give it back afterwards
        seed_gen = batch_generator(self.seed, batch_index, worker, tag=phase)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=seed_gen)))
            try:
                outputs = self.module(inputs)
            except Exception as exc:
                if not is_user_model(self.model_name):
                    raise  # a zoo model failing is gcbench's bug: keep the traceback
                raise user_code_error(self.model_name, "the forward pass", exc) from exc
            loss = self.loss_fn(outputs, targets)  # a user loss_fn is guarded by load_model
            try:
                loss.backward()
            except Exception as exc:  # e.g. a user loss that is not a scalar or has no grad_fn
                if not is_user_model(self.model_name):
                    raise
                raise user_code_error(self.model_name, "backward() of its loss", exc) from exc
        grads: dict[str, torch.Tensor] = {}
        for name, p in self._params.items():
            if p.grad is None:  # unused in this pass: a zero gradient, as DDP reports it
                g = torch.zeros(p.shape, dtype=torch.float32)
            else:
                g = p.grad.detach().to(device="cpu", dtype=torch.float32, copy=True)
            check_finite(name, g, label)
            grads[name] = g
        self.module.zero_grad(set_to_none=True)
        self._tick(label)
        return grads

    @torch.no_grad()
    def _apply(self, grad_of: Callable[[str], torch.Tensor], scale: float) -> None:
        """``p -= scale * grad_of(name)`` for every parameter (one gradient built at a time).

        An update that leaves a parameter non-finite is one error.
        Too large an ``lr`` overflows float32 (or, past float32's range, cannot even be passed as the
        update's factor): that is the suite's setting, not a bug, so it is a :class:`SourceError`
        naming ``lr`` rather than a NaN gradient one step later.
        """
        for name, p in self._params.items():
            try:
                p.add_(grad_of(name).to(device=p.device, dtype=p.dtype), alpha=-scale)
            except RuntimeError as exc:  # "value cannot be converted to type float without overflow"
                raise SourceError(f"{self.model_name}: the SGD update with lr={self.lr:g} fails on parameter {name!r} "
                                  f"({_first_line(exc)}); lower the source's lr") from None
            if not all_finite(p):
                raise SourceError(f"{self.model_name}: the SGD update with lr={self.lr:g} made parameter {name!r} "
                                  "non-finite (Inf or NaN); lower the source's lr")

    def _warmup(self) -> None:
        for i in range(self.warmup_steps):
            label = f"{self.model_name} warm-up step {i + 1}/{self.warmup_steps}"
            self._apply(self._forward_backward(WARMUP_BATCH_OFFSET + i, 0, _PHASE_WARMUP, label).__getitem__, self.lr)

    def _start(self) -> None:
        """Build the model from the seed and run the warm-up; nothing cached afterwards."""
        zm = load_model(self.model_name, self.seed, **self.model_kwargs)
        self.module, self.make_batch, self.loss_fn, self._zoo_name = zm.module, zm.make_batch, zm.loss_fn, zm.name
        if self.device.type != "cpu":
            self.module = self.module.to(self.device)
            self.make_batch = _on_device(zm.make_batch, self.device)
        self._params = {n: p for n, p in self.module.named_parameters() if p.requires_grad}
        self._done = 0
        self._step, self._cache = None, []
        self._warmup()

    def _compute_step(self, step: int) -> list[dict[str, torch.Tensor]]:
        out = []
        for w in range(self.workers):
            t0 = time.perf_counter()
            out.append(self._forward_backward(step, w, _PHASE_MEASURE,
                                              f"{self.model_name} step {step + 1}/{self.steps} worker {w + 1}/{self.workers}"))
            self._compute_s.append(time.perf_counter() - t0)
        return out

    @torch.no_grad()
    def _sgd_update(self, worker_grads: list[dict[str, torch.Tensor]]) -> None:
        if self.lr == 0.0:
            return
        self._apply(lambda name: torch.stack([g[name] for g in worker_grads]).mean(0), self.lr)


    @torch.no_grad()
    def _closed_update(self, step: int) -> None:
        update = self._fed.pop(step, None)
        if update is None:
            raise SourceError(f"{self.name}: closed loop: step {step + 1} was asked for before the update after step {step} was fed")
        if self.lr == 0.0:
            return
        missing = [name for name in self._params if name not in update]
        if missing:
            raise SourceError(f"{self.name}: closed loop: the update after step {step} has no tensor for {missing[0]!r}")
        self._apply(lambda name: update[name].reshape(self._params[name].shape), self.lr)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _jsonable(v: object) -> object:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return repr(v)


def _on_device(make_batch: Callable[[int, int], Any], device: torch.device) -> Callable[[int, int], Any]:
    """``make_batch`` whose tensors (alone, or in tuples, lists and dicts) are moved to ``device``."""

    def moved(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return obj.to(device)
        if isinstance(obj, tuple | list):
            return type(obj)(moved(o) for o in obj)
        if isinstance(obj, dict):
            return {k: moved(v) for k, v in obj.items()}
        return obj

    return lambda batch_index, worker: moved(make_batch(batch_index, worker))
