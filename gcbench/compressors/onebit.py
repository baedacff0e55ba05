"""1-bit SGD with error feedback — Seide et al. 2014 (as implemented in CNTK).

``a = x + e``; view ``a`` as ``M = a.reshape(shape[0], -1)`` (vectors are one column).  For each
column, entries ≥ 0 send bit 1 and decode to the mean of the column's non-negative entries;
the others send 0 and decode to the mean of its negative entries.  The residual ``e = a − decoded``
stays on the worker (mandatory error feedback).  Bits: d + 64·(number of columns).

``granularity`` chooses what shares one pair of means: ``column`` (the paper), ``row``, or
``tensor`` — the one-pair-per-tensor variant some frameworks ship as "1-bit SGD".

The two-leg multi-worker aggregation of the paper (stripe owners re-quantize the summed stripe
with an owner-side residual) is :meth:`OneBitSGD.exchange`.

Fast path (CPU, :func:`gcbench.kernels.onebit_step`): :meth:`OneBitSGD.compress_and_decode`
runs error feedback in two fused passes over the residual buffer, updated in place — pass 1
forms a = x + e and the per-group float64 sums, pass 2 writes the sign bits and
e = a − decoded — instead of the base class's x + e, encode, decode and subtraction.  The
straightforward definition (:func:`onebit_reference`, a loop over the columns) is the class's
``reference``; the vectorised torch ``_encode`` serves other devices.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gcbench import codec, kernels
from gcbench.compressor import Compressor, ErrorFeedback, ExchangeResult, State, Traffic, body_numpy, meta_str
from gcbench.compressors._common import to_numpy
from gcbench.errors import PayloadError
from gcbench.payload import Payload
from gcbench.registry import Param, register

_GRANULARITIES = ("column", "row", "tensor")


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


@register(
    name="onebit",
    version=1,
    description="1-bit SGD: sign bit per element + two float32 means per column, error feedback",
    paper="Seide et al. 2014, 1-Bit Stochastic Gradient Descent and its Application to Data-Parallel Distributed Training of Speech DNNs",
    biased=True,
    stateful=True,
    error_feedback="always",
    exchange="two-leg: stripe owners sum and re-quantize with their own residual",
    params=(
        Param(
            "granularity",
            str,
            "column",
            "which entries share a pair of means: column (paper), row, or tensor (one pair; the framework variant)",
            choices=_GRANULARITIES,
        ),
    ),
)
class OneBitSGD(Compressor):
    reference = onebit_step_reference

    def compress_and_decode(self, x: torch.Tensor, state: State, need_decoded: bool = True) -> tuple[Payload, torch.Tensor | None]:
        """The base contract, with a = x + e, the bits, the means and the new residual fused on CPU."""
        if not kernels.fused_ef_ok(x):
            return super().compress_and_decode(x, state, need_decoded)
        g = self.params["granularity"]
        shape = tuple(x.shape)
        d = x.numel()
        cols, by_row = _layout(shape, g)
        ncols = _ngroups(shape, g)
        nb = (d + 7) // 8
        body = np.empty(nb + 8 * ncols, np.uint8)
        e, has_e = kernels.residual_buffer(state.tensors, ErrorFeedback.KEY, x.shape)
        mu0, mu1 = kernels.onebit_step(kernels.flat_f32(x), e.reshape(-1).numpy(), has_e, cols, by_row, body[:nb])
        body[nb:] = np.stack([mu0, mu1], 1).reshape(-1).astype("<f4").view(np.uint8)
        payload = self._payload(x, body, {"g": g})
        state.step += 1
        return payload, (self.decompress(payload) if need_decoded else None)

    def _encode(self, a: torch.Tensor, state: State):
        g = self.params["granularity"]
        shape = tuple(a.shape)
        m = _matrix(a, shape, g)
        pos, mu0, mu1 = quantize_columns(m)
        bits = codec.pack_bits(to_numpy(_from_matrix(pos, g, shape)), 1)
        means = torch.stack([mu0, mu1], 1).reshape(-1)
        body = np.concatenate([bits, to_numpy(means).astype("<f4").view(np.uint8)])
        decoded = _from_matrix(torch.where(pos, mu1, mu0), g, shape)
        return body, {"g": g}, decoded

    def _decode(self, payload: Payload) -> torch.Tensor:
        g = meta_str(payload, "g")
        if g not in _GRANULARITIES:
            raise PayloadError(f"onebit payload has unknown granularity {g!r}")
        shape = payload.shape
        d = payload.numel
        ncols = _ngroups(shape, g)
        body = body_numpy(payload)
        nb = (d + 7) // 8
        if len(body) != nb + 8 * ncols:
            raise PayloadError(f"onebit body has {len(body)} bytes, expected {nb + 8 * ncols}")
        means = body[nb:].view("<f4").astype(np.float32).reshape(ncols, 2)
        if kernels.available():
            cols, by_row = _layout(shape, g)
            out = kernels.empty(d)
            mu0, mu1 = np.ascontiguousarray(means[:, 0]), np.ascontiguousarray(means[:, 1])
            kernels.onebit_decode(body[:nb], cols, by_row, mu0, mu1, out.numpy())
            return out
        bits = np.unpackbits(body[:nb], count=d, bitorder="little").astype(bool)
        mt = torch.from_numpy(means)
        pos = _matrix(torch.from_numpy(bits), shape, g)
        return _from_matrix(torch.where(pos, mt[:, 1], mt[:, 0]), g, shape)

    def exchange(self, grads: Sequence[torch.Tensor], states: Sequence[State]) -> ExchangeResult:
        """The paper's two-leg aggregation (reduce-scatter of 1-bit stripes, then 1-bit all-gather).

        The column view is split into N stripes of whole columns (the unit that shares a pair of
        means, so quantizing a stripe equals quantizing the tensor).  Leg 1: worker w quantizes
        each stripe with its own residual (error feedback) and sends stripe j to its owner j.
        Leg 2: owner j averages the decoded stripes, re-quantizes the average with a second,
        owner-side residual and sends it to every other worker.  Both legs are counted.
        """
        n = len(grads)
        if n == 1 or grads[0].numel() == 0:  # empty tensors: nothing to stripe (and empty bodies)
            return super().exchange(grads, states)
        g_name = self.params["granularity"]
        shape = tuple(grads[0].shape)
        views = [_matrix(g.detach().float(), shape, g_name) for g in grads]
        ncols = views[0].shape[1]
        bounds = np.linspace(0, ncols, n + 1).astype(int)
        col = OneBitSGD(granularity="column")  # stripes are columns of the view already
        leg1 = np.zeros((n, n), dtype=np.int64)  # bytes worker w -> owner j
        first_payloads: list[Payload] = []
        owner_sum: list[torch.Tensor | None] = [None] * n
        for w, (view, st) in enumerate(zip(views, states, strict=True)):
            whole_bits = 0
            for j in range(n):
                stripe = view[:, bounds[j] : bounds[j + 1]]
                if stripe.shape[1] == 0:
                    continue
                sub = st.values.setdefault("worker_stripes", {}).get(j)
                if sub is None:
                    sub = st.values["worker_stripes"][j] = State(st.seed * 1009 + j)
                p, dec = col.compress_and_decode(stripe.contiguous(), sub)
                leg1[w, j] = p.nbytes if j != w else 0
                whole_bits += p.nbytes
                owner_sum[j] = dec if owner_sum[j] is None else owner_sum[j] + dec
                if j == w:
                    first_payloads.append(p)
            st.step += 1
        leg2 = np.zeros(n, dtype=np.int64)  # bytes owner j sends to each other worker
        out_cols: list[torch.Tensor] = []
        for j in range(n):
            if owner_sum[j] is None:
                continue
            owner = states[j].values.setdefault("owner_stripe", None)
            if owner is None:
                owner = states[j].values["owner_stripe"] = State(states[j].seed * 7919 + j)
            p, dec = col.compress_and_decode(owner_sum[j] / n, owner)
            leg2[j] = p.nbytes
            out_cols.append(dec)
        traffic = Traffic()
        for w in range(n):
            traffic.add("reduce-scatter", w, int(leg1[w].sum()), int(leg1[:, w].sum()))
        for w in range(n):
            traffic.add("allgather", w, int(leg2[w]) * (n - 1), int(leg2.sum() - leg2[w]))
        aggregate = _from_matrix(torch.cat(out_cols, dim=1), g_name, shape).reshape(shape)
        return ExchangeResult(aggregate.to(grads[0].dtype), traffic, first_payloads)
