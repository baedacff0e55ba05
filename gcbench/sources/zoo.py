"""The model zoo: plain-torch models whose gradients gcbench measures compressors on.

Every network is written in gcbench (:mod:`gcbench.sources.architectures`; torchvision is optional and its
registry wheel is a CUDA build that does not import on a CPU torch), with torchvision's parameter names and initialisation where a
torchvision counterpart exists, so counts and shapes match the papers' setups:

* ``resnet18`` / ``resnet50`` — He et al., "Deep Residual Learning for Image Recognition" (CVPR
  2016), torchvision's v1.5 variant (stride on the 3×3 convolution of a bottleneck).  ResNet-50 with
  1000 classes has exactly 25,557,032 parameters in 161 gradient tensors; ResNet-18 11,689,512 in 62.
* ``vgg16`` — Simonyan & Zisserman, "Very Deep Convolutional Networks" (ICLR 2015), configuration D
  without batch norm, torchvision layout: 138,357,544 parameters in 32 tensors.
* ``lstm_lm`` — the "medium" PTB language model of Zaremba et al., "Recurrent Neural Network
  Regularization" (2014): vocabulary 10,000, embedding and 2×LSTM hidden size 650, dropout 0.5,
  sequence 35, batch 20, uniform(−0.05, 0.05) initialisation.  Input embedding and output projection
  are NOT tied (as in that paper), giving 19,780,400 gradient elements in 11 tensors (the
  19.8M the paper's setting gives); tied weights would give 13,280,400.
* ``transformer`` — a small GPT-style decoder (Radford et al., GPT-2): 4 pre-LayerNorm blocks,
  d_model 256, 4 heads, MLP 4×, learned positions, vocabulary 8,000, sequence 128, batch 8, untied
  output head: 7,288,320 parameters in 53 tensors.
* ``mlp`` — 784-512-256-10 ReLU classifier (MNIST-shaped), batch 64: 535,818 parameters in 6 tensors.
* ``smallcnn`` — a small CIFAR-10-shaped CNN (three 3×3 conv + ReLU + 2×2 max-pool stages of 32, 64
  and 128 channels, then fully connected 2048-256-10), batch 32 of 32×32: 620,362 parameters in 10
  tensors.  Cheap enough on a CPU for many steps of several workers (the LGC suite uses it).

Data is synthetic but learnable, so that ``warmup_steps`` of training move the model somewhere
meaningful rather than fitting noise: an image of class ``c`` is a fixed low-resolution (4×4)
per-class prototype upsampled to the image size plus unit Gaussian noise; token streams follow a
Zipf(1) unigram distribution mixed with a deterministic successor rule (with probability 0.5 the
next token is ``(a·prev + b) mod V``), which gives real-looking sparse embedding gradients.  A batch
is a pure function of ``(seed, batch_index, worker)``: a private ``torch.Generator`` is seeded from
those three numbers through numpy's ``SeedSequence``, so no global RNG state is read or changed.

Each :class:`ModelSpec` has a ``factory(seed, **kwargs) -> (module, make_batch)``; the module is
initialised under ``torch.manual_seed(seed)`` inside a forked RNG so the caller's RNG is untouched.
:func:`load_model` also accepts ``package.module:factory`` for a user model (:func:`~gcbench.sources.catalog.is_user_model`).
A user factory is called with a seed in ``[0, 2**31)`` (:data:`USER_SEED_LIMIT`), so plain
arithmetic on it fits ``torch.Generator.manual_seed``; anything a user factory, its ``make_batch``
or its loss raises becomes one :class:`SourceError` naming the factory, chained to the original
exception (the CLI shows its traceback with ``--debug``).
:func:`load_model` also accepts ``package.module:factory`` for a user model, and ``hf:NAME[:key=value,...]``
for a Hugging Face transformers model (:mod:`gcbench.sources.hf_models`, gcbench's own names: never imported as user code).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gcbench.core.errors import ParamError, SourceError
from gcbench.sources import catalog
from gcbench.sources.architectures import (
    MLP,
    VGG,
    BasicBlock,
    Bottleneck,
    CharLSTM,
    LSTMLanguageModel,
    ResNet,
    SmallCNN,
    TinyGPT,
    digits_build,
    digits_cnn_build,
)
from gcbench.sources.base import TensorSpec
from gcbench.sources.batches import LossFn, MakeBatch, image_batches, token_batches, vector_batches
from gcbench.sources.catalog import is_user_model, user_model_syntax_error


def cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy; sequence outputs ``(B, T, V)`` are flattened against ``(B, T)`` targets."""
    if outputs.dim() > 2:
        return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))
    return F.cross_entropy(outputs, targets)


@dataclass
class ZooModel:
    """A ready model: the module (training mode, CPU), its batch maker and its loss."""

    name: str
    module: nn.Module
    make_batch: MakeBatch
    loss_fn: LossFn


# --------------------------------------------------------------------------------------------
# factories


def _positive(model: str, **values: int) -> None:
    for key, v in values.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ParamError(f"{model}: {key} must be a positive integer, got {v!r}")


def _seeded(seed: int, build: Callable[[], nn.Module]) -> nn.Module:
    """Build under ``torch.manual_seed(seed)`` without touching the caller's RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build()
    return module.train()


def resnet18_build(num_classes: int = 1000) -> nn.Module:
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes)


def resnet50_build(num_classes: int = 1000) -> nn.Module:
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes)


def _resnet_factory(build: Callable[..., nn.Module], name: str) -> Callable[..., tuple[nn.Module, MakeBatch]]:
    def factory(seed: int = 0, *, batch_size: int, image_size: int, num_classes: int) -> tuple[nn.Module, MakeBatch]:
        _positive(name, batch_size=batch_size, image_size=image_size, num_classes=num_classes)
        # below 32 px the 32× downsampling leaves nothing for the last stage to see
        if image_size < 32:
            raise ParamError(f"{name}: image_size must be at least 32, got {image_size}")
        # training-mode batch norm needs two values per channel in the last stage
        side = image_size
        for _ in range(5):  # conv1, max-pool and three strided stages each halve (rounding up)
            side = (side - 1) // 2 + 1
        if batch_size * side * side < 2:
            raise ParamError(f"{name}: batch norm needs batch_size >= 2 at image_size {image_size} "
                             f"(the last stage is {side}×{side}); got batch_size {batch_size}")
        return _seeded(seed, lambda: build(num_classes)), image_batches(seed, num_classes, batch_size, image_size)

    return factory


resnet18_factory = _resnet_factory(resnet18_build, "resnet18")
resnet50_factory = _resnet_factory(resnet50_build, "resnet50")


def vgg16_build(num_classes: int = 1000, dropout: float = 0.5) -> nn.Module:
    return VGG(num_classes, dropout)


def vgg16_factory(seed: int = 0, *, batch_size: int, image_size: int, num_classes: int,
                   dropout: float) -> tuple[nn.Module, MakeBatch]:
    _positive("vgg16", batch_size=batch_size, image_size=image_size, num_classes=num_classes)
    if image_size < 32:
        raise ParamError(f"vgg16: image_size must be at least 32, got {image_size}")
    return _seeded(seed, lambda: VGG(num_classes, dropout)), image_batches(seed, num_classes, batch_size, image_size)


def lstm_build(vocab: int = 10_000, hidden: int = 650, layers: int = 2, dropout: float = 0.5) -> nn.Module:
    return LSTMLanguageModel(vocab, hidden, layers, dropout)


def lstm_factory(seed: int = 0, *, batch_size: int, seq_len: int, vocab: int, hidden: int,
                  layers: int, dropout: float) -> tuple[nn.Module, MakeBatch]:
    _positive("lstm_lm", batch_size=batch_size, seq_len=seq_len, vocab=vocab, hidden=hidden, layers=layers)
    module = _seeded(seed, lambda: LSTMLanguageModel(vocab, hidden, layers, dropout))
    return module, token_batches(seed, vocab, batch_size, seq_len)


def transformer_build(vocab: int = 8000, seq_len: int = 128, d_model: int = 256, heads: int = 4, layers: int = 4,
                       dropout: float = 0.1) -> nn.Module:
    return TinyGPT(vocab, seq_len, d_model, heads, layers, dropout)


def transformer_factory(seed: int = 0, *, batch_size: int, seq_len: int, vocab: int, d_model: int,
                         heads: int, layers: int, dropout: float) -> tuple[nn.Module, MakeBatch]:
    _positive("transformer", batch_size=batch_size, seq_len=seq_len, vocab=vocab, d_model=d_model, heads=heads, layers=layers)
    module = _seeded(seed, lambda: TinyGPT(vocab, seq_len, d_model, heads, layers, dropout))
    return module, token_batches(seed, vocab, batch_size, seq_len)


def mlp_build(sizes: tuple[int, ...] = (784, 512, 256, 10)) -> nn.Module:
    return MLP(tuple(sizes))


def mlp_factory(seed: int = 0, *, batch_size: int, sizes: tuple[int, ...]) -> tuple[nn.Module, MakeBatch]:
    sizes = tuple(sizes)
    _positive("mlp", batch_size=batch_size, **{f"sizes[{i}]": s for i, s in enumerate(sizes)})
    if len(sizes) < 2:
        raise ParamError(f"mlp: sizes needs at least an input and an output size, got {list(sizes)}")
    return _seeded(seed, lambda: MLP(sizes)), vector_batches(seed, sizes[-1], batch_size, sizes[0])


def smallcnn_build(num_classes: int = 10, image_size: int = 32) -> nn.Module:
    return SmallCNN(num_classes, image_size)


def smallcnn_factory(seed: int = 0, *, batch_size: int, image_size: int, num_classes: int) -> tuple[nn.Module, MakeBatch]:
    _positive("smallcnn", batch_size=batch_size, image_size=image_size, num_classes=num_classes)
    if image_size < 8:  # three 2× poolings must leave at least one pixel
        raise ParamError(f"smallcnn: image_size must be at least 8, got {image_size}")
    return _seeded(seed, lambda: SmallCNN(num_classes, image_size)), image_batches(seed, num_classes, batch_size, image_size)




def digits_factory(seed: int = 0, *, batch_size: int) -> tuple[nn.Module, MakeBatch]:
    _positive("digits", batch_size=batch_size)
    return _seeded(seed, digits_build), vector_batches(seed, 10, batch_size, 64)


def digits_cnn_factory(seed: int = 0, *, batch_size: int) -> tuple[nn.Module, MakeBatch]:
    _positive("digits_cnn", batch_size=batch_size)
    return _seeded(seed, digits_cnn_build), vector_batches(seed, 10, batch_size, 64)


def charlstm_build(vocab: int = 71) -> nn.Module:
    return CharLSTM(vocab)


def charlstm_factory(seed: int = 0, *, batch_size: int, seq_len: int, vocab: int) -> tuple[nn.Module, MakeBatch]:
    _positive("charlstm", batch_size=batch_size, seq_len=seq_len, vocab=vocab)
    return _seeded(seed, lambda: CharLSTM(vocab)), token_batches(seed, vocab, batch_size, seq_len)


#: seeds handed to user factories are in ``[0, USER_SEED_LIMIT)``: the runner derives 63-bit seeds,
#: and a factory doing ``seed * 1_000_003`` with one overflows ``torch.Generator.manual_seed``
USER_SEED_LIMIT = 2**31


def user_seed(seed: int) -> int:
    """The seed a user factory receives for gcbench's ``seed``: ``seed mod 2**31`` (0 and small seeds unchanged)."""
    return int(seed) % USER_SEED_LIMIT


def user_code_error(path: str, what: str | None, exc: BaseException) -> SourceError:
    """One line naming the user's model (``what``: the part of it that failed, None for the factory) and its exception.

    The caller chains ``exc`` (``raise ... from exc``) so ``--debug`` can show the user's traceback.
    """
    text = str(exc).strip().splitlines()
    detail = f": {text[0]}" if text else ""
    where = f"model {path!r}" if what is None else f"model {path!r}: {what}"
    return SourceError(f"{where} raised {type(exc).__name__}{detail}")


def _import_file(path: str, file_text: str) -> Any:
    """The file of a ``path/to/file.py:factory`` model imported as a module of its own.

    Under the name ``gcbench_user_<stem>_<digest of the absolute path>``, the one ``gcbench converge`` gives it
    (gcbench/workloads/problems.py), so a process that imported it there reuses it, and every process that is given
    the same path (advise's bench workers) imports the same file.  A converge run records the file's absolute path
    (``settings.task_path``), which is how ``advise --convergence`` finds it again from another folder.
    """
    import hashlib
    import importlib.util
    import re
    import sys
    from pathlib import Path

    file = Path(file_text).expanduser().resolve()
    if not file.is_file():
        raise SourceError(f"model {path!r}: no such file {file_text!r}")
    name = f"gcbench_user_{re.sub(r'[^0-9A-Za-z_]', '_', file.stem)}_{hashlib.sha256(str(file).encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise SourceError(f"model {path!r}: {file_text!r} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        del sys.modules[name]
        raise
    except BaseException as exc:  # the file's own top-level code failed (a sys.exit() too): the user's error
        del sys.modules[name]
        raise user_code_error(path, f"importing {file_text!r}", exc) from exc
    return module


def _import_factory(path: str) -> Callable[..., object]:
    problem = user_model_syntax_error(path)
    if problem:
        raise SourceError(problem)
    file_text, _, file_attr = path.rpartition(":")
    if file_text.endswith(".py"):  # path/to/file.py:factory
        mod_name, attr = file_text, file_attr
        module = _import_file(path, file_text)
    else:
        mod_name, _, attr = path.partition(":")
        try:
            module = importlib.import_module(mod_name)
        except ImportError as exc:
            raise SourceError(f"model {path!r}: cannot import module {mod_name!r} ({exc})") from exc
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the module's own top-level code failed (a sys.exit() too): the user's error
            raise user_code_error(path, f"importing {mod_name!r}", exc) from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            import difflib

            names = [n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None))]
            close = difflib.get_close_matches(part, names, n=3, cutoff=0.5)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise SourceError(f"model {path!r}: module {mod_name!r} has no attribute {attr!r}{hint}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise SourceError(f"model {path!r}: {attr!r} is not callable")
    return obj


def _load_user(path: str, seed: int, kwargs: Mapping[str, object]) -> ZooModel:
    """The user model ``path`` names, built by its factory, checked, its hooks guarded: every error names ``path`` as the
    user typed it (a ``file.py`` is imported under an internal module name that would mean nothing to them)."""
    factory = _import_factory(path)
    seed = user_seed(seed)
    call_kwargs = dict(kwargs)
    try:
        sig: inspect.Signature | None = inspect.signature(factory)
    except (TypeError, ValueError):  # some builtins have no signature: call with the options only
        sig = None
    if sig is not None:
        params = sig.parameters
        if "seed" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            call_kwargs["seed"] = seed
        try:
            sig.bind(**call_kwargs)
        except TypeError as exc:
            raise SourceError(f"model {path!r}: the factory does not accept these options ({exc})") from None
    # seed the global RNG too, so a factory that does not seed itself is still deterministic, and
    # fork it so the caller's RNG is left as it was
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            result = factory(**call_kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the user's code failed (SystemExit included): one line naming it, the traceback chained
            raise user_code_error(path, None, exc) from exc
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise SourceError(f"model {path!r}: the factory must return (module, make_batch) or (module, make_batch, loss_fn), "
                          f"got {type(result).__name__}")
    module, make_batch = result[0], result[1]
    loss_fn = result[2] if len(result) == 3 else cross_entropy
    if not isinstance(module, nn.Module):
        raise SourceError(f"model {path!r}: the factory's first value must be a torch.nn.Module, got {type(module).__name__}")
    if not callable(make_batch):
        raise SourceError(f"model {path!r}: make_batch must be callable, got {type(make_batch).__name__}")
    if not callable(loss_fn):
        raise SourceError(f"model {path!r}: loss_fn must be callable, got {type(loss_fn).__name__}")
    return ZooModel(path, module.train(), _guarded_batches(path, make_batch), _guarded_loss(path, loss_fn))


def _guarded_batches(path: str, make_batch: MakeBatch) -> MakeBatch:
    """``make_batch`` whose exceptions become one :class:`SourceError` naming the user's model."""

    @functools.wraps(make_batch)
    def guarded(batch_index: int, worker: int) -> tuple[Any, Any]:
        try:
            batch = make_batch(batch_index, worker)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a sys.exit() in user code is its error too, not a silent exit of gcbench
            raise user_code_error(path, f"make_batch({batch_index}, {worker})", exc) from exc
        if not isinstance(batch, tuple | list) or len(batch) != 2:
            raise SourceError(f"model {path!r}: make_batch({batch_index}, {worker}) must return (inputs, targets), "
                              f"got {type(batch).__name__}")
        return batch[0], batch[1]

    return guarded


def _guarded_loss(path: str, loss_fn: LossFn) -> LossFn:
    """``loss_fn`` whose exceptions become one :class:`SourceError` naming the user's model."""

    @functools.wraps(loss_fn)
    def guarded(outputs: Any, targets: Any) -> torch.Tensor:
        try:
            return loss_fn(outputs, targets)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # as in make_batch: SystemExit too
            raise user_code_error(path, "loss_fn", exc) from exc

    return guarded


def load_model(name_or_path: str, seed: int = 0, **kwargs: object) -> ZooModel:
    """A zoo model by name, or a user model given as ``package.module:factory``.

    Zoo options (``batch_size``, ``image_size``, …) go in ``kwargs``; see ``catalog.MODELS[name].options``.
    A user factory (:func:`~gcbench.sources.catalog.is_user_model`) is called with ``kwargs`` and with ``user_seed(seed)``, in
    ``[0, 2**31)``, when it accepts a seed (under ``torch.manual_seed`` of that seed in a forked RNG
    either way), and must return
    ``(module, make_batch)`` or ``(module, make_batch, loss_fn)`` (default loss: cross entropy).
    ``hf:NAME[:key=value,...]`` is a Hugging Face model built by :mod:`gcbench.sources.hf_models`.
    """
    if name_or_path.startswith("hf:"):  # gcbench's own names: never imported as user code
        from gcbench.sources import hf_models as hf

        name, module, make_batch, loss_fn = hf.load(name_or_path, seed, **kwargs)
        return ZooModel(name, module, make_batch, loss_fn)
    if is_user_model(name_or_path):
        return _load_user(name_or_path, seed, kwargs)
    card = catalog.lookup(name_or_path)
    module, make_batch = globals()[card.factory](seed, **catalog.with_defaults(card, kwargs))
    return ZooModel(card.name, module, make_batch, cross_entropy)


def gradient_layout(module: nn.Module) -> list[TensorSpec]:
    """The gradient tensors of ``module``: trainable parameters in ``named_parameters`` order, float32."""
    return [TensorSpec(n, tuple(p.shape), torch.float32) for n, p in module.named_parameters() if p.requires_grad]


#: ``torch.nn.init``'s in-place initialisers: a model built only for its shapes skips them (:func:`_shapes_only`)
_INITIALISERS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_", "xavier_uniform_",
                 "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_")


@contextlib.contextmanager
def _shapes_only() -> Iterator[None]:
    """Build modules on the meta device with ``torch.nn.init``'s initialisers skipped (as ``accelerate``'s empty-weights
    context does): a meta tensor has no values to fill, and the first fill of one imports torch's Python reference
    operators — 1.3–3 s of every ``bench --model`` worker process, for shapes that need none of it."""
    saved = {n: getattr(nn.init, n) for n in _INITIALISERS if hasattr(nn.init, n)}
    try:
        for n in saved:
            setattr(nn.init, n, lambda tensor, *args, **kwargs: tensor)
        with torch.device("meta"):
            yield
    finally:
        for n, fn in saved.items():
            setattr(nn.init, n, fn)


def layer_shapes(name: str, **kwargs: object) -> list[TensorSpec]:
    """Names and shapes of a model's gradient tensors, without running it.

    Zoo models are built on the meta device (no weights are allocated, so VGG-16's 138M parameters
    cost nothing); a ``package.module:factory`` model is built on the CPU through its factory.
    Batch options in ``kwargs`` (``batch_size`` …) are accepted and ignored here.  ``hf:`` models
    are built on the meta device too.
    """
    if name.startswith("hf:"):
        from gcbench.sources import hf_models as hf

        return gradient_layout(hf.build_meta(name, **kwargs))
    if is_user_model(name):
        return gradient_layout(load_model(name, 0, **kwargs).module)
    card = catalog.lookup(name)
    build = globals()[card.build]
    build_params = inspect.signature(build).parameters
    build_kwargs = {k: v for k, v in catalog.with_defaults(card, kwargs).items() if k in build_params}
    with _shapes_only():
        module = build(**build_kwargs)
    return gradient_layout(module)


def catalogue() -> list[dict[str, Any]]:
    """Every model ``gcbench list models`` shows: zoo and Hugging Face names, sizes counted on the meta device."""
    from gcbench.sources import hf_models as hf

    def sizes(name: str) -> tuple[int | None, int | None]:
        if hf.is_hf(name) and not hf.available():
            return None, None  # counted once the extra is installed
        layout = layer_shapes(name)  # meta device: no weights allocated
        return sum(s.numel for s in layout), len(layout)

    return [{"name": n, "parameters": p, "tensors": k, "extra": e, "description": d}
            for n, d, e in [*((n, m.description, None) for n, m in catalog.MODELS.items()),
                            *((hf.PREFIX + n, m.description, hf.EXTRA) for n, m in hf.MODELS.items())]
            for p, k in [sizes(n)]]
