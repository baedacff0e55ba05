"""The device guard: every registered compressor's torch path (the path a CUDA tensor takes) stays on the device.

For a 100,000-element float32 tensor, counted by :func:`gcbench.core.host_sync.count_host_syncs`:

* ``compress_and_decode`` (two steps, each counted) and ``decompress``: no tensor<->NumPy conversion, and at most the
  card's ``scalar_reads`` scalar reads per call;
* a simulated 4-worker ``exchange``: no conversion, and at most the card's
  :meth:`~gcbench.core.info.CompressorInfo.exchange_scalar_reads` (4) scalar reads;
* the sharded schemes of :mod:`gcbench.core.sharded` (ring, all-to-all) on 4 workers and 10,000 elements, for every
  codec that passes the checks above and fits them: no conversion, and the reads of its encodes and decodes.

Each check first makes one uncounted call (a warm-up): what a compressor makes once per shape and caches, such as
adacomp's pairwise-sum plan (index tensors uploaded once per length and device), is a one-time cost, not a step's.
The counted calls then start from fresh states, so a first step's own conversions still count.

The registry is read at collection time, plugins included, and the demo plugin of ``tests/plugin_pkg`` is registered
for the module, so a compressor from another package is held to the same rule.  The tests run where the torch path
runs: under ``GCBENCH_KERNELS=torch``, or with ``GCBENCH_TEST_DEVICE=cuda``.  Otherwise (numba present, CPU) they skip
and :func:`test_the_guard_holds_on_the_torch_path` runs this module in a fresh process under
``GCBENCH_KERNELS=torch`` (the kernels choose their path at import).  ``pytest -s`` prints a table of the counts.

:data:`NOT_YET` names what is not yet device-resident, per check; those are expected to fail, strictly: one that passes
fails the run until it is taken off the list.  It is empty since randomk's and powersgd's version 3 (issue 41): a
compressor added to it must say why on its card (``host_transfers``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gcbench import kernels
from gcbench.compressors import registry
from gcbench.core.host_sync import HostSyncs, count_host_syncs
from gcbench.core.info import PROTOCOL_SCALAR_READS
from gcbench.core.sharded import SCHEMES, CollectiveError, check_fits, simulate_sharded
from tests.conftest import TEST_DEVICE

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "tests" / "plugin_pkg"
SHAPE = (250, 400)  # 100,000 elements; a matrix, so PowerSGD's factors are real
WORKERS = 4
#: the torch path runs here: numba is off (GCBENCH_KERNELS=torch) or the tensors are on a GPU
ON_TORCH_PATH = not kernels.NUMBA or TEST_DEVICE != "cpu"

#: per check, the compressors not yet device-resident: expected to fail, strictly (take a name off when it passes)
NOT_YET: dict[str, set[str]] = {
    "compress": set(),
    "decompress": set(),
    "exchange": set(),
}
COUNTS: dict[tuple[str, str], HostSyncs] = {}


def test_the_cards_say_what_is_not_yet_device_resident() -> None:
    """Every compressor the guard expects to convert states it on its card (``host_transfers``, shown by ``gcbench
    list NAME``), and a card that states it is on :data:`NOT_YET`: users read the card, not this list."""
    listed = set().union(*NOT_YET.values())
    stated = {n for n in registry.names() if registry.get(n).host_transfers}
    assert listed == stated


def _plugin_card() -> object:
    sys.path.insert(0, str(PLUGIN))
    try:
        from gcbench_plugin_demo.card import HALFSIGN_CARD  # type: ignore[import-not-found]  # on sys.path here alone
    finally:
        sys.path.remove(str(PLUGIN))
    return HALFSIGN_CARD


PLUGIN_CARD = _plugin_card() if ON_TORCH_PATH else None
NAMES = sorted({*registry.names(), "halfsign"}) if ON_TORCH_PATH else []


@pytest.fixture(scope="module", autouse=True)
def _plugin_and_table() -> Iterator[None]:
    """The demo plugin registered for this module (its package importable); the table printed at the end."""
    added = PLUGIN_CARD is not None and "halfsign" not in registry.names()
    if added:
        sys.path.insert(0, str(PLUGIN))
        registry.register(PLUGIN_CARD, "plugin gcbench-plugin-demo (tests/plugin_pkg)")  # type: ignore[arg-type]
    yield
    if added:
        registry.unregister("halfsign")
        sys.path.remove(str(PLUGIN))
    if COUNTS:
        print(f"\ndevice guard ({TEST_DEVICE}, {SHAPE[0] * SHAPE[1]:,} float32): conversions / scalar reads (budget)")
        print(f"{'compressor':<16}{'compress':>16}{'decompress':>16}{'exchange x4':>16}")
        for name in sorted({n for n, _ in COUNTS}):
            cells = [COUNTS.get((name, check)) for check in ("compress", "decompress", "exchange")]
            print(f"{name:<16}" + "".join(f"{'-' if c is None else f'{c.conversions} / {c.scalar_reads}':>16}" for c in cells))


def _cases(check: str) -> list[object]:
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="issue 41: not yet device-resident"))
            if n in NOT_YET[check] else n for n in NAMES]


def _inputs(seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(SHAPE, generator=g).to(TEST_DEVICE) for _ in range(WORKERS)]


def _held(name: str, check: str, counted: HostSyncs, budget: int) -> None:
    prev = COUNTS.get((name, check))
    if prev is None or (counted.conversions, counted.scalar_reads) > (prev.conversions, prev.scalar_reads):
        COUNTS[(name, check)] = counted
    where = "; ".join(counted.sites[:6])
    assert counted.conversions == 0, f"{name} {check}: {counted} (budget {budget} reads) at {where}"
    assert counted.scalar_reads <= budget, f"{name} {check}: {counted}, budget {budget} reads, at {where}"


needs_torch_path = pytest.mark.skipif(not ON_TORCH_PATH, reason="the torch path is not taken here (numba on the CPU); "
                                      "test_the_guard_holds_on_the_torch_path runs this module under GCBENCH_KERNELS=torch")


@needs_torch_path
@pytest.mark.parametrize("name", _cases("compress"))
def test_compress_and_decode_stays_on_the_device(name: str) -> None:
    comp = registry.create(name)
    x = _inputs()[0]
    comp.compress_and_decode(x, comp.init_state(1))  # warm-up: constants made once per shape and cached (see above)
    state = comp.init_state(0)
    for _ in range(2):  # the first step, and one with the state it left (a residual, a warm start, momentum)
        with count_host_syncs() as counted:
            comp.compress_and_decode(x, state)
        _held(name, "compress", counted, comp.info.scalar_reads)


@needs_torch_path
@pytest.mark.parametrize("name", _cases("decompress"))
def test_decompress_stays_on_the_device(name: str) -> None:
    comp = registry.create(name)
    x = _inputs()[0]
    payload = comp.compress(x, comp.init_state(0))
    comp.decompress(payload, x.shape)  # warm-up
    with count_host_syncs() as counted:
        out = comp.decompress(payload, x.shape)
    assert out.device == x.device
    _held(name, "decompress", counted, comp.info.scalar_reads)


@needs_torch_path
@pytest.mark.parametrize("name", _cases("exchange"))
def test_exchange_stays_on_the_device(name: str) -> None:
    comp = registry.create(name)
    xs = _inputs(1)
    comp.exchange(xs, [comp.init_state(WORKERS + w) for w in range(WORKERS)])  # warm-up
    states = [comp.init_state(w) for w in range(WORKERS)]
    with count_host_syncs() as counted:
        result = comp.exchange(xs, states)
    assert result.aggregate.device == xs[0].device
    _held(name, "exchange", counted, comp.info.exchange_scalar_reads(WORKERS))


@needs_torch_path
@pytest.mark.parametrize("scheme", [s for s in SCHEMES if s != "allgather"])  # the all-gather: the exchange above
@pytest.mark.parametrize("name", [n for n in NAMES if not any(n in names for names in NOT_YET.values())])
def test_sharded_exchange_stays_on_the_device(name: str, scheme: str) -> None:
    """The sharded schemes' machinery (core/sharded.py) on a codec that stays on the device: it adds no host sync.

    Budget: each worker encodes and decodes at most world + 1 chunks each (the ring: world − 1 hops, the mean, the
    all-gather's world chunks), each within the card's reads, and :data:`PROTOCOL_SCALAR_READS`.
    """
    comp = registry.create(name)
    try:
        check_fits(comp, scheme)
    except CollectiveError as exc:
        pytest.skip(str(exc))
    xs = [x[:25] for x in _inputs(2)]  # 10,000 elements: the ring encodes N² chunks
    states = [comp.init_state(w) for w in range(WORKERS)]
    with count_host_syncs() as counted:
        result = simulate_sharded(comp, xs, states, scheme)
    assert result.aggregate.device == xs[0].device
    budget = WORKERS * (2 * (WORKERS + 1) * comp.info.scalar_reads + PROTOCOL_SCALAR_READS)
    _held(name, f"sharded {scheme}", counted, budget)


@pytest.mark.skipif(ON_TORCH_PATH, reason="this process takes the torch path: the guard ran above")
def test_the_guard_holds_on_the_torch_path() -> None:
    """The checks above in a fresh process under ``GCBENCH_KERNELS=torch``; its table is printed (``pytest -s``)."""
    env = {**os.environ, "GCBENCH_KERNELS": "torch", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", __file__],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    table = res.stdout[res.stdout.find("device guard ("):]
    print("\n" + table)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
