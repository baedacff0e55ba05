"""``report --html --all``: one page per run, rendered once and reused while its results file is unchanged.

It re-drew every plot of every run into one file each time (30 copies of a 12-case run: 7 min 42 s at load 9,
19 MB).  Counted here by the renders the page builder makes, never by the clock.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli.application import app
from tests.report.test_html import GOLDEN


def _folder(folder: Path, n: int) -> list[Path]:
    data = json.loads((GOLDEN / "bench_small.json").read_text(encoding="utf-8"))
    folder.mkdir()
    paths = []
    for i in range(n):
        data["run_id"] = f"2026-01-01T00-00-{i:02d}Z-bench"
        p = folder / f"{data['run_id']}.json"
        p.write_text(json.dumps(data), encoding="utf-8")
        os.utime(p, ns=(10**18 + i, 10**18 + i))
        paths.append(p)
    return paths


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import gcbench.report.html_page as html_mod

    seen: list[str] = []
    full = html_mod._section_context
    monkeypatch.setattr(html_mod, "_section_context", lambda i, run: seen.append(run.run_id) or full(i, run))
    return seen


def _report(runs: Path, out: Path) -> str:
    r = CliRunner().invoke(app, ["report", "--html", "--all", "--runs-dir", str(runs), "-o", str(out)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    return r.output


def test_pages_are_rendered_once_and_reused_until_their_results_change(tmp_path: Path, renders: list[str]) -> None:
    paths = _folder(tmp_path / "runs", 4)
    out = tmp_path / "site" / "index.html"
    assert "4 run page(s) rendered, 0 reused" in _report(tmp_path / "runs", out)
    pages = sorted((tmp_path / "site" / "index_runs").glob("*.html"))
    assert [p.stem for p in pages] == [p.stem for p in paths]
    index = out.read_text(encoding="utf-8")
    assert all(f'href="index_runs/{p.name}"' in index for p in pages) and len(index) < 4 * min(p.stat().st_size for p in pages)
    renders.clear()
    assert "0 run page(s) rendered, 4 reused" in _report(tmp_path / "runs", out)
    assert renders == [paths[-1].stem]  # only the index's newest run: no run page drawn again
    data = json.loads(paths[1].read_text(encoding="utf-8"))
    data["cases"] = data["cases"][:1]
    paths[1].write_text(json.dumps(data), encoding="utf-8")  # a results file rewritten: its page only
    renders.clear()
    assert "1 run page(s) rendered, 3 reused" in _report(tmp_path / "runs", out)
    assert sorted(renders) == sorted([paths[1].stem, paths[-1].stem])
    paths[0].unlink()  # a run gone from the folder: its page goes too
    _report(tmp_path / "runs", out)
    assert not (tmp_path / "site" / "index_runs" / f"{paths[0].stem}.html").exists()


def test_a_foreign_file_where_a_page_goes_is_refused_in_one_line(tmp_path: Path) -> None:
    paths = _folder(tmp_path / "runs", 2)
    pages = tmp_path / "index_runs"
    pages.mkdir()
    mine = pages / f"{paths[0].stem}.html"
    mine.write_text("my notes", encoding="utf-8")
    r = CliRunner().invoke(app, ["report", "--html", "--all", "--runs-dir", str(tmp_path / "runs"), "-o", str(tmp_path / "index.html")])
    assert r.exit_code == 1 and r.output.startswith("error: --output") and "is not an HTML report" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and mine.read_text(encoding="utf-8") == "my notes"
