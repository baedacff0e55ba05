"""The fast twin: the simulated engine and the real ``gcbench train`` machinery give the same trajectory.

``gcbench train`` (2 gloo processes, the DDP communication hook, ``--granularity layer``) and
:func:`gcbench.converge.engine.run_seed` (one process) train the same task from the same seed: the
same initial model (``torch.manual_seed(seed)``), the same batches (``Task.batches``, called by
both), the same optimizer, the compressor's same protocol generator, and unit states seeded alike
(``unit_seed``, with DDP's bucket rebuild after the first step reproduced by ``UnitLayout``).  The
held-out loss and accuracy at every epoch end must then agree to float tolerance (the two sum
gradients in other thread layouts), and the bytes each worker sent per step exactly.

Covered: ``none``; top-k with error feedback and EF-signSGD (stateful: a residual per unit, and the
engine must reset it where the hook does); QSGD (randomized: each worker's stochastic rounding
draws from its unit state's generator, seeded ``unit_seed(seed, rank, bucket, unit)`` on both
sides, so its draws agree too).

The task is ``charlstm`` (shipped with gcbench, needs nothing else) and, when scikit-learn is
installed, ``digits`` (an MLP).  Checked by hand when it was written: with the engine keeping its
states through DDP's rebuild, top-k with error feedback fails it; with unit seeds off by one, QSGD does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gcbench.converge.engine import run_seed
from gcbench.converge.steps import EngineSettings
from gcbench.train.config import TrainConfig
from gcbench.train.driver import train
from gcbench.workloads.problems import TaskProblem
from gcbench.workloads.tasks import sklearn_available

COMPRESSORS = ["none", "topk:density=0.05,error_feedback=true", "efsignsgd", "qsgd"]


def _twin(task: str, epochs: int, batch: int, lr: float, tmp_path: Path, compressors: list[str] = COMPRESSORS) -> None:
    cfg = TrainConfig(task=task, workers=2, epochs=epochs, batch_size=batch, lr=lr, seed=3, granularity="layer", timeout_s=240)
    outcome = train(cfg, compressors, tmp_path)
    assert not outcome.failed, [r.get("error") for r in outcome.failed]
    problem = TaskProblem(task)
    d = problem.defaults
    for rec in outcome.records:
        curve = rec["training"]["curve"]
        steps_per_epoch = curve[0]["step"]
        settings = EngineSettings(workers=2, steps=curve[-1]["step"], batch=batch, optimizer=d.optimizer, lr=lr, momentum=d.momentum,
                                  weight_decay=0.0, eval_every=steps_per_epoch)
        sim = run_seed(problem, rec["label"], settings, seed=3)
        assert sim.status == "ok", sim.error
        points = sim.curve[1:]  # the engine also evaluates at step 0
        assert [p["step"] for p in points] == [c["step"] for c in curve]
        for p, c in zip(points, curve, strict=True):
            assert p["eval_loss"] == pytest.approx(c["test_loss"], rel=1e-4, abs=1e-5), rec["label"]
            assert p["metric"] == pytest.approx(c["test_accuracy"], abs=2e-3), rec["label"]
        # the hook resets its states once, at DDP's bucket rebuild; so does the engine
        assert sim.state_resets == rec["training"]["hook"]["state_resets"], rec["label"]
        per_worker_step = sim.payload_bytes / 2 / sim.steps_run
        assert per_worker_step == pytest.approx(rec["training"]["bytes"]["payload_bytes_per_step"]), rec["label"]


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread, as each of train's 2 workers on a 2-core machine (restored afterwards)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_one_epoch_twin_of_a_stateful_and_a_randomized_compressor(tmp_path: Path, one_thread: None) -> None:
    """The quick twin (one epoch of charlstm, 20 steps: DDP's rebuild and the state reset included)."""
    _twin("charlstm", 1, 4, 0.005, tmp_path, ["topk:density=0.05,error_feedback=true", "qsgd"])


@pytest.mark.slow
def test_engine_matches_real_ddp_training_on_charlstm(tmp_path: Path, one_thread: None) -> None:
    _twin("charlstm", 2, 8, 0.005, tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(not sklearn_available(), reason="scikit-learn not installed")
def test_engine_matches_real_ddp_training_on_digits(tmp_path: Path, one_thread: None) -> None:
    _twin("digits", 2, 64, 0.1, tmp_path)
