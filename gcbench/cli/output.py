"""What the commands print: the two consoles, the progress display, and one-line warnings and errors.

Everything a user or a library wrote (labels, paths, error messages) is escaped before rich renders
it: a ``[/]`` in a label is text, not markup.  Tests replace :data:`err` with a terminal console;
every stderr line goes through this module's ``err`` so that replacement sees them all.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gcbench.report.progress import StageBars


# piped output (logs, CI) gets wide tables instead of folded cells
# emoji=False: rich would turn ':b:' in a user's text (a model 'a:b:c') into an emoji; escape() does not stop that
# (sys.stdout is None when the shell closed it, `gcbench list >&-`: main() says so in one line)
def _piped_width() -> int:
    """The width of output that is not a terminal: ``COLUMNS`` when it names one, else 200 (a file is read, not wrapped)."""
    try:
        return max(40, min(1000, int(os.environ.get("COLUMNS", ""))))
    except ValueError:
        return 200


out = Console(emoji=False) if sys.stdout is not None and sys.stdout.isatty() else Console(width=_piped_width(), emoji=False)
err = Console(stderr=True, emoji=False)

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
    command's weighted ETA (:class:`gcbench.report.progress.RunEta`), the others their own rate.
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


def print_json(data: Any, indent: int | None = None, default: Callable[[Any], Any] | None = str) -> None:
    """``data`` as JSON on stdout, unstyled (``--json``); ``default`` writes the values JSON cannot hold."""
    import json

    print(json.dumps(data, indent=indent, default=default))


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
