"""Compressors from other packages: a tiny plugin (tests/plugin_pkg) is pip-installed and is listed, checked and run.

The package is installed with pip (no dependencies, no build isolation, so nothing is downloaded)
into a temporary folder that the ``gcbench`` subprocesses get on ``PYTHONPATH``: an installed
distribution with its entry point, without touching the environment the tests run in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[1] / "plugin_pkg"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    # a copy, so the build leaves nothing (egg-info, build/) in the source tree
    subprocess.run(["cp", "-r", str(PLUGIN), str(build / "pkg")], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(target), str(build / "pkg")], check=True, capture_output=True, text=True)
    return target


def _gcbench(site: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    return subprocess.run([sys.executable, "-m", "gcbench", *args], capture_output=True, text=True, env=env, cwd=cwd or ROOT,
                          timeout=600)


def test_plugin_is_listed_with_its_origin(site: Path) -> None:
    r = _gcbench(site, "list", "--json")
    assert r.returncode == 0, r.stderr
    cards = {c["name"]: c for c in json.loads(r.stdout)}
    assert "halfsign" in cards and "topk" in cards
    assert cards["halfsign"]["origin"].startswith("plugin gcbench-plugin-demo: halfsign")
    assert cards["topk"]["origin"] == "gcbench"
    assert cards["halfsign"]["target"]["compress_x_copy"] == 4.0


def test_plugin_passes_the_contract_checks(site: Path) -> None:
    r = _gcbench(site, "check", "halfsign", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    (result,) = json.loads(r.stdout)
    rows = result["checks"]
    assert result["spec"] == "halfsign" and result["ok"]
    assert rows and all(row["ok"] for row in rows)


def test_plugin_runs_in_a_suite(site: Path, tmp_path: Path) -> None:
    suite = tmp_path / "plugin.toml"
    suite.write_text('name = "plugin"\n[[sources]]\nkind = "synthetic"\nshapes = [[1000], [32, 16]]\nsteps = 2\n'
                     '[[compressors]]\nname = "halfsign"\n[[compressors]]\nname = "none"\n')
    r = _gcbench(site, "run", str(suite), "--out", str(tmp_path / "runs"), "--quiet")
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(next((tmp_path / "runs").glob("*.json")).read_text())
    case = next(c for c in data["cases"] if c["compressor"] == "halfsign")
    assert case["status"] == "ok"
    assert case["size"]["ratio"] > 20  # 1 bit per element plus a header: about 30× on these shapes


def test_a_broken_plugin_is_reported_not_fatal(site: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    (broken / "gcbench_broken-0.1.dist-info").mkdir(parents=True)
    (broken / "gcbench_broken-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: gcbench-broken\nVersion: 0.1\n")
    (broken / "gcbench_broken-0.1.dist-info" / "entry_points.txt").write_text("[gcbench.compressors]\nbad = no_such_module:CARDS\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site), str(broken)])}
    r = subprocess.run([sys.executable, "-m", "gcbench", "list"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 0
    assert "halfsign" in r.stdout
    assert "warning: plugin gcbench-broken: bad = no_such_module:CARDS: ModuleNotFoundError" in r.stderr.replace("\n", "")
