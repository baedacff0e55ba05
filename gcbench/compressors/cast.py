"""Reference points without information loss beyond a cast: ``none`` (fp32), ``fp16``, ``bf16``.

``none`` sends the tensor as float32 (32·d bits) and is the dense baseline every ratio is
measured against; ``fp16``/``bf16`` cast to 16 bits (16·d bits).  Values beyond fp16's range
become ±inf, exactly as a real fp16 all-reduce would produce.

Speed: both directions are one multithreaded ``copy_`` (with the dtype conversion) into a fresh
buffer from :func:`gcbench.kernels.empty`, whose pages fault in 2 MiB at a time; allocating the
new 100 MB result with 4 KiB pages costs 4–5× the copy itself in page faults (docs/timing.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from gcbench import kernels
from gcbench.compressors.cards.cast import BF16_CARD, FP16_CARD, NONE_CARD
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import meta_keys
from gcbench.core.payload import Payload, check_shape


def cast_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """The round trip in plain torch: cast to the wire dtype and back (new tensors)."""
    return x32.reshape(-1).to(comp.wire_dtype, copy=True).to(torch.float32, copy=True)


class _Cast(Compressor):
    """A cast of the float32 tensor to ``wire_dtype`` and back: the common body of ``none``, ``fp16`` and ``bf16``."""

    wire_dtype: torch.dtype = torch.float32
    reference = cast_reference

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        flat = a.reshape(-1)
        if flat.device.type != "cpu":
            return flat.to(self.wire_dtype, copy=True).view(torch.uint8), {}, None
        wire = kernels.empty(flat.numel(), self.wire_dtype)
        wire.copy_(flat)  # a new buffer: the body never aliases the caller's tensor
        return wire.view(torch.uint8), {}, None

    def compress_group(self, xs: Sequence[torch.Tensor], states: Sequence[State],
                       need_decoded: bool = True) -> list[tuple[Payload, torch.Tensor | None]]:
        """Every tensor of the step cast into one fresh buffer, each payload's body a slice of it.

        The same payloads as compressing each tensor alone (the contract checks it), with the
        per-tensor work cut to one slice copy and one payload: on ResNet-50's 161 tensors the
        general path's per-tensor allocation and encode call cost about a third of a copy of the
        whole model.  Float32 CPU tensors without decoding only; everything else takes the general path.
        """
        f32 = torch.float32
        if need_decoded or not xs or not all(x.dtype is f32 and x.is_cpu and not x.requires_grad for x in xs):
            return super().compress_group(xs, states, need_decoded)
        sizes = list(map(torch.Tensor.numel, xs))
        total = sum(sizes)
        wire = kernels.empty(total, self.wire_dtype)
        # a new buffer: no body aliases a caller's tensor (torch.cat(out=) casts 1.5-2x slower)
        span = _span(xs, sizes, total)
        if span is not None:
            wire.copy_(span)
        else:
            # one foreach copy and one split per view type keep the per-tensor Python work to the
            # payload (``torch.flatten`` costs half of ``reshape(-1)`` per call: 62 calls are 2% of a copy)
            torch._foreach_copy_(wire.split(sizes), list(map(torch.flatten, xs)))
        esize = wire.element_size()
        u8 = wire.view(torch.uint8)
        ends = list(itertools.accumulate(esize * n for n in sizes))
        name, version = self.name, self.info.version
        for st in states:
            st.step += 1
        return [(Payload.sliced(name, version, torch.float32, tuple(x.shape), u8, end - esize * n, end), None)
                for x, n, end in zip(xs, sizes, ends, strict=True)]

    def decompress_group(self, payloads: Sequence[Payload],
                         expected_shapes: Sequence[tuple[int, ...] | torch.Size] | None = None) -> list[torch.Tensor]:
        """A whole step's payloads decoded into one fresh buffer, each tensor a view of it.

        The same tensors as :meth:`decompress` of each (the contract checks it), with the
        per-payload work cut to the checks, one split and one view: decoding ResNet-50's 161
        payloads one by one cost about 1.5x a copy of the model.  Float32 payloads on the CPU
        that pass every check of the general path only; anything else takes that path, which
        raises the same :class:`PayloadError` for a malformed one.
        """
        if expected_shapes is not None and len(expected_shapes) != len(payloads):
            raise ValueError(f"{len(payloads)} payloads but {len(expected_shapes)} expected shapes")
        name, version, isz = self.name, self.info.version, self.wire_dtype.itemsize
        sizes: list[int] = []
        for p in payloads:
            n = p.numel
            if (p.codec != name or p.version != version or p.dtype != torch.float32 or n == 0
                    or p.data.device.type != "cpu" or p.data.numel() != isz * n):
                return super().decompress_group(payloads, expected_shapes)
            # the body holds every element (checked above): the header's shape is bounded by the bytes themselves
            check_shape(p.shape, None if expected_shapes is None else expected_shapes[len(sizes)])
            sizes.append(n)
        if not sizes:
            return []
        try:
            out = kernels.empty(sum(sizes))
        except (MemoryError, RuntimeError) as exc:  # as decompress: an allocation failure while decoding is a PayloadError
            raise PayloadError(f"{name} payloads could not be decoded ({type(exc).__name__}: {exc})") from exc
        parts = out.split(sizes)
        torch._foreach_copy_(parts, [p.data.view(self.wire_dtype) for p in payloads])
        return [part.view(p.shape) for part, p in zip(parts, payloads, strict=True)]

    def _expected_body_nbytes(self, payload: Payload) -> int:
        meta_keys(payload)
        return self.wire_dtype.itemsize * payload.numel

    def _decode(self, payload: Payload) -> torch.Tensor:
        data, numel = payload.data, payload.numel
        if data.numel() != self.wire_dtype.itemsize * numel:
            raise PayloadError(f"{self.name} body has {data.numel()} bytes, expected {self.wire_dtype.itemsize * numel}")
        wire = data.view(self.wire_dtype)
        if data.device.type != "cpu":
            return wire.to(torch.float32, copy=True)
        # a new buffer: ``.float()`` of a float32 body would be a view, and a caller modifying the
        # decoded tensor in place would silently change the payload's bytes
        out = kernels.empty(numel)
        out.copy_(wire)
        return out


def _span(xs: Sequence[torch.Tensor], sizes: Sequence[int], total: int) -> torch.Tensor | None:
    """One flat view of ``xs`` when they lie back to back, in order, in one buffer (a DDP bucket, the run's cached
    gradients: :func:`gcbench.measure.timing.flat_like`); None otherwise.

    Copying the span is one pass with no per-tensor split or flatten: on ResNet-50's 161 tensors those cost
    about 3.5% of a copy of the model.  Only views of one base are joined, so the span never reaches memory
    that no tensor of ``xs`` owns.
    """
    base = xs[0]._base
    if base is None:
        return None
    offset = start = xs[0].storage_offset()
    for x, n in zip(xs, sizes, strict=True):
        if x._base is not base or x.storage_offset() != offset or not x.is_contiguous():
            return None
        offset += n
    return xs[0].as_strided((total,), (1,), start)


class NoCompression(_Cast):
    """``none``: the float32 tensor unchanged (32·d bits), the dense baseline every ratio is measured against."""

    info = NONE_CARD
    wire_dtype = torch.float32


class Fp16(_Cast):
    """``fp16``: the tensor cast to IEEE half precision (16·d bits); values beyond its range become ±inf."""

    info = FP16_CARD
    wire_dtype = torch.float16


class Bf16(_Cast):
    """``bf16``: the tensor cast to bfloat16 (16·d bits, float32's exponent range)."""

    info = BF16_CARD
    wire_dtype = torch.bfloat16
