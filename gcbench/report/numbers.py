"""Numbers as every report writes them: the format kinds of a column, spreads, fractions, element counts.

One module so the terminal, Markdown, HTML and CSV renderers write a number the same way; it knows
nothing of tables or records beyond the values handed to it.
"""

from __future__ import annotations

import math
from typing import Any

from gcbench.results.fields import FLOAT_INT_MAX


def spread_text(v: float, spread: float | None, unit: str = "") -> str:
    """A value and its spread written to the same decimals: ``1.14× ±0.03``, ``12.4× ±0.9``, ``1.00× ±<0.01``.

    Three significant digits for the value from 0.1 up (two decimals under 10, one under 100, none
    above), at least two below (``0.023×``), and the spread at the value's last decimal, so the two
    read as one measurement; a spread that rounds to zero there is written as under one unit of that
    decimal rather than as a false ``±0.00``.
    """
    a = abs(v)
    d = 2 if 0.1 <= a < 10 or a == 0 else 1 if 10 <= a < 100 else 0 if a >= 100 else min(6, 1 - math.floor(math.log10(a)))
    text = f"{v:,.{d}f}{unit}"
    if spread is None or not math.isfinite(spread):
        return text
    step = 10.0 ** -d
    return text + (f" ±{abs(spread):,.{d}f}" if round(abs(spread), d) >= step else f" ±<{step:.{d}f}")


def fraction_text(v: float) -> str:
    """A delivered fraction: three decimals near [0, 1] (EF methods differ in the third), else three digits."""
    return f"{v:.3f}" if abs(v) < 10 else fmt(v, "g")


def size_text(n: Any) -> str:
    """An element count the way ``gcbench bench --sizes`` takes it: 100000 → 100K, 25600000 → 25.6M."""
    if not isinstance(n, int):
        return str(n)
    for div, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "K")):
        if n >= div:
            return f"{n / div:.4g}{suffix}"
    return str(n)


#: the kinds of :func:`fmt` that are one format spec and a suffix
_FIXED_FORMATS: dict[str, tuple[str, str]] = {
    "x": (",.1f", "×"), "x2": (",.2f", "×"), "acc": (".4f", ""), "s": (".2f", ""), "int": (",.0f", ""), "pct": ("+.1%", ""),
}


def fmt(v: float | None, kind: str = "g") -> str:
    """A number as reports write it; ``—`` for missing values (and NaN), ``∞`` for an infinite one.

    An infinite value is a change from a baseline of exactly 0, or a number a file holds beyond
    the float range (``1e999``, a 400-digit integer: the record reads both as infinity).
    """
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > FLOAT_INT_MAX:
        v = math.inf if v > 0 else -math.inf  # a number no float holds (a parameter's value): float formats would raise
    if v is not None and isinstance(v, float) and math.isinf(v):
        return ("+∞" if v > 0 else "−∞") if kind == "pct" else ("∞" if v > 0 else "−∞")
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if kind == "ratio":
        return f"{v:,.1f}×" if v < 1000 else f"{v:,.0f}×"
    if kind == "ms":
        ms = 1e3 * v
        return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}" if ms >= 0.1 else f"{ms:.3g}"
    if kind == "pp":  # a fraction shown in percentage points
        return f"{100 * v:+.2f}"
    if kind == "mb":
        return f"{v / 1e6:.3f}"
    if kind in _FIXED_FORMATS:
        spec, suffix = _FIXED_FORMATS[kind]
        return f"{v:{spec}}{suffix}"
    if v == 0:
        return "0"
    return f"{v:.3g}" if 1e-3 <= abs(v) < 1e5 else f"{v:.2e}"


def or_unknown(v: Any, default: str = "?") -> str:
    return default if v is None else str(v)


def range_text(lo: str, hi: str) -> str:
    """``lo–hi``, or ``lo to hi`` where a bound is negative: "-10.5–-7.38" read as a subtraction."""
    return f"{lo} to {hi}" if lo.startswith(("-", "−")) or hi.startswith(("-", "−")) else f"{lo}–{hi}"
