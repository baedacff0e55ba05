"""Tests of GradientRecorder and record_live: what a training loop records replays bit for bit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from gcbench.core.errors import ParamError, SourceError
from gcbench.sources.live import LiveSource
from gcbench.sources.recorder import GradientRecorder, merge_parts, record_live
from gcbench.sources.trace import MANIFEST, TraceSource

# 2 shared cores: a second intra-op thread only adds spin-wait under load (see conftest.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 2))


def _train(model: nn.Module, steps: int, rec: GradientRecorder | None, seed: int = 0) -> dict[int, dict[str, torch.Tensor]]:
    """A plain SGD loop; returns a copy of every step's gradients for comparison."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(seed)
    seen: dict[int, dict[str, torch.Tensor]] = {}
    for step in range(steps):
        x, y = torch.randn(8, 5, generator=g), torch.randint(0, 2, (8,), generator=g)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        seen[step] = {n: p.grad.clone() for n, p in model.named_parameters()}
        if rec is not None:
            rec.record(step)
        opt.step()
        opt.zero_grad()
    return seen


def test_records_selected_steps_and_replays_bit_identical(tmp_path: Path) -> None:
    model = _model()
    with GradientRecorder(tmp_path / "r", model, steps=[1, 3, 4], model_name="toy", seed=5) as rec:
        assert not (tmp_path / "r" / MANIFEST).exists()  # only written on close
        seen = _train(model, 6, rec)
        assert rec.recorded_steps == [1, 3, 4]
    tr = TraceSource(tmp_path / "r")
    assert tr.steps == 3 and tr.workers == 1 and tr.model == "toy" and tr.seed == 5
    assert [s.name for s in tr.layout()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    for i, step in enumerate([1, 3, 4]):
        g = tr.gradients(i, 0)
        for name, want in seen[step].items():
            assert torch.equal(g[name], want), (step, name)
    m = json.loads((tmp_path / "r" / MANIFEST).read_text())
    assert m["recorded_steps"] == [1, 3, 4] and m["format_version"] == 1


def test_record_returns_whether_it_recorded_and_accepts_model_per_call(tmp_path: Path) -> None:
    model = _model()
    rec = GradientRecorder(tmp_path / "r", steps=range(0, 10, 5))
    model(torch.randn(2, 5)).sum().backward()
    assert rec.record(0, model) is True
    assert rec.record(1, model) is False
    assert rec.record(5, model) is True
    with pytest.raises(SourceError, match=r"step 5 was already recorded"):
        rec.record(5, model)
    assert rec.close() == tmp_path / "r" / MANIFEST
    assert TraceSource(tmp_path / "r").steps == 2
    with pytest.raises(SourceError, match=r"closed"):
        rec.record(0, model)


def test_all_steps_when_none_selected(tmp_path: Path) -> None:
    model = _model()
    with GradientRecorder(tmp_path / "r", model) as rec:
        _train(model, 3, rec)
    assert TraceSource(tmp_path / "r").steps == 3


def test_missing_gradient_later_is_zero_and_new_gradient_is_an_error(tmp_path: Path) -> None:
    model = _model()
    rec = GradientRecorder(tmp_path / "r", model)
    model(torch.randn(2, 5)).sum().backward()
    rec.record(0)
    model[2].bias.grad = None  # e.g. an unused branch at this step
    rec.record(1)
    rec.close()
    g = TraceSource(tmp_path / "r").gradients(1, 0)
    assert torch.equal(g["2.bias"], torch.zeros(2))

    model2 = _model()
    rec2 = GradientRecorder(tmp_path / "r2", model2)
    model2[0].weight.requires_grad_(False)
    model2(torch.randn(2, 5)).sum().backward()
    rec2.record(0)
    model2[0].weight.requires_grad_(True)
    model2.zero_grad()
    model2(torch.randn(2, 5)).sum().backward()
    with pytest.raises(SourceError, match=r"'0.weight' has a gradient but had none"):
        rec2.record(1)


def test_half_precision_gradients_keep_their_dtype(tmp_path: Path) -> None:
    model = _model().to(torch.bfloat16)
    model(torch.randn(2, 5, dtype=torch.bfloat16)).sum().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    with GradientRecorder(tmp_path / "r", model) as rec:
        rec.record(0)
    tr = TraceSource(tmp_path / "r")
    assert all(s.dtype == torch.bfloat16 for s in tr.layout())
    assert all(torch.equal(tr.gradients(0, 0)[n], w) for n, w in want.items())


def test_usage_errors(tmp_path: Path) -> None:
    rec = GradientRecorder(tmp_path / "a")
    with pytest.raises(ParamError, match=r"pass the model"):
        rec.record(0)
    model = _model()
    with pytest.raises(SourceError, match=r"no parameter has a gradient"):
        rec.record(0, model)
    with pytest.raises(SourceError, match=r"no step was recorded"):
        GradientRecorder(tmp_path / "b", model, steps=[7]).close()
    with pytest.raises(ParamError, match=r"worker must be in 0..1"):
        GradientRecorder(tmp_path / "c", worker=2, workers=2)
    # an existing trace is not overwritten silently
    with GradientRecorder(tmp_path / "d", model) as r:
        model(torch.randn(2, 5)).sum().backward()
        r.record(0)
    with pytest.raises(SourceError, match=r"already holds a trace"):
        GradientRecorder(tmp_path / "d", model)
    GradientRecorder(tmp_path / "d", model, overwrite=True)
    assert not (tmp_path / "d" / MANIFEST).exists()


def test_exception_in_the_loop_keeps_recorded_steps_and_propagates(tmp_path: Path) -> None:
    model = _model()
    with pytest.raises(RuntimeError, match=r"boom"), GradientRecorder(tmp_path / "r", model) as rec:
        _train(model, 2, rec)
        raise RuntimeError("boom")
    assert TraceSource(tmp_path / "r").steps == 2


def test_two_workers_merge_into_one_trace(tmp_path: Path) -> None:
    out = tmp_path / "dp"
    models = [_model(), _model()]
    recs = [GradientRecorder(out, models[w], worker=w, workers=2, steps=[0, 2], model_name="toy") for w in range(2)]
    seen = [_train(models[w], 3, recs[w], seed=10 + w) for w in range(2)]
    assert recs[1].close() is None  # worker 0's part is still missing
    assert not (out / MANIFEST).exists()
    assert recs[0].close() == out / MANIFEST
    tr = TraceSource(out)
    assert tr.workers == 2 and tr.steps == 2
    for w in range(2):
        for i, step in enumerate([0, 2]):
            assert all(torch.equal(tr.gradients(i, w)[n], seen[w][step][n]) for n in seen[w][step])
    # parts that disagree are refused, naming the part file
    part = json.loads((out / "part-worker01.json").read_text())
    part["recorded_steps"] = [0, 1]
    (out / "part-worker01.json").write_text(json.dumps(part))
    with pytest.raises(SourceError, match=r"part-worker01.json: recorded training steps"):
        merge_parts(out, 2)


def test_record_live_matches_live_source(tmp_path: Path) -> None:
    calls: list[int] = []
    out = record_live("mlp", steps=2, workers=2, out=tmp_path / "live", seed=4, warmup_steps=1,
                      progress=lambda d, t, m: calls.append(d), batch_size=8)
    assert calls == [1, 2, 3, 4, 5]
    tr = TraceSource(out)
    live = LiveSource("mlp", workers=2, steps=2, seed=4, warmup_steps=1, batch_size=8)
    assert tr.model == "mlp" and tr.layout() == live.layout()
    for step in range(2):
        for w in range(2):
            g, want = tr.gradients(step, w), live.gradients(step, w)
            assert all(torch.equal(g[s.name], want[s.name]) for s in tr.layout())
    desc = tr.describe()["recorded_source"]
    assert desc["warmup_steps"] == 1 and desc["model_kwargs"] == {"batch_size": 8}  # type: ignore[index]


@pytest.mark.parametrize("content", ["[]", '{"worker": 1}', "[" * 50_000 + "]" * 50_000,
                                     '{"worker": 1, "model": "m", "seed": 0, "recorded_steps": [0], "files": {"s0_w1": 3}, "tensors": []}'],
                         ids=["list", "missing-keys", "nested", "non-string-file"])
def test_a_malformed_part_file_is_one_line_naming_it(tmp_path: Path, content: str) -> None:
    out = tmp_path / "r"
    m = _model()
    with GradientRecorder(out, m, worker=0, workers=2) as rec:
        m(torch.randn(3, 5)).sum().backward()
        rec.record(0)
    (out / "part-worker01.json").write_text(content, encoding="utf-8")
    with pytest.raises(SourceError, match=r"part-worker01\.json: not"):
        merge_parts(out, 2)


def test_an_output_that_is_a_file_fails_before_the_model_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gcbench.sources.recorder

    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was built before the output folder was checked")

    monkeypatch.setattr(gcbench.sources.recorder, "LiveSource", no_model)
    afile = tmp_path / "afile"
    afile.write_text("x", encoding="utf-8")
    with pytest.raises(SourceError, match=r"^cannot write .*afile"):
        record_live("mlp", steps=1, workers=1, out=afile / "trace")
    with pytest.raises(SourceError, match="cannot write"):
        GradientRecorder(afile / "t", _model(), worker=1, workers=2)


# ----------------------------------------------------------------------------- issue 34: one recording per folder


def test_a_second_recording_into_a_folder_being_recorded_is_refused(tmp_path: Path) -> None:
    """Two `gcbench record` runs into one folder used to both exit 0, leaving a manifest of one with the files of the other."""
    from typer.testing import CliRunner

    from gcbench.cli import app
    from gcbench.sources.trace import LOCK, acquire_lock

    out = tmp_path / "t"
    out.mkdir()
    release = acquire_lock(out / LOCK, out)  # a recording in progress (another process, in real life)
    try:
        r = CliRunner().invoke(app, ["record", "--model", "mlp", "--out", str(out), "--steps", "1", "--workers", "1", "-q"])
        assert r.exit_code == 1 and "Traceback" not in r.output, r.output
        assert f"error: {out}: another gcbench recording is writing into this folder" in r.output.replace("\n", "")
        assert not (out / MANIFEST).exists() and not list(out.glob("*.safetensors"))
        with pytest.raises(SourceError, match="another gcbench recording"):
            record_live("mlp", steps=1, workers=1, out=out)
    finally:
        release()
    assert not (out / LOCK).exists()
    record_live("mlp", steps=1, workers=1, out=out)  # free again: the lock went with its holder
    assert (out / MANIFEST).is_file() and not (out / LOCK).exists()


def test_two_recorders_of_one_worker_cannot_share_a_folder(tmp_path: Path) -> None:
    m = _model()
    with GradientRecorder(tmp_path / "r", m) as rec:
        with pytest.raises(SourceError, match="another gcbench recording"):
            GradientRecorder(tmp_path / "r", m)
        _train(m, 1, rec)
    # the workers of one trace write side by side: one lock per worker
    with GradientRecorder(tmp_path / "r2", m, worker=1, workers=2) as r1, GradientRecorder(tmp_path / "r2", m, workers=2) as r0:
        _train(m, 1, r1)
        _train(m, 1, r0)
    TraceSource(tmp_path / "r2")


def _mix(tmp_path: Path) -> Path:
    """Trace ``a`` (seed 1) with the step files of trace ``b`` (seed 2): what two concurrent recordings left."""
    a = record_live("mlp", steps=2, workers=1, out=tmp_path / "a", seed=1)
    b = record_live("mlp", steps=2, workers=1, out=tmp_path / "b", seed=2)
    (b / "step0001_worker00.safetensors").replace(a / "step0001_worker00.safetensors")
    return a


def test_a_trace_holding_files_of_another_recording_is_refused(tmp_path: Path) -> None:
    a = _mix(tmp_path)
    with pytest.raises(SourceError, match=r"step0001_worker00\.safetensors: belongs to another recording") as info:
        TraceSource(a)
    assert "\n" not in str(info.value)
    lazy = TraceSource(a, check_files=False).gradients(1, 0)  # the lazy reader checks it too
    with pytest.raises(SourceError, match="belongs to another recording"):
        lazy[next(iter(lazy))]


def test_validate_reports_a_mixed_trace(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gcbench.cli import app

    a = _mix(tmp_path)
    suite = tmp_path / "s.toml"
    suite.write_text(f'name = "t"\nseed = 0\n[[sources]]\nkind = "trace"\npath = "{a}"\n[[compressors]]\nname = "none"\n')
    r = CliRunner().invoke(app, ["validate", str(suite)])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert "belongs to another recording" in r.output.replace("\n", ""), r.output


def test_a_multi_worker_recording_keeps_one_id_per_worker(tmp_path: Path) -> None:
    out = tmp_path / "r"
    for w in (0, 1):
        m = _model()
        with GradientRecorder(out, m, worker=w, workers=2) as rec:
            _train(m, 2, rec, seed=w)
    manifest = json.loads((out / MANIFEST).read_text())
    assert len(set(manifest["recording_ids"])) == 2
    TraceSource(out)  # each worker's files carry their worker's id
    shutil.copy(out / "step0000_worker00.safetensors", out / "step0000_worker01.safetensors")
    with pytest.raises(SourceError, match=r"step0000_worker01\.safetensors: belongs to another recording"):
        TraceSource(out)


def test_a_full_disk_while_recording_is_one_line_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """safetensors reports a full disk as a SafetensorError; it used to escape as a traceback."""
    from safetensors import SafetensorError
    from typer.testing import CliRunner

    import gcbench.sources.trace as trace
    from gcbench.cli import app

    real = trace.save_file
    calls = {"n": 0}

    def fill_up(tensors: object, filename: str, metadata: object = None) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        real(tensors, filename, metadata=metadata)  # type: ignore[arg-type]

    monkeypatch.setattr(trace, "save_file", fill_up)
    out = tmp_path / "t"
    r = CliRunner().invoke(app, ["record", "--model", "mlp", "--out", str(out), "--steps", "2", "--workers", "1", "-q"])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert f"error: cannot write {out / 'step0001_worker00.safetensors'}: No space left on device" in r.output.replace("\n", "")
    assert sorted(p.name for p in out.iterdir()) == ["step0000_worker00.safetensors"]  # no temporary file, no manifest
