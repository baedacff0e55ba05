"""The compressor registry: every card, built-in or from another package, found by name without importing torch.

Modelled on timm's ``OptimInfo`` and lm-evaluation-harness's registry: a name registered twice is
an error, an unknown name gets "did you mean …".  The records are the cards of
:mod:`gcbench.core.info`; they come from two places, read once on first use:

* the built-in cards, one module per compressor family in :mod:`gcbench.compressors.cards`
  (each defines ``CARDS``);
* installed plugins: the entry-point group ``gcbench.compressors``, each entry naming a card or
  a sequence of cards (``mycomp = "mypkg.card:CARD"`` in the plugin's ``pyproject.toml``).

Reading them imports neither torch nor an implementation: :func:`create` imports the class a card
names, on first use.  A plugin that fails to load does not break gcbench: it is left out, and
:func:`load_errors` says why (``gcbench list`` and ``gcbench check`` print it).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

from gcbench.core.errors import ParamError, PayloadError, UnknownNameError, did_you_mean
from gcbench.core.info import CompressorInfo, ParamValue

if TYPE_CHECKING:
    import torch

    from gcbench.core.payload import Payload

#: the entry-point group through which other packages register compressors
ENTRY_POINT_GROUP = "gcbench.compressors"
BUILTIN = "gcbench.compressors.cards"

_CARDS: dict[str, CompressorInfo] = {}
_ORIGIN: dict[str, str] = {}  # name -> where the card came from ("gcbench" or "plugin <dist>: <entry point>")
_ERRORS: list[str] = []
_LOADED = False


def _add(card: object, origin: str) -> None:
    if not isinstance(card, CompressorInfo):
        raise TypeError(f"{origin}: expected a gcbench CompressorInfo card, got {type(card).__name__}")
    if card.name in _CARDS:
        raise ValueError(f"compressor {card.name!r} is registered twice ({_ORIGIN[card.name]} and {origin})")
    _CARDS[card.name] = card
    _ORIGIN[card.name] = origin


def _cards_of(obj: object) -> Iterable[object]:
    return obj if isinstance(obj, list | tuple) else (obj,)


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    package = importlib.import_module(BUILTIN)
    for mod in sorted(m.name for m in pkgutil.iter_modules(package.__path__)):
        for card in importlib.import_module(f"{BUILTIN}.{mod}").CARDS:
            _add(card, "gcbench")
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        origin = f"plugin {ep.dist.name if ep.dist else '?'}: {ep.name} = {ep.value}"
        try:
            for card in _cards_of(ep.load()):
                _add(card, origin)
        except Exception as exc:
            _ERRORS.append(f"{origin}: {type(exc).__name__}: {exc}")


def register(card: CompressorInfo, origin: str = "registered at run time") -> CompressorInfo:
    """Add a card by hand (a notebook, a test); installed packages use the entry-point group instead."""
    _load()
    _add(card, origin)
    return card


def unregister(name: str) -> None:
    """Remove a card added by :func:`register` (tests)."""
    _CARDS.pop(name, None)
    _ORIGIN.pop(name, None)


def load_errors() -> list[str]:
    """One line per plugin entry point that could not be loaded."""
    _load()
    return list(_ERRORS)


def origin(name: str) -> str:
    """Where the card of ``name`` came from: ``"gcbench"`` or the plugin's distribution and entry point."""
    get(name)
    return _ORIGIN[name]


def names() -> list[str]:
    """Registered compressor names, sorted."""
    _load()
    return sorted(_CARDS)


def infos() -> list[CompressorInfo]:
    _load()
    return [_CARDS[n] for n in sorted(_CARDS)]


def get(name: str) -> CompressorInfo:
    """The card of ``name``; unknown names raise with "did you mean"."""
    _load()
    try:
        return _CARDS[name]
    except KeyError:
        raise UnknownNameError(did_you_mean(name, list(_CARDS), "compressor")) from None


def identity() -> CompressorInfo:
    """The card of the compressor that sends the float32 gradient unchanged (the reference of comparisons)."""
    return next(c for c in infos() if c.identity)


def create(name: str, **params: Any) -> Any:  # a gcbench.core.compressor.Compressor
    """Instantiate a registered compressor with validated parameters (imports its implementation on first use)."""
    return get(name).load()(**params)


def parse_spec(spec: str) -> tuple[str, dict[str, ParamValue | None]]:
    """Parse ``name`` or ``name:key=value,key=value`` (the CLI form) into (name, params).

    A key given twice is an error (not "the last one wins"): ``topk:density=0.1,density=0.2``
    would otherwise silently measure 0.2.
    """
    name, _, rest = spec.partition(":")
    info = get(name.strip())
    raw: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            lists = [p.name for p in info.params if p.items is not None]
            hint = f" (a list's items are separated by '/', e.g. {lists[0]}=8/16/32)" if lists else ""
            raise ParamError(f"{spec!r}: parameter {item!r} must look like key=value{hint}")
        key = info.param(key.strip()).name
        if key in raw:
            raise ParamError(f"{spec!r}: parameter {key!r} is given twice; give each parameter once")
        raw[key] = value
    record = info.parse(raw)
    return info.name, {k: record[k] for k in raw}


def split_specs(text: str | Sequence[str]) -> list[str]:
    """A comma list of compressors (``"none,topk:density=0.1,error_feedback=true,qsgd"``) → one SPEC each.

    An item ``key=value`` (no ``:`` before its ``=``) continues the spec before it as one more
    parameter; any other item names the next compressor.  Each string of a sequence is split alike.
    """
    items = [s.strip() for part in ([text] if isinstance(text, str) else text) for s in part.split(",") if s.strip()]
    specs: list[str] = []
    for item in items:
        if specs and "=" in item and ":" not in item.partition("=")[0]:
            specs[-1] += ("," if ":" in specs[-1] else ":") + item
        else:
            specs.append(item)
    return specs


def format_spec(name: str, params: Mapping[str, Any] | None) -> str:
    """The command-line SPEC that :func:`parse_spec` reads back as ``(name, params)``: ``topk:density=0.01,error_feedback=true``
    (booleans lowercase, a list's items joined by ``/``), for sentences that tell a user what to type."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list | tuple):
            return "/".join(value(x) for x in v)
        return str(v)

    given = {k: v for k, v in (params or {}).items() if v is not None}
    return name if not given else name + ":" + ",".join(f"{k}={value(v)}" for k, v in given.items())


def short_spec(name: str, params: Mapping[str, Any] | None) -> str:
    """:func:`format_spec` without the parameters at their card's default, for commands a sentence tells a user to
    type: ``dgc:density=0.001`` rather than all eleven of dgc's resolved parameters.  It resolves to the same
    parameters; a name no card has keeps every parameter."""
    _load()
    card = _CARDS.get(name)
    if card is None:
        return format_spec(name, params)
    defaults = {p.name: p.default for p in card.params}
    return format_spec(name, {k: v for k, v in (params or {}).items() if k not in defaults or v != defaults[k]})


def decompress(payload: Payload, expected_shape: tuple[int, ...] | torch.Size | None = None,
               dtype: torch.dtype | None = None) -> torch.Tensor:
    """Decode any payload by its codec name alone (the "needs only the payload" guarantee).

    ``expected_shape`` and ``dtype`` as in :meth:`Compressor.decompress`; an unknown codec name is a
    :class:`PayloadError` like any other malformed header.
    """
    try:
        comp = create(payload.codec)
    except UnknownNameError:
        raise PayloadError(f"payload of unknown codec {payload.codec!r}") from None
    return comp.decompress(payload, expected_shape, dtype)

