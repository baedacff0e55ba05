"""The one way gcbench writes an output file.

Writing (:func:`atomic_write`): every file gcbench produces (results files, reports in Markdown,
HTML and CSV, exports, trace files and manifests, bench and calibration JSON) is written to a
temporary file in the destination's folder, synced, and renamed over the destination.  So the
previous file survives a full disk, a killed process or a crash whole, and a reader never sees
half a file.  SIGINT/SIGTERM are held for the write (:func:`gcbench.core.signals.deferred`).  A
failure is an ``OSError`` whose ``filename`` is the destination (a full disk's write error carries
no file name of its own), which the command line prints as one ``cannot write FILE: reason`` line.

Reading a file a user names is :mod:`gcbench.core.files`.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from gcbench.core import signals


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
