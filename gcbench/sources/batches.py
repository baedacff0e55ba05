"""Deterministic synthetic batches for the zoo and Hugging Face models: each batch a function of (seed, batch, worker) alone."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

#: ``make_batch(batch_index, worker) -> (inputs, targets)``
MakeBatch = Callable[[int, int], tuple[Any, Any]]
#: ``loss_fn(outputs, targets) -> scalar tensor``
LossFn = Callable[[Any, Any], torch.Tensor]



def batch_generator(seed: int, batch_index: int, worker: int, tag: int = 0) -> torch.Generator:
    """A private torch generator determined by ``(seed, batch_index, worker, tag)`` only."""
    # SeedSequence mixes the words well and accepts any non-negative ints; two's complement keeps
    # negative seeds usable without colliding with small positive ones.
    words = [int(x) % (1 << 64) for x in (seed, batch_index, worker, tag)]
    state = np.random.SeedSequence(words).generate_state(2, dtype=np.uint32)
    g = torch.Generator()
    g.manual_seed(int(state[0]) << 31 ^ int(state[1]))
    return g


def image_batches(seed: int, num_classes: int, batch_size: int, image_size: int, channels: int = 3) -> MakeBatch:
    """Class-prototype images: upsampled 4×4 class patterns plus N(0, 1) noise."""
    protos = torch.randn(num_classes, channels, 4, 4, generator=batch_generator(seed, 0, 0, tag=1))

    def make_batch(batch_index: int, worker: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = batch_generator(seed, batch_index, worker)
        labels = torch.randint(0, num_classes, (batch_size,), generator=g)
        base = F.interpolate(protos[labels], size=(image_size, image_size), mode="bilinear", align_corners=False)
        return base + torch.randn(base.shape, generator=g), labels

    return make_batch


def vector_batches(seed: int, num_classes: int, batch_size: int, features: int) -> MakeBatch:
    """Class-prototype vectors plus N(0, 1) noise (MNIST-shaped for the MLP)."""
    protos = torch.randn(num_classes, features, generator=batch_generator(seed, 0, 0, tag=1))

    def make_batch(batch_index: int, worker: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = batch_generator(seed, batch_index, worker)
        labels = torch.randint(0, num_classes, (batch_size,), generator=g)
        return protos[labels] + torch.randn(batch_size, features, generator=g), labels

    return make_batch


def token_batches(seed: int, vocab: int, batch_size: int, seq_len: int) -> MakeBatch:
    """Token streams: Zipf(1) unigrams mixed 50/50 with a fixed successor rule; targets = next token."""
    zipf = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    cdf = torch.cumsum(zipf / zipf.sum(), 0)
    # an odd multiplier coprime with the vocabulary makes the successor rule a permutation
    a, b = 2 * (vocab // 3) + 1, vocab // 7 + 1
    while math.gcd(a, vocab) != 1:
        a += 2

    def make_batch(batch_index: int, worker: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = batch_generator(seed, batch_index, worker)
        n = seq_len + 1
        # inverse-CDF sampling (torch.multinomial is avoided: it is slower here)
        u = torch.rand(batch_size, n, generator=g, dtype=torch.float64)
        draws = torch.searchsorted(cdf, u).clamp_(max=vocab - 1)
        follow = torch.rand(batch_size, n, generator=g) < 0.5
        tokens = torch.empty(batch_size, n, dtype=torch.long)
        tokens[:, 0] = draws[:, 0]
        for t in range(1, n):  # sequential by nature; n ≤ a few hundred, vectorised over the batch
            succ = (a * tokens[:, t - 1] + b) % vocab
            tokens[:, t] = torch.where(follow[:, t], succ, draws[:, t])
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    return make_batch
