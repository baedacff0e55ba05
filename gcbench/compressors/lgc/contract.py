"""The LGC compressor: its contract (the single-tensor codec), its schedule (phases and leader) and its autoencoder record.

Each step's exchange is delegated to the preset's strategy (gcbench/compressors/lgc/preset.py):
``preset="gcbench"`` (gcbench/compressors/lgc/gcbench_preset.py) or ``preset="reference"``
(gcbench/compressors/lgc/reference_preset.py).  The package docstring
(gcbench/compressors/lgc/__init__.py) gives the sources of every detail.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from gcbench.compressors._common import dense_from_sparse, k_of, sparse_body_nbytes
from gcbench.compressors.cards.lgc import LGC_CARD, PRESETS
from gcbench.compressors.lgc import autoencoder as ae
from gcbench.compressors.lgc.gcbench_preset import GcbenchPreset
from gcbench.compressors.lgc.index_sets import topk_indices_sorted
from gcbench.compressors.lgc.preset import Preset
from gcbench.compressors.lgc.reference_preset import ReferencePreset
from gcbench.compressors.lgc.result import LGCExchangeResult
from gcbench.compressors.lgc.rounds import noting_uploads
from gcbench.compressors.lgc.windows import Windows
from gcbench.compressors.lgc.wire import f32_bytes, f32_read, refuse_kind, sparse
from gcbench.core import codec_torch
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, ExchangeResult, State, Traffic
from gcbench.core.errors import ParamError, PayloadError
from gcbench.core.header import body_tensor, meta_int, meta_keys, meta_str
from gcbench.core.params import INDEX_CODINGS
from gcbench.core.payload import MetaValue, Payload
from gcbench.core.protocol import Context, Leg, Message, WorkerProtocol, count_messages

PHASES: tuple[str, ...] = ("dense", "topk", "compressed")
_STATE_KEY = "lgc"
#: the presets' strategies, by the value of the ``preset`` parameter
PRESET_TYPES: dict[str, type[Preset]] = {p.name: p for p in (GcbenchPreset, ReferencePreset)}


def parse_channels(text: str) -> tuple[int, ...]:
    """The widths of ``channels``: ``/``-separated as the card writes them (commas, as earlier results files hold them, too)."""
    try:
        widths = tuple(int(t) for t in text.replace(",", "/").split("/"))
    except ValueError:
        raise ParamError(f"lgc.channels: must be positive integers like 64/128/256/64, got {text!r}") from None
    if not 1 <= len(widths) <= 8 or any(w < 1 for w in widths):
        raise ParamError(f"lgc.channels: 1 to 8 positive layer widths (each halves the length), got {text!r}")
    return widths


def _place(rec: dict[str, Any], device: torch.device) -> None:
    """Move an autoencoder record's weights and Adam moments to ``device`` (nothing when they are there already)."""
    params: dict[str, torch.Tensor] = rec["params"]
    if not params or next(iter(params.values())).device == device:
        return
    rec["params"] = {nm: p.to(device) for nm, p in params.items()}
    adam = rec["adam"]
    for key in ("exp_avg", "exp_avg_sq"):
        if key in adam:
            adam[key] = {nm: m.to(device) for nm, m in adam[key].items()}


class LGC(Compressor):
    """Learned Gradient Compression (Abrahamyan et al., IEEE TNNLS 2021), RECONSTRUCTED: dense, then top-k with error
    feedback while an autoencoder trains, then a leader's latent and per-worker innovations (ps) or ring-summed latents."""

    info = LGC_CARD

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        preset = PRESETS[str(self.params["preset"])]
        # the effective value of every parameter: ``self.params`` keeps what was asked (``None`` = the preset's)
        self.settings: MappingProxyType[str, Any] = MappingProxyType(
            {k: (preset[k] if v is None and k in preset else v) for k, v in self.params.items()})
        self.channels = parse_channels(str(self.settings["channels"]))
        self.fold = ae.fold_of(self.channels)
        if int(self.settings["window"]) < self.fold:
            raise ParamError(f"lgc.window: must be at least {self.fold} (2^layers) so one window fills the encoder, "
                             f"got {self.settings['window']}")
        #: the preset's strategy: its parameter rules, its autoencoder, and how it runs a step
        self.preset: Preset = PRESET_TYPES[str(self.settings["preset"])](self)
        self.preset.check()

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
        params = self.preset.init_params(ae_seed, workers)
        opt = ae.adam_init(params) if self.settings["optimizer"] == "adam" else {}
        # seed/draws: the reference preset's random choice of the latent all decoders train from
        return {"params": params, "adam": opt, "train_updates": 0, "encoder_at_leader": False, "seed": ae_seed, "draws": 0}

    def autoencoder(self, state0: State, workers: int = 1, device: torch.device | None = None) -> dict[str, Any]:
        """The shared autoencoder of a tensor (or of the model), created on first use in worker 0's state.

        With ``device`` its weights and optimizer moments move there first (once: the gradients' device), so it
        trains and runs where the gradients are.
        """
        rec = state0.values.get(_STATE_KEY)
        if rec is None:
            rec = state0.values[_STATE_KEY] = self.init_autoencoder(state0.seed, workers)
        if device is not None:
            _place(rec, torch.device(device))
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
            body = f32_bytes(a)  # a copy, not a view of a: a becomes the residual
            meta, decoded = {"kind": "dense"}, a.clone()
        else:
            flat = a.reshape(-1)
            d = flat.numel()
            k = self.k_of(d)
            idx = topk_indices_sorted(flat, k)
            vals = flat[idx]
            coding = self.settings["index_coding"]
            body = sparse(vals, idx, d, coding)
            meta, decoded = {"kind": "topk", "k": k, "coding": coding}, dense_from_sparse(vals, idx, d)
        ctx.keep_residual(a, decoded)
        return body, meta, decoded

    def _expected_body_nbytes(self, payload: Payload) -> int | tuple[int, int]:
        kind = meta_str(payload, "kind")
        if kind == "dense":
            meta_keys(payload, "kind")
            return 4 * payload.numel
        if kind == "topk":
            return sparse_body_nbytes(payload, INDEX_CODINGS, "kind")
        refuse_kind(kind)

    def _decode(self, payload: Payload) -> torch.Tensor:
        kind = meta_str(payload, "kind")
        if kind == "dense":
            body = body_tensor(payload)
            if body.numel() != 4 * payload.numel:
                raise PayloadError(f"lgc dense body has {body.numel()} bytes, expected {4 * payload.numel}")
            return f32_read(body, 0, payload.numel, "dense")
        if kind == "topk":  # on the body's device; one scalar read, the codec's folded validity check
            d = payload.numel
            vals, idx = codec_torch.decode_sparse(body_tensor(payload), d, meta_int(payload, "k", 0, d), meta_str(payload, "coding"))
            return dense_from_sparse(vals, idx, d)
        refuse_kind(kind)

    # ------------------------------------------------------------------ exchange

    def exchange(self, grads: Sequence[torch.Tensor], states: Sequence[State]) -> LGCExchangeResult:
        """One step of LGC across N workers for one tensor: :meth:`worker_protocol` on the simulated transport.

        With ``preset="reference"`` the tensor is a whole model of one tensor (:meth:`exchange_group`).
        """
        return self.preset.exchange(grads, states)

    @property
    def needs_whole_model(self) -> bool:
        """``preset="reference"`` exchanges the whole model at once (one autoencoder over every middle tensor's top-k values)."""
        return self.preset.whole_model

    def worker_protocol(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> WorkerProtocol:
        """One worker's side of LGC (the package docstring, gcbench/compressors/lgc/__init__.py, gives the protocols).

        ``preset="gcbench"``: unit after unit.  ``preset="reference"``: ``xs`` is the whole model,
        its tensors in model order (:attr:`needs_whole_model`; the first unit's state holds the
        model's autoencoder).  The parameter server is hosted by rank 0, which is also the ps
        leader: the autoencoder lives in rank 0's state, where the server trains and uses it.
        Ring mode trains one replica per worker on the same all-gathered data (the simulated
        transport trains one for the group, :meth:`Context.once`), so the replicas must start
        alike: the card's protocol says ``shared_seed``.  Every message says the unit whose result
        counts it (:func:`~gcbench.core.protocol.counted_in`).
        """
        return (yield from noting_uploads(self.preset.rounds(xs, states, ctx), ctx.rank, len(xs)))

    def exchange_group(self, grads: Sequence[Sequence[torch.Tensor]], states: Sequence[Sequence[State]]) -> list[ExchangeResult]:
        """One step for every unit, as the preset's strategy runs it: ``preset="gcbench"`` each tensor on its own
        (:meth:`exchange`), ``preset="reference"`` the whole model at once
        (:meth:`gcbench.compressors.lgc.reference_preset.ReferencePreset.exchange_group` says how)."""
        return self.preset.exchange_group(grads, states)

    def _result(self, agg: torch.Tensor, msgs: list[Message], n: int, phase: str, leader: int, used: bool) -> LGCExchangeResult:
        traffic = Traffic()
        for ph, counted in count_messages(msgs, n):
            for w, c in enumerate(counted):
                traffic.add(ph, w, c.sent, c.received, c.sent_body)
        first: list[Payload] = []
        empty = Payload(self.name, self.info.version, agg.dtype, (0,), torch.zeros(0, dtype=torch.uint8, device=agg.device),
                        {"kind": "dense"})
        for w in range(n):  # what each worker sent first this step (its upload)
            own = [m.payload for m in msgs if m.sender == w]
            first.append(own[0] if own else empty)
        return LGCExchangeResult(agg, traffic, first, phase=phase, leader=leader, uses_autoencoder=used, messages=msgs)

    def _ring_allreduce(self, v: torch.Tensor, ctx: Context, phase: str, dtype: torch.dtype) -> Generator[Leg, Any, torch.Tensor]:
        """The sum over the workers of ``v`` by a ring all-reduce of fp32 chunk payloads (:meth:`Rounds._ring_allreduce`)."""
        return self.preset._ring_allreduce(v, ctx, phase, dtype)

    @torch.enable_grad()  # a DDP hook runs inside the backward pass, where gradient recording is off
    def optimise(self, rec: dict[str, Any], loss_of: Callable[[dict[str, torch.Tensor]], torch.Tensor]) -> None:
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
