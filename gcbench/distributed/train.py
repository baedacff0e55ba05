"""End-to-end compressed training on ``torch.distributed``: ``gcbench train``.

Trains a real task with N worker processes (gloo on 127.0.0.1) once uncompressed (``none``, the
reference for the accuracy gap) and once per named compressor, exchanging gradients through the
DDP communication hook of :mod:`gcbench.distributed.ddp`.  Per compressor it records the accuracy and loss
after every epoch, the training time to a target accuracy, the step time split into compute,
compress, communicate and decompress, the bytes each worker sent, and the final accuracy gap to
the uncompressed run.  One results file (``kind = "train"``) is written to ``reports/runs/`` and
rewritten after every compressor, so finished compressors survive a later failure.

Tasks (``--task``):

* ``digits`` (default when scikit-learn is installed): the 1,797 8×8 handwritten digits bundled
  with scikit-learn (``load_digits``, no download), a fixed seeded 80/20 split, an MLP
  64-256-128-10 (50,826 parameters), SGD with momentum.  Metric: test accuracy.
* ``charlstm`` (the default without scikit-learn): next-character prediction on the public-domain
  texts shipped in ``gcbench/data/`` (last 10% held out), an embedding-32 / LSTM-128 / linear model,
  Adam.  Metric: next-character accuracy on the held-out text.

Processes: ``train`` spawns ``--workers`` processes with ``torch.multiprocessing`` (spawn), one
process group for all compressors (each compressor starts from the same seeded model and data
order).  Under ``torchrun`` (``RANK``/``WORLD_SIZE`` set) the current processes are the workers and
rank 0 writes the results.  Each worker uses ``cpu_count // workers`` threads (at least 1).

Faults: the parent watches every worker.  A worker that exits (crash, kill, Python error) ends the
compressor's run with a message naming the rank ("rank 2 exited with code 1: ..."); a worker that
stops responding is named once its peers time out in a collective (the training group's timeout,
``--collective-timeout``) or when the compressor exceeds ``--timeout`` ("rank 1 hung at step 0 and
did not finish within 60 s ...; rank 0 was waiting for it in a collective").  Each worker publishes
a progress tick (twice the steps it finished, plus one while a step is under way): the rank with
the least progress is the one that hung, since its peers went on into the step's collective.
Remaining workers are terminated (then killed), the compressor is recorded as failed, and the other
compressors run in a fresh process group.  SIGTERM to the parent is handled like SIGINT: the
workers are stopped at once and the results file ends "interrupted" with the finished compressors.
A parent killed outright (SIGKILL, the OOM killer) takes its workers with it (the Linux
parent-death signal, and a pipe every worker watches): nothing trains on as an orphan.  Its
results file still says "running", but it records the writer's pid, host and start time, so a
later command shows it as "interrupted (writer gone)"; the next ``train`` removes the orphaned
work folder.
``GCBENCH_TRAIN_FAULT=crash:RANK[@STEP][/LABEL]`` (or ``hang:...``) injects a failure for testing.

Choices: time to target is measured at epoch ends (evaluation resolution) in training time only
(the sum of step times, evaluation excluded); step-time components are medians over steps after
the first (DDP's first iteration builds buckets), averaged over ranks; compute = step time − hook
time (the hook is synchronous, so nothing overlaps).  The replicas' parameters are hashed at the
end: every worker decodes the same bytes, so they must be bit-identical, and results say whether
they were.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing.connection
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from gcbench.compressors import registry
from gcbench.core import liveness, signals
from gcbench.core.errors import GcbenchError, ParamError, UnknownNameError, did_you_mean
from gcbench.distributed.launch import init_from_env, launch_env, launched
from gcbench.results.store import RunWriter, atomic_write_json

DATA_DIR = Path(__file__).resolve().parents[1] / "data"


def reference_name() -> str:
    """The uncompressed reference every training comparison includes: the identity compressor's card."""
    return registry.identity().name


TEXT_FILES = ("public_domain.txt",)
FAULT_ENV = "GCBENCH_TRAIN_FAULT"
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: finite, and far inside what torch.distributed can hold
#: the shortest timeout: torch.distributed's stores and collectives cannot even connect in 1 ms (a run could never start)
MIN_TIMEOUT_S = 1.0

Progress = Callable[[str, int, int, str], None]


class TrainError(GcbenchError):
    """A training run that could not complete (a worker crashed, hung, or a task is unavailable)."""


def _derive(*parts: int) -> int:
    """A 63-bit seed from integer parts (stable across processes and platforms)."""
    words = [int(p) % 2**32 for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> np.uint64(1))


# ----------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class TaskDefaults:
    """What a task trains with unless the command line says otherwise."""

    epochs: int
    target: float  # the metric's value training should reach
    lr: float
    batch: int


class Task(ABC):
    """A small, real learning problem: data, model, optimizer, batches and evaluation."""

    name: str
    metric = "accuracy"
    defaults: TaskDefaults

    def __init__(self, seed: int) -> None:
        self.seed = seed

    @abstractmethod
    def build_model(self) -> nn.Module: ...

    @abstractmethod
    def optimizer(self, params: Any, lr: float) -> torch.optim.Optimizer: ...

    @abstractmethod
    def batches(self, epoch: int, rank: int, world: int, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's batches of one epoch; every rank gets the same number of batches."""

    @abstractmethod
    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor: ...

    @abstractmethod
    def evaluate(self, model: nn.Module) -> tuple[float, float]:
        """(held-out loss, held-out accuracy)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]: ...


def sklearn_available() -> bool:
    try:
        import sklearn.datasets  # noqa: F401
    except ImportError:
        return False
    return True


class DigitsTask(Task):
    """scikit-learn's 8×8 digits (1,797 images, bundled, no download) with an MLP."""

    name = "digits"
    defaults = TaskDefaults(epochs=10, target=0.9, lr=0.1, batch=32)

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            raise TrainError("task 'digits' needs scikit-learn (pip install scikit-learn), or use --task charlstm") from None
        d = load_digits()
        x = torch.from_numpy(np.asarray(d.data, dtype=np.float32) / 16.0)
        y = torch.from_numpy(np.asarray(d.target, dtype=np.int64))
        # a fixed split: every run (and every compressor) sees the same test images
        perm = torch.from_numpy(np.random.Generator(np.random.PCG64(12345)).permutation(len(y)))
        n_test = len(y) // 5
        self.x_test, self.y_test = x[perm[:n_test]], y[perm[:n_test]]
        self.x_train, self.y_train = x[perm[n_test:]], y[perm[n_test:]]

    def build_model(self) -> nn.Module:
        return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))

    def optimizer(self, params: Any, lr: float) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=lr, momentum=0.9)

    def batches(self, epoch: int, rank: int, world: int, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.y_train)
        perm = torch.from_numpy(np.random.Generator(np.random.PCG64(_derive(self.seed, 1, epoch))).permutation(n))
        shard = perm[rank : (n // world) * world : world]  # equal shards: all ranks take the same number of steps
        steps = len(shard) // batch_size
        if steps == 0:
            raise TrainError(f"digits: {n} training images cannot give {world} workers a batch of {batch_size}")
        return [(self.x_train[shard[i * batch_size : (i + 1) * batch_size]], self.y_train[shard[i * batch_size : (i + 1) * batch_size]])
                for i in range(steps)]

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out, y)

    def evaluate(self, model: nn.Module) -> tuple[float, float]:
        with torch.no_grad():
            out = model(self.x_test)
            return float(self.loss(out, self.y_test)), float((out.argmax(1) == self.y_test).float().mean())

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "dataset": "sklearn load_digits (8x8, 10 classes)", "train": len(self.y_train),
                "test": len(self.y_test), "model": "MLP 64-256-128-10", "optimizer": "SGD momentum 0.9"}


def load_text() -> str:
    """The shipped public-domain text (provenance lines starting with '#' removed)."""
    parts = []
    for name in TEXT_FILES:
        path = DATA_DIR / name
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TrainError(f"task 'charlstm': cannot read {path} ({exc})") from None
        parts.append("\n".join(line for line in raw.splitlines() if not line.startswith("#")).strip())
    return "\n\n".join(parts)


class CharLSTM(nn.Module):
    """Embedding → one-layer LSTM → linear over the vocabulary (a character language model)."""

    def __init__(self, vocab: int, embed: int = 32, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.embed(x))
        return self.head(h)


class CharLSTMTask(Task):
    """Next-character prediction on the shipped public-domain text."""

    name = "charlstm"
    defaults = TaskDefaults(epochs=6, target=0.35, lr=0.005, batch=16)
    seq_len = 64
    steps_per_epoch = 20

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        text = load_text()
        self.vocab = sorted(set(text))
        index = {c: i for i, c in enumerate(self.vocab)}
        ids = torch.tensor([index[c] for c in text], dtype=torch.int64)
        cut = int(len(ids) * 0.9)
        self.train_ids, self.test_ids = ids[:cut], ids[cut:]
        self.chars = len(text)

    def build_model(self) -> nn.Module:
        return CharLSTM(len(self.vocab))

    def optimizer(self, params: Any, lr: float) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=lr)

    def batches(self, epoch: int, rank: int, world: int, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        rng = np.random.Generator(np.random.PCG64(_derive(self.seed, 2, epoch, rank)))  # each rank its own windows
        span = len(self.train_ids) - self.seq_len - 1
        offsets = torch.arange(self.seq_len + 1)
        out = []
        for _ in range(self.steps_per_epoch):
            starts = torch.from_numpy(rng.integers(0, span, size=batch_size))
            win = self.train_ids[starts[:, None] + offsets]
            out.append((win[:, :-1], win[:, 1:]))
        return out

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    def evaluate(self, model: nn.Module) -> tuple[float, float]:
        n = (len(self.test_ids) - 1) // self.seq_len
        x = self.test_ids[: n * self.seq_len].reshape(n, self.seq_len)
        y = self.test_ids[1 : n * self.seq_len + 1].reshape(n, self.seq_len)
        with torch.no_grad():
            out = model(x)
            return float(self.loss(out, y)), float((out.argmax(-1) == y).float().mean())

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "dataset": f"gcbench/data public-domain text ({self.chars} characters, {len(self.vocab)} symbols)",
                "train_chars": len(self.train_ids), "test_chars": len(self.test_ids), "seq_len": self.seq_len,
                "steps_per_epoch": self.steps_per_epoch, "model": "Embedding 32 - LSTM 128 - Linear", "optimizer": "Adam"}


TASKS: dict[str, type[Task]] = {"digits": DigitsTask, "charlstm": CharLSTMTask}


def default_task() -> str:
    return "digits" if sklearn_available() else "charlstm"


def make_task(name: str, seed: int) -> Task:
    if name == "auto":
        name = default_task()
    if name not in TASKS:
        raise UnknownNameError(did_you_mean(name, list(TASKS), "task"))
    return TASKS[name](seed)


# ----------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Fault:
    """An injected failure for tests: ``crash`` (the process exits) or ``hang`` (it stops responding)."""

    kind: str
    rank: int
    step: int = 2
    label: str | None = None  # only this compressor's run (default: every run)

    @classmethod
    def parse(cls, text: str) -> Fault:
        """``KIND:RANK[@STEP][/LABEL]``, e.g. ``crash:1``, ``hang:0@5/topk``."""
        kind, _, rest = text.partition(":")
        rest, _, label = rest.partition("/")
        rank_s, _, step_s = rest.partition("@")
        if kind not in ("crash", "hang") or not rank_s.strip().isdigit() or (step_s and not step_s.strip().isdigit()):
            raise ParamError(f"fault must look like crash:RANK[@STEP][/LABEL] or hang:RANK[@STEP][/LABEL], got {text!r}")
        return cls(kind, int(rank_s), int(step_s) if step_s else 2, label or None)

    def fire(self, rank: int, step: int, label: str) -> None:
        if rank != self.rank or step != self.step or (self.label is not None and label != self.label):
            return
        if self.kind == "crash":
            os._exit(3)  # like a segfault or an OOM kill: no Python cleanup, no message
        while True:  # hang: never return (the parent kills the process)
            time.sleep(3600)


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one ``gcbench train`` run (recorded in the results file)."""

    task: str = "auto"
    workers: int = 4
    epochs: int | None = None  # None: the task's default
    batch_size: int | None = None  # per worker
    lr: float | None = None
    target: float | None = None  # accuracy for time-to-target
    seed: int = 0
    granularity: str = "bucket"
    timeout_s: float = 300.0  # per compressor
    collective_timeout_s: float | None = None  # None: max(30, timeout / 3)
    threads: int | None = None  # per worker; None: cpu_count // workers
    fault: str | None = None

    def resolved(self) -> TrainConfig:
        """Fill task defaults and validate; raises :class:`ParamError` with the option's name."""
        task = default_task() if self.task == "auto" else self.task
        if task not in TASKS:
            raise UnknownNameError(did_you_mean(task, list(TASKS), "task"))
        cls = TASKS[task]
        if self.workers < 1:
            raise ParamError(f"workers must be at least 1, got {self.workers}")
        for name in ("epochs", "batch_size", "threads"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ParamError(f"{name} must be at least 1, got {v}")
        if self.lr is not None and not 0 < self.lr < math.inf:  # NaN fails this too
            raise ParamError(f"lr must be a finite number > 0, got {self.lr}")
        if self.target is not None and not 0 < self.target <= 1:
            raise ParamError(f"target accuracy must be in (0, 1], got {self.target}")
        # torch.distributed keeps timeouts in integer milliseconds: inf or 1e300 s would overflow it
        if not MIN_TIMEOUT_S <= self.timeout_s <= MAX_TIMEOUT_S:
            raise ParamError(f"timeout must be at least {MIN_TIMEOUT_S:g} and at most {MAX_TIMEOUT_S:g} seconds, got {self.timeout_s}")
        if self.collective_timeout_s is not None and not MIN_TIMEOUT_S <= self.collective_timeout_s <= MAX_TIMEOUT_S:
            raise ParamError(f"collective timeout must be at least {MIN_TIMEOUT_S:g} and at most {MAX_TIMEOUT_S:g} seconds, "
                             f"got {self.collective_timeout_s}")
        if self.granularity not in ("bucket", "layer"):
            raise ParamError(f"granularity must be bucket or layer, got {self.granularity!r}")
        fault = self.fault or os.environ.get(FAULT_ENV) or None
        if fault:
            Fault.parse(fault)
        return TrainConfig(
            task=task, workers=self.workers, epochs=self.epochs or cls.defaults.epochs, batch_size=self.batch_size or cls.defaults.batch,
            lr=self.lr or cls.defaults.lr, target=self.target or cls.defaults.target, seed=self.seed, granularity=self.granularity,
            timeout_s=float(self.timeout_s), collective_timeout_s=float(self.collective_timeout_s or max(30.0, self.timeout_s / 3)),
            threads=self.threads or max(1, (os.cpu_count() or 1) // self.workers), fault=fault,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Spec:
    """One compressor configuration to train with; ``label`` is the user's spelling."""

    label: str
    name: str
    params: dict[str, Any] = field(default_factory=dict)


def parse_compressors(text: str | Sequence[str]) -> list[Spec]:
    """``none,topk:density=0.01,error_feedback=true,qsgd`` → specs, with ``none`` first.

    Comma-separated; a ``key=value`` item without ``:`` continues the previous compressor's
    parameters.  ``none`` (the reference of the accuracy gap) is added first if absent.
    """
    items = [s.strip() for part in ([text] if isinstance(text, str) else text) for s in part.split(",") if s.strip()]
    labels: list[str] = []
    for item in items:
        if "=" in item and ":" not in item and labels:
            sep = "," if ":" in labels[-1] else ":"
            labels[-1] = f"{labels[-1]}{sep}{item}"
        else:
            labels.append(item)
    if not labels:
        raise ParamError("no compressors given (e.g. -c none -c topk -c qsgd)")
    specs = []
    for label in labels:
        name, params = registry.parse_spec(label)
        specs.append(Spec(label, name, dict(params)))
    seen = [s.label for s in specs]
    dup = sorted({x for x in seen if seen.count(x) > 1})
    if dup:
        raise ParamError(f"compressor {dup[0]!r} is listed twice")
    if not any(s.name == reference_name() and not s.params for s in specs):
        specs.insert(0, Spec(reference_name(), reference_name()))
    else:  # the reference runs first so every later record can state its gap
        specs.sort(key=lambda s: s.name != reference_name() or bool(s.params))
    return specs


# ----------------------------------------------------------------------------- worker processes


@dataclass
class WorkerContext:
    """What a worker function gets: its rank, the group to train in, heartbeats and an output sink."""

    rank: int
    world_size: int
    group: Any  # dist.ProcessGroup with the collective timeout
    workdir: Path | None
    # shared array of per-rank progress ticks (spawn mode): 2 × finished steps, + 1 while a step is
    # under way.  A hung rank stops before its peers, which enter the step and wait for it in a
    # collective, so the lowest tick names the rank that hung even when every rank is at step 0.
    steps: Any = None
    sink: Callable[[str, Any], None] | None = None

    def begin(self, step: int) -> None:
        """Mark step ``step`` (0-based) as entered: forward, backward and the hook's collectives."""
        if self.steps is not None:
            self.steps[self.rank] = 2 * step + 1

    def beat(self, step: int) -> None:
        """Mark ``step`` steps as finished."""
        if self.steps is not None:
            self.steps[self.rank] = 2 * step

    def emit(self, name: str, data: Any) -> None:
        """Hand a result to the parent (a JSON file in spawn mode, a callback under torchrun)."""
        if self.sink is not None:
            self.sink(name, data)
        elif self.workdir is not None:
            atomic_write_json(self.workdir / f"{name}.json", data)


_COMM_MARKERS = ("gloo", "connection closed", "connection reset", "timed out", "timeout", "broken pipe", "nccl", "peer")


def is_communication_error(exc: BaseException) -> bool:
    """True for errors raised by a collective because a peer failed (not the worker's own bug)."""
    msg = str(exc).lower()
    return isinstance(exc, RuntimeError | ConnectionError | TimeoutError | dist.DistBackendError) and any(m in msg for m in _COMM_MARKERS)


def _die_with_parent(parent_pid: int, lifeline: Any) -> None:
    """Make this worker end when the ``train`` process that spawned it does, however that one ends (SIGKILL included).

    A parent killed outright runs no cleanup: without this its workers would go on training, as
    orphans, into a temporary folder nobody reads.  :func:`gcbench.core.liveness.die_with_parent`
    arms the Linux parent-death signal (immediate, even while the worker is blocked in a
    collective); and, everywhere, a daemon thread waits on ``lifeline``, the read end of a pipe
    whose only write end the parent holds, and exits the worker at its end of file (the parent's
    exit closes it).
    """
    liveness.die_with_parent(parent_pid, poll_s=None)

    def watch() -> None:
        try:
            lifeline.recv()  # the parent never sends: this returns only by end of file
        except (EOFError, OSError):
            pass
        os._exit(1)

    threading.Thread(target=watch, name="gcbench-parent-lifeline", daemon=True).start()


def _worker_entry(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple[Any, ...], workdir: str,
                  init_timeout_s: float, collective_timeout_s: float, threads: int, steps: Any, parent_pid: int,
                  lifeline: Any) -> None:
    """Body of one spawned worker: join the group, run ``fn``, leave a result or an error file; die with the parent."""
    _die_with_parent(parent_pid, lifeline)
    torch.set_num_threads(threads)
    if platform.system() == "Linux":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # a local group talks over loopback only
    wd = Path(workdir)
    try:
        store = dist.TCPStore("127.0.0.1", port, world, False, timeout=timedelta(seconds=init_timeout_s))
        # the default group waits for slow starters (imports on a loaded machine); the training
        # group has the short collective timeout that exposes a hung peer
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=init_timeout_s))
        group = dist.new_group(backend="gloo", timeout=timedelta(seconds=collective_timeout_s))
        ctx = WorkerContext(rank, world, group, wd, steps)
        result = fn(ctx, *args)
        atomic_write_json(wd / f"result-{rank}.json", result)
    except BaseException as exc:  # reported to the parent, then a hard exit (peers may be gone)
        atomic_write_json(wd / f"error-{rank}.json", {"rank": rank, "type": type(exc).__name__, "message": str(exc).strip(),
                                                      "communication": is_communication_error(exc), "traceback": traceback.format_exc()})
        sys.stderr.flush()
        os._exit(1)
    try:
        dist.destroy_process_group()
    except Exception:  # leaving is best effort: the result is already on disk
        pass


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _ranks(rs: Sequence[int]) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(str(r) for r in rs)


WORKDIR_PREFIX = "gcbench-train-"
OWNER_FILE = "owner.json"


def sweep_orphaned_workdirs(parent: Path | str | None = None) -> list[Path]:
    """Remove work folders of :class:`WorkerGroup` whose owner is gone (killed before it could clean up); returns them.

    Only folders named ``gcbench-train-*`` that hold an owner file naming a process of this host
    that no longer runs (:func:`gcbench.core.liveness.gone`) are touched: a live run's folder, or
    another host's on a shared temporary folder, is left alone.
    """
    removed = []
    for d in Path(parent or tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            owner = json.loads((d / OWNER_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(owner, dict) and liveness.gone(owner.get("pid"), owner.get("host"), owner.get("process_start")):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


class WorkerGroup:
    """N spawned worker processes forming one gloo group on 127.0.0.1, watched by the parent.

    The parent owns the rendezvous store (a TCPStore on a port the OS picks, so concurrent runs
    never clash) and never blocks on a worker: it waits on the process sentinels with a timeout.
    """

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], world_size: int, *, collective_timeout_s: float,
                 init_timeout_s: float, threads: int = 1) -> None:
        self.fn, self.args, self.world_size = fn, args, world_size
        self.collective_timeout_s, self.init_timeout_s, self.threads = collective_timeout_s, init_timeout_s, threads
        sweep_orphaned_workdirs()
        self._tmp = tempfile.TemporaryDirectory(prefix=WORKDIR_PREFIX)
        self.workdir = Path(self._tmp.name)
        atomic_write_json(self.workdir / OWNER_FILE, liveness.identity())  # lets a later run sweep it if this process is killed
        self.procs: list[Any] = []
        self.started = 0.0
        self._lifeline: Any = None

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        # the parent's own connection to its local store must not inherit a short run timeout (the watch loop enforces that)
        store_timeout = timedelta(seconds=max(self.init_timeout_s, 30.0))
        self.store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=store_timeout, wait_for_workers=False)
        self.steps = ctx.Array("q", self.world_size, lock=False)
        # the workers' lifeline (:func:`_die_with_parent`): they get the read end, only this process holds the write end
        lifeline, self._lifeline = ctx.Pipe(duplex=False)
        self.procs = [
            ctx.Process(target=_worker_entry, name=f"gcbench-rank{r}",
                        args=(r, self.world_size, self.store.port, self.fn, self.args, str(self.workdir), self.init_timeout_s,
                              self.collective_timeout_s, self.threads, self.steps, os.getpid(), lifeline))
            for r in range(self.world_size)
        ]
        for p in self.procs:
            p.start()
        lifeline.close()  # the children have their copies; keeping ours would not matter, but nothing needs it
        self.started = time.monotonic()

    def codes(self) -> list[int | None]:
        return [p.exitcode for p in self.procs]

    def step(self, rank: int) -> int:
        """Steps ``rank`` has finished (its shared progress tick halved)."""
        return int(self.steps[rank]) // 2

    def hung(self, ranks: Sequence[int]) -> tuple[list[int], list[int]]:
        """Split ``ranks`` into (the ranks that hung, the ranks waiting for them).

        The hung ranks are those with the least progress: their peers went on into the next step
        and block in its collective.  Equal progress names nobody in particular: all are returned.
        """
        ticks = {r: int(self.steps[r]) for r in ranks}
        if len(set(ticks.values())) <= 1:
            return list(ranks), []
        low = min(ticks.values())
        return [r for r in ranks if ticks[r] == low], [r for r in ranks if ticks[r] != low]

    def wait(self, timeout_s: float) -> None:
        """Return when a worker exits or after ``timeout_s``."""
        alive = [p.sentinel for p in self.procs if p.exitcode is None]
        if alive:
            multiprocessing.connection.wait(alive, timeout=timeout_s)
        else:
            time.sleep(min(timeout_s, 0.05))

    def error(self, rank: int) -> dict[str, Any] | None:
        path = self.workdir / f"error-{rank}.json"
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None

    def failure(self, grace_s: float = 3.0) -> str | None:
        """A message naming the failed rank(s), or None while no worker has failed."""
        if not any(c not in (None, 0) for c in self.codes()):
            return None
        # peers of a crashed worker fail a moment later: let them report, so the crash is told apart
        end = time.monotonic() + grace_s
        while time.monotonic() < end and any(c is None for c in self.codes()):
            self.wait(0.1)
        codes = self.codes()
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        errors = {r: self.error(r) for r in failed}
        primary = [r for r in failed if not (errors[r] or {}).get("communication")]
        alive = [r for r, c in enumerate(codes) if c is None]
        if primary:
            parts = []
            for r in primary:
                e = errors[r]
                detail = f": {e['type']}: {_first_line(e['message'])}" if e else " (no error report: the process died)"
                parts.append(f"rank {r} {_exit_text(codes[r])}{detail}")  # type: ignore[arg-type]
            return "; ".join(parts)
        first = _first_line(next(e["message"] for e in errors.values() if e)) if any(errors.values()) else "no report"
        if alive:
            hung, _ = self.hung(alive)  # peers still alive may be waiting too: name the one behind them all
            return (f"{_ranks(hung)} stopped responding at step {self.step(hung[0])}: {_ranks(failed)} gave up waiting in a "
                    f"collective after {self.collective_timeout_s:g} s ({first})")
        return f"{_ranks(failed)} failed in communication: {first}"

    def stuck(self, limit_s: float, what: str) -> str:
        """Message for a run past its deadline: the ranks that lag, or all that are still running."""
        alive = [r for r, c in enumerate(self.codes()) if c is None]
        hung, waiting = self.hung(alive)
        low = self.step(hung[0]) if hung else 0
        if not waiting:
            return f"{_ranks(hung)} did not finish within {limit_s:g} s ({what}; stuck at step {low})"
        verb = "was" if len(waiting) == 1 else "were"
        return (f"{_ranks(hung)} hung at step {low} and did not finish within {limit_s:g} s ({what}); "
                f"{_ranks(waiting)} {verb} waiting for {'it' if len(hung) == 1 else 'them'} in a collective")

    def result(self, rank: int) -> Any:
        return json.loads((self.workdir / f"result-{rank}.json").read_text(encoding="utf-8"))

    def stop(self, term_s: float = 1.0, join_s: float = 5.0) -> None:
        """End workers still running (by their own pid) and release the store and work folder.

        SIGTERM first, SIGKILL for any still alive ``term_s`` later (a worker blocked in a gloo
        collective may not act on SIGTERM promptly); nothing outlives the parent's run.
        """
        for p in self.procs:
            if p.exitcode is None:
                p.terminate()
        end = time.monotonic() + term_s
        while time.monotonic() < end and any(p.exitcode is None for p in self.procs):
            self.wait(0.05)
        for p in self.procs:
            if p.exitcode is None:
                p.kill()
        for p in self.procs:
            p.join(join_s)
        if self._lifeline is not None:
            self._lifeline.close()
            self._lifeline = None
        self._tmp.cleanup()


def _first_line(msg: str) -> str:
    lines = [ln.strip() for ln in str(msg).splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


def run_group(fn: Callable[..., Any], args: tuple[Any, ...], world_size: int, *, timeout_s: float = 120.0,
              collective_timeout_s: float | None = None, threads: int = 1) -> list[Any]:
    """Run ``fn(ctx, *args)`` on ``world_size`` spawned workers; return each rank's (JSON) result.

    Raises :class:`TrainError` naming the rank when a worker fails or the group exceeds ``timeout_s``.
    """
    group = WorkerGroup(fn, args, world_size, collective_timeout_s=collective_timeout_s or max(5.0, timeout_s / 3),
                        init_timeout_s=timeout_s, threads=threads)
    group.start()
    try:
        while True:
            msg = group.failure()
            if msg:
                raise TrainError(msg)
            if all(c == 0 for c in group.codes()):
                return [group.result(r) for r in range(world_size)]
            if time.monotonic() - group.started > timeout_s:
                raise TrainError(group.stuck(timeout_s, "worker group"))
            group.wait(0.2)
    finally:
        group.stop()


# ----------------------------------------------------------------------------- one training run (in a worker)


def _param_hash(model: nn.Module) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def train_one(ctx: WorkerContext, task: Task, cfg: TrainConfig, spec: Spec) -> dict[str, Any]:
    """Train ``task`` with one compressor on this worker; returns this rank's summary."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.distributed.ddp import register_compressor_hook

    fault = Fault.parse(cfg.fault) if cfg.fault else None
    torch.manual_seed(cfg.seed)  # the same initial model for every compressor
    model = task.build_model()
    ddp = DDP(model, process_group=ctx.group)
    hook = register_compressor_hook(ddp, registry.create(spec.name, **spec.params), seed=cfg.seed, granularity=cfg.granularity,
                                    process_group=ctx.group)
    opt = task.optimizer(ddp.parameters(), float(cfg.lr))  # type: ignore[arg-type]
    curve: list[dict[str, Any]] = []
    steps: list[dict[str, float]] = []
    train_time = 0.0
    diverged = False
    step = 0
    for epoch in range(int(cfg.epochs)):  # type: ignore[arg-type]
        ddp.train()
        loss_sum, n = 0.0, 0
        for x, y in task.batches(epoch, ctx.rank, ctx.world_size, int(cfg.batch_size)):  # type: ignore[arg-type]
            if fault is not None:
                fault.fire(ctx.rank, step, spec.label)
            ctx.begin(step)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = task.loss(ddp(x), y)
            loss.backward()
            opt.step()
            dt = time.perf_counter() - t0
            s = hook.stats.steps[-1]
            parts = {k: s.total(k) for k in ("compress_s", "communicate_s", "decompress_s")}
            # the asynchronous hook's parts overlap the backward pass, so the step less all of them is a lower
            # bound of compute (and the network model's compute + parts, which assumes no overlap, an upper bound of the step)
            steps.append({"total_s": dt, **parts, "compute_s": max(0.0, dt - sum(parts.values())),
                          **{k: s.total(k) for k in ("payload_bytes", "sent_bytes", "dense_bytes")}})
            train_time += dt
            loss_sum += float(loss.detach())
            n += 1
            step += 1
            ctx.beat(step)
        test_loss, acc = task.evaluate(model)
        curve.append({"epoch": epoch + 1, "step": step, "train_time_s": train_time, "train_loss": loss_sum / max(n, 1),
                      "test_loss": test_loss, "test_accuracy": acc})
        if not math.isfinite(loss_sum):
            diverged = True  # NaN/inf loss: later epochs cannot recover, stop here (recorded)
            break
    summary = hook.stats.summary(skip=1)
    return {
        "rank": ctx.rank,
        "label": spec.label,
        "curve": curve,
        "steps": steps,
        "hook": hook.describe(),
        "decoded_payloads": summary.get("decoded_payloads"),
        "collectives": summary.get("collectives"),
        "buckets": summary.get("buckets"),
        "numel": sum(p.numel() for p in model.parameters()),
        "replica_hash": _param_hash(model),
        "diverged": diverged,
        "train_time_s": train_time,
        "threads": torch.get_num_threads(),
    }


def _train_all(ctx: WorkerContext, cfg_d: dict[str, Any], specs_d: list[dict[str, Any]]) -> None:
    """Worker function: every compressor in turn; rank 0 hands each gathered result over."""
    cfg = TrainConfig(**cfg_d)
    task = make_task(cfg.task, cfg.seed)
    for i, sd in enumerate(specs_d):
        summary = train_one(ctx, task, cfg, Spec(**sd))
        gathered: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(gathered, summary, group=ctx.group)
        if ctx.rank == 0:
            ctx.emit(f"case-{i}", gathered)


# ----------------------------------------------------------------------------- records


def _median(vals: Sequence[float]) -> float | None:
    return float(np.median(vals)) if len(vals) else None


def build_record(spec: Spec, ranks: list[dict[str, Any]], cfg: TrainConfig, task_info: dict[str, Any],
                 reference: dict[str, Any] | None) -> dict[str, Any]:
    """The results record of one compressor from every rank's summary."""
    info = registry.get(spec.name)
    comp = registry.create(spec.name, **spec.params)  # resolved parameters, and flags by the registry's one rule
    r0 = ranks[0]
    curve = r0["curve"]
    final = curve[-1] if curve else {}
    keys = ("total_s", "compute_s", "compress_s", "communicate_s", "decompress_s")
    per_rank = []
    for r in ranks:
        st = r["steps"][1:] if len(r["steps"]) > 1 else r["steps"]  # the first step builds DDP's buckets
        per_rank.append({k: _median([s[k] for s in st]) for k in keys})
    step_time = {k: float(np.mean([p[k] for p in per_rank if p[k] is not None])) if per_rank else None for k in keys}
    payload_totals = [sum(s["payload_bytes"] for s in r["steps"]) for r in ranks]
    sent_totals = [sum(s["sent_bytes"] for s in r["steps"]) for r in ranks]
    n_steps = len(r0["steps"])
    per_step = float(np.mean(payload_totals)) / n_steps if n_steps else None
    dense = float(r0["steps"][0]["dense_bytes"]) if n_steps else None
    numel = int(r0["numel"])
    target = float(cfg.target)  # type: ignore[arg-type]
    hit = next((c for c in curve if c["test_accuracy"] >= target), None)
    acc = final.get("test_accuracy")
    ref_final = None
    if spec.name == reference_name() and not spec.params:
        ref_final = acc  # the reference's own gap is zero by definition
    elif reference is not None and reference.get("status") == "ok":
        ref_final = reference["training"]["final_accuracy"]
    training = {
        "task": task_info,
        "metric": "accuracy",
        "workers": len(ranks),
        "epochs": len(curve),
        "steps": n_steps,
        "batch_size_per_worker": cfg.batch_size,
        "lr": cfg.lr,
        "curve": curve,
        "final_accuracy": acc,
        "final_loss": final.get("test_loss"),
        "best_accuracy": max((c["test_accuracy"] for c in curve), default=None),
        "reference": reference_name(),
        "accuracy_gap": (ref_final - acc) if ref_final is not None and acc is not None else None,
        "target_accuracy": target,
        "time_to_target_s": hit["train_time_s"] if hit else None,
        "epochs_to_target": hit["epoch"] if hit else None,
        "train_time_s": r0["train_time_s"],
        "step_time": step_time,
        "step_time_per_rank": per_rank,
        # rank 0's raw per-step samples (the first step included), so runs can be compared statistically
        "step_samples_rank0": {k: [s[k] for s in r0["steps"]] for k in (*keys, "payload_bytes")},
        "bytes": {
            "payload_bytes_per_step": per_step,
            "payload_bytes_per_worker": float(np.mean(payload_totals)),
            "payload_bytes_per_worker_max": int(max(payload_totals)),
            "sent_bytes_per_worker": float(np.mean(sent_totals)),
            "dense_bytes_per_step": dense,
        },
        "decoded_payloads_per_step": r0["decoded_payloads"],
        "collectives": r0["collectives"],
        "buckets": r0["buckets"],
        "replicas_consistent": len({r["replica_hash"] for r in ranks}) == 1,
        "diverged": any(r["diverged"] for r in ranks),
        "threads_per_worker": r0["threads"],
        "hook": r0["hook"],
    }
    return {
        "label": spec.label,
        "compressor": info.name,
        "version": info.version,
        "params": dict(comp.params),
        "flags": comp.flags.to_dict(),
        "workers": len(ranks),
        "status": "ok",
        # the same keys as `gcbench run` records, so size readers (reports, simulate) work on both
        "size": {"numel": numel, "dense_bytes": dense, "wire_bytes": per_step,
                 "ratio": dense / per_step if dense and per_step else None,
                 "bits_per_element": 8.0 * per_step / numel if per_step and numel else None},
        "training": training,
    }


def failed_record(spec: Spec, message: str) -> dict[str, Any]:
    rec: dict[str, Any] = {"label": spec.label, "compressor": spec.name, "params": spec.params, "status": "error", "error": message}
    try:
        rec["version"] = registry.get(spec.name).version
    except GcbenchError:
        pass
    return rec


# ----------------------------------------------------------------------------- orchestration


@dataclass
class TrainOutcome:
    path: Path | None  # None on non-zero ranks under torchrun
    records: list[dict[str, Any]]

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("status") != "ok"]


def under_torchrun() -> bool:
    """True when launched by torchrun (or any launcher that sets RANK or WORLD_SIZE; :func:`launch_env` checks the rest)."""
    return launched()


def _noop(stage: str, done: int, total: int, message: str) -> None:
    pass


def _suite(cfg: TrainConfig, specs: Sequence[Spec], task_info: dict[str, Any]) -> tuple[dict[str, Any], str]:
    suite = {"name": f"train-{cfg.task}", "kind": "train", "config": cfg.to_dict(), "task": task_info,
             "compressors": [asdict(s) for s in specs]}
    digest = hashlib.sha256(json.dumps(suite, sort_keys=True, default=str).encode()).hexdigest()
    return suite, digest


def train(config: TrainConfig, compressors: str | Sequence[str], out_dir: Path | str = "reports/runs",
          progress: Progress | None = None) -> TrainOutcome:
    """Train once per compressor (``none`` first) and write one ``kind="train"`` results file.

    Failures of one compressor (a crashed or hung worker) are recorded with a message naming the
    rank; the other compressors still run.  Under torchrun the current processes are the workers.
    """
    progress = progress or _noop
    launch = launch_env()  # a malformed launch fails here, in one line, before any rendezvous could wait on it
    cfg = config.resolved()
    specs = parse_compressors(compressors)
    for s in specs:  # validate every compressor before any process starts
        info = registry.get(s.name)
        registry.create(s.name, **s.params)
        workers = launch.world_size if launch is not None else cfg.workers
        if workers < info.min_workers:
            raise ParamError(f"{s.label} needs at least {info.min_workers} workers")
    task_info = make_task(cfg.task, cfg.seed).describe()  # fails early (e.g. no scikit-learn), in this process
    if under_torchrun():
        return _train_torchrun(cfg, specs, Path(out_dir), task_info, progress)
    suite, digest = _suite(cfg, specs, task_info)
    with signals.handled():  # SIGTERM like SIGINT: workers stopped, results kept
        return _train_spawned(cfg, specs, Path(out_dir), task_info, suite, digest, progress)


def _train_spawned(cfg: TrainConfig, specs: list[Spec], out_dir: Path, task_info: dict[str, Any], suite: dict[str, Any],
                   digest: str, progress: Progress) -> TrainOutcome:
    """Spawn mode: one worker group per attempt; a failed compressor is recorded and the rest go on."""
    writer = RunWriter(out_dir, suite, digest, None, "cpu", kind="train")
    records: list[dict[str, Any]] = []
    pending = list(specs)
    status = "complete"
    try:
        while pending:
            group = WorkerGroup(_train_all, (cfg.to_dict(), [asdict(s) for s in pending]), cfg.workers,
                                collective_timeout_s=float(cfg.collective_timeout_s),  # type: ignore[arg-type]
                                init_timeout_s=cfg.timeout_s, threads=int(cfg.threads))  # type: ignore[arg-type]
            group.start()
            k, since, message = 0, time.monotonic(), None
            try:
                while k < len(pending):
                    case = group.workdir / f"case-{k}.json"
                    if case.exists():
                        ref = records[0] if records and records[0]["compressor"] == reference_name() else None
                        rec = build_record(pending[k], json.loads(case.read_text(encoding="utf-8")), cfg, task_info, ref)
                        records.append(rec)
                        writer.add_case(rec)
                        k += 1
                        since = time.monotonic()
                        progress("train", len(records), len(specs), f"{rec['label']} done")
                        continue
                    message = group.failure()
                    if message:
                        break
                    if time.monotonic() - since > cfg.timeout_s:
                        message = group.stuck(cfg.timeout_s, f"compressor {pending[k].label}")
                        break
                    step = max(group.step(r) for r in range(cfg.workers))
                    progress("train", len(records), len(specs), f"{pending[k].label}: step {step}")
                    group.wait(0.2)
                if message is None:  # every case done: let the workers leave cleanly
                    end = time.monotonic() + 30
                    while time.monotonic() < end and any(c is None for c in group.codes()):
                        group.wait(0.2)
            finally:
                with signals.deferred():
                    group.stop()
            if message is None:
                break
            rec = failed_record(pending[k], message)
            records.append(rec)
            writer.add_case(rec)
            progress("train", len(records), len(specs), f"{pending[k].label} failed")
            pending = pending[k + 1 :]
    except KeyboardInterrupt:  # SIGINT, or SIGTERM through signals.handled(); the workers are stopped by now
        with signals.deferred():
            writer.finish("interrupted")
        raise
    with signals.deferred():
        writer.finish("complete-with-errors" if any(r["status"] != "ok" for r in records) else status)
    return TrainOutcome(writer.path, records)


#: the settings every torchrun rank must share: they decide the model, the data, the steps and the collectives
AGREED_SETTINGS = ("task", "epochs", "batch_size", "lr", "target", "seed", "granularity", "fault")


def _check_ranks_agree(cfg: TrainConfig, specs: list[Spec], group: Any) -> None:
    """Raise on every rank, in one line naming each rank's settings, when torchrun's ranks were started with different options.

    Ranks with other epochs, batch sizes or compressors run different numbers of steps or other
    collectives: one would wait in a collective the others never start until the timeout.
    Threads and timeouts may differ per machine and are not compared.
    """
    from gcbench.distributed.launch import RankMismatchError, check_agreement

    agreed: dict[str, Any] = {k: getattr(cfg, k) for k in AGREED_SETTINGS}
    agreed["compressors"] = [s.label for s in specs]
    text = ", ".join(f"{k} {v}" for k, v in agreed.items() if k not in ("compressors", "fault") or v)
    try:
        check_agreement("training settings", agreed, text, group)
    except RankMismatchError as exc:
        raise RankMismatchError(f"{exc} (start every rank with the same gcbench train options)") from None


def _train_torchrun(cfg: TrainConfig, specs: list[Spec], out_dir: Path, task_info: dict[str, Any], progress: Progress) -> TrainOutcome:
    """torchrun mode: this process is one worker; rank 0 writes the results file."""
    torch.set_num_threads(int(cfg.threads))  # type: ignore[arg-type]
    init_from_env("gloo", cfg.timeout_s)  # checked launch variables; a failed rendezvous is one LaunchError line
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=float(cfg.collective_timeout_s)))  # type: ignore[arg-type]
    _check_ranks_agree(cfg, specs, group)
    ctx = WorkerContext(rank, world, group, None)
    cfg = TrainConfig(**{**cfg.to_dict(), "workers": world})
    task = make_task(cfg.task, cfg.seed)
    writer = None
    if rank == 0:
        suite, digest = _suite(cfg, specs, task_info)
        writer = RunWriter(out_dir, suite, digest, None, "cpu", kind="train")
    records: list[dict[str, Any]] = []
    for i, spec in enumerate(specs):
        try:
            summary = train_one(ctx, task, cfg, spec)
            gathered: list[Any] = [None] * world
            dist.all_gather_object(gathered, summary, group=group)
        except Exception as exc:
            if writer is not None:
                writer.add_case(failed_record(spec, f"rank {rank}: {type(exc).__name__}: {_first_line(str(exc))}"))
                writer.finish("failed")
            raise TrainError(f"{spec.label}: rank {rank} failed: {type(exc).__name__}: {_first_line(str(exc))}") from exc
        if writer is not None:
            rec = build_record(spec, gathered, cfg, task_info, records[0] if records else None)
            records.append(rec)
            writer.add_case(rec)
            progress("train", i + 1, len(specs), f"{spec.label} done")
    if writer is not None:
        writer.finish("complete")
    dist.barrier(group=group)
    return TrainOutcome(writer.path if writer else None, records)
