"""Closed-loop live streams (gcbench.measure.source_data.ClosedLoopData, LiveSource.feed): each case's model steps
with that case's own aggregate, so a biased compressor's errors change the gradients it is measured on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from gcbench.core.errors import GcbenchError, ParamError, SourceError
from gcbench.measure.granularity import make_units
from gcbench.measure.runner import run_suite
from gcbench.measure.source_data import ClosedLoopData
from gcbench.measure.stream import DenseReference
from gcbench.measure.suite import parse_suite
from gcbench.measure.suite_options import apply_overrides, compare_suite
from gcbench.results.store import load_run
from gcbench.sources.live import LiveSource


def _suite(loop: str, granularity: str = "layer") -> Any:
    return parse_suite({
        "name": "t", "seed": 3, "granularity": granularity, "metrics": {"timing": False, "repeats": 2},
        "sources": [{"kind": "live", "model": "mlp", "workers": 2, "steps": 3, "lr": 0.5, "batch_size": 8, "loop": loop}],
        "compressors": [{"name": "none"}, {"name": "topk", "params": {"density": 0.01}}],
    })


@pytest.fixture(scope="module")
def both_loops(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for loop in ("open", "closed"):
        outcome = run_suite(_suite(loop), tmp_path_factory.mktemp(loop))
        assert [r["status"] for r in outcome.records] == ["ok", "ok"], [r.get("error") for r in outcome.records]
        out[loop] = outcome.records
        out[loop + "_path"] = outcome.path  # type: ignore[assignment]
    return out


def test_none_sees_the_same_stream_in_both_loops(both_loops: dict[str, Any]) -> None:
    """The identity's aggregate is the true mean: its closed-loop model takes the open loop's steps."""
    open_none, closed_none = both_loops["open"][0], both_loops["closed"][0]
    assert open_none["stream"]["per_step_delivered"] == pytest.approx(closed_none["stream"]["per_step_delivered"], abs=1e-5)
    assert open_none["stream"]["per_step_error"] == pytest.approx(closed_none["stream"]["per_step_error"], abs=1e-5)


def test_a_biased_compressor_changes_its_own_trajectory(both_loops: dict[str, Any]) -> None:
    """Step 0 is computed before any update (the same in both loops); from step 1 the closed loop's gradients come from
    the model top-k's aggregate moved, so its stream numbers part from the open loop's."""
    open_topk, closed_topk = both_loops["open"][1], both_loops["closed"][1]
    o, c = open_topk["stream"]["per_step_error"], closed_topk["stream"]["per_step_error"]
    assert o[0] == pytest.approx(c[0], rel=1e-6)
    assert all(abs(a - b) > 1e-6 * max(abs(a), 1e-12) for a, b in zip(o[1:], c[1:], strict=True))
    assert open_topk["stream"]["per_step_delivered"][1:] != pytest.approx(closed_topk["stream"]["per_step_delivered"][1:], rel=1e-6)


def test_the_record_says_which_loop(both_loops: dict[str, Any]) -> None:
    for loop in ("open", "closed"):
        for rec in both_loops[loop]:
            assert rec["stream"]["loop"] == loop
        saved = load_run(both_loops[loop + "_path"])
        assert [case.stream.loop for case in saved.cases] == [loop, loop]
    # an open-loop source describes itself as before (its identity across runs); a closed one says so, and its label too
    assert "loop" not in both_loops["open"][0]["source"]
    assert both_loops["closed"][0]["source"]["loop"] == "closed"
    assert both_loops["closed"][0]["source"]["label"] == "live mlp (closed loop)"


def test_closed_loop_feeds_flat_units_back_by_parameter(tmp_path: Path) -> None:
    """Model granularity: one flat unit per step, scattered back into every parameter's update."""
    out = run_suite(_suite("closed", granularity="model"), tmp_path)
    assert [r["status"] for r in out.records] == ["ok", "ok"]
    assert out.records[0]["units"] == 1 and out.records[0]["stream"]["loop"] == "closed"


def test_closed_loop_is_a_live_only_key() -> None:
    with pytest.raises(GcbenchError, match="needs a live source"):
        parse_suite({"name": "t", "sources": [{"kind": "synthetic", "shapes": [[4]], "loop": "closed"}],
                     "compressors": [{"name": "none"}]})
    with pytest.raises(GcbenchError):
        parse_suite({"name": "t", "sources": [{"kind": "live", "model": "mlp", "loop": "half"}], "compressors": [{"name": "none"}]})


def test_the_open_default_leaves_the_suite_hash_alone() -> None:
    """``loop = "open"`` is not written into the resolved suite: a suite's hash does not change with the key's arrival."""
    plain = parse_suite({"name": "t", "sources": [{"kind": "live", "model": "mlp"}], "compressors": [{"name": "none"}]})
    said = parse_suite({"name": "t", "sources": [{"kind": "live", "model": "mlp", "loop": "open"}], "compressors": [{"name": "none"}]})
    assert "loop" not in plain.to_dict()["sources"][0] and plain.hash() == said.hash()
    closed = apply_overrides(plain, loop="closed")
    assert closed.sources[0].loop == "closed" and closed.hash() != plain.hash()
    assert compare_suite([("dgc", {}), ("sdagc", {})], momentum=0.9, model="smallcnn", loop="closed").sources[0].loop == "closed"


def test_a_closed_source_refuses_to_go_back_or_skip_its_update() -> None:
    src = LiveSource("mlp", workers=1, steps=3, seed=0, batch_size=4, loop="closed")
    src.gradients(0, 0)
    with pytest.raises(SourceError, match="before the update after step 0 was fed"):
        src.gradients(1, 0)
    src.feed(0, {s.name: torch.zeros(s.shape) for s in src.layout()})
    src.gradients(1, 0)
    with pytest.raises(SourceError, match="cannot go back"):
        src.gradients(0, 0)
    with pytest.raises(ParamError, match="for a closed-loop source"):
        LiveSource("mlp", workers=1, steps=2, seed=0, batch_size=4).feed(0, {})


def test_a_zero_update_leaves_the_model_where_it_was() -> None:
    """Fed zeros, the closed-loop model does not move: step 1's gradient is step 0's model on step 1's batch, which an
    open source with lr=0 computes too."""
    closed = LiveSource("mlp", workers=1, steps=2, seed=0, batch_size=4, loop="closed")
    frozen = LiveSource("mlp", workers=1, steps=2, seed=0, batch_size=4, lr=0.0)
    closed.gradients(0, 0)
    closed.feed(0, {s.name: torch.zeros(s.shape) for s in closed.layout()})
    a, b = closed.gradients(1, 0), frozen.gradients(1, 0)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_closed_reference_is_built_step_by_step_like_the_open_one() -> None:
    """ClosedLoopData feeds its dense reference the steps as they come; the result equals a reference built at once."""
    src = LiveSource("mlp", workers=2, steps=2, seed=1, batch_size=4, loop="closed")
    units = make_units(src.layout(), "layer")
    data = ClosedLoopData(src, units, torch.device("cpu"))
    ref = data.reference(0.9)
    seen = {}
    for t in range(2):
        for w in range(2):
            seen[(t, w)] = [x.clone() for x in data.get(t, w)]
        data.advance(t, [torch.zeros_like(x) for x in seen[(t, 0)]])
    at_once = DenseReference(lambda t, w: seen[(t, w)], 2, 2, 0.9)
    assert ref.sum_sq == pytest.approx(at_once.sum_sq) and ref.dense_sq == pytest.approx(at_once.dense_sq)
    assert ref.worker_sum_sq == pytest.approx(at_once.worker_sum_sq)
    with pytest.raises(SourceError, match="out of order"):
        data.get(0, 0)
