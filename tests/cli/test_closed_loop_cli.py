"""compare and advise held to the project's closed-loop evidence, and advise's short default answer (third outside audit).

A convergence file of the same model, named (``--convergence FILE``) or found in the runs folder, decides the
recommendation where it covers a compressor; the file used is named.  ``advise --convergence`` prints the answer, the
table behind it and one line on trust by default, everything with ``--detail``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from tests.converge_fixture import write_converge
from tests.predict.test_time_to_accuracy import _bench_record

runner = CliRunner()

#: a convergence file's name as `gcbench converge` writes it (UTC time first: the runs folder's order)
CONV_NAME = "20261127T120000Z-converge.json"


def _one_line_error(args: list[str]) -> str:
    r = runner.invoke(app, args)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 1 and len(lines) == 1 and "Traceback" not in r.output, r.output
    return lines[0]


def test_compare_recommends_by_the_convergence_file_it_finds_and_names_it(tmp_path: Path) -> None:
    """topk reached the target in every seed of the file, signsgd in one of three: the sentence says so and names the
    file, whatever the 3-step open-loop stream says of either."""
    out = tmp_path / "runs"
    out.mkdir()
    conv = write_converge(out / CONV_NAME)
    r = runner.invoke(app, ["compare", "topk", "signsgd", "--model", "mlp", "--workers", "2", "--steps", "3", "--rounds", "2",
                            "--repeats", "1", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["convergence"].startswith(f"{conv}, the newest convergence file of mlp in {out}")
    text = d["recommendation"]
    assert "use topk — in closed-loop training" in text and "reaches it in 3/3 seeds, 153 steps to accuracy 0.8" in text
    assert "not recommended (closed loop, accuracy 0.8): signsgd reaches it in 1/3 seeds" in text
    assert "under the 0.5 floor" not in text  # the open loop judges neither: the closed loop covers both


def test_compare_convergence_needs_a_model_and_the_same_model(tmp_path: Path) -> None:
    conv = write_converge(tmp_path / "conv.json")
    line = _one_line_error(["compare", "topk", "signsgd", "--convergence", str(conv), "--out", str(tmp_path)])
    assert "give --model NAME too" in line
    line = _one_line_error(["compare", "topk", "signsgd", "--model", "smallcnn", "--convergence", str(conv), "--out", str(tmp_path)])
    assert "convergence run of zoo:mlp, not of smallcnn" in line


def _advise(tmp_path: Path, *extra: str) -> str:
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_bench_record()))
    r = runner.invoke(app, ["advise", "--model", "mlp", "--kernels", str(bench), "--compute-ms", "5", "--workers", "16",
                            "--bandwidth", "1,10,100", *extra])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_advise_with_a_convergence_file_answers_in_a_table_and_its_sentences(tmp_path: Path) -> None:
    """advise --convergence printed about 100 lines and 8 tables for a 4-sentence answer."""
    conv = write_converge(tmp_path / "conv.json")
    short = _advise(tmp_path, "--convergence", str(conv))
    full = _advise(tmp_path, "--convergence", str(conv), "--detail")
    assert short.count("┏") == 1 and full.count("┏") == 4  # one table of every cluster; --detail: step + one per cluster
    assert len(short.splitlines()) * 2 < len(full.splitlines())
    for bw in (1, 10, 100):  # the answer: each cluster's sentence
        assert f"on 16 × {bw} Gbit/s, to accuracy 0.8:" in short
    assert "16×1G" in short and "16×100G" in short and "Trust: " in short.splitlines()[-1]
    assert "Flagged timings" not in short and "step = compute + compress" in full


def test_advise_finds_the_models_convergence_file_in_the_runs_folder_and_names_it(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    conv = write_converge(runs / CONV_NAME)
    other = runs / "20261128T120000Z-converge.json"  # newer, but of another model: not this one's evidence
    write_converge(other, task="zoo:smallcnn")
    text = " ".join(_advise(tmp_path, "--runs-dir", str(runs), "--detail").split())
    assert f"time to accuracy: steps to the target from {conv} (the newest convergence file of mlp in {runs}" in text
    shutil.rmtree(runs)
    assert "time to accuracy" not in _advise(tmp_path, "--runs-dir", str(runs))


@pytest.mark.parametrize("workers", ["1", "1,16"])
def test_one_worker_is_refused_in_one_line(workers: str, tmp_path: Path) -> None:
    """A 1-worker column priced only kernels against DDP's copies (qsgd 1.11x) and bytes nobody sends."""
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(_bench_record()))
    line = _one_line_error(["advise", "--kernels", str(bench), "--compute-ms", "5", "--workers", workers])
    assert "--workers 1" in line and "no exchange" in line
    line = _one_line_error(["simulate", str(bench), "--workers", workers])
    assert "--workers 1" in line and "no exchange" in line
