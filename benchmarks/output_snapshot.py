"""Render stored results and run the quick suite, keeping every output that must not change in a refactor.

A change of structure (moved modules, a new renderer) must leave what gcbench prints and writes the
same.  This script, run from a checkout, writes into OUTDIR:

* for every results file named (default: the golden records under ``tests/golden``), what
  ``gcbench report`` renders from it: the terminal tables (``COLUMNS=200``), the Markdown (``--md``),
  the four CSV files (``--csv``), the per-layer tables, and the numbers of the HTML page (every number
  in its text, the markup dropped);
* ``quick.json``: the bundled quick suite run afresh and ``compare.json``: a ``compare`` run, both with
  every time-like field (timings, ×copy, environment, dates, ids, paths) removed, so what remains is
  sizes, bytes, fidelity and flags, which are deterministic for fixed seeds.

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


def strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip(v) for k, v in sorted(value.items()) if k not in VOLATILE and not k.endswith("_s")}
    if isinstance(value, list):
        return [strip(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}")
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
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
