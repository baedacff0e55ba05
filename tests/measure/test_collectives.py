"""The collectives sweep: rows per compressor, scheme, accumulation and N; errors, bias, bytes; planning rules."""

from __future__ import annotations

import pytest
import torch

from gcbench.core.errors import GcbenchError
from gcbench.core.protocol import ring_allreduce_bytes
from gcbench.core.sharded import CollectiveError
from gcbench.measure.collectives import csv_rows, default_compressors, plan, run_sweep, worker_gradients


def test_default_compressors_are_registered_ones() -> None:
    names = default_compressors()
    assert names[:2] == ["bf16", "fp16"] and "thc" in names and "qsgd" in names


def test_gradients_share_a_common_part() -> None:
    gs = worker_gradients(5000, 4, "laplace", 0)
    assert len(gs) == 4 and all(g.dtype == torch.float32 for g in gs)
    c = torch.corrcoef(torch.stack(gs))
    assert 0.35 < float(c[0, 1]) < 0.65  # equal variances: correlation 1/2
    assert torch.equal(worker_gradients(5000, 4, "laplace", 0)[2], gs[2])


def test_sweep_rows_and_bytes() -> None:
    calls: list[tuple[str, int, int]] = []
    sweep = run_sweep(["none", "bf16"], workers=[4, 2], schemes=["ring", "allgather"], accumulate=["fp32"], numel=1000, draws=2,
                      progress=lambda stage, done, total, msg: calls.append((stage, done, total)))
    assert sweep.workers == [2, 4]
    assert [(r.compressor, r.scheme, r.workers) for r in sweep.rows] == [
        ("none", "ring", 2), ("none", "allgather", 2), ("bf16", "ring", 2), ("bf16", "allgather", 2),
        ("none", "ring", 4), ("none", "allgather", 4), ("bf16", "ring", 4), ("bf16", "allgather", 4)]
    for r in sweep.rows:
        ring = sum(s for s, _ in ring_allreduce_bytes(1000, r.workers)) / r.workers
        assert r.x_fp32_ring == pytest.approx(r.bytes_per_worker / ring)
        if r.compressor == "none":
            assert r.error < 1e-6  # fp32 ring and all-gather: the exact mean to fp32 rounding
            assert 1.0 <= r.x_fp32_ring < 1.2 if r.scheme == "ring" else r.x_fp32_ring >= 1.0
        else:
            assert 1e-4 < r.error < 1e-2 and r.error_std == 0.0 and r.bias == pytest.approx(r.error)  # deterministic
            assert r.x_fp32_ring < 0.6 if r.scheme == "ring" else True
    assert calls[0][0] == "plan" and calls[-1] == ("case", 8, 8) and ("step", 2, 2) in calls
    assert len(csv_rows(sweep)) == 8 and csv_rows(sweep)[0]["numel"] == 1000
    assert sweep.to_dict()["rows"][0]["scheme"] == "ring"


def test_stochastic_codec_has_a_spread_and_a_small_bias() -> None:
    sweep = run_sweep(["qsgd:s=4"], workers=[4], schemes=["alltoall"], accumulate=["fp32"], numel=2000, draws=6)
    (r,) = sweep.rows
    assert r.error_std > 0 and r.error_lo < r.error < r.error_hi
    assert r.bias < 0.7 * r.error  # unbiased: the mean over 6 draws is closer (about error / sqrt(6))


def test_plan_rules() -> None:
    combos, skipped = plan(["bf16"], ["ring", "allgather"], ["fp32", "bf16"])
    assert [(c.scheme, c.accumulate) for c in combos] == [("ring", "fp32"), ("ring", "bf16"), ("allgather", "fp32")]
    assert [(s["scheme"], s["accumulate"]) for s in skipped] == [("allgather", "bf16")]
    with pytest.raises(CollectiveError, match="fp32 only"):
        plan(["bf16"], ["allgather"], ["bf16"])
    with pytest.raises(CollectiveError, match="keeps state"):
        plan(["dgc"], ["ring"], ["fp32"])
    with pytest.raises(CollectiveError, match="unknown collective scheme"):
        plan(["bf16"], ["tree"], ["fp32"])
    with pytest.raises(GcbenchError):
        plan(["nosuchcodec"], ["ring"], ["fp32"])
    with pytest.raises(GcbenchError, match="distribution"):
        run_sweep(["bf16"], workers=[2], numel=10, distribution="cauchy")
    with pytest.raises(GcbenchError, match="draws"):
        run_sweep(["bf16"], workers=[2], numel=10, draws=0)


SUITE = {"name": "t", "sources": [{"kind": "synthetic", "shapes": [[16, 8]], "workers": 2, "steps": 1}],
         "compressors": [{"name": "bf16"}], "metrics": {"repeats": 2, "timing": False}}


def test_a_suite_collectives_table_runs_after_the_cases_and_is_stored(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from gcbench.measure.runner import run_suite
    from gcbench.measure.suite import parse_suite
    from gcbench.results.store import load_run

    table = {"compressors": ["bf16", "qsgd"], "workers": [2, 3], "numel": 200, "draws": 2, "schemes": ["ring", "allgather"]}
    suite = parse_suite({**SUITE, "collectives": table})
    out = run_suite(suite, tmp_path)
    data = json.loads(out.path.read_text())
    assert data["status"] == "complete" and len(data["cases"]) == 1
    sweep = data["collectives"]
    assert sweep["workers"] == [2, 3] and len(sweep["rows"]) == 2 * 3 * 2  # compressors × (ring fp32, ring bf16, allgather fp32) × N
    assert load_run(out.path).extra("collectives")["numel"] == 200  # the record keeps the field
    # a suite without the table hashes as before; a compressor that cannot be chunked is recorded as an error
    assert "collectives" not in parse_suite(SUITE).to_dict()
    out = run_suite(parse_suite({**SUITE, "collectives": {"compressors": ["dgc"], "workers": [2], "numel": 10}}), tmp_path)
    assert "keeps state" in json.loads(out.path.read_text())["collectives"]["error"]


@pytest.mark.parametrize(("table", "text"), [({"workerz": [2]}, "collectives.workerz: unknown key"),
                                             ({"compressors": ["nope"]}, "collectives.compressors[0]"),
                                             ({"accumulate": ["fp8"]}, "collectives.accumulate[0]"),
                                             ({"workers": []}, "collectives.workers")])
def test_bad_collectives_tables_are_one_clear_error(table: dict, text: str) -> None:
    from gcbench.measure.suite import parse_suite

    with pytest.raises(GcbenchError, match=text.replace("[", r"\[").replace("]", r"\]")):
        parse_suite({**SUITE, "collectives": table})


def test_one_worker_has_no_ratio_to_a_ring_and_its_cell_says_so() -> None:
    """At N = 1 an fp32 ring all-reduce sends 0 bytes: the ratio is None (JSON null), shown as "—" with a note, not "nan×"."""
    from gcbench.report.collectives_table import ONE_WORKER, grid

    sweep = run_sweep(["fp16"], workers=[1, 2], schemes=["ring"], accumulate=["fp32"], numel=2048, draws=2)
    rows = {r.workers: r for r in sweep.rows}
    assert rows[1].x_fp32_ring is None and rows[2].x_fp32_ring is not None
    g = grid(sweep.to_dict())
    assert g.bytes_rows == (("fp16", "ring/fp32", "—", f"{rows[2].x_fp32_ring:.3f}×"),)
    assert ONE_WORKER in g.skipped


def test_the_error_interval_uses_exact_t_quantiles_past_ten_draws() -> None:
    """The old table stopped at 10 degrees of freedom and then used 1.96: from 11 draws on its intervals were too narrow."""
    import math

    from scipy import stats

    sweep = run_sweep(["qsgd:s=4"], workers=[2], schemes=["ring"], accumulate=["fp32"], numel=512, draws=12)  # 11 df
    row = sweep.rows[0]
    half = stats.t.ppf(0.975, 11) * row.error_std / math.sqrt(12)
    assert row.error_std > 0
    assert row.error_hi - row.error == pytest.approx(half, rel=1e-9) and row.error - row.error_lo == pytest.approx(half, rel=1e-9)
    assert half > 1.96 * row.error_std / math.sqrt(12) * 1.05  # wider than the normal quantile the old table fell back to
