"""A compressor's state per (worker, tensor), and error feedback, the one mechanism that keeps a residual in it.

:class:`State` holds the step counter, named state tensors, small values and the random generator a seed fixes;
:class:`ErrorFeedback` forms ``a = x + e`` and keeps ``e = a − decoded`` in ``state.tensors["residual"]``
(:mod:`gcbench.core.compressor` describes where the compress path calls it).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from gcbench import kernels


class State:
    """Per-(worker, tensor) state of a compressor.

    Attributes:
        seed: seed this state was created with (recorded in results).
        step: number of ``compress`` calls so far; schedules (DGC warm-up, SDAGC's λ(t)) read it.
        tensors: named state tensors (``residual`` for error feedback, ``momentum`` …).
        values: small Python values (e.g. a warm-start flag), kept JSON/pickle friendly.
        rng: NumPy ``Generator`` (PCG64) owned by the state, so a seed fixes every random draw.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)
        self.step = 0
        self.tensors: dict[str, torch.Tensor] = {}
        self.values: dict[str, Any] = {}
        self.rng = np.random.Generator(np.random.PCG64(self.seed))

    def reseed(self, seed: int) -> None:
        """Replace the random stream (used for independent repeated compressions)."""
        self.rng = np.random.Generator(np.random.PCG64(int(seed)))

    def clone(self) -> State:
        """A deep copy: tensors cloned, generator state copied."""
        return copy.deepcopy(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> State:
        """``copy.deepcopy`` of every attribute, the generator by :func:`copy_generator` (a quarter of the
        cost: the run's fidelity repeats and timing rounds clone every unit's state, 12,000 clones in a one-step gpt2 run)."""
        new = object.__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            if isinstance(value, np.random.Generator):
                copied = memo.get(id(value))
                if copied is None:
                    copied = memo[id(value)] = copy_generator(value)
                new.__dict__[key] = copied
            else:
                new.__dict__[key] = copy.deepcopy(value, memo)
        return new

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume, as plain containers and tensors (safe to save)."""
        return {
            "seed": self.seed,
            "step": self.step,
            "tensors": {k: v.detach().clone() for k, v in self.tensors.items()},
            "values": copy.deepcopy(self.values),
            "rng": copy.deepcopy(self.rng.bit_generator.state),
        }

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.seed = int(sd["seed"])
        self.step = int(sd["step"])
        self.tensors = {k: v.detach().clone() for k, v in sd["tensors"].items()}
        self.values = copy.deepcopy(sd["values"])
        self.rng = np.random.Generator(np.random.PCG64())
        self.rng.bit_generator.state = copy.deepcopy(sd["rng"])

    @classmethod
    def from_state_dict(cls, sd: dict[str, Any]) -> State:
        st = cls(sd["seed"])
        st.load_state_dict(sd)
        return st

    def uniform(self, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """``n`` float32 uniforms in [0, 1) from this state's generator, on ``device``."""
        u = torch.from_numpy(self.rng.random(n, dtype=np.float32))
        return u if torch.device(device).type == "cpu" else u.to(device)

    def randint64(self) -> int:
        """A fresh 63-bit seed drawn from this state's generator."""
        return int(self.rng.integers(0, 2**63 - 1))


#: seeds the throwaway PCG64 that :func:`copy_generator` overwrites (seeding from the OS's entropy cost twice as much)
_COPY_SEED = np.random.SeedSequence(0)


def copy_generator(rng: np.random.Generator) -> np.random.Generator:
    """An independent generator in ``rng``'s exact state (the same draws from here on, as ``copy.deepcopy`` gives)."""
    bit = type(rng.bit_generator)(_COPY_SEED)
    bit.state = rng.bit_generator.state
    return np.random.Generator(bit)


class ErrorFeedback:
    """The one error-feedback mechanism: ``a = x + e``, send ``C(a)``, keep ``e = a - C(a)``.

    The residual is float32 and lives in ``state.tensors["residual"]``; it has the input's shape.
    A missing residual, or one of another shape, counts as zero.  (Karimireddy et al. 2019;
    Seide et al. 2014 for 1-bit SGD.)  :meth:`buffer` and :meth:`form` are the compress path's
    (in place); :meth:`corrected` and :meth:`update` make new tensors, for the plain references
    and the multi-worker exchanges.
    """

    KEY = "residual"

    @classmethod
    def previous(cls, state: State, shape: torch.Size | tuple[int, ...]) -> torch.Tensor | None:
        """The state's residual if it applies to a tensor of ``shape``, else None (it counts as zero)."""
        e = state.tensors.get(cls.KEY)
        return e if e is not None and e.shape == shape else None

    @classmethod
    def buffer(cls, state: State, x32: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """The residual buffer to form ``a = x + e`` in, installed in the state; and whether it holds ``e``.

        The previous residual itself when it can be updated in place (float32, contiguous, on
        ``x32``'s device, sharing no memory with ``x32``); a copy of it otherwise; a fresh,
        uninitialised buffer (False) when there is none.  Fresh CPU buffers come from
        :func:`gcbench.kernels.empty` (cheap page faults).
        """
        e = cls.previous(state, x32.shape)
        if e is not None and e.dtype == torch.float32 and e.device == x32.device and e.is_contiguous() and not shares_memory(e, x32):
            return e, True
        if x32.device.type == "cpu":
            buf = kernels.empty(x32.numel()).reshape(x32.shape)
        else:
            buf = torch.empty(x32.shape, dtype=torch.float32, device=x32.device)
        if e is not None:
            buf.copy_(e)
        state.tensors[cls.KEY] = buf
        return buf, e is not None

    @staticmethod
    def form(x32: torch.Tensor, e: torch.Tensor, has_e: bool) -> None:
        """``a = x + e`` written into the buffer ``e`` (``has_e`` False: ``a = x``), one pass."""
        if has_e:
            e.add_(x32)
        else:
            e.copy_(x32)

    @classmethod
    def corrected(cls, x32: torch.Tensor, state: State) -> torch.Tensor:
        """``x + e`` as a new float32 tensor (x and the state are not modified)."""
        e = cls.previous(state, x32.shape)
        return x32.clone() if e is None else x32 + e

    @classmethod
    def update(cls, state: State, corrected: torch.Tensor, decoded32: torch.Tensor) -> None:
        """Store ``e = corrected - decoded`` (reusing ``corrected``'s memory unless ``decoded`` is a view of it)."""
        if shares_memory(decoded32, corrected):
            state.tensors[cls.KEY] = corrected - decoded32
        else:
            state.tensors[cls.KEY] = corrected.sub_(decoded32)


def shares_memory(t: torch.Tensor, u: torch.Tensor) -> bool:
    """Whether two tensors' storages share any byte (views at an offset included)."""
    if t.device != u.device:
        return False
    a, b = t.untyped_storage(), u.untyped_storage()
    return a.data_ptr() < b.data_ptr() + b.nbytes() and b.data_ptr() < a.data_ptr() + a.nbytes()
