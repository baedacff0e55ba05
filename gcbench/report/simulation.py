"""The renderer of ``gcbench simulate``: speed-up tables per link speed and the break-even bandwidths."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from gcbench.predict.simulate import CaseCost, Simulation
from gcbench.report.columns import Label
from gcbench.report.text import clip, term


def simulation_output(sim: Simulation) -> list[Table | str]:
    """Tables and footnotes to print, in order (strings are plain text, not markup)."""
    sources = list(dict.fromkeys(c.source for c in sim.cases))  # one table per source: sources are never mixed
    multi_source = len(sources) > 1

    def name(c: CaseCost) -> str:
        return escape(f"{clip(c.label)} [{clip(c.source)}]") if multi_source else term(c.label)

    other = "fp32" if sim.baseline == "bf16" else "bf16"
    out: list[Table | str] = []
    for src in sources:
        for bw in sim.bandwidths_gbps:
            of = f"{term(src)} — " if multi_source else ""
            t = Table(title=f"{of}predicted speed-up over the {sim.baseline} all-reduce ({other} in brackets) — {bw:g} Gbit/s, "
                            f"α = {sim.latency_s * 1e6:g} µs, scheme {sim.scheme}", title_justify="left")
            t.add_column("compressor")
            t.add_column("protocol" if sim.scheme == "auto" else "collective")
            for n in sim.workers:
                t.add_column(f"N={n}", justify="right")
            for c in (c for c in sim.cases if c.source == src):
                cells = []
                for n in sim.workers:
                    p = sim.prediction(c, n, bw)
                    claim, beside = p.speedup_vs(sim.baseline), p.speedup_vs(other)
                    text = f"{claim:.2f}× ({beside:.2f}×)"
                    cells.append(f"[green]{text}[/]" if claim > 1.0 else text)
                t.add_row(Label(c.label), escape(sim.prediction(c, sim.workers[-1], bw).collective), *cells)
            out.append(t)
    t = Table(title=f"break-even bandwidth (Gbit/s) against the {sim.baseline} all-reduce: compression is faster on slower "
                    "links, slower on faster ones", title_justify="left")
    t.add_column("compressor")
    for n in sim.workers:
        t.add_column(f"N={n}", justify="right")
    for c, row in zip(sim.cases, sim.break_even_gbps, strict=True):
        t.add_row(name(c), *("—" if v is None else f"{v:,.3g}" for v in row))
    out.append(t)
    if sim.compute_s is not None:
        comp = f"compute {sim.compute_s * 1e3:g} ms per step (--compute-ms)"
    else:
        comp = "compute measured in training" if sim.kind == "train" else "compute 0 ms (run files have no compute time; set --compute-ms)"
    if sim.scheme == "auto":
        out.append(f"step = {comp} + compress + the compressor's own protocol, leg by leg (algorithms at N={sim.workers[-1]}) + "
                   "decode of the payloads it receives; reference = DDP's path: copy into buckets + fp32 all-reduce (ring or tree) + "
                   "copy back, the copies measured beside the kernels (the model of `gcbench advise`), and the same with a bf16 "
                   "all-reduce (--baseline bf16|fp32 picks the one claimed against); no compute/communication "
                   "overlap. — = compression never pays off (or never loses).")
    else:
        out.append(f"step = {comp} + compress + one {sim.scheme} of the payloads (a what-if: --scheme) + decompress × decoded "
                   "payloads; reference = dense fp32 ring all-reduce (ps: dense parameter server); no compute/communication "
                   "overlap. — = compression never pays off (or never loses).")
    for src, how in sim.bf16_priced:
        out.append(f"bf16 all-reduce{f' ({src})' if multi_source else ''}: {how}.")
    out.append(f"results: {sim.results}")
    return out
