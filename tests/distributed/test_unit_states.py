"""States across DDP's bucket rebuild (gcbench/distributed/unit_states.py): each unit's state follows its parameters."""

from __future__ import annotations

import torch

from gcbench.core.compressor import State
from gcbench.distributed.unit_states import Part, StatePlaces


def _state(step: int, **tensors: torch.Tensor) -> State:
    st = State(seed=step)
    st.step = step
    st.tensors = dict(tensors)
    return st


def test_a_parameter_that_was_its_own_unit_keeps_its_state_object() -> None:
    places = StatePlaces()
    a, b = _state(3, residual=torch.ones(2, 3)), _state(3, residual=torch.zeros(4))
    places.record([[Part("w", 0, 6)], [Part("b", 0, 4)]], [6, 4], [a, b])
    fresh = State(99)
    assert places.carry([Part("b", 0, 4)], 4, fresh) is b and places.carry([Part("w", 0, 6)], 6, fresh) is a
    assert places.carry([Part("new", 0, 4)], 4, fresh) is None  # never seen: the caller keeps (and counts) the fresh one


def test_a_flat_bucket_is_assembled_slice_by_slice_into_the_new_layout() -> None:
    """Old: one bucket [w (6) | gap (2) | b (4)]; new: b first at offset 0, then w at offset 4 (no gap)."""
    places = StatePlaces()
    old_res = torch.arange(12, dtype=torch.float32)
    old_mom = -torch.arange(12, dtype=torch.float32)
    old = _state(5, residual=old_res, momentum=old_mom)
    places.record([[Part("w", 0, 6), Part("b", 8, 4)]], [12], [old])
    fresh = State(7)
    new = places.carry([Part("b", 0, 4), Part("w", 4, 6)], 10, fresh)
    assert new is fresh and new.step == 5 and new.seed == 7  # its own seed and stream, the sources' step
    assert torch.equal(new.tensors["residual"], torch.cat([old_res[8:12], old_res[0:6]]))
    assert torch.equal(new.tensors["momentum"], torch.cat([old_mom[8:12], old_mom[0:6]]))
    # from two old buckets into one new one with a gap: zeros in the gap
    places = StatePlaces()
    places.record([[Part("w", 0, 6)], [Part("b", 0, 4)]], [6, 4],
                  [_state(2, residual=torch.full((6,), 1.0)), _state(2, residual=torch.full((4,), 2.0))])
    merged = places.carry([Part("w", 0, 6), Part("b", 8, 4)], 12, State(1))
    assert merged is not None and merged.tensors["residual"].tolist() == [1.0] * 6 + [0.0, 0.0] + [2.0] * 4


def test_states_that_cannot_be_assembled_are_refused() -> None:
    def refused(*sources: State) -> bool:
        places = StatePlaces()
        places.record([[Part("w", 0, 6)], [Part("b", 0, 4)]], [6, 4], list(sources))
        return places.carry([Part("w", 0, 6), Part("b", 6, 4)], 10, State(0)) is None

    ok = (_state(2, residual=torch.zeros(6)), _state(2, residual=torch.zeros(4)))
    assert not refused(*ok)
    assert refused(_state(2, residual=torch.zeros(6)), _state(3, residual=torch.zeros(4)))  # different steps
    assert refused(_state(2, residual=torch.zeros(6)), _state(2, momentum=torch.zeros(4)))  # different tensors
    assert refused(_state(2, q=torch.zeros(3, 2)), _state(2, q=torch.zeros(4, 2)))  # not element-aligned (PowerSGD's Q)
    with_value = _state(2, residual=torch.zeros(4))
    with_value.values["warm"] = True
    assert refused(_state(2, residual=torch.zeros(6)), with_value)  # small values belong to a whole unit
