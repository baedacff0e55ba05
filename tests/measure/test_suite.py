"""Suite validation: every error names the file, key, bad value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcbench.core.errors import GcbenchError
from gcbench.measure.suite import SUITE_DIR, load_suite, measurement_suites, parse_suite
from gcbench.measure.suite_options import apply_overrides

GOOD = {
    "name": "t",
    "sources": [{"kind": "synthetic", "shapes": [[10, 10]]}],
    "compressors": [{"name": "topk"}, {"name": "topk", "params": {"density": 0.5}}, {"name": "qsgd", "label": "q"}],
}


def _err(data: dict, where: str = "x.toml") -> str:
    with pytest.raises(GcbenchError) as ei:
        parse_suite(data, where)
    return str(ei.value)


def test_good_suite_resolves_labels() -> None:
    s = parse_suite(GOOD)
    assert s.labels() == ["topk", "topk(density=0.5)", "q"]
    assert len(s.hash()) == 16


def test_param_range_error_has_the_documented_form() -> None:
    data = {**GOOD, "compressors": [{"name": "none"}, {"name": "none"}, {"name": "topk", "params": {"density": 5}}]}
    data["compressors"][1] = {"name": "fp16"}
    assert _err(data, "suites/x.toml") == "suites/x.toml: compressors[2].params.density: must be in (0, 1], got 5"


def test_unknown_compressor_and_param_suggest() -> None:
    assert "did you mean 'qsgd'" in _err({**GOOD, "compressors": [{"name": "qsdg"}]})
    assert "did you mean 'density'" in _err({**GOOD, "compressors": [{"name": "topk", "params": {"densty": 0.1}}]})


def test_schema_errors_name_the_key() -> None:
    msg = _err({**GOOD, "metrics": {"repeats": 0}})
    assert msg.startswith("x.toml: metrics.repeats:") and "got 0" in msg
    assert "unknown key" in _err({**GOOD, "granularty": "layer"})
    assert "sources[0]" in _err({**GOOD, "sources": [{"kind": "synthetic"}]})
    assert "'topk' is already used by compressors[0]" in _err({**GOOD, "compressors": [{"name": "topk"}, {"name": "topk"}]})


def test_malformed_toml(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("name = \n[[compressors]\n")
    with pytest.raises(GcbenchError, match=r"bad\.toml: not valid TOML"):
        load_suite(p)


def test_missing_file_lists_bundled() -> None:
    with pytest.raises(GcbenchError, match="not found"):
        load_suite("no/such/suite.toml")


def test_overrides_win() -> None:
    s = apply_overrides(parse_suite(GOOD), seed=7, repeats=3, workers=2, steps=3, compressors=[("signsgd", {})])
    assert s.seed == 7 and s.metrics.repeats == 3 and s.sources[0].workers == 2 and s.sources[0].steps == 3
    assert s.labels() == ["signsgd"]
    t = apply_overrides(parse_suite(GOOD), trace="traces/x")
    assert t.sources[0].kind == "trace" and t.sources[0].path == "traces/x"


@pytest.mark.parametrize("path", measurement_suites(), ids=lambda p: p.stem)
def test_bundled_suites_validate(path: Path) -> None:
    s = load_suite(path)
    assert s.compressors and s.sources


# ----------------------------------------------------------------------------- issue 34: suites and inputs


def _write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_deeply_nested_toml_is_one_error(tmp_path: Path) -> None:
    # tomllib recurses per nesting level: 5000 levels were a RecursionError traceback
    p = _write(tmp_path, 'name = "x"\na = ' + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(GcbenchError, match=r"s\.toml: not valid TOML: arrays or tables nested too deeply"):
        load_suite(p)


@pytest.mark.parametrize(("key", "value", "where"), [
    ("bucket_mb", 1e308, "bucket_mb: must be in (0, 65536], got 1e+308"),
    ("seed", 2**64, "seed: must be in [0, 9223372036854775807], got"),
    ("metrics.threads", 100000, "metrics.threads: must be in [1, 1024], got 100000"),
    ("sources.lr", 1e300, "sources[0].lr: must be in [0, 1000], got 1e+300"),
    ("sources.scale", 1e300, "sources[0].scale: must be in [1e-30, 1e+38], got 1e+300"),
    ("sources.df", 0.01, "sources[0].df: must be in [1, 1e+06], got 0.01"),
    ("sources.warmup_steps", 10**9, "sources[0].warmup_steps: must be in [0, 100000]"),
    ("sources.batch_size", 10**9, "sources[0].batch_size: must be in [1, 4096]"),
    ("sources.image_size", 10**6, "sources[0].image_size: must be in [8, 1024]"),
    ("metrics.timing_steps", 10**9, "metrics.timing_steps: must be in [0, 100000]"),
])
def test_numeric_keys_have_a_documented_range(key: str, value: float, where: str) -> None:
    data: dict = {**GOOD, "sources": [{"kind": "live", "model": "mlp"}], "metrics": {}}
    table, _, name = key.rpartition(".")
    if table == "sources":
        data["sources"][0][name] = value
    elif table == "metrics":
        data["metrics"][name] = value
    else:
        data[name] = value
    msg = _err(data)
    assert msg.startswith(f"x.toml: {where}"), msg
    assert "\n" not in msg


def test_a_synthetic_shape_of_more_than_32_dimensions_is_refused() -> None:
    msg = _err({**GOOD, "sources": [{"kind": "synthetic", "shapes": [[1] * 70]}]})
    assert msg == "x.toml: sources[0]: shapes: a tensor may have at most 32 dimensions, got 70"
    assert parse_suite({**GOOD, "sources": [{"kind": "synthetic", "shapes": [[1] * 32]}]}).sources[0].shapes


def test_a_synthetic_source_of_only_empty_tensors_is_refused() -> None:
    """`compare topk qsgd --shape 0x4` printed a table of 0.0× ratios and 0 GB/s: there was nothing to measure.  An
    empty tensor beside others stays a case (models have them)."""
    msg = _err({**GOOD, "sources": [{"kind": "synthetic", "shapes": [[0, 4], [0]]}]})
    assert msg == "x.toml: sources[0]: shapes: every tensor is empty ([[0, 4], [0]]): there is nothing to compress or time"
    assert parse_suite({**GOOD, "sources": [{"kind": "synthetic", "shapes": [[0, 4], [3]]}]}).sources[0].shapes == [[0, 4], [3]]


def test_synthetic_shapes_and_model_together_are_refused() -> None:
    # the results file said "(resnet50 shapes)" while the shapes were measured
    msg = _err({**GOOD, "sources": [{"kind": "synthetic", "shapes": [[10]], "model": "resnet50"}]})
    assert "takes 'shapes' or 'model'" in msg and "not both" in msg
    assert "'shapes' is for synthetic sources" in _err({**GOOD, "sources": [{"kind": "live", "model": "mlp", "shapes": [[3]]}]})
    assert parse_suite({**GOOD, "sources": [{"kind": "synthetic", "model": "mlp"}]}).sources[0].display() == "synthetic normal (mlp shapes)"


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_is_not_a_suite(device: str) -> None:
    if not Path(device).exists():
        pytest.skip(f"no {device} here")
    with pytest.raises(GcbenchError, match=rf"^{device}: not a regular file: a suite file must be a regular file, not a character device$"):
        load_suite(device)


def test_a_fifo_or_folder_is_not_a_suite(tmp_path: Path) -> None:
    import os
    import threading

    with pytest.raises(GcbenchError, match="must be a regular file, not a directory"):
        load_suite(tmp_path)
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    got: list[BaseException] = []

    def load() -> None:
        try:
            load_suite(fifo)
        except BaseException as exc:  # the test inspects it
            got.append(exc)

    t = threading.Thread(target=load, daemon=True)  # opening a FIFO blocked forever: the thread must finish
    t.start()
    t.join(30)
    assert not t.is_alive(), "reading a FIFO suite hangs"
    assert len(got) == 1 and "must be a regular file, not a FIFO" in str(got[0])


def test_a_huge_suite_file_is_refused_before_reading(tmp_path: Path) -> None:
    p = tmp_path / "big.toml"
    with p.open("wb") as f:
        f.truncate(5 << 30)  # sparse: 5 GiB that were read whole before
    with pytest.raises(GcbenchError, match=r"big\.toml: suite file is 5120\.0 MiB; gcbench reads at most 1\.0 MiB"):
        load_suite(p)


def test_list_valued_params_round_trip_between_the_command_line_and_toml(tmp_path: Path) -> None:
    from gcbench.compressors import registry

    # commas separate a spec's parameters, so lgc's channels could not be given on the command line
    name, params = registry.parse_spec("lgc:channels=8/16/32,window=512")
    assert (name, params) == ("lgc", {"channels": "8/16/32", "window": 512})
    cli = apply_overrides(parse_suite(GOOD), compressors=[(name, params)])
    for spelling in ("[8, 16, 32]", '"8/16/32"', '"8,16,32"'):  # the TOML list, the CLI text, the old comma string
        p = _write(tmp_path, f'name = "t"\n[[sources]]\nshapes = [[10, 10]]\n[[compressors]]\nname = "lgc"\n'
                             f"params = {{ channels = {spelling}, window = 512 }}\n")
        suite = load_suite(p)
        assert suite.labels() == ["lgc(channels=8/16/32,window=512)"] == cli.labels()
        assert suite.compressors == cli.compressors
    # the label is a spec the command line reads back
    assert registry.parse_spec(cli.labels()[0].replace("(", ":").rstrip(")")) == (name, params)
    for bad in ("[8, 0]", "[]", '"8/x"', "[1, 2, 3, 4, 5, 6, 7, 8, 9]", "[8.5]"):
        p = _write(tmp_path, f'name = "t"\n[[sources]]\nshapes = [[10, 10]]\n[[compressors]]\nname = "lgc"\n'
                             f"params = {{ channels = {bad} }}\n")
        with pytest.raises(GcbenchError, match=r"compressors\[0\]\.params\.channels: must be 1 to 8 ints in \[1, inf\) separated by '/'"):
            load_suite(p)
    with pytest.raises(GcbenchError, match="a list's items are separated by '/'"):
        registry.parse_spec("lgc:channels=8,16")


# ----------------------------------------------------------------------------- memory estimate (issue 34, item 9)

GIB = 2**30


def _machine(monkeypatch: pytest.MonkeyPatch, total: int, avail: int) -> None:
    from gcbench.measure import footprint

    monkeypatch.setattr(footprint, "machine_memory", lambda: (total, avail))


def test_a_suite_that_cannot_fit_the_machine_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from gcbench.measure.footprint import check_memory

    _machine(monkeypatch, 16 * GIB, 12 * GIB)
    # two 8 GiB synthetic tensors validated, then every case tried the allocation
    huge = parse_suite({**GOOD, "sources": [{"kind": "synthetic", "shapes": [[2**31], [2**31]], "workers": 2}]})
    with pytest.raises(GcbenchError) as ei:
        check_memory(huge, "x.toml")
    msg = str(ei.value)
    assert msg.startswith("x.toml: sources[0] (synthetic normal 2147483648 +1 tensors) needs at least ")
    assert "more than this machine's 16.0 GiB" in msg and "--force" in msg and "\n" not in msg
    forced = check_memory(huge, "x.toml", force=True)  # --force: the same line as a warning
    assert len(forced) == 1 and "more than this machine's 16.0 GiB" in forced[0]
    # a live zoo model whose input batch alone is 51 GB (smallcnn 1024×1024, batch 4096)
    zoo = parse_suite({**GOOD, "sources": [{"kind": "live", "model": "smallcnn", "image_size": 1024, "batch_size": 4096}]})
    with pytest.raises(GcbenchError, match=r"sources\[0\] \(live smallcnn\) needs at least .* the model and activations"):
        check_memory(zoo, "x.toml")


def test_the_bundled_suites_fit_a_16_gib_machine_and_a_tight_one_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    from gcbench.measure.footprint import check_memory

    _machine(monkeypatch, 16 * GIB, 16 * GIB)
    for path in measurement_suites():
        assert check_memory(load_suite(path), str(path)) == [], path
    _machine(monkeypatch, 16 * GIB, 1 * GIB)
    warnings = check_memory(load_suite(SUITE_DIR / "cnn.toml"), "cnn.toml")
    assert warnings and all("more than the 1.0 GiB available now" in w for w in warnings)


def test_the_estimate_cache_limit_is_the_runners(monkeypatch: pytest.MonkeyPatch) -> None:
    from gcbench.measure import footprint, source_data

    assert footprint._cache_limit() == source_data.CACHE_LIMIT_BYTES


def test_a_configuration_that_repeats_another_is_named() -> None:
    """Issue 33 item 9: cnn measured topk and topk@0.01 (density 0.01 is topk's default), six cases twice."""
    from gcbench.measure.suite import duplicate_configs, parse_suite

    s = parse_suite({"name": "dup", "sources": [{"kind": "synthetic", "shapes": [[8, 8]]}], "compressors": [
        {"name": "topk"}, {"name": "topk", "label": "topk@0.01", "params": {"density": 0.01}},
        {"name": "topk", "label": "topk@0.1", "params": {"density": 0.1}}, {"name": "dgc"},
        {"name": "dgc", "label": "dgc@0.001", "params": {"density": 0.001}}]})
    lines = duplicate_configs(s)
    assert len(lines) == 2
    assert "'topk@0.01' repeats 'topk'" in lines[0] and "'dgc@0.001' repeats 'dgc'" in lines[1]


def test_no_bundled_suite_measures_a_configuration_twice() -> None:
    from gcbench.measure.suite import duplicate_configs, load_suite, measurement_suites

    for path in measurement_suites():
        assert duplicate_configs(load_suite(path)) == [], path.name


def test_a_compressor_may_be_a_spec_string_as_on_the_command_line(tmp_path: Path) -> None:
    """`compressors = ["topk", "qsgd:s=7"]` was "Input should be a valid dictionary"; it reads as `-c` does, to the same
    suite as the tables (same hash), and a bad SPEC is one line naming the entry."""
    tables = parse_suite({**GOOD, "compressors": [{"name": "topk"}, {"name": "qsgd", "params": {"s": 7, "bucket": 512}},
                                                  {"name": "lgc", "params": {"channels": "8/16/32"}}]})
    strings = parse_suite({**GOOD, "compressors": ["topk", "qsgd:s=7,bucket=512", "lgc:channels=8/16/32"]})
    assert strings.labels() == tables.labels() and strings.hash() == tables.hash()
    plan_file = tmp_path / "small.toml"
    plan_file.write_text('[plan]\nname = "small"\n\n[[plan.rule]]\ndefault = true\ncompressor = "topk"\n')
    by_table = parse_suite({**GOOD, "compressors": [{"name": "plan", "params": {"file": str(plan_file)}}]})
    by_string = parse_suite({**GOOD, "compressors": [f"plan:{plan_file}"]})
    assert by_string.labels() == by_table.labels() == ["plan:small"] and by_string.hash() == by_table.hash()
    assert _err({**GOOD, "compressors": ["topk:density=5"]}) == "x.toml: compressors[0]: topk.density: must be in (0, 1], got 5"
    assert _err({**GOOD, "compressors": ["nosuch"]}).startswith("x.toml: compressors[0]: unknown compressor 'nosuch' (known: ")
