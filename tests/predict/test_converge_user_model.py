"""advise --convergence and report on a convergence run of a ``path/file.py:factory`` model (third outside audit, item 6).

The run records the spelling the user gave (``settings.task``) and the file made absolute (``settings.task_path``);
advise and report compare models by that file, so the run is found from another folder, under its absolute path or
the ``module:factory`` that loads the same file, and a different file is one ``error:`` line that says which file to
name.  The factory is tests/user_factory.py's ``tiny``, copied into a folder of its own as ``models.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.predict import accuracy as acc
from gcbench.predict import advise as adv

runner = CliRunner()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the folder holding models.py, the results file of a converge run of ``models.py:tiny`` started in it)."""
    home = tmp_path_factory.mktemp("user")
    shutil.copy(Path(__file__).parents[1] / "user_factory.py", home / "models.py")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(home)
        r = runner.invoke(app, ["converge", "--model", "models.py:tiny", "--steps", "2", "--eval-every", "1", "--workers", "2",
                                "--seeds", "2", "-c", "topk", "-o", "runs", "-q"])
    assert r.exit_code == 0, r.output
    (path,) = (home / "runs").glob("*.json")
    return home, path


def _asked(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Replace advise's measuring with a recorder of the model it was asked to measure (nothing is timed)."""
    asked: dict[str, object] = {}

    def step_inputs(model: str | None, *args: object, **kwargs: object) -> object:
        asked["model"] = model
        raise SystemExit(0)

    monkeypatch.setattr(adv, "step_inputs", step_inputs)
    return asked


def test_the_run_records_the_spelling_and_the_absolute_file(run: tuple[Path, Path]) -> None:
    home, path = run
    settings = json.loads(path.read_text())["cases"][0]["convergence"]["settings"]
    assert settings["task"] == "models.py:tiny" and settings["task_path"] == f"{(home / 'models.py').resolve()}:tiny"


def test_advise_finds_the_runs_model_from_another_folder_and_prices_it(run: tuple[Path, Path], tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: "cannot import module 'models.py'".  Measured for real: the bench workers import the recorded file."""
    _home, path = run
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["advise", "--convergence", str(path), "--compute-ms", "5", "--workers", "4", "--bandwidth", "10",
                            "--rounds", "1", "-c", "topk", "-o", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["convergence"]["task"] == "models.py:tiny" and d["time_to_accuracy"][0]["rows"]


@pytest.mark.parametrize("spelling", ["absolute", "relative", "module"])
def test_every_spelling_of_the_same_file_is_the_runs_model(run: tuple[Path, Path], spelling: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: "is a convergence run of models.py:factory, not of /…/models.py:factory"."""
    home, path = run
    asked = _asked(monkeypatch)
    model = {"absolute": f"{home / 'models.py'}:tiny", "relative": "models.py:tiny", "module": "models:tiny"}[spelling]
    monkeypatch.chdir(home)
    monkeypatch.syspath_prepend(str(home))  # the module spelling loads models.py from the path
    r = runner.invoke(app, ["advise", "--model", model, "--convergence", str(path), "--compute-ms", "5", "-o", str(home)])
    assert r.exit_code == 0 and asked["model"] == model, r.output


def test_another_file_of_the_same_name_is_one_line_naming_the_file_to_give(run: tuple[Path, Path], tmp_path: Path) -> None:
    home, path = run
    other = tmp_path / "models.py"
    shutil.copy(home / "models.py", other)
    r = runner.invoke(app, ["advise", "--model", f"{other}:tiny", "--convergence", str(path), "--compute-ms", "5"])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 1 and len(lines) == 1, r.output
    ran = f"{(home / 'models.py').resolve()}:tiny"
    assert f"is a convergence run of models.py:tiny ({ran}), not of {other}:tiny" in lines[0]
    assert f"give --model {ran}" in lines[0]


def test_a_runs_file_that_is_gone_is_one_line_saying_what_to_give(run: tuple[Path, Path], tmp_path: Path) -> None:
    _home, path = run
    data = json.loads(path.read_text())
    for c in data["cases"]:
        c["convergence"]["settings"]["task_path"] = f"{tmp_path / 'moved' / 'models.py'}:tiny"
    moved = tmp_path / "conv.json"
    moved.write_text(json.dumps(data))
    r = runner.invoke(app, ["advise", "--convergence", str(moved), "--compute-ms", "5"])
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 1 and len(lines) == 1, r.output
    assert "is no longer there: give --model path/to/models.py:tiny where it is now, or --kernels BENCH" in lines[0]


def test_a_file_factory_is_the_same_model_by_its_file_whatever_the_spelling(run: tuple[Path, Path]) -> None:
    home, _path = run
    ran = f"{(home / 'models.py').resolve()}:tiny"
    assert acc.same_model("models.py:tiny", ran, ran) and not acc.same_model("models.py:tiny", "other.py:tiny", ran)
    assert acc.same_model("zoo:mlp", "mlp") and not acc.same_model("zoo:mlp", "models.py:tiny")
