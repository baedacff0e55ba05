"""``gcbench converge`` on the command line: the table and verdict, JSON, the suite, and bad input as one line, exit 1."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.results.store import load_run

runner = CliRunner()

TINY = ["--model", "tests.user_factory:tiny", "--workers", "2", "--steps", "4", "--seeds", "2", "--eval-every", "2", "--lr", "0.2"]


def test_converge_prints_a_table_within_120_columns_and_names_who_fails(tmp_path: Path) -> None:
    r = runner.invoke(app, ["converge", *TINY, "-c", "topk:density=0.2", "-c", "signsgd", "-o", str(tmp_path), "-q"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert len(table) >= 6 and max(len(line) for line in table) <= 120
    head = next(line for line in lines if "compressor" in line)
    for col in ("final accuracy", "gap to ref", "steps to target", "reached", "diverged", "bytes/worker/step"):
        assert col in head
    assert any(line.startswith(("Fail to reach the reference's accuracy", "Every compressor reached")) for line in lines)
    assert sum("none (ref)" in line for line in lines) == 1
    (path,) = tmp_path.glob("*.json")
    assert f"results: {path}" in r.output.replace("\n", "")
    assert [c.label for c in load_run(path).cases] == ["none", "topk:density=0.2", "signsgd"]


def test_json_output_holds_the_file_the_target_and_the_cases(tmp_path: Path) -> None:
    r = runner.invoke(app, ["converge", *TINY, "-c", "qsgd", "-o", str(tmp_path), "--json", "--target", "0.5"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert Path(data["results"]).exists() and data["settings"]["target_fraction"] == 0.5
    assert [c["label"] for c in data["cases"]] == ["none", "qsgd"]
    assert data["cases"][1]["convergence"]["summary"]["seeds"] == 2


def test_the_suite_is_read_and_options_override_it(tmp_path: Path) -> None:
    suite = tmp_path / "s.toml"
    suite.write_text('kind = "converge"\nname = "mine"\ntask = "charlstm"\nsteps = 100\nseeds = 5\ncompressors = ["none", "qsgd"]\n',
                     encoding="utf-8")
    r = runner.invoke(app, ["converge", str(suite), *TINY, "-o", str(tmp_path / "runs"), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["settings"]["task"] == "tests.user_factory:tiny" and data["settings"]["steps"] == 4
    assert [c["label"] for c in data["cases"]] == ["none", "qsgd"] and "mine" in Path(data["results"]).name


def _one_error_line(args: list[str], tmp_path: Path, needle: str) -> None:
    r = runner.invoke(app, ["converge", *args, "-o", str(tmp_path), "-q"])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0], r.output


def test_bad_input_is_one_line_and_exit_1(tmp_path: Path) -> None:
    _one_error_line([*TINY, "--steps", "0"], tmp_path, "steps must be an integer in [1, 1000000]")
    _one_error_line(["--task", "charlstm", *TINY], tmp_path, "exactly one of --task")
    _one_error_line(["--model", "tests.user_factory:not_a_module", "--steps", "2"], tmp_path, "must be a torch.nn.Module")
    _one_error_line([*TINY, "-c", "lgc", "--workers", "1"], tmp_path, "lgc needs at least 2 workers")
    assert not list(tmp_path.glob("*.json"))


def test_an_unreachable_target_value_is_one_line_and_the_reference_is_kept(tmp_path: Path) -> None:
    _one_error_line([*TINY, "--seeds", "1", "--target-value", "2"], tmp_path, "never reached by the reference none")
    (path,) = tmp_path.glob("*.json")
    assert load_run(path).status == "failed"


def test_a_suite_naming_user_code_needs_trust(tmp_path: Path, monkeypatch: object) -> None:
    suite = tmp_path / "s.toml"
    suite.write_text('kind = "converge"\nmodel = "tests.user_factory:tiny"\nsteps = 2\nseeds = 1\nworkers = 2\n', encoding="utf-8")
    monkeypatch.delenv("GCBENCH_TRUST_CODE", raising=False)  # type: ignore[attr-defined]
    _one_error_line([str(suite)], tmp_path, "the suite would import and run this code")
    r = runner.invoke(app, ["converge", str(suite), "--trust-code", "-c", "qsgd", "-o", str(tmp_path), "-q", "--json"])
    assert r.exit_code == 0, r.output


def test_a_seed_that_raises_is_reported_and_exits_1(tmp_path: Path, monkeypatch: object) -> None:
    from gcbench.compressors.topk import TopK

    def broken(self: object, *args: object, **kwargs: object) -> None:
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(TopK, "exchange_group", broken)  # type: ignore[attr-defined]
    r = runner.invoke(app, ["converge", *TINY, "-c", "topk", "-o", str(tmp_path), "-q"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "error: topk seed 0: RuntimeError: kernel exploded" in r.output
    (path,) = tmp_path.glob("*.json")
    assert load_run(path).status == "complete-with-errors"


def test_help_shows_examples() -> None:
    r = runner.invoke(app, ["converge", "--help"])
    assert r.exit_code == 0 and "gcbench converge suites/converge.toml" in r.output and "--target-value" in r.output
