"""``gcbench simulate`` and ``advise``: predicted step times on clusters of any size, and which compressor pays off."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

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
from gcbench.cli.preflight import check_not_an_input, check_output_dir, check_output_file, check_replaceable
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
Convergence = Annotated[Path | None, typer.Option(
    metavar="PATH", help="A results file of `gcbench converge` on the same model: rank by predicted time to its accuracy "
                         "target (steps to target × step time), not by step time alone; without --model, its model. "
                         "Default: the newest convergence file of the model in --runs-dir, named in the output.")]

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
) -> None:
    """Predict which compressor makes training faster on a cluster, by how much, and at what fidelity cost.

    Examples: `gcbench advise --model resnet50 --workers 16 --bandwidth 1,10,25,100`,
    `gcbench advise --model resnet50 --compute-ms 120 -c topk -c powersgd -c fp16`,
    `gcbench advise RUN --kernels gpu-bench.json --workers 8,64 --json`,
    `gcbench advise --model resnet50 --workers 64 --gpus-per-node 8 --intra-bandwidth 2400 --overlap`,
    `gcbench advise --model resnet50 --workers 4 --bandwidth 10 --network net.json`,
    `gcbench advise --model mlp --convergence conv.json --baseline fp32`.
    """
    from gcbench.predict.advise import AdviseRequest, advise
    from gcbench.predict.network import compute_seconds, latency_seconds
    from gcbench.predict.step import BASELINES
    from gcbench.report.advice import advice_json, advice_output
    from gcbench.results.store import resolve_run

    latency_s = latency_seconds(latency_us, "--latency-us")
    compute_s = compute_seconds(compute_ms, "--compute-ms")
    baseline = choose(baseline, BASELINES, "baseline")
    model = model_arg(model)  # an unknown zoo name is exit 2 with a suggestion (one a --convergence file names is exit 1)
    if not 1 <= rounds <= 10_000:  # bench's range (cmd_bench.MAX_ROUNDS): 10**9 rounds timed one kernel for days
        raise GcbenchError(f"--rounds must be in [1, 10000], got {rounds}")
    if not budget > 0 or budget == float("inf"):  # NaN fails the first test
        raise GcbenchError(f"--budget must be a positive number of seconds, got {budget:g}")
    if all_compressors and compressor:
        raise GcbenchError("-c names the compressors to time and --all times every one: give one of them")
    ns = cluster_workers(workers)
    bws = number_list(bandwidth, "--bandwidth", float)
    topology = _topology(gpus_per_node, intra_bandwidth, ns)
    results_path = resolve_run(results, runs_dir, finished=True) if results is not None else None
    _check_outputs(csv, out_dir if kernels is None else None, [convergence, kernels, network, results_path])
    request = AdviseRequest(model, tuple(ns), tuple(bws), latency_s, topology, overlap, compute_s,
                            tuple(compressor_specs(None, compressor)), all_compressors, budget, kernels, rounds, remeasure,
                            network, baseline, convergence, results_path, runs_dir, out_dir)
    with progress_bar(not as_json and not quiet) as prog:
        advice = advise(request, prog)
    if csv is not None:
        from gcbench.report.advice_csv import advice_csv
        from gcbench.results.atomic import atomic_write

        try:
            atomic_write(csv, advice_csv(advice))
        except OSError as exc:
            raise GcbenchError(f"cannot write {csv}: {exc.strerror or type(exc).__name__}") from exc
    if as_json:
        print_json(advice_json(advice))
        return
    emit(advice_output(advice, detail=detail))
