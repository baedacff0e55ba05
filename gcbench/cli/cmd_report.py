"""``gcbench report``: stored results as terminal tables, Markdown, HTML or CSV; run against run with ``--baseline``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from gcbench.cli import options
from gcbench.cli import output as shown
from gcbench.cli.failures import user_errors
from gcbench.cli.output import emit, error_line, plain
from gcbench.cli.preflight import check_not_an_input, check_output_file, check_replaceable
from gcbench.core.errors import GcbenchError
from gcbench.results.atomic import atomic_write

Runs = Annotated[list[str] | None, typer.Argument(
    help="Results files, run ids, id prefixes or 'latest' (default: every run in --runs-dir; with --html the newest, "
    "the others listed).", metavar="RUN")]
RunsDir = Annotated[Path, options.runs_dir("Folder of stored runs.")]
Md = Annotated[bool, typer.Option("--md", help="Markdown tables for a paper or PR (stdout, or -o FILE.md).")]
Html = Annotated[bool, typer.Option("--html", help="One self-contained HTML file with plots (default reports/index.html).")]
Output = Annotated[Path | None, typer.Option("--output", "-o", metavar="PATH", help="Write the Markdown or HTML here.")]
Baseline = Annotated[str | None, options.baseline("RUN", "Compare the newest run (or the one named) against this run.", "-b")]
Threshold = Annotated[float, options.threshold("Relative change below which a metric counts as unchanged (~).")]
Alpha = Annotated[float, typer.Option(metavar="FLOAT", help="Significance level of the Mann–Whitney tests on raw samples.")]
AllMetrics = Annotated[bool, typer.Option("--all-metrics", help="Also list comparison rows that did not change (~).")]
FailOnRegression = Annotated[bool, options.fail_on_regression("Exit 1 if any metric is worse or a case newly fails (CI).")]
Papers = Annotated[Path | None, typer.Option(
    metavar="PATH", help="Paper claims file (default: the bundled claims, baselines/papers.toml in a checkout).")]
Csv = Annotated[Path | None, options.csv_path(
    "DIR", "Write cases.csv, layers.csv, steps.csv and timings.csv (tidy, one row per "
    "observation) into DIR, replacing those four files.")]
Layers = Annotated[bool, typer.Option("--layers", help="Per-layer tables (ratio and q of every layer, per source) "
                                      "instead of the summary; with --md as Markdown.")]
AllRuns = Annotated[bool, options.all_flag(
    "With --html and no RUN: link every run of --runs-dir to a page of its own beside the report "
    "(rendered once, reused while its results file is unchanged).")]
Cluster = Annotated[list[str] | None, typer.Option(
    "--cluster", metavar="CLUSTER", help="Price a convergence file's steps on this cluster, WORKERSxGBITS (repeatable), e.g. "
    "16x10: time to the target per compressor, as `gcbench advise --convergence` does; needs --kernels.")]
ReportKernels = Annotated[Path | None, options.kernels(
    "With --cluster: a bench file of `gcbench bench --model` of the convergence file's model.")]
ReportComputeMs = Annotated[float | None, options.compute_ms(
    "With --cluster: compute time of one step in ms on the cluster's devices (default: the "
    "one stored with an advise bench file).")]


def _claims_for(papers: Path | None, runs: list[Any]) -> tuple[list[Any], str]:
    """Paper claims matched to the runs; a missing default claims file is not an error (an installed wheel has none)."""
    from gcbench.results.baselines import PAPERS_FILE, load_claims, match_claims

    path = papers or PAPERS_FILE
    if papers is None and not path.exists():
        return [], f"No claims file at {path} (pass --papers FILE)."
    return match_claims(load_claims(path), [r.data for r in runs]), ""


def _check_options(md: bool, as_html: bool, output: Path | None, baseline: str | None, threshold: float, alpha: float,
                   fail_on_regression: bool, csv_dir: Path | None, layers: bool, all_runs: bool, runs: list[str] | None) -> None:
    """The first combination of ``report``'s options that means nothing, as one error, before any run is read."""
    if md and as_html:
        raise GcbenchError("--md and --html are exclusive (run the command twice for both)")
    if output is not None and not (md or as_html):
        raise GcbenchError("--output needs --md or --html")
    if not 0 <= threshold < float("inf"):  # NaN fails this too
        raise GcbenchError(f"--threshold must be a finite number ≥ 0, got {threshold}")
    if not 0 < alpha < 1:
        raise GcbenchError(f"--alpha must be in (0, 1), got {alpha}")
    if fail_on_regression and not baseline:
        raise GcbenchError("--fail-on-regression needs --baseline RUN")
    if csv_dir is not None and (md or as_html or baseline or output is not None or layers):
        raise GcbenchError("--csv writes its own files: leave out --md, --html, --output, --baseline and --layers")
    if layers and (as_html or baseline):
        raise GcbenchError("--layers is for the terminal and --md (the HTML report has its own per-layer view), not --baseline")
    if all_runs and not as_html:
        raise GcbenchError("--all is for --html (the terminal, Markdown and CSV reports show every run already)")
    if all_runs and (runs or baseline):
        raise GcbenchError("--all renders every run of --runs-dir: leave out the RUN names and --baseline")


def _priced(inp: Any, clusters: list[str], kernels: Path | None, compute_ms: float | None, latency_us: float) -> Any:
    """``inp`` with every convergence file priced on ``clusters`` (``--cluster``) from the bench file ``kernels``."""
    import dataclasses

    from gcbench.predict.advise import price_convergence_file
    from gcbench.predict.network import compute_seconds, latency_seconds
    from gcbench.predict.time_to_accuracy import parse_cluster
    from gcbench.results.store import load_run

    if not clusters or kernels is None:
        raise GcbenchError("--cluster WORKERSxGBITS and --kernels FILE go together (--compute-ms with them)")
    if inp.comparison is not None:
        raise GcbenchError("--cluster prices convergence files: leave out --baseline")
    pairs = [parse_cluster(c) for c in clusters]
    latency_s = latency_seconds(latency_us, "--latency-us")
    conv_runs = [r for r in inp.detailed if r.kind == "converge"]
    if not conv_runs:
        raise GcbenchError("--cluster prices convergence files (`gcbench converge`); none of the runs shown is one")
    compute_s = compute_seconds(compute_ms, "--compute-ms")
    bench = load_run(kernels)
    priced = {id(r): price_convergence_file(r.data, str(r.path), bench, str(kernels), pairs, latency_s, compute_s)
              for r in conv_runs}

    # one new object per run, in both lists: the HTML page finds the detailed runs among the loaded ones by identity
    new = {k: dataclasses.replace(r, pricing=priced[k]) for r in conv_runs for k in (id(r),)}
    return dataclasses.replace(inp, loaded=[new.get(id(r), r) for r in inp.loaded], detailed=[new.get(id(r), r) for r in inp.detailed])


def _write_csv(csv_dir: Path, loaded: list[Any], inputs: list[Path]) -> None:
    """``--csv DIR``: the four tables written into ``DIR``, each replacing only a table that gcbench wrote."""
    from gcbench.report.export import CSV_FILES, write_csv

    check_not_an_input([csv_dir / name for name in CSV_FILES], inputs, "--csv")
    for name in CSV_FILES:  # each table gcbench wrote starts with its run_id column
        check_replaceable(csv_dir / name, "--csv", "a table that gcbench report --csv wrote",
                          lambda head: head.startswith(b"run_id,"))

    for w in write_csv(csv_dir, loaded):
        plain(f"{w.path}: {w.rows:,} rows{' (replaced)' if w.replaced else ''}")


def _check_output(as_html: bool, output: Path | None, inputs: list[Path]) -> None:
    """The HTML or Markdown file ``report`` writes: not one of its ``inputs``, and only a report gcbench wrote is replaced."""
    check_not_an_input([output or Path("reports/index.html")], inputs, "--output")
    if as_html:
        check_replaceable(output or Path("reports/index.html"), "--output", "an HTML report that gcbench wrote",
                          lambda head: head.lstrip().startswith(b"<!DOCTYPE html>") and b"gcbench" in head)
    elif output is not None:
        check_replaceable(output, "--output", "a Markdown report that gcbench wrote", lambda head: head.startswith(b"# gcbench"))


def _regressions(comparison: Any, loaded: list[Any], fail_on_regression: bool) -> None:
    """The regressions of ``--baseline`` on stderr and, with ``--fail-on-regression``, the gate's reasons and exit 1."""
    from gcbench.results.gate import run_gate

    if comparison.regressions:
        shown.err.print(f"[red]{len(comparison.regressions)} regression(s)[/] in {escape(comparison.new_id)} against "
                        f"{escape(comparison.baseline_id)}", highlight=False, soft_wrap=True)
    if fail_on_regression:
        # missing, failed or unfinished is a failure of the gate too, not only a worse metric
        gate = run_gate(loaded[0].data, loaded[1].data, comparison)
        for line in gate.reasons:
            error_line(f"regression gate: {line}")
        if gate.fails:
            raise typer.Exit(1)


@user_errors
def report(
    runs: Runs = None,
    runs_dir: RunsDir = Path("reports/runs"),
    md: Md = False,
    as_html: Html = False,
    output: Output = None,
    baseline: Baseline = None,
    threshold: Threshold = 0.05,
    alpha: Alpha = 0.05,
    all_metrics: AllMetrics = False,
    fail_on_regression: FailOnRegression = False,
    papers: Papers = None,
    csv_dir: Csv = None,
    layers: Layers = False,
    all_runs: AllRuns = False,
    cluster: Cluster = None,
    kernels: ReportKernels = None,
    compute_ms: ReportComputeMs = None,
    latency_us: options.LatencyUs = 5.0,
) -> None:
    """Render stored results: terminal tables, Markdown (--md) or one self-contained HTML file (--html); compare with --baseline.

    Examples: `gcbench report latest`, `gcbench report --html -o reports/cnn.html`, `gcbench report --md > results.md`,
    `gcbench report latest --layers`, `gcbench report RUN --csv out/`, `gcbench report NEW --baseline OLD --fail-on-regression`,
    `gcbench report CONV.json --cluster 16x10 --cluster 64x1 --kernels bench.json --compute-ms 120`.
    """
    from gcbench.report.load import report_input
    from gcbench.report.markdown import markdown_layers_report, markdown_report
    from gcbench.report.terminal import layers_report, terminal_report

    _check_options(md, as_html, output, baseline, threshold, alpha, fail_on_regression, csv_dir, layers, all_runs, runs)
    if output is not None:
        check_output_file(output, "--output")

    def skipped(exc: GcbenchError) -> None:
        shown.warn(f"skipped {exc}")

    # --html renders the newest run and lists the others: rendering every run of a big folder took minutes
    inp = report_input(runs, runs_dir, baseline, threshold, alpha, finished_only=fail_on_regression, on_skip=skipped,
                       newest_only=as_html)  # --all: each run's page is rendered on its own (report/html_all.py)
    if cluster or kernels is not None or compute_ms is not None:
        inp = _priced(inp, cluster or [], kernels, compute_ms, latency_us)
    loaded, detailed, comparison = inp.loaded, inp.detailed, inp.comparison
    inputs = [r.path for r in loaded] + [f for f in (papers, kernels) if f is not None]
    if csv_dir is not None:
        _write_csv(csv_dir, loaded, inputs)
        return
    if layers and not md:
        emit(layers_report(loaded, shown.out.width))
        return
    if as_html or output is not None:
        _check_output(as_html, output, inputs)
    claims, claims_missing = _claims_for(papers, detailed)
    if as_html and all_runs:
        from gcbench.report.html_all import write_html_all

        pages = write_html_all(output or Path("reports/index.html"), inp, claims, claims_missing, on_skip=skipped)
        plain(f"report: {pages.index} ({pages.rendered} run page(s) rendered, {pages.reused} reused in {pages.folder})")
    elif as_html:
        from gcbench.report.html import write_html

        path = write_html(output or Path("reports/index.html"), loaded, claims, comparison, detailed=detailed,
                          claims_missing=claims_missing, index=inp.index, history=inp.history)
        plain(f"report: {path}")
    elif md:
        text = markdown_layers_report(detailed) if layers else markdown_report(detailed, claims, comparison, all_metrics)
        if output is not None:
            atomic_write(output, text)  # a full disk leaves the previous file whole, and the error names it
            plain(f"report: {output}")
        else:
            print(text)
    else:
        emit(terminal_report(inp, claims, claims_missing, all_metrics))
    if comparison is not None:
        _regressions(comparison, loaded, fail_on_regression)
