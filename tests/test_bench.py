"""The kernel benchmark harness: sizes, targets, same-process copy roofline, isolation."""

from __future__ import annotations

import statistics

import pytest

from gcbench.core.errors import GcbenchError
from gcbench.measure.bench import bench_case, matrix_shape, parse_size, run_bench, target_of, verdict


def test_parse_size() -> None:
    assert parse_size("1K") == 1000 and parse_size("25.6M") == 25_600_000 and parse_size("100") == 100
    with pytest.raises(GcbenchError):
        parse_size("lots")


def test_matrix_shape_keeps_numel() -> None:
    for n in (1, 7, 1000, 25_600_000, 1_000_003):
        shape = matrix_shape(n)
        prod = 1
        for s in shape:
            prod *= s
        assert prod == n


@pytest.mark.parametrize("text", ["1e300", "3G", "2147483649", "inf", "nan"])
def test_parse_size_refuses_sizes_no_tensor_can_have(text: str) -> None:
    # 1e300 hung in matrix_shape's divisor search up to the 1,800 s subprocess timeout
    with pytest.raises(GcbenchError, match=r"must be 1 to 2,147,483,648 \(2\*\*31\) elements"):
        parse_size(text)
    assert parse_size("2147483648") == 2**31


def test_matrix_shape_of_a_large_prime_is_quick() -> None:
    assert matrix_shape(2**31 - 1) == (1, 2**31 - 1)  # a prime: trial division to sqrt(2**31), ~23,000 steps
    assert matrix_shape(25_600_000) == (4000, 6400) and matrix_shape(2**31) == (32768, 65536)
    # the old search stepped down one row at a time from ~1.2e9 here: a hang, now one error
    with pytest.raises(GcbenchError, match="must be 0 to 2,147,483,648"):
        matrix_shape(2**61 - 1)


def test_bench_case_records_same_process_ratios() -> None:
    rec = bench_case("signsgd", numel=20_000, repeats=3, warmup=1, threads=1)
    assert len(rec["copy"]["samples_s"]) == 3 and len(rec["compress"]["samples_s"]) == 3
    per_round = [c / k for c, k in zip(rec["compress"]["samples_s"], rec["copy"]["samples_s"], strict=True)]
    assert rec["compress_x_copy"] == pytest.approx(statistics.median(per_round))  # copy and compress of the same round
    assert rec["x_copy"]["compress"]["samples"] == pytest.approx(per_round) and isinstance(rec["x_copy"]["decompress"]["flags"], list)
    assert rec["ratio"] > 30 and rec["numel"] == 20_000


def test_bench_case_records_the_traffic_bound() -> None:
    from gcbench.compressors import registry
    from gcbench.results.record import BenchCase

    rec = bench_case("signsgd", numel=20_000, repeats=2, warmup=0, threads=1, reference=False)
    bound = registry.create("signsgd").info.traffic_bytes / 8
    assert rec["traffic_bound"] == pytest.approx(bound) and 0 < bound
    assert rec["x_bound"] == pytest.approx(rec["compress_x_copy"] / bound)
    case = BenchCase.model_validate(rec)  # the typed record keeps both, and --json writes them
    assert case.x_bound == pytest.approx(rec["x_bound"]) and case.to_json_dict()["traffic_bound"] == pytest.approx(bound)


def test_topk_row_compares_with_torch_topk() -> None:
    rec = bench_case("topk", numel=50_000, repeats=2, warmup=0, threads=1)
    assert set(rec["vs_torch_topk"]) == {"0.001", "0.01"}
    target, mark = verdict(rec)
    assert "torch.topk" in target and mark in ("pass", "short")


def test_verdict_uses_targets() -> None:
    rec = {"compressor": "signsgd", "compress_x_copy": 1.5, "decompress_x_copy": 1.0}
    assert verdict(rec)[1] == "pass"
    assert verdict({**rec, "compress_x_copy": 2.5})[1] == "short"
    assert verdict({**rec, "decompress_x_copy": 3.5})[1] == "short"
    assert verdict({"compressor": "none", "compress_x_copy": 1, "decompress_x_copy": 1})[1] == "—"
    assert target_of("dgc").compress_x_copy == 8.0  # read from DGC's card
    slow_select = {"compressor": "dgc", "compress_x_copy": 7.0, "decompress_x_copy": 1.0, "vs_torch_topk": {"0.001": {"speedup": 4.0}}}
    assert verdict(slow_select) == ("≤ 8× copy, 5× torch.topk @0.001", "short")  # 4× torch.topk misses the card's 5×
    assert target_of("not_installed_here") is None


def test_every_target_and_topk_row_comes_from_a_card() -> None:
    from gcbench.compressors import registry

    with_target = {c.name for c in registry.infos() if c.target is not None}
    assert {"signsgd", "dgc", "topk", "adacomp"} <= with_target and "none" not in with_target
    rec = bench_case("topk", numel=4096, repeats=1, warmup=0, threads=1, reference=False)
    assert sorted(rec["vs_torch_topk"]) == ["0.001", "0.01"]  # the densities on topk's card


def test_run_bench_isolated_records_failures_and_goes_on() -> None:
    recs = run_bench(["signsgd"], [5000], repeats=2, warmup=0, threads=1, isolate=True)
    assert recs[0]["compressor"] == "signsgd" and "compress_x_copy" in recs[0]
    with pytest.raises(GcbenchError, match="did you mean"):
        run_bench(["signsdg"], [10])


def test_specs_with_parameters_are_benchmarked_and_labelled() -> None:
    recs = run_bench(["topk:density=0.1", "topk"], [20_000], repeats=2, warmup=0, threads=1, isolate=False)
    spec, plain = recs
    assert spec["label"] == "topk:density=0.1" and spec["params"]["density"] == 0.1
    assert plain["label"] == "topk" and plain["params"]["density"] == 0.01
    # the parameter reached the compressor: ten times the kept entries, about a tenth of the ratio
    assert plain["ratio"] / spec["ratio"] == pytest.approx(10, rel=0.1)
    with pytest.raises(GcbenchError, match="density"):
        run_bench(["topk:density=5"], [10])  # a bad parameter fails before any work


def test_bench_comparison_matches_rows_by_label() -> None:
    from gcbench.results.compare import compare_runs

    recs = run_bench(["topk:density=0.1", "topk"], [20_000], repeats=2, warmup=0, threads=1, isolate=False)
    env = {"cpu_model": "x", "cpu_count": 2, "torch_threads": 1}
    base = {"schema_version": 1, "kind": "bench", "run_id": "b", "environment": env, "cases": recs}
    new = {"schema_version": 1, "kind": "bench", "run_id": "n", "environment": env, "cases": [recs[1]]}
    cmp = compare_runs(base, new)
    cases = {(r.case, r.verdict) for r in cmp.rows if r.metric == ""}
    assert ("topk:density=0.1", "missing") in cases  # not matched to the plain topk row
    assert {r.case for r in cmp.rows if r.metric} == {"topk"}


def test_bench_model_times_a_whole_step_of_the_model() -> None:
    from gcbench.compressors import registry
    from gcbench.measure.bench import model_tensors
    from gcbench.results.record import BenchCase
    from gcbench.sources.zoo import layer_shapes

    layout = layer_shapes("mlp")
    (rec,) = run_bench(["topk"], [123], repeats=2, warmup=0, threads=1, isolate=False, model="mlp")
    assert rec["model"] == "mlp" and rec["tensors"] == len(layout) and rec["numel"] == sum(t.numel for t in layout)
    assert len(rec["copy"]["samples_s"]) == 2 and len(rec["compress"]["samples_s"]) == 2  # the sizes list is not used
    xs = model_tensors("mlp")
    assert [tuple(x.shape) for x in xs] == [t.shape for t in layout]
    comp = registry.create("topk")
    sent = sum(comp.compress(x, comp.init_state(i)).nbytes for i, x in enumerate(xs))
    assert rec["ratio"] == pytest.approx(4 * rec["numel"] / sent)  # every tensor of the step, each its own payload
    case = BenchCase.model_validate(rec)
    assert case.model == "mlp" and case.tensors == len(layout)


def test_bench_model_of_an_unknown_model_fails_before_any_work() -> None:
    with pytest.raises(GcbenchError, match="did you mean"):
        run_bench(["topk"], [1], model="resnt50")
