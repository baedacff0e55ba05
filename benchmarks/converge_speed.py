"""Speed and memory of the closed-loop engine (``gcbench converge``): one seed of one compressor, or the default suite.

Run:  python benchmarks/converge_speed.py [--model smallcnn] [--workers 8] [--steps 300] [-c topk] [--threads 2]
      python benchmarks/converge_speed.py --suite      # the bundled suites/converge.toml, whole

One seed: the wall time of :func:`gcbench.converge.engine.run_seed`, split into the workers'
forward/backward passes and the optimizer (what is left), the compressor's exchange
(``exchange_group``, timed around each call) and the evaluations; then the peak resident memory's
growth over the run against a budget of the model, its optimizer state, one gradient per worker and
one compressor state per worker (the residual of error feedback, the largest built-in state: one
float32 copy of the model), the activations of one worker's pass not counted.  The machine's load
average is printed beside the numbers: on a shared machine the times are not a quiet machine's.

Targets (docs/convergence.md): smallcnn, 8 workers, 300 steps, one compressor, one seed under 60 s on a
quiet 2-core machine; the default suite under 10 minutes.  A measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from typing import Any

import torch


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def one_seed(args: argparse.Namespace) -> None:
    from gcbench.compressors import registry
    from gcbench.converge.engine import run_seed
    from gcbench.converge.steps import EngineSettings
    from gcbench.workloads.problems import SeedProblem, make_problem

    problem = make_problem(None, args.model)
    d = problem.defaults
    name, params = registry.parse_spec(args.compressor)
    comp = registry.create(name, **params)
    timers = {"exchange": 0.0, "evaluate": 0.0}
    exchange = comp.exchange_group

    def timed_exchange(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return exchange(*a, **kw)
        finally:
            timers["exchange"] += time.perf_counter() - t

    comp.exchange_group = timed_exchange  # type: ignore[method-assign]
    instance = problem.instance

    def timed_instance(seed: int, workers: int, batch: int | None) -> SeedProblem:
        sp = instance(seed, workers, batch)
        evaluate = sp.evaluate

        def timed_evaluate(m: torch.nn.Module) -> tuple[float, float]:
            t = time.perf_counter()
            try:
                return evaluate(m)
            finally:
                timers["evaluate"] += time.perf_counter() - t

        sp.evaluate = timed_evaluate
        return sp

    problem.instance = timed_instance  # type: ignore[method-assign]
    settings = EngineSettings(workers=args.workers, steps=args.steps, batch=None, optimizer=d.optimizer, lr=d.lr, momentum=d.momentum,
                              weight_decay=0.0, eval_every=max(1, args.steps // 20))
    run_seed(problem, "none", EngineSettings(**{**settings.__dict__, "steps": 1, "eval_every": 1}), 0)  # imports, kernels compiled
    timers.update(exchange=0.0, evaluate=0.0)
    rss0 = _rss_mib()
    print(_load())
    t = time.perf_counter()
    r = run_seed(problem, comp, settings, 0)
    wall = time.perf_counter() - t
    rss1 = _rss_mib()
    print(_load())
    n_params = getattr(problem, "parameters", 0)
    states = 2 if d.optimizer in ("adam", "adamw") else 1
    budget = 4 * n_params * (1 + states + args.workers + args.workers) / 2**20
    compute = wall - timers["exchange"] - timers["evaluate"]
    print(f"{args.model}, {args.workers} workers, {args.steps} steps, {args.compressor}, seed 0, torch threads {torch.get_num_threads()}: "
          f"status {r.status}, final metric {r.curve[-1]['metric']:.4f}")
    print(f"wall {wall:.1f} s ({wall / max(r.steps_run, 1) * 1e3:.0f} ms/step): forward/backward + optimizer {compute:.1f} s, "
          f"exchange {timers['exchange']:.1f} s, evaluations {timers['evaluate']:.1f} s")
    print(f"peak RSS {rss0:.0f} -> {rss1:.0f} MiB (growth {rss1 - rss0:.0f} MiB); budget model + optimizer state + one gradient and "
          f"one compressor state per worker = {budget:.0f} MiB ({n_params:,} parameters), activations not counted")


def suite(args: argparse.Namespace) -> None:
    from gcbench.converge.sweep import load_suite, run_converge, with_overrides

    cfg, _ = load_suite("suites/converge.toml")
    cfg = with_overrides(cfg, threads=args.threads)
    print(_load())
    t = time.perf_counter()
    out = run_converge(cfg, args.out)
    print(f"default suite: {time.perf_counter() - t:.0f} s, {len(out.cases)} cases, results {out.path}")
    print(_load())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smallcnn")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("-c", "--compressor", default="topk")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--suite", action="store_true", help="time the bundled default convergence suite instead")
    ap.add_argument("--out", default="reports/runs")
    args = ap.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    suite(args) if args.suite else one_seed(args)


if __name__ == "__main__":
    main()
