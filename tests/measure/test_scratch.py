"""The case's borrowed buffers (casemath.Scratch): reused case after case, and no number changes with the reuse."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gcbench.measure.casemath import RunningSum, Scratch
from gcbench.measure.granularity import make_units
from gcbench.measure.runner import run_case
from gcbench.measure.source_data import SourceData
from gcbench.measure.suite import CompressorSpec, parse_suite
from gcbench.sources.synthetic import SyntheticSource


def test_scratch_lends_and_takes_back_by_shape() -> None:
    s = Scratch()
    a = s.empty((3, 4), torch.device("cpu"))
    b = s.zeros((3, 4), torch.device("cpu"))
    assert a.dtype == torch.float32 and a.data_ptr() != b.data_ptr() and not b.any()
    s.give_back([a, torch.ones(3, 4)])  # a tensor it did not lend is ignored
    assert s.empty((3, 4), torch.device("cpu")).data_ptr() == a.data_ptr()  # the buffer given back
    assert s.empty((3, 4), torch.device("cpu")).data_ptr() not in (a.data_ptr(), b.data_ptr())  # b is still lent
    assert s.empty((12,), torch.device("cpu")).data_ptr() not in (a.data_ptr(), b.data_ptr())  # another shape: new
    s.release()
    ptrs = {s.empty((3, 4), torch.device("cpu")).data_ptr() for _ in range(3)}
    assert b.data_ptr() in ptrs and a.data_ptr() in ptrs


def test_running_sum_in_a_reused_buffer_starts_from_zero() -> None:
    s = Scratch()
    dirty = s.empty((5,), torch.device("cpu")).fill_(7.0)
    s.release()
    r = RunningSum(1, s)
    r.add(0, torch.arange(5.0), torch.ones(5))
    assert r.sums[0] is not None and r.sums[0].data_ptr() == dirty.data_ptr()
    assert torch.equal(r.sums[0], torch.arange(5.0) - 1) and r.sq_norm() == float(((torch.arange(5.0) - 1) ** 2).sum())
    r.restart()
    r.add(0, torch.ones(5))
    assert torch.equal(r.sums[0], torch.ones(5))


def _record_numbers(rec: Any, path: str = "") -> dict[str, Any]:
    """The record without its timing (there is none here) and label, flat: every number the case measured, by path."""
    if isinstance(rec, dict):
        return {k: v for key, val in rec.items() if key != "label" for k, v in _record_numbers(val, f"{path}.{key}").items()}
    if isinstance(rec, list):
        return {k: v for i, val in enumerate(rec) for k, v in _record_numbers(val, f"{path}[{i}]").items()}
    return {path: rec}


def _data() -> SourceData:
    src = SyntheticSource([(64, 32), (40,)], workers=3, steps=3, seed=4)
    return SourceData(src, make_units(src.layout(), "layer"), torch.device("cpu"), lambda *a: None)


def test_cases_on_reused_buffers_measure_the_same_numbers() -> None:
    """Each case after the first runs on the buffers the one before it left dirty: its record is bit for bit the
    record of the same case on a fresh source (stochastic, stateful and momentum-filtered cases alike)."""
    suite = parse_suite({"name": "t", "seed": 5, "sources": [{"kind": "synthetic", "shapes": [[4]]}],
                         "optimizer": {"momentum": 0.9}, "compressors": [{"name": "none"}],
                         "metrics": {"timing": False, "repeats": 3}})
    specs = [CompressorSpec(name="qsgd", label="qsgd", params={}),
             CompressorSpec(name="topk", label="topk", params={"density": 0.1, "error_feedback": True}),
             CompressorSpec(name="randomk", label="randomk", params={})]
    shared = _data()
    for spec in specs:
        reused = run_case(spec, shared, suite)
        shared.scratch.release()
        fresh = run_case(spec, _data(), suite)
        # to 1e-12: the last bit of a cosine can differ between two runs of the same case even on fresh buffers (a
        # known run-to-run jitter of the fidelity sums), while a dirty buffer read back would change the leading digits
        assert _record_numbers(reused) == pytest.approx(_record_numbers(fresh), rel=1e-12, abs=1e-15)
    assert shared.scratch._free  # the buffers were taken back for reuse


def test_dense_reference_holds_a_first_step_of_weight_one_and_never_adds_into_it() -> None:
    """A first step of weight 1 is its own sum (no copy); a second step adds into copies, never into the gradients."""
    from gcbench.measure.stream import DenseReference

    g = {(t, w): [torch.randn(6, generator=torch.Generator().manual_seed(10 * t + w))] for t in range(2) for w in range(2)}
    kept = {k: [x.clone() for x in v] for k, v in g.items()}
    one = DenseReference(lambda t, w: g[(t, w)], 1, 2, 0.0)
    assert one.worker_sums[1][0] is g[(0, 1)][0]
    two = DenseReference(lambda t, w: g[(t, w)], 2, 2, 0.0)
    for w in range(2):
        assert torch.equal(two.worker_sums[w][0], kept[(0, w)][0] + kept[(1, w)][0])
    assert all(torch.equal(g[k][0], kept[k][0]) for k in g)  # the source's gradients are untouched
    mom = DenseReference(lambda t, w: g[(t, w)], 2, 2, 0.5)  # weights 1.5 and 1: copies from the first step
    assert torch.equal(mom.worker_sums[0][0], kept[(0, 0)][0] * 1.5 + kept[(1, 0)][0])
