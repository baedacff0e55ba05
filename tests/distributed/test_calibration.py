"""Network calibration: collectives priced as measured (fit, file, model), and the measurement on a real gloo group."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.core.errors import ParamError, ResultsError
from gcbench.predict import step_kernels as sk
from gcbench.predict.network import Network, Topology, collective_seconds, protocol_seconds
from gcbench.predict.step import reference_step
from gcbench.results.calibration import COLLECTIVES, Calibration, CollectivePrice, fit_price, load_calibration
from gcbench.train.workers import WorkerContext, run_group

NET = Network(0.02, 50e-6)  # 20 Mbit/s
BPS = NET.bytes_per_s


@pytest.mark.parametrize("kind", sorted(COLLECTIVES))
@pytest.mark.parametrize("n", [2, 3, 8])
def test_fit_recovers_the_efficiency_and_fixed_cost_it_was_made_from(kind: str, n: int) -> None:
    eff, fixed = 1.7, 0.012
    points = [(b, fixed + eff * COLLECTIVES[kind](b, n).volume / BPS) for b in (1e4, 5e4, 2e5, 1e6)]
    p = fit_price(kind, n, points, NET.bandwidth_gbps)
    assert p.efficiency == pytest.approx(eff, rel=1e-9)
    assert p.overhead_s == pytest.approx(fixed, rel=1e-9)


def test_a_negative_intercept_is_fixed_at_zero_and_the_slope_refitted_through_the_origin() -> None:
    points = [(1e5, 0.03), (2e5, 0.09)]  # a line through these crosses below zero
    p = fit_price("allreduce", 2, points, NET.bandwidth_gbps)
    assert p.overhead_s == 0.0
    xs = [COLLECTIVES["allreduce"](b, 2).volume / BPS for b, _ in points]
    assert p.efficiency == pytest.approx(sum(x * t for x, (_, t) in zip(xs, points, strict=True)) / sum(x * x for x in xs))


def test_a_fit_needs_two_sizes_and_two_workers() -> None:
    with pytest.raises(ParamError):
        fit_price("allgather", 2, [(1e5, 0.1)], 1.0)
    with pytest.raises(ParamError):
        fit_price("allgather", 1, [(1e5, 0.1), (2e5, 0.2)], 1.0)
    with pytest.raises(ParamError):
        fit_price("broadcast", 2, [(1e5, 0.1), (2e5, 0.2)], 1.0)
    with pytest.raises(ParamError, match="do not grow with the message size"):
        fit_price("allgather", 2, [(1e5, 0.2), (2e5, 0.1)], 1.0)


def _cal(eff: float = 1.0, fixed: float = 0.0, workers: int = 4) -> Calibration:
    return Calibration("gloo", NET.bandwidth_gbps, tuple(CollectivePrice(k, workers, eff, fixed) for k in COLLECTIVES), "t.json")


def test_a_calibration_of_efficiency_one_and_no_fixed_cost_prices_the_bare_model_volume() -> None:
    cal = _cal()
    for kind in COLLECTIVES:
        got, how = collective_seconds(kind, 3e5, 4, NET, calibration=cal)
        assert got == pytest.approx(COLLECTIVES[kind](3e5, 4).volume / BPS)
        assert how == "gloo measured"


def test_prices_scale_the_volume_by_their_efficiency_and_the_fixed_cost_by_latency_rounds() -> None:
    cal = _cal(eff=1.5, fixed=0.01, workers=4)
    got, how = collective_seconds("allgather", 1e5, 8, NET, calibration=cal)  # ring all-gather: 7 rounds at 8, 3 at 4
    assert got == pytest.approx(0.01 * 7 / 3 + 1.5 * 7 * 1e5 / BPS)
    assert how == "gloo measured at 4 workers"
    assert collective_seconds("allgather", 1e5, 1, NET, calibration=cal) == (0.0, "none")


def test_the_nearest_measured_worker_count_prices_a_collective() -> None:
    cal = Calibration("gloo", 1.0, (CollectivePrice("allreduce", 2, 1.1, 0.0), CollectivePrice("allreduce", 4, 1.3, 0.0)))
    assert cal.price("allreduce", 3).workers == 4  # a tie goes to the larger group
    assert cal.price("allreduce", 16).workers == 4
    assert cal.price("allreduce", 2).workers == 2
    assert cal.price("alltoall", 2) is None
    # a kind it did not measure falls back to the α–β model
    assert collective_seconds("alltoall", 1e5, 2, NET, calibration=cal) == collective_seconds("alltoall", 1e5, 2, NET)


def test_protocols_and_the_reference_are_priced_by_the_calibration() -> None:
    from gcbench.compressors import registry

    cal = _cal(eff=2.0)
    topk = registry.get("topk").protocol
    bare = protocol_seconds(topk, 1e5, 4, NET)[0]
    assert protocol_seconds(topk, 1e5, 4, NET, calibration=cal)[0] == pytest.approx(2 * 3 * 1e5 / BPS)
    assert bare < protocol_seconds(topk, 1e5, 4, NET, calibration=cal)[0]
    k = sk.StepKernels("none", "none", 0.0, 0.0, 0.001, 4e6, 4e6)
    step, comm = reference_step(k.cost(0.1), 4, NET, calibration=cal)
    assert comm == pytest.approx(2.0 * COLLECTIVES["allreduce"](4e6, 4).volume / BPS)
    assert step == pytest.approx(0.1 + 2 * 0.001 + comm)


def test_a_calibration_prices_flat_networks_only() -> None:
    with pytest.raises(ParamError, match="flat network"):
        collective_seconds("allreduce", 1e6, 8, NET, Topology(4, 100.0), calibration=_cal())


def test_the_file_round_trips_and_bad_files_are_one_results_error(tmp_path: Path) -> None:
    cal = Calibration("gloo", 0.02, (CollectivePrice("allgather", 2, 1.6, 0.003, ((1e5, 0.05), (2e5, 0.1))),))
    path = tmp_path / "net.json"
    path.write_text(json.dumps(cal.to_dict()))
    back = load_calibration(path)
    assert back.prices == cal.prices and back.backend == "gloo" and back.bandwidth_gbps == 0.02
    assert "allgather 1.60× the model's volume time + 3.0 ms at 2 workers" in back.describe()
    for text, match in (("{", "cannot read"), ('{"format": "x"}', "not a gcbench network calibration"),
                        ('{"format": "gcbench-network-calibration", "backend": "gloo"}', "damaged"),
                        ('{"format": "gcbench-network-calibration", "backend": "gloo", "bandwidth_gbps": 1, "prices": []}', "no price"),
                        (json.dumps({**cal.to_dict(), "prices": [{"kind": "allgather", "workers": 2, "efficiency": -1,
                                                                  "overhead_s": 0}]}), "not usable")):
        path.write_text(text)
        with pytest.raises(ResultsError, match=match):
            load_calibration(path)
    with pytest.raises(ResultsError, match="no calibration file"):
        load_calibration(tmp_path / "missing.json")


def test_advise_names_the_calibration_and_rejects_a_bad_one(tmp_path: Path, mlp_bench: Path) -> None:
    runner = CliRunner()
    path = tmp_path / "net.json"
    path.write_text(json.dumps(_cal(eff=1.4, fixed=0.002, workers=2).to_dict()))
    r = runner.invoke(app, ["advise", "--kernels", str(mlp_bench), "--workers", "2", "--bandwidth", "1", "--compute-ms", "5",
                            "--network", str(path)])
    assert r.exit_code == 0, r.output
    assert "collectives priced from" in r.output and "gloo measured" in r.output
    r = runner.invoke(app, ["advise", "--kernels", str(mlp_bench), "--workers", "2", "--bandwidth", "1", "--compute-ms", "5",
                            "--network", str(path), "--json"])
    assert json.loads(r.output)["calibration"]["backend"] == "gloo"
    path.write_text("not json")
    r = runner.invoke(app, ["advise", "--kernels", str(mlp_bench), "--workers", "2", "--compute-ms", "5", "--network", str(path)])
    assert r.exit_code != 0 and "cannot read the calibration" in r.output and "Traceback" not in r.output


@pytest.fixture(scope="module")
def mlp_bench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gcbench.measure.bench import bench_to_file

    outcome = bench_to_file(["none", "topk"], [], tmp_path_factory.mktemp("bench"), repeats=2, warmup=0, threads=1,
                            isolate=False, model="mlp")
    assert outcome.path is not None
    return outcome.path


def _measure(ctx: WorkerContext) -> dict[str, Any]:
    from gcbench.distributed.calibrate import measure

    # 1.25 and 20 MB per worker: a 16× spread, so the size shows through the noise of a loaded loopback
    return measure(10.0, seconds=(0.001, 0.016), repeats=3, group=ctx.group).to_dict()


def test_calibrate_times_every_collective_on_a_real_gloo_group() -> None:
    results = run_group(_measure, (), 2, timeout_s=120)
    cal = Calibration.from_dict(results[0])
    assert cal.backend == "gloo"
    assert sorted(p.kind for p in cal.prices) == sorted(COLLECTIVES)
    for p in cal.prices:
        assert p.workers == 2 and len(p.points) == 2
        assert p.points[0][0] < p.points[1][0]  # sizes from the volume times asked for
        assert all(t > 0 for _, t in p.points)
        assert 0 < p.efficiency < math.inf and p.overhead_s >= 0



def test_a_device_given_as_the_calibration_is_one_error() -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    # read to the end before: /dev/zero never ends
    with pytest.raises(ResultsError, match="/dev/zero: not a regular file: a calibration file must be a regular file, not a character"):
        load_calibration("/dev/zero")
