"""The allowed range of every integer model option, torch-free: one table for the zoo (:mod:`gcbench.sources.catalog`)
and the Hugging Face models (:mod:`gcbench.sources.hf_models`), which both check options against it before building anything.

Kept in a module of its own so the two read it without importing each other (the catalogue imports ``hf`` lazily to
check ``hf:`` names).
"""

from __future__ import annotations

from collections.abc import Mapping

#: the allowed range of every integer zoo option: far past the models' published sizes, short of
#: sizes whose first allocation fails (``image_size = 100000`` asked for a 40 GB input batch and
#: ended in an allocation traceback); checked by ``validate`` as by the factories
OPTION_BOUNDS: Mapping[str, tuple[int, int]] = {
    "batch_size": (1, 4096), "image_size": (8, 1024), "num_classes": (1, 100_000), "seq_len": (1, 16384),
    "vocab": (2, 1_000_000), "hidden": (1, 16384), "d_model": (1, 16384), "heads": (1, 256), "layers": (1, 256),
    "sizes": (1, 65536),  # each width of the MLP
}

#: the most layers an MLP's ``sizes`` may list
MAX_MLP_SIZES = 64
