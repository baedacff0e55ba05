"""Look at an HTML report as a reader does: headless Chromium screenshots, full page and per section.

Usage::

    gcbench report RUN.json --html -o /tmp/report/index.html
    python benchmarks/screenshots.py /tmp/report/index.html /tmp/shots [--width 1400]

writes ``full.png`` (the whole page) and one PNG per section (every ``<h2>``/``<h3>`` with an id:
``run0.png``, ``run0-src0.png``, ...) into the folder (``--top PX`` keeps each shot's first PX pixels: what a
reader sees first, small enough for a README; ``--only ID`` takes that one section), and prints what the page measured in the
browser: its scroll width against the window (a table or plot wider than the window overflows),
its height, and the plots and tables it holds.  Open the PNGs: a plot whose points cannot be named
or a table that overflows is seen there first.

Only Debian's ``chromium`` (``/usr/bin/chromium``) and the standard library are used: the page is
loaded with ``--dump-dom`` after a small probe script appended to a copy of it has written its
measurements into the DOM, and screenshots come from ``--screenshot`` at a window as tall as the
measured page (or section).  The same probe drives ``tests/report/test_html_browser.py`` through
:func:`probe_page`, which serves the report from a one-file HTTP server on localhost so that every
request the page makes is counted.
"""

from __future__ import annotations

import argparse
import http.server
import json
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
#: flags that run headless Chromium here without a display, a sandbox or any background traffic of its own
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
         # every host name fails to resolve but localhost: a page that fetches from outside gets an error, never a network
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
#: the tallest screenshot taken (a longer page or section is cut there: Chromium's own limit is near 16k device pixels)
MAX_HEIGHT = 16000

# Appended to a copy of the page: after load (every image decoded) it writes what the browser measured as JSON into
# <pre id="gcbench-probe">.  ``only`` (an element id or "") first hides everything of <main> but that section.
_PROBE = r"""<script>
(function () {
  var only = %(only)s;
  if (%(open)s) { document.querySelectorAll("details").forEach(function (d) { d.open = true; }); }
  if (only) {
    var start = document.getElementById(only), level = start ? start.tagName : "H2", keep = false;
    Array.prototype.forEach.call(document.querySelectorAll("main > *"), function (el) {
      if (el === start) { keep = true; }
      else if (keep && /^H[12]$/.test(el.tagName) || keep && level === "H3" && el.tagName === "H3") { keep = false; }
      if (!keep) { el.style.display = "none"; }
    });
  }
  window.addEventListener("load", function () {
    var d = document.documentElement, wide = [];
    document.querySelectorAll("body *").forEach(function (el) {
      var r = el.getBoundingClientRect();
      if (r.right > window.innerWidth + 0.5 && r.width > 0) { wide.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")); }
    });
    var out = {
      scrollWidth: d.scrollWidth, scrollHeight: d.scrollHeight, innerWidth: window.innerWidth,
      images: Array.prototype.map.call(document.images, function (i) { return i.complete && i.naturalWidth > 0; }),
      svgs: document.querySelectorAll("svg").length, tables: document.querySelectorAll("table").length,
      plots: Array.prototype.map.call(document.querySelectorAll("figure[data-plot]"), function (f) { return f.dataset.plot; }),
      resources: performance.getEntriesByType("resource").map(function (e) { return e.name; }),
      overflowing: wide.slice(0, 20),
      scrolling: Array.prototype.filter.call(document.querySelectorAll("*"), function (el) {
        return el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== "visible";
      }).map(function (el) { return el.tagName.toLowerCase() + (el.className ? "." + el.className : "") + " " + el.scrollWidth; })
    };
    var pre = document.createElement("pre");
    pre.id = "gcbench-probe";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  });
})();
</script>"""


@dataclass
class PageProbe:
    """What the browser measured on one load of a page."""

    scroll_width: int
    scroll_height: int
    window_width: int
    images_loaded: list[bool]  # one per <img>: decoded with a size
    svgs: int
    tables: int
    plots: list[str]  # the data-plot kinds of the page's figures, in page order
    resources: list[str]  # every resource the page fetched (Resource Timing; data: URIs are not fetches)
    overflowing: list[str]  # elements whose right edge passes the window (first 20)
    scrolling: list[str]  # boxes that scroll sideways (a table wider than its wrapper): "tag.class scrollWidth"
    console: list[str] = field(default_factory=list)  # Chromium's console lines: errors, warnings, logs
    requests: list[str] = field(default_factory=list)  # request lines the local server answered (probe_page only)


def available() -> bool:
    """Whether the Chromium this script drives is installed."""
    return Path(CHROMIUM).is_file()


def _with_probe(html: str, only: str = "", open_details: bool = False) -> str:
    probe = _PROBE % {"only": json.dumps(only), "open": json.dumps(open_details)}
    cut = html.rfind("</body>")
    return html[:cut] + probe + html[cut:] if cut >= 0 else html + probe


def _chromium(url: str, extra: list[str], width: int, height: int, timeout: float) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="gcbench-chromium-") as profile:  # a fresh profile per load: no state carried
        cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", *extra, url]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def _console(stderr: str) -> list[str]:
    """Chromium's log lines for the page's console (``INFO:CONSOLE...] "message", source: ...``)."""
    return [line.split("] ", 1)[-1] for line in stderr.splitlines() if ":CONSOLE" in line]


def _parse(dom: str, stderr: str) -> PageProbe:
    m = re.search(r'<pre id="gcbench-probe">(.*?)</pre>', dom, re.S)
    if m is None:
        raise RuntimeError("the page never finished loading in Chromium (no probe output); Chromium said:\n" + stderr[-2000:])
    text = m.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    d = json.loads(text)
    return PageProbe(d["scrollWidth"], d["scrollHeight"], d["innerWidth"], d["images"], d["svgs"], d["tables"], d["plots"],
                     d["resources"], d["overflowing"], d["scrolling"], _console(stderr))


def probe_file(path: Path, width: int = 1400, height: int = 1000, only: str = "", open_details: bool = False,
               timeout: float = 120) -> PageProbe:
    """Load a copy of the page at ``path`` (with the probe) from disk and return what the browser measured.

    ``only``: the id of one section's heading (the rest hidden); ``open_details``: every ``<details>`` unfolded first.
    """
    with tempfile.TemporaryDirectory(prefix="gcbench-probe-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_text(_with_probe(path.read_text(encoding="utf-8"), only, open_details), encoding="utf-8")
        done = _chromium(copy.as_uri(), ["--dump-dom"], width, height, timeout)
    return _parse(done.stdout, done.stderr)


def probe_page(html: str, width: int = 1400, height: int = 1000, open_details: bool = True, timeout: float = 120) -> PageProbe:
    """Serve the page (with the probe) from localhost, load it once, and return what the browser measured.

    Every ``<details>`` is unfolded first (unless ``open_details`` is false), so folded tables are measured too.
    The server answers every path (the page at ``/index.html``, 404 elsewhere) and records each
    request line, so a page that fetches anything beyond itself shows more than one request.
    """
    body = _with_probe(html, open_details=open_details).encode("utf-8")
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.requestline)
            ok = self.path == "/index.html"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body) if ok else 0))
            self.end_headers()
            if ok:
                self.wfile.write(body)

        do_POST = do_HEAD = do_GET

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        done = _chromium(f"http://127.0.0.1:{server.server_address[1]}/index.html", ["--dump-dom"], width, height, timeout)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    probe = _parse(done.stdout, done.stderr)
    probe.requests = seen
    return probe


def sections(html: str) -> list[tuple[str, str]]:
    """``(id, heading text)`` of every ``<h2>``/``<h3>`` with an id, in page order."""
    out = []
    for m in re.finditer(r'<h([23]) id="([^"]+)">(.*?)</h\1>', html, re.S):
        out.append((m.group(2), re.sub(r"<[^>]+>", "", m.group(3)).strip()))
    return out


def screenshot(path: Path, out: Path, width: int = 1400, only: str = "", open_details: bool = False,
               timeout: float = 180, top: int | None = None) -> PageProbe:
    """A PNG of the page (or of one section, ``only`` = its heading's id) at ``width``, as tall as it is.

    ``top``: only the first ``top`` CSS pixels (the window is that tall), for a picture of what a reader sees first
    that stays small enough to commit; the probe still measures the whole page.
    """
    probe = probe_file(path, width, 1000, only, open_details, timeout)
    height = min(max(probe.scroll_height, 200), MAX_HEIGHT, top if top is not None else MAX_HEIGHT)
    with tempfile.TemporaryDirectory(prefix="gcbench-shot-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_text(_with_probe(path.read_text(encoding="utf-8"), only, open_details), encoding="utf-8")
        done = _chromium(copy.as_uri(), [f"--screenshot={out}"], width, height, timeout)
    if not out.is_file():
        raise RuntimeError(f"Chromium wrote no screenshot {out}:\n{done.stderr[-2000:]}")
    return probe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("report", type=Path, help="an HTML report (gcbench report ... --html -o FILE)")
    ap.add_argument("out", type=Path, help="folder for the PNGs (created)")
    ap.add_argument("--width", type=int, default=1400, help="window width in CSS pixels (default 1400)")
    ap.add_argument("--no-sections", action="store_true", help="the full page only")
    ap.add_argument("--open", action="store_true", help="unfold every <details> (folded tables) before the screenshot")
    ap.add_argument("--top", type=int, default=None, metavar="PX",
                    help="keep only the first PX CSS pixels of each shot (e.g. the README's picture of a report)")
    ap.add_argument("--only", default=None, metavar="ID", help="only the section whose heading has this id (e.g. run0-src0)")
    args = ap.parse_args(argv)
    if args.top is not None and args.top < 1:
        print(f"screenshots: --top must be at least 1 pixel, got {args.top}", file=sys.stderr)
        return 1
    if not available():
        print(f"screenshots: {CHROMIUM} not found (Debian: apt-get install chromium)", file=sys.stderr)
        return 1
    if not args.report.is_file():
        print(f"screenshots: no such report: {args.report}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    html = args.report.read_text(encoding="utf-8")
    views = [("full", "", "the whole page")] + ([] if args.no_sections else [(i, i, t) for i, t in sections(html)])
    if args.only is not None:
        views = [v for v in views if v[1] == args.only]
        if not views:
            known = ", ".join(i for i, _ in sections(html)) or "none"
            print(f"screenshots: no section {args.only!r} in {args.report} (sections: {known})", file=sys.stderr)
            return 1
    bad = False
    for name, only, text in views:
        png = args.out / f"{re.sub(r'[^A-Za-z0-9_-]', '_', name)}.png"
        p = screenshot(args.report, png, args.width, only, args.open, top=args.top)
        over = p.scroll_width > args.width or bool(p.scrolling)
        bad |= over or bool(p.console)
        cut = f" (cut at {MAX_HEIGHT})" if p.scroll_height > MAX_HEIGHT else ""
        print(f"{png.name:<22} {text[:60]:<60} {p.scroll_width:>5} × {p.scroll_height}{cut} px  plots {len(p.plots)}, "
              f"tables {p.tables}" + (f"  OVERFLOWS: {', '.join(p.overflowing[:5] + p.scrolling[:5])}" if over else ""))
        for line in p.console:
            print(f"    console: {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
