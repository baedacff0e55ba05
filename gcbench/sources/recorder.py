"""Record gradients from any training loop into a trace that :class:`~gcbench.sources.trace.TraceSource` replays.

Usage inside a user's loop (one process, or one recorder per rank under ``torchrun``)::

    with GradientRecorder("traces/mine", model, steps=range(0, 1000, 100)) as rec:
        for step, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            loss.backward()
            rec.record(step)            # saves every parameter's .grad if step is selected
            opt.step(); opt.zero_grad()

The trace format is the one :func:`~gcbench.sources.trace.write_trace` writes.  Choices:

* The selected training steps become trace steps 0, 1, 2, … in recording order; the original step
  numbers are kept in the manifest as ``recorded_steps``.
* The tensor layout is fixed by the first recorded step: the parameters (``named_parameters``
  order) that have a ``.grad`` then.  A later step where one of them has no gradient records zeros
  (what DDP's ``find_unused_parameters`` all-reduces); a parameter that gains a gradient later is
  an error, since it would change the layout mid-trace.
* Gradients are saved as they are (their dtype, copied to the CPU) — what a compressor would see
  after ``backward()``, before any optimiser step.  Under DDP that is already the averaged gradient;
  hook the recorder before the all-reduce (a communication hook) to record per-worker gradients.
* Several workers: give each process ``worker=rank, workers=world_size`` and the same folder.  Each
  writes its own files and, on close, a part file ``part-workerNN.json``; whichever closes last,
  finding every part present and consistent, writes ``manifest.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
from torch import nn

from gcbench.core.errors import ParamError, SourceError
from gcbench.core.files import load_user_json
from gcbench.sources.base import TensorSpec
from gcbench.sources.live import LiveSource
from gcbench.sources.trace import (
    MANIFEST,
    MAX_MANIFEST_BYTES,
    acquire_lock,
    dtype_from_name,
    dtype_name,
    file_key,
    file_name,
    make_manifest,
    new_recording_id,
    prepare_folder,
    save_tensors,
    write_json_atomic,
    write_trace,
)

Progress = Callable[[int, int, str], None]


def _part_name(worker: int) -> str:
    return f"part-worker{worker:02d}.json"


def _lock_name(worker: int) -> str:
    """The lock file of one worker's recorder (workers of one trace write side by side)."""
    return f".gcbench-recording-worker{worker:02d}.lock"


class GradientRecorder:
    """Save the ``.grad`` tensors of selected training steps into a trace folder."""

    def __init__(self, out_dir: Path | str, model: nn.Module | None = None, *, steps: Iterable[int] | None = None, worker: int = 0,
                 workers: int = 1, model_name: str = "custom", seed: int = 0, overwrite: bool = False) -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ParamError(f"recorder: workers must be a positive integer, got {workers!r}")
        if not isinstance(worker, int) or not 0 <= worker < workers:
            raise ParamError(f"recorder: worker must be in 0..{workers - 1}, got {worker!r}")
        self.out = Path(out_dir)
        self.model = model
        # a finite selection (list, range, set); None records every step record() is called for
        self.steps: frozenset[int] | None = None if steps is None else frozenset(int(s) for s in steps)
        self.worker, self.workers = worker, workers
        self.model_name, self.seed = model_name, seed
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SourceError(f"cannot write {self.out}: {exc.strerror or exc}") from exc
        # one recorder per worker and folder at a time (another would replace this one's files); the
        # lock is held until close(), and released by the kernel if the process dies
        self._release: Callable[[], None] | None = acquire_lock(self.out / _lock_name(worker), self.out)
        try:
            # only worker 0 may clear an old trace: other ranks must not delete files it already wrote
            if worker == 0:
                prepare_folder(self.out, overwrite)
        except BaseException:
            self._unlock()
            raise
        # stamped on every file this recorder writes and kept in the manifest, so the files of a
        # second recording into the same folder are told apart when the trace is opened
        self.recording_id = new_recording_id()
        self.recorded_steps: list[int] = []
        self._layout: list[TensorSpec] | None = None
        self._files: dict[str, str] = {}
        self._closed = False

    # -- recording ----------------------------------------------------------------------------

    def wants(self, step: int) -> bool:
        """Whether ``step`` is selected for recording."""
        return self.steps is None or step in self.steps

    def record(self, step: int, model: nn.Module | None = None) -> bool:
        """Save the current ``.grad`` of every parameter if ``step`` is selected; returns whether it did."""
        if self._closed:
            raise SourceError(f"recorder for {self.out} is closed; create a new one to record more steps")
        if not self.wants(step):
            return False
        module = model if model is not None else self.model
        if module is None:
            raise ParamError("recorder: pass the model to GradientRecorder(...) or to record(step, model)")
        if self.recorded_steps and step in self.recorded_steps:
            raise SourceError(f"recorder for {self.out}: step {step} was already recorded")
        params = [(n, p) for n, p in module.named_parameters()]
        if self._layout is None:
            self._layout = [TensorSpec(n, tuple(p.shape), p.grad.dtype) for n, p in params if p.grad is not None]
            if not self._layout:
                raise SourceError(f"recorder: no parameter has a gradient at step {step}; call record() after loss.backward()")
            for spec in self._layout:
                dtype_name(spec.dtype)  # floating gradients only
        by_name = dict(params)
        known = {s.name for s in self._layout}
        new = [n for n, p in params if p.grad is not None and n not in known]
        if new:
            raise SourceError(f"recorder: at step {step} parameter {new[0]!r} has a gradient but had none at the first recorded step "
                              f"({self.recorded_steps[0]}); the trace layout cannot change")
        tensors: dict[str, torch.Tensor] = {}
        for spec in self._layout:
            p = by_name.get(spec.name)
            if p is None:
                raise SourceError(f"recorder: parameter {spec.name!r} disappeared from the model at step {step}")
            g = p.grad
            if g is None:
                g = torch.zeros(spec.shape, dtype=spec.dtype)
            if tuple(g.shape) != spec.shape or g.dtype != spec.dtype:
                raise SourceError(f"recorder: gradient {spec.name!r} is {g.dtype} {tuple(g.shape)} at step {step}, "
                                  f"{spec.dtype} {spec.shape} before")
            tensors[spec.name] = g.detach()
        index = len(self.recorded_steps)
        fname = file_name(index, self.worker)
        save_tensors(self.out / fname, tensors, {"step": str(index), "worker": str(self.worker), "training_step": str(step),
                                                 "model": self.model_name, "recording_id": self.recording_id})
        self._files[file_key(index, self.worker)] = fname
        self.recorded_steps.append(step)
        return True

    # -- finishing ----------------------------------------------------------------------------

    def _part(self) -> dict[str, Any]:
        assert self._layout is not None
        return {"worker": self.worker, "workers": self.workers, "model": self.model_name, "seed": self.seed,
                "recorded_steps": self.recorded_steps, "files": self._files, "recording_id": self.recording_id,
                "tensors": [{"name": s.name, "shape": list(s.shape), "dtype": dtype_name(s.dtype)} for s in self._layout]}

    def close(self) -> Path | None:
        """Finish: write the manifest (or this worker's part, merging when all parts are present).

        Returns the manifest path once written, or None while other workers' parts are missing.
        """
        if self._closed:
            return self.out / MANIFEST if (self.out / MANIFEST).exists() else None
        self._closed = True
        try:
            if not self.recorded_steps:
                sel = "every step" if self.steps is None else f"steps {sorted(self.steps)[:8]}"
                raise SourceError(f"recorder for {self.out}: no step was recorded ({sel} selected); nothing to write")
            if self.workers == 1:
                return _write_merged(self.out, [self._part()])
            write_json_atomic(self.out / _part_name(self.worker), self._part())
            return merge_parts(self.out, self.workers)
        finally:
            self._unlock()

    def _unlock(self) -> None:
        """Release this worker's lock of the folder (once)."""
        if self._release is not None:
            self._release()
            self._release = None

    def __enter__(self) -> GradientRecorder:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is not None:
            # the loop failed: keep what was recorded if anything, and never mask the real error
            if self.recorded_steps:
                self.close()
            else:
                self._closed = True
                self._unlock()
            return
        self.close()


def _write_merged(out: Path, parts: list[dict[str, Any]]) -> Path:
    first = parts[0]
    files: dict[str, str] = {}
    for part in parts:
        files.update(part["files"])
    # each worker's recorder stamped its files with its own id (the processes share no state)
    ids = [p.get("recording_id") for p in parts]
    if all(isinstance(i, str) for i in ids):
        stamp: dict[str, object] = {"recording_id": ids[0]} if len(ids) == 1 else {"recording_ids": ids}
    else:
        stamp = {}
    tensors = [TensorSpec(t["name"], tuple(t["shape"]), dtype_from_name(t["dtype"])) for t in first["tensors"]]
    manifest = make_manifest(model=str(first["model"]), steps=len(first["recorded_steps"]), workers=len(parts), seed=int(first["seed"]),
                             tensors=tensors, files=files,
                             extra={"recorded_steps": first["recorded_steps"], "source": {"kind": "recorder", "workers": len(parts)},
                                    **stamp})
    path = out / MANIFEST
    write_json_atomic(path, manifest)
    return path


def _read_part(path: Path, worker: int) -> dict[str, Any]:
    """Load and check one worker's part file; a wrong structure is one :class:`SourceError` naming the file."""
    part = load_user_json(path, "recorder part file", MAX_MANIFEST_BYTES, SourceError)
    ok = (isinstance(part, dict) and isinstance(part.get("recorded_steps"), list) and isinstance(part.get("files"), dict)
          and isinstance(part.get("tensors"), list) and isinstance(part.get("model"), str)
          and isinstance(part.get("seed"), int) and part.get("worker") == worker
          and all(isinstance(t, dict) and {"name", "shape", "dtype"} <= t.keys() for t in part["tensors"])
          and all(isinstance(k, str) and isinstance(v, str) for k, v in part["files"].items()))
    if not ok:
        raise SourceError(f"{path}: not a gcbench recorder part file for worker {worker} "
                          "(needs worker, model, seed, recorded_steps, files and tensors)")
    return part


def merge_parts(out: Path | str, workers: int) -> Path | None:
    """Write ``manifest.json`` from the part files of ``workers`` recorders, if all are present.

    Returns the manifest path, or None if a part is still missing.  Parts that disagree (different
    tensors, recorded steps, model or seed) raise :class:`SourceError` naming the part file.
    """
    out = Path(out)
    parts: list[dict[str, Any]] = []
    for w in range(workers):
        p = out / _part_name(w)
        if not p.is_file():
            return None
        parts.append(_read_part(p, w))
    first = parts[0]
    for w, part in enumerate(parts[1:], start=1):
        for key in ("tensors", "model", "seed"):
            if part.get(key) != first.get(key):
                raise SourceError(f"{out / _part_name(w)}: {key} differs from worker 0's; all workers must record the same model")
        if part["recorded_steps"] != first["recorded_steps"]:
            raise SourceError(f"{out / _part_name(w)}: recorded training steps {part['recorded_steps'][:8]}, "
                              f"worker 0 recorded {first['recorded_steps'][:8]}; all workers must record the same steps")
    return _write_merged(out, parts)


def record_live(model: str, steps: int, workers: int, out: Path | str, seed: int = 0, warmup_steps: int = 0,
                progress: Progress | None = None, *, lr: float = 0.1, overwrite: bool = False, device: str = "cpu",
                **model_kwargs: Any) -> Path:
    """Compute live gradients of a zoo (or ``module:factory``) model and write them as a trace.

    ``device`` (``cpu``, ``cuda``, ``cuda:N``) is where the forward and backward passes run; the
    trace holds the same CPU tensors either way, and its manifest's source names a GPU it ran on.

    ``progress(done, total, message)`` is called after each forward/backward (warm-up included).
    Returns the trace folder.
    """
    prepare_folder(Path(out), overwrite)  # an unwritable or occupied output fails before the model is built
    source = LiveSource(model, workers=workers, steps=steps, seed=seed, warmup_steps=warmup_steps, lr=lr, progress=progress,
                        device=device, **model_kwargs)
    try:
        return write_trace(source, Path(out), model, seed, overwrite=overwrite)
    finally:
        source.close()
