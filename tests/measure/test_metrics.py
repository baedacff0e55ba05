"""Fidelity estimators checked against closed forms; timing harness behaviour."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

from gcbench.compressors import registry
from gcbench.measure.fidelity import bits_per_element, delta_beznosikov, fidelity, mean_ci, pooled, ratio
from gcbench.measure.timing import (
    BEATS_BOUND,
    TOO_SHORT,
    UNSTABLE,
    TimingPolicy,
    calibration_done,
    flat_like,
    median_ci,
    rel_ci,
    rel_iqr,
    time_call,
    time_interleaved,
    timing_flags,
)


def _x(n: int = 4000, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(n).astype(np.float32))


def _compress_r(name: str, x: torch.Tensor, r: int, **params) -> list[torch.Tensor]:
    c = registry.create(name, **params)
    return [c.compress_and_decode(x, c.init_state(seed))[1] for seed in range(r)]


def test_topk_zero_variance_and_q_is_dropped_energy() -> None:
    x = _x()
    decs = _compress_r("topk", x, 4, density=0.1)
    f = fidelity(x, decs)
    k = math.ceil(0.1 * x.numel())
    kept = torch.topk(x.abs(), k).values
    dropped = float((x.double() ** 2).sum() - (kept.double() ** 2).sum()) / float((x.double() ** 2).sum())
    assert f.variance == pytest.approx(0.0, abs=1e-12)
    assert f.q == pytest.approx(dropped, rel=1e-6)
    assert f.bias2 == pytest.approx(dropped, rel=1e-6)  # deterministic: all error is bias
    assert f.to_dict()["delta"] == pytest.approx(1 / (1 - dropped))


def test_randomk_omega_hat_matches_theory_within_ci() -> None:
    x = _x(2000, 1)
    d, density = x.numel(), 0.05
    k = math.ceil(density * d)
    f = fidelity(x, _compress_r("randomk", x, 400, density=density))
    ci = mean_ci(f.q_samples, 0.99)
    omega = d / k - 1
    assert ci["lo"] <= omega <= ci["hi"], (ci, omega)
    # unbiased: the bias estimate is within a few standard errors of zero
    assert abs(f.bias2) < 4 * f.bias_sq_se / f.x_sq + 1e-3


def test_qsgd_variance_below_bound() -> None:
    x = _x(512, 2)
    s = 4
    f = fidelity(x, _compress_r("qsgd", x, 200, s=s, bucket=512, norm="2"))
    bound = min(512 / s**2, math.sqrt(512) / s)
    assert f.variance < bound
    assert f.variance > 0


def test_biased_compressor_detected_as_biased() -> None:
    """A randomk without its d/k scale is biased: bias² is many standard errors above zero."""
    x = _x(2000, 3)
    decs = [d * (50 / 2000) for d in _compress_r("randomk", x, 100, density=50 / 2000)]
    f = fidelity(x, decs)
    assert f.bias_sq_se is not None
    assert f.bias_sq > 10 * f.bias_sq_se
    # and the unscaled version's bias is the expected (1 - k/d)^2 ‖x‖²
    assert f.bias2 == pytest.approx((1 - 50 / 2000) ** 2, rel=0.05)


def test_zero_input_gives_none_not_nan() -> None:
    z = torch.zeros(10)
    f = fidelity(z, [z.clone()])
    assert f.q is None and f.bias2 is None and f.cosine is None
    assert pooled([f])["q"] is None


def test_pooled_is_energy_weighted() -> None:
    a, b = torch.ones(4), 10 * torch.ones(4)
    fa, fb = fidelity(a, [torch.zeros(4)]), fidelity(b, [b.clone()])
    assert fa.q == 1.0 and fb.q == 0.0
    assert pooled([fa, fb])["q"] == pytest.approx(4 / (4 + 400))


def test_size_helpers_and_delta() -> None:
    assert ratio(1000, 125) == 32.0
    assert bits_per_element(1000, 125) == 1.0
    assert ratio(10, 0) is None
    assert delta_beznosikov(0.5) == 2.0
    assert delta_beznosikov(1.0) is None


def test_time_call_respects_repeats_warmup_and_setup() -> None:
    calls = {"fn": 0, "setup": 0}
    t = time_call(lambda: calls.__setitem__("fn", calls["fn"] + 1), repeats=5, warmup=2,
                  setup=lambda: calls.__setitem__("setup", calls["setup"] + 1))
    assert len(t.samples) == 5 and calls["fn"] == 7 and calls["setup"] == 7
    assert t.median > 0 and t.iqr >= 0


# ----------------------------------------------------------------------------- interleaved, calibrated timing


class FakeClock:
    """A clock that moves only when a timed function says how long it took."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def takes(self, durations: list[float]) -> Callable[[], None]:
        """A function whose n-th call lasts ``durations[n % len(durations)]`` seconds of this clock."""
        calls = {"n": 0}

        def fn() -> None:
            self.now += durations[calls["n"] % len(durations)]
            calls["n"] += 1

        return fn


QUIET = TimingPolicy(warmup=2, min_rounds=5, max_rounds=40, budget_s=100.0)


def test_interleaved_rounds_pair_copy_and_kernels_and_stop_when_stable() -> None:
    clock, order = FakeClock(), []
    copy = clock.takes([0.010])
    comp = clock.takes([0.030])
    rounds = time_interleaved(lambda: (order.append("c"), copy()), {"compress": lambda: (order.append("k"), comp())}, QUIET,
                              setup=lambda: order.append("s"), clock=clock, load=lambda: 0.1)
    assert order[:6] == ["s", "c", "k", "s", "c", "k"]  # setup, copy, kernel, round after round
    assert rounds.stopped == "stable" and len(rounds.copy) == QUIET.min_rounds  # identical rounds: stable at once
    assert len(order) == 3 * (QUIET.warmup + QUIET.min_rounds)  # warm-up rounds run but are not kept
    assert rounds.x_copy("compress") == pytest.approx([3.0] * 5)
    assert rounds.load_per_core == 0.1


def test_load_that_hits_both_alike_cancels_in_the_per_round_ratio() -> None:
    """Rounds 2x slower at random (load) move copy and kernel together: x-copy stays put, raw times do not."""
    clock = FakeClock()
    slow = [1.0, 2.0, 1.0, 1.0, 2.0, 2.0, 1.0, 2.0]
    copy = clock.takes([0.01 * s for s in slow])
    comp = clock.takes([0.04 * s for s in slow])
    r = time_interleaved(copy, {"compress": comp}, QUIET, clock=clock, load=lambda: None)
    assert rel_iqr(r.kernels["compress"]) > 0.25  # the raw times spread …
    assert rel_iqr(r.x_copy("compress")) == pytest.approx(0.0)  # … their ratio does not
    assert r.stopped == "stable"


def test_calibration_goes_on_while_unstable_until_max_rounds_or_budget() -> None:
    noisy = {"compress": [1.0, 3.0, 1.0, 3.0, 1.0, 3.0]}
    assert calibration_done({"compress": [2.0] * 4}, 0.0, QUIET) is None  # under min_rounds
    assert calibration_done({"compress": [2.0] * 5}, 0.0, QUIET) == "stable"
    assert calibration_done(noisy, 0.0, QUIET) is None
    assert calibration_done(noisy, 100.0, QUIET) == "budget"
    assert calibration_done(noisy, 0.0, TimingPolicy(min_rounds=5, max_rounds=6)) == "max rounds"
    # every kernel must be stable, not just one
    assert calibration_done({"compress": [2.0] * 6, "decompress": noisy["compress"]}, 0.0, QUIET) is None
    clock = FakeClock()
    policy = TimingPolicy(min_rounds=5, max_rounds=12, budget_s=100)
    r = time_interleaved(clock.takes([0.01]), {"compress": clock.takes([0.01, 0.03])}, policy, clock=clock, load=lambda: None)
    assert r.stopped == "max rounds" and len(r.copy) == 12


def test_flags_unstable_by_spread_or_load_too_short_and_beating_the_traffic_bound() -> None:
    p = TimingPolicy()
    steady = [2.0, 2.05, 1.95, 2.0, 2.02]
    assert timing_flags(steady, 0.01, 0.3, p, bound_x_copy=0.5) == []
    assert timing_flags([1.0, 3.0, 1.0, 3.0, 2.0], 0.01, 0.3, p) == [UNSTABLE]  # IQR 2 over median 2
    assert timing_flags(steady, 0.01, p.load_per_core + 0.5, p) == [UNSTABLE]  # loaded machine
    assert timing_flags(steady, 0.01, None, p) == []  # no load average on this platform: judged on spread only
    assert timing_flags(steady, p.resolution_s / 2, 0.3, p) == [TOO_SHORT]
    # top-k must read its input once (4 of the copy's 8 bytes per element): 0.2x a copy is not a speed
    assert timing_flags([0.2, 0.21, 0.19], 0.01, 0.3, p, bound_x_copy=0.5) == [BEATS_BOUND]
    # the identity compressor at the bound, within noise, is not flagged: only a clear beat is
    assert timing_flags([0.97, 1.01, 1.03, 0.99], 0.01, 0.3, p, bound_x_copy=1.0) == []


def test_median_ci_is_the_order_statistic_interval() -> None:
    assert median_ci([]) is None
    assert median_ci([3.0, 1.0, 2.0, 5.0, 4.0]) == (1.0, 5.0)  # n ≤ 5: the whole range
    # n = 100: ranks ⌊50 − 1.96·5⌋ = 40 and ⌈50 + 9.8⌉ − 1 = 59 (0-based), a 95% interval by the binomial(100, ½)
    assert median_ci([float(v) for v in range(100)]) == (40.0, 59.0)
    assert rel_ci([2.0]) is None


def test_more_rounds_pin_a_scattered_median_down() -> None:
    """The flag is about the median's precision: the same scatter is unstable over 6 rounds, not over 400."""
    pattern = [1.6, 2.4, 1.8, 2.2, 2.0]
    few = [*pattern, 1.7]
    many = pattern * 80
    p = TimingPolicy()
    assert timing_flags(few, 0.01, 0.3, p) == [UNSTABLE]
    assert timing_flags(many, 0.01, 0.3, p) == []
    assert rel_iqr(many) > 0.15  # the rounds themselves stay as scattered


def test_flat_like_lays_tensors_out_in_one_buffer() -> None:
    xs = [torch.ones(3, 4), torch.ones(5), torch.ones(()), torch.ones(0, 2), torch.ones(2_500_000)]
    out = flat_like(xs)
    assert [o.shape for o in out] == [x.shape for x in xs] and all(o.dtype == torch.float32 for o in out)
    base = out[0].untyped_storage().data_ptr()
    assert all(o.untyped_storage().data_ptr() == base for o in out)  # one buffer
    starts = [o.storage_offset() for o in out]
    assert starts == [sum(x.numel() for x in xs[:i]) + starts[0] for i in range(len(xs))]  # back to back, no overlap
    assert all(x.data_ptr() != o.data_ptr() for x, o in zip(xs, out, strict=True) if x.numel())


def test_flat_like_of_mixed_dtypes_allocates_each() -> None:
    xs = [torch.ones(3), torch.ones(4, dtype=torch.float16)]
    out = flat_like(xs)
    assert [(o.shape, o.dtype) for o in out] == [(x.shape, x.dtype) for x in xs]
    assert out[0].untyped_storage().data_ptr() != out[1].untyped_storage().data_ptr()
    assert flat_like([]) == []
