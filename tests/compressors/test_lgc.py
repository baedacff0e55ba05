"""LGC (reconstructed): phases, exact message sizes, the learned autoencoder, checkpoints, both modes.

Synthetic workers share a slowly changing seeded normal component plus 5% independent noise, the
redundancy LGC is built to exploit.  Sizes are checked against formulas written out here, not
taken from the implementation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gcbench.compressors import lgc as lgc_module
from gcbench.compressors import registry
from gcbench.compressors.check import check_call
from gcbench.compressors.lgc import LGC, SERVER, LGCExchangeResult, phase_summary
from gcbench.compressors.lgc import autoencoder as ae
from gcbench.compressors.registry import decompress
from gcbench.core import codec
from gcbench.core.compressor import ErrorFeedback, State
from gcbench.core.errors import GcbenchError, ParamError, PayloadError
from gcbench.core.payload import Payload
from tests.conftest import recording_legs, same_bits

N = 4
D = 20_000
K = 200  # density 0.01 of D
BD = 15  # ceil(log2 20000): bits of a fixed-width index into the tensor


# one intra-op thread: faster on the shared 2-core machine (conftest.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")


def stream(steps: int, d: int = D, workers: int = N, rho: float = 0.995, noise: float = 0.05, seed: int = 0) -> list[list[torch.Tensor]]:
    """grads[t][w] = shared_t + noise·ε, shared_t an AR(1) walk (corr rho per step) of N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(d, generator=g)
    out = []
    for _ in range(steps):
        shared = rho * shared + math.sqrt(1 - rho**2) * torch.randn(d, generator=g)
        out.append([shared + noise * torch.randn(d, generator=g) for _ in range(workers)])
    return out


def make(**params: object) -> LGC:
    base: dict[str, object] = {"density": 0.01, "dense_steps": 1, "train_steps": 2, "ae_iters": 1}
    base.update(params)
    comp = registry.create("lgc", **base)
    assert isinstance(comp, LGC)
    return comp


def states_for(comp: LGC, workers: int = N) -> list[State]:
    return [comp.init_state(100 + w) for w in range(workers)]


def corrected(grads: list[torch.Tensor], states: list[State]) -> list[torch.Tensor]:
    """Each worker's x + residual before the exchange (what it compresses)."""
    return [ErrorFeedback.corrected(x.float(), s).reshape(-1) for x, s in zip(grads, states, strict=True)]


def top_sorted(v: torch.Tensor, k: int) -> np.ndarray:
    return np.sort(torch.topk(v.abs(), k).indices.numpy())


def msgs(res: LGCExchangeResult, phase: str, sender: int | None = None) -> list[Payload]:
    return [m.payload for m in res.messages if m.phase == phase and (sender is None or m.sender == sender)]


# ----------------------------------------------------------------------------- registry and contract


def test_registered_as_reconstructed_multi_worker() -> None:
    info = registry.get("lgc")
    assert info.reconstructed and info.min_workers == 2
    assert "RECONSTRUCTED" in info.description and "RECONSTRUCTED" in info.paper
    assert "RECONSTRUCTED" in info.flags()
    assert "RECONSTRUCTED" in (lgc_module.__doc__ or "")


@pytest.mark.parametrize("dense_steps", [0, 1])
def test_standalone_topk_phase_meets_the_contract(dense_steps: int) -> None:
    """compress alone in phases 2/3 is top-k (+EF), decodable from the payload by a default instance."""
    comp = make(dense_steps=dense_steps, train_steps=0)
    x = torch.randn(64, 3, 3, 3, generator=torch.Generator().manual_seed(3))
    st = comp.init_state(5)
    st.step = 5  # phase 3
    p = comp.compress(x, st)
    assert p.meta["kind"] == "topk" and p.meta["k"] == math.ceil(0.01 * x.numel())
    out = decompress(Payload.from_bytes(p.to_bytes()))
    idx = torch.topk(x.reshape(-1).abs(), int(p.meta["k"])).indices
    want = torch.zeros(x.numel())
    want[idx] = x.reshape(-1)[idx]
    assert torch.equal(out.reshape(-1), want)
    if dense_steps == 0:
        check_call(comp, x)


def test_standalone_dense_phase_is_fp32() -> None:
    comp = make(dense_steps=3)
    x = torch.randn(1000).to(torch.float16)
    p = comp.compress(x, comp.init_state(0))
    assert p.meta["kind"] == "dense" and p.body_nbytes == 4 * 1000
    assert torch.equal(decompress(p), x)


def test_protocol_messages_refuse_standalone_decoding() -> None:
    comp = make(min_k=1)
    st = states_for(comp)
    for grads in stream(4):
        res = comp.exchange(grads, st)
    assert res.phase == "compressed"
    for kind_phase in ("compressed:latent", "compressed:innovation", "compressed:pull"):
        p = msgs(res, kind_phase)[0]
        with pytest.raises(PayloadError, match="decode only"):
            decompress(Payload.from_bytes(p.to_bytes()))


def test_fewer_than_two_workers_is_a_clear_error() -> None:
    comp = make()
    with pytest.raises(GcbenchError, match="lgc needs at least 2 workers: it exploits redundancy between workers' gradients"):
        comp.exchange([torch.randn(100)], [comp.init_state(0)])


def test_bad_channels_and_window_are_parameter_errors() -> None:
    with pytest.raises(GcbenchError, match="channels"):
        registry.create("lgc", channels="64,x")
    with pytest.raises(GcbenchError, match="window"):
        registry.create("lgc", channels="8,8,8,8,8", window=16)  # 5 layers need windows of >= 32


# ----------------------------------------------------------------------------- the autoencoder


def test_functional_autoencoder_matches_torch_nn_reference() -> None:
    params = ae.init_params(7)
    enc, dec = ae.reference_modules(params)
    x = torch.randn(3, 1, 64, generator=torch.Generator().manual_seed(1))
    z = ae.encode(params, x)
    assert z.shape == (3, 4, 4)  # 4 latent channels × 64/16: K/4 floats
    torch.testing.assert_close(z, enc(x), rtol=1e-5, atol=1e-6)
    inn = torch.zeros(3, 1, 64)
    inn[0, 0, 5] = 2.5
    mask = inn != 0
    out = ae.decode(params, z, inn, mask)
    body = dec(torch.cat([z, ae.fold_innovation(inn, 16)], dim=1))
    torch.testing.assert_close(torch.where(mask, inn, body), out, rtol=1e-5, atol=1e-6)
    assert out[0, 0, 5] == 2.5  # sent values are kept exactly
    # folding is lossless: channel c at position p holds element p·16 + c
    f = ae.fold_innovation(torch.arange(64.0).reshape(1, 1, 64), 16)
    assert f[0, 3, 2] == 2 * 16 + 3


def test_parameter_count_of_the_default_architecture() -> None:
    params = ae.init_params(0)
    enc = sum(params[n].numel() for n in ae.encoder_names(params))
    # Conv1d 1→64→128→256→64 (k3) + 64→4 (k1), weights and biases
    assert enc == (64 * 3 + 64) + (64 * 128 * 3 + 128) + (128 * 256 * 3 + 256) + (256 * 64 * 3 + 64) + (64 * 4 + 4)
    dec = sum(p.numel() for n, p in params.items() if n.startswith("dec"))
    assert dec == (20 * 64 + 64) + (64 * 256 * 3 + 256) + (256 * 128 * 3 + 128) + (128 * 64 * 3 + 64) + (64 * 1 * 3 + 1)


def test_adam_step_matches_torch_optim_adam() -> None:
    params = ae.init_params(3, channels=(8, 8), latent=2)
    ref = {n: torch.nn.Parameter(p.clone()) for n, p in params.items()}
    opt = torch.optim.Adam(list(ref.values()), lr=1e-2, foreach=False)
    state = ae.adam_init(params)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        grads = {n: torch.randn(p.shape, generator=g) for n, p in params.items()}
        ae.adam_step(params, grads, state, lr=1e-2)
        for n, p in ref.items():
            p.grad = grads[n].clone()
        opt.step()
    for n, p in params.items():
        assert torch.equal(p, ref[n].detach()), n
    assert state["step"] == 5


def test_trained_autoencoder_beats_an_untrained_one() -> None:
    """After phase 2, the same compressed step decodes the workers' values better than fresh weights do.

    Error is measured where LGC transmits — the leader's K indices — against the mean of the
    workers' corrected values there; elsewhere the residual dominates and the autoencoder plays
    no part.
    """
    comp = make(dense_steps=2, train_steps=30, ae_iters=8)
    st = states_for(comp)
    steps = stream(34)
    for t in range(32):
        comp.exchange(steps[t], st)
    assert comp.phase_of(st[0].step) == "compressed"
    errs = {}
    for label in ("trained", "fresh"):
        trial = [s.clone() for s in st]
        if label == "fresh":
            trial[0].values["lgc"] = comp.init_autoencoder(12345)
        errs[label] = []
        for t in (32, 33):
            a = corrected(steps[t], trial)
            idx = torch.from_numpy(top_sorted(a[0], K))
            target = (sum(a) / N)[idx]
            res = comp.exchange(steps[t], trial)
            errs[label].append(float((res.aggregate[idx] - target).norm() / target.norm()))
    assert st[0].values["lgc"]["train_updates"] == 30
    # measured 0.87-0.94 trained vs 0.99-1.0 fresh
    assert max(errs["trained"]) < min(errs["fresh"]) - 0.03, errs
    assert max(errs["trained"]) < 0.97, errs


# ----------------------------------------------------------------------------- phases and sizes


@pytest.mark.parametrize("mode", ["ps", "ring"])
def test_phases_switch_at_the_configured_steps(mode: str) -> None:
    comp = make(mode=mode, dense_steps=2, train_steps=3, ae_iters=1)
    st = states_for(comp)
    seen = []
    params_after_training = None
    for t, grads in enumerate(stream(7)):
        res = comp.exchange(grads, st)
        seen.append(res.phase)
        assert {nm.split(":")[0] for nm in res.traffic.phases()} - {"setup"} == {res.phase}
        assert res.leader == (t % N if mode == "ring" else 0)
        if t == 4:
            params_after_training = {n: p.clone() for n, p in st[0].values["lgc"]["params"].items()}
    assert seen == ["dense", "dense", "topk", "topk", "topk", "compressed", "compressed"]
    rec = st[0].values["lgc"]
    assert rec["train_updates"] == 3 and rec["adam"]["step"] == 3
    assert params_after_training is not None
    for n, p in rec["params"].items():  # frozen in phase 3
        assert torch.equal(p, params_after_training[n])
    assert all(s.step == 7 for s in st)


def test_ps_message_sizes_match_the_formulas() -> None:
    k_inn = 2  # innovation_density 1e-4 of 20000
    comp = make(innovation_density=1e-4)
    st = states_for(comp)
    header = None
    for t, grads in enumerate(stream(5)):
        a = corrected(grads, st)
        res = comp.exchange(grads, st)
        for w in range(N):  # traffic is the sum of the real messages' bytes
            own = [m.payload.nbytes for m in res.messages if m.sender == w]
            assert res.traffic.sent(w) == sum(own)
            got = [m.payload.nbytes for m in res.messages if w in m.receivers]
            assert res.traffic.received(w) == sum(got)
        for m in res.messages:
            assert m.payload.nbytes == len(m.payload.to_bytes())
        if t == 0:
            assert res.phase == "dense"
            assert [p.body_nbytes for p in msgs(res, "dense:push")] == [32 * D // 8] * N
            assert msgs(res, "dense:pull")[0].body_nbytes == 32 * D // 8
            header = msgs(res, "dense:push")[0].nbytes - 4 * D
        elif t in (1, 2):
            assert res.phase == "topk"
            assert [p.body_nbytes for p in msgs(res, "topk:push")] == [math.ceil(K * (32 + BD) / 8)] * N
            lead = set(top_sorted(a[0], K).tolist())
            for w in range(1, N):
                missing = len(lead - set(top_sorted(a[w], K).tolist()))
                assert [p.body_nbytes for p in msgs(res, "topk:train", w)] == [32 * missing // 8]
            assert msgs(res, "topk:train", 0) == []
        else:
            assert res.phase == "compressed"
            latent_floats = 4 * 208 // 16 + 1  # one window of L = 208 (200 padded to 16s): codes + scale
            leader = [p.body_nbytes for p in msgs(res, "compressed:latent", 0) + msgs(res, "compressed:indices", 0)
                      + msgs(res, "compressed:innovation", 0)]
            assert leader == [latent_floats * 32 // 8, math.ceil(K * BD / 8), 4 * k_inn + math.ceil(k_inn * BD / 8)]
            for w in range(1, N):
                assert [m.payload.body_nbytes for m in res.messages if m.sender == w] == [4 * k_inn + math.ceil(k_inn * BD / 8)]
            assert sum(p.body_nbytes for p in msgs(res, "setup:weights")) == (4 * sum(
                p.numel() for n, p in st[0].values["lgc"]["params"].items() if n.startswith("enc")) if t == 3 else 0)
    assert header is not None and 0 < header < 40


def test_ring_message_sizes_match_the_formulas() -> None:
    comp = make(mode="ring")
    st = states_for(comp)
    for t, grads in enumerate(stream(5)):
        res = comp.exchange(grads, st)
        if res.phase == "dense":  # ring all-reduce: 2(N-1) chunks per worker, every element 2(N-1) times in all
            ring = [m for m in res.messages if m.phase == "dense:ring"]
            assert len(ring) == 2 * (N - 1) * N
            assert sum(m.payload.body_nbytes for m in ring) == 4 * D * 2 * (N - 1)
        elif res.phase == "topk":
            assert [p.body_nbytes for p in msgs(res, "topk:allgather")] == [math.ceil(K * (32 + BD) / 8)] * N
            for w in range(N):
                assert res.traffic.received(w, "topk:allgather") == sum(p.nbytes for p in msgs(res, "topk:allgather")) - \
                    msgs(res, "topk:allgather", w)[0].nbytes
        else:
            lead = t % N
            bc = [m for m in res.messages if m.phase == "compressed:indices"]
            assert [m.sender for m in bc] == [(lead + j) % N for j in range(N - 1)]  # forwarded along the ring
            assert bc[0].payload.body_nbytes == 4 * 1 + math.ceil(K * BD / 8)  # one window scale + the indices
            z = 4 * 208 // 16
            lat = [m for m in res.messages if m.phase == "compressed:latent"]
            assert sum(m.payload.body_nbytes for m in lat) == 4 * z * 2 * (N - 1)
            assert msgs(res, "setup:weights") == []  # replicas trained identically: no weights move


def test_ring_allreduce_sums_like_a_plain_sum() -> None:
    comp = make(mode="ring")
    vecs = [torch.randn(1001, generator=torch.Generator().manual_seed(w)) for w in range(5)]
    from gcbench.core.protocol import Context, simulate

    run = simulate([comp._ring_allreduce(vecs[w], Context(w, 5), "x", torch.float32) for w in range(5)])
    totals, ring = run.outcomes, run.messages
    torch.testing.assert_close(totals[0], sum(vecs), rtol=1e-6, atol=1e-5)
    assert all(torch.equal(t, totals[0]) for t in totals)  # every worker ends with the same sums, bit for bit
    assert all(m.receivers == ((m.sender + 1) % 5,) for m in ring)  # each message to the next worker on the ring
    assert len(ring) == 2 * 4 * 5 and sum(m.payload.body_nbytes for m in ring) == 4 * 1001 * 2 * 4


def test_phase3_error_feedback_keeps_what_was_not_sent() -> None:
    comp = make(innovation_density=1e-4, dense_steps=0, train_steps=1)
    st = states_for(comp)
    steps = stream(2)
    comp.exchange(steps[0], st)
    a = corrected(steps[1], st)
    res = comp.exchange(steps[1], st)
    assert res.phase == "compressed"
    lead = top_sorted(a[0], K)
    for w in range(N):
        sent = set(lead.tolist()) | set(top_sorted(a[w], 2).tolist())
        keep = torch.ones(D, dtype=torch.bool)
        keep[list(sent)] = False
        want = torch.where(keep, a[w], 0.0)
        assert torch.equal(st[w].tensors["residual"].reshape(-1), want)


def test_small_tensors_keep_topk_in_phase_3() -> None:
    comp = make(min_k=500)  # K = 200 < 500
    st = states_for(comp)
    for grads in stream(4):
        res = comp.exchange(grads, st)
        assert not res.uses_autoencoder
        assert "topk:train" not in res.traffic.phases()
    assert res.phase == "compressed" and set(res.traffic.phases()) == {"compressed:push", "compressed:pull"}
    assert "lgc" not in st[0].values


# ----------------------------------------------------------------------------- checkpoints, modes, zeros


@pytest.mark.parametrize("mode", ["ps", "ring"])
def test_state_dict_round_trip_is_bit_identical(mode: str) -> None:
    comp = make(mode=mode, dense_steps=1, train_steps=3, ae_iters=2)
    st = states_for(comp)
    steps = stream(7)
    for t in range(2):  # stop inside phase 2, mid-training
        comp.exchange(steps[t], st)
    saved = [s.state_dict() for s in st]
    first = [comp.exchange(steps[t], st) for t in range(2, 7)]
    restored = [State.from_state_dict(sd) for sd in saved]
    again = [comp.exchange(steps[t], restored) for t in range(2, 7)]
    assert [r.phase for r in first] == ["topk", "topk", "compressed", "compressed", "compressed"]
    for r1, r2 in zip(first, again, strict=True):
        assert same_bits(r1.aggregate, r2.aggregate)
        assert [m.payload.to_bytes() for m in r1.messages] == [m.payload.to_bytes() for m in r2.messages]
    for n, p in st[0].values["lgc"]["params"].items():
        assert torch.equal(p, restored[0].values["lgc"]["params"][n])


@pytest.mark.parametrize("mode", ["ps", "ring"])
def test_both_modes_give_finite_aggregates_near_the_mean(mode: str) -> None:
    comp = make(mode=mode, dense_steps=1, train_steps=2)
    st = states_for(comp)
    for grads in stream(5):
        a = corrected(grads, st)
        before = [g.clone() for g in grads]
        res = comp.exchange(grads, st)
        assert all(same_bits(g, b) for g, b in zip(grads, before, strict=True)), "exchange modified a worker's gradient"
        assert res.aggregate.shape == grads[0].shape and res.aggregate.dtype == grads[0].dtype
        assert torch.isfinite(res.aggregate).all()
        if res.phase == "dense":
            torch.testing.assert_close(res.aggregate, sum(grads) / N)
        elif res.phase == "topk":  # exactly the mean of the workers' top-k
            want = torch.zeros(D)
            for v in a:
                idx = torch.topk(v.abs(), K).indices
                want[idx] += v[idx]
            torch.testing.assert_close(res.aggregate, want / N, rtol=1e-6, atol=1e-7)
        else:
            assert torch.count_nonzero(res.aggregate) <= K + N * 1


@pytest.mark.parametrize("mode", ["ps", "ring"])
def test_all_zero_gradients_give_zero_aggregates_in_every_phase(mode: str) -> None:
    comp = make(mode=mode, min_k=1)
    st = states_for(comp, 2)
    for _ in range(4):
        res = comp.exchange([torch.zeros(50, 20), torch.zeros(50, 20)], st)
        assert torch.count_nonzero(res.aggregate) == 0 and not torch.isnan(res.aggregate).any()
    assert res.phase == "compressed" and res.uses_autoencoder
    empty = comp.exchange([torch.zeros(3, 0), torch.zeros(3, 0)], st)
    assert empty.aggregate.shape == (3, 0) and all(s.step == 5 for s in st)


def test_half_precision_gradients_aggregate_in_their_dtype() -> None:
    comp = make()
    st = states_for(comp, 2)
    for grads in stream(4, d=3000, workers=2):
        res = comp.exchange([g.to(torch.bfloat16) for g in grads], st)
        assert res.aggregate.dtype == torch.bfloat16 and torch.isfinite(res.aggregate.float()).all()


# ----------------------------------------------------------------------------- run summaries


def test_phase_summary_amortises_over_the_run() -> None:
    comp = make(innovation_density=1e-4)
    st = states_for(comp)
    results = [comp.exchange(g, st) for g in stream(6)]
    summary = phase_summary(results, D)
    assert [summary[p]["steps"] for p in ("dense", "topk", "compressed")] == [1, 2, 3]
    per_step_sent = [sum(m.payload.nbytes for m in r.messages if m.sender != SERVER) / N for r in results]
    assert summary["dense"]["ratio"] == pytest.approx(4 * D / per_step_sent[0])
    assert summary["topk"]["ratio"] == pytest.approx(4 * D / np.mean(per_step_sent[1:3]))
    assert summary["compressed"]["ratio"] == pytest.approx(4 * D / np.mean(per_step_sent[3:]))
    assert summary["overall"]["ratio"] == pytest.approx(4 * D * 6 / sum(per_step_sent))
    enc = sum(p.numel() for n, p in st[0].values["lgc"]["params"].items() if n.startswith("enc"))
    assert summary["setup"]["received_total"] == msgs(results[3], "setup:weights")[0].nbytes
    assert msgs(results[3], "setup:weights")[0].body_nbytes == 4 * enc
    # phase 3 sends far less than top-k, which sends far less than dense
    assert summary["compressed"]["ratio"] > 3 * summary["topk"]["ratio"] > 3 * summary["dense"]["ratio"]
    assert codec.index_width(D) == BD


# ----------------------------------------------------------------------------- the ps decoder trained as it is used


def test_ps_decoder_is_trained_from_the_leaders_latent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Phase 3 decodes every worker from the leader's latent, so phase 2 must train it that way.

    gcbench's v1 decoded each worker from its own latent in training (and the trained decoder then
    did worse than an untrained one in phase 3): every latent the decoder sees in training must be
    the leader's, for every worker's reconstruction.
    """
    comp = make(dense_steps=0, train_steps=2, ae_iters=1)
    st = states_for(comp)
    seen: list[torch.Tensor] = []
    real_decode = ae.decode

    def spy(params: dict[str, torch.Tensor], z: torch.Tensor, inn: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        seen.append(z.detach().clone())
        return real_decode(params, z, inn, mask)

    monkeypatch.setattr(lgc_module.ae, "decode", spy)
    grads = stream(1, seed=3)[0]
    a = corrected(grads, st)
    res = comp.exchange(grads, st)
    assert res.phase == "topk" and st[0].values["lgc"]["train_updates"] == 1
    win = comp.windows(K)
    rows = torch.cat([z.reshape(-1, *z.shape[-2:]) for z in seen])
    assert rows.shape[0] == N * win.n  # one reconstruction per worker and window
    # the leader's latent, computed from its values at its own top-k indices with the weights before the step
    fresh = comp.init_autoencoder(st[0].seed, N)["params"]
    v = a[0][torch.from_numpy(top_sorted(a[0], K))]
    s = win.scales(v)
    z_leader = ae.encode(fresh, (win.split(v.reshape(1, -1))[0] / s[:, None]).reshape(win.n, 1, win.length))
    for w in range(N):
        torch.testing.assert_close(rows[w * win.n:(w + 1) * win.n], z_leader, rtol=1e-5, atol=1e-6)


def test_per_worker_decoders_train_apart_and_send_the_same_bytes() -> None:
    shared, per = make(dense_steps=1, train_steps=3), make(dense_steps=1, train_steps=3, decoders="per-worker")
    runs = {}
    for label, comp in (("shared", shared), ("per", per)):
        st = states_for(comp)
        runs[label] = ([comp.exchange(g, st) for g in stream(6)], st)
    params = runs["per"][1][0].values["lgc"]["params"]
    assert ae.decoder_count(params) == N and ae.decoder_count(runs["shared"][1][0].values["lgc"]["params"]) == 1
    # each worker's decoder learnt from its own values: after training they differ
    assert not torch.equal(params["w0.dec_head.weight"], params["w1.dec_head.weight"])
    # the decoders stay at the server: every message has the same size either way (the encoder goes to the leader)
    for r1, r2 in zip(runs["shared"][0], runs["per"][0], strict=True):
        assert [(m.phase, m.payload.nbytes) for m in r1.messages] == [(m.phase, m.payload.nbytes) for m in r2.messages]
    with pytest.raises(ParamError, match="needs mode='ps'"):
        make(mode="ring", decoders="per-worker")


# ----------------------------------------------------------------------------- presets


def test_presets_fill_their_values_and_reject_mismatches() -> None:
    assert registry.get("lgc").version == 2
    assert registry.create("lgc").params["dense_steps"] is None  # what was asked: the preset's value
    g = registry.create("lgc")
    assert (g.settings["preset"], g.settings["dense_steps"], g.settings["train_steps"], g.settings["optimizer"], g.settings["ae_iters"],
            g.settings["decoders"], g.settings["dense_first"], g.settings["dense_last"]) == ("gcbench", 20, 60, "adam", 8, "shared", 0, 0)
    r = registry.create("lgc", preset="reference")
    assert (r.settings["dense_steps"], r.settings["train_steps"], r.settings["optimizer"], r.settings["ae_iters"], r.settings["decoders"],
            r.settings["dense_first"], r.settings["dense_last"], r.settings["density"], r.settings["innovation_density"],
            r.settings["ae_lr"], r.settings["latent_weight"]) == (200, 300, "sgd", 1, "per-worker", 1, 2, 1e-3, 1e-5, 1e-3, 0.5)
    assert registry.create("lgc", preset="reference", train_steps=7).settings["train_steps"] == 7  # explicit values win
    with pytest.raises(ParamError, match="one decoder per worker"):
        registry.create("lgc", preset="reference", decoders="shared")
    with pytest.raises(ParamError, match=r"only preset='reference'"):
        registry.create("lgc", dense_first=1)
    with pytest.raises(ParamError, match=r"lgc\.preset"):
        registry.create("lgc", preset="paper")


def test_reference_autoencoder_matches_the_torch_nn_layers() -> None:
    params = ae.init_reference_params(5, workers=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        enc, decs, outs = ae.reference_arch_modules(2)  # the same seed: the same default initial weights
    x = torch.randn(3, 1, 100, generator=torch.Generator().manual_seed(2))
    z = ae.reference_encode(params, x)
    assert z.shape == (3, 4, ae.reference_latent_length(100)) and ae.reference_latent_length(100) == 5  # 100→49→24→11→5
    torch.testing.assert_close(z, enc(x), rtol=1e-5, atol=1e-6)
    inn = torch.zeros(1, 1, 100)
    inn[0, 0, 7] = 0.3
    for w in range(2):
        want = outs[w](torch.cat([torch.nn.functional.interpolate(decs[w](z[:1]), size=100), inn], dim=1))
        torch.testing.assert_close(ae.reference_decode(params, w, z[:1], inn), want, rtol=1e-5, atol=1e-6)
    assert ae.REF_MIN_K == 31 and ae.reference_latent_length(30) == 0
    before = torch.get_rng_state()
    ae.init_reference_params(9, 1)
    assert torch.equal(torch.get_rng_state(), before)  # the global generator is left alone


def test_sgd_step_matches_torch_optim_sgd() -> None:
    params = ae.init_reference_params(1, workers=1)
    ref = {n: torch.nn.Parameter(p.clone()) for n, p in params.items()}
    opt = torch.optim.SGD(list(ref.values()), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        grads = {n: torch.randn(p.shape, generator=g) for n, p in params.items()}
        ae.sgd_step(params, grads, 1e-3)
        for n, p in ref.items():
            p.grad = grads[n].clone()
        opt.step()
    for n, p in params.items():
        assert torch.equal(p, ref[n].detach()), n


MODEL = [(40,), (300, 20), (50,), (2000, 10), (64,), (10, 30), (10,)]  # first 1 and last 2 dense in preset=reference


def model_stream(steps: int, workers: int = N, seed: int = 0) -> list[list[list[torch.Tensor]]]:
    """grads[t][w][u]: the shapes of MODEL, the shared-plus-noise structure of :func:`stream`."""
    flat = stream(steps, d=sum(math.prod(s) for s in MODEL), workers=workers, seed=seed)
    out = []
    for row in flat:
        out.append([[t.reshape(s) for t, s in zip(torch.split(g, [math.prod(s) for s in MODEL]), MODEL, strict=True)] for g in row])
    return out


def ref_make(**params: object) -> LGC:
    base: dict[str, object] = {"preset": "reference", "density": 0.01, "innovation_density": 1e-3, "dense_steps": 1, "train_steps": 2}
    base.update(params)
    comp = registry.create("lgc", **base)
    assert isinstance(comp, LGC)
    return comp


def ref_states(comp: LGC, workers: int = N) -> list[list[State]]:
    return [[comp.init_state(1000 * w + u) for u in range(len(MODEL))] for w in range(workers)]


def test_reference_phase2_is_one_sgd_step_of_its_loss() -> None:
    """The whole-model autoencoder trains by one plain SGD step (lr 1e-3) of the re-implementation's loss.

    Recomputed here with ``torch.nn`` layers: every worker's own top-k values of the middle tensors
    concatenated; one randomly drawn worker's latent decoded by every worker's decoder with that
    worker's innovation; 0.5·Σ_w MSE + 0.5·Σ_{i≠j} MSE(z_i, z_j).
    """
    comp = ref_make(dense_steps=0)
    st = ref_states(comp)
    grads = model_stream(1, seed=4)[0]
    res = comp.exchange_group(grads, st)
    assert {r.phase for r in res} == {"topk"} and all("lgc" not in st[w][u].values for w in range(N) for u in range(1, len(MODEL)))
    rec = st[0][0].values["lgc"]
    assert rec["train_updates"] == 1 and rec["draws"] == 1
    mid = [1, 2, 3, 4]
    x, inn = [], []
    for w in range(N):
        vals, innv = [], []
        for u in mid:
            v = grads[w][u].reshape(-1)
            idx = torch.from_numpy(top_sorted(v, math.ceil(0.01 * v.numel())))
            vv = v[idx]
            k_inn = math.ceil(1e-3 * v.numel())
            keep = torch.zeros(vv.numel(), dtype=torch.bool)
            keep[torch.topk(vv.abs(), k_inn).indices] = True
            vals.append(vv)
            innv.append(torch.where(keep, vv, 0.0))
        x.append(torch.cat(vals).reshape(1, 1, -1))
        inn.append(torch.cat(innv).reshape(1, 1, -1))
    fresh = comp.init_autoencoder(st[0][0].seed, N)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(fresh["seed"] % (2**63))
        enc, decs, outs = ae.reference_arch_modules(N)
    modules = torch.nn.ModuleList([enc, *decs, *outs])
    opt = torch.optim.SGD(modules.parameters(), lr=1e-3)
    z = [enc(xi) for xi in x]
    pick = int(np.random.default_rng([fresh["seed"], 0]).integers(N))
    rec_loss = sum(torch.nn.functional.mse_loss(outs[w](torch.cat([torch.nn.functional.interpolate(decs[w](z[pick]), size=x[w].shape[-1]),
                                                                     inn[w]], dim=1)), x[w]) for w in range(N))
    sim = sum(torch.nn.functional.mse_loss(z[i], z[j]) for i in range(N) for j in range(N) if i != j)
    opt.zero_grad()
    (0.5 * rec_loss + 0.5 * sim).backward()
    opt.step()
    enc_convs = [m for m in enc if isinstance(m, torch.nn.Conv1d)]
    torch.testing.assert_close(rec["params"]["ref_enc0.weight"], enc_convs[0].weight.detach(), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(rec["params"]["ref_enc_head.bias"], enc_convs[-1].bias.detach(), rtol=1e-5, atol=1e-7)
    for w in range(N):
        torch.testing.assert_close(rec["params"][f"w{w}.ref_out.weight"], outs[w].weight.detach(), rtol=1e-5, atol=1e-7)
        ups = [m for m in decs[w] if isinstance(m, torch.nn.ConvTranspose1d)]
        torch.testing.assert_close(rec["params"][f"w{w}.ref_dec0.weight"], ups[0].weight.detach(), rtol=1e-5, atol=1e-7)
    assert not torch.equal(rec["params"]["ref_enc0.weight"], fresh["params"]["ref_enc0.weight"])


def test_reference_ps_message_sizes_match_the_formulas() -> None:
    comp = ref_make(dense_steps=1, train_steps=1)
    st = ref_states(comp)
    d = [math.prod(s) for s in MODEL]
    mid = [1, 2, 3, 4]
    ks = {u: math.ceil(0.01 * d[u]) for u in mid}
    kinn = {u: math.ceil(1e-3 * d[u]) for u in mid}
    bits = {u: math.ceil(math.log2(d[u])) for u in mid}
    length = ae.reference_latent_length(sum(ks.values()))
    compressed = 0
    for grads in model_stream(4):
        res = comp.exchange_group(grads, st)
        phase = res[0].phase
        for u in (0, 5, 6):  # the dense tensors: every worker pushes 4·d body bytes in every phase, aggregated exactly
            push = [m for m in res[u].messages if m.sender == 1]
            assert [m.payload.body_nbytes for m in push] == [4 * d[u]], (phase, u)
            torch.testing.assert_close(res[u].aggregate, sum(grads[w][u] for w in range(N)) / N)
        if phase != "compressed":
            continue
        compressed += 1
        msgs = res[1].messages  # whole-model messages are counted in the first middle tensor
        body = {(m.phase, m.sender): m.payload.body_nbytes for m in msgs if m.sender != SERVER}
        assert body[("compressed:latent", 0)] == 4 * 4 * length  # fp32, 4 channels, no scale
        assert body[("compressed:indices", 0)] == sum(codec.packed_nbytes(ks[u], bits[u]) for u in mid)
        inn_body = 4 * sum(kinn.values()) + sum(codec.packed_nbytes(kinn[u], bits[u]) for u in mid)
        assert all(body[("compressed:innovation", w)] == inn_body for w in range(N))
        for w in range(1, N):  # the other workers send their innovation (and the dense tensors) only
            assert res[1].traffic.sent(w) == sum(m.payload.nbytes for m in msgs if m.sender == w)
            assert res[1].traffic.sent_body(w) == inn_body
            assert all(r.traffic.sent(w) == 0 for r in res[2:5])
        assert all(r.aggregate.isfinite().all() for r in res)
    assert compressed == 2


@pytest.mark.parametrize("mode", ["ps", "ring"])
def test_reference_messages_are_counted_in_their_units(mode: str) -> None:
    """Each unit's result counts its own rounds' messages; the rounds over every middle tensor are counted in the first
    middle one's, except the server's aggregate of each middle tensor (ps), counted in that tensor's."""
    comp = ref_make(mode=mode, dense_steps=1, train_steps=1)
    st = ref_states(comp)
    mid = [1, 2, 3, 4]
    phases = []
    for grads in model_stream(4):
        res = comp.exchange_group(grads, st)
        phases.append(res[0].phase)
        for u, r in enumerate(res):
            assert all(m.unit == u for m in r.messages), (r.phase, u)
            assert r.traffic.to_dict() == comp._result(r.aggregate, r.messages, N, r.phase, r.leader, False).traffic.to_dict()
        if res[0].phase != "compressed":
            assert all(r.messages for r in res)  # each tensor its own round
            continue
        whole = {m.phase for m in res[1].messages}
        if mode == "ps":
            assert {"compressed:latent", "compressed:indices", "compressed:innovation", "compressed:pull"} <= whole
            for u in mid[1:]:
                assert [(m.phase, m.sender) for m in res[u].messages] == [("compressed:pull", SERVER)], u
        else:
            assert whole == {"compressed:indices", "compressed:latent"}
            assert all(m.sender != SERVER for m in res[1].messages) and all(res[u].messages == [] for u in mid[1:])
    assert phases == ["dense", "topk", "compressed", "compressed"]


@pytest.mark.parametrize("mode", ["ps", "ring"])
def test_reference_state_dict_round_trip_is_bit_identical(mode: str) -> None:
    comp = ref_make(mode=mode, dense_steps=1, train_steps=2)
    st = ref_states(comp)
    steps = model_stream(6)
    comp.exchange_group(steps[0], st)
    comp.exchange_group(steps[1], st)  # mid-training
    saved = [[s.state_dict() for s in row] for row in st]
    first = [comp.exchange_group(steps[t], st) for t in range(2, 6)]
    restored = [[State.from_state_dict(sd) for sd in row] for row in saved]
    again = [comp.exchange_group(steps[t], restored) for t in range(2, 6)]
    assert [r[0].phase for r in first] == ["topk", "compressed", "compressed", "compressed"]
    for r1, r2 in zip(first, again, strict=True):
        for u1, u2 in zip(r1, r2, strict=True):
            assert same_bits(u1.aggregate, u2.aggregate)
            assert [m.payload.to_bytes() for m in u1.messages] == [m.payload.to_bytes() for m in u2.messages]


def test_gcbench_preset_exchanges_each_tensor_on_its_own() -> None:
    comp = make(dense_steps=1, train_steps=2)
    a, b = ref_states(comp), ref_states(comp)
    for grads in model_stream(4):
        group = comp.exchange_group(grads, a)
        single = [comp.exchange([grads[w][u] for w in range(N)], [b[w][u] for w in range(N)]) for u in range(len(MODEL))]
        for g, s in zip(group, single, strict=True):
            assert same_bits(g.aggregate, s.aggregate)
            assert g.traffic.to_dict() == s.traffic.to_dict()


def test_traffic_bodies_are_the_messages_bodies() -> None:
    comp = make(dense_steps=1, train_steps=1)
    st = states_for(comp)
    for grads in stream(3):
        res = comp.exchange(grads, st)
        for w in range(N):
            own = [m.payload for m in res.messages if m.sender == w]
            assert res.traffic.sent_body(w) == sum(p.body_nbytes for p in own) < res.traffic.sent(w)
    summary = phase_summary([res], D)
    assert summary["compressed"]["body_ratio"] > summary["compressed"]["ratio"]


@pytest.mark.parametrize("preset", ["gcbench", "reference"])
@pytest.mark.parametrize("mode", ["ps", "ring"])
@pytest.mark.parametrize("n", [2, 3])
def test_card_cost_legs_are_the_legs_the_compressed_phase_runs(preset: str, mode: str, n: int) -> None:
    """What the network model prices (the card's cost legs for the mode) is what the protocol yields in phase 3.

    A :class:`ToServer` leg is one ``server`` round; ring mode's :class:`Send` legs come in runs:
    n − 1 hops of the leader's indices (one ``broadcast``), then the 2(n − 1) steps of a ring
    all-reduce of the latents (one ``allreduce``).  Both presets (the reference preset's whole
    model here being one tensor through its autoencoder, no dense tensors: each of those adds its
    own dense round).
    """
    from gcbench.core.protocol import Context, Send, ToServer, simulate

    whole = {"preset": "reference", "dense_first": 0, "dense_last": 0} if preset == "reference" else {}
    comp = make(mode=mode, dense_steps=0, train_steps=1, **whole)
    states = states_for(comp, n)
    legs_seen: list[object] = []
    for grads in stream(2, workers=n):  # the top-k step (trains), then the compressed step recorded below
        legs_seen.clear()
        memo: dict[object, object] = {}
        gens = [comp.worker_protocol([grads[w]], [states[w]], Context(w, n, memo=memo)) for w in range(n)]
        simulate([recording_legs(g, legs_seen) if w == 0 else g for w, g in enumerate(gens)])
    runs: list[tuple[str, str, int]] = []
    for kind, phase in ((type(leg).__name__, leg.phase) for leg in legs_seen):  # type: ignore[attr-defined]
        if runs and runs[-1][:2] == (kind, phase) and kind == Send.__name__:
            runs[-1] = (kind, phase, runs[-1][2] + 1)
        else:
            runs.append((kind, phase, 1))
    legs = registry.get("lgc").resolve_protocol({"mode": mode}).cost
    want = [leg.collective for leg in legs for _ in range(leg.rounds)]
    priced = {(ToServer.__name__, 1): "server", (Send.__name__, n - 1): "broadcast", (Send.__name__, 2 * (n - 1)): "allreduce"}
    assert [priced[(kind, count)] for kind, _, count in runs] == want
    if mode == "ring":
        assert [phase for _, phase, _ in runs] == ["compressed:indices", "compressed:latent"]
