"""THC-style homomorphic quantization — in the spirit of Li et al. 2024 (NSDI), THC: Tensor Homomorphic Compression.

The idea taken from the paper: make the quantized integers *summable*, so that the workers' messages
are added by an ordinary all-reduce (or a switch/server) without decoding, and one decode of the sum
gives the mean.  What makes that possible and accurate, also from the paper: every worker quantizes
against the same range, and a shared-seed randomized Hadamard rotation first spreads each tensor's
energy evenly over its coordinates, which shrinks that range.

Per tensor of n elements, on each worker (:mod:`gcbench.kernels.hadamard`):

1. rotate: zero-pad to blocks of B = 2^m (``block``, or the next power of two of a shorter tensor),
   flip signs at random and apply the orthonormal Walsh–Hadamard transform per block; the rotation
   of step t is drawn from (``seed``, t), the same on every worker;
2. range: M = max |rotated value|, all-reduced with MAX across the workers (phase ``range``: one
   float32 per tensor), so all quantize on [−M, M];
3. quantize: r = (y + M)·((2^b − 1)/(2M)), level ⌊r⌋ + 1 with probability r − ⌊r⌋ (counter-based
   uniforms from the worker's own state, two 24-bit uniforms from each SplitMix64 output:
   :func:`gcbench.kernels.rng.paired_uniforms`), an integer in [0, 2^b − 1]; E[level] = r, so the decoded
   value is unbiased, and so is the rotated-back tensor (the rotation is orthogonal);
4. sum: the levels travel at w = b + ⌈log2 N⌉ bits, packed ⌊63/w⌋ to an int64 word with the top bit
   free; N such words add field by field without any carry crossing a field (each field's sum is at
   most N·(2^b − 1) < 2^w), so a SUM all-reduce of the words is the bit-packed sum of the levels
   (phase ``allreduce``);
5. decode once: mean level = sum / N, value = level·2M/(2^b − 1) − M, rotate back, drop the padding.

A payload is one message of that format: header ``b``, ``w``, ``c`` (the workers summed in it: 1 for
a worker's own message, N for the all-reduced sum), ``B`` (log2 of the block) and ``key`` (the
rotation), body: the words (little-endian int64), then M (float32).  The fields are laid out field-major in chunks
of 1024 words (k = ⌊63/w⌋ fields each): chunk c holds the elements from c·1024·k on, in w_c words (1024, fewer in
the last chunk), element c·1024·k + f·w_c + i in field f (bits f·w to f·w + w − 1) of word c·1024 + i (:func:`pack`),
so that packing and unpacking walk contiguous runs of elements (version 2; version 1 packed k consecutive elements
per word).  A payload from ``compress``
alone has w = b and c = 1 and decodes by itself like any codec's.  Bytes on the wire are the
payload's, header and M included; the ⌊63/w⌋ packing wastes 63 mod w + 1 bits per word (w = 4:
60 of 64 bits used).

Non-finite input: a NaN or ±Inf anywhere in the tensor makes M non-finite; the levels are then all 0 and M is
stored as it is, so the whole tensor decodes to NaN (and so does the mean of any exchange it enters): the
divergence shows instead of being quantized away.

Reconstructed, not the paper's released code: THC quantizes with a lookup table of non-uniform
levels chosen for the rotated distribution, on granularity settings of its own (and aggregates in a
programmable switch or parameter server); here the levels are uniform, there is one range per
tensor, the rotation is blockwise with a power-of-two block, and the sum is an all-reduce of
int64 words.  The card says ``reconstructed=True``.

Paths: on the CPU, numba kernels (:func:`gcbench.kernels.hadamard.rotate_fast`,
``quantize_pack_fast``, ``decode_fast``) rotate, quantize and pack, and decode, block by block in
cache; elsewhere (a GPU, or ``GCBENCH_KERNELS=torch``) the torch functions of this module and of
:mod:`gcbench.kernels.hadamard` do.  They run the same float32 operations in the same order and give
the same bytes.  On the torch path everything stays on the input's device: the range M is a 0-d tensor (its
quantization factor computed there, :func:`range_factor`), the body is the words' bytes and M's on the device, the
exchange all-reduces the ranges and words as device tensors, and the decoder views the body there; no host copy and
no scalar read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors.cards.thc import THC_CARD
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_tensor, meta_int, meta_keys
from gcbench.core.info import per_word, sum_width
from gcbench.core.payload import MetaValue, Payload
from gcbench.core.protocol import AllReduce, Context, Outcome, WorkerProtocol
from gcbench.kernels import hadamard
from gcbench.kernels.rng import _mix64_py

_KEY_MASK = (1 << 63) - 1


def rotation_key(seed: int, step: int) -> int:
    """The rotation of step ``step`` for the shared ``seed``: the same on every worker (a 63-bit SplitMix64 output)."""
    return _mix64_py((int(seed) << 32) + int(step) + 1) & _KEY_MASK


def body_nbytes(padded: int, width: int) -> int:
    """Body bytes of ``padded`` levels at ``width`` bits: the int64 words, then the float32 range."""
    return 4 + 8 * -(-padded // per_word(width))


def range_factor(m: torch.Tensor, top: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`gcbench.kernels.hadamard.quant_factor` on the device: (up, m·up, factor) as float32 0-d tensors on m's
    device, from the float32 range ``m`` (0-d), with the same float64 arithmetic and roundings (no host read)."""
    m64 = m.reshape(()).double()
    f = (top / (2.0 * m64)).float()
    small = ~torch.isfinite(f)  # a subnormal range: scale y and m up by 2^100 (exact) so the factor does not overflow
    up = torch.where(small, 2.0**100, 1.0).to(torch.float64)
    factor = torch.where(small, (top / (2.0 * m64 * up)).float(), f)
    return up.float(), (m64 * up).float(), factor


def quantize(y: torch.Tensor, m: float | torch.Tensor, bits: int, u: torch.Tensor) -> torch.Tensor:
    """Stochastic levels (int64 in [0, 2^b − 1]) of ``y`` on [−m, m] given uniforms ``u``; all zero when m is 0 or not
    finite (a non-finite range decodes to NaN whatever the levels).  ``m`` may be a float32 0-d tensor on y's device:
    then nothing is read back to the host."""
    top = (1 << bits) - 1
    mt = torch.as_tensor(m, dtype=torch.float32, device=y.device).reshape(())
    up, m_up, factor = range_factor(mt, top)  # the kernel's factor (and, for a subnormal range, its exact 2^100 scaling)
    r = torch.addcmul(m_up, y, up).mul_(factor).clamp_(0.0, float(top))  # y·up is exact (up a power of two): one rounding
    lo = r.floor()
    levels = lo.add_((u < r.sub_(lo)).to(lo.dtype)).to(torch.int64)
    usable = (mt != 0) & torch.isfinite(mt)
    return torch.where(usable, levels, torch.zeros((), dtype=torch.int64, device=y.device))


def _pack_rows(lv: torch.Tensor, width: int) -> torch.Tensor:
    """Rows of ``(..., k, w)`` levels, field f in bits f·width: the ``(..., w)`` words (disjoint fields: their sum is their OR)."""
    shifts = torch.arange(0, lv.shape[-2] * width, width, dtype=torch.int64, device=lv.device).unsqueeze(1)
    return (lv << shifts).sum(-2)


def _unpack_rows(words: torch.Tensor, width: int, k: int) -> torch.Tensor:
    """``(..., w)`` words to their ``(..., k, w)`` fields (:func:`_pack_rows` inverted)."""
    shifts = torch.arange(0, k * width, width, dtype=torch.int64, device=words.device).unsqueeze(1)
    return (words.unsqueeze(-2) >> shifts) & ((1 << width) - 1)


def pack(levels: torch.Tensor, width: int) -> torch.Tensor:
    """Levels (int64, each < 2^width) packed k = :func:`per_word` to an int64 word, on their device.

    Field-major within chunks of W = :data:`~gcbench.kernels.hadamard.CHUNK_WORDS` words: chunk c holds the
    elements from c·W·k on (W·k of them, fewer in the last), in w_c = ⌈elements/k⌉ words, element c·W·k + f·w_c + i
    in field f (bits f·width to (f+1)·width − 1) of word c·W + i; fields past the last element are 0.  So one field
    of consecutive words is consecutive elements: packing and unpacking read and write contiguous runs (vectorised),
    a chunk's elements are one contiguous span (streamed), and a block of the rotation unpacks from a few runs."""
    k = per_word(width)
    flat = levels.reshape(-1)
    span = hadamard.CHUNK_WORDS * k
    full = flat.numel() // span
    parts = [_pack_rows(flat[: full * span].reshape(full, k, hadamard.CHUNK_WORDS), width).reshape(-1)]
    rest = flat[full * span :]
    if rest.numel():
        words = -(-rest.numel() // k)
        parts.append(_pack_rows(torch.nn.functional.pad(rest, (0, words * k - rest.numel())).reshape(k, words), width))
    return torch.cat(parts)


def unpack(words: torch.Tensor, width: int, n: int) -> torch.Tensor:
    """The first ``n`` elements of :func:`pack`'s words (int64)."""
    k = per_word(width)
    span = hadamard.CHUNK_WORDS * k
    full = n // span
    parts = [_unpack_rows(words[: full * hadamard.CHUNK_WORDS].reshape(full, hadamard.CHUNK_WORDS), width, k).reshape(-1)]
    if n - full * span:
        parts.append(_unpack_rows(words[full * hadamard.CHUNK_WORDS :], width, k).reshape(-1)[: n - full * span])
    return torch.cat(parts)


def dequantize(sums: torch.Tensor, m: float | torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """Values of summed levels: (sum / c)·2m/(2^b − 1) − m, computed in float64, returned float32 (``m`` a float or
    a 0-d tensor on the sums' device)."""
    m64 = torch.as_tensor(m, dtype=torch.float64, device=sums.device)
    scale = 2.0 * m64 / (count * ((1 << bits) - 1))
    return (sums.to(torch.float64) * scale - m64).to(torch.float32)


def range_bytes(m: torch.Tensor) -> torch.Tensor:
    """The float32 range's 4 little-endian bytes (uint8, on m's device), every NaN written as the one quiet NaN."""
    m32 = m.reshape(1).to(torch.float32)
    return torch.where(torch.isnan(m32), torch.full_like(m32, math.nan), m32).view(torch.uint8)


def _aligned(body: torch.Tensor, size: int) -> torch.Tensor:
    """``body`` itself, or a copy when its bytes do not start at a multiple of ``size`` in their storage (a payload
    parsed from a file at an odd offset), so that it can be viewed as a dtype of that size."""
    return body.clone() if body.storage_offset() % size else body


class THC(Compressor):
    """Rotate, quantize to ``bits`` on a shared range, sum the packed integers by all-reduce (see the module docstring)."""

    info = THC_CARD

    # ------------------------------------------------------------------ one worker's message

    def _rotated(self, a: torch.Tensor, state: State) -> tuple[torch.Tensor, int, float | torch.Tensor]:
        """(the rotated blocks, the rotation key, max |rotated value|): the fused kernel on the CPU (the max a float),
        torch elsewhere (the max a 0-d tensor on the device)."""
        key = rotation_key(int(self.params["seed"]), state.step)
        block = int(self.params["block"])
        if kernels.cpu_fast(a):
            y_np, m = hadamard.rotate_fast(kernels.flat_f32(a), key, block)
            return torch.from_numpy(y_np), key, m
        y = hadamard.rotate(a.reshape(-1), key, block)
        return y, key, y.abs().max()  # a 0-d tensor on the device; NaN if any element is NaN, as the kernel's

    def _message(self, y: torch.Tensor, key: int, m: float | torch.Tensor, width: int,
                 state: State) -> tuple[torch.Tensor, torch.Tensor, dict[str, MetaValue]]:
        """(int64 words on y's device, body bytes on y's device, meta) of rotated blocks ``y`` quantized on [−m, m]."""
        bits = int(self.params["bits"])
        flat = y.reshape(-1)
        seed = state.randint64()
        meta: dict[str, MetaValue] = {"b": bits, "w": width, "c": 1, "B": y.shape[1].bit_length() - 1, "key": key}
        if kernels.cpu_fast(flat):
            mf = float(m)
            nw = -(-flat.numel() // per_word(width))
            body = kernels.empty(8 * nw + 4, torch.uint8).numpy()  # the words (aligned at its start), then M
            body[8 * nw :] = np.array([mf if mf == mf else math.nan], "<f4").view(np.uint8)  # one NaN pattern on both paths
            words = torch.from_numpy(hadamard.quantize_pack_fast(flat.numpy(), mf, bits, seed, width, body[: 8 * nw].view(np.int64)))
            return words, torch.from_numpy(body), meta
        mt = torch.as_tensor(m, dtype=torch.float32, device=flat.device)
        words = pack(quantize(flat, mt, bits, kernels.paired_uniforms(seed, flat.numel(), flat.device)), width)
        return words, torch.cat([words.view(torch.uint8), range_bytes(mt)]), meta

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        y, key, m = self._rotated(a, state)
        _, body, meta = self._message(y, key, m, int(self.params["bits"]), state)
        return body, meta, None

    # ------------------------------------------------------------------ decoding

    def _header(self, payload: Payload) -> tuple[int, int, int, int, int, int]:
        """(bits, width, count, block, key, padded length) from a checked header."""
        meta_keys(payload, "b", "w", "c", "B", "key")
        n = payload.numel
        bits = meta_int(payload, "b", 1, 16)
        width = meta_int(payload, "w", bits, 62)
        count = meta_int(payload, "c", 1, ((1 << width) - 1) // ((1 << bits) - 1))
        log_block = meta_int(payload, "B", 0, max(0, (n - 1).bit_length()))
        key = meta_int(payload, "key", 0, _KEY_MASK)
        block = 1 << log_block
        return bits, width, count, block, key, -(-n // block) * block

    def _expected_body_nbytes(self, payload: Payload) -> int:
        _, width, _, _, _, padded = self._header(payload)
        return body_nbytes(padded, width)

    def _decode(self, payload: Payload) -> torch.Tensor:
        bits, width, count, block, key, padded = self._header(payload)
        body = body_tensor(payload)
        if body.numel() != body_nbytes(padded, width):
            raise PayloadError(f"thc body has {body.numel()} bytes, its header implies {body_nbytes(padded, width)}")
        if kernels.cpu_fast(body):
            body_np = body.numpy()
            m = float(body_np[-4:].view("<f4")[0])
            words_np = body_np[:-4].view("<i8")
            if not words_np.flags.aligned:  # a payload parsed from bytes at an odd offset
                words_np = words_np.copy()
            scale = 2.0 * m / (count * ((1 << bits) - 1))
            out = hadamard.decode_fast(words_np, width, padded, block, m, scale, key)
            return torch.from_numpy(out)[: payload.numel]
        m_t = _aligned(body[-4:], 4).view(torch.float32).reshape(())
        words = _aligned(body[:-4], 8).view(torch.int64)
        values = dequantize(unpack(words, width, padded), m_t, bits, count)
        return hadamard.unrotate(values.reshape(padded // block, block), key, payload.numel)

    # ------------------------------------------------------------------ the protocol

    def worker_protocol(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> WorkerProtocol:
        """THC's exchange: rotate, all-reduce MAX of the ranges (phase ``range``, 4 bytes per tensor), quantize on the shared
        range at b + ⌈log2 N⌉ bits, all-reduce SUM of the packed words (phase ``allreduce``, each worker's payload counted
        once, header and range included), decode the sum once.

        Units with no elements leave every unit to the default protocol (all-gather), as their payloads have no range.
        """
        if any(x.numel() == 0 for x in xs):
            return (yield from self.gather_protocol(xs, states, ctx))
        rotated = [self._rotated(x.detach().float(), st) for x, st in zip(xs, states, strict=True)]
        dev = xs[0].device
        own = torch.stack([torch.as_tensor(m, dtype=torch.float32, device=dev).reshape(()) for _, _, m in rotated])
        (ranges,) = yield AllReduce([own], "range", op="max", count="once")
        width = sum_width(int(self.params["bits"]), ctx.world)
        words, payloads = [], []
        for x, st, (y, key, _), m in zip(xs, states, rotated, ranges.unbind(0), strict=True):
            w, body, meta = self._message(y, key, m, width, st)
            st.step += 1
            words.append(w)
            payloads.append(self._payload(x, body, meta))
        sums = yield AllReduce(words, "allreduce", op="sum", count="once", nbytes=[p.nbytes for p in payloads], body=True)

        def mean() -> list[torch.Tensor]:
            out = []
            for x, p, s in zip(xs, payloads, sums, strict=True):
                body = torch.cat([s.to(torch.int64).contiguous().view(torch.uint8), body_tensor(p)[-4:].to(s.device)])
                total = Payload(p.codec, p.version, p.dtype, p.shape, body, {**p.meta, "c": ctx.world})
                out.append(self.decode_received(total, x.shape).to(x.device))
            return out

        return Outcome(ctx.once("mean", mean), payloads)
