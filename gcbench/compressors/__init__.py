"""Every registered compressor, one module each.

Importing this package imports every public module in it, and each module registers its
compressor(s) with :func:`gcbench.compressors.registry.register`.  Adding a compressor is adding a module
here: the registry, ``gcbench list`` and the registry-wide contract tests pick it up.
"""

from __future__ import annotations

import importlib
import pkgutil

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _mod.startswith("_"):
        importlib.import_module(f"{__name__}.{_mod}")
