"""``gcbench collectives``: the error and bytes of compression inside sharded collectives as the worker count grows."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Annotated, Any

import typer

from gcbench.cli import options
from gcbench.cli.failures import user_errors
from gcbench.cli.grammar import choose, compressor_specs, model_arg, number_list
from gcbench.cli.output import emit, plain, print_json, progress_bar
from gcbench.cli.preflight import check_not_an_input, check_output_file, check_replaceable
from gcbench.core.errors import GcbenchError

Compressors = Annotated[list[str] | None, typer.Argument(
    help="Compressors to sweep (default: bf16, fp16, the block formats that are installed, qsgd, thc).", metavar="SPEC")]
Schemes = Annotated[str, typer.Option("--scheme", metavar="LIST", help=(
    "Comma list of ring (a codec on every reduce-scatter hop), alltoall (one encoding per contribution, then a reduce) "
    "and allgather (whole payloads, gcbench's default exchange)."))]
Accumulate = Annotated[str, typer.Option("--accumulate", metavar="LIST", help=(
    "Comma list of accumulation dtypes of the partial sums: fp32, bf16 (allgather averages in fp32 only)."))]
Numel = Annotated[int, typer.Option("--numel", metavar="INT", help="Elements of the synthetic gradient (one flat tensor).")]
Distribution = Annotated[str, typer.Option(metavar="NAME", help=(
    "Distribution of the gradients' common and per-worker parts: normal, laplace, student-t, sparse or lowrank."))]
Draws = Annotated[int, typer.Option("--draws", metavar="INT", help="Exchanges per cell, differing in the compressors' seeds.")]
CsvOut = Annotated[Path | None, options.csv_path(
    "PATH", "Also write the rows as a CSV file (an existing file is replaced only when it is a CSV "
    "this command wrote).")]


#: the start of the header of the CSV this command writes: an existing file that starts otherwise is not replaced
CSV_HEADER = b"compressor,scheme,accumulate,workers,"


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """The rows as CSV, written atomically (:func:`gcbench.results.atomic.atomic_write`): an interrupted write or a full disk
    leaves the previous file whole and no temporary file behind."""
    from gcbench.results.atomic import atomic_write

    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(rows[0]) if rows else ["compressor"])
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(path, text.getvalue())


@user_errors
def collectives(
    compressors: Compressors = None,
    compressor: Annotated[list[str] | None, options.compressor_option(
        "One more compressor to sweep (repeatable), as a positional SPEC.")] = None,
    workers: Annotated[str, options.workers("Worker counts to sweep, a comma list.", metavar="LIST")] = "2,4,8,16,32,64",
    scheme: Schemes = "ring,alltoall,allgather",
    accumulate: Accumulate = "fp32,bf16",
    numel: Numel = 1 << 20,
    distribution: Distribution = "laplace",
    draws: Draws = 3,
    seed: Annotated[int, options.seed("Seed of the gradients (and, with the draw, of the compressors).")] = 0,
    model: Annotated[str | None, options.model(
        "Real gradients: one step of this zoo model on as many workers as the largest N "
        "(each worker's whole gradient flattened), instead of the synthetic ones.")] = None,
    trace: Annotated[str | None, options.trace(
        "Real gradients: step 0 of a recorded trace folder (it must have as many workers as the largest N).")] = None,
    as_json: Annotated[bool, options.json_flag(
        "Print the sweep as JSON: numel, distribution, draws, seed, workers, rows ([{compressor, "
        "scheme, accumulate, workers, error, error_std, error_lo, error_hi, bias, bytes_per_worker, "
        "x_fp32_ring, draws}]), skipped ([{compressor, scheme, accumulate, reason}]).")] = False,
    csv_path: CsvOut = None,
    quiet: options.Quiet = False,
) -> None:
    """Sweep compressors inside sharded collectives over the worker count: the aggregate's error and the bytes per worker.

    Each cell simulates N workers exchanging one synthetic gradient (a common part plus each worker's own, so the mean
    stays a signal) under a scheme: ring re-encodes the partial sums on every hop (N − 1 requantizations: a bf16 ring's
    error grows about as sqrt(N)), alltoall encodes each contribution once and reduces in the accumulation dtype, allgather
    sends whole payloads.  Error: ‖aggregate − exact fp64 mean‖/‖mean‖; bytes: the mean sent per worker, counted by the
    legs (an all-gathered message once per receiving peer), and that over an fp32 ring all-reduce's.  A compressor that
    keeps state across steps, or whose protocol spans the model or needs tensor shapes, cannot be chunked: an error.

    Examples: `gcbench collectives`, `gcbench collectives bf16 --scheme ring,alltoall --accumulate fp32 --workers 2,8,32,64`,
    `gcbench collectives thc qsgd --numel 65536 --draws 5 --json`, `gcbench collectives fp16 --csv collectives.csv`,
    `gcbench collectives bf16 thc --model resnet18 --workers 2,4,8`.
    """
    from gcbench.core.sharded import ACCUMULATE, SCHEMES
    from gcbench.measure.collectives import check_sweep, csv_rows, default_compressors, run_sweep
    from gcbench.report.collectives_table import terminal_tables
    from gcbench.sources.synthetic import DISTRIBUTIONS

    specs = compressor_specs(compressors, compressor) or default_compressors()
    ns = number_list(workers, "--workers", int)
    # names from fixed sets: an unknown one is exit 2 with a suggestion, as an unknown compressor is
    schemes = [choose(s.strip(), SCHEMES, "collective scheme") for s in scheme.split(",") if s.strip()]
    accs = [choose(a.strip(), list(ACCUMULATE), "accumulation dtype") for a in accumulate.split(",") if a.strip()]
    distribution = choose(distribution, DISTRIBUTIONS, "distribution")
    model = model_arg(model)
    if model is not None and trace is not None:
        raise GcbenchError("give --model or --trace, not both")
    check_sweep(ns, numel, draws, seed, synthetic=model is None and trace is None)  # every range, before any gradient
    if csv_path is not None:
        check_output_file(csv_path, "--csv")
        if trace is not None and Path(trace).is_dir():  # the trace's own files are inputs
            check_not_an_input([csv_path], [f for f in Path(trace).iterdir() if f.is_file()], "--csv")
        check_replaceable(csv_path, "--csv", "a CSV that gcbench collectives wrote", lambda head: head.startswith(CSV_HEADER))
    with progress_bar(not quiet and not as_json) as prog:
        source = None
        if model is not None or trace is not None:
            from gcbench.measure.source_data import build_source
            from gcbench.measure.suite import SourceSpec

            spec = SourceSpec(kind="live", model=model, workers=max(ns), steps=1) if model else SourceSpec(kind="trace", path=trace)
            source = build_source(spec, seed, prog)
        try:
            sweep = run_sweep(specs, workers=ns, schemes=schemes, accumulate=accs, numel=numel, distribution=distribution,
                              draws=draws, seed=seed, progress=prog, source=source)
        finally:
            if source is not None:
                source.close()
    if csv_path is not None:
        write_csv(csv_path, csv_rows(sweep))
    if as_json:
        print_json(sweep.to_dict())
        return
    emit(terminal_tables(sweep.to_dict()))
    if csv_path is not None:
        plain(f"csv: {csv_path}")
