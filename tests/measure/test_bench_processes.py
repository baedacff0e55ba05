"""``bench --processes``: N records of one case made one, and the progress of N passes counted as one sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gcbench.core.errors import GcbenchError
from gcbench.measure.bench_processes import merge_passes, merge_processes, passes_progress
from gcbench.results.bench_record import BenchCase


def _rec(x_med: float, samples: list[float], flags: list[str] | None = None, gbps: float = 2.0) -> dict[str, Any]:
    copy_s = [0.001 * (1 + i / 100) for i in range(len(samples))]
    return {
        "compressor": "topk", "label": "topk", "params": {}, "version": 1, "numel": 1000, "shape": [1000], "threads": 2,
        "device": "cpu", "copy": {"median_s": float(np.median(copy_s)), "iqr_s": 0.0, "samples_s": copy_s, "warmup": 1},
        "compress": {"median_s": 0.001 * x_med, "iqr_s": 0.0, "samples_s": [0.001 * v for v in samples], "warmup": 1},
        "decompress": {"median_s": 0.002, "iqr_s": 0.0, "samples_s": [0.002] * len(samples), "warmup": 1},
        "compress_x_copy": x_med, "decompress_x_copy": 2.0,
        "x_copy": {"compress": {"median": x_med, "samples": samples, "flags": flags or [], "rounds": len(samples),
                                "reasons": {f: f"why {f}" for f in flags or []}, "stopped": "stable"},
                   "decompress": {"median": 2.0, "samples": [2.0] * len(samples), "flags": [], "rounds": len(samples)}},
        "gbps_compress": gbps, "gbps_decompress": 4.0, "traffic_bound": 0.5, "x_bound": x_med / 0.5,
        "load_per_core": 0.1, "foreign_cpu": 0.05, "peak_extra_bytes": 100.0, "ratio": 60.0, "input_bytes": 4000,
    }


def test_merge_takes_the_median_of_the_process_medians_and_keeps_them() -> None:
    recs = [_rec(10.0, [9.0, 10.0, 11.0]), _rec(14.0, [13.0, 14.0, 15.0], gbps=1.5), _rec(12.0, [11.5, 12.0, 12.5], gbps=1.8)]
    m = merge_processes(recs)
    assert m["processes"] == 3
    assert m["compress_x_copy"] == 12.0 and m["x_copy"]["compress"]["median"] == 12.0
    assert m["x_copy"]["compress"]["process_medians"] == [10.0, 14.0, 12.0]
    assert (m["x_copy"]["compress"]["ci_lo"], m["x_copy"]["compress"]["ci_hi"]) == (10.0, 14.0)  # 3 medians: their range
    assert len(m["x_copy"]["compress"]["samples"]) == 9 and m["x_copy"]["compress"]["rounds"] == 9
    assert len(m["compress"]["samples_s"]) == 9 and m["compress"]["median_s"] == pytest.approx(0.012)
    assert m["gbps_compress"] == 1.8 and m["x_bound"] == pytest.approx(24.0)
    case = BenchCase.model_validate(m)  # what the results file holds reads back, and the comparison sees 3 processes
    assert case.process_medians("compress") == [10.0, 14.0, 12.0] and case.processes == 3
    assert recs[0]["compress_x_copy"] == 10.0  # the inputs are not changed


def test_a_flag_of_most_processes_is_kept_and_a_lone_one_is_not() -> None:
    lone = merge_processes([_rec(10.0, [10.0], ["unstable"]), _rec(10.0, [10.0]), _rec(10.0, [10.0])])
    assert lone["x_copy"]["compress"]["flags"] == []
    most = merge_processes([_rec(10.0, [10.0]), _rec(10.0, [10.0], ["unstable"]), _rec(10.0, [10.0], ["unstable"])])
    assert most["x_copy"]["compress"]["flags"] == ["unstable"]
    assert most["x_copy"]["compress"]["reasons"]["unstable"] == "2 of 3 processes; process 2: why unstable"


def test_a_case_that_failed_in_any_process_failed() -> None:
    m = merge_processes([_rec(10.0, [10.0]), {"compressor": "topk", "label": "topk", "error": "MemoryError: boom"}])
    assert m["error"] == "process 2 of 2: MemoryError: boom" and m["processes"] == 2


def test_one_process_is_the_record_itself_and_passes_merge_case_by_case() -> None:
    r = _rec(10.0, [10.0])
    assert merge_processes([r]) == r and "processes" not in merge_processes([r])
    merged = merge_passes([[_rec(10.0, [10.0]), _rec(3.0, [3.0])], [_rec(12.0, [12.0]), _rec(5.0, [5.0])]])
    assert [m["x_copy"]["compress"]["process_medians"] for m in merged] == [[10.0, 12.0], [3.0, 5.0]]
    assert merge_passes([]) == []


def test_passes_report_one_plan_and_one_count_over_every_pass() -> None:
    seen: list[tuple[str, int, int, str]] = []

    def progress(stage: str, i: int, total: int, text: str) -> None:
        seen.append((stage, i, total, text))

    plan = json.dumps({"stage": "bench", "labels": ["a", "b"], "case_work": [1, 2]})
    for p in range(2):
        report = passes_progress(progress, p, 2)
        assert report is not None
        report("plan", 0, 2, plan)
        report("bench", 0, 2, "a @ 1")
        report("bench", 1, 2, "b @ 1")
        report("bench", 2, 2, "done")
    assert seen[0][:3] == ("plan", 0, 4) and json.loads(seen[0][3])["case_work"] == [1, 2, 1, 2]
    assert [s[1:3] for s in seen[1:]] == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    assert seen[3][3] == "a @ 1 (process 2/2)" and seen[-1][3] == "done"
    assert passes_progress(None, 0, 2) is None


def test_bench_to_file_times_each_case_in_fresh_processes(tmp_path: Path) -> None:
    from gcbench.measure.bench import bench_to_file

    out = bench_to_file(["signsgd"], [1000], tmp_path, repeats=1, warmup=0, threads=1, max_rounds=1, processes=2)
    (case,) = out.record.cases
    assert isinstance(case, BenchCase) and case.ok and case.processes == 2
    assert len(case.process_medians("compress")) == 2 and len(case.process_medians("decompress")) == 2
    assert case.compress_x_copy == pytest.approx(float(np.median(case.process_medians("compress"))))
    with pytest.raises(GcbenchError, match="--processes"):
        bench_to_file(["signsgd"], [1000], tmp_path, repeats=1, isolate=False, processes=2)


def test_bench_baseline_regressions_are_the_comparisons_worse_rows(tmp_path: Path) -> None:
    from gcbench.measure.bench import bench_to_file

    # threads as the machine has them: in this process a file's environment records the threads torch runs with
    first = bench_to_file(["signsgd"], [1000], tmp_path / "a", repeats=3, warmup=1, threads=2, max_rounds=3, isolate=False)
    assert first.path is not None
    data = json.loads(first.path.read_text(encoding="utf-8"))
    # the baseline 20 times faster, then 20 times slower, than the first run (1 round at 1K moves by less than 10×)
    for factor, regressed in ((20.0, True), (0.05, False)):
        case = data["cases"][0]
        fast = {**case, "compress_x_copy": case["compress_x_copy"] / factor, "x_copy": None}
        base = tmp_path / f"base{factor}.json"
        base.write_text(json.dumps({**data, "cases": [fast]}), encoding="utf-8")
        out = bench_to_file(["signsgd"], [1000], tmp_path / "b", repeats=3, warmup=1, threads=2, max_rounds=3,
                            isolate=False, baseline=base, threshold=0.05)
        assert out.compared == 1
        assert [c.name for c in out.regressions] == (["signsgd"] if regressed else [])
        assert any("one process a side" in n for n in out.notes)
