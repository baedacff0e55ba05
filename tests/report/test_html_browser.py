"""The HTML report of a 60-case run as a person sees it: loaded in headless Chromium (Debian's ``chromium``).

The page is served from a one-file HTTP server on localhost (every request it makes is counted) with
every host name but localhost unresolvable, and a probe appended to it reports, after load, what the
browser measured: scroll width, decoded images, tables, fetched resources.  Chromium's console
lines come from its log.  The probe is checked against pages that do fail (a console error, a
fetch, a table wider than the window), so a pass means something.  Skipped where
``/usr/bin/chromium`` is absent (CI has none).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.screenshots import CHROMIUM, PageProbe, available, probe_page
from gcbench.report.html_page import render_html
from gcbench.report.load import LoadedRun
from tests.report.test_html import GOLDEN, suite_run

pytestmark = pytest.mark.skipif(not available(), reason=f"{CHROMIUM} not found (Debian: apt-get install chromium)")

WIDTH = 1400


@pytest.fixture(scope="module")
def probe() -> PageProbe:
    return probe_page(render_html([suite_run()]), width=WIDTH)


def test_loads_with_no_console_message_and_no_request_but_itself(probe: PageProbe) -> None:
    assert probe.console == []
    assert probe.requests == ["GET /index.html HTTP/1.1"]
    assert probe.resources == []  # every plot is a data: URI, every style and script inline


def test_plots_and_tables_are_there(probe: PageProbe) -> None:
    # per source: the front on the common reference, the stream, throughput and the per-layer ratio heatmap; in the
    # detail section the one-shot front and the per-layer q heatmap (no EF drift: the run has no ef_drift records)
    per_source = ["pareto", "stream", "throughput", "layers", "pareto_oneshot", "layers_q"]
    assert probe.plots == per_source * 2
    assert len(probe.images_loaded) == len(probe.plots) and all(probe.images_loaded)  # every PNG decoded
    # runs, then per source: summary, all columns, per layer, one-shot; then metrics (no claims file was given)
    assert probe.tables == 1 + 2 * 4 + 1


def test_nothing_is_wider_than_the_window(probe: PageProbe) -> None:
    # every <details> unfolded: the folded tables are measured too
    assert probe.window_width == WIDTH
    assert probe.scroll_width <= WIDTH
    assert probe.overflowing == [] and probe.scrolling == []


def test_the_probe_sees_what_it_must_catch() -> None:
    bad = ("<!DOCTYPE html><html><head><title>t</title><link rel='icon' href='data:,'></head><body><main>"
           "<script>console.error('boom')</script><img src='plot.png' alt='x'><img src='https://cdn.example.com/a.png' alt='y'>"
           "<div class='tablewrap' style='overflow-x:auto'><table><tr><td style='white-space:nowrap'>"
           + "wide " * 600 + "</td></tr></table></div></main></body></html>")
    p = probe_page(bad, width=WIDTH)
    assert any("boom" in line for line in p.console)
    assert len(p.requests) == 2 and "GET /plot.png" in p.requests[1]  # a relative fetch reaches the local server
    assert any("cdn.example.com" in r for r in p.resources)  # an absolute one is seen, and never leaves the machine
    assert p.scrolling and p.images_loaded == [False, False]


@pytest.mark.parametrize("files", [("train_digits", "bench_small"), ("run_base", "run_new")], ids=["train+bench", "two runs"])
def test_other_kinds_of_report_fit_too(files: tuple[str, ...]) -> None:
    runs = [LoadedRun(GOLDEN / f"{name}.json", json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))) for name in files]
    p = probe_page(render_html(runs), width=WIDTH)
    assert p.console == [] and p.requests == ["GET /index.html HTTP/1.1"] and p.resources == []
    assert p.plots and all(p.images_loaded)
    assert p.scroll_width <= WIDTH and p.overflowing == [] and p.scrolling == []


def test_a_convergence_report_priced_on_a_cluster_fits_too(tmp_path: Path) -> None:
    import dataclasses

    from gcbench.predict import step_kernels as sk
    from gcbench.predict.accuracy import read_convergence
    from gcbench.predict.advise import price_convergence
    from gcbench.results.store import load_run
    from tests.converge_fixture import write_converge

    path = write_converge(tmp_path / "conv.json")
    run = LoadedRun(path, load_run(path))
    ks = sk.KernelSet("mlp", "cpu", "hand-made", "hand-made", (sk.StepKernels("none", "none", 1e-3, 1e-3, 1e-3, 4e6, 4e6),
                                                                sk.StepKernels("topk", "topk", 2e-3, 1e-4, 1e-3, 8e4, 4e6)))
    priced = dataclasses.replace(run, pricing=price_convergence(read_convergence(run.data), ks, 0.005, [(16, 1.0)], 5e-6))
    p = probe_page(render_html([priced]), width=WIDTH)
    assert p.console == [] and p.requests == ["GET /index.html HTTP/1.1"] and p.resources == []
    assert p.plots == ["converge_curves", "converge_time"] and all(p.images_loaded)
    assert p.scroll_width <= WIDTH and p.overflowing == [] and p.scrolling == []
