"""Benchmark suites: TOML files validated into a typed, resolved :class:`Suite`.

A suite names its gradient sources, the compressors (a compressor may appear several times with
different parameters, each with its own label), the granularity, the metric settings and a seed.
Every error names the file, the key path, the bad value and what is allowed, e.g.
``suites/x.toml: compressors[2].params.density: must be in (0, 1], got 5``.

Precedence: built-in defaults < suite file < command-line overrides (:func:`gcbench.measure.suite_options.apply_overrides`).

Trust: a suite is shared like a paper's config, so running one must not run code it names.  A
``package.module:factory`` model in a suite FILE is imported only with the user's opt-in
(``--trust-code`` or ``GCBENCH_TRUST_CODE=1``, cf. Hugging Face's ``trust_remote_code``):
:mod:`gcbench.measure.suite_checks` lists what a suite would import and enforces the opt-in.  Zoo and ``hf:``
models are gcbench's own and need none; a model the user names on the command line (``--model``) is the user's
own choice.  Nothing here imports user code; ``suite_checks.check_sources`` also checks trace folders and worker
counts without computing a gradient.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, model_serializer, model_validator

from gcbench.compressors import registry
from gcbench.core.errors import GcbenchError, ParamError, UnknownNameError
from gcbench.core.files import SMALL_FILE_BYTES, load_user_toml

SUITE_DIR = Path(__file__).resolve().parents[1] / "suites"  # package data: found wherever gcbench is installed
DEFAULT_SUITE = "quick"
#: the ``kind`` a convergence suite declares: ``gcbench converge`` reads it (gcbench/converge/sweep.py), run and validate refuse it
CONVERGE_KIND = "converge"

#: the largest suite file read (the bundled ones are a few KiB)
SUITE_FILE_BYTES = SMALL_FILE_BYTES

#: largest synthetic tensor (elements): 8 GiB of float32, beyond any real gradient tensor; numpy's
#: element count of a bigger shape can wrap around int64 and the tensor could never be allocated
MAX_SYNTHETIC_ELEMENTS = 2**31

#: most dimensions of a synthetic tensor: numpy arrays have at most 64 (32 before numpy 2), and no
#: layer of a real model has more than 5
MAX_RANK = 32

#: most tensors of one synthetic source (ResNet-50 has 161, BERT-base 202)
MAX_TENSORS = 100_000

#: the largest seed: seeds feed torch.manual_seed and numpy's generators, which take 64-bit values
MAX_SEED = 2**63 - 1

# TOML has real integers, floats and booleans: ``workers = true`` or ``steps = 2.0`` is a mistake,
# not 1 and 2 (pydantic's lax mode would coerce them silently)
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]  # strict floats still accept integers (``scale = 2``)
Bool = Annotated[bool, Strict()]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceSpec(_Strict):
    """Where gradients come from: ``synthetic``, ``live`` (zoo model) or ``trace`` (recorded)."""

    kind: Literal["synthetic", "live", "trace"] = "synthetic"
    label: str | None = None
    workers: Int | None = Field(None, ge=1, le=1024, description="default: 1 synthetic, 4 live, all of a trace")
    steps: Int | None = Field(None, ge=1, le=100000, description="default: 1 synthetic, 10 live, all of a trace")
    # synthetic
    distribution: Literal["normal", "laplace", "student-t", "sparse", "lowrank"] = "normal"
    shapes: list[list[Int]] | None = Field(None, max_length=MAX_TENSORS)
    model: str | None = None  # live: the zoo model; synthetic: use a zoo model's layer shapes
    # float32 gradients: up to 1e38, so a suite can probe a compressor near float32's max (a case
    # whose output overflows fails with its reason; a draw that overflows is refused by the source)
    scale: Float = Field(1.0, ge=1e-30, le=1e38, allow_inf_nan=False)
    # student-t below 1 degree of freedom draws values past float32's range
    df: Float = Field(3.0, ge=1.0, le=1e6, allow_inf_nan=False)
    sparsity_density: Float = Field(0.05, gt=0, le=1)
    # live
    warmup_steps: Int = Field(0, ge=0, le=100000)
    # an lr past 1000 only blows the model up (1e300 does not even fit the float32 update)
    lr: Float = Field(0.1, ge=0, le=1000, allow_inf_nan=False,
                      description="live: SGD learning rate of the step the model takes between measured steps (and in warm-up)")
    batch_size: Int | None = Field(None, ge=1, le=4096)
    image_size: Int | None = Field(None, ge=8, le=1024)
    loop: Literal["open", "closed"] = Field("open", description="live: between steps the model takes the dense mean step (open) "
                                            "or, per case, that case's compressed aggregate (closed: what training with it sees)")
    # trace
    path: str | None = None

    @model_validator(mode="after")
    def _check_kind(self) -> SourceSpec:
        if self.kind == "synthetic":
            if not self.shapes and not self.model:
                raise ValueError("a synthetic source needs 'shapes' (list of shapes) or 'model' (zoo layer shapes)")
            if self.shapes and self.model:  # one would be ignored, and the results would name the other
                raise ValueError("a synthetic source takes 'shapes' or 'model' (a zoo model's layer shapes), not both")
            for sh in self.shapes or []:
                if any(s < 0 for s in sh):
                    raise ValueError(f"shapes: dimensions must be >= 0, got {sh}")
                if len(sh) > MAX_RANK:
                    raise ValueError(f"shapes: a tensor may have at most {MAX_RANK} dimensions, got {len(sh)}")
                if math.prod(sh) > MAX_SYNTHETIC_ELEMENTS:
                    raise ValueError(f"shapes: {sh} has {math.prod(sh):,} elements; a synthetic tensor may have at most "
                                     f"{MAX_SYNTHETIC_ELEMENTS:,} (2**31)")
            if self.shapes and not any(math.prod(sh) for sh in self.shapes):  # an empty tensor among others is a case
                raise ValueError(f"shapes: every tensor is empty ({self.shapes}): there is nothing to compress or time")
        elif self.kind == "live" and not self.model:
            raise ValueError("a live source needs 'model' (a zoo name or package.module:factory)")
        elif self.kind == "live" and self.shapes:
            raise ValueError("a live source takes its shapes from its model; 'shapes' is for synthetic sources")
        elif self.kind == "trace" and not self.path:
            raise ValueError("a trace source needs 'path' (a folder written by gcbench record)")
        if self.loop == "closed" and self.kind != "live":
            raise ValueError(f"loop = 'closed' needs a live source (its model takes each case's aggregate); {self.kind} gradients "
                             "do not depend on any model's steps")
        return self

    @model_serializer(mode="wrap")
    def _open_loop_unwritten(self, handler: Any) -> dict[str, Any]:
        """``loop = "open"`` (the default) is left out of the resolved suite, so a suite's hash is what it was before the
        key existed."""
        data = handler(self)
        if data.get("loop") == "open":
            del data["loop"]
        return data

    def display(self) -> str:
        if self.label:
            return self.label
        if self.kind == "synthetic":
            if self.model:
                return f"synthetic {self.distribution} ({self.model} shapes)"
            shapes = self.shapes or []
            first = "×".join(map(str, shapes[0])) if shapes else ""
            more = f" +{len(shapes) - 1} tensors" if len(shapes) > 1 else ""
            return f"synthetic {self.distribution} {first}{more}"
        if self.kind == "live":
            return f"live {self.model}" + (" (closed loop)" if self.loop == "closed" else "")
        return f"trace {Path(self.path or '').name}"


class CompressorSpec(_Strict):
    """One compressor configuration of a suite: a table, or a SPEC string as on the command line."""

    name: str
    label: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_spec(cls, value: Any) -> Any:
        """``"qsgd:s=7,bucket=512"`` stands for ``{name = "qsgd", params = {s = 7, bucket = 512}}`` and ``"plan:FILE"`` for
        ``{name = "plan", params = {file = "FILE"}}``, so ``compressors = ["topk", "dgc:density=0.01"]`` reads as ``-c`` does."""
        if not isinstance(value, str):
            return value
        if value.startswith("plan:"):
            return {"name": "plan", "params": {"file": value.removeprefix("plan:")}}
        try:
            name, params = registry.parse_spec(value)
        except GcbenchError as exc:
            raise ValueError(str(exc)) from None
        return {"name": name, "params": params}


class MetricsSpec(_Strict):
    """How the metrics are measured."""

    repeats: Int = Field(8, ge=1, le=10000, description="R: compressions per tensor for stochastic compressors")
    timing: Bool = True
    timing_repeats: Int = Field(5, ge=1, le=10000)
    warmup: Int = Field(1, ge=0, le=1000)
    timing_steps: Int = Field(1, ge=0, le=100000, description="time compress/decompress on this many first steps")
    timing_budget_s: Float = Field(1.0, gt=0, le=600, allow_inf_nan=False,
                                   description="seconds of timed rounds per case before calibration stops, stable or not")
    # the whole run's timing (warm-up rounds included) shares this out among its timed cases; a case whose share ran out
    # before its timing_repeats rounds stops early, flagged "cut short" (a one-step hf:gpt2 run spent most of its minutes
    # in rounds otherwise; the quick suite's timing takes a few seconds of it)
    timing_run_budget_s: Float = Field(15.0, gt=0, le=3600, allow_inf_nan=False,
                                       description="seconds of timing for the whole run, shared out among its cases; a "
                                       "case its share stopped before timing_repeats rounds is flagged 'cut short'")
    fidelity_steps: Int = Field(2, ge=1, le=100000, description="one-shot fidelity (R compressions per tensor) on this "
                                "many first steps; the stream needs one compression per worker-step")
    min_stream_steps: Int = Field(10, ge=1, le=100000, description="the fewest steps whose stream can rank stateful "
                                  "compressors; a shorter stream is reported as too short to conclude")
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    # torch allocates per-thread state: 100000 threads aborted with std::bad_alloc
    threads: Int | None = Field(None, ge=1, le=1024)


class OptimizerSpec(_Strict):
    """The suite's optimizer: its dense update is the one common reference of every case (docs/metrics.md)."""

    name: Literal["sgd"] = "sgd"
    momentum: Float = Field(0.0, ge=0.0, lt=1.0, allow_inf_nan=False, description="0: plain SGD")

    def describe(self) -> str:
        return "dense SGD update" if self.momentum == 0 else f"dense momentum-SGD update (m={self.momentum:g})"


class CollectivesSpec(_Strict):
    """A ``[collectives]`` table: the sweep of :mod:`gcbench.measure.collectives`, run after the suite's cases.

    Its rows are stored in the results file as a top-level ``collectives`` object (the ``--json`` of
    ``gcbench collectives``).  An empty ``compressors`` list sweeps the command's default compressors.
    """

    compressors: list[str] = Field(default_factory=list, max_length=64)
    workers: list[Annotated[int, Strict(), Field(ge=1, le=4096)]] = Field(default_factory=lambda: [2, 4, 8, 16, 32, 64],
                                                                        min_length=1, max_length=64)
    schemes: list[Literal["ring", "alltoall", "allgather"]] = Field(default_factory=lambda: ["ring", "alltoall", "allgather"],  # type: ignore[arg-type]  # the Literal's values
                                                                    min_length=1)
    accumulate: list[Literal["fp32", "bf16"]] = Field(default_factory=lambda: ["fp32", "bf16"], min_length=1)  # type: ignore[arg-type]  # the Literal's values
    numel: Int = Field(1 << 20, ge=1, le=1 << 30)
    distribution: Literal["normal", "laplace", "student-t", "sparse", "lowrank"] = "laplace"
    draws: Int = Field(3, ge=1, le=1000)


class Suite(_Strict):
    """A validated suite. ``compressors`` labels are unique after resolution."""

    name: str
    description: str = ""
    version: Int = Field(1, ge=1, le=1_000_000)
    seed: Int = Field(0, ge=0, le=MAX_SEED)
    granularity: Literal["layer", "bucket", "model"] = "layer"
    # 64 GiB is past any model's gradient (a larger bucket is "model" granularity); 1e308 overflowed int()
    bucket_mb: Float = Field(25.0, gt=0, le=65536, allow_inf_nan=False)
    sources: list[SourceSpec] = Field(min_length=1)
    compressors: list[CompressorSpec] = Field(min_length=1)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)
    collectives: CollectivesSpec | None = None

    def labels(self) -> list[str]:
        return [c.label or c.name for c in self.compressors]

    def to_dict(self) -> dict[str, Any]:
        data = json.loads(self.model_dump_json())
        if data.get("collectives") is None:  # a suite without the table hashes as it always did
            data.pop("collectives", None)
        return data

    def hash(self) -> str:
        """Stable short hash of the resolved suite (recorded in results)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


_BOUND_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def key_range(model: type[BaseModel], name: str) -> str | None:
    """The allowed range of the numeric key ``name`` of ``model`` as text (``[1, 1024]``, ``(0, 65536]``), or None."""
    field = model.model_fields.get(name)
    if field is None:
        return None
    lo = hi = None
    lo_open = hi_open = False
    for m in field.metadata:
        for attr, is_low, is_open in (("ge", True, False), ("gt", True, True), ("le", False, False), ("lt", False, True)):
            v = getattr(m, attr, None)
            if v is None:
                continue
            if is_low:
                lo, lo_open = v, is_open
            else:
                hi, hi_open = v, is_open
    if lo is None and hi is None:
        return None
    left = "(" if lo is None or lo_open else "["
    right = ")" if hi is None or hi_open else "]"
    def text(v: float) -> str:
        return str(v) if isinstance(v, int) else f"{v:g}"  # a seed's 2**63-1 in full, not 9.22337e+18

    return f"{left}{'-inf' if lo is None else text(lo)}, {'inf' if hi is None else text(hi)}{right}"


def check_option(model: type[BaseModel], key: str, value: float | None, option: str) -> None:
    """Refuse a command-line ``option`` whose value is outside the range of the suite key ``key`` of ``model``."""
    if value is None:
        return
    field = model.model_fields[key]
    for m in field.metadata:
        for attr, bad in (("ge", lambda v, b: v < b), ("gt", lambda v, b: v <= b), ("le", lambda v, b: v > b),
                          ("lt", lambda v, b: v >= b)):
            bound = getattr(m, attr, None)
            if bound is not None and bad(value, bound):
                raise GcbenchError(f"{option}: must be in {key_range(model, key)}, got {value}")


def _model_at(loc: tuple[Any, ...]) -> tuple[type[BaseModel], str] | None:
    """The model class and field name a validation error's ``loc`` ends in (``sources[0].lr`` → SourceSpec, lr)."""
    model: type[BaseModel] = Suite
    for i, part in enumerate(loc):
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        if i == len(loc) - 1:
            return model, str(part)
        inner = next((a for a in (field.annotation, *getattr(field.annotation, "__args__", ()))
                      if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if inner is None:
            return None
        model = inner
    return None


def _format_pydantic(where: str, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        raw_loc = tuple(p for p in e["loc"] if p not in ("synthetic", "live", "trace"))
        loc = _loc(raw_loc)
        msg = e["msg"].removeprefix("Value error, ")
        at = _model_at(raw_loc) if e["type"] in _BOUND_ERRORS else None
        rng = key_range(*at) if at else None
        if rng is not None:  # the whole range, not pydantic's one bound ("less than or equal to 1024")
            msg = f"must be in {rng}"
        got = e.get("input")
        # a missing key has no value, and our own checks (value errors) say what they got where it helps
        got_text = "" if e["type"] in ("missing", "value_error") or isinstance(got, dict) else f", got {got!r}"
        if e["type"] == "extra_forbidden":
            msg, got_text = "unknown key", ""
        lines.append(f"{where}: {loc}: {msg}{got_text}" if loc else f"{where}: {msg}{got_text}")
    return "\n".join(lines)


def _resolved(where: str, c: CompressorSpec) -> CompressorSpec:
    """One compressor checked against the registry (a plan against its rules), with its label filled."""
    if c.name == "plan":  # a compression plan (gcbench.plan): its table is its params, its label plan:<name>
        return _resolve_plan(where, c)
    try:
        info = registry.get(c.name)
    except UnknownNameError as exc:
        raise GcbenchError(f"{where}.name: {exc}") from None
    try:
        record = info.resolve(c.params)  # the one validation of parameters (gcbench.core.info)
    except UnknownNameError as exc:
        raise GcbenchError(f"{where}.params: {exc}") from None
    except ParamError as exc:
        raise GcbenchError(f"{where}.params.{exc.param}: {exc.reason}") from None
    params = {k: record[k] for k in c.params}
    label = c.label
    if label is None:
        label = c.name if not params else c.name + "(" + ",".join(f"{k}={v}" for k, v in params.items()) + ")"
    return CompressorSpec(name=c.name, label=label, params=params)


def _resolve_compressors(where: str, suite: Suite) -> Suite:
    """Check names and parameters against the registry; fill unique labels."""
    resolved = []
    seen: dict[str, int] = {}
    for i, c in enumerate(suite.compressors):
        spec = _resolved(f"{where}: compressors[{i}]", c)
        label = spec.label or spec.name
        if label in seen:
            raise GcbenchError(f"{where}: compressors[{i}].label: {label!r} is already used by compressors[{seen[label]}]; "
                               "give each a unique label")
        seen[label] = i
        resolved.append(spec)
    return suite.model_copy(update={"compressors": resolved})


def _resolve_plan(where: str, c: CompressorSpec) -> CompressorSpec:
    """A plan case checked (:func:`gcbench.plan.reader.plan_of_params`): params its whole [plan] table, label ``plan:<name>``."""
    from gcbench.plan.reader import case_params, plan_of_params

    plan = plan_of_params(c.params, where)
    return CompressorSpec(name="plan", label=c.label or plan.label, params=case_params(plan, c.params.get("file")))


def _check_models(where: str, suite: Suite) -> None:
    """Model names and zoo options, checked against the zoo without importing or building anything."""
    from gcbench.sources import catalog

    for i, src in enumerate(suite.sources):
        if src.model is None or src.kind == "trace":
            continue
        options = {k: v for k, v in (("batch_size", src.batch_size), ("image_size", src.image_size)) if v is not None}
        try:
            catalog.check_model(src.model, **(options if src.kind == "live" else {}))
        except GcbenchError as exc:
            raise GcbenchError(f"{where}: sources[{i}].model: {exc}") from None


def _check_collectives(where: str, suite: Suite) -> None:
    """The ``[collectives]`` compressors' names and parameters, by their cards (whether each fits a scheme is checked
    when the sweep runs: that needs the implementation)."""
    if suite.collectives is None:
        return
    for i, spec in enumerate(suite.collectives.compressors):
        try:
            registry.parse_spec(spec)
        except GcbenchError as exc:
            raise GcbenchError(f"{where}: collectives.compressors[{i}]: {exc}") from None


def parse_suite(data: dict[str, Any], where: str = "<suite>") -> Suite:
    """Validate a suite mapping (as read from TOML) into a :class:`Suite`.

    Pure: names and values are checked, but no file is read and no user code is imported (see
    :mod:`gcbench.measure.suite_checks`).
    """
    data = dict(data)
    if "source" in data and "sources" not in data:  # a single [source] table is allowed
        data["sources"] = [data.pop("source")]
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        raise GcbenchError(_format_pydantic(where, exc)) from None
    _check_models(where, suite)
    _check_collectives(where, suite)
    return _resolve_compressors(where, suite)


def find_suite(name_or_path: str | Path | None) -> Path:
    """A suite path from a path, or a bundled suite name (``quick`` → suites/quick.toml)."""
    if name_or_path is None:
        name_or_path = DEFAULT_SUITE
    p = Path(name_or_path)
    if p.exists():
        return p
    bundled = SUITE_DIR / (p.name if p.suffix == ".toml" else f"{p.name}.toml")
    if bundled.exists() and (p.parent == Path(".") or p.parent == Path("suites")):
        return bundled
    known = sorted(s.stem for s in SUITE_DIR.glob("*.toml")) if SUITE_DIR.exists() else []
    hint = f" (bundled suites: {', '.join(known)})" if known else ""
    raise GcbenchError(f"suite file {str(name_or_path)!r} not found{hint}")


def duplicate_configs(suite: Suite) -> list[str]:
    """One line per compressor configuration that repeats an earlier one of ``suite`` (the same compressor with the
    same effective parameters, defaults filled in from its card): it would measure the same thing twice."""
    seen: dict[tuple[str, str], str] = {}
    out = []
    for c in suite.compressors:
        try:
            card = registry.get(c.name)
            key = (card.name, json.dumps(dict(card.resolve(c.params)), sort_keys=True, default=str))
        except GcbenchError:
            continue  # an unknown name or a bad value: validation says so
        label = c.label or c.name
        if key in seen:
            out.append(f"compressor {label!r} repeats {seen[key]!r}: {card.name} with the same parameters is measured twice "
                       "(remove one, or give it other parameters)")
        else:
            seen[key] = label
    return out


def suite_label(path: Path) -> str:
    """How a results file names its suite: ``suites/NAME.toml`` for a bundled one (no machine path), else the path given."""
    try:
        if path.resolve().parent == SUITE_DIR:
            return f"suites/{path.name}"
    except OSError:
        pass
    return str(path)


def load_suite(name_or_path: str | Path | None) -> Suite:
    """Read and validate a suite file; every problem is one clear :class:`GcbenchError`.

    Loading imports no user code; before running what a file names, call
    :func:`gcbench.measure.suite_checks.require_trusted_code` (the CLI's ``run`` does, unless ``--model``/``--trace`` replace the
    file's sources).
    """
    path = find_suite(name_or_path)
    where = str(path)
    # a regular file of at most 1 MiB: /dev/zero, a FIFO or a huge file is refused before reading
    data = load_user_toml(path, "suite file", SUITE_FILE_BYTES)
    if data.get("kind") == CONVERGE_KIND:
        raise GcbenchError(f"{where}: a convergence suite (kind = \"{CONVERGE_KIND}\"): run it with gcbench converge {where}")
    data.setdefault("name", path.stem)
    return parse_suite(data, where)


def is_converge_suite(path: Path) -> bool:
    """Whether the TOML file ``path`` declares ``kind = "converge"`` (an unreadable file is not one)."""
    try:
        return load_user_toml(path, "suite file", SUITE_FILE_BYTES).get("kind") == CONVERGE_KIND
    except GcbenchError:
        return False


def measurement_suites() -> list[Path]:
    """The bundled suites ``run``, ``validate`` and ``compare`` read (every one but the convergence suites)."""
    return [p for p in sorted(SUITE_DIR.glob("*.toml")) if not is_converge_suite(p)]


def bundled_suites() -> list[dict[str, Any]]:
    """The suites shipped in ``suites/`` (name, path, description, compressor count); an invalid one says why."""
    rows = []
    for p in sorted(SUITE_DIR.glob("*.toml")):
        if is_converge_suite(p):
            data = load_user_toml(p, "suite file", SUITE_FILE_BYTES)
            rows.append({"name": p.stem, "path": str(p), "description": f"gcbench converge: {data.get('description', '')}".strip(),
                         "compressors": len(data.get("compressors") or [])})
            continue
        try:
            s = load_suite(p)
            rows.append({"name": p.stem, "path": str(p), "description": s.description, "compressors": len(s.compressors)})
        except GcbenchError as exc:
            rows.append({"name": p.stem, "path": str(p), "description": f"INVALID: {exc}", "compressors": 0})
    return rows
