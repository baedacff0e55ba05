"""The scalar field types of the results record (:mod:`gcbench.results.record`) and their validators.

Own validators instead of pydantic's strict types: the messages name what a reader expects and
show what the file holds ("expected a number, got a string ("267x")"), and a number keeps its
JSON type (an int stays an int, so a record dumps back to the file it came from).  A field that is
present must have the type its readers use: a number is an int or a float, never a bool or a string
(:data:`Num`), so a file that loads cannot crash a reader.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Any

from pydantic import PlainValidator
from pydantic_core import PydanticCustomError


def show(value: Any) -> str:
    """A JSON value as an error message shows it: its kind, and the value itself when it is short."""
    if value is None:
        return "null"
    kind = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")
    if isinstance(value, dict | list):
        return kind
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return f"{kind} ({text[:37] + '...' if len(text) > 40 else text})"


def _expected(what: str, value: Any) -> PydanticCustomError:
    return PydanticCustomError("expected", "expected {what}, got {got}", {"what": what, "got": show(value)})


#: the largest int every reader may turn into a float: float() of a larger one raises OverflowError
FLOAT_INT_MAX = int(sys.float_info.max)
#: the largest integer field (a count, a size, a 64-bit seed): readers multiply them and still need a float
INT_MAX = 2**64


def _number(v: Any) -> int | float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _expected("a number", v)
    if isinstance(v, int) and abs(v) > FLOAT_INT_MAX:
        # JSON reads 1e999 as infinity but 1000...0 (400 digits) as an int no float can hold: the same number
        return math.inf if v > 0 else -math.inf
    return v


def _integer(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _expected("an integer", v)
    if abs(v) > INT_MAX:  # counts and sizes are multiplied, divided and formatted as floats by every reader
        raise _expected("an integer of at most 64 bits", v)
    return v


# counts the readers build lists of (steps, workers): bounded so a file cannot make them allocate without limit
COUNT_MAX = 10**6


def _count(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= COUNT_MAX:
        raise _expected(f"an integer in [0, {COUNT_MAX:g}]", v)
    return v


def _string(v: Any) -> str:
    if not isinstance(v, str):
        raise _expected("a string", v)
    return v


def _boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _expected("a boolean", v)
    return v


def _flag(v: Any) -> bool | str | int | float:
    if not isinstance(v, bool | str | int | float):
        raise _expected("a flag (boolean, string or number)", v)
    return v


#: an int or a float (never a bool, never a string): what every reader may do arithmetic with
Num = Annotated[float, PlainValidator(_number)]
Int = Annotated[int, PlainValidator(_integer)]
Count = Annotated[int, PlainValidator(_count)]
Str = Annotated[str, PlainValidator(_string)]
Bool = Annotated[bool, PlainValidator(_boolean)]
FlagValue = Annotated[bool | str | int | float, PlainValidator(_flag)]
#: numbers a reader converts with float() one by one: no nulls
Numbers = list[Num]
#: series that may hold nulls (a NaN of one step is stored as null)
Series = list[Num | None]
