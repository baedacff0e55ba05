"""PowerSGD — Vogels et al. 2019, "PowerSGD: Practical Low-Rank Gradient Compression for
Distributed Optimization" (NeurIPS 2019); checked against the authors' code (epfml/powersgd,
``paper-code/gradient_reducers.py``, ``RankKReducer``) and PyTorch's ``powerSGD_hook``.

A tensor is viewed as the matrix ``M = a.reshape(shape[0], -1)`` (rows × cols), where
``a = x + e`` includes the error-feedback residual (the shared mechanism, always on).  One power
iteration with warm start, rank r::

    P = M Q                  # Q: the previous step's Q (first step: standard normals from a seed the state draws)
    P̂ = orthonormalise(P)    # Gram-Schmidt on the r columns
    Q = Mᵀ P̂                 # kept in state.tensors["q"]: the next step's warm start
    decoded = P̂ Qᵀ           # rank ≤ r

The payload carries both factors as float32 (P̂ then Q): exactly ``32·r·(rows + cols)`` body bits.
No communication happens inside ``compress``; :meth:`PowerSGD.worker_protocol` is the paper's
multi-worker protocol (below), run simulated by ``exchange`` and for real by the DDP hook.
Vectors (biases, norms), scalars and matrices where
``r·(rows + cols) >= rows·cols`` (the factors would not be smaller) are sent dense in float32,
as the authors do for rank-1 tensors.

Choices, each checked against the references:

* rank default 2: the paper's headline configuration (rank 2 reaches full-precision accuracy for
  ResNet-18 on CIFAR-10 and for the LSTM on WikiText-2); PyTorch's hook defaults to 1.
* The warm-started Q is used as is, as in the authors' code (whose Q orthogonalisation is
  commented out).  PyTorch's hook orthonormalises Q first; in exact arithmetic this changes no
  decoded value, since P̂ only depends on span(M Q) and Gram-Schmidt of Q keeps that span.
* Orthonormalisation is Gram-Schmidt in float64 on the r columns (cheap: rows × r).  A column that
  is (numerically) dependent on the previous ones becomes zero instead of amplified noise, so a
  rank-deficient or all-zero M gives a valid projection and all-zero M decodes to zeros, no NaN.
* Error feedback in the exchange: the residual is ``e_w = M_w − P̂ Q̄ᵀ`` with Q̄ the all-reduced
  (averaged) Q, i.e. the worker's input minus the aggregate, as both the authors' code
  (``mem = tensor − out``) and PyTorch's hook (``input_tensor_cp − input_tensor``) compute it.  The
  paper's Algorithm 2 text writes ``e_w = Δ_w − DECOMPRESS(C(Δ_w))``, the local approximation
  ``P̂ Q_wᵀ``; parameter ``ef_residual="local"`` selects that.  Summed over workers the two are
  equal (Σ_w P̂ Q_wᵀ = N·P̂ Q̄ᵀ); only the split between workers differs.  Dense tensors are
  averaged exactly and keep a zero residual.  In single-worker ``compress`` both coincide.
* ``start_powerSGD_iter`` (the hook's dense warm-up) and ``min_compression_rate`` are not
  modelled: the benchmark compresses every step, and the dense rule is the break-even one above.

Arithmetic (version 2).  The three products accumulate in float64 and round once to float32
where a float32 result is kept: ``P = M Q`` (float64, orthonormalised in float64, P̂ sent as
float32), ``Q = Mᵀ P̂`` (float64 sums over fixed blocks of rows, added in a fixed order), and
the decoded ``P̂ Qᵀ``, each element ``float32(Σ_l P̂_il·Q_jl)`` summed in l order (products of
two float32 are exact in float64) — the same function on the sender (for the residual) and on the
receiver, so ``x + e_old = decoded + e_new`` holds to float32 rounding of one subtraction.
Version 1 used float32 BLAS (``M @ Q``, ``M.t() @ P̂``, ``P̂ @ Q.t()``); the transposed product
``M.t() @ P̂`` alone took 6× a ``P̂.t() @ M`` of the same data here, and BLAS's summation order
(hence the last bits) changes with the matrix shape and the library.  On CPU the products are
numba kernels over fixed row blocks, so results do not depend on the thread count; the residual
``e = a − P̂ Qᵀ`` is formed in place in the error-feedback buffer, and the decoded tensor only when
the caller wants it.  Other devices use torch float64 ops in the same order (same values up to
the float64 summation order of ``M Q`` and ``Mᵀ P̂``), and there the body is the factors' float32 bytes on the
input's device and the decoder reads them there: no host copy and no scalar read (Gram-Schmidt's dependence test
is a ``torch.where`` on the device).  A state's first warm-start Q is standard normals computed on the input's
device from a seed of the state's generator (:func:`gcbench.kernels.normals_torch`, the same numbers on every
device; version 2 drew it with the NumPy generator on the host and copied it over).  :func:`powersgd_step_reference` is the
straightforward float32 version (version 1's arithmetic), the class's ``reference``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch

from gcbench import kernels
from gcbench.compressors.cards.powersgd import POWERSGD_CARD
from gcbench.core.compressor import Compressor, EncodeContext, Encoded, ErrorFeedback, State
from gcbench.core.errors import PayloadError
from gcbench.core.header import body_tensor, meta_int, meta_keys
from gcbench.core.payload import Payload
from gcbench.core.protocol import AllReduce, Context, Outcome, WorkerProtocol

Q_KEY = "q"  # warm-start factor (cols × r), float32
_DEP_TOL = 1e-10  # a column whose norm fell below this fraction during projection is dependent


def matrix_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, cols) of the matrix view ``reshape(shape[0], -1)``; vectors and scalars are (d, 1)."""
    d = int(np.prod(shape)) if shape else 1
    if len(shape) < 2:
        return d, 1
    return shape[0], d // shape[0] if shape[0] else 0


def is_low_rank(shape: tuple[int, ...], r: int) -> bool:
    """True when the tensor is a matrix whose two rank-r factors are smaller than it."""
    if len(shape) < 2:
        return False
    rows, cols = matrix_shape(shape)
    return r * (rows + cols) < rows * cols


def orthonormalize(p: torch.Tensor) -> torch.Tensor:
    """Gram-Schmidt on the columns of ``p`` (float64 inside); dependent columns become zero."""
    q = p.double().clone()
    for i in range(q.shape[1]):
        col = q[:, i]
        before = col.norm()
        if i:
            basis = q[:, :i]
            col -= basis @ (basis.t() @ col)  # remove the components along the earlier columns
        after = col.norm()
        keep = (after > 0) & (after > _DEP_TOL * before)  # on the tensor's device: no host read of the norms
        col.copy_(torch.where(keep, col / after, torch.zeros((), dtype=col.dtype, device=col.device)))
    return q.to(p.dtype)


def orthonormalize_reference(p: torch.Tensor) -> torch.Tensor:
    """Orthonormal basis of span(p) by Householder QR (the tests' oracle for full-rank ``p``)."""
    return torch.linalg.qr(p.double()).Q.to(p.dtype)


# ----------------------------------------------------------------------------- products (version 2 arithmetic)

ROW_BLOCK = 64  # rows per work item of the row kernels


@kernels.njit(**kernels.KERNEL)
def _dot4(u, v):  # pragma: no cover - numba
    """Σ u_j·v_j in float64 with four interleaved partial sums, added as (s0 + s1) + (s2 + s3)."""
    n = u.size
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    j = 0
    while j + 4 <= n:
        s0 += np.float64(u[j]) * np.float64(v[j])
        s1 += np.float64(u[j + 1]) * np.float64(v[j + 1])
        s2 += np.float64(u[j + 2]) * np.float64(v[j + 2])
        s3 += np.float64(u[j + 3]) * np.float64(v[j + 3])
        j += 4
    while j < n:
        s0 += np.float64(u[j]) * np.float64(v[j])
        j += 1
    return (s0 + s1) + (s2 + s3)


@kernels.njit(**kernels.KERNEL)
def _mul_q_kernel(b0, b1, m, qt, out):  # pragma: no cover - numba
    """out[i, k] = Σ_j m[i, j]·q[j, k] (float64) for the rows of blocks b0..b1; ``qt`` is Qᵀ."""
    rows = m.shape[0]
    r = qt.shape[0]
    for b in range(b0, b1):
        for i in range(b * ROW_BLOCK, min((b + 1) * ROW_BLOCK, rows)):
            row = m[i]
            for k_ in range(r):
                out[i, k_] = _dot4(row, qt[k_])


@kernels.launches(_mul_q_kernel)
def _mul_q_kernel_par(nth, n, *args):  # pragma: no cover - numba
    for p in kernels.prange(nth):
        _mul_q_kernel(n * p // nth, n * (p + 1) // nth, *args)


@kernels.njit(**kernels.KERNEL)
def _mul_t_kernel(c0, c1, m, p, per, parts):  # pragma: no cover - numba
    """parts[c, k, j] = Σ_{i in part c} m[i, j]·p[i, k] (float64); part c holds rows [c·per, (c+1)·per)."""
    rows, cols = m.shape
    r = p.shape[1]
    for c in range(c0, c1):
        acc = parts[c]
        for i in range(c * per, min((c + 1) * per, rows)):
            row = m[i]
            for k_ in range(r):
                pil = np.float64(p[i, k_])
                a = acc[k_]
                for j in range(cols):
                    a[j] += np.float64(row[j]) * pil


@kernels.launches(_mul_t_kernel)
def _mul_t_kernel_par(nth, n, *args):  # pragma: no cover - numba
    for p in kernels.prange(nth):
        _mul_t_kernel(n * p // nth, n * (p + 1) // nth, *args)


@kernels.njit(**kernels.KERNEL)
def _recon_row(p_row, qt, tmp):  # pragma: no cover - numba
    """tmp[j] = Σ_k p_row[k]·q[j, k] in float64, summed in k order (products of float32 are exact)."""
    r = qt.shape[0]
    cols = tmp.size
    p0 = np.float64(p_row[0])
    q0 = qt[0]
    for j in range(cols):
        tmp[j] = p0 * np.float64(q0[j])
    for k_ in range(1, r):
        pl = np.float64(p_row[k_])
        ql = qt[k_]
        for j in range(cols):
            tmp[j] += pl * np.float64(ql[j])


@kernels.njit(**kernels.KERNEL)
def _recon_kernel(b0, b1, p, qt, out, subtract):  # pragma: no cover - numba
    """Rows of blocks b0..b1: out = float32(P̂ Qᵀ), or out -= float32(P̂ Qᵀ) when ``subtract``."""
    rows, cols = out.shape
    tmp = np.empty(cols, np.float64)
    for b in range(b0, b1):
        for i in range(b * ROW_BLOCK, min((b + 1) * ROW_BLOCK, rows)):
            _recon_row(p[i], qt, tmp)
            o = out[i]
            if subtract:
                for j in range(cols):
                    o[j] = o[j] - np.float32(tmp[j])
            else:
                for j in range(cols):
                    o[j] = np.float32(tmp[j])


@kernels.launches(_recon_kernel)
def _recon_kernel_par(nth, n, *args):  # pragma: no cover - numba
    for p in kernels.prange(nth):
        _recon_kernel(n * p // nth, n * (p + 1) // nth, *args)


def _row_blocks(rows: int) -> int:
    return max(1, -(-rows // ROW_BLOCK))


def _parts(rows: int, cols: int, r: int) -> tuple[int, int]:
    """(rows per part, parts) of the Mᵀ P̂ sums: a fixed split of at most 32 parts (thread-count independent)."""
    per = max(16, -(-rows // 32))
    return per, -(-rows // per)


def f32_body(t: torch.Tensor) -> torch.Tensor:
    """A float32 tensor's little-endian bytes as a new 1-D uint8 tensor on its device (a copy: never a view of ``t``)."""
    return t.detach().reshape(-1).float().clone().view(torch.uint8)


def f32_of_body(body: torch.Tensor) -> torch.Tensor:
    """The float32 values of little-endian body bytes, a new tensor on the body's device (copied first when the
    bytes do not start at a multiple of 4 in their storage, as a payload parsed from a file may)."""
    if body.storage_offset() % 4:
        body = body.clone()
    return body.view(torch.float32).clone()


def _cpu(*ts: torch.Tensor) -> bool:
    return kernels.fast_cpu(*ts)


def left_factor(m: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """P = M Q in float64 (rows × r) for float32 ``m`` (rows × cols) and ``q`` (cols × r)."""
    if _cpu(m) and m.numel() >= kernels.SERIAL_MAX // 16:
        qt = np.ascontiguousarray(q.detach().cpu().numpy().T, dtype=np.float32)
        out = np.empty((m.shape[0], q.shape[1]), np.float64)
        kernels.run_chunks(_mul_q_kernel, _row_blocks(m.shape[0]), m.numel(), kernels.as_numpy(m), qt, out)
        return torch.from_numpy(out)
    return m.double() @ q.to(m.device).double()


def right_factor(m: torch.Tensor, p_hat: torch.Tensor) -> torch.Tensor:
    """Q = Mᵀ P̂ as float32 (cols × r): float64 sums over fixed parts of rows, added part by part."""
    rows, cols = m.shape
    r = p_hat.shape[1]
    if _cpu(m) and m.numel() >= kernels.SERIAL_MAX // 16:
        per, nparts = _parts(rows, cols, r)
        parts = np.zeros((nparts, r, cols), np.float64)
        kernels.run_chunks(_mul_t_kernel, nparts, m.numel(), kernels.as_numpy(m), np.ascontiguousarray(p_hat.cpu().numpy(), np.float32),
                        per, parts)
        total = parts[0].copy()
        for c in range(1, nparts):  # a fixed order: the same bits for every thread count
            total += parts[c]
        return torch.from_numpy(np.ascontiguousarray(total.T.astype(np.float32)))
    return (p_hat.double().t() @ m.double()).t().float().contiguous()


def reconstruct(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """P Qᵀ as float32, each element float32(Σ_l p_il·q_jl) summed in float64 in l order (both sides of the wire)."""
    rows = p.shape[0]
    cols = q.shape[0]
    if p.device.type == "cpu" and q.device.type == "cpu" and kernels.NUMBA:
        out = np.empty((rows, cols), np.float32)
        if out.size:
            kernels.run_chunks(_recon_kernel, _row_blocks(rows), out.size, np.ascontiguousarray(p.numpy(), np.float32),
                            np.ascontiguousarray(q.numpy().T, np.float32), out, False)
        return torch.from_numpy(out)
    return _reconstruct_torch(p, q)


def _reconstruct_torch(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    pd, qd = p.double(), q.double()
    acc = pd[:, 0:1] * qd[:, 0]
    for k_ in range(1, p.shape[1]):
        acc += pd[:, k_ : k_ + 1] * qd[:, k_]
    return acc.float()


def subtract_reconstruction(m: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> None:
    """``m -= reconstruct(p, q)`` in place, without forming the product."""
    if _cpu(m) and p.device.type == "cpu" and m.is_contiguous():
        kernels.run_chunks(_recon_kernel, _row_blocks(m.shape[0]), m.numel(), np.ascontiguousarray(p.numpy(), np.float32),
                        np.ascontiguousarray(q.numpy().T, np.float32), kernels.as_numpy(m), True)
    else:
        m.sub_(reconstruct(p, q).to(m.device))


def power_step(m: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One power iteration: (P̂ = orthonormalise(M Q), Q_new = Mᵀ P̂), float32, contiguous.

    Off the numba path both products read one float64 copy of M (:func:`left_factor` and :func:`right_factor` each
    make their own): the same operations, one conversion pass fewer.
    """
    if _cpu(m) and m.numel() >= kernels.SERIAL_MAX // 16:
        p_hat = orthonormalize(left_factor(m, q)).float().contiguous()
        return p_hat, right_factor(m, p_hat)
    md = m.double()
    p_hat = orthonormalize(md @ q.to(m.device).double()).float().contiguous()
    return p_hat, (p_hat.double().t() @ md).t().float().contiguous()


def powersgd_step_reference(m: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(P̂, Q_new, decoded) with float32 torch products (version 1's arithmetic): the straightforward step."""
    p_hat = orthonormalize(m @ q).contiguous()
    q_new = (m.t() @ p_hat).contiguous()
    return p_hat, q_new, p_hat @ q_new.t()


def powersgd_reference(m: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The decoded matrix from the definition in float64: projection of M onto span(M Q)."""
    basis = orthonormalize_reference(m.double() @ q.double())
    return (basis @ (basis.t() @ m.double())).float()


def powersgd_state_reference(comp: Compressor, x32: torch.Tensor, state: State) -> torch.Tensor:
    """Decoded ``x + e`` by :func:`powersgd_step_reference` from the state's warm start (the class's ``reference``).

    The state is not changed (a first Q is drawn from a copy of its generator); vectors and small
    matrices are sent dense, as by the compressor.
    """
    a = ErrorFeedback.corrected(x32, state)
    shape = tuple(a.shape)
    r = comp.params["rank"]
    if not is_low_rank(shape, r):
        return a.clone()
    rows, cols = matrix_shape(shape)
    q = state.tensors.get(Q_KEY)
    if q is None or tuple(q.shape) != (cols, r):
        q = kernels.normals_torch(copy.deepcopy(state).randint64(), cols * r).reshape(cols, r)
    return powersgd_step_reference(a.reshape(rows, cols), q.to(a.device))[2].reshape(shape)


class PowerSGD(Compressor):
    """PowerSGD (Vogels et al., NeurIPS 2019): rank-r power iteration on the tensor viewed as a matrix,
    warm-started from the previous step's Q, with error feedback."""

    info = POWERSGD_CARD
    reference = powersgd_state_reference

    def _start_q(self, state: State, cols: int, r: int, device: torch.device) -> torch.Tensor:
        """The warm-start Q from the state, or (a state's first step) standard normals drawn on ``device`` from a seed
        the state's generator gives (:func:`gcbench.kernels.normals_torch`: the same numbers on every device)."""
        q = state.tensors.get(Q_KEY)
        if q is None or tuple(q.shape) != (cols, r):
            return kernels.normals_torch(state.randint64(), cols * r, device).reshape(cols, r)
        return q.to(device)

    def _encode(self, a: torch.Tensor, state: State, ctx: EncodeContext) -> Encoded:
        shape = tuple(a.shape)
        r = self.params["rank"]
        if not is_low_rank(shape, r):
            flat = a.reshape(-1)
            body = f32_body(flat)
            decoded = flat.clone() if ctx.need_decoded else None
            if ctx.ef:
                a.sub_(a)  # the residual a − decoded: sent exactly (NaN where a is ±inf or NaN, as a − a)
            return body, {"r": 0}, decoded
        rows, cols = matrix_shape(shape)
        m = a.reshape(rows, cols)
        if not m.is_contiguous():
            m = m.contiguous()
        p_hat, q_new = power_step(m, self._start_q(state, cols, r, a.device))
        state.tensors[Q_KEY] = q_new
        body = torch.cat([f32_body(p_hat), f32_body(q_new).to(p_hat.device)])
        decoded = reconstruct(p_hat, q_new).reshape(-1) if ctx.need_decoded else None
        if ctx.ef:  # e = a − P̂ Qᵀ in place, with the receiver's rounding of P̂ Qᵀ
            if decoded is not None:
                a.sub_(decoded.to(a.device).reshape(shape))
            else:
                subtract_reconstruction(a.reshape(rows, cols), p_hat, q_new)
        return body, {"r": r}, decoded

    def _expected_body_nbytes(self, payload: Payload) -> int:
        meta_keys(payload, "r")
        rows, cols = matrix_shape(payload.shape)
        r = meta_int(payload, "r", 0, min(rows, cols))  # a rank above min(rows, cols) is never smaller than the matrix
        return 4 * payload.numel if r == 0 else 4 * r * (rows + cols)  # dense float32, or the factors P and Q

    def _decode(self, payload: Payload) -> torch.Tensor:
        r = meta_int(payload, "r")
        body = body_tensor(payload)
        d = payload.numel
        if r == 0:
            if body.numel() != 4 * d:
                raise PayloadError(f"powersgd dense body has {body.numel()} bytes, expected {4 * d}")
            return f32_of_body(body)
        rows, cols = matrix_shape(payload.shape)
        if r < 0 or body.numel() != 4 * r * (rows + cols):
            raise PayloadError(f"powersgd body has {body.numel()} bytes, expected {4 * max(r, 0) * (rows + cols)}")
        f = f32_of_body(body)
        return reconstruct(f[: rows * r].reshape(rows, r), f[rows * r :].reshape(cols, r)).reshape(-1)

    def worker_protocol(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> WorkerProtocol:
        """The paper's protocol (Algorithm 1), one worker's side, for all its units together (as PyTorch's hook).

        1. form ``M_w = g_w + e_w`` and ``P_w = M_w Q`` with the warm-start Q shared by all workers
           (``ctx.shared``: real workers seed those states alike);
        2. all-reduce the P_w (mean; phase ``allreduce-P``; float64 here, float32 on the wire) and
           orthonormalise: P̂; dense tensors (vectors, small matrices) ride in the same all-reduce
           (phase ``allreduce-dense``) and are done;
        3. ``Q_w = M_wᵀ P̂``; all-reduce (mean; phase ``allreduce-Q``): Q̄;
        4. aggregate ``P̂ Q̄ᵀ``; every state keeps Q̄ for the next warm start and its residual
           (see ``ef_residual`` in the module docstring).

        Traffic is a ring all-reduce of each factor: per worker about 2·(N − 1)/N × its size.  The
        payload a worker "sent" is its message in this codec: (P̂, Q_w), which decodes to its own P̂ Q_wᵀ.
        """
        n, r = ctx.world, self.params["rank"]
        ms = [ErrorFeedback.corrected(x.detach().float(), st) for x, st in zip(xs, states, strict=True)]
        low = [u for u, x in enumerate(xs) if is_low_rank(tuple(x.shape), r)]
        dense = [u for u in range(len(xs)) if u not in low]
        mats = {u: ms[u].reshape(matrix_shape(tuple(xs[u].shape))) for u in low}
        ps = [left_factor(mats[u].contiguous(), self._start_q(ctx.shared[u], mats[u].shape[1], r, mats[u].device)) for u in low]
        first = yield AllReduce(ps + [ms[u] for u in dense], ["allreduce-P"] * len(low) + ["allreduce-dense"] * len(dense),
                                wire=torch.float32)
        aggregates: list[torch.Tensor] = [torch.empty(0)] * len(xs)
        sent: list[Payload] = [None] * len(xs)  # type: ignore[list-item]  # every unit is filled below
        dense_means = ctx.once("dense", lambda: [(first[len(low) + j] / n).float() for j in range(len(dense))])
        for j, u in enumerate(dense):
            aggregates[u] = dense_means[j]
            sent[u] = self._payload(xs[u], f32_body(ms[u]), {"r": 0})
            states[u].tensors[ErrorFeedback.KEY] = torch.zeros_like(ms[u])  # sent exactly: nothing left over
            states[u].step += 1
        if not low:
            return Outcome(aggregates, sent)
        p_hats = ctx.once("p_hat", lambda: [orthonormalize(first[j] / n).float().contiguous() for j in range(len(low))])
        q_ws = [right_factor(mats[u].contiguous(), p_hat) for u, p_hat in zip(low, p_hats, strict=True)]
        second = yield AllReduce(q_ws, "allreduce-Q")
        q_means = ctx.once("q_mean", lambda: [(second[j] / n).contiguous() for j in range(len(low))])
        aggs = ctx.once("aggregate", lambda: [reconstruct(p, q) for p, q in zip(p_hats, q_means, strict=True)])
        for j, u in enumerate(low):
            q_mean, agg = q_means[j], aggs[j]
            aggregates[u] = agg.reshape(xs[u].shape)
            body = torch.cat([f32_body(p_hats[j]), f32_body(q_ws[j]).to(p_hats[j].device)])
            sent[u] = self._payload(xs[u], body, {"r": r})
            approx = agg if self.params["ef_residual"] == "aggregate" else reconstruct(p_hats[j], q_ws[j])
            states[u].tensors[ErrorFeedback.KEY] = (mats[u] - approx).reshape(xs[u].shape)
            states[u].tensors[Q_KEY] = q_mean.clone()
            states[u].step += 1
        return Outcome(aggregates, sent)


def powersgd_bits(shape: tuple[int, ...], r: int) -> int:
    """Body bits (tests' oracle): 32·r·(rows + cols), or 32·d when sent dense."""
    rows, cols = matrix_shape(shape)
    return 32 * r * (rows + cols) if is_low_rank(shape, r) else 32 * rows * cols
