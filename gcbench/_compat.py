"""Old module paths, kept importable for one deprecation cycle.

Until 0.2 every module sat at the top of the package (``gcbench.ddp``, ``gcbench.registry`` …).
They now live in the layer they belong to; importing an old path gives the new module itself (the
same object, so ``isinstance`` and monkeypatching keep working) with a :class:`DeprecationWarning`
naming the new path.  ``gcbench.results`` and ``gcbench.report`` are packages now: their old
top-level names are forwarded by the packages themselves (see their ``__init__``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: old module -> new module
MOVED: dict[str, str] = {
    "gcbench.errors": "gcbench.core.errors",
    "gcbench.signals": "gcbench.core.signals",
    "gcbench.payload": "gcbench.core.payload",
    "gcbench.codec": "gcbench.core.codec",
    "gcbench.registry": "gcbench.compressors.registry",
    "gcbench.compressor": "gcbench.core.compressor",
    "gcbench.zoo": "gcbench.sources.zoo",
    "gcbench.recorder": "gcbench.sources.recorder",
    "gcbench.runner": "gcbench.measure.runner",
    "gcbench.bench": "gcbench.measure.bench",
    "gcbench.granularity": "gcbench.measure.granularity",
    "gcbench.suite": "gcbench.measure.suite",
    "gcbench.phases": "gcbench.results.phases",
    "gcbench.compare_runs": "gcbench.results.compare",
    "gcbench.baselines": "gcbench.results.baselines",
    "gcbench.html": "gcbench.report.html",
    "gcbench.ddp": "gcbench.distributed.ddp",
    "gcbench.train": "gcbench.distributed.train",
    "gcbench.netmodel": "gcbench.distributed.netmodel",
    # renamed so that no two modules share a base name across packages
    "gcbench.compressors._select": "gcbench.compressors._sparsify",
    "gcbench.sources.hf": "gcbench.sources.hf_models",
    # the LGC family is one package: gcbench/compressors/lgc/ (its card stays gcbench/compressors/cards/lgc.py)
    "gcbench.compressors._lgc_ae": "gcbench.compressors.lgc.autoencoder",
}


#: old module -> the modules its names were split into (``gcbench.measure.metrics`` held both fidelity and timing)
SPLIT: dict[str, tuple[str, ...]] = {
    "gcbench.metrics": ("gcbench.measure.fidelity", "gcbench.measure.timing"),
    "gcbench.measure.metrics": ("gcbench.measure.fidelity", "gcbench.measure.timing"),
}


def warn_moved(old: str, new: str, stacklevel: int = 3) -> None:
    warnings.warn(f"{old} moved to {new}; the old path goes away in gcbench 0.3", DeprecationWarning, stacklevel=stacklevel)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths and loads each as the module at its new path."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED and fullname not in SPLIT:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if spec.name in SPLIT:
            return _split_module(spec.name, SPLIT[spec.name])
        warn_moved(spec.name, MOVED[spec.name], stacklevel=8)
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        sys.modules[module.__name__] = module  # the new name stays the module's own


def _split_module(old: str, parts: tuple[str, ...]) -> ModuleType:
    """A stand-in for a module whose names now live in ``parts``: each name is looked up there, with a warning."""
    warn_moved(old, " and ".join(parts), stacklevel=9)
    module = ModuleType(old, f"Moved: the names of {old} are in {', '.join(parts)}.")

    def __getattr__(name: str) -> Any:
        for part in parts:
            target = importlib.import_module(part)
            if hasattr(target, name):
                return getattr(target, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


def moved_names(module: str, targets: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for names that moved out of ``module``: each is found in its new module, with a warning.

    The old module then needs no import of the new one (which may import it: ``results.parse`` reads
    ``results.record``'s models), so no import circle is drawn for a forward kept for old callers.
    """

    def __getattr__(name: str) -> Any:
        if name not in targets:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warn_moved(f"{module}.{name}", f"{targets[name]}.{name}")
        return getattr(importlib.import_module(targets[name]), name)

    return __getattr__


def renamed(module: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for names renamed inside ``module`` (``DGC`` -> ``DGC_CARD``), with a warning."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warn_moved(f"{module}.{name}", f"{module}.{names[name]}")
        return getattr(sys.modules[module], names[name])

    return __getattr__


def install() -> None:
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())


def forwarder(package: str, module: str) -> Callable[[str], Any]:
    """A package ``__getattr__`` that finds the names of the old one-module ``package`` in ``module``, with a warning."""

    def __getattr__(name: str) -> Any:
        # `from gcbench.report import listing` asks the package first: a submodule must not import the old module
        if name.startswith("__") or importlib.util.find_spec(f"{package}.{name}") is not None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        target = importlib.import_module(module)
        if not hasattr(target, name):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        warn_moved(f"{package}.{name}", f"{module}.{name}")
        return getattr(target, name)

    return __getattr__
