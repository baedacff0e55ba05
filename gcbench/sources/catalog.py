"""The model catalogue: every zoo model's name, description and options, torch-free.

``gcbench validate`` and ``gcbench list models`` check model names and options against this
catalogue without importing torch; :mod:`gcbench.sources.zoo` builds the models, taking each
model's option defaults from here (the one declaration of them).  User models
(``package.module:factory``) and Hugging Face models (``hf:NAME``) are classified here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gcbench.core.errors import ParamError, SourceError, UnknownNameError, did_you_mean
from gcbench.sources.bounds import MAX_MLP_SIZES, OPTION_BOUNDS


@dataclass(frozen=True)
class ModelCard:
    """One zoo model: ``options`` are the keyword options its factory takes, with their defaults.

    ``factory`` and ``build`` name functions of :mod:`gcbench.sources.zoo`: ``factory(seed,
    **options) -> (module, make_batch)`` and ``build(**architecture options) -> module`` (built on
    the meta device by ``layer_shapes``).
    """

    name: str
    description: str
    factory: str
    build: str
    # compare=False keeps the frozen dataclass hashable despite the dict
    options: Mapping[str, object] = field(default_factory=dict, compare=False)
    #: per-model bounds that narrow :data:`OPTION_BOUNDS` (a ResNet's five 2× downsamplings need 32 pixels)
    bounds: Mapping[str, tuple[int, int]] = field(default_factory=dict, compare=False)




#: the characters of the text the charlstm task ships (gcbench/data/public_domain.txt); a test ties the two
CHARLSTM_VOCAB = 71

_IMAGENET = {"batch_size": 8, "image_size": 224, "num_classes": 1000}
_IMAGENET_BOUNDS = {"image_size": (32, 1024)}

MODELS: dict[str, ModelCard] = {
    c.name: c
    for c in (
        ModelCard("resnet18", "ResNet-18 (He et al. 2016), 1000 classes, 11.7M parameters; batch 8 of 224×224",
                  "resnet18_factory", "resnet18_build", _IMAGENET, _IMAGENET_BOUNDS),
        ModelCard("resnet50", "ResNet-50 v1.5 (torchvision layout), 1000 classes, 25,557,032 parameters; batch 8 of 224×224",
                  "resnet50_factory", "resnet50_build", _IMAGENET, _IMAGENET_BOUNDS),
        ModelCard("vgg16", "VGG-16 (Simonyan & Zisserman 2015), 1000 classes, 138,357,544 parameters; batch 8 of 224×224",
                  "vgg16_factory", "vgg16_build", {**_IMAGENET, "dropout": 0.5}, _IMAGENET_BOUNDS),
        ModelCard("lstm_lm", "PTB-size 2-layer LSTM LM (Zaremba et al. 2014 medium): vocab 10k, 650 hidden, untied, "
                  "19.8M parameters; batch 20 × seq 35", "lstm_factory", "lstm_build",
                  {"batch_size": 20, "seq_len": 35, "vocab": 10_000, "hidden": 650, "layers": 2, "dropout": 0.5}),
        ModelCard("transformer", "GPT-style decoder: 4 layers, d_model 256, 4 heads, vocab 8k, 7.3M parameters; batch 8 × seq 128",
                  "transformer_factory", "transformer_build",
                  {"batch_size": 8, "seq_len": 128, "vocab": 8000, "d_model": 256, "heads": 4, "layers": 4, "dropout": 0.1}),
        ModelCard("mlp", "MLP 784-512-256-10 (MNIST-shaped), 0.54M parameters; batch 64", "mlp_factory", "mlp_build",
                  {"batch_size": 64, "sizes": (784, 512, 256, 10)}),
        ModelCard("smallcnn", "small CIFAR-10-shaped CNN: 3 conv stages (32/64/128) + FC 2048-256-10, 620,362 parameters; "
                  "batch 32 of 32×32", "smallcnn_factory", "smallcnn_build", {"batch_size": 32, "image_size": 32, "num_classes": 10}),
        # the train tasks' models on synthetic batches of their shapes: what advise prices for a convergence run of the task
        ModelCard("digits", "the digits task's MLP 64-256-128-10 (50,826 parameters) on synthetic 8×8 inputs; batch 32",
                  "digits_factory", "digits_build", {"batch_size": 32}),
        ModelCard("digits_cnn", "the digits_cnn task's CNN (conv 16, conv 32, FC 512-64-10) on synthetic 8×8 inputs; batch 32",
                  "digits_cnn_factory", "digits_cnn_build", {"batch_size": 32}),
        ModelCard("charlstm", "the charlstm task's character LSTM (embedding 32, LSTM 128, 71 characters) on synthetic "
                  "tokens; batch 16 × seq 64", "charlstm_factory", "charlstm_build",
                  {"batch_size": 16, "seq_len": 64, "vocab": CHARLSTM_VOCAB}),
    )
}


def model_names() -> list[str]:
    """Names of the built-in models, in zoo order."""
    return list(MODELS)


def lookup(name: str) -> ModelCard:
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownNameError(did_you_mean(name, model_names(), "model")) from None


def with_defaults(card: ModelCard, kwargs: Mapping[str, object]) -> dict[str, object]:
    """``kwargs`` checked against the card's options, defaults filled in."""
    unknown = sorted(set(kwargs) - set(card.options))
    if unknown:
        raise ParamError(f"model {card.name!r} has no option {', '.join(map(repr, unknown))} "
                         f"(options: {', '.join(card.options) or 'none'})")
    for key, value in kwargs.items():
        _check_bound(card, key, value)
    return {**card.options, **kwargs}


def option_bounds(card: ModelCard, key: str) -> tuple[int, int] | None:
    """The allowed range of the integer option ``key`` of ``card`` (None: not an integer option)."""
    return card.bounds.get(key, OPTION_BOUNDS.get(key))


def _check_bound(card: ModelCard, key: str, value: object) -> None:
    """Refuse an integer option outside :func:`option_bounds` (types are the factories' to check)."""
    bounds = option_bounds(card, key)
    if bounds is None:
        return
    lo, hi = bounds
    values = value if key == "sizes" and isinstance(value, list | tuple) else [value]
    if key == "sizes" and not 2 <= len(values) <= MAX_MLP_SIZES:
        raise ParamError(f"{card.name}: sizes must list 2 to {MAX_MLP_SIZES} layer widths, got {len(values)}")
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool) and not lo <= v <= hi:
            raise ParamError(f"{card.name}: {key} must be in [{lo}, {hi}], got {v}")


def is_user_model(name: str) -> bool:
    """Whether ``name`` names user code (``package.module:factory``) that loading it would import.

    ``hf:`` names are gcbench's own Hugging Face models, not user code.  This is the one place a
    model name is classified: suites need ``--trust-code`` before gcbench imports what they name.
    """
    return ":" in name and not name.startswith("hf:")


def user_model_syntax_error(path: str) -> str | None:
    """Why ``path`` is not a well-formed ``package.module:factory`` or ``path/to/file.py:factory`` (None if it is);
    imports nothing."""
    file_text, sep, file_attr = path.rpartition(":")
    if sep and file_text.endswith(".py") and len(file_text) > 3:  # a file: any path, then the factory's dotted name
        if all(part.isidentifier() for part in file_attr.split(".")):
            return None
        return f"model {path!r}: a user model is written 'package.module:factory' or 'path/to/file.py:factory'"
    mod_name, _, attr = path.partition(":")
    if not all(part.isidentifier() for part in (*mod_name.split("."), *attr.split("."))):
        return f"model {path!r}: a user model is written 'package.module:factory'"
    return None


def check_model(name: str, **kwargs: object) -> None:
    """Check a model name (and zoo options) without importing torch, transformers or user code.

    A zoo name must exist ("did you mean") and accept ``kwargs``; a user model must be written
    ``package.module:factory`` (its options can only be checked by calling it); an ``hf:`` name is
    parsed strictly by the Hugging Face source.  Raises :class:`UnknownNameError`,
    :class:`ParamError` or :class:`SourceError`.
    """
    if name.startswith("hf:"):
        from gcbench.sources import hf_models as hf

        hf.resolve(name, kwargs)
        return
    if is_user_model(name):
        problem = user_model_syntax_error(name)
        if problem:
            raise SourceError(problem)
        return
    with_defaults(lookup(name), kwargs)
