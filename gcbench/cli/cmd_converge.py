"""``gcbench converge``: closed-loop simulated training, several seeds per compressor, with the statistics a reviewer accepts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gcbench.cli import options, output
from gcbench.cli.failures import user_errors
from gcbench.cli.grammar import choose, compressor_specs, model_arg
from gcbench.cli.output import error_line, plain, print_json, progress_bar
from gcbench.cli.preflight import check_output_dir
from gcbench.core.errors import GcbenchError

if TYPE_CHECKING:
    from gcbench.converge.sweep import ConvergeConfig, ConvergeOutcome

Suite = Annotated[str | None, typer.Argument(metavar="SUITE", help=(
    "A convergence suite (TOML with kind = \"converge\"), e.g. suites/converge.toml, the bundled default; options override it."))]
Compressor = Annotated[list[str] | None, options.compressor_option(
    "A compressor (repeatable): name or name:key=value,...; 'none' (the reference) always runs first.  Default: the suite's, or "
    "none, topk, topk:error_feedback=true, signsgd, efsignsgd, qsgd, powersgd.")]
Task = Annotated[str | None, typer.Option("--task", metavar="NAME", help=(
    "A train task: digits, digits_cnn (scikit-learn's 8x8 digits), charlstm (bundled text) or auto."))]
Model = Annotated[str | None, options.model(
    "Instead of --task: a zoo model (smallcnn, resnet18 ...), hf:NAME, package.module:factory or "
    "path/file.py:factory (its factory may return a loss_fn).")]
Steps = Annotated[int | None, options.steps("Optimizer steps per seed (default 300).")]
Batch = Annotated[int | None, typer.Option("--batch", "--batch-size", metavar="INT",
                                           help="Batch per worker (default: the task's or model's).")]
Optimizer = Annotated[str | None, typer.Option("--optimizer", metavar="NAME", help="sgd, adam or adamw (default: the task's).")]
Lr = Annotated[float | None, typer.Option("--lr", metavar="FLOAT", help="Learning rate (default: the task's).")]
Momentum = Annotated[float | None, typer.Option("--momentum", metavar="FLOAT", help="SGD momentum (default 0.9).")]
WeightDecay = Annotated[float | None, typer.Option("--weight-decay", metavar="FLOAT", help="Weight decay (default 0).")]
EvalEvery = Annotated[int | None, typer.Option("--eval-every", metavar="INT", help="Steps between evaluations (default steps/20).")]
Seeds = Annotated[int | None, typer.Option("--seeds", metavar="INT", help=(
    "Seeds per compressor (default 3): each changes the initial model, the data order and the compressors' randomness."))]
Target = Annotated[float | None, typer.Option("--target", metavar="FLOAT", help=(
    "Target as a fraction of the reference's final mean metric (default 0.95)."))]
TargetValue = Annotated[float | None, typer.Option("--target-value", metavar="FLOAT", help=(
    "Target as a metric value (the reference must reach it)."))]
Divergence = Annotated[float | None, typer.Option("--divergence-factor", metavar="FLOAT", help=(
    "A loss above this x its first value is divergence (default 10)."))]
TrustCode = Annotated[bool, options.trust_code(
    "Allow the suite file to import and run the user model (factory) it names (only if you trust the file).")]
Name = Annotated[str | None, typer.Option("--name", metavar="TEXT", help="The run's name (in the results file's name).")]
PlanFile = Annotated[list[str] | None, options.plan(
    "A compression plan (TOML, repeatable; the same as -c plan:FILE): per-tensor rules, a dense warm-up, local steps. "
    "Runs in closed loop beside the compressors, labelled plan:NAME.")]
Device = Annotated[str | None, options.device(
    "cpu (default), cuda or cuda:N: the device of the model, its batches, the compressors and their states.")]


@user_errors
def converge_cmd(
    suite: Suite = None,
    compressor: Compressor = None,
    task: Task = None,
    model: Model = None,
    workers: Annotated[int | None, options.workers("Simulated workers (default 8).")] = None,
    steps: Steps = None,
    batch: Batch = None,
    optimizer: Optimizer = None,
    lr: Lr = None,
    momentum: Momentum = None,
    weight_decay: WeightDecay = None,
    eval_every: EvalEvery = None,
    seeds: Seeds = None,
    target: Target = None,
    target_value: TargetValue = None,
    divergence_factor: Divergence = None,
    threads: Annotated[int | None, options.threads(
        "Torch threads (default: chosen from the model's size and the machine's load: one for a small model; "
        "the title and the results file say which).")] = None,
    name: Name = None,
    plan: PlanFile = None,
    device: Device = None,
    trust_code: TrustCode = False,
    out_dir: Annotated[Path, options.out_path()] = Path("reports/runs"),
    as_json: Annotated[bool, options.json_flag("Print the results file's path and cases as JSON.")] = False,
    quiet: options.Quiet = False,
) -> None:
    """Will my model still reach its accuracy with this compressor, and in how many steps?

    Closed-loop simulated data-parallel training (every update from the compressed aggregate), reference first, 3 seeds each.

    Reports the final metric and its gap to the reference with 95% intervals, steps to a target, divergence, bytes.

    Examples: `gcbench converge suites/converge.toml`,
    `gcbench converge --task charlstm -c topk -c topk:error_feedback=true -c signsgd -c efsignsgd --seeds 3 --steps 300 --workers 8`,
    `gcbench converge --model smallcnn -c qsgd --steps 200 --optimizer adam --lr 0.001`.
    """
    from gcbench.converge.sweep import run_converge, with_overrides

    base, suite_path, optimizer = _problem(suite, task, model, optimizer, trust_code, target, target_value)
    specs = _compressors(compressor, plan)
    cfg = with_overrides(base, compressors=tuple(specs) if specs else None, workers=workers, steps=steps, batch=batch,
                         optimizer=optimizer, lr=lr, momentum=momentum, weight_decay=weight_decay, eval_every=eval_every,
                         seeds=seeds, target_fraction=target, target_value=target_value, divergence_factor=divergence_factor,
                         threads=threads, name=name, device=device)
    cfg.check()  # a meaningless option fails before the output check
    if cfg.device is not None:  # the command line's or the suite's: a GPU that is not here fails before any work
        from gcbench.cli.preflight import check_device

        cfg = replace(cfg, device=str(check_device(cfg.device, "--device" if device is not None else "device")))
    check_output_dir(out_dir, "--out")
    with progress_bar(not quiet and not as_json) as prog:
        outcome = run_converge(cfg, out_dir, prog, suite_path)
    if as_json:
        chosen = {"count": outcome.threads.threads, "rule": outcome.threads.rule} if outcome.threads else None
        print_json({"results": str(outcome.path), "target": outcome.target, "settings": outcome.settings, "threads": chosen,
                    "cases": outcome.cases})
        return
    if _show(outcome):
        raise typer.Exit(1)


def _compressors(compressor: list[str] | None, plan: list[str] | None) -> list[str] | None:
    """The -c SPECs (names as registered) and plans (``-c plan:FILE``, ``--plan FILE``) given, in that order; None for none."""
    from gcbench.workloads.specs import is_plan

    given = compressor or []
    specs = compressor_specs(None, [c for c in given if not is_plan(c)])
    plans = [c.strip() for c in given if is_plan(c)] + [f"plan:{f}" for f in plan or []]
    return specs + plans if specs or plans else None


def _problem(suite: str | None, task: str | None, model: str | None, optimizer: str | None, trust_code: bool,
             target: float | None, target_value: float | None) -> tuple[ConvergeConfig, str | None, str | None]:
    """The suite's configuration (or the defaults) with the command line's problem and target, the suite's label, and the
    optimizer named; an unknown name, or a suite's user code without --trust-code, is one line."""
    from gcbench.converge.sweep import ConvergeConfig, load_suite

    base, suite_path = ConvergeConfig(), None
    if suite is not None:
        base, data = load_suite(suite)
        from gcbench.measure.suite import find_suite, suite_label

        suite_path = suite_label(find_suite(suite))
        base = replace(base, extra={"description": data.get("description")})
    from gcbench.workloads.problems import OPTIMIZERS
    from gcbench.workloads.tasks import TASKS

    # an unknown name is a command line gcbench cannot read: exit 2 with a suggestion, as an unknown -c is
    task = None if task is None else choose(task, ["auto", *TASKS], "task")
    model = model_arg(model)
    optimizer = None if optimizer is None else choose(optimizer, OPTIMIZERS, "optimizer")
    if task is not None or model is not None:  # the command line's problem replaces the suite's
        base = replace(base, task=task, model=model)
    elif suite is not None and base.model is not None and ":" in base.model and not base.model.startswith("hf:") and not trust_code:
        raise GcbenchError(f"{suite}: model = {base.model!r}: the suite would import and run this code; if you trust it, pass "
                           "--trust-code (or set GCBENCH_TRUST_CODE=1), or name the model yourself with --model")
    if base.task is None and base.model is None:
        base = replace(base, task="auto")
    if target_value is not None:  # a target given here replaces the suite's, whichever way the suite gave it
        base = replace(base, target_fraction=None)
    if target is not None:
        base = replace(base, target_value=None)
    return base, suite_path, optimizer


def _show(outcome: ConvergeOutcome) -> bool:
    """The convergence table, its verdict and the results file; a line per seed that raised.  Whether any did."""
    from gcbench.report.converge_table import converge_table, verdict

    s = outcome.settings
    title = (f"gcbench converge — {s['task']}, {s['workers']} workers, {s['steps']} steps, {s['optimizer']} lr {s['lr']:g}, "
             f"{len(s['seeds'])} seeds")
    if outcome.threads is not None:  # the thread count decides the wall times, and a chosen one can change between runs
        n = outcome.threads.threads
        title += f", {n} torch thread{'s' if n > 1 else ''} ({'auto' if outcome.threads.rule.startswith('auto') else 'given'})"
    output.out.print(converge_table(outcome.cases, title))
    from gcbench.report.converge_plans import plan_sections, rich_tables

    for table in rich_tables(plan_sections(outcome.cases)):  # each plan's rules, and the plan beside its parts
        output.out.print(table)
    plain(verdict(outcome.cases))
    plain(f"results: {outcome.path}")
    if outcome.threads is not None and outcome.threads.held_for_bits:  # the user may prefer the speed to the bits
        plain(f"threads: {outcome.threads.rule.removeprefix('auto: ')}")
    failed = [(c["label"], r) for c in outcome.cases for r in c["convergence"]["seeds"] if r["status"] == "error"]
    for label, r in failed:  # a seed that raised is a failure (diverging or missing the target is an outcome)
        error_line(f"{label} seed {r['seed']}: {r['error']}")
    return bool(failed)
