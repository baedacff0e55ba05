"""A malformed torch.distributed launch, or a rendezvous that fails, is one ``error:`` line and exit 1.

Before: ``WORLD_SIZE=abc`` and a missing ``MASTER_ADDR`` were ValueError tracebacks, ``RANK=2`` of
``WORLD_SIZE=2`` or ``RANK=-1`` waited on a rendezvous that cannot happen until the 300 s timeout,
and a taken or impossible ``MASTER_PORT``, an absent rank 0 or ``--timeout 0.001`` were
DistNetworkError/ValueError tracebacks.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gcbench.distributed.launch import LAUNCH_VARS, LaunchError, launch_env

ROOT = Path(__file__).resolve().parents[2]
# far below the 300 s default rendezvous timeout a hang would wait, far above a loaded machine's start-up
BOUND_S = 240


def _env(**launch: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and not k.startswith("TORCHELASTIC")}
    env.update(launch)
    return env


def _train(tmp_path: Path, extra: list[str], **launch: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gcbench", "train", "-c", "none", "--task", "charlstm", "--epochs", "1", "-q",
           "-o", str(tmp_path / "runs"), *extra]
    return subprocess.run(cmd, cwd=ROOT, env=_env(**launch), capture_output=True, text=True, timeout=BOUND_S)


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    return lines[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("launch", "expected"), [
    ({"RANK": "0", "WORLD_SIZE": "abc", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "WORLD_SIZE='abc' is not an integer"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR is not"),
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "RANK=2 is outside 0..1"),
    ({"RANK": "-1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "RANK=-1 is outside 0..1"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "99999"}, "MASTER_PORT=99999 is not a TCP port"),
    ({"RANK": "0"}, "RANK is set but WORLD_SIZE is not"),
])
def test_a_malformed_launch_is_one_error_line(tmp_path: Path, launch: dict[str, str], expected: str) -> None:
    with pytest.raises(LaunchError, match=expected):
        launch_env(launch)
    assert expected in _one_error_line(_train(tmp_path, [], **launch))


def test_launch_env_reads_a_good_launch_and_none_without_one() -> None:
    assert launch_env({}) is None
    env = launch_env({"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"})
    assert env is not None and (env.rank, env.world_size, env.master_addr, env.master_port) == (1, 4, "node0", 29500)


def test_a_taken_master_port_is_one_error_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _one_error_line(_train(tmp_path, [], RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
    assert "rendezvous failed" in line and f"MASTER_PORT {port} is already in use" in line


def test_an_absent_rank_0_is_one_error_line_after_the_timeout(tmp_path: Path) -> None:
    line = _one_error_line(_train(tmp_path, ["--timeout", "1"], RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                  MASTER_PORT=str(_free_port())))
    assert "rendezvous failed (rank 1 of 2" in line and "rank 0 at 127.0.0.1" in line and "did not join within 1 s" in line


def test_a_timeout_too_short_to_connect_is_one_error_line(tmp_path: Path) -> None:
    line = _one_error_line(_train(tmp_path, ["--timeout", "0.001"]))
    assert "timeout must be at least 1" in line and "0.001" in line


def test_a_well_formed_single_rank_launch_trains(tmp_path: Path) -> None:
    proc = _train(tmp_path, ["--timeout", "120"], RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list((tmp_path / "runs").glob("*.json"))) == 1


def test_torchrun_ranks_started_with_different_options_all_fail_with_one_line(tmp_path: Path) -> None:
    """Rank 1 with a stale command line (another --epochs) would run other steps and wait in a collective rank 0 never starts."""
    port = str(_free_port())
    procs = []
    for rank, epochs in ((0, "1"), (1, "2")):
        cmd = [sys.executable, "-m", "gcbench", "train", "-c", "none", "--task", "charlstm", "--epochs", epochs, "-q",
               "-o", str(tmp_path / f"runs{rank}"), "--timeout", "600", "--collective-timeout", "600"]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=_env(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        outs = [p.communicate(timeout=BOUND_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    lines = [_one_error_line(subprocess.CompletedProcess(p.args, p.returncode, o, e)) for p, (o, e) in zip(procs, outs, strict=True)]
    assert lines[0] == lines[1] and "ranks disagree on the training settings" in lines[0]
    assert "rank 0: task charlstm, epochs 1" in lines[0] and "rank 1: task charlstm, epochs 2" in lines[0]


def test_calibrate_checks_the_launch_too(tmp_path: Path) -> None:
    """``python -m gcbench.distributed.calibrate`` joins its group through the same check (RANK=5 of 2 used to wait forever)."""
    cmd = [sys.executable, "-m", "gcbench.distributed.calibrate", "--bandwidth", "10", "--out", str(tmp_path / "net.json")]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(RANK="5", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port())),
                          capture_output=True, text=True, timeout=BOUND_S)
    assert "RANK=5 is outside 0..1" in _one_error_line(proc)
