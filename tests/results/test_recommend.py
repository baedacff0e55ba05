"""One recommendation per source (issue 33 item 2): the Pareto front of bytes, delivered update and kernel cost."""

from __future__ import annotations

from typing import Any

import pytest

from gcbench.results.parse import as_case
from gcbench.results.recommend import DELIVERED_FLOOR, recommend, recommendations


def _case(label: str, ratio: float, delivered: float | None, x_copy: float | None = None, *, source: str = "src",
          enough: bool = True, flags: tuple[str, ...] = (), steps: int | None = None, params: dict[str, Any] | None = None,
          compressor: str | None = None) -> Any:
    data: dict[str, Any] = {"label": label, "compressor": compressor or label.split("@")[0].split(":")[0], "status": "ok",
                            "source": {"name": source, "label": source}, "size": {"ratio": ratio}, "params": params or {}}
    if delivered is not None:
        data["stream"] = {"delivered": delivered, "enough": enough, "steps": steps}
    if x_copy is not None:
        data["timing"] = {"compress_x_copy": {"median": x_copy, "flags": list(flags)}}
    return as_case(data)


def test_the_front_member_that_saves_most_bytes_is_used_and_the_rest_are_named() -> None:
    cases = [_case("none", 1.0, 1.0, 1.0), _case("fp16", 2.0, 0.999, 1.2), _case("qsgd", 6.0, 0.95, 4.0),
             _case("topk", 100.0, 0.3, 2.0), _case("signsgd", 32.0, -80.0, 1.5), _case("dgc", 50.0, 0.9, 20.0),
             _case("slow_qsgd", 5.0, 0.94, 9.0)]  # dominated by qsgd on every axis
    r = recommend("src", cases)
    assert r.best is not None and r.best.label == "dgc"  # the most bytes saved among those delivering >= the floor
    assert {p.label for p in r.front} == {"none", "fp16", "qsgd", "dgc"}  # slow_qsgd is dominated; topk under the floor
    assert r.most_faithful is not None and r.most_faithful.label == "none"
    text = r.sentence()
    assert text.startswith("src: use dgc — 50× fewer bytes (25× vs bf16), delivers 0.9 of the dense update over the open-loop "
                           "stream, compress 20× a copy")
    assert f"topk (delivers 0.3 of the dense update over the open-loop stream, under the {DELIVERED_FLOOR:g} floor)" in text
    assert "worse than sending nothing: signsgd" in text


def test_a_flagged_timing_constrains_nothing() -> None:
    fast_flagged = _case("a", 10.0, 0.9, 0.5, flags=("unstable",))
    r = recommend("src", [fast_flagged, _case("b", 10.0, 0.9, 2.0)])
    assert {p.label: p.x_copy for p in r.front} == {"a": None, "b": 2.0}  # a's flagged 0.5× is not a speed: it dominates nothing
    assert "compress 0.5× a copy" not in r.sentence()


def test_without_a_stream_no_recommendation_is_made_on_bytes_alone() -> None:
    r = recommend("src", [_case("topk", 100.0, None), _case("none", 1.0, None)])
    assert r.no_stream and r.best is None and "no recommendation" in r.sentence()


def test_a_short_stream_is_said_and_sources_are_kept_apart() -> None:
    cases = [_case("qsgd", 6.0, 0.95, source="a", enough=False), _case("topk", 100.0, 0.2, source="b")]
    first, second = recommendations(cases)
    assert first.source == "a" and "too short to rank" in first.sentence()
    assert second.source == "b" and second.best is None and "open-loop delivered fraction" in second.sentence()


def test_a_recommended_payload_larger_than_bf16s_is_said_to_be() -> None:
    """Issue 31: claims against a 16-bit baseline; a ratio under 2 sends more than a bf16 all-reduce."""
    r = recommend("src", [_case("none", 1.0, 1.0, 1.0), _case("big", 1.6, 0.99, 1.0)])
    assert r.best is not None and r.best.label == "big"
    assert "1.6× fewer bytes (0.8× vs bf16: larger than bf16's payload)" in r.sentence()


def test_an_error_feedback_compressor_is_not_judged_on_a_stream_shorter_than_its_residual_drains() -> None:
    """Third audit, item 2: `compare dgc sdagc --model resnet50` ended "not recommended: dgc (delivers 0.0528, under the
    0.5 floor), sdagc (0.0214)" after 10 open-loop steps; error feedback delivers most of its update later by design."""
    r = recommend("resnet50", [_case("dgc", 1000.0, 0.0528, steps=10), _case("sdagc", 300.0, 0.0214, steps=10),
                               _case("signsgd", 32.0, 0.3, steps=10)])
    text = r.sentence()
    assert {p.label for p in r.not_judged} == {"dgc", "sdagc"} and [p.label for p in r.below_floor] == ["signsgd"]
    assert "not recommended: signsgd (delivers 0.3 of the dense update over 10 open-loop steps, under the 0.5 floor)" in text
    assert "not recommended: dgc" not in text and "dgc (delivers 0.0528 of the dense update over 10 open-loop steps; its " \
        "residual needs about 1,000 steps to drain)" in text
    assert ("sdagc (delivers 0.0214 of the dense update over 10 open-loop steps; how long its residual takes to drain is not "
            "known: 100 steps assumed)") in text
    assert "`gcbench converge -c dgc -c sdagc`" in text
    assert "open-loop delivered fraction (the share of the dense update its updates delivered over the stream" in text
    only = recommend("resnet50", [_case("dgc", 1000.0, 0.0528, steps=10), _case("sdagc", 300.0, 0.0214, steps=10)]).sentence()
    assert only.startswith("resnet50: no recommendation from this stream; not judged on this stream: dgc")


def test_an_error_feedback_compressor_on_a_stream_long_enough_to_drain_is_judged() -> None:
    long_ = recommend("src", [_case("topk:error_feedback=True", 100.0, 0.3, steps=100, params={"error_feedback": True})])
    short = recommend("src", [_case("topk:error_feedback=True", 100.0, 0.3, steps=99, params={"error_feedback": True})])
    assert [p.label for p in long_.below_floor] == ["topk:error_feedback=True"] and not long_.not_judged  # 1/0.01 steps
    assert [p.label for p in short.not_judged] == ["topk:error_feedback=True"] and not short.below_floor


def test_closed_loop_evidence_decides_where_it_covers_a_case() -> None:
    from gcbench.results.recommend import ClosedEvidence, ClosedLoop

    closed = ClosedEvidence("conv.json: digits_cnn, 3 seeds", "accuracy 0.972", 300, 120.0, {
        "topk:error_feedback=True": ClosedLoop("reached", 3, 3, 153.0, 0.99),
        "signsgd": ClosedLoop("never", 0, 3, None, 0.5)})
    cases = [_case("topk:error_feedback=True", 100.0, 0.17, steps=10, params={"error_feedback": True}),
             _case("signsgd", 32.0, 0.9, steps=10), _case("qsgd", 6.0, 0.95, steps=10)]
    r = recommend("digits_cnn", cases, closed)
    text = r.sentence()
    assert r.best is not None and r.best.label == "topk:error_feedback=True"  # its 0.17 open loop is no verdict on it
    assert text.startswith("digits_cnn: use topk:error_feedback=True — in closed-loop training (conv.json: digits_cnn, 3 "
                           "seeds) it reaches it in 3/3 seeds, 153 steps to accuracy 0.972 (the reference: 120)")
    assert "not recommended (closed loop, accuracy 0.972): signsgd does not reach it within 300 steps (3 seeds)" in text
    assert "use signsgd" not in text and "use qsgd" not in text  # faithful open loop, but the closed loop ranks first
    failing = recommend("digits_cnn", cases[1:2], closed)
    assert failing.best is None and "no compressor reaches accuracy 0.972 in every seed" in failing.sentence()


def test_the_converge_command_it_suggests_names_specs_a_user_can_type() -> None:
    """The quick suite's case 'topk+ef' is a label, not a compressor: the sentence suggested `gcbench converge -c topk+ef`,
    which exits with "unknown compressor 'topk+ef'"; it now gives each case's own SPEC, which parse_spec reads back."""
    from gcbench.compressors.registry import format_spec, parse_spec

    short = recommend("src", [_case("topk+ef", 100.0, 0.3, steps=10, params={"error_feedback": True}, compressor="topk")])
    text = short.sentence()
    assert "`gcbench converge -c topk:error_feedback=true`" in text and "-c topk+ef" not in text
    assert parse_spec("topk:error_feedback=true") == ("topk", {"error_feedback": True})
    for spec in ("topk:density=0.01,error_feedback=true", "lgc:channels=8/16/32,window=512", "qsgd", "dgc:nesterov=false,masking=true"):
        name, params = parse_spec(spec)
        assert parse_spec(format_spec(name, params)) == (name, params)


@pytest.mark.parametrize("spec", ["dgc:density=0.001", "dgc:index_coding=paper", "sdagc", "powersgd:rank=2",
                                  "topk_dither:error_feedback=true", "lgc:channels=8/16/32", "adacomp:quantize=sign_scale"])
def test_the_converge_command_it_suggests_leaves_out_the_defaults_and_resolves_to_the_same_case(spec: str) -> None:
    """A run records every parameter resolved: `run suites/cnn.toml` suggested `gcbench converge -c dgc:density=0.001,
    momentum=0.9,…` with all eleven of dgc's parameters per case, long enough that the terminal clipped the sentence in the
    middle of the command.  The suggestion names only what differs from the card's defaults, and resolves to the same."""
    from gcbench.compressors.registry import get, parse_spec

    name, given = parse_spec(spec)
    card = get(name)
    resolved = dict(card.resolve(given))
    text = recommend("src", [_case("x", 100.0, 0.05, steps=10, params=resolved, compressor=name)]).sentence()
    suggested = text.split("`gcbench converge -c ")[1].split("`")[0]
    assert dict(card.resolve(parse_spec(suggested)[1])) == resolved
    assert len(parse_spec(suggested)[1]) == sum(1 for k, v in resolved.items() if v != card.param(k).default)
