"""benchmarks/device_check.py, the prepared GPU check: on a machine without CUDA it skips cleanly and says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "device_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine runs the whole check (minutes), not its skip")
def test_without_cuda_the_device_check_skips_with_a_summary(tmp_path: Path) -> None:
    out = tmp_path / "dev" / "check"  # made by the script
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA device: skipped" in (out / "device_check.log").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "skipped" and summary["reason"] == "no CUDA device" and summary["steps"] == []
    assert not list(out.glob(".summary.json.tmp*"))  # written atomically: no temporary left behind


def test_the_device_check_needs_its_output_folder() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "usage: python benchmarks/device_check.py OUTDIR" in proc.stderr


def _module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("device_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_step_is_logged_and_its_timeout_recorded(tmp_path: Path) -> None:
    mod = _module()
    log = mod.Log(tmp_path / "log")
    ok = mod.run_step({"name": "hello", "cmd": [sys.executable, "-c", "print('hi there')"], "env": {}}, 60, log)
    assert ok["ok"] and ok["rc"] == 0 and not ok["timed_out"]
    slow = mod.run_step({"name": "slow", "cmd": [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"],
                         "env": {}}, 2, log)
    assert not slow["ok"] and slow["timed_out"] and slow["rc"] is None
    text = (tmp_path / "log").read_text()
    assert "hi there" in text and "-- hello: exit 0" in text and "-- slow: timed out" in text
    # every step runs under the check's budget, the GPU tests with their inputs on the device
    steps = mod._steps(tmp_path)
    assert sum(s["timeout_s"] for s in steps) <= mod.TOTAL_BUDGET_S <= 8 * 60
    assert [s["name"] for s in steps] == ["contract", "same-bytes", "guard", "syncs", "bench", "hooks", "converge"]
    assert all(s["env"].get("GCBENCH_TEST_DEVICE") == "cuda" for s in steps[:3])
    assert all(s["cmd"][s["cmd"].index("--device") + 1] == "cuda" for s in steps[3:6]) and steps[6]["json"].endswith("converge.json")


STEPS = SCRIPT.parent / "device_steps.py"


def _steps_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("device_steps", STEPS)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run_steps(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(STEPS), *args], capture_output=True, text=True, timeout=300, cwd=SCRIPT.parent.parent)


def test_the_sync_and_bench_steps_run_on_the_cpu(tmp_path: Path) -> None:
    """The GPU steps' code, driven on the CPU: counts per compressor, a bench file written case by case."""
    proc = _run_steps("syncs", str(tmp_path / "syncs.json"), "--device", "cpu", "--names", "none,fp16")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads((tmp_path / "syncs.json").read_text())["rows"]
    assert [r["compressor"] for r in rows] == ["none", "fp16"]
    assert all(r["ok"] and r["compress"]["conversions"] == 0 and r["compress"]["cuda_syncs"] is None for r in rows)
    proc = _run_steps("bench", str(tmp_path / "bench.json"), "--device", "cpu", "--names", "none", "--sizes", "1000",
                      "--time", "60")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads((tmp_path / "bench.json").read_text())
    (row,) = res["rows"]
    assert row["label"] == "none" and row["numel"] == 1000 and row["compress_x_copy"] > 0 and row["timer"] == "host clock"
    stored = json.loads(Path(res["results"]).read_text())
    assert stored["kind"] == "bench" and [c["label"] for c in stored["cases"]] == ["none"]


def test_the_hook_step_runs_on_the_cpu(tmp_path: Path) -> None:
    proc = _run_steps("hooks", str(tmp_path / "hooks.json"), "--device", "cpu", "--model", "mlp", "--iters", "2",
                      "--warmup", "3", "--rounds", "1")
    res = json.loads((tmp_path / "hooks.json").read_text())
    assert proc.returncode in (0, 1), proc.stderr  # 1: a ratio over the target (timings on a shared CPU)
    assert res["how"] == "gloo, world size 1" and set(res["ratio"]) == {"none", "fp16", "powersgd"}
    assert all(v["n"] == 2 and v["median_ms"] > 0 for v in res["variants"].values())


def test_converge_agreement_and_the_closing_lines(tmp_path: Path) -> None:
    steps = _steps_module()

    def run(losses: list[float], accs: list[float]) -> dict[str, object]:
        curve = [{"step": i, "eval_loss": loss, "metric": a} for i, (loss, a) in enumerate(zip(losses, accs, strict=True))]
        return {"cases": [{"label": "fp16", "convergence": {"seeds": [{"curve": curve}]}}]}

    same = steps.agreement(run([2.3, 2.0], [0.1, 0.3]), run([2.3 * 1.001, 2.0], [0.1, 0.31]))
    assert same["fp16"]["ok"] and same["fp16"]["points"] == 2
    apart = steps.agreement(run([2.3, 2.0], [0.1, 0.3]), run([2.3, 1.5], [0.1, 0.3]))
    assert not apart["fp16"]["ok"] and apart["fp16"]["max_rel_loss"] == pytest.approx(0.25)
    assert not steps.agreement(run([2.3], [0.1]), run([2.3, 2.0], [0.1, 0.3]))["fp16"]["ok"]
    check = _module()
    lines = check.closing_lines([
        {"name": "bench", "result": {"rows": [{"label": "qsgd", "numel": 64_000_000, "compress_x_copy": 2.5,
                                               "decompress_x_copy": 1.0, "verdict": "pass"}]}},
        {"name": "hooks", "result": {"model": "resnet18", "how": "NCCL", "ratio": {"bf16": 1.1}, "target": 1.3}},
        {"name": "converge", "result": {"status": "compared", "agreement": same}}])
    assert lines[0] == "bench at 64M, compress/decompress ×device copy: qsgd 2.50/1.00 pass"
    assert "bf16 1.10×" in lines[1] and "fp16" in lines[2] and "ok" in lines[2]
