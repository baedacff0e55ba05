"""Render stored results and run the quick suite, keeping every output that must not change in a refactor.

A change of structure (moved modules, a new renderer) must leave what gcbench prints and writes the
same.  This script, run from a checkout, writes into OUTDIR:

* for every results file named (default: the golden records under ``tests/golden``), what
  ``gcbench report`` renders from it: the terminal tables (``COLUMNS=200``), the Markdown (``--md``),
  the four CSV files (``--csv``), the per-layer tables, and the numbers of the HTML page (every number
  in its text, the markup dropped);
* ``quick.json``: the bundled quick suite run afresh and ``compare.json``: a ``compare`` run, both with
  every time-like field (timings, ×copy, environment, dates, ids, paths) removed, so what remains is
  sizes, bytes, fidelity and flags, which are deterministic for fixed seeds;
* ``converge.*``: a small ``converge`` run (digits, 2 workers, 20 steps, 2 seeds) stripped the same way, and
  its ``report`` (terminal and ``--md``);
* ``collectives.*``: a small ``collectives`` sweep (JSON and terminal; it prints no timings);
* ``advise.*``, ``simulate.*``, ``converge-mlp.cluster.*``: ``advise`` and ``simulate`` on a hand-made bench
  file (fixed kernel times, so the prediction is deterministic) with a fixed compute time, with and without a
  small ``converge --model mlp`` run, and ``report CONV --cluster`` priced from the same bench file;
* ``help/``: ``gcbench --help`` and every command's ``--help``.

Run paths and run ids in printed text become ``RUN``/``RUNS``, so two runs of one checkout diff empty.

Usage::

    python benchmarks/output_snapshot.py OUTDIR [RESULTS.json ...]
    diff -r BEFORE AFTER          # empty when nothing a user sees changed

Every command runs as ``python -m gcbench`` from the current folder, so the checkout you stand in is
the one measured.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: record keys whose values are times, machine facts or identities: they differ between any two runs
VOLATILE = {"timing", "x_copy", "environment", "env", "created_utc", "finished_utc", "run_id", "suite_path", "git",
            "writer", "elapsed_s", "seconds", "wall_s", "load_per_core", "foreign_cpu", "timings", "step_time",
            "results", "path", "copy_spread", "copy_range_s", "calibration", "pid", "host"}


def gcbench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", **(env or {})}
    return subprocess.run([sys.executable, "-m", "gcbench", *args], capture_output=True, text=True, env=full_env, check=False)


#: significant digits kept of a fresh run's floats: parallel float sums may end in other last bits from
#: run to run (seen: a compare's aggregate cosine 0.4731482072962915 then ...153 on the same commit)
DIGITS = 10
#: a float this close to zero is a sum that cancelled, kept as 0.0: its last bits are noise (seen: the quick
#: suite's q_scaled mean 0.0 in one run, -3.700743415e-17 in the next, on the same tree)
ZERO = 1e-15


def fixed(value: float) -> float:
    """``value`` as a fresh run's float is compared: DIGITS significant digits, cancellation noise as zero."""
    return 0.0 if abs(value) < ZERO else float(f"{value:.{DIGITS}g}")


def strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip(v) for k, v in sorted(value.items()) if k not in VOLATILE and not k.endswith("_s")}
    if isinstance(value, list):
        return [strip(v) for v in value]
    if isinstance(value, float):
        return fixed(value)
    return value


def html_numbers(html: str) -> str:
    """The numbers a reader sees on the page, in order: markup, scripts and styles dropped."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    body = re.sub(r"Rendered \d{4}-\d{2}-\d{2} \d{2}:\d{2}", "Rendered DATE", body)  # when the page was rendered
    text = re.sub(r"<[^>]+>", " ", body)
    return "\n".join(re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text)) + "\n"


def render(out: Path, results: Path) -> None:
    name = results.stem
    (out / f"{name}.terminal.txt").write_text(gcbench("report", str(results)).stdout, encoding="utf-8")
    (out / f"{name}.layers.txt").write_text(gcbench("report", str(results), "--layers").stdout, encoding="utf-8")
    (out / f"{name}.md").write_text(gcbench("report", str(results), "--md").stdout, encoding="utf-8")
    csv_dir = out / f"{name}.csv"
    gcbench("report", str(results), "--csv", str(csv_dir))
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "page.html"
        gcbench("report", str(results), "--html", "-o", str(page))
        if page.exists():
            (out / f"{name}.html-numbers.txt").write_text(html_numbers(page.read_text(encoding="utf-8")), encoding="utf-8")


def fresh(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        gcbench("run", "quick", "--out", tmp, "--quiet")
        for f in sorted(Path(tmp).glob("*.json")):
            (out / "quick.json").write_text(json.dumps(strip(json.loads(f.read_text())), indent=1, sort_keys=True) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        gcbench("compare", "topk", "qsgd", "--model", "mlp", "--steps", "2", "--out", tmp, "--quiet")
        for f in sorted(Path(tmp).glob("*.json")):
            (out / "compare.json").write_text(json.dumps(strip(json.loads(f.read_text())), indent=1, sort_keys=True) + "\n")


def stripped_json(path: Path) -> str:
    return json.dumps(strip(json.loads(path.read_text(encoding="utf-8"))), indent=1, sort_keys=True) + "\n"


#: a run id as gcbench names results files (20261202T012100Z-converge-digits-8e0966): it holds the time of the run
RUN_ID = re.compile(r"\d{8}T\d{6}Z-[\w.:-]+?-[0-9a-f]{6}")
#: the date of a fresh run, as the runs table prints it
DATE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\+00:00")


def checkout_commit() -> str:
    """The checkout's commit, which a fresh run's table names: it differs between the before and after trees."""
    proc = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


COMMIT = checkout_commit()


def text(proc: subprocess.CompletedProcess[str], *folders: str) -> str:
    """What a command printed, stdout then stderr, with the temporary folders and run ids it names made fixed."""
    body = proc.stdout + (f"--- stderr ---\n{proc.stderr}" if proc.stderr else "") + f"--- exit {proc.returncode} ---\n"
    for folder in folders:
        body = body.replace(folder, "RUNS")
    if COMMIT:  # the table prints 10 hex digits and +dirty when the tree has edits
        body = re.sub(re.escape(COMMIT[:10]) + r"[0-9a-f]*(\+dirty)?", "COMMIT", body)
    return DATE.sub("DATE", RUN_ID.sub("RUN", body))


def converge_file(folder: str, *args: str) -> Path | None:
    # one thread, named: the automatic choice looks at the machine's load, and the runs table prints it
    gcbench("converge", *args, "--threads", "1", "--out", folder, "--quiet")
    found = sorted(Path(folder).glob("*.json"))
    return found[0] if found else None


def fresh_converge(out: Path) -> None:
    """A converge run small enough for two cores in seconds: its file (times dropped) and what report prints of it."""
    with tempfile.TemporaryDirectory() as tmp:
        conv = converge_file(tmp, "--task", "digits", "--steps", "20", "--workers", "2", "--seeds", "2",
                             "-c", "topk:density=0.01", "-c", "qsgd")
        if conv is None:
            (out / "converge.missing.txt").write_text("converge wrote no results file\n", encoding="utf-8")
            return
        (out / "converge.json").write_text(stripped_json(conv), encoding="utf-8")
        (out / "converge.terminal.txt").write_text(text(gcbench("report", str(conv)), tmp), encoding="utf-8")
        (out / "converge.md").write_text(text(gcbench("report", str(conv), "--md"), tmp), encoding="utf-8")


def collectives(out: Path) -> None:
    """A small collectives sweep (seconds on two cores): error and bytes per worker, which it prints without timings."""
    args = ("collectives", "bf16", "qsgd", "--numel", "65536", "--draws", "3", "--workers", "2,4,8", "--quiet")
    proc = gcbench(*args, "--json")
    body = stripped_json_text(proc.stdout) if proc.returncode == 0 else text(proc)
    (out / "collectives.json").write_text(body, encoding="utf-8")
    (out / "collectives.terminal.txt").write_text(text(gcbench(*args)), encoding="utf-8")


def stripped_json_text(raw: str) -> str:
    return json.dumps(strip(json.loads(raw)), indent=1, sort_keys=True) + "\n"


def rounded(value: Any) -> Any:
    """``value`` with its floats cut to DIGITS, nothing dropped: a prediction's ``*_s`` fields are its answer."""
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    if isinstance(value, float):
        return fixed(value)
    return value


def prediction_json(proc: subprocess.CompletedProcess[str], folder: str) -> str:
    """A prediction's JSON with the temporary folder named RUNS; what the command said instead, if it failed."""
    if proc.returncode != 0:
        return text(proc, folder)
    return json.dumps(rounded(json.loads(RUN_ID.sub("RUN", proc.stdout.replace(folder, "RUNS")))), indent=1, sort_keys=True) + "\n"


#: dense bytes of the hand-made mlp bench below
DENSE = 4.0e6


def bench_record() -> dict[str, Any]:
    """A bench file of whole-model mlp steps for none, topk and randomk: hand-made kernel times, not measured, so
    that advise, simulate and report --cluster price the same steps on every run (the numbers of
    tests/distributed/test_time_to_accuracy.py's bench)."""
    def case(name: str, ratio: float, seconds: float) -> dict[str, Any]:
        t = {"median_s": seconds, "iqr_s": 0.0, "samples_s": [seconds] * 3}
        copy = {"median_s": 1e-3, "iqr_s": 0.0, "samples_s": [1e-3] * 3}
        return {"compressor": name, "label": name, "params": {}, "version": 1, "numel": int(DENSE / 4), "model": "mlp",
                "tensors": 6, "threads": 1, "device": "cpu", "status": "ok", "input_bytes": DENSE, "ratio": ratio,
                "compress": t, "decompress": t, "copy": copy}
    return {"schema_version": 1, "kind": "bench", "environment": {"cpu_model": "snapshot", "cpu_count": 2},
            "cases": [case("none", 1.0, 1e-3), case("topk", 50.0, 2e-3), case("randomk", 100.0, 1e-4)]}


def predictions(out: Path) -> None:
    """advise, simulate and report --cluster on fixed kernel times and a fixed compute time: their text and JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        bench = Path(tmp) / "bench.json"
        bench.write_text(json.dumps(bench_record()), encoding="utf-8")
        runs = Path(tmp) / "runs"  # empty: advise finds no convergence file of its own
        runs.mkdir()
        base = ("advise", "--model", "mlp", "--kernels", str(bench), "--compute-ms", "5", "--workers", "16,64",
                "--bandwidth", "1,10,100", "--runs-dir", str(runs), "-o", str(runs), "--quiet")
        (out / "advise.terminal.txt").write_text(text(gcbench(*base), tmp), encoding="utf-8")
        (out / "advise.detail.txt").write_text(text(gcbench(*base, "--detail"), tmp), encoding="utf-8")
        (out / "advise.fp32.txt").write_text(text(gcbench(*base, "--baseline", "fp32", "--overlap"), tmp), encoding="utf-8")
        (out / "advise.json").write_text(prediction_json(gcbench(*base, "--json"), tmp), encoding="utf-8")
        # simulate prices a results file's payloads (a bench file has none): the golden run, a fixed input
        sim = ("simulate", "tests/golden/run_base.json", "--workers", "16,64", "--bandwidth", "1,10,100", "--compute-ms", "5",
               "--runs-dir", str(runs))
        (out / "simulate.terminal.txt").write_text(text(gcbench(*sim), tmp), encoding="utf-8")
        (out / "simulate.json").write_text(prediction_json(gcbench(*sim, "--json"), tmp), encoding="utf-8")
        conv_dir = Path(tmp) / "conv"
        conv = converge_file(str(conv_dir), "--model", "mlp", "--workers", "2", "--steps", "4", "--seeds", "2",
                             "--eval-every", "1", "-c", "topk", "-c", "randomk")
        if conv is None:
            (out / "converge-mlp.missing.txt").write_text("converge --model mlp wrote no results file\n", encoding="utf-8")
            return
        (out / "converge-mlp.json").write_text(stripped_json(conv), encoding="utf-8")
        (out / "advise.convergence.txt").write_text(text(gcbench(*base, "--convergence", str(conv), "--detail"), tmp),
                                                    encoding="utf-8")
        (out / "advise.convergence.json").write_text(prediction_json(gcbench(*base, "--convergence", str(conv), "--json"), tmp),
                                                     encoding="utf-8")
        cluster = ("report", str(conv), "--cluster", "16x10", "--cluster", "64x1", "--kernels", str(bench), "--compute-ms", "5")
        (out / "converge-mlp.cluster.txt").write_text(text(gcbench(*cluster), tmp), encoding="utf-8")
        (out / "converge-mlp.cluster.md").write_text(text(gcbench(*cluster, "--md"), tmp), encoding="utf-8")


def helps(out: Path) -> None:
    """``gcbench --help`` and each command's: the commands read from the top help's Commands panel."""
    folder = out / "help"
    folder.mkdir(exist_ok=True)
    top = gcbench("--help").stdout
    (folder / "gcbench.txt").write_text(top, encoding="utf-8")
    panel = top.split("Commands", 1)[1] if "Commands" in top else ""
    for name in re.findall(r"^│ ([a-z][a-z-]*) ", panel, flags=re.M):
        (folder / f"{name}.txt").write_text(text(gcbench(name, "--help")), encoding="utf-8")


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__.split("Usage::")[1].split("Every")[0].strip(), file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    golden = Path("tests/golden")
    files = [Path(a) for a in argv[1:]] or [*sorted(golden.glob("run_*.json")), golden / "bench_small.json", golden / "train_digits.json"]
    for f in files:
        render(out, f)
    new, base = Path("tests/golden/run_new.json"), Path("tests/golden/run_base.json")
    if new.exists() and base.exists():  # the comparison view: the same tables a CI gate prints
        (out / "compare-base.terminal.txt").write_text(gcbench("report", str(new), "--baseline", str(base)).stdout, encoding="utf-8")
        (out / "compare-base.md").write_text(gcbench("report", str(new), "--baseline", str(base), "--md").stdout, encoding="utf-8")
    fresh(out)
    fresh_converge(out)
    collectives(out)
    predictions(out)
    helps(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
