"""Every compressor class says what it is: a docstring of its own, first in the class body (not after ``info = ...``)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import gcbench.compressors
from gcbench.compressors import registry
from gcbench.core.compressor import Compressor


def _compressor_classes() -> list[type]:
    """Every Compressor subclass defined in a module of gcbench.compressors (helpers and abstract bases included)."""
    found: dict[str, type] = {}
    for mod in pkgutil.walk_packages(gcbench.compressors.__path__, "gcbench.compressors."):
        module = importlib.import_module(mod.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, Compressor) and obj.__module__ == module.__name__:
                found[f"{obj.__module__}:{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


def _doc(cls: type) -> str:
    doc = cls.__dict__.get("__doc__")
    return doc.strip() if isinstance(doc, str) else ""


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_compressor_class_has_its_own_docstring(name: str) -> None:
    cls = registry.get(name).load()
    assert _doc(cls), f"{cls.__module__}.{cls.__qualname__} ({name}) has no docstring of its own"


@pytest.mark.parametrize("cls", _compressor_classes(), ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_compressor_subclass_has_its_own_docstring(cls: type) -> None:
    assert _doc(cls), f"{cls.__module__}.{cls.__qualname__} has no docstring of its own (or it follows `info = ...`)"


def test_the_walk_finds_the_compressors() -> None:
    names = {c.__qualname__ for c in _compressor_classes()}
    assert {"TopK", "DGC", "LGC", "SDAGC", "NoCompression"} <= names
