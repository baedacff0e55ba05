"""advise under load: a time budget for the kernel measurement, the default candidates (the baselines and one member of
each family), one worker process for the cases; and one price per baseline in every row (third outside audit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.cli.grammar import single_worker_compressors
from gcbench.compressors import registry
from gcbench.core.errors import GcbenchError
from gcbench.measure import bench
from gcbench.measure.bench_worker import SharedWorker
from gcbench.predict import advise as adv
from gcbench.predict import inputs as inp
from gcbench.predict import network as pnet
from gcbench.predict import step_kernels as sk
from gcbench.results.recommend import BF16_RATIO, bf16_text, larger_than_bf16
from gcbench.results.store import load_run
from gcbench.results.verdict import BaselineBytes

runner = CliRunner()


def test_the_default_candidates_are_the_baselines_and_one_member_of_each_family() -> None:
    """A cold advise timed all 26 compressors; by default it times the baselines and the cheapest member (by its card's
    declared memory traffic) of every other family, the families read off the cards' implementing modules."""
    every = single_worker_compressors()
    c = inp.default_candidates(every)
    assert c.specs[:2] == ("none", "bf16") and set(c.specs) | set(c.left_out) == set(every)
    assert not set(c.specs) & set(c.left_out) and len(c.left_out) > 0
    fams: dict[str, list[str]] = {}
    for n in every:
        fams.setdefault(inp.family_of(n), []).append(n)
    for members in fams.values():
        chosen = [n for n in members if n in c.specs]
        if "none" in members:  # the casts: represented by the baselines, fp16 (bf16's twin) left out
            assert set(chosen) == {"none", "bf16"} and "fp16" in c.left_out
            continue
        assert len(chosen) == 1, members
        assert registry.get(chosen[0]).traffic_bytes == min(registry.get(n).traffic_bytes for n in members)
    assert inp.family_of("mxfp4") == inp.family_of("nvfp4") and inp.family_of("topk") != inp.family_of("randomk")
    assert "left out: " in c.text() and "--all" in c.text()


def test_case_budget_is_an_even_share_of_what_is_left_within_a_benchs_own_bounds() -> None:
    assert bench.case_budget(60.0, 20) == pytest.approx(60.0 / 20 * bench.CALIBRATION_SHARE)
    assert bench.case_budget(1000.0, 1) == bench.BENCH_BUDGET_S  # never more than a bench alone gives
    assert bench.case_budget(-3.0, 4) == bench.MIN_CASE_BUDGET_S  # overrun: the minimum rounds still run
    assert bench.case_budget(40.0, 10, overhead_s=1.5) == pytest.approx(2.5)  # what a case costs beyond its rounds, known


def test_flagged_cases_are_timed_again_only_as_far_as_the_budget_left_reaches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under load every figure is flagged: timing all of them again with 10 s left cost minutes (a case's start and
    warm-up are paid whatever its rounds' budget)."""
    asked: list[list[str]] = []

    def fake_run_bench(names: list[str], sizes: Any, **kw: Any) -> list[dict[str, Any]]:
        asked.append(list(names))
        return [{"label": n, "numel": 10} for n in names]

    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    names = ["none", "topk", "qsgd", "signsgd"]
    recs = [{"label": n, "numel": 10, "x_copy": {"compress": {"flags": ["unstable"]}}} for n in names]
    kw: dict[str, Any] = {"repeats": 3, "warmup": 1, "threads": 1, "device": "cpu", "isolate": False, "model": "mlp"}
    bench.remeasure_unstable(recs, names, budget_s=10.0, case_s=4.0, **kw)
    assert asked == [["none", "topk"]]  # two cases of 4 s fit in 10 s
    assert bench.remeasure_unstable(recs, names, budget_s=10.0, case_s=11.0, **kw) == recs and len(asked) == 1
    bench.remeasure_unstable(recs, names, budget_s=None, **kw)
    assert asked[-1] == names  # no budget: every flagged case, as before


def test_a_kernel_the_budget_stopped_is_flagged_cut_short_and_no_other() -> None:
    def blocks() -> dict[str, dict[str, Any]]:
        return {"compress": {"flags": ["unstable"], "reasons": {"unstable": "load"}, "rounds": 4}, "decompress": {"rounds": 4}}

    cut = blocks()
    bench.mark_cut_short(cut, "budget", 0.8, 40)
    assert cut["compress"]["flags"] == ["unstable", bench.CUT_SHORT] and cut["decompress"]["flags"] == [bench.CUT_SHORT]
    assert "stopped after 4 of up to 40" in cut["decompress"]["reasons"][bench.CUT_SHORT]
    for stopped, budget in (("stable", 0.8), ("max rounds", 0.8), ("budget", bench.BENCH_BUDGET_S)):
        b = blocks()
        bench.mark_cut_short(b, stopped, budget, 40)
        assert b == blocks(), (stopped, budget)  # stable, at its cap, or stopped by a bench's own budget: not cut short


def test_the_bench_file_records_its_budget_and_advise_reads_it(tmp_path: Path) -> None:
    outcome = bench.bench_to_file(["none", "topk"], [], tmp_path, repeats=2, warmup=0, threads=1, isolate=False, model="mlp",
                                  budget_s=4.0)
    assert outcome.path is not None
    ks = sk.kernels_from_bench(load_run(outcome.path), "mlp", str(outcome.path))
    assert ks.budget_s == 4.0 and ks.timing_s is not None and ks.timing_s > 0
    for c in outcome.record.cases:
        assert c.policy is not None and 0 < c.policy["budget_s"] <= bench.BENCH_BUDGET_S
    assert "within a 4 s budget" in ks.budget_text()


def test_the_shared_worker_runs_the_cases_in_one_process_and_survives_a_failed_case() -> None:
    worker = SharedWorker(1)
    try:
        with pytest.raises(GcbenchError, match="TypeError"):
            worker.run({"label": "bad", "name": "none", "no_such_argument": 1})
        assert worker.proc is not None
        pid = worker.proc.pid
        args = {"name": "topk", "params": {}, "label": "topk", "numel": None, "repeats": 2, "warmup": 0, "threads": 1,
                "device": "cpu", "seed": 0, "model": "mlp", "max_rounds": 3, "budget_s": 0.5}
        rec = worker.run(args)
        assert rec["label"] == "topk" and rec["model"] == "mlp" and rec["policy"]["budget_s"] == 0.5
        assert worker.proc.pid == pid  # the same process: its start is paid once per sweep
    finally:
        worker.close()
    assert worker.proc is not None and worker.proc.returncode == 0


def _kernels(budget: float | None = 5.0) -> sk.KernelSet:
    return sk.KernelSet("mlp", "cpu", "test", "test.json", (
        sk.StepKernels("none", "none", 1e-3, 1e-3, 1e-3, 2e6, 2e6),
        sk.StepKernels("bf16", "bf16", 1e-3, 1e-3, 1e-3, 1e6 + 78, 2e6),
        sk.StepKernels("topk", "topk", 1e-3, 1e-4, 1e-3, 4e4, 2e6, flags=(bench.CUT_SHORT,),
                        reasons=("compress cut short (the sweep's time budget left 0.1 s)",))), budget, 4.2)


def test_advise_times_the_default_candidates_within_its_budget_and_says_so(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_measure(model: str, specs: list[str], out_dir: Path, **kw: Any) -> sk.KernelSet:
        seen.update(specs=list(specs), budget=kw.get("budget_s"))
        return _kernels(kw.get("budget_s"))

    monkeypatch.setattr(inp, "measure_kernels", fake_measure)
    r = runner.invoke(app, ["advise", "--model", "mlp", "--compute-ms", "5", "--workers", "16", "--bandwidth", "1",
                            "--out", str(tmp_path), "--budget", "5"])
    assert r.exit_code == 0, r.output
    assert seen["budget"] == 5.0 and seen["specs"] == list(inp.default_candidates(single_worker_compressors()).specs)
    text = " ".join(r.stdout.split())
    assert "within a 5 s budget" in text and "took 4 s" in text and "1 of 3 cut short by it (flagged *: topk)" in text
    assert "left out: " in text and "fp16" in text.split("left out: ")[1]
    r = runner.invoke(app, ["advise", "--model", "mlp", "--compute-ms", "5", "--workers", "16", "--bandwidth", "1",
                            "--out", str(tmp_path), "--all", "--remeasure"])
    assert r.exit_code == 0, r.output
    assert seen["specs"] == single_worker_compressors() and seen["budget"] == inp.KERNEL_BUDGET_S


@pytest.mark.parametrize(("args", "words"), [
    (["--budget", "0"], "--budget must be a positive number"),
    (["--budget", "nan"], "--budget must be a positive number"),
    (["--all", "-c", "topk"], "give one of them"),
])
def test_a_bad_budget_or_all_with_c_is_one_line(args: list[str], words: str, tmp_path: Path) -> None:
    r = runner.invoke(app, ["advise", "--model", "mlp", "--out", str(tmp_path), *args])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 1 and len(lines) == 1 and words in lines[0], r.output


def test_the_fp32_row_is_the_reference_step_whatever_none_measured() -> None:
    """The audit's item 4: the sentence priced fp32 by DDP's copies while the table priced the ``none`` row by its own
    disturbed ×copy, so the table showed fp32 at 1.22× the bf16 all-reduce the sentence called faster.  One price now."""
    ks = sk.KernelSet("m", "cpu", "test", "", (
        sk.StepKernels("none", "none", 1e-3, 1e-3, 1e-3, 4e6, 4e6, compress_x_copy=0.3, decompress_x_copy=0.3),
        sk.StepKernels("bf16", "bf16", 1e-3, 1e-3, 1e-3, 2e6 + 13, 4e6, compress_x_copy=2.5, decompress_x_copy=2.0),
        sk.StepKernels("topk", "topk", 1e-3, 1e-4, 1e-3, 8e4, 4e6, compress_x_copy=3.0, decompress_x_copy=0.1)))
    a = adv.advise_kernels(ks, 0.005, [16], [1, 100], 5e-6)
    for sc in a.scenarios:
        none = next(s for s in sc.steps if s.label == "none")
        bf16 = next(s for s in sc.steps if s.label == "bf16")
        assert none.step_s == sc.reference_step_s and none.speedup == 1.0
        assert none.communicate_s == sc.reference_communicate_s and none.compress_s == none.decompress_s == 1e-3
        assert bf16.step_s == sc.bf16_step_s and bf16.speedup_bf16 == 1.0
        assert none.speedup_bf16 == pytest.approx(sc.bf16_step_s / sc.reference_step_s)  # the line's two steps, as the row


def test_a_bf16_or_fp16_payload_is_not_larger_than_bf16s() -> None:
    """bf16's own row carried the "larger than bf16's payload" mark: its payload is half the dense bytes plus its headers."""
    dense = 4 * 535818
    bf16_payload = dense / 2 + 13 * 6  # the mlp's six tensors, a 13-byte header each
    assert not larger_than_bf16(bf16_payload, dense) and larger_than_bf16(dense, dense)
    assert "larger" not in bf16_text(dense / bf16_payload) and "larger" in bf16_text(BF16_RATIO * 0.9)
    assert not BaselineBytes("fp16", 40013, 80000).larger_than_bf16 and BaselineBytes("none", 80013, 80000).larger_than_bf16
    k = sk.StepKernels("bf16", "bf16", 1e-3, 1e-3, 1e-3, bf16_payload, dense)
    assert not k.larger_than_bf16 and not adv.predict_step(k, 16, pnet.Network(1, 5e-6), 0.01).larger_than_bf16
