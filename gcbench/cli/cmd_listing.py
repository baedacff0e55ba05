"""``gcbench list``, ``check`` and ``validate``: what is registered, whether a compressor keeps the contract, whether a suite reads."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gcbench.cli import options, output
from gcbench.cli.failures import user_errors
from gcbench.cli.grammar import choose, compressor_specs, model_arg, suite_arg
from gcbench.cli.output import plain, print_json, warn
from gcbench.cli.preflight import check_suite
from gcbench.core.errors import GcbenchError

ListWhat = Annotated[str, typer.Argument(help="compressors, models, suites, metrics, or a compressor's name (its card).",
                                         metavar="KIND|NAME")]
Params = Annotated[bool, typer.Option("--params", "-p", help="Also show each compressor's parameters.")]
Bits = Annotated[bool, typer.Option("--bits", help="With a compressor's card: count its bits per element from one real "
                                    "encoding at its defaults (imports torch: a few seconds).")]
CheckSpecs = Annotated[list[str] | None, typer.Argument(help="Compressors to check: name or name:key=value,...", metavar="SPEC")]
CheckJson = Annotated[bool, options.json_flag("Machine-readable output: [{spec, ok, checks: [{check, what, ok, detail}]}].")]
ValidateSuite = Annotated[str, typer.Argument(help="Suite file (or bundled suite name), or a plan file ([plan] table), to check.",
                                              metavar="SUITE|PLAN")]
ValidateModel = Annotated[str | None, options.model(
    "With a plan file: match its rules to this model's tensors (a zoo model, hf:NAME or package.module:factory), say "
    "which rule takes how many, and where rules overlap (the first that matches wins).")]


@user_errors
def list_cmd(
    what: ListWhat = "compressors",
    as_json: Annotated[bool, options.json_flag()] = False,
    params: Params = False,
    bits: Bits = False,
) -> None:
    """List the registered compressors (default), zoo models, bundled suites or metrics; or show one compressor's card.

    Examples: `gcbench list`, `gcbench list -p`, `gcbench list dgc`, `gcbench list dgc --bits`, `gcbench list models --json`.
    """
    from gcbench.compressors import registry
    from gcbench.report import listing

    kinds = ("compressors", "models", "suites", "metrics")
    what = choose(what, [*kinds, *registry.names()], "list kind or compressor")
    if what == "compressors":
        cards = registry.infos()
        origins = {c.name: registry.origin(c.name) for c in cards}
        if as_json:
            print_json([{**c.to_dict(), "origin": origins[c.name]} for c in cards], indent=1, default=None)
        else:
            output.out.print(listing.compressors_table(cards, origins, params))
        for line in registry.load_errors():
            warn(line)
        return
    if bits and what in kinds:
        raise GcbenchError("--bits goes with a compressor's name: gcbench list NAME --bits")
    if what not in kinds:
        card = registry.get(what)
        wire = listing.wire_sample(card) if bits else None  # the one place `list` imports torch: asked for
        if as_json:
            print_json(listing.card_dict(card, registry.origin(what), wire), indent=1, default=None)
        else:
            output.out.print(listing.card_table(card, registry.origin(what), wire))
        return
    if what == "models":
        from gcbench.sources.zoo import catalogue

        rows, render = catalogue(), listing.models_table
    elif what == "suites":
        from gcbench.measure.suite import bundled_suites

        rows, render = bundled_suites(), listing.suites_table
    else:
        from gcbench.results.metrics import metrics_metadata

        rows, render = metrics_metadata(), listing.metrics_table
    if as_json:
        print_json(rows, indent=1, default=None)
    else:
        output.out.print(render(rows))


@user_errors
def check(
    specs: CheckSpecs = None,
    compressor: Annotated[list[str] | None, options.compressor_option("A compressor to check (repeatable), as a positional SPEC.")] = None,
    as_json: CheckJson = False,
) -> None:
    """Check compressors against the contract (purity, round trip, exact sizes, determinism, empty and zero tensors, dtypes, exchange).

    Runs the checks the test suite runs on every built-in compressor, on any registered one (a
    plugin from another package included); exit status 1 when any check fails.

    Examples: `gcbench check mycomp`, `gcbench check topk:density=0.1 qsgd:s=4 --json`, `gcbench check -c dgc -c sdagc`.
    """
    from gcbench.compressors import registry
    from gcbench.compressors.check import run_checks
    from gcbench.report import listing

    specs = compressor_specs(specs, compressor, least=1, command="check")
    for line in registry.load_errors():
        warn(line)
    results = {spec: run_checks(*registry.parse_spec(spec)) for spec in specs}
    if as_json:
        print_json([{"spec": spec, "ok": all(r.ok for r in rows), "checks": [r.to_dict() for r in rows]}
                    for spec, rows in results.items()], indent=1, default=None)
    else:
        for spec, rows in results.items():
            output.out.print(listing.check_table(spec, rows))
    if any(not r.ok for rows in results.values() for r in rows):
        raise typer.Exit(1)


@user_errors
def validate(suite: ValidateSuite, model: ValidateModel = None) -> None:
    """Check a suite file without running it: names, values, trace folders; imports no code and computes no gradient.

    A convergence suite (kind = "converge") is checked against the ranges `gcbench converge` enforces; a plan file
    (docs/plans.md) against the registry, and with --model against the model's tensors.

    Examples: `gcbench validate suites/cnn.toml`, `gcbench validate quick`, `gcbench validate small.toml --model resnet50`.
    """
    from gcbench.measure.suite import duplicate_configs, find_suite, is_converge_suite, load_suite
    from gcbench.measure.suite_checks import imported_code

    if _is_plan_file(suite):
        _validate_plan(suite, model_arg(model))
        return
    if model is not None:
        raise GcbenchError("validate --model applies to a plan file ([plan] table); a suite names its own sources")
    path = find_suite(suite_arg(suite))
    if is_converge_suite(path):
        _validate_converge(path)
        return
    s = load_suite(path)
    check_suite(s, str(path), force=False, plans=not imported_code(s))  # a plan on a user's model: not imported here
    for line in duplicate_configs(s):
        warn(line)
    # paths and code names are the user's text: no markup, and no emoji (":b:" in "a:b:c" would become one)
    plain(f"ok: {path} — {len(s.sources)} source(s), {len(s.compressors)} compressor configuration(s), hash {s.hash()}")
    code = imported_code(s)
    if code:
        plain("would import: " + ", ".join(r.target for r in code) + " (needs --trust-code)")


def _is_plan_file(text: str) -> bool:
    """Whether ``text`` names a TOML file with a top-level ``[plan]`` table (an unreadable file is not one)."""
    from pathlib import Path

    from gcbench.core.files import load_user_toml

    if not Path(text).is_file():
        return False
    try:
        return "plan" in load_user_toml(text, "plan file")
    except GcbenchError:
        return False


def _validate_plan(path: str, model: str | None) -> None:
    """``validate`` of a plan file: its rules and specs; with a model, each rule's tensors and where rules overlap."""
    from gcbench.plan import assign, load_plan, overlaps, tensor_infos

    plan = load_plan(path)
    extra = f", {plan.warmup_steps} warm-up steps ({plan.warmup})" if plan.warmup_steps else ""
    extra += f", local_steps = {plan.local_steps}" if plan.local_steps > 1 else ""
    if model is None:
        plain(f"ok: {path} — {plan.label}: {len(plan.rules)} rule(s){extra}; give --model to match them to a model's tensors")
        return
    from gcbench.sources.zoo import load_model

    infos = tensor_infos(load_model(model, 0).module)
    rows = assign(plan, infos).rows()
    plain(f"ok: {path} — {plan.label} on {model}: {len(plan.rules)} rule(s){extra}")
    for row in rows:
        plain(f"  rule {row['rule']}: {row['label']} — {row['tensors']} tensor(s), {row['elements']:,} elements")
    for line in overlaps(plan, infos):
        warn(line)


def _validate_converge(path: Any) -> None:
    """``validate`` of a convergence suite: every value in the ranges ``gcbench converge`` checks before training.

    The same check as the command's (:meth:`ConvergeConfig.check`, whose bounds are the results schema's),
    so a suite that validates does not fail after its reference seeds have trained; names are checked
    against the registry, the tasks and the zoo, and no code is imported.
    """
    from gcbench.compressors import registry
    from gcbench.converge.bound_plans import check_plan
    from gcbench.converge.sweep import load_suite as load_converge_suite
    from gcbench.plan.reader import plan_from_spec
    from gcbench.sources.catalog import check_model, is_user_model
    from gcbench.workloads.specs import is_plan
    from gcbench.workloads.tasks import TASKS

    cfg, _ = load_converge_suite(path)
    try:
        cfg.check()
        if cfg.task not in (None, "auto", *TASKS):
            raise GcbenchError(f"task: unknown task {cfg.task!r} (known: auto, {', '.join(TASKS)})")
        if cfg.model is not None:
            check_model(cfg.model)
        for i, spec in enumerate(cfg.compressors):
            try:
                if is_plan(spec):  # a plan file (found next to the suite): loaded and checked, and its warm-up against steps
                    check_plan(plan_from_spec(spec), cfg.workers, cfg.steps)  # type: ignore[arg-type]  # is_plan: a plan
                else:
                    registry.parse_spec(spec)
            except GcbenchError as exc:
                raise GcbenchError(f"compressors[{i}]: {exc}") from None
    except GcbenchError as exc:
        raise GcbenchError(f"{path}: {exc}") from None
    problem = cfg.model or cfg.task or "auto"
    plain(f"ok: {path} — convergence suite: {problem}, {len(cfg.compressors)} compressor(s), {cfg.seeds} seed(s) × "
          f"{cfg.steps} steps, {cfg.workers} workers")
    if cfg.model is not None and is_user_model(cfg.model):
        plain(f"would import: {cfg.model} (needs --trust-code)")
