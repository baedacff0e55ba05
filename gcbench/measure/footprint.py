"""How much memory a suite needs, roughly, checked against what the machine has before anything runs.

A suite that validates can still be impossible here: 1000 synthetic tensors of 2^31 elements, or a
live ``smallcnn`` at ``image_size = 1024, batch_size = 4096`` (a 51 GB input batch), end in an
allocation failure or the OOM killer minutes into a run.  :func:`source_bytes` estimates one
source's peak from what the runner holds (:mod:`gcbench.measure.runner`):

* the gradients of every (step, worker), cached for the run when they fit ``GCBENCH_CACHE_GB``;
* per case, one step's working set: the workers' gradients, their decoded tensors and compressor
  state, the aggregate and the dense reference — about ``2 × workers + 4`` gradient copies;
* for a live source, the model: parameters, their gradient, one step's gradients of every worker,
  and a rough bound of the activations of one forward/backward (per zoo model, from its options).

It is a floor, not a forecast (GPT-2 small with 2 workers peaked at ~32 gradient copies, this
counts ~14): a suite is refused only when even the floor exceeds the machine's physical memory,
and warned about when it exceeds the memory available now.  User models (``package.module:factory``)
are not estimated: that would import their code.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gcbench.core.errors import GcbenchError
from gcbench.measure.suite import SourceSpec, Suite

#: bytes per float32 element
_F32 = 4

#: activation floats kept per input pixel for a forward/backward of the image models (a rough upper
#: bound of every layer's saved output, ReLU masks and batch-norm inputs; ResNet-50 at 224×224 keeps
#: ~100 MB per image)
_PIXEL_FLOATS = {"resnet18": 250, "resnet50": 550, "vgg16": 650, "smallcnn": 120}


@dataclass(frozen=True)
class Need:
    """One source's estimated peak memory, in bytes, and what it is made of (for the message)."""

    index: int
    total: int
    parts: str


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _cache_limit() -> int:
    """The runner's gradient cache limit (``source_data.CACHE_LIMIT_BYTES``, read here without importing torch)."""
    try:
        return int(float(os.environ.get("GCBENCH_CACHE_GB", "6")) * 2**30)
    except ValueError:
        return 6 * 2**30


def _activation_floats(model: str, o: Mapping[str, object]) -> int:
    """Rough floats of one forward/backward's activations of a zoo or ``hf:`` model with options ``o``."""

    def i(key: str, default: int = 1) -> int:
        v = o.get(key, default)
        return int(v) if isinstance(v, int) else default

    batch = i("batch_size")
    if model in _PIXEL_FLOATS:
        return batch * i("image_size") ** 2 * (_PIXEL_FLOATS[model] + 3)
    if model in ("digits", "digits_cnn"):  # 8×8 inputs: the CNN's two 16/32-channel maps dominate
        return batch * 3 * (458 if model == "digits" else 64 * 48 + 586)
    if model == "charlstm":  # per token: the LSTM's 4 gates and states (~6 × 128) and the logits with their gradient
        return batch * i("seq_len") * (6 * 128 + 3 * i("vocab"))
    if model == "mlp":
        sizes = o.get("sizes", ())
        return batch * 3 * sum(int(s) for s in sizes) if isinstance(sizes, tuple | list) else 0
    seq = i("seq_len")
    layers, vocab = i("layers"), i("vocab", i("num_classes"))
    hidden = i("hidden", i("d_model"))
    if model == "hf:vit":
        seq = (i("image_size") // max(1, i("patch"))) ** 2 + 1
    # per token: each layer's projections, MLP and norms (~16 × hidden), attention scores (3 × heads × seq),
    # and the logits with their softmax and gradient
    return batch * seq * (layers * (16 * hidden + 3 * i("heads") * seq) + 3 * vocab)


#: gradient elements of the zoo models at their default options (``gcbench list models``; a test checks them
#: against the built models): counted without torch, so ``validate`` stays torch-free
ZOO_PARAMETERS = {"resnet18": 11_689_512, "resnet50": 25_557_032, "vgg16": 138_357_544, "lstm_lm": 19_780_400,
                  "transformer": 7_288_320, "mlp": 535_818, "smallcnn": 620_362, "digits": 50_826, "digits_cnn": 38_282,
                  "charlstm": 94_375}


def parameter_count(model: str, options: Mapping[str, object]) -> int:
    """Gradient elements of a zoo model (exact) or an ``hf:`` model (a floor: 12·hidden² per layer plus the embeddings)."""

    def i(key: str, default: int = 1) -> int:
        v = options.get(key, default)
        return int(v) if isinstance(v, int) else default

    if model.startswith("hf:"):
        hidden, layers = i("hidden"), i("layers")
        if model.split(":")[1] == "vit":
            return layers * 12 * hidden**2 + 3 * i("patch") ** 2 * hidden + i("num_classes") * hidden
        return layers * 12 * hidden**2 + (i("vocab") + i("positions")) * hidden
    count = ZOO_PARAMETERS[model]
    if model == "charlstm":  # embedding 32 and a linear head over the vocabulary: 161 per character, the LSTM 82,944
        return 161 * i("vocab", 71) + 82_944
    if model == "smallcnn":  # only its first FC layer depends on the image: 128 × (side/8)² inputs × 256 outputs
        count += 128 * 256 * ((i("image_size", 32) // 8) ** 2 - 16)
    return count


def _model_numel_and_activations(model: str, options: Mapping[str, int]) -> tuple[int, int] | None:
    """(gradient elements, activation floats) of a zoo or ``hf:`` model, without torch; None if unknown."""
    from gcbench.sources import catalog

    if catalog.is_user_model(model):
        return None  # estimating it would import the user's code
    try:
        if model.startswith("hf:"):
            from gcbench.sources import hf_models as hf

            _, hf_full, _ = hf.resolve(model, options)
            base = "hf:" + model.split(":")[1]
            return parameter_count(base, hf_full), _activation_floats(base, hf_full)
        full = catalog.with_defaults(catalog.lookup(model), options)
        return parameter_count(model, full), _activation_floats(model, full)
    except GcbenchError:
        return None  # an unusable model is validate's to report


def _trace_size(path: str) -> tuple[int, int, int] | None:
    """(elements per worker-step, workers, steps) of a trace, from its manifest."""
    from gcbench.sources.trace import read_manifest

    try:
        m = read_manifest(Path(path))
        return sum(math.prod(t["shape"]) for t in m.get("tensors", [])), int(m["workers"]), int(m["steps"])
    except (GcbenchError, KeyError, TypeError, ValueError):
        return None  # check_sources reports a broken trace


def source_work(src: SourceSpec) -> float | None:
    """Gradient elements a source's cases compress over its stream (elements × workers × steps), without torch; None
    when unknown (a user's model).  What a case costs grows with it: the run's ETA weighs its cases by it."""
    if src.kind == "synthetic":
        got = (sum(math.prod(s) for s in src.shapes), 0) if src.shapes else _model_numel_and_activations(src.model or "", {})
        workers, steps = src.workers or 1, src.steps or 1
    elif src.kind == "live":
        options = {k: v for k, v in (("batch_size", src.batch_size), ("image_size", src.image_size)) if v is not None}
        got = _model_numel_and_activations(src.model or "", options)
        workers, steps = src.workers or 4, src.steps or 10
    else:
        traced = _trace_size(src.path or "")
        if traced is None:
            return None
        got = (traced[0], 0)
        workers, steps = min(src.workers or traced[1], traced[1]), min(src.steps or traced[2], traced[2])
    return None if got is None else float(got[0] * workers * steps)


def source_build_work(src: SourceSpec) -> float | None:
    """What building a source costs, roughly: a live model's activations × workers × steps (its forward and backward
    passes: ResNet-50 took 101 s, ResNet-18 at 112 px 10.6 s, activations 8.7× apart, parameters 2.2×); a synthetic or
    recorded source's :func:`source_work` (its tensors drawn or read)."""
    if src.kind != "live":
        return source_work(src)
    options = {k: v for k, v in (("batch_size", src.batch_size), ("image_size", src.image_size)) if v is not None}
    got = _model_numel_and_activations(src.model or "", options)
    return None if got is None else float(max(got[1], 1) * (src.workers or 4) * (src.steps or 10))


def source_bytes(index: int, src: SourceSpec) -> Need | None:
    """The estimated peak memory of running ``src`` (None: not estimable without importing user code)."""
    model_bytes = 0
    live = ""
    if src.kind == "synthetic":
        if src.shapes:
            numel = sum(math.prod(s) for s in src.shapes)
        else:
            got = _model_numel_and_activations(src.model or "", {})
            if got is None:
                return None
            numel = got[0]
        workers, steps = src.workers or 1, src.steps or 1
    elif src.kind == "live":
        options = {k: v for k, v in (("batch_size", src.batch_size), ("image_size", src.image_size)) if v is not None}
        got = _model_numel_and_activations(src.model or "", options)
        if got is None:
            return None
        numel, act = got
        workers, steps = src.workers or 4, src.steps or 10
        # parameters, their gradient and one step of every worker's gradients; activations and their gradients
        model_bytes = _F32 * (numel * (2 + workers) + 2 * act)
        live = f", the model and activations {_gib(model_bytes)}"
    else:
        traced = _trace_size(src.path or "")
        if traced is None:
            return None
        numel = traced[0]
        workers, steps = min(src.workers or traced[1], traced[1]), min(src.steps or traced[2], traced[2])
    cache = _F32 * numel * workers * steps
    cache = cache if cache <= _cache_limit() else 0
    working = _F32 * numel * (2 * workers + 4)
    total = cache + working + model_bytes
    parts = (f"{numel:,} gradient elements × {workers} worker(s): cached steps {_gib(cache)}, "
             f"a step's working set {_gib(working)}{live}")
    return Need(index, total, parts)


def machine_memory() -> tuple[int | None, int | None]:
    """(physical, available now) memory in bytes; None where the platform does not say."""
    try:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.total), int(vm.available)
    except (ImportError, OSError):
        pass
    total = avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                kib = int(rest.split()[0]) * 1024
                total, avail = (kib, avail) if key == "MemTotal" else (total, kib)
    except (OSError, ValueError, IndexError):
        pass
    if total is None and hasattr(os, "sysconf"):
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            total = None
    return total, avail


def check_memory(suite: Suite, where: str, force: bool = False) -> list[str]:
    """Warnings about memory for ``suite``; raises one :class:`GcbenchError` line per source that cannot fit.

    A source whose estimate exceeds the machine's physical memory is refused (``force``: a warning
    instead); one that exceeds the memory available now is a warning.
    """
    total, avail = machine_memory()
    errors: list[str] = []
    warnings: list[str] = []
    for i, src in enumerate(suite.sources):
        need = source_bytes(i, src)
        if need is None:
            continue
        head = f"{where}: sources[{i}] ({src.display()}) needs at least {_gib(need.total)} of memory ({need.parts})"
        if total is not None and need.total > total:
            line = f"{head}, more than this machine's {_gib(total)}; use fewer workers or steps, smaller shapes or batches"
            (warnings if force else errors).append(line + ("" if force else ", or pass --force to try anyway"))
        elif avail is not None and need.total > avail:
            warnings.append(f"{head}, more than the {_gib(avail)} available now")
    if errors:
        raise GcbenchError("\n".join(errors))
    return warnings
