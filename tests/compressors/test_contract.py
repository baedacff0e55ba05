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
from gcbench.compressors.check import CHECKS, DTYPES, SHAPES, check_call, run_checks, seeded_input
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, ErrorFeedback, State
from gcbench.core.errors import PayloadError
from gcbench.core.info import CompressorInfo
from gcbench.core.payload import Payload
from tests.conftest import on_test_device

NAMES = registry.names()

_dtype_ids = [str(dt).removeprefix("torch.") for dt in DTYPES]
_shape_ids = ["x".join(map(str, s)) for s in SHAPES]


@pytest.mark.parametrize("shape", SHAPES, ids=_shape_ids)
@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_ids)
@pytest.mark.parametrize("name", NAMES)
def test_contract(name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    x = on_test_device(seeded_input(shape, dtype, seed=len(shape) * 1000 + shape[0]))
    _, out = check_call(registry.create(name), x)
    assert not torch.isnan(out).any()


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


for _cls, _name in ((_EFCast, "test_ef_cast"), (_AliasingCast, "test_aliasing_cast")):
    _cls.info = CompressorInfo(name=_name, impl=f"{__name__}:{_cls.__name__}", version=1, description="test only", paper="—",
                               biased=False, stateful=True, traffic_bytes=12.0, error_feedback="always")


def test_error_feedback_through_the_one_hook_keeps_the_residual_in_place() -> None:
    comp = _EFCast()
    state = comp.init_state(0)
    state.tensors["residual"] = torch.full((10, 3), 0.5)
    buffer = state.tensors["residual"]
    for seed in range(3):
        x = seeded_input((10, 3), torch.float32, seed=seed)
        payload, decoded = comp.compress_and_decode(x, state)
        assert torch.equal(decoded, x + 0.5 if seed == 0 else x)  # step 0 sends x + e
        assert torch.equal(comp.decompress(payload), decoded)
        assert state.tensors["residual"] is buffer  # updated in place: no new tensor per step
        assert torch.count_nonzero(buffer) == 0  # a lossless codec leaves nothing behind


def test_a_body_sharing_memory_with_the_residual_buffer_is_refused() -> None:
    comp = _AliasingCast()
    with pytest.raises(RuntimeError, match="residual buffer"):
        comp.compress_and_decode(seeded_input((10, 3), torch.float32), comp.init_state(0))


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
    cls = info.load()
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
    comp.compress(on_test_device(seeded_input(shape, torch.float32, seed=1)), state)
    buffer = state.tensors["residual"]
    for seed in range(2, 5):
        x = on_test_device(seeded_input(shape, torch.float32, seed=seed))
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
    x = on_test_device(seeded_input(shape, torch.float32, seed=3))
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
    check_call(comp, on_test_device(seeded_input((64, 3, 3, 3), torch.float32, seed=9)))


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

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
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
    registry.register(_EFCast.info, "test")
    registry.register(_Mutating.info, "test")
    try:
        good = {r.check: r for r in run_checks("test_ef_cast", only=("calls", "zeros", "exchange"))}
        rows = {r.check: r for r in run_checks("test_mutating")}
    finally:
        registry.unregister("test_ef_cast")
        registry.unregister("test_mutating")
    assert all(r.ok for r in good.values()), good
    assert not rows["calls"].ok and "compress modified its input" in rows["calls"].detail
    assert not rows["exchange"].ok and "modified a gradient" in rows["exchange"].detail
    assert len(rows) == len(CHECKS)


class _Float32Norm(_EFCast):
    """Sends x/‖x‖ and ‖x‖, the norm's squares summed in float32: at |x| ~ 1e20 the sum is inf and the output NaN."""

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        flat = a.reshape(-1).float()
        norm = flat.pow(2).sum().sqrt().reshape(1)  # the bug: float32 squares overflow at |x| > 1.8e19
        unit = flat / norm if float(norm) > 0 else flat.clone()
        return torch.cat([norm, unit]).view(torch.uint8), {}, None

    def _decode(self, payload: Payload) -> torch.Tensor:
        v = payload.data.view(torch.float32)
        return v[1:] * v[0]

    def _expected_body_nbytes(self, payload: Payload) -> int:
        return 4 * payload.numel + 4


_Float32Norm.info = CompressorInfo(name="test_f32norm", impl=f"{__name__}:_Float32Norm", version=1, description="test only",
                                   paper="—", biased=True, stateful=False, traffic_bytes=8.0)


def test_check_extremes_finds_a_norm_summed_in_float32() -> None:
    registry.register(_Float32Norm.info, "test")
    try:
        (row,) = run_checks("test_f32norm", only=("extremes",))
        (calls,) = run_checks("test_f32norm", only=("calls",))
    finally:
        registry.unregister("test_f32norm")
    assert calls.ok, calls.detail  # a sound codec at ordinary scales
    assert not row.ok and "max |x| = 1e+20 decoded to" in row.detail and "overflowed float32" in row.detail


# ---------------------------------------------------------------- extreme but representable inputs


@pytest.mark.parametrize("scale", [1e20, 1e-40], ids=["1e20", "subnormal-1e-40"])
@pytest.mark.parametrize("name", NAMES)
def test_finite_input_far_from_float32s_limits_decodes_finite(name: str, scale: float) -> None:
    """|g| ~ 1e20 squares beyond float32 (a norm summed in float32 overflows at 1e19) and 1e-40 is subnormal: every
    compressor's intermediates must survive both, whatever its format loses (a cast to fp16 saturates at 65504, so it
    is held to it below that)."""
    comp = registry.create(name)
    wire = getattr(comp, "wire_dtype", None)
    if wire is not None and wire.is_floating_point and torch.finfo(wire).max < scale:
        scale = torch.finfo(wire).max / 2
    g = seeded_input((64, 3, 3, 3), torch.float32, seed=4)
    x = on_test_device(g * (scale / float(g.abs().max())))  # max |x| = scale
    _, out = check_call(comp, x)
    assert torch.isfinite(out).all()
