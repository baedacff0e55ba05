"""The simulation is the real thing: every compressor's protocol on real gloo groups vs the simulated transport.

Each spawned worker runs every registered compressor's :meth:`worker_protocol` for three steps on
the ``torch.distributed`` transport, and also simulates the whole group in-process on the same
inputs and seeds (inputs depend on worker and step only, so every process can recompute every
worker's).  Per step, per leg and worker, the bytes the real transport counted must equal the
simulated ones, and the aggregate must be the simulated one: bit for bit, except where a leg sums
in the wire dtype in the collective's own order (casts, PowerSGD's float32 factors).

LGC runs at its defaults (its dense phase) and, shortened, through all three of its phases in
both modes (:data:`PHASED`): its parameter server's rounds, ring all-reduces of chunk payloads, the
ring broadcast of the leader's indices and the autoencoder's training all run on both transports;
so does its reference preset, whose protocol spans the whole model (:data:`REFERENCE_SHAPES`).

One spawn per group size (2 and 3 processes) runs all compressors: process start-up dominates.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gcbench.compressors import registry
from gcbench.core.compressor import Compressor, State
from gcbench.core.protocol import Context, simulate
from gcbench.distributed.transport import ChainTimes, TorchTransport, drive
from gcbench.train.workers import WorkerContext, run_group

SHAPES = [(24, 20), (7,), (3, 40)]  # a matrix PowerSGD compresses, a vector it sends dense, a 1-bit stripe per worker
STEPS = 3
#: LGC through its phases (dense, top-k while the autoencoder trains, compressed twice: with and without the
#: one-time encoder transfer); density 0.2 gives the (24, 20) tensor K = 96 >= min_k, so it uses the autoencoder,
#: while the others keep top-k in phase 3
LGC_PHASES = {"density": 0.2, "dense_steps": 1, "train_steps": 1, "ae_iters": 1}
PHASED = {f"lgc:{mode}": ("lgc", {**LGC_PHASES, "mode": mode}, 4) for mode in ("ps", "ring")}
PHASED["lgc:ps-per-worker"] = ("lgc", {**LGC_PHASES, "mode": "ps", "decoders": "per-worker"}, 4)
#: LGC's reference preset over a whole model of four tensors: the first and last dense in every phase, the middle two
#: (K = 48 + 12 values) through its one autoencoder; top-k then its training, then compressed twice (the first with the
#: one-time encoder transfer in ps mode)
REFERENCE_SHAPES = [(7,), (24, 20), (3, 40), (5,)]
REFERENCE = {"preset": "reference", "density": 0.1, "innovation_density": 0.02, "dense_steps": 1, "train_steps": 1,
             "dense_first": 1, "dense_last": 1}
PHASED |= {f"lgc:reference-{mode}": ("lgc", {**REFERENCE, "mode": mode}, 4) for mode in ("ps", "ring")}


def _shapes(comp: Compressor) -> list[tuple[int, ...]]:
    return REFERENCE_SHAPES if comp.needs_whole_model else SHAPES


def _inputs(worker: int, step: int, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7919 * step + 31 * worker + 5)
    return [torch.randn(s, generator=g) * (1 + worker) for s in shapes]


def _states(comp: Compressor, world: int) -> list[list[State]]:
    """Per worker, per unit: seeded per worker, or alike where the protocol draws shared values (as the hook seeds them)."""
    shared = comp.info.resolve_protocol(comp.params).shared_seed
    return [[comp.init_state(1000 * (0 if shared else w) + u) for u in range(len(_shapes(comp)))] for w in range(world)]


def _compare(name: str, ctx: WorkerContext, params: dict[str, Any] | None = None, steps: int = STEPS) -> dict[str, Any]:
    world, me = ctx.world_size, ctx.rank
    real = registry.create(name, **(params or {}))
    sim = registry.create(name, **(params or {}))
    real_states = _states(real, world)[me]
    sim_states = _states(sim, world)
    out: dict[str, Any] = {"bytes": [], "err": [], "exact": True, "sent_equal": True, "kinds": [], "phases": []}
    for step in range(steps):
        out["phases"].append(sim.step_phase(sim_states[0][0].step))
        xs = [_inputs(w, step, _shapes(sim)) for w in range(world)]
        shared = [list(sim_states[0]) if w == 0 else [s.clone() for s in sim_states[0]] for w in range(world)]
        run = simulate([sim.worker_protocol(xs[w], sim_states[w], Context(w, world, shared[w])) for w in range(world)])
        transport = TorchTransport(ctx.group, me, world, torch.device("cpu"))
        ctx_real = Context(me, world, real_states if real.info.resolve_protocol(real.params).shared_seed else ())
        outcome = drive(real.worker_protocol(xs[me], real_states, ctx_real), transport, ChainTimes()).wait()
        simulated = [(ph, c[me].sent, c[me].received, c[me].sent_body) for ph, c in run.legs]
        measured = [(ph, c.sent, c.received, c.sent_body) for leg in transport.legs for ph, c in leg.counted]
        out["bytes"].append((simulated, measured))
        exact = not any(leg.kind == "allreduce" and leg.op in ("sum", "mean") for leg in transport.legs)
        out["exact"] &= exact
        out["kinds"] = [leg.kind for leg in transport.legs]
        for a, b in zip(outcome.aggregates, run.outcomes[me].aggregates, strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype == torch.float32
            out["err"].append(float((a - b).abs().max() / (b.abs().max() + 1e-30)) if a.numel() else 0.0)
            if exact and not torch.equal(a, b):
                out["err"].append(float("inf"))  # a deterministic protocol must agree to the bit
        if exact:
            out["sent_equal"] &= all(p.to_bytes() == q.to_bytes() for p, q in zip(outcome.sent, run.outcomes[me].sent, strict=True)
                                     if p is not None and q is not None)
    return out


def _all(ctx: WorkerContext) -> dict[str, Any]:
    torch.set_num_threads(1)
    out = {name: _compare(name, ctx) for name in registry.names()}
    return out | {label: _compare(name, ctx, params, steps) for label, (name, params, steps) in PHASED.items()}


@pytest.fixture(scope="module", params=[2, 3], ids=["2-workers", "3-workers"])
def group(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return run_group(_all, (), request.param, timeout_s=180)


def test_every_compressor_runs_its_protocol_on_both_transports(group: list[dict[str, Any]]) -> None:
    assert set(group[0]) == set(registry.names()) | set(PHASED)
    for label in PHASED:  # every phase of LGC, the compressed one with and without the one-time encoder transfer
        assert group[0][label]["phases"] == ["dense", "topk", "compressed", "compressed"], label


def test_real_transport_sends_exactly_the_simulated_bytes_per_leg_and_worker(group: list[dict[str, Any]]) -> None:
    for rank in group:
        for name, res in rank.items():
            for simulated, measured in res["bytes"]:
                assert [tuple(m) for m in measured] == [tuple(s) for s in simulated], name
                assert sum(m[1] for m in measured) > 0, name


def test_real_aggregates_are_the_simulated_ones(group: list[dict[str, Any]]) -> None:
    world = len(group)
    for rank in group:
        for name, res in rank.items():
            if res["exact"]:
                assert max(res["err"]) == 0.0, name  # bit for bit: the same bytes decoded in the same order
                assert res["sent_equal"], name
            else:  # sums in the wire dtype (bf16: 8 significant bits) in the collective's order
                assert max(res["err"]) < world * 2.0**-7, name
    kinds = {name: res["kinds"] for name, res in group[0].items()}
    assert kinds["none"] == kinds["fp16"] == ["allreduce"]
    assert kinds["powersgd"] == ["allreduce", "allreduce"] and kinds["terngrad"] == ["allreduce", "allgather"]
    assert kinds["onebit"] == ["alltoall", "allgather"] and kinds["topk"] == ["allgather"]
    assert kinds["lgc"] == ["server"] * len(SHAPES)  # its dense phase: one parameter-server round per tensor
    assert set(kinds["lgc:ps"]) == {"server"} and set(kinds["lgc:ring"]) == {"send"}
    # the reference preset's compressed step: the dense tensors' rounds, then its three server rounds (ps) / the ring's messages
    assert kinds["lgc:reference-ps"] == ["server"] * 5 and set(kinds["lgc:reference-ring"]) == {"send"}



def test_framed_messages_round_trip_and_malformed_bytes_are_payload_errors() -> None:
    from gcbench.core.errors import PayloadError
    from gcbench.core.protocol import Message
    from gcbench.distributed.framing import frame_messages, unframe_messages

    comp = registry.create("topk", density=0.1)
    payloads = [comp.compress(torch.randn(50, generator=torch.Generator().manual_seed(s)), comp.init_state(s)) for s in range(2)]
    msgs = [Message("topk:push", 1, (), payloads[0]), Message("phase:é", 1, (0, 2), payloads[1])]
    raw = frame_messages(msgs)
    back = unframe_messages(raw, 1, 3)
    assert [(m.phase, m.sender, m.receivers, m.payload.to_bytes()) for m in back] == \
        [(m.phase, m.sender, m.receivers, m.payload.to_bytes()) for m in msgs]
    assert unframe_messages(b"", 1, 3) == []
    for bad in (raw[:-1], raw[:5], raw + b"\x01", frame_messages([Message("x", 0, (7,), payloads[0])])):
        with pytest.raises(PayloadError):  # truncated, trailing garbage, a receiver outside the group
            unframe_messages(bad, 1, 3)
