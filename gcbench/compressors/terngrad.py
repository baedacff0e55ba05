"""TernGrad — Wen et al. 2017 (checked against the authors' code).

``σ = std(x)``; clip to ``[−c·σ, c·σ]`` (c = 2.5; c = 0 disables; skipped when σ = 0, since a
constant tensor has no outliers and clipping would erase it); ``s = max|xc|``;
``b_i ~ Bernoulli(|xc_i| / s)``; send ``t_i = sign(x_i)·b_i`` as 2-bit codes plus ``s``:
2·d + 32 bits.  E‖s·t − xc‖² = s‖xc‖₁ − ‖xc‖².

Bias: E[C(x)] = xc = clip(x), so TernGrad is unbiased with respect to the *clipped* gradient and
**biased with respect to x** whenever clipping bites, which with the default c = 2.5 is nearly
every real tensor (any entry beyond 2.5σ: a Gaussian tensor of a thousand elements has about a
dozen).  The registry therefore declares it biased, unbiased only with ``clip = 0``
(``unbiased_when``), and ``gcbench list`` and results records show the flag of the configuration
used.  The metrics measure bias² against x, as for every compressor, so the clipping bias is in
bias² and q; no ω̂ is reported for a biased configuration (ω̂ = q would hide the bias).

Multi-worker (:meth:`TernGrad.worker_protocol`): scaler sharing — every worker sends its s_i (one
float), all use s = max_i s_i, then the ternary payloads are all-gathered.

Random numbers: each compression draws one 64-bit key from the state's generator and the
Bernoulli draw of element i compares the i-th counter-based uniform of that key (SplitMix64,
:mod:`gcbench.kernels`) with |xc_i|/s.  The CPU kernel draws, ternarizes and packs the 2-bit codes
in one pass after one statistics pass (σ and max|x| together); the same definition in plain
torch (:func:`terngrad_reference`, also the path on other devices) draws the same uniforms.
The torch path keeps σ, the clip bound and s as 0-dim tensors on the input's device and packs the
codes there (:mod:`gcbench.core.codec_torch`), so it reads nothing back to the host, scaler sharing included.
Version 2: the uniforms come from this generator (version 1 drew them from the state's PCG64).
σ is the population standard deviation accumulated in float64; the clip bound c·σ is rounded
once to float32, the data's precision.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors.cards.terngrad import TERNGRAD_CARD
from gcbench.core import codec, codec_torch
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_numpy, body_tensor, meta_keys
from gcbench.core.payload import Payload
from gcbench.core.protocol import AllGather, AllReduce, Context, Outcome, WorkerProtocol


def clip_bound_and_scale(x: torch.Tensor, clip: float) -> tuple[float, float]:
    """(clip bound cb, layer scaler s = max|clamp(x, −cb, cb)|), both float32-exact.

    cb = float32(clip·σ) with σ the population std in float64; ``inf`` when clipping is off
    (clip = 0, a single element, or σ = 0: a constant tensor has no outliers).  Then
    s = min(max|x|, cb), which is exactly max|xc|.
    """
    flat = x.reshape(-1)
    if flat.numel() == 0:
        return float("inf"), 0.0
    if kernels.cpu_fast(flat):
        sigma, amax = kernels.std_and_absmax(kernels.flat_f32(flat))
    else:
        sigma = float(flat.double().std(correction=0))
        amax = float(flat.abs().max())
    with np.errstate(over="ignore"):  # a bound beyond float32's max is +inf: nothing is clipped, as with the exact bound
        cb = float(np.float32(clip * sigma)) if clip > 0 and flat.numel() > 1 and sigma > 0 else float("inf")
    return cb, float(np.float32(min(amax, cb)))


def bound_and_scale_torch(flat: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`clip_bound_and_scale` as float32 0-dim tensors on ``flat``'s device (no host read): σ in float64,
    cb = float32(clip·σ) (``inf`` when clipping is off or σ is not positive), s = min(max|x|, cb)."""
    inf = torch.full((), float("inf"), dtype=torch.float32, device=flat.device)
    if flat.numel() == 0:
        return inf, torch.zeros((), dtype=torch.float32, device=flat.device)
    amax = flat.abs().max().float()
    if clip > 0 and flat.numel() > 1:
        sigma = flat.double().std(correction=0)
        cb = torch.where(sigma > 0, (sigma * clip).to(torch.float32), inf)  # beyond float32's max: +inf, nothing clipped
    else:
        cb = inf
    return cb, torch.minimum(amax, cb)


def clip_and_scale(x: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(clipped tensor, layer scaler s = max|xc|, a float32 0-dim tensor) — the torch form of :func:`clip_bound_and_scale`."""
    flat = x.reshape(-1)
    cb, s = bound_and_scale_torch(flat, clip)
    return flat.clamp(-cb, cb), s


def terngrad_torch(a: torch.Tensor, clip: float, seed: int,
                   scaler: torch.Tensor | float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(body, decoded) of TernGrad in plain torch with the kernels' uniforms, on ``a``'s device (no host reads)."""
    xc, s = clip_and_scale(a, clip)
    s32 = s if scaler is None else torch.as_tensor(scaler, dtype=torch.float32).to(xc.device).reshape(())
    # divided by the scaler as a tensor: exact on every device (a Python divisor is a reciprocal multiply on a GPU)
    keep = (kernels.uniforms(seed, xc.numel(), xc.device) < xc.abs() / s32) & (s32 > 0)
    code = torch.where(keep, torch.where(xc >= 0, 1, 2), 0).to(torch.uint8)
    body = torch.cat([codec_torch.pack_bits(code, 2), s32.reshape(1).view(torch.uint8)])
    zero = torch.zeros((), dtype=torch.float32, device=xc.device)
    return body, torch.where(keep, torch.where(xc >= 0, s32, -s32), zero)


def ternary_values(codes: torch.Tensor, s32: torch.Tensor) -> torch.Tensor:
    """s·t of 2-bit codes (0 → 0, 1 → +1, 2 → −1, 3 → 0), as the table lookup times s (0·s included)."""
    t = (codes == 1).to(torch.float32) - (codes == 2).to(torch.float32)
    return t * s32


def terngrad_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """Decoded TernGrad of ``x32`` by the plain torch definition (draws the key like ``compress``)."""
    return terngrad_torch(x32, comp.params["clip"], state.randint64())[1]


class TernGrad(Compressor):
    """TernGrad (Wen et al. 2017): each entry stochastically ternarized to {-s, 0, s} after clipping at
    c·σ; 2 bits per entry plus the scaler s."""

    info = TERNGRAD_CARD
    reference = terngrad_reference

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext = EncodeContext(),
                scaler: torch.Tensor | None = None) -> Encoded:
        """The hook, and the protocol's encode with the group's shared ``scaler``."""
        seed = state.randint64()
        if not kernels.cpu_fast(a):
            return terngrad_torch(a, self.params["clip"], seed, scaler)[0], {}, None
        x = kernels.flat_f32(a)
        cb, s = clip_bound_and_scale(a, self.params["clip"])
        s32 = np.float32(s if scaler is None else float(scaler))
        nb = codec.packed_nbytes(x.size, 2)
        body = np.empty(nb + 4, np.uint8)
        if s32 > 0:
            kernels.terngrad_codes(x, cb, float(s32), seed, body[:nb])
        else:
            body[:nb] = 0
        body[nb:] = np.array([s32], "<f4").view(np.uint8)
        return body, {}, None

    def _expected_body_nbytes(self, payload: Payload) -> int:
        meta_keys(payload)
        return codec.packed_nbytes(payload.numel, 2) + 4  # 2-bit codes, float32 scaler

    def _decode(self, payload: Payload) -> torch.Tensor:
        d = payload.numel
        nb = codec.packed_nbytes(d, 2)
        if payload.data.numel() != nb + 4:
            raise PayloadError(f"terngrad body has {payload.data.numel()} bytes, expected {nb + 4}")
        if not (kernels.available() and payload.data.device.type == "cpu"):
            body_t = body_tensor(payload)
            return ternary_values(codec_torch.unpack_bits(body_t[:nb], 2, d), body_t[nb:].clone().view(torch.float32).reshape(()))
        body = body_numpy(payload)
        out = kernels.empty(d)
        kernels.terngrad_decode(body[:nb], float(body[nb:].view("<f4")[0]), out.numpy())
        return out

    @staticmethod
    def _scaler(x: torch.Tensor, clip: float) -> torch.Tensor:
        """This worker's scaler s as a float32 0-dim tensor: computed on the host by the kernels, or on ``x``'s device."""
        if kernels.cpu_fast(x):
            return torch.tensor(clip_bound_and_scale(x, clip)[1], dtype=torch.float32)
        return bound_and_scale_torch(x.reshape(-1), clip)[1]

    def worker_protocol(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> WorkerProtocol:
        """Scaler sharing: all-reduce (MAX) every unit's scaler ``s_w`` (phase ``scaler``, 4 bytes per unit), quantize
        with the shared ``s = max_w s_w``, all-gather the ternary payloads, decode all and average.

        Without ``share_scaler``, for one worker, or for an empty unit (no scaler, empty bodies), the default protocol.
        """
        if not self.params["share_scaler"] or ctx.world == 1 or any(x.numel() == 0 for x in xs):
            return (yield from super().worker_protocol(xs, states, ctx))
        clip = self.params["clip"]
        own = torch.stack([self._scaler(x.detach().float(), clip) for x in xs]).to(xs[0].device)
        (shared,) = yield AllReduce([own], "scaler", op="max", count="once")
        payloads = []
        for x, st, s in zip(xs, states, shared.unbind(), strict=True):
            body, meta, _ = self._encode(x.detach().float(), st, EncodeContext(need_decoded=False), scaler=s)
            st.step += 1
            payloads.append(self._payload(x, body, meta))
        gathered = yield AllGather(payloads, "allgather")

        def decode_all() -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
            decoded = [[self.decode_received(row[u], x.shape).to(x.device) for row in gathered] for u, x in enumerate(xs)]
            means = []
            for x, dec in zip(xs, decoded, strict=True):
                acc = torch.zeros(x.numel(), dtype=torch.float32, device=x.device)
                for d in dec:
                    acc += d.reshape(-1)
                means.append((acc / ctx.world).reshape(x.shape))
            return means, decoded

        means, decoded = ctx.once("mean", decode_all)
        return Outcome(means, payloads, decoded)
