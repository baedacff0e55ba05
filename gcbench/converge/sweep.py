"""``gcbench converge``: settings, suites, the reference first, every (compressor, seed) run, the results file.

:func:`run_converge` trains the problem once per seed with the uncompressed reference (``none``,
always first) and then with every compressor, and writes one ``kind = "converge"`` results file
through :class:`~gcbench.results.store.RunWriter`, rewritten after every finished (compressor,
seed): an interrupted run (Ctrl-C, SIGTERM) keeps every finished seed and ends ``interrupted``.

Everything the command line can get wrong is refused before the first step (one
:class:`~gcbench.core.errors.GcbenchError` line): zero steps, an unknown optimizer, a compressor
that needs more workers, more workers than a task has batches, a factory whose targets need a loss
it does not give.  A ``--target-value`` the reference never reaches is refused once the
reference's seeds have run (its runs are kept in the file, which ends ``failed``).

A convergence suite is a TOML file with ``kind = "converge"`` and the command's options as keys
(``gcbench/suites/converge.toml`` is the default one); options on the command line override it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from gcbench.compressors import registry
from gcbench.converge import seed_summary
from gcbench.converge.bound_plans import BoundPlan, bind, plan_specs, resolve_relative
from gcbench.converge.build_record import build_case
from gcbench.converge.engine import run_seed
from gcbench.converge.steps import EngineSettings, SeedResult
from gcbench.core import signals
from gcbench.core.errors import GcbenchError, ParamError, UnknownNameError, did_you_mean
from gcbench.core.files import load_user_toml
from gcbench.results.fields import COUNT_MAX
from gcbench.results.store import RunWriter
from gcbench.workloads.problems import OPTIMIZERS, ConvergeError, ModelProblem, Problem, make_problem
from gcbench.workloads.specs import PLAN, Spec, is_plan, parse_compressors, reference_name

#: ``progress(stage, done, total, message)``: stage ``case`` counts finished (compressor, seed) runs, ``step`` a run's steps
Progress = Callable[[str, int, int, str], None]

DEFAULT_COMPRESSORS = ("none", "topk", "topk:error_feedback=true", "signsgd", "efsignsgd", "qsgd", "powersgd")
#: the number of evaluations a run makes when ``eval_every`` is not given
DEFAULT_EVALUATIONS = 20
#: the largest value of each count option, checked before any work: steps, seeds, batch and eval-every are the
#: results schema's own limit (a converge file holding more is refused on write, after all the training), workers
#: and threads the ranges of a measurement suite's (1024 simulated workers, 1024 torch threads; tests tie them)
BOUNDS = {"workers": 1024, "steps": COUNT_MAX, "seeds": COUNT_MAX, "batch": COUNT_MAX, "eval_every": COUNT_MAX, "threads": 1024}


@dataclass(frozen=True)
class ConvergeConfig:
    """The options of one ``gcbench converge`` run (None: the problem's default, see :meth:`resolve`)."""

    task: str | None = None
    model: str | None = None
    compressors: tuple[str, ...] = DEFAULT_COMPRESSORS
    workers: int = 8
    steps: int = 300
    batch: int | None = None
    optimizer: str | None = None
    lr: float | None = None
    momentum: float | None = None
    weight_decay: float = 0.0
    eval_every: int | None = None
    seeds: int = 3
    target_fraction: float | None = None
    target_value: float | None = None
    divergence_factor: float = 10.0
    name: str | None = None
    threads: int | None = None
    device: str | None = None  # "cpu" (the default), "cuda", "cuda:N": where the engine runs
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def check(self) -> None:
        """Refuse a meaningless value, naming the option (:class:`ParamError`)."""
        for key, high in BOUNDS.items():
            v = getattr(self, key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= high):
                raise ParamError(f"{key.replace('_', '-')} must be an integer in [1, {high}], got {v!r}")
        if self.lr is not None and not 0 < self.lr < math.inf:
            raise ParamError(f"lr must be a finite number > 0, got {self.lr}")
        if self.momentum is not None and not 0 <= self.momentum < 1:
            raise ParamError(f"momentum must be in [0, 1), got {self.momentum}")
        if not 0 <= self.weight_decay < math.inf:
            raise ParamError(f"weight-decay must be a finite number >= 0, got {self.weight_decay}")
        if self.target_fraction is not None and self.target_value is not None:
            raise ParamError("give --target (a fraction of the reference's final metric) or --target-value, not both")
        if self.target_fraction is not None and not 0 < self.target_fraction <= 1:
            raise ParamError(f"target must be a fraction in (0, 1] of the reference's final metric, got {self.target_fraction}")
        if self.target_value is not None and not math.isfinite(self.target_value):
            raise ParamError(f"target-value must be a finite number, got {self.target_value}")
        if not 1 < self.divergence_factor < math.inf:
            raise ParamError(f"divergence-factor must be a finite number > 1, got {self.divergence_factor}")
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise UnknownNameError(did_you_mean(self.optimizer, list(OPTIMIZERS), "optimizer"))


SUITE_KEYS = {f.name for f in fields(ConvergeConfig)} - {"extra"} | {"kind", "description", "target"}


def load_suite(path: str | Path) -> tuple[ConvergeConfig, dict[str, Any]]:
    """A convergence suite file (``kind = "converge"``): its options as a config, and the file's table (for the record)."""
    from gcbench.measure.suite import find_suite

    p = find_suite(path)
    data = load_user_toml(p, "suite file")
    if data.get("kind") != "converge":
        raise GcbenchError(f"{p}: not a convergence suite (it needs kind = \"converge\"; run a measurement suite with gcbench run)")
    unknown = sorted(set(data) - SUITE_KEYS)
    if unknown:
        raise GcbenchError(f"{p}: unknown key {unknown[0]!r} (keys: {', '.join(sorted(SUITE_KEYS))})")
    values = {k: v for k, v in data.items() if k not in ("kind", "description", "target")}
    if "target" in data:
        values["target_fraction"] = data["target"]
    if "compressors" in values:
        if not isinstance(values["compressors"], list) or not all(isinstance(c, str) for c in values["compressors"]):
            raise GcbenchError(f"{p}: compressors must be a list of compressor specs (strings)")
        values["compressors"] = tuple(resolve_relative(c, p.parent) if is_plan(c) else c for c in values["compressors"])
    for key, v in values.items():
        want = {"task": str, "model": str, "optimizer": str, "name": str, "device": str, "compressors": tuple}.get(key, (int, float))
        if isinstance(v, bool) or not isinstance(v, want):
            raise GcbenchError(f"{p}: {key} has the wrong type ({type(v).__name__})")
    cfg = ConvergeConfig(**values)
    return cfg, data


@dataclass
class ConvergeOutcome:
    """What :func:`run_converge` returns: the results file and its cases (JSON-ready dicts)."""

    path: Path | None
    cases: list[dict[str, Any]]
    target: float | None
    settings: dict[str, Any]
    threads: ThreadChoice | None = None


def _specs(cfg: ConvergeConfig) -> list[Spec]:
    """The reference, the compressors in the order given, then the plans (``plan:FILE``), each checked on its own."""
    specs = parse_compressors([c for c in cfg.compressors if not is_plan(c)] or [reference_name()])
    for s in specs:
        info = registry.get(s.name)
        registry.create(s.name, **s.params)  # a bad parameter fails here, in one line
        if cfg.workers < info.min_workers:
            raise ParamError(f"{s.label} needs at least {info.min_workers} workers, got --workers {cfg.workers}")
    return specs + plan_specs([c for c in cfg.compressors if is_plan(c)])


@dataclass
class Probe:
    """Seed 0's model and worker 0's first batch after :func:`_probe` ran them: what :func:`choose_threads` weighs."""

    flops: float | None  # one forward pass (None where torch's counter cannot count it)
    model: Any
    inputs: Any
    targets: Any
    loss: Callable[[Any, Any], Any]

    def same_bits(self, a: int, b: int) -> bool:
        """Whether the loss and every gradient of one worker's pass are bit-identical on ``a`` and on ``b`` torch threads.

        The pass is the engine's (a convolutional model in channels-last memory, dropout seeded the
        same), so a difference here is one the run's numbers would show.
        """
        import torch

        model, x = self.model, self.inputs
        if any(isinstance(m, torch.nn.Conv2d) for m in model.modules()):
            model = model.to(memory_format=torch.channels_last)
            if isinstance(x, torch.Tensor) and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
        params = [p for p in model.parameters() if p.requires_grad]
        before = torch.get_num_threads()
        seen: list[list[bytes]] = []
        try:
            for n in (a, b):
                torch.set_num_threads(n)
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(0)
                    loss = self.loss(model(x), self.targets)
                    grads = torch.autograd.grad(loss, params, allow_unused=True)
                seen.append([t.detach().cpu().numpy().tobytes() for t in (loss, *grads) if t is not None])
        finally:
            torch.set_num_threads(before)
        return seen[0] == seen[1]


def _probe(problem: Problem, s: EngineSettings) -> Probe:
    """Build seed 0's problem and run one worker's forward pass and loss: a bad factory, a forward that fails on its own
    batch, a model with nothing to train or too few batches fail here, in one line, before any run.

    Returns the model, the batch and the FLOPs of that forward pass, for :func:`choose_threads`.
    """
    sp = problem.instance(0, s.workers, s.batch)
    user = bool(getattr(problem, "user", False))
    label = f"model {problem.spec!r}" if user else problem.spec
    try:
        batches = next(sp.batches)
    except StopIteration:
        raise ConvergeError(f"{problem.spec}: no batches for {s.workers} workers") from None
    if not any(p.requires_grad for p in sp.model.parameters()):
        raise ConvergeError(f"{label} has no trainable parameters (none with requires_grad): there is nothing to train "
                            "or to compress")
    x, y = batches[0]
    try:
        outputs = sp.model(x)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        if not user:
            raise  # a bundled model failing on its own batches is gcbench's bug: it keeps its traceback
        from gcbench.sources.zoo import user_code_error

        raise user_code_error(problem.spec, "the forward pass on make_batch(0, 0)", exc) from exc
    loss = sp.loss(outputs, y)
    if not hasattr(loss, "backward") or getattr(loss, "numel", lambda: 0)() != 1:
        raise ConvergeError(f"{label}: the loss must be a scalar tensor, got {type(loss).__name__}")
    if not loss.requires_grad:
        raise ConvergeError(f"{label}: the loss does not depend on any trainable parameter (it has no gradient), so "
                            "there is nothing to train")
    return Probe(_forward_flops(sp.model, x), sp.model, x, y, sp.loss)


def _forward_flops(model: Any, x: Any) -> float | None:
    """The FLOPs torch counts for one forward pass of ``model`` on ``x`` (matrix products and convolutions); None if
    the count fails (an operator the counter cannot take: the thread choice then treats the model as large)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    model.eval()  # no batch-norm statistics updated, no dropout drawn: the count leaves the model as it was
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(x)
        return float(counter.get_total_flops())
    except Exception:  # counting is an estimate for a speed choice: never a reason to fail the run
        return None
    finally:
        model.train(was_training)


def resolve(cfg: ConvergeConfig) -> tuple[Problem, EngineSettings, list[Spec], dict[str, Any]]:
    """Check ``cfg``, build the problem and fill its defaults: the engine's settings, the compressors and the record's settings."""
    problem, engine, specs, settings, _, _ = _resolve(cfg)
    return problem, engine, specs, settings


def _resolve(cfg: ConvergeConfig) -> tuple[Problem, EngineSettings, list[Spec], dict[str, Any], Probe, dict[str, BoundPlan]]:
    """:func:`resolve`, what :func:`_probe` ran (for the thread count) and the plans matched to the model."""
    cfg.check()
    specs = _specs(cfg)
    problem = make_problem(cfg.task, cfg.model, cfg.batch)
    d = problem.defaults
    optimizer = cfg.optimizer or d.optimizer
    if cfg.momentum is not None and optimizer != "sgd":
        raise ParamError(f"--momentum applies to sgd; {optimizer} keeps its own moment estimates (betas)")
    momentum = cfg.momentum if cfg.momentum is not None else (d.momentum if optimizer == d.optimizer else None)
    if optimizer == "sgd" and momentum is None:
        momentum = 0.9
    eval_every = cfg.eval_every or max(1, cfg.steps // DEFAULT_EVALUATIONS)
    engine = EngineSettings(workers=cfg.workers, steps=cfg.steps, batch=cfg.batch, optimizer=optimizer, lr=float(cfg.lr or d.lr),
                            momentum=momentum if optimizer == "sgd" else None, weight_decay=float(cfg.weight_decay),
                            eval_every=min(eval_every, cfg.steps), divergence_factor=float(cfg.divergence_factor),
                            device=cfg.device or "cpu")
    probe = _probe(problem, engine)
    plans = bind(specs, probe.model, cfg.workers, cfg.steps)  # a rule that matches no tensor fails here, before any run
    task = f"zoo:{problem.spec}" if isinstance(problem, ModelProblem) and not problem.user and not problem.hf else problem.spec
    fraction = None if cfg.target_value is not None else (cfg.target_fraction or seed_summary.DEFAULT_TARGET_FRACTION)
    settings: dict[str, Any] = {
        "task": task, "dataset": problem.dataset, "metric": problem.metric, "metric_direction": "higher",
        "workers": cfg.workers, "steps": cfg.steps, "batch_per_worker": cfg.batch or d.batch, "optimizer": optimizer,
        "lr": engine.lr, "momentum": engine.momentum, "weight_decay": engine.weight_decay, "eval_every": engine.eval_every,
        "seeds": list(range(cfg.seeds)), "target_rule": "value" if cfg.target_value is not None else "fraction",
        "target_fraction": fraction, "target": cfg.target_value, "divergence_factor": engine.divergence_factor,
        # added to the schema's fields: how the units were laid out (see gcbench/converge/engine.py)
        "granularity": "layer", "unit_layout": "ddp buckets (as gcbench train --granularity layer)",
        "device": engine.device,
    }
    return problem, engine, specs, settings, probe, plans


#: a worker's forward pass under this many FLOPs runs on one torch thread whatever the machine (see :func:`choose_threads`)
SMALL_PASS_FLOPS = 10e6
#: the shortest window over which other processes' CPU use is measured before the threads are chosen
LOAD_WINDOW_S = 0.25


@dataclass(frozen=True)
class ThreadChoice:
    """How many torch threads a run uses, and why (the results file's ``environment.torch_threads`` and ``threads_rule``)."""

    threads: int
    rule: str
    #: fewer threads would be faster on the machine as it is, but would change the run's bits (the command line says so)
    held_for_bits: bool = False


def choose_threads(flops: float | None, cores: int, others: float | None, default: int,
                   same_bits: Callable[[int, int], bool] | None = None) -> ThreadChoice:
    """The torch threads for a run whose workers' forward pass is ``flops``, on ``cores`` cores of which ``others`` are
    busy with other processes, ``default`` being torch's own count (OMP_NUM_THREADS, else the cores).

    Intra-op threads meet at a barrier after every operator; a thread whose core another process
    holds makes the others spin until the scheduler gives it one.  A forward pass of a few MFLOP is
    a handful of sub-millisecond operators, so a second thread can save at most microseconds a pass
    and, under load, costs milliseconds at every barrier (the digits MLP, 3.2 MFLOP: 0.4 ms a pass on
    one thread, 400 ms on two with every core busy): below :data:`SMALL_PASS_FLOPS` the run takes
    one thread, whatever the load, and its numbers are those of ``--threads 1``.

    A larger model gets the cores no other process is using (rounded; at least one, at most
    ``default``), but only where that cannot change its numbers: torch's matrix products and
    convolutions may sum in another order on another thread count, so a load-dependent count would
    make the same command give other bits on a busy machine.  ``same_bits(n, default)`` (one
    worker's pass run on both, :meth:`Probe.same_bits`) decides; where the bits differ the run keeps
    ``default`` and the rule says so (``--threads`` pins any count).
    """
    if flops is not None and flops < SMALL_PASS_FLOPS:
        return ThreadChoice(1, f"auto: 1 thread, a worker's forward pass being {_flops_text(flops)} "
                               f"(under {_flops_text(SMALL_PASS_FLOPS)} one thread is used whatever the load)")
    free = float(cores) if others is None else cores - others
    n = max(1, min(default, cores, math.floor(free + 0.5)))
    size = "an uncounted" if flops is None else f"a {_flops_text(flops)}"
    load = "the load unknown" if others is None else f"other processes' load {others:.2g}"
    if n < default and same_bits is not None and not same_bits(n, default):
        return ThreadChoice(default, f"auto: {default} threads (torch's count) for {size} forward pass, {cores} cores, {load}: "
                                     f"this model's gradients differ in rounding between {n} and {default} threads, so the "
                                     f"count does not follow the load (--threads {n} is faster now, with other bits)",
                           held_for_bits=True)
    return ThreadChoice(n, f"auto: {n} thread{'s' if n > 1 else ''} for {size} forward pass, {cores} cores, {load}")


def _flops_text(flops: float) -> str:
    """``3.23 MFLOP``, ``694 MFLOP``, ``80 FLOP``: three significant digits in the largest unit below the count."""
    for unit, scale in (("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.3g} FLOP"


def machine_load(meter: Any, since: float) -> tuple[int, float | None]:
    """The cores this process may run on, and how many cores' worth of work other processes are doing now.

    The work is the larger of the 1-minute load average and other processes' share of the CPU since
    ``since`` (``meter``: a started :class:`~gcbench.measure.timing.CpuMeter`, over at least
    :data:`LOAD_WINDOW_S`): the average lags a load that has just started by a minute, the window
    misses one that pauses; too few threads cost at most the cores' factor, too many far more.
    """
    import os
    import time

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    wait = LOAD_WINDOW_S - (time.perf_counter() - since)
    if wait > 0:
        time.sleep(wait)
    seen: list[float] = []
    share = meter.share()
    if share is not None:
        seen.append(share * (os.cpu_count() or cores))
    try:
        seen.append(os.getloadavg()[0])
    except (AttributeError, OSError):
        pass
    return cores, (max(seen) if seen else None)


def _noop(stage: str, done: int, total: int, message: str) -> None:
    pass


def run_converge(cfg: ConvergeConfig, out_dir: Path | str = "reports/runs", progress: Progress | None = None,
                 suite_path: str | None = None) -> ConvergeOutcome:
    """Run the reference and every compressor over every seed; write and return the results (see the module docstring)."""
    import time

    import torch

    from gcbench.measure.timing import CpuMeter

    progress = progress or _noop
    meter, since = CpuMeter().start(), time.perf_counter()
    problem, engine, specs, settings, probe, plans = _resolve(cfg)
    before = torch.get_num_threads()
    if cfg.threads is not None:
        choice = ThreadChoice(cfg.threads, f"given: threads = {cfg.threads}")
    else:
        choice = choose_threads(probe.flops, *machine_load(meter, since), default=before, same_bits=probe.same_bits)
    del probe
    torch.set_num_threads(choice.threads)
    try:
        return _run(cfg, problem, engine, specs, settings, choice, out_dir, progress, suite_path, plans)
    finally:
        torch.set_num_threads(before)  # a library caller gets its own thread count back


def _run(cfg: ConvergeConfig, problem: Problem, engine: EngineSettings, specs: list[Spec], settings: dict[str, Any],
         choice: ThreadChoice, out_dir: Path | str, progress: Progress, suite_path: str | None,
         plans: dict[str, BoundPlan]) -> ConvergeOutcome:
    """:func:`run_converge` once the problem is built and the threads are set."""
    parameters = getattr(problem, "parameters", None)
    suite = {"name": cfg.name or f"converge-{settings['task']}", "kind": "converge", "description": cfg.extra.get("description"),
             "config": {k: v for k, v in asdict(cfg).items() if k != "extra"}, "task": problem.describe(),
             "compressors": [s.label for s in specs]}
    if plans:  # the plans' contents, not only their files' names, decide the run
        suite["plans"] = [b.plan.describe() for b in plans.values()]
    digest = hashlib.sha256(json.dumps(suite, sort_keys=True, default=str).encode()).hexdigest()
    writer = RunWriter(Path(out_dir), suite, digest, suite_path, engine.device, kind="converge")
    # the count in force (the writer read torch's) and why: a timing is only comparable with its thread count
    writer.record.environment.torch_threads = choice.threads  # type: ignore[union-attr]  # the writer made the environment
    writer.record.environment.threads_rule = choice.rule  # type: ignore[union-attr]  # the writer made it; an extra field
    seeds = settings["seeds"]
    total = len(specs) * len(seeds)
    target: float | None = settings["target"]
    reference_finals: dict[int, float] = {}
    cases: list[dict[str, Any]] = []
    done = 0
    threads = f"{choice.threads} thread{'s' if choice.threads > 1 else ''}"
    progress("case", 0, total, f"{specs[0].label} seed {seeds[0]} ({threads})")
    where = "before the first seed"
    try:
        for index, spec in enumerate(specs):
            is_ref = index == 0 and spec.name == reference_name() and not spec.params
            results: list[SeedResult] = []
            bound = plans[spec.label].as_tuple() if spec.label in plans else None
            for seed in seeds:
                where = f"{spec.label} seed {seed}"
                r = run_seed(problem, spec.params["plan"] if spec.name == PLAN else spec.label, engine, seed,
                             lambda step, steps, where=where: progress("step", step, steps, f"{where} ({threads})"))  # type: ignore[misc]  # a default binds where
                results.append(r)
                done += 1
                case = build_case(spec.label, {**settings, "target": target}, results, target, reference_finals, is_ref, parameters,
                                  bound)
                if len(results) == 1:
                    writer.add_case(case)
                    cases.append(case)
                else:
                    writer.replace_cases({len(cases) - 1: case})
                    cases[-1] = case
                progress("case", done, total, f"{where}: {r.status}")
            if is_ref:
                target = _target(spec.label, results, settings, writer)
                settings["target"] = target
                reference_finals = {r.seed: r.final["metric"] for r in results if r.final is not None}
                case = build_case(spec.label, settings, results, target, None, True, parameters)
                writer.replace_cases({0: case})
                cases[0] = case
    except KeyboardInterrupt:
        with signals.deferred():
            writer.finish("interrupted")
        raise
    except BaseException as exc:  # whatever stopped the run, its file says so: never left "running" for a reader to trust
        if writer.record.status == "running":
            with signals.deferred():
                writer.finish("failed")
        if isinstance(exc, Exception):
            raise
        # a SystemExit (or another BaseException) from code the run called is that code's error, not a quiet exit
        text = str(exc).strip().splitlines()
        kept = f"; the finished seeds are in {writer.path}" if writer.path is not None else ""
        raise ConvergeError(f"{where}: {type(exc).__name__}{': ' + text[0] if text else ''} stopped the run{kept}") from exc
    failed = any(c["status"] != "ok" or c["convergence"]["summary"].get("failed") for c in cases)
    with signals.deferred():
        writer.finish("complete-with-errors" if failed else "complete")
    return ConvergeOutcome(writer.path, cases, target, settings, choice)


def _target(label: str, results: Sequence[SeedResult], settings: dict[str, Any], writer: RunWriter) -> float:
    """The metric to reach, from the reference's seeds; a target it never reaches (or no finished seed) ends the run."""
    finals = [r.final["metric"] for r in results if r.final is not None]
    if settings["target_rule"] == "value":
        target = float(settings["target"])
        best = seed_summary.best_metric([r.curve for r in results if r.status != "error"])
        if best is None or best < target:
            with signals.deferred():
                writer.finish("failed")
            seen = "no evaluation" if best is None else f"its best over {len(results)} seeds is {best:.4g}"
            raise ConvergeError(f"--target-value {target:g} is never reached by the reference {label} within {settings['steps']} "
                                f"steps ({seen}); lower it, or give --target as a fraction")
        return target
    if not finals:
        with signals.deferred():
            writer.finish("failed")
        reasons = sorted({r.error or r.diverged_reason or r.status for r in results})
        # a lower rate cures a divergence, not an error (a model that cannot run would still not run)
        hint = "lower --lr or check the problem" if all(r.status == "diverged" for r in results) else "fix the error"
        raise ConvergeError(f"the reference {label} finished no seed ({'; '.join(str(x) for x in reasons)}), so there is no "
                            f"target; {hint}")
    return seed_summary.target_from_fraction(sum(finals) / len(finals), float(settings["target_fraction"]))


def with_overrides(base: ConvergeConfig, **given: Any) -> ConvergeConfig:
    """``base`` with every option that was given (not None) replaced."""
    return replace(base, **{k: v for k, v in given.items() if v is not None})
