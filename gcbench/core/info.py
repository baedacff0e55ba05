"""What gcbench knows about a compressor without running it: typed parameters, flags and the info record.

Torch-free: ``gcbench list`` and suite validation read these records without importing any
implementation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gcbench.core.errors import ParamError, UnknownNameError, did_you_mean

ParamValue = int | float | bool | str


@dataclass(frozen=True)
class Param:
    """One typed compressor parameter with its default and allowed range.

    ``low``/``high`` bound numbers (``low_open``/``high_open`` make a bound exclusive);
    ``choices`` restricts strings.  ``help`` is shown by ``gcbench list``.
    """

    name: str
    kind: type
    default: ParamValue | None
    help: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    optional: bool = False  # None allowed (e.g. "no clipping")

    def range_text(self) -> str:
        """Human-readable allowed values, as used in error messages."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind is bool:
            return "true or false"
        if self.low is None and self.high is None:
            return f"a {self.kind.__name__}"
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
        left = "(" if (self.low_open or self.low is None) else "["
        right = ")" if (self.high_open or self.high is None) else "]"
        return f"in {left}{lo}, {hi}{right}"

    def validate(self, value: Any) -> ParamValue | None:
        """Return ``value`` coerced to this parameter's type, or raise :class:`ParamError`."""
        if value is None:
            if self.optional:
                return None
            raise ParamError(f"must be {self.range_text()}, got none")
        bad = ParamError(f"must be {self.range_text()}, got {value!r}")
        if self.kind is bool:
            if not isinstance(value, bool):
                raise bad
            return value
        if self.kind is str:
            if not isinstance(value, str) or (self.choices is not None and value not in self.choices):
                raise bad
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad
        if self.kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise bad
            value = int(value)
        else:
            value = float(value)
            if not math.isfinite(value):
                raise bad
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            raise ParamError(f"must be {self.range_text()}, got {value:g}")
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            raise ParamError(f"must be {self.range_text()}, got {value:g}")
        return value

    def parse(self, text: str) -> ParamValue | None:
        """Parse a command-line string (``density=0.01``) into this parameter's type."""
        t = text.strip()
        if self.optional and t.lower() in ("none", "null", ""):
            return None
        if self.kind is bool:
            low = t.lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ParamError(f"must be {self.range_text()}, got {text!r}")
        if self.kind in (int, float):
            try:
                num = float(t)
            except ValueError as exc:
                raise ParamError(f"must be {self.range_text()}, got {text!r}") from exc
            return self.validate(int(num) if self.kind is int and num.is_integer() else num)
        return self.validate(t)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.kind.__name__,
            "default": self.default,
            "allowed": self.range_text(),
            "help": self.help,
        }


@dataclass(frozen=True)
class Flags:
    """The flags of one *configured* compressor, derived from its resolved parameters.

    Made only by :meth:`CompressorInfo.resolve_flags`, the one rule that ``gcbench list``, results
    records (``run``, ``train``) and anything else that prints flags use, so that a listing and a
    record of the same configuration can never disagree.

    Attributes:
        biased: ``False`` only when E[C(x)] = x with these parameters.
        stateful: keeps state across steps with these parameters (its own state, or error
            feedback switched on).
        error_feedback: ``"no"``, ``"always"``, ``"own"`` (the paper's own accumulation), or for an
            optional mechanism ``"on"``/``"off"`` as the ``error_feedback`` parameter sets it.
        deterministic, reconstructed, exchange: as on :class:`CompressorInfo`.
    """

    biased: bool
    stateful: bool
    error_feedback: str
    deterministic: bool
    reconstructed: bool
    exchange: str

    def text(self) -> str:
        """Compact flags for tables: biased/unbiased, stateful, EF, reconstructed."""
        parts = ["biased" if self.biased else "unbiased"]
        if self.stateful:
            parts.append("stateful")
        if self.error_feedback != "no":
            parts.append(f"EF:{self.error_feedback}")
        if self.reconstructed:
            parts.append("RECONSTRUCTED")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "biased": self.biased,
            "stateful": self.stateful,
            "error_feedback": self.error_feedback,
            "deterministic": self.deterministic,
            "reconstructed": self.reconstructed,
            "exchange": self.exchange,
        }


@dataclass(frozen=True)
class CompressorInfo:
    """Everything ``gcbench list`` and the results know about one registered compressor.

    The declarations below are per compressor; what holds for one *configuration* (TernGrad is
    unbiased only with clipping off, ``topk_dither`` keeps a residual because its optional error
    feedback defaults to on) comes from :meth:`resolve_flags`, which everything that shows or
    records flags must use.

    Attributes:
        name: registry name, also the payload codec id.
        version: bumped whenever the algorithm or encoding changes; results of different
            versions are "not comparable".
        description: one line.
        paper: citation of the implemented paper (or "—" for reference points).
        biased: ``False`` only for compressors with E[C(x)] = x at their default parameters.
        stateful: keeps state of its own across steps (residuals, momentum, warm starts),
            whatever its parameters; optional error feedback is added by :meth:`resolve_flags`.
        error_feedback: ``"no"``, ``"optional"`` (parameter ``error_feedback``), ``"always"``
            (the shared EF mechanism is mandatory) or ``"own"`` (the paper's own accumulation).
        deterministic: compress gives the same output for the same input and state (no RNG).
        reconstructed: the definition is a documented reconstruction, not the paper's verified
            algorithm; shown everywhere the compressor is.
        exchange: ``"gather"`` for the default all-gather-and-average, else a short description
            of the paper's own multi-worker protocol.
        params: the typed parameters.
        unbiased_when: parameter values under which a compressor declared ``biased`` is unbiased
            (TernGrad: ``{"clip": 0.0}``, no clipping); empty when the declaration always holds.
    """

    name: str
    version: int
    description: str
    paper: str
    biased: bool
    stateful: bool
    error_feedback: str
    deterministic: bool
    reconstructed: bool
    exchange: str
    params: tuple[Param, ...]
    cls: type = field(repr=False, compare=False)  # the Compressor subclass
    min_workers: int = 1  # LGC is defined only across several workers
    unbiased_when: Mapping[str, ParamValue | None] = field(default_factory=dict, compare=False)

    @property
    def defaults(self) -> dict[str, ParamValue | None]:
        return {p.name: p.default for p in self.params}

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise UnknownNameError(did_you_mean(name, [p.name for p in self.params], f"parameter of {self.name}"))

    def resolve(self, params: Mapping[str, Any] | None = None) -> Mapping[str, ParamValue | None]:
        """Validate user parameters and fill defaults; errors name the parameter."""
        params = dict(params or {})
        out: dict[str, ParamValue | None] = {}
        for key in params:
            self.param(key)  # unknown name -> did you mean
        for p in self.params:
            if p.name in params:
                try:
                    out[p.name] = p.validate(params[p.name])
                except ParamError as exc:
                    raise ParamError(f"{self.name}.{p.name}: {exc}") from None
            else:
                out[p.name] = p.default
        return MappingProxyType(out)

    def resolve_flags(self, params: Mapping[str, Any] | None = None) -> Flags:
        """The flags of this compressor configured with ``params`` (validated; defaults filled).

        The one rule for flags: ``biased`` unless every ``unbiased_when`` setting holds;
        ``stateful`` when the compressor keeps its own state or error feedback is on.
        """
        p = self.resolve(params)
        ef = self.error_feedback
        if ef == "optional":
            ef = "on" if p.get("error_feedback") else "off"
        biased = self.biased and not (self.unbiased_when and all(p.get(k) == v for k, v in self.unbiased_when.items()))
        return Flags(
            biased=biased,
            stateful=self.stateful or ef in ("on", "always", "own"),
            error_feedback=ef,
            deterministic=self.deterministic,
            reconstructed=self.reconstructed,
            exchange=self.exchange,
        )

    def flags(self, params: Mapping[str, Any] | None = None) -> str:
        """Compact flags text of the configuration ``params`` (default parameters when None)."""
        return self.resolve_flags(params).text()

    def bias_note(self) -> str:
        """``"unbiased when clip=0"`` for a compressor whose bias depends on parameters, else ""."""
        if not self.unbiased_when:
            return ""
        return "unbiased when " + ", ".join(f"{k}={v!r}" for k, v in self.unbiased_when.items())

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "paper": self.paper,
            # the flags at default parameters, by the same rule as results records
            **self.resolve_flags().to_dict(),
            "error_feedback_kind": self.error_feedback,
            "unbiased_when": dict(self.unbiased_when),
            "min_workers": self.min_workers,
            "params": [p.to_dict() for p in self.params],
        }
