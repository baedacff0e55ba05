"""``gcbench bench``: compress/decompress timed against a memory copy of the same tensor, with a regression gate."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gcbench.cli import options, output
from gcbench.cli.failures import UsageError, user_errors
from gcbench.cli.grammar import choose, compressor_specs, model_arg, single_worker_compressors, size_list_arg, with_plans
from gcbench.cli.output import deprecated, error_line, plain, print_json, progress_bar
from gcbench.cli.preflight import check_device, check_output_dir
from gcbench.core.errors import GcbenchError

if TYPE_CHECKING:
    from gcbench.measure.bench import BenchOutcome

Compressors = Annotated[list[str] | None, typer.Argument(
    help="Compressors to time: name or name:key=value,... like 'threshold:tau=3.29' (default: every registered one).",
    metavar="SPEC")]
Sizes = Annotated[str, typer.Option(metavar="LIST", help="Element counts to sweep, a comma list like 1K,1M,25.6M,100M.")]
Model = Annotated[str | None, options.model(
    "Time a whole step of this model's gradient tensors (a zoo name, `gcbench list models`) "
    "instead of one tensor per size: what a network prediction charges per step.", metavar="NAME")]
Rounds = Annotated[int, options.rounds(
    "Timed rounds per case at least; more (up to 40 or 3 s per kernel) until the median's 95% CI is within ±5%.")]
Warmup = Annotated[int, typer.Option(metavar="INT", help="Untimed warm-up calls.")]
Isolate = Annotated[bool, typer.Option(help="A fresh process per case (allocator state does not leak between cases).")]
Baseline = Annotated[Path | None, options.baseline("PATH", "A stored bench results file: flag compressors that got slower.")]
Threshold = Annotated[float, options.threshold(
    "With --baseline: the least relative change of a ×copy (compress or decompress) that can count; past it, the "
    "processes' test decides (or, one process a side, a change past 2×).")]
Processes = Annotated[int, typer.Option(metavar="N", help=(
    "Time each case in N fresh processes (one pass of the sweep each; N times the time): ×copy is the median of their "
    "medians, and a --baseline comparison tests the processes, so it can call changes smaller than the 2× one process "
    "a side allows.  5 for a regression gate.  It also measures this machine's spread between processes, which "
    "`gcbench compare` and `gcbench run` with results in the same --out then add to their time intervals."))]
FailOnRegression = Annotated[bool, options.fail_on_regression("Exit 1 if any case regressed against --baseline.", negatable=True)]
#: the ranges of a suite's metrics.timing_repeats and metrics.warmup (gcbench.measure.suite.MetricsSpec; a test ties them)
MAX_ROUNDS = 10_000
MAX_WARMUP = 1000


@user_errors
def bench(
    compressors: Compressors = None,
    compressor: Annotated[list[str] | None, options.compressor_option(
        "A compressor to time (repeatable), as a positional SPEC; with --model also plan:FILE.")] = None,
    plan: Annotated[list[str] | None, options.plan(
        "With --model: time a compression plan (TOML, docs/plans.md) on the model's tensors, as -c plan:FILE (repeatable).")]
    = None,
    sizes: Sizes = "25.6M",
    model: Model = None,
    rounds: Rounds = 5,
    repeats: Annotated[int | None, options.repeats("Deprecated spelling of --rounds.", hidden=True)] = None,
    warmup: Warmup = 1,
    threads: Annotated[int, options.threads("torch threads (the targets are defined for 2).")] = 2,
    device: Annotated[str, options.device("cpu, cuda or cuda:N (CUDA events against a device copy; GPU targets).")] = "cpu",
    isolate: Isolate = True,
    processes: Processes = 1,
    baseline: Baseline = None,
    threshold: Threshold = 0.25,
    out_dir: Annotated[Path, options.out_path()] = Path("reports/runs"),
    as_json: Annotated[bool, options.json_flag()] = False,
    quiet: options.Quiet = False,
    fail_on_regression: FailOnRegression = False,
) -> None:
    """Time compress/decompress against a memory copy of the same tensor; print the target table.

    Examples: `gcbench bench`, `gcbench bench topk qsgd --sizes 1M,25.6M --rounds 9`,
    `gcbench bench --model resnet50 -c topk -c powersgd`, `gcbench bench --model resnet50 --plan small.toml -c topk`,
    `gcbench bench topk qsgd --sizes 1M --processes 5 --baseline reports/runs/OLD.json --fail-on-regression`.
    """
    from gcbench.measure.bench import bench_to_file, parse_size
    from gcbench.report.load import LoadedRun
    from gcbench.report.terminal import bench_table
    from gcbench.results.process_spread import measured_line, spread_of

    if repeats is not None:
        deprecated("bench --repeats N", f"--rounds {repeats} (--repeats means fidelity draws in run and compare)")
        rounds = repeats
    if device.strip().lower().partition(":")[0] not in ("cpu", "cuda"):
        device = choose(device, ("cpu", "cuda"), "device")  # an unknown name: exit 2 with a suggestion
    names = compressor_specs(compressors, with_plans(compressor, plan)) or single_worker_compressors()
    size_list = size_list_arg(sizes, parse_size)
    check_bench_options(size_list, sizes, rounds, warmup, threads, device, threshold)
    check_processes(processes, isolate)
    device = device.strip().lower()  # cpu, cuda or cuda:N, checked
    model = _checked_model(model, sizes, names, bool(plan))
    check_output_dir(out_dir, "--out")
    if fail_on_regression and baseline is None:
        raise GcbenchError("--fail-on-regression needs --baseline FILE")
    with progress_bar(not as_json and not quiet) as prog:
        outcome = bench_to_file(names, size_list, out_dir, repeats=rounds, warmup=warmup, threads=threads, device=device,
                                isolate=isolate, baseline=baseline, threshold=threshold, model=model, progress=prog,
                                processes=processes)
    spread = spread_of(outcome.record, outcome.path) if processes > 1 else None
    if as_json:
        print_json({"results": str(outcome.path), "cases": [c.to_json_dict() for c in outcome.record.cases],
                    "process_spread": None if spread is None else spread.to_dict()})
    else:
        if outcome.path is not None:
            output.out.print(bench_table(LoadedRun(outcome.path, outcome.record)))
        plain(f"results: {outcome.path}")
    # notes go to stderr with --json too, as a run's warnings do: what the spread and the verdicts rest on
    notes = [measured_line(spread, out_dir), *(outcome.notes if outcome.compared else ())]
    for note in notes if not quiet else ():
        if note:
            output.err.print(f"note: {escape(note)}", highlight=False)
    _exit_status(outcome, baseline, fail_on_regression)


def _checked_model(model: str | None, sizes: str, names: list[str], plans: bool) -> str | None:
    """The zoo model --model names, checked with the plans against its tensors before any work (None: no model)."""
    model = model_arg(model)  # an unknown zoo name is exit 2 with a suggestion
    if model is None:
        return None
    if sizes != "25.6M":
        raise GcbenchError("--model times a whole step of the model's own tensors; leave out --sizes")
    from gcbench.sources.catalog import check_model

    check_model(model)
    if plans or any(n.startswith("plan:") for n in names):  # its rules against the model's tensors, before any work
        from gcbench.measure.plan_case import check_model_plans

        check_model_plans(names, model)
    return model


def _exit_status(outcome: BenchOutcome, baseline: Path | None, fail_on_regression: bool) -> None:
    """The regressions against --baseline, the gate's reasons and failed cases, each a line; exit 1 when any fails."""
    from gcbench.results.gate import bench_gate

    if outcome.regressions:
        names_txt = ", ".join(escape(c.name) for c in outcome.regressions)
        output.err.print(f"[red]{len(outcome.regressions)} regression(s)[/] against {escape(str(baseline))}: " + names_txt)
    if fail_on_regression and baseline is not None:
        gate = bench_gate(outcome.regressions, outcome.compared, str(baseline))
        for line in gate.reasons:
            error_line(f"regression gate: {line}")
        if gate.fails:
            raise typer.Exit(1)
    if outcome.failed:  # a sweep goes on past a failing case, but the exit status says something failed
        for c in outcome.failed:
            error_line(f"{c.name} @ {c.numel or 0:,}: {_first_line(c.error_text)}")
        output.err.print(f"[red]{len(outcome.failed)} of {len(outcome.record.cases)} case(s) failed[/]", highlight=False)
        raise typer.Exit(1)


def check_processes(processes: int, isolate: bool) -> None:
    """One line for a --processes the sweep cannot honour."""
    from gcbench.measure.bench_processes import MAX_PROCESSES

    if not 1 <= processes <= MAX_PROCESSES:
        raise GcbenchError(f"--processes must be in [1, {MAX_PROCESSES}], got {processes}")
    if processes > 1 and not isolate:
        raise GcbenchError("--processes times each case in fresh processes: leave out --no-isolate")


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else ""


def check_bench_options(sizes: list[int], sizes_text: str, rounds: int, warmup: int, threads: int, device: str,
                        threshold: float) -> None:
    """One line per bad ``bench`` option before any case runs (a sweep of failing cases helps nobody)."""
    problems = []
    if not sizes:
        problems.append(f"--sizes: expected comma-separated element counts like 1K,25.6M, got {sizes_text!r}")
    # a suite's metrics.timing_repeats and warmup ranges: --rounds 10**9 timed one kernel for days
    if not 1 <= rounds <= MAX_ROUNDS:
        problems.append(f"--rounds must be in [1, {MAX_ROUNDS}], got {rounds}")
    if not 0 <= warmup <= MAX_WARMUP:
        problems.append(f"--warmup must be in [0, {MAX_WARMUP}], got {warmup}")
    if not 1 <= threads <= 1024:  # a suite's metrics.threads range: 100000 threads aborted with std::bad_alloc
        problems.append(f"--threads must be in [1, 1024], got {threads}")
    if not 0 <= threshold < float("inf"):
        problems.append(f"--threshold must be a finite number ≥ 0, got {threshold}")
    try:
        check_device(device)  # cuda without CUDA, or cuda:N past the last GPU (cuda:x: a usage error, exit 2)
    except UsageError:
        raise
    except GcbenchError as exc:
        problems.append(str(exc))
    if problems:
        raise GcbenchError("\n".join(problems))
