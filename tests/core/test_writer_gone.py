"""A killed ``gcbench train`` takes its workers with it, and its "running" file is shown as cut off.

Before: SIGKILL of the ``train`` parent left its spawned workers training as orphans (writing into
an orphaned temporary folder), and the results file said "running" forever.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gcbench.core import liveness
from gcbench.results.record import WRITER_GONE
from gcbench.results.store import RunWriter, load_run
from gcbench.train.workers import OWNER_FILE, WORKDIR_PREFIX, sweep_orphaned_workdirs

ROOT = Path(__file__).resolve().parents[2]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the process tree")


def _dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _running_file(tmp_path: Path) -> Path:
    writer = RunWriter(tmp_path / "runs", {"name": "t"}, "abc", None, "cpu", kind="train")
    writer.add_case({"label": "none", "compressor": "none", "params": {}, "status": "error", "error": "x"})
    assert writer.path is not None
    return writer.path


def _set_writer(path: Path, **writer: object) -> None:
    data = json.loads(path.read_text())
    data["writer"] = writer
    path.write_text(json.dumps(data))


def test_a_running_file_records_its_writer_and_is_running_while_it_lives(tmp_path: Path) -> None:
    path = _running_file(tmp_path)
    data = json.loads(path.read_text())
    assert data["status"] == "running" and data["writer"]["pid"] == os.getpid() and data["writer"]["host"] == platform.node()
    assert load_run(path).status == "running"


def test_a_running_file_whose_writer_is_gone_loads_as_interrupted(tmp_path: Path) -> None:
    path = _running_file(tmp_path)
    _set_writer(path, pid=_dead_pid(), host=platform.node(), process_start=None)
    before = path.read_bytes()
    rec = load_run(path)
    assert rec.status == WRITER_GONE and not rec.finished
    assert path.read_bytes() == before  # reading never rewrites the file


@linux_only
def test_a_reused_pid_is_not_mistaken_for_the_writer(tmp_path: Path) -> None:
    path = _running_file(tmp_path)
    me = liveness.identity()
    _set_writer(path, pid=me["pid"], host=me["host"], process_start=me["process_start"] - 3600)  # "this pid, an hour earlier"
    assert load_run(path).status == WRITER_GONE


def test_a_writer_on_another_host_or_an_old_file_stays_running(tmp_path: Path) -> None:
    path = _running_file(tmp_path)
    _set_writer(path, pid=_dead_pid(), host=platform.node() + "-elsewhere")
    assert load_run(path).status == "running"  # nothing can be known about another machine's processes
    data = json.loads(path.read_text())
    del data["writer"]
    path.write_text(json.dumps(data))
    assert load_run(path).status == "running"


def test_a_finished_file_keeps_its_status_when_its_writer_is_gone(tmp_path: Path) -> None:
    path = _running_file(tmp_path)
    data = json.loads(path.read_text())
    data["status"] = "complete"
    path.write_text(json.dumps(data))
    _set_writer(path, pid=_dead_pid(), host=platform.node())
    assert load_run(path).status == "complete"


def test_orphaned_work_folders_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    dead, live, foreign = (tmp_path / f"{WORKDIR_PREFIX}{n}" for n in ("dead", "live", "foreign"))
    for d, owner in ((dead, {"pid": _dead_pid(), "host": platform.node()}), (live, liveness.identity()),
                     (foreign, {"pid": _dead_pid(), "host": "elsewhere"})):
        d.mkdir()
        (d / OWNER_FILE).write_text(json.dumps(owner))
        (d / "case-0.json").write_text("{}")
    assert sweep_orphaned_workdirs(tmp_path) == [dead]
    assert not dead.exists() and live.exists() and foreign.exists()


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


@pytest.mark.slow  # ~10 s; -m slow
@linux_only
def test_sigkill_of_the_train_parent_ends_its_workers_and_its_file_reads_interrupted(tmp_path: Path) -> None:
    # the workers' temporary folder lands where this test can watch it; topk's rank 1 hangs at step 2 and rank 0 waits
    # for it with every timeout far away, so an orphaned worker would outlive this test by minutes, not finish by chance
    env = dict(os.environ, TMPDIR=str(tmp_path), GCBENCH_TRAIN_FAULT="hang:1@2/topk")
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "gcbench", "train", "-c", "none", "-c", "topk", "--task", "charlstm",
                             "--workers", "2", "--epochs", "1", "-q", "-o", str(runs), "--timeout", "600", "--collective-timeout", "600"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240  # start-up on a loaded machine; 'none' then finishes and the file appears
        workers: list[int] = []
        while time.monotonic() < deadline and proc.poll() is None:
            workers = _children(proc.pid)
            if len(workers) >= 2 and list(runs.glob("*.json")):
                break
            time.sleep(0.2)
        assert proc.poll() is None and len(workers) >= 2 and list(runs.glob("*.json")), "the run never got its workers going"
        workdirs = list(tmp_path.glob(f"{WORKDIR_PREFIX}*"))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        end = time.monotonic() + 20
        while time.monotonic() < end and any(_alive(w) for w in workers):
            time.sleep(0.1)
        survivors = [w for w in workers if _alive(w)]
    finally:
        for w in _children(proc.pid):
            os.kill(w, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
    for w in survivors:  # never leave them behind, even when the test fails
        os.kill(w, signal.SIGKILL)
    assert survivors == [], f"workers {survivors} outlived their SIGKILLed parent"
    snapshot = {p: p.stat().st_mtime_ns for d in workdirs for p in d.rglob("*")}
    time.sleep(2)
    assert {p: p.stat().st_mtime_ns for d in workdirs for p in d.rglob("*")} == snapshot  # nobody writes there any more
    (path,) = runs.glob("*.json")
    assert json.loads(path.read_text())["status"] == "running"  # what the killed writer left
    assert load_run(path).status == WRITER_GONE  # what a later command shows
    assert sweep_orphaned_workdirs(tmp_path) == workdirs  # and the next run clears the orphaned folder


_PARENT = """
import os, subprocess, sys, time
code = ("import os, time; from gcbench.core import liveness; liveness.die_with_parent(int(os.environ['GCBENCH_PARENT_PID']));"
        " print('armed', flush=True); time.sleep(600)")
child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "GCBENCH_PARENT_PID": str(os.getpid())},
                         stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "armed"
print(child.pid, flush=True)
time.sleep(600)
"""


@linux_only
def test_a_child_armed_to_die_with_its_parent_ends_when_the_parent_is_sigkilled() -> None:
    """What `gcbench bench --isolate`'s benchmark processes do (and train's workers, with their lifeline too)."""
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
    finally:
        parent.kill()
        parent.wait()
    end = time.monotonic() + 20
    while time.monotonic() < end and _alive(child):
        time.sleep(0.05)
    alive = _alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, "the child outlived its SIGKILLed parent"
