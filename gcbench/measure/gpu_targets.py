"""What ``gcbench bench`` holds a compressor to on a GPU: its compress and decompress against a device copy.

On a CUDA device every kernel is timed with CUDA events beside a device-to-device copy of the same
tensor in the same process (:class:`gcbench.measure.timing.CudaEventTimer`), and a row of
:data:`GPU_TARGET_NUMEL` elements or more is held to :func:`gpu_target`: the card's own
``Target.gpu_x_copy`` where it states one, else the default of the compressor's kind
(:data:`KIND_X_COPY`): casts and quantizers at most 3× a device copy, sparsifiers at most 10× (a
selection is more work than a cast, on any device).  A smaller row is reported, not judged: on a
GPU, a 1M-element kernel is mostly launch latency, which no compressor can cut below the copy's.
"""

from __future__ import annotations

from typing import Any

from gcbench.compressors import registry
from gcbench.core.errors import UnknownNameError
from gcbench.core.info import CompressorInfo

#: rows of at least this many elements are held to the GPU target (`bench --sizes 64M`: 256 MB of float32)
GPU_TARGET_NUMEL = 64_000_000

#: the default GPU ×copy of each kind of compressor
KIND_X_COPY = {"cast": 3.0, "quantizer": 3.0, "sparsifier": 10.0}

#: the kind of every compressor gcbench ships (a plugin without ``gpu_x_copy`` on its card has no GPU target);
#: powersgd (low rank) and lgc (an autoencoder) are reported only
KINDS = {
    **dict.fromkeys(("none", "fp16", "bf16", "fp8", "mxfp8", "mxfp4", "nvfp4", "blockint"), "cast"),
    **dict.fromkeys(("qsgd", "terngrad", "signsgd", "efsignsgd", "onebit", "natural", "natural_dither", "thc"), "quantizer"),
    **dict.fromkeys(("topk", "topk_dither", "randomk", "dgc", "sdagc", "threshold", "graddrop", "adacomp"), "sparsifier"),
}


def gpu_target_of(card: CompressorInfo) -> float | None:
    """The largest ×device copy a card's compress and decompress may take on a GPU; None: reported only."""
    if card.target is not None and card.target.gpu_x_copy is not None:
        return card.target.gpu_x_copy
    kind = KINDS.get(card.name)
    return KIND_X_COPY[kind] if kind is not None else None


def gpu_target(name: str) -> float | None:
    """:func:`gpu_target_of` the registered compressor ``name``; None for an unknown name."""
    try:
        return gpu_target_of(registry.get(name))
    except UnknownNameError:
        return None


def is_gpu_row(rec: dict[str, Any]) -> bool:
    return str(rec.get("device") or "cpu").startswith("cuda")


def gpu_verdict(rec: dict[str, Any]) -> tuple[str, str]:
    """(target text, pass/short/flagged/—) of a CUDA bench row against :func:`gpu_target`."""
    limit = gpu_target(rec["compressor"])
    if rec.get("error"):
        return ("", "error")
    if limit is None:
        return ("—", "—")
    text = f"≤ {limit:g}× device copy @64M"
    if rec.get("model") is not None or int(rec.get("numel") or 0) < GPU_TARGET_NUMEL:
        return (text, "—")
    blocks = rec.get("x_copy") or {}
    if any((blocks.get(k) or {}).get("flags") for k in ("compress", "decompress")):
        return (text, "flagged")
    values = [rec.get("compress_x_copy"), rec.get("decompress_x_copy")]
    ok = all(v is not None and v <= limit for v in values)
    return (text, "pass" if ok else "short")
