"""The one way gcbench writes an output file, and the bounded way it reads a JSON file a user names.

Writing (:func:`atomic_write`): every file gcbench produces (results files, reports in Markdown,
HTML and CSV, exports, trace files and manifests, bench and calibration JSON) is written to a
temporary file in the destination's folder, synced, and renamed over the destination.  So the
previous file survives a full disk, a killed process or a crash whole, and a reader never sees
half a file.  SIGINT/SIGTERM are held for the write (:func:`gcbench.core.signals.deferred`).  A
failure is an ``OSError`` whose ``filename`` is the destination (a full disk's write error carries
no file name of its own), which the command line prints as one ``cannot write FILE: reason`` line.

Reading (:func:`read_json_file`): a file named on the command line or found in a folder may be a
FIFO (opening it would wait for a writer forever), a link to ``/dev/zero`` (reading it would
never end), a huge file, or JSON holding an integer of more digits than Python converts
(``ValueError`` from ``int()``).  Each is one error line naming the file (and, for the integer,
the field).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gcbench.core import signals
from gcbench.core.errors import GcbenchError

# a results file of the largest reference run is ~3 MB; this is far above any real one and far below RAM
MAX_JSON_BYTES = 256 * 1024 * 1024
# Python refuses to convert longer digit strings (sys.set_int_max_str_digits); 4300 is its default
MAX_INT_DIGITS = sys.get_int_max_str_digits() or 4300


def _named(exc: OSError, path: Path) -> OSError:
    """``exc`` with ``filename`` set to ``path`` (a write that fills the disk names no file, a temporary name means nothing)."""
    if exc.filename == str(path):
        return exc
    named = OSError(exc.errno, exc.strerror or str(exc), str(path))
    named.__cause__ = exc  # --debug shows the original
    return named


def write_temp(path: Path, data: str | bytes | Callable[[Path], None]) -> Path:
    """``data`` in a new temporary file beside ``path``, synced to disk, mode 0644; returns the temporary file.

    The first half of :func:`atomic_write`, for a caller that renames several files together (the
    CSV export's four).  ``data`` is text (UTF-8), bytes, or a function that writes the file at the
    path it is given (for writers that only take a file name, such as safetensors' ``save_file``).
    An ``OSError`` leaves no temporary file and is raised with ``filename`` set to ``path``.
    """
    tmp: Path | None = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        tmp = Path(name)
        if callable(data):
            os.close(fd)
            data(tmp)
            with open(tmp, "rb") as f:  # sync what the writer wrote
                os.fsync(f.fileno())
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; outputs are meant to be shared
    except OSError as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise _named(exc, path)  # noqa: B904 (its cause is set: the original error)
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise
    return tmp


def atomic_write(path: str | Path, data: str | bytes | Callable[[Path], None]) -> Path:
    """Write ``data`` to ``path`` atomically: :func:`write_temp` beside it, then rename; returns ``path``.

    The destination's folder is created.  SIGINT/SIGTERM wait until the rename is done.  An
    ``OSError`` leaves the previous file untouched and no temporary file, and is raised with
    ``filename`` set to ``path``.  A symlink's target is replaced, not the link; an existing
    device or FIFO (``-o /dev/stdout``) is written into.
    """
    p = Path(path)
    try:
        # a link is kept and its target replaced (renaming onto the link would replace the link itself)
        dest = Path(os.path.realpath(p)) if p.is_symlink() else p
        try:
            mode = dest.stat().st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            # /dev/stdout, /dev/null, a FIFO: written into, never renamed over (as root that would
            # replace the device node); there is no previous content to keep
            _write_into(dest, data)
            return p
        dest.parent.mkdir(parents=True, exist_ok=True)
        with signals.deferred():
            tmp = write_temp(dest, data)
            try:
                os.replace(tmp, dest)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
    except OSError as exc:
        raise _named(exc, p)  # noqa: B904 (its cause is set: the original error)
    return p


def _write_into(path: Path, data: str | bytes | Callable[[Path], None]) -> None:
    """Write ``data`` into the existing non-regular file ``path`` (a device or FIFO) in place."""
    if callable(data):
        data(path)
        return
    with open(path, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
        f.flush()


class _HugeInt:
    """An integer literal too long for ``int()``: kept as text so the field holding it can be named."""

    def __init__(self, text: str) -> None:
        self.digits = len(text.lstrip("-"))


def _parse_int(text: str) -> int | _HugeInt:
    return _HugeInt(text) if len(text.lstrip("-")) > MAX_INT_DIGITS else int(text)


def _find_huge(data: Any) -> tuple[str, _HugeInt] | None:
    """The path (``cases[0].size.ratio``) and value of the first over-long integer in ``data``."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, _HugeInt):
            return where or "(top level)", v
        if isinstance(v, dict):
            stack.extend(reversed([(f"{where}.{k}" if where else str(k), x) for k, x in v.items()]))
        elif isinstance(v, list):
            stack.extend(reversed([(f"{where}[{i}]", x) for i, x in enumerate(v)]))
    return None


def read_bytes(path: str | Path, max_bytes: int, what: str, error: type[GcbenchError] = GcbenchError) -> bytes:
    """The content of the regular file ``path``, at most ``max_bytes``; anything else raises ``error`` (one line).

    The file is opened without blocking and checked to be a regular file on the open descriptor,
    so a FIFO or a device (also behind a symlink) is refused without waiting or reading forever.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise error(f"{p}: {what} not found") from None
    except IsADirectoryError:
        raise error(f"{p}: is a folder, not a {what}") from None
    except OSError as exc:
        raise error(f"{p}: cannot read the {what} ({exc.strerror or type(exc).__name__})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{p}: is a folder, not a {what}")
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{p}: not a regular file (a FIFO, device or socket), not a {what}")
        if st.st_size > max_bytes:
            raise error(f"{p}: {st.st_size:,} bytes, more than a {what} can be ({max_bytes:,})")
        try:
            raw = f.read(max_bytes + 1)
        except OSError as exc:
            raise error(f"{p}: cannot read the {what} ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > max_bytes:  # grew while being read
        raise error(f"{p}: more than {max_bytes:,} bytes, more than a {what} can be")
    return raw


def read_json_file(path: str | Path, what: str, error: type[GcbenchError] = GcbenchError,
                   max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Parse the JSON file ``path`` (a ``what``: "results file", "trace manifest"); every problem raises ``error``.

    Besides :func:`read_bytes`'s checks: not UTF-8, not JSON, nested too deeply, or an integer of
    more than :data:`MAX_INT_DIGITS` digits (named by its field) is one line naming the file.
    """
    p = Path(path)
    raw = read_bytes(p, max_bytes, what, error)
    try:
        data = json.loads(raw.decode("utf-8"), parse_int=_parse_int)
    except RecursionError:
        raise error(f"{p}: not valid JSON (nested too deeply); not a {what}") from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise error(f"{p}: not valid JSON ({exc}); not a {what}") from None
    huge = _find_huge(data)
    if huge is not None:
        where, v = huge
        raise error(f"{p}: {where}: an integer of {v.digits:,} digits (at most {MAX_INT_DIGITS:,}): not a {what}")
    return data
