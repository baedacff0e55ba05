"""The renderer of ``gcbench advise``: predicted speed-ups per cluster, the inputs behind them, one sentence per scenario."""

from __future__ import annotations

from rich.table import Table

from gcbench.distributed.advise import Advice, Step, summary_line
from gcbench.report.text import term


def _speedup(s: Step) -> str:
    text = f"{s.speedup:.2f}×"
    return f"[green]{text}[/]" if s.speedup > 1.0 else text


def advice_output(adv: Advice) -> list[Table | str]:
    """Tables and lines to print, in order (strings are plain text, not markup)."""
    ks = adv.kernels
    out: list[Table | str] = [
        f"{adv.model}: kernels measured on {ks.device} ({ks.machine}) by `gcbench bench --model` ({ks.origin}); "
        f"compute {1e3 * adv.compute_s:.1f} ms per step ({adv.compute_origin}); latency α = {1e6 * adv.latency_s:g} µs per message; "
        + ("a flat network" if adv.topology.flat else
           f"nodes of {adv.topology.gpus_per_node} GPUs ({adv.topology.intra_gbps:g} Gbit/s inside a node, the bandwidth between nodes)")
        + ("; communication overlapped with the backward pass" if adv.overlap else "") + "."]
    if adv.calibration is not None:
        out.append(adv.calibration.describe() + "; kinds it did not measure: the α–β model.")
    bws = sorted({sc.bandwidth_gbps for sc in adv.scenarios})
    for n in sorted({sc.workers for sc in adv.scenarios}):
        scs = {sc.bandwidth_gbps: sc for sc in adv.scenarios if sc.workers == n}
        t = Table(title=f"{n} workers — predicted speed-up over uncompressed all-reduce (above 1× compression pays)", title_justify="left")
        for col, just in (("compressor", "left"), ("protocol", "left"), ("MB/step", "right"), ("compress ms", "right"),
                          ("decode ms", "right"), ("delivered", "right")):
            t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
        for bw in bws:
            t.add_column(f"{bw:g} Gbit/s", justify="right", no_wrap=True)
        first = scs[bws[0]]
        order = sorted(first.steps, key=lambda s: -max(next(x for x in scs[b].steps if x.label == s.label).speedup for b in bws))
        for s in order:
            cells = [_speedup(next(x for x in scs[b].steps if x.label == s.label)) for b in bws]
            k = ks.get(s.label)
            flags = f" ({', '.join(s.flags)})" if s.flags else ""
            t.add_row(term(s.label), s.collective, f"{(k.wire_bytes if k else 0) / 1e6:.3g}", f"{1e3 * s.compress_s:.1f}{flags}",
                      f"{1e3 * s.decompress_s:.1f}", "—" if s.delivered is None else f"{s.delivered.value:.3f}", *cells)
        out.append(t)
        out.extend(summary_line(scs[bw], adv.untrusted_for(scs[bw]), adv.compute_note()) for bw in bws)
    why = adv.untrusted_reasons()
    if why:
        out.append("Flagged timings (re-measured once, still flagged):\n" + "\n".join(f"  {w}" for w in why))
    fid = (f"delivered = fraction of the dense update delivered over a stream, from {adv.fidelity_origin}"
           if adv.fidelity_origin else "delivered: not measured (pass a `gcbench run`/`compare` results file of this model)")
    out.append("step = compute + compress + communication of the compressor's protocol + decode of the payloads it receives "
               "(decode ms: all of them); uncompressed = compute + copy into buckets + all-reduce of fp32 (ring or tree) + copy back; "
               + ("communication overlaps the backward pass (2/3 of compute) bucket by bucket, the last bucket's never"
                  if adv.overlap else "no overlap of communication with the backward pass (--overlap models DDP's)") + f". {fid}.")
    return out
