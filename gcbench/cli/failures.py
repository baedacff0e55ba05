"""How a command fails: a user error is one ``error:`` line per problem and an exit status, a bug keeps its traceback.

User errors (bad suite, bad file, an output that cannot be written, a meaningless number) print
one clear line per problem to stderr and exit 1; a command line that cannot be read (an unknown
name, too few compressors) exits 2 as click's own usage errors do; ``--debug`` (or
``GCBENCH_DEBUG=1``) adds their traceback.
"""

from __future__ import annotations

import errno
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.markup import escape

from gcbench.cli import output
from gcbench.core.errors import GcbenchError

F = TypeVar("F", bound=Callable[..., Any])

# set by the app callback (``--debug`` or GCBENCH_DEBUG=1): user errors also print their traceback
_debug = False


def set_debug(value: bool) -> None:
    """``--debug``: from now on a user error's one line is followed by its traceback."""
    global _debug
    _debug = value


def debug_enabled() -> bool:
    return _debug or os.environ.get("GCBENCH_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


class OutputError(GcbenchError):
    """An output path that cannot be written (a file where a folder is needed, read-only, /proc, disk full)."""


class UsageError(GcbenchError):
    """A command line gcbench cannot read: an unknown name from a fixed set, too few compressors.

    Exit status 2, as click gives an unknown option or ``--steps x``; a value gcbench reads and
    refuses (``--steps 0``, a list item that is not a number) stays a :class:`GcbenchError`, exit 1.
    """


_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}
_WRITE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EISDIR, errno.EFBIG, errno.EEXIST, errno.ENOTDIR}


def _write_error(exc: OSError) -> OutputError:
    """``cannot write <path>: <reason>`` for an OSError raised while writing an output."""
    path = exc.filename if exc.filename2 is None else exc.filename2
    reason = exc.strerror or type(exc).__name__
    if path is None:
        return OutputError(f"cannot write an output file: {reason}")
    # the inputs a user names are read by loaders that raise GcbenchError; an OSError that reaches
    # the CLI comes from writing, but say "access" where the errno could as well be a read
    verb = "write" if exc.errno in _WRITE_ERRNOS else "access"
    return OutputError(f"cannot {verb} {path}: {reason}")


def _fail(shown: BaseException, exc: BaseException, code: int = 1) -> None:
    """Print ``shown`` as ``error:`` lines (the traceback of ``exc`` too with ``--debug``) and exit ``code``."""
    for line in str(shown).splitlines() or ["error"]:
        output.error_line(line)
    if debug_enabled():
        output.print_traceback(exc)
    raise typer.Exit(code) from None


def _created_files() -> list[Path] | None:
    """The results files this process created (:data:`gcbench.results.store.CREATED`); None before that module is imported.

    Looked up, not imported: a command that never imported the results store wrote no results file,
    and the command line starts without it.
    """
    store = sys.modules.get("gcbench.results.store")
    return None if store is None else store.CREATED


def user_errors(fn: F) -> F:
    """Turn user errors into one line per problem on stderr and exit status 1 (2 for a :class:`UsageError`).

    Ctrl-C (or SIGTERM) is one ``interrupted`` line, exit 130 (143), which names the results file the
    command created and keeps its completed cases in; a command stopped before its first case has
    none, and says nothing about one.

    User errors are :class:`GcbenchError` and ``OSError`` with a file name (an output that cannot
    be written: a file in the way, a read-only folder, a full disk).  With ``--debug`` (or
    ``GCBENCH_DEBUG=1``) the full traceback, chained causes included, follows the line.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        created = _created_files()
        first_new = len(created) if created is not None else 0
        try:
            return fn(*args, **kwargs)
        except UsageError as exc:
            _fail(exc, exc, 2)
        except GcbenchError as exc:
            _fail(exc, exc)
        except OSError as exc:
            # a file.write() on a full disk carries no file name, but it is the machine, not a bug
            if exc.filename is None and exc.errno not in _FULL_ERRNOS:
                raise  # no file the user named: a bug, it keeps its traceback
            _fail(_write_error(exc), exc)
        except KeyboardInterrupt as exc:
            # SIGTERM handlers raise KeyboardInterrupt("SIGTERM"): exit 128 + 15 as a shell expects
            term = bool(exc.args) and exc.args[0] == "SIGTERM"
            kept = [p for p in (_created_files() or [])[first_new:] if p.exists()]
            where = f": completed cases are kept in {kept[-1]}" if kept else ""
            output.err.print(f"[yellow]interrupted{' (SIGTERM)' if term else ''}[/]{escape(where)}", highlight=False, soft_wrap=True)
            raise typer.Exit(143 if term else 130) from None

    return wrapper  # type: ignore[return-value]  # functools.wraps keeps the command's signature, which typer reads
