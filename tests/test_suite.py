"""Suite validation: every error names the file, key, bad value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcbench.core.errors import GcbenchError
from gcbench.measure.suite import SUITE_DIR, apply_overrides, load_suite, parse_suite

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


@pytest.mark.parametrize("path", sorted(SUITE_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_bundled_suites_validate(path: Path) -> None:
    s = load_suite(path)
    assert s.compressors and s.sources
