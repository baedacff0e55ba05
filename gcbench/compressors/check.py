"""The compressor contract as runnable checks: what ``gcbench check SPEC`` and ``tests/compressors/test_contract.py`` run.

An author of a compressor, built in or from another package, verifies it against the contract of
:mod:`gcbench.core.compressor` before benchmarking it.  Each check runs the compressor on fixed,
seeded inputs and raises :class:`ContractError` naming what broke:

* ``calls`` — on float32, float16 and bfloat16 tensors of several shapes: ``compress`` never
  modifies its input; the payload's header is right; ``nbytes == len(to_bytes())``; a
  default-constructed instance decodes the payload by its codec name alone, to what
  ``compress_and_decode`` returned; ``from_bytes`` restores the same bytes and output; the decoded
  tensor aliases neither the payload nor the input; the same seed gives the same bytes.
* ``empty`` — empty tensors give an empty body and an empty output.
* ``zeros`` — all-zero tensors decode to zeros without NaN, over several steps.
* ``non-contiguous`` — a transposed input gives the bytes of its contiguous copy.
* ``resume`` — a cloned or ``state_dict``-restored state continues with the same bytes.
* ``bad bytes`` — a payload of a newer version, or with a truncated body, raises ``PayloadError``.
* ``exchange`` — the simulated N-worker exchange leaves the gradients alone, accounts for every
  worker, gives a finite aggregate of the right shape, the same one for the same seeds, and
  zeros for zeros.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gcbench.compressors import registry
from gcbench.core.compressor import Compressor, State
from gcbench.core.errors import PayloadError
from gcbench.core.payload import Payload

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SHAPES = ((1,), (7,), (1000,), (64, 3, 3, 3), (512, 512))
EMPTY_SHAPES = ((0,), (3, 0, 2))
ZERO_SHAPES = ((1000,), (64, 3, 3, 3))
EXCHANGE_SHAPES = ((7,), (64, 3, 3, 3), (0,), (3, 0))


class ContractError(AssertionError):
    """A compressor broke its contract; the message says which guarantee."""


def _require(ok: bool | torch.Tensor, what: str) -> None:
    if not ok:
        raise ContractError(what)


def bits_of(t: torch.Tensor) -> torch.Tensor:
    """The raw bit patterns of a float tensor (so -0.0 != 0.0 and NaN == NaN with the same payload)."""
    t = t.detach().contiguous()
    if not t.is_floating_point():
        return t
    return t.view({8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[t.element_size()])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when two tensors have the same shape, dtype and bit-identical contents (on whichever devices they sit)."""
    if a.device != b.device:  # a payload decoded on the CPU against the sender's tensor on the GPU
        a, b = a.cpu(), b.cpu()
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits_of(a), bits_of(b))


def seeded_input(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """A seeded N(0, 1) tensor (torch's CPU generator, independent of the global one)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def check_call(comp: Compressor, x: torch.Tensor, seed: int = 7) -> tuple[Payload, torch.Tensor]:
    """Every per-call guarantee of the contract for one input; returns (payload, decoded by codec name)."""
    before = x.clone()
    state = comp.init_state(seed)
    payload, decoded = comp.compress_and_decode(x, state)
    _require(same_bits(x, before), "compress modified its input")
    _require(state.step == 1, f"state.step is {state.step} after one compress (expected 1)")

    _require(payload.codec == comp.name and payload.version == comp.info.version,
             f"payload header says {payload.codec} v{payload.version}, the card {comp.name} v{comp.info.version}")
    _require(payload.shape == tuple(x.shape) and payload.dtype == x.dtype, "payload header shape/dtype differ from the input's")
    _require(payload.data.dtype == torch.uint8 and payload.data.dim() == 1, "the payload body is not a flat uint8 tensor")
    raw = payload.to_bytes()
    _require(payload.nbytes == len(raw), f"payload.nbytes is {payload.nbytes}, its encoding has {len(raw)} bytes")
    _require(payload.body_nbytes == payload.data.numel(), "payload.body_nbytes differs from the body's length")

    out = registry.decompress(payload)  # the receiver: a default-constructed instance, by codec name alone
    _require(out.shape == x.shape and out.dtype == x.dtype, "decompress gave another shape or dtype than the input's")
    _require(decoded is not None and decoded.shape == x.shape and decoded.dtype == x.dtype,
             "compress_and_decode's decoded tensor has another shape or dtype")
    assert decoded is not None  # the check above raised otherwise
    _require(decoded.device == x.device, f"compress_and_decode's decoded tensor is on {decoded.device}, the input on {x.device}")
    _require(torch.equal(decoded.cpu(), out.cpu()), "compress_and_decode's decoded differs from decompress(payload)")

    restored = Payload.from_bytes(raw)
    _require(restored.to_bytes() == raw, "from_bytes(to_bytes()) does not give the same bytes back")
    _require(restored.codec == payload.codec and restored.shape == payload.shape and restored.dtype == payload.dtype,
             "from_bytes changed the header")
    _require(same_bits(registry.decompress(restored), out), "the payload decodes differently after crossing the wire")

    out.fill_(123.0)  # decoded tensors are the caller's to modify
    decoded.fill_(-321.0)
    _require(payload.to_bytes() == raw, "modifying the decoded tensor changed the payload")
    _require(same_bits(x, before), "modifying the decoded tensor changed the input")

    mine = x.clone()  # callers reuse gradient buffers: the payload must not alias the input
    again = comp.compress(mine, comp.init_state(seed))
    _require(again.to_bytes() == raw, "same seed, fresh state, different bytes")
    mine.fill_(7.0)
    _require(again.to_bytes() == raw, "the payload body is a view of the input tensor")
    return payload, registry.decompress(payload)


Factory = Callable[[], Compressor]


def check_calls(make: Factory) -> None:
    for dtype in DTYPES:
        for shape in SHAPES:
            x = seeded_input(shape, dtype, seed=len(shape) * 1000 + shape[0])
            _, out = check_call(make(), x)
            _require(not torch.isnan(out).any(), f"NaN in the output for a finite {tuple(shape)} {dtype} input")


def check_empty(make: Factory) -> None:
    for dtype in DTYPES:
        for shape in EMPTY_SHAPES:
            payload, out = check_call(make(), torch.empty(shape, dtype=dtype))
            _require(payload.body_nbytes == 0, f"an empty {shape} tensor gave a {payload.body_nbytes}-byte body")
            _require(out.numel() == 0, "an empty tensor decoded to a non-empty one")


def check_zeros(make: Factory) -> None:
    for dtype in DTYPES:
        for shape in ZERO_SHAPES:
            comp = make()
            x = torch.zeros(shape, dtype=dtype)
            check_call(comp, x)
            state = comp.init_state(1)
            for _ in range(3):  # several steps, so a residual or momentum path runs too
                out = registry.decompress(Payload.from_bytes(comp.compress(x, state).to_bytes()))
                _require(not torch.isnan(out).any(), "an all-zero input decoded to NaN")
                _require(torch.count_nonzero(out) == 0, "an all-zero input decoded to a nonzero tensor")


def check_non_contiguous(make: Factory) -> None:
    comp = make()
    x = seeded_input((48, 20), seed=5).t()
    payload, out = check_call(comp, x)
    _require(payload.to_bytes() == comp.compress(x.contiguous(), comp.init_state(7)).to_bytes(),
             "a non-contiguous input gave other bytes than its contiguous copy")
    _require(out.shape == (20, 48), "a non-contiguous input decoded to another shape")


def check_resume(make: Factory) -> None:
    comp = make()
    xs = [seeded_input((40, 30), seed=s) for s in range(4)]
    state = comp.init_state(11)
    for x in xs[:2]:
        comp.compress(x, state)
    cloned = state.clone()
    restored = State.from_state_dict(state.state_dict())
    for x in xs[2:]:
        want = comp.compress(x, state).to_bytes()
        _require(comp.compress(x, cloned).to_bytes() == want, "a cloned state continues with other bytes")
        _require(comp.compress(x, restored).to_bytes() == want, "a state restored from state_dict continues with other bytes")


def _raises_payload_error(payload: Payload) -> bool:
    try:
        registry.decompress(Payload.from_bytes(payload.to_bytes()))
    except PayloadError:
        return True
    return False


def check_bad_bytes(make: Factory) -> None:
    p = make().compress(seeded_input((1000,), seed=2), State(0))
    newer = Payload(p.codec, p.version + 1, p.dtype, p.shape, p.data, p.meta)
    _require(_raises_payload_error(newer), "a payload of a newer version did not raise PayloadError")
    for cut in (p.body_nbytes - 1, p.body_nbytes // 2, 0):
        short = Payload(p.codec, p.version, p.dtype, p.shape, p.data[:cut].clone(), p.meta)
        _require(_raises_payload_error(short), f"a body truncated to {cut} of {p.body_nbytes} bytes did not raise PayloadError")


def check_exchange(make: Factory, shape: tuple[int, ...] | None = None) -> None:
    for sh in (EXCHANGE_SHAPES if shape is None else (shape,)):
        comp = make()
        workers = max(2, comp.info.min_workers)
        grads = [seeded_input(sh, seed=w) for w in range(workers)]
        before = [g.clone() for g in grads]
        res = comp.exchange(grads, [comp.init_state(w) for w in range(workers)])
        _require(all(same_bits(g, b) for g, b in zip(grads, before, strict=True)), "exchange modified a gradient")
        _require(res.aggregate.shape == grads[0].shape and res.aggregate.dtype == grads[0].dtype,
                 "the aggregate has another shape or dtype than the gradients")
        _require(bool(torch.isfinite(res.aggregate).all()), "the aggregate is not finite")
        _require({r.worker for r in res.traffic.records} == set(range(workers)), "the traffic does not account for every worker")
        _require(all(r.sent >= 0 and r.received >= 0 for r in res.traffic.records), "negative traffic")
        for p in res.payloads:
            _require(p.nbytes == len(p.to_bytes()), "an exchanged payload's nbytes differs from its encoding")
            _require(p.numel > 0 or p.body_nbytes == 0, "an empty tensor gave a non-empty body in the exchange")
        again = comp.exchange(grads, [comp.init_state(w) for w in range(workers)])
        _require(same_bits(again.aggregate, res.aggregate), "same seeds, different aggregate")
        _require(again.traffic.to_dict() == res.traffic.to_dict(), "same seeds, different traffic")
        zeros = comp.exchange([torch.zeros(sh) for _ in range(workers)], [comp.init_state(w) for w in range(workers)])
        _require(torch.count_nonzero(zeros.aggregate) == 0 and not torch.isnan(zeros.aggregate).any(),
                 "all-zero gradients gave a nonzero or NaN aggregate")


#: input scales a compressor must carry to a finite output: |x| = 1e20 (its square overflows float32, so a norm
#: summed in float32 goes inf) and 1e-40 (float32 subnormals)
EXTREME_SCALES = (1e20, 1e-40)


def check_extremes(make: Factory) -> None:
    for scale in EXTREME_SCALES:
        comp = make()
        wire = getattr(comp, "wire_dtype", None)
        if isinstance(wire, torch.dtype) and wire.is_floating_point and torch.finfo(wire).max < scale:
            scale = torch.finfo(wire).max / 2  # a cast to fp16 saturates beyond 65504: a fact of its format
        g = seeded_input((64, 3, 3, 3), seed=4)
        x = g * (scale / float(g.abs().max()))  # max |x| = scale
        # finiteness first: a NaN output would fail check_call's equality checks with a less telling message
        out = registry.decompress(comp.compress(x, comp.init_state(7)))
        _require(bool(torch.isfinite(out).all()),
                 f"a finite input with max |x| = {scale:.3g} decoded to {int((~torch.isfinite(out)).sum())} non-finite values "
                 "(an intermediate, e.g. a norm or scale, overflowed float32)")
        check_call(make(), x)


#: (name, what it checks, function): the order ``gcbench check`` runs and prints them in
CHECKS: tuple[tuple[str, str, Callable[[Factory], None]], ...] = (
    ("calls", "purity, header, exact size, decode by codec name, round trip, determinism (fp32/fp16/bf16)", check_calls),
    ("empty", "empty tensors: empty body, empty output", check_empty),
    ("zeros", "all-zero tensors decode to zeros without NaN, over steps", check_zeros),
    ("non-contiguous", "a transposed input gives its contiguous copy's bytes", check_non_contiguous),
    ("resume", "cloned and state_dict-restored states continue identically", check_resume),
    ("bad bytes", "newer versions and truncated bodies raise PayloadError", check_bad_bytes),
    ("exchange", "the simulated multi-worker exchange: pure, complete, deterministic", check_exchange),
    ("extremes", "finite input at |x| = 1e20 and 1e-40 (subnormal) decodes finite", check_extremes),
)


@dataclass(frozen=True)
class CheckResult:
    """One check of one compressor configuration: passed, or why not."""

    check: str
    what: str
    ok: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "what": self.what, "ok": self.ok, "detail": self.detail}


def run_checks(name: str, params: Mapping[str, Any] | None = None, only: Sequence[str] | None = None) -> list[CheckResult]:
    """Run every contract check (or ``only`` those) on ``name`` configured with ``params``.

    A broken guarantee is a failed row with its message; an exception the compressor raises is a
    failed row with the exception and where it was raised (never an abort of the other checks).
    """
    card = registry.get(name)
    card.resolve(params)  # bad parameters are the user's error, not a failed check
    make: Factory = lambda: registry.create(name, **dict(params or {}))  # noqa: E731
    out = []
    for check, what, fn in CHECKS:
        if only is not None and check not in only:
            continue
        try:
            with torch.random.fork_rng(devices=[]):
                np.random.seed(0)  # a compressor drawing from numpy's global stream still repeats
                fn(make)
        except ContractError as exc:
            out.append(CheckResult(check, what, False, str(exc)))
        except Exception as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            out.append(CheckResult(check, what, False, f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"))
        else:
            out.append(CheckResult(check, what, True))
    return out
