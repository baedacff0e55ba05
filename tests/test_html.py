"""The self-contained HTML report: well-formed, offline, every case and plot present, hostile labels escaped."""

from __future__ import annotations

import base64
import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.report.html import (
    bench_bars,
    bench_size_point,
    plot_bench_x_copy,
    plot_ef_drift,
    plot_layers,
    plot_pareto,
    plot_size_scaling,
    plot_throughput,
    plot_time_to_target,
    plot_train_curves,
    render_html,
    run_size_point,
    train_curve_series,
)
from gcbench.report.terminal import LoadedRun, by_source, case_name
from gcbench.results.record import as_case

GOLDEN = Path(__file__).parent / "golden"
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
    # the new run: 2 sources × (Pareto, throughput, per-unit ratio), EF drift for the synthetic source only (the
    # ResNet-50 source has one step: no drift over steps), and throughput vs size (dgc-paper at two sizes)
    assert Counter(doc.plots) == {"pareto": 2, "throughput": 2, "layers": 2, "ef_drift": 1, "size": 1}
    assert len(doc.img_src) == 8 and doc.tags["svg"] == 0
    for src in doc.img_src:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"


def test_nothing_external(page: tuple[str, Doc]) -> None:
    text, doc = page
    refs = [(t, k, v) for t, k, v in doc.attrs if k in ("src", "href", "action", "srcset", "poster", "data")]
    assert refs
    for tag, key, value in refs:
        assert value.startswith("data:") or re.fullmatch(r"#[\w-]+", value), (tag, key, value)
    assert doc.tags["link"] == 0 and doc.tags["iframe"] == 0 and doc.tags["object"] == 0
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
    assert plot_pareto([lossless], "t") is None
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
    p = plot_pareto(cases, "$$ title")
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
    assert doc.tags["link"] == 0 and doc.tags["iframe"] == 0 and "url(" not in text and "@import" not in text
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
    r = CliRunner().invoke(app, ["report", "--runs-dir", str(d), "--html", "-o", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text(encoding="utf-8")
    doc = Doc()
    doc.feed(text)
    doc.close()
    assert doc.errors == []
    assert [t for t in re.findall(r'<h2 id="run\d">([^<]+)</h2>', text)] == [
        "Run golden-base", "Run golden-compare", "Training run golden-train", "Kernel benchmark golden-bench"]
    plots = Counter(doc.plots)
    assert plots == {"pareto": 2, "throughput": 2, "layers": 2, "train_accuracy": 1, "train_loss": 1, "time_to_target": 1,
                     "bench_x_copy": 1, "size": 1}
    _assert_offline(text, doc)
