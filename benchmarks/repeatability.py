"""Do two runs of the same suite agree on their timings?  The check behind "a measurement is a claim".

Usage (two back-to-back runs of one suite on the same machine, then this script)::

    gcbench run suites/quick.toml -o /tmp/a && gcbench run suites/quick.toml -o /tmp/b
    python benchmarks/repeatability.py /tmp/a/*.json /tmp/b/*.json [--tolerance 0.2] [--min-ms 1] [--json]

For every case present and ok in both files it sets the compress ×copy medians side by side and
says whether they agree within ``--tolerance`` (relative to the first run), or whether either run
flagged the timing (``unstable``, ``too short``, ``beats traffic bound``, or ``copy moved`` where the report
says a cache-resident source's copy yardstick moved and ×copy will not repeat: a flagged number is not
claimed as a speed, so disagreement there is expected).  Cases whose compress median is under
``--min-ms`` in both runs are listed but not judged.  The summary line gives the share of judged
cases that agree, that are flagged, and that disagree unflagged: the last must be empty for the
timings to be trusted.  Exit status 1 when any judged case disagrees unflagged.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gcbench.measure.copy_baseline import COPY_SPREAD_LIMIT
from gcbench.results.run_record import RunCase
from gcbench.results.store import load_run


def _cases(path: Path) -> dict[tuple[str, str], RunCase]:
    run = load_run(path)
    return {(c.source_label, c.label): c for c in run.cases if isinstance(c, RunCase) and c.ok and c.timing}


def compare(a: Path, b: Path, tolerance: float, min_ms: float) -> dict[str, object]:
    """Rows (one per common case) and the summary counts."""
    ca, cb = _cases(a), _cases(b)
    rows = []
    for key in [k for k in ca if k in cb]:
        x, y = ca[key].timing.x_copy("compress"), cb[key].timing.x_copy("compress")  # type: ignore[union-attr]
        ms_a, ms_b = ca[key].metric("compress_s"), cb[key].metric("compress_s")
        if x is None or y is None or x.median is None or y.median is None or ms_a is None or ms_b is None:
            continue
        flags = sorted(set(x.flags or []) | set(y.flags or []))
        # the report's caption says so when a cache-resident source's copy yardstick moved: ×copy is not claimed
        if any((t.copy_spread or 0) > COPY_SPREAD_LIMIT for t in (ca[key].timing, cb[key].timing) if t is not None):
            flags.append("copy moved")
        change = y.median / x.median - 1.0
        if max(ms_a, ms_b) * 1e3 < min_ms:
            verdict = "not judged (< min ms)"
        elif flags:
            verdict = "flagged"
        elif abs(change) <= tolerance:
            verdict = "agrees"
        else:
            verdict = "DISAGREES"
        rows.append({"source": key[0], "case": key[1], "x_copy_a": x.median, "x_copy_b": y.median, "change": change,
                     "compress_ms_a": ms_a * 1e3, "compress_ms_b": ms_b * 1e3, "flags": flags, "verdict": verdict})
    judged = [r for r in rows if r["verdict"] != "not judged (< min ms)"]
    count = {v: sum(r["verdict"] == v for r in judged) for v in ("agrees", "flagged", "DISAGREES")}
    return {"a": str(a), "b": str(b), "tolerance": tolerance, "min_ms": min_ms, "rows": rows, "judged": len(judged),
            "counts": count, "flagged_share": count["flagged"] / len(judged) if judged else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("first", type=Path)
    p.add_argument("second", type=Path)
    p.add_argument("--tolerance", type=float, default=0.20, help="relative ×copy change still counted as agreement (0.20)")
    p.add_argument("--min-ms", type=float, default=1.0, help="cases faster than this in both runs are not judged (1 ms)")
    p.add_argument("--json", action="store_true", help="print the rows and summary as JSON")
    args = p.parse_args(argv)
    out = compare(args.first, args.second, args.tolerance, args.min_ms)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{'source':<22} {'case':<18} {'×copy A':>8} {'×copy B':>8} {'change':>7}  verdict")
        for r in out["rows"]:  # type: ignore[union-attr]
            flags = f" ({', '.join(r['flags'])})" if r["flags"] else ""
            print(f"{r['source'][:22]:<22} {r['case'][:18]:<18} {r['x_copy_a']:>7.2f}× {r['x_copy_b']:>7.2f}× "
                  f"{r['change']:>+7.0%}  {r['verdict']}{flags}")
        c = out["counts"]
        share = out["flagged_share"]
        print(f"{out['judged']} cases judged (compress ≥ {args.min_ms:g} ms): {c['agrees']} agree within "  # type: ignore[index]
              f"±{args.tolerance:.0%}, {c['flagged']} flagged ({'-' if share is None else f'{share:.0%}'}), "  # type: ignore[index]
              f"{c['DISAGREES']} disagree unflagged")  # type: ignore[index]
    return 1 if out["counts"]["DISAGREES"] else 0  # type: ignore[index]


if __name__ == "__main__":
    sys.exit(main())
