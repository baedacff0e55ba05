"""One recommendation per source (issue 33 item 2): the Pareto front of bytes, delivered update and kernel cost."""

from __future__ import annotations

from typing import Any

from gcbench.results.parse import as_case
from gcbench.results.recommend import DELIVERED_FLOOR, recommend, recommendations


def _case(label: str, ratio: float, delivered: float | None, x_copy: float | None = None, *, source: str = "src",
          enough: bool = True, flags: tuple[str, ...] = ()) -> Any:
    data: dict[str, Any] = {"label": label, "compressor": label.split("@")[0], "status": "ok", "source": {"name": source, "label": source},
                            "size": {"ratio": ratio}}
    if delivered is not None:
        data["stream"] = {"delivered": delivered, "enough": enough}
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
    assert text.startswith("src: use dgc — 50× fewer bytes (25× vs bf16), delivers 0.9 of the dense update, compress 20× a copy")
    assert f"topk (delivers 0.3, under the {DELIVERED_FLOOR:g} floor)" in text and "worse than sending nothing: signsgd" in text


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
    assert second.source == "b" and second.best is None and "no compressor delivers at least" in second.sentence()


def test_a_recommended_payload_larger_than_bf16s_is_said_to_be() -> None:
    """Issue 31: claims against a 16-bit baseline; a ratio under 2 sends more than a bf16 all-reduce."""
    r = recommend("src", [_case("none", 1.0, 1.0, 1.0), _case("big", 1.6, 0.99, 1.0)])
    assert r.best is not None and r.best.label == "big"
    assert "1.6× fewer bytes (0.8× vs bf16: larger than bf16's payload)" in r.sentence()
