"""Elias-ω streams on the device, and the one-read check every device decoder ends with.

The Elias-ω writers and the parallel reader behind :mod:`gcbench.core.codec_torch` (split out to
keep each module short); see that module for the contract.  :func:`settle` is how every device
codec turns its validity conditions (and, where a size must be known to allocate, that size)
into Python with a single scalar read.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gcbench.core.errors import PayloadError

Check = tuple[torch.Tensor, str]


def settle(checks: Sequence[Check], value: torch.Tensor | None = None, error: type[Exception] = PayloadError) -> int:
    """One scalar read: ``value`` (a non-negative 0-d integer tensor, or 0) when no check holds,
    else raise ``error`` with the message of the first check (in list order) that holds.

    Each check is (a boolean tensor that is true when the input is bad, its message); folding them
    and the size into one int64 is what keeps a decoder at one host round trip.
    """
    if not checks:
        return 0 if value is None else int(value)
    bad = torch.stack([c.reshape(()) for c, _ in checks])
    first = bad.to(torch.uint8).argmax()
    ok = torch.zeros((), dtype=torch.int64, device=bad.device) if value is None else value.to(torch.int64)
    code = int(torch.where(bad.any(), -1 - first, ok))
    if code < 0:
        raise error(checks[-1 - code][1])
    return code


def write_records_checked(records: torch.Tensor, pattern: Sequence[int], checks: Sequence[Check], error: type[Exception]) -> torch.Tensor:
    """Elias-ω record writer (the next commit): not available on the device yet."""
    raise NotImplementedError("the Elias-ω coding has no device writer yet")


def read_fields_lazy(data: torch.Tensor, count: int, pattern: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, list[Check]]:
    """Elias-ω reader (the next commit): not available on the device yet."""
    raise NotImplementedError("the Elias-ω coding has no device reader yet")
