"""The randomized Hadamard rotation in blocks: random sign flips, then an orthonormal fast Walsh–Hadamard transform.

A flat tensor of ``n`` elements is zero-padded to ``nb`` blocks of ``B = 2^m`` elements; each block
``v`` becomes ``H_B · D · v / sqrt(B)`` where ``D`` flips signs at random (one bit per element of a
counter-based stream, :mod:`gcbench.kernels.rng`) and ``H_B`` is the Sylvester Hadamard matrix.
The transform is orthonormal and its own inverse up to the signs: ``v = D · H_B · y / sqrt(B)``.

``H_B`` is the Kronecker product of small Hadamard matrices (``H_B = H_a ⊗ H_b ⊗ …``, each at most
:data:`FACTOR` wide), so the transform is a few batched matrix products over one axis of the
``(nb, a, b, …)`` view of the blocks: O(n log B) arithmetic in dense GEMMs, vectorised on every
torch device (the CPU's BLAS, cuBLAS on a GPU) instead of log2 B elementwise butterfly passes.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from gcbench.kernels.rng import GAMMA, MIX1, MIX2, _lshr, _signed, key_of

#: the widest Hadamard factor applied by one matrix product (B is split into factors of at most this)
FACTOR = 64


def block_size(n: int, block: int) -> int:
    """The block length used for ``n`` elements: ``block`` (a power of two), or the next power of two of ``n`` if smaller."""
    if n <= 1:
        return 1
    return min(block, 1 << (n - 1).bit_length())


def padded_numel(n: int, block: int) -> int:
    """Elements after padding ``n`` to whole blocks of :func:`block_size` (``n`` < result < 2n + block)."""
    b = block_size(n, block)
    return -(-n // b) * b


def factors(b: int) -> list[int]:
    """Split a power of two ``b`` into near-equal powers of two of at most :data:`FACTOR` (their product is ``b``)."""
    m = b.bit_length() - 1
    parts = max(1, math.ceil(m / (FACTOR.bit_length() - 1)))
    sizes = [m // parts + (1 if i < m % parts else 0) for i in range(parts)]
    return [1 << s for s in sizes if s]


@lru_cache(maxsize=64)
def _hadamard_cpu(size: int, dtype: torch.dtype) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < size:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / math.sqrt(size)).to(dtype)


_ON_DEVICE: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def hadamard(size: int, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """The orthonormal Sylvester Hadamard matrix ``H_size / sqrt(size)`` (cached per device)."""
    dev = torch.device(device)
    if dev.type == "cpu":
        return _hadamard_cpu(size, dtype)
    key = (size, dtype, dev)
    if key not in _ON_DEVICE:
        _ON_DEVICE[key] = _hadamard_cpu(size, dtype).to(dev)
    return _ON_DEVICE[key]


def fwht(blocks: torch.Tensor) -> torch.Tensor:
    """The orthonormal Walsh–Hadamard transform of each row of ``blocks`` (shape (nb, B), B a power of two); a new tensor."""
    nb, b = blocks.shape
    y = blocks
    left = nb
    right = b
    for f in factors(b):
        right //= f
        h = hadamard(f, blocks.dtype, blocks.device)
        if right == 1:
            y = torch.matmul(y.reshape(left, f), h)  # H is symmetric: rows times H
        else:
            y = torch.matmul(h, y.reshape(left, f, right))
        left *= f
    return y.reshape(nb, b) if y is not blocks else blocks.clone()


def random_words(key: int, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """SplitMix64 outputs 1..n of stream ``key`` (all 64 bits, as int64): :func:`gcbench.kernels.rng.rand24_torch` before its shift."""
    z = torch.arange(1, n + 1, dtype=torch.int64, device=device)
    z = z * _signed(int(GAMMA)) + _signed(int(key_of(key)))  # int64 multiply wraps like uint64
    z = (z ^ _lshr(z, 30)) * _signed(int(MIX1))
    z = (z ^ _lshr(z, 27)) * _signed(int(MIX2))
    return z ^ _lshr(z, 31)


_SIGN_TABLE: dict[torch.device, torch.Tensor] = {}


def _sign_table(device: torch.device) -> torch.Tensor:
    """Row v: the 8 signs (±1.0) of byte v, bit j (least significant first) set meaning −1."""
    if device not in _SIGN_TABLE:
        bits = (torch.arange(256).unsqueeze(1) >> torch.arange(8)) & 1
        _SIGN_TABLE[device] = (1.0 - 2.0 * bits.to(torch.float32)).to(device)
    return _SIGN_TABLE[device]


def signs(key: int, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``n`` random ±1.0 (float32) from stream ``key``: element 64·i + 8·k + j is −1 where bit j of byte k
    (little-endian) of the stream's number i is set; one table lookup per byte."""
    dev = torch.device(device)
    words = random_words(key, -(-n // 64), dev)
    as_bytes = words.view(torch.uint8)  # little-endian on every device torch runs on
    return _sign_table(dev)[as_bytes.long()].reshape(-1)[:n]


def rotate(flat: torch.Tensor, key: int, block: int) -> torch.Tensor:
    """``flat`` (float32, n elements) padded to blocks and rotated: shape (nb, B), float32, on ``flat``'s device."""
    n = flat.numel()
    b = block_size(n, block)
    total = padded_numel(n, block)
    padded = torch.zeros(total, dtype=torch.float32, device=flat.device)
    padded[:n] = flat
    padded.mul_(signs(key, total, flat.device))
    return fwht(padded.reshape(total // b, b))


def unrotate(blocks: torch.Tensor, key: int, n: int) -> torch.Tensor:
    """Inverse of :func:`rotate`: the first ``n`` elements of ``D · H · y`` (float32, flat)."""
    flat = fwht(blocks).reshape(-1)
    return flat.mul_(signs(key, flat.numel(), flat.device))[:n]
