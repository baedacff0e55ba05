"""gcbench record --device: where the forward and backward passes run; a GPU that is not here is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from gcbench.sources.live import LiveSource, _on_device


def _record(out: Path, *extra: str) -> object:
    from gcbench.cli import app

    return CliRunner().invoke(app, ["record", "--model", "digits", "--out", str(out), "--steps", "1", "--workers", "1", "-q",
                                    *extra])


def test_device_cpu_records_what_the_default_records(tmp_path: Path) -> None:
    a, b = _record(tmp_path / "a"), _record(tmp_path / "b", "--device", "cpu")
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)  # type: ignore[attr-defined]
    ma, mb = (json.loads((tmp_path / x / "manifest.json").read_text()) for x in "ab")
    untimed = [{k: v for k, v in m["source"].items() if k != "compute_s"} for m in (ma, mb)]
    assert untimed[0] == untimed[1] and "device" not in untimed[0]  # a CPU trace's source is as before devices
    names = sorted(p.name for p in (tmp_path / "a").glob("*.safetensors"))
    assert names
    for name in names:
        ta, tb = load_file(tmp_path / "a" / name), load_file(tmp_path / "b" / name)
        assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


@pytest.mark.parametrize("device", ["cuda", "cuda:3"])
def test_cuda_without_cuda_is_one_line_before_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = _record(tmp_path / "t", "--device", device)
    assert r.exit_code == 1 and "no CUDA device is available" in r.output  # type: ignore[attr-defined]
    assert not (tmp_path / "t").exists()


def test_a_missing_gpu_index_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    r = _record(tmp_path / "t", "--device", "cuda:1")
    assert r.exit_code == 1 and "there is no GPU 1 here" in r.output  # type: ignore[attr-defined]


def test_batches_follow_the_device() -> None:
    made = _on_device(lambda i, w: (torch.ones(2), {"y": torch.zeros(1)}, "text"), torch.device("meta"))(0, 0)
    assert made[0].device.type == "meta" and made[1]["y"].device.type == "meta" and made[2] == "text"
    src = LiveSource("digits", workers=1, steps=1, device="cpu")
    assert src.device == torch.device("cpu") and src.gradients(0, 0)
