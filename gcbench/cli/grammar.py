"""The grammar shared by every command: compressor SPECs, names from a fixed set, comma LISTs.

A compressor is one SPEC, ``name`` or ``name:key=value,...``: commas separate a spec's
parameters, never compressors.  Commands that take compressors take them as positional specs
and as a repeatable ``-c SPEC``.  An option a command sweeps takes a comma LIST; elsewhere it
takes one value.  Names from a fixed set are matched case-insensitively, and an unknown one is a
usage error (exit 2) with a suggestion (see README's "One command-line grammar").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gcbench.cli.failures import UsageError
from gcbench.core.errors import GcbenchError, did_you_mean


def choose(value: str, choices: Sequence[str], what: str) -> str:
    """The member of ``choices`` that ``value`` names, ignoring case; an unknown name is a :class:`UsageError`.

    ``"DGC"`` is ``"dgc"``; ``"layers"`` gets "unknown granularity 'layers'; did you mean 'layer'?".
    An exact match wins over a match that ignores case (two plugins may differ only in case).
    """
    if value in choices:
        return value
    folded = [c for c in choices if c.lower() == value.strip().lower()]
    if len(folded) == 1:
        return folded[0]
    raise UsageError(did_you_mean(value, list(choices), what))


def compressor_spec(text: str) -> str:
    """One SPEC with its compressor name spelled as registered (``DGC:density=0.01`` → ``dgc:density=0.01``).

    The parameters are checked too (:func:`registry.parse_spec`), so a bad spec fails before any work.
    """
    from gcbench.compressors import registry

    if text.strip().startswith("plan:"):  # a compression plan: read and checked now, before any work
        return plan_spec(text)
    name, sep, rest = text.partition(":")
    listed = old_comma_list(text)
    known = {n.lower() for n in registry.names()}
    if listed is not None and all(item.partition(":")[0].strip().lower() in known for item in listed):
        raise UsageError(f"{text!r} names {len(listed)} compressors: commas separate one spec's parameters; "
                         f"give each compressor its own SPEC ({' '.join(f'-c {c}' for c in listed)})")
    spec = choose(name.strip(), registry.names(), "compressor") + sep + rest
    registry.parse_spec(spec)
    return spec


def compressor_specs(positional: Sequence[str] | None, options: Sequence[str] | None, *, least: int = 0,
                     command: str = "") -> list[str]:
    """The compressors of a command: its positional SPECs, then its ``-c SPEC`` ones, names as registered.

    Fewer than ``least`` is a :class:`UsageError` that says what to give (``compare dgc`` compares nothing).
    """
    specs = [compressor_spec(t) for t in [*(positional or []), *(options or [])]]
    if len(specs) < least:
        raise UsageError(f"{command} needs {'a compressor' if least == 1 else f'{least} or more compressors'}, "
                         f"got {len(specs)} (positional SPEC or -c SPEC)")
    return specs


def plan_spec(text: str) -> str:
    """``plan:FILE`` with its plan read and checked (:func:`gcbench.plan.reader.plan_from_spec`: a bad plan is one line,
    exit 1); the spec comes back as given, so the command reads the file where it builds its case."""
    from gcbench.plan.reader import plan_from_spec

    plan_from_spec(text.strip())
    return text.strip()


def with_plans(options: Sequence[str] | None, plans: Sequence[str] | None) -> list[str] | None:
    """A command's ``-c SPEC`` options followed by its ``--plan FILE`` ones as ``plan:FILE`` (None when neither is given)."""
    if not options and not plans:
        return None
    return [*(options or []), *(f"plan:{p}" for p in plans or [])]


def case_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """A SPEC as a suite case's (name, params): a compressor's by the registry, a ``plan:FILE`` as ``("plan", its table)``."""
    from gcbench.plan.reader import case_of_spec

    return case_of_spec(spec)


def single_worker_compressors() -> list[str]:
    """Every registered compressor that runs on one worker: what ``bench`` and ``advise`` consider by default."""
    from gcbench.compressors import registry

    return [n for n in registry.names() if registry.get(n).min_workers <= 1]


def old_comma_list(text: str) -> list[str] | None:
    """The compressors of a pre-0.2 comma list (``"none,topk:density=0.1,qsgd"``), or None when ``text`` is one SPEC.

    An item after the first that is not ``key=value`` names another compressor; ``key=value``
    items continue the spec before them, as the old form read them (:func:`registry.split_specs`).
    """
    from gcbench.compressors import registry

    specs = registry.split_specs(text)
    return specs if len(specs) > 1 else None


def suite_arg(text: str | None) -> str | None:
    """A bundled suite's name matched ignoring case (``QUICK`` → ``quick``); a path is left as it is.

    A bare name (no folder, no ``.toml``) that is neither a file nor a bundled suite is a
    :class:`UsageError` with a suggestion; a path that does not exist is left to the loader (exit 1).
    """
    from gcbench.measure.suite import SUITE_DIR

    if text is None or Path(text).exists() or "/" in text or text.endswith(".toml"):
        return text
    names = sorted(p.stem for p in SUITE_DIR.glob("*.toml"))
    return choose(text, names, "suite") if names else text


def model_arg(text: str | None) -> str | None:
    """A ``--model``: a zoo name matched ignoring case (``ResNet18`` → ``resnet18``); user code is left to the loader.

    A zoo name (no ``:``) or an ``hf:NAME`` that gcbench does not know is a :class:`UsageError`
    (exit 2) with a suggestion, as an unknown compressor is.  User models (``package.module:factory``,
    ``path/file.py:factory``) are not a fixed set: loading them says what is wrong with them.
    """
    from gcbench.core.errors import UnknownNameError
    from gcbench.sources.catalog import model_names

    if text is None:
        return None
    if text.startswith("hf:"):
        from gcbench.sources import hf_models

        try:
            hf_models.parse_name(text)
        except UnknownNameError as exc:
            raise UsageError(str(exc)) from None
        except GcbenchError:  # a bad option or a hub name: a value gcbench reads and refuses, the source's exit 1
            pass
        return text
    if ":" in text:
        return text
    return choose(text, model_names(), "model")


def suite_choices(field: str) -> tuple[str, ...]:
    """The names a suite file allows for ``field`` (device, granularity, distribution): the one list of them."""
    from typing import get_args

    from gcbench.measure.suite import MetricsSpec, SourceSpec, Suite

    model = next(m for m in (MetricsSpec, SourceSpec, Suite) if field in m.model_fields)
    return get_args(model.model_fields[field].annotation)


def number_list(text: str, option: str, kind: type[int] | type[float]) -> list[Any]:
    """A swept option's comma LIST (``"8,16,32"``) → numbers.

    An item that is not a number, or not positive and finite, is one line naming the option and
    the item (exit 1, as a single value out of range is).
    """
    noun, example = ("an integer", "8,64") if kind is int else ("a number", "1,10")
    values: list[Any] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        try:
            values.append(kind(item))
        except ValueError:
            raise GcbenchError(f"{option}: {item!r} is not {noun} (expected a comma list like {example}, got {text!r})") from None
        if not 0 < values[-1] < float("inf"):  # NaN fails this too
            raise GcbenchError(f"{option}: {item!r} is not a positive finite number (got {text!r})")
    if not values:
        raise GcbenchError(f"{option}: expected a comma list like {example}, got {text!r}")
    return values


def size_list_arg(text: str, parse: Callable[[str], int]) -> list[int]:
    """``bench --sizes`` (``"1K,25.6M"``) → element counts; a bad item is one line naming ``--sizes`` and the item."""
    sizes = []
    for item in (s for s in text.split(",") if s.strip()):
        try:
            sizes.append(parse(item))
        except GcbenchError as exc:
            raise GcbenchError(f"--sizes: {exc} (in {text!r})") from None
    return sizes
