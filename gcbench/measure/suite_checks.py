"""What a suite would do before it runs: the user code it would import (and the opt-in that allows it), and the
problems its sources would meet, found without importing code or computing a gradient.

A suite is shared like a paper's config, so running one must not run code it names: a ``package.module:factory``
model in a suite FILE is imported only with ``--trust-code`` or ``GCBENCH_TRUST_CODE=1`` (cf. Hugging Face's
``trust_remote_code``).  Zoo and ``hf:`` models are gcbench's own and need none; a model the user names on the
command line (``--model``) is the user's own choice.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gcbench.compressors import registry
from gcbench.core.errors import GcbenchError
from gcbench.measure.suite import SourceSpec, Suite

#: environment variable that, set to 1 (or true/yes/on), allows suites to import the code they name
TRUST_ENV = "GCBENCH_TRUST_CODE"


@dataclass(frozen=True)
class CodeRef:
    """A ``package.module:factory`` a suite would import and call, and the key that names it."""

    key: str  # e.g. "sources[0].model"
    target: str  # e.g. "mypkg.models:factory"


def imported_code(suite: Suite) -> list[CodeRef]:
    """The user code running ``suite`` would import (zoo and ``hf:`` models are not user code)."""
    from gcbench.sources.catalog import is_user_model

    return [CodeRef(f"sources[{i}].model", src.model) for i, src in enumerate(suite.sources)
            if src.kind != "trace" and src.model is not None and is_user_model(src.model)]


def env_trusts_code() -> bool:
    """Whether ``GCBENCH_TRUST_CODE`` allows suites to import the code they name."""
    return os.environ.get(TRUST_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def require_trusted_code(suite: Suite, where: str, trust_code: bool | None = None) -> None:
    """Refuse a suite loaded from the file ``where`` that names user code, unless the user opted in.

    ``trust_code`` is the ``--trust-code`` flag; None reads ``GCBENCH_TRUST_CODE``.  Call it before
    anything is imported or written: the error is one line naming the file, the key, the code and
    how to allow it.
    """
    refs = imported_code(suite)
    trusted = env_trusts_code() if trust_code is None else trust_code
    if refs and not trusted:
        named = ", ".join(f"{r.key} = {r.target!r}" for r in refs)
        raise GcbenchError(f"{where}: {named}: the suite would import and run this code; if you trust it, pass --trust-code "
                           f"(or set {TRUST_ENV}=1), or name the model yourself with --model")


def _source_workers(src: SourceSpec) -> int | None:
    """Workers of a synthetic or live source as the runner builds it (None for traces: the trace knows)."""
    if src.kind == "trace":
        return src.workers
    return src.workers or (4 if src.kind == "live" else 1)


def check_sources(suite: Suite, where: str) -> list[str]:
    """Problems a run of ``suite`` would meet in its sources, found without importing code or computing gradients.

    Trace folders must exist with a readable manifest and complete files (only the small
    safetensors headers are read) holding the workers and steps asked for; compressors defined
    across several workers need that many.  (Names, options and shapes are checked by
    :func:`parse_suite`.)  Returns one line per problem.
    """
    problems: list[str] = []
    for i, src in enumerate(suite.sources):
        workers = _source_workers(src)
        if src.kind == "trace":
            from gcbench.sources.trace import TraceSource  # torch and safetensors: only a suite with a trace pays for them

            try:
                trace = TraceSource(src.path or "")
            except GcbenchError as exc:
                problems.append(f"{where}: sources[{i}].path: {exc}")
                continue
            for key, asked, has in (("workers", src.workers, trace.workers), ("steps", src.steps, trace.steps)):
                if asked is not None and asked > has:
                    problems.append(f"{where}: sources[{i}].{key}: {asked} requested, the trace {src.path} has {has}")
            workers = min(src.workers or trace.workers, trace.workers)
        for j, c in enumerate(suite.compressors):
            need = _min_workers(c.name, c.params)
            if workers is not None and workers < need:
                problems.append(f"{where}: compressors[{j}] ({c.label}) needs at least {need} workers; sources[{i}] has {workers}")
    return problems


def _min_workers(name: str, params: dict[str, Any]) -> int:
    """The fewest workers a case runs on: its card's, or for a plan the most any of its rules' compressors needs."""
    if name != "plan":
        return registry.get(name).min_workers
    from gcbench.plan.reader import plan_of_params

    return max(registry.get(registry.parse_spec(spec)[0]).min_workers for spec in plan_of_params(params, "plan").specs())
