"""A card's typed parameters: :class:`Param` (type, default, range, choices, list items) and :class:`Params`, the base of
the frozen record each card generates (:meth:`gcbench.core.info.CompressorInfo.resolve` builds it).

Plain data, torch-free, like the cards that declare them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gcbench.core.errors import ParamError

ParamValue = int | float | bool | str

#: the separator of a list-valued parameter's items: a spec's parameters are separated by commas
#: (``lgc:channels=8/16/32,window=512``), so list items cannot be
LIST_SEP = "/"

#: wire codings of sparse indices (:mod:`gcbench.core.codec` implements them)
INDEX_CODINGS: tuple[str, ...] = ("fixed", "int32", "delta-varint", "elias")
#: index codings plus the papers' own (``paper``: DGC's 48-bit run-length records, which SDAGC's card also uses)
SPARSE_CODINGS: tuple[str, ...] = (*INDEX_CODINGS, "paper")


@dataclass(frozen=True)
class Param:
    """One typed compressor parameter with its default and allowed range.

    ``low``/``high`` bound numbers (``low_open``/``high_open`` make a bound exclusive);
    ``choices`` restricts strings.  ``help`` is shown by ``gcbench list``.

    A list-valued parameter has ``kind=str`` and ``items`` (the items' type, e.g. ``int``): on the
    command line its items are separated by ``/`` (``lgc:channels=8/16/32``), in TOML it is a list
    (``channels = [8, 16, 32]``) or that string; ``low``/``high`` bound every item and
    ``max_items`` their number.  Its value is the canonical ``/``-joined string, so a label or a
    results file shows the spelling the command line takes back.
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
    items: type | None = None  # list-valued: the items' type (the value is their "/"-joined text)
    max_items: int | None = None
    power_of_two: bool = False  # an int that must be a power of two (THC's Hadamard block)

    def range_text(self) -> str:
        """Human-readable allowed values, as used in error messages."""
        if self.items is not None:
            count = f"1 to {self.max_items}" if self.max_items else "1 or more"
            item = dataclasses.replace(self, kind=self.items, items=None, max_items=None, optional=False)
            bounds = f" {item.range_text()}" if self.low is not None or self.high is not None else ""
            return f"{count} {self.items.__name__}s{bounds} separated by '{LIST_SEP}' (in TOML also a list)"
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind is bool:
            return "true or false"
        what = "a power of two" if self.power_of_two else f"a {self.kind.__name__}"
        if self.low is None and self.high is None:
            return what
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
        left = "(" if (self.low_open or self.low is None) else "["
        right = ")" if (self.high_open or self.high is None) else "]"
        return ("a power of two " if self.power_of_two else "") + f"in {left}{lo}, {hi}{right}"

    def validate(self, value: Any) -> ParamValue | None:
        """Return ``value`` coerced to this parameter's type, or raise :class:`ParamError`."""
        if value is None:
            if self.optional:
                return None
            raise ParamError(f"must be {self.range_text()}, got none")
        bad = ParamError(f"must be {self.range_text()}, got {value!r}")
        if self.items is not None:
            return self._validate_list(value, self.items, bad)
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
        if self.power_of_two and (value < 1 or int(value) & (int(value) - 1)):
            raise ParamError(f"must be {self.range_text()}, got {value:g}")
        return value

    def _validate_list(self, value: Any, items: type, bad: ParamError) -> str:
        """A list-valued parameter's canonical text from a list (TOML) or a ``/``- or comma-separated string."""
        if isinstance(value, str):
            # commas: the TOML string spelling of earlier versions ("64,128,256,64")
            parts: list[Any] = [t.strip() for t in value.replace(",", LIST_SEP).split(LIST_SEP)]
        elif isinstance(value, list | tuple):
            parts = list(value)
        else:
            raise bad
        if not parts or (self.max_items is not None and len(parts) > self.max_items):
            raise bad
        item = dataclasses.replace(self, kind=items, items=None, max_items=None, optional=False)
        try:
            values = [item.parse(v) if isinstance(v, str) else item.validate(v) for v in parts]
        except ParamError:
            raise bad from None
        return LIST_SEP.join(str(v) for v in values)

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
            "type": f"list[{self.items.__name__}]" if self.items is not None else self.kind.__name__,
            "default": self.default,
            "allowed": self.range_text(),
            "help": self.help,
        }


def density_param(default: float, help: str = "fraction of entries sent, k = ceil(density * d)") -> Param:
    """The sparsifiers' ``density`` parameter."""
    return Param("density", float, default, help, low=0.0, high=1.0, low_open=True)


def coding_param(default: str = "fixed", with_paper: bool = False) -> Param:
    """The sparsifiers' ``index_coding`` parameter (``with_paper``: the paper's own coding too)."""
    return Param("index_coding", str, default, "wire coding of the sparse indices", choices=SPARSE_CODINGS if with_paper else INDEX_CODINGS)


class Params(Mapping[str, "ParamValue | None"]):
    """Base of the frozen, typed parameter record generated for each card (:meth:`CompressorInfo.resolve`).

    Read by attribute (``comp.params.rank``) or, as a mapping, by name (``comp.params["rank"]``);
    equal to a plain dict with the same items.  A record exists only validated: the one place that
    builds one is :meth:`CompressorInfo.resolve`.
    """

    __slots__ = ()
    card: ClassVar[str] = ""

    def __getitem__(self, key: str) -> Any:
        # Any, not ParamValue: each card's generated record types its own fields (an int, a float, a choice), which a
        # static checker cannot see through the base; resolve() has checked every value against its Param
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:
        return hash(tuple(self.items()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.items())})"

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]  # each card's record is a dataclass
