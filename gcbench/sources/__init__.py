"""Gradient sources: where the tensors that compressors are measured on come from.

* :mod:`gcbench.sources.synthetic` — seeded tensors from named distributions.
* :mod:`gcbench.sources.live` — gradients computed now from a model, N workers, S steps.
* :mod:`gcbench.sources.trace` — recorded gradients (manifest + safetensors), read lazily;
  :mod:`gcbench.sources.recorder` writes them.
* :mod:`gcbench.sources.catalog` — the zoo's names and options (torch-free);
  :mod:`gcbench.sources.zoo` builds the models (networks in :mod:`gcbench.sources.architectures`),
  :mod:`gcbench.sources.hf_models` the Hugging Face ones,
  :mod:`gcbench.sources.batches` makes their deterministic batches.

All sources implement :class:`~gcbench.sources.base.GradientSource`.  Importing this package
imports nothing else (validation reads the catalogue without torch).
"""
