"""Decoding is a trust boundary: every registered decoder raises ``PayloadError`` alone on hostile bytes.

The DDP hook decodes what its peers send, so whatever bytes arrive, ``Payload.from_bytes`` then
``decompress`` (the registry-wide function and the compressor's own method) either returns a tensor
of the declared shape or raises :class:`~gcbench.core.errors.PayloadError` — never another exception,
never a tensor larger than the bytes could declare (:data:`gcbench.core.payload.MAX_ELEMENTS_PER_BYTE`
per byte without an expected shape), never seconds of work.  The compressor list comes from the
registry, so a new compressor is fuzzed with no edit here; its seeds are real payloads of small
tensors for every choice of each string parameter and both values of each flag.

The fuzzed errors must come from the codecs' own checks: a ``PayloadError`` chained to another
exception is the safety net of :meth:`gcbench.core.compressor.Compressor.decompress` catching a check
that a codec is missing, and fails the test.
"""

from __future__ import annotations

import functools
import os
import struct
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gcbench.compressors import registry
from gcbench.compressors.registry import decompress
from gcbench.core.compressor import Compressor
from gcbench.core.errors import PayloadError
from gcbench.core.payload import _DTYPES, MAX_ELEMENTS_PER_BYTE, MAX_NUMEL, Payload, decode_header, encode_header
from tests.conftest import normal

NAMES = registry.names()
# per compressor and strategy: the whole file stays well under a minute; GCBENCH_FUZZ_EXAMPLES=2000 for a deep run
FUZZ = settings(max_examples=int(os.environ.get("GCBENCH_FUZZ_EXAMPLES", "25")))
SLOW_S = 5.0  # one decode of a few hundred bytes takes milliseconds; the audit's took 10.7 s

# header values that have broken decoders: huge, negative, zero, wrong type, non-finite
HOSTILE_INTS = [0, 1, 2, 3, 7, 64, 255, 2**16, 2**31, 2**32 + 1, 2**40, 2**62, 2**63, 2**64 - 1, -1, -2, -(2**31), -(2**63)]
HOSTILE_VALUES = [*HOSTILE_INTS, 0.0, 1.5, -0.0, float("nan"), float("inf"), float("-inf"), 1e300, "", "x", "fixed", "int32",
                  "delta-varint", "elias", "paper", "dense", "topk", "latent", "none", "1bit", "2bit", "sign_scale", "column",
                  "row", "tensor", "2", "inf"]
HOSTILE_DIMS = [0, 1, 2, 3, 5, 7, 42, 300, 2**20, 2**28, 2**31, 2**31 + 1, 2**40, 2**63, 2**64 - 1]


def _variants(name: str) -> list[dict[str, object]]:
    """Default parameters, then each other choice of every string parameter and each flag flipped."""
    out: list[dict[str, object]] = [{}]
    for p in registry.get(name).params:
        if p.choices:
            out += [{p.name: c} for c in p.choices if c != p.default]
        elif p.kind is bool:
            out.append({p.name: not p.default})
    if name == "qsgd":
        out.append({"min_numel": 10_000})  # the unquantized float32 body of small tensors
    return out


@functools.cache
def _seeds(name: str) -> tuple[bytes, ...]:
    """Wire bytes of real payloads of ``name``: small tensors, every parameter variant, a few steps."""
    xs = [normal((6, 7), seed=1), normal((300,), seed=2), torch.zeros(10), normal((3, 2, 5), seed=3, dtype=torch.float16)]
    msgs: list[bytes] = []
    for params in _variants(name):
        comp = registry.create(name, **params)
        if comp.info.min_workers > 1:  # defined across workers only: the exchange's messages, step by step
            states = [comp.init_state(s) for s in (1, 2)]
            for step in range(3):
                res = comp.exchange([xs[1] * (step + 1), xs[1] + 0.5], states)
                msgs += [m.payload.to_bytes() for m in getattr(res, "messages", [])] + [p.to_bytes() for p in res.payloads]
            continue
        for x in xs:
            state = comp.init_state(5)
            for _ in range(2):
                msgs.append(comp.compress(x, state).to_bytes())
    return tuple(dict.fromkeys(msgs))


def _decodes(name: str, buf: bytes) -> None:
    """Decode ``buf`` every way a receiver can; assert only PayloadError from the codecs' own checks."""
    comp: Compressor = registry.create(name)
    for how in ("registry", "own"):
        t0 = time.perf_counter()
        try:
            p = Payload.from_bytes(buf)
            out = decompress(p) if how == "registry" else comp.decompress(p)
        except PayloadError as exc:
            assert exc.__cause__ is None, f"{name}: a decoder check is missing, the safety net caught {exc.__cause__!r}"
            out = None
        dt = time.perf_counter() - t0
        assert dt < SLOW_S, f"{name}: decoding {len(buf)} bytes took {dt:.1f} s"
        if out is not None:
            assert out.shape == p.shape and out.dtype == p.dtype
            assert out.numel() <= MAX_ELEMENTS_PER_BYTE * len(buf)


def _rewrite(buf: bytes, *, shape: tuple[int, ...] | None = None, dcode: int | None = None,
             meta: dict[str, object] | None = None, body: bytes | None = None) -> bytes | None:
    codec, version, dtype, old_shape, old_meta, pos = decode_header(buf)
    try:
        head = encode_header(codec, version, _DTYPES[dcode] if dcode is not None else dtype,
                             old_shape if shape is None else shape, old_meta if meta is None else meta)
    except ValueError:  # not encodable at all (a negative dimension)
        return None
    return head + (buf[pos:] if body is None else body)


# ---------------------------------------------------------------- valid payloads still round-trip


@pytest.mark.parametrize("name", NAMES)
def test_every_codec_declares_its_body_size(name: str) -> None:
    """A codec without ``_expected_body_nbytes`` would let the header size the decoder's allocations."""
    cls = registry.get(name).load()
    assert cls._expected_body_nbytes is not Compressor._expected_body_nbytes, f"{name} declares no body size"


@pytest.mark.parametrize("name", NAMES)
def test_valid_payloads_round_trip_and_fit_their_declared_size(name: str) -> None:
    comp = registry.create(name)
    decoded = 0
    for buf in _seeds(name):
        p = Payload.from_bytes(buf, expected_shape=decode_header(buf)[3])
        assert p.to_bytes() == buf
        if p.numel:
            size = comp._expected_body_nbytes(p)
            lo, hi = (size, size) if isinstance(size, int) else size
            assert lo <= p.body_nbytes <= hi
        try:
            out = decompress(p, expected_shape=p.shape)
        except PayloadError as exc:  # only LGC's protocol messages, which decode inside its exchange
            assert name == "lgc" and "decode only there" in str(exc)
            continue
        assert out.shape == p.shape and out.dtype == p.dtype
        assert torch.equal(out, comp.decompress(Payload.from_bytes(buf)))
        decoded += 1
    assert decoded > 0


# ---------------------------------------------------------------- fuzzing


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.data())
def test_mutated_payloads_raise_only_payload_error(name: str, data: st.DataObject) -> None:
    """Bytes of a real payload replaced, truncated or extended."""
    seeds = _seeds(name)
    buf = bytearray(data.draw(st.sampled_from(seeds), label="seed"))
    for pos, val in data.draw(st.lists(st.tuples(st.integers(0, len(buf) - 1), st.integers(0, 255)), max_size=4), label="bytes"):
        buf[pos] = val
    cut = data.draw(st.integers(0, len(buf)), label="cut")
    tail = data.draw(st.binary(max_size=24), label="tail")
    _decodes(name, bytes(buf[:cut]) + tail if data.draw(st.booleans(), label="truncate") else bytes(buf) + tail)


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.data())
def test_rewritten_headers_raise_only_payload_error(name: str, data: st.DataObject) -> None:
    """Header fields rewritten to hostile values: huge or empty shapes, other dtypes, wrong meta types and ranges."""
    buf = data.draw(st.sampled_from(_seeds(name)), label="seed")
    shape, meta = decode_header(buf)[3:5]
    meta = dict(meta)
    what = data.draw(st.sampled_from(["shape", "dtype", "meta", "drop", "add", "body"]), label="field")
    if what == "shape":
        shape = tuple(data.draw(st.lists(st.sampled_from(HOSTILE_DIMS), min_size=0, max_size=4), label="shape"))
        new = _rewrite(buf, shape=shape)
    elif what == "dtype":
        new = _rewrite(buf, dcode=data.draw(st.integers(0, len(_DTYPES) - 1), label="dtype"))
    elif what in ("meta", "drop") and meta:
        key = data.draw(st.sampled_from(sorted(meta)), label="key")
        if what == "meta":
            meta[key] = data.draw(st.sampled_from(HOSTILE_VALUES), label="value")
        else:
            del meta[key]
        new = _rewrite(buf, meta=meta)
    elif what == "add":
        key = data.draw(st.sampled_from(["k", "s", "B", "enc", "nnz", "raw", "zero", "coding", "q", "L", "r", "g", "kind", "m", "x"]))
        meta[key] = data.draw(st.sampled_from(HOSTILE_VALUES), label="value")
        new = _rewrite(buf, meta=meta)
    else:
        new = _rewrite(buf, body=data.draw(st.binary(max_size=64), label="body"))
    if new is not None:
        _decodes(name, new)


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.data())
def test_random_bytes_raise_only_payload_error(name: str, data: st.DataObject) -> None:
    """Random bytes, alone or behind a real header of this codec (so they reach its decoder)."""
    body = data.draw(st.binary(max_size=160), label="bytes")
    if data.draw(st.booleans(), label="behind a header"):
        buf = data.draw(st.sampled_from(_seeds(name)), label="seed")
        body = buf[: decode_header(buf)[5]] + body
    _decodes(name, body)


# ---------------------------------------------------------------- the audit's reproductions


def _randomk_bytes(shape: tuple[int, ...], k: int) -> bytes:
    """A well-formed random-k message: k float32 values and the 64-bit index seed, for a tensor of ``shape``."""
    body = np.concatenate([np.ones(k, "<f4").view(np.uint8), np.array([12345], "<u8").view(np.uint8)])
    version = registry.get("randomk").version
    return Payload("randomk", version, torch.float32, shape, torch.from_numpy(body), {"k": k}).to_bytes()


def test_audit_41_byte_randomk_payload_claiming_2_pow_40_rows_fails_at_once() -> None:
    """Audit: 41 bytes claiming shape (2^40, 5, 7) took 10.7 s to fail (it expanded the index seed over 3.8e13 positions)."""
    buf = _randomk_bytes((2**40, 5, 7), k=2)
    assert len(buf) == 41
    t0 = time.perf_counter()
    with pytest.raises(PayloadError, match="without an expected shape"):
        decompress(Payload.from_bytes(buf))
    with pytest.raises(PayloadError, match="expects"):
        Payload.from_bytes(buf, expected_shape=(20, 5, 7))
    # a payload object built in memory (never through bytes) meets the same cap in decompress
    p = Payload("randomk", registry.get("randomk").version, torch.float32, (2**40, 5, 7), torch.zeros(16, dtype=torch.uint8), {"k": 2})
    with pytest.raises(PayloadError, match=str(MAX_NUMEL)):
        registry.create("randomk").decompress(p)
    assert time.perf_counter() - t0 < 1.0


def test_audit_70_byte_payload_cannot_decode_to_a_gibibyte() -> None:
    """Audit: a 70-byte random-k message decoded to a 1 GiB tensor (2^28 float32)."""
    buf = _randomk_bytes((2**28,), k=10)
    assert len(buf) == 70
    with pytest.raises(PayloadError, match="per byte"):
        Payload.from_bytes(buf)
    with pytest.raises(PayloadError, match="expects"):
        Payload.from_bytes(buf, expected_shape=(1000,))
    # a receiver that really waits for 2^28 elements may accept it (nothing is decoded here)
    assert Payload.from_bytes(buf, expected_shape=(2**28,)).shape == (2**28,)
    # the same message for the tensor the receiver expects decodes normally
    small = registry.create("randomk").decompress(Payload.from_bytes(_randomk_bytes((1000,), k=10)), expected_shape=(1000,))
    assert small.shape == (1000,) and int(torch.count_nonzero(small)) == 10


@pytest.mark.parametrize("name", NAMES)
def test_decompress_refuses_a_shape_the_receiver_does_not_expect(name: str) -> None:
    buf = next(b for b in _seeds(name) if decode_header(b)[3] == (300,))
    with pytest.raises(PayloadError, match="expects"):
        decompress(Payload.from_bytes(buf), expected_shape=(299,))
    with pytest.raises(PayloadError, match="expects"):
        registry.create(name).decompress(Payload.from_bytes(buf), expected_shape=(300, 1))


def test_unknown_codec_and_integer_dtype_are_payload_errors() -> None:
    raw = registry.create("topk").compress(normal((50,)), registry.create("topk").init_state(0)).to_bytes()
    renamed = _rewrite(raw.replace(b"\x04topk", b"\x04tepk", 1))
    assert renamed is not None
    with pytest.raises(PayloadError, match="unknown codec"):
        decompress(Payload.from_bytes(renamed))
    as_int = _rewrite(raw, dcode=_DTYPES.index(torch.int32))
    assert as_int is not None
    with pytest.raises(PayloadError, match="floating point"):
        decompress(Payload.from_bytes(as_int))


@pytest.mark.parametrize(
    ("meta", "match"),
    [({"k": 5.0}, "must be an integer"), ({"k": "5"}, "must be an integer"), ({"k": -1}, "outside"), ({"k": 2**62}, "outside"),
     ({"coding": 3}, "must be a string"), ({"coding": "bogus"}, "not one of"), ({"extra": 1}, "unexpected header field")],
    ids=["float", "string", "negative", "huge", "int-coding", "bad-coding", "extra-field"],
)
def test_meta_fields_are_typed_and_range_checked(meta: dict[str, object], match: str) -> None:
    p = registry.create("topk").compress(normal((50,)), registry.create("topk").init_state(0))
    bad = Payload(p.codec, p.version, p.dtype, p.shape, p.data, {**p.meta, **meta})
    with pytest.raises(PayloadError, match=match):
        decompress(Payload.from_bytes(bad.to_bytes()))


def test_nan_and_inf_meta_values_are_payload_errors() -> None:
    p = registry.create("qsgd").compress(normal((50,)), registry.create("qsgd").init_state(0))
    for v in (float("nan"), float("inf")):
        bad = Payload(p.codec, p.version, p.dtype, p.shape, p.data, {**p.meta, "s": v})
        raw = bad.to_bytes()
        assert struct.pack("<d", v) in raw
        with pytest.raises(PayloadError, match="integer"):
            decompress(Payload.from_bytes(raw))
