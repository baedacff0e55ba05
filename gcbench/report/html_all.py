"""``gcbench report --html --all``: an index page of every run plus one page per run, each rendered once and reused.

Rendering a run in full (its tables and a dozen matplotlib plots) is the expensive part of a report: the
old ``--all`` put every run's section into one file, so each call re-drew every plot of every run (30
copies of a 12-case run: 7 min 42 s at load 9 and a 19 MB file).  Here the index (``reports/index.html``)
is the default ``--html`` page (the newest run in detail, every run listed) with each listed run linked to
its own page in ``<index stem>_runs/`` beside it.  A run's page is re-rendered only when its results file
changed (size and modification time), or gcbench or the page template did; the key of each page is kept in
``pages.json`` in that folder.  A page of a run that left the folder is removed; a file in that folder that
gcbench did not write is never touched (rendering refuses to replace it, as ``--output`` does).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gcbench
from gcbench.core.errors import GcbenchError, ResultsError
from gcbench.report.load import LoadedRun, ReportInput, _read
from gcbench.results.atomic import atomic_write
from gcbench.results.baselines import ClaimResult

#: the folder's list of pages and the key each was rendered for
MANIFEST = "pages.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class AllPages:
    """What :func:`write_html_all` did: the index, the pages folder, how many pages it rendered and reused."""

    index: Path
    folder: Path
    rendered: int
    reused: int
    removed: int


def pages_folder(index: Path) -> Path:
    """The folder of the per-run pages beside ``index`` (``reports/index.html`` -> ``reports/index_runs``)."""
    return index.with_name(f"{index.stem}_runs")


def _key(results: Path, template: str) -> dict[str, Any]:
    """What a page depends on: its results file's size and mtime, gcbench's version and the page template."""
    st = results.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "gcbench": gcbench.__version__,
            "template": hashlib.sha256(template.encode()).hexdigest()[:16]}


def _ours(path: Path) -> bool:
    """A page gcbench wrote (an HTML report naming gcbench in its first 4 KiB), or nothing there to lose."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except FileNotFoundError:
        return True
    return not head or (head.lstrip().startswith(b"<!DOCTYPE html>") and b"gcbench" in head)


def _read_manifest(folder: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: every page is rendered again (correct, only slower)
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, dict)} if isinstance(data, dict) else {}


def write_html_all(index_path: Path, inp: ReportInput, claims: Sequence[ClaimResult] | None, claims_missing: str,
                   on_skip: Callable[[ResultsError], None] | None = None) -> AllPages:
    """Write every run's page (rendering only the stale ones) and the index linking them; ``inp`` is
    :func:`gcbench.report.load.newest_with_index`'s (the newest run loaded, every run's facts in ``index``)."""
    from gcbench.report.html_page import page_template, render_html

    folder = pages_folder(index_path)
    if folder.exists() and not folder.is_dir():
        raise GcbenchError(f"--output: {folder} (the folder of the per-run pages) exists and is not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    template = page_template()
    old = _read_manifest(folder)
    manifest: dict[str, dict[str, Any]] = {}
    links: dict[str, str] = {}
    rendered = reused = 0
    newest = {str(r.path): r for r in inp.loaded}
    for facts in inp.index or []:
        results = Path(facts["file"])
        name = _UNSAFE.sub("_", results.stem)[:120] + ".html"
        while name in manifest:  # two results files whose names clean to the same page
            name = "_" + name
        page = folder / name
        try:
            key = _key(results, template)
        except OSError:
            continue  # the file went between listing and now: no page, no link
        if old.get(name) == {**key, "file": str(results)} and page.is_file():
            reused += 1
        else:
            if not _ours(page):
                raise GcbenchError(f"--output: {page} exists and is not an HTML report that gcbench wrote: writing would "
                                   f"replace it; move it out of {folder}")
            try:
                run = newest.get(str(results)) or LoadedRun(results, _read(results))
            except ResultsError as exc:
                if on_skip is not None:
                    on_skip(exc)
                    continue
                raise
            atomic_write(page, render_html([run], [], None, title=f"gcbench report — {run.run_id}",
                                           claims_missing="Paper claims are checked on the index page, against its newest run."))
            rendered += 1
        manifest[name] = {**key, "file": str(results)}
        links[str(results)] = f"{folder.name}/{name}"
    removed = 0
    for name in set(old) - set(manifest):  # pages of runs no longer in the folder: ours (listed), so removed
        gone = folder / _UNSAFE.sub("_", name)
        if gone.is_file() and _ours(gone):
            gone.unlink()
            removed += 1
    atomic_write(folder / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
    atomic_write(index_path, render_html(inp.loaded, claims, None, claims_missing=claims_missing, detailed=inp.detailed,
                                         index=inp.index, history=inp.history, pages=links))
    return AllPages(index_path, folder, rendered, reused, removed)
