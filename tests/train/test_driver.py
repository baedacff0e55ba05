"""gcbench.train.driver: tasks, configuration, records, and the worker group's fault handling."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from typer.testing import CliRunner

from gcbench.core.errors import ParamError, TrainError, UnknownNameError
from gcbench.train.case import build_record
from gcbench.train.config import Fault, TrainConfig
from gcbench.train.workers import WorkerContext, WorkerGroup, run_group
from gcbench.workloads.specs import Spec, parse_compressors, reference_name
from gcbench.workloads.tasks import CharLSTMTask, DigitsTask, load_text, sklearn_available

# ----------------------------------------------------------------------------- pure parts


def test_parse_compressors_joins_parameters_and_puts_the_reference_first() -> None:
    specs = parse_compressors("topk:density=0.1,error_feedback=true,qsgd:s=4,bucket=64,dgc")
    assert [s.label for s in specs] == ["none", "topk:density=0.1,error_feedback=true", "qsgd:s=4,bucket=64", "dgc"]
    assert specs[1].params == {"density": 0.1, "error_feedback": True}
    assert specs[2].params == {"s": 4, "bucket": 64}
    again = parse_compressors("qsgd,none")
    assert [s.label for s in again] == ["none", "qsgd"]  # the reference runs first
    with pytest.raises(ParamError, match="twice"):
        parse_compressors("qsgd,qsgd")
    with pytest.raises(UnknownNameError, match="did you mean"):
        parse_compressors("none,topkk")
    with pytest.raises(ParamError):
        parse_compressors("topk:density=5")


def test_fault_spec_parses_and_rejects() -> None:
    assert Fault.parse("crash:1") == Fault("crash", 1, 2, None)
    assert Fault.parse("hang:0@5/topk:density=0.1") == Fault("hang", 0, 5, "topk:density=0.1")
    for bad in ("boom:1", "crash:x", "crash:1@y", "crash"):
        with pytest.raises(ParamError):
            Fault.parse(bad)


def test_config_resolves_task_defaults_and_validates() -> None:
    cfg = TrainConfig(task="charlstm", workers=2, timeout_s=90).resolved()
    assert (cfg.epochs, cfg.batch_size, cfg.target, cfg.lr) == (6, 16, 0.35, 0.005)
    assert cfg.collective_timeout_s == 30.0 and cfg.threads >= 1
    assert TrainConfig(task="auto").resolved().task == ("digits" if sklearn_available() else "charlstm")
    with pytest.raises(UnknownNameError, match="did you mean 'digits'"):
        TrainConfig(task="digit").resolved()
    for bad in ({"workers": 0}, {"epochs": 0}, {"target": 1.5}, {"lr": -1.0}, {"timeout_s": 0}, {"granularity": "model"}):
        with pytest.raises(ParamError):
            TrainConfig(task="charlstm", **bad).resolved()


def test_charlstm_task_uses_the_shipped_text() -> None:
    text = load_text()
    assert len(text) > 20_000 and not text.startswith("#")  # provenance lines are stripped
    task = CharLSTMTask(seed=0)
    b0 = task.batches(0, 0, 2, 4)
    b1 = task.batches(0, 1, 2, 4)
    assert len(b0) == len(b1) == task.steps_per_epoch
    x, y = b0[0]
    assert x.shape == y.shape == (4, task.seq_len)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the next characters
    assert not torch.equal(b0[0][0], b1[0][0])  # each rank its own windows
    loss, acc = task.evaluate(task.build_model())
    assert 0.0 <= acc <= 1.0 and loss > 0


@pytest.mark.skipif(not sklearn_available(), reason="scikit-learn not installed")
def test_digits_shards_are_disjoint_and_equal_in_steps() -> None:
    task = DigitsTask(seed=0)
    assert len(task.y_train) + len(task.y_test) == 1797
    shards = [task.batches(3, r, 4, 32) for r in range(4)]
    assert len({len(s) for s in shards}) == 1  # every rank takes the same number of steps
    rows = [tuple(row.tolist()) for s in shards for x, _ in s for row in x]
    assert len(rows) == 4 * len(shards[0]) * 32
    assert task.batches(3, 0, 4, 32)[0][0].equal(shards[0][0][0])  # seeded order


def _summary(rank: int, accs: list[float], steps: list[tuple[float, float, float, float, int]], h: str = "abc") -> dict[str, Any]:
    return {
        "rank": rank, "label": "topk",
        "curve": [{"epoch": i + 1, "step": 2 * (i + 1), "train_time_s": 1.5 * (i + 1), "train_loss": 1.0, "test_loss": 1.0 - a,
                   "test_accuracy": a} for i, a in enumerate(accs)],
        "steps": [{"total_s": t, "compress_s": c, "communicate_s": m, "decompress_s": d, "compute_s": t - c - m - d,
                   "payload_bytes": b, "sent_bytes": b + 8, "dense_bytes": 4000} for t, c, m, d, b in steps],
        "hook": {"protocol": "gather"}, "decoded_payloads": 2, "collectives": ["allgather"], "buckets": 1,
        "numel": 1000, "replica_hash": h, "diverged": False, "train_time_s": 3.0, "threads": 1,
    }


def test_build_record_medians_gap_and_time_to_target() -> None:
    cfg = TrainConfig(task="charlstm", workers=2, target=0.6).resolved()
    steps0 = [(9.0, 9.0, 0, 0, 100), (1.0, 0.1, 0.2, 0.3, 100), (3.0, 0.3, 0.2, 0.1, 200), (2.0, 0.2, 0.4, 0.2, 100)]
    steps1 = [(9.0, 9.0, 0, 0, 300), (2.0, 0.1, 0.2, 0.3, 300), (2.0, 0.1, 0.2, 0.3, 300), (2.0, 0.1, 0.2, 0.3, 300)]
    ref = {"status": "ok", "training": {"final_accuracy": 0.8}}
    rec = build_record(Spec("topk", "topk"), [_summary(0, [0.5, 0.7], steps0), _summary(1, [0.5, 0.7], steps1)], cfg, {"name": "x"}, ref)
    tr = rec["training"]
    # the first step is skipped; medians per rank (2.0 and 2.0), then the mean over ranks
    assert tr["step_time"]["total_s"] == pytest.approx(2.0)
    assert tr["step_time"]["compress_s"] == pytest.approx((0.2 + 0.1) / 2)
    assert tr["step_time"]["compute_s"] == pytest.approx((1.2 + 1.4) / 2)
    assert tr["accuracy_gap"] == pytest.approx(0.1)
    assert tr["time_to_target_s"] == pytest.approx(3.0) and tr["epochs_to_target"] == 2
    assert tr["bytes"]["payload_bytes_per_worker"] == pytest.approx((500 + 1200) / 2)
    assert tr["bytes"]["payload_bytes_per_step"] == pytest.approx(850 / 4)
    assert rec["size"]["ratio"] == pytest.approx(4000 / (850 / 4))
    assert tr["replicas_consistent"]
    assert tr["step_samples_rank0"]["payload_bytes"] == [100, 100, 200, 100]
    diverged = build_record(Spec("topk", "topk"), [_summary(0, [0.5], steps0), _summary(1, [0.5], steps1, h="xyz")], cfg, {}, None)
    assert not diverged["training"]["replicas_consistent"]
    assert diverged["training"]["accuracy_gap"] is None and diverged["training"]["time_to_target_s"] is None
    own = build_record(Spec(reference_name(), reference_name()), [_summary(0, [0.5], steps0)], cfg, {}, None)
    assert own["training"]["accuracy_gap"] == 0.0


def test_build_record_combines_the_ranks_wire_verification() -> None:
    cfg = TrainConfig(task="charlstm", workers=2, target=0.6).resolved()
    steps = [(1.0, 0.1, 0.2, 0.3, 100)]

    def ranks(*wire: tuple[bool | None, float | None]) -> list[dict[str, Any]]:
        out = [_summary(r, [0.5], steps) for r in range(len(wire))]
        for r, (ok, ratio) in zip(out, wire, strict=True):
            r["hook"] = {"protocol": "gather", "wire_verified": ok, "wire_bytes_ratio": ratio}
        return out

    def hook(*wire: tuple[bool | None, float | None]) -> dict[str, Any]:
        return build_record(Spec("topk", "topk"), ranks(*wire), cfg, {}, None)["training"]["hook"]

    assert hook((True, 1.0), (True, 1.0)) == {"protocol": "gather", "wire_verified": True, "wire_bytes_ratio": 1.0}
    assert hook((True, 1.0), (False, 2.0))["wire_verified"] is False  # one rank's failed check fails the run's
    assert hook((True, 1.0), (False, 2.0))["wire_bytes_ratio"] == 2.0  # the worst rank's ratio
    assert hook((True, 1.0), (None, None))["wire_verified"] is None  # a rank that checked nothing: unknown, not verified
    assert "wire_verified" not in build_record(Spec("topk", "topk"), [_summary(0, [0.5], steps)], cfg, {}, None)["training"]["hook"]


# ----------------------------------------------------------------------------- worker faults (2 processes)


def _crash_rank1(ctx: WorkerContext) -> int:
    t = torch.ones(4)
    dist.all_reduce(t, group=ctx.group)
    if ctx.rank == 1:
        os._exit(3)
    dist.all_reduce(t, group=ctx.group)  # rank 0 waits for the dead peer
    return ctx.rank


def _hang_rank1(ctx: WorkerContext) -> int:
    if ctx.rank == 1:
        time.sleep(600)
    dist.all_reduce(torch.ones(4), group=ctx.group)
    return ctx.rank


def _slow_rank1(ctx: WorkerContext) -> int:
    if ctx.rank == 1:
        time.sleep(600)
    return ctx.rank


def test_crashed_worker_is_named_within_the_timeout() -> None:
    t0 = time.monotonic()
    with pytest.raises(TrainError, match=r"^rank 1 exited with code 3 \(no error report"):
        run_group(_crash_rank1, (), 2, timeout_s=60, collective_timeout_s=20)
    assert time.monotonic() - t0 < 60


@pytest.mark.slow  # ~10 s of a real 60 s-scaled timeout; -m slow
def test_hung_worker_is_named_when_its_peer_times_out() -> None:
    with pytest.raises(TrainError, match=r"^rank 1 stopped responding at step 0: rank 0 gave up waiting in a collective after 3 s"):
        run_group(_hang_rank1, (), 2, timeout_s=60, collective_timeout_s=3)


def _hang_rank1_before_step0(ctx: WorkerContext) -> int:
    """Like a training step 0 whose rank 1 hangs first: rank 0 enters the step and waits in its collective."""
    if ctx.rank == 1:
        time.sleep(600)
    ctx.begin(0)
    dist.all_reduce(torch.ones(4), group=ctx.group)
    ctx.beat(1)
    return ctx.rank


def test_rank_hung_at_step_0_is_named_and_its_peers_are_said_to_wait() -> None:
    # both ranks are alive at step 0 when the deadline passes (before any collective timeout): the
    # one that never entered the step is the one that hung.  The deadline is taken once rank 0 is in
    # its collective, so a slow start on a loaded machine cannot make the test pass or fail.
    group = WorkerGroup(_hang_rank1_before_step0, (), 2, collective_timeout_s=600, init_timeout_s=600)
    group.start()
    try:
        deadline = time.monotonic() + 300
        while int(group.steps[0]) == 0 and time.monotonic() < deadline:
            assert group.failure() is None
            group.wait(0.2)
        assert group.codes() == [None, None]
        message = group.stuck(60, "compressor none")
    finally:
        group.stop()
    assert message == "rank 1 hung at step 0 and did not finish within 60 s (compressor none); rank 0 was waiting for it in a collective"


@pytest.mark.slow  # ~17 s waiting out a deadline; -m slow
def test_worker_past_the_deadline_is_named() -> None:
    # the deadline is enforced from the start (workers still importing torch on a loaded machine
    # count against it, so which ranks it names then depends on the load) ...
    t0 = time.monotonic()
    with pytest.raises(TrainError, match=r"did not finish within 15 s"):
        run_group(_slow_rank1, (), 2, timeout_s=15)
    assert time.monotonic() - t0 < 30
    # ... and once rank 0 is done, the one still running is the one named
    group = WorkerGroup(_slow_rank1, (), 2, collective_timeout_s=600, init_timeout_s=600)
    group.start()
    try:
        deadline = time.monotonic() + 300
        while group.codes()[0] is None and time.monotonic() < deadline:
            group.wait(0.2)
        assert group.codes() == [0, None]
        message = group.stuck(15, "worker group")
    finally:
        group.stop()
    assert message == "rank 1 did not finish within 15 s (worker group; stuck at step 0)"


# ----------------------------------------------------------------------------- end to end through the CLI


def test_train_cli_records_finished_compressors_and_names_the_crashed_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gcbench.cli import app

    monkeypatch.setenv("GCBENCH_TRAIN_FAULT", "crash:1@3/topk:density=0.05")
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["train", "--task", "charlstm", "--workers", "2", "--epochs", "1", "--timeout", "120",
                                   "-c", "topk:density=0.05", "--out", str(tmp_path), "--quiet"])
    assert time.monotonic() - t0 < 120
    assert res.exit_code == 1, res.output
    assert "rank 1 exited with code 3" in res.output
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["kind"] == "train" and data["status"] == "complete-with-errors"
    none, topk = data["cases"]
    assert none["label"] == "none" and none["status"] == "ok"
    tr = none["training"]
    assert tr["workers"] == 2 and tr["epochs"] == 1 and tr["steps"] == CharLSTMTask.steps_per_epoch
    assert tr["replicas_consistent"] and tr["accuracy_gap"] == 0.0
    assert 0 < tr["final_accuracy"] <= 1
    assert tr["hook"]["wire_verified"] is True and tr["hook"]["wire_bytes_ratio"] == 1.0  # both ranks' wire checks passed
    numel = none["size"]["numel"]
    # none sends the dense fp32 model plus one payload header per step
    assert 4 * numel < tr["bytes"]["payload_bytes_per_step"] < 4 * numel + 64
    st = tr["step_time"]
    assert st["total_s"] == pytest.approx(st["compute_s"] + st["compress_s"] + st["communicate_s"] + st["decompress_s"], rel=0.35)
    assert topk["status"] == "error" and topk["error"].startswith("rank 1 exited with code 3")


@pytest.mark.slow
def test_default_training_reaches_the_target_with_compression(tmp_path: Path) -> None:
    from gcbench.train.driver import train

    out = train(TrainConfig(workers=4), "none,topk:density=0.1,error_feedback=true,qsgd", tmp_path)
    assert not out.failed
    for rec in out.records:
        tr = rec["training"]
        assert tr["time_to_target_s"] is not None, rec["label"]
        assert tr["replicas_consistent"]
    sizes = {r["label"]: r["size"]["wire_bytes"] for r in out.records}
    assert sizes["qsgd"] < sizes["none"] / 3


def _children(pid: int) -> set[int]:
    """Live descendants of ``pid`` (Linux /proc), zombies excluded."""
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            kids.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.add(k)
            todo.append(k)
    return out


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_stops_the_workers_promptly_and_keeps_finished_compressors(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    # 'none' trains (1 epoch), then topk's rank 0 hangs at step 1 with every timeout far away
    env = {**os.environ, "GCBENCH_TRAIN_FAULT": "hang:0@1/topk:density=0.05", "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "gcbench", "train", "--task", "charlstm", "--workers", "2", "--epochs", "1",
                             "-c", "topk:density=0.05", "--timeout", "600", "--collective-timeout", "600",
                             "--out", str(tmp_path), "--quiet"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            files = list(tmp_path.glob("*.json"))
            if (files and len(json.loads(files[0].read_text() or "{}").get("cases", [])) == 1
                    and sum(b"spawn_main" in _cmdline(w) for w in _children(proc.pid)) == 2):
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        else:
            pytest.fail("the reference compressor did not finish in time")
        # the worker processes (multiprocessing's resource tracker, also a child, leaves on its own)
        workers = {w for w in _children(proc.pid) if b"spawn_main" in _cmdline(w)}
        assert len(workers) == 2, workers
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        # the property is "does not wait for the 600 s timeouts"; 5 s failed once with the machine at a load of 10
        assert time.monotonic() - t0 < 30, "the parent took too long to stop"
        assert proc.returncode == 143 and "Traceback" not in err, (proc.returncode, err)
        assert "interrupted (SIGTERM)" in err
        left = {w for w in workers if _alive(w)}
        assert not left, f"workers {left} outlived the parent"
    finally:
        if proc.poll() is None:
            proc.kill()
    data = json.loads(files[0].read_text())
    assert data["status"] == "interrupted"
    assert [c["label"] for c in data["cases"]] == ["none"] and data["cases"][0]["status"] == "ok"


@pytest.mark.parametrize("task", ["digits", "digits_cnn", "charlstm"])
def test_the_train_tasks_models_are_in_the_zoo_with_the_same_tensors(task: str) -> None:
    """advise prices a convergence run of a train task on the zoo model of that name: the same parameters, in order."""
    if task.startswith("digits"):
        pytest.importorskip("sklearn")
    from gcbench.sources.zoo import layer_shapes, load_model
    from gcbench.workloads.tasks import make_task

    ours = [tuple(p.shape) for p in make_task(task, 0).build_model().parameters()]
    assert ours == [tuple(s.shape) for s in layer_shapes(task)]
    m = load_model(task, seed=1)
    x, y = m.make_batch(0, 0)
    assert torch.isfinite(m.loss_fn(m.module(x), y))
