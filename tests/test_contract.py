"""The compressor contract, checked for every registered compressor.

The compressor list is read from the registry at collection time, so a newly added compressor
module is tested here with no edit to this file.  See :mod:`gcbench.core.compressor` for the contract:
the input is never modified; ``decompress`` needs only the payload (a default-constructed instance
decodes it, whatever parameters produced it); ``nbytes == len(to_bytes())``; ``from_bytes``
restores a payload that decodes identically; the same seed gives the same bytes; empty tensors give
an empty body; all-zero tensors decode to zeros without NaN; corrupt bodies raise ``PayloadError``.
"""

from __future__ import annotations

import pytest
import torch

from gcbench.compressors import registry
from gcbench.compressors.check import CHECKS, DTYPES, SHAPES, check_call, run_checks, seeded_input
from gcbench.core.compressor import Compressor, State
from gcbench.core.errors import PayloadError
from gcbench.core.info import CompressorInfo
from gcbench.core.payload import Payload

NAMES = registry.names()

_dtype_ids = [str(dt).removeprefix("torch.") for dt in DTYPES]
_shape_ids = ["x".join(map(str, s)) for s in SHAPES]


@pytest.mark.parametrize("shape", SHAPES, ids=_shape_ids)
@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_ids)
@pytest.mark.parametrize("name", NAMES)
def test_contract(name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x = seeded_input(shape, dtype, seed=len(shape) * 1000 + shape[0])
    _, out = check_call(registry.create(name), x)
    assert not torch.isnan(out).any()


class _AliasingCast(Compressor):
    """A float32 pass-through whose body is a zero-copy view of ``a`` (legal: ``a`` is never the
    caller's tensor under error feedback).  The base must not then rewrite ``a`` in place."""

    def _encode(self, a: torch.Tensor, state: State):
        return a.reshape(-1).view(torch.uint8), {}, a.reshape(-1).clone()

    def _decode(self, payload: Payload) -> torch.Tensor:
        return payload.data.view(torch.float32).clone()


_AliasingCast.info = CompressorInfo(
    name="test_aliasing_cast", impl=f"{__name__}:_AliasingCast", version=1, description="test only", paper="—", biased=False,
    stateful=True, traffic_bytes=12.0, error_feedback="always",
)


def test_error_feedback_does_not_rewrite_a_body_that_views_the_corrected_input() -> None:
    comp = _AliasingCast()
    state = comp.init_state(0)
    for seed in range(3):
        x = seeded_input((10, 3), torch.float32, seed=seed)
        payload, decoded = comp.compress_and_decode(x, state)
        assert torch.equal(comp.decompress(payload), decoded)
        assert torch.equal(decoded, x)  # a lossless codec: nothing left in the residual
        assert torch.count_nonzero(state.tensors["residual"]) == 0


# ---------------------------------------------------------------- decode-time settings in the header

# Non-default settings of the foundation compressors whose decoding depends on them.
_VARIANTS: list[tuple[str, dict[str, object]]] = [
    ("qsgd", {"s": 4, "bucket": 64}),
    ("qsgd", {"s": 1, "bucket": 100, "norm": "2"}),
    ("qsgd", {"s": 7, "bucket": 33, "encoding": "elias"}),
    ("qsgd", {"s": 300, "bucket": 1000, "norm": "2", "encoding": "elias"}),
    ("qsgd", {"min_numel": 10_000}),
    ("onebit", {"granularity": "row"}),
    ("onebit", {"granularity": "tensor"}),
    ("topk", {"density": 0.3, "index_coding": "int32"}),
    ("topk", {"density": 0.05, "index_coding": "delta-varint"}),
    ("topk", {"density": 0.2, "index_coding": "elias", "error_feedback": True}),
    ("randomk", {"density": 0.5}),
    ("terngrad", {"clip": 0.0}),
]


@pytest.mark.parametrize(("name", "params"), _VARIANTS, ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in p.items())}" for n, p in _VARIANTS])
@pytest.mark.parametrize("shape", [(1000,), (64, 3, 3, 3)], ids=["1000", "64x3x3x3"])
def test_decode_settings_travel_in_header(name: str, params: dict[str, object], shape: tuple[int, ...]) -> None:
    comp = registry.create(name, **params)
    x = seeded_input(shape, torch.float32, seed=3)
    payload, out = check_call(comp, x)
    # a default instance decodes differently-configured payloads: the settings came from the header
    assert registry.create(name).params != comp.params
    assert torch.equal(registry.create(name).decompress(payload), out)


def _choice_variants() -> list[tuple[str, str, object]]:
    """(name, param, value) for every non-default choice or flipped flag of every compressor."""
    out: list[tuple[str, str, object]] = []
    for info in registry.infos():
        for p in info.params:
            if p.choices is not None:
                out.extend((info.name, p.name, c) for c in p.choices if c != p.default)
            elif p.kind is bool and p.default is not None:
                out.append((info.name, p.name, not p.default))
    return out


@pytest.mark.parametrize(("name", "param", "value"), _choice_variants(), ids=[f"{n}-{p}={v}" for n, p, v in _choice_variants()])
def test_every_choice_decodes_by_default_instance(name: str, param: str, value: object) -> None:
    comp = registry.create(name, **{param: value})
    check_call(comp, seeded_input((64, 3, 3, 3), torch.float32, seed=9))


# ---------------------------------------------------------------- corrupt payloads


@pytest.mark.parametrize("name", NAMES)
def test_wrong_codec_raises(name: str) -> None:
    payload = registry.create(name).compress(seeded_input((100,), torch.float32), State(0))
    other = NAMES[(NAMES.index(name) + 1) % len(NAMES)]
    with pytest.raises(PayloadError, match="codec"):
        registry.create(other).decompress(payload)


# ---------------------------------------------------------------- the multi-worker exchange


# ---------------------------------------------------------------- the library's checks (what `gcbench check` runs)

_LIB_CHECKS = [c for c in CHECKS if c[0] != "calls"]  # "calls" runs above, one test per dtype and shape


@pytest.mark.parametrize("check", _LIB_CHECKS, ids=[c[0] for c in _LIB_CHECKS])
@pytest.mark.parametrize("name", NAMES)
def test_contract_check(name: str, check: tuple) -> None:
    check[2](lambda: registry.create(name))


class _Mutating(Compressor):
    """A lossless float32 codec that scales its input in place: the bug the contract's first rule forbids."""

    def _encode(self, a: torch.Tensor, state: State):
        a.mul_(2.0)
        return a.reshape(-1).clone().view(torch.uint8), {}, None

    def _decode(self, payload: Payload) -> torch.Tensor:
        return payload.data.view(torch.float32).clone()

    def _expected_body_nbytes(self, payload: Payload) -> int:
        return 4 * payload.numel


_Mutating.info = CompressorInfo(name="test_mutating", impl=f"{__name__}:_Mutating", version=1, description="test only", paper="—",
                                biased=False, stateful=False, traffic_bytes=8.0)


def test_check_reports_each_broken_guarantee() -> None:
    """``run_checks`` passes a sound compressor, fails the rows a broken one breaks (with the reason) and runs the rest."""
    registry.register(_AliasingCast.info, "test")
    registry.register(_Mutating.info, "test")
    try:
        good = {r.check: r for r in run_checks("test_aliasing_cast", only=("calls", "zeros", "exchange"))}
        rows = {r.check: r for r in run_checks("test_mutating")}
    finally:
        registry.unregister("test_aliasing_cast")
        registry.unregister("test_mutating")
    assert all(r.ok for r in good.values()), good
    assert not rows["calls"].ok and "compress modified its input" in rows["calls"].detail
    assert not rows["exchange"].ok and "modified a gradient" in rows["exchange"].detail
    assert len(rows) == len(CHECKS)
