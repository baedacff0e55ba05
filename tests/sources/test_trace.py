"""Tests of trace writing and lazy replay: round trip, laziness, validation of broken traces."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import gcbench
from gcbench.core.errors import ParamError, SourceError
from gcbench.sources import trace as trace_mod
from gcbench.sources.base import GradientSource, TensorSpec
from gcbench.sources.live import LiveSource
from gcbench.sources.synthetic import SyntheticSource
from gcbench.sources.trace import MANIFEST, LazyGradients, TraceSource, write_trace

# 2 shared cores: a second intra-op thread only adds spin-wait under load (see conftest.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")


SHAPES = [(4, 3), (7,), (2, 2, 2), (0,), (5,)]
NAMES = ["conv.weight", "conv.bias", "block.w", "empty", "head.bias"]


def _synthetic(steps: int = 2, workers: int = 3) -> SyntheticSource:
    return SyntheticSource(SHAPES, "student-t", workers=workers, steps=steps, seed=7, names=NAMES)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32 if t.element_size() == 4 else torch.int16)


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    return write_trace(_synthetic(), tmp_path / "t", "synthetic-test", 7)


def test_round_trip_bit_identical_and_manifest(trace_dir: Path) -> None:
    src = _synthetic()
    tr = TraceSource(trace_dir)
    assert tr.steps == 2 and tr.workers == 3 and tr.model == "synthetic-test" and tr.seed == 7
    assert tr.layout() == src.layout()
    for step in range(2):
        for w in range(3):
            got, want = tr.gradients(step, w), src.gradients(step, w)
            assert list(got) == NAMES and len(got) == len(NAMES)
            for n in NAMES:
                assert got[n].dtype == torch.float32 and torch.equal(_bits(got[n]), _bits(want[n]))
    m = json.loads((trace_dir / MANIFEST).read_text())
    assert m["format_version"] == 1 and m["gcbench_version"] == gcbench.__version__
    assert m["model"] == "synthetic-test" and m["steps"] == 2 and m["workers"] == 3 and m["seed"] == 7
    assert m["tensors"][0] == {"name": "conv.weight", "shape": [4, 3], "dtype": "float32"}
    assert m["files"]["s1_w2"] == "step0001_worker02.safetensors"
    assert m["created"].endswith("+00:00")
    assert m["source"]["distribution"] == "student-t"
    # atomic writes leave no temporary files behind
    assert sorted(p.name for p in trace_dir.iterdir()) == sorted([MANIFEST, *m["files"].values()])


def test_live_round_trip(tmp_path: Path) -> None:
    live = LiveSource("mlp", workers=2, steps=2, seed=3)
    out = write_trace(live, tmp_path / "live", "mlp", 3)
    again = LiveSource("mlp", workers=2, steps=2, seed=3)
    tr = TraceSource(out)
    assert tr.layout() == again.layout()
    for step in range(2):
        for w in range(2):
            g, want = tr.gradients(step, w), again.gradients(step, w)
            assert all(torch.equal(g[s.name], want[s.name]) for s in tr.layout())
    assert tr.describe()["recorded_source"]["model"] == "mlp"  # type: ignore[index]


class _HalfSource(GradientSource):
    """Float16 and bfloat16 gradients, to check dtypes survive a trace."""

    name = "half"
    workers = 1
    steps = 1

    def layout(self) -> list[TensorSpec]:
        return [TensorSpec("a", (3, 4), torch.float16), TensorSpec("b", (5,), torch.bfloat16)]

    def gradients(self, step: int, worker: int) -> Mapping[str, torch.Tensor]:
        g = torch.Generator().manual_seed(step)
        return {"a": torch.randn(3, 4, generator=g).half(), "b": torch.randn(5, generator=g).bfloat16()}


def test_half_precision_dtypes_survive(tmp_path: Path) -> None:
    out = write_trace(_HalfSource(), tmp_path / "h", "half", 0)
    tr = TraceSource(out)
    assert [s.dtype for s in tr.layout()] == [torch.float16, torch.bfloat16]
    g, want = tr.gradients(0, 0), _HalfSource().gradients(0, 0)
    assert torch.equal(g["a"], want["a"]) and g["b"].dtype == torch.bfloat16 and torch.equal(g["b"], want["b"])


class _SpyHandle:
    """Wraps a safe_open handle and records which tensors were read."""

    def __init__(self, inner: Any, log: list[str]) -> None:
        self._inner, self._log = inner, log

    def get_tensor(self, name: str) -> torch.Tensor:
        self._log.append(name)
        return self._inner.get_tensor(name)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


def test_replay_is_lazy_one_tensor_per_index(trace_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    real = trace_mod.safe_open
    monkeypatch.setattr(trace_mod, "safe_open", lambda *a, **k: _SpyHandle(real(*a, **k), log))
    tr = TraceSource(trace_dir)  # validating headers reads no tensor
    assert log == []
    g = tr.gradients(1, 2)
    assert isinstance(g, LazyGradients) and log == []
    assert list(g) == NAMES and len(g) == 5 and "block.w" in g and log == []  # keys come from the manifest
    t = g["block.w"]
    assert log == ["block.w"] and t.shape == (2, 2, 2)
    g["head.bias"]
    assert log == ["block.w", "head.bias"]
    with pytest.raises(KeyError):
        g["nope"]


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_reading_one_tensor_does_not_load_the_file(tmp_path: Path) -> None:
    # 16 tensors × 8 MiB = 128 MiB in one file; reading one costs a few times 8 MiB (mapped pages,
    # safetensors' read buffer, the tensor: measured 24 MiB), far from the whole file
    n, k = 16, 2 << 20
    path = tmp_path / "big"
    path.mkdir()
    save_file({f"t{i}": torch.full((k,), float(i)) for i in range(n)}, str(path / "step0000_worker00.safetensors"))
    manifest = {"format_version": 1, "gcbench_version": "x", "model": "big", "steps": 1, "workers": 1, "seed": 0,
                "tensors": [{"name": f"t{i}", "shape": [k], "dtype": "float32"} for i in range(n)],
                "files": {"s0_w0": "step0000_worker00.safetensors"}, "created": "2024-01-01T00:00:00+00:00"}
    (path / MANIFEST).write_text(json.dumps(manifest))
    tr = TraceSource(path)
    g = tr.gradients(0, 0)
    before = _rss_bytes()
    t = g["t5"]
    grown = _rss_bytes() - before
    assert float(t[0]) == 5.0 and float(t[-1]) == 5.0
    assert grown < 64 << 20, f"reading one 8 MiB tensor grew RSS by {grown >> 20} MiB"


# ---- broken traces ----------------------------------------------------------------------------


def _manifest(trace_dir: Path) -> dict[str, Any]:
    return json.loads((trace_dir / MANIFEST).read_text())


def _write_manifest(trace_dir: Path, m: dict[str, Any]) -> None:
    (trace_dir / MANIFEST).write_text(json.dumps(m))


def _one_line(exc: pytest.ExceptionInfo[SourceError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_truncated_file_names_the_file(trace_dir: Path) -> None:
    f = trace_dir / "step0001_worker01.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:-10])
    with pytest.raises(SourceError, match=r"step0001_worker01.safetensors: truncated or corrupt") as exc:
        TraceSource(trace_dir)
    _one_line(exc)
    # without the up-front check the error comes on first access, naming the file
    tr = TraceSource(trace_dir, check_files=False)
    tr.gradients(0, 0)["conv.weight"]  # other files are fine
    with pytest.raises(SourceError, match=r"step0001_worker01.safetensors"):
        tr.gradients(1, 1)["conv.weight"]


def test_garbage_header_names_the_file(trace_dir: Path) -> None:
    (trace_dir / "step0000_worker00.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(SourceError, match=r"step0000_worker00.safetensors: truncated or corrupt"):
        TraceSource(trace_dir)


def test_missing_file_names_the_file(trace_dir: Path) -> None:
    (trace_dir / "step0000_worker02.safetensors").unlink()
    with pytest.raises(SourceError, match=r"step0000_worker02.safetensors: missing trace file \(step 0, worker 2\)") as exc:
        TraceSource(trace_dir)
    _one_line(exc)


def test_missing_manifest(tmp_path: Path, trace_dir: Path) -> None:
    (trace_dir / MANIFEST).unlink()
    with pytest.raises(SourceError, match=r"manifest.json: missing"):
        TraceSource(trace_dir)
    with pytest.raises(SourceError, match=r"does not exist"):
        TraceSource(tmp_path / "nowhere")
    with pytest.raises(SourceError, match=r"is a folder"):
        TraceSource(trace_dir / "step0000_worker00.safetensors")


def test_bad_json_manifest(trace_dir: Path) -> None:
    (trace_dir / MANIFEST).write_text('{"format_version": 1, ')
    with pytest.raises(SourceError, match=r"manifest.json: not valid JSON") as exc:
        TraceSource(trace_dir)
    _one_line(exc)


def test_newer_format_version(trace_dir: Path) -> None:
    m = _manifest(trace_dir)
    m["format_version"] = 2
    _write_manifest(trace_dir, m)
    with pytest.raises(SourceError, match=r"newer gcbench.*format_version 2.*upgrade"):
        TraceSource(trace_dir)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: m.update(steps=0), "steps must be a positive integer"),
    (lambda m: m.update(workers="2"), "workers must be a positive integer"),
    (lambda m: m.pop("tensors"), "tensors must be a list"),
    (lambda m: m["tensors"][1].update(dtype="int8"), "dtype must be one of"),
    (lambda m: m["tensors"][1].update(shape=[-1]), r"tensors\[1\]"),
    (lambda m: m["tensors"].append(dict(m["tensors"][0])), "duplicate tensor name 'conv.weight'"),
    (lambda m: m["files"].pop("s1_w0"), "no entry 's1_w0'"),
    (lambda m: m["files"].update(s0_w0="../../etc/passwd.safetensors"), "not a plain"),
])
def test_malformed_manifest_fields(trace_dir: Path, edit: Any, message: str) -> None:
    m = _manifest(trace_dir)
    edit(m)
    _write_manifest(trace_dir, m)
    with pytest.raises(SourceError, match=message) as exc:
        TraceSource(trace_dir)
    assert "manifest.json" in _one_line(exc)


def test_shape_mismatch_names_file_and_tensor(trace_dir: Path) -> None:
    m = _manifest(trace_dir)
    m["tensors"][2]["shape"] = [8]
    _write_manifest(trace_dir, m)
    with pytest.raises(SourceError, match=r"step0000_worker00.safetensors: tensor 'block.w' is F32 \(2, 2, 2\) in the file, "
                                          r"the manifest says F32 \(8,\)"):
        TraceSource(trace_dir)


def test_dtype_mismatch_and_missing_or_extra_tensor(trace_dir: Path) -> None:
    m = _manifest(trace_dir)
    m["tensors"][0]["dtype"] = "float16"
    _write_manifest(trace_dir, m)
    with pytest.raises(SourceError, match=r"tensor 'conv.weight' is F32"):
        TraceSource(trace_dir)
    m["tensors"][0]["dtype"] = "float32"
    m["tensors"].append({"name": "ghost", "shape": [1], "dtype": "float32"})
    _write_manifest(trace_dir, m)
    with pytest.raises(SourceError, match=r"tensor 'ghost' listed in the manifest is missing from the file"):
        TraceSource(trace_dir)
    m["tensors"] = m["tensors"][1:-1]
    _write_manifest(trace_dir, m)
    with pytest.raises(SourceError, match=r"tensors the manifest does not list: 'conv.weight'"):
        TraceSource(trace_dir)


def test_nan_is_reported_on_read_naming_the_tensor(trace_dir: Path) -> None:
    f = trace_dir / "step0001_worker00.safetensors"
    tensors = {n: torch.randn(s) for n, s in zip(NAMES, SHAPES, strict=True)}
    tensors["block.w"][1, 0, 1] = float("nan")
    tensors["head.bias"][0] = float("inf")
    with safe_open(str(f), framework="pt") as h:
        meta = h.metadata()  # the same recording's file, with other values
    save_file(tensors, str(f), metadata=meta)
    tr = TraceSource(trace_dir)  # headers are fine
    g = tr.gradients(1, 0)
    g["conv.weight"]
    with pytest.raises(SourceError, match=r"gradient 'block.w' .*step0001_worker00.safetensors.* 1 NaN and 0 Inf"):
        g["block.w"]
    with pytest.raises(SourceError, match=r"gradient 'head.bias' .* 0 NaN and 1 Inf"):
        g["head.bias"]


def test_refuses_to_overwrite_unless_asked(trace_dir: Path) -> None:
    with pytest.raises(SourceError, match=r"already holds a trace"):
        write_trace(_synthetic(), trace_dir, "again", 1)
    out = write_trace(_synthetic(steps=1, workers=1), trace_dir, "again", 1, overwrite=True)
    tr = TraceSource(out)
    assert tr.model == "again" and tr.steps == 1 and tr.workers == 1


def test_progress_and_range_checks(tmp_path: Path) -> None:
    calls: list[tuple[int, int, str]] = []
    out = write_trace(_synthetic(steps=2, workers=2), tmp_path / "p", "s", 0, progress=lambda d, t, m: calls.append((d, t, m)))
    assert [(d, t) for d, t, _ in calls] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert calls[-1][2].endswith("step0001_worker01.safetensors")
    tr = TraceSource(out)
    with pytest.raises(ParamError, match=r"step 2 out of range"):
        tr.gradients(2, 0)
    with pytest.raises(ParamError, match=r"worker 5 out of range"):
        tr.gradients(0, 5)


# -- a trace never reaches outside its folder ------------------------------------------------


def test_manifest_symlinked_outside_the_folder_is_refused(trace_dir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.json"
    (trace_dir / MANIFEST).rename(outside)
    (trace_dir / MANIFEST).symlink_to(outside)
    with pytest.raises(SourceError) as exc:
        TraceSource(trace_dir)
    line = _one_line(exc)
    assert MANIFEST in line and "outside the trace folder" in line


def test_data_file_symlinked_outside_the_folder_is_refused(trace_dir: Path, tmp_path: Path) -> None:
    name = _manifest(trace_dir)["files"]["s1_w2"]
    outside = tmp_path / "stolen.safetensors"
    (trace_dir / name).rename(outside)
    (trace_dir / name).symlink_to(outside)
    with pytest.raises(SourceError) as exc:
        TraceSource(trace_dir, check_files=False)  # refused before any header is read
    line = _one_line(exc)
    assert name in line and "outside the trace folder" in line


def test_symlink_inside_the_folder_and_a_symlinked_folder_are_fine(trace_dir: Path, tmp_path: Path) -> None:
    m = _manifest(trace_dir)
    name = m["files"]["s0_w0"]
    (trace_dir / name).rename(trace_dir / "real.safetensors")
    (trace_dir / name).symlink_to("real.safetensors")
    (tmp_path / "alias").symlink_to(trace_dir)  # the user names the folder: following that link is their choice
    src = TraceSource(tmp_path / "alias")
    assert set(src.gradients(0, 0)) == set(NAMES)


@pytest.mark.parametrize("name", ["../outside.safetensors", "/etc/passwd.safetensors", "sub/x.safetensors", "..safetensors"])
def test_manifest_file_names_cannot_leave_the_folder(trace_dir: Path, name: str) -> None:
    m = _manifest(trace_dir)
    m["files"]["s0_w0"] = name
    _write_manifest(trace_dir, m)
    with pytest.raises(SourceError, match="not a plain"):
        TraceSource(trace_dir)


def test_deeply_nested_manifest_is_one_line(trace_dir: Path) -> None:
    (trace_dir / MANIFEST).write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(SourceError, match="not valid JSON"):
        TraceSource(trace_dir)


def test_a_manifest_integer_of_5000_digits_is_one_line_naming_the_field(trace_dir: Path) -> None:
    """int() refuses more than 4,300 digits; that ValueError used to escape as a traceback."""
    text = json.dumps(_manifest(trace_dir)).replace('"steps": 2', '"steps": ' + "1" * 5000, 1)
    assert "1" * 5000 in text
    (trace_dir / MANIFEST).write_text(text)
    with pytest.raises(SourceError, match=r"manifest\.json: steps: an integer of 5,000 digits") as exc:
        TraceSource(trace_dir)
    _one_line(exc)


def test_a_manifest_that_is_a_fifo_is_refused_without_waiting(trace_dir: Path) -> None:
    import os

    (trace_dir / MANIFEST).unlink()
    os.mkfifo(trace_dir / MANIFEST)
    with pytest.raises(SourceError, match=r"manifest\.json: (missing|not a regular file)"):
        TraceSource(trace_dir)


def test_an_oversized_manifest_is_refused_before_reading(trace_dir: Path) -> None:
    from gcbench.sources.trace import MAX_MANIFEST_BYTES, TraceSource

    with (trace_dir / "manifest.json").open("r+b") as f:
        f.truncate(MAX_MANIFEST_BYTES + 1)  # sparse: nothing is written, and nothing may be read
    mib = f"{MAX_MANIFEST_BYTES / 2**20:.1f}"
    with pytest.raises(SourceError, match=rf"manifest\.json: trace manifest is {mib} MiB; gcbench reads at most {mib} MiB"):
        TraceSource(trace_dir)
