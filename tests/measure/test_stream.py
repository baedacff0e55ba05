"""The stream view on the suite's common reference (gcbench.measure.stream: DenseReference, DeliveredStream).

Hand-worked cases: what a case delivers of the dense update, its per-step error and scale-free
error, each worker's delivered fraction, and the momentum filter, checked against the definitions
in docs/metrics.md computed here the slow way.
"""

from __future__ import annotations

import math

import pytest
import torch

from gcbench.measure.fidelity import scaled_error
from gcbench.measure.stream import DeliveredStream, DenseReference, stream_weights


def _grads(steps: int, workers: int, units: int = 2, seed: int = 0) -> dict[tuple[int, int], list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    drift = [torch.randn(50 + 7 * u, generator=gen) for u in range(units)]  # a direction every step shares
    return {(t, w): [d + 0.5 * torch.randn(d.shape, generator=gen) for d in drift] for t in range(steps) for w in range(workers)}


def _reference(grads, steps: int, workers: int, momentum: float) -> DenseReference:
    return DenseReference(lambda t, w: grads[(t, w)], steps, workers, momentum)


def _mean(grads, t: int, workers: int) -> list[torch.Tensor]:
    units = len(grads[(t, 0)])
    return [sum(grads[(t, w)][u] for w in range(workers)) / workers for u in range(units)]


def _flat(tensors) -> torch.Tensor:
    return torch.cat([x.reshape(-1).double() for x in tensors])


def test_stream_weights_sum_of_momentum_updates() -> None:
    assert stream_weights(3, 0.0) == [1.0, 1.0, 1.0]
    assert stream_weights(3, 0.5) == pytest.approx([1.75, 1.5, 1.0])
    # Σ_t u_t with u_t = m·u_{t−1} + x_t equals Σ_s w_s x_s
    xs = [2.0, -1.0, 3.0, 0.5]
    u, total = 0.0, 0.0
    for x in xs:
        u = 0.9 * u + x
        total += u
    assert total == pytest.approx(sum(w * x for w, x in zip(stream_weights(4, 0.9), xs, strict=True)))


def test_dense_reference_is_the_optimizer_on_the_true_mean() -> None:
    steps, workers, m = 4, 3, 0.9
    grads = _grads(steps, workers)
    ref = _reference(grads, steps, workers, m)
    u = None
    running = None
    for t in range(steps):
        mean = _flat(_mean(grads, t, workers))
        u = mean.clone() if u is None else m * u + mean
        running = u.clone() if running is None else running + u
        assert torch.allclose(_flat(ref.dense[t]), u, rtol=1e-5, atol=1e-6)
        assert ref.dense_sq[t] == pytest.approx(float(u.pow(2).sum()), rel=1e-5)
        assert ref.sum_sq[t] == pytest.approx(float(running.pow(2).sum()), rel=1e-5)
    for w in range(workers):  # R^w = Σ_s w_s g^w_s
        expect = sum(wt * _flat(grads[(s, w)]) for s, wt in enumerate(stream_weights(steps, m)))
        assert torch.allclose(_flat(ref.worker_sums[w]), expect, rtol=1e-5, atol=1e-5)
    assert "m=0.9" in ref.describe()
    assert _reference(grads, steps, workers, 0.0).describe() == "dense SGD update"


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sending_everything_delivers_everything(momentum: float) -> None:
    steps, workers = 5, 3
    grads = _grads(steps, workers)
    ref = _reference(grads, steps, workers, momentum)
    s = DeliveredStream(ref, 2, own_momentum=False)
    for t in range(steps):
        s.add_step(t, ref.mean[t], [grads[(t, w)] for w in range(workers)])
    out = s.summary(stateful=False, min_steps=10)
    assert out["delivered"] == pytest.approx(1.0, abs=1e-6)
    assert all(e == pytest.approx(0.0, abs=1e-10) for e in out["per_step_error"])
    assert all(e == pytest.approx(0.0, abs=1e-6) for e in out["per_step_error_scaled"])
    assert out["worker_delivered"] == pytest.approx([1.0] * workers, abs=1e-5)
    assert out["worker_ci"]["n"] == workers
    assert out["enough"] is True  # stateless: the stream length does not matter
    assert out["steps"] == steps


def test_half_of_every_update_delivers_half_and_is_scale_free() -> None:
    steps, workers = 4, 2
    grads = _grads(steps, workers)
    ref = _reference(grads, steps, workers, 0.0)
    s = DeliveredStream(ref, 2, own_momentum=False)
    for t in range(steps):
        s.add_step(t, [0.5 * g for g in ref.mean[t]], [[0.5 * g for g in grads[(t, w)]] for w in range(workers)])
    out = s.summary(stateful=True, min_steps=10)
    assert out["per_step_delivered"] == pytest.approx([0.5] * steps, abs=1e-6)
    assert out["per_step_error"] == pytest.approx([0.25] * steps, abs=1e-6)  # ‖0.5 D − D‖²/‖D‖²
    assert out["per_step_error_scaled"] == pytest.approx([0.0] * steps, abs=1e-6)  # a rescaling recovers D
    assert out["worker_delivered"] == pytest.approx([0.5] * workers, abs=1e-5)
    assert out["enough"] is False  # stateful and 4 < 10 steps: too short to rank


def test_delivered_matches_the_definition_with_momentum() -> None:
    """U_t = m·U_{t−1} + aggregate_t (the suite's optimizer on the aggregate) against D_t, summed over steps."""
    steps, workers, m = 6, 2, 0.9
    grads = _grads(steps, workers, seed=3)
    ref = _reference(grads, steps, workers, m)
    gen = torch.Generator().manual_seed(7)
    aggs = [[g + 0.3 * torch.randn(g.shape, generator=gen) for g in ref.mean[t]] for t in range(steps)]
    s = DeliveredStream(ref, 2, own_momentum=False)
    u = d = None
    sum_err = sum_d = None
    for t in range(steps):
        s.add_step(t, aggs[t], None)
        a, mean = _flat(aggs[t]), _flat(ref.mean[t])
        u = a.clone() if u is None else m * u + a
        d = mean.clone() if d is None else m * d + mean
        sum_err = (u - d) if sum_err is None else sum_err + (u - d)
        sum_d = d.clone() if sum_d is None else sum_d + d
        assert s.delivered[t] == pytest.approx(1 - float(sum_err.norm() / sum_d.norm()), rel=1e-4)
        assert s.error[t] == pytest.approx(float((u - d).pow(2).sum() / d.pow(2).sum()), rel=1e-4)
        cos = float(u @ d / (u.norm() * d.norm()))
        assert s.error_scaled[t] == pytest.approx(1 - cos * cos, rel=1e-3, abs=1e-7)
    assert s.summary(True, 10)["worker_delivered"] is None  # no per-worker contributions given


def test_own_momentum_compressor_is_its_own_update() -> None:
    """A compressor that applies momentum itself (DGC) sends the momentum update: sending exactly it delivers all."""
    steps, workers, m = 5, 2, 0.9
    grads = _grads(steps, workers, seed=5)
    ref = _reference(grads, steps, workers, m)
    own = DeliveredStream(ref, 2, own_momentum=True)
    plain = DeliveredStream(ref, 2, own_momentum=False)
    bufs: list[list[torch.Tensor] | None] = [None] * workers
    for t in range(steps):
        contrib = []
        for w in range(workers):  # each worker's momentum update, as DGC with nothing dropped would send it
            g = grads[(t, w)]
            bufs[w] = [x.clone() for x in g] if bufs[w] is None else [m * b + x for b, x in zip(bufs[w], g, strict=True)]
            contrib.append(bufs[w])
        agg = [sum(c[u] for c in contrib) / workers for u in range(2)]
        own.add_step(t, agg, contrib)
        plain.add_step(t, agg, contrib)  # wrongly filtered a second time: more than the dense update
    assert own.summary(True, 5)["delivered"] == pytest.approx(1.0, abs=1e-5)
    assert own.summary(True, 5)["worker_delivered"] == pytest.approx([1.0] * workers, abs=1e-4)
    assert plain.summary(True, 5)["delivered"] < 0  # momentum applied twice overshoots: worse than sending nothing


def test_a_step_without_contributions_drops_the_worker_view() -> None:
    steps, workers = 3, 2
    grads = _grads(steps, workers)
    ref = _reference(grads, steps, workers, 0.0)
    s = DeliveredStream(ref, 2, own_momentum=False)
    s.add_step(0, ref.mean[0], [grads[(0, w)] for w in range(workers)])
    s.add_step(1, ref.mean[1], None)
    s.add_step(2, ref.mean[2], [grads[(2, w)] for w in range(workers)])
    assert s.summary(False, 10)["worker_delivered"] is None


def test_scaled_error() -> None:
    x = torch.randn(1000, dtype=torch.float64)
    assert scaled_error(float(3 * x @ x), float(9 * x @ x), float(x @ x)) == pytest.approx(0.0, abs=1e-12)
    y = torch.randn(1000, dtype=torch.float64)
    best = float(y @ x / (y @ y))  # the least-squares scale
    expect = float((best * y - x).pow(2).sum() / x.pow(2).sum())
    assert scaled_error(float(y @ x), float(y @ y), float(x @ x)) == pytest.approx(expect, rel=1e-9)
    assert scaled_error(0.0, 0.0, 1.0) == 1.0  # nothing sent: the whole gradient is the error
    assert math.isfinite(scaled_error(-2.0, 1.0, 4.0))


def _stream(grads, contribs, steps: int, workers: list[int], momentum: float, own: bool = False) -> DeliveredStream:
    """The stream of the workers in ``workers`` alone (renumbered from 0), their aggregate the mean of their contributions."""
    sub = {(t, i): grads[(t, w)] for t in range(steps) for i, w in enumerate(workers)}
    stream = DeliveredStream(_reference(sub, steps, len(workers), momentum), len(grads[(0, 0)]), own)
    for t in range(steps):
        cs = [contribs[(t, w)] for w in workers]
        stream.add_step(t, [sum(c[u] for c in cs) / len(cs) for u in range(len(cs[0]))], cs)
    return stream


@pytest.mark.parametrize(("momentum", "own"), [(0.0, False), (0.9, False), (0.9, True)])
def test_leaving_a_worker_out_is_the_stream_of_the_others(momentum: float, own: bool) -> None:
    """Each jackknife value equals the delivered fraction of a stream run without that worker, and the interval is the
    headline ± t(W−1) × √((W−1)/W Σ (d_(−w) − mean)²)."""
    steps, workers = 3, 4
    grads = _grads(steps, workers, seed=4)
    gen = torch.Generator().manual_seed(9)
    contribs = {k: [x * (torch.rand(x.shape, generator=gen) < 0.3) / 0.3 for x in v] for k, v in grads.items()}
    full = _stream(grads, contribs, steps, list(range(workers)), momentum, own)
    loo = full.delivered_jackknife()
    assert loo is not None and len(loo) == workers
    for w in range(workers):
        others = _stream(grads, contribs, steps, [v for v in range(workers) if v != w], momentum, own)
        assert loo[w] == pytest.approx(others.delivered[-1], rel=1e-4, abs=1e-5)
    ci = full.summary(stateful=False, min_steps=1)["delivered_ci"]
    from scipy.stats import t as student

    se = math.sqrt((workers - 1) / workers * sum((v - sum(loo) / workers) ** 2 for v in loo))
    assert ci["mean"] == full.delivered[-1] and ci["n"] == workers and ci["se_mean"] == pytest.approx(se)
    assert ci["hi"] - ci["mean"] == pytest.approx(student.ppf(0.975, workers - 1) * se)
    assert ci["lo"] < ci["mean"] < ci["hi"]


def test_no_interval_without_the_workers_contributions_or_with_one_worker() -> None:
    grads = _grads(2, 1)
    one = _stream(grads, grads, 2, [0], 0.0)
    assert one.delivered_jackknife() is None and one.summary(False, 1)["delivered_ci"] is None
    grads = _grads(2, 2)
    hidden = DeliveredStream(_reference(grads, 2, 2, 0.0), 2, False)
    for t in range(2):
        hidden.add_step(t, _mean(grads, t, 2), None)  # a protocol whose aggregate is not the workers' mean (PowerSGD)
    assert hidden.summary(False, 1)["delivered_ci"] is None


def test_the_jackknifes_kernel_pass_equals_the_torch_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The leave-one-out values from the numba Gram pass (one float32 read per tensor) equal the float64 torch pass's
    (which took 17 times as long on 30M elements and two workers)."""
    import gcbench.measure.stream as stream_module
    from gcbench import kernels

    if not kernels.available():
        pytest.skip("numba kernels unavailable")
    steps, workers = 3, 4
    grads = _grads(steps, workers, seed=5)
    gen = torch.Generator().manual_seed(3)
    contribs = {k: [x * (torch.rand(x.shape, generator=gen) < 0.3) / 0.3 for x in v] for k, v in grads.items()}
    stream = _stream(grads, contribs, steps, list(range(workers)), 0.9, False)
    fast = stream.delivered_jackknife()
    calls: list[int] = []
    monkeypatch.setattr(stream_module, "_fast", lambda *t: calls.append(len(t)) and False)
    stream._gram_cache = None  # the Gram matrices are kept after the last step: take them again the slow way
    slow = stream.delivered_jackknife()
    assert calls and fast is not None and slow is not None
    assert fast == pytest.approx(slow, rel=1e-12, abs=1e-12)


def test_worker_delivered_from_the_grams_diagonal_equals_the_direct_sums() -> None:
    """Each worker's delivered fraction, read off the jackknife's Gram matrix (one pass serves both figures), equals
    1 − ‖Σ_s w_s C^w_s − R^w‖/‖R^w‖ summed directly in float64."""
    from gcbench.measure.casemath import norm_ratio

    steps, workers = 3, 3
    grads = _grads(steps, workers, seed=7)
    gen = torch.Generator().manual_seed(4)
    contribs = {k: [x * (torch.rand(x.shape, generator=gen) < 0.5) / 0.5 for x in v] for k, v in grads.items()}
    stream = _stream(grads, contribs, steps, list(range(workers)), 0.9, False)
    got = stream.worker_delivered()
    want = []
    for sums, ref, ref_sq in zip(stream._workers, stream.ref.worker_sums, stream.ref.worker_sum_sq, strict=True):
        e_sq = sum(float(((a.double() - b.double()) ** 2).sum()) for a, b in zip(sums, ref, strict=True))
        want.append(1.0 - norm_ratio(e_sq, ref_sq))
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert stream._gram_cache is not None  # the jackknife that follows reuses the pass
    assert len(stream.delivered_jackknife()) == workers


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_stream_stats_from_the_common_step_equal_their_own_passes(momentum: float) -> None:
    """Where the dense update is the true mean (no momentum), StreamStats takes the aggregate's fidelity and drift from
    the DeliveredStream's passes (CommonStep) instead of making them again: every figure equals its own passes'; with
    momentum there is no common step and StreamStats makes its own."""
    from gcbench.measure.casemath import StreamStats

    steps, workers = 4, 3
    grads = _grads(steps, workers, seed=11)
    gen = torch.Generator().manual_seed(6)
    contribs = {k: [x * (torch.rand(x.shape, generator=gen) < 0.4) / 0.4 for x in v] for k, v in grads.items()}
    ref = _reference(grads, steps, workers, momentum)
    stream = DeliveredStream(ref, 2, False)
    own, shared = StreamStats(2, stateful=True, windowed=True), StreamStats(2, stateful=True, windowed=True)
    commons = []
    for t in range(steps):
        cs = [contribs[(t, w)] for w in range(workers)]
        agg = [sum(c[u] for c in cs) / workers for u in range(2)]
        refs = [grads[(t, w)] for w in range(workers)]
        stream.add_step(t, agg, cs)
        common = stream.common_step(t)
        commons.append(common)
        args = (refs, agg, cs[0], [1, 1], None)
        own.add_step(*args, window_start=t == 2, true_means=ref.mean[t])
        shared.add_step(*args, window_start=t == 2, true_means=ref.mean[t], common=common)
    assert all(c is None for c in commons) if momentum else all(c is not None for c in commons)
    assert shared.agg_drift == pytest.approx(own.agg_drift, rel=1e-12)
    assert shared.agg_cosine == pytest.approx(own.agg_cosine, rel=1e-12)
    assert shared.window_drift == own.window_drift and shared.drift == own.drift
    for a, b in zip(shared.agg, own.agg, strict=True):
        assert [f.err_sq_mean for f in a] == pytest.approx([f.err_sq_mean for f in b], rel=1e-12)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_a_one_step_stream_sums_each_worker_without_copying_and_agrees_with_the_definition(momentum: float) -> None:
    """One step: each worker's sum is its contribution itself (no copy); its delivered fraction and the jackknife are
    the definitions' 1 − ‖C^w − g^w‖/‖g^w‖, and nothing the caller passed is changed."""
    workers = 3
    grads = _grads(1, workers, seed=4)
    ref = _reference(grads, 1, workers, momentum)
    gen = torch.Generator().manual_seed(9)
    contrib = [[0.5 * g + 0.1 * torch.randn(g.shape, generator=gen) for g in grads[(0, w)]] for w in range(workers)]
    kept = [[c.clone() for c in cs] for cs in contrib]
    agg = [sum(contrib[w][u] for w in range(workers)) / workers for u in range(2)]
    s = DeliveredStream(ref, 2, own_momentum=False)
    s.add_step(0, agg, contrib)
    assert all(a is b for w in range(workers) for a, b in zip(s._workers[w], contrib[w], strict=True))  # type: ignore[index]
    out = s.summary(stateful=False, min_steps=1)
    for w in range(workers):
        err = _flat(contrib[w]) - _flat(grads[(0, w)])
        expect = 1.0 - math.sqrt(float(err.pow(2).sum()) / float(_flat(grads[(0, w)]).pow(2).sum()))
        assert out["worker_delivered"][w] == pytest.approx(expect, rel=1e-9, abs=1e-12)
    for w in range(workers):  # leave one worker out: the mean of the others' errors against the mean of their R
        keep = [v for v in range(workers) if v != w]
        e = sum(_flat(contrib[v]) - _flat(grads[(0, v)]) for v in keep)
        r = sum(_flat(grads[(0, v)]) for v in keep)
        assert out["delivered_jackknife"][w] == pytest.approx(1.0 - math.sqrt(float(e.pow(2).sum()) / float(r.pow(2).sum())),
                                                              rel=1e-9, abs=1e-12)
    assert all(torch.equal(a, b) for w in range(workers) for a, b in zip(contrib[w], kept[w], strict=True))
