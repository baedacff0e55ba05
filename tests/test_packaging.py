"""A normal install works: the wheel carries the bundled suites, the paper claims and the report template.

Issue 33 item 1: after ``pip install .`` (not editable) ``gcbench run`` said "suite file 'quick'
not found", ``list suites`` was empty and ``--papers`` defaulted to a path relative to the current
folder.  This test builds the wheel, installs it into a fresh target folder and runs the installed
copy from another folder (so nothing of the checkout can be found by accident).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built wheel installed (without dependencies: they are this environment's) into a fresh folder."""
    base = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(base / "dist"),
                            str(ROOT)], capture_output=True, text=True, check=False)
    if build.returncode != 0:
        pytest.fail(f"pip wheel failed: {build.stderr[-2000:]}")
    wheel = next((base / "dist").glob("gcbench-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("gcbench/suites/quick.toml", "gcbench/data/papers.toml", "gcbench/report/templates/report.html.j2"):
        assert needed in names, f"the wheel lacks {needed}"
    target = base / "site"
    inst = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target), str(wheel)],
                          capture_output=True, text=True, check=False)
    if inst.returncode != 0:
        pytest.fail(f"pip install failed: {inst.stderr[-2000:]}")
    return target


def _gcbench(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "gcbench", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False,
                          timeout=300)


def test_the_installed_package_is_the_one_run(installed: Path, tmp_path: Path) -> None:
    code = "import gcbench, sys; print(gcbench.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(installed)},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip().startswith(str(installed))


@pytest.mark.slow  # ~50 s: installs the package and runs the quick suite elsewhere; -m slow (CI's fresh clone also installs it)
def test_bundled_suites_are_listed_and_the_quick_suite_runs_from_another_folder(installed: Path, tmp_path: Path) -> None:
    listed = _gcbench(installed, tmp_path, "list", "suites", "--json")
    assert listed.returncode == 0, listed.stderr
    names = {s["name"] for s in json.loads(listed.stdout)}
    assert {"quick", "cnn"} <= names
    run = _gcbench(installed, tmp_path, "run", "quick", "--out", "runs", "--quiet", "--no-timing")
    assert run.returncode == 0, run.stderr
    (result,) = (tmp_path / "runs").glob("*.json")
    data = json.loads(result.read_text(encoding="utf-8"))
    assert data["status"] == "complete" and data["cases"]
    assert data["suite_path"] == "suites/quick.toml", "a bundled suite is recorded by its bundled name, not a machine path"
    page = _gcbench(installed, tmp_path, "report", str(result), "--html", "-o", "page.html")
    assert page.returncode == 0, page.stderr
    assert (tmp_path / "page.html").stat().st_size > 10_000


def test_paper_claims_are_found_wherever_the_package_is(installed: Path, tmp_path: Path) -> None:
    code = "from gcbench.results.baselines import PAPERS_FILE, load_claims; print(PAPERS_FILE); print(len(load_claims()))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(installed)},
                         capture_output=True, text=True, check=True)
    path, count = out.stdout.split()
    assert path.startswith(str(installed)) and int(count) > 0
