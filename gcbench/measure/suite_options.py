"""A suite from command-line options: ``gcbench run``'s overrides of a suite file (:func:`apply_overrides`) and the
one-source suite of ``gcbench compare`` (:func:`compare_suite`), each validated as a suite file is
(:func:`gcbench.measure.suite.parse_suite`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gcbench.core.errors import GcbenchError
from gcbench.measure.suite import Suite, parse_suite


def apply_overrides(
    suite: Suite,
    *,
    seed: int | None = None,
    device: str | None = None,
    repeats: int | None = None,
    trace: str | None = None,
    model: str | None = None,
    workers: int | None = None,
    steps: int | None = None,
    granularity: str | None = None,
    bucket_mb: float | None = None,
    compressors: list[tuple[str, dict[str, Any]]] | None = None,
    timing: bool | None = None,
    loop: str | None = None,
) -> Suite:
    """Command-line overrides (they win over the suite file); re-validated."""
    data = suite.to_dict()
    m = data["metrics"]
    for where, key, value in ((data, "seed", seed), (data, "granularity", granularity), (data, "bucket_mb", bucket_mb),
                              (m, "device", device), (m, "repeats", repeats), (m, "timing", timing)):
        if value is not None:
            where[key] = value
    if trace is not None:
        data["sources"] = [{"kind": "trace", "path": trace}]
    elif model is not None:
        data["sources"] = [{"kind": "live", "model": model, "workers": 4, "steps": 10}]
    for src in data["sources"]:
        if workers is not None:
            src["workers"] = workers
        if steps is not None:
            src["steps"] = steps
        if loop is not None:
            src["loop"] = loop
    if compressors is not None:
        data["compressors"] = [{"name": n, "params": p} for n, p in compressors]
        for c in data["compressors"]:
            c["label"] = None
    # drop keys that are None so defaults apply and validators see the user's intent
    data["sources"] = [{k: v for k, v in s.items() if v is not None} for s in data["sources"]]
    data["compressors"] = [{k: v for k, v in c.items() if v is not None} for c in data["compressors"]]
    data["metrics"] = {k: v for k, v in m.items() if v is not None}
    return parse_suite(data, "<command line>")


def compare_suite(
    compressors: Sequence[tuple[str, dict[str, Any]]],
    *,
    momentum: float,
    extra: Sequence[dict[str, Any]] = (),
    trace: str | None = None,
    model: str | None = None,
    shape: str | None = None,
    distribution: str = "normal",
    workers: int | None = None,
    steps: int | None = None,
    repeats: int = 8,
    rounds: int = 7,
    granularity: str = "layer",
    seed: int = 0,
    device: str = "cpu",
    loop: str | None = None,
) -> Suite:
    """The suite of a head-to-head (``gcbench compare``): ``compressors`` then ``extra`` entries on one gradient source.

    The source is the recorded ``trace`` (all its workers and steps unless given), else live gradients of
    ``model`` (4 workers, 10 steps by default), else synthetic tensors of ``shape`` (``"1000x1000"``, default
    1024x1024) drawn from ``distribution`` (2 workers, 10 steps).  ``momentum`` is the reference optimizer's.
    """
    if trace:
        src: dict[str, Any] = {"kind": "trace", "path": trace}
    elif model:
        src = {"kind": "live", "model": model, "workers": workers or 4, "steps": steps or 10}
    else:
        try:
            dims = [int(v) for v in (shape or "1024x1024").lower().replace("×", "x").split("x")]
        except ValueError:
            raise GcbenchError(f"--shape: expected dimensions like 1000x1000, got {shape!r}") from None
        src = {"kind": "synthetic", "distribution": distribution, "shapes": [dims], "workers": workers or 2, "steps": steps or 10}
    if trace and (workers or steps):
        src.update({k: v for k, v in (("workers", workers), ("steps", steps)) if v})
    if loop is not None:
        src["loop"] = loop
    return parse_suite({
        "name": "compare", "seed": seed, "granularity": granularity, "sources": [src],
        "compressors": [{"name": n, "params": p} for n, p in compressors] + list(extra),
        # a head-to-head times few cases: 3 s of rounds each pins the median of a 100 ms kernel (1 s gives ~7 rounds)
        "metrics": {"repeats": repeats, "timing_repeats": rounds, "warmup": 1, "device": device, "timing_budget_s": 3.0},
        "optimizer": {"momentum": momentum},
    }, "<compare>")
