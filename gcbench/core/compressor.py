"""The compressor contract: a pure codec plus explicit state.

Contract (checked for every registered compressor by ``tests/compressors/test_contract.py``):

* ``compress(x, state) -> Payload`` never modifies ``x``; it may update ``state`` (residuals,
  momentum, warm-start factors, the random generator, the step counter).
* ``decompress(payload) -> Tensor`` needs nothing but the payload: a default-constructed
  instance of the same compressor decodes any payload of that codec, whatever parameters
  produced it (decode-time settings travel in the payload header).  The result has ``x``'s shape
  and dtype.  (:func:`gcbench.compressors.registry.decompress` decodes any payload by its codec name.)
* ``payload.nbytes == len(payload.to_bytes())`` and ``Payload.from_bytes`` restores a payload that
  decompresses identically.
* Decoding is a trust boundary (the DDP hook decodes its peers' bytes): ``decompress`` raises
  :class:`~gcbench.core.errors.PayloadError` alone on a malformed payload.  Each codec declares the
  exact body size (or a range) its header implies, :meth:`Compressor._expected_body_nbytes`,
  reading its header fields with the typed, range-checked :func:`~gcbench.core.header.meta_int` / :func:`~gcbench.core.header.meta_str` /
  :func:`~gcbench.core.header.meta_flag` and refusing fields it does not know (:func:`~gcbench.core.header.meta_keys`); the base checks
  the body against it before the codec allocates anything.  ``decompress(payload,
  expected_shape, dtype)`` refuses a header whose shape differs from what the receiver waits for,
  and a header whose dtype differs from the receiver's ``dtype`` (the output dtype is the
  receiver's choice: a sender cannot make it decode float64 where it waits for float32).  Without
  an expected shape the decoded bytes are bounded by the message's size
  (:func:`gcbench.core.payload.check_shape`): every allocation a decoder makes is justified by the
  header, the body length and the expected shape, before it is made; an allocation that fails
  anyway (``MemoryError``, ``OSError``, torch's ``RuntimeError``) is a ``PayloadError`` too.
* The same seed gives the same bytes.  Empty tensors give an empty body; all-zero tensors give
  all-zero output with no NaN.
* Communication never happens inside a compressor.  Its multi-worker protocol is written once,
  as SPMD code (:meth:`Compressor.worker_protocol`, a generator that yields collective legs,
  :mod:`gcbench.core.protocol`); :meth:`Compressor.exchange` runs it for N workers on the
  simulated transport, in one process, and accounts for every byte; the DDP hook runs the same
  generator on ``torch.distributed`` (:mod:`gcbench.distributed.transport`).

Encoding is one hook, :meth:`Compressor._encode`, with error feedback fused into it.  Error
feedback is one mechanism (:class:`~gcbench.core.state.ErrorFeedback`) for every compressor that declares
``error_feedback="always"`` or ``"optional"`` (Seide et al. 2014; Karimireddy et al. 2019): the
residual ``e`` lives in ``state.tensors["residual"]``, the compressor encodes ``a = x + e`` and
keeps ``e = a − decoded``.  Per non-empty tensor, :meth:`Compressor.compress_and_decode`:

1. takes ``x`` as float32 (``x32``, never written);
2. with error feedback, takes the state's residual buffer (:meth:`ErrorFeedback.buffer`: the
   previous residual itself whenever it can be updated in place, so no full-size tensor is
   allocated per step) and forms ``a = x + e`` in it, once, with :meth:`Compressor._form_corrected`;
   a compressor may override that to compute in the same pass what its encoder needs (the
   sparsifiers' counts of ``|a| >= t``, EF-signSGD's ‖a‖₁, 1-bit SGD's column sums);
3. calls ``_encode(a, state, ctx)``: ``a`` is that buffer under error feedback (the compressor may
   overwrite it and must leave ``a − decoded`` in it, :meth:`EncodeContext.keep_residual`), else
   ``x32`` itself, read only.  :class:`EncodeContext` says which (``ef``), whether the caller wants
   the decoded tensor (``need_decoded``) and what the formation pass computed (``fused``).
   ``_encode`` returns ``(body, meta, decoded or None)``;
4. builds the payload (a body or decoded tensor sharing memory with the residual buffer is an
   encoder bug and raises ``RuntimeError``), counts the step, and decodes the payload only if
   ``_encode`` returned no decoded tensor and the caller asks for one.

A compressor without error feedback writes ``_encode`` as a plain function of ``a`` (read only);
one with a fast path for error feedback still needs no other hook than ``_form_corrected``.
Compressors with their own residual mechanism (``error_feedback="own"``: momentum correction,
AdaComp's residue) keep those state tensors themselves and see ``ctx.ef`` False.
"""

from __future__ import annotations

import copy
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, overload

import numpy as np
import torch

from gcbench.core.errors import PayloadError
from gcbench.core.info import CompressorInfo, Flags, ParamValue
from gcbench.core.payload import MetaValue, Payload, check_shape
from gcbench.core.protocol import AllGather, AllReduce, Context, Outcome, WorkerProtocol, simulate
from gcbench.core.state import ErrorFeedback, State, shares_memory

#: A body size a header implies: exact, or an inclusive (smallest, largest) range for variable-length codings.
BodySize = int | tuple[int, int]

# Exceptions that a decoder must never let escape on hostile bytes.  Every codec checks its header
# and body first; this list is only the safety net of :meth:`Compressor.decompress` behind those
# checks (it turns a missed case into a PayloadError chained to the original, never a crash).
# ``OSError``: the kernels' buffer allocator maps memory (ENOMEM when it is short; it raises MemoryError, this is the net).
_STRAY_DECODE_ERRORS: tuple[type[BaseException], ...] = (
    ValueError, ArithmeticError, LookupError, RuntimeError, MemoryError, OSError, TypeError, struct.error,
)


@dataclass
class TrafficRecord:
    """Bytes one worker sent and received in one phase of an exchange."""

    phase: str
    worker: int
    sent: int
    received: int
    sent_body: int | None = None  # of ``sent``, the payload bodies (headers excluded); None when not recorded


@dataclass
class Traffic:
    """Every byte of a multi-worker exchange, per worker and phase."""

    records: list[TrafficRecord] = field(default_factory=list)

    def add(self, phase: str, worker: int, sent: int, received: int, sent_body: int | None = None) -> None:
        self.records.append(TrafficRecord(phase, worker, int(sent), int(received), None if sent_body is None else int(sent_body)))

    def sent(self, worker: int | None = None, phase: str | None = None) -> int:
        return sum(r.sent for r in self.records if (worker is None or r.worker == worker) and (phase is None or r.phase == phase))

    def sent_body(self, worker: int | None = None, phase: str | None = None) -> int | None:
        """Body bytes sent (headers excluded), or ``None`` if a matching record did not say (papers count bodies)."""
        rows = [r.sent_body for r in self.records if (worker is None or r.worker == worker) and (phase is None or r.phase == phase)]
        return None if any(b is None for b in rows) else sum(b for b in rows if b is not None)

    def received(self, worker: int | None = None, phase: str | None = None) -> int:
        return sum(r.received for r in self.records if (worker is None or r.worker == worker) and (phase is None or r.phase == phase))

    def phases(self) -> list[str]:
        return list(dict.fromkeys(r.phase for r in self.records))

    def to_dict(self) -> list[dict[str, Any]]:
        return [r.__dict__.copy() for r in self.records]


@dataclass
class ExchangeResult:
    """Outcome of :meth:`Compressor.exchange`: the aggregate every worker ends up with."""

    aggregate: torch.Tensor
    traffic: Traffic
    payloads: list[Payload]  # what each worker sent in the first (upload) phase
    #: each worker's decoded contribution, where the aggregate is their mean (TernGrad's ternary tensors
    #: at the shared scaler); None where it is not (1-bit SGD re-quantizes the mean, PowerSGD all-reduces
    #: its factors before any worker's share exists)
    contributions: list[torch.Tensor] | None = None


def _drawing_copy(state: State) -> State:
    """A copy of ``state`` to read and draw from: its own generator, the same tensors (a simulated worker's ``ctx.shared``)."""
    out = copy.copy(state)
    out.tensors = dict(state.tensors)
    out.values = dict(state.values)
    out.rng = copy.deepcopy(state.rng)
    return out


#: What :meth:`Compressor._encode` returns: body bytes (uint8 NumPy array or tensor), the header's
#: decode-time settings, and the decoded float32 tensor or None.
Encoded = tuple[np.ndarray | torch.Tensor, dict[str, MetaValue], torch.Tensor | None]


@dataclass(frozen=True)
class EncodeContext:
    """What :meth:`Compressor._encode` is told besides the tensor ``a`` and the state.

    Attributes:
        need_decoded: the caller wants the decoded tensor.  When False, an encoder whose decoded
            tensor costs a full-size pass may return None for it.
        ef: error feedback is on: ``a`` is the state's residual buffer holding ``x + e``, the
            encoder may overwrite it and must leave ``a − decoded`` in it (rounded as float32
            ``a - decoded``).  When False, ``a`` is read only (it may be the caller's tensor).
        fused: what :meth:`Compressor._form_corrected` computed in the pass that formed ``a``
            (None by default, and without error feedback).
    """

    need_decoded: bool = True
    ef: bool = False
    fused: Any = None

    def keep_residual(self, a: torch.Tensor, decoded: torch.Tensor) -> None:
        """Under error feedback, leave ``a − decoded`` in ``a`` (one in-place pass); else nothing.

        ``decoded`` must not share memory with ``a``; neither may the body, which must be built
        (or copied) before this call.
        """
        if self.ef:
            a.sub_(decoded.reshape(a.shape))


class Compressor(ABC):
    """Base class of every compressor; subclasses implement :meth:`_encode` and :meth:`_decode`.

    Each subclass carries its card, ``info = CARD`` (:class:`gcbench.core.info.CompressorInfo`, torch-free in ``compressors/cards/``).
    ``self.params`` is the validated, read-only parameter mapping.

    ``_encode(a, state, ctx)`` is the one encode hook (see the module docstring for the steps
    around it and :class:`EncodeContext` for ``ctx``); :meth:`_form_corrected` is the optional
    place to fuse work into the pass that forms ``a = x + e`` under error feedback.
    """

    info: ClassVar[CompressorInfo]

    #: The straightforward implementation of the same definition, ``reference(self, x32, state) ->
    #: decoded float32``, used by tests to check the fast path and by ``gcbench bench`` to show the
    #: speed-up.  ``None`` when the compressor's implementation is already the simple one.
    reference: ClassVar[Callable[[Compressor, torch.Tensor, State], torch.Tensor] | None] = None

    def __init__(self, **params: Any) -> None:
        self.params = self.info.resolve(params)

    # ------------------------------------------------------------------ public contract

    @property
    def name(self) -> str:
        return self.info.name

    def uses_error_feedback(self) -> bool:
        ef = self.info.error_feedback
        return ef == "always" or (ef == "optional" and bool(self.params.get("error_feedback")))

    @property
    def flags(self) -> Flags:
        """This configured instance's flags (biased, stateful, EF …), by the registry's one rule."""
        return self.info.resolve_flags(self.params)

    @property
    def stateful(self) -> bool:
        """Whether this configured instance keeps state across steps (optional EF switched on counts)."""
        return self.flags.stateful

    def init_state(self, seed: int = 0) -> State:
        """A fresh state; tensors are allocated lazily on the first ``compress``."""
        return State(seed)

    def compress(self, x: torch.Tensor, state: State) -> Payload:
        """Encode ``x`` (never modified), updating ``state``."""
        return self.compress_and_decode(x, state, need_decoded=False)[0]

    @overload
    def compress_and_decode(self, x: torch.Tensor, state: State, need_decoded: Literal[True] = ...) -> tuple[Payload, torch.Tensor]: ...

    @overload
    def compress_and_decode(self, x: torch.Tensor, state: State, need_decoded: bool) -> tuple[Payload, torch.Tensor | None]: ...

    def compress_and_decode(self, x: torch.Tensor, state: State, need_decoded: bool = True) -> tuple[Payload, torch.Tensor | None]:
        """Encode ``x`` and, if asked, return what the receiver will decode (in x's dtype).

        The one compress path of every compressor (see the module docstring): error feedback,
        if on, is formed here in the state's residual buffer and handed to :meth:`_encode`.
        """
        if not x.is_floating_point():
            raise TypeError(f"{self.name}: gradients must be floating point, got {x.dtype}")
        if x.numel() == 0:
            payload = self._payload(x, torch.empty(0, dtype=torch.uint8, device=x.device), {})
            state.step += 1
            return payload, (x.detach().clone() if need_decoded else None)
        x32 = x.detach().float() if x.dtype != torch.float32 else x.detach()
        if self.uses_error_feedback():
            a, has_e = ErrorFeedback.buffer(state, x32)
            ctx = EncodeContext(need_decoded, ef=True, fused=self._form_corrected(x32, a, has_e, state))
        else:
            a, ctx = x32, EncodeContext(need_decoded)
        body, meta, decoded = self._encode(a, state, ctx)
        payload = self._payload(x, body, meta)
        if ctx.ef and (shares_memory(payload.data, a) or (decoded is not None and shares_memory(decoded, a))):
            # the residual left in ``a`` would have rewritten them: a broken encoder, not bad input
            raise RuntimeError(f"{self.name}._encode returned a body or decoded tensor sharing memory with the residual buffer a")
        return self._finish(x, state, payload, decoded, need_decoded)

    def _form_corrected(self, x32: torch.Tensor, e: torch.Tensor, has_e: bool, state: State) -> Any:
        """Form ``a = x + e`` in the residual buffer ``e`` (``has_e`` False: it holds nothing yet, ``a = x``).

        Runs once per step, under error feedback only, before :meth:`_encode`; what it returns
        reaches ``_encode`` as ``ctx.fused``.  The default is :meth:`ErrorFeedback.form` and
        returns None.  Override it to compute what the encoder needs in the same pass (a count,
        a norm, column sums) with a kernel that forms ``a`` too; where that kernel does not apply
        (another device), call this default.  ``x32`` is read only.
        """
        ErrorFeedback.form(x32, e, has_e)
        return None

    def _finish(self, x: torch.Tensor, state: State, payload: Payload, decoded: torch.Tensor | None,
                need_decoded: bool) -> tuple[Payload, torch.Tensor | None]:
        """Common tail of every compress path: count the step, decode only if asked, restore x's shape, dtype and device.

        A payload decoded here (the encoder gave no decoded tensor) is decoded where its body lives,
        the CPU; the sender's decoded tensor belongs on the input's device (the device check found
        natural compression's on the CPU for a CUDA input).
        """
        state.step += 1
        if not need_decoded:
            return payload, None
        if decoded is None:
            decoded = self._decode_float(payload)
        return payload, decoded.reshape(x.shape).to(device=x.device, dtype=x.dtype)

    def compress_group(
        self, xs: Sequence[torch.Tensor], states: Sequence[State], need_decoded: bool = True
    ) -> list[tuple[Payload, torch.Tensor | None]]:
        """Compress all tensors one worker sends in one step (one payload per tensor).

        The default compresses each independently.  Compressors whose selection spans the
        whole model (gradient dropping with ``scope="global"``) override this; the runner always
        calls it, so they see every tensor of the step together.
        """
        return [self.compress_and_decode(x, s, need_decoded) for x, s in zip(xs, states, strict=True)]

    #: True when what it sends is already an optimizer update with momentum of its own (DGC, SDAGC): the
    #: stream then takes its aggregate as the update applied, instead of applying the suite's optimizer to it
    applies_momentum: bool = False

    def reference_update(self, x: torch.Tensor, ref_state: dict[str, Any]) -> torch.Tensor:
        """What a decoded output is compared with for fidelity: by default the gradient itself.

        Compressors that apply momentum locally (DGC, SDAGC) override this with the update of
        uncompressed momentum SGD, ``u_t = m·u_{t−1} + x_t``, keeping ``u`` in ``ref_state``.
        """
        return x

    def reference_name(self) -> str:
        """Name of :meth:`reference_update`'s quantity, recorded in results."""
        return "gradient"

    def step_phase(self, step: int) -> str | None:
        """The protocol phase of step ``step`` for compressors whose protocol changes by step (LGC), else ``None``.

        The runner measures every case of a source over the phases of the suite's first phased
        compressor, so the others are compared with it over the same steps.
        """
        return None

    def decompress(self, payload: Payload, expected_shape: tuple[int, ...] | torch.Size | None = None,
                   dtype: torch.dtype | None = None) -> torch.Tensor:
        """Decode a payload of this codec into a tensor of the original shape and dtype.

        ``expected_shape`` is the shape the receiver waits for (a DDP bucket's, a peer's tensor's);
        a payload declaring another raises before anything is allocated.  Without it the decoded
        bytes are at most :func:`gcbench.core.payload.decode_budget` of the message's size (and at
        most :data:`gcbench.core.payload.MAX_NUMEL` elements).  ``dtype`` is the dtype the receiver
        waits for: a header declaring another raises (the sender does not choose what the receiver
        allocates).  Any malformed payload raises :class:`PayloadError` and nothing else.
        """
        if dtype is not None and payload.dtype != dtype:
            raise PayloadError(f"{self.name} payload has dtype {payload.dtype}, the receiver expects {dtype}")
        out = self.decode_received(payload, expected_shape)
        try:
            return out.to(payload.dtype)
        except (RuntimeError, MemoryError) as exc:  # the cast's allocation failed: the message asked too much of this receiver
            raise PayloadError(f"{self.name} payload could not be decoded ({type(exc).__name__}: {exc})") from exc

    def decode_received(self, payload: Payload, expected_shape: tuple[int, ...] | torch.Size | None = None) -> torch.Tensor:
        """:meth:`decompress` (its checks: a trust boundary) with a float32 result of the payload's shape.

        What a protocol decodes its peers' payloads with, always with the shape it waits for:
        aggregates accumulate in float32.
        """
        check_shape(payload.shape, expected_shape, lambda: payload.nbytes, payload.dtype)
        if not payload.dtype.is_floating_point:
            raise PayloadError(f"{self.name} payload has dtype {payload.dtype}; gradients are floating point")
        try:
            return self._decode_float(payload).reshape(payload.shape)
        except PayloadError:
            raise
        except _STRAY_DECODE_ERRORS as exc:  # the safety net behind the codec's checks (see _STRAY_DECODE_ERRORS)
            raise PayloadError(f"{self.name} payload could not be decoded ({type(exc).__name__}: {exc})") from exc

    def decompress_group(self, payloads: Sequence[Payload],
                         expected_shapes: Sequence[tuple[int, ...] | torch.Size] | None = None) -> list[torch.Tensor]:
        """Decode all payloads one worker received for one step (one per unit), in order.

        What timings charge as a step's decompress.  ``expected_shapes``: the shape the receiver
        waits for per payload (as :meth:`decompress`'s ``expected_shape``).  The default decodes
        each with :meth:`decompress`; a compressor may decode the group at once (the cast
        compressors), with the same tensors and the same :class:`PayloadError` for a malformed payload.
        """
        if expected_shapes is None:
            return [self.decompress(p) for p in payloads]
        if len(expected_shapes) != len(payloads):
            raise ValueError(f"{len(payloads)} payloads but {len(expected_shapes)} expected shapes")
        return [self.decompress(p, s) for p, s in zip(payloads, expected_shapes, strict=True)]

    #: the dtype a summable codec's body is summed in (its card's protocol says ``summable``): the casts' wire dtype
    wire_dtype: torch.dtype | None = None

    def worker_protocol(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> WorkerProtocol:
        """One worker's side of the multi-worker exchange of its units ``xs`` (SPMD; see :mod:`gcbench.core.protocol`).

        The default: compress every unit (:meth:`compress_group`); a summable codec (its card's
        protocol ``summable``: the casts) all-reduces the bodies in :attr:`wire_dtype`, every other
        all-gathers the payloads and decodes all; the aggregate is the mean.  Both legs are counted
        in phase ``allgather`` (each worker's payload once, the others' received), as results
        always recorded them.  Compressors whose papers define another protocol override this.
        """
        if self.info.resolve_protocol(self.params).summable and self.wire_dtype is not None:
            return (yield from self.allreduce_protocol(xs, states, ctx))
        return (yield from self.gather_protocol(xs, states, ctx))

    def allreduce_protocol(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> WorkerProtocol:
        """Compress, all-reduce the bodies (sum, in :attr:`wire_dtype`), divide by N: the summable codecs' protocol."""
        assert self.wire_dtype is not None, "only a codec with a wire dtype sums its bodies"
        payloads = [p for p, _ in self.compress_group(xs, states, need_decoded=False)]
        means = yield AllReduce([p.data.view(self.wire_dtype) for p in payloads], "allgather", op="mean", count="once",
                                nbytes=[p.nbytes for p in payloads], body=True)
        return Outcome([m.reshape(x.shape) for m, x in zip(means, xs, strict=True)], payloads)

    def gather_protocol(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> WorkerProtocol:
        """Compress, all-gather the payloads, decode all (peers' bytes checked) and average: the default protocol."""
        payloads = [p for p, _ in self.compress_group(xs, states, need_decoded=False)]
        gathered = yield AllGather(payloads, "allgather", body=True)

        def mean() -> list[torch.Tensor]:
            acc = [torch.zeros(x.shape, dtype=torch.float32, device=x.device) for x in xs]
            for row in gathered:  # every worker's payload must have the receiver's shape (a peer sending another is refused)
                for a, p in zip(acc, row, strict=True):
                    a += self.decode_received(p, a.shape).to(a.device)
            return [a.div_(ctx.world) for a in acc]

        return Outcome(ctx.once("mean", mean), payloads)

    def exchange(self, grads: Sequence[torch.Tensor], states: Sequence[State]) -> ExchangeResult:
        """Simulate N workers running :meth:`worker_protocol` on one unit; every byte counted per phase and worker.

        Default protocol: each worker compresses, all payloads are all-gathered, decoded, averaged
        (traffic phase ``allgather``: each worker sends its payload once and receives the others').
        """
        if len(grads) != len(states) or not grads:
            raise ValueError("exchange needs one state per worker gradient, and at least one worker")
        return self.simulate_exchange([[g] for g in grads], [[s] for s in states])[0]

    def simulate_exchange(self, grads: Sequence[Sequence[torch.Tensor]], states: Sequence[Sequence[State]]) -> list[ExchangeResult]:
        """Run :meth:`worker_protocol` for N workers on the simulated transport; ``grads[w][u]``, ``states[w][u]``.

        Worker 0's aggregate is the result (every worker's is the same by the protocol); all the
        traffic is counted in the first unit's result; ``payloads`` are the workers' first messages
        (a worker that sent nothing for the unit is left out).  ``ctx.shared`` is worker 0's states for
        worker 0 and copies of them, taken before anything runs, for the others (real workers seed
        those alike).  The workers share one :meth:`Context.once` memo.
        """
        n = len(grads)
        memo: dict[Any, Any] = {}
        if self.info.resolve_protocol(self.params).shared_seed:
            shared = [list(states[0]) if w == 0 else [_drawing_copy(s) for s in states[0]] for w in range(n)]
        else:
            shared = [[] for _ in range(n)]
        run = simulate([self.worker_protocol(list(grads[w]), list(states[w]), Context(w, n, shared[w], memo)) for w in range(n)])
        units = len(grads[0])
        traffic = Traffic()
        for phase, counted in run.legs:
            for w, c in enumerate(counted):
                traffic.add(phase, w, c.sent, c.received, c.sent_body)
        first = run.outcomes[0]
        results = []
        for u in range(units):
            contributions = None if first.contributions is None else first.contributions[u]
            sent = [p for o in run.outcomes if (p := o.sent[u]) is not None]  # a worker with nothing to send is left out
            results.append(ExchangeResult(first.aggregates[u].reshape(grads[0][u].shape).to(grads[0][u].dtype),
                                          traffic if u == 0 else Traffic(), sent, contributions))
        return results

    def exchange_group(self, grads: Sequence[Sequence[torch.Tensor]], states: Sequence[Sequence[State]]) -> list[ExchangeResult]:
        """One step of the multi-worker exchange for every unit: ``grads[w][u]``, ``states[w][u]``.

        The default exchanges each unit on its own (:meth:`exchange`).  A protocol defined over the
        whole model (:attr:`needs_whole_model`: LGC's reference preset, one autoencoder over every
        tensor's top-k values) overrides this to run :meth:`worker_protocol` over all the units;
        the runner always calls it, so such a protocol sees every unit of the step together.
        Returns one result per unit; a message that spans units may be counted in one of them.
        """
        units = len(grads[0]) if grads else 0
        return [self.exchange([g[u] for g in grads], [s[u] for s in states]) for u in range(units)]

    @property
    def needs_whole_model(self) -> bool:
        """Whether :meth:`worker_protocol` must see every unit of a step at once (its protocol spans the model).

        Such a protocol is run over the whole model's tensors (in model order) by
        :meth:`exchange_group` and by the DDP hook, which holds each bucket until the step's last
        one arrives.  False by default: each group of units (a bucket) is exchanged on its own.
        """
        return False

    def has_own_exchange(self) -> bool:
        """Whether this compressor's exchange is its paper's protocol rather than the default all-gather/all-reduce."""
        cls = type(self)
        return cls.worker_protocol is not Compressor.worker_protocol or cls.exchange is not Compressor.exchange

    def protocol_runs_anywhere(self) -> bool:
        """Whether its exchange is written as a :meth:`worker_protocol` (so real transports run it), not as a simulation alone."""
        cls = type(self)
        return cls.exchange is Compressor.exchange or cls.worker_protocol is not Compressor.worker_protocol

    # ------------------------------------------------------------------ for subclasses

    @abstractmethod
    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        """Encode float32 ``a``; return (body, meta, decoded float32 or None).

        ``a`` is read only unless ``ctx.ef``; then it is the residual buffer holding ``x + e``, and
        the encoder leaves ``a − decoded`` in it (:meth:`EncodeContext.keep_residual`).  The body
        and the decoded tensor must be new memory (neither ``a`` nor the caller's tensor).
        """

    @abstractmethod
    def _decode(self, payload: Payload) -> torch.Tensor:
        """Decode a non-empty payload into a flat or shaped float32 tensor (payload only!).

        Called only after :meth:`_expected_body_nbytes` accepted the header and the body length.
        """

    def _expected_body_nbytes(self, payload: Payload) -> BodySize | None:
        """The body size this payload's header implies: exact, or (smallest, largest) for variable-length codings.

        Every registered codec overrides this (a registry-wide test checks it): it reads each header
        field it needs with :func:`meta_int` / :func:`meta_str` / :func:`meta_flag` (present, right
        type, in range), refuses unknown fields with :func:`meta_keys`, and returns the size from
        the shape and those fields alone, so the base can refuse a body of the wrong length before
        the decoder allocates anything.  It raises :class:`PayloadError` for a bad header.  ``None``
        (the default) declares no bound.
        """
        return None

    def _payload(self, x: torch.Tensor, body: np.ndarray | torch.Tensor, meta: dict[str, MetaValue]) -> Payload:
        if isinstance(body, np.ndarray):
            data = torch.from_numpy(np.ascontiguousarray(body, dtype=np.uint8).ravel())
        else:
            data = body.reshape(-1)
            if data.dtype != torch.uint8:
                data = data.to(torch.uint8)
        return Payload(self.name, self.info.version, x.dtype, tuple(x.shape), data, meta)

    def _decode_float(self, payload: Payload) -> torch.Tensor:
        if payload.codec != self.name:
            raise PayloadError(f"payload of codec {payload.codec!r} given to {self.name}")
        if payload.version != self.info.version:
            raise PayloadError(f"payload of {self.name} version {payload.version}; this build decodes version {self.info.version}")
        if payload.numel == 0:
            if payload.body_nbytes:
                raise PayloadError(f"{self.name} payload of an empty tensor has a {payload.body_nbytes}-byte body (expected none)")
            return torch.zeros(payload.shape, dtype=torch.float32, device=payload.data.device)
        size = self._expected_body_nbytes(payload)
        if size is not None:
            lo, hi = (size, size) if isinstance(size, int) else size
            n = payload.body_nbytes
            if not lo <= n <= hi:
                want = str(lo) if lo == hi else f"{lo} to {hi}"
                raise PayloadError(f"{self.name} body has {n} bytes, its header implies {want}")
        return self._decode(payload)

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.params.items() if v != self.info.defaults.get(k)}
        args = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        return f"{type(self).__name__}({args})"

    def describe(self) -> dict[str, ParamValue | None]:
        return dict(self.params)
