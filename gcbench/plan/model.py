"""A compression plan: which tensors get which compressor, when compression starts, how often workers talk.

Practitioners rarely run one compressor over a whole model: they exempt the tensors that break
(norm scales, biases, small tensors), start with dense steps (PowerSGD's ``start_powerSGD_iter``,
DGC's warm-up) and, in DiLoCo-style training (Douillard et al., 2023), exchange a compressed
pseudo-gradient every H inner steps.  A :class:`Plan` says all three once:

* ordered :class:`Rule` s, each matching tensors by name glob, kind and size and naming a
  compressor spec; the first rule that matches a tensor wins, and the last rule is the default;
* a dense warm-up: ``warmup_steps`` steps with the ``warmup`` spec before the rules apply;
* a sync period ``local_steps`` (H) and the :class:`Outer` optimizer that applies the exchanged
  pseudo-gradient (SGD with Nesterov momentum, as DiLoCo).

The objects are plain frozen data; :mod:`gcbench.plan.reader` reads and checks them from TOML and
:mod:`gcbench.plan.assign` matches them to a model's tensors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

#: the kinds a rule can match, read from the module that owns a parameter (:func:`gcbench.plan.assign.tensor_infos`)
KINDS = ("bias", "norm", "embedding", "convolution", "linear")


@dataclass(frozen=True)
class Rule:
    """One rule of a plan: the tensors it matches and the compressor spec they get.

    A non-default rule matches a tensor when every matcher it sets holds (name glob, kind,
    ``numel < numel_below``); the default rule sets none and matches every tensor left.
    """

    compressor: str  # a compressor spec as on -c: "topk:density=0.01,error_feedback=true", "none", "bf16"
    name: str | None = None  # fnmatch glob on the parameter's qualified name ("features.0.*")
    kind: str | None = None  # one of KINDS
    numel_below: int | None = None  # matches tensors with numel < N
    default: bool = False  # the catch-all: exactly one, last, no matchers

    def matchers(self) -> list[str]:
        """The matchers this rule sets, as a reader writes them (``name 'conv*'``, ``kind norm``, ``numel < 1000``)."""
        out = []
        if self.name is not None:
            out.append(f"name {self.name!r}")
        if self.kind is not None:
            out.append(f"kind {self.kind}")
        if self.numel_below is not None:
            out.append(f"numel < {self.numel_below}")
        return out

    def label(self) -> str:
        """The rule as tables show it: ``numel < 1000 → none``, ``default → topk:density=0.01``."""
        what = "default" if self.default else " and ".join(self.matchers())
        return f"{what} → {self.compressor}"

    def to_dict(self) -> dict[str, Any]:
        """The rule's set fields, as TOML and results files hold them."""
        out: dict[str, Any] = {}
        if self.default:
            out["default"] = True
        for key in ("name", "kind", "numel_below"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["compressor"] = self.compressor
        return out


@dataclass(frozen=True)
class Outer:
    """DiLoCo's outer optimizer: SGD with (Nesterov) momentum on the averaged pseudo-gradient."""

    lr: float = 0.7
    momentum: float = 0.9
    nesterov: bool = True


def _toml_value(value: Any) -> str:
    """A scalar as TOML writes it (JSON's string escapes are TOML's basic-string escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


@dataclass(frozen=True)
class Plan:
    """A compression plan (see the module docstring); ``to_toml`` round-trips through :func:`gcbench.plan.reader.load_plan`."""

    name: str
    rules: tuple[Rule, ...]
    warmup_steps: int = 0  # dense steps first, with `warmup`
    warmup: str = "bf16"  # compressor spec of the warm-up
    local_steps: int = 1  # H: inner steps per exchange of the pseudo-gradient
    outer: Outer = field(default_factory=Outer)

    @property
    def label(self) -> str:
        """The plan's name in tables: ``plan:<name>``."""
        return f"plan:{self.name}"

    def specs(self) -> list[str]:
        """The distinct compressor specs the plan uses (its rules', then the warm-up's when it has warm-up steps)."""
        out: list[str] = []
        for spec in [r.compressor for r in self.rules] + ([self.warmup] if self.warmup_steps else []):
            if spec not in out:
                out.append(spec)
        return out

    def spec_at(self, rule: int, step: int) -> str:
        """The spec rule ``rule`` uses at ``step``: the warm-up's before ``warmup_steps``, else the rule's own."""
        return self.warmup if step < self.warmup_steps else self.rules[rule].compressor

    def to_toml(self) -> str:
        """The plan as a TOML file (``[plan]``, ``[plan.outer]`` with local steps, ``[[plan.rule]]``)."""
        lines = ["[plan]", f"name = {_toml_value(self.name)}", f"warmup_steps = {self.warmup_steps}",
                 f"warmup = {_toml_value(self.warmup)}", f"local_steps = {self.local_steps}"]
        if self.local_steps > 1:
            lines += ["", "[plan.outer]", f"lr = {_toml_value(self.outer.lr)}",
                      f"momentum = {_toml_value(self.outer.momentum)}", f"nesterov = {_toml_value(self.outer.nesterov)}"]
        for rule in self.rules:
            lines += ["", "[[plan.rule]]", *(f"{k} = {_toml_value(v)}" for k, v in rule.to_dict().items())]
        return "\n".join(lines) + "\n"

    def describe(self) -> dict[str, Any]:
        """The plan as results files record it (JSON-able): its fields and each rule's label."""
        return {"name": self.name, "label": self.label, "warmup_steps": self.warmup_steps, "warmup": self.warmup,
                "local_steps": self.local_steps,
                "outer": {"lr": self.outer.lr, "momentum": self.outer.momentum, "nesterov": self.outer.nesterov},
                "rules": [{**r.to_dict(), "label": r.label()} for r in self.rules]}
