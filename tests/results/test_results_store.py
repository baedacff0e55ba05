"""Results files that are never lost, never shared and never mistaken (issue 13, items 1, 2, 5, 7, 9).

* a results file is created exclusively: concurrent runs into one folder leave one file each;
* a suite's ``name`` only names the file, inside ``--out``;
* ``report --fail-on-regression`` fails on unfinished runs, missing and failed cases;
* ``load_run`` rejects files of a wrong structure with one line, and every reader copes with what it accepts;
* SIGINT and SIGTERM leave status ``interrupted``, the completed cases and no temporary files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.core.errors import GcbenchError, ResultsError
from gcbench.results import store as results
from gcbench.results.store import RunWriter, check_structure, create_run_file, load_run, safe_slug

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
runner = CliRunner()


def _suite(name: str = "tiny") -> dict[str, Any]:
    return {"name": name, "seed": 0}


# ----------------------------------------------------------------------------- 1. exclusive creation


def test_concurrent_writers_in_the_same_second_get_their_own_files(tmp_path: Path) -> None:
    """Eight writers started together (same second, same folder, same suite) leave eight complete files."""
    n = 8
    barrier = threading.Barrier(n)
    paths: list[Path] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        w = RunWriter(tmp_path, _suite(), "abcdef123456", None, "cpu")
        barrier.wait()
        w.add_case({"label": f"case-{i}", "status": "ok"})
        w.add_case({"label": f"case-{i}-b", "status": "ok"})
        w.finish("complete")
        with lock:
            paths.append(w.path)  # type: ignore[arg-type]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == n and len(set(paths)) == n
    labels = set()
    for f in files:
        data = json.loads(f.read_text())
        assert data["status"] == "complete" and data["run_id"] == f.stem
        assert len(data["cases"]) == 2
        assert data["cases"][0]["label"] + "-b" == data["cases"][1]["label"]  # one run's cases, not a mix
        labels.add(data["cases"][0]["label"])
    assert len(labels) == n
    assert not list(tmp_path.glob(".*tmp"))


def test_create_run_file_never_replaces_an_existing_file(tmp_path: Path) -> None:
    stem = "20260101T000000Z-x"
    (tmp_path / f"{stem}.json").write_text("theirs")
    data: dict[str, Any] = {"a": 1}
    p = create_run_file(tmp_path, stem, data)
    assert p.name == f"{stem}-2.json" and data["run_id"] == f"{stem}-2"
    assert (tmp_path / f"{stem}.json").read_text() == "theirs"
    assert json.loads(p.read_text()) == {"a": 1, "run_id": f"{stem}-2"}


def test_create_run_file_is_exclusive_even_when_the_existence_check_races(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exists() pre-check is only an optimisation: a name taken after it is still not reused."""
    stem = "20260101T000000Z-race"
    real_exists = Path.exists

    def exists_then_taken(self: Path) -> bool:
        if self.name == f"{stem}.json" and not real_exists(self):
            self.write_text("someone else")  # another run takes the name right after the check
            return False
        return real_exists(self)

    monkeypatch.setattr(Path, "exists", exists_then_taken)
    p = create_run_file(tmp_path, stem, {"x": 1})
    assert p.name == f"{stem}-2.json"
    assert (tmp_path / f"{stem}.json").read_text() == "someone else"


def test_two_processes_started_together_leave_two_files(tmp_path: Path) -> None:
    """Two real `gcbench run` processes of one suite into one folder: two complete results files."""
    suite = tmp_path / "s.toml"
    suite.write_text('name = "same"\nseed = 0\n[[sources]]\nkind = "synthetic"\nshapes = [[64]]\nworkers = 1\nsteps = 1\n'
                     '[metrics]\ntiming = false\n[[compressors]]\nname = "none"\n[[compressors]]\nname = "fp16"\n')
    out = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # both processes wait for the same go file, so they create their files in the same second
    go = tmp_path / "go"
    code = ("import sys, time, pathlib\n"
            f"go = pathlib.Path({str(go)!r})\n"
            "from gcbench.cli import main\n"
            "while not go.exists(): time.sleep(0.005)\n"
            f"sys.argv = ['gcbench', 'run', {str(suite)!r}, '--out', {str(out)!r}, '--quiet', '--no-timing']\n"
            "main()\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    time.sleep(0.5)
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    files = sorted(out.glob("*.json"))
    assert len(files) == 2
    for f in files:
        data = load_run(f)
        assert data.status == "complete" and [c.label for c in data.cases] == ["none", "fp16"]


# ----------------------------------------------------------------------------- 2. safe names


@pytest.mark.parametrize("name", ["../../../escaped", "/tmp/abs/olute", "..", ".hidden", "a/b\\c:d e", "x" * 500, "", "//"])
def test_suite_name_cannot_leave_the_out_folder(tmp_path: Path, name: str) -> None:
    out = tmp_path / "a" / "b" / "out"
    w = RunWriter(out, _suite(name), "abcdef", None, "cpu")
    w.add_case({"label": "c", "status": "ok"})
    w.finish("complete")
    assert w.path is not None and w.path.parent == out
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [w.path]
    assert not w.path.name.startswith(".") and len(w.path.name) <= 16 + 1 + results.SLUG_MAX + 7 + 5


def test_safe_slug() -> None:
    assert safe_slug("../../../escaped") == "escaped"
    assert safe_slug("/etc/passwd") == "etc-passwd"
    assert safe_slug("cnn v2.1_x") == "cnn-v2.1_x"
    assert safe_slug("...") == "run" and safe_slug("") == "run"
    assert len(safe_slug("y" * 1000)) == results.SLUG_MAX


def test_cli_run_with_an_escaping_suite_name_writes_inside_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep" / "er").mkdir(parents=True)
    suite = tmp_path / "deep" / "er" / "s.toml"
    suite.write_text('name = "../../../escaped"\nseed = 0\n[[sources]]\nkind = "synthetic"\nshapes = [[16]]\nworkers = 1\n'
                     'steps = 1\n[metrics]\ntiming = false\n[[compressors]]\nname = "none"\n')
    out = tmp_path / "deep" / "er" / "out"
    r = runner.invoke(app, ["run", str(suite), "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    files = [p for p in tmp_path.rglob("*.json")]
    assert len(files) == 1 and files[0].parent == out and "escaped" in files[0].name


# ----------------------------------------------------------------------------- 9. signals


def test_a_signal_during_an_atomic_write_waits_for_the_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT landing inside atomic_write_json: the new content is in place, no temp file, then KeyboardInterrupt."""
    real_text = results.json_text

    def text_then_signal(data: Any) -> str:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler would run here, half-way through the write
        return real_text(data)

    target = tmp_path / "r.json"
    results.atomic_write_json(target, {"v": 1})
    monkeypatch.setattr(results, "json_text", text_then_signal)
    with pytest.raises(KeyboardInterrupt):
        results.atomic_write_json(target, {"v": 2})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"v": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is restored


def test_a_run_interrupted_before_its_first_case_leaves_no_file(tmp_path: Path) -> None:
    w = RunWriter(tmp_path, _suite(), "abcdef", None, "cpu")
    w.finish("interrupted")
    assert w.path is None and list(tmp_path.iterdir()) == []


SLOW_SUITE = ('name = "sig"\nseed = 0\n[[sources]]\nkind = "synthetic"\nshapes = [[64, 64]]\nworkers = 2\nsteps = 2\n'
              '[metrics]\ntiming = false\nrepeats = 2\n' + "".join(f'[[compressors]]\nname = "qsgd"\nlabel = "q{i}"\n'
                                                                  for i in range(100)))


def _start_run(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    suite = tmp_path / "sig.toml"
    suite.write_text(SLOW_SUITE)
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "gcbench", "run", str(suite), "--out", str(out), "--quiet"],
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc, out


def _wait_for_first_case(proc: subprocess.Popen[bytes], out: Path, timeout: float = 60.0) -> Path:
    """The results file, polled for: it appears when the first case completes."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        files = list(out.glob("*.json"))
        if files:
            return files[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("no results file appeared")


def _finish(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    _, stderr = proc.communicate(timeout=60)
    return proc.returncode, stderr.decode()


def _check_interrupted(out: Path, path: Path, stderr: str) -> None:
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    data = load_run(path)
    assert data.status == "interrupted", data.status
    assert 1 <= len(data.cases) < 100 and all(c.status == "ok" for c in data.cases)
    assert data.finished_utc is not None
    assert [p.name for p in out.iterdir()] == [path.name]  # no stray *.tmp


@pytest.mark.parametrize(("sig", "count", "gap", "code"), [
    (signal.SIGTERM, 1, 0.0, 143),
    (signal.SIGINT, 2, 0.015, 130),  # two Ctrl-C within 20 ms
    (signal.SIGINT, 5, 0.0, 130),  # five in a row
    (signal.SIGTERM, 3, 0.002, 143),
], ids=["sigterm", "sigint-x2-15ms", "sigint-x5", "sigterm-x3"])
def test_stop_signals_leave_an_interrupted_file_with_the_completed_cases(tmp_path: Path, sig: int, count: int, gap: float,
                                                                         code: int) -> None:
    proc, out = _start_run(tmp_path)
    path = _wait_for_first_case(proc, out)
    for _ in range(count):
        proc.send_signal(sig)
        time.sleep(gap)
    rc, stderr = _finish(proc)
    assert rc == code, stderr
    _check_interrupted(out, path, stderr)


def _handles_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (gcbench.core.signals.install has run)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to see when the handlers are installed")
def test_sigint_during_start_up_imports_ends_without_a_traceback(tmp_path: Path) -> None:
    proc, out = _start_run(tmp_path)
    end = time.monotonic() + 30
    while not _handles_sigterm(proc.pid) and time.monotonic() < end:  # the handlers are in; torch is being imported
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    rc, stderr = _finish(proc)
    assert rc == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr, stderr
    assert not out.exists() or list(out.iterdir()) == []  # no case completed: no file


# ----------------------------------------------------------------------------- 5. the regression gate


def _clean_run(run_id: str, status: str = "complete", drop: int = 0) -> dict[str, Any]:
    """The golden base run without its failing case (so it passes against itself), ``drop`` cases fewer."""
    data = json.loads((GOLDEN / "run_base.json").read_text(encoding="utf-8"))
    data["cases"] = [c for c in data["cases"] if c.get("status") == "ok"]
    data["cases"] = data["cases"][: len(data["cases"]) - drop]
    data["run_id"], data["status"] = run_id, status
    return data


def _gate(tmp_path: Path, files: dict[str, dict[str, Any]], *args: str) -> Any:
    d = tmp_path / "runs"
    d.mkdir(exist_ok=True)
    for name, data in files.items():
        (d / f"{name}.json").write_text(json.dumps(data), encoding="utf-8")
    return runner.invoke(app, ["report", "--runs-dir", str(d), "--baseline", "20260101T000000Z-base", *args, "--fail-on-regression"])


def test_gate_passes_an_identical_finished_run(tmp_path: Path) -> None:
    r = _gate(tmp_path, {"20260101T000000Z-base": _clean_run("base"), "20260102T000000Z-new": _clean_run("new")})
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(("status", "drop", "message"), [
    ("running", 0, "did not finish (status 'running')"),
    ("interrupted", 2, "did not finish (status 'interrupted')"),
    ("complete", 2, "2 case(s) of the baseline missing"),
    ("failed", 0, "did not finish"),
])
def test_gate_fails_unfinished_runs_and_missing_cases(tmp_path: Path, status: str, drop: int, message: str) -> None:
    r = _gate(tmp_path, {"20260101T000000Z-base": _clean_run("base"), "20260102T000000Z-new": _clean_run("new", status, drop)},
              "20260102T000000Z-new")
    assert r.exit_code == 1, r.output
    assert message in r.output and "Traceback" not in r.output
    assert "regression gate" in r.output


def test_gate_fails_an_empty_running_run(tmp_path: Path) -> None:
    new = _clean_run("new", "running", drop=10**6)
    assert new["cases"] == []
    r = _gate(tmp_path, {"20260101T000000Z-base": _clean_run("base"), "20260102T000000Z-new": new}, "20260102T000000Z-new")
    assert r.exit_code == 1 and "missing" in r.output and "did not finish" in r.output, r.output


def test_gate_fails_a_case_that_fails_in_both_runs(tmp_path: Path) -> None:
    base = json.loads((GOLDEN / "run_base.json").read_text(encoding="utf-8"))
    r = _gate(tmp_path, {"20260101T000000Z-base": {**base, "status": "complete"},
                         "20260102T000000Z-new": {**base, "run_id": "new", "status": "complete-with-errors"}})
    assert r.exit_code == 1 and "failed in new" in r.output, r.output


def _null_metrics(obj: Any) -> Any:
    """``obj`` with every number replaced by None (a baseline that measured nothing)."""
    if isinstance(obj, dict):
        return {k: _null_metrics(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_null_metrics(v) for v in obj]
    return None if isinstance(obj, int | float) and not isinstance(obj, bool) else obj


def test_gate_fails_against_a_baseline_with_no_cases(tmp_path: Path) -> None:
    """Every case "new" is no evidence: the gate fails and says the baseline has no cases (it used to pass, "11 new")."""
    base = {**_clean_run("base"), "cases": []}
    r = _gate(tmp_path, {"20260101T000000Z-base": base, "20260102T000000Z-new": _clean_run("new")}, "20260102T000000Z-new")
    assert r.exit_code == 1, r.output
    assert "regression gate: the baseline base has no cases" in r.output and "Traceback" not in r.output


def test_gate_fails_when_no_metric_is_comparable(tmp_path: Path) -> None:
    """A baseline whose metrics are all null makes every row "not comparable": the gate fails naming that."""
    base = _clean_run("base")
    metrics = ("size", "fidelity", "aggregate", "traffic", "ef_drift", "timing", "layers")
    base["cases"] = [{k: (_null_metrics(v) if k in metrics else v) for k, v in c.items()} for c in base["cases"]]
    r = _gate(tmp_path, {"20260101T000000Z-base": base, "20260102T000000Z-new": _clean_run("new")}, "20260102T000000Z-new")
    assert r.exit_code == 1, r.output
    assert "regression gate: no metric of new could be compared with the baseline base" in r.output
    assert "not comparable" in r.output and "Traceback" not in r.output


def test_gate_latest_skips_unfinished_runs(tmp_path: Path) -> None:
    """The newest file is an interrupted run missing cases: `latest` for a gate is the newest finished run."""
    files = {"20260101T000000Z-base": _clean_run("base"), "20260102T000000Z-done": _clean_run("done"),
             "20260103T000000Z-aborted": _clean_run("aborted", "interrupted", drop=3)}
    r = _gate(tmp_path, files)
    assert r.exit_code == 0, r.output
    assert "done" in r.output and "aborted" not in r.output
    # without the gate, latest is still the newest file, with a note that it did not finish
    r = runner.invoke(app, ["report", "--runs-dir", str(tmp_path / "runs"), "--baseline", "20260101T000000Z-base"])
    assert r.exit_code == 0 and "aborted did not finish" in r.output, r.output


# ----------------------------------------------------------------------------- 7. files of a wrong structure


def _golden(name: str) -> dict[str, Any]:
    return json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))


def _deep(n: int) -> str:
    return '{"schema_version": 1, "cases": [], "suite": ' + "[" * n + "]" * n + "}"


# (id, file text, the field the one-line error must name)
MALFORMED: list[tuple[str, str, str]] = [
    ("cases-not-a-list", json.dumps({**_golden("run_base"), "cases": {"a": 1}}), "cases: expected a list"),
    ("case-not-an-object", json.dumps({**_golden("run_base"), "cases": [1, 2]}), "cases[0]: expected an object"),
    ("case-without-label", json.dumps({**_golden("run_base"), "cases": [{"status": "ok"}]}), "cases[0]: missing field 'label'"),
    ("size-a-string", json.dumps({**_golden("run_base"), "cases": [{**_golden("run_base")["cases"][0], "size": "big"}]}),
     "cases[0].size: expected an object"),
    ("ratio-a-string", json.dumps({**_golden("run_base"), "cases": [
        {**_golden("run_base")["cases"][0], "size": {"ratio": "267x"}}]}), "cases[0].size.ratio: expected a number"),
    ("samples-strings", json.dumps({**_golden("run_base"), "cases": [{**_golden("run_base")["cases"][1], "timing": {
        "compress": {"samples_s": ["fast"]}}}]}), "cases[0].timing.compress.samples_s[0]"),
    ("schema-version-string", json.dumps({**_golden("run_base"), "schema_version": "1"}), "schema_version: expected a positive integer"),
    ("unknown-kind", json.dumps({**_golden("run_base"), "kind": "movie"}), "kind: expected one of"),
    ("bench-numel-string", json.dumps({**_golden("bench_small"), "cases": [{**_golden("bench_small")["cases"][0], "numel": "1K"}]}),
     "cases[0].numel: expected an integer"),
    ("bench-x-copy-list", json.dumps({**_golden("bench_small"), "cases": [
        {**_golden("bench_small")["cases"][0], "compress_x_copy": [1]}]}), "cases[0].compress_x_copy"),
    ("train-curve-strings", json.dumps({**_golden("train_digits"), "cases": [
        {**_golden("train_digits")["cases"][1], "training": {"curve": ["epoch 1"]}}]}), "cases[0].training.curve[0]"),
    ("deeply-nested", _deep(100_000), "nested too deeply"),
    ("nested-deeper-than-readers-go", _deep(200), "nested deeper than"),
]


def _reader_args(reader: str, path: Path, tmp_path: Path) -> list[str]:
    base = GOLDEN / ("bench_small.json" if "bench" in path.name else "run_base.json")
    return {
        "report": ["report", str(path)],
        "report-dir": ["report", "--runs-dir", str(path.parent), "latest"],
        "md": ["report", "--md", str(path)],
        "html": ["report", "--html", "-o", str(tmp_path / "r.html"), str(path)],
        "baseline-new": ["report", "--baseline", str(base), str(path)],
        "baseline-base": ["report", "--baseline", str(path), str(base), "--fail-on-regression"],
        "simulate": ["simulate", str(path)],
        "bench-baseline": ["bench", "none", "--sizes", "1K", "--rounds", "1", "--no-isolate", "--baseline", str(path),
                           "--out", str(tmp_path / "out")],
    }[reader]


READERS = ["report", "report-dir", "md", "html", "baseline-new", "baseline-base", "simulate", "bench-baseline"]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize(("text", "field"), [(t, f) for _, t, f in MALFORMED], ids=[i for i, _, _ in MALFORMED])
def test_every_reader_rejects_a_malformed_file_with_one_line(tmp_path: Path, reader: str, text: str, field: str) -> None:
    d = tmp_path / "runs"
    d.mkdir()
    path = d / ("20260101T000000Z-bad-bench.json" if "bench" in text[:400] else "20260101T000000Z-bad.json")
    path.write_text(text, encoding="utf-8")
    r = runner.invoke(app, _reader_args(reader, path, tmp_path))
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    lines = [line for line in r.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, r.output
    assert str(path) in errors[0].replace("\n", "") or path.name in errors[0], errors
    assert field in r.output.replace("\n", ""), r.output
    assert not (tmp_path / "out").exists()  # bench --baseline refused before timing anything


def test_report_of_a_folder_skips_a_corrupt_file_with_a_warning(tmp_path: Path) -> None:
    d = tmp_path / "runs"
    d.mkdir()
    shutil.copy(GOLDEN / "run_base.json", d / "20260105T100000Z-golden-000001.json")
    (d / "20260106T100000Z-broken.json").write_text(json.dumps({**_golden("run_base"), "cases": [1]}))
    (d / "20260107T100000Z-truncated.json").write_text('{"schema_version": 1, "cases": [')
    r = runner.invoke(app, ["report", "--runs-dir", str(d)])
    assert r.exit_code == 0, r.output
    out = r.output.replace("\n", "")
    assert "warning: skipped" in out and "20260106T100000Z-broken.json" in out and "20260107T100000Z-truncated.json" in out
    assert "golden-base" in out  # the readable run is rendered
    assert "Traceback" not in out


def test_report_of_a_folder_of_only_corrupt_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "20260106T100000Z-broken.json").write_text("[]")
    r = runner.invoke(app, ["report", "--runs-dir", str(tmp_path)])
    assert r.exit_code == 1 and "no readable results files" in r.output, r.output


def test_files_written_by_this_gcbench_and_older_ones_still_load() -> None:
    for name in ("run_base", "run_new", "run_other_machine", "train_digits", "bench_small"):
        load_run(GOLDEN / f"{name}.json")
    for path in (ROOT / "baselines" / "reference").glob("*.json"):
        load_run(path)
    old = _golden("run_base")
    for key in ("kind", "status", "finished_utc", "metrics", "suite_path"):  # fields older files may lack
        old.pop(key, None)
    assert check_structure(old) is None


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path] if path else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _leaves(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:2]):
            out += _leaves(v, (*path, i))
    return out


def _read_everything(path: Path, data: dict[str, Any], partner: dict[str, Any], html: bool) -> None:
    """Every library reader of a results file, rendered to text."""
    import io

    from rich.console import Console

    from gcbench.predict import simulate as netmodel
    from gcbench.report.html_page import render_html
    from gcbench.report.load import LoadedRun
    from gcbench.report.markdown import markdown_comparison, markdown_report
    from gcbench.report.terminal import comparison_table, runs_table, summary_tables
    from gcbench.results.baselines import PAPERS_FILE, load_claims, match_claims
    from gcbench.results.gate import gate_failures
    from gcbench.results.run_diff import compare_runs

    run = LoadedRun(path, data)
    con = Console(file=io.StringIO(), width=200)
    tables = [runs_table([run]), *summary_tables(run)]  # building a table formats every cell
    if html:  # rendering takes long: only with the HTML pass
        for t in tables:
            con.print(t)
    claims = match_claims(load_claims(PAPERS_FILE), [data])
    markdown_report([run], claims)
    for a, b in ((partner, data), (data, partner)):
        cmp = compare_runs(a, b)
        comparison_table(cmp, True)  # builds every cell; rendering it adds only time
        markdown_comparison(cmp, True)
        gate_failures(a, b, cmp)
    try:
        cases = netmodel.cases_from_results(data, None)
    except GcbenchError:
        pass  # "nothing to simulate": a clear user error, not a crash
    else:
        netmodel.simulate(cases, [8], [10.0], 5e-6, "auto")
        for c in cases:
            netmodel.break_even_bandwidth(c, 8, 5e-6, "auto")
    if html:
        render_html([run], claims, None, detailed=[run])


WRONG_VALUES: list[Any] = ["x", None, 1.5, -1, True, [], {}, [1], {"a": 1}, [None], KeyError]


@pytest.mark.parametrize("name", ["run_base", "train_digits", "bench_small"])
def test_a_file_that_loads_does_not_crash_any_reader(tmp_path: Path, name: str) -> None:
    """Mutate one field of a real file at a time (wrong type, null, removed): load_run refuses it or every reader copes."""
    import random

    base = _golden(name)
    paths = _leaves(base)
    rng = random.Random(13)
    path = tmp_path / "m.json"
    accepted = 0
    for _ in range(60):
        data = json.loads(json.dumps(base))
        where = rng.choice(paths)
        value = rng.choice(WRONG_VALUES)
        parent = data
        for k in where[:-1]:
            parent = parent[k]
        if value is KeyError:
            if isinstance(parent, list):
                continue
            del parent[where[-1]]
        else:
            parent[where[-1]] = value
        path.write_text(json.dumps(data), encoding="utf-8")
        try:
            loaded = load_run(path)
        except ResultsError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc)
            continue
        accepted += 1
        try:
            _read_everything(path, loaded, base, html=accepted == 1)
        except Exception as exc:  # pragma: no cover - the failure message is the point
            raise AssertionError(f"{where} = {value!r} passed load_run but crashed a reader: {exc!r}") from exc
    assert accepted > 5  # the mutations also exercise the readers, not only the check


@pytest.mark.parametrize(("change", "message"), [
    ({"schema_version": 0}, "schema_version: expected a positive integer"),
    ({"schema_version": True}, "schema_version: expected a positive integer"),
    ({"environment": "x"}, "environment: expected an object"),
    ({"cases": [{"label": "a", "status": "ok", "steps": 10**12}]}, "cases[0].steps: expected an integer in [0, 1e+06]"),
    ({"cases": [{"label": "a", "status": "ok", "windows": [{"name": "w", "first": 3, "last": 1, "sent_by_worker": [1.0]}]}]},
     "cases[0].windows[0]: first step 3 after last step 1"),
    ({"cases": [{"label": "a", "status": "ok", "traffic": {"allgather": {"per_step_sent": [None]}}}]},
     "cases[0].traffic.allgather.per_step_sent[0]: expected a number"),
])
def test_load_run_names_the_first_bad_field(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**_golden("run_base"), **change}))
    with pytest.raises(ResultsError) as info:
        load_run(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("text", ["[1, 2]", "{", "", "null", '{"schema_version": 1}'])
def test_load_run_refuses_what_is_not_a_results_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(ResultsError, match="not a"):
        load_run(path)


def test_list_runs_puts_a_same_second_clash_after_its_partner(tmp_path: Path) -> None:
    from gcbench.results.store import list_runs

    names = ["20261124T010119Z-quick-abc123-2.json", "20261124T010119Z-quick-abc123.json", "20261124T010118Z-quick-abc123.json",
             "20261124T010119Z-quick-abc123-10.json", "20261124T010120Z-bench.json"]
    for n in names:
        (tmp_path / n).write_text("{}", encoding="utf-8")
    assert [p.name for p in list_runs(tmp_path)] == [
        "20261124T010118Z-quick-abc123.json", "20261124T010119Z-quick-abc123.json", "20261124T010119Z-quick-abc123-2.json",
        "20261124T010119Z-quick-abc123-10.json", "20261124T010120Z-bench.json"]


# ----------------------------------------------------------------------------- issue 34: files a user hands in, `latest`, SIGTERM


def test_an_over_long_integer_is_one_line_naming_the_file_and_field(tmp_path: Path) -> None:
    """JSON integers of more than 4,300 digits used to escape as int()'s ValueError (a traceback)."""
    text = json.dumps(_golden("run_base")).replace('"seed": 0', '"seed": ' + "9" * 5000, 1)
    assert "9" * 5000 in text
    path = tmp_path / "20260101T000000Z-big.json"
    path.write_text(text)
    with pytest.raises(ResultsError) as info:
        load_run(path)
    assert str(info.value).startswith(f"{path}: suite.seed: an integer of 5,000 digits"), info.value
    r = runner.invoke(app, ["report", str(path)])
    assert r.exit_code == 1 and "Traceback" not in r.output and "suite.seed: an integer of 5,000 digits" in r.output, r.output


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_or_a_device_in_the_runs_folder_is_skipped_and_refused_when_named(tmp_path: Path) -> None:
    """A FIFO used to hang every reader; a link to /dev/zero used to read until MemoryError."""
    d = tmp_path / "runs"
    d.mkdir()
    shutil.copy(GOLDEN / "run_base.json", d / "20260105T100000Z-golden.json")
    os.mkfifo(d / "20260106T000000Z-fifo.json")
    (d / "20260107T000000Z-zero.json").symlink_to("/dev/zero")
    r = runner.invoke(app, ["report", "--runs-dir", str(d), "--md"])
    assert r.exit_code == 0, r.output
    assert "warning: skipped" in r.output and "fifo.json: not a regular file" in r.output.replace("\n", "")
    assert "zero.json: not a regular file" in r.output.replace("\n", "")
    assert results.resolve_run("latest", d) == d / "20260105T100000Z-golden.json"
    r = runner.invoke(app, ["report", "--runs-dir", str(d), "--baseline", str(GOLDEN / "run_new.json")])  # `latest` scans too
    assert r.exit_code == 0 and "fifo.json: not a regular file" in r.output.replace("\n", ""), r.output
    for name in ("20260106T000000Z-fifo.json", "20260107T000000Z-zero.json"):
        r = runner.invoke(app, ["report", str(d / name)])
        assert r.exit_code == 1 and "Traceback" not in r.output, r.output
        assert f"error: {d / name}: not a regular file" in r.output.replace("\n", ""), r.output


def test_a_results_file_over_the_size_bound_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.json"
    shutil.copy(GOLDEN / "run_base.json", path)
    monkeypatch.setattr(results, "MAX_JSON_BYTES", 1000)
    with pytest.raises(ResultsError, match=r"r\.json: gcbench results file is .*; gcbench reads at most 1000 bytes"):
        load_run(path)


def test_latest_is_the_newest_finished_run_by_its_recorded_time(tmp_path: Path) -> None:
    """A copy of a 2020 run named ``saved-copy.json`` sorts after every ``2026…`` name; `latest` is still the 2026 run."""
    old = {**_clean_run("old"), "created_utc": "2020-01-01T00:00:00+00:00"}
    new = {**_clean_run("new"), "created_utc": "2026-01-02T00:00:00+00:00"}
    running = {**_clean_run("going", "running"), "created_utc": "2026-01-03T00:00:00+00:00"}
    files = {"20260101T000000Z-base": {**_clean_run("base"), "created_utc": "2026-01-01T00:00:00+00:00"},
             "20260102T000000Z-new": new, "saved-copy": old, "zz-going": running}
    r = _gate(tmp_path, files, "latest")
    d = tmp_path / "runs"
    assert results.resolve_run("latest", d, finished=True) == d / "20260102T000000Z-new.json"
    assert results.resolve_run("latest", d) == d / "zz-going.json"  # without `finished`, the newest of all
    assert r.exit_code == 0, r.output
    assert "new vs baseline base" in r.output and "old vs" not in r.output


def test_a_signal_in_importlibs_lock_callback_is_delivered_again_outside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # raised there, KeyboardInterrupt is printed as "Exception ignored in: <function _get_module_lock.<locals>.cb>" with
    # a traceback and lost (a full CI run saw it once, Ctrl-C during start-up imports): the handler sends it again
    from gcbench.core import signals

    code = compile("import sys\ndef cb():\n    return sys._getframe()\n", "<frozen importlib._bootstrap>", "exec")
    space: dict[str, Any] = {}
    exec(code, space)
    frame = space["cb"]()
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(signals.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    monkeypatch.setitem(signals._first, "signum", None)
    signals._on_stop_signal(signal.SIGINT, frame)  # no raise here
    deadline = time.monotonic() + 5
    while not sent and time.monotonic() < deadline:
        time.sleep(0.001)
    assert sent == [(os.getpid(), signal.SIGINT)]
    assert signals._first["signum"] is None  # not taken as the first stop: the re-delivered one will be
    with pytest.raises(KeyboardInterrupt, match="SIGINT"):  # anywhere else, it interrupts at once
        signals._on_stop_signal(signal.SIGINT, sys._getframe())


def test_a_stop_signal_inside_a_record_serialisation_is_an_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    """pydantic calls Python while it serialises; a SIGTERM landing there was a PydanticSerializationError."""
    from pydantic import field_serializer

    from gcbench.core import signals
    from gcbench.results.record import Model

    class Signalling(Model):
        x: int = 0

        @field_serializer("x")
        def _ser(self, v: int) -> int:
            signal.raise_signal(signal.SIGTERM)  # as if the signal arrived just now
            return v

    monkeypatch.setattr(signals, "_first", {"signum": None, "at": 0.0})
    with signals.handled(), pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        Signalling(x=1).to_json_dict()


def test_sigterm_right_after_the_final_write_leaves_a_complete_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner used to serialise the record again after its final write, outside the held-signals section.

    The hook raises SIGTERM at the first serialisation after the final write: the runner must not
    make one (it returns the content written), so the run returns and the file is complete.
    """
    import tomllib

    from gcbench.core import signals
    from gcbench.measure.runner import run_suite
    from gcbench.measure.suite import parse_suite
    from gcbench.results import record

    suite = parse_suite(tomllib.loads('name = "t"\nseed = 0\n[[sources]]\nkind = "synthetic"\nshapes = [[16]]\nworkers = 1\n'
                                      'steps = 1\n[metrics]\ntiming = false\n[[compressors]]\nname = "none"\n'))
    armed = {"on": False}
    real_write, real_dump = results.atomic_write_json, record.Model.model_dump

    def write(path: Path, data: Any) -> None:
        real_write(path, data)
        armed["on"] = data.get("status") != "running"

    def dump(self: Any, *args: Any, **kwargs: Any) -> Any:
        if armed["on"]:
            armed["on"] = False
            signal.raise_signal(signal.SIGTERM)
        return real_dump(self, *args, **kwargs)

    monkeypatch.setattr(results, "atomic_write_json", write)
    monkeypatch.setattr(record.Model, "model_dump", dump)
    monkeypatch.setattr(signals, "_first", {"signum": None, "at": 0.0})
    with signals.handled():
        outcome = run_suite(suite, tmp_path)
    assert outcome.path is not None and [c["label"] for c in outcome.records] == ["none"]
    data = json.loads(outcome.path.read_text())
    assert data["status"] == "complete" and len(data["cases"]) == 1


def test_atomic_write_replaces_a_links_target_and_keeps_the_link(tmp_path: Path) -> None:
    from gcbench.results.atomic import atomic_write

    target = tmp_path / "real.md"
    target.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    atomic_write(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.md", "real.md"]
