"""The compressor contract, checked for every registered compressor.

The compressor list is read from the registry at collection time, so a newly added compressor
module is tested here with no edit to this file.  See :mod:`gcbench.core.compressor` for the contract:
the input is never modified; ``decompress`` needs only the payload (a default-constructed instance
decodes it, whatever parameters produced it); ``nbytes == len(to_bytes())``; ``from_bytes``
restores a payload that decodes identically; the same seed gives the same bytes; empty tensors give
an empty body; all-zero tensors decode to zeros without NaN; corrupt bodies raise ``PayloadError``.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from gcbench.compressors import registry
from gcbench.compressors.registry import decompress
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, ErrorFeedback, State
from gcbench.core.errors import PayloadError
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


class _EFCast(Compressor):
    """A float32 pass-through under error feedback, written to the one hook: lossless, so each
    step leaves a zero residual.  ``view_body`` makes the body a zero-copy view of ``a`` (the
    residual buffer the encoder then overwrites), which the contract forbids."""

    view_body = False

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        flat = a.reshape(-1)
        body = flat.view(torch.uint8) if self.view_body else flat.clone().view(torch.uint8)
        decoded = flat.clone()
        ctx.keep_residual(a, decoded)
        return body, {}, decoded

    def _decode(self, payload: Payload) -> torch.Tensor:
        return payload.data.view(torch.float32).clone()


class _AliasingCast(_EFCast):
    view_body = True


for _cls in (_EFCast, _AliasingCast):
    _cls.info = registry.CompressorInfo(
        name="test_ef_cast", version=1, description="test only", paper="—", biased=False, stateful=True,
        error_feedback="always", deterministic=True, reconstructed=False, exchange="gather", params=(), cls=_cls,
    )  # fmt: skip


def test_error_feedback_through_the_one_hook_keeps_the_residual_in_place() -> None:
    comp = _EFCast()
    state = comp.init_state(0)
    state.tensors["residual"] = torch.full((10, 3), 0.5)
    buffer = state.tensors["residual"]
    for seed in range(3):
        x = _input((10, 3), torch.float32, seed=seed)
        payload, decoded = comp.compress_and_decode(x, state)
        assert torch.equal(decoded, x + 0.5 if seed == 0 else x)  # step 0 sends x + e
        assert torch.equal(comp.decompress(payload), decoded)
        assert state.tensors["residual"] is buffer  # updated in place: no new tensor per step
        assert torch.count_nonzero(buffer) == 0  # a lossless codec leaves nothing behind


def test_a_body_sharing_memory_with_the_residual_buffer_is_refused() -> None:
    comp = _AliasingCast()
    with pytest.raises(RuntimeError, match="residual buffer"):
        comp.compress_and_decode(_input((10, 3), torch.float32), comp.init_state(0))


# ---------------------------------------------------------------- the one encode hook


def _encode_hooks(cls: type) -> set[str]:
    """Names of every encode-like method a class defines or inherits (below ``object``)."""
    return {n for klass in cls.__mro__[:-1] for n in vars(klass) if n.startswith("_encode") and callable(getattr(cls, n))}


@pytest.mark.parametrize("name", NAMES)
def test_every_compressor_implements_exactly_the_one_hook(name: str) -> None:
    """Each compressor encodes through ``_encode(a, state, ctx)`` on the contract's one compress path:
    no second encode hook, no own ``compress_and_decode``; only a compressor with error feedback
    fuses work into the formation of ``a = x + e`` (``_form_corrected``)."""
    info = registry.get(name)
    cls = info.cls
    assert _encode_hooks(cls) == {"_encode"}
    assert cls._encode is not Compressor._encode
    assert list(inspect.signature(cls._encode).parameters)[:4] == ["self", "a", "state", "ctx"]
    assert cls.compress_and_decode is Compressor.compress_and_decode
    if cls._form_corrected is not Compressor._form_corrected:
        assert info.error_feedback in ("always", "optional"), "_form_corrected runs only under error feedback"


def _ef_configs() -> list[tuple[str, dict[str, object]]]:
    out: list[tuple[str, dict[str, object]]] = []
    for info in registry.infos():
        if info.error_feedback == "always":
            out.append((info.name, {}))
        elif info.error_feedback == "optional":
            out.append((info.name, {"error_feedback": True}))
    return out


@pytest.mark.parametrize(("name", "params"), _ef_configs(), ids=[n for n, _ in _ef_configs()])
@pytest.mark.parametrize("shape", [(1000,), (64, 3, 3, 3)], ids=["1000", "64x3x3x3"])
def test_error_feedback_updates_the_residual_buffer_in_place(name: str, params: dict[str, object], shape: tuple[int, ...]) -> None:
    """Every error-feedback compressor forms a = x + e in the state's residual and leaves a − decoded
    in that same tensor: after the first step no residual is allocated, and the residual is exactly
    (in float32) the previous residual plus x minus what was decoded."""
    comp = registry.create(name, **params)
    state = comp.init_state(3)
    comp.compress(_input(shape, torch.float32, seed=1), state)
    buffer = state.tensors["residual"]
    for seed in range(2, 5):
        x = _input(shape, torch.float32, seed=seed)
        a = x + buffer  # what the step encodes
        _, decoded = comp.compress_and_decode(x, state)
        assert state.tensors["residual"] is buffer
        assert torch.equal(buffer, a - decoded)


def test_residual_buffer_reuses_the_residual_when_it_can() -> None:
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    st = State(0)
    e, has = ErrorFeedback.buffer(st, x)
    assert not has and st.tensors["residual"] is e and e.shape == (3, 4) and e.dtype == torch.float32
    again, has = ErrorFeedback.buffer(st, x)
    assert has and again is e  # updated in place from now on
    other, has = ErrorFeedback.buffer(st, x.reshape(12))
    assert not has and other is not e and st.tensors["residual"] is other  # another shape counts as zero


@pytest.mark.parametrize("kind", ["float64", "non-contiguous", "shares-x"])
def test_residual_buffer_copies_a_residual_it_cannot_update_in_place(kind: str) -> None:
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    prev = {
        "float64": torch.full((3, 4), 0.25, dtype=torch.float64),
        "non-contiguous": torch.full((4, 3), 0.25).t(),
        "shares-x": x,
    }[kind]
    want = prev.float().clone()
    st = State(0)
    st.tensors["residual"] = prev
    e, has = ErrorFeedback.buffer(st, x)
    assert has and st.tensors["residual"] is e and e is not prev
    assert e.dtype == torch.float32 and e.is_contiguous() and torch.equal(e, want)
    ErrorFeedback.form(x, e, has)
    assert torch.equal(e, x + want) and torch.equal(x, torch.arange(12, dtype=torch.float32).reshape(3, 4))


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
