"""The project's own docs (``docs/``) keep up with the code, and nothing points outside the repository.

* every built-in compressor of the registry has a section of its own in ``docs/compressors.md``
  (a heading naming it in backticks), so a new compressor needs its doc;
* every metric of the catalogue written into results files (:data:`gcbench.results.metrics.METRICS`)
  has a row of its own in ``docs/metrics.md``;
* the links and pictures of README.md and the docs resolve, and every docs page is in docs/README.md's index;
* README.md stays a front page (at most 200 lines) that keeps the two set-up commands verbatim, and what it
  shows follows the code: its compressor table is the registry (reconstructed ones marked), its sample of a
  bare ``gcbench run`` is the bundled quick suite, its picture is a small committed PNG;
* every top-level folder and module of gcbench/ is named in README.md or docs/ (docs/architecture.md's layout);
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


# -- the README is a front page; what it shows follows the code -------------------------------------------------------

README = ROOT / "README.md"
#: the two set-up commands, kept verbatim (``.ci/run`` runs the second on a fresh clone)
SETUP_COMMANDS = (
    'python -m pip install "torch==2.13.0" -e . && gcbench run',
    'python -m pip install "torch==2.13.0" -e ".[dev]" && python -m pytest -q',
)


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", text, re.S)


def test_the_readme_is_a_front_page() -> None:
    """It was 1,048 lines, the headline command's answer 779 lines down; everything else lives in docs/."""
    lines = _readme().count("\n")
    assert lines <= 200, f"README.md has {lines} lines: keep it a front page (at most 200), move the rest to docs/"


@pytest.mark.parametrize("command", SETUP_COMMANDS)
def test_the_readme_keeps_the_two_setup_commands(command: str) -> None:
    assert any(block.strip() == command for block in _code_blocks(_readme())), f"README.md lost the set-up command {command!r}"


def test_links_from_the_readme_and_the_docs_resolve() -> None:
    """Every relative link and image of README.md and docs/*.md names a file that exists (anchors aside)."""
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"


def test_every_docs_page_is_in_the_index() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for page in sorted(DOCS.glob("*.md")):
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not list {page.name}"


def test_the_readme_picture_is_committed_and_small() -> None:
    images = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", _readme())
    assert images, "README.md shows no picture of the HTML report"
    for rel in images:
        data = (ROOT / rel).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{rel} is not a PNG"
        assert len(data) < 300_000, f"{rel} is {len(data)} bytes: keep the README's picture under 300 KB"


def test_every_package_folder_and_module_is_named_in_the_docs() -> None:
    """The map of gcbench/ (docs/architecture.md's layout) names every top-level folder and module."""
    text = _readme() + "".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")))
    pkg = ROOT / "gcbench"
    names = [p.name for p in pkg.glob("*.py")] + [p.name + "/" for p in pkg.iterdir() if p.is_dir() and p.name not in SKIPPED_DIRS]
    missing = [n for n in sorted(names) if n not in text]
    assert not missing, f"README.md and docs/*.md never name {missing}: add them to docs/architecture.md's layout"


def _compressor_table() -> dict[str, bool]:
    """The README's compressor table (the first table of its "Compressors" section): name -> marked reconstructed (†)."""
    section = _readme().split("\n## Compressors\n", 1)[-1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    found: dict[str, bool] = {}
    for row in rows:
        for name, mark in re.findall(r"`([a-z0-9_]+)`(†?)", row.split("|")[2]):
            found[name] = bool(mark)
    return found


def test_the_readme_compressor_table_lists_every_builtin_compressor() -> None:
    table = _compressor_table()
    assert sorted(table) == sorted(_builtin_names()), "README.md's compressor table and the registry disagree"
    count = re.search(r"through (\d+) gradient\s+compressors", _readme())
    assert count and int(count.group(1)) == len(_builtin_names()), "README.md states another number of compressors"


def test_the_readme_marks_exactly_the_reconstructed_compressors() -> None:
    marked = sorted(n for n, dagger in _compressor_table().items() if dagger)
    assert marked == sorted(n for n in _builtin_names() if registry.get(n).resolve_flags().reconstructed)


def test_the_readme_run_sample_is_the_bundled_quick_suite() -> None:
    """The sample output of a bare ``gcbench run`` shows the quick suite as it is now: its cases in order, its stream
    length and worker count as the text says, and an answer that does not tell the user to rerun first."""
    from gcbench.measure.suite import load_suite

    suite = load_suite("quick")
    [sample] = [b for b in _code_blocks(_readme()) if "gcbench run quick —" in b]
    labels = [m for m in re.findall(r"^│ (\S+)\s+│", sample, re.M) if m != "case"]
    assert labels == suite.labels(), "README.md's `gcbench run` sample shows other cases than suites/quick.toml"
    [src] = suite.sources
    assert f"over {src.steps} steps" in sample.replace("\n", " ")
    said = re.search(r"streams (\d+) steps of synthetic gradients from (\d+) workers through (\d+) compressors", _readme())
    assert said and [int(g) for g in said.groups()] == [src.steps, src.workers, len(suite.compressors)]
    assert "rerun with more steps" not in sample and "too short" not in sample, "the sample's answer disowns itself"
