"""Replay the bench's timing flag rules over the rounds a stored bench file recorded: which rows does each rule flag?

Usage::

    PYTHONPATH=. python benchmarks/replay_flags.py baselines/reference/bench.json [--trials 200] [--seed 0]

For every row and kernel it prints the recorded flags and, per rule:

* ``ci@N``: the median's 95% CI over the N stored rounds (the old bench: exactly ``--rounds``
  rounds) against ``unstable_rel_ci``;
* ``calibrated``: today's bench calibration (:func:`gcbench.measure.bench.bench_policy`: at least N
  rounds, more until the CI is within ``stable_rel_ci``, at most the cap or budget), replayed by
  drawing rounds (copy and kernel of one round together) from the stored ones with replacement:
  the share of ``--trials`` replays that end flagged.  The stored rounds stand for the machine's
  distribution of rounds, slow ones included at the rate they happened;
* ``load``: the recorded 1-minute load per core against ``load_per_core`` (the bench's own threads
  included), and the other processes' CPU share (``foreign_cpu``) where the file recorded it.

The summary counts rows (compressor × size) with any kernel flagged by each rule.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from gcbench.measure.bench import bench_policy
from gcbench.measure.timing import TimingPolicy, calibration_done, rel_ci


def calibrated_flag_rate(copy: list[float], kernel: list[float], repeats: int, trials: int, rng: random.Random) -> float:
    """The share of replays of the bench's calibration on rounds drawn from (copy, kernel) that end ``unstable`` by their CI."""
    policy = bench_policy(repeats, 1)
    pairs = list(zip(copy, kernel, strict=True))
    flagged = 0
    for _ in range(trials):
        x: list[float] = []
        elapsed = 0.0
        while True:
            c, k = rng.choice(pairs)
            x.append(k / c)
            elapsed += c + k
            if calibration_done({"k": x}, elapsed, policy) is not None:
                break
        spread = rel_ci(x)
        flagged += spread is not None and spread > policy.unstable_rel_ci
    return flagged / trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    p = TimingPolicy()
    for path in args.files:
        data: dict[str, Any] = json.loads(path.read_text())
        rng = random.Random(args.seed)
        rows = {"recorded": 0, "ci@N": 0, "calibrated": 0.0, "load": 0, "foreign": 0}
        cases = [c for c in data["cases"] if not c.get("error")]
        for c in cases:
            hit = {k: False for k in rows}
            rate_row = 0.0
            for kernel in ("compress", "decompress"):
                block = c["x_copy"][kernel]
                copy, kern = c["copy"]["samples_s"], c[kernel]["samples_s"]
                if len(copy) != len(kern):  # compress and decompress rounds of one case share no copy list in old files
                    kern = kern[: len(copy)]
                    copy = copy[: len(kern)]
                n = len(block["samples"])
                ci = rel_ci(block["samples"]) or 0.0
                rate = calibrated_flag_rate(copy, kern, n, args.trials, rng)
                rate_row = max(rate_row, rate)
                hit["recorded"] |= bool(block["flags"])
                hit["ci@N"] |= ci > p.unstable_rel_ci
                print(f"{c['label']:22s} {kernel:10s} x{block['median']:6.2f} recorded {','.join(block['flags']) or '-':9s} "
                      f"ci@{n} ±{ci:5.1%}  calibrated flags {rate:5.1%} of replays")
            load = c.get("load_per_core")
            hit["load"] = load is not None and load > p.load_per_core
            foreign = c.get("foreign_cpu")
            hit["foreign"] = foreign is not None and foreign > p.foreign_cpu
            for k in ("recorded", "ci@N", "load", "foreign"):
                rows[k] += hit[k]
            rows["calibrated"] += rate_row
        print(f"{path}: {len(cases)} rows; flagged as recorded {rows['recorded']}, by the CI over the stored rounds "
              f"{rows['ci@N']}, by the load average {rows['load']}, by other processes' CPU {rows['foreign']}; "
              f"by the calibrated CI {rows['calibrated']:.2f} rows on average over {args.trials} replays")


if __name__ == "__main__":
    main()
