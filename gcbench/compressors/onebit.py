"""1-bit SGD with error feedback — Seide et al. 2014 (as implemented in CNTK).

``a = x + e``; view ``a`` as ``M = a.reshape(shape[0], -1)`` (vectors are one column).  For each
column, entries ≥ 0 send bit 1 and decode to the mean of the column's non-negative entries;
the others send 0 and decode to the mean of its negative entries.  The residual ``e = a − decoded``
stays on the worker (mandatory error feedback).  Bits: d + 64·(number of columns).

``granularity`` chooses what shares one pair of means: ``column`` (the paper), ``row``, or
``tensor`` — the one-pair-per-tensor variant some frameworks ship as "1-bit SGD".

The two-leg multi-worker aggregation of the paper is :meth:`OneBitSGD.worker_protocol`.  Each worker
quantizes its whole tensor with its own state — the same error-feedback step as a plain
``compress`` — and only its *message* is cut into stripes of whole columns (:func:`split_stripes`;
1-bit SGD quantizes per column, so a stripe's payload is the column encoding of those columns of
a = x + e: the same sign bits, and the same means up to the float64 summation order of a separate
encoding).  Cutting the whole message, rather than encoding each stripe again, makes what the
owners decode exactly what the worker's residual was computed from.  Stripe owners average the
decoded stripes and re-quantize the average with a second, owner-side residual
(``state.tensors["owner_residual"]`` of the owner worker) before the all-gather: two
quantizations, two residuals, both legs counted from the real stripe payloads.

Version 2: version 1's exchange kept each worker's residual in per-stripe sub-states
(``state.values["worker_stripes"]``), so the worker's own state — which the runner copies to
measure fidelity and error-feedback drift — never saw the residual the exchange accumulated and
the reported EF drift of multi-worker runs was wrong.  The worker residual is now the state's
``residual``; exchange results (drift, per-step fidelity) change; single-tensor compression and
the body layout do not (payload headers carry the new version).

Fast path (CPU, :func:`gcbench.kernels.onebit_form` and :func:`~gcbench.kernels.onebit_apply`):
error feedback in two passes over the residual buffer, updated in place — pass 1
(:meth:`OneBitSGD._form_corrected`) forms a = x + e and the per-group float64 sums, pass 2
(``_encode``) writes the sign bits and e = a − decoded — instead of separate x + e, encode,
decode and subtraction passes.  The
straightforward definition (:func:`onebit_reference`, a loop over the columns) is the class's
``reference``; the vectorised torch ``_encode`` serves other devices.

Torch path (a CUDA tensor, ``GCBENCH_KERNELS=torch``): the sign bits are packed and unpacked with
:mod:`gcbench.core.codec_torch`, the means written and read as float32 bytes, and the stripes of the
two-leg exchange cut, all on the input's device: no host copy and no scalar read.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import cast

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors.cards.onebit import GRANULARITIES, ONEBIT_CARD
from gcbench.core import codec, codec_torch
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, ErrorFeedback, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_numpy, body_tensor, meta_keys, meta_str
from gcbench.core.payload import Payload
from gcbench.core.protocol import AllGather, AllToAll, Context, Outcome, WorkerProtocol


def _matrix(a: torch.Tensor, shape: tuple[int, ...], granularity: str) -> torch.Tensor:
    """The 2-D view whose *columns* each get one pair of means."""
    flat = a.reshape(-1)
    if granularity == "tensor":
        return flat.reshape(-1, 1)
    if len(shape) <= 1:  # vectors and scalars are one column
        return flat.reshape(-1, 1)
    m = flat.reshape(shape[0], -1)
    return m if granularity == "column" else m.t()


def _from_matrix(m: torch.Tensor, granularity: str, shape: tuple[int, ...]) -> torch.Tensor:
    if granularity == "row" and len(shape) > 1:
        m = m.t()
    return m.reshape(-1)


def quantize_columns(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(pos mask, mu0 per column, mu1 per column) for a 2-D float32 matrix."""
    pos = m >= 0
    posf = pos.to(m.dtype)
    cnt_pos = posf.sum(0)
    cnt_neg = m.shape[0] - cnt_pos
    sum_all = m.sum(0, dtype=torch.float64)
    sum_pos = (m * posf).sum(0, dtype=torch.float64)
    mu1 = torch.where(cnt_pos > 0, sum_pos / cnt_pos.clamp(min=1), 0.0).float()
    mu0 = torch.where(cnt_neg > 0, (sum_all - sum_pos) / cnt_neg.clamp(min=1), 0.0).float()
    return pos, mu0, mu1


def onebit_reference(a: torch.Tensor) -> torch.Tensor:
    """Column-by-column loop of the definition (tests' oracle) on a 2-D matrix."""
    out = torch.empty_like(a)
    for j in range(a.shape[1]):
        col = a[:, j]
        pos = col >= 0
        mu1 = col[pos].mean() if pos.any() else torch.tensor(0.0)
        mu0 = col[~pos].mean() if (~pos).any() else torch.tensor(0.0)
        out[:, j] = torch.where(pos, mu1, mu0)
    return out


def onebit_step_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """One error-feedback step with the column loop of :func:`onebit_reference` (bench/tests)."""
    g = comp.params["granularity"]
    shape = tuple(x32.shape)
    a = ErrorFeedback.corrected(x32, state)
    decoded = _from_matrix(onebit_reference(_matrix(a, shape, g)), g, shape)
    state.tensors[ErrorFeedback.KEY] = (a.reshape(-1) - decoded).reshape(x32.shape)
    state.step += 1
    return decoded


def _ngroups(shape: tuple[int, ...], granularity: str) -> int:
    """Columns of the view :func:`_matrix` makes: the number of (mu0, mu1) pairs sent."""
    d = int(np.prod(shape)) if shape else 1
    if granularity == "tensor" or len(shape) <= 1:
        return 1
    return shape[0] if granularity == "row" else d // shape[0]


def _layout(shape: tuple[int, ...], granularity: str) -> tuple[int, bool]:
    """(columns of the row-major flat tensor, whether groups are its rows) for the kernels."""
    d = int(np.prod(shape)) if shape else 1
    if granularity == "tensor" or len(shape) <= 1:
        return d, True  # one group: one row
    cols = d // shape[0]
    return cols, granularity == "row"


class OneBitSGD(Compressor):
    """1-bit SGD with error feedback (Seide et al. 2014, as implemented in CNTK): one bit per entry, decoded
    to the mean of its column's non-negative or negative entries."""

    info = ONEBIT_CARD
    reference = onebit_step_reference

    def _form_corrected(self, x32: torch.Tensor, e: torch.Tensor, has_e: bool,
                        state: State) -> tuple[np.ndarray, np.ndarray] | None:
        """On CPU, a = x + e and each group's (mu0, mu1) in one pass (the kernels' pass 1)."""
        if not kernels.fused_ef_ok(x32):
            return super()._form_corrected(x32, e, has_e, state)
        cols, by_row = _layout(tuple(x32.shape), self.params["granularity"])
        return kernels.onebit_form(kernels.flat_f32(x32), e.reshape(-1).numpy(), has_e, cols, by_row)

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        g = self.params["granularity"]
        shape = tuple(a.shape)
        if ctx.fused is not None:  # pass 2 on the means _form_corrected found: the bits, then e = a − decoded
            mu0, mu1 = ctx.fused
            nb = (a.numel() + 7) // 8
            body = np.empty(nb + 8 * _ngroups(shape, g), np.uint8)
            kernels.onebit_apply(a.reshape(-1).numpy(), *_layout(shape, g), mu0, mu1, body[:nb])
            body[nb:] = np.stack([mu0, mu1], 1).reshape(-1).astype("<f4").view(np.uint8)
            return body, {"g": g}, None
        m = _matrix(a, shape, g)
        pos, mu0, mu1 = quantize_columns(m)
        bits = codec_torch.pack_bits(_from_matrix(pos, g, shape), 1)
        means = torch.stack([mu0, mu1], 1).reshape(-1)
        wire = torch.cat([bits, means.view(torch.uint8)])  # on a's device: nothing read to the host
        decoded = _from_matrix(torch.where(pos, mu1, mu0), g, shape)
        ctx.keep_residual(a, decoded)
        return wire, {"g": g}, decoded

    def _expected_body_nbytes(self, payload: Payload) -> int:
        meta_keys(payload, "g")
        g = meta_str(payload, "g", GRANULARITIES)
        return (payload.numel + 7) // 8 + 8 * _ngroups(payload.shape, g)  # sign bits, (mu0, mu1) per group

    def _decode(self, payload: Payload) -> torch.Tensor:
        g, shape, d, ncols, nb = _checked_body(payload)
        if not _host_path(payload):
            body_t = body_tensor(payload)
            mt = body_t[nb:].clone().view(torch.float32).reshape(ncols, 2)
            pos = _matrix(codec_torch.unpack_bits(body_t[:nb], 1, d).bool(), shape, g)
            return _from_matrix(torch.where(pos, mt[:, 1], mt[:, 0]), g, shape)
        body = body_numpy(payload)
        means = body[nb:].view("<f4").astype(np.float32).reshape(ncols, 2)
        cols, by_row = _layout(shape, g)
        out = kernels.empty(d)
        mu0, mu1 = np.ascontiguousarray(means[:, 0]), np.ascontiguousarray(means[:, 1])
        kernels.onebit_decode(body[:nb], cols, by_row, mu0, mu1, out.numpy())
        return out

    def worker_protocol(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> WorkerProtocol:
        """The paper's two-leg aggregation, one worker's side (reduce-scatter of 1-bit stripes, then 1-bit all-gather).

        Leg 1 (phase ``reduce-scatter``, an all-to-all): the worker quantizes each whole tensor with its
        own state — exactly ``compress_and_decode(x, state)``, so the state's residual is the one a
        plain compression leaves and the runner's fidelity and EF-drift measurements (taken on copies
        of that state) see the residual the exchange really carries.  Its message is cut into N
        stripes of whole columns of the view (the unit that shares a pair of means, so a stripe
        payload is the column-granularity encoding of those columns of a = x + e) and stripe j goes
        to its owner j.  Leg 2 (phase ``allgather``, one copy per peer): owner j averages the decoded
        stripes, re-quantizes the average with a second, owner-side residual
        (``state.tensors["owner_residual"]``) and sends it to every other worker.  One worker, or an
        empty unit (nothing to stripe), takes the default protocol.
        """
        n, me = ctx.world, ctx.rank
        if n == 1 or any(x.numel() == 0 for x in xs):
            return (yield from super().worker_protocol(xs, states, ctx))
        g = self.params["granularity"]
        shapes = [tuple(x.shape) for x in xs]
        bounds = [stripe_bounds(sh, g, n) for sh in shapes]
        stripes = [worker_stripes(self, x, st, b) for x, st, b in zip(xs, states, bounds, strict=True)]
        first = [stripes[u][me] for u in range(len(xs))]
        got = yield AllToAll([[stripes[u][j] for u in range(len(xs))] for j in range(n)], "reduce-scatter")
        mine = [stripe_shape(sh, g, b, me) for sh, b in zip(shapes, bounds, strict=True)]
        owned: list[Payload | None] = []
        own_dec: list[torch.Tensor | None] = []
        for u in range(len(xs)):  # my stripe of unit u from every worker, in worker order
            received = [COLUMN.decode_received(row[u], mine[u]) for row in got if row[u] is not None]
            p, dec = owner_stripe(received, n, states[u]) if received else (None, None)
            owned.append(p)
            own_dec.append(dec)
        gathered = yield AllGather(owned, "allgather", per_peer=True)

        def assemble() -> list[torch.Tensor]:
            out = []
            for u, sh in enumerate(shapes):
                # my own column: the stripe I own, decoded (its payload is in my row, so it is there)
                cols = [cast(torch.Tensor, own_dec[u]) if j == me else COLUMN.decode_received(row[u], stripe_shape(sh, g, bounds[u], j))
                        for j, row in enumerate(gathered) if row[u] is not None]
                out.append(assemble_stripes(cols, g, sh).reshape(sh).float())
            return out

        return Outcome(ctx.once("aggregate", assemble), [p for p in first])  # None: no stripe of that unit


COLUMN = OneBitSGD(granularity="column")  # stripes are columns of the view already: they decode as column payloads


def stripe_shape(shape: tuple[int, ...], granularity: str, bounds: Sequence[int], j: int) -> tuple[int, int]:
    """Shape of stripe j's payload (what :func:`split_stripes` and the owner send): (rows of the view, its columns)."""
    d = int(np.prod(shape)) if shape else 1
    groups = _ngroups(shape, granularity)
    return (d // groups if groups else 0, bounds[j + 1] - bounds[j])


def stripe_bounds(shape: tuple[int, ...], granularity: str, n: int) -> list[int]:
    """Column bounds of the n stripes of a tensor's view (stripe j is columns ``bounds[j]:bounds[j+1]``, owned by worker j)."""
    return [int(b) for b in np.linspace(0, _ngroups(shape, granularity), n + 1).astype(int)]


def worker_stripes(comp: OneBitSGD, x: torch.Tensor, state: State, bounds: Sequence[int]) -> list[Payload | None]:
    """Leg 1 of one worker: quantize x with its own state (error feedback) and cut the message into stripes."""
    whole, _ = comp.compress_and_decode(x, state, need_decoded=False)
    return split_stripes(whole, bounds)


def owner_stripe(received: Sequence[torch.Tensor], n: int, owner_state: State) -> tuple[Payload, torch.Tensor]:
    """Leg 2 of stripe owner: average the n decoded stripes and re-quantize with the owner-side residual."""
    total = received[0].clone()
    for r in received[1:]:
        total += r
    return _owner_quantize(COLUMN, total / n, owner_state)


def assemble_stripes(columns: Sequence[torch.Tensor], granularity: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The flat aggregate from the owners' decoded stripes, in stripe order."""
    return _from_matrix(torch.cat(list(columns), dim=1), granularity, shape)


def _host_path(payload: Payload) -> bool:
    """Whether a body is read by the numba kernels and NumPy (a CPU body, numba present) rather than with torch ops."""
    return kernels.available() and payload.data.device.type == "cpu"


def _checked_body(payload: Payload) -> tuple[str, tuple[int, ...], int, int, int]:
    """``(granularity, shape, d, groups, sign-bit bytes)`` of a onebit payload, its body length checked."""
    g = meta_str(payload, "g")
    if g not in GRANULARITIES:
        raise PayloadError(f"onebit payload has unknown granularity {g!r}")
    shape, d = payload.shape, payload.numel
    ncols = _ngroups(shape, g)
    n = payload.data.numel()
    nb = (d + 7) // 8
    if n != nb + 8 * ncols:
        raise PayloadError(f"onebit body has {n} bytes, expected {nb + 8 * ncols}")
    return g, shape, d, ncols, nb


OWNER_KEY = "owner_residual"  # the stripe owner's second residual, in the owner worker's state


def _owner_quantize(col: OneBitSGD, avg: torch.Tensor, state: State) -> tuple[Payload, torch.Tensor]:
    """Leg 2 on owner ``state``: quantize the averaged stripe with the owner-side residual.

    The residual is a plain tensor of ``state.tensors`` (saved by ``state_dict`` like the worker
    residual); a scratch :class:`State` runs the ordinary error-feedback path on it.
    """
    tmp = State(state.seed)
    prev = state.tensors.get(OWNER_KEY)
    if prev is not None:
        tmp.tensors[ErrorFeedback.KEY] = prev
    p, dec = col.compress_and_decode(avg, tmp)
    state.tensors[OWNER_KEY] = tmp.tensors[ErrorFeedback.KEY]
    assert dec is not None
    return p, dec


def split_stripes(payload: Payload, bounds: Sequence[int]) -> list[Payload | None]:
    """Cut a whole-tensor onebit payload into stripe payloads: columns ``bounds[j]:bounds[j+1]`` of the view.

    Stripe j is a float32 ``(rows, width)`` tensor of column granularity whose bits are the
    stripe's sign bits and whose means are its columns' pairs, so it decodes to exactly those
    columns of the whole decode (and matches the stateless column encoding of those columns of
    a = x + e: same bits, same means up to float64 summation order).  Empty stripes are ``None``.
    """
    g, shape, d, ncols, nb = _checked_body(payload)
    host = _host_path(payload)
    if host:
        body = body_numpy(payload)
        flat_bits = torch.from_numpy(np.unpackbits(body[:nb], count=d, bitorder="little").view(np.bool_))
        means = torch.from_numpy(body[nb:]).reshape(ncols, 8)
    else:  # the torch path: bits unpacked and stripes packed on the body's device
        body_t = body_tensor(payload)
        flat_bits = codec_torch.unpack_bits(body_t[:nb], 1, d).bool()
        means = body_t[nb:].reshape(ncols, 8)  # (mu0, mu1) little-endian float32 bytes per column
    bits = _matrix(flat_bits, shape, g)
    rows = bits.shape[0]
    version = OneBitSGD.info.version
    out: list[Payload | None] = []
    for lo, hi in pairwise(bounds):
        if hi <= lo:
            out.append(None)
            continue
        stripe = bits[:, lo:hi].contiguous()
        stripe_bits = torch.from_numpy(codec.pack_bits(stripe.numpy(), 1)) if host else codec_torch.pack_bits(stripe, 1)
        data = torch.cat([stripe_bits, means[lo:hi].reshape(-1)])
        out.append(Payload("onebit", version, torch.float32, (rows, hi - lo), data, {"g": "column"}))
    return out
