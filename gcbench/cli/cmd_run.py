"""``gcbench run``: a benchmark suite, with the command line's overrides, into one results file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from gcbench.cli import options, output
from gcbench.cli.failures import user_errors
from gcbench.cli.grammar import case_spec, choose, compressor_specs, model_arg, suite_arg, suite_choices, with_plans
from gcbench.cli.output import plain, print_json, progress_bar, warn
from gcbench.cli.preflight import check_output_dir, check_suite

if TYPE_CHECKING:
    from gcbench.measure.runner import RunOutcome

SuiteArg = Annotated[str | None, typer.Argument(help="Suite file or bundled suite name (default: suites/quick.toml).", metavar="SUITE")]
Repeats = Annotated[int | None, options.repeats(
    "Fidelity draws: compressions per tensor for stochastic compressors (the suite's metrics.repeats).")]
Model = Annotated[str | None, options.model(
    "Replace the suite's sources with live gradients of a zoo model, a Hugging Face model 'hf:NAME[:key=value,...]' "
    "(gpt2, bert, llama, vit; e.g. hf:gpt2:layers=2), or your own package.module:factory (named here, it is your "
    "choice: no --trust-code needed).")]
TrustCode = Annotated[bool, options.trust_code(
    "Allow the suite file to import and run the package.module:factory models it names (only if you trust the file). Zoo models need "
    "no opt-in.")]
BucketMb = Annotated[float | None, typer.Option(metavar="FLOAT", help="Bucket size in MiB for granularity=bucket.")]
NoTiming = Annotated[bool, typer.Option("--no-timing", help="Skip compress/decompress timing.")]


@user_errors
def run(
    suite: SuiteArg = None,
    out_dir: Annotated[Path, options.out_path()] = Path("reports/runs"),
    seed: Annotated[int | None, options.seed("Override the suite's seed.")] = None,
    device: Annotated[str | None, options.device("cpu, cuda or auto.")] = None,
    repeats: Repeats = None,
    trace: Annotated[str | None, options.trace("Replace the suite's sources with a recorded trace folder.")] = None,
    model: Model = None,
    trust_code: TrustCode = False,
    workers: Annotated[int | None, options.workers("Override the number of workers.")] = None,
    steps: Annotated[int | None, options.steps("Override the number of steps.")] = None,
    granularity: Annotated[str | None, options.granularity("layer, bucket or model.")] = None,
    bucket_mb: BucketMb = None,
    loop: options.Loop = None,
    compressor: Annotated[list[str] | None, options.compressor_option(
        "Run this compressor instead of the suite's (repeatable): name or name:key=value,..., or plan:FILE (a compression "
        "plan: each tensor by its rule's compressor).")] = None,
    plan: Annotated[list[str] | None, options.plan(
        "Run this compression plan (TOML, docs/plans.md) instead of the suite's compressors, as -c plan:FILE (repeatable).")]
    = None,
    no_timing: NoTiming = False,
    as_json: Annotated[bool, options.json_flag("Print the results file's path and cases as JSON.")] = False,
    quiet: options.Quiet = False,
    force: Annotated[bool, options.force(
        "Run even when the suite's estimated memory exceeds this machine's (a warning instead of the error).")]
    = False,
) -> None:
    """Run a benchmark suite and write one results file to reports/runs/.

    Examples: `gcbench run`, `gcbench run suites/cnn.toml`, `gcbench run quick -c dgc -c topk:density=0.01 --steps 20`,
    `gcbench run quick --model resnet18 --device auto --json`,
    `gcbench run quick --model digits_cnn --plan small.toml -c topk:density=0.01`.
    A plan's rules are measured; its warm-up and local_steps apply in converge and train.
    """
    from gcbench.measure.runner import run_suite
    from gcbench.measure.suite import duplicate_configs, find_suite, load_suite, suite_label
    from gcbench.measure.suite_checks import require_trusted_code
    from gcbench.measure.suite_options import apply_overrides
    from gcbench.results.parse import as_cases

    suite, model = suite_arg(suite), model_arg(model)
    device = None if device is None else choose(device, suite_choices("device"), "device")
    granularity = None if granularity is None else choose(granularity, suite_choices("granularity"), "granularity")
    loop = None if loop is None else choose(loop, ["open", "closed"], "loop")
    specs = [case_spec(c) for c in compressor_specs(None, with_plans(compressor, plan))] or None
    check_output_dir(out_dir, "--out")
    path = find_suite(suite)
    s = load_suite(path)
    if model is None and trace is None:  # the file's own sources run: code they name needs the opt-in, before any file is written
        require_trusted_code(s, str(path), trust_code)
    s = apply_overrides(s, seed=seed, device=device, repeats=repeats, trace=trace, model=model, workers=workers, steps=steps,
                        granularity=granularity, bucket_mb=bucket_mb, compressors=specs,
                        timing=False if no_timing else None, loop=loop)
    check_suite(s, str(path), force)
    for line in duplicate_configs(s):
        warn(line)
    with progress_bar(not quiet and not as_json) as prog:
        outcome = run_suite(s, out_dir, prog, suite_path=suite_label(path))
    cases = as_cases(outcome.records)
    _show(outcome, cases, s.name, as_json)
    failed = [c for c in cases if not c.ok]
    if failed:
        output.err.print(f"[red]{len(failed)} case(s) failed[/]: " + escape("; ".join(f"{c.label}: {c.error}" for c in failed[:5])),
                  highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _show(outcome: RunOutcome, cases: list[Any], name: str, as_json: bool) -> None:
    """The run's results: its file's path and cases as JSON, or the tables (with the sharded collectives' sweep, if the
    suite has one) and the file's path."""
    from gcbench.report.terminal import run_output

    if as_json:
        print_json({"results": str(outcome.path), "cases": outcome.records,
                    **({"collectives": outcome.collectives} if outcome.collectives is not None else {})})
        return
    for item in run_output(cases, f"gcbench run {name}"):
        output.out.print(item)
    if outcome.collectives is not None:
        from gcbench.report.collectives_table import terminal_tables

        output.out.print(f"gcbench run {name} — sharded collectives: the aggregate's error and the bytes per worker as N grows")
        for item in terminal_tables(outcome.collectives):
            output.out.print(item)
    plain(f"results: {outcome.path}")
