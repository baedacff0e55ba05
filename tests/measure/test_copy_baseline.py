"""The copy baseline of ``run``: settled before a source's first timed case, one destination for every case of a source."""

from __future__ import annotations

import torch

from gcbench.measure.timing import settle_copy


class _Script:
    """A scripted copy: each call returns the next duration and moves the clock on by it."""

    def __init__(self, durations: list[float]) -> None:
        self.now, self.left, self.calls = 0.0, list(durations), 0

    def clock(self) -> float:
        return self.now

    def copy_once(self) -> float:
        self.calls += 1
        d = self.left.pop(0) if self.left else 9.0
        self.now += d
        return d


def test_settling_stops_when_two_batches_in_a_row_agree() -> None:
    script = _Script([2.0] * 5 + [1.5] * 5 + [1.0] * 5 + [1.01] * 5 + [9.0] * 5)  # the copy speeds up, then holds
    made, med = settle_copy([torch.ones(10)], [torch.empty(10)], batch=5, tolerance=0.03, max_s=1e9, clock=script.clock,
                            copy_once=script.copy_once)
    assert (made, med, script.calls) == (20, 1.01, 20)


def test_settling_gives_up_after_its_time_budget() -> None:
    script = _Script([1.0, 1.0, 1.0, 2.0, 2.0, 2.0] * 10)  # batches alternate 1 s and 2 s: they never agree
    made, _ = settle_copy([torch.ones(4)], [torch.empty(4)], batch=3, tolerance=0.03, max_s=10.0, clock=script.clock,
                          copy_once=script.copy_once)
    assert made == 9  # 3 + 6 + 6 = 15 s > 10 s after the third batch


def test_settling_copies_for_real() -> None:
    xs, into = [torch.randn(1000), torch.randn(3, 5)], [torch.empty(1000), torch.empty(3, 5)]
    made, med = settle_copy(xs, into, batch=2)
    assert made >= 4 and med > 0
    assert all(torch.equal(b, x) for b, x in zip(into, xs, strict=True))
    assert settle_copy([], []) == (0, 0.0)


def test_every_case_of_a_source_copies_into_the_same_memory() -> None:
    from gcbench.measure.source_data import SourceData, build_source
    from gcbench.measure.suite import parse_suite

    suite = parse_suite({"name": "c", "version": 1, "seed": 0, "sources": [{"kind": "synthetic", "label": "s", "shapes": [[300], [4, 10]],
                                                                            "workers": 1, "steps": 1}],
                         "compressors": [{"name": "none"}]})
    from gcbench.measure.granularity import make_units

    src = build_source(suite.sources[0], 0)
    data = SourceData(src, make_units(src.layout(), suite.granularity, suite.bucket_mb), torch.device("cpu"), lambda *a: None)
    xs = data.get(0, 0)
    first = data.copy_destination(xs)
    again = data.copy_destination(xs)
    assert again is first and [b.shape for b in first] == [x.shape for x in xs]
    assert all(torch.equal(b, x) for b, x in zip(first, xs, strict=True))  # settled: it holds a copy already
    other = data.copy_destination([torch.ones(7)])
    assert other is not first and other[0].shape == (7,)
