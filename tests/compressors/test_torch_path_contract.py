"""Every compressor's contract and bytes on the torch path (``GCBENCH_KERNELS=torch``: the path a CUDA tensor takes),
run on the CPU in a fresh process each.

Here rather than under tests/kernels: that folder runs every test on one thread and on two, but a fresh process
takes neither setting, so the two runs were the same run twice.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# the contract's run (~15-25 s) is slow (-m slow): the device guard and same-bytes keep the torch path in the default run
@pytest.mark.parametrize("tests", [pytest.param(["tests/compressors/test_contract.py"], marks=pytest.mark.slow),
                                   ["tests/compressors/test_same_bytes.py"]],
                         ids=["contract", "same-bytes"])
def test_the_contract_holds_on_the_torch_path(tests: list[str]) -> None:
    """Every compressor's contract (round trips, exact bytes, EF identities ...) on the torch path, in a fresh process."""
    env = {**os.environ, "GCBENCH_KERNELS": "torch", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
