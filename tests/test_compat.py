"""Old module paths (gcbench 0.1's flat layout) still import, as the moved module itself, with a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from gcbench._compat import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_is_the_new_module_with_a_warning(old: str) -> None:
    code = (
        "import importlib, warnings\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        f"try:\n    importlib.import_module({old!r})\n"
        "except DeprecationWarning as w:\n    print(w)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert f"{old} moved to {MOVED[old]}" in out
    with pytest.warns(DeprecationWarning):
        sys.modules.pop(old, None)
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(MOVED[old])


def test_public_hook_import_kept() -> None:
    with pytest.warns(DeprecationWarning, match="gcbench.distributed.ddp"):
        sys.modules.pop("gcbench.ddp", None)
        from gcbench.ddp import register_compressor_hook
    from gcbench.distributed.ddp import register_compressor_hook as new

    assert register_compressor_hook is new


@pytest.mark.parametrize(("package", "name", "module"), [("gcbench.results", "load_run", "gcbench.results.store"),
                                                         ("gcbench.report", "latest_run", "gcbench.report.terminal")])
def test_old_module_names_forwarded_by_the_new_packages(package: str, name: str, module: str) -> None:
    pkg = importlib.import_module(package)
    with pytest.warns(DeprecationWarning, match=f"{module}.{name}"):
        value = getattr(pkg, name)
    assert value is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError):
        pkg.no_such_name  # noqa: B018


def test_the_0_1_register_decorator_still_registers_with_a_warning() -> None:
    import torch

    from gcbench.compressors import registry
    from gcbench.core.compressor import Compressor

    with pytest.warns(DeprecationWarning, match="deprecated: declare a CompressorInfo card"):
        deco = registry.register(name="test_legacy", version=1, description="d", paper="—", biased=False, stateful=False,
                                 exchange="gather")

    @deco
    class Legacy(Compressor):
        def _encode(self, a, state, ctx):
            return a.reshape(-1).clone().view(torch.uint8), {}, None

        def _decode(self, payload):
            return payload.data.view(torch.float32).clone()

    try:
        assert registry.get("test_legacy") is Legacy.info and registry.get("test_legacy").load() is Legacy
        x = torch.arange(6.0)
        assert torch.equal(registry.decompress(registry.create("test_legacy").compress(x, Legacy().init_state(0))), x)
    finally:
        registry.unregister("test_legacy")


def test_old_card_constant_names_resolve_with_a_warning() -> None:
    """Cards were named like their classes (``DGC``) until 0.2; the old names still find the ``_CARD`` constants."""
    from gcbench.compressors.cards import cast, dgc

    with pytest.warns(DeprecationWarning, match=r"cards\.dgc\.DGC moved to gcbench\.compressors\.cards\.dgc\.DGC_CARD"):
        assert dgc.DGC is dgc.DGC_CARD
    with pytest.warns(DeprecationWarning):
        assert cast.FP16 is cast.FP16_CARD
    with pytest.raises(AttributeError):
        _ = dgc.NOT_A_CARD


def test_split_and_moved_names_forward_with_a_warning() -> None:
    """measure.metrics became measure.fidelity + measure.timing; record's readers moved to results.parse."""
    import importlib
    import sys

    from gcbench.measure import fidelity, timing
    from gcbench.results import parse, record

    sys.modules.pop("gcbench.measure.metrics", None)
    with pytest.warns(DeprecationWarning, match="gcbench.measure.fidelity and gcbench.measure.timing"):
        old = importlib.import_module("gcbench.measure.metrics")
    assert old.fidelity is fidelity.fidelity and old.TimingPolicy is timing.TimingPolicy
    with pytest.warns(DeprecationWarning, match="results.parse.parse_record"):
        assert record.parse_record is parse.parse_record
