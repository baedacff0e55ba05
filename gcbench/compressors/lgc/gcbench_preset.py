"""``preset="gcbench"`` of LGC: gcbench's design, each tensor exchanged on its own with its own autoencoder.

Phase 3's two protocols for one tensor (ps: the leader's latent and indices, every worker's
innovation, the server's decoded mean; ring: the leader's indices round the ring, the latents
ring-summed) and the phase-2 training loss; the package docstring (gcbench/compressors/lgc/__init__.py,
"Choices of preset=gcbench") gives the source of every choice.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, cast

import torch

from gcbench.compressors._common import k_of
from gcbench.compressors.lgc import autoencoder as ae
from gcbench.compressors.lgc.index_sets import positions_in, topk_indices_sorted
from gcbench.compressors.lgc.preset import Preset
from gcbench.compressors.lgc.result import LGCExchangeResult
from gcbench.compressors.lgc.rounds import only
from gcbench.compressors.lgc.wire import f32_bytes, f32_read, sparse
from gcbench.core import codec_torch
from gcbench.core.compressor import Compressor, ErrorFeedback, ExchangeResult, State
from gcbench.core.errors import GcbenchError, ParamError, PayloadError
from gcbench.core.header import body_tensor
from gcbench.core.payload import Payload
from gcbench.core.protocol import Context, Leg, Message, Send, ToServer, counted_in, simulate


class GcbenchPreset(Preset):
    """``preset="gcbench"``: gcbench's design, each tensor on its own with its own autoencoder (per-tensor windows, RMS scales)."""

    name = "gcbench"
    whole_model = False

    def check(self) -> None:
        if self.settings["decoders"] == "per-worker" and self.settings["mode"] == "ring":
            raise ParamError("lgc.decoders: 'per-worker' needs mode='ps' (ring mode decodes one summed latent with one decoder)")
        if self.settings["dense_first"] or self.settings["dense_last"]:
            raise ParamError("lgc.dense_first/dense_last: only preset='reference' exchanges the whole model at once "
                             "(preset='gcbench' compresses each tensor on its own)")

    def init_params(self, seed: int, workers: int) -> dict[str, torch.Tensor]:
        decoders = workers if self.settings["decoders"] == "per-worker" else 1
        return ae.init_params(seed, self.lgc.channels, int(self.settings["latent_channels"]), decoders)

    def exchange(self, grads: Sequence[torch.Tensor], states: Sequence[State]) -> LGCExchangeResult:
        """One step of LGC across N workers for one tensor: :meth:`LGC.worker_protocol` on the simulated transport."""
        n = len(grads)
        if n != len(states):
            raise ValueError(f"lgc exchange: {n} gradients but {len(states)} states")
        if n < 2:
            raise GcbenchError(f"lgc needs at least 2 workers: it exploits redundancy between workers' gradients (got {n})")
        step = states[0].step
        if any(s.step != step for s in states):
            raise ValueError(f"lgc exchange: workers' states are at different steps {[s.step for s in states]}")
        shape, out_dtype = tuple(grads[0].shape), grads[0].dtype
        if any(tuple(g.shape) != shape for g in grads):
            raise ValueError("lgc exchange: workers' gradients differ in shape")
        memo: dict[Any, Any] = {}
        run = simulate([self.lgc.worker_protocol([grads[w]], [states[w]], Context(w, n, memo=memo)) for w in range(n)])
        phase, d = self.lgc.phase_of(step), grads[0].numel()
        used = self.lgc.uses_autoencoder(d) and phase != "dense"
        agg = run.outcomes[0].aggregates[0].reshape(shape).to(out_dtype)
        return self.lgc._result(agg, run.messages, n, phase, self.lgc.leader_of(step, n), used)

    def exchange_group(self, grads: Sequence[Sequence[torch.Tensor]], states: Sequence[Sequence[State]]) -> list[ExchangeResult]:
        """Each tensor on its own (:meth:`exchange`, by the base contract's group exchange)."""
        # the base contract's group exchange, run on the LGC this preset serves (a Compressor; the rounds see its protocol)
        return list(Compressor.exchange_group(cast(Compressor, self.lgc), grads, states))

    def rounds(self, xs: Sequence[torch.Tensor], states: Sequence[State], ctx: Context) -> Generator[Leg, Any, list[torch.Tensor]]:
        """``preset="gcbench"``: each unit's round on its own, one after another; the aggregates."""
        aggs: list[torch.Tensor] = []
        for u, (x, state) in enumerate(zip(xs, states, strict=True)):
            aggs.append((yield from counted_in(self._unit_protocol(u, x, state, ctx), u)))
        return aggs

    def _unit_protocol(self, u: int, x: torch.Tensor, state: State, ctx: Context) -> Generator[Leg, Any, torch.Tensor]:
        """One unit's step for this worker: its legs, error feedback, and the float32 aggregate (the unit's shape)."""
        me, n = ctx.rank, ctx.world
        phase, leader = self.lgc.phase_of(state.step), self.lgc.leader_of(state.step, n)
        shape, dtype = tuple(x.shape), x.dtype
        d = x.numel()
        if d == 0:
            p = self.lgc.compress(x, state)
            yield Send([Message(f"{phase}:empty", me, (), p)], f"{phase}:empty")
            return torch.zeros(shape, dtype=torch.float32, device=x.device)
        corrected = ErrorFeedback.corrected(x.detach().float().reshape(shape), state)
        a = corrected.reshape(-1)
        use_ae = self.lgc.uses_autoencoder(d)
        if phase == "dense":
            agg = yield from self._dense_exchange(u, a, ctx, phase, shape, dtype)
            sent = a  # a dense step leaves no residual
        elif phase == "topk" or not use_ae:
            agg, sent = yield from self._topk_exchange(u, a, state, ctx, phase, leader,
                                                        self._train if phase == "topk" and use_ae else None, shape, dtype)
        elif self.settings["mode"] == "ps":
            agg, sent = yield from self._ps_compressed(u, a, state, ctx, leader, shape, dtype)
        else:
            agg, sent = yield from self._ring_compressed(u, a, state, ctx, leader, shape, dtype)
        ErrorFeedback.update(state, corrected, sent.reshape(shape))
        state.step += 1
        return agg.to(x.device).reshape(shape)

    def _ps_compressed(self, u: int, a: torch.Tensor, state: State, ctx: Context, leader: int, shape: tuple[int, ...],
                       dtype: torch.dtype) -> Generator[Leg, Any, tuple[torch.Tensor, torch.Tensor]]:
        """Phase 3, ps: the leader's latent and indices, everyone's innovation, the server's decoded mean.  (aggregate, sent)

        Three server rounds: the one-time encoder transfer to the leader, the leader's latent and
        indices (the server forwards the indices to the others), every worker's innovation (the
        server decodes and sends the aggregate back).  The leader is rank 0, where the server and
        its autoencoder are.
        """
        me, n, d = ctx.rank, ctx.world, a.numel()
        k = self.lgc.k_of(d)
        win = self.lgc.windows(k)
        coding = self.settings["index_coding"]
        latent_channels = int(self.settings["latent_channels"])
        server: dict[str, Payload] = {}
        yield self._weights_round(state, n, leader, shape, dtype, a.device)

        mine: list[Message] = []
        if me == leader:  # the latent of its values at its own top-k indices, and the indices
            params = self.lgc.autoencoder(state, n, a.device)["params"]
            idx_l = topk_indices_sorted(a, k)
            v_l = a[idx_l]
            s = win.scales(v_l)
            div = torch.where(s > 0, s, torch.ones_like(s))[:, None]
            with torch.no_grad():
                z = ae.encode(params, (win.split(v_l.reshape(1, -1))[0] / div).reshape(win.n, 1, win.length))
            latent = self.wire.msg("latent", torch.cat([f32_bytes(s), f32_bytes(z)]), {"k": k}, shape, dtype)
            mine = [Message("compressed:latent", me, (), latent),
                    Message("compressed:indices", me, (), self.wire.indices(idx_l, d, shape, dtype))]
        got = yield self._leader_round(mine, server, leader, n)
        if me != leader:
            idx_l = self.wire.read_indices(only(got, "compressed:indices"), d, 0)[1]
        pos = topk_indices_sorted(a, k_of(self.settings["innovation_density"], d))
        innovation = self.wire.msg("innovation", sparse(a[pos], pos, d, coding), {"k": int(pos.numel()), "coding": coding},
                                   shape, dtype)
        keep = torch.zeros(d, dtype=torch.bool, device=a.device)
        keep[idx_l] = True
        keep[pos] = True
        sent = torch.where(keep, a, 0.0)  # counted as sent for error feedback

        def serve(rows: list[list[Message]]) -> list[Message]:
            """Decode every worker at the leader's indices from the leader's latent + its innovation, average, send back."""
            params = self.lgc.autoencoder(state, n, a.device)["params"]
            body = body_tensor(server["latent"])
            s_rx = f32_read(body, 0, win.n, "latent")
            z_rx = f32_read(body, 4 * win.n, win.n * latent_channels * win.length // self.lgc.fold, "latent")
            if body.numel() != 4 * win.latent_floats(latent_channels, self.lgc.fold):
                raise PayloadError("lgc latent: body length does not match its geometry")
            z_rx = z_rx.reshape(win.n, latent_channels, win.length // self.lgc.fold)
            _, idx_rx = self.wire.read_indices(server["indices"], d, 0)
            div_rx = torch.where(s_rx > 0, s_rx, torch.ones_like(s_rx))
            inn_k = torch.zeros((n, k), dtype=torch.float32, device=a.device)
            mask_k = torch.zeros((n, k), dtype=torch.bool, device=a.device)
            extras: list[tuple[torch.Tensor, torch.Tensor]] = []
            for w in range(n):
                vals, at = self.wire.read_sparse(only(rows[w], "compressed:innovation"), d)
                where, inside = positions_in(idx_rx, at)
                inn_k[w, where[inside]] = vals[inside]
                mask_k[w, where[inside]] = True
                extras.append((at[~inside], vals[~inside]))
            inn_w = (win.split(inn_k) / div_rx[None, :, None]).reshape(n, win.n, 1, win.length)
            im_w = win.split(mask_k).reshape(n, win.n, 1, win.length)
            with torch.no_grad():  # worker w's values from the leader's latent and w's innovation (its own decoder if per-worker)
                out = torch.stack([ae.decode(ae.decoder_view(params, w), z_rx, inn_w[w], im_w[w]) for w in range(n)])
            recon = win.join(out.reshape(n, win.n, win.length) * s_rx[None, :, None])
            recon = torch.where(mask_k, inn_k, recon)  # exact where sent (also where the scale was 0)
            acc = torch.zeros(d, dtype=torch.float32, device=a.device)
            for w in range(n):
                r = torch.zeros(d, dtype=torch.float32, device=a.device)
                r[idx_rx] = recon[w]
                r[extras[w][0]] = extras[w][1]
                acc += r
            acc /= n
            return [self.wire.pull(acc, idx_rx, torch.unique(torch.cat([e[0] for e in extras])), n, shape, dtype)[1]]

        got = yield ToServer([Message("compressed:innovation", me, (), innovation)], "compressed:innovation", serve)
        pull = only(got, "compressed:pull")
        return ctx.once((u, "aggregate"), lambda: self.wire.read_pull(pull, idx_l, d)), sent

    def _ring_compressed(self, u: int, a: torch.Tensor, state: State, ctx: Context, leader: int, shape: tuple[int, ...],
                         dtype: torch.dtype) -> Generator[Leg, Any, tuple[torch.Tensor, torch.Tensor]]:
        """Phase 3, ring: the leader's indices round the ring, every worker's latent there, ring-summed.  (aggregate, sent)"""
        me, n, d = ctx.rank, ctx.world, a.numel()
        k = self.lgc.k_of(d)
        win = self.lgc.windows(k)
        latent_channels = int(self.settings["latent_channels"])
        params = ctx.once((u, "autoencoder"), lambda: self.lgc.autoencoder(state, device=a.device))["params"]
        ip: Payload | None = None
        if me == leader:
            idx_l = topk_indices_sorted(a, k)
            s = win.scales(a[idx_l])
            coding = self.settings["index_coding"]
            ip = self.wire.msg("indices", torch.cat([f32_bytes(s), codec_torch.encode_indices(idx_l, d, coding, validate=False)]),
                           {"k": k, "coding": coding}, shape, dtype)
        ip = yield from self._ring_broadcast(ip, leader, ctx, "compressed:indices")
        s_rx, idx_rx = self.wire.read_indices(ip, d, win.n)
        div = torch.where(s_rx > 0, s_rx, torch.ones_like(s_rx))[None, :, None]
        # this worker's windows in the group's batch (zeros elsewhere): the encoder's kernels are chosen by the batch
        # shape, and every worker's codes are those of the one batched encoding the simulation always did
        batch = torch.zeros((n, win.n, win.length), device=a.device)
        batch[me] = win.split(a[idx_rx.to(a.device)].reshape(1, -1))[0] / div[0].to(a.device)
        with torch.no_grad():
            z = ae.encode(params, batch.reshape(n * win.n, 1, win.length)).reshape(n, -1)[me]
        total = yield from self._ring_allreduce(z, ctx, "compressed:latent", dtype)

        def decode() -> torch.Tensor:
            zbar = (total / n).reshape(win.n, latent_channels, win.length // self.lgc.fold)
            zeros = torch.zeros((win.n, 1, win.length), device=total.device)
            with torch.no_grad():
                out = ae.decode(params, zbar, zeros, zeros.bool()).reshape(win.n, win.length)
            agg = torch.zeros(d, dtype=torch.float32, device=total.device)
            agg[idx_rx] = win.join((out * s_rx[:, None]).reshape(1, win.n, win.length))[0]
            return agg

        keep = torch.zeros(d, dtype=torch.bool, device=a.device)
        keep[idx_rx.to(a.device)] = True
        return ctx.once((u, "aggregate"), decode), torch.where(keep, a, 0.0)

    def _train(self, rec: dict[str, Any], values: torch.Tensor, inn_vals: torch.Tensor, inn_mask: torch.Tensor, leader: int) -> None:
        """``ae_iters`` optimizer steps of the phase-2 loss on one step's values (N, K) at the leader's indices."""
        n, k = values.shape
        win = self.lgc.windows(k)
        s = win.scales(values[leader])
        div = torch.where(s > 0, s, torch.ones_like(s))[None, :, None]
        x = (win.split(values) / div).reshape(n * win.n, 1, win.length)
        inn = (win.split(inn_vals) / div).reshape(n * win.n, 1, win.length)
        im = win.split(inn_mask).reshape(n * win.n, 1, win.length)
        valid = win.valid(values.device)
        lam = float(self.settings["latent_weight"])
        ps = self.settings["mode"] == "ps"

        def loss_of(params: dict[str, torch.Tensor]) -> torch.Tensor:
            z = ae.encode(params, x)
            zw = z.reshape(n, win.n, *z.shape[1:])
            zbar = zw.mean(0)
            pull = (zw - zbar).pow(2).mean() / (zbar.pow(2).mean() + 1e-12)
            if ps:  # each worker from the leader's latent and its own innovation, as phase 3 decodes
                z_l = zw[leader]
                outs = [ae.decode(ae.decoder_view(params, w), z_l, inn_w, im_w)
                        for w, (inn_w, im_w) in enumerate(zip(inn.reshape(n, win.n, 1, win.length),
                                                              im.reshape(n, win.n, 1, win.length), strict=True))]
                out = torch.stack(outs).reshape(n, win.n, win.length)
                recon = ((out - x.reshape(n, win.n, win.length)).pow(2) * valid).sum() / (n * valid.sum())
            else:  # the mean values from the mean latent, as phase 3 decodes
                zeros = torch.zeros((win.n, 1, win.length), device=values.device)
                out = ae.decode(params, zbar, zeros, zeros.bool()).reshape(win.n, win.length)
                target = x.reshape(n, win.n, win.length).mean(0)
                recon = ((out - target).pow(2) * valid).sum() / valid.sum()
            return (1 - lam) * recon + lam * pull

        self.lgc.optimise(rec, loss_of)
