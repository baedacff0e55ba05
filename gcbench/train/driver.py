"""End-to-end compressed training on ``torch.distributed``: ``gcbench train``.

Trains a real task with N worker processes (gloo on 127.0.0.1) once uncompressed (``none``, the
reference for the accuracy gap) and once per named compressor, exchanging gradients through the
DDP communication hook of :mod:`gcbench.distributed.ddp`.  Per compressor it records the accuracy and loss
after every epoch, the training time to a target accuracy, the step time split into compute,
compress, communicate and decompress, the bytes each worker sent, and the final accuracy gap to
the uncompressed run.  One results file (``kind = "train"``) is written to ``reports/runs/`` and
rewritten after every compressor, so finished compressors survive a later failure.

Tasks (``--task``): ``digits`` (scikit-learn's bundled 8×8 digits, an MLP; the default when scikit-learn
is installed) and ``charlstm`` (the text in ``gcbench/data/``, a character LSTM), in
:mod:`gcbench.workloads.tasks`.  The settings and the compressor list are
:mod:`gcbench.train.config`'s, the results case of each compressor is built by
:mod:`gcbench.train.case`, and the spawned workers are supervised by
:mod:`gcbench.train.workers`; this module runs the training loop and writes the results file.

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
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from gcbench.compressors import registry
from gcbench.core import signals
from gcbench.core.errors import ParamError, TrainError
from gcbench.distributed.launch import init_from_env, launch_env, launched
from gcbench.results.store import RunWriter
from gcbench.train.case import build_record, failed_record
from gcbench.train.config import Fault, TrainConfig
from gcbench.train.plan_cases import check_plans, plan_of
from gcbench.train.prediction import measure_transport
from gcbench.train.rank_devices import agree_on_devices, backend_of, check_local_devices, moved, on_cpu
from gcbench.train.workers import WorkerContext, WorkerGroup, first_line
from gcbench.workloads.specs import PLAN, Spec, parse_compressors, reference_name
from gcbench.workloads.tasks import Task, make_task

Progress = Callable[[str, int, int, str], None]


# ----------------------------------------------------------------------------- one training run (in a worker)


def _param_hash(model: nn.Module) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def task_of(cfg: TrainConfig) -> Task:
    """The task a (resolved) configuration trains: a ``--task`` or a ``--model`` (:mod:`gcbench.train.model_task`)."""
    if cfg.model is not None:
        from gcbench.train.model_task import ModelTask

        return ModelTask(cfg.model, cfg.seed, cfg.batch_size)
    return make_task(cfg.task, cfg.seed)


def _synchronized(device: torch.device) -> float:
    """perf_counter once ``device``'s queued work is done (a GPU step ends when its kernels do)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def train_one(ctx: WorkerContext, task: Task, cfg: TrainConfig, spec: Spec, device: torch.device | None = None) -> dict[str, Any]:
    """Train ``task`` with one compressor on this worker (on ``device``, default the CPU); returns this rank's summary."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.distributed.ddp import register_compressor_hook

    device = device or torch.device("cpu")
    fault = Fault.parse(cfg.fault) if cfg.fault else None
    torch.manual_seed(cfg.seed)  # the same initial model for every compressor
    model = task.build_model().to(device)
    ddp = DDP(model, process_group=ctx.group, device_ids=[device.index] if device.type == "cuda" else None)
    compressor = plan_of(spec) if spec.name == PLAN else registry.create(spec.name, **spec.params)  # a plan: per tensor
    hook = register_compressor_hook(ddp, compressor, seed=cfg.seed, granularity=cfg.granularity, process_group=ctx.group)
    opt = task.optimizer(ddp.parameters(), float(cfg.lr))  # type: ignore[arg-type]  # resolved() filled every default
    curve: list[dict[str, Any]] = []
    steps: list[dict[str, float | None]] = []  # ready_at: None where a bucket has no time
    train_time = 0.0
    diverged = False
    step = 0
    for epoch in range(int(cfg.epochs)):  # type: ignore[arg-type]  # resolved() filled every default
        ddp.train()
        loss_sum, n = 0.0, 0
        for x, y in task.batches(epoch, ctx.rank, ctx.world_size, int(cfg.batch_size or 0)):
            if fault is not None:
                fault.fire(ctx.rank, step, spec.label)
            ctx.begin(step)
            x, y = moved(x, device), moved(y, device)
            t0 = _synchronized(device)
            opt.zero_grad(set_to_none=True)
            loss = task.loss(ddp(x), y)
            loss.backward()
            opt.step()
            dt = _synchronized(device) - t0
            s = hook.stats.steps[-1]
            parts = {k: s.total(k) for k in ("compress_s", "communicate_s", "decompress_s")}
            # the asynchronous hook's parts overlap the backward pass, so the step less all of them is a lower
            # bound of compute (and the network model's compute + parts, which assumes no overlap, an upper bound of the step)
            steps.append({"total_s": dt, **parts, "compute_s": max(0.0, dt - sum(parts.values())),
                          **{k: s.total(k) for k in ("payload_bytes", "sent_bytes", "dense_bytes")}, "ready_at": s.ready_at})
            train_time += dt
            loss_sum += float(loss.detach())
            n += 1
            step += 1
            ctx.beat(step)
        test_loss, acc = task.evaluate(on_cpu(model))
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
        "device": str(device),
        "clock": _clock(),
    }


def _clock() -> str:
    """Which clock this worker's ``ready_at`` times are on: its host and boot (time.monotonic() agrees across the
    processes of one boot of one host, so the workers' times can be held against each other only where these agree)."""
    import socket

    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def _placed(ctx: WorkerContext, cfg: TrainConfig, task: Task) -> tuple[torch.device, dict[str, Any]]:
    """This rank's device, agreed by every rank (over the default gloo group), and the transport measured on it."""
    device = agree_on_devices(cfg.device, ctx.rank, ctx.world_size)
    if device.type == "cuda":  # before the training group's first collective: NCCL binds its communicator to it
        torch.cuda.set_device(device)
    nbytes = 4 * sum(p.numel() for p in task.build_model().parameters())
    return device, measure_transport(ctx.group, device, ctx.world_size, nbytes)


def _train_all(ctx: WorkerContext, cfg_d: dict[str, Any], specs_d: list[dict[str, Any]]) -> None:
    """Worker function: every compressor in turn; rank 0 hands each gathered result over."""
    cfg = TrainConfig(**cfg_d)
    task = task_of(cfg)
    device, transport = _placed(ctx, cfg, task)
    for i, sd in enumerate(specs_d):
        summary = {**train_one(ctx, task, cfg, Spec(**sd), device), "transport": transport}
        gathered: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(gathered, summary, group=ctx.group)
        if ctx.rank == 0:
            ctx.emit(f"case-{i}", gathered)

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
    if launch is None:  # spawned ranks: one GPU each under NCCL, checked before any task or model is built
        check_local_devices(cfg.device, cfg.workers)
    specs = parse_compressors(compressors)
    workers = launch.world_size if launch is not None else cfg.workers
    for s in specs:  # validate every compressor before any process starts
        if s.name == PLAN:  # a plan: checked against the task's model below
            continue
        info = registry.get(s.name)
        registry.create(s.name, **s.params)
        if workers < info.min_workers:
            raise ParamError(f"{s.label} needs at least {info.min_workers} workers")
    task = task_of(cfg)
    task_info = task.describe()  # fails early (e.g. no scikit-learn, a bad factory), in this process
    check_plans(specs, task, workers, int(cfg.epochs or 1), int(cfg.batch_size or 0))  # a plan that cannot run: one line
    if under_torchrun():
        return _train_torchrun(cfg, specs, Path(out_dir), task_info, progress)
    suite, digest = _suite(cfg, specs, task_info)
    with signals.handled():  # SIGTERM like SIGINT: workers stopped, results kept
        return _train_spawned(cfg, specs, Path(out_dir), task_info, suite, digest, progress)


def _train_spawned(cfg: TrainConfig, specs: list[Spec], out_dir: Path, task_info: dict[str, Any], suite: dict[str, Any],
                   digest: str, progress: Progress) -> TrainOutcome:
    """Spawn mode: one worker group per attempt; a failed compressor is recorded and the rest go on."""
    writer = RunWriter(out_dir, suite, digest, None, cfg.device, kind="train", backend=_backend(cfg.device))
    records: list[dict[str, Any]] = []
    pending = list(specs)
    status = "complete"
    try:
        while pending:
            group = WorkerGroup(_train_all, (cfg.to_dict(), [asdict(s) for s in pending]), cfg.workers,
                                collective_timeout_s=float(cfg.collective_timeout_s),  # type: ignore[arg-type]  # resolved() filled every default
                                init_timeout_s=cfg.timeout_s, threads=int(cfg.threads),  # type: ignore[arg-type]  # resolved() filled every default
                                backend=_backend(cfg.device))
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
AGREED_SETTINGS = ("task", "model", "epochs", "batch_size", "lr", "target", "seed", "granularity", "fault")


def _backend(device: str) -> str:
    """The training group's backend for ``--device``: NCCL on GPUs, gloo on the CPU."""
    return backend_of(torch.device(device.strip().lower()))


def _check_ranks_agree(cfg: TrainConfig, specs: list[Spec], group: Any) -> None:
    """Raise on every rank, in one line naming each rank's settings, when torchrun's ranks were started with different options.

    Ranks with other epochs, batch sizes or compressors run different numbers of steps or other
    collectives: one would wait in a collective the others never start until the timeout.
    Threads and timeouts may differ per machine and are not compared.
    """
    from gcbench.distributed.launch import RankMismatchError, check_agreement

    agreed: dict[str, Any] = {k: getattr(cfg, k) for k in AGREED_SETTINGS}
    agreed["compressors"] = [s.label for s in specs]
    text = ", ".join(f"{k} {v}" for k, v in agreed.items() if k not in ("compressors", "fault", "model") or v)
    try:
        check_agreement("training settings", agreed, text, group)
    except RankMismatchError as exc:
        raise RankMismatchError(f"{exc} (start every rank with the same gcbench train options)") from None


def _train_torchrun(cfg: TrainConfig, specs: list[Spec], out_dir: Path, task_info: dict[str, Any], progress: Progress) -> TrainOutcome:
    """torchrun mode: this process is one worker; rank 0 writes the results file."""
    torch.set_num_threads(int(cfg.threads))  # type: ignore[arg-type]  # resolved() filled every default
    init_from_env("gloo", cfg.timeout_s)  # checked launch variables; a failed rendezvous is one LaunchError line
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        device = agree_on_devices(cfg.device, rank, world)  # over the gloo default group, before any NCCL group exists
        if device.type == "cuda":
            torch.cuda.set_device(device)
        group = dist.new_group(backend=backend_of(device), timeout=timedelta(seconds=float(cfg.collective_timeout_s)))  # type: ignore[arg-type]  # resolved() filled every default
        _check_ranks_agree(cfg, specs, group)
    except BaseException:
        # stop gloo's threads before the interpreter exits: left running they made a rank that had printed its one
        # line abort at exit ("terminate called without an active exception", SIGABRT) in one of ~40 suite runs
        dist.destroy_process_group()
        raise
    ctx = WorkerContext(rank, world, group, None)
    cfg = TrainConfig(**{**cfg.to_dict(), "workers": world})
    task = task_of(cfg)
    transport = measure_transport(group, device, world, 4 * sum(p.numel() for p in task.build_model().parameters()))
    writer = None
    if rank == 0:
        suite, digest = _suite(cfg, specs, task_info)
        writer = RunWriter(out_dir, suite, digest, None, str(device), kind="train", backend=backend_of(device))
    records: list[dict[str, Any]] = []
    for i, spec in enumerate(specs):
        try:
            summary = {**train_one(ctx, task, cfg, spec, device), "transport": transport}
            gathered: list[Any] = [None] * world
            dist.all_gather_object(gathered, summary, group=group)
        except Exception as exc:
            if writer is not None:
                writer.add_case(failed_record(spec, f"rank {rank}: {type(exc).__name__}: {first_line(str(exc))}"))
                writer.finish("failed")
            raise TrainError(f"{spec.label}: rank {rank} failed: {type(exc).__name__}: {first_line(str(exc))}") from exc
        if writer is not None:
            rec = build_record(spec, gathered, cfg, task_info, records[0] if records else None)
            records.append(rec)
            writer.add_case(rec)
            progress("train", i + 1, len(specs), f"{spec.label} done")
    if writer is not None:
        writer.finish("complete")
    dist.barrier(group=group)
    return TrainOutcome(writer.path if writer else None, records)
