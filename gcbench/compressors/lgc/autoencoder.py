"""The 1-D convolutional autoencoders of LGC (Abrahamyan et al., IEEE TNNLS 2021), RECONSTRUCTED.

No official code of Learned Gradient Compression is public and the paper's body was not available.
What is public: the abstracts of the TNNLS paper and of its EUSIPCO precursor (an autoencoder
learned during training compresses the workers' gradients, exploiting the redundancy between
them: one leader's code plus a per-worker innovation), and a third-party re-implementation whose
docstrings cite the TNNLS DOI (10.1109/TNNLS.2021.3084806).  Two architectures live here:

**gcbench's design** (``preset="gcbench"``; :func:`init_params`, :func:`encode`, :func:`decode`) —
the encoder is the re-implementation's; the rest is gcbench's own choice:

* encoder (from the re-implementation, with padding added by gcbench): ``Conv1d`` layers
  1→64→128→256→64 (kernel 3, stride 2, LeakyReLU 0.01), then ``Conv1d`` 64→4 (kernel 1).
  gcbench pads every stride-2 layer by 1 and applies no activation after the head, so a window of
  ``L`` values (``L`` a multiple of ``fold = 2**layers`` = 16) becomes a ``4 × L/16`` latent.
* decoder (gcbench's choice): the encoder's mirror with ``ConvTranspose1d`` — 4(+fold)→64
  (kernel 1), then 64→256→128→64→1 (kernel 3, stride 2, padding 1, output padding 1, LeakyReLU
  between layers, none at the end).  The worker's *innovation* (a length-``L`` vector, zero except
  at a few positions) is folded space-to-depth into ``fold`` channels at the latent's resolution
  (channel c at position p holds value p·fold + c) and concatenated to the latent; where it is
  nonzero the output keeps it exactly (the values were sent).  One decoder is shared by all
  workers, or (``decoders > 1``) there is one per worker, named ``w<i>.dec…``.

**The re-implementation's architecture** (``preset="reference"``; :func:`init_reference_params`,
:func:`reference_encode`, :func:`reference_decode`), followed layer for layer:

* encoder: ``Conv1d`` 1→64→128→256→64 (kernel 3, stride 2, no padding, LeakyReLU), ``Conv1d``
  64→4 (kernel 1) with a LeakyReLU after it; a length-K input gives a ``4 × L4`` latent,
  ``L_{i+1} = floor((L_i − 3)/2) + 1`` (about K/4 floats).
* one decoder per worker: ``ConvTranspose1d`` 4→32→64→128→32 (kernel 3, stride 2, no padding,
  LeakyReLU after each), nearest-neighbour interpolation to length K, the worker's innovation
  (length K) concatenated as a 33rd channel, and ``Conv1d`` 33→1 (kernel 1).  No exact overwrite.
* initial weights: PyTorch's default initialisation of those layers, drawn from a seeded
  generator (the re-implementation draws them from the global seed).

Both are kept *functionally* — a plain ``dict[str, Tensor]`` of weights and plain optimizer state —
so they live in :attr:`gcbench.core.compressor.State.values`, deep-copy with the state and survive
``state_dict()``/``load_state_dict()`` bit for bit.  :func:`reference_modules` and
:func:`reference_arch_modules` build the same networks from ``torch.nn`` layers (the tests check
the functional forwards against them); :func:`adam_step` follows ``torch.optim.Adam``'s
single-tensor update exactly and :func:`sgd_step` ``torch.optim.SGD``'s plain one (also tested).

Everything runs on the CPU in float32, in a deterministic order (no global random state is used:
initial weights come from seeded generators).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

NEG_SLOPE = 0.01  # LeakyReLU's default slope
DEFAULT_CHANNELS: tuple[int, ...] = (64, 128, 256, 64)
DEFAULT_LATENT = 4


def fold_of(channels: tuple[int, ...]) -> int:
    """Length reduction of the encoder: 2 per stride-2 layer."""
    return 2 ** len(channels)


def _encoder_layers(channels: tuple[int, ...], latent: int) -> list[tuple[str, int, int, int]]:
    """(name, in, out, kernel) of every encoder convolution."""
    widths = (1, *channels)
    layers = [(f"enc{i}", widths[i], widths[i + 1], 3) for i in range(len(channels))]
    layers.append(("enc_head", channels[-1], latent, 1))
    return layers


def _decoder_layers(channels: tuple[int, ...], latent: int) -> list[tuple[str, int, int, int]]:
    """(name, in, out, kernel) of every decoder transposed convolution (the encoder's mirror)."""
    fold = fold_of(channels)
    widths = (1, *channels)
    layers = [("dec_head", latent + fold, channels[-1], 1)]
    for i in reversed(range(len(channels))):  # encoder layer i maps widths[i] -> widths[i+1]
        layers.append((f"dec{i}", widths[i + 1], widths[i], 3))
    return layers


def init_params(seed: int, channels: tuple[int, ...] = DEFAULT_CHANNELS, latent: int = DEFAULT_LATENT,
                decoders: int = 1) -> dict[str, torch.Tensor]:
    """Seeded initial weights: U(−b, b) with b = 1/sqrt(in·kernel), for weights and biases.

    This is PyTorch's default bound for convolutions (``kaiming_uniform_(a=√5)``) computed from
    the layer's input fan, for both kinds of layer (gcbench's choice).  ``decoders > 1`` gives one
    decoder per worker, its tensors prefixed ``w<i>.`` (see :func:`decoder_view`); the first
    decoder draws the same numbers as the shared one.
    """
    g = torch.Generator().manual_seed(int(seed) % (2**63))
    params: dict[str, torch.Tensor] = {}
    for name, cin, cout, k in _encoder_layers(channels, latent):
        b = 1.0 / math.sqrt(cin * k)
        params[f"{name}.weight"] = (torch.rand((cout, cin, k), generator=g) * 2 - 1) * b
        params[f"{name}.bias"] = (torch.rand((cout,), generator=g) * 2 - 1) * b
    for i in range(decoders):
        prefix = f"w{i}." if decoders > 1 else ""
        for name, cin, cout, k in _decoder_layers(channels, latent):
            b = 1.0 / math.sqrt(cin * k)
            params[f"{prefix}{name}.weight"] = (torch.rand((cin, cout, k), generator=g) * 2 - 1) * b  # ConvTranspose1d layout
            params[f"{prefix}{name}.bias"] = (torch.rand((cout,), generator=g) * 2 - 1) * b
    return params


def decoder_count(params: dict[str, torch.Tensor]) -> int:
    """1 for a shared decoder, else the number of per-worker decoders (``w<i>.`` prefixes)."""
    return sum(1 for n in params if n.startswith("w") and n.endswith(".dec_head.weight")) or 1


def decoder_view(params: dict[str, torch.Tensor], worker: int) -> dict[str, torch.Tensor]:
    """The encoder plus worker ``worker``'s decoder under the shared names (the same tensors, not copies)."""
    if decoder_count(params) == 1 and "dec_head.weight" in params:
        return params
    prefix = f"w{worker}."
    view = {n: p for n, p in params.items() if n.startswith("enc")}
    view.update({n[len(prefix):]: p for n, p in params.items() if n.startswith(prefix)})
    return view


def encoder_names(params: dict[str, torch.Tensor]) -> list[str]:
    """Names of the encoder's tensors, in a fixed order (what a leader must hold)."""
    return [n for n in params if n.startswith(("enc", "ref_enc"))]


def count_layers(params: dict[str, torch.Tensor]) -> int:
    """Number of stride-2 encoder layers of a parameter dict."""
    return sum(1 for n in params if n.startswith("enc") and n.endswith(".weight") and n != "enc_head.weight")


def encode(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Encoder: (B, 1, L) → (B, latent, L/fold)."""
    h = x
    for i in range(count_layers(params)):
        h = F.leaky_relu(F.conv1d(h, params[f"enc{i}.weight"], params[f"enc{i}.bias"], stride=2, padding=1), NEG_SLOPE)
    return F.conv1d(h, params["enc_head.weight"], params["enc_head.bias"])


def fold_innovation(innovation: torch.Tensor, fold: int) -> torch.Tensor:
    """(B, 1, L) → (B, fold, L/fold), channel c at position p holding value p·fold + c."""
    b, _, length = innovation.shape
    return innovation.reshape(b, length // fold, fold).transpose(1, 2)


def decode(params: dict[str, torch.Tensor], z: torch.Tensor, innovation: torch.Tensor, innovation_mask: torch.Tensor) -> torch.Tensor:
    """Decoder: latent (B, latent, L/fold) and innovation (B, 1, L) → (B, 1, L).

    ``innovation_mask`` (bool, like ``innovation``) marks the positions whose exact values were
    sent; the output keeps them.
    """
    layers = count_layers(params)
    fold = 2**layers
    h = torch.cat([z, fold_innovation(innovation, fold)], dim=1)
    h = F.leaky_relu(F.conv_transpose1d(h, params["dec_head.weight"], params["dec_head.bias"]), NEG_SLOPE)
    for j, i in enumerate(reversed(range(layers))):
        h = F.conv_transpose1d(h, params[f"dec{i}.weight"], params[f"dec{i}.bias"], stride=2, padding=1, output_padding=1)
        if j < layers - 1:
            h = F.leaky_relu(h, NEG_SLOPE)
    return torch.where(innovation_mask, innovation, h)


def reference_modules(params: dict[str, torch.Tensor]) -> tuple[nn.Module, nn.Module]:
    """The same encoder and decoder body as ``torch.nn`` modules loaded with ``params``.

    The decoder module maps the concatenated (latent, folded innovation) input to the output
    before the exact-innovation overwrite.  Used by the tests as the architecture's reference.
    """
    layers = count_layers(params)
    enc: list[nn.Module] = []
    for i in range(layers):
        w = params[f"enc{i}.weight"]
        conv = nn.Conv1d(w.shape[1], w.shape[0], 3, stride=2, padding=1)
        conv.weight.data.copy_(w)
        conv.bias.data.copy_(params[f"enc{i}.bias"])  # type: ignore[union-attr]  # built with a bias
        enc += [conv, nn.LeakyReLU(NEG_SLOPE)]
    w = params["enc_head.weight"]
    head = nn.Conv1d(w.shape[1], w.shape[0], 1)
    head.weight.data.copy_(w)
    head.bias.data.copy_(params["enc_head.bias"])  # type: ignore[union-attr]  # built with a bias
    enc.append(head)
    dec: list[nn.Module] = []
    w = params["dec_head.weight"]
    dhead = nn.ConvTranspose1d(w.shape[0], w.shape[1], 1)
    dhead.weight.data.copy_(w)
    dhead.bias.data.copy_(params["dec_head.bias"])  # type: ignore[union-attr]  # built with a bias
    dec += [dhead, nn.LeakyReLU(NEG_SLOPE)]
    for j, i in enumerate(reversed(range(layers))):
        w = params[f"dec{i}.weight"]
        up = nn.ConvTranspose1d(w.shape[0], w.shape[1], 3, stride=2, padding=1, output_padding=1)
        up.weight.data.copy_(w)
        up.bias.data.copy_(params[f"dec{i}.bias"])  # type: ignore[union-attr]  # built with a bias
        dec.append(up)
        if j < layers - 1:
            dec.append(nn.LeakyReLU(NEG_SLOPE))
    return nn.Sequential(*enc), nn.Sequential(*dec)


# ----------------------------------------------------------------------------- Adam


def adam_init(params: dict[str, torch.Tensor]) -> dict[str, Any]:
    """A fresh Adam state: zero moments, step 0 (plain tensors and ints)."""
    return {
        "step": 0,
        "exp_avg": {n: torch.zeros_like(p) for n, p in params.items()},
        "exp_avg_sq": {n: torch.zeros_like(p) for n, p in params.items()},
    }


def adam_step(params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], state: dict[str, Any], lr: float,
              betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
    """One Adam update in place (Kingma & Ba 2015), the arithmetic of ``torch.optim.Adam(foreach=False)``."""
    b1, b2 = betas
    state["step"] = int(state["step"]) + 1
    t = state["step"]
    bias1 = 1 - b1**t
    bias2_sqrt = (1 - b2**t) ** 0.5  # torch's expression, for bit-identical updates
    with torch.no_grad():
        for n, p in params.items():
            g = grads[n]
            m, v = state["exp_avg"][n], state["exp_avg_sq"][n]
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / bias2_sqrt).add_(eps)
            p.addcdiv_(m, denom, value=-(lr / bias1))


def sgd_step(params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], lr: float) -> None:
    """One plain SGD update in place (no momentum, no weight decay): ``torch.optim.SGD``'s default."""
    with torch.no_grad():
        for n, p in params.items():
            p.add_(grads[n], alpha=-lr)


# ----------------------------------------------------------------------------- the re-implementation's architecture

#: encoder (in, out) of the stride-2 layers, and the decoder's; both from the re-implementation
REF_ENCODER: tuple[tuple[int, int], ...] = ((1, 64), (64, 128), (128, 256), (256, 64))
REF_DECODER: tuple[tuple[int, int], ...] = ((4, 32), (32, 64), (64, 128), (128, 32))
REF_LATENT = 4


def reference_latent_length(k: int) -> int:
    """Latent positions of a length-``k`` input: four unpadded kernel-3 stride-2 convolutions (0 if too short)."""
    length = k
    for _ in REF_ENCODER:
        length = (length - 3) // 2 + 1 if length >= 3 else 0
    return max(length, 0)


#: the shortest input the re-implementation's encoder accepts (a latent of one position)
REF_MIN_K = next(k for k in range(1, 64) if reference_latent_length(k) >= 1)


def reference_arch_modules(workers: int) -> tuple[nn.Sequential, list[nn.Sequential], list[nn.Conv1d]]:
    """The re-implementation's layers as ``torch.nn`` modules: encoder, per-worker decoders and output convolutions."""
    enc: list[nn.Module] = []
    for cin, cout in REF_ENCODER:
        enc += [nn.Conv1d(cin, cout, kernel_size=3, stride=2), nn.LeakyReLU(NEG_SLOPE)]
    enc += [nn.Conv1d(REF_ENCODER[-1][1], REF_LATENT, kernel_size=1), nn.LeakyReLU(NEG_SLOPE)]
    decs: list[nn.Sequential] = []
    outs: list[nn.Conv1d] = []
    for _ in range(workers):
        layers: list[nn.Module] = []
        for cin, cout in REF_DECODER:
            layers += [nn.ConvTranspose1d(cin, cout, kernel_size=3, stride=2), nn.LeakyReLU(NEG_SLOPE)]
        decs.append(nn.Sequential(*layers))
        outs.append(nn.Conv1d(REF_DECODER[-1][1] + 1, 1, kernel_size=1))
    return nn.Sequential(*enc), decs, outs


def init_reference_params(seed: int, workers: int) -> dict[str, torch.Tensor]:
    """PyTorch's default initial weights of the re-implementation's layers, drawn under ``seed``.

    The layers are built inside :func:`torch.random.fork_rng`, so the global generator is left as
    it was.  Names: ``ref_enc<i>``, ``ref_enc_head``, ``w<j>.ref_dec<i>``, ``w<j>.ref_out``.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed) % (2**63))
        enc, decs, outs = reference_arch_modules(workers)
    convs = [m for m in enc if isinstance(m, nn.Conv1d)]
    params: dict[str, torch.Tensor] = {}
    for i, m in enumerate(convs):
        name = f"ref_enc{i}" if i < len(REF_ENCODER) else "ref_enc_head"
        params[f"{name}.weight"] = m.weight.detach().clone()
        params[f"{name}.bias"] = m.bias.detach().clone()  # type: ignore[union-attr]  # built with a bias
    for j, (dec, out) in enumerate(zip(decs, outs, strict=True)):
        ups = [m for m in dec if isinstance(m, nn.ConvTranspose1d)]
        for i, up in enumerate(ups):
            params[f"w{j}.ref_dec{i}.weight"] = up.weight.detach().clone()
            params[f"w{j}.ref_dec{i}.bias"] = up.bias.detach().clone()  # type: ignore[union-attr]  # built with a bias
        params[f"w{j}.ref_out.weight"] = out.weight.detach().clone()
        params[f"w{j}.ref_out.bias"] = out.bias.detach().clone()  # type: ignore[union-attr]  # built with a bias
    return params


def reference_encode(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """The re-implementation's encoder: (B, 1, K) → (B, 4, L4)."""
    h = x
    for i in range(len(REF_ENCODER)):
        h = F.leaky_relu(F.conv1d(h, params[f"ref_enc{i}.weight"], params[f"ref_enc{i}.bias"], stride=2), NEG_SLOPE)
    return F.leaky_relu(F.conv1d(h, params["ref_enc_head.weight"], params["ref_enc_head.bias"]), NEG_SLOPE)


def reference_decode(params: dict[str, torch.Tensor], worker: int, z: torch.Tensor, innovation: torch.Tensor) -> torch.Tensor:
    """Worker ``worker``'s decoder: latent (B, 4, L4) and innovation (B, 1, K) → (B, 1, K)."""
    h = z
    for i in range(len(REF_DECODER)):
        h = F.leaky_relu(F.conv_transpose1d(h, params[f"w{worker}.ref_dec{i}.weight"], params[f"w{worker}.ref_dec{i}.bias"], stride=2),
                         NEG_SLOPE)
    h = torch.cat([F.interpolate(h, size=innovation.shape[-1]), innovation], dim=1)
    return F.conv1d(h, params[f"w{worker}.ref_out.weight"], params[f"w{worker}.ref_out.bias"])
