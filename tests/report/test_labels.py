"""Case labels in terminal tables wrap only after ``,`` ``:`` ``=`` (or a space), never inside a name or value.

The audit saw ``topk:density=0.01,error_`` over ``feedback=true`` in the convergence table: the column folded the
spec at its edge.  These tests draw the tables on rich consoles of narrow widths and look for every piece whole.
"""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.table import Table

from gcbench.report.columns import Label
from gcbench.report.converge_table import converge_table

SPEC = "topk:density=0.01,error_feedback=true"
PIECES = ("topk:", "density=0.01,", "error_feedback=true")


def _drawn(renderable: object, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


def _cells(text: str) -> list[str]:
    """The first column's text of each drawn row (between the table's first two vertical rules)."""
    return [m.group(1).strip() for m in re.finditer(r"^│([^│]*)│", text, re.M)]


def _case(label: str, reference: bool = False) -> dict:
    interval = {"mean": 0.98, "low": 0.97, "high": 0.99, "n": 3}
    return {"label": label, "status": "ok", "convergence": {
        "reference": reference, "settings": {"metric": "accuracy"}, "bytes": {"sent_per_worker_per_step": 2458.0},
        "summary": {"seeds": 3, "final_metric": interval, "gap": interval, "steps_to_target": interval, "reached": 3,
                    "diverged": 0}}}


def _at_boundaries(label: str, lines: list[str]) -> bool:
    """Each line starts where the label may be cut (its start, or after , : = or a space), and together they are it."""
    pos = 0
    for line in lines:
        if label.startswith(" ", pos) and not line.startswith(" "):
            pos += 1  # the space a cut dropped
        if not label.startswith(line, pos) or (pos and label[pos - 1] not in ",:= "):
            return False
        pos += len(line)
    return pos == len(label)


@pytest.mark.parametrize("width", [116, 120, 160])  # the table is drawn for 120 columns (its docstring)
def test_the_convergence_table_wraps_a_spec_only_at_its_separators(width: int) -> None:
    text = _drawn(converge_table([_case("none", True), _case(SPEC)], "t"), width)
    cells = [c for c in _cells(text) if c and not c.startswith("none")]
    assert any("error_feedback=true" in c for c in cells), text  # before: "...,error_" over "feedback=true"
    assert _at_boundaries(SPEC, cells), text


@pytest.mark.parametrize("width", [5, 14, 19, 25, 40, 60])
def test_a_label_is_cut_after_separators_into_whole_pieces(width: int) -> None:
    """Every line is whole pieces, and together they are the label (nothing lost, nothing added); a piece wider than
    the column ("error_feedback=" at 14) is the only thing folded, as nothing else could fit."""
    label = SPEC + " (ref)"
    lines = Label(label).lines(width)
    assert all(len(line) <= width for line in lines)
    if width >= len("error_feedback="):
        assert _at_boundaries(label, lines), lines
    else:
        assert "".join(lines).replace(" ", "") == label.replace(" ", ""), lines
    t = Table()
    t.add_column("compressor")
    t.add_column("x", no_wrap=True)
    t.add_row(Label(label), "1")
    drawn = [c for c in _cells(_drawn(t, width + 9)) if c]
    if width >= len("error_feedback="):
        assert _at_boundaries(label, drawn), drawn


def test_a_label_is_plain_text_not_markup() -> None:
    """A user's ``[red]`` shows as typed (the cell is not parsed as rich markup)."""
    assert "[red]x[/]" in _drawn(Label("[red]x[/]"), 40)
