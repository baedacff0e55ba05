"""What one LGC exchange step returns: the aggregate and traffic, plus the phase, the leader and every message."""

from __future__ import annotations

from dataclasses import dataclass, field

from gcbench.core.compressor import ExchangeResult
from gcbench.core.protocol import Message


@dataclass
class LGCExchangeResult(ExchangeResult):
    """An :class:`ExchangeResult` that also says which LGC phase the step was in, and every message."""

    phase: str = "dense"
    leader: int = 0
    uses_autoencoder: bool = False
    messages: list[Message] = field(default_factory=list)
