"""What gcbench knows about a compressor without running it: its card.

A card (:class:`CompressorInfo`) holds every per-compressor fact: name, version, paper, flags,
typed parameters, the bench target, the memory-traffic bound and the multi-worker protocol, and
names the class that implements it (``impl="package.module:Class"``).  Cards are plain data and
this module imports neither torch nor any implementation, so ``gcbench list``, ``gcbench
validate`` and ``--help`` read them in milliseconds; the implementation is imported only when a
compressor is created (:meth:`CompressorInfo.load`).

Nothing outside a compressor's card may hold a fact about one compressor: bench targets, the
network model and the DDP hook read them from here.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gcbench.core.errors import GcbenchError, ParamError, UnknownNameError, did_you_mean
from gcbench.core.params import Param, Params, ParamValue


@dataclass(frozen=True)
class Target:
    """The speed ``gcbench bench`` holds a compressor to, on a 25.6M-element float32 tensor with 2 threads.

    Attributes:
        compress_x_copy: compress time at most this multiple of a copy of the same tensor (None: no bound).
        decompress_x_copy: the same for decompress.
        vs_torch_topk: compress at least this many times faster than exact ``torch.topk`` at each of
            ``topk_densities`` (the sparsifiers whose selection replaces a top-k); None: not compared.
        topk_densities: the densities of that comparison.
        gpu_x_copy: on a CUDA device, compress and decompress each at most this multiple of a device-to-device
            copy of the same 64M-element tensor (None: the default of its kind,
            :func:`gcbench.measure.gpu_targets.gpu_target`: casts and quantizers 3, sparsifiers 10).
    """

    compress_x_copy: float | None
    decompress_x_copy: float | None = 3.0
    vs_torch_topk: float | None = None
    topk_densities: tuple[float, ...] = ()
    gpu_x_copy: float | None = None

    def text(self) -> str:
        """``≤ 8× copy, 5× torch.topk @0.001``: the target as the bench table shows it."""
        parts = []
        if self.compress_x_copy is not None:
            parts.append(f"≤ {self.compress_x_copy:g}× copy")
        if self.vs_torch_topk is not None:
            at = "" if len(self.topk_densities) > 1 else " @" + ",".join(f"{d:g}" for d in self.topk_densities)
            parts.append(f"{self.vs_torch_topk:g}× torch.topk{at}")
        return ", ".join(parts)


#: the collectives a :class:`CostLeg` may name
COST_COLLECTIVES = ("allreduce", "allgather", "alltoall", "server", "broadcast")


@dataclass(frozen=True)
class CostLeg:
    """One leg of a protocol as the network model prices it: a collective over bytes given by a rule of the payload.

    Attributes:
        collective: ``"allreduce"``, ``"allgather"``, ``"alltoall"``, ``"server"`` (a parameter
            server's round: every worker sends its bytes to one server, hosted by a worker, which
            sends each worker a reply of the same size; LGC's rounds) or ``"broadcast"`` (one
            worker's bytes relayed hop by hop round the ring to every other worker, one message
            per hop, n − 1 hops in sequence; LGC's ring broadcast of the leader's indices).
        size: ``"payload"`` — one worker's payload bytes of the step (m); ``"payload/n"`` — m split
            among the n workers (1-bit SGD's re-quantized stripe, one per owner); ``"scalars"`` — one
            float32 per tensor (TernGrad's shared scaler).
        rounds: collectives the bytes are split over, each paying the latency (PowerSGD's P and Q: 2).
    """

    collective: str
    size: str = "payload"
    rounds: int = 1

    def __post_init__(self) -> None:
        if self.collective not in COST_COLLECTIVES:
            raise ValueError(f"cost leg: unknown collective {self.collective!r}")
        if self.size not in ("payload", "payload/n", "scalars"):
            raise ValueError(f"cost leg: unknown size rule {self.size!r}")
        if self.rounds < 1:
            raise ValueError(f"cost leg: rounds must be >= 1, got {self.rounds}")

    def decodes(self, n: int) -> int:
        """Payload-sized decodes a worker does after this leg: every gathered payload, one otherwise (none for scalars)."""
        if self.size == "scalars":
            return 0
        return n if (self.collective in ("allgather", "server") and self.size == "payload") else 1


@dataclass(frozen=True)
class Protocol:
    """How N workers exchange a compressor's payloads: the paper's protocol, as the transports and the network model see it.

    Attributes:
        name: the protocol's name in listings and results (``"allgather"``, ``"allreduce"``, ``"powersgd"`` …);
            its steps are the compressor's :meth:`~gcbench.core.compressor.Compressor.worker_protocol`.
        description: one line for listings and results.
        allreduce_rounds: all-reduce legs per step that carry the payload (0: the payloads are
            all-gathered). none/fp16/bf16 all-reduce their body (1); PowerSGD all-reduces P and Q (2).
        summable: payloads can be summed without decoding (a server can send back a compressed sum).
        scalar_allreduces: tiny all-reduces before the main leg (TernGrad's shared scaler).
        per_tensor: needs each tensor's shape, so it compresses layer by layer whatever the granularity.
        shared_seed: the workers draw some random values alike (PowerSGD's first warm-start Q), so
            real workers seed their states alike (:class:`gcbench.core.protocol.Context` ``shared``).
        applies_when: parameter settings the protocol needs (TernGrad's ``share_scaler=True``); with
            other settings the compressor uses the default all-gather.
        cost: its legs as the network model prices them (:class:`CostLeg`), in order.
        cost_by: where the legs depend on a parameter (LGC's ``mode``): that parameter and its
            values' legs, which :meth:`CompressorInfo.resolve_protocol` puts in ``cost``.
        packed_sum_bits: a protocol that all-reduces integer fields packed into int64 words (THC): the
            parameter holding the fields' bits b.  On N workers they are b + ⌈log2 N⌉ bits wide, so the
            payload grows with N; the network model resizes a measured payload (:meth:`payload_scale`).
    """

    name: str
    description: str
    allreduce_rounds: int = 0
    summable: bool = False
    scalar_allreduces: int = 0
    per_tensor: bool = False
    shared_seed: bool = False
    applies_when: Mapping[str, ParamValue] = field(default_factory=dict, compare=False)
    cost: tuple[CostLeg, ...] = (CostLeg("allgather"),)
    cost_by: tuple[str, Mapping[ParamValue, tuple[CostLeg, ...]]] | None = field(default=None, compare=False)
    packed_sum_bits: str | None = None

    @property
    def allreduce(self) -> bool:
        """Carried by all-reduces alone (no all-gather of payloads)."""
        return self.allreduce_rounds > 0

    def payload_scale(self, params: Mapping[str, Any], measured_workers: int, workers: int) -> float:
        """How much larger one worker's payload is on ``workers`` workers than as measured on ``measured_workers``.

        1.0, except for a protocol that sums integer fields packed into int64 words (:attr:`packed_sum_bits`,
        THC): its fields are b + ⌈log2 N⌉ bits wide, :func:`per_word` of them to a word, so the words it sends
        grow with N (b = 4: 15 fields a word alone, 7 on 16 workers).  The ratio of the word counts; the few bytes
        of header and range a tensor are scaled with them (an overestimate of at most those bytes)."""
        if not self.packed_sum_bits:
            return 1.0
        bits = int(params[self.packed_sum_bits])
        return per_word(sum_width(bits, max(1, measured_workers))) / per_word(sum_width(bits, max(1, workers)))


#: the bits of an int64 word a packed integer sum uses: the sign bit stays clear, so sums of non-negative fields never
#: overflow it
PACKED_WORD_BITS = 63


def sum_width(bits: int, world: int) -> int:
    """Bits per packed field that hold the sum of ``world`` non-negative levels of ``bits`` bits: b + ⌈log2 N⌉."""
    return bits + (math.ceil(math.log2(world)) if world > 1 else 0)


def per_word(width: int) -> int:
    """Fields of ``width`` bits per int64 word (the top bit left clear)."""
    return PACKED_WORD_BITS // width


#: scalar reads a worker's protocol may make between its legs in one simulated exchange, beyond its compress and decodes
#: (:meth:`CompressorInfo.exchange_scalar_reads`): one, a size that only a leg's result tells (a re-encoded stripe's
#: count, a server's reply); the default all-gather and all-reduce protocols make none.
PROTOCOL_SCALAR_READS = 1

#: the default protocol: every worker's payload to every worker, each decodes all and averages
ALLGATHER = Protocol("allgather", "all-gather the payloads, decode all, average")
#: dense casts: the bodies are summed by an all-reduce and divided by N
ALLREDUCE = Protocol("allreduce", "all-reduce the bodies (sum), divide by N", allreduce_rounds=1, summable=True,
                     cost=(CostLeg("allreduce"),))


@dataclass(frozen=True)
class Flags:
    """The flags of one *configured* compressor, derived from its resolved parameters.

    Made only by :meth:`CompressorInfo.resolve_flags`, the one rule that ``gcbench list``, results
    records (``run``, ``train``) and anything else that prints flags use, so that a listing and a
    record of the same configuration can never disagree.

    Attributes:
        biased: ``False`` only when E[C(x)] = x with these parameters.
        stateful: keeps state across steps with these parameters (its own state, or error
            feedback switched on).
        error_feedback: ``"no"``, ``"always"``, ``"own"`` (the paper's own accumulation), or for an
            optional mechanism ``"on"``/``"off"`` as the ``error_feedback`` parameter sets it.
        deterministic, reconstructed, exchange: as on :class:`CompressorInfo`.
    """

    biased: bool
    stateful: bool
    error_feedback: str
    deterministic: bool
    reconstructed: bool
    exchange: str

    def text(self) -> str:
        """Compact flags for tables: biased/unbiased, stateful, EF, reconstructed."""
        parts = ["biased" if self.biased else "unbiased"]
        if self.stateful:
            parts.append("stateful")
        if self.error_feedback != "no":
            parts.append(f"EF:{self.error_feedback}")
        if self.reconstructed:
            parts.append("RECONSTRUCTED")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class CompressorInfo:
    """A compressor's card: every fact gcbench knows about it without importing it.

    The declarations are per compressor; what holds for one *configuration* (TernGrad is unbiased
    only with clipping off, ``topk_dither`` keeps a residual because its optional error feedback
    defaults to on) comes from :meth:`resolve_flags`, which everything that shows or records flags
    uses.

    Attributes:
        name: registry name, also the payload codec id.
        impl: ``"package.module:Class"``, the :class:`~gcbench.core.compressor.Compressor` subclass
            (imported by :meth:`load` only when the compressor is created).
        version: bumped whenever the algorithm or encoding changes; results of different versions
            are "not comparable".
        description: one line.
        paper: citation of the implemented paper (or "—" for reference points).
        biased: ``False`` only for compressors with E[C(x)] = x at their default parameters.
        stateful: keeps state of its own across steps (residuals, momentum, warm starts), whatever
            its parameters; optional error feedback is added by :meth:`resolve_flags`.
        error_feedback: ``"no"``, ``"optional"`` (adds a parameter ``error_feedback``), ``"always"``
            (the shared EF mechanism is mandatory) or ``"own"`` (the paper's own accumulation).
        deterministic: compress gives the same output for the same input and state (no RNG).
        reconstructed: the definition is a documented reconstruction, not the paper's verified
            algorithm; shown everywhere the compressor is.
        params: the typed parameters; :meth:`resolve` turns user values into a frozen record.
        protocol: the multi-worker exchange (:class:`Protocol`).
        target: what ``gcbench bench`` holds it to (None: reported only).
        traffic_bytes: memory traffic of one compress at default parameters, in bytes read plus
            written per float32 input element (4 = read the input once); the bench's "× traffic
            bound" is compress time ÷ (traffic_bytes · numel ÷ copy bandwidth).
        min_workers: LGC is defined only across several workers.
        unbiased_when: parameter values under which a compressor declared ``biased`` is unbiased
            (TernGrad: ``{"clip": 0.0}``); empty when the declaration always holds.
        random_when: parameter values under which a compressor declared ``deterministic`` draws random
            numbers (the low-precision formats' ``{"rounding": "stochastic"}``); empty when the declaration always holds.
        identity: sends the float32 gradient unchanged: the uncompressed reference of comparisons.
        scalar_reads: device-to-host scalar reads (``.item()``, ``bool()`` or ``int()`` of a tensor,
            ``aten::_local_scalar_dense``) one call of the torch path (the device path) may make, for
            ``compress_and_decode`` and for ``decompress`` each: only where a size must be known to
            allocate, at most 2.  The device guard (``tests/compressors/test_device_guard.py``) holds
            every compressor to it, and to no tensor/NumPy conversion at all; a simulated exchange on N
            workers to :meth:`exchange_scalar_reads`.
        scalar_reads_where: where those reads are and why (required when ``scalar_reads`` > 0).
        host_transfers: what the torch path still copies from host to device, and why (empty: nothing); the device
            guard expects exactly these compressors to fail its no-conversion check, and ``gcbench list NAME`` says it.
    """

    name: str
    impl: str
    version: int
    description: str
    paper: str
    biased: bool
    stateful: bool
    traffic_bytes: float
    error_feedback: str = "no"
    deterministic: bool = True
    reconstructed: bool = False
    params: tuple[Param, ...] = ()
    protocol: Protocol = ALLGATHER
    target: Target | None = None
    min_workers: int = 1
    unbiased_when: Mapping[str, ParamValue | None] = field(default_factory=dict, compare=False)
    random_when: Mapping[str, ParamValue | None] = field(default_factory=dict, compare=False)
    identity: bool = False
    scalar_reads: int = 0
    scalar_reads_where: str = ""
    host_transfers: str = ""
    record: type[Params] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"compressor card {self.name!r}"
        if not self.name.isidentifier():
            raise ValueError(f"{where}: the name must be an identifier (it is also the codec id)")
        if ":" not in self.impl:
            raise ValueError(f"{where}: impl must look like 'package.module:Class', got {self.impl!r}")
        if self.error_feedback not in ("no", "optional", "always", "own"):
            raise ValueError(f"{where}: error_feedback must be no/optional/always/own, got {self.error_feedback!r}")
        if not 0 <= self.scalar_reads <= 2:
            raise ValueError(f"{where}: scalar_reads must be 0, 1 or 2 (a size that must be known to allocate), got {self.scalar_reads}")
        if self.scalar_reads and not self.scalar_reads_where.strip():
            raise ValueError(f"{where}: scalar_reads_where must say where the {self.scalar_reads} scalar read(s) are")
        params = tuple(self.params)
        if self.error_feedback == "optional" and not any(p.name == "error_feedback" for p in params):
            params = (*params, Param("error_feedback", bool, False, "apply error feedback (residual) across steps"))
        names = [p.name for p in params]
        if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
            raise ValueError(f"{where}: parameter names must be distinct identifiers, got {names}")
        set_ = object.__setattr__  # a frozen record completes itself once, here
        set_(self, "params", params)
        set_(self, "stateful", self.stateful or self.error_feedback in ("always", "own"))
        set_(self, "unbiased_when", MappingProxyType(dict(self.unbiased_when)))
        set_(self, "random_when", MappingProxyType(dict(self.random_when)))
        fields = [(p.name, p.kind if not p.optional else p.kind | None) for p in params]
        record = dataclasses.make_dataclass(_camel(self.name) + "Params", fields, bases=(Params,), frozen=True, eq=False,
                                            slots=True, namespace={"card": self.name, "__module__": __name__})
        set_(self, "record", record)
        for p in params:
            if p.default is not None or not p.optional:
                p.validate(p.default)  # a card whose default breaks its own rule fails at import, not at run time
        for key, value in self.unbiased_when.items():
            if not self.biased:
                raise ValueError(f"{where}: unbiased_when needs biased=True")
            if self.param(key).validate(value) != value:
                raise ValueError(f"{where}: unbiased_when {key}={value!r} is not a value of the parameter")
        for key, value in self.random_when.items():
            if not self.deterministic or self.param(key).validate(value) != value:
                raise ValueError(f"{where}: random_when {key}={value!r} needs deterministic=True and a value of the parameter")
        for key, value in self.protocol.applies_when.items():
            if self.param(key).validate(value) != value:
                raise ValueError(f"{where}: protocol applies_when {key}={value!r} is not a value of the parameter")

    @property
    def defaults(self) -> dict[str, ParamValue | None]:
        return {p.name: p.default for p in self.params}

    def exchange_scalar_reads(self, world: int) -> int:
        """The scalar reads a simulated exchange on ``world`` workers may make on the torch path (the device guard's budget).

        Each worker compresses once and its decodes are the group's (the simulation decodes each payload once):
        ``2 · scalar_reads`` per worker, plus :data:`PROTOCOL_SCALAR_READS` per worker for a protocol's own steps
        between its legs.  The simulated transport itself reads nothing.
        """
        return world * (2 * self.scalar_reads + PROTOCOL_SCALAR_READS)

    @property
    def exchange(self) -> str:
        """The protocol as results record it: ``"gather"`` for the default all-gather, else its description."""
        return "gather" if self.protocol is ALLGATHER else self.protocol.description

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise UnknownNameError(did_you_mean(name, [p.name for p in self.params], f"parameter of {self.name}"))

    def resolve(self, params: Mapping[str, Any] | None = None) -> Params:
        """The one validation of parameters: user values checked and typed, defaults filled, as a frozen record.

        Errors name the parameter (``topk.density: must be in (0, 1], got 5``); an unknown name gets
        "did you mean".  A record this card already made is returned as it is.
        """
        if isinstance(params, self.record):
            return params
        given = dict(params or {})
        for key in given:
            self.param(key)  # unknown name -> did you mean
        values: dict[str, ParamValue | None] = {}
        for p in self.params:
            if p.name in given:
                try:
                    values[p.name] = p.validate(given[p.name])
                except ParamError as exc:
                    raise ParamError(f"{self.name}.{p.name}: {exc}", p.name, str(exc)) from None
            else:
                values[p.name] = p.default
        return self.record(**values)

    def parse(self, text: Mapping[str, str]) -> Params:
        """:meth:`resolve` for command-line strings (``{"density": "0.01"}``), each parsed by its parameter's type."""
        values: dict[str, ParamValue | None] = {}
        for key, raw in text.items():
            p = self.param(key)
            try:
                values[p.name] = p.parse(raw)
            except ParamError as exc:
                raise ParamError(f"{self.name}.{p.name}: {exc}", p.name, str(exc)) from None
        return self.resolve(values)

    def resolve_flags(self, params: Mapping[str, Any] | None = None) -> Flags:
        """The flags of this compressor configured with ``params`` (validated; defaults filled).

        The one rule for flags: ``biased`` unless every ``unbiased_when`` setting holds; ``deterministic``
        unless every ``random_when`` setting holds;
        ``stateful`` when the compressor keeps its own state or error feedback is on.
        """
        p = self.resolve(params)
        ef = self.error_feedback
        if ef == "optional":
            ef = "on" if p.get("error_feedback") else "off"
        biased = self.biased and not (self.unbiased_when and all(p.get(k) == v for k, v in self.unbiased_when.items()))
        random = bool(self.random_when) and all(p.get(k) == v for k, v in self.random_when.items())
        return Flags(
            biased=biased,
            stateful=self.stateful or ef in ("on", "always", "own"),
            error_feedback=ef,
            deterministic=self.deterministic and not random,
            reconstructed=self.reconstructed,
            exchange=self.exchange,
        )

    def resolve_protocol(self, params: Mapping[str, Any] | None = None) -> Protocol:
        """The protocol this configuration uses: the card's, unless its ``applies_when`` settings do not hold."""
        p = self.resolve(params)
        if not all(p.get(k) == v for k, v in self.protocol.applies_when.items()):
            return ALLGATHER
        if self.protocol.cost_by is not None:
            key, legs = self.protocol.cost_by
            return dataclasses.replace(self.protocol, cost=legs[p[key]])
        return self.protocol

    def flags(self, params: Mapping[str, Any] | None = None) -> str:
        """Compact flags text of the configuration ``params`` (default parameters when None)."""
        return self.resolve_flags(params).text()

    def bias_note(self) -> str:
        """``"unbiased when clip=0"`` for a compressor whose bias depends on parameters, else ""."""
        if not self.unbiased_when:
            return ""
        return "unbiased when " + ", ".join(f"{k}={v!r}" for k, v in self.unbiased_when.items())

    def load(self) -> type:
        """The implementing class (imported now, once); a card and its class must name each other.

        Raises :class:`GcbenchError` (one line) when the module cannot be imported or the class does
        not carry this card, so a broken plugin names itself instead of failing with a traceback.
        """
        bound = self.__dict__.get("_bound")
        if bound is not None:
            return bound
        module_name, _, attr = self.impl.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise GcbenchError(f"compressor {self.name!r}: cannot load its implementation {self.impl!r}: {exc}") from None
        if getattr(cls, "info", None) is not self:
            raise GcbenchError(f"compressor {self.name!r}: {self.impl} does not carry this card (set `info = <the card>` on the class)")
        return cls

    def bind(self, cls: type) -> None:
        """Tie this card to a class that cannot be imported by its path (one defined in a notebook or a function)."""
        cls.info = self  # type: ignore[attr-defined]  # a compressor class, whose info this card becomes
        object.__setattr__(self, "_bound", cls)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "paper": self.paper,
            # the flags at default parameters, by the same rule as results records
            **self.resolve_flags().to_dict(),
            "error_feedback_kind": self.error_feedback,
            "unbiased_when": dict(self.unbiased_when),
            "random_when": dict(self.random_when),
            "min_workers": self.min_workers,
            "protocol": {"name": self.protocol.name, "description": self.protocol.description,
                         "allreduce_rounds": self.protocol.allreduce_rounds, "summable": self.protocol.summable,
                         "per_tensor": self.protocol.per_tensor, "applies_when": dict(self.protocol.applies_when),
                         "packed_sum_bits": self.protocol.packed_sum_bits},
            "target": None if self.target is None else dataclasses.asdict(self.target),
            "traffic_bytes": self.traffic_bytes,
            "impl": self.impl,
            "params": [p.to_dict() for p in self.params],
        }


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))
