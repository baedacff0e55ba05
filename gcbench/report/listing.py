"""Renderers of ``gcbench list`` and ``gcbench check``: cards, models, suites, metrics and contract checks as tables."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from gcbench.core.errors import GcbenchError
from gcbench.core.info import CompressorInfo
from gcbench.report.text import term

if TYPE_CHECKING:
    from gcbench.compressors.check import CheckResult  # the checks import torch; listing must not


def _flags(card: CompressorInfo) -> str:
    flags = card.flags().replace("RECONSTRUCTED", "[bold yellow]RECONSTRUCTED[/]")  # at default parameters
    return flags + (f" ({escape(card.bias_note())})" if card.bias_note() else "")


def _param_lines(card: CompressorInfo) -> str:
    return "\n".join(f"  [dim]{escape(f'{p.name}={p.default!r}')}[/] ({escape(p.range_text())}): {escape(p.help)}" for p in card.params)


def compressors_table(cards: Sequence[CompressorInfo], origins: Mapping[str, str], with_params: bool = False) -> Table:
    """One row per card; plugins say which package they come from."""
    t = Table(title=f"{len(cards)} compressors", title_justify="left")
    for col in ("name", "v", "flags", "description", "paper"):
        t.add_column(col, overflow="fold")
    for card in cards:
        desc = escape(card.description)
        if origins.get(card.name, "gcbench") != "gcbench":
            desc += f"\n  [cyan]{escape(origins[card.name])}[/]"
        if with_params:
            desc += "\n" + _param_lines(card)
        t.add_row(term(card.name), str(card.version), _flags(card), desc, escape(card.paper))
    return t


#: the tensor a card's wire format is measured on: 2^18 float32 elements, a mid-sized layer, N(0, 1) with seed 0
WIRE_SAMPLE_SHAPE = (512, 512)


@dataclass(frozen=True)
class WireSample:
    """One real encoding of the sample tensor at a card's default parameters: what one worker sends on its first step."""

    codec: str
    version: int
    shape: tuple[int, ...]
    header_bytes: int
    body_bytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def bits_per_element(self) -> float:
        return 8 * (self.header_bytes + self.body_bytes) / self.numel

    def text(self) -> str:
        shape = "×".join(str(d) for d in self.shape)
        return (f"{self.bits_per_element:.4g} bits/element ({32 / self.bits_per_element:.4g}× fewer than float32): payload "
                f"'{self.codec}' v{self.version}, {self.header_bytes} B header (codec, version, dtype, shape, decode settings) "
                f"+ {self.body_bytes:,} B body, counted by encoding one N(0, 1) {shape} float32 tensor at the defaults, "
                "first step; adaptive and stateful compressors send other sizes on other data (a run's ratio column has yours)")

    def to_dict(self) -> dict[str, Any]:
        return {"codec": self.codec, "version": self.version, "shape": list(self.shape), "header_bytes": self.header_bytes,
                "body_bytes": self.body_bytes, "bits_per_element": self.bits_per_element}


def wire_sample(card: CompressorInfo, shape: tuple[int, ...] = WIRE_SAMPLE_SHAPE) -> WireSample:
    """Encode the sample tensor with ``card``'s compressor at its defaults: the card's bit count, counted from real bytes.

    Imports torch and the implementation (a card alone is torch-free); a plugin whose module does
    not import raises its one-line :class:`~gcbench.core.errors.GcbenchError`.
    """
    import torch

    comp = card.load()()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    p = comp.compress(x, comp.init_state(0))
    return WireSample(p.codec, p.version, tuple(p.shape), len(p.header), p.body_nbytes)


def card_rows(card: CompressorInfo, origin: str, wire: WireSample | str | None) -> list[tuple[str, str]]:
    """(field, value) rows of one compressor's card, unescaped: what ``gcbench list NAME`` shows.

    ``wire``: the measured encoding, or a line saying why there is none (default: the unmeasured layout line).
    """
    target = card.target.text() if card.target is not None else "—"
    if card.target is not None and card.target.decompress_x_copy is not None:
        target = ", ".join(x for x in (target, f"decompress ≤ {card.target.decompress_x_copy:g}× copy") if x)
    proto = card.protocol
    legs = f"{proto.allreduce_rounds} all-reduce round(s)" if proto.allreduce else "all-gather"
    flags = card.resolve_flags()
    return [
        ("description", card.description),
        ("paper", card.paper),
        ("reconstructed", "YES: a reconstructed definition, the paper's body was unavailable; read its results with care"
         if card.reconstructed else "no: implemented from the paper (and its code where named)"),
        ("flags", flags.text() + (f" ({card.bias_note()})" if card.bias_note() else "")
         + f"; {'deterministic' if flags.deterministic else 'randomised (seeded by its state)'}"),
        ("protocol", f"{proto.name}: {proto.description} ({legs}{', per tensor' if proto.per_tensor else ''}"
                     f"{', summable payloads' if proto.summable else ''})"),
        ("wire format", wire.text() if isinstance(wire, WireSample) else wire or str(wire_text(card, measure=False))),
        ("bench target", target + _gpu_target_text(card)),
        ("device path", _device_path_text(card)),
        ("traffic bound", f"{card.traffic_bytes:g} bytes read+written per element (a copy: 8); a timing under it is flagged"),
        ("min workers", str(card.min_workers)),
        ("from", origin),
        ("implementation", card.impl),
    ]


def _gpu_target_text(card: CompressorInfo) -> str:
    """The card's GPU target as the bench holds a CUDA row of 64M elements to it (empty: reported only)."""
    from gcbench.measure.gpu_targets import gpu_target_of  # torch-free: cards and a table

    limit = gpu_target_of(card)
    return "" if limit is None else f"; on a GPU compress and decompress ≤ {limit:g}× a device copy @64M"


def _device_path_text(card: CompressorInfo) -> str:
    """Where the torch path (every CUDA tensor's) reads the device: the card's scalar-read budget."""
    reads = ("no scalar reads" if not card.scalar_reads
             else f"at most {card.scalar_reads} scalar read(s) per call: {card.scalar_reads_where}")
    moved = f"host to device: {card.host_transfers}" if card.host_transfers else "no host copies"
    return f"torch operations on the tensor's device, {moved}; {reads}"


def wire_text(card: CompressorInfo, measure: bool) -> WireSample | str:
    """The card's wire-format row: measured (:func:`wire_sample`, imports torch) or, unmeasured, what the payload holds.

    ``gcbench list NAME`` must start without torch (~2 s of import alone), so the terminal card
    measures only when asked; the layout line then says how to get the bit count.
    """
    if measure:
        try:
            return wire_sample(card)
        except GcbenchError as exc:  # a plugin whose implementation does not import: the rest of the card still shows
            return f"not measured: {exc}"
    return (f"payload '{card.name}' v{card.version}: a header (codec, version, dtype, shape, decode settings: about "
            f"15-50 B) + the codec's body; bits/element counted from real encodings: the ratio column of "
            f"`gcbench bench {card.name}` or of a run")


def card_table(card: CompressorInfo, origin: str, wire: WireSample | str | None = None) -> Table:
    """Everything on one compressor's card (``gcbench list NAME``); ``wire``: :func:`wire_text` (default: unmeasured)."""
    t = Table(title=f"{escape(card.name)} (version {card.version})", title_justify="left", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    for k, v in card_rows(card, origin, wire):
        value = escape(v)
        if k == "reconstructed" and card.reconstructed:
            value = f"[bold yellow]{value}[/]"
        t.add_row(k, value)
    t.add_row("parameters", _param_lines(card) or "—")
    return t


def card_dict(card: CompressorInfo, origin: str, wire: WireSample | None = None) -> dict[str, Any]:
    """The card as ``gcbench list NAME --json`` gives it: the record's fields, its origin and the measured wire format."""
    return {**card.to_dict(), "origin": origin, "wire": wire.to_dict() if wire is not None else None}


def models_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    t = Table(title="models (or any package.module:factory); hf: models take size options: hf:gpt2:layers=4,hidden=256,heads=4",
              title_justify="left")
    for col, just in (("name", "left"), ("parameters", "right"), ("tensors", "right"), ("extra", "left"), ("description", "left")):
        t.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]  # the pairs above hold rich's justify names
    for r in rows:
        missing = r["extra"] is not None and r["parameters"] is None
        extra = escape(r["extra"] or "built in") + (" (not installed)" if missing else "")  # "[hf]" is not rich markup
        t.add_row(r["name"], "—" if r["parameters"] is None else f"{r['parameters']:,}",
                  "—" if r["tensors"] is None else str(r["tensors"]), extra, r["description"])
    return t


def suites_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    t = Table(title="bundled suites", title_justify="left")
    for col in ("name", "compressors", "description"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(escape(r["name"]), str(r["compressors"]), escape(r["description"]))  # a suite's own text
    return t


def metrics_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    t = Table(title="metrics", title_justify="left")
    for col in ("name", "unit", "better", "description"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(r["name"], r["unit"], "higher" if r["higher_is_better"] else "lower", r["description"])
    return t


def check_table(spec: str, results: Sequence[CheckResult]) -> Table:
    """The contract checks of one compressor configuration: pass/FAIL and why."""
    failed = sum(not r.ok for r in results)
    verdict = "[green]all passed[/]" if not failed else f"[bold red]{failed} failed[/]"
    t = Table(title=f"gcbench check {escape(spec)}: {verdict}", title_justify="left")
    for col in ("check", "result", "what it checks / why it failed"):
        t.add_column(col, overflow="fold")
    for r in results:
        t.add_row(r.check, "[green]pass[/]" if r.ok else "[bold red]FAIL[/]", escape(r.what if r.ok else r.detail))
    return t
