"""GPU timing on the CPU: CUDA events drive every timed call on a CUDA device (a fake event class stands in for
torch.cuda.Event), the CPU keeps its host clock, and CUDA bench rows are held to the GPU targets."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import pytest
import torch

from gcbench.compressors import registry
from gcbench.measure.bench_verdict import kernel_verdict
from gcbench.measure.gpu_targets import GPU_TARGET_NUMEL, gpu_target, gpu_verdict
from gcbench.measure.timing import CudaEventTimer, TimingPolicy, host_timer, time_call, time_interleaved, timer_for


class FakeGpu:
    """A stream's clock in milliseconds that the timed functions advance; events read it when recorded."""

    now_ms = 0.0
    records: ClassVar[list[Any]] = []

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing
            self.at: float | None = None
            self.synced = False

        def record(self, stream: Any = None) -> None:
            self.at = FakeGpu.now_ms
            FakeGpu.records.append(stream)

        def synchronize(self) -> None:
            self.synced = True

        def elapsed_time(self, end: FakeGpu.Event) -> float:
            assert end.synced and self.at is not None and end.at is not None
            return end.at - self.at


def _gpu_work(ms: float) -> Any:
    def fn() -> None:
        FakeGpu.now_ms += ms

    return fn


def test_event_timer_reads_the_stream_not_the_host() -> None:
    timer = CudaEventTimer("cuda:0", event=FakeGpu.Event, stream="stream-0")
    assert timer(_gpu_work(2.5)) == pytest.approx(2.5e-3)
    assert FakeGpu.records[-2:] == ["stream-0", "stream-0"]


def test_a_cuda_device_times_with_events_and_never_synchronises_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "Event", FakeGpu.Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: f"stream of {device}")

    def no_sync(device: Any = None) -> None:
        raise AssertionError("the event path must not synchronise the whole device around a call")

    monkeypatch.setattr(torch.cuda, "synchronize", no_sync)
    host = iter(range(10**6))  # the host clock only keeps the budget: any value will do
    policy = TimingPolicy(warmup=1, min_rounds=5, max_rounds=5, budget_s=1e9)
    timed = time_interleaved(_gpu_work(1.0), {"compress": _gpu_work(3.0), "decompress": _gpu_work(0.5)}, policy, "cuda:1",
                             clock=lambda: float(next(host)), load=lambda: None)
    assert timed.copy == [pytest.approx(1e-3)] * 5
    assert timed.x_copy("compress") == [pytest.approx(3.0)] * 5 and timed.x_copy("decompress") == [pytest.approx(0.5)] * 5
    assert FakeGpu.records[-1] == "stream of cuda:1"
    t = time_call(_gpu_work(4.0), repeats=3, warmup=1, device="cuda")
    assert t.samples == [pytest.approx(4e-3)] * 3


def test_the_cpu_keeps_its_host_clock() -> None:
    ticks = iter([0.0, 0.25, 1.0, 1.5])
    timer = timer_for("cpu", clock=lambda: next(ticks))
    assert timer(lambda: None) == 0.25 and timer(lambda: None) == 0.5
    ticks2 = iter([10.0, 13.0])
    assert host_timer("cpu", lambda: next(ticks2))(lambda: None) == 3.0


def test_gpu_targets_by_kind_and_from_the_card(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gpu_target("fp16") == 3.0 and gpu_target("qsgd") == 3.0 and gpu_target("topk") == 10.0
    assert gpu_target("powersgd") is None and gpu_target("not-a-compressor") is None
    card = registry.get("qsgd")
    assert card.target is not None
    own = dataclasses.replace(card, target=dataclasses.replace(card.target, gpu_x_copy=2.0))
    real_get = registry.get
    monkeypatch.setattr(registry, "get", lambda name: own if name == "qsgd" else real_get(name))
    assert gpu_target("qsgd") == 2.0


def _row(name: str, numel: int, c: float, d: float, flags: tuple[str, ...] = (), device: str = "cuda:0") -> dict[str, Any]:
    return {"compressor": name, "numel": numel, "device": device, "compress_x_copy": c, "decompress_x_copy": d,
            "x_copy": {"compress": {"flags": list(flags)}, "decompress": {"flags": []}}}


def test_cuda_rows_are_held_to_the_gpu_target_at_64m() -> None:
    assert gpu_verdict(_row("qsgd", GPU_TARGET_NUMEL, 2.9, 1.0)) == ("≤ 3× device copy @64M", "pass")
    assert gpu_verdict(_row("qsgd", GPU_TARGET_NUMEL, 3.1, 1.0))[1] == "short"
    assert gpu_verdict(_row("topk", GPU_TARGET_NUMEL, 9.0, 11.0))[1] == "short"
    assert gpu_verdict(_row("topk", GPU_TARGET_NUMEL, 9.0, 2.0, ("unstable",)))[1] == "flagged"
    assert gpu_verdict(_row("qsgd", 1 << 20, 50.0, 50.0))[1] == "—"  # launch latency at 1M: reported, not judged
    assert kernel_verdict(_row("topk", GPU_TARGET_NUMEL, 9.0, 2.0)) == ("≤ 10× device copy @64M", "pass")
    cpu = kernel_verdict(_row("topk", GPU_TARGET_NUMEL, 9.0, 2.0, device="cpu"))
    assert "device copy" not in cpu[0]  # a CPU row keeps the card's CPU target


@pytest.mark.parametrize(("device", "code", "needle"), [
    ("cuda:x", 2, "expected cpu, cuda or cuda:N"), ("gpu", 2, "unknown device 'gpu'"),
    ("cuda:1", 1, "there is no GPU 1 here (1 visible: cuda:0..cuda:0)")])
def test_bench_device_is_checked_before_any_case(device: str, code: int, needle: str, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from gcbench.cli import app

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    r = CliRunner().invoke(app, ["bench", "-c", "none", "--sizes", "1K", "--device", device, "-q", "-o", str(tmp_path)])
    assert r.exit_code == code and needle in " ".join(r.output.split()), r.output
    assert not list(tmp_path.glob("*.json"))
