"""``gcbench converge`` on a user's ``file.py:factory`` that fails: one ``error:`` line naming the user's file, exit 1,
and a results file that never stays ``running`` (third outside audit, items 1-3, 5-7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.results.store import load_run

runner = CliRunner()

MODELS = '''
import sys
import torch


def _batches(i, w, features=6):
    g = torch.Generator().manual_seed(100 * i + w)
    return torch.randn(4, features, generator=g), torch.randint(0, 3, (4,), generator=g)


def good(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(6, 3), _batches


def wrong_width(seed=0):
    return torch.nn.Linear(5, 3), _batches


def raises(seed=0):
    raise ValueError("no weights here")


def returns_a_number(seed=0):
    return 42


def exits_at_step_2(seed=0):
    def make_batch(i, w):
        if i == 2:
            sys.exit(3)
        return _batches(i, w)
    return torch.nn.Linear(6, 3), make_batch


class Doubler(torch.nn.Module):
    def forward(self, x):
        return 2 * x[:, :3]


def no_parameters(seed=0):
    return Doubler(), _batches
'''

RUN = ["--workers", "2", "--steps", "4", "--seeds", "1", "--eval-every", "2", "-q"]


@pytest.fixture
def models(tmp_path: Path) -> Path:
    f = tmp_path / "my models.py"
    f.write_text(MODELS, encoding="utf-8")
    return f


def _error_line(args: list[str], out: Path) -> str:
    r = runner.invoke(app, ["converge", *args, *RUN, "-o", str(out)])
    assert r.exit_code == 1, (r.exit_code, r.output)
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit)  # typer's exit, not an escaped exception
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.output
    return errors[0]


def test_a_forward_that_fails_on_its_own_batch_is_one_line_naming_the_file(models: Path, tmp_path: Path) -> None:
    line = _error_line(["--model", f"{models}:wrong_width"], tmp_path / "runs")
    assert line == (f"error: model '{models}:wrong_width': the forward pass on make_batch(0, 0) raised RuntimeError: mat1 and "
                    "mat2 shapes cannot be multiplied (4x6 and 5x3)")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("factory", "says"), [
    ("raises", "raised ValueError: no weights here"),
    ("returns_a_number", "the factory must return (module, make_batch) or (module, make_batch, loss_fn), got int"),
    ("gud", "has no attribute 'gud'; did you mean 'good'?"),
])
def test_factory_errors_name_the_users_file_and_factory(factory: str, says: str, models: Path, tmp_path: Path) -> None:
    line = _error_line(["--model", f"{models}:{factory}"], tmp_path)
    assert line.startswith(f"error: model '{models}:{factory}'") and says in line
    assert "gcbench_user_" not in line  # the internal module the file is imported as


def test_an_import_error_names_the_users_file(tmp_path: Path) -> None:
    f = tmp_path / "needs.py"
    f.write_text("import a_package_that_is_not_installed\n", encoding="utf-8")
    line = _error_line(["--model", f"{f}:factory"], tmp_path)
    assert line == (f"error: model '{f}:factory': importing '{f}' raised ModuleNotFoundError: No module named "
                    "'a_package_that_is_not_installed'")


def test_a_sys_exit_in_make_batch_is_an_error_line_and_the_file_is_not_left_running(models: Path, tmp_path: Path) -> None:
    line = _error_line(["--model", f"{models}:exits_at_step_2"], tmp_path)
    assert f"model '{models}:exits_at_step_2': make_batch(2, 0) raised SystemExit: 3" in line
    assert "--lr" not in line  # an error, not a divergence
    (path,) = tmp_path.glob("*.json")
    rec = load_run(path)
    assert rec.status == "failed" and rec.cases[0].convergence.seeds[0].status == "error"


def test_a_model_without_parameters_is_refused_before_training(models: Path, tmp_path: Path) -> None:
    line = _error_line(["--model", f"{models}:no_parameters"], tmp_path)
    assert line == (f"error: model '{models}:no_parameters' has no trainable parameters (none with requires_grad): there is "
                    "nothing to train or to compress")
    assert not list(tmp_path.glob("*.json"))


def test_an_overflowing_learning_rate_is_a_divergence_not_an_error(models: Path, tmp_path: Path) -> None:
    line = _error_line(["--model", f"{models}:good", "--lr", "1e308"], tmp_path)
    assert "(non-finite update (the step overflows float32)), so there is no target; lower --lr" in line
    (path,) = tmp_path.glob("*.json")
    seed = load_run(path).cases[0].convergence.seeds[0]
    assert (seed.status, seed.error, seed.diverged_at_step) == ("diverged", None, 0)


def test_the_thread_count_is_shown_and_recorded(models: Path, tmp_path: Path) -> None:
    r = runner.invoke(app, ["converge", "--model", f"{models}:good", *RUN, "-o", str(tmp_path), "-c", "qsgd"])
    assert r.exit_code == 0, r.output
    assert "1 seeds, 1 torch thread (auto)" in r.output.replace("\n", "")
    r = runner.invoke(app, ["converge", "--model", f"{models}:good", *RUN, "-o", str(tmp_path), "--threads", "2", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["threads"] == {"count": 2, "rule": "given: threads = 2"}
    assert load_run(Path(data["results"])).environment.torch_threads == 2


def test_a_sys_exit_while_importing_the_users_code_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    f = tmp_path / "exits_on_import.py"
    f.write_text("import sys\nsys.exit(5)\n", encoding="utf-8")
    line = _error_line(["--model", f"{f}:factory"], tmp_path / "a")
    assert line == f"error: model '{f}:factory': importing '{f}' raised SystemExit: 5"
    monkeypatch.syspath_prepend(str(tmp_path))  # the same module named package-style
    monkeypatch.delitem(sys.modules, "exits_on_import", raising=False)
    line = _error_line(["--model", "exits_on_import:factory"], tmp_path / "b")
    assert line == "error: model 'exits_on_import:factory': importing 'exits_on_import' raised SystemExit: 5"
