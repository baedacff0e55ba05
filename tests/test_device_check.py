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
    assert sum(s["timeout_s"] for s in steps) <= mod.TOTAL_BUDGET_S < 8 * 60
    assert [s["name"] for s in steps] == ["contract", "same-bytes", "bench"]
    assert all(s["env"].get("GCBENCH_TEST_DEVICE") == "cuda" for s in steps[:2]) and "cuda" in steps[2]["cmd"]


def test_the_bench_step_is_summarised_from_bench_json(tmp_path: Path) -> None:
    """The bench step's summary reads `bench --json`'s last line (here a CPU bench of one small case)."""
    mod = _module()
    proc = subprocess.run([sys.executable, "-m", "gcbench", "bench", "-c", "none", "--sizes", "1K", "--rounds", "2", "--out",
                           str(tmp_path), "--json", "--quiet", "--no-isolate"], capture_output=True, text=True, timeout=300,
                          cwd=SCRIPT.parent.parent)
    assert proc.returncode == 0, proc.stderr
    got = mod._bench_summary(proc.stdout)
    assert Path(got["results"]).parent == tmp_path
    (case,) = got["cases"]
    assert case["label"] == "none" and case["numel"] == 1000 and case["device"] == "cpu" and case["compress_x_copy"] > 0
    assert mod._bench_summary("no json here") == {"error": "bench printed no JSON"}
