"""The convergence runner (gcbench/converge/sweep.py): the results file, the reference first, targets, interruption, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from gcbench.converge.sweep import ConvergeConfig, load_suite, resolve, run_converge
from gcbench.core.errors import GcbenchError, ParamError, UnknownNameError
from gcbench.measure.suite import SUITE_DIR
from gcbench.results.converge_record import ConvergeRecord
from gcbench.results.store import load_run
from gcbench.workloads.problems import ConvergeError
from gcbench.workloads.tasks import sklearn_available

TINY = "tests.user_factory:tiny"


def _cfg(**kw: Any) -> ConvergeConfig:
    base: dict[str, Any] = {"model": TINY, "compressors": ("topk:density=0.2",), "workers": 2, "steps": 6, "seeds": 2,
                            "eval_every": 3, "lr": 0.2}
    return ConvergeConfig(**{**base, **kw})


def test_a_run_writes_a_converge_file_with_the_reference_first(tmp_path: Path) -> None:
    calls: list[tuple[str, int, int]] = []
    out = run_converge(_cfg(), tmp_path, lambda stage, done, total, msg: calls.append((stage, done, total)))
    rec = load_run(out.path)
    assert isinstance(rec, ConvergeRecord) and rec.status == "complete"
    ref, topk = rec.cases
    assert ref.label == "none" and ref.convergence.reference and not topk.convergence.reference
    st = topk.convergence.settings
    assert (st.task, st.metric, st.workers, st.steps, st.seeds, st.optimizer) == (TINY, "accuracy", 2, 6, [0, 1], "sgd")
    assert st.target_rule == "fraction" and st.target_fraction == 0.95 and st.target == pytest.approx(out.target)
    assert st.target == ref.convergence.settings.target  # the reference's case was rewritten with the target
    assert [s.seed for s in topk.convergence.seeds] == [0, 1]
    assert all(s.reached is not None for c in rec.cases for s in c.convergence.seeds)  # reached or not: never missing
    s = topk.convergence.summary
    assert s.seeds == 2 and s.final_metric.n == 2 and s.gap.n == 2 and s.curve_steps == [0, 3, 6]
    assert topk.convergence.bytes.sent_per_worker_per_step < ref.convergence.bytes.sent_per_worker_per_step
    assert ("case", 4, 4) in calls and any(c[0] == "step" for c in calls)


def test_an_interrupted_run_keeps_every_finished_seed(tmp_path: Path) -> None:
    def progress(stage: str, done: int, total: int, message: str) -> None:
        if stage == "case" and done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_converge(_cfg(), tmp_path, progress)
    (path,) = tmp_path.glob("*.json")
    rec = load_run(path)
    assert rec.status == "interrupted"
    assert [len(c.convergence.seeds) for c in rec.cases] == [2, 1]


def test_a_target_value_the_reference_never_reaches_is_refused_and_the_file_kept(tmp_path: Path) -> None:
    with pytest.raises(ConvergeError, match=r"--target-value 1\.5 is never reached by the reference none"):
        run_converge(_cfg(target_value=1.5, seeds=1), tmp_path)
    (path,) = tmp_path.glob("*.json")
    rec = load_run(path)
    assert rec.status == "failed" and [c.label for c in rec.cases] == ["none"]


def test_a_reachable_target_value_is_used_as_given(tmp_path: Path) -> None:
    out = run_converge(_cfg(target_value=0.0, seeds=1, compressors=("signsgd",)), tmp_path)
    assert out.target == 0.0 and out.settings["target_rule"] == "value"
    assert all(c["convergence"]["summary"]["reached"] == 1 for c in out.cases)


@pytest.mark.parametrize(("kw", "error", "match"), [
    ({"steps": 0}, ParamError, "steps must be an integer in \\[1, 1000000\\]"),
    ({"seeds": 0}, ParamError, "seeds must be"),
    ({"optimizer": "adagrad"}, UnknownNameError, "unknown optimizer 'adagrad'"),
    ({"lr": float("nan")}, ParamError, "lr must be"),
    ({"target_fraction": 0.5, "target_value": 0.3}, ParamError, "not both"),
    ({"target_fraction": 1.5}, ParamError, "fraction in"),
    ({"workers": 1, "compressors": ("lgc",)}, ParamError, "lgc needs at least 2 workers"),
    ({"compressors": ("nosuch",)}, UnknownNameError, "nosuch"),
    ({"optimizer": "adam", "momentum": 0.5}, ParamError, "--momentum applies to sgd"),
])
def test_bad_settings_fail_before_anything_runs(kw: dict[str, Any], error: type[Exception], match: str, tmp_path: Path) -> None:
    with pytest.raises(error, match=match):
        run_converge(_cfg(**kw), tmp_path)
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not sklearn_available(), reason="scikit-learn not installed")
def test_more_workers_than_batches_is_one_error() -> None:
    # 1024 workers (the most there may be) of 2 images each need more than digits' training images
    with pytest.raises(GcbenchError, match="cannot give 1024 workers a batch of 2"):
        resolve(ConvergeConfig(task="digits", workers=1024, batch=2, compressors=("none",)))


def test_the_bundled_suite_loads_with_the_reference_and_six_compressors() -> None:
    cfg, data = load_suite("suites/converge.toml")
    assert cfg.task == "digits_cnn" and cfg.seeds == 3 and cfg.compressors[0] == "none" and len(cfg.compressors) == 7
    assert any("error_feedback=true" in c for c in cfg.compressors) and "signsgd" in cfg.compressors
    assert (SUITE_DIR / "converge.toml").exists() and data["kind"] == "converge"
    old, _ = load_suite("suites/converge_charlstm.toml")  # the former default, kept under its own name
    assert old.task == "charlstm" and old.steps == 150 and old.compressors == cfg.compressors


def test_the_bundled_suite_can_show_its_reference_converged_and_runs_on_a_plain_install() -> None:
    """The convergence criterion (final metric within 1% of its value at 80% of the steps) must be readable from the
    suite's own curve: 80% of the steps is an evaluated step, the horizon is the one error feedback needed on digits_cnn
    (300 SGD steps; 150 were too few on charlstm), and scikit-learn, whose digits the task trains on, is a core dependency."""
    import tomllib

    cfg, _ = load_suite("suites/converge.toml")
    assert cfg.eval_every is not None and (cfg.steps * 4 // 5) % cfg.eval_every == 0 and cfg.steps * 4 % 5 == 0
    assert cfg.steps >= 300 and cfg.optimizer is None  # the task's SGD, the optimizer its horizon was measured with
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    assert any(d.replace(" ", "").startswith("scikit-learn") for d in pyproject["project"]["dependencies"])


@pytest.mark.slow
@pytest.mark.skipif(not sklearn_available(), reason="scikit-learn not installed")
def test_the_bundled_suites_reference_has_converged(tmp_path: Path) -> None:
    """The reference alone, over the suite's seeds (34 to 46 s a seed at load 5 to 9 on the 2-core machine): its mean final accuracy is
    within 1% of its mean accuracy at 80% of the steps, so a gap in the suite's table is the compressor's, not a
    horizon cut short."""
    import dataclasses

    cfg, _ = load_suite("suites/converge.toml")
    out = run_converge(dataclasses.replace(cfg, compressors=("none",)), tmp_path)
    summary = out.cases[0]["convergence"]["summary"]
    curve = dict(zip(summary["curve_steps"], summary["curve_mean"], strict=True))
    final, at_80 = curve[cfg.steps], curve[cfg.steps * 4 // 5]
    assert summary["seeds"] == cfg.seeds and summary["final_metric"]["n"] == cfg.seeds
    assert abs(final - at_80) <= 0.01 * final, f"the reference moved from {at_80:.4f} to {final:.4f} in the last 20% of its steps"


def test_a_suite_must_say_it_is_a_convergence_suite_and_know_its_keys(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('task = "charlstm"\n', encoding="utf-8")
    with pytest.raises(GcbenchError, match="not a convergence suite"):
        load_suite(p)
    p.write_text('kind = "converge"\ntask = "charlstm"\nstepz = 3\n', encoding="utf-8")
    with pytest.raises(GcbenchError, match="unknown key 'stepz'"):
        load_suite(p)
    p.write_text('kind = "converge"\nsteps = "3"\n', encoding="utf-8")
    with pytest.raises(GcbenchError, match="steps has the wrong type"):
        load_suite(p)


def test_a_reference_that_diverges_on_every_seed_gives_no_target(tmp_path: Path) -> None:
    with pytest.raises(ConvergeError, match="the reference none finished no seed"):
        run_converge(_cfg(lr=1e6, steps=20, seeds=1), tmp_path)
    (path,) = tmp_path.glob("*.json")
    rec = load_run(path)
    assert rec.status == "failed" and rec.cases[0].convergence.seeds[0].status == "diverged"


def _module_factory(name: str, build: Any) -> str:
    """Register ``build`` (``() -> nn.Module``) as the factory of an in-memory user module; returns its ``module:factory``."""
    import sys
    import types

    mod = types.ModuleType(name)

    def factory(seed: int = 0) -> tuple[Any, Any]:
        torch.manual_seed(seed)

        def make_batch(i: int, w: int) -> tuple[Any, Any]:
            g = torch.Generator().manual_seed(100 * i + w)
            return torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)

        return build(), make_batch

    mod.factory = factory  # type: ignore[attr-defined]
    sys.modules[name] = mod
    return f"{name}:factory"


class _NoParameters(torch.nn.Module):
    def forward(self, x: Any) -> Any:
        return x[:, :3] * 2.0


class _IgnoresItsParameters(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.unused = torch.nn.Linear(6, 3)

    def forward(self, x: Any) -> Any:
        return x[:, :3] * 2.0


@pytest.mark.parametrize(("build", "match"), [
    (_NoParameters, "has no trainable parameters"),
    (lambda: torch.nn.Linear(6, 3).requires_grad_(False), "has no trainable parameters"),
    (_IgnoresItsParameters, "the loss does not depend on any trainable parameter"),
])
def test_a_model_with_nothing_to_train_is_refused_before_any_run(build: Any, match: str, tmp_path: Path) -> None:
    import sys

    spec = _module_factory("gcbench_test_nothing_to_train", build)
    try:
        with pytest.raises(ConvergeError, match=match) as exc:
            run_converge(_cfg(model=spec, seeds=1), tmp_path)
        assert "--lr" not in str(exc.value)  # not a divergence: a lower rate would not help
    finally:
        del sys.modules["gcbench_test_nothing_to_train"]
    assert not list(tmp_path.iterdir())


def test_a_system_exit_that_stops_the_run_marks_the_file_failed_and_keeps_the_finished_seeds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gcbench.converge import sweep as runner

    calls: list[int] = []
    run_seed = runner.run_seed

    def third_exits(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise SystemExit(4)
        return run_seed(*args, **kwargs)

    monkeypatch.setattr(runner, "run_seed", third_exits)
    with pytest.raises(ConvergeError, match=r"^topk:density=0\.2 seed 0: SystemExit: 4 stopped the run; the finished seeds "
                                            r"are in .*\.json$"):
        run_converge(_cfg(), tmp_path)
    (path,) = tmp_path.glob("*.json")
    rec = load_run(path)
    assert rec.status == "failed" and [len(c.convergence.seeds) for c in rec.cases] == [2]


@pytest.mark.parametrize(("flops", "cores", "others", "default", "threads"), [
    (3.2e6, 2, 0.0, 2, 1),  # a small model: one thread even on an idle machine
    (3.2e6, 16, 9.5, 16, 1),
    (7e8, 2, 0.0, 2, 2),  # a large model gets the free cores
    (7e8, 2, 0.4, 2, 2),
    (7e8, 2, 1.0, 2, 1),  # one busy process on two cores: one thread
    (7e8, 2, 9.5, 2, 1),  # never fewer than one
    (7e8, 16, 5.2, 16, 11),
    (7e8, 16, 0.0, 4, 4),  # never more than torch's own count (OMP_NUM_THREADS)
    (None, 2, 1.0, 2, 1),  # an uncounted model is taken as a large one
    (7e8, 2, None, 2, 2),  # no load reading: torch's count, within the cores
])
def test_the_thread_count_follows_the_models_size_and_the_free_cores(flops: float | None, cores: int, others: float | None,
                                                                      default: int, threads: int) -> None:
    from gcbench.converge.sweep import choose_threads

    calls: list[tuple[int, int]] = []
    choice = choose_threads(flops, cores, others, default, lambda a, b: calls.append((a, b)) or True)
    assert choice.threads == threads and choice.rule.startswith(f"auto: {threads} thread")
    # the bits are compared only where the load would take threads away from torch's count
    assert calls == ([(threads, default)] if (flops is None or flops >= 1e7) and threads < default else [])


def test_a_model_whose_bits_depend_on_the_thread_count_keeps_torchs_count_under_load() -> None:
    from gcbench.converge.sweep import choose_threads

    choice = choose_threads(7e8, 2, 1.0, 2, lambda a, b: False)
    assert choice.threads == 2 and choice.held_for_bits
    assert "gradients differ in rounding between 1 and 2 threads, so the count does not follow the load" in choice.rule
    assert choose_threads(3.2e6, 2, 1.0, 2, lambda a, b: False).threads == 1  # a small model's one thread is not a choice


def test_the_probe_compares_one_workers_pass_bit_for_bit() -> None:
    from gcbench.converge.sweep import _resolve

    probe = _resolve(_cfg(seeds=1))[4]
    assert probe.flops is not None and 0 < probe.flops < 1e4  # a 6-5-3 MLP on 4 examples
    assert probe.same_bits(1, 2)  # products this small run on one thread whatever the count
    plain = probe.loss
    probe.loss = lambda out, y: plain(out, y) * (1 + 1e-3 * torch.get_num_threads())  # a loss that sees the count
    assert not probe.same_bits(1, 2)


def test_the_load_is_the_larger_of_the_load_average_and_the_cpu_other_processes_use_now(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import time

    from gcbench.converge.sweep import machine_load

    class Meter:
        def __init__(self, share: float | None) -> None:
            self.value = share

        def share(self) -> float | None:
            return self.value

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 5.0, 5.0))
    long_ago = time.perf_counter() - 10
    assert machine_load(Meter(0.5), long_ago) == (2, 2.0)  # half of 4 CPUs busy now, though the average says 1
    assert machine_load(Meter(0.1), long_ago) == (2, 1.0)  # a load that just paused still counts for a minute
    assert machine_load(Meter(None), long_ago) == (2, 1.0)


def test_a_small_model_runs_on_one_thread_and_the_results_file_says_which(tmp_path: Path) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        auto = run_converge(_cfg(seeds=1), tmp_path / "auto")
        assert torch.get_num_threads() == 2  # the caller's count is given back
        given = run_converge(_cfg(seeds=1, threads=2), tmp_path / "given")
    finally:
        torch.set_num_threads(before)
    env = load_run(auto.path).environment
    assert auto.threads is not None and auto.threads.threads == 1 and env.torch_threads == 1
    assert env.threads_rule.startswith("auto: 1 thread, a worker's forward pass being ")  # type: ignore[attr-defined]
    env = load_run(given.path).environment
    assert env.torch_threads == 2 and env.threads_rule == "given: threads = 2"  # type: ignore[attr-defined]
    # the numbers do not depend on the count for this model (docs/convergence.md says for which models they do)
    curves = [[[s["curve"] for s in c["convergence"]["seeds"]] for c in out.cases] for out in (auto, given)]
    assert curves[0] == curves[1]
