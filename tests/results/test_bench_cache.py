"""advise reuses a recent bench of the same model, compressors, machine and gcbench version (issue 33 item 3)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gcbench.measure.bench import bench_to_file
from gcbench.predict import compute_time as ctime
from gcbench.predict import inputs as inp
from gcbench.results.bench_cache import MAX_AGE_S, find_recent_bench
from gcbench.results.store import named_time


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real whole-model bench (mlp; none and fp16), as ``gcbench advise`` measures it."""
    d = tmp_path_factory.mktemp("runs")
    bench_to_file(["none", "fp16"], [], d, repeats=1, warmup=1, model="mlp", isolate=False, max_rounds=5)
    return d


def _only_file(d: Path) -> Path:
    (f,) = d.glob("*.json")
    return f


def _edited(src: Path, dst: Path, edit: dict) -> Path:
    dst.mkdir()
    data = json.loads(_only_file(src).read_text(encoding="utf-8"))
    for key, value in edit.items():
        if isinstance(value, dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    (dst / _only_file(src).name).write_text(json.dumps(data), encoding="utf-8")
    return dst


def test_a_recent_bench_of_the_same_compressors_is_found(bench_dir: Path) -> None:
    found = find_recent_bench("mlp", ["fp16", "none"], bench_dir)
    assert found is not None and found[1] == _only_file(bench_dir) and 0 <= found[2] < 600
    assert find_recent_bench("mlp", ["fp16"], bench_dir) is not None  # a subset is covered


@pytest.mark.parametrize(("model", "specs"), [("mlp", ["topk"]), ("mlp", ["fp16", "qsgd"]), ("smallcnn", ["fp16"])])
def test_a_bench_that_did_not_measure_what_is_asked_is_not_reused(bench_dir: Path, model: str, specs: list[str]) -> None:
    assert find_recent_bench(model, specs, bench_dir) is None


def test_other_parameters_are_another_compressor(bench_dir: Path, tmp_path: Path) -> None:
    data = json.loads(_only_file(bench_dir).read_text(encoding="utf-8"))
    assert data["cases"] and all(c["params"] == {} for c in data["cases"])
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(_only_file(bench_dir), runs)
    assert find_recent_bench("mlp", ["topk:density=0.1"], runs) is None


def test_an_old_bench_another_machine_or_version_is_measured_anew(bench_dir: Path, tmp_path: Path) -> None:
    later = datetime.now(UTC) + timedelta(seconds=MAX_AGE_S + 60)
    assert find_recent_bench("mlp", ["fp16"], bench_dir, now=later) is None
    other_cpu = _edited(bench_dir, tmp_path / "cpu", {"environment": {"cpu_model": "Some Other CPU"}})
    assert find_recent_bench("mlp", ["fp16"], other_cpu) is None
    other_version = _edited(bench_dir, tmp_path / "version", {"gcbench_version": "0.0.1"})
    assert find_recent_bench("mlp", ["fp16"], other_version) is None
    unfinished = _edited(bench_dir, tmp_path / "status", {"status": "running"})
    assert find_recent_bench("mlp", ["fp16"], unfinished) is None


def test_a_broken_file_beside_it_is_skipped(bench_dir: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(_only_file(bench_dir), runs)
    (runs / "99991231T000000Z-bench.json").write_text("{not json", encoding="utf-8")  # newest by name
    assert find_recent_bench("mlp", ["none"], runs) is not None


def test_advise_reuses_the_kernels_and_the_compute_stored_with_them(bench_dir: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    path = runs / _only_file(bench_dir).name
    shutil.copy(_only_file(bench_dir), path)
    ctime.store_compute(path, "mlp", ctime.ComputeTiming(0.0123, (0.012, 0.0123, 0.013)))
    step = inp.step_inputs("mlp", ["none", "fp16"], runs)
    assert "reused" in step.kernels.origin and str(path) in step.kernels.origin and "--remeasure" in step.kernels.origin
    assert step.compute_s == 0.0123 and "reused kernels" in step.compute_origin
    assert {k.compressor for k in step.kernels.kernels} == {"none", "fp16"}
    again = inp.step_inputs("mlp", ["none", "fp16"], runs)
    assert again == step  # back to back: the same kernels and compute, so the same answer


def test_the_sentence_says_compute_is_this_machines_unless_given() -> None:
    from gcbench.predict.advise import advise_kernels
    from gcbench.predict.advise_text import summaries
    from gcbench.predict.step_kernels import KernelSet, StepKernels

    ks = KernelSet("mlp", "cpu", "test machine", "test", (
        StepKernels("none", "none", 1e-3, 1e-3, 1e-3, 4e6, 4e6, (), 1, ()),
        StepKernels("fp16", "fp16", 1e-3, 1e-3, 1e-3, 2e6, 4e6, (), 1, ())))
    local = advise_kernels(ks, 0.01, [16], [1.0], 5e-6, compute_origin="measured on this machine's CPU")
    given = advise_kernels(ks, 0.01, [16], [1.0], 5e-6, compute_origin="given")
    assert "this machine's 10.0 ms a step" in summaries(local)[0] and "--compute-ms" in summaries(local)[0]
    assert "this machine" not in summaries(given)[0]


def test_a_fresh_compute_time_far_from_the_last_stored_one_is_flagged_drifted(bench_dir: Path, tmp_path: Path) -> None:
    """Each measurement steady alone, the machine's speed moved between runs: the answer must say so (issue 34 item 27)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    src = _only_file(bench_dir)
    # by name: the stored one sorts first (named a second before the bench, as gcbench names the files it writes)
    older, newer = runs / f"{named_time(src) - timedelta(seconds=1):%Y%m%dT%H%M%SZ}-bench.json", runs / src.name
    shutil.copy(src, older)
    shutil.copy(src, newer)
    ctime.store_compute(older, "mlp", ctime.ComputeTiming(0.5, (0.5, 0.5, 0.5)))  # 500 ms: far from the mlp's step here
    step = inp.step_inputs("mlp", ["none", "fp16"], runs)  # reuses `newer` (no compute stored): measures compute afresh
    assert str(newer) in step.kernels.origin
    assert any(r.startswith("drifted:") and "500 ms in the bench of" in r for r in step.compute_flags)


def test_against_previous_keeps_a_time_within_ten_percent() -> None:
    near = ctime.against_previous(ctime.ComputeTiming(1.35e-3, (1.35e-3,)), ctime.ComputeTiming(1.30e-3, (1.30e-3,)), "x")
    assert near.flags == () and near.reasons == ()
    far = ctime.against_previous(ctime.ComputeTiming(1.8e-3, (1.8e-3,)), ctime.ComputeTiming(1.3e-3, (1.3e-3,)), "the bench of 3 min ago")
    assert far.flags == ("drifted",) and "1.8 ms per step now, 1.3 ms in the bench of 3 min ago (+38%" in far.reasons[0]
    assert ctime.against_previous(far, None, "x") is far
