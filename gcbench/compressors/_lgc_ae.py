"""The 1-D convolutional autoencoder of LGC (Abrahamyan et al. 2021), RECONSTRUCTED.

No official code of Learned Gradient Compression is public; this is the architecture that
``shared/compressors.md`` reconstructs from the paper's description:

* encoder: ``Conv1d`` layers 1→64→128→256→64 (kernel 3, stride 2, padding 1, LeakyReLU 0.01),
  then ``Conv1d`` 64→4 (kernel 1, no activation).  A window of ``L`` values (``L`` a multiple
  of ``fold = 2**layers`` = 16, so every stride divides) becomes a ``4 × L/16`` latent: L/4 floats.
* decoder: the mirror with ``ConvTranspose1d`` — 4(+fold)→64 (kernel 1), then 64→256→128→64→1
  (kernel 3, stride 2, padding 1, output padding 1, LeakyReLU between layers, none at the end).
  The worker's *innovation* (a length-``L`` vector, zero except at a few positions) is the extra
  input: it is folded space-to-depth into ``fold`` channels at the latent's resolution (a
  lossless rearrangement: channel c at position p holds value p·fold + c) and concatenated to the
  latent.  Where the innovation is nonzero the output keeps it exactly (the values were sent).

The autoencoder is kept *functionally* — a plain ``dict[str, Tensor]`` of weights and a plain
Adam state — so it lives in :attr:`gcbench.compressor.State.values`, deep-copies with the state
and survives ``state_dict()``/``load_state_dict()`` bit for bit.  :func:`reference_modules` builds
the same network from ``torch.nn`` layers (the tests check the functional forward against it)
and :func:`adam_step` follows ``torch.optim.Adam``'s single-tensor update exactly (also tested).

Everything runs on the CPU in float32, in a deterministic order (no global random state is used:
initial weights come from a seeded ``torch.Generator``).
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


def init_params(seed: int, channels: tuple[int, ...] = DEFAULT_CHANNELS, latent: int = DEFAULT_LATENT) -> dict[str, torch.Tensor]:
    """Seeded initial weights: U(−b, b) with b = 1/sqrt(in·kernel), for weights and biases.

    This is PyTorch's default bound for convolutions (``kaiming_uniform_(a=√5)``) computed from
    the layer's input fan, for both kinds of layer.
    """
    g = torch.Generator().manual_seed(int(seed) % (2**63))
    params: dict[str, torch.Tensor] = {}
    for name, cin, cout, k in _encoder_layers(channels, latent):
        b = 1.0 / math.sqrt(cin * k)
        params[f"{name}.weight"] = (torch.rand((cout, cin, k), generator=g) * 2 - 1) * b
        params[f"{name}.bias"] = (torch.rand((cout,), generator=g) * 2 - 1) * b
    for name, cin, cout, k in _decoder_layers(channels, latent):
        b = 1.0 / math.sqrt(cin * k)
        params[f"{name}.weight"] = (torch.rand((cin, cout, k), generator=g) * 2 - 1) * b  # ConvTranspose1d layout
        params[f"{name}.bias"] = (torch.rand((cout,), generator=g) * 2 - 1) * b
    return params


def encoder_names(params: dict[str, torch.Tensor]) -> list[str]:
    """Names of the encoder's tensors, in a fixed order (what a leader must hold)."""
    return [n for n in params if n.startswith("enc")]


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
        conv.bias.data.copy_(params[f"enc{i}.bias"])
        enc += [conv, nn.LeakyReLU(NEG_SLOPE)]
    w = params["enc_head.weight"]
    head = nn.Conv1d(w.shape[1], w.shape[0], 1)
    head.weight.data.copy_(w)
    head.bias.data.copy_(params["enc_head.bias"])
    enc.append(head)
    dec: list[nn.Module] = []
    w = params["dec_head.weight"]
    dhead = nn.ConvTranspose1d(w.shape[0], w.shape[1], 1)
    dhead.weight.data.copy_(w)
    dhead.bias.data.copy_(params["dec_head.bias"])
    dec += [dhead, nn.LeakyReLU(NEG_SLOPE)]
    for j, i in enumerate(reversed(range(layers))):
        w = params[f"dec{i}.weight"]
        up = nn.ConvTranspose1d(w.shape[0], w.shape[1], 3, stride=2, padding=1, output_padding=1)
        up.weight.data.copy_(w)
        up.bias.data.copy_(params[f"dec{i}.bias"])
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
