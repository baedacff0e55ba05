"""Every user mistake on the command line is one clear line and exit 1, never a traceback (issue 13).

Covers unwritable outputs (item 6), rich markup in user- and library-provided text (item 8),
non-finite and meaningless numbers (item 11), and the global ``--debug`` flag that adds the
traceback back for the curious.
"""

from __future__ import annotations

import errno
import io
import json
import os
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

import gcbench.cli.output as cli_output
from gcbench.cli import app
from gcbench.cli.failures import user_errors

runner = CliRunner()

TINY = """
name = "tiny"
seed = 3
[[sources]]
kind = "synthetic"
shapes = [[32, 16]]
workers = 2
steps = 1
[metrics]
repeats = 2
timing_repeats = 2
warmup = 0
[[compressors]]
name = "topk"
label = "{label}"
params = {{ density = 0.1 }}
"""

HOSTILE = "[/]x[bold]"  # a closing tag with nothing open: rich raises MarkupError if it is not escaped


def _suite(folder: Path, label: str = "topk") -> Path:
    path = folder / "tiny.toml"
    path.write_text(TINY.format(label=label.replace("\\", "\\\\").replace('"', '\\"')))
    return path


def _error_lines(res: Any) -> list[str]:
    return [ln for ln in res.stderr.splitlines() if ln.strip()]


def assert_one_line(res: Any, *needles: str) -> str:
    """Exit 1, no traceback, exactly one non-empty stderr line starting with ``error:`` containing ``needles``."""
    assert res.exit_code == 1, (res.exit_code, res.output)
    assert "Traceback" not in res.output, res.output
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit), res.exception
    lines = _error_lines(res)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder holding one real (tiny) results file."""
    folder = tmp_path_factory.mktemp("runs")
    res = runner.invoke(app, ["run", str(_suite(folder)), "--out", str(folder), "-q", "--no-timing"])
    assert res.exit_code == 0, res.output
    return folder


# ----------------------------------------------------------------------------- --debug


def test_debug_adds_the_chained_traceback_after_the_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["run", "--out", "/proc/gcbench-no-such-dir", "-q"]
    monkeypatch.delenv("GCBENCH_DEBUG", raising=False)
    plain = runner.invoke(app, argv)
    assert_one_line(plain, "cannot write /proc/gcbench-no-such-dir")
    for extra_argv, env in ((["--debug"], {}), ([], {"GCBENCH_DEBUG": "1"})):
        res = runner.invoke(app, [*extra_argv, *argv], env=env)
        assert res.exit_code == 1
        err = res.stderr
        assert err.splitlines()[0].startswith("error: cannot write /proc/gcbench-no-such-dir")
        assert "Traceback" in err and "OutputError" in err
        # the cause (the OSError of the probe) is part of the traceback
        assert "The above exception was the direct cause" in err and "Error: [Errno" in err
    # the flag does not stick to later invocations
    assert "Traceback" not in runner.invoke(app, argv).output


def test_user_errors_turns_an_oserror_with_a_file_into_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    @user_errors
    def disk_full() -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "reports/runs/x.json")

    with pytest.raises(typer.Exit) as exc:
        disk_full()
    assert exc.value.exit_code == 1
    err = capsys.readouterr().err
    assert err.strip() == f"error: cannot write reports/runs/x.json: {os.strerror(errno.ENOSPC)}"

    @user_errors
    def bug() -> None:
        raise OSError("no file involved")

    with pytest.raises(OSError, match="no file involved"):  # a bug keeps its traceback
        bug()


# ----------------------------------------------------------------------------- item 6: unwritable outputs


def _commands(suite: Path, runs: Path) -> dict[str, tuple[list[str], bool]]:
    """command name → (argv with OUT as the output path, whether OUT is a file rather than a folder)."""
    return {
        "run": (["run", str(suite), "--out", "OUT", "-q", "--no-timing"], False),
        "compare": (["compare", "topk", "randomk", "--shape", "8x8", "--out", "OUT", "-q"], False),
        "record": (["record", "--model", "mlp", "--out", "OUT", "-q"], False),
        "train": (["train", "--task", "charlstm", "--workers", "2", "--out", "OUT", "-q"], False),
        "bench": (["bench", "topk", "--sizes", "1K", "--no-isolate", "--out", "OUT"], False),
        "report --html": (["report", "--runs-dir", str(runs), "--html", "-o", "OUT"], True),
        "report --md": (["report", "--runs-dir", str(runs), "--md", "-o", "OUT"], True),
    }


COMMANDS = ("run", "compare", "record", "train", "bench", "report --html", "report --md")


@pytest.mark.parametrize("kind", ["in the way", "under a file", "under /proc", "read-only"])
@pytest.mark.parametrize("command", COMMANDS)
def test_unwritable_output_is_one_line_before_any_work(command: str, kind: str, tmp_path: Path, runs: Path) -> None:
    argv, is_file = _commands(_suite(tmp_path), runs)[command]
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    if kind == "in the way":  # a file where a folder goes, or a folder where a file goes
        out = tmp_path if is_file else afile
    elif kind == "under a file":
        out = afile / ("r.out" if is_file else "sub")
    elif kind == "under /proc":  # fails for root too
        out = Path("/proc/gcbench-no-such-dir") / ("r.out" if is_file else "sub")
    else:
        if os.geteuid() == 0:
            pytest.skip("root ignores permission bits (the /proc case covers root)")
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        out = ro / ("r.out" if is_file else "sub")
    before = sorted(p.name for p in tmp_path.iterdir())
    res = runner.invoke(app, [str(out) if a == "OUT" else a for a in argv])
    assert_one_line(res, f"cannot write {out}")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created, no work started


def test_disk_full_while_writing_is_one_line(runs: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    res = runner.invoke(app, ["report", "--runs-dir", str(runs), "--md", "-o", "/dev/full"])
    assert_one_line(res, "cannot write", os.strerror(errno.ENOSPC))
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)  # written into, never renamed over (as root that replaced it)


# ----------------------------------------------------------------------------- item 8: rich markup


@pytest.fixture
def thread_errors(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[BaseException]]:
    """Exceptions raised in other threads (rich's progress refresh thread) during the test."""
    seen: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    yield seen


def test_markup_in_a_label_is_printed_literally_and_the_progress_survives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thread_errors: list[BaseException]) -> None:
    # a terminal console, so the progress bar really renders (and refreshes from its thread)
    monkeypatch.setattr(cli_output, "err", Console(file=io.StringIO(), force_terminal=True, width=160, stderr=True))
    out = tmp_path / "[/]runs"  # the user's own folder name is text too
    res = runner.invoke(app, ["run", str(_suite(tmp_path, HOSTILE)), "--out", str(out), "--no-timing"])
    # numba, imported lazily during the run, points colorama's exit hook at the sys.stdout of that
    # moment: rich's proxy of the runner's stream, closed by now.  Point it back (test artefact only).
    if "colorama.initialise" in sys.modules:
        sys.modules["colorama.initialise"].orig_stdout = sys.__stdout__
    assert res.exit_code == 0, res.output
    assert not thread_errors, thread_errors
    assert HOSTILE in res.stdout
    results = next(out.glob("*.json"))
    assert f"results: {results}" in res.stdout
    assert json.loads(results.read_text())["cases"][0]["label"] == HOSTILE
    # every reader of the file renders the label as text too
    for argv in (["simulate", str(results)], ["report", str(results)]):
        res = runner.invoke(app, argv)
        assert res.exit_code == 0, (argv, res.output)
        assert HOSTILE in res.stdout, argv


def test_progress_bar_shows_messages_as_text(monkeypatch: pytest.MonkeyPatch, thread_errors: list[BaseException]) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(cli_output, "err", Console(file=buf, force_terminal=True, width=160, stderr=True))
    with cli_output.progress_bar() as prog:
        prog("run", 0, 2, "[/__w/pytorch/x] gloo says [bold]")
        prog("[/]", 1, 2, "case [/]x[bold]")
    assert not thread_errors


def test_train_failure_with_markup_in_its_error_prints_the_results_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gcbench.train.driver as train_mod
    from gcbench.train.case import failed_record
    from gcbench.workloads.specs import Spec

    message = ("rank 1 stopped responding at step 0: rank 0 gave up waiting in a collective after 30 s "
               "([/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error)")
    path = tmp_path / "train.json"

    def fake_train(cfg: Any, compressors: Any, out_dir: Any, progress: Any) -> train_mod.TrainOutcome:
        # the worker processes are not the subject here: the CLI's rendering of a real failed record is
        progress("train", 0, 1, message)
        path.write_text("{}")
        return train_mod.TrainOutcome(path, [failed_record(Spec("none", "none"), message)])

    monkeypatch.setattr(train_mod, "train", fake_train)
    res = runner.invoke(app, ["train", "--task", "charlstm", "--workers", "2", "--out", str(tmp_path), "-q"])
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit)
    assert f"results: {path}" in res.stdout
    assert "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534]" in res.stdout.replace("\n", "")
    assert _error_lines(res) == [f"error: none: {message}"]


# ----------------------------------------------------------------------------- item 11: numbers


BAD_NUMBERS: list[tuple[list[str], str]] = [
    *[(["simulate", "RUN", "--bandwidth", v], "--bandwidth") for v in ("nan", "inf", "-inf", "0", "-1", "1,nan")],
    *[(["simulate", "RUN", "--latency-us", v], "--latency-us") for v in ("nan", "inf", "-1")],
    *[(["simulate", "RUN", "--compute-ms", v], "--compute-ms") for v in ("nan", "inf", "-1")],
    *[(["simulate", "RUN", "--workers", v], "--workers") for v in ("0", "-3", "8,0", "x")],
    (["bench", "topk", "--sizes", "1K", "--rounds", "0"], "--rounds"),
    (["bench", "topk", "--sizes", "1K", "--warmup", "-1"], "--warmup"),
    (["bench", "topk", "--sizes", "1K", "--threads", "0"], "--threads"),
    (["bench", "topk", "--sizes", "1K", "--threshold", "nan"], "--threshold"),
    *[(["bench", "topk", "--sizes", v], f"--sizes: size {v.split(',')[-1]!r}") for v in ("nan", "inf", "0", "1e400", "x", "1K,x")],
    (["bench", "topk", "--sizes", ","], "--sizes"),
    *[(["train", "--task", "charlstm", opt, v], name) for opt, v, name in (
        ("--timeout", "nan", "timeout"), ("--timeout", "inf", "timeout"), ("--timeout", "1e300", "timeout"),
        ("--timeout", "0", "timeout"), ("--collective-timeout", "inf", "collective timeout"),
        ("--collective-timeout", "nan", "collective timeout"), ("--lr", "inf", "lr"), ("--lr", "nan", "lr"),
        ("--lr", "0", "lr"), ("--target", "nan", "target"), ("--workers", "0", "workers"), ("--epochs", "0", "epochs"),
        ("--threads", "0", "threads"), ("--batch-size", "0", "batch_size"))],
    (["compare", "topk", "randomk", "--workers", "0"], "--workers"),
    (["compare", "topk", "randomk", "--steps", "0"], "--steps"),
    (["compare", "topk", "randomk", "--repeats", "0"], "repeats"),
    (["compare", "topk", "randomk", "--shape", "nanx3"], "--shape"),
    (["report", "--runs-dir", "RUNS", "--threshold", "nan"], "--threshold"),
    (["report", "--runs-dir", "RUNS", "--threshold", "inf"], "--threshold"),
    (["report", "--runs-dir", "RUNS", "--alpha", "nan"], "--alpha"),
    (["record", "--model", "mlp", "--out", "TRACE", "--steps", "0"], "steps"),
    (["record", "--model", "mlp", "--out", "TRACE", "--workers", "0"], "workers"),
    # issue 34: the upper ends too (a suite's ranges), before any allocation
    (["record", "--model", "mlp", "--out", "TRACE", "--workers", "100000"], "--workers: must be in [1, 1024], got 100000"),
    (["record", "--model", "smallcnn", "--out", "TRACE", "--image-size", "100000"], "--image-size: must be in [8, 1024]"),
    (["record", "--model", "mlp", "--out", "TRACE", "--batch-size", "100000000"], "--batch-size: must be in [1, 4096]"),
    (["record", "--model", "mlp", "--out", "TRACE", "--seed", "-1"], "--seed: must be in [0, 9223372036854775807]"),
    (["bench", "topk", "--sizes", "1K", "--threads", "100000"], "--threads must be in [1, 1024], got 100000"),
    (["compare", "topk", "randomk", "--workers", "100000"], "sources[0].workers: must be in [1, 1024], got 100000"),
    (["compare", "topk", "randomk", "--seed", str(2**64)], "seed: must be in [0, 9223372036854775807]"),
]


@pytest.mark.parametrize(("argv", "names"), BAD_NUMBERS, ids=[" ".join(a) for a, _ in BAD_NUMBERS])
def test_meaningless_numbers_are_one_line(argv: list[str], names: str, runs: Path, tmp_path: Path) -> None:
    run_file = next(runs.glob("*.json"))
    subst = {"RUN": str(run_file), "RUNS": str(runs), "TRACE": str(tmp_path / "trace")}
    res = runner.invoke(app, [subst.get(a, a) for a in argv] + (["--out", str(tmp_path)] if argv[0] in ("bench", "train") else []))
    assert_one_line(res, names)


def test_bench_without_cuda_is_one_line() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    res = runner.invoke(app, ["bench", "topk", "--sizes", "1K", "--device", "cuda"])
    assert_one_line(res, "--device cuda", "no CUDA device")


def test_bench_exits_1_when_a_case_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an allocation that fails: the case fails, the sweep goes on (sizes past 2**31 elements are refused up front,
    # so the failure is made where the tensor would be allocated)
    import gcbench.measure.bench as bench_mod

    res = runner.invoke(app, ["bench", "topk", "qsgd", "--sizes", "1K", "--out", str(tmp_path), "--rounds", "1", "--no-isolate"])
    assert res.exit_code == 0, res.output  # the control: both succeed
    real = bench_mod.bench_case

    def failing(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("numel") == 2_000_000:
            raise MemoryError("cannot allocate 8,000,000 bytes")
        return real(*args, **kwargs)

    monkeypatch.setattr(bench_mod, "bench_case", failing)
    res = runner.invoke(app, ["bench", "topk", "topk:density=0.5", "--sizes", "1K,2M", "--out", str(tmp_path),
                              "--rounds", "1", "--no-isolate"])
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    lines = _error_lines(res)
    assert lines[-1].endswith("2 of 4 case(s) failed")
    assert sum(ln.startswith("error: ") and "2,000,000" in ln for ln in lines) == 2
    # a second run in the same second gets a "-2" name, hence the pattern
    data = json.loads(max(tmp_path.glob("*-bench*.json"), key=os.path.getmtime).read_text())
    assert sum(bool(c.get("error")) for c in data["cases"]) == 2  # the failures are recorded too


if sys.platform != "linux":  # pragma: no cover
    pytestmark = pytest.mark.skip("uses /proc and /dev/full")


def test_emoji_codes_in_user_text_are_printed_literally(tmp_path: Path) -> None:
    # rich turns ':b:' into an emoji unless the consoles are made with emoji=False; escape() does not stop it
    suite = tmp_path / "e.toml"
    suite.write_text('name = "e"\n[[sources]]\nkind = "live"\nmodel = "a:b:c"\n[[compressors]]\nname = "none"\n', encoding="utf-8")
    line = assert_one_line(runner.invoke(app, ["validate", str(suite)]), "'a:b:c'")
    assert "🅱" not in line


def test_bench_gate_that_compares_nothing_fails(tmp_path: Path) -> None:
    base_dir, new_dir = tmp_path / "base", tmp_path / "new"
    res = runner.invoke(app, ["bench", "topk", "--sizes", "1K", "--out", str(base_dir), "--rounds", "1", "--no-isolate"])
    assert res.exit_code == 0, res.output
    base = next(base_dir.glob("*.json"))
    # the same case is compared: the gate can pass (at a generous threshold, timings are noisy)
    res = runner.invoke(app, ["bench", "topk", "--sizes", "1K", "--out", str(new_dir), "--rounds", "1", "--no-isolate",
                              "--baseline", str(base), "--threshold", "1000", "--fail-on-regression"])
    assert res.exit_code == 0, res.output
    # another size: nothing matches the baseline, so the gate must not pass vacuously
    res = runner.invoke(app, ["bench", "topk", "--sizes", "2K", "--out", str(new_dir), "--rounds", "1", "--no-isolate",
                              "--baseline", str(base), "--fail-on-regression"])
    assert_one_line(res, "regression gate", "no case of this bench matches")
    res = runner.invoke(app, ["bench", "topk", "--sizes", "1K", "--out", str(new_dir), "--fail-on-regression"])
    assert_one_line(res, "--fail-on-regression needs --baseline")


@pytest.mark.parametrize(("args", "needle"), [(["--processes", "0"], "--processes must be in [1, 20], got 0"),
                                               (["--processes", "21"], "got 21"),
                                               (["--processes", "2", "--no-isolate"], "leave out --no-isolate")])
def test_bench_processes_out_of_range_or_in_process_is_one_line(args: list[str], needle: str) -> None:
    assert_one_line(runner.invoke(app, ["bench", "topk", "--sizes", "1K", *args]), needle)


def test_bench_model_with_sizes_or_an_unknown_model_is_one_line() -> None:
    res = runner.invoke(app, ["bench", "topk", "--model", "mlp", "--sizes", "1K"])
    assert_one_line(res, "--model", "--sizes")
    res = runner.invoke(app, ["bench", "topk", "--model", "resnt50"])
    assert res.exit_code == 2 and "Traceback" not in res.output  # an unknown name: exit 2, as an unknown -c
    assert res.stderr.strip().startswith("error: unknown model 'resnt50'; did you mean") and len(res.stderr.splitlines()) == 1


# ----------------------------------------------------------------------------- issue 34: suites and inputs


def _tiny_with(folder: Path, extra: str, metrics: str = "") -> Path:
    """The tiny suite with ``extra`` top-level keys (and ``metrics`` keys) added."""
    text = TINY.format(label="topk").replace('seed = 3\n', f"seed = 3\n{extra}\n").replace("[metrics]\n", f"[metrics]\n{metrics}\n")
    path = folder / "x.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize(("extra", "metrics", "needle"), [
    ("deep = " + "[" * 5000 + "]" * 5000, "", "not valid TOML: arrays or tables nested too deeply"),  # RecursionError
    ('granularity = "bucket"\nbucket_mb = 1e308', "", "bucket_mb: must be in (0, 65536], got 1e+308"),  # OverflowError
    ("", "threads = 100000", "metrics.threads: must be in [1, 1024], got 100000"),  # bad_alloc / MemoryError
], ids=["deep", "bucket_mb", "threads"])
def test_suite_values_that_raised_are_one_line(command: str, extra: str, metrics: str, needle: str, tmp_path: Path) -> None:
    path = _tiny_with(tmp_path, extra, metrics)
    argv = [command, str(path)] + (["--out", str(tmp_path / "o"), "-q", "--no-timing"] if command == "run" else [])
    assert_one_line(runner.invoke(app, argv), needle)
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_a_live_lr_past_its_range_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "lr.toml"
    path.write_text('name = "lr"\n[[sources]]\nkind = "live"\nmodel = "mlp"\nlr = 1e300\nsteps = 2\nworkers = 2\n'
                    '[[compressors]]\nname = "topk"\n')
    for command in ("validate", "run"):
        assert_one_line(runner.invoke(app, [command, str(path), "--out", str(tmp_path)][: 2 if command == "validate" else 4]),
                        "sources[0].lr: must be in [0, 1000], got 1e+300")


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_device_or_fifo_suite_is_one_line(command: str, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    for path, kind in (("/dev/zero", "character device"), ("/dev/urandom", "character device"), (str(fifo), "FIFO")):
        res = runner.invoke(app, [command, path])
        assert_one_line(res, f"{path}: not a regular file: a suite file must be a regular file, not a {kind}")


def test_a_claims_file_that_is_a_device_is_one_line(runs: Path) -> None:
    res = runner.invoke(app, ["report", "--runs-dir", str(runs), "--papers", "/dev/zero"])
    assert_one_line(res, "/dev/zero: not a regular file: a claims file must be a regular file, not a character device")


def test_compare_shape_of_too_many_dimensions_is_one_line(tmp_path: Path) -> None:
    res = runner.invoke(app, ["compare", "topk", "qsgd", "--shape", "x".join(["1"] * 70), "-q", "--out", str(tmp_path)])
    assert_one_line(res, "a tensor may have at most 32 dimensions, got 70")


@pytest.mark.parametrize("sizes", ["1e300", "1K,3G"])
def test_bench_sizes_past_2_31_are_one_line(sizes: str, tmp_path: Path) -> None:
    res = runner.invoke(app, ["bench", "-c", "topk", "--sizes", sizes, "--out", str(tmp_path), "-q"])
    assert_one_line(res, "--sizes: size", "must be 1 to 2,147,483,648 (2**31) elements")


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_suite_too_big_for_the_machine_is_one_line_before_running(command: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from gcbench.measure import footprint

    # a pretend 0.25 GiB machine and a 64 MiB tensor (working set ~0.4 GiB): small enough to run if the check broke
    monkeypatch.setattr(footprint, "machine_memory", lambda: (2**28, 2**28))
    path = tmp_path / "big.toml"
    path.write_text('name = "big"\n[[sources]]\nshapes = [[16777216]]\n[[compressors]]\nname = "topk"\n')
    argv = [command, str(path)] + (["--out", str(tmp_path / "o"), "-q"] if command == "run" else [])
    assert_one_line(runner.invoke(app, argv), "sources[0]", "more than this machine's 0.2 GiB", "--force")
    assert not (tmp_path / "o").exists()
    if command == "run":  # --force: the same line as a warning, and the run goes on
        res = runner.invoke(app, [*argv, "--force", "--no-timing"])
        assert res.exit_code == 0, res.output
        assert res.stderr.startswith("warning: ") and "more than this machine's 0.2 GiB" in res.stderr
        assert list((tmp_path / "o").glob("*.json"))


def test_a_closed_loop_needs_a_live_source_and_a_known_loop(tmp_path: Path) -> None:
    """``--loop`` (run, compare): an unknown loop or a closed loop on synthetic gradients is one line, nothing written."""
    for argv, words in ((["run", "--loop", "half"], "unknown loop 'half'"),
                        (["run", "--loop", "closed"], "loop = 'closed' needs a live source"),
                        (["compare", "topk", "dgc", "--loop", "closed"], "loop = 'closed' needs a live source")):
        res = runner.invoke(app, [*argv, "--out", str(tmp_path)])
        assert res.exit_code != 0 and "Traceback" not in res.output, argv
        lines = _error_lines(res)
        assert len(lines) == 1 and words in lines[0], (argv, lines)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("argv", "line"), [
    (["compare", "topk", "qsgd", "--trace", "NOWHERE"], "error: <compare>: sources[0].path: NOWHERE: trace folder does not exist"),
    (["run", "quick", "--trace", "NOWHERE"], "sources[0].path: NOWHERE: trace folder does not exist"),
    (["compare", "lgc", "topk", "--workers", "1", "--shape", "8x8"],
     "error: <compare>: compressors[0] (lgc) needs at least 2 workers; sources[0] has 1"),
])
def test_run_and_compare_refuse_what_validate_finds_before_any_file_is_written(argv: list[str], line: str,
                                                                               tmp_path: Path) -> None:
    """`compare topk qsgd --trace /nonexistent` wrote a results file of failed cases and a table of dashes saying the
    file was "recorded before the stream view"; run and compare now check sources as `gcbench validate` does."""
    nowhere = str(tmp_path / "nowhere")
    res = runner.invoke(app, [nowhere if a == "NOWHERE" else a for a in argv] + ["--out", str(tmp_path / "runs")])
    assert res.exit_code == 1 and not (tmp_path / "runs").exists()
    assert line.replace("NOWHERE", nowhere) in res.stderr and len(res.stderr.strip().splitlines()) == 1
