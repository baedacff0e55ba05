"""User-facing error types.

gcbench separates *user* mistakes (a bad suite, an unknown name, a corrupt trace, a bad
parameter) from bugs.  User mistakes raise :class:`GcbenchError` (or a subclass); the CLI turns
them into one clear line and exit code 1.  Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class GcbenchError(Exception):
    """A user error: printed as one line by the CLI, exit status 1."""


class UnknownNameError(GcbenchError, KeyError):
    """An unknown compressor, model, suite or metric name (message carries "did you mean")."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class ParamError(GcbenchError, ValueError):
    """A compressor or suite parameter outside its documented range.

    ``param`` names the parameter and ``reason`` is the message without the compressor prefix,
    when the error comes from one parameter (so a suite can point at its own TOML key).
    """

    def __init__(self, message: str, param: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.reason = reason if reason is not None else message


class PayloadError(GcbenchError, ValueError):
    """Bytes that do not decode as a gcbench payload (truncated, wrong codec, bad header)."""


class SourceError(GcbenchError):
    """A gradient source that cannot deliver (missing/truncated trace file, NaN/Inf, bad model)."""


class ResultsError(GcbenchError):
    """A results file that cannot be read (corrupt, or written by a newer schema)."""


class TrainError(GcbenchError):
    """A training run that could not complete (a worker crashed, hung, or a task is unavailable)."""


def did_you_mean(name: str, choices: list[str] | tuple[str, ...], what: str) -> str:
    """Message for an unknown ``name`` of kind ``what`` with the closest ``choices``."""
    import difflib

    # case is ignored: "DGX" is close to "dgc", "Layers" to "layer"
    folded = {c.lower(): c for c in choices}
    close = [folded[c] for c in difflib.get_close_matches(name.lower(), list(folded), n=3, cutoff=0.5)]
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    known = ", ".join(sorted(choices))
    return f"unknown {what} {name!r}{hint} (known: {known})"
