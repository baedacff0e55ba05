"""A numba that fails to import or to build a kernel is said once on stderr and recorded in the results file's environment.

numba is a dependency; without it every compressor still makes the same bytes on its torch or Python
path, only slower, so a broken install must not silently time the slow path.  The failures are made
by hand: ``sys.modules["numba"] = None`` makes ``import numba`` raise as a missing install does, and a
``numba.njit`` that raises stands in for one that cannot compile.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gcbench.kernels import runtime
from gcbench.results.store import environment

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GCBENCH_KERNELS", runtime.SLOW_PATH_SAID_ENV)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, "PYTHONPATH": str(ROOT)},
                          cwd=ROOT, timeout=300)


def test_the_slow_path_is_said_once_and_each_failure_recorded(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(runtime.SLOW_PATH_SAID_ENV, "")
    monkeypatch.setattr(runtime, "SLOW_PATHS", [])
    runtime.slow_path("numba failed to import", ImportError("No module named 'numba'"))
    runtime.slow_path("numba could not build the decoder", RuntimeError("LLVM failed\nsecond line"))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert "numba failed to import: ImportError: No module named 'numba'" in lines[0]
    assert "slow" in lines[0] and "pip install" in lines[0] and "GCBENCH_KERNELS=torch" in lines[0]
    assert runtime.SLOW_PATHS == ["numba failed to import: ImportError: No module named 'numba'",
                                  "numba could not build the decoder: RuntimeError: LLVM failed"]
    assert environment()["numba_error"] == "; ".join(runtime.SLOW_PATHS)


def test_a_numba_that_fails_to_import_is_said_once_per_command_and_in_the_environment() -> None:
    res = _python("import sys; sys.modules['numba'] = None\n"
                  "import subprocess\n"
                  "from gcbench import kernels\n"
                  "import gcbench.core.codec\n"
                  "from gcbench.results.store import environment\n"
                  "env = environment()\n"
                  "print(kernels.NUMBA, env['kernels'])\n"
                  "print(env['numba_error'])\n"
                  # a worker process of the same command inherits the environment and stays quiet
                  "subprocess.run([sys.executable, '-c', \"import sys; sys.modules['numba'] = None; import gcbench.kernels\"], "
                  "check=True)\n")
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout.splitlines()
    assert out[0] == "False torch"
    assert out[1].startswith("numba failed to import: ModuleNotFoundError")
    said = [line for line in res.stderr.splitlines() if "numba" in line]
    assert len(said) == 1 and said[0].startswith("gcbench: warning: numba failed to import"), res.stderr


def test_a_numba_that_cannot_build_the_decoder_is_said_and_the_reference_decodes() -> None:
    res = _python("import numba\n"
                  "import gcbench.kernels\n"
                  "def broken(*args, **kwargs):\n"
                  "    raise RuntimeError('cannot compile')\n"
                  "numba.njit = broken\n"
                  "from gcbench.core import codec\n"
                  "from gcbench.results.store import environment\n"
                  "print(codec._read_fields_fast is None)\n"
                  "print(environment()['numba_error'])\n")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines() == ["True", "numba could not build the Elias-omega decoder: RuntimeError: cannot compile"]
    said = [line for line in res.stderr.splitlines() if "numba" in line]
    assert len(said) == 1 and "Elias-omega decoder" in said[0], res.stderr

