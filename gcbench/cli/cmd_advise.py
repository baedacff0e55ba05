"""``gcbench simulate`` and ``advise``: predicted step times on clusters of any size, and which compressor pays off."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gcbench.cli import options
from gcbench.cli.failures import user_errors
from gcbench.cli.grammar import (
    choose,
    compressor_specs,
    model_arg,
    number_list,
)
from gcbench.cli.output import emit, print_json, progress_bar
from gcbench.cli.preflight import (
    check_device,
    check_not_an_input,
    check_output_dir,
    check_output_file,
    check_replaceable,
)
from gcbench.core.errors import GcbenchError

if TYPE_CHECKING:
    from gcbench.predict.network import Topology

SimulateRun = Annotated[str, typer.Argument(help="Results file of `gcbench run`/`compare`/`train` (path, run id or 'latest').",
                                            metavar="RUN")]
SimulateComputeMs = Annotated[float | None, options.compute_ms(
    "Compute time per step in ms (run files have none: default 0; train files: measured).")]
Scheme = Annotated[str, typer.Option(metavar="NAME", help="auto (each compressor's own protocol, priced leg by leg as "
                                     "`gcbench advise` does), or a what-if: allreduce, allgather or ps (parameter server).")]
AdviseRun = Annotated[str | None, typer.Argument(
    help="Optional results file of `gcbench run`/`compare` on the same model (path or run id): its delivered fractions "
         "rank fidelity.", metavar="RUN")]
AdviseModel = Annotated[str | None, options.model(
    "The model (a zoo name, `gcbench list models`); default: the one model of --kernels.",
    metavar="NAME")]
GpusPerNode = Annotated[int, typer.Option(metavar="INT", help="Workers per node: they share the node's link (--bandwidth) "
                                          "and talk among themselves over --intra-bandwidth (1: a flat network).")]
IntraBandwidth = Annotated[float | None, typer.Option(metavar="FLOAT", help="Intra-node bandwidth in Gbit/s (NVLink, PCIe) "
                                                      "with --gpus-per-node.")]
Overlap = Annotated[bool, typer.Option(help="Overlap communication with the backward pass, bucket by bucket as DDP does.")]
AdviseComputeMs = Annotated[float | None, options.compute_ms(
    "Compute time of one step in ms on the cluster's devices (default: measured here on the "
    "CPU, forward + backward at the model's batch).")]
Kernels = Annotated[Path | None, options.kernels(
    "A bench file of `gcbench bench --model NAME` (measured here or on another device, e.g. "
    "`--device cuda`): its kernel times instead of measuring them now.")]
Remeasure = Annotated[bool, typer.Option(
    help="Time the kernels anew, even where a bench of the same model, compressors, machine and gcbench version from the "
         "last 24 h is in --out (reused by default: its file is named in the output).")]
Network = Annotated[Path | None, typer.Option(
    metavar="PATH", help="A network calibration (`python -m gcbench.distributed.calibrate`, run on the cluster): "
                         "collectives priced as measured there instead of by the α–β model.")]
AdviseBaseline = Annotated[str, options.baseline(
    "NAME", "The uncompressed all-reduce speed-ups are claimed against: bf16 (default: "
    "what mixed-precision training sends) or fp32; the sentence gives both.")]
Budget = Annotated[float, typer.Option(
    "--budget", metavar="SECONDS", help="Time the kernel measurement may take, the second timing of flagged kernels "
    "included: each compressor's rounds get a share of it, and a figure it stopped early is flagged 'cut short'.")]
AllCompressors = Annotated[bool, options.all_flag(
    "Time every registered compressor (default: the baselines and the cheapest member of each "
    "family).")]
Detail = Annotated[bool, typer.Option(
    "--detail", "--verbose", help="Print everything: every table (a time-to-accuracy table per cluster), the baselines' "
    "steps, why each flagged timing was flagged, the model's terms (default: the answer, its table, one line on trust).")]
Convergence = Annotated[Path | None, options.convergence(
    "A results file of `gcbench converge` on the same model: rank by predicted time to its accuracy target (steps to "
    "target × step time), not by step time alone; without --model, its model. Default: the newest convergence file of "
    "the model in --runs-dir, named in the output.")]

PlanArg = Annotated[str | None, options.plan(
    "auto: choose a compressor per tensor (among the candidates, none and bf16) "
    "that minimises the predicted step on the one cluster under --fidelity-floor, print the plan against the best single "
    "compressor and bf16 and write it (--plan-out); FILE: price that plan (per inner step with local_steps).")]
FidelityFloor = Annotated[float, typer.Option(
    metavar="COSINE", help="With --plan auto: the least cosine between a tensor's gradient and its decoded compression "
    "(one step, measured here); a tensor no compressor meets is exempt (bf16, else none).")]
PlanOut = Annotated[Path | None, typer.Option(
    metavar="PATH", help="With --plan auto: the plan TOML to write (default reports/plans/MODEL-WORKERSxGBITS.toml); an "
    "existing file is replaced only when advise wrote it.")]
Device = Annotated[str, options.device("Where compute and kernels are measured: cpu, cuda or cuda:N (a --kernels file "
                                        "from another machine is read as it is).")]

#: the first line of a plan TOML advise writes: an existing --plan-out that starts otherwise is not replaced
PLAN_HEADER = "# gcbench advise --plan auto"

#: the start of the header of advise's CSV (gcbench.report.advice_csv.COLUMNS): an existing file that starts otherwise
#: is not replaced (tests tie the two)
CSV_HEADER = b"workers,bandwidth_gbps,compressor,"


def cluster_workers(text: str) -> list[int]:
    """``--workers`` of simulate and advise: a comma list of worker counts, each at least 2.  One worker exchanges
    nothing, so there is nothing for compression to save: its column priced a step without communication (speed-ups
    that only measured a compressor's kernels against DDP's copies, 1.11× for qsgd) and bytes nobody sends."""
    ns = number_list(text, "--workers", int)
    if min(ns) < 2:
        raise GcbenchError(f"--workers {min(ns)}: one worker exchanges nothing, so there is no exchange for compression to "
                           "shorten; give 2 or more")
    return ns



def _topology(gpus_per_node: int, intra_bandwidth: float | None, workers: list[int]) -> Topology:
    """``--gpus-per-node`` and ``--intra-bandwidth`` as a topology that every count of ``--workers`` fills."""
    from gcbench.predict.network import Topology

    if gpus_per_node < 1:
        raise GcbenchError(f"--gpus-per-node must be at least 1, got {gpus_per_node}")
    if (gpus_per_node > 1) != (intra_bandwidth is not None):
        raise GcbenchError("--gpus-per-node N (above 1) and --intra-bandwidth GBITS go together")
    topology = Topology(gpus_per_node, intra_bandwidth or 0.0)
    unfilled = [n for n in workers if n % gpus_per_node]
    if unfilled:
        raise GcbenchError(f"--workers {unfilled[0]} does not fill nodes of {gpus_per_node} GPUs (--gpus-per-node)")
    return topology


def _check_outputs(csv: Path | None, out_dir: Path | None, inputs: list[Path | None]) -> None:
    """The files advise writes, checked before minutes of measuring: the bench folder ``out_dir`` (None: kernels are
    read, not measured) and the CSV, which must not be one of the ``inputs`` nor a file advise did not write."""
    if out_dir is not None:
        check_output_dir(out_dir, "--out")
    if csv is not None:
        check_output_file(csv, "--csv")
        # the CSV written over --convergence FILE lost the training runs
        check_not_an_input([csv], [f for f in inputs if f is not None], "--csv")
        check_replaceable(csv, "--csv", "a CSV that gcbench advise wrote", lambda head: head.startswith(CSV_HEADER))


def _check_measuring(rounds: int, budget: float, all_compressors: bool, compressor: list[str] | None) -> None:
    """The options of the kernels' measurement, checked before any work."""
    if not 1 <= rounds <= 10_000:  # bench's range (cmd_bench.MAX_ROUNDS): 10**9 rounds timed one kernel for days
        raise GcbenchError(f"--rounds must be in [1, 10000], got {rounds}")
    if not budget > 0 or budget == float("inf"):  # NaN fails the first test
        raise GcbenchError(f"--budget must be a positive number of seconds, got {budget:g}")
    if all_compressors and compressor:
        raise GcbenchError("-c names the compressors to time and --all times every one: give one of them")


def _write_csv(csv: Path, advice: Any) -> None:
    """advise's CSV (:func:`gcbench.report.advice_csv.advice_csv`), written atomically."""
    from gcbench.report.advice_csv import advice_csv
    from gcbench.results.atomic import atomic_write

    try:
        atomic_write(csv, advice_csv(advice))
    except OSError as exc:
        raise GcbenchError(f"cannot write {csv}: {exc.strerror or type(exc).__name__}") from exc


def _plan_input(plan: str | None, plan_out: Path | None, inputs: list[Path | None]) -> Any:
    """``--plan``: None (auto) or the plan FILE, read before any work (a bad plan is one line); ``--plan-out`` only
    with auto."""
    from gcbench.plan.reader import load_plan

    if plan is None:
        if plan_out is not None:
            raise GcbenchError("--plan-out writes the plan --plan auto chooses: give --plan auto")
        return None
    if plan.strip().lower() == "auto":
        return None
    if plan_out is not None:
        raise GcbenchError(f"--plan-out writes a plan --plan auto chooses; --plan {plan} is priced as it is")
    inputs.append(Path(plan))
    return load_plan(plan)


def _plan_file(model: str, workers: int, bw: float, plan_out: Path | None, inputs: list[Path | None]) -> Path:
    """Where the chosen plan is written, checked before any work (never an input, never a file advise did not write)."""
    import re

    path = plan_out or Path("reports/plans") / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', model)}-{workers}x{bw:g}.toml"
    check_output_file(path, "--plan-out")
    check_not_an_input([path], [f for f in inputs if f is not None], "--plan-out")
    check_replaceable(path, "--plan-out", "a plan that gcbench advise wrote",
                      lambda head: head.startswith(PLAN_HEADER.encode()))
    return path


def _plan_cmd(req: Any, given: Any, floor: float, plan_out: Path | None, csv: Path | None, as_json: bool,
              quiet: bool) -> None:
    """``advise --plan``: check the outputs, choose or price the plan, write it (auto) and the CSV, print the answer."""
    import dataclasses

    from gcbench.predict.plan_advise import advise_plan, check_plan_request
    from gcbench.report.plan_advice import plan_advice_csv, plan_advice_json, plan_advice_output
    from gcbench.results.atomic import atomic_write

    check_plan_request(req.workers, req.bandwidths_gbps, floor)
    if req.model is None:
        raise GcbenchError("--plan needs --model NAME: each tensor's fidelity is measured on the model's gradients")
    inputs = [req.convergence_file, req.kernels_file, req.network_file, req.results_file]
    path = _plan_file(req.model, req.workers[0], req.bandwidths_gbps[0], plan_out, inputs) if given is None else None
    with progress_bar(not as_json and not quiet) as prog:
        adv = advise_plan(req, given, floor, prog)
    try:
        if path is not None:
            atomic_write(path, f"{PLAN_HEADER} --model {req.model} --workers {req.workers[0]} --bandwidth "
                               f"{req.bandwidths_gbps[0]:g} --fidelity-floor {floor:g}\n" + adv.plan.to_toml())
            adv = dataclasses.replace(adv, plan_file=str(path))
        if csv is not None:
            atomic_write(csv, plan_advice_csv(adv))
    except OSError as exc:
        raise GcbenchError(f"cannot write {exc.filename}: {exc.strerror or type(exc).__name__}") from exc
    if as_json:
        print_json(plan_advice_json(adv))
        return
    emit(plan_advice_output(adv))


@user_errors
def simulate_cmd(
    results: SimulateRun = "latest",
    workers: Annotated[str, options.workers(
        "Worker counts to sweep, a comma list like 8,64.", metavar="LIST")] = "8,16,32,64,128,256,512,1024",
    bandwidth: Annotated[str, options.bandwidth("Link bandwidths in Gbit/s to sweep, a comma list like 1,10.")] = "1,10,25,100",
    latency_us: options.LatencyUs = 5.0,
    compute_ms: SimulateComputeMs = None,
    scheme: Scheme = "auto",
    baseline: AdviseBaseline = "bf16",
    runs_dir: Annotated[Path, options.runs_dir()] = Path("reports/runs"),
    as_json: Annotated[bool, options.json_flag("Machine-readable predictions.")] = False,
) -> None:
    """Predict step time and speed-up over uncompressed training (the bf16 and the fp32 all-reduce) for cluster sizes
    and link speeds.

    Examples: `gcbench simulate`, `gcbench simulate latest --workers 8,64 --bandwidth 1,10`,
    `gcbench simulate RUN --scheme ps --compute-ms 50 --json`, `gcbench simulate RUN --baseline fp32`.
    """
    from gcbench.predict import network as netmodel
    from gcbench.predict import simulate
    from gcbench.predict.step import BASELINES
    from gcbench.report.simulation import simulation_output
    from gcbench.results.store import load_run, resolve_run

    scheme = choose(scheme, simulate.SCHEMES, "scheme")
    latency_s = netmodel.latency_seconds(latency_us, "--latency-us")
    compute_s = netmodel.compute_seconds(compute_ms, "--compute-ms")
    ns = cluster_workers(workers)
    bws = number_list(bandwidth, "--bandwidth", float)
    path = resolve_run(results, runs_dir, finished=True)  # "latest": the newest run that finished
    record = load_run(path)
    if record.kind == "converge":
        raise GcbenchError(f"{path} is a convergence file: `gcbench advise --convergence FILE` or `gcbench report FILE --cluster "
                           "WORKERSxGBITS --kernels BENCH` price its steps on a cluster")
    baseline = choose(baseline, BASELINES, "baseline")
    sim = simulate.simulate_results(record, ns, bws, latency_s, scheme, compute_s, str(path), baseline)
    if as_json:
        print_json(sim.to_dict())
        return
    emit(simulation_output(sim))


@user_errors
def advise_cmd(
    results: AdviseRun = None,
    model: AdviseModel = None,
    workers: Annotated[str, options.workers("Worker counts, a comma list like 16 or 8,64.", metavar="LIST")] = "16",
    bandwidth: Annotated[str, options.bandwidth("Link bandwidths in Gbit/s, a comma list like 1,10,25,100.")] = "1,10,25,100",
    latency_us: options.LatencyUs = 5.0,
    gpus_per_node: GpusPerNode = 1,
    intra_bandwidth: IntraBandwidth = None,
    overlap: Overlap = False,
    compute_ms: AdviseComputeMs = None,
    compressor: Annotated[list[str] | None, options.compressor_option(
        "A compressor to consider (repeatable; default: the baselines none and bf16 and "
        "the cheapest member of each family, --all every one).")] = None,
    all_compressors: AllCompressors = False,
    budget: Budget = 45.0,  # predict.inputs.KERNEL_BUDGET_S (not imported here: the command's import stays light)
    kernels: Kernels = None,
    rounds: Annotated[int, options.rounds("Timed rounds per compressor when measuring kernels.")] = 3,
    remeasure: Remeasure = False,
    network: Network = None,
    baseline: AdviseBaseline = "bf16",
    convergence: Convergence = None,
    csv: Annotated[Path | None, options.csv_path(
        "PATH", "Also write the prediction as CSV: one row per cluster × compressor (step terms, "
        "both baselines, speed-ups; with --convergence the time to the target); an existing file is "
        "replaced only when it is a CSV advise wrote.")] = None,
    runs_dir: Annotated[Path, options.runs_dir()] = Path("reports/runs"),
    out_dir: Annotated[Path, options.out_path("Folder for the bench file it measures.")] = Path("reports/runs"),
    as_json: Annotated[bool, options.json_flag("Machine-readable advice.")] = False,
    quiet: options.Quiet = False,
    detail: Detail = False,
    plan: PlanArg = None,
    fidelity_floor: FidelityFloor = 0.5,  # predict.plan_search.FIDELITY_FLOOR
    plan_out: PlanOut = None,
    device: Device = "cpu",
) -> None:
    """Predict which compressor makes training faster on a cluster, by how much, and at what fidelity cost.

    Examples: `gcbench advise --model resnet50 --workers 16 --bandwidth 1,10,25,100`,
    `gcbench advise --model resnet50 --compute-ms 120 -c topk -c powersgd -c fp16`,
    `gcbench advise RUN --kernels gpu-bench.json --workers 8,64 --json`,
    `gcbench advise --model resnet50 --workers 64 --gpus-per-node 8 --intra-bandwidth 2400 --overlap`,
    `gcbench advise --model resnet50 --workers 4 --bandwidth 10 --network net.json`,
    `gcbench advise --model mlp --convergence conv.json --baseline fp32`,
    `gcbench advise --plan auto --model resnet50 --workers 16 --bandwidth 10`.
    """
    from gcbench.predict.advise import AdviseRequest, advise
    from gcbench.predict.network import compute_seconds, latency_seconds
    from gcbench.predict.step import BASELINES
    from gcbench.report.advice import advice_json, advice_output
    from gcbench.results.store import resolve_run

    device = str(check_device(device))  # no CUDA, a GPU that is not here: one line before any work
    latency_s = latency_seconds(latency_us, "--latency-us")
    compute_s = compute_seconds(compute_ms, "--compute-ms")
    baseline = choose(baseline, BASELINES, "baseline")
    model = model_arg(model)  # an unknown zoo name is exit 2 with a suggestion (one a --convergence file names is exit 1)
    _check_measuring(rounds, budget, all_compressors, compressor)
    ns = cluster_workers(workers)
    bws = number_list(bandwidth, "--bandwidth", float)
    topology = _topology(gpus_per_node, intra_bandwidth, ns)
    results_path = resolve_run(results, runs_dir, finished=True) if results is not None else None
    inputs = [convergence, kernels, network, results_path]
    given = _plan_input(plan, plan_out, inputs)
    _check_outputs(csv, out_dir if kernels is None else None, inputs)
    request = AdviseRequest(model, tuple(ns), tuple(bws), latency_s, topology, overlap, compute_s,
                            tuple(compressor_specs(None, compressor)), all_compressors, budget, kernels, rounds, remeasure,
                            network, baseline, convergence, results_path, runs_dir, out_dir, device)
    if plan is not None:
        _plan_cmd(request, given, fidelity_floor, plan_out, csv, as_json, quiet)
        return
    with progress_bar(not as_json and not quiet) as prog:
        advice = advise(request, prog)
    if csv is not None:
        _write_csv(csv, advice)
    if as_json:
        print_json(advice_json(advice))
        return
    emit(advice_output(advice, detail=detail))
