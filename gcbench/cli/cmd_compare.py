"""``gcbench compare``: two or more compressors head to head on the same gradients, a verdict for each pair."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gcbench.cli import options, output
from gcbench.cli.failures import UsageError, user_errors
from gcbench.cli.grammar import case_spec, choose, compressor_specs, model_arg, suite_choices, with_plans
from gcbench.cli.output import deprecated, plain, print_json, progress_bar
from gcbench.cli.preflight import check_output_dir, check_suite
from gcbench.core.errors import GcbenchError

if TYPE_CHECKING:
    from gcbench.measure.runner import RunOutcome
    from gcbench.results.record import RunRecord

Compressors = Annotated[list[str] | None, typer.Argument(
    help="Two or more compressors (one is an error: use `gcbench run -c`), e.g. dgc sdagc 'topk:density=0.001'.", metavar="SPEC")]
Model = Annotated[str | None, options.model(
    "Live gradients of this zoo model, an 'hf:NAME[:key=value,...]' Hugging Face model, or "
    "package.module:factory.")]
Shape = Annotated[str | None, typer.Option(metavar="SHAPE", help="Synthetic tensor shape, e.g. 1000x1000 (default when no model/trace).")]
Distribution = Annotated[str, typer.Option(metavar="NAME", help="Synthetic distribution: normal, laplace, student-t, sparse or lowrank.")]
TimingRepeats = Annotated[int | None, typer.Option("--timing-repeats", metavar="INT", hidden=True, help="Deprecated spelling of --rounds.")]
Momentum = Annotated[float | None, typer.Option(metavar="FLOAT", help=(
    "Momentum of the reference optimizer (SGD) whose dense update every case is measured against; default: that of a "
    "compared compressor that applies momentum itself (DGC, SDAGC: 0.9), else 0 (plain SGD)."))]
Sweep = Annotated[bool, typer.Option("--sweep", help=(
    "Also run each compared compressor whose card has a density parameter at densities 0.1, 0.03, 0.01, 0.003 and 0.001 "
    "(labels like topk@0.01), so the verdict can say how many bytes each needs at equal delivered update."))]
CompareConvergence = Annotated[Path | None, options.convergence(
    "A results file of `gcbench converge` on the same model: the recommendation is "
    "held to it (a compressor that reached the target in every seed is recommendable whatever its open-loop fraction; "
    "one that did not never is). Default: the newest such file in --out, named in the sentence.")]


@user_errors
def compare(
    compressors: Compressors = None,
    compressor: Annotated[list[str] | None, options.compressor_option(
        "One more compressor to compare (repeatable), as a positional SPEC, or plan:FILE (a compression plan).")] = None,
    plan: Annotated[list[str] | None, options.plan(
        "A compression plan (TOML, docs/plans.md) to compare (repeatable), as -c plan:FILE.")] = None,
    model: Model = None,
    trace: Annotated[str | None, options.trace("Replay a recorded trace folder.")] = None,
    shape: Shape = None,
    distribution: Distribution = "normal",
    workers: Annotated[int | None, options.workers("Workers (default 4 live, 2 synthetic, all of a trace).")] = None,
    steps: Annotated[int | None, options.steps("Steps (default 10, all of a trace); ranking error feedback needs 10+.")] = None,
    repeats: Annotated[int, options.repeats("Fidelity draws: compressions per tensor for stochastic compressors.")] = 8,
    rounds: Annotated[int, options.rounds("Timed rounds per case, at least (more while the 3 s budget lasts).")] = 7,
    timing_repeats: TimingRepeats = None,
    granularity: Annotated[str, options.granularity("layer, bucket or model.")] = "layer",
    seed: Annotated[int, options.seed("Seed.")] = 0,
    device: Annotated[str, options.device("cpu, cuda or auto.")] = "cpu",
    momentum: Momentum = None,
    loop: options.Loop = None,
    out_dir: Annotated[Path, options.out_path()] = Path("reports/runs"),
    as_json: Annotated[bool, options.json_flag()] = False,
    quiet: options.Quiet = False,
    force: Annotated[bool, options.force(
        "Run even when the estimated memory exceeds this machine's (a warning instead of the error).")] = False,
    sweep: Sweep = False,
    convergence: CompareConvergence = None,
) -> None:
    """Run two or more compressors head to head on the same gradients: a verdict for each pair, then the numbers.

    The verdict says, for each pair at its configured settings, which sends fewer bytes (exact), which delivers more of
    the suite's dense update over the stream (95% CI over workers) and which compresses faster as ×copy (bootstrap CI),
    or that there is no significant difference or nothing to conclude; "at equal delivered update" only with --sweep.

    --json prints one object with snake_case keys: results (the results file), source, reference (the common
    reference of the stream), cases (labels, the order of every per-case list), failed ([{label, error}]), summary (one
    line per pair), baselines ([{label, payload_bytes, dense_bytes, vs_fp32, vs_bf16, larger_than_bf16}]: each payload
    against the fp32 gradient and a bf16 all-reduce's), verdicts ([{a, b, summary, axes: [{axis:
    bytes|delivered|time|equal_delivered, status, better, estimate, lo, hi, method, text, short}]}]), rows ({metric_name:
    {higher_is_better, unit, values, best, not_significantly_different_from_best, ...}}: the common-reference table),
    fidelity ({references, rows}: the one-shot metrics, each case against its own reference), recommendation (the sentence,
    held to the closed loop where a convergence file covers a case), convergence (that file, or null) and, with --sweep,
    sweep ([{label, compressor, density, bytes_per_step, delivered, enough_steps, status}]).

    Examples: `gcbench compare dgc sdagc --model resnet50`, `gcbench compare topk randomk -c 'topk:density=0.1' --sweep`,
    `gcbench compare qsgd terngrad --shape 4096x1024 --distribution laplace --json`,
    `gcbench compare topk:density=0.01,error_feedback=true --plan small.toml --model digits_cnn` (a plan's rules are
    measured; its warm-up and local_steps apply in converge and train).
    """
    from gcbench.measure.runner import own_momentum, run_suite
    from gcbench.measure.suite_options import compare_suite
    from gcbench.results.verdict import sweep_entries

    given = compressor_specs(compressors, with_plans(compressor, plan))
    if len(given) < 2:
        raise UsageError(f"compare needs two or more compressors, got {len(given)}; to measure one, use gcbench run -c SPEC")
    if timing_repeats is not None:
        deprecated("compare --timing-repeats N", f"--rounds {timing_repeats}")
        rounds = timing_repeats
    granularity, device, distribution, model, loop = _checked(granularity, device, distribution, model, loop, workers, steps)
    check_output_dir(out_dir, "--out")
    conv = _convergence_of(model, convergence, out_dir)  # read first: a bad file is one line before minutes of work
    specs = [case_spec(c) for c in given]  # a plan is ("plan", its table): neither swept nor asked for its momentum
    single = [s for s in specs if s[0] != "plan"]
    extra = sweep_entries(single) if sweep else []  # the density sweep's cases, labelled name@density
    suite = compare_suite(specs, extra=extra, trace=trace, model=model, shape=shape, distribution=distribution, workers=workers,
                          steps=steps, repeats=repeats, rounds=rounds, granularity=granularity, seed=seed, device=device,
                          momentum=own_momentum(single) if momentum is None else momentum, loop=loop)
    check_suite(suite, "<compare>", force)
    with progress_bar(not quiet and not as_json) as prog:
        outcome = run_suite(suite, out_dir, prog, kind="compare")
    _show(outcome, {e["label"] for e in extra}, sweep, conv, model, granularity, as_json)
    if outcome.failed:
        raise typer.Exit(1)


def _checked(granularity: str, device: str, distribution: str, model: str | None, loop: str | None, workers: int | None,
             steps: int | None) -> tuple[str, str, str, str | None, str | None]:
    """The options as compare runs them (a choice matched, the model named), or one line on the first that is wrong."""
    granularity = choose(granularity, suite_choices("granularity"), "granularity")
    device = choose(device, suite_choices("device"), "device")
    distribution = choose(distribution, suite_choices("distribution"), "distribution")
    model = model_arg(model)
    loop = None if loop is None else choose(loop, ["open", "closed"], "loop")
    for option, value in (("--workers", workers), ("--steps", steps)):
        if value is not None and value < 1:  # 0 would otherwise mean "the default" silently
            raise GcbenchError(f"{option} must be at least 1, got {value}")
    return granularity, device, distribution, model, loop


def _show(outcome: RunOutcome, swept: set[str], sweep: bool, conv: tuple[RunRecord, str] | None, model: str | None,
          granularity: str, as_json: bool) -> None:
    """The head-to-head of a finished run (the swept cases apart), held to the convergence file where there is one."""
    from gcbench.report.terminal import head_to_head_output
    from gcbench.results.head_to_head import compare_json
    from gcbench.results.parse import as_cases
    from gcbench.results.verdict import verdicts

    cases = [c for c in as_cases(outcome.records) if c.label not in swept]
    sweep_cases = [c for c in as_cases(outcome.records) if c.label in swept] if sweep else None
    closed = None
    if conv is not None and model is not None:
        from gcbench.predict.inputs import closed_evidence

        closed = closed_evidence(conv[0], model, conv[1], [c.label for c in cases])
    if as_json:
        from gcbench.results.recommend import recommend

        d = compare_json(cases, str(outcome.path), verdicts(cases, sweep_cases), sweep_cases)
        d["recommendation"] = recommend(cases[0].source_label, cases, closed).sentence() if cases else None
        d["convergence"] = closed.origin if closed is not None else None
        print_json(d)
    else:
        for item in head_to_head_output(cases, granularity, sweep_cases, closed):
            output.out.print(item)
        plain(f"results: {outcome.path}")


def _convergence_of(model: str | None, given: Path | None, runs_dir: Path) -> tuple[RunRecord, str] | None:
    """(record, how it is named) of the convergence file a compare's recommendation is held to: the one given (refused in
    one line when it is not a convergence run of ``model``), else the newest of ``model`` in ``runs_dir``, else None."""
    from gcbench.predict.accuracy import read_convergence
    from gcbench.predict.inputs import find_convergence
    from gcbench.results.store import load_run

    if given is not None:
        if model is None:
            raise GcbenchError("--convergence holds a model's recommendation to its closed loop: give --model NAME too")
        record = load_run(given)
        read_convergence(record, model, str(given))
        return record, str(given)
    found = find_convergence(model, runs_dir) if model is not None else None
    return (found[0], f"{found[1]}, the newest convergence file of {model} in {runs_dir}") if found is not None else None
