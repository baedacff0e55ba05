"""The ``gcbench`` command line: thin typer commands over the library.

Every command is a small wrapper over an importable function.  User errors (bad suite, unknown
name, bad file) print one clear line per problem to stderr and exit 1; bugs keep their traceback.
Long work shows a rich progress bar on stderr; ``--json`` prints machine-readable output.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import gcbench
from gcbench import registry
from gcbench.errors import GcbenchError

app = typer.Typer(
    name="gcbench",
    help="Benchmark gradient compressors: real wire bytes, bias/variance and kernel throughput on the same gradients.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)
# piped output (logs, CI) gets wide tables instead of folded cells
out = Console() if sys.stdout.isatty() else Console(width=200)
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Turn :class:`GcbenchError` into one line per problem on stderr and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GcbenchError as exc:
            for line in str(exc).splitlines() or ["error"]:
                err.print(f"[bold red]error:[/] {line}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err.print("[yellow]interrupted[/]: completed cases are kept in the results file")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        out.print(f"gcbench {gcbench.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """gcbench: which gradient compressor should I use, and what does it really cost and save?"""


@contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Callable[[str, int, int, str], None]]:
    """A rich progress display fed by the runner's ``progress(stage, done, total, message)``."""
    if not enabled:
        yield lambda *a: None
        return
    prog = Progress(
        TextColumn("[bold blue]{task.fields[stage]:>9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
    tasks: dict[str, Any] = {}

    def update(stage: str, done: int, total: int, message: str) -> None:
        if stage not in tasks:
            tasks[stage] = prog.add_task(message, total=total, stage=stage)
        prog.update(tasks[stage], completed=done, total=total, description=message)

    with prog:
        yield update


def _fmt(v: Any, kind: str = "g") -> str:
    if v is None:
        return "—"
    if kind == "ratio":
        return f"{v:,.1f}×" if v < 1000 else f"{v:,.0f}×"
    if kind == "ms":
        return f"{1e3 * v:.2f}"
    if kind == "x":
        return f"{v:.1f}×"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return str(v)


def results_tables(cases: list[dict[str, Any]], title: str) -> list[Table]:
    """Ratio / error / time per case, one table per gradient source."""
    by_source: dict[str, list[dict[str, Any]]] = {}
    for c in cases:
        src = c.get("source", {})
        by_source.setdefault(src.get("label") or src.get("name", "?"), []).append(c)
    tables = []
    for src, rows in by_source.items():
        t = Table(title=f"{title} — {src}", title_justify="left")
        for col in ("case", "ratio", "bits/el", "q", "bias²", "cosine", "agg q", "comp ms", "dec ms", "comp/copy"):
            t.add_column(col, justify="left" if col == "case" else "right", no_wrap=True)
        for c in rows:
            label = c.get("label", "?") + (" †" if c.get("flags", {}).get("reconstructed") else "")
            if c.get("status") != "ok":
                t.add_row(label, f"[red]failed: {c.get('error', '')}[/]", *[""] * 8)
                continue
            fid, tim = c["fidelity"], c.get("timing") or {}
            t.add_row(
                label, _fmt(c["size"]["ratio"], "ratio"), _fmt(c["size"]["bits_per_element"]),
                _fmt(fid["q"]["model"]), _fmt(fid["bias2"]["model"]), _fmt(fid["cosine"]["mean"]),
                _fmt(c["aggregate"]["q"]["model"]),
                _fmt(tim.get("compress", {}).get("median_s"), "ms"), _fmt(tim.get("decompress", {}).get("median_s"), "ms"),
                _fmt(1 / tim["copy_fraction_compress"] if tim.get("copy_fraction_compress") else None, "x"),
            )
        tables.append(t)
    return tables


def _parse_specs(specs: list[str] | None) -> list[tuple[str, dict[str, Any]]] | None:
    if not specs:
        return None
    return [registry.parse_spec(s) for s in specs]


# ----------------------------------------------------------------------------- run


@app.command()
@user_errors
def run(
    suite: Annotated[str | None, typer.Argument(help="Suite file or bundled suite name (default: suites/quick.toml).")] = None,
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Folder for the results file.")] = Path("reports/runs"),
    seed: Annotated[int | None, typer.Option(help="Override the suite's seed.")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda or auto.")] = None,
    repeats: Annotated[int | None, typer.Option(help="R: compressions per tensor for stochastic compressors.")] = None,
    trace: Annotated[str | None, typer.Option(help="Replace the suite's sources with a recorded trace folder.")] = None,
    model: Annotated[str | None, typer.Option(help="Replace the suite's sources with live gradients of a zoo model.")] = None,
    workers: Annotated[int | None, typer.Option(help="Override the number of workers.")] = None,
    steps: Annotated[int | None, typer.Option(help="Override the number of steps.")] = None,
    granularity: Annotated[str | None, typer.Option(help="layer, bucket or model.")] = None,
    bucket_mb: Annotated[float | None, typer.Option(help="Bucket size in MiB for granularity=bucket.")] = None,
    compressor: Annotated[list[str] | None, typer.Option("--compressor", "-c", help="Run these instead of the suite's (repeatable; name or name:key=value,...).")] = None,
    no_timing: Annotated[bool, typer.Option("--no-timing", help="Skip compress/decompress timing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results file's path and cases as JSON.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Run a benchmark suite and write one results file to reports/runs/."""
    from gcbench.runner import run_suite
    from gcbench.suite import apply_overrides, find_suite, load_suite

    path = find_suite(suite)
    s = load_suite(path)
    s = apply_overrides(s, seed=seed, device=device, repeats=repeats, trace=trace, model=model, workers=workers, steps=steps,
                        granularity=granularity, bucket_mb=bucket_mb, compressors=_parse_specs(compressor),
                        timing=False if no_timing else None)
    with progress_bar(not quiet and not as_json) as prog:
        outcome = run_suite(s, out_dir, prog, suite_path=str(path))
    if as_json:
        print(json.dumps({"results": str(outcome.path), "cases": outcome.records}, default=str))
    else:
        for table in results_tables(outcome.records, f"gcbench run {s.name}"):
            out.print(table)
        if any(c.get("flags", {}).get("reconstructed") for c in outcome.records):
            out.print("† reconstructed definition (paper body unavailable); see `gcbench list`.")
        out.print("q = relative MSE ‖C(x)−x‖²/‖x‖² (whole model); bias² from R compressions; agg q = exchanged aggregate vs "
                  "true worker mean; comp/copy = compress time as a multiple of a plain copy of the same tensors.")
        out.print(f"results: {outcome.path}")
    if outcome.failed:
        err.print(f"[red]{len(outcome.failed)} case(s) failed[/]: " + "; ".join(f"{c['label']}: {c.get('error')}" for c in outcome.failed[:5]))
        raise typer.Exit(1)


# ----------------------------------------------------------------------------- list / validate


@app.command("list")
@user_errors
def list_cmd(
    what: Annotated[str, typer.Argument(help="compressors, models, suites or metrics.")] = "compressors",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    params: Annotated[bool, typer.Option("--params", "-p", help="Also show each compressor's parameters.")] = False,
) -> None:
    """List the registered compressors (default), zoo models, bundled suites or metrics."""
    from gcbench.errors import UnknownNameError, did_you_mean

    kinds = ("compressors", "models", "suites", "metrics")
    if what not in kinds:
        raise UnknownNameError(did_you_mean(what, list(kinds), "list kind"))
    if what == "compressors":
        infos = registry.infos()
        if as_json:
            print(json.dumps([i.to_dict() for i in infos], indent=1))
            return
        t = Table(title=f"{len(infos)} compressors", title_justify="left")
        for col in ("name", "v", "flags", "description", "paper"):
            t.add_column(col, overflow="fold")
        for i in infos:
            flags = i.flags().replace("RECONSTRUCTED", "[bold yellow]RECONSTRUCTED[/]")
            desc = i.description
            if params:
                desc += "\n" + "\n".join(f"  [dim]{p.name}={p.default!r}[/] ({p.range_text()}): {p.help}" for p in i.params)
            t.add_row(i.name, str(i.version), flags, desc, i.paper)
        out.print(t)
        return
    if what == "models":
        from gcbench.zoo import MODELS

        rows = [{"name": n, "description": m.description} for n, m in MODELS.items()]
        if as_json:
            print(json.dumps(rows, indent=1))
            return
        t = Table(title="zoo models (or any package.module:factory)", title_justify="left")
        t.add_column("name")
        t.add_column("description")
        for r in rows:
            t.add_row(r["name"], r["description"])
        out.print(t)
        return
    if what == "suites":
        from gcbench.suite import SUITE_DIR, load_suite

        rows = []
        for p in sorted(SUITE_DIR.glob("*.toml")):
            try:
                s = load_suite(p)
                rows.append({"name": p.stem, "path": str(p), "description": s.description, "compressors": len(s.compressors)})
            except GcbenchError as exc:
                rows.append({"name": p.stem, "path": str(p), "description": f"INVALID: {exc}", "compressors": 0})
        if as_json:
            print(json.dumps(rows, indent=1))
            return
        t = Table(title="bundled suites", title_justify="left")
        for col in ("name", "compressors", "description"):
            t.add_column(col, overflow="fold")
        for r in rows:
            t.add_row(r["name"], str(r["compressors"]), r["description"])
        out.print(t)
        return
    from gcbench.metrics import metrics_metadata

    rows = metrics_metadata()
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    t = Table(title="metrics", title_justify="left")
    for col in ("name", "unit", "better", "description"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(r["name"], r["unit"], "higher" if r["higher_is_better"] else "lower", r["description"])
    out.print(t)


@app.command()
@user_errors
def validate(suite: Annotated[str, typer.Argument(help="Suite file (or bundled suite name) to check.")]) -> None:
    """Check a suite file without running it."""
    from gcbench.suite import find_suite, load_suite

    path = find_suite(suite)
    s = load_suite(path)
    out.print(f"ok: {path} — {len(s.sources)} source(s), {len(s.compressors)} compressor configuration(s), hash {s.hash()}")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


# ----------------------------------------------------------------------------- compare

# (row label, path into the case record, higher is better, format)
COMPARE_ROWS: tuple[tuple[str, tuple[str, ...], bool, str], ...] = (
    ("ratio", ("size", "ratio"), True, "ratio"),
    ("bits / element", ("size", "bits_per_element"), False, "g"),
    ("bias² (rel.)", ("fidelity", "bias2", "model"), False, "g"),
    ("variance (rel.)", ("fidelity", "variance", "model"), False, "g"),
    ("q = rel. MSE", ("fidelity", "q", "model"), False, "g"),
    ("ω̂ (unbiased)", ("fidelity", "omega_hat", "model"), False, "g"),
    ("δ (Beznosikov)", ("fidelity", "delta", "model"), False, "g"),
    ("cosine", ("fidelity", "cosine", "mean"), True, "g"),
    ("aggregate q", ("aggregate", "q", "model"), False, "g"),
    ("EF drift (last step)", ("ef_drift", "sum_drift", -1), False, "g"),
    ("compress GB/s", ("timing", "compress", "gbps"), True, "g"),
    ("decompress GB/s", ("timing", "decompress", "gbps"), True, "g"),
    ("compress ms", ("timing", "compress", "median_s"), False, "ms"),
    ("decompress ms", ("timing", "decompress", "median_s"), False, "ms"),
)


def _dig(rec: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        if rec is None:
            return None
        if isinstance(key, int):
            rec = rec[key] if isinstance(rec, list) and rec else None
        else:
            rec = rec.get(key) if isinstance(rec, dict) else None
    return rec


def compare_rows(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Side-by-side rows with the best value per row and timing significance (Mann–Whitney)."""
    from gcbench.metrics import mann_whitney

    rows = []
    for label, path, higher, fmt in COMPARE_ROWS:
        vals = [_dig(c, path) if c.get("status") == "ok" else None for c in cases]
        present = [(i, v) for i, v in enumerate(vals) if v is not None]
        best = None
        if len(present) > 1:
            best = (max if higher else min)(present, key=lambda iv: iv[1])[0]
        same_as_best: list[bool] = [False] * len(cases)
        if best is not None and path[0] == "timing":  # within noise of the best?
            kind = path[1]
            b_samples = _dig(cases[best], ("timing", kind, "samples_s")) or []
            for i, _ in present:
                if i != best:
                    p = mann_whitney(b_samples, _dig(cases[i], ("timing", kind, "samples_s")) or [])
                    same_as_best[i] = p is not None and p >= 0.05
        rows.append({"metric": label, "higher_is_better": higher, "values": vals, "best": best,
                     "not_significant": same_as_best, "format": fmt})
    return rows


@app.command()
@user_errors
def compare(
    compressors: Annotated[list[str], typer.Argument(help="Two or more compressors, e.g. dgc sdagc 'topk:density=0.001'.")],
    model: Annotated[str | None, typer.Option(help="Live gradients of this zoo model (or package.module:factory).")] = None,
    trace: Annotated[str | None, typer.Option(help="Replay a recorded trace folder.")] = None,
    shape: Annotated[str | None, typer.Option(help="Synthetic tensor shape, e.g. 1000x1000 (default when no model/trace).")] = None,
    distribution: Annotated[str, typer.Option(help="Synthetic distribution.")] = "normal",
    workers: Annotated[int | None, typer.Option(help="Workers (default 4 live, 2 synthetic, all of a trace).")] = None,
    steps: Annotated[int | None, typer.Option(help="Steps (default 2 live/synthetic, all of a trace).")] = None,
    repeats: Annotated[int, typer.Option(help="R compressions per tensor for stochastic compressors.")] = 8,
    timing_repeats: Annotated[int, typer.Option(help="Timed repeats.")] = 7,
    granularity: Annotated[str, typer.Option(help="layer, bucket or model.")] = "layer",
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "cpu",
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Folder for the results file.")] = Path("reports/runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Run compressors head to head on the same gradients and print them side by side."""
    from gcbench.runner import run_suite
    from gcbench.suite import parse_suite

    if len(compressors) < 1:
        raise GcbenchError("compare needs at least one compressor")
    specs = [registry.parse_spec(c) for c in compressors]
    if trace:
        src: dict[str, Any] = {"kind": "trace", "path": trace}
    elif model:
        src = {"kind": "live", "model": model, "workers": workers or 4, "steps": steps or 2}
    else:
        try:
            dims = [int(v) for v in (shape or "1024x1024").lower().replace("×", "x").split("x")]
        except ValueError:
            raise GcbenchError(f"--shape: expected dimensions like 1000x1000, got {shape!r}") from None
        src = {"kind": "synthetic", "distribution": distribution, "shapes": [dims], "workers": workers or 2, "steps": steps or 2}
    if trace and (workers or steps):
        src.update({k: v for k, v in (("workers", workers), ("steps", steps)) if v})
    suite = parse_suite({
        "name": "compare", "seed": seed, "granularity": granularity, "sources": [src],
        "compressors": [{"name": n, "params": p} for n, p in specs],
        "metrics": {"repeats": repeats, "timing_repeats": timing_repeats, "warmup": 1, "device": device},
    }, "<compare>")
    with progress_bar(not quiet and not as_json) as prog:
        outcome = run_suite(suite, out_dir, prog, kind="compare")
    cases = outcome.records
    rows = compare_rows(cases)
    if as_json:
        print(json.dumps({"results": str(outcome.path), "compressors": [c["label"] for c in cases],
                          "rows": [{k: v for k, v in r.items() if k != "format"} for r in rows]}, default=str))
    else:
        src_name = cases[0].get("source", {}).get("label") or cases[0].get("source", {}).get("name", "") if cases else ""
        first = next((c for c in cases if c.get("status") == "ok"), {})
        t = Table(title=f"gcbench compare — {src_name}, {first.get('workers', '?')} workers × {first.get('steps', '?')} steps, "
                        f"granularity {granularity}", title_justify="left")
        t.add_column("metric")
        for c in cases:
            t.add_column(c["label"] + (" †" if c.get("flags", {}).get("reconstructed") else ""), justify="right")
        for r in rows:
            cells = []
            for i, v in enumerate(r["values"]):
                text = _fmt(v, r["format"])
                if r["best"] == i:
                    text = f"[bold green]{text}[/]"
                elif r["not_significant"][i]:
                    text = f"{text} ≈"
                cells.append(text)
            t.add_row(r["metric"] + (" ↑" if r["higher_is_better"] else " ↓"), *cells)
        out.print(t)
        for c in cases:
            if c.get("status") != "ok":
                out.print(f"[red]{c['label']} failed:[/] {c.get('error')}")
        ref = {c["label"]: c["fidelity"]["reference"] for c in cases if c.get("status") == "ok"}
        if any(v != "gradient" for v in ref.values()):
            out.print("fidelity reference: " + ", ".join(f"{k}: {v}" for k, v in ref.items()))
        out.print("green = best in row; ≈ = timing not significantly different from the best (Mann–Whitney p ≥ 0.05); "
                  "† = reconstructed definition.")
        out.print(f"results: {outcome.path}")
    if outcome.failed:
        raise typer.Exit(1)


# ----------------------------------------------------------------------------- record


@app.command()
@user_errors
def record(
    model: Annotated[str, typer.Option(help="Zoo model name or package.module:factory.")],
    out_path: Annotated[Path, typer.Option("--out", "-o", help="Trace folder to write.")],
    steps: Annotated[int, typer.Option(help="Steps to record.")] = 4,
    workers: Annotated[int, typer.Option(help="Simulated workers (different batches each).")] = 2,
    seed: Annotated[int, typer.Option(help="Seed of the model and batches.")] = 0,
    warmup_steps: Annotated[int, typer.Option(help="Plain SGD steps before recording.")] = 0,
    batch_size: Annotated[int | None, typer.Option(help="Override the model's default batch size.")] = None,
    image_size: Annotated[int | None, typer.Option(help="Override the input image size (CNNs).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Record live gradients of a model to a trace folder (manifest.json + safetensors)."""
    from gcbench.recorder import record_live

    kwargs: dict[str, Any] = {}
    if batch_size is not None:
        kwargs["batch_size"] = batch_size
    if image_size is not None:
        kwargs["image_size"] = image_size
    with progress_bar(not quiet) as prog:
        path = record_live(model, steps=steps, workers=workers, out=out_path, seed=seed, warmup_steps=warmup_steps,
                           progress=lambda d, t, m: prog("record", d, t, m), **kwargs)
    size = sum(f.stat().st_size for f in Path(path).glob("*") if f.is_file())
    out.print(f"trace: {path} — {steps} steps × {workers} workers, {size / 2**20:.1f} MiB")


# ----------------------------------------------------------------------------- bench


@app.command()
@user_errors
def bench(
    compressors: Annotated[list[str] | None, typer.Argument(help="Compressors to time (default: every registered one).")] = None,
    sizes: Annotated[str, typer.Option(help="Comma-separated element counts, e.g. 1K,1M,25.6M,100M.")] = "25.6M",
    repeats: Annotated[int, typer.Option(help="Timed repeats per case.")] = 5,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up calls.")] = 1,
    threads: Annotated[int, typer.Option(help="torch threads (the targets are defined for 2).")] = 2,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    isolate: Annotated[bool, typer.Option(help="A fresh process per case (allocator state does not leak between cases).")] = True,
    baseline: Annotated[Path | None, typer.Option(help="A stored bench results file: flag compressors that got slower.")] = None,
    threshold: Annotated[float, typer.Option(help="Relative slow-down of compress×copy that counts as a regression.")] = 0.25,
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Folder for the results file.")] = Path("reports/runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    fail_on_regression: Annotated[bool, typer.Option(help="Exit 1 if any case regressed against --baseline.")] = False,
) -> None:
    """Time compress/decompress against a memory copy of the same tensor; print the target table."""
    from datetime import UTC, datetime

    from gcbench.bench import parse_size, run_bench, verdict
    from gcbench.results import SCHEMA_VERSION, atomic_write_json, environment, git_info, load_run

    names = compressors or [n for n in registry.names() if registry.get(n).min_workers <= 1]
    size_list = [parse_size(s) for s in sizes.split(",") if s.strip()]
    base_cases: dict[tuple[str, int], dict[str, Any]] = {}
    if baseline is not None:
        base = load_run(baseline)
        base_cases = {(c["compressor"], c["numel"]): c for c in base["cases"] if not c.get("error")}
    with progress_bar(not as_json) as prog:
        recs = run_bench(names, size_list, repeats=repeats, warmup=warmup, threads=threads, device=device, isolate=isolate, progress=prog)
    regressions = []
    for r in recs:
        b = base_cases.get((r["compressor"], r.get("numel")))
        if b and not r.get("error"):
            change = r["compress_x_copy"] / b["compress_x_copy"] - 1
            r["baseline_change"] = change
            if change > threshold:
                regressions.append(r)
    now = datetime.now(UTC)
    path = out_dir / f"{now:%Y%m%dT%H%M%SZ}-bench.json"
    atomic_write_json(path, {"schema_version": SCHEMA_VERSION, "kind": "bench", "run_id": path.stem, "gcbench_version": gcbench.__version__,
                             "created_utc": now.isoformat(timespec="seconds"), "environment": environment(device), "git": git_info(),
                             "suite": {"name": "bench", "sizes": size_list, "repeats": repeats, "threads": threads}, "cases": recs})
    if as_json:
        print(json.dumps({"results": str(path), "cases": recs}, default=str))
    else:
        t = Table(title=f"gcbench bench — {threads} threads, {device}; times are medians of {repeats}", title_justify="left")
        for col in ("compressor", "elements", "ratio", "comp ms", "comp×copy", "dec×copy", "vs ref", "GB/s", "peak/input", "target", ""):
            t.add_column(col, justify="left" if col in ("compressor", "target") else "right")
        for r in recs:
            if r.get("error"):
                t.add_row(r["compressor"], f"{r.get('numel', 0):,}", f"[red]{r['error']}[/]", *[""] * 8)
                continue
            target, mark = verdict(r)
            mark_txt = {"pass": "[green]pass[/]", "short": "[red]short[/]"}.get(mark, mark)
            if "baseline_change" in r:
                mark_txt += f" ({100 * r['baseline_change']:+.0f}% vs base)"
            extra = r.get("vs_torch_topk")
            if extra:
                target += " (" + ", ".join(f"{d}: {v['speedup']:.2f}×" for d, v in extra.items()) + ")"
            peak = r.get("peak_extra_bytes")
            t.add_row(r["compressor"], f"{r['numel']:,}", _fmt(r["ratio"], "ratio"), _fmt(r["compress"]["median_s"], "ms"),
                      f"{r['compress_x_copy']:.1f}×", f"{r['decompress_x_copy']:.1f}×",
                      f"{r['speedup_vs_reference']:.1f}×" if "speedup_vs_reference" in r else "—", f"{r['gbps_compress']:.2f}",
                      f"{peak / r['input_bytes']:.2f}" if peak is not None else "—", target, mark_txt)
        out.print(t)
        copy_ms = [r["copy"]["median_s"] for r in recs if not r.get("error")]
        if copy_ms:
            out.print(f"copy roofline (same tensor into a preallocated buffer): median {1e3 * float(np.median(copy_ms)):.2f} ms; "
                      "vs ref = speed-up over the straightforward reference implementation; peak/input = peak extra resident "
                      "memory during compress / input bytes.")
        out.print(f"results: {path}")
    if regressions:
        err.print(f"[red]{len(regressions)} regression(s)[/] against {baseline}: " + ", ".join(r["compressor"] for r in regressions))
        if fail_on_regression:
            raise typer.Exit(1)
