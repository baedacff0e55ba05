"""AdaComp's encode and decode pass by pass, as multiples of a copy of the same tensor (interleaved).

Run:  python benchmarks/adacomp_passes.py [--numel 25600000] [--rounds 9] [--threads 2]

Each round times a plain copy (torch, preallocated), pass 1 (:func:`gcbench.kernels.adacomp_bin_stats`),
the scale, pass 2 (:func:`gcbench.kernels.adacomp_encode`, with the counts packed first), the whole
fast encode and the decompress, on a residue in steady state (one step taken first, as
``gcbench bench`` does); medians over rounds.  A profile for finding what limits the row, not a test.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors import registry
from gcbench.compressors.adacomp import adacomp_fast_encode, adacomp_scale, count_width, index_width


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=25_600_000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bin", type=int, default=500, help="bin length L (500: the paper's for 2-D weights)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n, L = args.numel, args.bin
    x = torch.randn(n, generator=torch.Generator().manual_seed(0))
    e0 = torch.zeros(n)
    adacomp_fast_encode(x.numpy(), e0.numpy(), L, "sign_scale", False)  # steady state
    comp = registry.create("adacomp", bin_size=L)
    payload = comp.compress(x, comp.init_state(0))
    buf = torch.empty_like(x)
    times: dict[str, list[float]] = {}

    def timed(name: str, fn: Callable[[], object]) -> object:
        t = time.perf_counter()
        out = fn()
        times.setdefault(name, []).append(time.perf_counter() - t)
        return out

    cw, ew = count_width(L), index_width(L) + 1
    for _ in range(args.rounds):
        timed("copy", lambda: buf.copy_(x))
        e = e0.clone().numpy()
        gmax, counts = timed("pass 1: bin max, counts", lambda e=e: kernels.adacomp_bin_stats(e, x.numpy(), L))
        scale = timed("scale", lambda g=gmax: adacomp_scale(g))
        nbins, nsel = counts.size, int(counts.sum())
        stream = np.zeros((nbins * cw + nsel * ew + 7) // 8, np.uint8)

        def pass2(e: np.ndarray = e, gmax: np.ndarray = gmax, counts: np.ndarray = counts, scale: float = scale,
                  stream: np.ndarray = stream, bit0: int = nbins * cw) -> None:
            kernels.pack_into(counts, cw, stream)
            kernels.adacomp_encode(e, x.numpy(), L, gmax, counts, np.float32(scale), True, ew, stream, bit0, False)

        timed("pass 2: fields, residue", pass2)
        e2 = e0.clone().numpy()  # outside the timing: a fresh 100 MB residue faults its pages on first write
        timed("whole fast encode", lambda e2=e2: adacomp_fast_encode(x.numpy(), e2, L, "sign_scale", False))
        timed("decompress", lambda: comp.decompress(payload))
    copy = float(np.median(times["copy"]))
    print(f"adacomp L={L}, {n:,} elements, {args.threads} threads, density {nsel / n:.3f}; medians of {args.rounds} rounds")
    for name, ts in times.items():
        med = float(np.median(ts))
        print(f"  {name:26s} {1e3 * med:8.2f} ms  {med / copy:5.2f}x copy")


if __name__ == "__main__":
    main()
