"""The kernel switch: ``GCBENCH_KERNELS=torch`` runs every compressor on its torch path (the device path) on the CPU.

No GPU is lent to this project, so the path a CUDA tensor takes is exercised here by switching
the numba kernels off for a whole process (tests/compressors/test_torch_path_contract.py runs the contract and
same-bytes tests in a subprocess under the switch).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GCBENCH_KERNELS": mode, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def test_the_switch_turns_every_numba_path_off() -> None:
    probe = ("from gcbench import kernels; from gcbench.kernels import runtime; "
             "from gcbench.results.store import environment; import sys; "
             "print(kernels.NUMBA, runtime.NUMBA, environment()['kernels'], 'numba' in sys.modules, "
             "environment().get('numba_error'))")
    off = _run(probe, "torch")
    assert off.stdout.split() == ["False", "False", "torch", "False", "None"]  # asked for: not a failure
    assert "warning" not in off.stderr
    on = _run(probe, "auto").stdout.split()
    assert on[:3] == ["True", "True", "numba"] or on[:3] == ["False", "False", "torch"]  # auto: numba when it imports


def test_the_cli_refuses_an_unknown_switch_value_in_one_line() -> None:
    env = {**os.environ, "GCBENCH_KERNELS": "cuda", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "gcbench", "list"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().startswith("error: GCBENCH_KERNELS=cuda") and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_the_cli_spells_the_same_modes_as_the_kernels() -> None:
    from gcbench import kernels
    from gcbench.cli.application import KERNEL_MODES

    assert KERNEL_MODES == kernels.KERNEL_MODES
