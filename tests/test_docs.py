"""The project's own docs (``docs/``) keep up with the code, and nothing points outside the repository.

* every built-in compressor of the registry has a section of its own in ``docs/compressors.md``
  (a heading naming it in backticks), so a new compressor needs its doc;
* every metric of the catalogue written into results files (:data:`gcbench.results.metrics.METRICS`)
  has a row of its own in ``docs/metrics.md``;
* the docs' links to each other resolve;
* no file of the repository refers to design notes kept outside it: the outside files' names are
  built here from parts, so this file does not match its own patterns.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gcbench.compressors import registry
from gcbench.results.metrics import METRICS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: what the repository may not refer to: design notes that live outside it.  ``compressors.md`` alone is
#: allowed (``docs/compressors.md`` is a file of the repository); the outside copy is named by its folder.
FORBIDDEN = (
    "design" + ".md",
    "environment" + ".md",
    "shared" + "/compressors.md",
    "../" + "shared",
    "/work" + "/shared",
)
#: where the repository's own text lives (everything a reader or a user of gcbench sees)
SCANNED = ("README.md", "docs", "gcbench", "tests", "benchmarks", "suites", "baselines")
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".json", ".txt", ".cfg", ".ini", ".yaml", ".yml", ".html", ".csv", ".sh", ""}


def _builtin_names() -> list[str]:
    """Registered compressors that ship with gcbench (a plugin documents its own)."""
    return [n for n in registry.names() if registry.origin(n) == "gcbench"]


def _headings(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if re.match(r"#{2,4} ", line)]


def test_the_docs_exist() -> None:
    for name in ("README.md", "architecture.md", "contracts.md", "metrics.md", "timing.md", "compressors.md", "results.md"):
        assert (DOCS / name).is_file(), f"docs/{name} is missing"


def test_there_are_builtin_compressors() -> None:
    assert len(_builtin_names()) >= 20


@pytest.mark.parametrize("name", _builtin_names())
def test_every_compressor_has_a_section(name: str) -> None:
    headings = _headings(DOCS / "compressors.md")
    assert any(f"`{name}`" in h for h in headings), f"docs/compressors.md has no section (a heading with `{name}`) for {name}"


@pytest.mark.parametrize("key", [m.name for m in METRICS])
def test_every_metric_is_defined(key: str) -> None:
    rows = [line for line in (DOCS / "metrics.md").read_text(encoding="utf-8").splitlines() if line.startswith(f"| `{key}` |")]
    assert rows, f"docs/metrics.md defines no metric `{key}` (a table row starting with | `{key}` |)"
    assert len(rows[0].split("|")) >= 5 and rows[0].rstrip(" |").split("|")[-1].strip(), f"the row of `{key}` has no definition"


def test_links_between_docs_resolve() -> None:
    for page in sorted(DOCS.glob("*.md")):
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).is_file(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"


def _scanned_files() -> list[Path]:
    out = []
    for entry in SCANNED:
        path = ROOT / entry
        if path.is_file():
            out.append(path)
            continue
        for f in sorted(path.rglob("*")):
            if f.is_file() and not SKIPPED_DIRS.intersection(f.relative_to(ROOT).parts) and f.suffix in TEXT_SUFFIXES:
                out.append(f)
    return out


def test_nothing_refers_outside_the_repository() -> None:
    files = _scanned_files()
    assert any(f.name == "compressors.md" for f in files)  # the scan reaches docs/
    found = []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        found += [f"{f.relative_to(ROOT)}: {pattern!r}" for pattern in FORBIDDEN if pattern in text]
    assert not found, "files refer to notes outside the repository:\n" + "\n".join(found)
