"""Reading a results record: a parsed file's dict upgraded, validated into its typed record, problems in one line.

* **Versioned**: :data:`gcbench.results.record.SCHEMA_VERSION`; :func:`upgrade` brings an older
  file's dict up to it before validation (one step per version in
  :data:`gcbench.results.record.UPGRADES`); a newer file is refused with one line naming both
  versions (:func:`parse_record`).
* **One line per problem**: :func:`problem_text` turns pydantic's first error into
  ``field.path[i]: expected ..., got ...`` (from its ``loc``); no traceback reaches the user.
* **Typed by kind**: the record is a union discriminated by the file's ``kind`` (:func:`_tag`);
  :func:`as_record`, :func:`as_case` and :func:`as_cases` accept a record or case as it is, or a
  dict to validate.

The header, the schema version and the upgrade steps are :mod:`gcbench.results.record`'s (read at each call, so a
new version, or a test that sets one, is seen here); each kind's models are its own module's
(:mod:`~gcbench.results.run_record`, :mod:`~gcbench.results.train_record`, :mod:`~gcbench.results.bench_record`,
:mod:`~gcbench.results.converge_record`), dispatched here by the file's ``kind``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import Discriminator, Tag, TypeAdapter, ValidationError

from gcbench.core.errors import ResultsError
from gcbench.results import record as schema
from gcbench.results.bench_record import BenchCase, BenchRecord
from gcbench.results.converge_record import ConvergeCase, ConvergeRecord
from gcbench.results.fields import show
from gcbench.results.record import KINDS, Model, RunRecord
from gcbench.results.run_record import MeasureRecord, RunCase
from gcbench.results.train_record import TrainCase, TrainRecord

#: the case model of each kind of results file
CASE_MODELS: dict[str, type[Model]] = {"run": RunCase, "compare": RunCase, "train": TrainCase, "bench": BenchCase,
                                       "converge": ConvergeCase}
Case = RunCase | TrainCase | BenchCase | ConvergeCase


def _tag(value: Any) -> str | None:
    kind = value.get("kind", "run") if isinstance(value, dict) else getattr(value, "kind", None)
    kind = "run" if kind is None else kind
    return {"compare": "run"}.get(kind, kind) if isinstance(kind, str) else None


_RECORD: TypeAdapter[RunRecord] = TypeAdapter(Annotated[
    Annotated[MeasureRecord, Tag("run")] | Annotated[TrainRecord, Tag("train")] | Annotated[BenchRecord, Tag("bench")]
    | Annotated[ConvergeRecord, Tag("converge")],
    Discriminator(_tag, custom_error_type="kind", custom_error_message="kind"),
])


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A parsed file of an older schema brought up to :data:`gcbench.results.record.SCHEMA_VERSION`, one step per version."""
    v = data["schema_version"]
    while v < schema.SCHEMA_VERSION:
        data = schema.UPGRADES[v](data)
        v += 1
        data["schema_version"] = v
    return data


# ----------------------------------------------------------------------------- parsing


def location(loc: Sequence[str | int]) -> str:
    """Pydantic's ``loc`` as a field path: ``('cases', 0, 'size', 'ratio')`` → ``cases[0].size.ratio``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_TYPE_TEXT = {
    "model_type": "an object", "model_attributes_type": "an object", "dict_type": "an object", "list_type": "a list",
    "int_type": "an integer", "float_type": "a number", "string_type": "a string", "bool_type": "a boolean",
    "literal_error": "one of the kinds",
}


def problem_text(exc: ValidationError, tagged: bool = True) -> str:
    """The first problem of a validation error as one line: ``field.path: expected ..., got ...``.

    ``tagged``: the error comes from the record union, whose first ``loc`` item is the kind's tag.
    """
    e = exc.errors(include_url=False)[0]
    loc = list(e["loc"])
    if tagged and loc and e["type"] != "kind":
        loc = loc[1:]
    kind = e["type"]
    if kind == "kind":
        return f"kind: expected one of {', '.join(KINDS)}, got {show(e['input'].get('kind') if isinstance(e['input'], dict) else None)}"
    if kind == "missing":
        where = location(loc[:-1])
        return f"{where + ': ' if where else ''}missing field {loc[-1]!r}"
    where = location(loc) or "results"
    if kind in _TYPE_TEXT:
        return f"{where}: expected {_TYPE_TEXT[kind]}, got {show(e['input'])}"
    return f"{where}: {e['msg']}"


def parse_record(data: Any) -> RunRecord:
    """A parsed results file (a dict) as its typed record: upgraded from older schemas, then validated.

    Raises :class:`ResultsError` with one line (no file name; :func:`gcbench.results.store.load_run`
    adds it) naming the first field that does not fit.
    """
    if not isinstance(data, dict):
        raise ResultsError(f"expected a JSON object at the top, got {show(data)}")
    v = data.get("schema_version")
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ResultsError(f"schema_version: expected a positive integer, got {show(v)}")
    if v > schema.SCHEMA_VERSION:
        raise ResultsError(f"written with results schema {v}, newer than this gcbench reads ({schema.SCHEMA_VERSION}); upgrade gcbench")
    try:
        return _RECORD.validate_python(upgrade(unicode_text(data)))
    except ValidationError as exc:
        raise ResultsError(problem_text(exc)) from None


def unicode_text(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys too) replaced by ``?``.

    JSON may hold ``"\\ud800"``, which no UTF-8 output (a terminal, a Markdown, HTML or CSV file,
    matplotlib's fonts) can write: every renderer would fail on a label, layer name or error text
    holding one.  Replaced once here, where a record is read, no renderer has to care.  Strings
    that encode are returned as they are (no copy of a clean file's data).
    """
    if isinstance(value, str):
        if value.isascii():
            return value
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {unicode_text(k): unicode_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unicode_text(v) for v in value]
    return value


def as_record(data: RunRecord | Mapping[str, Any]) -> RunRecord:
    """A record as it is, or a results dict validated into one (library callers may hand either)."""
    return data if isinstance(data, RunRecord) else parse_record(dict(data))


def as_case(case: Case | Mapping[str, Any], kind: str = "run") -> Case:
    """A case as it is, or a case dict validated into the model of ``kind``."""
    if isinstance(case, RunCase | TrainCase | BenchCase):
        return case
    try:
        return CASE_MODELS[kind].model_validate(dict(case))  # type: ignore[return-value]  # each kind's model is a case class
    except ValidationError as exc:
        raise ResultsError(f"not a valid {kind} case: {problem_text(exc, tagged=False)}") from None


def as_cases(cases: Sequence[Case | Mapping[str, Any]], kind: str = "run") -> list[Any]:
    """:func:`as_case` of each."""
    return [as_case(c, kind) for c in cases]
