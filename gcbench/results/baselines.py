"""Published claims of the papers (``baselines/papers.toml``) and their matching to measured cases.

Reports show "paper says 277×, we measure N× with the
paper's wire format".  This module loads the claims file, validates it with one clear line per
problem, and matches every claim to the cases of the runs being reported.

Matching rules (the choices, stated once):

* A claim is measured by a case that ran the claim's compressor (registry name) on gradients of
  the claim's model: a ``live`` or ``trace`` source whose ``model`` equals the claim's model
  (case-insensitive).  ``model = "*"`` marks a wire-format claim (TernGrad's 2 bits, natural
  compression's 9 bits) that any model's gradients measure.  Synthetic sources never match, even
  synthetic tensors of a zoo model's shapes: the papers measured real gradients, and a sparsifier's
  ratio depends on the gradient's distribution, not only on its shapes.
* Only ``ratio`` and ``bits_per_element`` are measurable by gcbench (``size.ratio`` and
  ``size.bits_per_element`` of the case).  Accuracy, perplexity and training-time claims are listed
  as end-to-end training results gcbench does not measure.
* A claim's ``params`` (and ``granularity``) describe the paper's wire format.  A matching case
  run with other values is still reported, but marked "other parameters" with the differences, so
  a default-parameter run is never presented as a reproduction of the paper's number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from gcbench.core.errors import GcbenchError
from gcbench.core.files import load_user_toml
from gcbench.results.parse import as_record
from gcbench.results.record import RunRecord
from gcbench.results.run_record import MeasureRecord, RunCase

PAPERS_FILE = Path(__file__).resolve().parents[1] / "data" / "papers.toml"  # package data (baselines/papers.toml links to it)
CLAIMS_SCHEMA = 1
# the bundled file is ~20 kB; a claims file of megabytes is not one
MAX_CLAIMS_BYTES = 16 * 1024 * 1024

# metric name -> path into a case record; everything else is an end-to-end training claim
# the claim metrics gcbench measures: names of RunCase.metric
MEASURED = ("ratio", "bits_per_element")
MODEL_SOURCES = ("live", "trace")

_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "paper": str, "compressor": str, "model": str, "data": str, "metric": str, "value": (int, float), "unit": str, "source": str,
}
_OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "value_high": (int, float), "baseline_value": (int, float), "params": dict, "granularity": str, "note": str,
}


@dataclass(frozen=True)
class Claim:
    """One published number: what the paper measured, on what, and with which wire format."""

    paper: str
    compressor: str
    model: str
    data: str
    metric: str
    value: float
    unit: str
    source: str
    value_high: float | None = None
    baseline_value: float | None = None
    params: dict[str, Any] = field(default_factory=dict)
    granularity: str | None = None
    note: str = ""

    @property
    def measurable(self) -> bool:
        return self.metric in MEASURED

    def value_text(self) -> str:
        """The claim as the paper states it, e.g. ``277×``, ``433–2021×``, ``76.15% (baseline 75.96%)``."""
        text = format_value(self.value, self.unit)
        if self.value_high is not None:
            text = f"{format_number(self.value)}–{format_value(self.value_high, self.unit)}"
        if self.baseline_value is not None:
            text += f" (baseline {format_value(self.baseline_value, self.unit)})"
        return text

    def matches_case(self, case: RunCase) -> bool:
        """Same compressor on gradients of the same model (live or trace source; see module docstring)."""
        if case.compressor != self.compressor:
            return False
        src = case.source
        if src is None or src.kind not in MODEL_SOURCES:
            return False
        if self.model == "*":
            return True
        return isinstance(src.model, str) and src.model.lower() == self.model.lower()

    def differences(self, case: RunCase) -> list[str]:
        """Where the case's configuration differs from the paper's wire format (empty = the same)."""
        diffs = []
        params = case.params or {}
        for key, want in self.params.items():
            got = params.get(key)
            if not _same_value(got, want):
                diffs.append(f"{key}={_show(got)} (paper: {_show(want)})")
        if self.granularity is not None and case.granularity != self.granularity:
            diffs.append(f"granularity={_show(case.granularity)} (paper: {self.granularity})")
        return diffs


@dataclass(frozen=True)
class Measurement:
    """One case that matches a claim."""

    run_id: str
    case_label: str
    source_label: str
    value: float | None  # the measured metric; None when the case failed or the metric is not measurable
    differences: tuple[str, ...]
    error: str | None = None

    @property
    def paper_format(self) -> bool:
        return not self.differences

    def how(self) -> str:
        """How the case matches the claim: the paper's wire format, or the parameters that differ."""
        return "with the paper's wire format" if self.paper_format else "with other parameters: " + ", ".join(self.differences)

    def where(self) -> str:
        """``label on source, run id``: the case that was measured."""
        return f"{self.case_label} on {self.source_label}, run {self.run_id}"


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    measurements: tuple[Measurement, ...]

    @property
    def status(self) -> str:
        """``measured``, ``measured (other parameters)``, ``not measured in these runs`` or ``not measurable``."""
        if not self.claim.measurable:
            return "not measurable"
        ok = self.measured()
        if any(m.paper_format for m in ok):
            return "measured"
        if ok:
            return "measured (other parameters)"
        return "not measured in these runs"

    def measured(self) -> list[Measurement]:
        """The matching cases that measured a value (a failed case has none)."""
        return [m for m in self.measurements if m.value is not None]

    def sentence(self) -> str:
        """One line for reports: "paper claims X, gcbench measures Y with the paper's wire format"."""
        c = self.claim
        head = f"{c.paper} claims {c.value_text()} {metric_name(c.metric)} on {c.model if c.model != '*' else 'any model'} / {c.data}"
        status = self.status
        if status == "not measurable":
            seen = " (this compressor and model appear in these runs)" if self.measurements else ""
            return f"{head}; an end-to-end training result gcbench does not measure{seen}"
        if status == "not measured in these runs":
            failed = [m for m in self.measurements if m.error]
            extra = f" (matching case failed: {failed[0].error})" if failed else ""
            return f"{head}; not measured in these runs{extra}"
        # measured() keeps the measurements with a value
        parts = [f"{format_measured(cast(float, m.value), c.unit)} {m.how()} ({m.where()})" for m in self.measured()]
        return f"{head}; gcbench measures " + "; ".join(parts)


def metric_name(metric: str) -> str:
    return {"ratio": "compression ratio", "bits_per_element": "bits per element", "top1": "top-1 accuracy",
            "training_time_reduction": "training-time reduction"}.get(metric, metric)


def format_number(v: float) -> str:
    if float(v).is_integer() and abs(v) < 1e6:
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"


def format_value(v: float, unit: str) -> str:
    """A value with its unit the way papers write it: ``277×``, ``2 bits``, ``76.15%``."""
    if unit == "x":
        return f"{format_number(v)}×"
    if unit == "%":
        return f"{v:g}%"
    if unit == "bits":
        return f"{v:.3g} bits" if not float(v).is_integer() else f"{int(v)} bits"
    return f"{v:g}{(' ' + unit) if unit else ''}"


def format_measured(v: float, unit: str) -> str:
    """A measured value, one decimal finer than papers print (276.7×, not a rounded 277×)."""
    if unit == "x":
        return f"{v:,.1f}×"
    if unit == "bits":
        return f"{v:.3f} bits"
    return format_value(v, unit)


def _same_value(got: Any, want: Any) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, int | float) and isinstance(got, int | float):
        return math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=0.0)
    return got == want


def _show(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


# ----------------------------------------------------------------------------- loading


def load_claims(path: str | Path = PAPERS_FILE) -> list[Claim]:
    """Read and validate a claims file; every problem is one line of a :class:`GcbenchError`."""
    p = Path(path)
    # a regular file of at most 1 MiB (the shipped one is ~9 KiB): a device or FIFO is refused before reading
    data = load_user_toml(p, "claims file", MAX_CLAIMS_BYTES)
    schema = data.get("schema", CLAIMS_SCHEMA)
    if not isinstance(schema, int) or schema > CLAIMS_SCHEMA:
        raise GcbenchError(f"{p}: claims schema {schema!r} is newer than this gcbench reads ({CLAIMS_SCHEMA}); upgrade gcbench")
    raw = data.get("claims")
    if not isinstance(raw, list):
        raise GcbenchError(f"{p}: expected a [[claims]] array of tables")
    problems: list[str] = []
    claims = []
    for i, entry in enumerate(raw):
        where = f"{p}: claims[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: expected a table")
            continue
        bad = False
        for key in entry:
            if key not in _REQUIRED and key not in _OPTIONAL:
                problems.append(f"{where}.{key}: unknown key (allowed: {', '.join([*_REQUIRED, *_OPTIONAL])})")
                bad = True
        for key, typ in _REQUIRED.items():
            if key not in entry:
                problems.append(f"{where}.{key}: missing")
                bad = True
            elif not isinstance(entry[key], typ) or isinstance(entry[key], bool):
                problems.append(f"{where}.{key}: expected {_type_name(typ)}, got {entry[key]!r}")
                bad = True
        for key, typ in _OPTIONAL.items():
            if key in entry and (not isinstance(entry[key], typ) or isinstance(entry[key], bool)):
                problems.append(f"{where}.{key}: expected {_type_name(typ)}, got {entry[key]!r}")
                bad = True
        if not bad and entry["metric"] in MEASURED and entry["unit"] != {"ratio": "x", "bits_per_element": "bits"}[entry["metric"]]:
            problems.append(f"{where}.unit: metric {entry['metric']!r} is measured in "
                            f"{ {'ratio': 'x', 'bits_per_element': 'bits'}[entry['metric']]!r}, got {entry['unit']!r}")
            bad = True
        if not bad:
            fields: dict[str, Any] = {k: (float(v) if k in ("value", "value_high", "baseline_value") else v) for k, v in entry.items()}
            claims.append(Claim(**fields))
    if problems:
        raise GcbenchError("\n".join(problems))
    return claims


def _type_name(typ: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "a number", float: "a number", dict: "a table"}
    types = typ if isinstance(typ, tuple) else (typ,)
    return names[types[0]]


# ----------------------------------------------------------------------------- matching


def match_claims(claims: Sequence[Claim], runs: Sequence[RunRecord | Mapping[str, Any]]) -> list[ClaimResult]:
    """Every claim with the cases of ``runs`` (results records, or dicts validated here) that measure it.

    Only ``run``/``compare`` cases measure claims: train and bench cases have no gradient source.
    """
    records = [r for r in (as_record(x) for x in runs) if isinstance(r, MeasureRecord)]
    results = []
    for claim in claims:
        found = []
        for run in records:
            for case in run.cases:
                if not claim.matches_case(case):
                    continue
                found.append(Measurement(
                    run_id=str(run.run_id or "?"),
                    case_label=case.label,
                    source_label=case.source_label,
                    value=case.metric(claim.metric) if case.ok and claim.measurable else None,
                    differences=tuple(claim.differences(case)),
                    error=None if case.ok else case.error_text or "failed",
                ))
        results.append(ClaimResult(claim, tuple(found)))
    return results
