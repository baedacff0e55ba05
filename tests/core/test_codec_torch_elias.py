"""Device-resident Elias-ω streams (:mod:`gcbench.core.codec_torch_elias`) against the host codec.

The writers must produce :mod:`gcbench.core.codec`'s bytes; the parallel reader must return the
host reader's records and bit counts, refuse what it refuses, and stay on the device within its
read budget.  Helpers (and the one-thread fixture) come from ``test_codec_torch``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gcbench.core import codec
from gcbench.core import codec_torch as ct
from gcbench.core.errors import PayloadError
from tests.core.test_codec_torch import SIZES, _one_thread, _records, guarded, t

__all__ = ["_one_thread"]  # the autouse fixture applies here too


@pytest.mark.parametrize(("n", "code"), [(1, "0"), (2, "100"), (3, "110"), (4, "101000"), (16, "10100100000"), (17, "10100100010")])
def test_elias_omega_hand_worked_codes(n: int, code: str) -> None:
    stream = ct.write_records(torch.tensor([[n]]), (0,))
    assert "".join(f"{b:08b}" for b in stream.tolist()) == code + "0" * (-len(code) % 8)  # MSB first, zero padded
    rec, used = ct.read_fields(stream, 1, (0,))
    assert rec.tolist() == [[n]] and used == len(code)


@pytest.mark.parametrize("pattern", [(0,), (0, 1, 0), (5, 0, 12), (1,), (3, 3), (0, 40), (64,)])
def test_write_records_same_bytes_and_read_fields_inverts(pattern: tuple[int, ...]) -> None:
    for seed, count in enumerate(SIZES if pattern == (0,) else SIZES[:-1]):
        recs = _records(np.random.default_rng(seed + 100 * len(pattern)), count, pattern)
        want = codec.write_records(recs, pattern)
        got = ct.write_records(t(recs), pattern)
        assert torch.equal(got, t(want)), (pattern, count)
        padded = torch.cat([got, torch.tensor([0xFF, 0x00], dtype=torch.uint8)])  # trailing bytes are not read
        out, used = ct.read_fields(padded, count, pattern)
        assert torch.equal(out, t(recs)) and used == codec.read_fields(padded.numpy(), count, pattern)[1]


@pytest.mark.parametrize("count", [0, 1, 9, 1000])
def test_write_fields_same_bytes(count: int) -> None:
    rng = np.random.default_rng(count)
    widths = rng.integers(0, 65, size=(count, 5))
    vals = rng.integers(-(2**63), 2**63 - 1, size=(count, 5), dtype=np.int64)  # bits above a width are ignored
    assert torch.equal(ct.write_fields(t(vals), t(widths)), t(codec.write_fields(vals, widths)))


def test_write_records_rejects_non_positive_elias_values() -> None:
    with pytest.raises(ValueError, match="positive"):
        ct.write_records(torch.tensor([[3], [0]]), (0,))
    with pytest.raises(ValueError, match="positive"):
        ct.write_records(torch.tensor([[3, 1], [-5, 0]]), (0, 1))


def test_read_fields_truncated_and_corrupt_raise() -> None:
    stream = ct.write_records(torch.tensor([[1000], [3], [70000]]), (0,))
    with pytest.raises(PayloadError):
        ct.read_fields(stream[:-1], 3, (0,))
    with pytest.raises(PayloadError):
        ct.read_fields(stream, 4, (0,))  # one record more than was written
    code = "10" + "110" + "1100011" + "1" * 100 + "0"  # n: 1 -> 2 -> 6 -> 99 -> a 100-bit value
    bits = code + "0" * (-len(code) % 8)
    body = torch.tensor([int(bits[i : i + 8], 2) for i in range(0, len(bits), 8)], dtype=torch.uint8)
    with pytest.raises(PayloadError):
        codec.read_fields(body.numpy(), 1, (0,))
    with pytest.raises(PayloadError):
        ct.read_fields(body, 1, (0,))


@pytest.mark.parametrize("count", [2**40, 2**62, -1])
def test_read_fields_refuses_counts_the_stream_cannot_hold_before_allocating(count: int) -> None:
    with pytest.raises(PayloadError, match="cannot hold"):
        ct.read_fields(torch.zeros(4, dtype=torch.uint8), count, (0, 1, 0))
    with pytest.raises(PayloadError, match="cannot hold"):
        ct.read_fields(torch.zeros(4, dtype=torch.uint8), count, (7,))


@pytest.mark.parametrize("pattern", [(0,), (0, 1, 0), (2, 0), (0, 64)])
def test_read_fields_agrees_with_host_reader_on_random_bytes(pattern: tuple[int, ...]) -> None:
    """Arbitrary bytes (mostly malformed): accepted by both readers with the same records and bits, or refused by both."""
    rng = np.random.default_rng(len(pattern))
    accepted = 0
    for trial in range(300):
        data = rng.integers(0, 256, size=int(rng.integers(1, 40)), dtype=np.uint8)
        data[rng.random(data.size) < 0.5] = (0x00, 0xFF, 0x55)[trial % 3]
        count = int(rng.integers(0, 30))
        try:
            host: tuple[np.ndarray, int] | None = codec.read_fields(data, count, pattern)
        except PayloadError:
            host = None
        try:
            dev = ct.read_fields(t(data), count, pattern)
        except PayloadError:
            assert host is None, (data.tolist(), count)
            continue
        assert host is not None, (data.tolist(), count)
        assert torch.equal(dev[0], t(host[0])) and dev[1] == host[1]
        accepted += 1
    assert 20 < accepted < 280  # both outcomes were exercised


def test_elias_codecs_stay_on_device_within_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    recs = t(_records(np.random.default_rng(9), 2_000, (0, 1, 0)))
    with guarded(monkeypatch, 1):
        stream = ct.write_records(recs, (0, 1, 0))
    with guarded(monkeypatch, 1):
        ct.read_fields(stream, 2_000, (0, 1, 0))
    with guarded(monkeypatch, 1):
        ct.write_fields(recs, torch.full_like(recs, 5))
    with guarded(monkeypatch, 0):
        ct.read_fields(ct.pack_bits(recs, 8), 1_000, (3, 5))  # fixed widths only: nothing to read back


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 2**63 - 1), max_size=60), st.lists(st.integers(0, 2**7 - 1), min_size=60, max_size=60))
def test_elias_records_property(ns: list[int], small: list[int]) -> None:
    recs = np.array([[n, s] for n, s in zip(ns, small, strict=False)], dtype=np.int64).reshape(-1, 2)
    stream = ct.write_records(t(recs), (0, 7))
    assert torch.equal(stream, t(codec.write_records(recs, (0, 7))))
    out, used = ct.read_fields(stream, len(ns), (0, 7))
    assert torch.equal(out, t(recs)) and used == codec.read_fields(stream.numpy(), len(ns), (0, 7))[1]


def test_read_fields_ignores_long_trailing_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the bits the first ``count`` records can span are decoded speculatively: a short list
    in front of a long tail decodes the same, and the tail is never walked."""
    from gcbench.core import codec_torch_elias as ce

    stream = ct.write_records(torch.tensor([[5], [1], [900]]), (0,))
    tail = torch.full((200_000,), 0xFF, dtype=torch.uint8)  # as a stream, all corrupt
    lanes: list[int] = []
    walk = ce._omega_walk

    def counting(bits: Any, pos: torch.Tensor) -> Any:
        lanes.append(pos.numel())
        return walk(bits, pos)

    monkeypatch.setattr(ce, "_omega_walk", counting)
    out, used = ct.read_fields(torch.cat([stream, tail]), 3, (0,))
    assert out.tolist() == [[5], [1], [900]] and used == ct.read_fields(stream, 3, (0,))[1]
    assert lanes[0] <= 3 * 86 + 1  # the speculative pass over the long stream (then the 3 records are read)


def test_settle_reads_once_and_raises_the_first_failing_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from gcbench.core.codec_torch_elias import settle

    yes, no = torch.tensor(True), torch.tensor(False)
    with guarded(monkeypatch, 0):
        assert settle([], 7) == 7 and settle([]) == 0
    with guarded(monkeypatch, 1):
        assert settle([(no, "a"), (no, "b")], torch.tensor(12)) == 12
    with guarded(monkeypatch, 1):
        assert settle([(no, "a")], 5) == 5
    with pytest.raises(PayloadError, match=r"^b$"):
        settle([(no, "a"), (yes, "b"), (yes, "c")], torch.tensor(3))
    with pytest.raises(ValueError, match=r"^a$"):
        settle([(yes, "a")], error=ValueError)
