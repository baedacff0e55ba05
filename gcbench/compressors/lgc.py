"""LGC — Learned Gradient Compression (Abrahamyan, Chen, Bekoulis & Deligiannis, IEEE TNNLS 2021).

**RECONSTRUCTED.**  The paper's body and any official code are not public here.  The sources, and
what each one gives (every detail below is tagged with one of them):

* **[abstract]** the abstracts of the TNNLS paper (doi:10.1109/TNNLS.2021.3084806) and of its
  EUSIPCO 2021 precursor: gradients of different workers are correlated, and LGC exploits this
  inter-node redundancy with an autoencoder, trained during the first stages of training, that
  captures the information common to the workers' gradients so it is not sent repeatedly; the
  autoencoder is a lightweight network; there are two instances, one for the parameter-server
  protocol and one for ring-allreduce (the EUSIPCO paper has the parameter-server one only);
  ResNet-101 on CIFAR-10 reaches 93.57% top-1, 0.18 points below uncompressed training.
* **[re-impl]** a third-party re-implementation whose docstrings cite the TNNLS DOI (read, not
  copied): three stages of 200 and 300 rounds then the rest; per-layer top-k at 1e-3 and innovation
  at 1e-5; the first parameter tensor and the last two of a ResNet (two and two of a VGG) dense;
  ONE autoencoder over the whole model's concatenated top-k values; its layers (see
  :mod:`gcbench.compressors._lgc_ae`); one decoder per worker with the innovation concatenated as
  a channel at full length; loss 0.5·Σ_w MSE(decoded_w, values_w) + 0.5·Σ_{i≠j} MSE(z_i, z_j),
  every decoder fed the latent of one randomly chosen worker; plain SGD, lr 1e-3, one step per
  round, trained by the server in stage 2 and frozen after; the encoder sent to the leader
  (worker 0) once at the start of stage 3; the leader's message = latent + innovation + per-layer
  indices, the others' = innovation; error feedback with the residual zeroed where sent.
* **[gcbench]** gcbench's own choices, made where the sources are silent or to measure fairly.
* **[inferred]** how the ring-allreduce instance works (``mode="ring"``): the TNNLS abstract says it
  exists; nothing public describes it.  gcbench infers it from the leader idea: a rotating leader
  (``step mod N``; CLT-k, which only cites LGC, rotates its leader the same way) broadcasts its
  index set, every worker encodes its own values there, a ring all-reduce sums the latents, and
  one decoder maps the mean latent to the aggregate.

It is registered with ``reconstructed=True`` and ``min_workers=2``: LGC is defined only by its
multi-worker exchange.  Two presets (``preset``), each labelled in ``gcbench list`` and results:

``preset="reference"`` — follows [re-impl] as far as it goes, exchanging the whole model at once
(:meth:`LGC.exchange_group`):

* phases 200 dense / 300 training steps [re-impl] (suites shorten them with ``dense_steps`` and
  ``train_steps``); top-k ``density`` 1e-3 per tensor, innovation 1e-5 per tensor [re-impl];
* the first ``dense_first`` = 1 and last ``dense_last`` = 2 tensors dense fp32 in every phase
  [re-impl, its ResNet rule; applied to every model by gcbench]; they stay out of the autoencoder
  and are exact [gcbench: the re-impl also routes them through its autoencoder vector];
* phase 2: every other ("middle") tensor top-k with error feedback; the server trains the
  re-impl's autoencoder on each worker's own top-k values, concatenated in tensor order, with the
  re-impl's loss and SGD step [re-impl]; the innovation channel holds the worker's k_inn largest
  values at their positions in that vector [gcbench: the re-impl re-selects a top-k of the
  innovation tensor, whose positions do not line up with the values'];
* phase 3, ps: the leader sends the latent of its concatenated top-k values (fp32, about K/4
  floats, no scaling [re-impl]), its indices (each tensor's coded into that tensor's size, one
  message [gcbench: the re-impl sends int64 tensors]) and its innovation; the others their
  innovation; the server decodes worker w with w's decoder from the leader's latent and w's
  innovation at its positions in the leader's index set [re-impl; the alignment gcbench's], adds w's innovation outside
  that set exactly [gcbench], averages, and sends the aggregate back;
* phase 3, ring [inferred]: as below, with the re-impl's encoder and one decoder trained on the
  mean latent → mean values (at the leader's indices, gathered as in ``preset="gcbench"``);
* if the middle tensors' K totals less than 31 (the encoder's shortest input) they keep top-k+EF
  in phase 3 [gcbench].

``preset="gcbench"`` (default) — gcbench's design, each tensor on its own (:meth:`LGC.exchange`):

1. ``dense`` — the first ``dense_steps`` steps (default 20 [gcbench: compressed from the re-impl's
   200 so a short benchmark reaches phase 3]): uncompressed fp32.
2. ``topk`` — the next ``train_steps`` steps (default 60 [gcbench; re-impl 300]): every worker
   sends its own top-k (``density`` of each tensor, 1e-3 [re-impl]) with error feedback, while a
   small 1-D convolutional autoencoder (:mod:`gcbench.compressors._lgc_ae`) is trained online on
   the workers' values at the leader's top-k indices with its own seeded Adam optimizer [gcbench].
3. ``compressed`` — the autoencoder is frozen and used:

   * ``mode="ps"`` (parameter server, default [abstract]; the message layout [re-impl]): the leader
     (worker 0) sends the latent code of its top-k values, its top-k indices and its innovation; the server
     forwards the indices to the other workers, and each of them sends only its innovation.  The
     server decodes every worker's values at the leader's indices from the leader's latent plus
     that worker's innovation (an extra decoder input) and averages; it sends the aggregate back.
   * ``mode="ring"`` [inferred]: a rotating leader (``step mod N``) broadcasts its index set along
     the ring; every worker encodes its own values at those indices with the shared encoder; the
     latents are summed by a ring all-reduce and one decoder maps the mean latent to the aggregate.

Choices of ``preset="gcbench"`` (all [gcbench] unless tagged):

* **One autoencoder per tensor**, not one per model as in [re-impl], so every tensor is measured
  alike with the granularity the suite names.
* **Values and windows.**  The autoencoder sees the K = ceil(density·d) values at the leader's
  top-k indices, in index order (neighbouring weights stay neighbours for the convolutions).  K
  is split into n = ceil(K / ``window``) equal windows of ``per = ceil(K/n)`` values, each padded
  with zeros to a multiple of 16 (``L``; 16 = 2^4 for the four stride-2 layers, so every stride
  divides); padding is excluded from the loss.  Windows keep the network small and CPU-trainable
  for any K.  Each window is divided by the leader's RMS of that window (one fp32 *scale* per
  window, sent with the latent), so one network serves layers and steps of any magnitude; a
  zero scale decodes to zeros (an all-zero gradient gives an all-zero aggregate).
* **Latent.**  4 channels [re-impl] × L/16 per window, sent as fp32: ``n·(4·L/16 + 1)`` floats
  with the scales ("latent floats" below).
* **Innovation.**  A worker's innovation [re-impl] is its k_inn = ceil(``innovation_density``·d)
  largest |values| over the whole tensor (1e-5 [re-impl]), sent exactly (fp32 value + index into
  d).  Those inside the leader's index set enter the decoder as its extra input (folded into 16
  channels at the latent's resolution; the re-impl concatenates it at full length after
  upsampling) and are kept exactly in its output; those outside are added to that worker's
  reconstruction directly.  Ring mode has none.
* **Decoders.**  One shared decoder (``decoders="shared"``), the encoder's mirror, or one per
  worker (``decoders="per-worker"``, the re-impl's layout; ps only).
* **Loss** (phase 2, ``latent_weight`` λ = 0.5 [re-impl's weights]): (1 − λ)·reconstruction MSE +
  λ·latent pull, where the pull is mean‖z_w − z̄‖² / mean‖z̄‖² (relative, so the encoder cannot
  satisfy it by shrinking its codes; the re-impl's is the absolute Σ_{i≠j} MSE(z_i, z_j)).  PS:
  each worker's values reconstructed *from the leader's latent* and its own innovation, by its
  decoder — exactly what the server does in phase 3, so the decoder is trained as it is used
  (gcbench v1 decoded each worker from its own latent and the trained decoder then did worse than
  an untrained one).  Ring: the mean of the workers' values reconstructed from the mean latent,
  exactly what phase 3 does.  ``ae_iters`` = 8 Adam steps (lr ``ae_lr`` = 1e-3 [re-impl's lr])
  per training exchange, on that step's data (the re-impl: one SGD step).
* **Training data and where training runs, with their traffic counted.**  The trainer needs every
  worker's values at the leader's indices.  In phase 2 it already has each worker's own top-k; a
  non-leader additionally sends its values at the leader's indices that are not in its own top-k
  (fp32, no indices: both sides know both index sets; traffic phase ``topk:train``).  PS: the
  server trains [re-impl] (and sends the leader's indices to the other workers); at the first
  compressed step it sends the encoder weights to the leader once (``setup:weights`` [re-impl]).
  Ring: the leader's indices arrive with the all-gather, the extra values are all-gathered, and
  every worker trains an identical replica (same data, same seed), so no weights move.
* **Error feedback** (mandatory; ``state.tensors["residual"]``): phases 1–2 as usual (a dense
  step leaves no residual).  In phase 3 a worker cannot run the server's decoder, so the values
  at the leader's indices (and its innovation) count as sent: the residual is zeroed there and
  the autoencoder's reconstruction error is not fed back (both presets; the re-impl zeroes each
  worker's residual at its own last top-k mask).
* **Small tensors.**  A tensor whose K is below ``min_k`` (default 64: biases, tiny layers) keeps
  plain top-k with error feedback in phase 3 and trains no autoencoder — a ~350k-parameter network
  per 64-element bias would cost more than it saves.
* The autoencoder of a tensor (or, with ``preset="reference"``, of the model) lives in the state
  of worker 0 (``states[0].values["lgc"]``; the model's in its first unit's state: weights,
  optimizer state, a flag for the one-time weight transfer) as plain tensors and numbers, so
  ``state_dict()``/``load_state_dict()`` round-trips it and the next exchange is bit-identical.
  It runs on the CPU in fp32.  Phase and leader derive from ``state.step``.

Transports [gcbench].  ``preset="gcbench"`` is written once, as each worker's side
(:meth:`LGC.worker_protocol`, legs of :mod:`gcbench.core.protocol`): the parameter server's rounds
are :class:`~gcbench.core.protocol.ToServer` legs, hosted by rank 0 (the ps leader, whose unit
state holds the autoencoder), and ring mode's messages (the ring all-reduces of fp32 chunk
payloads, the ring broadcast of the leader's indices, the all-gathers) are
:class:`~gcbench.core.protocol.Send` legs.  :meth:`LGC.exchange` runs it on the simulated
transport, the DDP hook on ``torch.distributed``, with the same bytes counted per message.  So is
the reference preset's whole-model exchange: :meth:`LGC.worker_protocol` over every tensor of the
model (:attr:`LGC.needs_whole_model`), run by :meth:`LGC.exchange_group` on the simulated transport
and by the hook once per step over all its buckets.

Single-tensor API (the registry contract): ``compress(x, state)`` is the worker's standalone
payload for its phase — fp32 dense in phase 1, top-k with error feedback in phases 2 and 3 (a
phase-3 innovation cannot decode without the leader's latent; the reference preset's dense-tensor
rule needs the model's tensor list, so it applies in the exchange only).  Header ``kind`` tells
payloads apart: ``dense`` and ``topk`` decode from the payload alone; ``latent``, ``indices``,
``innovation``, ``values`` and ``weights`` are protocol messages that decode only inside the
exchange, and :meth:`LGC.decompress` says so.

Body bits per worker and step, ``preset="gcbench"`` (fixed index coding, b_d = ceil(log2 d)):
dense 32·d; topk K·(32 + b_d) (+ 32 per missing value in ``topk:train``); compressed PS leader
32·latent floats + K·b_d + k_inn·(32 + b_d), other workers k_inn·(32 + b_d) only; ring: the
leader's broadcast 32·n + K·b_d and 2(N−1)/N of 32·(latent floats − n) in all-reduce chunks.
``preset="reference"``: the dense tensors 32·d each in every phase (ring: 2(N−1)/N of it), plus
for the middle tensors — topk Σ K_u·(32 + b_u); compressed PS leader 32·4·L4 + Σ K_u·b_u + Σ
k_inn_u·(32 + b_u), others Σ k_inn_u·(32 + b_u).  Every message is a real
:class:`~gcbench.core.payload.Payload`; its ``nbytes`` (header included) is what the traffic counts and
its ``body_nbytes`` the body-only count.  :func:`phase_summary` turns a run of exchanges into
per-phase and amortised ratios.

Paper claim (for reference, [abstract]): ResNet-101 on CIFAR-10 reaches 93.57%, 0.18 points below
uncompressed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NoReturn

import numpy as np
import torch

from gcbench.compressors import _lgc_ae as ae
from gcbench.compressors._common import (
    dense_from_sparse,
    k_of,
    sparse_body,
    sparse_body_nbytes,
    sparse_decode,
    to_numpy,
)
from gcbench.compressors.cards.lgc import LGC_CARD, PRESETS
from gcbench.core import codec
from gcbench.core.compressor import (
    Compressor,
    EncodeContext,
    Encoded,
    ErrorFeedback,
    ExchangeResult,
    State,
    Traffic,
    body_numpy,
    meta_int,
    meta_keys,
    meta_str,
)
from gcbench.core.errors import GcbenchError, ParamError, PayloadError
from gcbench.core.payload import MetaValue, Payload, dense_bytes
from gcbench.core.protocol import (
    SERVER,
    Context,
    Leg,
    Message,
    Outcome,
    Send,
    ToServer,
    WorkerProtocol,
    count_messages,
    counted_in,
    simulate,
)

PHASES: tuple[str, ...] = ("dense", "topk", "compressed")
_STANDALONE = ("dense", "topk")
_PROTOCOL = ("latent", "indices", "innovation", "values", "weights")
_STATE_KEY = "lgc"


def topk_indices_sorted(a: torch.Tensor, k: int) -> torch.Tensor:
    """Ascending indices of the k largest |a| (exact; ties as ``torch.topk``)."""
    return torch.sort(torch.topk(a.abs(), k, sorted=False).indices).values


@dataclass(frozen=True)
class Windows:
    """How K values are cut into equal, zero-padded windows of a length the encoder divides."""

    k: int
    n: int
    per: int
    length: int

    @classmethod
    def of(cls, k: int, window: int, fold: int) -> Windows:
        n = max(1, math.ceil(k / window))
        per = math.ceil(k / n)
        return cls(k, n, per, math.ceil(per / fold) * fold)

    def split(self, v: torch.Tensor) -> torch.Tensor:
        """(B, K) → (B, n, L), zero-padded."""
        b = v.shape[0]
        out = torch.zeros((b, self.n * self.per), dtype=v.dtype)
        out[:, : self.k] = v
        out = out.reshape(b, self.n, self.per)
        return torch.nn.functional.pad(out, (0, self.length - self.per))

    def join(self, w: torch.Tensor) -> torch.Tensor:
        """(B, n, L) → (B, K)."""
        return w[..., : self.per].reshape(w.shape[0], self.n * self.per)[:, : self.k]

    def valid(self) -> torch.Tensor:
        """(n, L) bool: positions holding one of the K values."""
        return self.split(torch.ones((1, self.k), dtype=torch.bool))[0]

    def latent_floats(self, latent_channels: int, fold: int) -> int:
        """Floats of the latent message: the codes plus one scale per window."""
        return self.n * (latent_channels * self.length // fold + 1)

    def scales(self, v: torch.Tensor) -> torch.Tensor:
        """Per-window RMS of one worker's K values (float32, shape (n,))."""
        w = self.split(v.reshape(1, -1).double())[0]
        count = self.valid().sum(1).double()
        return (w.pow(2).sum(1) / count).sqrt().float()


#: a whole-model phase-3 round: per middle unit the aggregate and the messages, per worker and unit the part counted as sent
_Phase3 = tuple[list[torch.Tensor], list[list[Message]], list[list[torch.Tensor]]]


@dataclass
class LGCExchangeResult(ExchangeResult):
    """An :class:`ExchangeResult` that also says which LGC phase the step was in, and every message."""

    phase: str = "dense"
    leader: int = 0
    uses_autoencoder: bool = False
    messages: list[Message] = field(default_factory=list)


def _parse_channels(text: str) -> tuple[int, ...]:
    """The widths of ``channels``: ``/``-separated as the card writes them (commas, as earlier results files hold them, too)."""
    try:
        widths = tuple(int(t) for t in text.replace(",", "/").split("/"))
    except ValueError:
        raise ParamError(f"lgc.channels: must be positive integers like 64/128/256/64, got {text!r}") from None
    if not 1 <= len(widths) <= 8 or any(w < 1 for w in widths):
        raise ParamError(f"lgc.channels: 1 to 8 positive layer widths (each halves the length), got {text!r}")
    return widths


def _refuse_kind(kind: str) -> NoReturn:
    """A payload kind that ``decompress`` cannot decode: the exchange's protocol messages, or garbage."""
    if kind in _PROTOCOL:
        raise PayloadError(f"lgc {kind!r} payloads are messages of the multi-worker exchange and decode only there "
                           "(they need the leader's index set and the server's decoder)")
    raise PayloadError(f"lgc payload of unknown kind {kind!r}")


def _f32_bytes(t: torch.Tensor) -> np.ndarray:
    return to_numpy(t.reshape(-1).float()).astype("<f4", copy=False).view(np.uint8)


def _f32_read(body: np.ndarray, start: int, count: int, what: str) -> torch.Tensor:
    end = start + 4 * count
    if count < 0 or len(body) < end:
        raise PayloadError(f"lgc {what}: body is truncated (need {end} bytes, have {len(body)})")
    return torch.from_numpy(body[start:end].view("<f4").astype(np.float32))


#: each preset's values of the parameters left at ``None`` (see the module docstring for their sources)
class LGC(Compressor):
    info = LGC_CARD
    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        preset = PRESETS[str(self.params["preset"])]
        # the effective value of every parameter: ``self.params`` keeps what was asked (``None`` = the preset's)
        self.settings = MappingProxyType({k: (preset[k] if v is None and k in preset else v) for k, v in self.params.items()})
        self.reference_preset = self.settings["preset"] == "reference"
        self.channels = _parse_channels(str(self.settings["channels"]))
        self.fold = ae.fold_of(self.channels)
        if int(self.settings["window"]) < self.fold:
            raise ParamError(f"lgc.window: must be at least {self.fold} (2^layers) so one window fills the encoder, "
                             f"got {self.settings['window']}")
        if self.reference_preset and self.settings["decoders"] != "per-worker":
            raise ParamError("lgc.decoders: preset='reference' has one decoder per worker (the re-implementation's), "
                             f"got {self.settings['decoders']!r}")
        if self.settings["decoders"] == "per-worker" and self.settings["mode"] == "ring" and not self.reference_preset:
            raise ParamError("lgc.decoders: 'per-worker' needs mode='ps' (ring mode decodes one summed latent with one decoder)")
        if not self.reference_preset and (self.settings["dense_first"] or self.settings["dense_last"]):
            raise ParamError("lgc.dense_first/dense_last: only preset='reference' exchanges the whole model at once "
                             "(preset='gcbench' compresses each tensor on its own)")

    # ------------------------------------------------------------------ schedule

    def phase_of(self, step: int) -> str:
        """``dense``, ``topk`` or ``compressed`` for a step index."""
        if step < self.settings["dense_steps"]:
            return "dense"
        if step < self.settings["dense_steps"] + self.settings["train_steps"]:
            return "topk"
        return "compressed"

    def step_phase(self, step: int) -> str:
        return self.phase_of(step)

    def leader_of(self, step: int, workers: int) -> int:
        """Worker whose index set is used: rotating in ring mode, worker 0 in PS mode."""
        return step % workers if self.settings["mode"] == "ring" else 0

    def k_of(self, d: int) -> int:
        return k_of(self.settings["density"], d)

    def uses_autoencoder(self, d: int) -> bool:
        """Whether a tensor of d elements trains and uses the autoencoder (K >= min_k)."""
        return d > 0 and self.k_of(d) >= self.settings["min_k"]

    def windows(self, k: int) -> Windows:
        return Windows.of(k, int(self.settings["window"]), self.fold)

    def init_autoencoder(self, seed: int, workers: int = 1) -> dict[str, Any]:
        """A fresh shared autoencoder record (what ``states[0].values["lgc"]`` holds), seeded.

        ``workers`` sizes the per-worker decoders (``decoders="per-worker"`` and the reference preset).
        """
        ae_seed = int(np.random.SeedSequence([seed % 2**32, seed >> 32, 0x16C]).generate_state(1, np.uint64)[0] >> np.uint64(1))
        if self.reference_preset:
            # ring mode decodes the mean latent with one decoder (gcbench's inference); ps has one per worker
            params = ae.init_reference_params(ae_seed, 1 if self.settings["mode"] == "ring" else workers)
        else:
            decoders = workers if self.settings["decoders"] == "per-worker" else 1
            params = ae.init_params(ae_seed, self.channels, int(self.settings["latent_channels"]), decoders)
        opt = ae.adam_init(params) if self.settings["optimizer"] == "adam" else {}
        # seed/draws: the reference preset's random choice of the latent all decoders train from
        return {"params": params, "adam": opt, "train_updates": 0, "encoder_at_leader": False, "seed": ae_seed, "draws": 0}

    def autoencoder(self, state0: State, workers: int = 1) -> dict[str, Any]:
        """The shared autoencoder of a tensor (or of the model), created on first use in worker 0's state."""
        rec = state0.values.get(_STATE_KEY)
        if rec is None:
            rec = state0.values[_STATE_KEY] = self.init_autoencoder(state0.seed, workers)
        return rec

    def _step_optimizer(self, rec: dict[str, Any], grads: dict[str, torch.Tensor]) -> None:
        """One update of the autoencoder's weights with the configured optimizer."""
        if self.settings["optimizer"] == "adam":
            ae.adam_step(rec["params"], grads, rec["adam"], float(self.settings["ae_lr"]))
        else:
            ae.sgd_step(rec["params"], grads, float(self.settings["ae_lr"]))

    # ------------------------------------------------------------------ single-tensor contract

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        meta: dict[str, MetaValue]
        if self.phase_of(state.step) == "dense":
            body = _f32_bytes(a).copy()  # not a view of a: a becomes the residual
            meta, decoded = {"kind": "dense"}, a.clone()
        else:
            flat = a.reshape(-1)
            d = flat.numel()
            k = self.k_of(d)
            idx = topk_indices_sorted(flat, k)
            vals = flat[idx]
            coding = self.settings["index_coding"]
            body = sparse_body(vals, idx, d, coding)
            meta, decoded = {"kind": "topk", "k": k, "coding": coding}, dense_from_sparse(vals, idx, d)
        ctx.keep_residual(a, decoded)
        return body, meta, decoded

    def _expected_body_nbytes(self, payload: Payload) -> int | tuple[int, int]:
        kind = meta_str(payload, "kind")
        if kind == "dense":
            meta_keys(payload, "kind")
            return 4 * payload.numel
        if kind == "topk":
            return sparse_body_nbytes(payload, codec.INDEX_CODINGS, "kind")
        _refuse_kind(kind)

    def _decode(self, payload: Payload) -> torch.Tensor:
        kind = meta_str(payload, "kind")
        if kind == "dense":
            body = body_numpy(payload)
            if len(body) != 4 * payload.numel:
                raise PayloadError(f"lgc dense body has {len(body)} bytes, expected {4 * payload.numel}")
            return _f32_read(body, 0, payload.numel, "dense")
        if kind == "topk":
            return sparse_decode(payload)
        _refuse_kind(kind)

    # ------------------------------------------------------------------ exchange

    def exchange(self, grads: Sequence[torch.Tensor], states: Sequence[State]) -> LGCExchangeResult:
        """One step of LGC across N workers for one tensor: :meth:`worker_protocol` on the simulated transport.

        With ``preset="reference"`` the tensor is a whole model of one tensor (:meth:`exchange_group`).
        """
        if self.reference_preset:
            return self.exchange_group([[g] for g in grads], [[s] for s in states])[0]  # type: ignore[return-value]
        n = len(grads)
        if n != len(states):
            raise ValueError(f"lgc exchange: {n} gradients but {len(states)} states")
        if n < 2:
            raise GcbenchError(f"lgc needs at least 2 workers: it exploits redundancy between workers' gradients (got {n})")
        step = states[0].step
        if any(s.step != step for s in states):
            raise ValueError(f"lgc exchange: workers' states are at different steps {[s.step for s in states]}")
        shape, out_dtype = tuple(grads[0].shape), grads[0].dtype
        if any(tuple(g.shape) != shape for g in grads):
            raise ValueError("lgc exchange: workers' gradients differ in shape")
        memo: dict[Any, Any] = {}
        run = simulate([self.worker_protocol([grads[w]], [states[w]], Context(w, n, memo=memo)) for w in range(n)])
        phase, d = self.phase_of(step), grads[0].numel()
        used = self.uses_autoencoder(d) and phase != "dense"
        agg = run.outcomes[0].aggregates[0].reshape(shape).to(out_dtype)
        return self._result(agg, run.messages, n, phase, self.leader_of(step, n), used)

    @property
    def needs_whole_model(self) -> bool:
        """``preset="reference"`` exchanges the whole model at once (one autoencoder over every middle tensor's top-k values)."""
        return self.reference_preset

    def worker_protocol(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> WorkerProtocol:
        """One worker's side of LGC (see the module docstring for the protocols).

        ``preset="gcbench"``: unit after unit.  ``preset="reference"``: ``xs`` is the whole model,
        its tensors in model order (:attr:`needs_whole_model`; the first unit's state holds the
        model's autoencoder).  The parameter server is hosted by rank 0, which is also the ps
        leader: the autoencoder lives in rank 0's state, where the server trains and uses it.
        Ring mode trains one replica per worker on the same all-gathered data (the simulated
        transport trains one for the group, :meth:`Context.once`), so the replicas must start
        alike: the card's protocol says ``shared_seed``.  Every message says the unit whose result
        counts it (:func:`~gcbench.core.protocol.counted_in`).
        """
        rounds = self._reference_protocol(xs, states, ctx) if self.reference_preset else self._units_protocol(xs, states, ctx)
        return (yield from _noting_uploads(rounds, ctx.rank, len(xs)))

    def _units_protocol(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> Generator[Leg, Any, list[torch.Tensor]]:
        """``preset="gcbench"``: each unit's round on its own, one after another; the aggregates."""
        aggs: list[torch.Tensor] = []
        for u, (x, state) in enumerate(zip(xs, states, strict=True)):
            aggs.append((yield from counted_in(self._unit_protocol(u, x, state, ctx), u)))
        return aggs

    def _unit_protocol(self, u: int, x: torch.Tensor, state: State, ctx: Context) -> Generator[Leg, Any, torch.Tensor]:
        """One unit's step for this worker: its legs, error feedback, and the float32 aggregate (the unit's shape)."""
        me, n = ctx.rank, ctx.world
        phase, leader = self.phase_of(state.step), self.leader_of(state.step, n)
        shape, dtype = tuple(x.shape), x.dtype
        d = x.numel()
        if d == 0:
            p = self.compress(x, state)
            yield Send([Message(f"{phase}:empty", me, (), p)], f"{phase}:empty")
            return torch.zeros(shape, dtype=torch.float32)
        corrected = ErrorFeedback.corrected(x.detach().float().reshape(shape), state)
        a = corrected.reshape(-1)
        use_ae = self.uses_autoencoder(d)
        if phase == "dense":
            agg = yield from self._dense_exchange(u, a, ctx, phase, shape, dtype)
            sent = a  # a dense step leaves no residual
        elif phase == "topk" or not use_ae:
            agg, sent = yield from self._topk_exchange(u, a, state, ctx, phase, leader, phase == "topk" and use_ae, shape, dtype)
        elif self.settings["mode"] == "ps":
            agg, sent = yield from self._ps_compressed(u, a, state, ctx, leader, shape, dtype)
        else:
            agg, sent = yield from self._ring_compressed(u, a, state, ctx, leader, shape, dtype)
        ErrorFeedback.update(state, corrected, sent.reshape(shape))
        state.step += 1
        return agg.to(x.device).reshape(shape)

    def _result(self, agg: torch.Tensor, msgs: list[Message], n: int, phase: str, leader: int, used: bool) -> LGCExchangeResult:
        traffic = Traffic()
        for ph, counted in count_messages(msgs, n):
            for w, c in enumerate(counted):
                traffic.add(ph, w, c.sent, c.received, c.sent_body)
        first: list[Payload] = []
        empty = Payload(self.name, self.info.version, agg.dtype, (0,), torch.zeros(0, dtype=torch.uint8), {"kind": "dense"})
        for w in range(n):  # what each worker sent first this step (its upload)
            own = [m.payload for m in msgs if m.sender == w]
            first.append(own[0] if own else empty)
        return LGCExchangeResult(agg, traffic, first, phase=phase, leader=leader, uses_autoencoder=used, messages=msgs)

    # ------------------------------------------------------------------ payload helpers

    def _msg(self, kind: str, body: np.ndarray, meta: dict[str, MetaValue], shape: tuple[int, ...], dtype: torch.dtype) -> Payload:
        data = torch.from_numpy(np.ascontiguousarray(body, dtype=np.uint8).ravel())
        return Payload(self.name, self.info.version, dtype, shape, data, {"kind": kind, **meta})

    def _dense_payload(self, v: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> Payload:
        return self._msg("dense", _f32_bytes(v), {}, shape, dtype)

    def _topk_payload(self, vals: torch.Tensor, idx: torch.Tensor, d: int, shape: tuple[int, ...], dtype: torch.dtype) -> Payload:
        coding = self.settings["index_coding"]
        return self._msg("topk", sparse_body(vals, idx, d, coding), {"k": int(idx.numel()), "coding": coding}, shape, dtype)

    def _read_indices(self, p: Payload, d: int, nscales: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(scales, ascending indices) of an ``indices`` message."""
        body = body_numpy(p)
        scales = _f32_read(body, 0, nscales, "indices")
        idx, _ = codec.decode_indices(body[4 * nscales :], d, meta_int(p, "k"), meta_str(p, "coding"))
        return scales, torch.from_numpy(idx)

    def _read_sparse(self, p: Payload, d: int) -> tuple[torch.Tensor, torch.Tensor]:
        vals, idx = codec.decode_sparse(body_numpy(p), d, meta_int(p, "k"), meta_str(p, "coding"))
        return torch.from_numpy(vals), torch.from_numpy(idx)

    # ------------------------------------------------------------------ phase rounds (one worker's side)

    def _dense_exchange(self, u: int, a: torch.Tensor, ctx: Context, phase: str, shape: tuple[int, ...],
                        dtype: torch.dtype) -> Generator[Leg, Any, torch.Tensor]:
        """The mean of the workers' fp32 vectors, flat: ps through the server (push, pull), ring by a ring all-reduce."""
        n = ctx.world
        if self.settings["mode"] != "ps":
            return (yield from self._ring_allreduce(a, ctx, f"{phase}:ring", dtype)) / n

        def serve(rows: list[list[Message]]) -> list[Message]:
            acc = torch.zeros(a.numel(), dtype=torch.float32)
            for w in range(n):  # the server decodes what arrived
                acc += self.decode_received(_only(rows[w], f"{phase}:push"), shape).reshape(-1)
            return [Message(f"{phase}:pull", SERVER, tuple(range(n)), self._dense_payload(acc / n, shape, dtype))]

        got = yield ToServer([Message(f"{phase}:push", ctx.rank, (), self._dense_payload(a, shape, dtype))], f"{phase}:push", serve)
        pull = _only(got, f"{phase}:pull")
        return ctx.once((u, "aggregate"), lambda: self.decode_received(pull, shape).reshape(-1))

    def _topk_exchange(self, u: int, a: torch.Tensor, state: State | None, ctx: Context, phase: str, leader: int, train: bool,
                       shape: tuple[int, ...], dtype: torch.dtype,
                       keep: list[Payload] | None = None) -> Generator[Leg, Any, tuple[torch.Tensor, torch.Tensor]]:
        """Top-k with error feedback: ps through the server (push, pull of the mean at the union of the
        indices), ring by all-gather; with ``train``, then the autoencoder's training round.  (aggregate, sent).

        ``keep`` receives every worker's push, by worker, where this worker sees them (ps: in the
        server's round, where it is hosted; ring: from the all-gather), for a later training round
        over several units (the reference preset's).
        """
        me, n, d = ctx.rank, ctx.world, a.numel()
        k = self.k_of(d)
        idx = topk_indices_sorted(a, k)
        push = self._topk_payload(a[idx], idx, d, shape, dtype)
        sent = dense_from_sparse(a[idx], idx, d)
        if self.settings["mode"] == "ps":
            server: dict[str, Any] = {}  # what the server keeps between its rounds (it runs where rank 0 is)

            def serve(rows: list[list[Message]]) -> list[Message]:
                pushes = [_only(row, f"{phase}:push") for row in rows]
                if keep is not None:
                    keep[:] = pushes
                acc = torch.zeros(d, dtype=torch.float32)
                for p in pushes:
                    acc += self.decode_received(p, shape).reshape(-1)
                acc /= n
                support = torch.unique(torch.cat([self._read_sparse(p, d)[1] for p in pushes]))
                replies = [Message(f"{phase}:pull", SERVER, tuple(range(n)), self._topk_payload(acc[support], support, d, shape, dtype))]
                if train:  # the server tells the other workers the leader's index set
                    server["pushed"] = pushed = [self._read_sparse(p, d) for p in pushes]
                    ip = self._indices_payload(pushed[leader][1], d, shape, dtype)
                    replies.append(Message("topk:train", SERVER, _others(leader, n), ip))
                return replies

            got = yield ToServer([Message(f"{phase}:push", me, (), push)], f"{phase}:push", serve)
            pull = _only(got, f"{phase}:pull")
            agg = ctx.once((u, "aggregate"), lambda: self.decode_received(pull, shape).reshape(-1))
            if train:
                idx_l = idx if me == leader else self._read_indices(_only(got, "topk:train"), d, 0)[1]
                mine = [] if me == leader else [Message("topk:train", me, (), self._missing_values(a, idx, idx_l, shape, dtype))]

                def serve_train(rows: list[list[Message]]) -> list[Message]:
                    pushed = server["pushed"]
                    lead = pushed[leader][1]
                    extra = [None if w == leader else _only(rows[w], "topk:train") for w in range(n)]
                    values = self._values_at(pushed, lead, leader, extra)
                    inn_vals, inn_mask = self._innovation_in_k(pushed, lead, True, d)
                    assert state is not None, "training needs the unit's state"
                    self._train(self.autoencoder(state, n), values, inn_vals, inn_mask, leader)
                    return []

                yield ToServer(mine, "topk:train", serve_train)
            return agg, sent
        # ring: all-gather (each sends its payload once and receives the others')
        got = yield Send([Message(f"{phase}:allgather", me, _others(me, n), push)], f"{phase}:allgather")
        pushes = _by_sender(me, push, got, n, f"{phase}:allgather")
        if keep is not None:
            keep[:] = pushes

        def mean() -> torch.Tensor:
            acc = torch.zeros(d, dtype=torch.float32)
            for p in pushes:
                acc += self.decode_received(p, shape).reshape(-1)
            return acc / n

        agg = ctx.once((u, "aggregate"), mean)
        if train:  # every worker trains an identical replica on every worker's values at the leader's indices
            pushed = [self._read_sparse(p, d) for p in pushes]
            idx_l = pushed[leader][1]
            extra = None if me == leader else self._missing_values(a, idx, idx_l, shape, dtype)
            got = yield Send([] if extra is None else [Message("topk:train", me, _others(me, n), extra)], "topk:train")
            rows = [None if w == leader else (extra if w == me else _only([m for m in got if m.sender == w], "topk:train"))
                    for w in range(n)]
            values = self._values_at(pushed, idx_l, leader, rows)
            inn_vals, inn_mask = self._innovation_in_k(pushed, idx_l, False, d)
            assert state is not None, "training needs the unit's state"
            ctx.once((u, "train"), lambda: self._train(self.autoencoder(state, n), values, inn_vals, inn_mask, leader))
        return agg, sent

    def _indices_payload(self, idx: torch.Tensor, d: int, shape: tuple[int, ...], dtype: torch.dtype) -> Payload:
        coding = self.settings["index_coding"]
        return self._msg("indices", codec.encode_indices(to_numpy(idx), d, coding), {"k": int(idx.numel()), "coding": coding}, shape, dtype)

    def _missing_values(self, v: torch.Tensor, idx_w: torch.Tensor, idx_l: torch.Tensor, shape: tuple[int, ...],
                        dtype: torch.dtype) -> Payload:
        """A worker's values at the leader's indices that its own top-k (``idx_w``) did not hold (fp32, no indices)."""
        _, have = _positions_in(idx_w, idx_l)
        missing = idx_l[~have].to(v.device)
        return self._msg("values", _f32_bytes(v[missing]), {"k": int(missing.numel())}, shape, dtype)

    def _values_at(self, pushed: list[tuple[torch.Tensor, torch.Tensor]], idx_l: torch.Tensor, leader: int,
                   extra: Sequence[Payload | None]) -> torch.Tensor:
        """Every worker's values (N, K) at the leader's top-k indices: from its push, the rest from its ``values`` message."""
        values = torch.zeros((len(pushed), idx_l.numel()), dtype=torch.float32)
        for w, (vals_w, idx_w) in enumerate(pushed):
            where, have = _positions_in(idx_w, idx_l)  # which leader indices this worker's push already held
            values[w, have] = vals_w[where[have]]
            p = extra[w]
            if w != leader and p is not None:
                values[w, ~have] = _f32_read(body_numpy(p), 0, int((~have).sum()), "values")
        return values

    def _ps_compressed(self, u: int, a: torch.Tensor, state: State, ctx: Context, leader: int, shape: tuple[int, ...],
                       dtype: torch.dtype) -> Generator[Leg, Any, tuple[torch.Tensor, torch.Tensor]]:
        """Phase 3, ps: the leader's latent and indices, everyone's innovation, the server's decoded mean.  (aggregate, sent)

        Three server rounds: the one-time encoder transfer to the leader, the leader's latent and
        indices (the server forwards the indices to the others), every worker's innovation (the
        server decodes and sends the aggregate back).  The leader is rank 0, where the server and
        its autoencoder are.
        """
        me, n, d = ctx.rank, ctx.world, a.numel()
        k = self.k_of(d)
        win = self.windows(k)
        coding = self.settings["index_coding"]
        latent_channels = int(self.settings["latent_channels"])
        server: dict[str, Payload] = {}
        yield self._weights_round(state, n, leader, shape, dtype)

        mine: list[Message] = []
        if me == leader:  # the latent of its values at its own top-k indices, and the indices
            params = self.autoencoder(state, n)["params"]
            idx_l = topk_indices_sorted(a, k)
            v_l = a[idx_l].cpu()
            s = win.scales(v_l)
            div = torch.where(s > 0, s, torch.ones_like(s))[:, None]
            with torch.no_grad():
                z = ae.encode(params, (win.split(v_l.reshape(1, -1))[0] / div).reshape(win.n, 1, win.length))
            latent = self._msg("latent", np.concatenate([_f32_bytes(s), _f32_bytes(z)]), {"k": k}, shape, dtype)
            mine = [Message("compressed:latent", me, (), latent),
                    Message("compressed:indices", me, (), self._indices_payload(idx_l, d, shape, dtype))]
        got = yield self._leader_round(mine, server, leader, n)
        if me != leader:
            idx_l = self._read_indices(_only(got, "compressed:indices"), d, 0)[1]
        pos = topk_indices_sorted(a, k_of(self.settings["innovation_density"], d))
        innovation = self._msg("innovation", sparse_body(a[pos], pos, d, coding), {"k": int(pos.numel()), "coding": coding}, shape, dtype)
        keep = torch.zeros(d, dtype=torch.bool, device=a.device)
        keep[idx_l] = True
        keep[pos] = True
        sent = torch.where(keep, a, 0.0)  # counted as sent for error feedback

        def serve(rows: list[list[Message]]) -> list[Message]:
            """Decode every worker at the leader's indices from the leader's latent + its innovation, average, send back."""
            params = self.autoencoder(state, n)["params"]
            body = body_numpy(server["latent"])
            s_rx = _f32_read(body, 0, win.n, "latent")
            z_rx = _f32_read(body, 4 * win.n, win.n * latent_channels * win.length // self.fold, "latent")
            if len(body) != 4 * win.latent_floats(latent_channels, self.fold):
                raise PayloadError("lgc latent: body length does not match its geometry")
            z_rx = z_rx.reshape(win.n, latent_channels, win.length // self.fold)
            _, idx_rx = self._read_indices(server["indices"], d, 0)
            div_rx = torch.where(s_rx > 0, s_rx, torch.ones_like(s_rx))
            inn_k = torch.zeros((n, k), dtype=torch.float32)
            mask_k = torch.zeros((n, k), dtype=torch.bool)
            extras: list[tuple[torch.Tensor, torch.Tensor]] = []
            for w in range(n):
                vals, at = self._read_sparse(_only(rows[w], "compressed:innovation"), d)
                where, inside = _positions_in(idx_rx, at)
                inn_k[w, where[inside]] = vals[inside]
                mask_k[w, where[inside]] = True
                extras.append((at[~inside], vals[~inside]))
            inn_w = (win.split(inn_k) / div_rx[None, :, None]).reshape(n, win.n, 1, win.length)
            im_w = win.split(mask_k).reshape(n, win.n, 1, win.length)
            with torch.no_grad():  # worker w's values from the leader's latent and w's innovation (its own decoder if per-worker)
                out = torch.stack([ae.decode(ae.decoder_view(params, w), z_rx, inn_w[w], im_w[w]) for w in range(n)])
            recon = win.join(out.reshape(n, win.n, win.length) * s_rx[None, :, None])
            recon = torch.where(mask_k, inn_k, recon)  # exact where sent (also where the scale was 0)
            acc = torch.zeros(d, dtype=torch.float32)
            for w in range(n):
                r = torch.zeros(d, dtype=torch.float32)
                r[idx_rx] = recon[w]
                r[extras[w][0]] = extras[w][1]
                acc += r
            acc /= n
            return [self._pull(acc, idx_rx, torch.unique(torch.cat([e[0] for e in extras])), n, shape, dtype)[1]]

        got = yield ToServer([Message("compressed:innovation", me, (), innovation)], "compressed:innovation", serve)
        pull = _only(got, "compressed:pull")
        return ctx.once((u, "aggregate"), lambda: self._read_pull(pull, idx_l.cpu(), d)), sent

    def _weights_round(self, state: State, n: int, leader: int, shape: tuple[int, ...], dtype: torch.dtype) -> ToServer:
        """Phase 3, ps: the server's round that sends its trained encoder to the leader, once (no messages after)."""

        def serve(rows: list[list[Message]]) -> list[Message]:
            rec = self.autoencoder(state, n)
            if rec["encoder_at_leader"]:
                return []
            enc = torch.cat([rec["params"][nm].reshape(-1) for nm in ae.encoder_names(rec["params"])])
            rec["encoder_at_leader"] = True  # one-time: the server's trained encoder goes to the leader
            weights = self._msg("weights", _f32_bytes(enc), {"k": int(enc.numel())}, shape, dtype)
            return [Message("setup:weights", SERVER, (leader,), weights)]

        return ToServer([], "setup:weights", serve)

    @staticmethod
    def _leader_round(mine: list[Message], server: dict[str, Payload], leader: int, n: int) -> ToServer:
        """Phase 3, ps: the leader's latent and indices to the server (kept in ``server``), which forwards the indices to the others."""

        def serve(rows: list[list[Message]]) -> list[Message]:
            server["latent"] = _only(rows[leader], "compressed:latent")
            server["indices"] = ip = _only(rows[leader], "compressed:indices")
            return [Message("compressed:indices", SERVER, _others(leader, n), ip)]  # forwarded so the others can pick their values

        return ToServer(mine, "compressed:latent", serve)

    def _pull(self, acc: torch.Tensor, idx: torch.Tensor, extra_pos: torch.Tensor, n: int, shape: tuple[int, ...],
              dtype: torch.dtype) -> tuple[torch.Tensor, Message]:
        """The server's aggregate message (values at the leader's indices, then the innovations outside them)
        and the aggregate every worker rebuilds from it and the index set it knows."""
        d = acc.numel()
        coding = self.settings["index_coding"]
        xb = codec.encode_sparse(to_numpy(acc[extra_pos]), to_numpy(extra_pos), d, coding)
        pull = self._msg("values", np.concatenate([_f32_bytes(acc[idx]), xb]), {"k": idx.numel(), "m": int(extra_pos.numel()),
                                                                                 "coding": coding}, shape, dtype)
        return self._read_pull(pull, idx, d), Message("compressed:pull", SERVER, tuple(range(n)), pull)

    def _read_pull(self, pull: Payload, idx: torch.Tensor, d: int) -> torch.Tensor:
        """The flat aggregate of ``d`` elements from the server's ``values`` message and the leader's ascending indices ``idx``.

        ``d`` is the receiver's own tensor size: the message's header does not size what is allocated.
        """
        k = idx.numel()
        if pull.numel != d:
            raise PayloadError(f"lgc aggregate: the server's message declares {pull.numel} elements, the receiver expects {d}")
        if meta_int(pull, "k") != k:
            raise PayloadError(f"lgc aggregate: holds {meta_int(pull, 'k')} values, the leader's index set has {k}")
        pb = body_numpy(pull)
        agg = torch.zeros(d, dtype=torch.float32)
        agg[idx] = _f32_read(pb, 0, k, "values")
        ev, ei = codec.decode_sparse(pb[4 * k :], d, meta_int(pull, "m"), meta_str(pull, "coding"))
        agg[torch.from_numpy(ei)] = torch.from_numpy(ev)
        return agg

    def _ring_compressed(self, u: int, a: torch.Tensor, state: State, ctx: Context, leader: int, shape: tuple[int, ...],
                         dtype: torch.dtype) -> Generator[Leg, Any, tuple[torch.Tensor, torch.Tensor]]:
        """Phase 3, ring: the leader's indices round the ring, every worker's latent there, ring-summed.  (aggregate, sent)"""
        me, n, d = ctx.rank, ctx.world, a.numel()
        k = self.k_of(d)
        win = self.windows(k)
        latent_channels = int(self.settings["latent_channels"])
        params = ctx.once((u, "autoencoder"), lambda: self.autoencoder(state))["params"]
        ip: Payload | None = None
        if me == leader:
            idx_l = topk_indices_sorted(a, k)
            s = win.scales(a[idx_l].cpu())
            coding = self.settings["index_coding"]
            ip = self._msg("indices", np.concatenate([_f32_bytes(s), codec.encode_indices(to_numpy(idx_l), d, coding)]),
                           {"k": k, "coding": coding}, shape, dtype)
        ip = yield from self._ring_broadcast(ip, leader, ctx, "compressed:indices")
        s_rx, idx_rx = self._read_indices(ip, d, win.n)
        div = torch.where(s_rx > 0, s_rx, torch.ones_like(s_rx))[None, :, None]
        # this worker's windows in the group's batch (zeros elsewhere): the encoder's kernels are chosen by the batch
        # shape, and every worker's codes are those of the one batched encoding the simulation always did
        batch = torch.zeros((n, win.n, win.length))
        batch[me] = win.split(a[idx_rx].cpu().reshape(1, -1))[0] / div[0]
        with torch.no_grad():
            z = ae.encode(params, batch.reshape(n * win.n, 1, win.length)).reshape(n, -1)[me]
        total = yield from self._ring_allreduce(z, ctx, "compressed:latent", dtype)

        def decode() -> torch.Tensor:
            zbar = (total / n).reshape(win.n, latent_channels, win.length // self.fold)
            zeros = torch.zeros((win.n, 1, win.length))
            with torch.no_grad():
                out = ae.decode(params, zbar, zeros, zeros.bool()).reshape(win.n, win.length)
            agg = torch.zeros(d, dtype=torch.float32)
            agg[idx_rx] = win.join((out * s_rx[:, None]).reshape(1, win.n, win.length))[0]
            return agg

        keep = torch.zeros(d, dtype=torch.bool, device=a.device)
        keep[idx_rx.to(a.device)] = True
        return ctx.once((u, "aggregate"), decode), torch.where(keep, a, 0.0)

    def _ring_broadcast(self, p: Payload | None, leader: int, ctx: Context, phase: str) -> Generator[Leg, Any, Payload]:
        """``p`` from the leader along the ring, each worker forwarding it to the next (N − 1 legs); every worker's copy."""
        me, n = ctx.rank, ctx.world
        for j in range(n - 1):
            sender = (leader + j) % n
            got = yield Send([Message(phase, me, ((me + 1) % n,), p)] if me == sender and p is not None else [], phase)
            if me == (sender + 1) % n:
                p = _only(got, phase)
        if p is None:
            raise RuntimeError("lgc ring broadcast: the leader had nothing to send")
        return p

    def _ring_allreduce(self, v: torch.Tensor, ctx: Context, phase: str, dtype: torch.dtype) -> Generator[Leg, Any, torch.Tensor]:
        """The sum over the workers of ``v`` by a ring all-reduce (reduce-scatter, then all-gather) of fp32 chunk payloads.

        In step s of the reduce-scatter worker w sends chunk (w − s) mod N to w + 1, which adds it to
        its own; in the all-gather it sends chunk (w + 1 − s) mod N, which the next worker keeps.
        Every worker ends with the same sums, added in the same order.
        """
        me, n = ctx.rank, ctx.world
        chunks = [c.float().cpu().clone() for c in torch.tensor_split(v.reshape(-1), n)]
        for sweep in ("reduce", "gather"):
            for s in range(n - 1):
                c = (me - s) % n if sweep == "reduce" else (me + 1 - s) % n
                p = self._dense_payload(chunks[c], (chunks[c].numel(),), dtype)
                got = yield Send([Message(phase, me, ((me + 1) % n,), p)], phase)
                c = (me - 1 - s) % n if sweep == "reduce" else (me - s) % n  # the chunk the previous worker sent
                value = self.decode_received(_only(got, phase), (chunks[c].numel(),)).reshape(-1)
                chunks[c] = chunks[c] + value if sweep == "reduce" else value
        return torch.cat(chunks)

    def _innovation_in_k(self, pushed: list[tuple[torch.Tensor, torch.Tensor]], idx_l: torch.Tensor, ps: bool,
                         d: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, mask) (N, K) of each worker's innovation at its positions inside the leader's index set.

        A worker's innovation is its k_inn largest |values|, which lie inside its own top-k push,
        so the trainer takes them from there.  Ring mode has no innovation (all zero).
        """
        n, k = len(pushed), idx_l.numel()
        vals = torch.zeros((n, k), dtype=torch.float32)
        mask = torch.zeros((n, k), dtype=torch.bool)
        if not ps:
            return vals, mask
        for w, (v, idx) in enumerate(pushed):
            k_inn = min(k_of(self.settings["innovation_density"], d), v.numel())
            top = torch.topk(v.abs(), k_inn, sorted=False).indices
            where, inside = _positions_in(idx_l, idx[top])
            vals[w, where[inside]] = v[top][inside]
            mask[w, where[inside]] = True
        return vals, mask

    def _train(self, rec: dict[str, Any], values: torch.Tensor, inn_vals: torch.Tensor, inn_mask: torch.Tensor, leader: int) -> None:
        """``ae_iters`` optimizer steps of the phase-2 loss on one step's values (N, K) at the leader's indices."""
        n, k = values.shape
        win = self.windows(k)
        s = win.scales(values[leader])
        div = torch.where(s > 0, s, torch.ones_like(s))[None, :, None]
        x = (win.split(values) / div).reshape(n * win.n, 1, win.length)
        inn = (win.split(inn_vals) / div).reshape(n * win.n, 1, win.length)
        im = win.split(inn_mask).reshape(n * win.n, 1, win.length)
        valid = win.valid()
        lam = float(self.settings["latent_weight"])
        ps = self.settings["mode"] == "ps"

        def loss_of(params: dict[str, torch.Tensor]) -> torch.Tensor:
            z = ae.encode(params, x)
            zw = z.reshape(n, win.n, *z.shape[1:])
            zbar = zw.mean(0)
            pull = (zw - zbar).pow(2).mean() / (zbar.pow(2).mean() + 1e-12)
            if ps:  # each worker from the leader's latent and its own innovation, as phase 3 decodes
                z_l = zw[leader]
                outs = [ae.decode(ae.decoder_view(params, w), z_l, inn_w, im_w)
                        for w, (inn_w, im_w) in enumerate(zip(inn.reshape(n, win.n, 1, win.length),
                                                              im.reshape(n, win.n, 1, win.length), strict=True))]
                out = torch.stack(outs).reshape(n, win.n, win.length)
                recon = ((out - x.reshape(n, win.n, win.length)).pow(2) * valid).sum() / (n * valid.sum())
            else:  # the mean values from the mean latent, as phase 3 decodes
                zeros = torch.zeros((win.n, 1, win.length))
                out = ae.decode(params, zbar, zeros, zeros.bool()).reshape(win.n, win.length)
                target = x.reshape(n, win.n, win.length).mean(0)
                recon = ((out - target).pow(2) * valid).sum() / valid.sum()
            return (1 - lam) * recon + lam * pull

        self._optimise(rec, loss_of)

    @torch.enable_grad()  # a DDP hook runs inside the backward pass, where gradient recording is off
    def _optimise(self, rec: dict[str, Any], loss_of: Callable[[dict[str, torch.Tensor]], torch.Tensor]) -> None:
        """``ae_iters`` optimizer steps of ``loss_of(the autoencoder's weights)``; a weight the loss leaves out gets a zero gradient."""
        params: dict[str, torch.Tensor] = rec["params"]
        names = list(params)
        for _ in range(int(self.settings["ae_iters"])):
            for p in params.values():
                p.requires_grad_(True)
            try:
                grads = torch.autograd.grad(loss_of(params), [params[nm] for nm in names], allow_unused=True)
            finally:
                for p in params.values():
                    p.requires_grad_(False)
            self._step_optimizer(rec, {nm: (g if g is not None else torch.zeros_like(params[nm]))
                                       for nm, g in zip(names, grads, strict=True)})
        rec["train_updates"] = int(rec["train_updates"]) + 1

    # ------------------------------------------------------------------ whole-model exchange (preset=reference)

    def dense_units(self, units: int) -> set[int]:
        """Units sent dense fp32 in every phase: the first ``dense_first`` and the last ``dense_last``."""
        first, last = int(self.settings["dense_first"]), int(self.settings["dense_last"])
        return set(range(min(first, units))) | set(range(max(units - last, 0), units))

    def middle_units(self, xs: Sequence[torch.Tensor]) -> tuple[list[int], bool]:
        """The reference preset's middle units of a model (neither dense nor empty), and whether they use the autoencoder.

        They use it when their K values total at least the encoder's shortest input; else they keep top-k+EF in phase 3.
        """
        dense = self.dense_units(len(xs))
        mid = [u for u, x in enumerate(xs) if u not in dense and x.numel() > 0]
        return mid, sum(self.k_of(xs[u].numel()) for u in mid) >= ae.REF_MIN_K

    def exchange_group(self, grads: Sequence[Sequence[torch.Tensor]], states: Sequence[Sequence[State]]) -> list[ExchangeResult]:
        """One step for every unit.  ``preset="gcbench"``: each tensor on its own (:meth:`exchange`).

        ``preset="reference"``: the whole model at once, as the re-implementation does it (its
        :meth:`worker_protocol` over every unit, on the simulated transport) — the first
        ``dense_first`` and last ``dense_last`` units dense fp32 in every phase; the others
        ("middle" units) top-k per unit in phase 2 and, in phase 3, one latent of the leader's
        top-k values of every middle unit concatenated in unit order (K = Σ K_u values).  Each
        unit's result counts its own rounds' messages; those that cover the whole model are
        counted in the first middle unit's, the server's aggregate of each middle unit in that unit's.
        """
        if not self.reference_preset:
            return list(super().exchange_group(grads, states))
        n = len(grads)
        if n != len(states):
            raise ValueError(f"lgc exchange: {n} workers' gradients but {len(states)} workers' states")
        if n < 2:
            raise GcbenchError(f"lgc needs at least 2 workers: it exploits redundancy between workers' gradients (got {n})")
        units = len(grads[0])
        if units == 0:
            return []
        step = states[0][0].step
        if any(st.step != step for row in states for st in row):
            raise ValueError("lgc exchange: the states of the workers' units are at different steps")
        shapes = [tuple(g.shape) for g in grads[0]]
        if any([tuple(g.shape) for g in row] != shapes for row in grads):
            raise ValueError("lgc exchange: workers' gradients differ in shape")
        phase, leader = self.phase_of(step), self.leader_of(step, n)
        mid, use_ae = self.middle_units(grads[0])
        memo: dict[Any, Any] = {}
        run = simulate([self.worker_protocol(list(grads[w]), list(states[w]), Context(w, n, memo=memo)) for w in range(n)])
        msgs: list[list[Message]] = [[] for _ in range(units)]
        for m in run.messages:
            if m.unit is None:
                raise RuntimeError(f"lgc: a {m.phase!r} message of the whole-model exchange names no unit")
            msgs[m.unit].append(m)
        aggs = run.outcomes[0].aggregates
        return [self._result(aggs[u].reshape(shapes[u]).to(grads[0][u].dtype), msgs[u], n, phase, leader,
                             use_ae and phase != "dense" and u in mid) for u in range(units)]

    def _reference_protocol(self, xs: Sequence[torch.Tensor], states: Sequence[State],
                            ctx: Context) -> Generator[Leg, Any, list[torch.Tensor]]:
        """One worker's side of the reference preset's step over the whole model ``xs``; the aggregates.

        Unit after unit: a dense unit (every unit in phase 1) a dense round (:meth:`_dense_exchange`),
        a middle unit a top-k round (:meth:`_topk_exchange`; in phase 3 too when the middle units
        are too small for the autoencoder); then the rounds over every middle unit: the
        autoencoder's training in phase 2, the latent exchange in phase 3.  Error feedback and the
        step counters are updated at the end.
        """
        units = len(xs)
        if units == 0:
            return []
        n = ctx.world
        phase, leader = self.phase_of(states[0].step), self.leader_of(states[0].step, n)
        shapes = [tuple(x.shape) for x in xs]
        mid, use_ae = self.middle_units(xs)
        corrected = [ErrorFeedback.corrected(x.detach().float().reshape(shape), st).reshape(-1)
                     for x, st, shape in zip(xs, states, shapes, strict=True)]
        aggs: list[torch.Tensor] = list(corrected)  # each replaced by the unit's aggregate below
        sent: list[torch.Tensor] = list(corrected)  # a dense round leaves no residual
        pushes: list[list[Payload]] = []  # per middle unit, every worker's top-k push (where this worker sees them)
        for u, a in enumerate(corrected):
            if u not in mid or phase == "dense":
                tag = phase if phase == "dense" else f"{phase}:dense-tensor"
                aggs[u] = yield from counted_in(self._dense_exchange(u, a, ctx, tag, shapes[u], xs[u].dtype), u)
            elif phase == "topk" or not use_ae:
                pushes.append([])
                aggs[u], sent[u] = yield from counted_in(
                    self._topk_exchange(u, a, None, ctx, phase, 0, False, shapes[u], xs[u].dtype, pushes[-1]), u)
        if mid and phase != "dense" and use_ae:
            a_mid = [corrected[u] for u in mid]
            geo = [(shapes[u], xs[u].dtype) for u in mid]
            if phase == "topk":
                yield from counted_in(self._reference_train(states[0], ctx, leader, pushes, a_mid, geo), mid[0])
            else:
                proto = self._reference_ps if self.settings["mode"] == "ps" else self._reference_ring
                out_aggs, out_sent = yield from counted_in(proto(states[0], ctx, leader, a_mid, geo, mid), mid[0])
                for j, u in enumerate(mid):
                    aggs[u], sent[u] = out_aggs[j], out_sent[j]
        for u, st in enumerate(states):
            ErrorFeedback.update(st, corrected[u].reshape(shapes[u]), sent[u].reshape(shapes[u]))
            st.step += 1
        return [agg.to(x.device).reshape(x.shape) for agg, x in zip(aggs, xs, strict=True)]

    def _multi_indices(self, idx: Sequence[torch.Tensor], dims: Sequence[int]) -> np.ndarray:
        """One body holding each unit's ascending indices, coded into that unit's size, back to back."""
        coding = self.settings["index_coding"]
        parts = [codec.encode_indices(to_numpy(i), d, coding) for i, d in zip(idx, dims, strict=True)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)

    def _read_multi_indices(self, body: np.ndarray, counts: Sequence[int], dims: Sequence[int]) -> tuple[list[torch.Tensor], int]:
        """Inverse of :meth:`_multi_indices`; also returns the bytes consumed."""
        coding = self.settings["index_coding"]
        out, pos = [], 0
        for k, d in zip(counts, dims, strict=True):
            idx, used = codec.decode_indices(body[pos:], d, k, coding)
            out.append(torch.from_numpy(idx))
            pos += used
        return out, pos

    def _concat_layout(self, a: Sequence[torch.Tensor]) -> tuple[list[int], list[int], list[int]]:
        """The middle units' sizes, their K values, and where each unit's K values start in the concatenated vector (and its end)."""
        dims = [t.numel() for t in a]
        ks = [self.k_of(d) for d in dims]
        return dims, ks, np.cumsum([0, *ks]).tolist()

    def _concat_values(self, vals: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.cat([v.reshape(-1).float().cpu() for v in vals]) if vals else torch.zeros(0)

    def _reference_loss(self, params: dict[str, torch.Tensor], z: torch.Tensor, recon: torch.Tensor) -> torch.Tensor:
        """(1 − λ)·recon + λ·Σ_{i≠j} MSE(z_i, z_j): the re-implementation's similarity term (λ = 0.5 there)."""
        n = z.shape[0]
        sim = sum(((z[i] - z[j]).pow(2).mean() for i in range(n) for j in range(n) if i != j), torch.zeros(()))
        lam = float(self.settings["latent_weight"])
        return (1 - lam) * recon + lam * sim

    def _reference_train(self, state0: State, ctx: Context, leader: int, pushes: list[list[Payload]], a: list[torch.Tensor],
                         geo: list[tuple[tuple[int, ...], torch.dtype]]) -> Generator[Leg, Any, None]:
        """Phase 2 of the reference preset: ``ae_iters`` steps of its loss on this step's top-k values.

        ``pushes``: per middle unit, every worker's top-k push as this worker's top-k round kept
        it; ``a``: this worker's corrected middle tensors.  PS (the re-implementation's rule): the
        server, which already holds every push, trains in a round without messages on each
        worker's *own* top-k values of every middle unit, concatenated; one randomly chosen
        worker's latent is decoded by every worker's decoder with that worker's innovation (its
        k_inn largest values, at their positions in its own vector); loss = (1 − λ)·Σ_w
        MSE(decoded_w, values_w) + λ·Σ_{i≠j} MSE(z_i, z_j).  Ring (gcbench's inference): every
        worker's values at the rotating leader's indices (each other worker all-gathers, per
        middle unit, those its push did not hold: ``topk:train``, as :meth:`_topk_exchange`), the
        mean values decoded from the mean latent with zero innovation, plus the same similarity
        term; every worker trains its replica.
        """
        me, n = ctx.rank, ctx.world
        dims = [math.prod(shape) for shape, _ in geo]
        if self.settings["mode"] == "ps":

            def serve(rows: list[list[Message]]) -> list[Message]:
                x_rows, inn_rows = [], []
                for w in range(n):
                    vals, innv = [], []
                    for j, d in enumerate(dims):
                        v, _idx = self._read_sparse(pushes[j][w], d)
                        k_inn = min(k_of(self.settings["innovation_density"], d), v.numel())
                        keep = torch.zeros(v.numel(), dtype=torch.bool)
                        keep[torch.topk(v.abs(), k_inn, sorted=False).indices] = True
                        vals.append(v)
                        innv.append(torch.where(keep, v, 0.0))
                    x_rows.append(self._concat_values(vals))
                    inn_rows.append(self._concat_values(innv))
                self._reference_steps(self.autoencoder(state0, n), torch.stack(x_rows)[:, None, :], torch.stack(inn_rows)[:, None, :])
                return []

            yield ToServer([], "topk:train", serve)
            return
        pushed = [[self._read_sparse(p, d) for p in row] for row, d in zip(pushes, dims, strict=True)]
        idx_l = [row[leader][1] for row in pushed]
        extra = [None if me == leader else self._missing_values(a[j], pushed[j][me][1], idx_l[j], *geo[j]) for j in range(len(geo))]
        # one leg for every middle unit: each other worker's messages, in unit order
        got = yield Send([Message("topk:train", me, _others(me, n), p) for p in extra if p is not None], "topk:train")
        received = [extra if w == me else [m.payload for m in got if m.sender == w and m.phase == "topk:train"] for w in range(n)]
        if any(len(received[w]) != len(geo) for w in range(n) if w != leader):
            raise PayloadError(f"lgc: expected one 'topk:train' message per middle tensor ({len(geo)}) from each worker but the leader")
        cols = [self._values_at(pushed[j], idx_l[j], leader, [None if w == leader else received[w][j] for w in range(n)])
                for j in range(len(geo))]
        x = torch.cat(cols, dim=1)[:, None, :]
        ctx.once(("model", "train"), lambda: self._reference_steps(self.autoencoder(state0, n), x, None))

    def _reference_steps(self, rec: dict[str, Any], x: torch.Tensor, inn: torch.Tensor | None) -> None:
        """``ae_iters`` steps of the reference loss on (N, 1, K) values; ``inn``: the workers' innovations (ps), None (ring)."""
        n = x.shape[0]

        def loss_of(params: dict[str, torch.Tensor]) -> torch.Tensor:
            z = ae.reference_encode(params, x)
            if inn is not None:
                pick = int(np.random.default_rng([int(rec["seed"]), int(rec["draws"])]).integers(n))
                rec["draws"] = int(rec["draws"]) + 1
                recon = sum((ae.reference_decode(params, w, z[pick:pick + 1], inn[w:w + 1]) - x[w:w + 1]).pow(2).mean()
                            for w in range(n))
            else:
                out = ae.reference_decode(params, 0, z.mean(0, keepdim=True), torch.zeros_like(x[:1]))
                recon = (out - x.mean(0, keepdim=True)).pow(2).mean()
            return self._reference_loss(params, z, recon)  # type: ignore[arg-type]

        self._optimise(rec, loss_of)

    def _reference_ps(self, state0: State, ctx: Context, leader: int, a: list[torch.Tensor],
                      geo: list[tuple[tuple[int, ...], torch.dtype]],
                      units: Sequence[int]) -> Generator[Leg, Any, tuple[list[torch.Tensor], list[torch.Tensor]]]:
        """Phase 3, PS, reference preset: per middle unit (``units``, model indices) the aggregate and this worker's sent part.

        Three server rounds.  The one-time encoder transfer to the leader.  The leader's latent
        (fp32, 4·L4 floats, no scale) and its top-k indices of every middle unit (one message; the
        server forwards them to the others).  Every worker's innovation (k_inn largest |values| per
        unit, one message): the server decodes worker w with w's decoder from the leader's latent
        and w's innovation placed at its positions in the leader's index set (the decoder's 33rd
        channel; no exact overwrite there, as in the re-implementation); w's innovation outside
        that set is added exactly (gcbench's choice: the values were paid for); it sends back the
        aggregate of each middle unit (counted in that unit's result).
        """
        me, n, count = ctx.rank, ctx.world, len(geo)
        dims, ks, offs = self._concat_layout(a)
        shape0, dtype0 = geo[0]  # the whole-model messages carry the first middle unit's shape
        coding = self.settings["index_coding"]
        server: dict[str, Payload] = {}
        yield self._weights_round(state0, n, leader, shape0, dtype0)
        mine: list[Message] = []
        if me == leader:
            idx_l = [topk_indices_sorted(a[j], ks[j]) for j in range(count)]
            v_l = self._concat_values([a[j][idx_l[j]] for j in range(count)])
            with torch.no_grad():
                z = ae.reference_encode(self.autoencoder(state0, n)["params"], v_l.reshape(1, 1, -1))
            lat = self._msg("latent", _f32_bytes(z), {"k": int(v_l.numel())}, shape0, dtype0)
            ip = self._msg("indices", self._multi_indices(idx_l, dims), {"k": int(v_l.numel()), "coding": coding}, shape0, dtype0)
            mine = [Message("compressed:latent", me, (), lat), Message("compressed:indices", me, (), ip)]
        got = yield self._leader_round(mine, server, leader, n)
        if me != leader:
            idx_l, _ = self._read_multi_indices(body_numpy(_only(got, "compressed:indices")), ks, dims)
        kinn = [k_of(self.settings["innovation_density"], d) for d in dims]
        pos = [topk_indices_sorted(a[j], kinn[j]) for j in range(count)]
        vals = self._concat_values([a[j][pos[j]] for j in range(count)])
        innovation = self._msg("innovation", np.concatenate([_f32_bytes(vals), self._multi_indices(pos, dims)]),
                               {"k": int(vals.numel()), "coding": coding}, shape0, dtype0)
        sent = []
        for j in range(count):
            keep = torch.zeros(dims[j], dtype=torch.bool, device=a[j].device)
            keep[idx_l[j].to(keep.device)] = True
            keep[pos[j].to(keep.device)] = True
            sent.append(torch.where(keep, a[j], 0.0))  # counted as sent for error feedback

        def serve(rows: list[list[Message]]) -> list[Message]:
            params = self.autoencoder(state0, n)["params"]
            lb = body_numpy(server["latent"])
            length = ae.reference_latent_length(offs[-1])
            if len(lb) != 4 * ae.REF_LATENT * length:
                raise PayloadError("lgc latent: body length does not match its geometry")
            z_rx = _f32_read(lb, 0, ae.REF_LATENT * length, "latent").reshape(1, ae.REF_LATENT, length)
            idx_rx, _ = self._read_multi_indices(body_numpy(server["indices"]), ks, dims)
            acc = [torch.zeros(d, dtype=torch.float32) for d in dims]
            extra_all: list[list[torch.Tensor]] = [[] for _ in range(count)]
            for w in range(n):
                ib = body_numpy(_only(rows[w], "compressed:innovation"))
                total = sum(kinn)
                v_w = _f32_read(ib, 0, total, "innovation")
                pos_rx, _ = self._read_multi_indices(ib[4 * total:], kinn, dims)
                inn_vec = torch.zeros(offs[-1], dtype=torch.float32)
                extras = []
                start = 0
                for j in range(count):
                    v_j = v_w[start:start + kinn[j]]
                    start += kinn[j]
                    where, inside = _positions_in(idx_rx[j], pos_rx[j])
                    inn_vec[offs[j] + where[inside]] = v_j[inside]
                    extras.append((pos_rx[j][~inside], v_j[~inside]))
                with torch.no_grad():
                    out = ae.reference_decode(params, w, z_rx, inn_vec.reshape(1, 1, -1)).reshape(-1)
                for j in range(count):
                    r = torch.zeros(dims[j], dtype=torch.float32)
                    r[idx_rx[j]] = out[offs[j]:offs[j + 1]]
                    r[extras[j][0]] = extras[j][1]
                    acc[j] += r
                    extra_all[j].append(extras[j][0])
            pulls = []
            for j in range(count):
                pull = self._pull(acc[j] / n, idx_rx[j], torch.unique(torch.cat(extra_all[j])), n, *geo[j])[1]
                pull.unit = units[j]
                pulls.append(pull)
            return pulls

        got = yield ToServer([Message("compressed:innovation", me, (), innovation)], "compressed:innovation", serve)
        pulls = [m.payload for m in got if m.phase == "compressed:pull"]
        if len(pulls) != count:
            raise PayloadError(f"lgc: expected the server's aggregate of each of {count} middle tensors, got {len(pulls)}")
        aggs = ctx.once(("model", "aggregate"), lambda: [self._read_pull(p, i.cpu(), d)
                                                      for p, i, d in zip(pulls, idx_l, dims, strict=True)])
        return [agg.to(t.device) for agg, t in zip(aggs, a, strict=True)], sent

    def _reference_ring(self, state0: State, ctx: Context, leader: int, a: list[torch.Tensor],
                        geo: list[tuple[tuple[int, ...], torch.dtype]],
                        units: Sequence[int]) -> Generator[Leg, Any, tuple[list[torch.Tensor], list[torch.Tensor]]]:
        """Phase 3, ring (gcbench's inference), reference preset: per middle unit the aggregate and this worker's sent part.

        The rotating leader's indices of every middle unit go round the ring (one message); every
        worker encodes its values there with the reference encoder; the latents are summed by a
        ring all-reduce and one decoder maps the mean latent (zero innovation) to the aggregate.
        (``units``: the middle units' model indices; every message here is counted in the first's.)
        """
        me, n, count = ctx.rank, ctx.world, len(geo)
        dims, ks, offs = self._concat_layout(a)
        shape0, dtype0 = geo[0]  # the whole-model messages carry the first middle unit's shape
        coding = self.settings["index_coding"]
        params = ctx.once(("model", "autoencoder"), lambda: self.autoencoder(state0, n))["params"]
        ip: Payload | None = None
        if me == leader:
            idx_l = [topk_indices_sorted(a[j], ks[j]) for j in range(count)]
            ip = self._msg("indices", self._multi_indices(idx_l, dims), {"k": int(sum(ks)), "coding": coding}, shape0, dtype0)
        ip = yield from self._ring_broadcast(ip, leader, ctx, "compressed:indices")
        idx_rx, _ = self._read_multi_indices(body_numpy(ip), ks, dims)
        # this worker's values in the group's batch (zeros elsewhere): the encoder's kernels are chosen by the batch
        # shape, and every worker's codes are those of the one batched encoding the simulation always did
        batch = torch.zeros((n, 1, offs[-1]))
        batch[me, 0] = self._concat_values([a[j][idx_rx[j].to(a[j].device)] for j in range(count)])
        with torch.no_grad():
            z = ae.reference_encode(params, batch)[me]
        total = yield from self._ring_allreduce(z.reshape(-1), ctx, "compressed:latent", dtype0)

        def decode() -> list[torch.Tensor]:
            with torch.no_grad():
                out = ae.reference_decode(params, 0, (total / n).reshape(1, *z.shape), torch.zeros((1, 1, offs[-1]))).reshape(-1)
            aggs = []
            for j in range(count):
                agg = torch.zeros(dims[j], dtype=torch.float32)
                agg[idx_rx[j]] = out[offs[j]:offs[j + 1]]
                aggs.append(agg)
            return aggs

        sent = []
        for j in range(count):
            keep = torch.zeros(dims[j], dtype=torch.bool, device=a[j].device)
            keep[idx_rx[j].to(keep.device)] = True
            sent.append(torch.where(keep, a[j], 0.0))
        return [agg.to(t.device) for agg, t in zip(ctx.once(("model", "aggregate"), decode), a, strict=True)], sent


def _others(w: int, n: int) -> tuple[int, ...]:
    """Every worker but w."""
    return tuple(r for r in range(n) if r != w)


def _noting_uploads(rounds: Generator[Leg, Any, list[torch.Tensor]], me: int, units: int) -> WorkerProtocol:
    """Pass a worker's rounds through, noting per unit the first message it sends there (its upload); its :class:`Outcome`."""
    firsts: list[Payload | None] = [None] * units
    value: Any = None
    while True:
        try:
            leg = rounds.send(value)
        except StopIteration as stop:
            return Outcome(stop.value, list(firsts))
        if isinstance(leg, Send | ToServer):
            for m in leg.messages:
                if m.sender == me and m.unit is not None and firsts[m.unit] is None:
                    firsts[m.unit] = m.payload
        value = yield leg


def _only(msgs: Sequence[Message], phase: str) -> Payload:
    """The one message of ``phase`` among ``msgs`` (a peer or server that sent none, or several, broke the protocol)."""
    found = [m.payload for m in msgs if m.phase == phase]
    if len(found) != 1:
        raise PayloadError(f"lgc: expected one {phase!r} message, got {len(found)}")
    return found[0]


def _by_sender(me: int, own: Payload, got: Sequence[Message], n: int, phase: str) -> list[Payload]:
    """Per worker, its ``phase`` message: this worker's own, the others' as received."""
    return [own if w == me else _only([m for m in got if m.sender == w], phase) for w in range(n)]


def _positions_in(sorted_idx: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each of ``pos``: its position in ascending ``sorted_idx`` and whether it is there."""
    sorted_idx = sorted_idx.cpu()
    pos = pos.cpu()
    where = torch.searchsorted(sorted_idx, pos).clamp(max=max(sorted_idx.numel() - 1, 0))
    inside = sorted_idx[where] == pos if sorted_idx.numel() else torch.zeros(pos.shape, dtype=torch.bool)
    return where, inside


# ----------------------------------------------------------------------------- run summaries


def phase_summary(results: Sequence[ExchangeResult], numel: int) -> dict[str, Any]:
    """Per-phase and amortised compression ratios of a run of LGC exchanges (one tensor or unit).

    ``results`` are the per-step results, in order; ``numel`` the tensor's element count.  Per
    LGC phase: steps, mean bytes a worker sent and received per step, ``ratio`` = dense fp32
    bytes / bytes a worker sent per step (the runner's convention), and ``body_ratio`` the same
    with payload bodies only (headers excluded, as papers count).  ``setup`` holds one-time
    bytes (the PS encoder transfer, received by the leader).  ``overall`` amortises everything
    over the run, with the one-time bytes added to the receiving worker's traffic.
    """
    if not results:
        raise ValueError("phase_summary needs at least one exchange result")
    out: dict[str, Any] = {}
    per_phase: dict[str, list[tuple[float, float, float]]] = {}
    setup_received = 0
    total_sent = total_recv = 0.0
    workers = 1 + max((r.worker for res in results for r in res.traffic.records), default=0)
    for res in results:
        names = res.traffic.phases()
        step_phase = getattr(res, "phase", None) or next((nm.split(":")[0] for nm in names if not nm.startswith("setup")), "dense")
        steady = [nm for nm in names if not nm.startswith("setup")]
        sent = sum(res.traffic.sent(phase=nm) for nm in steady) / workers
        body = sum(res.traffic.sent_body(phase=nm) or 0 for nm in steady) / workers
        recv = sum(res.traffic.received(phase=nm) for nm in steady) / workers
        one_time = sum(res.traffic.received(phase=nm) for nm in names if nm.startswith("setup"))
        setup_received += one_time
        per_phase.setdefault(step_phase, []).append((sent, recv, body))
        total_sent += sent
        total_recv += recv + one_time / workers
    dense = dense_bytes(numel)
    for ph in PHASES:
        rows = per_phase.get(ph)
        if not rows:
            continue
        sent_mean = float(np.mean([r[0] for r in rows]))
        body_mean = float(np.mean([r[2] for r in rows]))
        out[ph] = {"steps": len(rows), "sent_per_worker": sent_mean, "received_per_worker": float(np.mean([r[1] for r in rows])),
                   "body_per_worker": body_mean, "ratio": dense / sent_mean if sent_mean > 0 else None,
                   "body_ratio": dense / body_mean if body_mean > 0 else None}
    steps = len(results)
    out["setup"] = {"received_total": setup_received}
    out["overall"] = {"steps": steps, "sent_per_worker": total_sent / steps, "received_per_worker": total_recv / steps,
                      "ratio": dense * steps / total_sent if total_sent > 0 else None}
    return out
