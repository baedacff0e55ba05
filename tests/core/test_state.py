"""State.clone: a deep copy, with the generator copied by copy_generator (not deepcopy's pickle round trip)."""

from __future__ import annotations

import copy

import numpy as np
import torch

from gcbench.core.state import State, copy_generator
from gcbench.measure.plan_case import PlanState


def _used_state() -> State:
    s = State(5)
    s.rng.random(3)
    s.rng.integers(0, 7, 5, dtype=np.uint32)  # leaves a cached 32-bit half in the bit generator's state
    s.tensors["residual"] = torch.arange(6.0)
    s.tensors["tail"] = s.tensors["residual"][2:]  # a view of another state tensor
    s.values["warm"] = [1, 2]
    s.step = 4
    return s


def test_clone_draws_what_deepcopy_draws() -> None:
    s = _used_state()
    a, b = s.clone(), copy.deepcopy(s)
    assert a.rng is not s.rng
    assert a.rng.bit_generator.state == s.rng.bit_generator.state
    assert np.array_equal(a.rng.random(10), b.rng.random(10))
    assert np.array_equal(a.rng.integers(0, 9, 7, dtype=np.uint32), b.rng.integers(0, 9, 7, dtype=np.uint32))
    assert (a.seed, a.step) == (5, 4)


def test_clone_is_independent_and_keeps_views() -> None:
    s = _used_state()
    c = s.clone()
    c.tensors["residual"][0] = 9.0
    c.values["warm"].append(3)
    c.rng.random(100)
    assert s.tensors["residual"][0] == 0.0 and s.values["warm"] == [1, 2]
    assert c.tensors["tail"][0] == c.tensors["residual"][2]  # still a view of its own residual
    c.tensors["residual"][2] = -1.0
    assert c.tensors["tail"][0] == -1.0 and s.tensors["tail"][0] == 2.0
    assert s.rng.bit_generator.state == _used_state().rng.bit_generator.state


def test_subclass_and_nested_states_clone_deeply() -> None:
    inner = _used_state()
    p = PlanState(1, inner)
    q = p.clone()
    assert type(q) is PlanState and q.rule == 1
    assert q.inner is not inner and q.inner.rng is not inner.rng
    assert q.inner.rng.random() == inner.rng.random()


def test_copy_generator_other_bit_generators() -> None:
    for bit in (np.random.Philox(3), np.random.SFC64(3), np.random.MT19937(3)):
        g = np.random.Generator(bit)
        g.random(2)
        h = copy_generator(g)
        assert type(h.bit_generator) is type(bit) and np.array_equal(h.random(5), g.random(5))
