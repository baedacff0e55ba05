"""The device path's check: the contract and same-bytes tests with tensors on the GPU, and a GPU bench.

A CUDA tensor takes every compressor's plain torch path (the numba kernels are CPU-only), which
the CPU test suite covers only with ``GCBENCH_KERNELS=torch``.  On a machine with CUDA this script
runs, each step under its own timeout and within about 8 minutes in all:

1. ``pytest tests/compressors/test_contract.py`` with ``GCBENCH_TEST_DEVICE=cuda`` (inputs on the GPU);
2. ``pytest tests/compressors/test_same_bytes.py`` likewise: every compressor's payloads on the GPU decode
   to what its CPU payloads decode to, within float rounding (bit-identity is reported);
3. ``python -m gcbench bench --device cuda`` on a few compressors and two sizes: compress and
   decompress ×copy against a device-to-device copy of the same tensor (the bench synchronises the
   device around every timed call).

Usage::

    python benchmarks/device_check.py OUTDIR

OUTDIR receives ``device_check.log`` (every step's command and output), each step's JUnit XML, the
bench results file and ``summary.json`` (``status``: ``passed``, ``failed`` or ``skipped``; one entry
per step with its exit status, seconds and whether it timed out).  Without a CUDA device it writes
"no CUDA device: skipped" to the log and a ``skipped`` summary, and exits 0; otherwise it exits 1
when a step failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: the whole check stays under this many seconds (the device machine's budget is short); each step also has its own cap
TOTAL_BUDGET_S = 450.0

#: compressors and sizes of the bench step: a copy-like cast, a selection, a quantizer, the block-scaled formats (their torch
#: path is the GPU path); one cache-sized and one larger tensor
BENCH_COMPRESSORS = ("none", "fp16", "topk", "qsgd", "fp8", "mxfp4", "nvfp4")
BENCH_SIZES = "1M,16M"


def _steps(out: Path) -> list[dict[str, Any]]:
    """The steps: name, command (run from the repository root), cap in seconds, extra environment."""
    py = sys.executable
    gpu = {"GCBENCH_TEST_DEVICE": "cuda"}
    bench = [py, "-m", "gcbench", "bench", *[a for c in BENCH_COMPRESSORS for a in ("-c", c)], "--sizes", BENCH_SIZES,
             "--device", "cuda", "--rounds", "5", "--out", str(out / "bench"), "--json", "--quiet",
             "--no-isolate"]  # one process: eight CUDA start-ups would take most of the step's time
    return [
        {"name": "contract", "timeout_s": 180, "env": gpu,
         "cmd": [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--maxfail=25", "tests/compressors/test_contract.py",
                 "--junitxml", str(out / "contract.xml")]},
        {"name": "same-bytes", "timeout_s": 110, "env": gpu,
         "cmd": [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--maxfail=25", "tests/compressors/test_same_bytes.py",
                 "-k", "on_the_test_device", "-rA", "-s", "--junitxml", str(out / "same_bytes.xml")]},
        {"name": "bench", "timeout_s": 150, "env": {}, "cmd": bench},
    ]


class Log:
    """The check's log: every line to ``path`` and to stdout."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("", encoding="utf-8")

    def __call__(self, text: str) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(text.rstrip("\n") + "\n")
        print(text.rstrip("\n"), flush=True)


def write_summary(out: Path, summary: dict[str, Any]) -> Path:
    """Write ``summary.json`` atomically (a temporary name, then renamed): a reader never sees half of it."""
    path = out / "summary.json"
    tmp = out / f".summary.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def cuda_device() -> str | None:
    """The CUDA device's name, or None where torch sees no CUDA device."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def run_step(step: dict[str, Any], timeout_s: float, log: Log) -> dict[str, Any]:
    """Run one step from the repository root under ``timeout_s``; its output goes to the log."""
    log(f"== {step['name']} (at most {timeout_s:.0f} s): {' '.join(step['cmd'])}")
    env = {**os.environ, **step["env"]}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(step["cmd"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
        rc, stdout, stderr, timed_out = proc.returncode, proc.stdout, proc.stderr, False
    except subprocess.TimeoutExpired as exc:
        rc, timed_out = None, True
        stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    seconds = time.monotonic() - t0
    for text in (stdout, stderr):
        if text.strip():
            log(text)
    log(f"-- {step['name']}: " + (f"timed out after {seconds:.0f} s" if timed_out else f"exit {rc} in {seconds:.0f} s"))
    rec: dict[str, Any] = {"name": step["name"], "cmd": step["cmd"], "env": step["env"], "rc": rc, "timed_out": timed_out,
                           "seconds": round(seconds, 1), "ok": rc == 0}
    if step["name"] == "bench" and rc == 0:
        rec["bench"] = _bench_summary(stdout)
    return rec


def _bench_summary(stdout: str) -> dict[str, Any]:
    """The bench's results file and each case's ×copy medians, from ``bench --json``'s last line."""
    try:
        data = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": "bench printed no JSON"}
    cases = [{"label": c.get("label"), "numel": c.get("numel"), "device": c.get("device"), "error": c.get("error"),
              "compress_x_copy": c.get("compress_x_copy"), "decompress_x_copy": c.get("decompress_x_copy")}
             for c in data.get("cases", [])]
    return {"results": data.get("results"), "cases": cases}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python benchmarks/device_check.py OUTDIR", file=sys.stderr)
        return 2
    out = Path(argv[0]).resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    log = Log(out / "device_check.log")
    summary: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "budget_s": TOTAL_BUDGET_S,
                               "steps": []}
    device = cuda_device()
    if device is None:
        log("no CUDA device: skipped")
        write_summary(out, {**summary, "status": "skipped", "reason": "no CUDA device", "device": None})
        return 0
    log(f"device: {device}")
    summary["device"] = device
    start = time.monotonic()
    for step in _steps(out):
        left = TOTAL_BUDGET_S - (time.monotonic() - start)
        if left < 20:
            log(f"== {step['name']}: not run, the check's {TOTAL_BUDGET_S:.0f} s are spent")
            summary["steps"].append({"name": step["name"], "ok": False, "rc": None, "timed_out": False, "skipped": "no time left"})
            continue
        summary["steps"].append(run_step(step, min(step["timeout_s"], left), log))
        write_summary(out, {**summary, "status": "running"})  # what finished is on disk even if the machine goes away
    ok = all(s["ok"] for s in summary["steps"])
    summary["status"] = "passed" if ok else "failed"
    summary["seconds"] = round(time.monotonic() - start, 1)
    write_summary(out, summary)
    log(f"device check {summary['status']} in {summary['seconds']:.0f} s: "
        + ", ".join(f"{s['name']} {'ok' if s['ok'] else 'FAILED'}" for s in summary["steps"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
