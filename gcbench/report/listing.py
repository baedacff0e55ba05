"""Renderers of ``gcbench list`` and ``gcbench check``: cards, models, suites, metrics and contract checks as tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from gcbench.core.info import CompressorInfo

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
        t.add_row(escape(card.name), str(card.version), _flags(card), desc, escape(card.paper))
    return t


def card_table(card: CompressorInfo, origin: str) -> Table:
    """Everything on one compressor's card (``gcbench list NAME``)."""
    t = Table(title=f"{card.name} (version {card.version})", title_justify="left", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    target = card.target.text() if card.target is not None else "—"
    if card.target is not None and card.target.decompress_x_copy is not None:
        target = ", ".join(x for x in (target, f"decompress ≤ {card.target.decompress_x_copy:g}× copy") if x)
    proto = card.protocol
    legs = f"{proto.allreduce_rounds} all-reduce(s)" if proto.allreduce else "all-gather"
    rows = [("description", escape(card.description)), ("paper", escape(card.paper)), ("flags", _flags(card)),
            ("protocol", escape(f"{proto.name}: {proto.description} ({legs}{', per tensor' if proto.per_tensor else ''})")),
            ("bench target", escape(target)),
            ("traffic bound", f"{card.traffic_bytes:g} bytes read+written per element"),
            ("min workers", str(card.min_workers)), ("from", escape(origin)), ("implementation", escape(card.impl)),
            ("parameters", _param_lines(card) or "—")]
    for k, v in rows:
        t.add_row(k, v)
    return t


def models_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    t = Table(title="models (or any package.module:factory); hf: models take size options: hf:gpt2:layers=4,hidden=256,heads=4",
              title_justify="left")
    for col, just in (("name", "left"), ("parameters", "right"), ("tensors", "right"), ("extra", "left"), ("description", "left")):
        t.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
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
