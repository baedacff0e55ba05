"""Hugging Face transformers models as gradient sources: ``hf:gpt2``, ``hf:bert``, ``hf:llama``, ``hf:vit``.

The models people train today are transformers whose embedding tables, attention projections and
layer norms stress compressors differently from a ResNet (GPT-2 small's token embedding alone is
38.6M elements).  This module builds them from the ``transformers`` library's configuration classes
(randomly initialised under ``torch.manual_seed(seed)``, never ``from_pretrained``: nothing is ever
fetched from a hub) and pairs each with a deterministic seeded batch generator of the right input
kind and the model's own loss, so :class:`~gcbench.sources.live.LiveSource`, ``record`` and the
suites use them exactly like zoo models.

Names follow the compressor spec form, ``hf:NAME`` or ``hf:NAME:key=value,...``, with integer size
options (``hf:gpt2:layers=4,hidden=256,heads=4``).  The ``hf:`` prefix is gcbench's own: the names are
resolved here and never imported as user code.  The defaults are the published sizes:

* ``gpt2`` — GPT-2 small (Radford et al. 2019): 12 layers, 768 hidden, 12 heads, vocabulary 50,257,
  1,024 positions, tied output head: 124,439,808 parameters in 148 tensors; causal-LM loss.
* ``bert`` — BERT-base (Devlin et al. 2019) with its masked-LM head: 109,514,298 parameters; padded
  variable-length batches with attention masks, 15% of real tokens masked (80% ``[MASK]``, 10% random,
  10% kept) as in the paper.
* ``llama`` — a small LLaMA-style decoder (Touvron et al. 2023: RMSNorm, rotary positions, SwiGLU,
  untied head) of 8 layers, 512 hidden, 8 heads, vocabulary 32,000: 60,039,680 parameters.  LLaMA's
  own sizes start at 7B, far beyond a CPU; the MLP width follows LLaMA's rule ``256·⌈8h/3/256⌉``.
* ``vit`` — ViT-B/16 (Dosovitskiy et al. 2021) for 1,000 classes at 224×224: 86,567,656 parameters
  (``num_classes=2``, the ``ViTConfig()`` default, gives 85,800,194); cross-entropy loss.

Token batches reuse the zoo's Zipf-plus-successor streams and image batches its class-prototype
images (:mod:`gcbench.sources.batches`), so a batch is a pure function of ``(seed, batch_index, worker)``.
``import transformers`` takes seconds, so it happens only when an ``hf:`` model is built; it is
provided by the ``gcbench[hf]`` extra.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gcbench.core.errors import ParamError, SourceError, UnknownNameError, did_you_mean
from gcbench.sources.bounds import OPTION_BOUNDS

if TYPE_CHECKING:
    import torch
    from torch import nn


#: the name prefix that routes a model name to this module
PREFIX = "hf:"
#: the optional extra that provides ``transformers`` (shown by ``gcbench list models``)
EXTRA = "gcbench[hf]"
#: the transformers version the extra pins and the tests were written against
TRANSFORMERS_VERSION = "5.23.0"

#: ``make_batch(batch_index, worker) -> (inputs, targets)``; inputs is a mapping of model keyword arguments
MakeBatch = Callable[[int, int], tuple[Any, Any]]


@dataclass(frozen=True)
class HFModelInfo:
    """One ``hf:`` model: its integer size options with defaults, how to build it and feed it."""

    name: str
    description: str
    #: every accepted option and its default; all are positive integers
    defaults: Mapping[str, int]
    #: ``build(options) -> module`` (the caller picks the device and seeds the RNG)
    build: Callable[[Mapping[str, int]], nn.Module]
    #: ``batches(seed, options) -> make_batch``
    batches: Callable[[int, Mapping[str, int]], MakeBatch]
    #: ``check(options)`` raises ParamError for inconsistent sizes (the positivity check and hidden
    #: divisible by heads are shared: every model here splits its width among its attention heads)
    check: Callable[[Mapping[str, int]], None]


# --------------------------------------------------------------------------------------------
# the library, imported lazily


def _transformers() -> Any:
    """Import transformers (offline), or fail with one line naming the extra."""
    # nothing in gcbench downloads, but make sure nothing in the library tries to either
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import transformers
    except ImportError as exc:
        raise SourceError(f"Hugging Face models need the transformers package: pip install '{EXTRA}' "
                          f"(transformers=={TRANSFORMERS_VERSION}) ({exc})") from None
    return transformers


def available() -> bool:
    """Whether ``transformers`` can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


# --------------------------------------------------------------------------------------------
# batches


def _with_mask(ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Packed causal-LM inputs: every position is real, as in LM pre-training on packed text."""
    import torch

    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def _causal_batches(seed: int, o: Mapping[str, int]) -> MakeBatch:
    """Zoo token streams as ``input_ids``/``attention_mask``/``labels`` (the model shifts the labels)."""
    from gcbench.sources.batches import token_batches

    tokens = token_batches(seed, o["vocab"], o["batch_size"], o["seq_len"])

    def make_batch(batch_index: int, worker: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        ids, _ = tokens(batch_index, worker)
        return _with_mask(ids), ids

    return make_batch


def _mlm_batches(seed: int, o: Mapping[str, int]) -> MakeBatch:
    """BERT masked-LM batches: padded variable-length rows, attention masks, 15% of real tokens predicted."""
    import torch

    from gcbench.sources.batches import batch_generator, token_batches

    vocab, batch, seq = o["vocab"], o["batch_size"], o["seq_len"]
    # ids 0 ([PAD]) and the [MASK] id are never drawn as text; 103 is [MASK] in BERT's vocabulary
    pad_id, mask_id = 0, 103 if vocab > 104 else vocab - 1
    tokens = token_batches(seed, vocab - 2, batch, seq)

    def make_batch(batch_index: int, worker: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        raw, _ = tokens(batch_index, worker)
        ids = raw + 1  # shift past [PAD]
        ids = torch.where(ids >= mask_id, ids + 1, ids)  # and past [MASK]
        g = batch_generator(seed, batch_index, worker, tag=7)
        # lengths between half and all of seq_len, so masks and padding are exercised
        lengths = torch.randint((seq + 1) // 2, seq + 1, (batch,), generator=g)
        real = torch.arange(seq)[None, :] < lengths[:, None]
        ids = torch.where(real, ids, torch.full_like(ids, pad_id))
        chosen = (torch.rand(batch, seq, generator=g) < 0.15) & real
        # every row predicts at least one token, so the loss is never a mean over nothing
        first = torch.zeros_like(chosen)
        first[torch.arange(batch), torch.randint(0, 1 << 30, (batch,), generator=g) % lengths] = True
        chosen |= first
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        action = torch.rand(batch, seq, generator=g)
        random_ids = torch.randint(1, vocab, (batch, seq), generator=g)
        inputs = torch.where(chosen & (action < 0.8), torch.full_like(ids, mask_id), ids)
        inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
        batch_inputs = {"input_ids": inputs, "attention_mask": real.long(), "token_type_ids": torch.zeros_like(ids), "labels": labels}
        return batch_inputs, labels

    return make_batch


def _pixel_batches(seed: int, o: Mapping[str, int]) -> MakeBatch:
    """Zoo class-prototype images as ``pixel_values``/``labels``."""
    from gcbench.sources.batches import image_batches

    images = image_batches(seed, o["num_classes"], o["batch_size"], o["image_size"])

    def make_batch(batch_index: int, worker: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        x, y = images(batch_index, worker)
        return {"pixel_values": x, "labels": y}, y

    return make_batch


# --------------------------------------------------------------------------------------------
# builders and checks


def _divisible(model: str, o: Mapping[str, int], num: str, den: str) -> None:
    if o[num] % o[den]:
        raise ParamError(f"hf:{model}: {num} ({o[num]}) must be a multiple of {den} ({o[den]})")


def _at_most(model: str, o: Mapping[str, int], small: str, big: str) -> None:
    if o[small] > o[big]:
        raise ParamError(f"hf:{model}: {small} ({o[small]}) must be at most {big} ({o[big]})")


def _at_least(model: str, o: Mapping[str, int], key: str, low: int, why: str) -> None:
    if o[key] < low:
        raise ParamError(f"hf:{model}: {key} must be at least {low} ({why}), got {o[key]}")


def _build(config: str, model: str, **settings: Any) -> nn.Module:
    """``transformers.<model>(transformers.<config>(**settings))``: a freshly initialised model (nothing downloaded)."""
    tf = _transformers()
    return getattr(tf, model)(getattr(tf, config)(**settings))


def _body(o: Mapping[str, int]) -> dict[str, int]:
    """Layers, width and heads as the LLaMA, BERT and ViT configs name them (GPT-2's config has its own names)."""
    return {"num_hidden_layers": o["layers"], "hidden_size": o["hidden"], "num_attention_heads": o["heads"]}


def _gpt2_check(o: Mapping[str, int]) -> None:
    _at_most("gpt2", o, "seq_len", "positions")
    _at_least("gpt2", o, "vocab", 2, "a token stream needs two symbols")


def _gpt2_build(o: Mapping[str, int]) -> nn.Module:
    # bos/eos inside the vocabulary keeps the library from warning about small test vocabularies
    module = _build("GPT2Config", "GPT2LMHeadModel", n_layer=o["layers"], n_embd=o["hidden"], n_head=o["heads"], vocab_size=o["vocab"],
                    n_positions=o["positions"], bos_token_id=o["vocab"] - 1, eos_token_id=o["vocab"] - 1)
    # the class name ("LMHead") does not tell the library which loss it computes, and it warns
    # before falling back to the causal-LM loss; say so up front
    module.loss_type = "ForCausalLM"  # type: ignore[assignment]  # a plain attribute transformers reads; torch's stubs allow tensors and modules only
    return module


def _llama_intermediate(hidden: int) -> int:
    """LLaMA's SwiGLU width rule: 2/3 of 4·hidden, rounded up to a multiple of 256."""
    return 256 * math.ceil(8 * hidden / 3 / 256)


def _llama_check(o: Mapping[str, int]) -> None:
    _divisible("llama", o, "heads", "kv_heads")
    _at_most("llama", o, "seq_len", "positions")
    _at_least("llama", o, "vocab", 3, "ids 1 and 2 are the begin and end tokens")
    if (o["hidden"] // o["heads"]) % 2:
        raise ParamError(f"hf:llama: hidden/heads ({o['hidden']}/{o['heads']}) must be even (rotary embeddings rotate pairs)")


def _llama_build(o: Mapping[str, int]) -> nn.Module:
    return _build("LlamaConfig", "LlamaForCausalLM", **_body(o), num_key_value_heads=o["kv_heads"],
                  intermediate_size=_llama_intermediate(o["hidden"]), vocab_size=o["vocab"], max_position_embeddings=o["positions"],
                  tie_word_embeddings=False)


def _bert_check(o: Mapping[str, int]) -> None:
    _at_most("bert", o, "seq_len", "positions")
    _at_least("bert", o, "vocab", 4, "[PAD], [MASK] and two text tokens")


def _bert_build(o: Mapping[str, int]) -> nn.Module:
    return _build("BertConfig", "BertForMaskedLM", **_body(o), intermediate_size=4 * o["hidden"], vocab_size=o["vocab"],
                  max_position_embeddings=o["positions"], pad_token_id=0)


def _vit_check(o: Mapping[str, int]) -> None:
    _divisible("vit", o, "image_size", "patch")
    _at_least("vit", o, "num_classes", 2, "a classifier needs two classes")


def _vit_build(o: Mapping[str, int]) -> nn.Module:
    return _build("ViTConfig", "ViTForImageClassification", **_body(o), intermediate_size=4 * o["hidden"], image_size=o["image_size"],
                  patch_size=o["patch"], num_labels=o["num_classes"])


MODELS: dict[str, HFModelInfo] = {
    m.name: m
    for m in (
        HFModelInfo("gpt2", "GPT-2 small (transformers GPT2LMHeadModel): 12 layers, 768 hidden, 12 heads, vocab 50,257, tied head, "
                    "124,439,808 parameters; batch 4 × seq 128, causal-LM loss",
                    {"layers": 12, "hidden": 768, "heads": 12, "vocab": 50257, "positions": 1024, "seq_len": 128, "batch_size": 4},
                    _gpt2_build, _causal_batches, _gpt2_check),
        HFModelInfo("bert", "BERT-base masked LM (transformers BertForMaskedLM): 12 layers, 768 hidden, vocab 30,522, 109.5M parameters; "
                    "batch 8 × seq 128 padded with attention masks, 15% masked",
                    {"layers": 12, "hidden": 768, "heads": 12, "vocab": 30522, "positions": 512, "seq_len": 128, "batch_size": 8},
                    _bert_build, _mlm_batches, _bert_check),
        HFModelInfo("llama", "small LLaMA-style decoder (transformers LlamaForCausalLM): 8 layers, 512 hidden, 8 heads, vocab 32,000, "
                    "untied head, 60.0M parameters; batch 4 × seq 128, causal-LM loss",
                    {"layers": 8, "hidden": 512, "heads": 8, "kv_heads": 8, "vocab": 32000, "positions": 2048, "seq_len": 128,
                     "batch_size": 4},
                    _llama_build, _causal_batches, _llama_check),
        HFModelInfo("vit", "ViT-B/16 (transformers ViTForImageClassification): 12 layers, 768 hidden, 1,000 classes, 86.6M parameters; "
                    "batch 8 of 224×224",
                    {"layers": 12, "hidden": 768, "heads": 12, "image_size": 224, "patch": 16, "num_classes": 1000, "batch_size": 8},
                    _vit_build, _pixel_batches, _vit_check),
    )
}


def model_names() -> list[str]:
    """The ``hf:`` names, prefixed, in table order."""
    return [PREFIX + n for n in MODELS]


# --------------------------------------------------------------------------------------------
# names


def is_hf(name: str) -> bool:
    """Whether ``name`` is an ``hf:`` model name (gcbench's own, never imported as user code)."""
    return name.startswith(PREFIX)


def _parse_int(spec: str, key: str, value: str) -> int:
    try:
        v = int(value.strip(), 10)
    except ValueError:
        raise ParamError(f"model {spec!r}: {key} must be a positive integer, got {value.strip()!r}") from None
    if v < 1:
        raise ParamError(f"model {spec!r}: {key} must be a positive integer, got {v}")
    return v


def parse_name(spec: str) -> tuple[HFModelInfo, dict[str, int]]:
    """Parse ``hf:NAME`` or ``hf:NAME:key=value,...`` strictly into (model, options given).

    An unknown key names the allowed ones; a repeated key, a value that is not a positive integer
    and a hub-style name (``hf:org/model``: it would need a download) are errors.
    """
    if not is_hf(spec):
        raise ParamError(f"model {spec!r}: Hugging Face models are written 'hf:NAME[:key=value,...]'")
    name, _, rest = spec[len(PREFIX):].partition(":")
    name = name.strip()
    if "/" in name or (name not in MODELS and name.split("-")[0] in MODELS):
        raise SourceError(f"model {spec!r}: {name!r} names a Hugging Face hub checkpoint, which would need a download; gcbench builds "
                          f"models from built-in configurations only: {', '.join(model_names())}, sized with options "
                          f"(e.g. 'hf:gpt2:layers=24,hidden=1024,heads=16')")
    if name not in MODELS:
        raise UnknownNameError(did_you_mean(name, list(MODELS), "Hugging Face model (hf:NAME)"))
    info = MODELS[name]
    options: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise ParamError(f"model {spec!r}: option {item!r} must look like key=value")
        if key not in info.defaults:
            raise ParamError(f"model {spec!r}: unknown option {key!r} (allowed: {', '.join(info.defaults)})")
        if key in options:
            raise ParamError(f"model {spec!r}: option {key!r} is given twice")
        options[key] = _parse_int(spec, key, value)
    return info, options


#: the range of every size option: the zoo's (:data:`gcbench.sources.bounds.OPTION_BOUNDS`) and the ``hf:`` models' own
HF_BOUNDS: Mapping[str, tuple[int, int]] = {**OPTION_BOUNDS, "positions": (1, 65536), "kv_heads": (1, 256), "patch": (1, 1024)}


def resolve(spec: str, kwargs: Mapping[str, object] | None = None) -> tuple[HFModelInfo, dict[str, int], str]:
    """The model, its full validated options and its canonical name for ``spec`` plus keyword options.

    ``kwargs`` are options given apart from the name (a suite's ``batch_size``, ``record --batch-size``);
    one given both ways with different values is an error.  The canonical name lists the options
    that differ from the defaults, in the defaults' order (``hf:gpt2:layers=2,hidden=64``).
    """
    info, options = parse_name(spec)
    for key, value in (kwargs or {}).items():
        if key not in info.defaults:
            raise ParamError(f"model {spec!r} has no option {key!r} (options: {', '.join(info.defaults)})")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ParamError(f"model {spec!r}: {key} must be a positive integer, got {value!r}")
        if key in options and options[key] != value:
            raise ParamError(f"model {spec!r}: {key} is {options[key]} in the name but {value} in the options; give it once")
        options[key] = value
    full = {k: options.get(k, d) for k, d in info.defaults.items()}
    for key, value in full.items():  # upper bounds too: hidden=10**9 validated, then failed allocating
        lo, hi = HF_BOUNDS.get(key, (1, 1 << 20))
        if not lo <= value <= hi:
            raise ParamError(f"model {spec!r}: {key} must be in [{lo}, {hi}], got {value}")
    _divisible(info.name, full, "hidden", "heads")
    info.check(full)
    changed = [f"{k}={v}" for k, v in full.items() if v != info.defaults[k]]
    return info, full, PREFIX + info.name + (":" + ",".join(changed) if changed else "")


# --------------------------------------------------------------------------------------------
# building


def _route_kwargs(module: nn.Module) -> None:
    """Let ``module(batch)`` mean ``module(**batch)``: LiveSource calls a model with one inputs object.

    A forward pre-hook (rather than a wrapper module) keeps the library's own class and parameter
    names (``transformer.wte.weight``), so traces and per-layer tables read like the model card.
    """


    def hook(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        if len(args) == 1 and isinstance(args[0], Mapping):
            return (), {**args[0], **kwargs}
        return None

    module.register_forward_pre_hook(hook, with_kwargs=True)


def own_loss(outputs: Any, targets: Any) -> torch.Tensor:
    """The model's own loss, computed inside its forward from the batch's ``labels``."""
    loss = getattr(outputs, "loss", None)
    if loss is None:
        raise SourceError("Hugging Face model returned no loss: the batch must carry 'labels'")
    return loss


def load(spec: str, seed: int = 0, **kwargs: object) -> tuple[str, nn.Module, MakeBatch, Callable[[Any, Any], torch.Tensor]]:
    """Build ``spec`` on the CPU, seeded: ``(canonical name, module in training mode, make_batch, loss_fn)``.

    ``make_batch(i, w)`` returns ``(inputs, labels)`` where ``inputs`` is a mapping of forward keyword
    arguments (labels included); ``module(inputs)`` runs the forward and ``loss_fn(outputs, labels)``
    returns the model's own loss.
    """
    import torch

    info, options, canonical = resolve(spec, kwargs)
    _transformers()  # a missing extra fails here, before the RNG is touched
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = info.build(options)
    _route_kwargs(module)
    return canonical, module.train(), info.batches(seed, options), own_loss


def build_meta(spec: str, **kwargs: object) -> nn.Module:
    """``spec`` built on the meta device: shapes without memory or initialisation time."""
    import torch

    info, options, _ = resolve(spec, kwargs)
    _transformers()
    with torch.device("meta"):
        return info.build(options)
