"""A bench record held to its compressor's card: the target text and pass, short, flagged or error.

Read by the report's bench tables and plots; the targets themselves are on the cards (:class:`gcbench.core.info.Target`).
"""

from __future__ import annotations

from typing import Any

from gcbench.compressors import registry
from gcbench.core.errors import UnknownNameError
from gcbench.core.info import Target


def target_of(name: str) -> Target | None:
    """The bench target on ``name``'s card; None for no target or a compressor not installed here."""
    try:
        return registry.get(name).target
    except UnknownNameError:
        return None


def kernel_verdict(rec: dict[str, Any]) -> tuple[str, str]:
    """(target text, pass/short/flagged/—) for a bench record, against the target on the compressor's card.

    ``flagged``: a timing the target checks is flagged (unstable, too short, beats traffic bound) — it is
    not a speed, so neither pass nor short can be claimed from it (under load every row was "short" or
    "pass" by chance).
    """
    from gcbench.measure.gpu_targets import gpu_verdict, is_gpu_row

    if is_gpu_row(rec):  # a GPU row: its own target, against a device copy (gcbench.measure.gpu_targets)
        return gpu_verdict(rec)
    t = target_of(rec["compressor"])
    if rec.get("error"):
        return ("", "error")
    if t is None:
        return ("—", "—")
    checked = [k for k, limit in (("compress", t.compress_x_copy), ("decompress", t.decompress_x_copy)) if limit is not None]
    if any(((rec.get("x_copy") or {}).get(k) or {}).get("flags") for k in checked):
        return (t.text(), "flagged")
    ok = True
    if t.compress_x_copy is not None:
        ok &= rec["compress_x_copy"] <= t.compress_x_copy
    if t.decompress_x_copy is not None:
        ok &= rec["decompress_x_copy"] <= t.decompress_x_copy
    if t.vs_torch_topk is not None:
        ok &= all(v["speedup"] >= t.vs_torch_topk for v in rec.get("vs_torch_topk", {}).values())
    return (t.text(), "pass" if ok else "short")
