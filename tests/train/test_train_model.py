"""gcbench train --model and --device: a zoo model and a user factory under 2 gloo processes, the device checks, and
the measured step held against advise's prediction."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from gcbench.core.errors import TrainError
from gcbench.train.prediction import (
    PRICE_PROBE_BYTES,
    PRICED,
    _spread,
    measure_transport,
    predict_case,
    prediction_line,
    transport_calibration,
    transport_line,
)
from gcbench.train.rank_devices import agree_on_devices, check_local_devices, rank_device
from gcbench.train.workers import WorkerContext, run_group

FACTORY = str(Path(__file__).resolve().parents[1] / "user_factory.py") + ":tiny"


def _train(tmp_path: Path, *args: str) -> Any:
    from gcbench.cli import app

    return CliRunner().invoke(app, ["train", "--workers", "2", "--epochs", "1", "--timeout", "120", "--out", str(tmp_path),
                                    "--quiet", *args])


def _only_file(tmp_path: Path) -> dict[str, Any]:
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1
    return dict(json.loads(files[0].read_text()))


def test_user_factory_trains_on_two_gloo_processes_and_is_held_against_advise(tmp_path: Path) -> None:
    res = _train(tmp_path, "--model", FACTORY, "--trust-code", "-c", "fp16")
    assert res.exit_code == 0, res.output
    data = _only_file(tmp_path)
    env = data["environment"]
    assert env["device"] == "cpu" and env["backend"] == "gloo" and env["device_name"]
    for case in data["cases"]:
        tr = case["training"]
        assert case["status"] == "ok" and tr["workers"] == 2 and tr["device"] == "cpu" and tr["replicas_consistent"]
        assert tr["steps"] == 10 and tr["task"]["model"] == FACTORY
        pred, transport = tr["prediction"], tr["transport"]
        assert transport["workers"] == 2 and transport["bandwidth_gbps"] > 0 and transport["latency_s"] > 0
        assert pred["step_s"] > pred["compute_s"] >= 0 and pred["measured_step_s"] == tr["step_time"]["total_s"]
        wait = tr["peer_wait"]  # two workers of one host: each one's mean wait for the slower one's backward
        assert len(wait["per_rank_s"]) == 2 and min(wait["per_rank_s"]) >= 0
        assert wait["mean_s"] == pytest.approx(sum(wait["per_rank_s"]) / 2)
        line = prediction_line(case["label"], pred, wait)
        assert line is not None and "for the slowest one's backward pass" in line and line in " ".join(res.output.split())
    assert "transport measured here: 2 workers" in " ".join(res.output.split())


def test_zoo_model_trains_on_two_gloo_processes(tmp_path: Path) -> None:
    res = _train(tmp_path, "--model", "digits", "-c", "none", "--batch-size", "8")
    assert res.exit_code == 0, res.output
    (case,) = _only_file(tmp_path)["cases"]
    tr = case["training"]
    assert tr["task"]["model"] == "digits" and tr["metric"] == "accuracy" and 0 <= tr["final_accuracy"] <= 1
    assert case["size"]["numel"] == 50_826 and tr["prediction"]["step_s"] > 0
    assert "advise predicted" in res.output


def test_a_user_factory_needs_trust_code(tmp_path: Path) -> None:
    res = _train(tmp_path, "--model", FACTORY)
    assert res.exit_code == 1 and "--trust-code" in res.output and "Traceback" not in res.output
    assert not list(tmp_path.glob("*.json"))


def test_task_and_model_together_are_refused(tmp_path: Path) -> None:
    res = _train(tmp_path, "--task", "digits", "--model", "digits")
    assert res.exit_code == 1 and "not both" in res.output


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_without_cuda_is_one_line_before_any_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res = _train(tmp_path, "--device", device, "-c", "topk")
    assert res.exit_code == 1 and "no CUDA device is available" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not list(tmp_path.glob("*.json"))


def test_a_device_that_is_not_one_is_a_usage_error(tmp_path: Path) -> None:
    res = _train(tmp_path, "--device", "gpu")
    assert res.exit_code == 2 and "expected cpu, cuda or cuda:N" in res.output


def test_nccl_needs_one_gpu_per_local_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    check_local_devices("cuda", 1)
    check_local_devices("cpu", 8)
    with pytest.raises(TrainError, match="NCCL needs one GPU per rank and this machine has 1 for 2 workers"):
        check_local_devices("cuda", 2)
    with pytest.raises(TrainError, match="names one GPU"):
        check_local_devices("cuda:0", 2)
    assert rank_device("cuda", 0) == (torch.device("cuda", 0), None)
    device, why = rank_device("cuda", 1)
    assert device is None and why is not None and "one GPU per rank" in why


def _mixed(ctx: WorkerContext) -> str:
    """Rank 1 claims a GPU while rank 0 stays on the CPU (what a node without GPUs in a GPU job looks like)."""
    import gcbench.train.rank_devices as placement

    if ctx.rank == 1:
        placement.rank_device = lambda text, local: (torch.device("cuda", 0), None)
    return str(agree_on_devices("cpu", ctx.rank, ctx.world_size))


def test_mixed_devices_across_ranks_end_every_rank_in_one_line() -> None:
    with pytest.raises(TrainError, match=r"mixed devices across ranks \(rank 0 cpu, rank 1 cuda:0\)"):
        run_group(_mixed, (), 2, timeout_s=60)


def _agreed(ctx: WorkerContext) -> dict[str, Any]:
    device = agree_on_devices("cpu", ctx.rank, ctx.world_size)
    return {"device": str(device), **measure_transport(ctx.group, device, ctx.world_size, 4096, rounds=2)}


def test_ranks_agree_on_the_cpu_and_measure_their_transport() -> None:
    out = run_group(_agreed, (), 2, timeout_s=60)
    assert [o["device"] for o in out] == ["cpu", "cpu"]
    for o in out:
        assert o["large_s"] > 0 and o["small_s"] > 0 and math.isfinite(o["bandwidth_gbps"]) and o["nbytes"] == 1 << 20
        # the all-gather and all-to-all, each priced as the transport issues them, or the reason it could not be
        priced, failed = {p["kind"]: p for p in o["prices"]}, o["price_errors"] or {}
        assert o["backend"] == "gloo" and set(priced) | set(failed) == set(PRICED) and not set(priced) & set(failed)
        for price in priced.values():
            assert price["workers"] == 2 and [b for b, _ in price["points"]] == [8.0, float(PRICE_PROBE_BYTES)]
            assert price["efficiency"] > 0 and price["overhead_s"] >= 0 and all(t > 0 for _, t in price["points"])


def test_one_worker_has_no_communication_to_price() -> None:
    t = measure_transport(None, torch.device("cpu"), 1, 4096)
    assert t["latency_s"] == 0 and t["large_s"] == 0


def _record(total: float, compute: float, samples: list[float]) -> dict[str, Any]:
    return {"label": "topk", "compressor": "topk", "params": {"density": 0.01},
            "training": {"workers": 4, "decoded_payloads_per_step": 4,
                         "step_time": {"total_s": total, "compute_s": compute, "compress_s": 0.002, "decompress_s": 0.004},
                         "bytes": {"payload_bytes_per_step": 8e4, "dense_bytes_per_step": 4e6},
                         "step_samples_rank0": {"total_s": samples},
                         "transport": {"workers": 4, "latency_s": 1e-4, "bandwidth_gbps": 8.0}}}


def test_prediction_is_advise_step_model_with_the_reference_compute() -> None:
    from gcbench.predict.network import Network
    from gcbench.predict.step import StepCost, price_step

    rec = _record(0.05, 0.03, [0.2, 0.05, 0.049, 0.051, 0.05, 0.052])
    ref = {"training": {"step_time": {"compute_s": 0.025}}}
    pred = predict_case(rec, ref)
    assert pred is not None
    cost = StepCost("topk", "topk", 8e4, 4e6, 0.025, 0.002, 0.001, params=(("density", 0.01),), measured_workers=4)
    assert pred["step_s"] == price_step(cost, 4, Network(8.0, 1e-4)).step_s
    assert pred["compute_s"] == 0.025 and pred["measured_step_s"] == 0.05
    assert predict_case(rec, None)["compute_s"] == 0.03  # type: ignore[index]  # no reference: its own compute


def test_the_transports_priced_collectives_price_the_prediction() -> None:
    """A transport with an all-gather price (1 ms a call + 2× the model's volume time): topk's all-gather leg is priced
    from it, as `advise --network` prices a calibrated collective; without prices, the α–β model of the all-reduces."""
    from gcbench.predict.network import Network
    from gcbench.predict.step import StepCost, price_step

    rec = _record(0.05, 0.03, [0.05] * 6)
    plain = predict_case(rec, None)
    price = {"kind": "allgather", "workers": 4, "efficiency": 2.0, "overhead_s": 1e-3, "points": [[16.0, 1e-3], [8e6, 9e-3]]}
    rec["training"]["transport"].update(backend="gloo", prices=[price])
    pred = predict_case(rec, None)
    assert plain is not None and pred is not None and pred["collective"] == "allgather (gloo measured)"
    cal = transport_calibration(rec["training"]["transport"])
    assert cal is not None and cal.price("allgather", 4) is not None and cal.price("alltoall", 4) is None
    cost = StepCost("topk", "topk", 8e4, 4e6, 0.03, 0.002, 0.001, params=(("density", 0.01),), measured_workers=4)
    assert pred["step_s"] == price_step(cost, 4, Network(8.0, 1e-4), calibration=cal).step_s
    # a ring all-gather moves (n − 1)·m through a link: 3 × 80 kB at 1 GB/s, twice (the efficiency), plus the call
    assert pred["communicate_s"] == pytest.approx(1e-3 + 2.0 * 3 * 8e4 / 1e9)
    assert plain["communicate_s"] == pytest.approx(1e-4 * 3 + 3 * 8e4 / 1e9)
    line = transport_line({**rec["training"]["transport"], "nbytes": 1 << 20})
    assert line is not None and "allgather 1.00 ms a call + 2.00× the model's volume time" in line
    assert transport_calibration({"workers": 4, "latency_s": 1e-4, "bandwidth_gbps": 8.0}) is None  # an older file


def test_prediction_line_says_how_far_and_which_way() -> None:
    line = prediction_line("topk", {"step_s": 0.038, "measured_step_s": 0.0412, "measured_spread_s": 0.0013})
    assert line == "topk: measured 41.2 ms ± 1.30 per step, advise predicted 38.0 ms (8% under)"
    over = prediction_line("none", {"step_s": 0.005, "measured_step_s": 0.004, "measured_spread_s": None})
    assert over == "none: measured 4.00 ms per step, advise predicted 5.00 ms (25% over)"
    assert prediction_line("x", {"step_s": None, "error": "cannot price"}) is None
    waited = prediction_line("none", {"step_s": 0.005, "measured_step_s": 0.004}, {"mean_s": 0.00047, "per_rank_s": [0.0004, 0.00054]})
    assert waited == ("none: measured 4.00 ms per step, advise predicted 5.00 ms (25% over); a worker waited 0.470 ms a step on "
                      "average for the slowest one's backward pass, which the model leaves out")


def _rank(ready: list[float | None], clock: str = "host/boot") -> dict[str, Any]:
    return {"clock": clock, "steps": [{"ready_at": t} for t in ready]}


def test_peer_wait_is_each_workers_mean_wait_for_the_slowest_backward_on_one_clock() -> None:
    """Which worker is slower changes from step to step: each waits 0 in some steps, so each rank's mean, not its median."""
    from gcbench.train.case import peer_wait

    # step 0 (DDP building its buckets) is left out; then rank 1 is 2 ms late, rank 0 is 1 ms late, rank 1 is 3 ms late
    got = peer_wait([_rank([0.0, 10.0, 20.001, 30.0]), _rank([5.0, 10.002, 20.0, 30.003])])
    assert got is not None
    assert got["per_rank_s"] == pytest.approx([(0.002 + 0 + 0.003) / 3, (0 + 0.001 + 0) / 3])
    assert got["mean_s"] == pytest.approx((0.005 / 3 + 0.001 / 3) / 2)
    assert peer_wait([_rank([1.0, 2.0])]) is None  # one worker waits for nobody
    assert peer_wait([_rank([1.0, 2.0]), _rank([1.0, 2.0], clock="other/boot")]) is None  # clocks of two hosts
    assert peer_wait([_rank([1.0, 2.0]), _rank([1.0, None])]) is None  # a step without its time
    assert peer_wait([_rank([1.0]), _rank([1.5])]) == {"mean_s": pytest.approx(0.25), "per_rank_s": [pytest.approx(0.5), 0.0]}


def test_a_steps_ready_time_is_its_last_buckets() -> None:
    from gcbench.distributed.hook_stats import BucketStats, StepStats

    def bucket(i: int, ready: float | None) -> BucketStats:
        return BucketStats(i, 4, 1, "allreduce", "allreduce", 16, 16, 16, 1, 0.0, 0.0, 0.0, ready_at=ready)

    assert StepStats(0, [bucket(0, 3.0), bucket(1, 5.0)]).ready_at == 5.0
    assert StepStats(0, [bucket(0, 3.0), bucket(1, None)]).ready_at is None and StepStats(0, []).ready_at is None


def test_spread_is_half_the_interquartile_range_after_the_first_step() -> None:
    # the first (9.0) is left out; quartiles of 1..5 at positions 1.5 and 4.5 (statistics.quantiles exclusive): 1.5, 4.5
    assert _spread([9.0, 1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx((4.5 - 1.5) / 2)
    assert _spread([1.0, 2.0]) is None


def test_a_zoo_model_trains_on_its_own_batch_unless_told() -> None:
    from gcbench.sources import catalog
    from gcbench.train.config import TrainConfig

    assert TrainConfig(model="digits").resolved().batch_size == catalog.lookup("digits").options["batch_size"]
    assert TrainConfig(model="digits", batch_size=8).resolved().batch_size == 8
    assert TrainConfig(model=FACTORY).resolved().batch_size is None  # the factory's own
    assert TrainConfig(model="hf:gpt2").resolved().lr == 1e-4


def test_more_workers_than_gpus_is_one_line_before_any_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    res = _train(tmp_path, "--device", "cuda", "-c", "topk")  # 2 workers, 1 GPU
    assert res.exit_code == 1 and "NCCL needs one GPU per rank and this machine has 1 for 2 workers" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not list(tmp_path.glob("*.json"))
