"""LGC (reconstructed): phases, exact message sizes, the learned autoencoder, checkpoints, both modes.

Synthetic workers share a slowly changing seeded normal component plus 5% independent noise, the
redundancy LGC is built to exploit.  Sizes are checked against formulas written out here, not
taken from the implementation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from gcbench import codec, registry
from gcbench.compressor import ErrorFeedback, State, decompress
from gcbench.compressors import _lgc_ae as ae
from gcbench.compressors import lgc as lgc_module
from gcbench.compressors.lgc import LGC, SERVER, LGCExchangeResult, phase_summary
from gcbench.errors import GcbenchError, PayloadError
from gcbench.payload import Payload
from tests.conftest import same_bits
from tests.test_contract import check_contract

N = 4
D = 20_000
K = 200  # density 0.01 of D
BD = 15  # ceil(log2 20000): bits of a fixed-width index into the tensor


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """One intra-op thread: faster on the shared 2-core machine, and the same numbers every run."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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
        check_contract(comp, x)


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
    total, ring = comp._ring_allreduce(vecs, "x", torch.float32)
    torch.testing.assert_close(total, sum(vecs), rtol=1e-6, atol=1e-5)
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
