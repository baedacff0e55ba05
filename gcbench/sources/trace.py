"""Recorded gradients: a trace folder of safetensors files, written once and replayed lazily.

Format (``format_version`` 1)::

    trace/
      manifest.json                      # written last: a folder without it is not a trace
      step0000_worker00.safetensors      # one file per (step, worker); tensor names = parameter names
      step0000_worker01.safetensors
      ...

``manifest.json`` holds ``format_version``, ``gcbench_version``, ``model``, ``steps``, ``workers``,
``seed``, ``tensors`` (``[{name, shape, dtype}]`` in layout order), ``files`` (``{"s{step}_w{worker}":
file name}``), ``created`` (UTC ISO 8601) and, when known, ``source`` (the writing source's
``describe()``) and ``recorded_steps`` (the training-step numbers a recorder saved).

Safetensors (Hugging Face) was chosen because it is a plain header + raw bytes format: reading never
executes code (nothing is unpickled) and ``safe_open`` memory-maps the file so one tensor can be read
without reading the others.  :class:`TraceSource` therefore returns, for each (step, worker), a lazy
mapping that reads a tensor only when it is indexed; a trace larger than memory replays layer by
layer.  Every file is written to a temporary name and renamed, and the manifest is written last, so
an interrupted recording never looks like a complete trace.

Validation: opening a trace checks the manifest (present, valid JSON, not from a newer format, every
field well-typed), that every listed file exists, and — by reading only the small safetensors
headers — that every file is complete (safetensors rejects a file whose size disagrees with its
header, i.e. a truncated file) and holds exactly the manifest's tensor names, shapes and dtypes.
Values are checked for NaN/Inf when read.  A trace is shared like any data set, so it must not
reach outside its folder: file names in the manifest are bare ``*.safetensors`` names (no ``/``,
``..`` or absolute paths), and the manifest and every file must resolve inside the folder (a
symlink pointing elsewhere is refused by name).  Flipped bytes inside tensor data cannot be detected
(the format has no checksum).
"""

from __future__ import annotations

import errno
import json
import os
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from gcbench.core.errors import ParamError, SourceError
from gcbench.core.files import load_user_json
from gcbench.results.atomic import atomic_write
from gcbench.sources.base import GradientSource, TensorSpec, check_finite

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: held by the process writing a trace (``write_trace``; a recorder holds one per worker)
LOCK = ".gcbench-recording.lock"

#: the largest manifest read: one entry per (step, worker) file and per tensor; 10,000 steps × 64
#: workers of a 200-tensor model take about 1 MB, so 16 MiB is far past any real trace
MAX_MANIFEST_BYTES = 16 << 20

#: manifest dtype name ↔ torch dtype ↔ safetensors header dtype
_DTYPES: dict[str, tuple[torch.dtype, str]] = {
    "float32": (torch.float32, "F32"),
    "float16": (torch.float16, "F16"),
    "bfloat16": (torch.bfloat16, "BF16"),
    "float64": (torch.float64, "F64"),
}
_TORCH_TO_NAME = {t: n for n, (t, _) in _DTYPES.items()}
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+\.safetensors$")

Progress = Callable[[int, int, str], None]


def dtype_name(dtype: torch.dtype) -> str:
    """Manifest name of a floating dtype (``float32`` …); other dtypes are not gradients."""
    try:
        return _TORCH_TO_NAME[dtype]
    except KeyError:
        raise SourceError(f"cannot record a gradient of dtype {dtype}; supported: {', '.join(_DTYPES)}") from None


def dtype_from_name(name: str) -> torch.dtype:
    """Torch dtype of a manifest dtype name."""
    try:
        return _DTYPES[name][0]
    except KeyError:
        raise SourceError(f"unknown gradient dtype {name!r}; supported: {', '.join(_DTYPES)}") from None


def file_key(step: int, worker: int) -> str:
    """Key of a (step, worker) file in the manifest's ``files`` table."""
    return f"s{step}_w{worker}"


def file_name(step: int, worker: int) -> str:
    """Default file name of a (step, worker) gradient file."""
    return f"step{step:04d}_worker{worker:02d}.safetensors"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def save_tensors(path: Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None) -> None:
    """Write one safetensors file atomically (:func:`gcbench.results.atomic.atomic_write`); a failure names ``path``."""
    # save_file wants contiguous CPU tensors and refuses tensors that overlap in memory (e.g. one
    # tensor under two names): copy only tensors sharing a storage already seen, so the usual case
    # (separate .grad tensors) is written without any copy
    data: dict[str, torch.Tensor] = {}
    storages: set[int] = set()
    for n, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        ptr = t.untyped_storage().data_ptr()
        if ptr in storages:
            t = t.clone()
        storages.add(t.untyped_storage().data_ptr())
        data[n] = t

    def write(tmp: Path) -> None:
        try:
            save_file(data, str(tmp), metadata=dict(metadata or {}))
        except SafetensorError as exc:  # a full disk is "I/O error: No space left on device (os error 28)"
            m = re.search(r"os error (\d+)", str(exc))
            code = int(m.group(1)) if m else errno.EIO
            raise OSError(code, os.strerror(code) if m else str(exc), str(path)) from exc

    atomic_write(path, write)


def write_json_atomic(path: Path, obj: object) -> None:
    """Write JSON to a temporary name and rename it over ``path`` (:func:`gcbench.results.atomic.atomic_write`)."""
    atomic_write(path, json.dumps(obj, indent=2) + "\n")


def new_recording_id() -> str:
    """A fresh id for one recording: its manifest records it and every file it writes carries it."""
    return uuid.uuid4().hex


def acquire_lock(path: Path, folder: Path) -> Callable[[], None]:
    """Take the lock file ``path`` for a recording into ``folder``; returns the function that releases it.

    Two recordings into one folder would each replace the other's step files and leave a manifest
    of one with the files of both.  The lock is ``flock`` on the lock file (released by the kernel
    if the process dies, so a crash leaves no stale lock); without ``fcntl`` it is the file's
    exclusive creation.  A held lock is one :class:`SourceError` naming the folder.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX
        fcntl = None  # type: ignore[assignment]  # no lock off POSIX
    busy = SourceError(f"{folder}: another gcbench recording is writing into this folder (it holds {path.name}); "
                       "wait for it to finish or choose another folder")
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | (0 if fcntl is not None else os.O_EXCL), 0o644)
        except FileExistsError:
            raise busy from None
        except OSError as exc:
            raise SourceError(f"cannot write {path}: {exc.strerror or exc}") from exc
        if fcntl is None:
            break
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise busy from None
        try:  # the holder may have removed the file between our open and our lock: lock the current one
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    os.write(fd, f"{os.getpid()}\n".encode())

    def release() -> None:
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                path.unlink()
        except OSError:
            pass
        os.close(fd)

    return release


@contextmanager
def recording_lock(folder: Path, name: str = LOCK) -> Iterator[None]:
    """Hold the recording lock of ``folder`` for the block (:func:`acquire_lock`)."""
    release = acquire_lock(folder / name, folder)
    try:
        yield
    finally:
        release()


def make_manifest(*, model: str, steps: int, workers: int, seed: int, tensors: list[TensorSpec], files: Mapping[str, str],
                  extra: Mapping[str, object] | None = None) -> dict[str, object]:
    """The manifest dict of format version 1."""
    from gcbench import __version__

    return {
        "format_version": FORMAT_VERSION,
        "gcbench_version": __version__,
        "model": model,
        "steps": steps,
        "workers": workers,
        "seed": seed,
        "tensors": [{"name": t.name, "shape": list(t.shape), "dtype": dtype_name(t.dtype)} for t in tensors],
        "files": dict(files),
        "created": utc_now(),
        **(extra or {}),
    }


def prepare_folder(out: Path, overwrite: bool) -> None:
    """Create ``out``; refuse to write into an existing trace unless ``overwrite``.

    An output that cannot be a folder (a file, a read-only place) is one :class:`SourceError`
    naming it, raised before any gradient is computed.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SourceError(f"cannot write {out}: {exc.strerror or exc}") from exc
    manifest = out / MANIFEST
    if manifest.exists() or manifest.is_symlink():
        if not overwrite:
            raise SourceError(f"{out}: already holds a trace (manifest.json); choose another folder or overwrite")
        # drop the old manifest first so a half-rewritten folder is never taken for a complete trace
        manifest.unlink()


def write_trace(source: GradientSource, out: Path, model_name: str, seed: int, progress: Progress | None = None, *,
                overwrite: bool = False) -> Path:
    """Record every (step, worker) of ``source`` into the trace folder ``out``; returns ``out``.

    Steps are visited in order (what live sources expect).  Tensors are stored in the dtype the
    source delivers, in layout order.  The manifest is written last.
    """
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SourceError(f"cannot write {out}: {exc.strerror or exc}") from exc
    with recording_lock(out):
        return _write_trace(source, out, model_name, seed, progress, overwrite)


def _write_trace(source: GradientSource, out: Path, model_name: str, seed: int, progress: Progress | None,
                 overwrite: bool) -> Path:
    """:func:`write_trace` with the folder's recording lock held."""
    prepare_folder(out, overwrite)
    recording = new_recording_id()
    layout = source.layout()
    names = [t.name for t in layout]
    files: dict[str, str] = {}
    # dtypes actually delivered (a float32 layout may arrive as float16); fixed by the first file
    dtypes: dict[str, torch.dtype] = {}
    total, done = source.steps * source.workers, 0
    for step in range(source.steps):
        for worker in range(source.workers):
            grads = source.gradients(step, worker)
            tensors: dict[str, torch.Tensor] = {}
            for spec in layout:
                t = grads[spec.name]
                if tuple(t.shape) != tuple(spec.shape):
                    raise SourceError(f"{source.name}: tensor {spec.name!r} has shape {tuple(t.shape)}, layout says {spec.shape}")
                if dtypes.setdefault(spec.name, t.dtype) != t.dtype:
                    raise SourceError(f"{source.name}: tensor {spec.name!r} is {t.dtype} at step {step} worker {worker}, "
                                      f"{dtypes[spec.name]} before; a trace keeps one dtype per tensor")
                dtype_name(t.dtype)  # only floating gradients are recorded
                tensors[spec.name] = t
            if set(grads.keys()) - set(names):
                extra = sorted(set(grads.keys()) - set(names))
                raise SourceError(f"{source.name}: gradients hold tensors not in the layout: {', '.join(extra[:5])}")
            fname = file_name(step, worker)
            save_tensors(out / fname, tensors, {"step": str(step), "worker": str(worker), "model": model_name,
                                                "recording_id": recording})
            files[file_key(step, worker)] = fname
            done += 1
            if progress is not None:
                progress(done, total, f"wrote {fname}")
    written = [TensorSpec(s.name, s.shape, dtypes[s.name]) for s in layout]
    manifest = make_manifest(model=model_name, steps=source.steps, workers=source.workers, seed=seed, tensors=written, files=files,
                             extra={"source": source.describe(), "recording_id": recording})
    write_json_atomic(out / MANIFEST, manifest)
    return out


# --------------------------------------------------------------------------------------------
# reading


def _fail(where: Path, what: str) -> SourceError:
    return SourceError(f"{where}: {what}")


def check_inside(folder: Path, path: Path) -> None:
    """Refuse ``path`` unless it resolves inside ``folder`` (a symlink out of a trace is not followed)."""
    try:
        resolved, root = path.resolve(), folder.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise _fail(path, f"cannot resolve ({exc})") from None
    if not resolved.is_relative_to(root):
        raise _fail(path, f"resolves to {resolved}, outside the trace folder {root}; trace files must be inside their folder")


def read_manifest(folder: Path) -> dict[str, Any]:
    """Load and validate ``folder/manifest.json`` (structure only; files are checked by the caller)."""
    if not folder.exists():
        raise _fail(folder, "trace folder does not exist")
    if not folder.is_dir():
        raise _fail(folder, "a trace is a folder holding manifest.json, not a file")
    path = folder / MANIFEST
    if not path.is_file():
        raise _fail(path, "missing; not a gcbench trace folder (or the recording did not finish)")
    check_inside(folder, path)
    # a regular file of bounded size: a manifest replaced by a FIFO or a device is refused, not read forever
    m = load_user_json(path, "trace manifest", MAX_MANIFEST_BYTES, SourceError)
    if not isinstance(m, dict):
        raise _fail(path, "must hold a JSON object")
    fv = m.get("format_version")
    if not isinstance(fv, int) or isinstance(fv, bool):
        raise _fail(path, f"format_version must be an integer, got {fv!r}")
    if fv > FORMAT_VERSION:
        raise _fail(path, f"written by a newer gcbench (format_version {fv}, gcbench {m.get('gcbench_version', '?')}); "
                          f"this gcbench reads format_version {FORMAT_VERSION}: upgrade gcbench")
    if fv < 1:
        raise _fail(path, f"unknown format_version {fv}")
    for key in ("steps", "workers"):
        v = m.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise _fail(path, f"{key} must be a positive integer, got {v!r}")
    tensors = m.get("tensors")
    if not isinstance(tensors, list):
        raise _fail(path, "tensors must be a list of {name, shape, dtype}")
    seen: set[str] = set()
    for i, t in enumerate(tensors):
        if not (isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("shape"), list)
                and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in t["shape"])):
            raise _fail(path, f"tensors[{i}] must be {{name: str, shape: [int >= 0, ...], dtype}}, got {t!r}")
        if t.get("dtype") not in _DTYPES:
            raise _fail(path, f"tensors[{i}] ({t['name']!r}): dtype must be one of {', '.join(_DTYPES)}, got {t.get('dtype')!r}")
        if t["name"] in seen:
            raise _fail(path, f"tensors[{i}]: duplicate tensor name {t['name']!r}")
        seen.add(t["name"])
    files = m.get("files")
    if not isinstance(files, dict):
        raise _fail(path, "files must map 's{step}_w{worker}' to file names")
    for step in range(m["steps"]):
        for worker in range(m["workers"]):
            key = file_key(step, worker)
            name = files.get(key)
            if not isinstance(name, str):
                raise _fail(path, f"files has no entry {key!r} (step {step}, worker {worker})")
            # a bare file name only: a manifest must not point outside its folder
            if not _SAFE_NAME.match(name) or name.startswith("."):
                raise _fail(path, f"files[{key!r}]: {name!r} is not a plain *.safetensors file name")
    rid, rids = m.get("recording_id"), m.get("recording_ids")
    if rid is not None and not isinstance(rid, str):
        raise _fail(path, f"recording_id must be a string, got {rid!r}")
    if rids is not None and not (isinstance(rids, list) and len(rids) == m["workers"] and all(isinstance(r, str) for r in rids)):
        raise _fail(path, f"recording_ids must be a list of {m['workers']} strings (one per worker), got {rids!r}")
    return m


def expected_metadata(manifest: Mapping[str, Any], step: int, worker: int) -> dict[str, str]:
    """What the (step, worker) file's safetensors metadata must say to belong to this manifest's recording.

    A manifest with a ``recording_id`` (or one per worker, ``recording_ids``, from recorders that
    wrote side by side) was written by a gcbench that stamps every file: the file must carry the
    same id and its own step and worker.  Traces without one (older, or written by other tools)
    are not checked.
    """
    rids = manifest.get("recording_ids")
    rid = rids[worker] if isinstance(rids, list) else manifest.get("recording_id")
    if not isinstance(rid, str):
        return {}
    return {"recording_id": rid, "step": str(step), "worker": str(worker)}


class LazyGradients(Mapping[str, torch.Tensor]):
    """One (step, worker) of a trace: a mapping that reads a tensor from the file when indexed.

    The file is memory-mapped by ``safe_open``; each ``[name]`` reads that tensor only (a fresh
    tensor every time — nothing is cached, so memory stays at one tensor per live reference).
    """

    def __init__(self, path: Path, specs: list[TensorSpec], expect: Mapping[str, str] | None = None) -> None:
        self.path = path
        self._expect = dict(expect or {})
        self._specs = {s.name: s for s in specs}
        self._order = [s.name for s in specs]
        self._handle: Any = None

    def _open(self) -> Any:
        if self._handle is None:
            self._handle = open_checked(self.path, list(self._specs.values()), self._expect)
        return self._handle

    def __getitem__(self, name: str) -> torch.Tensor:
        spec = self._specs.get(name)
        if spec is None:
            raise KeyError(name)
        try:
            t = self._open().get_tensor(name)
        except SafetensorError as exc:
            raise _fail(self.path, f"cannot read tensor {name!r} ({exc})") from None
        # the header was checked on open; re-check what actually came back
        if tuple(t.shape) != spec.shape or t.dtype != spec.dtype:
            raise _fail(self.path, f"tensor {name!r} is {t.dtype} {tuple(t.shape)}, the manifest says {spec.dtype} {spec.shape}")
        check_finite(name, t, str(self.path))
        return t

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def close(self) -> None:
        # dropping the handle unmaps the file
        self._handle = None


def open_checked(path: Path, specs: list[TensorSpec], expect: Mapping[str, str] | None = None) -> Any:
    """``safe_open`` a gradient file and check its header against ``specs`` (reads no tensor data).

    ``expect``: metadata the file must carry (:func:`expected_metadata`); a file of another
    recording (two recordings into one folder) is refused by name.
    """
    if not path.is_file():
        raise _fail(path, "missing trace file")
    try:
        handle = safe_open(str(path), framework="pt")
    except SafetensorError as exc:
        raise _fail(path, f"truncated or corrupt safetensors file ({exc})") from None
    except OSError as exc:
        raise _fail(path, f"cannot open ({exc.strerror or exc})") from None
    meta = handle.metadata() or {}
    for key, want in (expect or {}).items():
        got = meta.get(key)
        if got != want:
            if key == "recording_id":
                raise _fail(path, f"belongs to another recording (its recording_id is {got!r}, the manifest's is {want!r}): "
                                  "two recordings wrote into this folder; record the trace again into an empty folder")
            raise _fail(path, f"metadata {key} is {got!r}, the manifest lists this file as {key} {want}")
    keys = set(handle.keys())
    for spec in specs:
        if spec.name not in keys:
            raise _fail(path, f"tensor {spec.name!r} listed in the manifest is missing from the file")
        sl = handle.get_slice(spec.name)
        shape, dt = tuple(sl.get_shape()), sl.get_dtype()
        want_dt = _DTYPES[dtype_name(spec.dtype)][1]
        if shape != spec.shape or dt != want_dt:
            raise _fail(path, f"tensor {spec.name!r} is {dt} {shape} in the file, the manifest says {want_dt} {spec.shape}")
    extra = sorted(keys - {s.name for s in specs})
    if extra:
        raise _fail(path, f"holds tensors the manifest does not list: {', '.join(map(repr, extra[:5]))}")
    return handle


class TraceSource(GradientSource):
    """Replay a trace folder written by :func:`write_trace` or :class:`~gcbench.sources.recorder.GradientRecorder`.

    ``check_files`` (default) validates every file's header on open so a broken trace fails before a
    run starts; tensor data is read lazily by the mappings ``gradients()`` returns.
    """

    def __init__(self, path: Path | str, *, check_files: bool = True) -> None:
        self.path = Path(path)
        m = read_manifest(self.path)
        self.manifest = m
        self.steps, self.workers = int(m["steps"]), int(m["workers"])
        self.model = str(m.get("model", "?"))
        self.seed = m.get("seed")
        self.name = f"trace {self.model}"
        self._layout = [TensorSpec(t["name"], tuple(t["shape"]), _DTYPES[t["dtype"]][0]) for t in m["tensors"]]
        self._files = {key: self.path / name for key, name in m["files"].items()}
        for step in range(self.steps):
            for worker in range(self.workers):
                f = self._files[file_key(step, worker)]
                check_inside(self.path, f)
                if not f.is_file():
                    raise _fail(f, f"missing trace file (step {step}, worker {worker}) listed in {self.path / MANIFEST}")
        if check_files:
            for step in range(self.steps):
                for worker in range(self.workers):
                    open_checked(self._files[file_key(step, worker)], self._layout, expected_metadata(m, step, worker))

    def layout(self) -> list[TensorSpec]:
        return list(self._layout)

    def file(self, step: int, worker: int) -> Path:
        """Path of the (step, worker) file."""
        return self._files[file_key(step, worker)]

    def gradients(self, step: int, worker: int) -> LazyGradients:
        if not 0 <= step < self.steps:
            raise ParamError(f"{self.name}: step {step} out of range 0..{self.steps - 1}")
        if not 0 <= worker < self.workers:
            raise ParamError(f"{self.name}: worker {worker} out of range 0..{self.workers - 1}")
        return LazyGradients(self.file(step, worker), self._layout, expected_metadata(self.manifest, step, worker))

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "kind": "trace", "path": str(self.path), "model": self.model, "seed": self.seed,
                "format_version": self.manifest["format_version"], "recorded_with": self.manifest.get("gcbench_version"),
                "created": self.manifest.get("created"), "recorded_source": self.manifest.get("source")}
