"""The self-contained HTML report: well-formed, offline, every case and plot present, hostile labels escaped."""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.report.html_page import layer_rows, render_html
from gcbench.report.html_plotkit import label_points, style_map
from gcbench.report.html_plots import (
    front_points,
    layer_matrix,
    plot_decision,
    plot_ef_drift,
    plot_layers,
    plot_oneshot_pareto,
    plot_pareto,
    plot_stream,
    plot_throughput,
    throughput_rows,
    undelivered,
)
from gcbench.report.html_train_bench_plots import (
    SizePoint,
    bench_bars,
    bench_size_point,
    plot_bench_x_copy,
    plot_size_scaling,
    plot_time_to_target,
    plot_train_curves,
    run_size_point,
    train_curve_series,
)
from gcbench.report.load import LoadedRun
from gcbench.report.notes import X_COPY_HEADER
from gcbench.report.views import by_source, case_name, pareto_front
from gcbench.results.parse import as_case
from gcbench.results.record import BEATS_BOUND
from gcbench.results.run_record import RunCase

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Doc(HTMLParser):
    """Checks nesting (every non-void element closed in order) and collects what the tests look at."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.attrs: list[tuple[str, str, str]] = []  # (tag, name, value)
        self.tags: Counter[str] = Counter()
        self.plots: list[str] = []
        self.img_src: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        for k, v in attrs:
            self.attrs.append((tag, k, v or ""))
        a = dict(attrs)
        if tag == "figure" and a.get("data-plot"):
            self.plots.append(str(a["data-plot"]))
        if tag == "img":
            self.img_src.append(str(a.get("src")))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _load(name: str) -> LoadedRun:
    p = GOLDEN / f"{name}.json"
    return LoadedRun(p, json.loads(p.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Doc]:
    """The report the CLI writes for the golden pair compared (comparison, the new run in detail, claims)."""
    out = tmp_path_factory.mktemp("html") / "index.html"
    r = CliRunner().invoke(app, ["report", "--baseline", str(GOLDEN / "run_base.json"), str(GOLDEN / "run_new.json"),
                                 "--html", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "regression" in r.output  # the golden pair has regressions; without --fail-on-regression the exit is 0
    text = out.read_text(encoding="utf-8")
    doc = Doc()
    doc.feed(text)
    doc.close()
    return text, doc


def test_well_formed(page: tuple[str, Doc]) -> None:
    text, doc = page
    assert text.startswith("<!DOCTYPE html>")
    assert doc.errors == [] and doc.stack == []
    assert doc.tags["html"] == doc.tags["head"] == doc.tags["body"] == 1


def test_every_plot_is_an_inline_png(page: tuple[str, Doc]) -> None:
    _, doc = page
    # the new run (a file from before the stream view: no common-reference Pareto, no stream plot): 2 sources × (one-shot
    # Pareto and per-layer q heatmap in the detail section, throughput, per-layer ratio heatmap), EF drift for the synthetic
    # source only (the ResNet-50 source has one step: no drift over steps), throughput vs size (dgc-paper at two sizes), and
    # the decision plot of the source with several workers and timed cases
    assert Counter(doc.plots) == {"pareto_oneshot": 2, "throughput": 2, "layers": 2, "layers_q": 2, "ef_drift": 1, "size": 1,
                                  "decision": 1}
    assert len(doc.img_src) == 11 and doc.tags["svg"] == 0
    for src in doc.img_src:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"


def test_nothing_external(page: tuple[str, Doc]) -> None:
    text, doc = page
    # the one <link> is an empty inline icon: without it a browser asks the server for /favicon.ico
    assert ("link", "href", "data:,") in doc.attrs
    refs = [(t, k, v) for t, k, v in doc.attrs if k in ("src", "href", "action", "srcset", "poster", "data")]
    assert refs
    for tag, key, value in refs:
        assert value.startswith("data:") or re.fullmatch(r"#[\w-]+", value), (tag, key, value)
    assert doc.tags["link"] == 1 and doc.tags["iframe"] == 0 and doc.tags["object"] == 0
    assert "url(" not in text and "@import" not in text
    assert not re.search(r"(?i)\b(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", text))


def test_hostile_labels_are_escaped(page: tuple[str, Doc]) -> None:
    text, doc = page
    # the only script is the inline table sorter; no event-handler attributes anywhere
    assert doc.tags["script"] == 1 and text.count("<script") == 1
    assert not [a for a in doc.attrs if a[1].startswith("on")]
    assert "<img src=x" not in text and "<b>bold</b>" not in text
    assert "&lt;script&gt;alert(&#34;pwn&#34;)&lt;/script&gt;" in text
    assert "synthetic &lt;img src=x onerror=alert(1)&gt; normal" in text
    assert "&lt;b&gt;bold&lt;/b&gt;" in text


def test_every_case_label_and_failure_and_marker(page: tuple[str, Doc]) -> None:
    text, doc = page
    body = "".join(doc.text)
    new = _load("run_new")
    for case in new.cases:  # the new run's tables
        assert f">{escape(case_name(case))}</td>" in text, case_name(case)
    for src in by_source(new.cases):
        assert f">{escape(src)}</h3>" in text
    for case in _load("run_base").cases:  # the baseline's cases, in the comparison rows
        assert f"{case.label} (" in body, case.label
    assert "golden-base (baseline)" in body
    assert "failed: SourceError: gradient 't0'" in body and "failed: RuntimeError: shape mismatch" in body
    assert 'class="l recon"' in text and "adacomp †" in body


def test_comparison_and_claims_sections(page: tuple[str, Doc]) -> None:
    text, doc = page
    body = "".join(doc.text)
    for verdict in ("better", "worse", "not comparable", "new failure", "missing", "new"):
        assert f'<td class="l">{verdict}</td>' in text, verdict
    assert 'class="v-worse"' in text and 'class="v-better"' in text and 'class="v-not-comparable"' in text
    assert 'id="show-ns"' in text and 'class="v-ns"' in text  # unchanged rows present, hidden by the inline script
    assert "efsignsgd (synthetic &lt;img" in text  # a failed record is shown under its source's label
    assert "Paper claims" in body
    assert "276.7× with the paper's wire format — dgc-paper on live resnet50" in body
    assert "not measured in these runs" in body and "end-to-end training result" in body


# ----------------------------------------------------------------------------- plots, one at a time


def _case(label: str, **kw: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"label": label, "status": "ok", "compressor": "x", "flags": {}, "granularity": "layer"}
    c.update(kw)
    return c


def test_plots_are_skipped_without_their_data() -> None:
    lossless = _case("none", fidelity={"q": {"model": 0.0}}, size={"ratio": 1.0})
    stateless = _case("topk", fidelity={"q": {"model": 0.9}}, size={"ratio": 60.0}, ef_drift=None,
                      layers=[{"name": "w", "ratio": 60.0}], timing=None)
    assert plot_pareto([lossless], "t") is None and plot_oneshot_pareto([lossless], "t") is None
    assert plot_pareto([stateless], "t") is None  # no stream: nothing on the common reference to draw
    assert plot_stream([stateless], "t") is None
    assert plot_throughput([stateless], "t") is None
    assert plot_layers([stateless], "t") is None  # one unit: nothing to plot per unit
    assert plot_ef_drift([stateless], "t") is None
    assert plot_ef_drift([{**stateless, "ef_drift": {"sum_drift": [0.9]}}], "t") is None  # one step is not a drift
    assert plot_ef_drift([{**stateless, "ef_drift": {"sum_drift": [0.9, 0.8]}}], "t") is not None
    timed = [_case("a", timing={"numel": 1000, "compress": {"gbps": 1.0}}), _case("b", timing={"numel": 5000, "compress": {"gbps": 2.0}})]
    assert plot_size_scaling([run_size_point(as_case(c)) for c in timed], "t") is None  # two labels at one size each
    failed = {"label": "f", "status": "error", "error": "boom"}
    assert plot_pareto([failed], "t") is None


def test_plots_accept_mathtext_like_labels() -> None:
    # a '$' would make matplotlib parse mathtext and fail on unbalanced dollars
    cases = [_case("a $x_1$ $", fidelity={"q": {"model": 0.5}}, size={"ratio": 10.0}),
             _case("b", fidelity={"q": {"model": 0.1}}, size={"ratio": 5.0}),
             _case("none", fidelity={"q": {"model": 0.0}}, size={"ratio": 1.0})]
    p = plot_oneshot_pareto(cases, "$$ title")
    assert p is not None and p.uri.startswith("data:image/png;base64,")
    assert "“none”" in p.caption  # lossless cases are listed, not dropped silently
    s = plot_size_scaling([run_size_point(as_case(_case("a $", timing={"numel": n, "compress": {"gbps": g}, "copy": {"gbps": 10.0}})))
                           for n, g in ((1000, 0.5), (100000, 1.5))], "t")
    assert s is not None and "1 of 1 labels" in s.caption


def test_render_without_claims_says_so() -> None:
    run = _load("run_base")
    empty = LoadedRun(run.path, run.data.model_copy(update={"cases": []}))
    text = render_html([empty], claims=None, claims_missing="No claims file at /x (pass --papers FILE).")
    assert "No claims file at /x" in text and "<img" not in text


# ----------------------------------------------------------------------------- train and bench files


def _assert_offline(text: str, doc: Doc) -> None:
    for tag, key, value in [(t, k, v) for t, k, v in doc.attrs if k in ("src", "href", "action", "srcset", "poster", "data")]:
        assert value.startswith("data:") or re.fullmatch(r"#[\w-]+", value), (tag, key, value)
    assert doc.tags["link"] == 1 and doc.tags["iframe"] == 0 and "url(" not in text and "@import" not in text
    assert not re.search(r"(?i)\b(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", text))


@pytest.fixture(scope="module")
def kinds_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Doc]:
    """The report of the golden train and bench files."""
    out = tmp_path_factory.mktemp("kinds") / "index.html"
    r = CliRunner().invoke(app, ["report", str(GOLDEN / "train_digits.json"), str(GOLDEN / "bench_small.json"), "--html", "-o", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text(encoding="utf-8")
    doc = Doc()
    doc.feed(text)
    doc.close()
    return text, doc


def test_train_and_bench_plots_are_inline_pngs(kinds_page: tuple[str, Doc]) -> None:
    text, doc = kinds_page
    assert doc.errors == [] and doc.stack == []
    # train: accuracy and loss per epoch (one plot each, every compressor on it) and time to target;
    # bench: compress×copy bars against the targets, and throughput vs size (two sizes in the file)
    assert Counter(doc.plots) == {"train_accuracy": 1, "train_loss": 1, "time_to_target": 1, "bench_x_copy": 1, "size": 1}
    assert len(doc.img_src) == 5
    for src in doc.img_src:
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    _assert_offline(text, doc)
    assert doc.tags["script"] == 1 and not [a for a in doc.attrs if a[1].startswith("on")]


def test_train_and_bench_tables_list_every_compressor(kinds_page: tuple[str, Doc]) -> None:
    text, doc = kinds_page
    body = "".join(doc.text)
    assert "Training run golden-train" in body and "Kernel benchmark golden-bench" in body
    for label in ("none", "topk", "qsgd"):
        assert f'<td class="l">{label}</td>' in text, label
    assert "not reached" in body and "failed: rank 1 exited with code 3 (no message) &lt;b&gt;bold&lt;/b&gt;" in text
    bench = text[text.index("Kernel benchmark golden-bench"):]
    bench_rows = re.findall(r'<tr>\s*<td class="l">(\w+)</td>\s*<td data-v="([\d.]+)">', bench)
    assert [(n, int(float(v))) for n, v in bench_rows] == [("signsgd", 100_000), ("signsgd", 1_000_000), ("topk", 100_000),
                                                           ("topk", 1_000_000)]
    assert text.count('class="l b-pass"') == 2 and text.count('class="l b-short"') == 2
    assert "failed: GcbenchError: benchmark process for qsgd failed" in body
    assert '<td class="l">train</td>' in text and '<td class="l">bench</td>' in text  # the runs table names each kind


def test_train_curves_have_one_line_per_compressor() -> None:
    run = _load("train_digits")
    acc = train_curve_series(run.cases, "test_accuracy")
    assert [c.label for c, _ in acc] == ["none", "topk"]  # the failed qsgd has no curve
    for c, pts in acc:
        assert pts == [(e.epoch, e.test_accuracy) for e in c.training.curve]
    assert [len(p) for _, p in train_curve_series(run.cases, "test_loss")] == [2, 2]
    p = plot_time_to_target(run.cases, "t")
    assert p is not None and "1 of 2 reached the target" in p.caption and "accuracy 0.7" in p.caption
    assert plot_train_curves([{"label": "x", "status": "ok", "training": {"curve": []}}], "test_accuracy", "t") is None
    assert plot_time_to_target([{"label": "x", "status": "error", "error": "boom"}], "t") is None


def test_bench_bars_mark_each_target() -> None:
    bars = bench_bars(_load("bench_small").cases)
    assert bars.names == ["signsgd", "topk"] and bars.sizes == [100_000, 1_000_000]  # the failed qsgd is left out
    assert bars.targets == {"signsgd": 2.0}  # topk's target is against torch.topk, not a multiple of a copy
    assert bars.values[("topk", 1_000_000)] == pytest.approx(7.177)
    p = plot_bench_x_copy(_load("bench_small").cases, "t")
    assert p is not None and "No compress×copy target: topk" in p.caption and "Failed, not drawn: qsgd at 100K" in p.caption
    # one size only: no throughput-vs-size plot
    one = [bench_size_point(c) for c in _load("bench_small").cases if c.numel == 100_000]
    assert plot_size_scaling(one, "t") is None
    both = [bench_size_point(c) for c in _load("bench_small").cases]
    s = plot_size_scaling(both, "t")
    assert s is not None and "2 of 2 labels" in s.caption
    rec = _load("bench_small").cases[0]
    assert bench_size_point(rec).copy_gbps == pytest.approx(4 * rec.numel / rec.copy_.median_s / 1e9)


def test_mixed_folder_renders_every_kind(tmp_path: Path) -> None:
    d = tmp_path / "runs"
    d.mkdir()
    base = json.loads((GOLDEN / "run_base.json").read_text(encoding="utf-8"))
    base["cases"] = [c for c in base["cases"] if (c.get("source") or {}).get("label") == "live resnet50"]  # one source: fast
    (d / "1-run.json").write_text(json.dumps(base), encoding="utf-8")
    (d / "2-compare.json").write_text(json.dumps({**base, "kind": "compare", "run_id": "golden-compare"}), encoding="utf-8")
    (d / "3-train.json").write_text((GOLDEN / "train_digits.json").read_text(encoding="utf-8"), encoding="utf-8")
    (d / "4-bench.json").write_text((GOLDEN / "bench_small.json").read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "index.html"
    r = CliRunner().invoke(app, ["report", "--runs-dir", str(d), "--html", "--all", "-o", str(out)])
    assert r.exit_code == 0, r.output
    pages = [out, *(tmp_path / "index_runs" / f"{stem}.html" for stem in ("1-run", "2-compare", "3-train", "4-bench"))]
    assert all(p.is_file() for p in pages)
    doc = Doc()
    headings = []
    for p in pages[1:]:  # each run's own page (the index details the newest again: counted once here)
        text = p.read_text(encoding="utf-8")
        doc.feed(text)
        headings += re.findall(r'<h2 id="run\d">([^<]+)</h2>', text)
        own = Doc()
        own.feed(text)
        own.close()
        _assert_offline(text, own)
    doc.close()
    assert doc.errors == []
    assert headings == ["Run golden-base", "Run golden-compare", "Training run golden-train", "Kernel benchmark golden-bench"]
    text = out.read_text(encoding="utf-8")
    assert all(f'href="index_runs/{p.name}"' in text for p in pages[1:])
    plots = Counter(doc.plots)
    assert plots == {"pareto_oneshot": 2, "throughput": 2, "layers": 2, "layers_q": 2, "train_accuracy": 1, "train_loss": 1,
                     "time_to_target": 1, "bench_x_copy": 1, "size": 1}


# ----------------------------------------------------------------------------- one reference per plot; timings that are speeds


def _stream(delivered: float, steps: int = 12, enough: bool = True) -> dict[str, Any]:
    """A stream block on the common reference whose delivered fraction ends at ``delivered``."""
    per = [delivered * (t + 1) / steps for t in range(steps)]
    return {"reference": "dense momentum-SGD update (m=0.9)", "momentum": 0.9, "steps": steps, "min_steps": 10, "enough": enough,
            "delivered": delivered, "per_step_delivered": per, "per_step_error": [0.5] * steps,
            "per_step_error_scaled": [0.2] * steps,
            "worker_ci": {"mean": delivered - 0.07, "lo": delivered - 0.1, "hi": delivered - 0.04, "n": 4},
            "delivered_ci": {"mean": delivered, "lo": delivered - 0.012, "hi": delivered + 0.012, "n": 4}}


def _with_streams(run: LoadedRun) -> LoadedRun:
    """The golden run with a stream on every case that ran (one of them worse than sending nothing, one too short)."""
    data = run.data.to_json_dict()
    for i, c in enumerate(data["cases"]):
        if c["status"] == "ok":
            c["stream"] = _stream(-0.3 if c["label"] == "onebit" else 0.5 + 0.04 * i, steps=2 if c["label"] == "terngrad" else 12,
                                  enough=c["label"] != "terngrad")
    return LoadedRun(run.path, data)


def test_the_worse_than_nothing_region_is_left_out_of_the_front() -> None:
    cases = [as_case(_case("a", size={"ratio": 10.0}, stream=_stream(0.9))),
             as_case(_case("b", size={"ratio": 50.0}, stream=_stream(0.5))),
             as_case(_case("worse", size={"ratio": 1000.0}, stream=_stream(-0.2))),  # the highest ratio, but delivers nothing
             as_case(_case("dense", size={"ratio": 1.0}, stream=_stream(1.0)))]
    fp = front_points(cases, lambda c: 1.0 - c.metric("delivered"))
    assert fp.front_labels == ["a", "b"] and [p[2].label for p in fp.worse] == ["worse"]
    assert [c.label for c in fp.lossless] == ["dense"]
    assert 0 in pareto_front([(1.2, 1000.0), (0.1, 10.0), (0.5, 50.0)])  # on ratio alone the raw front would take it
    p = plot_pareto(cases, "t")
    assert p is not None and p.kind == "pareto"
    assert "dense momentum-SGD update (m=0.9)" in p.caption and "1 − delivered" in p.caption
    assert "No better than sending nothing" in p.caption and "“worse”" in p.caption and "(2 of 2)" in p.caption
    # the one-shot view shades q ≥ 1 the same way
    q = [as_case(_case("x", size={"ratio": 500.0}, fidelity={"q": {"model": 2.9e3}})), as_case(_case("y", size={"ratio": 3.0},
                                                                                                   fidelity={"q": {"model": 0.2}}))]
    assert front_points(q, lambda c: c.metric("q")).front_labels == ["y"]


def test_stream_plot_draws_delivered_over_steps_and_names_short_and_clipped_streams() -> None:
    cases = [_case("ef", stream=_stream(0.9)), _case("short", stream=_stream(0.4, steps=3, enough=False)),
             _case("awful", stream=_stream(-3.0)), _case("one", stream=_stream(0.5, steps=1))]
    p = plot_stream(cases, "t")
    assert p is not None and p.kind == "stream" and "dense momentum-SGD update (m=0.9)" in p.caption
    assert "Too short to rank on: “short”" in p.caption and "Clipped at -1" in p.caption and "“awful”" in p.caption
    assert "“one”" not in p.caption  # one step is no line: not drawn, nothing to name


def test_a_timing_that_beats_its_traffic_bound_is_no_bar_and_no_point() -> None:
    def timed(label: str, flags: list[str], numel: int, src: str) -> dict[str, Any]:
        return _case(label, source={"name": src, "label": src}, timing={
            "numel": numel, "compress": {"median_s": 0.001, "gbps": 4.0}, "decompress": {"median_s": 0.001, "gbps": 4.0},
            "copy": {"gbps": 10.0}, "compress_x_copy": {"median": 0.1, "iqr": 0.01, "flags": flags}})

    cases = [timed("fast", ["beats traffic bound"], 1000, "s1"), timed("honest", [], 1000, "s1"),
             timed("shaky", ["unstable"], 1000, "s1"), timed("fast", ["beats traffic bound"], 100000, "s2"),
             timed("honest", [], 100000, "s2")]
    rows, left_out = throughput_rows([as_case(c) for c in cases[:3]])
    assert [r[0].label for r in rows] == ["honest", "shaky"] and [c.label for c in left_out] == ["fast"]
    p = plot_throughput(cases[:3], "t")
    assert p is not None and "Not drawn (beats traffic bound" in p.caption and "“fast”" in p.caption
    assert "Hatched" in p.caption and "compress unstable: shaky" in p.caption
    run = LoadedRun(GOLDEN / "x.json", {"schema_version": 1, "kind": "run", "cases": cases})
    text = render_html([run])
    size = re.search(r'data-plot="size">.*?<figcaption>(.*?)</figcaption>', text, re.S)
    assert size is not None and "(1 of 2 labels)" in size.group(1)  # honest at two sizes; shaky at one
    assert "Not drawn (beats traffic bound, so no speed): “fast”." in size.group(1) and "Hollow" not in size.group(1)
    # the same rule for any timed point (bench records too): no bound-beating point, flagged ones hollow
    pts = [SizePoint("k", "k", n, g, 10.0, f) for n, g, f in ((1000, 1.0, ()), (10**5, 2.0, ("unstable",)), (10**6, 90.0, (BEATS_BOUND,)))]
    s = plot_size_scaling(pts, "t")
    assert s is not None and "Hollow points" in s.caption and "Not drawn (beats traffic bound, so no speed): “k”" in s.caption
    assert plot_size_scaling([*pts[2:], SizePoint("k", "k", 10, 1.0, None, (BEATS_BOUND,))], "t") is None  # nothing left to draw


def test_report_with_streams_puts_the_common_reference_first_and_one_shot_in_a_detail_section() -> None:
    run = _with_streams(_load("run_new"))
    text = render_html([run])
    doc = Doc()
    doc.feed(text)
    doc.close()
    assert doc.errors == [] and doc.stack == []
    assert Counter(doc.plots) == {"pareto": 2, "stream": 2, "pareto_oneshot": 2, "throughput": 2, "layers": 2, "layers_q": 2,
                                  "ef_drift": 1, "size": 1, "decision": 1}
    for src in by_source(run.cases):
        section = text[text.index(f">{escape(src)}</h3>"):]
        section = section[:section.find("<h3") if "<h3" in section else None]
        detail = section.index("Detail: one-shot fidelity, each case against its own reference")
        # the main table (delivered, on the one named reference) and its plots come before the one-shot detail
        assert section.index("fidelity on the common reference: dense momentum-SGD update (m=0.9)") < detail
        assert section.index('title="1 − ‖Σ_t(U_t − D_t)‖') < detail
        assert section.index('data-plot="pareto"') < detail < section.index('data-plot="pareto_oneshot"')
        assert 'title="relative MSE ‖C(x)−x‖²/‖x‖²' not in section[:detail]  # no one-shot column in the main table
    # the headline with its own interval in the summary; the workers' own range (below it, here) in the detail column
    assert "(short: 2 steps)" in text and "-0.300 ± 0.012" in text and "-0.400 to -0.340" in text
    assert "(workers " not in text
    assert "dgc-paper, dgc: momentum-SGD update u_t = m·u_{t-1} + g_t" in text  # DGC's own reference named in the detail


# ----------------------------------------------------------------------------- suite scale: 60 cases, 161 layers

#: the cnn suite's 30 case labels (tests/golden has no 60-case file: /work-sized runs are 3 MB) and their compressor
SUITE_LABELS = ("none", "fp16", "bf16", "topk", "randomk", "onebit", "terngrad", "qsgd", "signsgd", "efsignsgd", "graddrop", "dgc",
                "adacomp", "sdagc", "topk_dither", "natural_dither", "natural", "threshold", "powersgd", "topk@0.1", "randomk@0.1",
                "dgc@0.1", "topk@0.01", "randomk@0.01", "dgc@0.01", "topk@0.001", "randomk@0.001", "dgc@0.001", "dgc-paper-format",
                "graddrop@0.999")
SUITE_LAYERS = 161


def suite_run(sources: tuple[str, ...] = ("resnet50 live", "resnet18 live")) -> LoadedRun:
    """A 60-case run built in memory with the shape of ``gcbench run suites/cnn.toml`` (2 sources × 30 cases, 161 layers).

    Values are made up but span what a real run holds: ratios 1–1000×, delivered fractions from 1 down
    to far below 0 (randomk at high sparsity is worse than sending nothing while having the highest
    ratio), per-layer ratios and q over decades, one flagged timing.
    """
    import random

    base = json.loads((GOLDEN / "run_new.json").read_text(encoding="utf-8"))
    cases = []
    for s, src in enumerate(sources):
        rng = random.Random(s)
        for i, label in enumerate(SUITE_LABELS):
            family = "dgc" if label == "dgc-paper-format" else label.split("@")[0]
            ratio = 1.0 if label == "none" else 2.0 + 950.0 * rng.random() ** 2
            delivered = 1.0 if label in ("none", "fp16", "bf16") else (
                -8.0 * rng.random() - 0.5 if family in ("randomk", "signsgd") else rng.random())
            if label == "randomk@0.001":
                ratio = 953.0
            layers = []
            for k in range(SUITE_LAYERS):
                numel = 64 if k % 3 else 9408 * (1 + k // 20)
                r = max(1.0, ratio * (0.2 + rng.random() * 2))
                layers.append({"name": f"layer{k // 40}.{k % 40 // 3}.conv{k % 3}.weight", "numel": numel, "wire_bytes": 4 * numel / r,
                               "ratio": r, "q": 0.0 if label == "none" else 10 ** rng.uniform(-6, 2)})
            flags = ["unstable"] if label == "powersgd" else []
            cases.append(_case(label, compressor=family, version=1, workers=4, steps=10, granularity="layer",
                               source={"name": src.replace(" ", ":"), "label": src},
                               size={"numel": 25_000_000, "ratio": ratio, "wire_bytes": 1e8 / ratio, "bits_per_element": 32 / ratio},
                               fidelity={"q": {"model": 1.0 - delivered if label != "none" else 0.0}},
                               stream=_stream(delivered, steps=10),
                               timing={"numel": 25_000_000, "compress": {"median_s": 0.01 * (1 + i), "gbps": 10.0 / (1 + i)},
                                       "decompress": {"median_s": 0.004, "gbps": 25.0}, "copy": {"median_s": 0.008, "gbps": 12.5},
                                       "compress_x_copy": {"median": 1.25 * (1 + i), "iqr": 0.1, "flags": flags}},
                               layers=layers))
    return LoadedRun(GOLDEN / "suite60.json", {**base, "run_id": "suite-60", "cases": cases})


@pytest.fixture(scope="module")
def suite() -> LoadedRun:
    return suite_run()


@pytest.fixture(scope="module")
def suite_page(suite: LoadedRun) -> tuple[str, Doc]:
    text = render_html([suite])
    doc = Doc()
    doc.feed(text)
    doc.close()
    return text, doc


def test_every_case_of_a_section_has_a_marker_and_colour_of_its_own(suite: LoadedRun) -> None:
    for cases in by_source(suite.cases).values():
        styles = style_map(cases)
        assert len(styles) == 30
        pairs = [(s.color, s.marker) for s in styles.values()]
        assert len(set(pairs)) == len(pairs)  # never repeated: each point and line can be named by its look
        # a compressor's variants share its colour and differ by marker
        topk = {styles[k] for k in ("topk", "topk@0.1", "topk@0.01", "topk@0.001")}
        assert len({s.color for s in topk}) == 1 and len({s.marker for s in topk}) == 4
        assert styles["topk"].color != styles["randomk@0.01"].color  # the clash
    many = [as_case(_case(f"c{i}", compressor=f"family{i % 40}")) for i in range(150)]
    assert len({(s.color, s.marker) for s in style_map(many).values()}) == 150


def test_names_beside_points_never_overlap_each_other_or_leave_the_axes() -> None:
    import random

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rng = random.Random(7)
    pts = [(10 ** rng.uniform(-4, 1), 10 ** rng.uniform(0, 3), f"case-{i}") for i in range(40)]
    fig = Figure(figsize=(7, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.scatter([p[0] for p in pts], [p[1] for p in pts])
    ax.set_xscale("log")
    ax.set_yscale("log")
    named = label_points(ax, pts)
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(boxes) == named and 10 <= named <= 40  # many fit; those that do not stay in the legend only
    frame = ax.get_window_extent(renderer)
    for i, b in enumerate(boxes):
        assert frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1
        assert not any(b.overlaps(o) for o in boxes[i + 1:])
    assert {t.get_text() for t in ax.texts} <= {p[2] for p in pts}


def test_at_suite_scale_the_worse_than_nothing_cases_stay_off_the_front(suite: LoadedRun) -> None:
    for cases in by_source(suite.cases).values():
        fp = front_points(cases, undelivered)
        worse = {p[2].label for p in fp.worse}
        assert "randomk@0.001" in worse and worse >= {"randomk", "signsgd"}
        assert not worse & set(fp.front_labels)
        assert all(fp.drawn[i][0] < 1 for i in fp.front)
        # the highest ratio of all is randomk@0.001's: a front on ratio alone would take it
        assert max(cases, key=lambda c: c.metric("ratio")).label == "randomk@0.001"
        p = plot_pareto(cases, "t")
        assert p is not None and p.wide and "“randomk@0.001”" in p.caption and "Outlined in black" in p.caption


def test_per_layer_view_is_a_heatmap_and_a_folded_table(suite: LoadedRun, suite_page: tuple[str, Doc]) -> None:
    cases = by_source(suite.cases)["resnet50 live"]
    rows, names, values = layer_matrix(cases)
    assert len(rows) == 30 and len(names) == SUITE_LAYERS and all(len(v) == SUITE_LAYERS for v in values)
    _, _, q = layer_matrix(cases, "q")
    assert all(v is None for v in q[0])  # none's q of 0 has no place on a log colour scale: blank, not drawn
    table = layer_rows(cases)
    assert len(table) == 30 * SUITE_LAYERS and table[0][:3] == ["none", "0", names[0]]
    text, doc = suite_page
    assert Counter(doc.plots)["layers"] == 2 and Counter(doc.plots)["layers_q"] == 2
    assert text.count('<table class="sortable layers">') == 2
    folded = re.findall(r'<details class="fold"><summary>Per layer: ratio, bits/el and one-shot q of every case × unit\s*'
                        r'\((\d+) rows', text)
    assert folded == [str(30 * SUITE_LAYERS)] * 2


def test_summary_tables_hold_the_deciding_columns_and_fold_the_rest(suite_page: tuple[str, Doc]) -> None:
    text, doc = suite_page
    tables = re.findall(r'<table class="sortable cases">\s*<thead><tr>(.*?)</tr></thead>', text, re.S)
    heads = [re.findall(r"<th[^>]*>([^<]*)</th>", t) for t in tables]
    summary = ["case", "ratio ↑", "delivered ↑", "step err ↓", f"{X_COPY_HEADER} ↓"]
    assert heads.count(summary) == 2  # one per source
    detail = [h for h in heads if "params" in h]
    assert len(detail) == 2 and "compressor" in detail[0] and f"{X_COPY_HEADER} ↓" not in detail[0]
    assert text.count('<details class="fold"><summary>All columns of the main view') == 2
    # one name for kernel time over copy time, and nothing calls it the inverse
    body = "".join(doc.text)
    assert "comp/copy" not in text and "copy_fraction" not in text and "copy time / compress time" not in body
    footnote = text[text.index('<h2 id="metrics">'):]
    assert X_COPY_HEADER in footnote and "lower is better" in footnote


def test_stream_and_drift_lines_each_carry_their_name() -> None:
    cases = [_case(f"c{i}", compressor=f"f{i % 7}", stream=_stream(1 - i / 15)) for i in range(30)]
    p = plot_stream(cases, "t")
    assert p is not None and p.wide and "named at the right" in p.caption


def test_numbers_beyond_floats_and_lone_surrogates_render_into_the_page(tmp_path: Path) -> None:
    data = json.loads((GOLDEN / "run_base.json").read_text(encoding="utf-8"))
    case = data["cases"][0]
    case["label"] = "lab\ud800el"  # matplotlib's fonts and a UTF-8 file both refuse a lone surrogate
    case["layers"][0]["name"] = "lay\udfffer"
    case["size"]["wire_bytes"] = case["size"]["ratio"] = 10**400  # float() of it raised OverflowError
    src = tmp_path / "awkward.json"
    src.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "index.html"
    r = CliRunner().invoke(app, ["report", str(src), "--html", "-o", str(out)])
    assert r.exit_code == 0 and r.exception is None, r.output
    text = out.read_text(encoding="utf-8")
    assert "lab?el" in text and "lay?er" in text


def test_a_huge_label_is_bounded_where_the_page_draws_it(tmp_path: Path) -> None:
    data = json.loads((GOLDEN / "run_base.json").read_text(encoding="utf-8"))
    data["cases"][1]["label"] = "Y" * 200_000  # took minutes and gigabytes in matplotlib's layout before
    run = LoadedRun(GOLDEN / "run_base.json", data)
    text = render_html([run])
    assert "Y" * 4096 not in text  # no table cell, caption or tooltip carries it whole
    assert len(text) < len(render_html([_load("run_base")])) + 100_000  # each mention bounded: no 200,000-character copy


def _runs_folder(folder: Path, n: int) -> list[str]:
    """``n`` small results files (the golden bench file under new ids), oldest first; their ids."""
    data = json.loads((GOLDEN / "bench_small.json").read_text(encoding="utf-8"))
    folder.mkdir()
    ids = [f"2026-01-01T{i // 3600:02d}-{i // 60 % 60:02d}-{i % 60:02d}Z-bench" for i in range(n)]
    for run_id in ids:
        data["run_id"] = run_id
        (folder / f"{run_id}.json").write_text(json.dumps(data), encoding="utf-8")
    return ids


def test_html_renders_the_newest_run_and_lists_every_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder of 200 runs: one run rendered in full (before: every one, 0.75 s each), all 200 in the index."""
    import gcbench.report.html_page as html_mod

    ids = _runs_folder(tmp_path / "runs", 200)
    rendered: list[str] = []
    full = html_mod._section_context
    monkeypatch.setattr(html_mod, "_section_context", lambda i, run: rendered.append(run.run_id) or full(i, run))
    out = tmp_path / "index.html"
    r = CliRunner().invoke(app, ["report", "--html", "--runs-dir", str(tmp_path / "runs"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert rendered == [ids[-1]]  # the full renderer ran once, for the newest run
    doc = Doc()
    doc.feed(out.read_text(encoding="utf-8"))
    assert not doc.errors
    text = "".join(doc.text)
    assert all(run_id in text for run_id in ids)  # the index names every run
    assert ("a", "href", "#run0") in doc.attrs and "199 others listed only" in " ".join(text.split())

    rendered.clear()
    few = _runs_folder(tmp_path / "few", 3)
    r = CliRunner().invoke(app, ["report", "--html", "--all", "--runs-dir", str(tmp_path / "few"), "-o", str(out)])
    # --all: every run in detail on a page of its own, and the newest again on the index
    assert r.exit_code == 0 and sorted(rendered) == sorted([*few, few[-1]]), r.output
    rendered.clear()
    r = CliRunner().invoke(app, ["report", "--html", "--runs-dir", str(tmp_path / "runs"), ids[3], ids[5], "-o", str(out)])
    assert r.exit_code == 0 and rendered == [ids[3], ids[5]], r.output
    for bad in (["--all"], ["--all", "--html", ids[0]]):
        r = CliRunner().invoke(app, ["report", "--runs-dir", str(tmp_path / "runs"), *bad])
        assert r.exit_code == 1 and r.output.startswith("error: --all") and "Traceback" not in r.output


def test_the_page_modules_draw_from_the_view_model_not_the_terminal_renderer() -> None:
    """No report/html* module imports the terminal renderer; the page's template is package data the wheel carries."""
    import ast
    import tomllib

    import gcbench.report.html_page as page

    folder = Path(page.__file__).parent
    for path in folder.glob("html*.py"):
        imported = {n.module for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ImportFrom)}
        assert "gcbench.report.terminal" not in imported, path.name
    assert (folder / page.TEMPLATE_FILE).is_file() and page.page_template().startswith("<!DOCTYPE html>")
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    assert "report/templates/*.j2" in project["tool"]["setuptools"]["package-data"]["gcbench"]


def test_the_default_page_has_a_history_of_the_newest_runs_suite(tmp_path: Path) -> None:
    """Issue 33 item 4: a metric's history across the stored runs of one suite (asv-style), beside the index of runs."""
    from gcbench.report.load import newest_with_index

    shutil.copy(GOLDEN / "run_base.json", tmp_path / "20260105T100000Z-golden.json")
    shutil.copy(GOLDEN / "run_new.json", tmp_path / "20260106T100000Z-golden.json")
    shutil.copy(GOLDEN / "bench_small.json", tmp_path / "20260107T100000Z-bench.json")  # another kind: not in the history
    inp = newest_with_index(tmp_path)
    assert inp.loaded[0].kind == "bench" and inp.history is None  # the newest is a bench: no run history to show
    (tmp_path / "20260107T100000Z-bench.json").unlink()
    inp = newest_with_index(tmp_path)
    assert inp.history is not None and [h["run"] for h in inp.history] == ["golden-base", "golden-new"]
    page = render_html(inp.loaded, detailed=inp.detailed, index=inp.index, history=inp.history)
    assert 'id="history"' in page and "History — suite golden" in page
    label = next(iter(inp.history[-1]["values"]))
    assert html.escape(label) in page


def test_the_decision_plot_names_the_front_and_greys_the_rest() -> None:
    """Issue 33 item 5: 30 named curves were unreadable; the best three at any bandwidth are named, the rest grey."""
    from gcbench.report.html_plots import decision_front

    few = {"a": [2.0, 1.0], "b": [1.0, 2.0]}
    assert decision_front(few) == {"a", "b"}
    many = {f"c{i}": [10.0 - i, 1.0 + 0.01 * i] for i in range(10)}  # c0 best on slow links, c9 on fast ones
    assert decision_front(many) == {"c0", "c1", "c2", "c7", "c8", "c9"}


_FAKE_DOM = """
const rows = [...Array(10).keys()].map(i => ({ textContent: `row ${i} topk`, style: {}, cells: [] }));
let listener = null, inserted = null;
const table = { tBodies: [{ rows }], tHead: null, parentNode: null };
table.parentNode = { classList: { contains: c => c === "tablewrap" }, parentNode: { insertBefore: box => { inserted = box; } } };
global.document = { getElementById: () => null, querySelectorAll: () => [table],
  createElement: () => ({ setAttribute() {}, addEventListener: (e, f) => { listener = f; }, value: "" }) };
eval(require("fs").readFileSync(process.argv[2], "utf8"));
inserted.value = "ROW 3  topk";
listener();
console.log(JSON.stringify(rows.filter(r => r.style.display !== "none").map(r => r.textContent)));
"""


def test_the_pages_filter_box_keeps_the_rows_holding_every_word(tmp_path: Path) -> None:
    """Issue 33 item 4: tables filterable, not only sortable (the page's own script, run on a stub DOM by node)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    page = render_html([_load("run_base")])
    script = re.search(r"<script>(.*?)</script>", page, re.S)
    assert script is not None
    (tmp_path / "page.js").write_text(script.group(1), encoding="utf-8")
    (tmp_path / "dom.js").write_text(_FAKE_DOM, encoding="utf-8")
    out = subprocess.run([node, str(tmp_path / "dom.js"), str(tmp_path / "page.js")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["row 3 topk"]


@pytest.fixture(scope="module")
def thirteen_timed(tmp_path_factory: pytest.TempPathFactory) -> list[RunCase]:
    """A real run of 13 timed cases on 2 workers: more than the throughput plot draws upright, more than the decision front."""
    from gcbench.measure.runner import run_suite
    from gcbench.measure.suite import parse_suite

    names = ["none", "fp16", "bf16", "signsgd", "efsignsgd", "onebit", "terngrad", "qsgd", "topk", "randomk", "dgc", "natural",
             "graddrop"]
    suite = parse_suite({"name": "t", "seed": 0, "metrics": {"repeats": 2, "timing_repeats": 3, "timing_budget_s": 0.02},
                         "sources": [{"kind": "synthetic", "shapes": [[64, 64]], "workers": 2, "steps": 1}],
                         "compressors": [{"name": n} for n in names]})
    out = run_suite(suite, tmp_path_factory.mktemp("thirteen"))
    return [as_case(r) for r in out.records]


def test_the_throughput_bars_lie_down_past_a_dozen_cases(thirteen_timed: list[RunCase]) -> None:
    """Issue 33 item 5 at suite scale: 60 slanted names under one axis could not be read; past 12 cases each case is a
    row named level, and the figure takes a row of the page."""
    from gcbench.report.html_plots import THROUGHPUT_UPRIGHT_MAX

    rows, _ = throughput_rows(thirteen_timed)
    assert len(rows) > THROUGHPUT_UPRIGHT_MAX
    p = plot_throughput(thirteen_timed, "t")
    assert p is not None and p.wide
    few = plot_throughput(thirteen_timed[:4], "t")
    assert few is not None and not few.wide


def test_the_decision_plot_names_every_grey_curve_on_demand(thirteen_timed: list[RunCase]) -> None:
    """The front in colour; every curve, grey ones included, in a folded table with its break-even and speed-ups."""
    from gcbench.predict.decision import decision_curves

    p = plot_decision(thirteen_timed, "t")
    got = decision_curves(thirteen_timed, "bf16")  # the plot is drawn against bf16
    assert p is not None and got is not None and p.more is not None
    summary, headers, rows = p.more
    assert summary.startswith("Every curve, named")
    assert headers[:3] == ("case", "drawn", "break-even Gbit/s") and len(rows) == len(got[2])
    drawn = {r[1] for r in rows}
    assert drawn == {"front", "grey"} and "named in the table folded below" in p.caption
    for row in rows:
        assert row[2] in ("pays throughout", "never pays", "—") or float(row[2]) > 0
    page = render_html([LoadedRun(GOLDEN / "x.json", {"schema_version": 1, "kind": "run",
                                                      "cases": [c.to_json_dict() for c in thirteen_timed]})])
    figure = re.search(r'data-plot="decision">.*?</figure>', page, re.S)
    assert figure is not None and "<details class=\"more\">" in figure.group(0) and figure.group(0).count("<tr>") == len(rows) + 1


def _png_height(uri: str) -> int:
    import base64
    import struct

    data = base64.b64decode(uri.split(",", 1)[1])
    return struct.unpack(">I", data[20:24])[0]  # the IHDR chunk: width, then height


def test_the_stream_plot_grows_to_name_every_line() -> None:
    """60 names at the lines' ends overlapped in 5.6 inches: the axes grow by one name height per line past ~35."""
    def cases(n: int) -> list[RunCase]:
        return [as_case(_case(f"c{i}", size={"ratio": 10.0}, stream=_stream(0.9 - 0.01 * i))) for i in range(n)]

    few, many = plot_stream(cases(6), "t"), plot_stream(cases(60), "t")
    assert few is not None and many is not None
    assert _png_height(many.uri) > 1.5 * _png_height(few.uri)
    # 30 names still fit the usual height (a tight crop moves by a few pixels with the names)
    assert _png_height(plot_stream(cases(30), "t").uri) < 1.05 * _png_height(few.uri)  # type: ignore[union-attr]
