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
from gcbench.compressors.registry import decompress
from gcbench.core.compressor import Compressor, State
from gcbench.core.errors import PayloadError
from gcbench.core.info import CompressorInfo
from gcbench.core.payload import Payload
from tests.conftest import same_bits

NAMES = registry.names()
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(1,), (7,), (1000,), (64, 3, 3, 3), (512, 512)]

_dtype_ids = [str(dt).removeprefix("torch.") for dt in DTYPES]
_shape_ids = ["x".join(map(str, s)) for s in SHAPES]


def _input(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def check_contract(comp: Compressor, x: torch.Tensor, seed: int = 7) -> tuple[Payload, torch.Tensor]:
    """Every per-call guarantee of the contract for one input; returns (payload, decoded)."""
    before = x.clone()
    state = comp.init_state(seed)
    payload, decoded = comp.compress_and_decode(x, state)
    assert same_bits(x, before), "compress modified its input"
    assert state.step == 1

    # header fields and exact wire size
    assert payload.codec == comp.name and payload.version == comp.info.version
    assert payload.shape == tuple(x.shape) and payload.dtype == x.dtype
    assert payload.data.dtype == torch.uint8 and payload.data.dim() == 1
    raw = payload.to_bytes()
    assert payload.nbytes == len(raw)
    assert payload.body_nbytes == payload.data.numel()

    # the receiver: a default-constructed instance, by codec name alone
    out = decompress(payload)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert decoded is not None and decoded.shape == x.shape and decoded.dtype == x.dtype
    assert torch.equal(decoded, out), "compress_and_decode's decoded differs from decompress(payload)"

    # what crossed the wire decodes bit for bit the same
    restored = Payload.from_bytes(raw)
    assert restored.to_bytes() == raw
    assert restored.codec == payload.codec and restored.shape == payload.shape and restored.dtype == payload.dtype
    assert same_bits(decompress(restored), out)

    # decoded tensors are the caller's to modify: they alias neither the payload nor the input
    out.fill_(123.0)
    decoded.fill_(-321.0)
    assert payload.to_bytes() == raw, "modifying the decoded tensor changed the payload"
    assert same_bits(x, before), "modifying the decoded tensor changed the input"

    # the same seed from a fresh state gives the same bytes (on a copy of x, which is then
    # overwritten: the payload must not alias the input, since callers reuse gradient buffers)
    mine = x.clone()
    again = comp.compress(mine, comp.init_state(seed))
    assert again.to_bytes() == raw, "same seed, fresh state, different bytes"
    mine.fill_(7.0)
    assert again.to_bytes() == raw, "the payload body is a view of the input tensor"
    return payload, decompress(payload)


@pytest.mark.parametrize("shape", SHAPES, ids=_shape_ids)
@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_ids)
@pytest.mark.parametrize("name", NAMES)
def test_contract(name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x = _input(shape, dtype, seed=len(shape) * 1000 + shape[0])
    _, out = check_contract(registry.create(name), x)
    assert not torch.isnan(out).any()


@pytest.mark.parametrize("shape", [(0,), (3, 0, 2)], ids=["0", "3x0x2"])
@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_ids)
@pytest.mark.parametrize("name", NAMES)
def test_empty_tensor(name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    payload, out = check_contract(registry.create(name), torch.empty(shape, dtype=dtype))
    assert payload.body_nbytes == 0, "an empty tensor must give an empty body"
    assert out.numel() == 0


@pytest.mark.parametrize("shape", [(1000,), (64, 3, 3, 3)], ids=["1000", "64x3x3x3"])
@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_ids)
@pytest.mark.parametrize("name", NAMES)
def test_all_zero(name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    comp = registry.create(name)
    x = torch.zeros(shape, dtype=dtype)
    check_contract(comp, x)
    # several steps, so a stateful compressor's residual/momentum path is exercised too
    state = comp.init_state(1)
    for _ in range(3):
        payload = comp.compress(x, state)
        out = decompress(Payload.from_bytes(payload.to_bytes()))
        assert not torch.isnan(out).any(), "all-zero input decoded to NaN"
        assert torch.count_nonzero(out) == 0, "all-zero input decoded to a nonzero tensor"


@pytest.mark.parametrize("name", NAMES)
def test_non_contiguous_input(name: str) -> None:
    comp = registry.create(name)
    x = _input((48, 20), torch.float32, seed=5).t()
    assert not x.is_contiguous()
    payload, out = check_contract(comp, x)
    assert payload.to_bytes() == comp.compress(x.contiguous(), comp.init_state(7)).to_bytes()
    assert out.shape == (20, 48)


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
        x = _input((10, 3), torch.float32, seed=seed)
        payload, decoded = comp.compress_and_decode(x, state)
        assert torch.equal(comp.decompress(payload), decoded)
        assert torch.equal(decoded, x)  # a lossless codec: nothing left in the residual
        assert torch.count_nonzero(state.tensors["residual"]) == 0


@pytest.mark.parametrize("name", NAMES)
def test_state_resumes_identically(name: str) -> None:
    """A cloned or state_dict-restored state continues exactly like the original (checkpointing)."""
    comp = registry.create(name)
    xs = [_input((40, 30), torch.float32, seed=s) for s in range(4)]
    state = comp.init_state(11)
    for x in xs[:2]:
        comp.compress(x, state)
    assert state.step == 2
    cloned = state.clone()
    restored = State.from_state_dict(state.state_dict())
    for x in xs[2:]:
        want = comp.compress(x, state).to_bytes()
        assert comp.compress(x, cloned).to_bytes() == want
        assert comp.compress(x, restored).to_bytes() == want
    assert cloned.step == restored.step == state.step == 4


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
    x = _input(shape, torch.float32, seed=3)
    payload, out = check_contract(comp, x)
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
    check_contract(comp, _input((64, 3, 3, 3), torch.float32, seed=9))


# ---------------------------------------------------------------- corrupt payloads


@pytest.mark.parametrize("name", NAMES)
def test_wrong_codec_raises(name: str) -> None:
    payload = registry.create(name).compress(_input((100,), torch.float32), State(0))
    other = NAMES[(NAMES.index(name) + 1) % len(NAMES)]
    with pytest.raises(PayloadError, match="codec"):
        registry.create(other).decompress(payload)


@pytest.mark.parametrize("name", NAMES)
def test_wrong_version_raises(name: str) -> None:
    p = registry.create(name).compress(_input((100,), torch.float32), State(0))
    newer = Payload(p.codec, p.version + 1, p.dtype, p.shape, p.data, p.meta)
    with pytest.raises(PayloadError, match="version"):
        decompress(Payload.from_bytes(newer.to_bytes()))


@pytest.mark.parametrize("keep", ["all-but-one", "half", "none"])
@pytest.mark.parametrize("name", NAMES)
def test_truncated_body_raises_payload_error(name: str, keep: str) -> None:
    p = registry.create(name).compress(_input((1000,), torch.float32, seed=2), State(0))
    n = p.body_nbytes
    assert n > 0
    cut = {"all-but-one": n - 1, "half": n // 2, "none": 0}[keep]
    short = Payload(p.codec, p.version, p.dtype, p.shape, p.data[:cut].clone(), p.meta)
    with pytest.raises(PayloadError):
        decompress(Payload.from_bytes(short.to_bytes()))


# ---------------------------------------------------------------- the multi-worker exchange


@pytest.mark.parametrize("shape", [(7,), (64, 3, 3, 3), (0,), (3, 0)], ids=["7", "64x3x3x3", "0", "3x0"])
@pytest.mark.parametrize("name", NAMES)
def test_exchange_contract(name: str, shape: tuple[int, ...]) -> None:
    """Every compressor's exchange: the aggregate has the gradients' shape and dtype, is finite, is the
    same for the same seeds, leaves the gradients alone, and accounts for every worker."""
    comp = registry.create(name)
    workers = max(2, registry.get(name).min_workers)
    grads = [_input(shape, torch.float32, seed=w) for w in range(workers)]
    before = [g.clone() for g in grads]
    states = [comp.init_state(w) for w in range(workers)]
    res = comp.exchange(grads, states)
    assert all(same_bits(g, b) for g, b in zip(grads, before, strict=True)), "exchange modified a gradient"
    assert res.aggregate.shape == grads[0].shape and res.aggregate.dtype == grads[0].dtype
    assert torch.isfinite(res.aggregate).all()
    assert {r.worker for r in res.traffic.records} == set(range(workers))
    assert all(r.sent >= 0 and r.received >= 0 for r in res.traffic.records)
    for p in res.payloads:
        assert p.nbytes == len(p.to_bytes())
        if p.numel == 0:
            assert p.body_nbytes == 0, "an empty tensor must give an empty body"
    again = comp.exchange(grads, [comp.init_state(w) for w in range(workers)])
    assert same_bits(again.aggregate, res.aggregate), "same seeds, different aggregate"
    assert again.traffic.to_dict() == res.traffic.to_dict()
    zeros = comp.exchange([torch.zeros(shape) for _ in range(workers)], [comp.init_state(w) for w in range(workers)])
    assert torch.count_nonzero(zeros.aggregate) == 0 and not torch.isnan(zeros.aggregate).any()
