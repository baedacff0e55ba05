"""The torch (device) path of the top-k selection: the k-th largest found through ``torch.topk`` is ``kthvalue``'s."""

from __future__ import annotations

import pytest
import torch

from gcbench.kernels.topk import kth_largest_torch, topk_among


@pytest.mark.parametrize("n", [1, 7, 1000, 100_003])
@pytest.mark.parametrize("ties", [False, True])
def test_kth_largest_is_the_same_number_either_way(n: int, ties: bool) -> None:
    g = torch.Generator().manual_seed(n)
    mag = torch.randn(n, generator=g).abs()
    if ties:
        mag = (mag * 4).round() / 4  # many equal magnitudes, so the k-th sits inside a run of ties
    for k in sorted({1, max(1, n // 100), max(1, n // 2), n}):
        a, b = kth_largest_torch(mag, k, via_topk=True), kth_largest_torch(mag, k, via_topk=False)
        assert a.item() == b.item() == torch.sort(mag, descending=True).values[k - 1].item()


def test_topk_among_keeps_the_earliest_ties_whichever_way_the_kth_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    vals = torch.tensor([3.0, -1.0, 1.0, 2.0, 1.0, -1.0, 0.5])
    assert topk_among(vals, 4).tolist() == [0, 1, 2, 3]  # |1.0| ties at positions 1, 2, 4, 5: the first two are kept
    import gcbench.kernels.topk as topk_mod

    real = topk_mod.kth_largest_torch
    monkeypatch.setattr(topk_mod, "kth_largest_torch", lambda mag, k: real(mag, k, via_topk=True))
    assert topk_among(vals, 4).tolist() == [0, 1, 2, 3]
