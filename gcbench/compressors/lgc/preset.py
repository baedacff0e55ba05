"""LGC's presets as strategy objects: the interface :class:`~gcbench.compressors.lgc.contract.LGC` delegates to.

``preset="gcbench"`` (gcbench/compressors/lgc/gcbench_preset.py) compresses each tensor on its own;
``preset="reference"`` (gcbench/compressors/lgc/reference_preset.py) exchanges the whole model at
once.  Each says which parameters it allows, builds its autoencoder, and runs a step; both run the
shared rounds of gcbench/compressors/lgc/rounds.py.  The presets' parameter values are the card's
(gcbench/compressors/cards/lgc.py, ``PRESETS``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator, Sequence
from typing import Any, ClassVar

import torch

from gcbench.compressors.lgc.result import LGCExchangeResult
from gcbench.compressors.lgc.rounds import Rounds
from gcbench.core.compressor import ExchangeResult, State
from gcbench.core.protocol import Context, Leg


class Preset(Rounds, ABC):
    """One LGC preset: its parameter rules, its autoencoder, and how it runs one step (per tensor or whole model)."""

    #: the value of the ``preset`` parameter that selects it
    name: ClassVar[str]
    #: whether a step exchanges the whole model at once (:attr:`LGC.needs_whole_model`)
    whole_model: ClassVar[bool]

    @abstractmethod
    def check(self) -> None:
        """Refuse the parameters this preset does not allow (:class:`~gcbench.core.errors.ParamError`)."""

    @abstractmethod
    def init_params(self, seed: int, workers: int) -> dict[str, torch.Tensor]:
        """A fresh autoencoder's weights from ``seed``; ``workers`` sizes the per-worker decoders."""

    @abstractmethod
    def exchange(self, grads: Sequence[torch.Tensor], states: Sequence[State]) -> LGCExchangeResult:
        """One step for one tensor across N workers, on the simulated transport (:meth:`LGC.exchange`)."""

    @abstractmethod
    def exchange_group(self, grads: Sequence[Sequence[torch.Tensor]], states: Sequence[Sequence[State]]) -> list[ExchangeResult]:
        """One step for every unit across N workers, on the simulated transport (:meth:`LGC.exchange_group`)."""

    @abstractmethod
    def rounds(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> Generator[Leg, Any, list[torch.Tensor]]:
        """One worker's rounds of a step over ``xs``; the aggregates (:meth:`LGC.worker_protocol` notes the uploads)."""
