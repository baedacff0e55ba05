"""This machine's spread between processes: pooled from a ``bench --processes`` file, found by machine and age."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gcbench.results.parse import parse_record
from gcbench.results.process_spread import BUILT_IN, MIN_DF, PROCESS_LOG_SD, machine_spread, of_case, spread_of
from gcbench.results.record import Environment

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CREATED = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def _bench(medians: dict[tuple[str, int], dict[str, list[float]]], *, cpu_model: str = "AMD EPYC") -> dict[str, Any]:
    """The golden bench file with the given per-process ×copy medians ((compressor, numel) → kernel → medians)."""
    data = json.loads((GOLDEN / "bench_small.json").read_text(encoding="utf-8"))
    data["created_utc"] = CREATED.isoformat()
    data["status"] = "complete"
    data["environment"]["cpu_model"] = cpu_model
    for c in data["cases"]:
        for kernel, values in medians.get((c["compressor"], c.get("numel")), {}).items():
            c.setdefault("x_copy", {})[kernel] = {"median": float(np.median(values)), "process_medians": values}
            c["processes"] = len(values)
    return data


# four timings of three processes each: 8 degrees of freedom; one of five processes: 4 more
MEDIANS = {("topk", 100_000): {"compress": [10.0, 11.0, 12.5], "decompress": [2.0, 2.1, 1.9]},
           ("topk", 1_000_000): {"compress": [8.0, 8.4, 7.7], "decompress": [1.5, 1.45, 1.6]},
           ("signsgd", 100_000): {"compress": [3.0, 3.3, 2.9, 3.1, 3.6]}}


def test_the_spread_is_the_pooled_sd_of_log_process_medians() -> None:
    spread = spread_of(parse_record(_bench(MEDIANS)))
    assert spread is not None
    logs = [np.log(v) for kernels in MEDIANS.values() for v in kernels.values()]
    pooled = math.sqrt(sum(((x - x.mean()) ** 2).sum() for x in logs) / sum(len(x) - 1 for x in logs))
    assert spread.log_sd == pytest.approx(pooled, rel=1e-12)
    # one timing alone: its sample sd, as numpy computes it
    assert spread_of(parse_record(_bench({("signsgd", 100_000): MEDIANS[("signsgd", 100_000)]}))).log_sd == pytest.approx(
        float(np.std(np.log([3.0, 3.3, 2.9, 3.1, 3.6]), ddof=1)), rel=1e-12)
    assert (spread.df, spread.timings, spread.processes) == (12, 5, 5)


def test_a_bench_in_one_process_measures_no_spread() -> None:
    assert spread_of(parse_record(_bench({}))) is None


def _write(runs: Path, stem: str, data: dict[str, Any]) -> Path:
    runs.mkdir(exist_ok=True)
    path = runs / f"{stem}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_the_newest_bench_of_this_machine_with_enough_df_is_found(tmp_path: Path) -> None:
    here = parse_record(_bench({})).env.machine_key()
    older = _write(tmp_path, "20261202T090000Z-bench", _bench(MEDIANS))
    _write(tmp_path, "20261202T093000Z-bench", _bench(MEDIANS, cpu_model="Other CPU"))  # another machine
    few = {("topk", 100_000): {"compress": [10.0, 11.0, 12.5]}}  # 2 df: too few to stand for the machine
    _write(tmp_path, "20261202T094000Z-bench", _bench(few))
    _write(tmp_path, "20261202T095000Z-run", {"not": "a bench"})  # not a bench file: never loaded
    (tmp_path / "20261202T095500Z-bench.json").write_text("{broken", encoding="utf-8")  # unreadable: skipped
    found = machine_spread(tmp_path, here, now=CREATED + timedelta(hours=1))
    assert found is not None and found.path == older and found.df >= MIN_DF
    assert machine_spread(tmp_path, Environment(cpu_model="Third").machine_key(), now=CREATED) is None
    assert machine_spread(tmp_path, here, now=CREATED + timedelta(days=8)) is None  # a week on: measure again
    assert machine_spread(tmp_path / "missing", here) is None
    # a GPU's kernels spread otherwise: a CPU bench does not stand for a CUDA run's timings on the same machine
    assert machine_spread(tmp_path, here, "cuda:0", now=CREATED + timedelta(hours=1)) is None
    assert machine_spread(tmp_path, here, "cpu", now=CREATED + timedelta(hours=1)) == found


def test_a_case_without_a_recorded_spread_gets_the_built_in_one() -> None:
    from gcbench.results.parse import as_case

    data: dict[str, Any] = {"label": "a", "status": "ok", "source": {"name": "s", "label": "s"}, "timing": {}}
    assert of_case(as_case(data)) == BUILT_IN and BUILT_IN.log_sd == PROCESS_LOG_SD and not BUILT_IN.measured
    data["timing"]["process_spread"] = {"log_sd": 0.05, "df": 20, "timings": 10, "processes": 3, "file": "r/b.json"}
    got = of_case(as_case(data))
    assert got.measured and got.log_sd == 0.05 and got.to_dict() == data["timing"]["process_spread"]
