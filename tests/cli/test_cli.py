"""The command line through typer's runner: list, validate, run, and user errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.compressors import registry
from gcbench.results.store import SCHEMA_VERSION, load_run

runner = CliRunner()

TINY = """
name = "tiny"
seed = 3
[[sources]]
kind = "synthetic"
shapes = [[64, 32], [10]]
workers = 2
steps = 2
[metrics]
repeats = 3
timing_repeats = 2
warmup = 0
# the rounds this file's tests count, whatever a fresh clone's first numba compile costs (with warmup = 0 it lands in
# the first timed round, and 15 s shared by three cases cut a case to one round in a fresh-clone CI run)
timing_run_budget_s = 600
[[compressors]]
name = "topk"
params = { density = 0.1, error_feedback = true }
[[compressors]]
name = "qsgd"
[[compressors]]
name = "terngrad"
"""


def _write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_version() -> None:
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and "gcbench" in r.output


def test_list_shows_every_compressor_and_json() -> None:
    r = runner.invoke(app, ["list"])
    assert r.exit_code == 0
    r = runner.invoke(app, ["list", "--json"])
    rows = json.loads(r.output)
    assert {row["name"] for row in rows} == set(registry.names())
    for row in rows:
        assert row["version"] >= 1 and row["paper"] and row["description"]
        assert isinstance(row["biased"], bool) and isinstance(row["stateful"], bool)


def test_list_unknown_kind_is_one_line() -> None:
    r = runner.invoke(app, ["list", "compresors"])
    assert r.exit_code == 2 and "did you mean 'compressors'" in r.output and "Traceback" not in r.output


def test_validate_good_and_bad(tmp_path: Path) -> None:
    r = runner.invoke(app, ["validate", str(_write(tmp_path, TINY))])
    assert r.exit_code == 0 and "ok:" in r.output
    bad = TINY.replace("density = 0.1", "density = 5")
    p = _write(tmp_path, bad, "bad.toml")
    r = runner.invoke(app, ["validate", str(p)])
    assert r.exit_code == 1
    assert f"{p}: compressors[0].params.density: must be in (0, 1], got 5" in r.output.replace("\n", "")
    assert "Traceback" not in r.output


@pytest.mark.parametrize("text", ["name = \n[[compressors]\n", "this is not toml at all", TINY.replace('"topk"', '"topkk"'),
                                  TINY.replace("workers = 2", "workers = -1"), "\x00\x01binary"])
def test_corrupt_suites_exit_1_without_traceback(tmp_path: Path, text: str) -> None:
    p = _write(tmp_path, text)
    for cmd in (["validate", str(p)], ["run", str(p), "--out", str(tmp_path / "runs")]):
        r = runner.invoke(app, cmd)
        assert r.exit_code == 1, r.output
        assert "Traceback" not in r.output
        assert r.exception is None or isinstance(r.exception, SystemExit)
        assert "error:" in r.output


def test_run_writes_a_valid_results_file(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = runner.invoke(app, ["run", str(_write(tmp_path, TINY)), "--out", str(runs), "--quiet"])
    assert r.exit_code == 0, r.output
    files = list(runs.glob("*.json"))
    assert len(files) == 1
    data = load_run(files[0])
    assert data.schema_version == SCHEMA_VERSION and data.status == "complete"
    assert data.suite.name == "tiny" and len(data.suite_hash) == 16
    env = data.environment
    assert env.cpu_count and env.torch_threads and env.torch and "cpu_model" in env.model_fields_set
    assert data.git is not None and {"commit", "dirty"} <= data.git.model_fields_set
    labels = [c.label for c in data.cases]
    assert labels == ["topk(density=0.1,error_feedback=True)", "qsgd", "terngrad"]
    for c in data.cases:
        assert c.status == "ok"
        assert c.size.wire_bytes > 0 and c.size.ratio > 1
        assert c.fidelity.q.model is not None and c.timing.compress.median_s > 0
        assert len(c.timing.compress.samples_s) == c.timing.rounds >= 2  # timing_repeats is the least number of rounds
    topk = data.cases[0]
    assert topk.ef_drift.sum_drift and len(topk.ef_drift.sum_drift) == 2
    tern = data.cases[2]
    # one 4-byte scaler per tensor (2 tensors) per step, received from the one other worker
    assert tern.traffic["scaler"].sent_mean == 8 and tern.traffic["scaler"].received_mean == 8
    assert "ratio" in r.output and str(files[0]) in r.output.replace("\n", "")


def test_run_json_and_failed_case_exit_code(tmp_path: Path) -> None:
    r = runner.invoke(app, ["run", str(_write(tmp_path, TINY)), "--out", str(tmp_path / "runs"), "--json", "-c", "signsgd",
                            "--no-timing"])
    assert r.exit_code == 0, r.output
    payload = json.loads(r.output)
    assert [c["label"] for c in payload["cases"]] == ["signsgd"]
    assert payload["cases"][0]["timing"] is None


def test_nan_source_is_reported_per_tensor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from gcbench.sources import synthetic

    orig = synthetic.SyntheticSource.gradients

    def poisoned(self, step, worker):
        g = dict(orig(self, step, worker))
        t = g["t1"].clone()
        t[3] = float("nan")
        g["t1"] = t
        return g

    monkeypatch.setattr(synthetic.SyntheticSource, "gradients", poisoned)
    r = runner.invoke(app, ["run", str(_write(tmp_path, TINY)), "--out", str(tmp_path / "runs"), "--quiet"])
    assert r.exit_code == 1
    assert "t1" in r.output and "NaN" in r.output and "Traceback" not in r.output
    assert torch.isnan(torch.tensor(float("nan")))


# ----------------------------------------------------------------------------- one grammar (issue 18)


def _stderr_lines(res: Any) -> list[str]:
    return [ln for ln in res.stderr.splitlines() if ln.strip()]


def _usage_error(res: Any, *needles: str) -> str:
    """Exit 2, no traceback, one ``error:`` line on stderr holding ``needles``."""
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert "Traceback" not in res.output
    lines = _stderr_lines(res)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_compare_takes_positional_and_dash_c_specs_with_any_case(tmp_path: Path) -> None:
    r = runner.invoke(app, ["compare", "TopK", "-c", "randomk:density=0.1", "--shape", "16x8", "--steps", "1", "--rounds", "1",
                            "--repeats", "2", "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["cases"] == ["topk", "randomk(density=0.1)"]


@pytest.mark.parametrize(("argv", "needles"), [
    (["compare", "dgc"], ["compare needs two or more compressors, got 1"]),
    (["compare", "-c", "dgc"], ["compare needs two or more compressors, got 1"]),
    (["check"], ["check needs a compressor, got 0"]),
    (["compare", "dgcc", "topk"], ["unknown compressor 'dgcc'; did you mean 'dgc'"]),
    (["bench", "-c", "TOPKK"], ["unknown compressor 'TOPKK'; did you mean 'topk'"]),
    (["run", "--granularity", "layers"], ["unknown granularity 'layers'; did you mean 'layer'?"]),
    (["compare", "dgc", "topk", "--granularity", "Bucketz"], ["unknown granularity 'Bucketz'; did you mean 'bucket'?"]),
    (["compare", "dgc", "topk", "--device", "gpu"], ["unknown device 'gpu'"]),
    (["compare", "dgc", "topk", "--distribution", "normall"], ["unknown distribution 'normall'; did you mean 'normal'?"]),
    (["bench", "topk", "--device", "tpu"], ["unknown device 'tpu'"]),
    (["run", "--device", "auto", "--model", "mlp", "-c", "qsdg"], ["unknown compressor 'qsdg'; did you mean 'qsgd'"]),
    (["train", "--task", "digit"], ["unknown task 'digit'; did you mean 'digits'"]),
    (["train", "--granularity", "model"], ["unknown granularity 'model'"]),
    (["simulate", "latest", "--scheme", "allreduc"], ["unknown scheme 'allreduc'; did you mean 'allreduce'?"]),
    (["list", "compresors"], ["did you mean 'compressors'"]),
    (["list", "dgx"], ["did you mean 'dgc'"]),
])
def test_unknown_names_and_missing_compressors_are_usage_errors(argv: list[str], needles: list[str], tmp_path: Path) -> None:
    before = set(tmp_path.iterdir())
    _usage_error(runner.invoke(app, [*argv, *(["--out", str(tmp_path)] if argv[0] in ("compare", "bench", "run", "train") else [])]),
                 *needles)
    assert set(tmp_path.iterdir()) == before  # refused before any work


@pytest.mark.parametrize("argv", [["list", "MODELS", "--json"], ["list", "Metrics", "--json"]])
def test_list_kinds_ignore_case(argv: list[str]) -> None:
    r = runner.invoke(app, argv)
    assert r.exit_code == 0, r.output
    assert r.stdout == runner.invoke(app, [argv[0], argv[1].lower(), "--json"]).stdout


def test_a_compressor_name_in_any_case_shows_its_card() -> None:
    r = runner.invoke(app, ["list", "DGC", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["name"] == "dgc"


def test_a_card_counts_its_bits_from_a_real_encoding_when_asked() -> None:
    r = runner.invoke(app, ["list", "topk", "--bits", "--json"])
    assert r.exit_code == 0, r.output
    wire = json.loads(r.stdout)["wire"]
    numel = wire["shape"][0] * wire["shape"][1]
    assert wire["codec"] == "topk" and wire["bits_per_element"] == 8 * (wire["header_bytes"] + wire["body_bytes"]) / numel
    assert json.loads(runner.invoke(app, ["list", "topk", "--json"]).stdout)["wire"] is None  # not measured unless asked
    bad = runner.invoke(app, ["list", "models", "--bits"])
    assert bad.exit_code != 0 and "--bits goes with a compressor's name" in bad.output


def test_check_json_has_stable_keys_and_takes_dash_c() -> None:
    r = runner.invoke(app, ["check", "NONE", "-c", "fp16", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [o["spec"] for o in out] == ["none", "fp16"] and all(o["ok"] for o in out)
    assert {"check", "what", "ok", "detail"} == set(out[0]["checks"][0])


def test_bench_rounds_and_its_deprecated_repeats(tmp_path: Path) -> None:
    r = runner.invoke(app, ["bench", "-c", "TopK", "--sizes", "1K", "--rounds", "2", "--no-isolate", "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    (case,) = json.loads(r.stdout)["cases"]
    assert case["compressor"] == case["label"] == "topk" and case["policy"]["min_rounds"] == 2  # --rounds: the least rounds
    assert len(case["compress"]["samples_s"]) >= 2
    assert not r.stderr.strip()
    r = runner.invoke(app, ["bench", "topk", "--sizes", "1K", "--repeats", "3", "--no-isolate", "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    (case,) = json.loads(r.stdout)["cases"]
    assert case["policy"]["min_rounds"] == 3 and len(case["compress"]["samples_s"]) >= 3  # the old spelling still works ...
    (line,) = _stderr_lines(r)  # ... and says, in one line, what to write instead
    assert line.startswith("warning: bench --repeats N is deprecated") and "--rounds 3" in line


def test_bench_processes_reports_this_machines_spread_between_processes(tmp_path: Path) -> None:
    """--json carries the pooled spread of the file's process medians; stderr says it in a note, with --json too (here
    with too few degrees of freedom to stand for the machine: two timings of two processes)."""
    from gcbench.results.process_spread import spread_of
    from gcbench.results.store import load_run

    args = ["bench", "signsgd", "--sizes", "1K", "--rounds", "1", "--warmup", "0", "--processes", "2", "--out", str(tmp_path)]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    expected = spread_of(load_run(out["results"]), Path(out["results"]))
    assert expected is not None and out["process_spread"] == expected.to_dict() and out["process_spread"]["df"] == 2
    note = " ".join(r.stderr.split())
    assert "note: spread between processes on this machine:" in note and "2 df" in note and "too few degrees of freedom" in note


def test_compare_timing_repeats_is_a_deprecated_rounds(tmp_path: Path) -> None:
    r = runner.invoke(app, ["compare", "topk", "randomk", "--shape", "8x8", "--steps", "1", "--timing-repeats", "2", "--repeats", "2",
                            "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    (line,) = _stderr_lines(r)
    assert "--timing-repeats" in line and "--rounds 2" in line
    data = json.loads(Path(json.loads(r.stdout)["results"]).read_text())
    assert data["suite"]["metrics"]["timing_repeats"] == 2


@pytest.fixture
def trained(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[str]]:
    """The compressor specs each `gcbench train` call hands to the trainer (which is not the subject here)."""
    import gcbench.train.driver as train_mod

    calls: list[list[str]] = []

    def fake_train(cfg: Any, compressors: Any, out_dir: Any, progress: Any) -> Any:
        calls.append(list(compressors))
        path = tmp_path / "train.json"
        path.write_text("{}")
        return train_mod.TrainOutcome(path, [])

    monkeypatch.setattr(train_mod, "train", fake_train)
    return calls


@pytest.mark.parametrize(("argv", "specs", "warning"), [
    (["-c", "none", "-c", "TOPK:density=0.1,error_feedback=true"], ["none", "topk:density=0.1,error_feedback=true"], None),
    ([], ["none", "topk", "qsgd"], None),
    (["-c", "none,topk:density=0.1,error_feedback=true,qsgd"], ["none", "topk:density=0.1,error_feedback=true", "qsgd"],
     "-c none -c topk:density=0.1,error_feedback=true -c qsgd"),
    (["--compressors", "none,dgc"], ["none", "dgc"], "-c none -c dgc"),
])
def test_train_takes_repeatable_specs_and_deprecates_comma_lists(argv: list[str], specs: list[str], warning: str | None,
                                                                 trained: list[list[str]], tmp_path: Path) -> None:
    r = runner.invoke(app, ["train", "--task", "CharLSTM", "--workers", "2", *argv, "--out", str(tmp_path), "-q"])
    assert r.exit_code == 0, r.output
    assert trained == [specs]
    lines = _stderr_lines(r)
    if warning is None:
        assert not lines
    else:
        assert len(lines) == 1 and lines[0].startswith("warning: ") and "deprecated" in lines[0] and warning in lines[0], lines


@pytest.mark.parametrize(("option", "value", "needle"), [
    ("--workers", "8,x", "'x' is not an integer"), ("--workers", "8,0", "'0' is not a positive"),
    ("--bandwidth", "1,fast", "'fast' is not a number"), ("--bandwidth", ",", "expected a comma list"),
])
def test_swept_lists_name_the_bad_item(option: str, value: str, needle: str) -> None:
    r = runner.invoke(app, ["simulate", "/nonexistent.json", option, value])
    assert r.exit_code == 1 and "Traceback" not in r.output
    (line,) = _stderr_lines(r)
    assert line.startswith(f"error: {option}: ") and needle in line


def _commands() -> dict[str, Any]:
    import typer.main

    group = typer.main.get_command(app)
    return {name: group.commands[name] for name in group.commands}  # type: ignore[attr-defined]


def test_every_help_has_an_example_and_typed_metavars() -> None:
    commands = _commands()
    assert len(commands) >= 10
    for name, command in commands.items():
        for param in command.params:
            if getattr(param, "is_flag", False) or param.hidden:
                continue
            assert param.metavar and param.metavar.replace("|", "").isupper(), (name, param.name, param.metavar)
        text = " ".join(runner.invoke(app, [name, "--help"], env={"COLUMNS": "200"}).stdout.split())
        assert "Examples: `gcbench" in text or "Examples: `torchrun" in text, name
        for typename in ("<bool>", "<str>", "<int>", "<float>", "<path>", "<list"):
            assert typename not in text, (name, typename)
    top = runner.invoke(app, ["--help"]).stdout
    assert "<bool>" not in top


def test_the_command_line_imports_no_heavy_library() -> None:
    """`--help` of every command, `list` and `validate` start without torch, numba, matplotlib or scipy."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from gcbench.cli import app\n"
        "r = CliRunner()\n"
        "assert r.invoke(app, ['list']).exit_code == 0\n"
        "assert r.invoke(app, ['list', 'dgc']).exit_code == 0\n"
        "assert r.invoke(app, ['validate', 'suites/cnn.toml']).exit_code == 0\n"
        f"for name in {sorted(_commands())!r}:\n"
        "    assert r.invoke(app, [name, '--help']).exit_code == 0, name\n"
        "print(sorted(m for m in ('torch', 'numba', 'matplotlib', 'scipy') if m in sys.modules))\n"
    )
    root = Path(__file__).parents[2]
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_bundled_suite_names_ignore_case_and_get_suggestions(tmp_path: Path) -> None:
    r = runner.invoke(app, ["validate", "QUICK"])
    assert r.exit_code == 0 and "suites/quick.toml" in r.stdout.replace("\n", "")
    _usage_error(runner.invoke(app, ["validate", "quik"]), "unknown suite 'quik'; did you mean 'quick'?")
    _usage_error(runner.invoke(app, ["run", "Quik", "--out", str(tmp_path / "runs")]), "did you mean 'quick'?")
    assert not (tmp_path / "runs").exists()
    # a path is a path: its absence is the loader's error (exit 1), not a name to guess
    r = runner.invoke(app, ["validate", str(tmp_path / "nope.toml")])
    assert r.exit_code == 1 and "not found" in r.stderr


def test_zoo_model_names_ignore_case_and_other_models_pass_through() -> None:
    from gcbench.cli.failures import UsageError
    from gcbench.cli.grammar import model_arg

    assert model_arg("ResNet18") == "resnet18" and model_arg("mlp") == "mlp"
    for other in ("hf:gpt2:layers=2", "mypkg.Models:factory", None):
        assert model_arg(other) == other
    for unknown, suggestion in (("resnet19", "did you mean 'resnet18'"), ("hf:gpt3", "did you mean 'gpt2'")):
        with pytest.raises(UsageError, match=suggestion):  # an unknown name is exit 2, as an unknown -c is
            model_arg(unknown)


@pytest.mark.parametrize(("argv", "new_form"), [
    (["run", "-c", "none,topk"], "-c none -c topk"),
    (["compare", "DGC,topk:density=0.1", "qsgd"], "-c DGC -c topk:density=0.1"),
    (["check", "topk:density=0.1,qsgd"], "-c topk:density=0.1 -c qsgd"),
])
def test_commas_between_compressors_say_how_to_give_each_its_spec(argv: list[str], new_form: str, tmp_path: Path) -> None:
    line = _usage_error(runner.invoke(app, [*argv, *(["--out", str(tmp_path)] if argv[0] != "check" else [])]),
                        "commas separate one spec's parameters")
    assert line.endswith(f"({new_form})")
    # a parameter without '=' is not another compressor: the spec's own error says so
    r = runner.invoke(app, ["check", "topk:density=0.1,foo"])
    assert r.exit_code == 1 and "must look like key=value" in r.stderr


@pytest.mark.parametrize(("argv", "needle"), [
    (["compare", "topk", "randomk", "--workers", "x"], "Invalid value for '--workers'"),
    (["compare", "--worker", "3", "topk", "randomk"], "No such option: --worker"),
    (["frob"], "No such command 'frob'"),
    (["record"], "Missing option '--model'"),
    (["simulate", "a", "b"], "unexpected extra argument"),
])
def test_the_parsers_own_usage_errors_are_one_line_too(argv: list[str], needle: str) -> None:
    line = _usage_error(runner.invoke(app, argv), needle)
    assert "--help" in line  # and it says where the help is


def test_no_arguments_still_prints_the_help() -> None:
    r = runner.invoke(app, [])
    assert "Usage:" in r.output and "Commands" in r.output and "error:" not in r.output


def _gcbench_shell(command: str, **env: str) -> Any:
    """``python -m gcbench`` from this checkout under ``sh`` (for redirections a CliRunner cannot make)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).parents[2]
    return subprocess.run(["sh", "-c", f"'{sys.executable}' -m gcbench {command}"], capture_output=True, cwd=root,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(root), **env})


def test_an_ascii_only_stdout_gets_every_table_with_unencodable_characters_replaced() -> None:
    res = _gcbench_shell("list", PYTHONIOENCODING="ascii")
    assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr
    text = res.stdout.decode("ascii")  # every byte is ASCII
    assert "topk" in text and "?" in text  # the ≥ and × of the table became ?, one character each


def test_a_closed_stdout_is_one_line_and_exit_1() -> None:
    res = _gcbench_shell("list >&-")
    assert res.returncode == 1 and b"Traceback" not in res.stderr, res.stderr
    assert res.stderr.decode().strip() == ("error: standard output is closed: gcbench writes its results there "
                                           "(redirect it to a file or /dev/null instead)")


def test_every_option_is_declared_once_in_the_cli_package() -> None:
    """An option several commands take is declared in cli/options.py only; no flag is spelled in two declarations."""
    import re

    package = Path(__file__).parents[2] / "gcbench" / "cli"
    declared: dict[str, list[str]] = {}
    for path in sorted(package.glob("*.py")):
        for flag in re.findall(r'(?:typer\.Option|_with_help)\(\s*"(--[\w-]+)', path.read_text()):
            declared.setdefault(flag, []).append(path.name)
    assert declared and {f: where for f, where in declared.items() if len(where) > 1} == {}
    # and every command still takes its options: the shared ones included (-c, --json, --quiet, --workers, ...)
    params = {name: {o for p in cmd.params for o in p.opts} for name, cmd in _commands().items()}
    assert {"-c", "--json", "--quiet", "--out", "--workers"} <= params["advise"]
    assert {"--latency-us", "--bandwidth", "--workers", "--runs-dir", "--json"} <= params["simulate"]


def test_the_library_functions_the_commands_call_check_and_build_what_the_commands_did() -> None:
    """compare's suite, the bench gate and the link ranges live in the library, where a script can call them too."""
    from gcbench.core.errors import GcbenchError, ParamError
    from gcbench.measure.suite_options import compare_suite
    from gcbench.predict.network import compute_seconds, latency_seconds
    from gcbench.results.gate import bench_gate

    suite = compare_suite([("topk", {}), ("qsgd", {})], momentum=0.0, shape="64x32", workers=3)
    src = suite.sources[0]
    assert (src.kind, src.shapes, src.workers, src.steps) == ("synthetic", [[64, 32]], 3, 10)
    assert suite.name == "compare" and suite.metrics.timing_budget_s == 3.0 and len(suite.compressors) == 2
    with pytest.raises(GcbenchError, match="--shape: expected dimensions like 1000x1000"):
        compare_suite([("topk", {}), ("qsgd", {})], momentum=0.0, shape="64 by 32")
    assert not bench_gate([], 3, "OLD.json").fails
    assert bench_gate(["slow"], 3, "OLD.json").fails and not bench_gate(["slow"], 3, "OLD.json").reasons
    unmatched = bench_gate([], 0, "OLD.json")
    assert unmatched.fails and "no case of this bench matches a case of OLD.json" in unmatched.reasons[0]
    assert latency_seconds(5.0) == pytest.approx(5e-6) and compute_seconds(None) is None and compute_seconds(20.0) == 0.02
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ParamError, match="--latency-us must be a finite number >= 0"):
            latency_seconds(bad, "--latency-us")
        with pytest.raises(ParamError, match="--compute-ms must be a finite number >= 0"):
            compute_seconds(bad, "--compute-ms")
