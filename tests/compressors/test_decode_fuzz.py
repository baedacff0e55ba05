"""Decoding is a trust boundary: every registered decoder raises ``PayloadError`` alone on hostile bytes.

The DDP hook decodes what its peers send, so whatever bytes arrive, ``Payload.from_bytes`` then
``decompress`` (the registry-wide function and the compressor's own method) either returns a tensor
of the declared shape or raises :class:`~gcbench.core.errors.PayloadError` — never another exception,
never a tensor larger than the bytes could declare (:func:`gcbench.core.payload.decode_budget` of the
message's size without an expected shape, the expected shape with one), never seconds of work.  The compressor list comes from the
registry, so a new compressor is fuzzed with no edit here; its seeds are real payloads of small
tensors for every choice of each string parameter and both values of each flag.

The fuzzed errors must come from the codecs' own checks: a ``PayloadError`` chained to another
exception is the safety net of :meth:`gcbench.core.compressor.Compressor.decompress` catching a check
that a codec is missing, and fails the test.
"""

from __future__ import annotations

import functools
import math
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
from gcbench.core.payload import (
    _DTYPES,
    DECODE_FLOOR_BYTES,
    MAX_NUMEL,
    Payload,
    decode_budget,
    decode_header,
    decode_nbytes,
    encode_header,
)
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
            assert decode_nbytes(out.numel(), out.dtype) <= decode_budget(len(buf))


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
    with pytest.raises(PayloadError, match="for its size"):
        decompress(Payload.from_bytes(buf))
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


# ---------------------------------------------------------------- hostile bytes must never allocate

#: the audit's bound: no message under this many bytes may make a decoder allocate more than MAX_ALLOC without an expected shape
SMALL_MESSAGE = 64 << 10
MAX_ALLOC = 64 << 20
#: element counts crafted headers declare: 2^31 (MAX_NUMEL, the audit's top-k), 2^26 (256 MiB float32), 3M (past the floor)
HUGE_NUMELS = (2**31, 2**26, 3_000_000)
CRAFT_DTYPES = (torch.float32, torch.float64)  # the audit's float64 header doubled what a small message made its receiver touch


def _crafted(name: str, seeds: int = 6, at_budget: bool = False) -> list[bytes]:
    """Messages under 64 KiB of ``name`` whose headers declare huge tensors (float32 and float64), each with a body of the
    length its header implies (the codec's :meth:`_expected_body_nbytes`) where that fits in 64 KiB, so they pass every
    size check of the body and reach the decode's allocations unless the size bound stops them; the seed's own body
    elsewhere (a cast's body holds every element: no small message declares a huge tensor honestly).

    ``at_budget``: instead, honest messages (the implied body length, under 64 KiB) declaring the most elements any
    message may decode without an expected shape (:data:`DECODE_FLOOR_BYTES`): they decode.
    """
    comp = registry.create(name)
    out: list[bytes] = []
    kept = [b for b in _seeds(name) if math.prod(decode_header(b)[3]) > 0][:seeds]
    for buf in kept:
        codec, version, _, shape, meta, pos = decode_header(buf)
        rest = math.prod(shape[1:])
        for dtype in CRAFT_DTYPES:
            for numel in (DECODE_FLOOR_BYTES // decode_nbytes(1, dtype),) if at_budget else HUGE_NUMELS:
                huge = (numel // rest, *shape[1:])
                probe = Payload(codec, version, dtype, huge, torch.zeros(0, dtype=torch.uint8), meta)
                body = buf[pos:]
                try:
                    size = comp._expected_body_nbytes(probe)
                except PayloadError:
                    size = None
                if size is not None:
                    lo = size if isinstance(size, int) else size[0]
                    if lo < SMALL_MESSAGE:  # else no small message holds it: the seed's body stands in (the wrong length)
                        body = (body + bytes(max(lo - len(body), 0)))[:lo]  # the seed's bytes, zero-padded to the implied length
                    elif at_budget:
                        continue
                elif at_budget:
                    continue
                msg = encode_header(codec, version, dtype, huge, meta) + body
                if len(msg) < SMALL_MESSAGE:
                    out.append(msg)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_huge_declarations_are_refused_before_anything_is_allocated(name: str) -> None:
    """Audit: 32 KiB of top-k declaring 2^31 elements reached the buffer allocator (ENOMEM); 4 KiB declaring float64
    touched 2 GiB.  Without an expected shape, a message that declares more decoded bytes than its size justifies is
    refused by the size check that runs first (its own message, no safety net), whatever the dtype."""
    comp = registry.create(name)
    crafted = _crafted(name)
    assert crafted, f"{name}: no crafted message under {SMALL_MESSAGE} bytes"
    for buf in crafted:
        p = Payload.from_bytes(buf)
        assert decode_nbytes(p.numel, p.dtype) > decode_budget(len(buf)), "every crafted message asks more than its size allows"
        for how in (decompress, comp.decompress, comp.decode_received):
            with pytest.raises(PayloadError, match="for its size") as info:
                how(p)
            assert info.value.__cause__ is None
        with pytest.raises(PayloadError, match="expects"):  # a receiver that knows its shape refuses any other at once
            comp.decompress(p, expected_shape=(1000,))
        if p.dtype != torch.float32:  # the output dtype is the receiver's: a float32 receiver refuses a float64 header
            with pytest.raises(PayloadError, match=r"receiver expects torch\.float32"):
                comp.decompress(p, expected_shape=p.shape, dtype=torch.float32)


def test_the_decode_budget_meets_the_audit_bound() -> None:
    """No message under 64 KiB may demand more than 64 MiB; the floor leaves room for a codec's temporaries."""
    assert decode_budget(SMALL_MESSAGE - 1) * 2 <= MAX_ALLOC
    assert decode_nbytes(1, torch.float64) == 12 and decode_nbytes(1, torch.float32) == 8


def test_receivers_dtype_is_checked_before_the_shape_is_decoded() -> None:
    comp = registry.create("topk")
    p = comp.compress(normal((50,)).double(), comp.init_state(0))
    assert comp.decompress(p, (50,), torch.float64).dtype == torch.float64
    with pytest.raises(PayloadError, match=r"receiver expects torch\.float32"):
        decompress(Payload.from_bytes(p.to_bytes()), (50,), torch.float32)


_RLIMIT_SCRIPT = r"""
import json, resource, sys
import torch
from gcbench.compressors import registry
from gcbench.core.errors import PayloadError
from gcbench.core.payload import Payload
from tests.compressors.test_decode_fuzz import NAMES, _crafted, _vm_bytes
cases = {name: _crafted(name, seeds=3) for name in NAMES}
fits = {name: _crafted(name, seeds=3, at_budget=True) for name in NAMES}
for name in NAMES:  # warm every decoder (numba compiles, pools, threads) before the limit is set
    comp = registry.create(name)
    for buf in cases[name][:1] + fits[name]:
        try:
            comp.decompress(Payload.from_bytes(buf))
        except PayloadError:
            pass
limit = _vm_bytes() + int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
out = {}
def attempt(label, fn):
    try:
        fn()
        out[label] = "decoded"
    except PayloadError as exc:
        out[label] = "refused" if exc.__cause__ is None else "caught:" + type(exc.__cause__).__name__
    except BaseException as exc:
        out[label] = "escaped:" + type(exc).__name__ + ": " + str(exc)[:200]
for name, bufs in cases.items():
    comp = registry.create(name)
    for i, buf in enumerate(bufs):
        attempt(f"{name}#{i}", lambda: comp.decompress(Payload.from_bytes(buf)))
    for i, buf in enumerate(fits[name]):  # the most a small message may decode: it fits
        attempt(f"{name}~{i}", lambda: comp.decompress(Payload.from_bytes(buf)))
# a receiver that really waits for 2^31 elements: the allocation fails under the limit and is a PayloadError
from tests.compressors.test_decode_fuzz import _big_expected
for label, (buf, shape) in _big_expected().items():
    attempt(label, lambda: registry.create(label.split("@")[0]).decompress(Payload.from_bytes(buf), shape))
print(json.dumps(out))
"""


def _vm_bytes() -> int:
    """This process's address space now (VmSize), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _big_expected() -> dict[str, tuple[bytes, tuple[int, ...]]]:
    """Messages for a receiver that waits for 2^31 elements (8 GiB of float32): a threshold payload that sent nothing
    and the audit's top-k, 32,802 bytes."""
    th = registry.create("threshold")
    empty = Payload("threshold", th.info.version, torch.float32, (2**31,), torch.zeros(0, dtype=torch.uint8),
                    {"k": 0, "coding": "fixed"})
    k = 4160  # the audit's 32,802-byte top-k message: k float32 values and k 31-bit indices
    tk = registry.create("topk")
    probe = Payload("topk", tk.info.version, torch.float32, (2**31,), torch.zeros(0, dtype=torch.uint8), {"k": k, "coding": "fixed"})
    size = tk._expected_body_nbytes(probe)
    lo = size if isinstance(size, int) else size[0]
    idx = np.arange(k, dtype=np.int64) * (2**31 // k)
    from gcbench.core.codec import encode_indices

    body = np.concatenate([np.ones(k, "<f4").view(np.uint8), encode_indices(idx, 2**31, "fixed")])
    assert len(body) == lo
    top = Payload("topk", tk.info.version, torch.float32, (2**31,), torch.from_numpy(body), {"k": k, "coding": "fixed"}).to_bytes()
    return {"threshold@2^31": (empty.to_bytes(), (2**31,)), "topk@2^31": (top, (2**31,))}


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc for the address-space measure")
def test_hostile_bytes_never_allocate_under_an_address_space_limit() -> None:
    """Audit: under ``ulimit -v`` the 32 KiB top-k message raised ``OSError: ENOMEM`` from the buffer allocator.

    Every crafted message of every codec is decoded in a subprocess whose address space is limited to what it uses once
    warm plus 64 MiB (the audit's bound): each is refused by the size check (no allocation failure behind it), an honest
    message at the bound decodes within it, and a receiver that expects 2^31 elements gets a :class:`PayloadError`
    (chained to the allocation failure), never an ``OSError`` or ``MemoryError``.
    """
    import json
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = subprocess.run([sys.executable, "-c", _RLIMIT_SCRIPT, str(MAX_ALLOC)], cwd=root, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": root})
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    big = {k: out.pop(k) for k in list(out) if "@" in k}
    fits = {k: out.pop(k) for k in list(out) if "~" in k}
    assert {n.split("#")[0] for n in out} == set(NAMES)
    assert {k: v for k, v in out.items() if v != "refused"} == {}
    # an honest message at the size bound decodes within the limit (or is refused by its codec's own checks)
    assert fits and {k: v for k, v in fits.items() if v not in ("decoded", "refused")} == {}
    assert any(v == "decoded" for v in fits.values())
    for label, outcome in big.items():
        assert outcome.startswith("caught:"), (label, outcome)


def test_an_allocation_failure_while_decoding_is_a_payload_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Audit: the buffer allocator's ``OSError: ENOMEM`` escaped the decode.  It raises MemoryError now, and a decode
    whose allocation fails (here a receiver that expects 4M elements, with memory short) raises PayloadError."""
    import errno
    import mmap

    from gcbench.kernels import buffers

    def no_memory(*args: object, **kwargs: object) -> mmap.mmap:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(buffers.mmap, "mmap", no_memory)
    monkeypatch.setattr(buffers, "POOL_BYTES", 0)  # no pooled mapping may serve it
    with pytest.raises(MemoryError):
        buffers.zeros(4_000_000)
    buf = _randomk_bytes((4_000_000,), k=10)
    with pytest.raises(PayloadError, match="could not be decoded") as info:
        registry.create("randomk").decompress(Payload.from_bytes(buf), expected_shape=(4_000_000,))
    assert isinstance(info.value.__cause__, MemoryError)
