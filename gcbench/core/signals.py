"""Stopping on SIGINT and SIGTERM without losing or corrupting a results file.

The command line treats SIGTERM (``kill``, a CI job's timeout, a batch scheduler) like Ctrl-C:
both raise :class:`KeyboardInterrupt` in the main thread, so the runner writes the results file
with status ``interrupted`` and the completed cases kept.  Two refinements make that robust:

* :func:`install` (called by the command line before its heavy imports): the first signal raises
  :class:`KeyboardInterrupt`; a repeated signal within :data:`REPEAT_GRACE_S` of the first is
  ignored, because the process is already stopping and a second interrupt would only break the
  final write (impatient double Ctrl-C).  Later signals interrupt again, so a stop that hangs can
  still be interrupted.  :func:`received` tells ``main()`` which signal to report in the exit code
  (128 + signal number: 130 for SIGINT, 143 for SIGTERM).
* :func:`deferred` holds SIGINT/SIGTERM for the few milliseconds of a results-file write (used by
  :func:`gcbench.results.store.atomic_write_json`), then delivers a held signal to the handler that was
  installed before.  A write is therefore never cut between its temporary file and the rename.

This module imports nothing heavy: it runs before torch is imported.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
# a repeated Ctrl-C within this time of the first is the same request to stop, not a new one
REPEAT_GRACE_S = 3.0

_first: dict[str, Any] = {"signum": None, "at": 0.0}


#: how long a signal that landed in a callback waits to be delivered again (:func:`_in_callback`)
REDELIVER_S = 0.005


def _in_callback(frame: FrameType | None) -> bool:
    """Whether ``frame`` is importlib's module-lock callback (a weakref callback run during imports): an exception raised
    there is printed as "Exception ignored in: ..." with its traceback and then lost, so the stop would be too."""
    return frame is not None and frame.f_code.co_name == "cb" and "importlib" in frame.f_code.co_filename


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
    """Raise KeyboardInterrupt for the first stop signal; swallow quick repeats (see the module docstring).

    A signal that lands in importlib's module-lock callback (Ctrl-C while start-up imports torch: a full test run saw
    it once) is delivered again :data:`REDELIVER_S` later instead, outside the callback.
    """
    if _in_callback(frame):
        timer = threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signum))
        timer.daemon = True
        timer.start()
        return
    now = time.monotonic()
    if _first["signum"] is not None and now - _first["at"] < REPEAT_GRACE_S:
        return
    if _first["signum"] is None:
        _first["signum"] = signum
    _first["at"] = now
    raise KeyboardInterrupt(signal.Signals(signum).name)  # the name lets the CLI exit 143 for SIGTERM


def install() -> None:
    """Make SIGINT and SIGTERM raise KeyboardInterrupt in the main thread (a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_IGN:
            continue  # nohup and friends asked for the signal to be ignored: keep it so
        signal.signal(sig, _on_stop_signal)


@contextmanager
def handled() -> Iterator[None]:
    """:func:`install`'s handling for the duration of a block only, for library calls such as ``train``.

    Inside, SIGINT and SIGTERM raise :class:`KeyboardInterrupt` (repeats swallowed as in
    :func:`install`), so a caller can stop its worker processes and keep its results; the handlers
    in place before are restored afterwards.  Only the main thread can install handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    install()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def received() -> int | None:
    """The number of the first stop signal handled by :func:`install`'s handler, or None."""
    return _first["signum"]


def exit_code(code: int) -> int:
    """``code`` unless a stop signal arrived: then the shell convention 128 + signal number.

    Called as the process is about to exit.  After a stop signal, further ones are ignored from
    here on: Python's finalization resets handlers it installed to the default action (but leaves
    ``SIG_IGN`` alone), so an impatient repeat landing while torch unloads would otherwise kill
    the process with the signal and lose the exit status (the results file is already complete).
    """
    sig = received()
    if sig is None:
        return code
    if threading.current_thread() is threading.main_thread():
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
    return 128 + int(sig)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM inside the block; deliver the first one held to the previous handler after it.

    Only the main thread can install handlers (and only it runs Python signal handlers), so in
    any other thread the block runs unprotected.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append(signum)

    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, hold)
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        # an exception already leaving the block (the first signal's KeyboardInterrupt, say) wins
        if held and sys.exc_info()[0] is None:
            _deliver(held[0], previous.get(signal.Signals(held[0])))


def _deliver(signum: int, handler: Any) -> None:
    """Run the handler that a held signal would have reached."""
    if callable(handler):
        handler(signum, None)
    elif handler is None or handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)  # the default action (SIGTERM: terminate), now that the write is done
