"""The typed results record (gcbench.results.record): round trip, versions and upgrades, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gcbench.core.errors import ResultsError
from gcbench.results import record
from gcbench.results.bench_record import BenchRecord
from gcbench.results.parse import parse_record
from gcbench.results.run_record import MeasureRecord, RunCase
from gcbench.results.store import RunWriter, load_run
from gcbench.results.train_record import TrainRecord

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
FILES = [*(GOLDEN / f"{n}.json" for n in ("run_base", "run_new", "run_other_machine", "train_digits", "bench_small")),
         *sorted((ROOT / "baselines" / "reference").glob("*.json"))]


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_stored_file_loads_and_dumps_back_to_the_same_json(path: Path) -> None:
    """Field names are the JSON names: a record of a file is that file again (unknown fields kept, ints stay ints)."""
    rec = load_run(path)
    assert rec.to_json_dict() == _json(path)
    assert type(rec) is {"run": MeasureRecord, "compare": MeasureRecord, "train": TrainRecord, "bench": BenchRecord}[rec.kind]


def test_cases_are_typed_by_the_files_kind() -> None:
    run = load_run(GOLDEN / "run_base.json")
    case = next(c for c in run.cases if c.label == "topk")
    assert isinstance(case, RunCase)
    assert case.metric("ratio") == case.size.ratio and case.metric("q") == case.fidelity.q.model
    assert case.metric("compress_s") == case.timing.compress.median_s
    assert case.samples("compress_s") == case.timing.compress.samples_s
    assert case.metric("no such metric") is None
    train = load_run(GOLDEN / "train_digits.json")
    assert train.cases[0].training.step_time.total_s == train.cases[0].metric("step_total_s")
    bench = load_run(GOLDEN / "bench_small.json")
    assert bench.cases[0].copy_.median_s > 0 and "copy" in bench.cases[0].to_json_dict()  # the JSON name is "copy"


def test_writer_round_trip(tmp_path: Path) -> None:
    """What RunWriter writes (typed cases or dicts validated into them) loads back as the same record."""
    golden = _json(GOLDEN / "run_base.json")
    w = RunWriter(tmp_path, {"name": "rt", "seed": 0}, "abcdef123456", "suites/rt.toml", "cpu")
    typed = RunCase.model_validate(golden["cases"][3])
    w.add_case(typed)
    w.add_case(golden["cases"][4])
    w.finish("complete")
    assert w.path is not None
    loaded = load_run(w.path)
    assert loaded == w.record
    assert loaded.to_json_dict() == _json(w.path)
    assert [c.label for c in loaded.cases] == [golden["cases"][3]["label"], golden["cases"][4]["label"]]
    assert loaded.cases[0] == typed and loaded.run_id == w.path.stem and loaded.finished
    assert loaded.environment is not None and loaded.environment.machine_key().count("|") == 3


def test_interleaved_timing_fields_round_trip_and_older_timings_still_read(tmp_path: Path) -> None:
    """The timing block of interleaved timing (x-copy spread, flags, load, policy) is written and read back as it was;
    a case from before it reads its x-copy from the copy fraction."""
    from gcbench.measure.copy_baseline import timing_summary
    from gcbench.measure.timing import BEATS_BOUND, Interleaved, TimingPolicy

    timed = Interleaved([1.0, 1.0, 1.0], {"compress": [0.1, 0.1, 0.1], "decompress": [2.0, 2.2, 2.4]}, 1, "stable", 0.4)
    timing = timing_summary(1000, "cpu", 2, timed, traffic_bytes=4.0, policy=TimingPolicy())
    golden = _json(GOLDEN / "run_base.json")
    w = RunWriter(tmp_path, {"name": "rt", "seed": 0}, "", None, "cpu")
    w.add_case({**golden["cases"][3], "timing": timing})
    w.finish("complete")
    assert w.path is not None
    case = load_run(w.path).cases[0]
    assert isinstance(case, RunCase) and case.to_json_dict()["timing"] == timing
    assert case.timing.compress_x_copy.flags == [BEATS_BOUND] and case.timing.load_per_core == 0.4
    assert case.metric("comp_over_copy") == pytest.approx(0.1) and case.samples("comp_over_copy") == pytest.approx([0.1] * 3)
    assert case.metric("decomp_over_copy") == pytest.approx(2.2)
    old = RunCase.model_validate(golden["cases"][3])
    assert old.timing is not None and old.timing.compress_x_copy is None  # written before interleaved timing
    assert old.metric("comp_over_copy") == pytest.approx(1 / old.timing.copy_fraction_compress)
    assert old.samples("comp_over_copy") == []


def test_writer_refuses_a_case_that_does_not_fit(tmp_path: Path) -> None:
    w = RunWriter(tmp_path, {"name": "bad"}, "", None, "cpu")
    with pytest.raises(ResultsError, match=r"size\.ratio: expected a number"):
        w.add_case({"label": "x", "status": "ok", "size": {"ratio": "many"}})
    assert w.path is None and list(tmp_path.iterdir()) == []


def test_a_schema_1_file_is_upgraded_before_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a schema 2 that renames a field, a schema-1 file goes through UPGRADES[1] and validates as schema 2."""

    def rename(data: dict[str, Any]) -> dict[str, Any]:
        data["created"] = data.pop("created_utc")
        return data

    monkeypatch.setattr(record, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(record.UPGRADES, 1, rename)
    rec = parse_record(_json(GOLDEN / "run_base.json"))
    assert rec.schema_version == 2 and rec.created_utc is None
    assert rec.extra("created") == "2026-01-05T10:00:00+00:00"


def test_a_newer_schema_is_one_clear_error() -> None:
    path = GOLDEN / "newer_schema.json"
    with pytest.raises(ResultsError) as info:
        load_run(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and "schema 99" in text and "upgrade gcbench" in text and "\n" not in text


@pytest.mark.parametrize(("case", "where"), [
    ({"fidelity": {"q": {"model": "small"}}}, "cases[0].fidelity.q.model: expected a number, got a string"),
    ({"layers": [{"name": "a"}, {"name": 3}]}, "cases[0].layers[1].name: expected a string, got a number"),
    ({"flags": {"biased": "yes"}}, "cases[0].flags.biased: expected a boolean"),
    ({"traffic": {"push": []}}, "cases[0].traffic.push: expected an object, got a list"),
    ({"aggregate": {"per_step_q": [0.1, True]}}, "cases[0].aggregate.per_step_q[1]: expected a number, got a boolean"),
    ({"timing": {"compress_x_copy": {"flags": [1]}}}, "cases[0].timing.compress_x_copy.flags[0]: expected a string"),
])
def test_a_malformed_field_is_named_by_its_path(tmp_path: Path, case: dict[str, Any], where: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**_json(GOLDEN / "run_base.json"), "cases": [{"label": "a", "status": "ok", **case}]}))
    with pytest.raises(ResultsError) as info:
        load_run(path)
    assert str(info.value).startswith(f"{path}: not a valid gcbench results file: {where}")
    assert "\n" not in str(info.value)


def test_a_train_file_holds_train_cases_only(tmp_path: Path) -> None:
    """The case model follows the file's kind: a bench record in a train file is refused by its missing label."""
    data = _json(GOLDEN / "train_digits.json")
    data["cases"] = [_json(GOLDEN / "bench_small.json")["cases"][0]]
    with pytest.raises(ResultsError, match=r"cases\[0\]: missing field 'label'"):
        parse_record(data)
