"""User text in terminal tables: labels, layer and source names clipped to a width a table can hold.

Labels, layer and source names come from users' suites, models and plugins: one of 5,000
characters in a no-wrap column squeezes every other column of a terminal table to nothing.
Terminal tables show them clipped with an ellipsis; Markdown, HTML and CSV files keep them whole
(the HTML page clips the labels its plots draw, and bounds any text it shows to 4 KB).
A module of its own, with nothing heavy imported, so ``gcbench list`` can use it too.
"""

from __future__ import annotations

from rich.markup import escape as rich_escape

#: the most characters of a name (case label, layer, source, run id) a terminal table shows
NAME_MAX = 80
#: the most characters of a title, a caption's error text, or a free-text cell (which wrap)
TEXT_MAX = 400


def clip(text: str, limit: int = NAME_MAX) -> str:
    """``text`` cut to ``limit`` characters with ``…`` in the middle (the end of a layer name tells layers apart)."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 3
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def term(text: str, limit: int = NAME_MAX) -> str:
    """User text for a rich table cell: clipped (:func:`clip`), then markup-escaped (escaping after cutting keeps a whole escape)."""
    return rich_escape(clip(text, limit))
