"""The threshold compressor's compress pass by pass, as multiples of a copy of the same tensor (interleaved).

Run:  python benchmarks/threshold_passes.py [--numel 25600000] [--rounds 9] [--threads 2] [--tau 0.001]

Each round times a plain copy (torch, preallocated), the formation-and-count pass
(:func:`gcbench.kernels.add_count`), the selection pass alone (:func:`gcbench.compressors._sparse.select_encode`
with the counts given: the body's allocation, its page faults and the write pass), and the whole
``compress``, on a residual in steady state (one step taken first, as ``gcbench bench`` does);
medians over rounds, with the minor page faults (``ru_minflt``) each part took.  A profile for
finding what limits the row, not a test.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors import _sparse, registry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=25_600_000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tau", type=float, default=1e-3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x = torch.randn(args.numel, generator=torch.Generator().manual_seed(0))
    comp = registry.create("threshold", tau=args.tau)
    state = comp.init_state(0)
    comp.compress(x, state)  # steady state: the residual exists
    t = kernels.f32_threshold(args.tau, strict=True)
    buf = torch.empty_like(x)
    times: dict[str, list[float]] = {}
    faults: dict[str, list[int]] = {}

    def timed(name: str, fn: Callable[[], object]) -> object:
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        out = fn()
        times.setdefault(name, []).append(time.perf_counter() - t0)
        faults.setdefault(name, []).append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        return out

    k = 0
    for _ in range(args.rounds):
        timed("copy", lambda: buf.copy_(x))
        e = state.clone().tensors["residual"].reshape(-1).numpy()
        counts = timed("add_count: e += x, counts", lambda e=e: kernels.add_count(e, x.numpy(), t))
        sel = timed("select_encode (alloc + write)", lambda e=e, c=counts: _sparse.select_encode(
            e, t, "fixed", counts=c, zero_mode=kernels.ZERO_SUB))
        k = sel.k  # type: ignore[attr-defined]
        del sel
        st = state.clone()
        timed("whole compress", lambda st=st: comp.compress(x, st))
    copy = float(np.median(times["copy"]))
    print(f"threshold tau={args.tau}, {args.numel:,} elements, {args.threads} threads, density {k / args.numel:.4f}; "
          f"medians of {args.rounds} rounds")
    for name, ts in times.items():
        med = float(np.median(ts))
        print(f"  {name:32s} {1e3 * med:8.2f} ms  {med / copy:5.2f}x copy  (spread {min(ts) / copy:5.2f}-{max(ts) / copy:5.2f}x)"
              f"  minflt {int(np.median(faults[name])):7d}")


if __name__ == "__main__":
    main()
