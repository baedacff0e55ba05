"""``preset="reference"`` of LGC: the whole model at once, following a third-party re-implementation citing the TNNLS DOI.

The first ``dense_first`` and last ``dense_last`` tensors dense fp32 in every phase; the middle
tensors top-k, one autoencoder trained (phase 2) and used (phase 3) over their concatenated top-k
values.  The package docstring (gcbench/compressors/lgc/__init__.py, ``preset="reference"``) gives
the source of every detail.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from itertools import accumulate
from typing import Any

import numpy as np
import torch

from gcbench.compressors._common import k_of
from gcbench.compressors.lgc import autoencoder as ae
from gcbench.compressors.lgc.index_sets import positions_in, topk_indices_sorted
from gcbench.compressors.lgc.preset import Preset
from gcbench.compressors.lgc.result import LGCExchangeResult
from gcbench.compressors.lgc.rounds import only, others
from gcbench.compressors.lgc.wire import f32_bytes, f32_read
from gcbench.core.compressor import ErrorFeedback, ExchangeResult, State
from gcbench.core.errors import GcbenchError, ParamError, PayloadError
from gcbench.core.header import body_tensor
from gcbench.core.payload import Payload
from gcbench.core.protocol import Context, Leg, Message, Send, ToServer, counted_in, simulate


class ReferencePreset(Preset):
    """``preset="reference"``: follows the third-party re-implementation, one autoencoder over the whole model's top-k values."""

    name = "reference"
    whole_model = True

    def check(self) -> None:
        if self.settings["decoders"] != "per-worker":
            raise ParamError("lgc.decoders: preset='reference' has one decoder per worker (the re-implementation's), "
                             f"got {self.settings['decoders']!r}")

    def init_params(self, seed: int, workers: int) -> dict[str, torch.Tensor]:
        # ring mode decodes the mean latent with one decoder (gcbench's inference); ps has one per worker
        return ae.init_reference_params(seed, 1 if self.settings["mode"] == "ring" else workers)

    def exchange(self, grads: Sequence[torch.Tensor], states: Sequence[State]) -> LGCExchangeResult:
        """A whole model of one tensor (:meth:`exchange_group`)."""
        return self.exchange_group([[g] for g in grads], [[s] for s in states])[0]  # type: ignore[return-value]  # LGC's results are LGCExchangeResult

    def dense_units(self, units: int) -> set[int]:
        """Units sent dense fp32 in every phase: the first ``dense_first`` and the last ``dense_last``."""
        first, last = int(self.settings["dense_first"]), int(self.settings["dense_last"])
        return set(range(min(first, units))) | set(range(max(units - last, 0), units))

    def middle_units(self, xs: Sequence[torch.Tensor]) -> tuple[list[int], bool]:
        """The reference preset's middle units of a model (neither dense nor empty), and whether they use the autoencoder.

        They use it when their K values total at least the encoder's shortest input; else they keep top-k+EF in phase 3.
        """
        dense = self.dense_units(len(xs))
        mid = [u for u, x in enumerate(xs) if u not in dense and x.numel() > 0]
        return mid, sum(self.lgc.k_of(xs[u].numel()) for u in mid) >= ae.REF_MIN_K

    def exchange_group(self, grads: Sequence[Sequence[torch.Tensor]], states: Sequence[Sequence[State]]) -> list[ExchangeResult]:
        """The whole model at once, as the re-implementation does it (its
        :meth:`worker_protocol` over every unit, on the simulated transport) — the first
        ``dense_first`` and last ``dense_last`` units dense fp32 in every phase; the others
        ("middle" units) top-k per unit in phase 2 and, in phase 3, one latent of the leader's
        top-k values of every middle unit concatenated in unit order (K = Σ K_u values).  Each
        unit's result counts its own rounds' messages; those that cover the whole model are
        counted in the first middle unit's, the server's aggregate of each middle unit in that unit's.
        """
        n = len(grads)
        if n != len(states):
            raise ValueError(f"lgc exchange: {n} workers' gradients but {len(states)} workers' states")
        if n < 2:
            raise GcbenchError(f"lgc needs at least 2 workers: it exploits redundancy between workers' gradients (got {n})")
        units = len(grads[0])
        if units == 0:
            return []
        step = states[0][0].step
        if any(st.step != step for row in states for st in row):
            raise ValueError("lgc exchange: the states of the workers' units are at different steps")
        shapes = [tuple(g.shape) for g in grads[0]]
        if any([tuple(g.shape) for g in row] != shapes for row in grads):
            raise ValueError("lgc exchange: workers' gradients differ in shape")
        phase, leader = self.lgc.phase_of(step), self.lgc.leader_of(step, n)
        mid, use_ae = self.middle_units(grads[0])
        memo: dict[Any, Any] = {}
        run = simulate([self.lgc.worker_protocol(list(grads[w]), list(states[w]), Context(w, n, memo=memo)) for w in range(n)])
        msgs: list[list[Message]] = [[] for _ in range(units)]
        for m in run.messages:
            if m.unit is None:
                raise RuntimeError(f"lgc: a {m.phase!r} message of the whole-model exchange names no unit")
            msgs[m.unit].append(m)
        aggs = run.outcomes[0].aggregates
        return [self.lgc._result(aggs[u].reshape(shapes[u]).to(grads[0][u].dtype), msgs[u], n, phase, leader,
                             use_ae and phase != "dense" and u in mid) for u in range(units)]

    def rounds(self, xs: Sequence[torch.Tensor], states: Sequence[State],
                            ctx: Context) -> Generator[Leg, Any, list[torch.Tensor]]:
        """One worker's side of the reference preset's step over the whole model ``xs``; the aggregates.

        Unit after unit: a dense unit (every unit in phase 1) a dense round (:meth:`_dense_exchange`),
        a middle unit a top-k round (:meth:`_topk_exchange`; in phase 3 too when the middle units
        are too small for the autoencoder); then the rounds over every middle unit: the
        autoencoder's training in phase 2, the latent exchange in phase 3.  Error feedback and the
        step counters are updated at the end.
        """
        units = len(xs)
        if units == 0:
            return []
        n = ctx.world
        phase, leader = self.lgc.phase_of(states[0].step), self.lgc.leader_of(states[0].step, n)
        shapes = [tuple(x.shape) for x in xs]
        mid, use_ae = self.middle_units(xs)
        corrected = [ErrorFeedback.corrected(x.detach().float().reshape(shape), st).reshape(-1)
                     for x, st, shape in zip(xs, states, shapes, strict=True)]
        aggs: list[torch.Tensor] = list(corrected)  # each replaced by the unit's aggregate below
        sent: list[torch.Tensor] = list(corrected)  # a dense round leaves no residual
        pushes: list[list[tuple[torch.Tensor, torch.Tensor]]] = []  # per middle unit, every worker's top-k push, decoded
        for u, a in enumerate(corrected):
            if u not in mid or phase == "dense":
                tag = phase if phase == "dense" else f"{phase}:dense-tensor"
                aggs[u] = yield from counted_in(self._dense_exchange(u, a, ctx, tag, shapes[u], xs[u].dtype), u)
            elif phase == "topk" or not use_ae:
                pushes.append([])
                aggs[u], sent[u] = yield from counted_in(
                    self._topk_exchange(u, a, None, ctx, phase, 0, None, shapes[u], xs[u].dtype, pushes[-1]), u)
        if mid and phase != "dense" and use_ae:
            a_mid = [corrected[u] for u in mid]
            geo = [(shapes[u], xs[u].dtype) for u in mid]
            if phase == "topk":
                yield from counted_in(self._reference_train(states[0], ctx, leader, pushes, a_mid, geo), mid[0])
            else:
                proto = self._reference_ps if self.settings["mode"] == "ps" else self._reference_ring
                out_aggs, out_sent = yield from counted_in(proto(states[0], ctx, leader, a_mid, geo, mid), mid[0])
                for j, u in enumerate(mid):
                    aggs[u], sent[u] = out_aggs[j], out_sent[j]
        for u, st in enumerate(states):
            ErrorFeedback.update(st, corrected[u].reshape(shapes[u]), sent[u].reshape(shapes[u]))
            st.step += 1
        return [agg.to(x.device).reshape(x.shape) for agg, x in zip(aggs, xs, strict=True)]

    def _concat_layout(self, a: Sequence[torch.Tensor]) -> tuple[list[int], list[int], list[int]]:
        """The middle units' sizes, their K values, and where each unit's K values start in the concatenated vector (and its end)."""
        dims = [t.numel() for t in a]
        ks = [self.lgc.k_of(d) for d in dims]
        return dims, ks, list(accumulate([0, *ks]))

    def _concat_values(self, vals: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.cat([v.reshape(-1).float() for v in vals]) if vals else torch.zeros(0)

    def _reference_loss(self, params: dict[str, torch.Tensor], z: torch.Tensor, recon: torch.Tensor) -> torch.Tensor:
        """(1 − λ)·recon + λ·Σ_{i≠j} MSE(z_i, z_j): the re-implementation's similarity term (λ = 0.5 there)."""
        n = z.shape[0]
        sim = sum(((z[i] - z[j]).pow(2).mean() for i in range(n) for j in range(n) if i != j), torch.zeros((), device=z.device))
        lam = float(self.settings["latent_weight"])
        return (1 - lam) * recon + lam * sim

    def _reference_train(self, state0: State, ctx: Context, leader: int, pushes: list[list[tuple[torch.Tensor, torch.Tensor]]],
                         a: list[torch.Tensor],
                         geo: list[tuple[tuple[int, ...], torch.dtype]]) -> Generator[Leg, Any, None]:
        """Phase 2 of the reference preset: ``ae_iters`` steps of its loss on this step's top-k values.

        ``pushes``: per middle unit, every worker's top-k push (values, indices) as this worker's top-k round
        kept it; ``a``: this worker's corrected middle tensors.  PS (the re-implementation's rule): the
        server, which already holds every push, trains in a round without messages on each
        worker's *own* top-k values of every middle unit, concatenated; one randomly chosen
        worker's latent is decoded by every worker's decoder with that worker's innovation (its
        k_inn largest values, at their positions in its own vector); loss = (1 − λ)·Σ_w
        MSE(decoded_w, values_w) + λ·Σ_{i≠j} MSE(z_i, z_j).  Ring (gcbench's inference): every
        worker's values at the rotating leader's indices (each other worker all-gathers, per
        middle unit, those its push did not hold: ``topk:train``, as :meth:`_topk_exchange`), the
        mean values decoded from the mean latent with zero innovation, plus the same similarity
        term; every worker trains its replica.
        """
        me, n = ctx.rank, ctx.world
        dims = [math.prod(shape) for shape, _ in geo]
        if self.settings["mode"] == "ps":

            def serve(rows: list[list[Message]]) -> list[Message]:
                x_rows, inn_rows = [], []
                for w in range(n):
                    vals, innv = [], []
                    for j, d in enumerate(dims):
                        v, _idx = pushes[j][w]
                        k_inn = min(k_of(self.settings["innovation_density"], d), v.numel())
                        keep = torch.zeros(v.numel(), dtype=torch.bool, device=v.device)
                        keep[torch.topk(v.abs(), k_inn, sorted=False).indices] = True
                        vals.append(v)
                        innv.append(torch.where(keep, v, 0.0))
                    x_rows.append(self._concat_values(vals))
                    inn_rows.append(self._concat_values(innv))
                x_all = torch.stack(x_rows)[:, None, :]
                self._reference_steps(self.lgc.autoencoder(state0, n, x_all.device), x_all, torch.stack(inn_rows)[:, None, :])
                return []

            yield ToServer([], "topk:train", serve)
            return
        pushed = pushes
        idx_l = [row[leader][1] for row in pushed]
        extra = [None if me == leader else self.wire.missing_values(a[j], pushed[j][me][1], idx_l[j], *geo[j]) for j in range(len(geo))]
        # one leg for every middle unit: each other worker's messages, in unit order
        got = yield Send([Message("topk:train", me, others(me, n), p) for p in extra if p is not None], "topk:train")
        received = [extra if w == me else [m.payload for m in got if m.sender == w and m.phase == "topk:train"] for w in range(n)]
        if any(len(received[w]) != len(geo) for w in range(n) if w != leader):
            raise PayloadError(f"lgc: expected one 'topk:train' message per middle tensor ({len(geo)}) from each worker but the leader")
        cols = [self._values_at(pushed[j], idx_l[j], leader, [None if w == leader else received[w][j] for w in range(n)])
                for j in range(len(geo))]
        x = torch.cat(cols, dim=1)[:, None, :]
        ctx.once(("model", "train"), lambda: self._reference_steps(self.lgc.autoencoder(state0, n, x.device), x, None))

    def _reference_steps(self, rec: dict[str, Any], x: torch.Tensor, inn: torch.Tensor | None) -> None:
        """``ae_iters`` steps of the reference loss on (N, 1, K) values; ``inn``: the workers' innovations (ps), None (ring)."""
        n = x.shape[0]

        def loss_of(params: dict[str, torch.Tensor]) -> torch.Tensor:
            z = ae.reference_encode(params, x)
            if inn is not None:
                pick = int(np.random.default_rng([int(rec["seed"]), int(rec["draws"])]).integers(n))
                rec["draws"] = int(rec["draws"]) + 1
                recon = sum((ae.reference_decode(params, w, z[pick:pick + 1], inn[w:w + 1]) - x[w:w + 1]).pow(2).mean()
                            for w in range(n))
            else:
                out = ae.reference_decode(params, 0, z.mean(0, keepdim=True), torch.zeros_like(x[:1]))
                recon = (out - x.mean(0, keepdim=True)).pow(2).mean()
            return self._reference_loss(params, z, recon)  # type: ignore[arg-type]  # a sum of tensors is a tensor

        self.lgc.optimise(rec, loss_of)

    def _reference_ps(self, state0: State, ctx: Context, leader: int, a: list[torch.Tensor],
                      geo: list[tuple[tuple[int, ...], torch.dtype]],
                      units: Sequence[int]) -> Generator[Leg, Any, tuple[list[torch.Tensor], list[torch.Tensor]]]:
        """Phase 3, PS, reference preset: per middle unit (``units``, model indices) the aggregate and this worker's sent part.

        Three server rounds.  The one-time encoder transfer to the leader.  The leader's latent
        (fp32, 4·L4 floats, no scale) and its top-k indices of every middle unit (one message; the
        server forwards them to the others).  Every worker's innovation (k_inn largest |values| per
        unit, one message): the server decodes worker w with w's decoder from the leader's latent
        and w's innovation placed at its positions in the leader's index set (the decoder's 33rd
        channel; no exact overwrite there, as in the re-implementation); w's innovation outside
        that set is added exactly (gcbench's choice: the values were paid for); it sends back the
        aggregate of each middle unit (counted in that unit's result).
        """
        me, n, count = ctx.rank, ctx.world, len(geo)
        dims, ks, offs = self._concat_layout(a)
        shape0, dtype0 = geo[0]  # the whole-model messages carry the first middle unit's shape
        coding = self.settings["index_coding"]
        server: dict[str, Payload] = {}
        yield self._weights_round(state0, n, leader, shape0, dtype0, a[0].device)
        mine: list[Message] = []
        if me == leader:
            idx_l = [topk_indices_sorted(a[j], ks[j]) for j in range(count)]
            v_l = self._concat_values([a[j][idx_l[j]] for j in range(count)])
            with torch.no_grad():
                z = ae.reference_encode(self.lgc.autoencoder(state0, n, v_l.device)["params"], v_l.reshape(1, 1, -1))
            lat = self.wire.msg("latent", f32_bytes(z), {"k": int(v_l.numel())}, shape0, dtype0)
            ip = self.wire.msg("indices", self.wire.multi_indices(idx_l, dims), {"k": int(v_l.numel()), "coding": coding}, shape0, dtype0)
            mine = [Message("compressed:latent", me, (), lat), Message("compressed:indices", me, (), ip)]
        got = yield self._leader_round(mine, server, leader, n)
        if me != leader:
            idx_l, _ = self.wire.read_multi_indices(body_tensor(only(got, "compressed:indices")), ks, dims)
        kinn = [k_of(self.settings["innovation_density"], d) for d in dims]
        pos = [topk_indices_sorted(a[j], kinn[j]) for j in range(count)]
        vals = self._concat_values([a[j][pos[j]] for j in range(count)])
        innovation = self.wire.msg("innovation", torch.cat([f32_bytes(vals), self.wire.multi_indices(pos, dims).to(vals.device)]),
                               {"k": int(vals.numel()), "coding": coding}, shape0, dtype0)
        sent = []
        for j in range(count):
            keep = torch.zeros(dims[j], dtype=torch.bool, device=a[j].device)
            keep[idx_l[j].to(keep.device)] = True
            keep[pos[j].to(keep.device)] = True
            sent.append(torch.where(keep, a[j], 0.0))  # counted as sent for error feedback

        def serve(rows: list[list[Message]]) -> list[Message]:
            return self._reference_serve(rows, state0, n, server, (dims, ks, offs), kinn, geo, units)

        got = yield ToServer([Message("compressed:innovation", me, (), innovation)], "compressed:innovation", serve)
        pulls = [m.payload for m in got if m.phase == "compressed:pull"]
        if len(pulls) != count:
            raise PayloadError(f"lgc: expected the server's aggregate of each of {count} middle tensors, got {len(pulls)}")
        aggs = ctx.once(("model", "aggregate"), lambda: [self.wire.read_pull(p, i, d)
                                                      for p, i, d in zip(pulls, idx_l, dims, strict=True)])
        return [agg.to(t.device) for agg, t in zip(aggs, a, strict=True)], sent

    def _reference_serve(self, rows: list[list[Message]], state0: State, n: int, server: dict[str, Payload],
                         layout: tuple[list[int], list[int], list[int]], kinn: list[int],
                         geo: list[tuple[tuple[int, ...], torch.dtype]], units: Sequence[int]) -> list[Message]:
        """The server of :meth:`_reference_ps`'s last round: each worker decoded with its decoder from the leader's latent and
        its innovation, its values outside the leader's index set added exactly; the aggregate of each middle unit sent back."""
        count = len(geo)
        dims, ks, offs = layout
        lb = body_tensor(server["latent"])
        dev = lb.device
        params = self.lgc.autoencoder(state0, n, dev)["params"]
        length = ae.reference_latent_length(offs[-1])
        if lb.numel() != 4 * ae.REF_LATENT * length:
            raise PayloadError("lgc latent: body length does not match its geometry")
        z_rx = f32_read(lb, 0, ae.REF_LATENT * length, "latent").reshape(1, ae.REF_LATENT, length)
        idx_rx, _ = self.wire.read_multi_indices(body_tensor(server["indices"]).to(dev), ks, dims)
        acc = [torch.zeros(d, dtype=torch.float32, device=dev) for d in dims]
        extra_all: list[list[torch.Tensor]] = [[] for _ in range(count)]
        for w in range(n):
            ib = body_tensor(only(rows[w], "compressed:innovation")).to(dev)
            total = sum(kinn)
            v_w = f32_read(ib, 0, total, "innovation")
            pos_rx, _ = self.wire.read_multi_indices(ib[4 * total:], kinn, dims)
            inn_vec = torch.zeros(offs[-1], dtype=torch.float32, device=dev)
            extras = []
            start = 0
            for j in range(count):
                v_j = v_w[start:start + kinn[j]]
                start += kinn[j]
                where, inside = positions_in(idx_rx[j], pos_rx[j])
                inn_vec[offs[j] + where[inside]] = v_j[inside]
                extras.append((pos_rx[j][~inside], v_j[~inside]))
            with torch.no_grad():
                out = ae.reference_decode(params, w, z_rx, inn_vec.reshape(1, 1, -1)).reshape(-1)
            for j in range(count):
                r = torch.zeros(dims[j], dtype=torch.float32, device=dev)
                r[idx_rx[j]] = out[offs[j]:offs[j + 1]]
                r[extras[j][0]] = extras[j][1]
                acc[j] += r
                extra_all[j].append(extras[j][0])
        pulls = []
        for j in range(count):
            pull = self.wire.pull(acc[j] / n, idx_rx[j], torch.unique(torch.cat(extra_all[j])), n, *geo[j])[1]
            pull.unit = units[j]
            pulls.append(pull)
        return pulls

    def _reference_ring(self, state0: State, ctx: Context, leader: int, a: list[torch.Tensor],
                        geo: list[tuple[tuple[int, ...], torch.dtype]],
                        units: Sequence[int]) -> Generator[Leg, Any, tuple[list[torch.Tensor], list[torch.Tensor]]]:
        """Phase 3, ring (gcbench's inference), reference preset: per middle unit the aggregate and this worker's sent part.

        The rotating leader's indices of every middle unit go round the ring (one message); every
        worker encodes its values there with the reference encoder; the latents are summed by a
        ring all-reduce and one decoder maps the mean latent (zero innovation) to the aggregate.
        (``units``: the middle units' model indices; every message here is counted in the first's.)
        """
        me, n, count = ctx.rank, ctx.world, len(geo)
        dims, ks, offs = self._concat_layout(a)
        shape0, dtype0 = geo[0]  # the whole-model messages carry the first middle unit's shape
        coding = self.settings["index_coding"]
        params = ctx.once(("model", "autoencoder"), lambda: self.lgc.autoencoder(state0, n, a[0].device))["params"]
        ip: Payload | None = None
        if me == leader:
            idx_l = [topk_indices_sorted(a[j], ks[j]) for j in range(count)]
            ip = self.wire.msg("indices", self.wire.multi_indices(idx_l, dims), {"k": int(sum(ks)), "coding": coding}, shape0, dtype0)
        ip = yield from self._ring_broadcast(ip, leader, ctx, "compressed:indices")
        idx_rx, _ = self.wire.read_multi_indices(body_tensor(ip), ks, dims)
        # this worker's values in the group's batch (zeros elsewhere): the encoder's kernels are chosen by the batch
        # shape, and every worker's codes are those of the one batched encoding the simulation always did
        batch = torch.zeros((n, 1, offs[-1]), device=a[0].device)
        batch[me, 0] = self._concat_values([a[j][idx_rx[j].to(a[j].device)] for j in range(count)])
        with torch.no_grad():
            z = ae.reference_encode(params, batch)[me]
        total = yield from self._ring_allreduce(z.reshape(-1), ctx, "compressed:latent", dtype0)

        def decode() -> list[torch.Tensor]:
            with torch.no_grad():
                out = ae.reference_decode(params, 0, (total / n).reshape(1, *z.shape),
                                          torch.zeros((1, 1, offs[-1]), device=total.device)).reshape(-1)
            aggs = []
            for j in range(count):
                agg = torch.zeros(dims[j], dtype=torch.float32, device=total.device)
                agg[idx_rx[j]] = out[offs[j]:offs[j + 1]]
                aggs.append(agg)
            return aggs

        sent = []
        for j in range(count):
            keep = torch.zeros(dims[j], dtype=torch.bool, device=a[j].device)
            keep[idx_rx[j].to(keep.device)] = True
            sent.append(torch.where(keep, a[j], 0.0))
        return [agg.to(t.device) for agg, t in zip(ctx.once(("model", "aggregate"), decode), a, strict=True)], sent
