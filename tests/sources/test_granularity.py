"""Tests of granularity: layer / DDP-bucket / model units, and exact gather/scatter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gcbench.core.errors import ParamError, SourceError, UnknownNameError
from gcbench.measure.granularity import GRANULARITIES, MIB, Unit, bucket_assignment, gather, gather_reference, make_units, scatter
from gcbench.sources.base import TensorSpec
from gcbench.sources.synthetic import SyntheticSource
from gcbench.sources.trace import TraceSource, write_trace
from gcbench.sources.zoo import layer_shapes


def _layout(sizes: list[int]) -> list[TensorSpec]:
    return [TensorSpec(f"t{i}", (n,)) for i, n in enumerate(sizes)]


def _grads(layout: list[TensorSpec], seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {s.name: torch.randn(s.shape, generator=g) for s in layout}


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def test_granularity_names() -> None:
    assert GRANULARITIES == ("layer", "bucket", "model")
    with pytest.raises(UnknownNameError, match=r"did you mean 'bucket'"):
        make_units(_layout([3]), "buckets")


def test_hand_worked_buckets() -> None:
    # cap 2**-10 MiB = 1024 bytes = 256 floats; sizes in floats, taken last to first:
    # t4 (10) + t3 (300) = 310 >= 256 -> close; t2 (50) + t1 (200) = 250 < 256, + t0 (100) = 350 -> close
    layout = _layout([100, 200, 50, 300, 10])
    assert bucket_assignment(layout, 2**-10) == [[4, 3], [2, 1, 0]]
    units = make_units(layout, "bucket", 2**-10)
    assert [u.name for u in units] == ["bucket0", "bucket1"]
    assert units[0].members == ("t4", "t3") and units[0].numel == 310 and units[0].kind == "bucket"
    assert units[1].members == ("t2", "t1", "t0") and units[1].shapes == ((50,), (200,), (100,))
    # a first-bucket cap of 2**-12 MiB (64 floats) closes after t3 already, then 256 floats as before
    assert bucket_assignment(layout, 2**-10, first_bucket_mb=2**-12) == [[4, 3], [2, 1, 0]]
    assert bucket_assignment(_layout([100, 200, 50, 60, 10]), 2**-10, first_bucket_mb=2**-12) == [[4, 3], [2, 1, 0]]
    assert bucket_assignment(_layout([100, 200, 50, 60, 10]), 2**-10) == [[4, 3, 2, 1], [0]]
    # a tensor larger than the cap is never split
    assert bucket_assignment(_layout([1000, 5]), 2**-10) == [[1, 0]]


@pytest.mark.parametrize("bucket_mb", [1.0, 5.0, 25.0, 100.0])
def test_resnet50_buckets_cover_everything_and_respect_the_cap(bucket_mb: float) -> None:
    layout = layer_shapes("resnet50")
    units = make_units(layout, "bucket", bucket_mb)
    members = [m for u in units for m in u.members]
    # every tensor exactly once, in reverse layout order
    assert members == [s.name for s in reversed(layout)]
    cap = bucket_mb * MIB
    sizes = {s.name: s.numel * 4 for s in layout}
    for i, u in enumerate(units):
        assert u.numel == sum(sizes[m] for m in u.members) // 4
        # DDP rule: the bucket was still under the cap before its last tensor went in ...
        assert u.nbytes - sizes[u.members[-1]] < cap
        # ... and every bucket but the last reached the cap
        if i < len(units) - 1:
            assert u.nbytes >= cap
    assert sum(u.numel for u in units) == 25_557_032


@pytest.mark.parametrize(("bucket_mb", "first_mb"), [(25.0, None), (25.0, 1.0), (4.0, None), (4.0, 0.5)])
def test_buckets_match_pytorch_ddp_assignment(bucket_mb: float, first_mb: float | None) -> None:
    # oracle: the function DDP's Reducer calls when it rebuilds buckets in gradient-ready order
    dist = pytest.importorskip("torch.distributed")
    compute = getattr(dist, "_compute_bucket_assignment_by_size", None)
    if compute is None:
        pytest.skip("this torch has no _compute_bucket_assignment_by_size")
    layout = layer_shapes("resnet50")
    order = list(range(len(layout) - 1, -1, -1))
    tensors = [torch.empty(layout[i].shape, device="meta") for i in order]
    limits = [int((first_mb or bucket_mb) * MIB), int(bucket_mb * MIB)]
    expected, _ = compute(tensors, limits, [False] * len(tensors), order)
    assert bucket_assignment(layout, bucket_mb, first_mb) == [list(b) for b in expected]


def test_layer_and_model_units() -> None:
    layout = [TensorSpec("w", (3, 4)), TensorSpec("b", (4,)), TensorSpec("s", ())]
    layers = make_units(layout, "layer")
    assert [(u.name, u.members, u.shapes, u.numel, u.flat) for u in layers] == [
        ("w", ("w",), ((3, 4),), 12, False), ("b", ("b",), ((4,),), 4, False), ("s", ("s",), ((),), 1, False)]
    (model,) = make_units(layout, "model")
    assert model == Unit("model", ("w", "b", "s"), ((3, 4), (4,), ()), 17, "model")
    assert make_units([], "model") == [] and make_units([], "bucket") == []


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_gather_scatter_round_trip_is_bit_identical(granularity: str) -> None:
    layout = [TensorSpec("a", (6, 5)), TensorSpec("b", (5,)), TensorSpec("c", (2, 3, 4)), TensorSpec("z", (0,)), TensorSpec("d", (70,))]
    grads = _grads(layout)
    # awkward values must survive exactly: -0.0, subnormals, extremes
    grads["b"][:4] = torch.tensor([-0.0, 1e-45, -3.4e38, 1.17e-38])
    units = make_units(layout, granularity, bucket_mb=2**-14)  # 16 floats: several buckets
    seen: dict[str, torch.Tensor] = {}
    for u in units:
        x = gather(u, grads)
        assert _bits_equal(x, gather_reference(u, grads))
        if u.flat:
            assert x.dim() == 1 and x.dtype == torch.float32 and x.numel() == u.numel
            buf = torch.full((u.numel,), float("nan"))
            assert gather(u, grads, out=buf) is buf and _bits_equal(buf, x)
        else:
            assert x is grads[u.name]  # a layer is the tensor itself, never a copy
        back = scatter(u, x.clone())
        assert list(back) == list(u.members)
        seen.update(back)
    assert seen.keys() == grads.keys()
    for name, t in grads.items():
        assert _bits_equal(seen[name], t), name


def test_bucket_of_half_precision_gradients_is_float32() -> None:
    layout = [TensorSpec("h", (4,), torch.float16), TensorSpec("f", (3,))]
    grads = {"h": torch.tensor([1.5, -2.0, 0.0, 65504.0], dtype=torch.float16), "f": torch.tensor([1.0, 2.0, 3.0])}
    (u,) = make_units(layout, "model")
    x = gather(u, grads)
    assert x.dtype == torch.float32 and x.tolist() == [1.5, -2.0, 0.0, 65504.0, 1.0, 2.0, 3.0]


def test_gather_reads_only_its_members_from_a_lazy_trace(tmp_path: Path) -> None:
    src = SyntheticSource([(40,), (30,), (20,), (10,)], workers=1, steps=1, seed=1)
    tr = TraceSource(write_trace(src, tmp_path / "t", "syn", 1))
    units = make_units(tr.layout(), "bucket", bucket_mb=2**-14)  # 16 floats: one tensor per bucket here
    for u in units:
        g = tr.gradients(0, 0)
        x = gather(u, g)
        want = torch.cat([src.gradients(0, 0)[m].reshape(-1) for m in u.members])
        assert torch.equal(x, want)


def test_errors() -> None:
    layout = _layout([3, 4])
    (u,) = make_units(layout, "model")
    with pytest.raises(SourceError, match=r"gradient 't1' is missing"):
        gather(u, {"t0": torch.zeros(3)})
    with pytest.raises(SourceError, match=r"gradient 't1' has shape \(5,\), expected \(4,\)"):
        gather(u, {"t0": torch.zeros(3), "t1": torch.zeros(5)})
    with pytest.raises(ParamError, match=r"has 7 elements, got a tensor of 6"):
        scatter(u, torch.zeros(6))
    with pytest.raises(ParamError, match=r"out must be a 1-D float32 tensor of 7"):
        gather(u, _grads(layout), out=torch.zeros(7, dtype=torch.float64))
    with pytest.raises(ParamError, match=r"bucket_mb must be a finite number > 0"):
        make_units(layout, "bucket", 0.0)
    with pytest.raises(SourceError, match=r"'t0' appears twice"):
        make_units([*layout, TensorSpec("t0", (1,))], "layer")
