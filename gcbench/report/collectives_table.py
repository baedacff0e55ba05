"""The sharded-collectives sweep as tables: error of the aggregate and bytes per worker against the worker count.

One sweep (``gcbench collectives``, or a suite's ``[collectives]`` table stored as a results file's
top-level ``collectives`` object) is a grid of rows, one per compressor × scheme × accumulation ×
N.  Here it becomes text cells (:func:`grid`), shared by the terminal tables (:func:`terminal_tables`:
``gcbench collectives``, ``gcbench run`` of a suite with a sweep, ``gcbench report``), the Markdown
report (:func:`gcbench.report.markdown.markdown_collectives`) and the HTML page.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SweepGrid:
    """A sweep's two tables as text: the titles, the N columns, one row per compressor/scheme/accumulation."""

    error_title: str
    bytes_title: str
    workers: tuple[int, ...]
    error_rows: tuple[tuple[str, ...], ...]  # compressor, scheme/acc, then a cell per N ('' where the cell did not run)
    bytes_rows: tuple[tuple[str, ...], ...]
    skipped: tuple[str, ...]  # the notes under the tables: one line per reason a cell was left out, and N=1's "—"


def sweep_of(record: Any) -> Mapping[str, Any] | None:
    """The ``collectives`` object of a results record or dict (None when the run had no sweep)."""
    value = record.get("collectives") if isinstance(record, Mapping) else getattr(record, "collectives", None)
    return value if isinstance(value, Mapping) else None


def error_cell(row: Mapping[str, Any]) -> str:
    """The aggregate's error, with its spread over draws as a percentage where it is not negligible."""
    rel = row["error_std"] / row["error"] if row["error"] else 0.0
    return f"{row['error']:.2e}" + (f" ±{100 * rel:.0f}%" if rel >= 0.005 else "")


#: the note under the bytes table of a sweep that includes N = 1 (its cells are "—", not 0/0 = "nan×")
ONE_WORKER = "N=1: one worker exchanges nothing, so there are no bytes to set against a ring all-reduce's (—)"


def bytes_cell(row: Mapping[str, Any]) -> str:
    """Bytes sent per worker × an fp32 ring all-reduce's; "—" where the ring sends nothing (one worker)."""
    x = row.get("x_fp32_ring")
    return "—" if x is None or not math.isfinite(x) else f"{x:.3f}×"


def _skipped_lines(skipped: list[Mapping[str, Any]]) -> tuple[str, ...]:
    """One line per (scheme/accumulation, reason): the same reason for seven compressors is said once."""
    groups: dict[tuple[str, str], list[str]] = {}
    for s in skipped:
        groups.setdefault((f"{s['scheme']}/{s['accumulate']}", str(s["reason"])), []).append(str(s["compressor"]))
    return tuple(f"not run under {where}: {reason} ({', '.join(names)})" for (where, reason), names in groups.items())


def grid(sweep: Mapping[str, Any]) -> SweepGrid:
    """The text of a sweep's tables (a sweep that failed as a whole raises ``KeyError`` on ``rows``: see :func:`failure`)."""
    ns = tuple(int(n) for n in sweep["workers"])
    rows = sweep["rows"]
    keys = list(dict.fromkeys((r["compressor"], r["scheme"], r["accumulate"]) for r in rows))
    cells = {(r["compressor"], r["scheme"], r["accumulate"], r["workers"]): r for r in rows}

    def table(fmt: Any) -> tuple[tuple[str, ...], ...]:
        return tuple((k[0], f"{k[1]}/{k[2]}", *(fmt(cells[(*k, n)]) if (*k, n) in cells else "" for n in ns)) for k in keys)

    return SweepGrid(
        f"aggregate error ‖agg − mean‖/‖mean‖ (mean ±sd over {sweep['draws']} draws), {sweep['numel']:,} elements, "
        f"{sweep['distribution']}",
        "bytes sent per worker, × an fp32 ring all-reduce's",
        ns, table(error_cell), table(bytes_cell), _skipped_lines(list(sweep.get("skipped") or []))
        + ((ONE_WORKER,) if 1 in ns else ()))


def failure(sweep: Mapping[str, Any]) -> str | None:
    """The one line of a sweep that did not run at all (a suite's ``[collectives]`` that failed), else None."""
    return f"collectives sweep failed: {sweep['error']}" if "error" in sweep and "rows" not in sweep else None


def terminal_tables(sweep: Mapping[str, Any]) -> list[Any]:
    """Two rich tables (error, then bytes × an fp32 ring all-reduce) and the skipped cells' lines."""
    from rich.table import Table

    bad = failure(sweep)
    if bad is not None:
        return [bad]
    g = grid(sweep)
    out: list[Any] = []
    for title, rows in ((g.error_title, g.error_rows), (g.bytes_title, g.bytes_rows)):
        t = Table(title=title, title_justify="left")
        for name in ("compressor", "scheme/acc"):
            t.add_column(name, no_wrap=True)
        for n in g.workers:
            t.add_column(f"N={n}", justify="right", no_wrap=True)
        for row in rows:
            t.add_row(*row)
        out.append(t)
    out.extend(g.skipped)
    return out
