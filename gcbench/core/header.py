"""Reading a payload's header: typed, range-checked header fields and the body as host bytes.

Every codec's decoder reads its header through these (:meth:`gcbench.core.compressor.Compressor._expected_body_nbytes`
and ``_decode``): a field that is absent, of the wrong type, out of range or unknown is a
:class:`~gcbench.core.errors.PayloadError`, never a crash (decoding is a trust boundary).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gcbench.core.errors import PayloadError
from gcbench.core.payload import MetaValue, Payload


def body_numpy(payload: Payload) -> np.ndarray:
    """The payload body as a host uint8 array (no copy on CPU)."""
    return payload.data.detach().to("cpu").numpy()


def body_tensor(payload: Payload) -> torch.Tensor:
    """The payload body as a 1-D uint8 tensor on the device it is on (the device path's decoders read this, never
    :func:`body_numpy`)."""
    return payload.data.detach().reshape(-1)


def _meta_value(payload: Payload, key: str) -> MetaValue:
    try:
        return payload.meta[key]
    except KeyError:
        raise PayloadError(f"{payload.codec} payload lacks header field {key!r}") from None


def meta_int(payload: Payload, key: str, low: int | None = None, high: int | None = None) -> int:
    """Header field ``key``: present, an integer, and in ``[low, high]`` (each bound optional)."""
    v = _meta_value(payload, key)
    if isinstance(v, bool | np.integer):  # in-process payloads may carry them; the wire turns them into ints
        v = int(v)
    if not isinstance(v, int):
        raise PayloadError(f"{payload.codec} payload header field {key!r} must be an integer, got {v!r}")
    if (low is not None and v < low) or (high is not None and v > high):
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise PayloadError(f"{payload.codec} payload header field {key}={v} is outside [{lo}, {hi}]")
    return v


def meta_str(payload: Payload, key: str, choices: Sequence[str] | None = None) -> str:
    """Header field ``key``: present, a string, and one of ``choices`` when given."""
    v = _meta_value(payload, key)
    if not isinstance(v, str):
        raise PayloadError(f"{payload.codec} payload header field {key!r} must be a string, got {v!r}")
    if choices is not None and v not in choices:
        raise PayloadError(f"{payload.codec} payload header field {key}={v!r} is not one of {', '.join(map(repr, choices))}")
    return v


def meta_flag(payload: Payload, key: str) -> bool:
    """An optional 0/1 header flag: absent is false."""
    return key in payload.meta and bool(meta_int(payload, key, 0, 1))


def meta_keys(payload: Payload, *allowed: str) -> None:
    """Refuse header fields other than ``allowed`` (a codec's decoder knows every field its encoder writes)."""
    extra = [k for k in payload.meta if k not in allowed]
    if extra:
        raise PayloadError(f"{payload.codec} payload has unexpected header field(s) {', '.join(map(repr, extra))}")
