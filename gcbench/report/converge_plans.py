"""The per-plan section of a convergence run's reports: each plan's rules, and the plan beside its parts.

A plan's case (``convergence.plan``, :class:`gcbench.results.converge_record.ConvergePlan`) holds
per rule the tensors and elements it took and the bytes they sent.  For every plan of a run the
reports (``converge``'s own table, ``report`` in terminal, Markdown and HTML) show two tables:

* **rules**: per rule its matchers and compressor, its tensors and elements, the bytes one worker
  sent per inner step under it, and its share of the plan's bytes;
* **beside its parts**: the plan and the single compressors it mixes that ran in the same file
  (the reference stands for ``none``), with the final metric, the gap to the reference, the steps
  to the target (inner steps) and the bytes per inner step, so the plan reads against each part.

The rows are plain strings (:class:`PlanSection`); each report lays them out its own way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gcbench.predict.accuracy import same_spec
from gcbench.report.converge_table import _bytes, _iv, metric_name

RULE_HEADERS = ("rule", "tensors", "elements", "bytes/worker/step", "bytes share", "compressor")
BESIDE_HEADERS = ("final {metric}", "gap to ref", "steps to target", "bytes/worker/step")


@dataclass(frozen=True)
class PlanSection:
    """One plan's two tables as text: its rules and the plan beside its parts (see the module docstring)."""

    label: str
    summary: str
    rules: list[list[str]]
    beside: list[list[str]]
    beside_headers: tuple[str, ...]


def _summary(p: Mapping[str, Any]) -> str:
    """``8 local steps (outer SGD lr 0.7, Nesterov momentum 0.9), 20 warm-up steps with none``: the plan's schedule."""
    parts = []
    if (p.get("local_steps") or 1) > 1:
        o = p.get("outer") or {}
        kind = "Nesterov momentum" if o.get("nesterov") else "momentum"
        parts.append(f"{p['local_steps']} local steps per exchange of the pseudo-gradient (outer SGD lr {o.get('lr', 0):g}, "
                     f"{kind} {o.get('momentum', 0):g})")
    else:
        parts.append("an exchange every step")
    n = p.get("warmup_steps") or 0
    if n:
        warm = p.get("warmup_sent_per_worker_per_step")
        parts.append(f"first {n} step{'s' if n != 1 else ''} with {p.get('warmup')} on every tensor (the warm-up"
                     + (f", {_bytes(warm)} of the plan's bytes/worker/step)" if warm is not None else ")"))
    return ", ".join(parts) + "; steps are inner steps"


def _rule_rows(p: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for part in p.get("parts") or []:
        share = part.get("bytes_share")
        rows.append([str(part.get("label", "?")).split(" → ")[0], str(part.get("tensors", "")), f"{int(part.get('elements') or 0):,}",
                     _bytes(part.get("sent_per_worker_per_step")), "—" if share is None else f"{100 * share:.1f}%",
                     str(part.get("compressor", ""))])
    return rows


def _outcome_row(name: str, case: Mapping[str, Any]) -> list[str]:
    conv = case.get("convergence") or {}
    s = conv.get("summary") or {}
    if case.get("status") != "ok" and not s.get("final_metric"):
        return [name, "failed", "", "", ""]
    n = s.get("seeds", 0)
    steps = _iv(s.get("steps_to_target"), "int")
    if s.get("reached") is not None:
        steps += f" ({s['reached']}/{n})"
    return [name, _iv(s.get("final_metric")), "0" if conv.get("reference") else _iv(s.get("gap"), signed=True), steps,
            _bytes((conv.get("bytes") or {}).get("sent_per_worker_per_step"))]


def _parts(p: Mapping[str, Any]) -> list[str]:
    """The distinct compressor specs a plan mixes: its rules', then its warm-up's."""
    specs: list[str] = []
    for spec in [r.get("compressor") for r in p.get("rules") or []] + ([p.get("warmup")] if p.get("warmup_steps") else []):
        if isinstance(spec, str) and spec not in specs:
            specs.append(spec)
    return specs


def plan_sections(cases: Sequence[Mapping[str, Any]]) -> list[PlanSection]:
    """A :class:`PlanSection` per plan case of a run (JSON-ready case dicts), in the run's order."""
    settings = ((cases[0].get("convergence") or {}).get("settings") or {}) if cases else {}
    headers = tuple(h.format(metric=metric_name(settings)) for h in BESIDE_HEADERS)
    out = []
    for case in cases:
        p = (case.get("convergence") or {}).get("plan")
        if not p:
            continue
        beside = [_outcome_row(str(case.get("label")), case)]
        for spec in _parts(p):
            other = next((c for c in cases if not (c.get("convergence") or {}).get("plan")
                          and same_spec(str(c.get("label")), spec)), None)
            if other is not None:
                ref = " (ref)" if (other.get("convergence") or {}).get("reference") else ""
                beside.append(_outcome_row(f"  {other.get('label')}{ref}", other))
        out.append(PlanSection(str(case.get("label")), _summary(p), _rule_rows(p), beside, headers))
    return out


def rich_tables(sections: Sequence[PlanSection]) -> list[Any]:
    """Two Rich tables per plan (the terminal): its rules, and the plan beside its parts."""
    from rich.table import Table

    from gcbench.report.columns import Label
    from gcbench.report.text import term

    out: list[Any] = []
    for sec in sections:
        rules = Table(title=term(f"{sec.label}: rules", 116), title_justify="left", caption=sec.summary + ".",
                      caption_justify="left")
        for i, h in enumerate(RULE_HEADERS):
            rules.add_column(h, justify="left" if i in (0, 5) else "right", no_wrap=i not in (0, 5),
                             max_width=30 if i in (0, 5) else None)
        for row in sec.rules:
            rules.add_row(Label(row[0]), *row[1:5], Label(row[5]))
        beside = Table(title=term(f"{sec.label} beside its parts (steps to target: inner steps, and the seeds that reached it)",
                                  116), title_justify="left")
        beside.add_column("plan / part", max_width=24)
        for h in sec.beside_headers:
            beside.add_column(h, justify="right", no_wrap=True)
        for row in sec.beside:
            beside.add_row(Label(row[0]), *row[1:])
        out += [rules, beside]
    return out


def markdown_sections(sections: Sequence[PlanSection], md_escape: Any, md_table: Any) -> str:
    """The Markdown of every plan's two tables (``md_escape``/``md_table``: :mod:`gcbench.report.markdown`'s)."""
    parts = []
    for sec in sections:
        parts += [f"### {md_escape(sec.label)}", "", md_escape(sec.summary) + ".", "",
                  md_table([md_escape(h) for h in RULE_HEADERS], [[md_escape(c) for c in r] for r in sec.rules],
                           [False, True, True, True, True, False]), "",
                  md_table(["plan / part", *[md_escape(h) for h in sec.beside_headers]],
                           [[md_escape(c.strip()) for c in r] for r in sec.beside], [False, True, True, True, True]), ""]
    return "\n".join(parts)


def html_tables(sections: Sequence[PlanSection]) -> list[dict[str, Any]]:
    """The HTML report's plan tables: per plan a title and two tables in its ``kind_table`` layout."""
    def table(first: str, headers: Sequence[str], rows: list[list[str]]) -> dict[str, Any]:
        return {"first": first, "headers": [{"header": h, "help": "", "left": False} for h in headers],
                "rows": [{"ok": True, "name": r[0].strip(), "recon": False,
                          "cells": [{"text": c, "v": "", "cls": ""} for c in r[1:]]} for r in rows]}

    return [{"title": f"{sec.label}: {sec.summary}", "rules": table(RULE_HEADERS[0], RULE_HEADERS[1:], sec.rules),
             "beside": table("plan / part", sec.beside_headers, sec.beside)} for sec in sections]
