"""The device path's check: the compressors' tests with tensors on the GPU, the device guard, a GPU bench, the hook
against PyTorch's, and converge on the GPU against the CPU.

A CUDA tensor takes every compressor's plain torch path (the numba kernels are CPU-only), which
the CPU test suite covers only with ``GCBENCH_KERNELS=torch``.  On a machine with CUDA this script
runs, each step under its own timeout and within 8 minutes in all (:data:`TOTAL_BUDGET_S`):

1. ``pytest tests/compressors/test_contract.py`` with ``GCBENCH_TEST_DEVICE=cuda`` (inputs on the GPU);
2. ``pytest tests/compressors/test_same_bytes.py`` likewise: every compressor's payloads on the GPU decode
   to what its CPU payloads decode to, within float rounding (bit-identity is reported);
3. ``pytest tests/compressors/test_device_guard.py`` likewise: no tensor<->NumPy conversion and scalar reads
   within each card's budget, for every compressor and a 4-worker exchange (its table printed);
4. ``benchmarks/device_steps.py syncs``: per compressor the synchronising CUDA calls
   (``torch.cuda.set_sync_debug_mode("warn")``), conversions and scalar reads of one compress+decode and one
   decompress;
5. ``benchmarks/device_steps.py bench``: every compressor at 64M elements (held to its GPU target) and 1M,
   CUDA events against a device-to-device copy of the same tensor;
6. ``benchmarks/device_steps.py hooks``: gcbench's DDP hook (none, bf16, powersgd) against PyTorch's all-reduce,
   ``bf16_compress_hook`` and ``powerSGD_hook`` on ResNet-18 on one GPU (NCCL, world size 1; two gloo ranks on
   the GPU if NCCL refuses), target ≤ 1.3×;
7. ``benchmarks/device_steps.py converge``: ``gcbench converge --model smallcnn`` for two deterministic
   compressors on the CPU and with ``--device cuda``; the curves must agree within float tolerance.

Usage::

    python benchmarks/device_check.py OUTDIR

OUTDIR receives ``device_check.log`` (every step's command and output), each pytest step's JUnit XML, each
device step's JSON (``syncs.json``, ``bench.json`` with the bench results file under ``bench/``, ``hooks.json``,
``converge.json``) and ``summary.json`` (``status``: ``passed``, ``failed`` or ``skipped``; one entry per step
with its exit status, seconds, whether it timed out, and its JSON's result).  Without a CUDA device it writes
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

#: the whole check stays under this many seconds (8 minutes at most; the device machine's budget is short); each step
#: also has its own cap
TOTAL_BUDGET_S = 470.0

STEPS_SCRIPT = ROOT / "benchmarks" / "device_steps.py"


def _steps(out: Path) -> list[dict[str, Any]]:
    """The steps: name, command (run from the repository root), cap in seconds, extra environment, the JSON it writes."""
    py = sys.executable
    gpu = {"GCBENCH_TEST_DEVICE": "cuda"}

    def pytest(name: str, path: str, cap: int, *extra: str) -> dict[str, Any]:
        return {"name": name, "timeout_s": cap, "env": gpu,
                "cmd": [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--maxfail=25", path, *extra,
                        "--junitxml", str(out / f"{name.replace('-', '_')}.xml")]}

    def device_step(name: str, cap: int, *extra: str) -> dict[str, Any]:
        return {"name": name, "timeout_s": cap, "env": {}, "json": str(out / f"{name}.json"),
                "cmd": [py, str(STEPS_SCRIPT), name, str(out if name == "converge" else out / f"{name}.json"),
                        *(() if name == "converge" else ("--device", "cuda")), *extra]}

    return [
        pytest("contract", "tests/compressors/test_contract.py", 75),
        pytest("same-bytes", "tests/compressors/test_same_bytes.py", 50, "-k", "on_the_test_device", "-rA", "-s"),
        pytest("guard", "tests/compressors/test_device_guard.py", 50, "-rA", "-s"),
        device_step("syncs", 35),
        device_step("bench", 130, "--time", "110"),  # no case starts after 110 s: the rows done are in the file
        device_step("hooks", 60, "--model", "resnet18", "--iters", "20", "--warmup", "5", "--rounds", "2"),
        device_step("converge", 70, "--steps", "20", "--compressors", "fp16,topk", "--time", "64"),
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
    if step.get("json"):
        rec["result"] = _step_result(Path(step["json"]))
    return rec


def _step_result(path: Path) -> Any:
    """What a device step wrote (its JSON), or why there is none (it timed out or failed before writing)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return {"error": f"no result: {exc}"}


def closing_lines(steps: list[dict[str, Any]]) -> list[str]:
    """The check's results in a few lines: the bench at 64M (×device copy, verdict), the hook against PyTorch's, the
    synchronisations, the converge agreement (what a session's closing note quotes)."""
    got = {s["name"]: s.get("result") or {} for s in steps}
    lines = []
    bench = [r for r in got.get("bench", {}).get("rows", []) if r.get("numel", 0) >= 64_000_000]
    if bench:
        lines.append("bench at 64M, compress/decompress ×device copy: " + "; ".join(
            f"{r['label']} {r['compress_x_copy']:.2f}/{r['decompress_x_copy']:.2f} {r['verdict']}" if not r.get("error")
            else f"{r['label']} error" for r in bench))
    hooks = got.get("hooks", {})
    if hooks.get("ratio"):
        lines.append(f"hook vs PyTorch ({hooks.get('model')}, {hooks.get('how')}): "
                     + ", ".join(f"{k} {v:.2f}×" for k, v in hooks["ratio"].items()) + f" (target ≤ {hooks.get('target')}×)")
    rows = got.get("syncs", {}).get("rows", [])
    if rows:
        lines.append("CUDA synchronisations per compress+decode / decompress: " + "; ".join(
            f"{r['compressor']} {r['compress']['cuda_syncs']}/{r['decompress']['cuda_syncs']}" for r in rows if "error" not in r))
    conv = got.get("converge", {})
    if conv.get("status") == "compared":
        lines.append("converge cuda vs cpu (max rel. held-out loss, max abs. accuracy): " + "; ".join(
            f"{k} {v.get('max_rel_loss', float('nan')):.2g}, {v.get('max_abs_metric', float('nan')):.2g} {'ok' if v['ok'] else 'DIFFERS'}"
            for k, v in conv.get("agreement", {}).items()))
    elif conv.get("status"):
        lines.append(f"converge --device cuda: {conv['status']} ({conv.get('why', '')})")
    return lines


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
    summary["closing"] = closing_lines(summary["steps"])
    write_summary(out, summary)
    for line in summary["closing"]:
        log(line)
    log(f"device check {summary['status']} in {summary['seconds']:.0f} s: "
        + ", ".join(f"{s['name']} {'ok' if s['ok'] else 'FAILED'}" for s in summary["steps"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
