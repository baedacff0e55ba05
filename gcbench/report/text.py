"""User text in terminal tables: labels, layer and source names clipped to a width a table can hold.

Labels, layer and source names come from users' suites, models and plugins: one of 5,000
characters in a no-wrap column squeezes every other column of a terminal table to nothing.
Terminal tables show them clipped with an ellipsis; Markdown, HTML and CSV files keep them whole
(the HTML page clips the labels its plots draw, and bounds any text it shows to 4 KB).
Control characters in them (an ESC sequence in a suite label, a carriage return in a model name read
from a file) are written out as ``\\x1b`` and the like wherever gcbench prints to the terminal
(:func:`safe_text`: the table cells here, and every line the command line prints); files keep them.
A module of its own, with nothing heavy imported, so ``gcbench list`` can use it too.
"""

from __future__ import annotations

import re

from rich.markup import escape as rich_escape

#: the most characters of a name (case label, layer, source, run id) a terminal table shows
NAME_MAX = 80
#: the most characters of a title, a caption's error text, or a free-text cell (which wrap)
TEXT_MAX = 400

# C0 controls but tab and newline, DEL, C1 controls (CSI, ESC's 8-bit twin, among them), and the bidirectional
# overrides and isolates that reorder what a terminal shows ("trojan source")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(text: str) -> str:
    """``text`` with every control character written out (ESC as ``\\x1b``, CR as ``\\x0d``, U+202E as ``\\u202e``).

    The one sanitiser of what reaches the terminal: a label, a model name or a path from a file is
    the user's (or an attacker's) text, and an ESC sequence in it would otherwise restyle, move the
    cursor of, retitle or clear the terminal it is printed on.  Tab and newline are kept (tables and
    multi-line messages need them).  Files are written from the original text, never from this.
    """
    return _CONTROL.sub(_shown, text)


def clip(text: str, limit: int = NAME_MAX) -> str:
    """``text`` cut to ``limit`` characters with ``…`` in the middle (the end of a layer name tells layers apart)."""
    if len(text) <= limit:
        return text
    head = (limit - 1) * 2 // 3
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def term(text: str, limit: int = NAME_MAX) -> str:
    """User text for a rich table cell: control characters written out (:func:`safe_text`), clipped (:func:`clip`), then
    markup-escaped (escaping after cutting keeps a whole escape)."""
    return rich_escape(clip(safe_text(text), limit))
