"""TernGrad — Wen et al. 2017 (checked against the authors' code).

``σ = std(x)``; clip to ``[−c·σ, c·σ]`` (c = 2.5; c = 0 disables; skipped when σ = 0, since a
constant tensor has no outliers and clipping would erase it); ``s = max|xc|``;
``b_i ~ Bernoulli(|xc_i| / s)``; send ``t_i = sign(x_i)·b_i`` as 2-bit codes plus ``s``:
2·d + 32 bits.  Unbiased with respect to the clipped gradient; E‖s·t − xc‖² = s‖xc‖₁ − ‖xc‖².

Multi-worker (:meth:`TernGrad.exchange`): scaler sharing — every worker sends its s_i (one
float), all use s = max_i s_i, then the ternary payloads are all-gathered.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gcbench import codec
from gcbench.compressor import Compressor, ExchangeResult, State, Traffic, body_numpy
from gcbench.compressors._common import to_numpy
from gcbench.errors import PayloadError
from gcbench.payload import Payload
from gcbench.registry import Param, register

# 2-bit codes: 0 -> 0, 1 -> +1, 2 -> -1
_DECODE = torch.tensor([0.0, 1.0, -1.0, 0.0])


def clip_and_scale(x: torch.Tensor, clip: float) -> tuple[torch.Tensor, float]:
    """(clipped tensor, layer scaler s = max|xc|)."""
    flat = x.reshape(-1)
    if clip > 0 and flat.numel() > 1:
        sigma = float(torch.std(flat, correction=0))
        if sigma > 0:
            flat = flat.clamp(-clip * sigma, clip * sigma)
    s = float(flat.abs().max()) if flat.numel() else 0.0
    return flat, s


@register(
    name="terngrad",
    version=1,
    description="stochastic ternary {-s, 0, +s} with 2.5σ clipping, 2 bits/element + one float",
    paper="Wen et al. 2017, TernGrad: Ternary Gradients to Reduce Communication in Distributed Deep Learning",
    biased=False,
    stateful=False,
    deterministic=False,
    exchange="scaler sharing: s = max over workers (one extra float each)",
    params=(
        Param("clip", float, 2.5, "clip at clip·std before ternarizing (0 disables)", low=0.0),
        Param("share_scaler", bool, True, "in the multi-worker exchange, share s = max of the workers' scalers"),
    ),
)
class TernGrad(Compressor):
    def _encode(self, a: torch.Tensor, state: State, scaler: float | None = None):
        xc, s = clip_and_scale(a, self.params["clip"])
        if scaler is not None:
            s = scaler
        s32 = float(np.float32(s))
        if s32 > 0:
            u = state.uniform(xc.numel(), xc.device)
            keep = u < xc.abs() / s32
        else:
            keep = torch.zeros(xc.shape, dtype=torch.bool, device=xc.device)
        code = torch.where(keep, torch.where(xc >= 0, 1, 2), 0).to(torch.uint8)
        body = np.concatenate([codec.pack_bits(to_numpy(code), 2), np.array([s32], "<f4").view(np.uint8)])
        decoded = torch.where(keep, torch.where(xc >= 0, s32, -s32), 0.0)
        return body, {}, decoded

    def _decode(self, payload: Payload) -> torch.Tensor:
        d = payload.numel
        body = body_numpy(payload)
        nb = codec.packed_nbytes(d, 2)
        if len(body) != nb + 4:
            raise PayloadError(f"terngrad body has {len(body)} bytes, expected {nb + 4}")
        codes = torch.from_numpy(codec.unpack_bits(body[:nb], 2, d))
        s = float(body[nb:].view("<f4")[0])
        return _DECODE[codes] * s

    def exchange(self, grads: Sequence[torch.Tensor], states: Sequence[State]) -> ExchangeResult:
        if not self.params["share_scaler"] or len(grads) == 1 or grads[0].numel() == 0:  # empty: no scaler, empty bodies
            return super().exchange(grads, states)
        n = len(grads)
        scalers = [clip_and_scale(g.detach().float(), self.params["clip"])[1] for g in grads]
        shared = max(scalers)
        traffic = Traffic()
        for w in range(n):
            traffic.add("scaler", w, 4, 4 * (n - 1))
        payloads = []
        acc = torch.zeros(grads[0].numel(), dtype=torch.float32)
        for g, st in zip(grads, states, strict=True):
            body, meta, dec = self._encode(g.detach().float(), st, scaler=shared)
            st.step += 1
            payloads.append(self._payload(g, body, meta))
            acc += dec
        total = sum(p.nbytes for p in payloads)
        for w, p in enumerate(payloads):
            traffic.add("allgather", w, p.nbytes, total - p.nbytes)
        return ExchangeResult((acc / n).reshape(grads[0].shape).to(grads[0].dtype), traffic, payloads)
