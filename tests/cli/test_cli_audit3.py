"""The third outside audit of the command line: outputs never replace inputs or foreign files, every count has a range
checked before any work, TOML keys that would stall the parser, strict ``--json``, honest Ctrl-C lines, control
characters kept off the terminal, and unknown names exit 2.

Each test fails on the code before its fix (the audit's reproduction) and passes after.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gcbench.cli import app

runner = CliRunner()

CONVERGE = ["--model", "tests.user_factory:tiny", "--workers", "2", "--steps", "2", "--seeds", "1", "--eval-every", "1",
            "--lr", "0.2", "-q"]
COLLECTIVES = ["--numel", "64", "--workers", "2", "--draws", "1", "--scheme", "ring", "--accumulate", "fp32", "-q"]


def _error(res: Any, code: int, *needles: str) -> str:
    """Exit ``code``, no traceback, exactly one non-empty stderr line, an ``error:`` line holding ``needles``."""
    assert res.exit_code == code, (res.exit_code, res.output)
    assert "Traceback" not in res.output, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def conv_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real convergence results file (two steps of the tiny user model, one seed)."""
    folder = tmp_path_factory.mktemp("conv")
    res = runner.invoke(app, ["converge", *CONVERGE, "-c", "qsgd", "-o", str(folder)])
    assert res.exit_code == 0, res.output
    (path,) = folder.glob("*.json")
    return path


# ----------------------------------------------------------------------------- 1: an output is never one of the inputs


def test_advise_csv_refuses_to_write_over_its_convergence_file(conv_file: Path, tmp_path: Path) -> None:
    before = conv_file.read_bytes()
    res = runner.invoke(app, ["advise", "--convergence", str(conv_file), "--csv", str(conv_file), "-o", str(tmp_path), "-q"])
    _error(res, 1, "--csv", "is an input of this command")
    assert conv_file.read_bytes() == before


def test_advise_csv_refuses_its_kernels_file_even_through_another_spelling(tmp_path: Path) -> None:
    given = tmp_path / "bench.json"
    given.write_text("{}")
    (tmp_path / "sub").mkdir()
    spelled = tmp_path / "sub" / ".." / given.name  # the same file by another path
    res = runner.invoke(app, ["advise", "--model", "mlp", "--kernels", str(given), "--csv", str(spelled), "-c", "topk", "-q"])
    _error(res, 1, "is an input of this command")
    assert given.read_text() == "{}"


def test_report_output_refuses_its_kernels_file(tmp_path: Path) -> None:
    """``report CONV --cluster --kernels BENCH --md -o BENCH`` replaced the bench file with the Markdown priced from it."""
    res = runner.invoke(app, ["converge", "--model", "mlp", "--workers", "2", "--steps", "2", "--seeds", "1", "--eval-every", "1",
                              "-c", "topk", "-o", str(tmp_path), "-q"])
    assert res.exit_code == 0, res.output
    (conv,) = tmp_path.glob("*.json")
    res = runner.invoke(app, ["bench", "--model", "mlp", "-c", "topk", "-c", "none", "--rounds", "1", "--warmup", "0",
                              "--no-isolate", "-o", str(tmp_path / "bench")])
    assert res.exit_code == 0, res.output
    (bench,) = (tmp_path / "bench").glob("*.json")
    before = bench.read_bytes()
    res = runner.invoke(app, ["report", str(conv), "--md", "-o", str(bench), "--cluster", "4x10", "--kernels", str(bench),
                              "--compute-ms", "1"])
    _error(res, 1, "--output", "is an input of this command")
    assert bench.read_bytes() == before


# ----------------------------------------------------------------------------- 2: an existing file is replaced only if gcbench wrote it


def test_collectives_csv_refuses_a_file_it_did_not_write_and_replaces_its_own(conv_file: Path, tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    results.write_bytes(conv_file.read_bytes())
    res = runner.invoke(app, ["collectives", "bf16", *COLLECTIVES, "--csv", str(results)])
    _error(res, 1, "--csv", "already exists and is not a CSV that gcbench collectives wrote")
    assert results.read_bytes() == conv_file.read_bytes()
    other = tmp_path / "mine.csv"
    other.write_text("name,value\nx,1\n")
    _error(runner.invoke(app, ["collectives", "bf16", *COLLECTIVES, "--csv", str(other)]), 1, "already exists")
    assert other.read_text() == "name,value\nx,1\n"
    ours = tmp_path / "sweep.csv"
    for _ in range(2):  # written, then replaced: a rerun updates its own CSV
        res = runner.invoke(app, ["collectives", "bf16", *COLLECTIVES, "--csv", str(ours)])
        assert res.exit_code == 0, res.output
    assert ours.read_text().startswith("compressor,scheme,accumulate,workers,")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.csv", "results.json", "sweep.csv"]  # no temporary file left


def test_the_header_policy_matches_what_the_commands_write() -> None:
    from gcbench.cli import cmd_advise, cmd_collectives
    from gcbench.report.advice_csv import COLUMNS

    assert cmd_advise.CSV_HEADER == (",".join(COLUMNS[:3]) + ",").encode()
    assert cmd_collectives.CSV_HEADER == b"compressor,scheme,accumulate,workers,"


def test_report_md_output_refuses_a_foreign_file_and_replaces_its_own(conv_file: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    _error(runner.invoke(app, ["report", str(conv_file), "--md", "-o", str(notes)]), 1, "--output", "already exists")
    assert notes.read_text() == "my notes\n"
    mine = tmp_path / "report.md"
    for _ in range(2):
        res = runner.invoke(app, ["report", str(conv_file), "--md", "-o", str(mine)])
        assert res.exit_code == 0, res.output


# ----------------------------------------------------------------------------- 3 and 4: ranges before any work


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any seed that starts training fail the test: a bad option must be refused before the first one."""
    import gcbench.converge.sweep as conv_runner

    def trained(*args: object, **kwargs: object) -> None:
        raise AssertionError("a seed was trained before the option was refused")

    monkeypatch.setattr(conv_runner, "run_seed", trained)


@pytest.mark.parametrize(("option", "value", "needle"), [
    ("--steps", "1000001", "steps must be an integer in [1, 1000000]"),
    ("--batch", "1000001", "batch must be an integer in [1, 1000000]"),
    ("--eval-every", "1000001", "eval-every must be an integer in [1, 1000000]"),
    ("--seeds", "1000000000", "seeds must be an integer in [1, 1000000]"),
    ("--workers", "2000", "workers must be an integer in [1, 1024]"),
    ("--threads", "100000", "threads must be an integer in [1, 1024]"),
])
def test_converge_counts_past_their_range_are_one_line_before_any_training(option: str, value: str, needle: str,
                                                                           tmp_path: Path, no_training: None) -> None:
    _error(runner.invoke(app, ["converge", *CONVERGE, option, value, "-o", str(tmp_path)]), 1, needle)
    assert not list(tmp_path.iterdir())


def test_converge_bounds_are_the_results_schemas() -> None:
    from gcbench.converge.sweep import BOUNDS
    from gcbench.measure.suite import MetricsSpec, SourceSpec, key_range
    from gcbench.results.converge_record import ConvergeSettings
    from gcbench.results.fields import COUNT_MAX

    assert all(BOUNDS[k] == COUNT_MAX for k in ("steps", "seeds", "batch", "eval_every"))
    assert key_range(SourceSpec, "workers") == f"[1, {BOUNDS['workers']}]"
    assert key_range(MetricsSpec, "threads") == f"[1, {BOUNDS['threads']}]"
    settings = {"task": "t", "metric": "m", "workers": 2, "steps": COUNT_MAX, "optimizer": "sgd", "lr": 0.1, "seeds": [0]}
    ConvergeSettings.model_validate(settings)  # the largest accepted value is one the schema stores
    with pytest.raises(Exception, match="1e\\+06"):
        ConvergeSettings.model_validate({**settings, "steps": COUNT_MAX + 1})


def test_validate_checks_a_convergence_suite_against_the_same_ranges(tmp_path: Path) -> None:
    suite = tmp_path / "conv.toml"
    suite.write_text('kind = "converge"\ntask = "digits"\nsteps = 2000000\n')
    _error(runner.invoke(app, ["validate", str(suite)]), 1, str(suite), "steps must be an integer in [1, 1000000]")
    suite.write_text('kind = "converge"\ntask = "digits"\nsteps = 20\ncompressors = ["none", "topk"]\n')
    res = runner.invoke(app, ["validate", str(suite)])
    assert res.exit_code == 0 and "ok:" in res.stdout and "convergence suite" in res.stdout, res.output
    suite.write_text('kind = "converge"\ntask = "digits"\ncompressors = ["none", "topkk"]\n')
    _error(runner.invoke(app, ["validate", str(suite)]), 1, "compressors[1]", "topkk")


@pytest.mark.parametrize(("argv", "needle"), [
    (["--seed", "-1"], "--seed must be in [0, 9223372036854775807], got -1"),
    (["--numel", str(10**12)], "--numel must be in [1, 1073741824]"),
    (["--workers", "2,100000000"], "--workers: each worker count must be in [1, 4096], got 100000000"),
    (["--draws", "100000"], "--draws must be in [1, 1000]"),
])
def test_collectives_ranges_are_one_line_before_any_gradient(argv: list[str], needle: str) -> None:
    _error(runner.invoke(app, ["collectives", "bf16", *COLLECTIVES, *argv]), 1, needle)


def test_collectives_ranges_are_a_suites_collectives_table_ranges() -> None:
    from gcbench.measure import collectives
    from gcbench.measure.suite import CollectivesSpec, key_range

    assert key_range(CollectivesSpec, "numel") == f"[1, {collectives.MAX_NUMEL}]"
    assert key_range(CollectivesSpec, "draws") == f"[1, {collectives.MAX_DRAWS}]"
    item = CollectivesSpec.model_fields["workers"].annotation.__args__[0]  # list[Annotated[int, Field(ge=1, le=...)]]
    bounds = [b for m in item.__metadata__ for b in getattr(m, "metadata", [])]
    assert [getattr(b, "le", None) for b in bounds if hasattr(b, "le")] == [collectives.MAX_WORKERS]


def test_collectives_too_big_for_the_machine_states_the_estimate_and_the_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    import gcbench.measure.footprint as footprint

    monkeypatch.setattr(footprint, "machine_memory", lambda: (2**30, 2**30))  # a 1 GiB machine
    line = _error(runner.invoke(app, ["collectives", "bf16", *COLLECTIVES, "--numel", str(2**27), "--workers", "4"]), 1)
    assert "needs at least 13.0 GiB" in line and "this machine's 1.0 GiB" in line  # 2**27 × (16 × 4 + 40) bytes


@pytest.mark.parametrize(("argv", "needle"), [
    (["--workers", "100000"], "--workers: must be in [1, 1024], got 100000"),
    (["--threads", "100000"], "--threads: must be in [1, 1024], got 100000"),
])
def test_train_workers_and_threads_have_ranges(argv: list[str], needle: str, tmp_path: Path) -> None:
    _error(runner.invoke(app, ["train", *argv, "-o", str(tmp_path)]), 1, needle)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("argv", "needle"), [
    (["bench", "topk", "--sizes", "1K", "--rounds", "1000000000"], "--rounds must be in [1, 10000]"),
    (["bench", "topk", "--sizes", "1K", "--warmup", "1000000000"], "--warmup must be in [0, 1000]"),
    (["advise", "--model", "mlp", "-c", "topk", "--rounds", "1000000000"], "--rounds must be in [1, 10000]"),
    (["train", "--seed", "-1"], "--seed: must be in [0, 9223372036854775807], got -1"),
])
def test_sibling_counts_have_a_suites_range_too(argv: list[str], needle: str, tmp_path: Path) -> None:
    _error(runner.invoke(app, [*argv, "-o", str(tmp_path)]), 1, needle)
    assert not list(tmp_path.iterdir())


def test_bench_ranges_are_a_suites_metrics_ranges() -> None:
    from gcbench.cli import cmd_bench
    from gcbench.measure.suite import MetricsSpec, key_range

    assert key_range(MetricsSpec, "timing_repeats") == f"[1, {cmd_bench.MAX_ROUNDS}]"
    assert key_range(MetricsSpec, "warmup") == f"[0, {cmd_bench.MAX_WARMUP}]"


# ----------------------------------------------------------------------------- 5: TOML keys the parser would take minutes on


def _long_key_file(path: Path, head: str, key: str) -> Path:
    path.write_text(head + key + "\n", encoding="utf-8")
    return path


LONG_KEY = ".".join(["a"] * 50_000) + " = 1"  # 100 KB: the audit's 44 s parse


@pytest.mark.parametrize(("argv_of", "head"), [
    (lambda p, out, conv: ["validate", str(p)], 'name = "x"\n'),
    (lambda p, out, conv: ["run", str(p), "-q", "-o", str(out)], 'name = "x"\n'),
    (lambda p, out, conv: ["converge", str(p), "-q", "-o", str(out)], 'kind = "converge"\n'),
    (lambda p, out, conv: ["report", str(conv), "--papers", str(p)], "# claims\n"),
], ids=["validate", "run", "converge", "papers"])
def test_a_dotted_key_of_too_many_parts_is_refused_before_parsing(argv_of: Any, head: str, tmp_path: Path,
                                                                  conv_file: Path) -> None:
    path = _long_key_file(tmp_path / "long.toml", head, LONG_KEY)
    res = runner.invoke(app, argv_of(path, tmp_path / "out", conv_file))
    _error(res, 1, str(path), "line 2", "a dotted key of 50,000 parts", "at most 32")


def test_dots_in_strings_comments_and_numbers_are_not_key_parts(tmp_path: Path) -> None:
    from gcbench.core.files import MAX_KEY_PARTS, load_user_toml

    dots = "a." * 10_000
    path = tmp_path / "ok.toml"
    path.write_text(f'd = "{dots}"\ne = \'{dots}\'\nf = """\n{dots}\n"""\n# {dots}\nx = [{", ".join(["1.5"] * 1000)}]\n'
                    f'{".".join(["k"] * MAX_KEY_PARTS)} = 1\n', encoding="utf-8")
    data = load_user_toml(path, "suite file")
    assert data["d"] == dots and len(data["x"]) == 1000
    path.write_text(f'd = """\n{dots}\n"""\n{".".join(["k"] * (MAX_KEY_PARTS + 1))} = 1\n', encoding="utf-8")
    with pytest.raises(Exception, match=f"line 4: a dotted key of {MAX_KEY_PARTS + 1} parts"):
        load_user_toml(path, "suite file")


# ----------------------------------------------------------------------------- 6: --json is strict JSON


def _strict(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_json_outputs_are_strict_json_with_null_for_non_finite_numbers() -> None:
    # one worker: no ring all-reduce to compare with, so x_fp32_ring is not a number (NaN before the fix)
    res = runner.invoke(app, ["collectives", "bf16", *COLLECTIVES, "--workers", "1", "--json"])
    assert res.exit_code == 0, res.output
    (row,) = _strict(res.stdout)["rows"]
    assert row["x_fp32_ring"] is None and row["error"] > 0
    for argv in (["list", "--json"], ["list", "dgc", "--json"], ["list", "models", "--json"], ["check", "topk", "--json"]):
        res = runner.invoke(app, argv)
        assert res.exit_code == 0, (argv, res.output)
        _strict(res.stdout)


def test_print_json_maps_every_non_finite_number_to_null(capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    from gcbench.cli.output import print_json

    print_json({"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": np.float32("nan"), "d": (np.float64(2.0),),
                "e": object()}, default=lambda v: math.nan)
    assert _strict(capsys.readouterr().out) == {"a": None, "b": [None, None, 1.5], "c": None, "d": [2.0], "e": None}


# ----------------------------------------------------------------------------- 7: Ctrl-C names the file it kept, if any


def test_ctrl_c_in_collectives_promises_no_results_file(monkeypatch: pytest.MonkeyPatch) -> None:
    import gcbench.measure.collectives as coll

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(coll, "run_sweep", interrupted)
    res = runner.invoke(app, ["collectives", "bf16", *COLLECTIVES])
    assert res.exit_code == 130 and res.stderr.strip() == "interrupted", res.output


def test_ctrl_c_in_converge_names_the_file_only_once_one_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gcbench.converge.sweep as conv_runner

    real = conv_runner.run_seed
    calls = {"n": 0, "stop_at": 0}

    def seed_then_stop(*args: object, **kwargs: object) -> Any:
        calls["n"] += 1
        if calls["n"] > calls["stop_at"]:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(conv_runner, "run_seed", seed_then_stop)
    res = runner.invoke(app, ["converge", *CONVERGE, "-c", "qsgd", "-o", str(tmp_path / "before")])
    assert res.exit_code == 130 and res.stderr.strip() == "interrupted", res.output
    assert not (tmp_path / "before").exists() or not list((tmp_path / "before").iterdir())
    calls.update(n=0, stop_at=1)  # the reference's seed finishes, the compressor's is interrupted
    res = runner.invoke(app, ["converge", *CONVERGE, "-c", "qsgd", "-o", str(tmp_path / "after")])
    (path,) = (tmp_path / "after").glob("*.json")
    assert res.exit_code == 130 and res.stderr.strip() == f"interrupted: completed cases are kept in {path}", res.output


# ----------------------------------------------------------------------------- 8: control characters stay off the terminal


HOSTILE = "topk\x1b[2J\x1b]0;owned\x07\r\u202e"


def test_control_characters_in_a_label_reach_the_file_but_not_the_terminal(tmp_path: Path) -> None:
    from tests.cli.test_cli_errors import TINY

    suite = tmp_path / "hostile.toml"  # the label in TOML's escapes: a raw control character is not valid TOML
    suite.write_text(TINY.format(label="".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in HOSTILE)))
    res = runner.invoke(app, ["run", str(suite), "--out", str(tmp_path / "runs"), "--no-timing"])
    assert res.exit_code == 0, res.output
    for ch in ("\x1b", "\x07", "\r", "\u202e"):
        assert ch not in res.output, repr(ch)
    assert "topk\\x1b[2J" in res.output
    (path,) = (tmp_path / "runs").glob("*.json")
    assert json.loads(path.read_text())["cases"][0]["label"] == HOSTILE  # the file keeps the label as written


def test_error_lines_and_tables_show_control_characters_written_out(tmp_path: Path) -> None:
    from gcbench.report.text import safe_text, term

    assert safe_text("a\x1b[31mb\tc\nd\x9b\u2066") == "a\\x1b[31mb\tc\nd\\x9b\\u2066"
    assert term("x\x1b[bold]") == "x\\x1b\\[bold]"  # written out, then markup-escaped
    res = runner.invoke(app, ["run", str(tmp_path / "no\x1b[31msuch.toml")])
    line = _error(res, 1, "no\\x1b[31msuch.toml")
    assert "\x1b" not in line


# ----------------------------------------------------------------------------- 9: unknown names are exit 2 with a suggestion


@pytest.mark.parametrize(("argv", "needle"), [
    (["converge", "--optimizer", "adamm"], "unknown optimizer 'adamm'; did you mean 'adam'"),
    (["converge", "--task", "digitz"], "unknown task 'digitz'; did you mean 'digits'"),
    (["converge", "--model", "smallcnnn"], "unknown model 'smallcnnn'; did you mean 'smallcnn'"),
    (["converge", "--model", "hf:gpt3"], "did you mean 'gpt2'"),
    (["run", "quick", "--model", "resnt18"], "did you mean 'resnet18'"),
    (["bench", "topk", "--model", "resnt50"], "did you mean 'resnet50'"),
    (["advise", "--model", "resnt50"], "did you mean 'resnet50'"),
    (["collectives", "bf16", "--model", "mpl"], "did you mean 'mlp'"),
    (["collectives", "bf16", "--scheme", "rng"], "unknown collective scheme 'rng'; did you mean 'ring'"),
    (["collectives", "bf16", "--accumulate", "fp16"], "unknown accumulation dtype 'fp16'"),
    (["collectives", "bf16", "--distribution", "laplce"], "did you mean 'laplace'"),
])
def test_unknown_names_exit_2_with_a_suggestion(argv: list[str], needle: str, tmp_path: Path) -> None:
    _error(runner.invoke(app, [*argv, *(["-o", str(tmp_path)] if argv[0] in ("converge", "run", "bench", "advise") else [])]),
           2, needle)
    assert not list(tmp_path.iterdir())


def test_a_folder_given_as_a_run_names_the_option_that_takes_one(tmp_path: Path) -> None:
    """`gcbench report reports/runs` meant the folder of runs: one line that says --runs-dir, for a run or a baseline."""
    _error(runner.invoke(app, ["report", str(tmp_path)]), 1, "is a folder, not a results file", f"--runs-dir {tmp_path}")
    _error(runner.invoke(app, ["report", "--baseline", str(tmp_path)]), 1, "is a folder", "--runs-dir")
    already = runner.invoke(app, ["report", str(tmp_path), "--runs-dir", str(tmp_path)])  # it is --runs-dir already
    _error(already, 1, "is a folder, not a results file: name a file in it, or 'latest' for its newest run")
    assert "--runs-dir" not in already.stderr
