"""What the commands print: the two consoles, the progress display, and one-line warnings and errors.

Everything a user or a library wrote (labels, paths, error messages) is escaped before rich renders
it: a ``[/]`` in a label is text, not markup.  Control characters in that text (an ESC sequence in a
suite label, a carriage return in a model name read from a file) are shown as ``\\x1b`` and the like
(:func:`gcbench.report.text.safe_text`), never sent raw: they would recolour, move or clear the user's terminal.  Files
keep the text as it was.  Tests replace :data:`err` with a terminal console; every stderr line goes
through this module's ``err`` so that replacement sees them all.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.segment import Segment

from gcbench.cli.progress import StageBars
from gcbench.report.text import safe_text


class SafeConsole(Console):
    """A rich console that never sends a control character of the text it prints (:func:`safe_text`).

    Strings are sanitised when rich turns them into text (:meth:`render_str`), before tables measure
    them, so columns stay aligned; anything else (a ``Text`` a renderer built itself, a progress
    message) is sanitised as it is written, rich's own styling and cursor codes excepted.
    """

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(safe_text(text), **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        # segments with ``control`` set are rich's own cursor moves (the live progress display): kept
        return super()._render_buffer(seg if seg.control else Segment(safe_text(seg.text), seg.style)
                                      for seg in buffer)


# piped output (logs, CI) gets wide tables instead of folded cells
# emoji=False: rich would turn ':b:' in a user's text (a model 'a:b:c') into an emoji; escape() does not stop that
# (sys.stdout is None when the shell closed it, `gcbench list >&-`: main() says so in one line)
def _piped_width() -> int:
    """The width of output that is not a terminal: ``COLUMNS`` when it names one, else 200 (a file is read, not wrapped)."""
    try:
        return max(40, min(1000, int(os.environ.get("COLUMNS", ""))))
    except ValueError:
        return 200


out = (SafeConsole(emoji=False) if sys.stdout is not None and sys.stdout.isatty()
       else SafeConsole(width=_piped_width(), emoji=False))
err = SafeConsole(stderr=True, emoji=False)

# redraws of the progress display per second (see progress_bar)
PROGRESS_REFRESH_HZ = 1


def console_streams() -> int | None:
    """Make stdout and stderr write whatever text gcbench renders; an exit status when stdout is closed.

    Tables hold ``≥``, ``×`` and users' labels: on a stream whose encoding cannot write them
    (``PYTHONIOENCODING=ascii``, a C locale) a character it cannot encode is written as ``?``
    (one character for one, so rich's columns stay aligned) instead of ending in a traceback.
    A closed stdout (``>&-``) cannot take any result: one ``error:`` line, exit 1.
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="replace")
            except (OSError, ValueError):  # a stream closed or detached under us: nothing to set
                pass
    if sys.stdout is None:
        err.print("[bold red]error:[/] standard output is closed: gcbench writes its results there "
                  "(redirect it to a file or /dev/null instead)", highlight=False, soft_wrap=True)
        return 1
    return None


@contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Callable[[str, int, int, str], None]]:
    """A rich progress display fed by the library's ``progress(stage, done, total, message)`` (:class:`StageBars`).

    One bar per stage, each counting its units done, with elapsed time and an ETA: the cases' bar the
    command's weighted ETA (:class:`gcbench.cli.progress.RunEta`), the others their own rate.
    The display redraws once a second (the elapsed and ETA cells show whole seconds) from rich's
    thread: a redraw costs about 4-5 ms of CPU here, so rich's default of 10 a second took 2-2.5%
    of a quick run's time (and about 6% of a suite's profile samples), once a second about 0.5%.
    """
    if not enabled:
        yield lambda *a: None
        return
    prog = Progress(
        TextColumn("[bold blue]{task.fields[stage]:>9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[eta]}"),
        console=err,
        transient=True,
        refresh_per_second=PROGRESS_REFRESH_HZ,
    )
    bars = StageBars(prog)  # one bar per stage, one numbering, an ETA on each, finished bars collapsed

    def update(stage: str, done: int, total: int, message: str) -> None:
        bars.update(stage, done, total, message)  # messages are escaped there: a "[/]" in one kills the refresh thread

    with prog:
        yield update


def emit(parts: list[Any]) -> None:
    """Print a renderer's output in order: tables as they are, strings as plain text (never markup)."""
    for part in parts:
        if isinstance(part, str):
            out.print(part, markup=False, highlight=False)
        else:
            out.print(part)


def plain(text: str) -> None:
    """One line of the user's text on stdout (a path, a label): no markup, no highlighting."""
    out.print(text, markup=False, highlight=False)


def strict_json(data: Any) -> Any:
    """``data`` with every non-finite float (NaN, ±inf) as None and NumPy scalars as Python numbers.

    ``json.dumps`` writes NaN as ``NaN`` and inf as ``Infinity``, which no strict JSON parser reads
    (``jq``, JavaScript's ``JSON.parse``); results files store such a number as null, and so does ``--json``.
    """
    if isinstance(data, dict):
        return {k: strict_json(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [strict_json(v) for v in data]
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if type(data).__module__ == "numpy" and hasattr(data, "item"):  # a NumPy scalar (NumPy is not imported for this)
        return strict_json(data.item())
    return data


def json_text(data: Any, indent: int | None = None, default: Callable[[Any], Any] | None = str) -> str:
    """``data`` as strict JSON text (:func:`strict_json`); ``default`` writes the values JSON cannot hold."""
    import json

    fallback = None if default is None else (lambda v: strict_json(default(v)))
    return json.dumps(strict_json(data), indent=indent, default=fallback, allow_nan=False)


def print_json(data: Any, indent: int | None = None, default: Callable[[Any], Any] | None = str) -> None:
    """``data`` as strict JSON on stdout, unstyled (``--json``): NaN and inf as null (:func:`json_text`)."""
    print(json_text(data, indent, default))


def error_line(text: str) -> None:
    """One ``error:`` line on stderr: ``text`` is escaped (the user's names, a library's message)."""
    err.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)


def warn(text: str) -> None:
    """One ``warning:`` line on stderr (a deprecated spelling, a skipped input): the command goes on."""
    err.print(f"[yellow]warning:[/] {escape(text)}", highlight=False, soft_wrap=True)


def deprecated(old: str, new: str) -> None:
    """The one line a deprecated spelling prints: what to write instead (it still works, for now)."""
    warn(f"{old} is deprecated and will be removed; write {new}")


def print_traceback(exc: BaseException) -> None:
    """The full traceback of ``exc`` with its chained causes (``--debug``), on stderr without markup."""
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    err.print(text.rstrip(), markup=False, highlight=False, soft_wrap=True)
