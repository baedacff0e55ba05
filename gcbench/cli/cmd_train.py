"""``gcbench train``: a real task trained on N processes once per compressor, through DDP hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gcbench.cli import options, output
from gcbench.cli.failures import user_errors
from gcbench.cli.grammar import choose, compressor_specs, model_arg, old_comma_list
from gcbench.cli.output import deprecated, error_line, plain, print_json, progress_bar
from gcbench.cli.preflight import check_device, check_output_dir
from gcbench.core.errors import GcbenchError

Compressor = Annotated[list[str] | None, options.compressor_option(
    "Train with this compressor (repeatable): name or name:key=value,...; 'none' (the reference) is added first if "
    "missing.  Default: -c none -c topk -c qsgd.")]
CompressorsOld = Annotated[list[str] | None, typer.Option("--compressors", metavar="LIST", hidden=True,
                                                          help="Deprecated: a comma list of compressors; use -c SPEC.")]
PlanFile = Annotated[list[str] | None, options.plan(
    "A compression plan (TOML, repeatable; the same as -c plan:FILE): each parameter's gradient by its rule's "
    "compressor in the DDP hook, after the plan's dense warm-up.  Trains beside the compressors, labelled plan:NAME.")]
Task = Annotated[str, typer.Option(metavar="NAME", help="digits, digits_cnn, charlstm or auto (digits with scikit-learn, else charlstm).")]
Epochs = Annotated[int | None, typer.Option(metavar="INT", help="Epochs (default: the task's, digits 10, charlstm 6).")]
Target = Annotated[float | None, typer.Option(metavar="FLOAT", help="Target test accuracy for time-to-target (digits 0.9, charlstm 0.35).")]
Lr = Annotated[float | None, typer.Option(metavar="FLOAT", help="Learning rate (default: the task's).")]
Timeout = Annotated[float, typer.Option(metavar="FLOAT", help="Seconds one compressor's run may take before its workers are killed.")]
Model = Annotated[str | None, options.model(
    "Instead of --task: a zoo model (smallcnn, resnet18 ...), hf:NAME, or a user factory package.module:factory or "
    "path/file.py:factory (with --trust-code) on the batches its factory makes, as converge trains it.")]
TrustCode = Annotated[bool, options.trust_code("Allow --model to import and run the user factory it names in every worker "
                                               "(only if you trust the code).")]
Device = Annotated[str, options.device("cpu (gloo), cuda (rank r on cuda:LOCAL_RANK, NCCL) or cuda:N (one worker).")]
CollectiveTimeout = Annotated[float | None, typer.Option(metavar="FLOAT",
                                                        help="Seconds a collective waits for a peer (max(30, timeout/3)).")]


@user_errors
def train_cmd(
    compressor: Compressor = None,
    compressors_old: CompressorsOld = None,
    plan: PlanFile = None,
    workers: Annotated[int, options.workers("Worker processes (ignored under torchrun: WORLD_SIZE).")] = 4,
    task: Task = "auto",
    model: Model = None,
    device: Device = "cpu",
    trust_code: TrustCode = False,
    epochs: Epochs = None,
    target: Target = None,
    batch_size: Annotated[int | None, options.batch_size("Batch size per worker.")] = None,
    lr: Lr = None,
    granularity: Annotated[str, options.granularity("bucket (each DDP bucket) or layer (each parameter).")] = "bucket",
    seed: Annotated[int, options.seed("Seed of the model, the data order and the compressors.")] = 0,
    timeout: Timeout = 300.0,
    collective_timeout: CollectiveTimeout = None,
    threads: Annotated[int | None, options.threads("Torch threads per worker (default cores // workers).")] = None,
    out_dir: Annotated[Path, options.out_path()] = Path("reports/runs"),
    as_json: Annotated[bool, options.json_flag("Print the results file's path and cases as JSON.")] = False,
    quiet: options.Quiet = False,
) -> None:
    """Train a real task or model on N processes (torch.distributed: gloo, or NCCL on GPUs) once per compressor
    through DDP hooks; each compressor's measured step is printed beside advise's prediction for this cluster.

    Examples: `gcbench train -c topk -c qsgd --workers 4`, `gcbench train --task charlstm -c 'topk:density=0.05' --epochs 2`,
    `gcbench train --model resnet18 --device cuda --workers 4 -c bf16`, `gcbench train --model digits_cnn --plan small.toml`,
    `torchrun --nproc-per-node 4 -m gcbench train -c dgc`.
    """
    from gcbench.distributed.launch import launch_env

    launch_env()  # a malformed launch (RANK=-1, WORLD_SIZE=abc, no MASTER_ADDR) fails in one line before torch even loads
    from gcbench.distributed.hook_state import GRANULARITIES
    from gcbench.report.terminal import train_table
    from gcbench.report.views import train_description
    from gcbench.results.parse import as_cases
    from gcbench.train.config import TrainConfig
    from gcbench.train.driver import train as run_training
    from gcbench.train.driver import under_torchrun
    from gcbench.workloads.tasks import TASKS

    specs = _train_specs(compressor, compressors_old, plan)
    task = choose(task, ["auto", *TASKS], "task")
    granularity = choose(granularity, GRANULARITIES, "granularity")
    from gcbench.measure.suite import MetricsSpec, SourceSpec, Suite, check_option

    # a suite's ranges: 100000 workers would start 100000 processes, 100000 threads abort torch (std::bad_alloc)
    check_option(SourceSpec, "workers", workers, "--workers")
    check_option(MetricsSpec, "threads", threads, "--threads")
    check_option(Suite, "seed", seed, "--seed")
    model = _user_model(model, task, trust_code)
    device = str(check_device(device))  # no CUDA, or a GPU index that is not here: one line before any process starts
    cfg = TrainConfig(task=task, workers=workers, epochs=epochs, batch_size=batch_size, lr=lr, target=target, seed=seed,
                      granularity=granularity, timeout_s=timeout, collective_timeout_s=collective_timeout, threads=threads,
                      device=device, model=model)
    cfg.resolved()  # bad options fail before the output check and before any process starts
    check_output_dir(out_dir, "--out")
    with progress_bar(not quiet and not as_json and not under_torchrun()) as prog:
        outcome = run_training(cfg, specs, out_dir, prog)
    if outcome.path is None:  # a non-zero rank under torchrun: rank 0 reports
        return
    cases = as_cases(outcome.records, "train")
    if as_json:
        print_json({"results": str(outcome.path), "cases": outcome.records})
    else:
        output.out.print(train_table(cases, f"gcbench train — {train_description(cases)}"))
        for table in _plan_tables(outcome.records):
            output.out.print(table)
        _predictions(outcome.records)
        plain(f"results: {outcome.path}")
    failed = [c for c in cases if not c.ok]
    if failed:
        for c in failed:
            error_line(f"{c.label}: {c.error}")
        raise typer.Exit(1)


def _train_specs(compressor: list[str] | None, compressors_old: list[str] | None, plan: list[str] | None) -> list[str]:
    """The compressors to train: ``-c``, the deprecated ``--compressors`` and comma forms (each with its warning),
    then ``--plan FILE`` as ``-c plan:FILE``; default ``none``, ``topk``, ``qsgd``."""
    specs: list[str] = []
    for text, old_option in [*((t, False) for t in compressor or []), *((t, True) for t in compressors_old or [])]:
        listed = old_comma_list(text)  # the old -c "none,topk" named several compressors with commas
        new_form = " ".join(f"-c {c}" for c in listed or [text])
        if old_option:
            deprecated(f"train --compressors {text!r}", new_form)
        elif listed is not None:
            deprecated(f"train -c {text!r} (commas between compressors)", new_form)
        specs.extend(listed or [text])
    specs += [f"plan:{f}" for f in plan or []]  # --plan FILE is -c plan:FILE (read and checked by compressor_specs)
    return compressor_specs(specs or ["none", "topk", "qsgd"], None)


def _user_model(model: str | None, task: str, trust_code: bool) -> str | None:
    """``--model`` read as converge reads it; a user factory needs ``--trust-code`` (every worker imports it)."""
    model = model_arg(model)
    if model is None:
        return None
    if task != "auto":
        raise GcbenchError("name one of --task and --model, not both")
    if ":" in model and not model.startswith(("hf:", "zoo:")) and not trust_code:
        raise GcbenchError(f"--model {model}: every worker would import and run this code; if you trust it, pass --trust-code "
                           "(or set GCBENCH_TRUST_CODE=1)")
    return model.removeprefix("zoo:")


def _plan_tables(records: list[dict[str, Any]]) -> list[Any]:
    """Each plan case's per-rule table (as ``run`` shows it): its bytes are per step after the warm-up, over ranks."""
    from gcbench.report.numbers import fmt
    from gcbench.report.terminal import plan_table
    from gcbench.report.views import PlanTable

    tables = []
    for r in records:
        if r.get("status") != "ok" or not r.get("plan_rules"):
            continue
        rows = [[str(x["rule"]), x["label"].partition(" → ")[0], fmt(x["tensors"], "int"), fmt(x["elements"], "int"),
                 fmt(x["bytes"], "int"), "—" if x["bytes_share"] is None else f"{x['bytes_share']:.1%}", x["compressor"]]
                for x in r["plan_rules"]]
        warm = r.get("warmup_payload_bytes_per_step")
        note = ("each tensor by the first rule that matches it; bytes: its tensors' payloads per step after the warm-up "
                "(mean over ranks)" + (f"; the warm-up sent {fmt(warm, 'int')} bytes per step" if warm is not None else ""))
        tables.append(plan_table(PlanTable(f"{r['label']} — per rule", rows, note)))
    return tables


def _predictions(records: list[dict[str, Any]]) -> None:
    """Each compressor's measured step beside advise's prediction for the same cluster, and how the cluster was found."""
    from gcbench.train.prediction import prediction_line, transport_line

    ok = [r for r in records if r.get("status") == "ok"]
    lines = [x for x in (prediction_line(r["label"], r["training"].get("prediction"), r["training"].get("peer_wait"))
                         for r in ok) if x]
    how = transport_line(ok[0]["training"].get("transport")) if ok else None
    for line in [*lines, *([how] if how and lines else [])]:
        plain(line)
