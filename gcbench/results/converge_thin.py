"""Curves of a convergence file thinned while it is decoded: what reports and advise read is bounded, not the file.

A convergence file holds every evaluation of every seed of every compressor (``SeedRun.curve``) and the mean curve
over seeds with its band (``ConvergeSummary.curve_*``).  A long run evaluated often makes that most of the file: a
57 MB file of 8 compressors × 3 seeds × 20,001 evaluations took 870 MB and 46 s to report, and one at the 256 MiB
cap would take gigabytes.  No reader needs every point: the plots and tables draw a curve, and every number they
print (final metric, gap, steps to the target, reached, diverged) is the summary's, kept exact.

:func:`thin_curves` is a ``json`` ``object_hook``: the decoder calls it on each object as soon as the object is
complete, innermost first, so a seed's curve is cut to :data:`MAX_CURVE_POINTS` right after it is decoded and before
the next one is, and the full lists never coexist.  What is kept of a curve of ``n > MAX_CURVE_POINTS`` points:
evenly spaced ones, always the first and the last, and a seed's point at its ``steps_to_target`` (so the step that
reached the target stays on the curve).  The summary's parallel lists (``curve_steps``, ``curve_mean``,
``curve_low``, ``curve_high``, ``loss_mean``) are cut at the same indices, together.  A thinned object records how
many points it had (:data:`THINNED_FROM`), which the reports say.

Only readers use it (``gcbench report``, ``advise --convergence``): a file is never rewritten from a thinned record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: the most points one curve keeps when read for a report: far more than a plot's width or a table's rows need
MAX_CURVE_POINTS = 1000

#: the key a thinned curve's object gets: how many points the file held (the reports say they drew fewer)
THINNED_FROM = "curve_points_in_file"

#: the summary's lists that run parallel to ``curve_steps`` (one value per evaluated step)
SUMMARY_SERIES = ("curve_steps", "curve_mean", "curve_low", "curve_high", "loss_mean")


def kept_indices(n: int, limit: int = MAX_CURVE_POINTS, must: Sequence[int] = ()) -> list[int]:
    """The indices of ``n`` points that a curve thinned to about ``limit`` keeps: evenly spaced, the first and the last,
    and every index of ``must`` (in range); all of them when ``n <= limit``."""
    if n <= limit:
        return list(range(n))
    spaced = {round(i * (n - 1) / (limit - 1)) for i in range(limit)}
    return sorted(spaced | {i for i in must if 0 <= i < n})


def _hit_index(curve: list[Any], step: Any) -> list[int]:
    if not isinstance(step, int) or isinstance(step, bool):
        return []
    return [i for i, p in enumerate(curve) if isinstance(p, dict) and p.get("step") == step][:1]


def thin_curves(obj: dict[str, Any]) -> dict[str, Any]:
    """A ``json`` ``object_hook``: a seed run's ``curve`` and a summary's curve lists cut to :data:`MAX_CURVE_POINTS`
    (see the module docstring); every other object as it is."""
    curve = obj.get("curve")
    if isinstance(curve, list) and len(curve) > MAX_CURVE_POINTS and "seed" in obj and "status" in obj:
        keep = kept_indices(len(curve), must=_hit_index(curve, obj.get("steps_to_target")))
        obj["curve"] = [curve[i] for i in keep]
        obj[THINNED_FROM] = len(curve)
        return obj
    steps = obj.get("curve_steps")
    if isinstance(steps, list) and len(steps) > MAX_CURVE_POINTS and "curve_mean" in obj:
        keep = kept_indices(len(steps))
        for name in SUMMARY_SERIES:
            series = obj.get(name)
            if isinstance(series, list) and len(series) == len(steps):  # a list of another length is left to validation
                obj[name] = [series[i] for i in keep]
        obj[THINNED_FROM] = len(steps)
    return obj
