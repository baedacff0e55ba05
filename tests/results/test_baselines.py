"""Paper claims: the bundled claims file, its validation, and matching claims to measured cases."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from gcbench.compressors import registry
from gcbench.core.errors import GcbenchError
from gcbench.results.baselines import PAPERS_FILE, Claim, ClaimResult, load_claims, match_claims

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.fixture(scope="module")
def claims() -> list[Claim]:
    return load_claims(PAPERS_FILE)


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    return json.loads((GOLDEN / "run_base.json").read_text(encoding="utf-8"))


def _find(claims: list[Claim], compressor: str, model: str, metric: str) -> Claim:
    hits = [c for c in claims if (c.compressor, c.model, c.metric) == (compressor, model, metric)]
    assert len(hits) == 1, (compressor, model, metric, hits)
    return hits[0]


def test_bundled_claims_cover_the_published_table(claims: list[Claim]) -> None:
    # the published claims bundled in baselines/papers.toml
    assert _find(claims, "dgc", "resnet50", "ratio").value == 277
    assert _find(claims, "dgc", "resnet50", "top1").value == 76.15
    assert _find(claims, "dgc", "resnet50", "top1").baseline_value == 75.96
    assert _find(claims, "dgc", "alexnet", "ratio").value == 597
    assert _find(claims, "dgc", "lstm_lm", "ratio").value == 462
    assert _find(claims, "dgc", "lstm_lm", "perplexity").value == 72.24
    assert {c.value for c in claims if c.compressor == "adacomp"} == {40, 200}
    sd = _find(claims, "sdagc", "various", "ratio")
    assert (sd.value, sd.value_high) == (433, 2021) and sd.value_text() == "433–2,021×"
    assert _find(claims, "terngrad", "*", "bits_per_element").value == 2
    assert _find(claims, "terngrad", "alexnet", "top1").value == 57.61
    assert _find(claims, "qsgd", "resnet50", "top1").value == 74.76
    assert _find(claims, "qsgd", "resnet50", "speedup").value == 1.26
    assert _find(claims, "onebit", "speech-dnn-46m", "ratio").value == 32
    assert {c.value for c in claims if c.compressor == "graddrop"} == {49, 22}
    assert _find(claims, "lgc", "resnet101", "top1").value == 93.57
    assert _find(claims, "natural", "*", "bits_per_element").value == 9
    assert _find(claims, "natural", "resnet110", "training_time_reduction").value == 26


def test_dgc_ratio_claims_carry_the_papers_wire_format(claims: list[Claim]) -> None:
    for c in claims:
        if c.compressor == "dgc" and c.metric == "ratio":
            assert c.params == {"density": 0.001, "index_coding": "paper"}
            assert "Lin et al. 2018, Table" in c.source


def test_claim_params_are_valid_registry_parameters(claims: list[Claim]) -> None:
    names = set(registry.names())
    # LGC is a registered compressor too; every other claim names a registered compressor
    assert {c.compressor for c in claims} - names <= {"lgc"}
    for c in claims:
        if c.compressor in names and c.params:
            comp = registry.create(c.compressor, **c.params)  # raises on an unknown name or a value out of range
            for k, v in c.params.items():
                assert comp.params[k] == v


def test_dgc_resnet50_case_matches_with_the_paper_format(claims: list[Claim], base: dict[str, Any]) -> None:
    res = {(r.claim.compressor, r.claim.model, r.claim.metric): r for r in match_claims(claims, [base])}
    r = res[("dgc", "resnet50", "ratio")]
    assert r.status == "measured"
    ms = {m.case_label: m for m in r.measurements}
    # the DGC case on synthetic gradients (same label, same params) is not a measurement of the claim
    assert set(ms) == {"dgc-paper", "dgc"}
    assert all(m.source_label == "live resnet50" for m in ms.values())
    paper = ms["dgc-paper"]
    case = next(c for c in base["cases"] if c["label"] == "dgc-paper" and c["source"]["kind"] == "live")
    assert paper.paper_format and paper.value == case["size"]["ratio"]
    assert ms["dgc"].differences == ("index_coding='fixed' (paper: 'paper')",)
    sentence = r.sentence()
    assert "claims 277×" in sentence and "with the paper's wire format" in sentence and "with other parameters" in sentence


def test_dgc_on_synthetic_gradients_does_not_match(claims: list[Claim], base: dict[str, Any]) -> None:
    synthetic_only = copy.deepcopy(base)
    synthetic_only["cases"] = [c for c in base["cases"] if (c.get("source") or {}).get("kind") != "live"]
    dgc = [c for c in synthetic_only["cases"] if c.get("compressor") == "dgc"]
    assert dgc and dgc[0]["params"]["index_coding"] == "paper"
    # synthetic tensors with ResNet-50's layer shapes are still not ResNet-50 gradients
    dgc[0]["source"]["model"] = "resnet50"
    r = {(x.claim.compressor, x.claim.model, x.claim.metric): x for x in match_claims(claims, [synthetic_only])}
    res = r[("dgc", "resnet50", "ratio")]
    assert res.measurements == () and res.status == "not measured in these runs"
    assert "not measured in these runs" in res.sentence()


def test_training_claims_are_not_measurable(claims: list[Claim], base: dict[str, Any]) -> None:
    r = {(x.claim.compressor, x.claim.model, x.claim.metric): x for x in match_claims(claims, [base])}
    top1 = r[("dgc", "resnet50", "top1")]
    assert top1.measurements  # the run has DGC on ResNet-50 ...
    assert top1.status == "not measurable"  # ... but accuracy is not something gcbench measures
    assert all(m.value is None for m in top1.measurements)
    assert r[("dgc", "alexnet", "ratio")].status == "not measured in these runs"


def test_wire_format_claims_match_any_model_but_not_synthetic() -> None:
    claim = Claim(paper="TernGrad", compressor="terngrad", model="*", data="any", metric="bits_per_element", value=2, unit="bits",
                  source="Wen et al. 2017")
    case = {"label": "t", "compressor": "terngrad", "status": "ok", "params": {"clip": 2.5}, "granularity": "layer",
            "source": {"kind": "trace", "model": "my.module:net", "label": "trace x"}, "size": {"bits_per_element": 2.0004}}
    synthetic = {**case, "source": {"kind": "synthetic", "label": "syn"}}
    (res,) = match_claims([claim], [{"schema_version": 1, "run_id": "r", "cases": [case, synthetic]}])
    assert [m.source_label for m in res.measurements] == ["trace x"]
    assert res.measurements[0].value == 2.0004 and res.status == "measured"


def test_failed_matching_case_is_reported_not_measured() -> None:
    claim = Claim(paper="DGC", compressor="dgc", model="resnet50", data="ImageNet", metric="ratio", value=277, unit="x", source="s",
                  params={"index_coding": "paper"})
    failed = {"label": "d", "compressor": "dgc", "status": "error", "error": "boom", "params": {"index_coding": "paper"},
              "source": {"kind": "live", "model": "ResNet50", "label": "live"}}
    (res,) = match_claims([claim], [{"schema_version": 1, "run_id": "r", "cases": [failed]}])
    assert isinstance(res, ClaimResult) and res.status == "not measured in these runs"
    assert "boom" in res.sentence()


def test_bad_claims_files_give_one_line_per_problem(tmp_path: Path) -> None:
    p = tmp_path / "papers.toml"
    p.write_text('schema = 1\n[[claims]]\npaper = "X"\ncompressor = "dgc"\nmodel = "m"\ndata = "d"\nmetric = "ratio"\n'
                 'value = "lots"\nunit = "%"\nsource = "s"\ncolour = "red"\n'
                 '[[claims]]\npaper = "Y"\n', encoding="utf-8")
    with pytest.raises(GcbenchError) as exc:
        load_claims(p)
    lines = str(exc.value).splitlines()
    assert any("claims[0].colour: unknown key" in ln for ln in lines)
    assert any("claims[0].value: expected a number, got 'lots'" in ln for ln in lines)
    assert any("claims[1].compressor: missing" in ln for ln in lines)
    assert all(ln.startswith(str(p)) for ln in lines)
    p.write_text('schema = 1\n[[claims]]\npaper = "X"\ncompressor = "dgc"\nmodel = "m"\ndata = "d"\nmetric = "ratio"\n'
                 'value = 3\nunit = "%"\nsource = "s"\n', encoding="utf-8")
    with pytest.raises(GcbenchError, match=r"claims\[0\].unit: metric 'ratio' is measured in 'x'"):
        load_claims(p)
    p.write_text("schema = 7\nclaims = []\n", encoding="utf-8")
    with pytest.raises(GcbenchError, match="newer than this gcbench reads"):
        load_claims(p)
    p.write_text("[[claims]\n", encoding="utf-8")
    with pytest.raises(GcbenchError, match="not valid TOML"):
        load_claims(p)
    with pytest.raises(GcbenchError, match="claims file not found"):
        load_claims(tmp_path / "nope.toml")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_claims_file_that_is_a_fifo_or_a_device_is_one_line(tmp_path: Path) -> None:
    """`--papers` naming a FIFO used to wait forever for a writer, and /dev/zero to read until memory ran out."""
    fifo = tmp_path / "claims.toml"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(GcbenchError, match="not a regular file") as info:
            load_claims(path)
        assert "\n" not in str(info.value)
