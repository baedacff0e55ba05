"""The compressor registry: registration and loud lookups of the info records (:mod:`gcbench.core.info`).

Modelled on timm's ``OptimInfo`` and lm-evaluation-harness's registry: registering a name twice
is an error, an unknown name gets "did you mean …", and every entry carries a frozen
:class:`CompressorInfo` that drives ``gcbench list`` and the registry-wide contract tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gcbench.core.errors import ParamError, PayloadError, UnknownNameError, did_you_mean
from gcbench.core.info import CompressorInfo, Param, ParamValue

if TYPE_CHECKING:
    import torch

    from gcbench.core.payload import Payload

_REGISTRY: dict[str, CompressorInfo] = {}


def register(
    *,
    name: str,
    version: int,
    description: str,
    paper: str,
    biased: bool,
    stateful: bool,
    error_feedback: str = "no",
    deterministic: bool = True,
    reconstructed: bool = False,
    exchange: str = "gather",
    params: tuple[Param, ...] = (),
    min_workers: int = 1,
    unbiased_when: Mapping[str, ParamValue | None] | None = None,
):
    """Class decorator: register a :class:`~gcbench.core.compressor.Compressor` subclass.

    ``unbiased_when`` names the parameter values that make a ``biased`` compressor unbiased
    (see :meth:`CompressorInfo.resolve_flags`); each must be a valid value of a declared parameter.
    """
    if error_feedback not in ("no", "optional", "always", "own"):
        raise ValueError(f"error_feedback must be no/optional/always/own, got {error_feedback!r}")

    def deco(cls: type) -> type:
        if name in _REGISTRY:
            raise ValueError(f"compressor {name!r} is registered twice ({_REGISTRY[name].cls.__module__} and {cls.__module__})")
        all_params = params
        if error_feedback == "optional" and not any(p.name == "error_feedback" for p in params):
            all_params = (*params, Param("error_feedback", bool, False, "apply error feedback (residual) across steps"))
        info = CompressorInfo(
            name=name,
            version=version,
            description=description,
            paper=paper,
            biased=biased,
            stateful=stateful or error_feedback in ("always", "own"),
            error_feedback=error_feedback,
            deterministic=deterministic,
            reconstructed=reconstructed,
            exchange=exchange,
            params=all_params,
            cls=cls,
            min_workers=min_workers,
            unbiased_when=MappingProxyType(dict(unbiased_when or {})),
        )
        for key, value in info.unbiased_when.items():
            if not biased:
                raise ValueError(f"compressor {name!r}: unbiased_when needs biased=True")
            if info.param(key).validate(value) != value:
                raise ValueError(f"compressor {name!r}: unbiased_when {key}={value!r} is not a value of the parameter")
        cls.info = info
        _REGISTRY[name] = info
        return cls

    return deco


def _load_all() -> None:
    import gcbench.compressors  # noqa: F401  (importing registers every compressor module)


def names() -> list[str]:
    """Registered compressor names, sorted."""
    _load_all()
    return sorted(_REGISTRY)


def infos() -> list[CompressorInfo]:
    _load_all()
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]


def get(name: str) -> CompressorInfo:
    """The info record of ``name``; unknown names raise with "did you mean"."""
    _load_all()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownNameError(did_you_mean(name, list(_REGISTRY), "compressor")) from None


def create(name: str, **params: Any) -> Any:  # a gcbench.core.compressor.Compressor
    """Instantiate a registered compressor with validated parameters."""
    return get(name).cls(**params)


def parse_spec(spec: str) -> tuple[str, dict[str, ParamValue | None]]:
    """Parse ``name`` or ``name:key=value,key=value`` (the CLI form) into (name, params).

    A key given twice is an error (not "the last one wins"): ``topk:density=0.1,density=0.2``
    would otherwise silently measure 0.2.
    """
    name, _, rest = spec.partition(":")
    info = get(name.strip())
    params: dict[str, ParamValue | None] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise ParamError(f"{spec!r}: parameter {item!r} must look like key=value")
        p = info.param(key.strip())
        if p.name in params:
            raise ParamError(f"{spec!r}: parameter {p.name!r} is given twice; give each parameter once")
        try:
            params[p.name] = p.parse(value)
        except ParamError as exc:
            raise ParamError(f"{info.name}.{p.name}: {exc}") from None
    return info.name, params


def decompress(payload: Payload, expected_shape: tuple[int, ...] | torch.Size | None = None) -> torch.Tensor:
    """Decode any payload by its codec name alone (the "needs only the payload" guarantee).

    ``expected_shape`` as in :meth:`Compressor.decompress`; an unknown codec name is a
    :class:`PayloadError` like any other malformed header.
    """
    try:
        comp = create(payload.codec)
    except UnknownNameError:
        raise PayloadError(f"payload of unknown codec {payload.codec!r}") from None
    return comp.decompress(payload, expected_shape)
