"""Reading files the user names (suites, claims files, trace manifests, calibrations) safely.

A path on the command line or in a suite can name anything: ``/dev/zero`` or ``/dev/urandom``
would be read until memory runs out, a FIFO would block forever, a directory fails with an
``IsADirectoryError`` far from the option that named it, and a multi-gigabyte file is certainly
not a suite.  :func:`read_user_file` refuses all of these with one line before reading: only
regular files no larger than the caller's limit are read.  :func:`load_user_toml` and
:func:`load_user_json` add the decoding, turning every decoder failure (including the
``RecursionError`` of a deeply nested document) into the same one-line error.

All errors are :class:`~gcbench.core.errors.GcbenchError` (or the subclass the caller asks for)
and start with the path, e.g. ``/dev/zero: suite file must be a regular file, not a character device``.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gcbench.core.errors import GcbenchError

#: the limit for the small TOML/JSON files gcbench reads (suites, claims, manifests): the
#: bundled ones are a few KiB; a file 100× larger than any real one is a mistake, not a suite
SMALL_FILE_BYTES = 1 << 20
#: Python refuses to convert longer digit strings (``sys.set_int_max_str_digits``); 4300 is its default
MAX_INT_DIGITS = sys.get_int_max_str_digits() or 4300


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def _size_text(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


def read_user_file(path: str | os.PathLike[str], max_bytes: int, what: str,
                   error: type[GcbenchError] = GcbenchError) -> bytes:
    """The bytes of the regular file ``path``, refusing anything else with one ``error`` line.

    ``what`` names the file in messages (``"suite file"``).  Non-regular files (devices, FIFOs,
    sockets, directories) and files above ``max_bytes`` are refused before anything is read; the
    file is opened non-blocking so a FIFO cannot hang the open, and its type and size are checked
    on the opened descriptor (no race with a rename between check and read).  At most
    ``max_bytes + 1`` bytes are read, so a file that grows while being read is refused too.
    """
    p = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{p}: {what} not found") from None
    except IsADirectoryError:
        raise error(f"{p}: not a regular file: a {what} must be a regular file, not a directory") from None
    except OSError as exc:
        raise error(f"{p}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{p}: not a regular file: a {what} must be a regular file, not a {_kind(st.st_mode)}")
        if st.st_size > max_bytes:
            raise error(f"{p}: {what} is {_size_text(st.st_size)}; gcbench reads at most {_size_text(max_bytes)} for a {what}")
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise error(f"{p}: {what} grew past {_size_text(max_bytes)} while being read; gcbench reads at most that")
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"{p}: cannot read the {what} ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def read_user_text(path: str | os.PathLike[str], max_bytes: int, what: str,
                   error: type[GcbenchError] = GcbenchError) -> str:
    """:func:`read_user_file` decoded as UTF-8; bytes that are not UTF-8 are one ``error`` line."""
    raw = read_user_file(path, max_bytes, what, error)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{Path(path)}: {what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


#: the most parts of one dotted key (``a.b.c`` has 3); gcbench's files use 2 or 3.  tomllib's time grows with the
#: square of a key's parts: a 100 KB key ``a.a.a....a = 1`` took 44 s, a 1 MiB one would take about an hour
MAX_KEY_PARTS = 32
# where a TOML string or comment may start, and each kind of string from its opening quote (multi-line
# basic strings may hold escaped quotes and up to two quotes in a row); dots inside them are text, not key separators
_OPENER = re.compile(r"[\"'#]")
_BASIC = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_ML_BASIC = re.compile(r'"""(?:[^"\\]|\\.|"(?!""))*"""', re.DOTALL)
# a dotted chain of bare parts (a quoted part is "s" by then): a key, a table header, or a float's two halves; it starts
# only where a part starts and never gives back what it matched (else a run of 10**6 letters is tried 10**6 times)
_DOTTED = re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]++(?:[ \t]*+\.[ \t]*+[A-Za-z0-9_-]++)+")


def _without_strings(text: str) -> str:
    """``text`` with each string as one bare part ``s`` (its newlines kept, so lines keep their numbers), comments removed.

    One pass: every character is looked at once (a regex that found strings by backtracking took
    minutes on 128 KiB of quotes).  An unterminated string runs to the end of its line (a
    multi-line one to the end of the text): the file is invalid, and the parser says where.
    """
    out: list[str] = []
    pos, n, eol = 0, len(text), -1
    while pos < n:
        m = _OPENER.search(text, pos)
        if m is None:
            out.append(text[pos:])
            break
        i = m.start()
        out.append(text[pos:i])
        if eol < i:  # the end of this line, looked for once per line (a line of 10**6 quotes is one search)
            eol = text.find("\n", i)
            eol = n if eol < 0 else eol
        if text[i] == "#":
            pos = eol
            continue
        if text.startswith("'''", i):
            close = text.find("'''", i + 3)
            end = n if close < 0 else close + 3
        elif text.startswith('"""', i):
            ml = _ML_BASIC.match(text, i)
            end = n if ml is None else ml.end()
        elif text[i] == "'":
            close = text.find("'", i + 1, eol)
            end = eol if close < 0 else close + 1
        else:
            basic = _BASIC.match(text, i)
            end = eol if basic is None else basic.end()
        out.append("s" + "\n" * text.count("\n", i, end))
        pos = end
    return "".join(out)


def _long_key(text: str) -> tuple[int, int] | None:
    """(line, parts) of the first dotted key of more than :data:`MAX_KEY_PARTS` parts in TOML ``text``, or None.

    Linear in the text: strings and comments are blanked first, then every dotted chain is measured.
    """
    bare = _without_strings(text)
    for m in _DOTTED.finditer(bare):
        parts = m.group().count(".") + 1
        if parts > MAX_KEY_PARTS:
            return bare.count("\n", 0, m.start()) + 1, parts
    return None


def load_user_toml(path: str | os.PathLike[str], what: str, max_bytes: int = SMALL_FILE_BYTES,
                   error: type[GcbenchError] = GcbenchError) -> dict[str, Any]:
    """A user's TOML file as a dict; unreadable, oversized, non-UTF-8 or invalid TOML is one ``error`` line.

    A dotted key of more than :data:`MAX_KEY_PARTS` parts is refused before parsing, naming its line:
    the parser's time is quadratic in a key's parts (minutes for a file within the size limit).
    """
    text = read_user_text(path, max_bytes, what, error)
    long_key = _long_key(text)
    if long_key is not None:
        line, parts = long_key
        raise error(f"{Path(path)}: line {line}: a dotted key of {parts:,} parts; a {what} has at most {MAX_KEY_PARTS} "
                    "(a.b.c is 3)")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{Path(path)}: not valid TOML: {exc}") from None
    except ValueError as exc:  # an integer longer than Python's int-string limit
        raise error(f"{Path(path)}: not a usable TOML file: {exc}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise error(f"{Path(path)}: not valid TOML: arrays or tables nested too deeply") from None


class _HugeInt:
    """An integer literal too long for ``int()``: kept as its length so the field holding it can be named."""

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


def load_user_json(path: str | os.PathLike[str], what: str, max_bytes: int = SMALL_FILE_BYTES,
                   error: type[GcbenchError] = GcbenchError,
                   object_hook: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """A user's JSON file decoded; every problem is one ``error`` line naming the file.

    Besides :func:`read_user_file`'s checks: not UTF-8, not JSON, nested too deeply, or an integer
    of more than :data:`MAX_INT_DIGITS` digits (Python's int-string limit, named by its field).
    ``object_hook`` is :func:`json.loads`'s: called on each object once decoded, innermost first (a reader
    that needs less than the whole file cuts it there, before the rest is decoded:
    :func:`gcbench.results.converge_thin.thin_curves`).
    """
    p = Path(path)
    text = read_user_text(p, max_bytes, what, error)
    try:
        data = json.loads(text, parse_int=_parse_int, object_hook=object_hook)
    except RecursionError:
        raise error(f"{p}: not valid JSON (nested too deeply); not a {what}") from None
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise error(f"{p}: not valid JSON ({exc}); not a {what}") from None
    huge = _find_huge(data)
    if huge is not None:
        where, v = huge
        raise error(f"{p}: {where}: an integer of {v.digits:,} digits (at most {MAX_INT_DIGITS:,}): not a {what}")
    return data
