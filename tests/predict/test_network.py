"""gcbench.predict.network and gcbench.predict.simulate: hand-computed collective times, step times, the sparse-vs-dense
crossover."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.core.errors import ResultsError
from gcbench.predict.network import Network, parameter_server
from gcbench.predict.simulate import (
    CaseCost,
    break_even_bandwidth,
    cases_from_results,
    collective_for,
    communication,
    predict,
    simulate,
    simulate_results,
)
from gcbench.results.calibration import ring_allgather, ring_allreduce

ALPHA = 5e-6


def test_ring_allreduce_by_hand() -> None:
    # 100 MB over 4 workers at 10 Gbit/s = 1.25 GB/s: 2·3/4·1e8/1.25e9 = 0.12 s, plus 2·3 rounds of 5 µs
    c = ring_allreduce(1e8, 4)
    assert (c.alphas, c.volume) == (6.0, 1.5e8)
    assert c.seconds(Network(10, ALPHA)) == pytest.approx(0.12 + 3e-5, rel=1e-12)
    assert ring_allreduce(1e8, 1).seconds(Network(10, ALPHA)) == 0.0


def test_ring_allgather_by_hand() -> None:
    # 1 MB per worker, 8 workers, 1 Gbit/s = 125 MB/s: 7·1e6/1.25e8 = 0.056 s, plus 7 rounds
    c = ring_allgather(1e6, 8)
    assert c.seconds(Network(1, ALPHA)) == pytest.approx(0.056 + 7 * ALPHA, rel=1e-12)


def test_parameter_server_by_hand() -> None:
    # 4 uploads of 1 MB and 4 dense downloads of 100 MB through the server's 10 Gbit/s link
    c = parameter_server(1e6, 1e8, 4)
    assert c.seconds(Network(10, ALPHA)) == pytest.approx(2 * ALPHA + (4e6 + 4e8) / 1.25e9, rel=1e-12)


def test_collective_choice() -> None:
    assert collective_for("none") == collective_for("fp16") == collective_for("bf16") == "allreduce"
    assert collective_for("powersgd") == "allreduce"
    assert collective_for("topk") == collective_for("qsgd") == collective_for("terngrad") == "allgather"
    assert collective_for("topk", "ps") == "ps"
    with pytest.raises(ValueError):
        collective_for("topk", "mesh")
    # PowerSGD: two all-reduces (P then Q), so twice the latency rounds for the same bytes
    ps = communication(CaseCost("p", "powersgd", 1e6, 1e8), 8)[0]
    fp = communication(CaseCost("f", "fp16", 1e6, 1e8), 8)[0]
    assert ps.alphas == 2 * fp.alphas and ps.volume == fp.volume
    # TernGrad's shared scaler: one extra tiny all-reduce before the all-gather
    tg = communication(CaseCost("t", "terngrad", 1e6, 1e8), 8)[0]
    assert tg.alphas == 7 + 14 and tg.volume == 7e6


def test_step_time_by_hand() -> None:
    case = CaseCost("topk", "topk", wire_bytes=2e6, dense_bytes=1e8, compute_s=0.05, compress_s=0.02, decompress_s=0.002)
    p = predict(case, 8, Network(10, ALPHA))
    comm = 7 * 2e6 / 1.25e9 + 7 * ALPHA
    assert p.communicate_s == pytest.approx(comm, rel=1e-12)
    assert p.decompress_s == pytest.approx(8 * 0.002)  # every worker decodes all 8 payloads
    assert p.step_s == pytest.approx(0.05 + 0.02 + comm + 0.016, rel=1e-12)
    ref = 0.05 + 2 * 7 / 8 * 1e8 / 1.25e9 + 14 * ALPHA
    assert p.reference_step_s == pytest.approx(ref, rel=1e-12)
    assert p.speedup == pytest.approx(ref / p.step_s, rel=1e-12)
    dense = predict(CaseCost("fp16", "fp16", 5e7, 1e8, compute_s=0.05, compress_s=0.001, decompress_s=0.001), 8, Network(10, ALPHA))
    assert dense.decompress_s == pytest.approx(0.001)  # all-reduce: one decode


def test_sparse_allgather_wins_on_slow_links_and_loses_on_fast_ones() -> None:
    case = CaseCost("topk", "topk", wire_bytes=2e6, dense_bytes=1e8, compute_s=0.05, compress_s=0.02, decompress_s=0.002)
    slow = predict(case, 8, Network(1, ALPHA))
    fast = predict(case, 8, Network(100, ALPHA))
    assert slow.speedup > 3  # 1.4 s of dense all-reduce against ~0.2 s
    assert fast.speedup < 1  # 14 ms of all-reduce against 36 ms of compress + decode
    b = break_even_bandwidth(case, 8, ALPHA)
    assert b is not None and 1 < b < 100
    # closed form: (v_ref − v_c)·8/1e9 / (compress + 8·decompress + (a_c − a_ref)·α)
    expected = (2 * 7 / 8 * 1e8 - 7 * 2e6) / (0.02 + 8 * 0.002 + (7 - 14) * ALPHA) * 8 / 1e9
    assert b == pytest.approx(expected, rel=1e-12)
    assert predict(case, 8, Network(b, ALPHA)).speedup == pytest.approx(1.0, rel=1e-9)
    # all-gather volume grows with N: at large N the sparse payloads cost more than the dense all-reduce
    assert predict(case, 1024, Network(1, ALPHA)).speedup < 1
    assert break_even_bandwidth(case, 1024, ALPHA) is None
    # a dense-compatible cast never loses bytes and never costs nothing: break-even exists too
    fp16 = CaseCost("fp16", "fp16", 5e7, 1e8, compress_s=0.005, decompress_s=0.005)
    assert break_even_bandwidth(fp16, 8, ALPHA) is not None


def test_simulate_grid_and_reading_results_files() -> None:
    run = {"schema_version": 1, "kind": "run", "cases": [
        {"label": "topk", "compressor": "topk", "status": "ok", "source": {"label": "resnet50"},
         "size": {"wire_bytes": 2e6, "dense_bytes": 1e8}, "timing": {"compress": {"median_s": 0.02}, "decompress": {"median_s": 0.002}}},
        {"label": "bad", "compressor": "qsgd", "status": "error"},
    ]}
    cases = cases_from_results(run, compute_s=0.05)
    assert cases == [CaseCost("topk", "topk", 2e6, 1e8, 0.05, 0.02, 0.002, "resnet50")]
    preds = simulate(cases, [8, 64], [1, 10], ALPHA)
    assert [(p.workers, p.bandwidth_gbps) for p in preds] == [(8, 1), (64, 1), (8, 10), (64, 10)]
    train = {"schema_version": 1, "kind": "train", "cases": [
        {"label": "qsgd", "compressor": "qsgd", "status": "ok",
         "training": {"task": {"name": "digits"}, "decoded_payloads_per_step": 4,
                      "bytes": {"payload_bytes_per_step": 4e4, "dense_bytes_per_step": 2e5},
                      "step_time": {"compute_s": 0.001, "compress_s": 0.01, "decompress_s": 0.06}}},
    ]}
    (c,) = cases_from_results(train)
    assert (c.wire_bytes, c.dense_bytes, c.compute_s, c.compress_s) == (4e4, 2e5, 0.001, 0.01)
    assert c.decompress_s == pytest.approx(0.015)  # measured for 4 payloads: one payload's decode
    with pytest.raises(ResultsError):
        cases_from_results({"schema_version": 1, "kind": "run", "cases": []})
    with pytest.raises(ValueError):
        Network(0, ALPHA)


def test_simulate_cli(tmp_path: Path) -> None:
    from gcbench.cli import app
    from gcbench.results.store import SCHEMA_VERSION

    path = tmp_path / "run.json"
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "kind": "run", "cases": [
        {"label": "topk", "compressor": "topk", "status": "ok", "source": {"label": "s"},
         "size": {"wire_bytes": 2e6, "dense_bytes": 1e8}, "timing": {"compress": {"median_s": 0.02}, "decompress": {"median_s": 0.002}}},
        {"label": "none", "compressor": "none", "status": "ok", "source": {"label": "s"},
         "size": {"wire_bytes": 1e8, "dense_bytes": 1e8}, "timing": {"compress": {"median_s": 0.0}, "decompress": {"median_s": 0.0}}},
    ]}))
    runner = CliRunner()
    res = runner.invoke(app, ["simulate", str(path), "--workers", "8,1024", "--bandwidth", "1,100", "--compute-ms", "50"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())  # rich wraps titles to the table's width
    assert "— 1 Gbit/s" in text and "— 100 Gbit/s" in text and "break-even" in text
    assert "over the bf16 all-reduce (fp32 in brackets)" in text and "bf16 all-reduce: modelled" in text
    fp32 = runner.invoke(app, ["simulate", str(path), "--workers", "8", "--bandwidth", "1", "--baseline", "fp32"])
    assert fp32.exit_code == 0 and "over the fp32 all-reduce (bf16 in brackets)" in " ".join(fp32.output.split())
    res = runner.invoke(app, ["simulate", str(path), "--workers", "8", "--bandwidth", "1", "--compute-ms", "50", "--json"])
    data = json.loads(res.output)
    (topk,) = [p for p in data["predictions"] if p["label"] == "topk"]
    assert topk["speedup"] == pytest.approx(predict(CaseCost("topk", "topk", 2e6, 1e8, 0.05, 0.02, 0.002), 8, Network(1, ALPHA)).speedup)
    assert data["baseline"] == "bf16" and topk["speedup_bf16"] < topk["speedup"] and topk["bf16_step_s"] > 0.05
    bad = runner.invoke(app, ["simulate", str(path), "--workers", "8,x"])
    assert bad.exit_code == 1 and "--workers" in bad.output
    missing = runner.invoke(app, ["simulate", str(tmp_path / "nope.json")])
    assert missing.exit_code == 1


def test_simulate_latest_skips_an_unfinished_run(tmp_path: Path) -> None:
    from gcbench.cli import app
    from gcbench.results.store import SCHEMA_VERSION

    def write(name: str, status: str, label: str) -> None:
        (tmp_path / name).write_text(json.dumps({"schema_version": SCHEMA_VERSION, "kind": "run", "status": status, "cases": [
            {"label": label, "compressor": "topk", "status": "ok", "source": {"label": "s"},
             "size": {"wire_bytes": 2e6, "dense_bytes": 1e8},
             "timing": {"compress": {"median_s": 0.02}, "decompress": {"median_s": 0.002}}},
        ]}))

    write("20261124T010000Z-a-abc123.json", "complete", "finished-one")
    write("20261124T020000Z-a-abc123.json", "interrupted", "interrupted-one")
    res = CliRunner().invoke(app, ["simulate", "latest", "--runs-dir", str(tmp_path), "--workers", "8", "--bandwidth", "1", "--json"])
    assert res.exit_code == 0, res.output
    assert [p["label"] for p in json.loads(res.output)["predictions"]] == ["finished-one"]


def test_simulate_results_is_the_grid_of_predictions_and_break_evens() -> None:
    """What `gcbench simulate` renders: every case × worker count × bandwidth, and a break-even per case and count."""
    data = json.loads((Path(__file__).resolve().parents[1] / "golden" / "run_base.json").read_text())
    sim = simulate_results(data, [8, 64], [1.0, 10.0], ALPHA, "auto", 0.05, "run_base.json")
    cases = cases_from_results(data, 0.05)
    assert list(sim.cases) == cases and sim.kind == data["kind"] and sim.compute_s == 0.05
    assert list(sim.predictions) == simulate(cases, [8, 64], [1.0, 10.0], ALPHA, "auto")
    for c, row in zip(sim.cases, sim.break_even_gbps, strict=True):  # against the bf16 all-reduce by default
        assert list(row) == [break_even_bandwidth(c, n, ALPHA, "auto", "bf16") for n in (8, 64)]
        assert sim.prediction(c, 64, 10.0) == predict(c, 64, Network(10.0, ALPHA), "auto", None, True)
        fp32 = simulate_results(data, [8, 64], [1.0, 10.0], ALPHA, "auto", 0.05, "run_base.json", baseline="fp32")
        assert list(fp32.break_even_gbps[sim.cases.index(c)]) == [break_even_bandwidth(c, n, ALPHA, "auto") for n in (8, 64)]
    assert sim.to_dict()["predictions"][0] == sim.predictions[0].to_dict() and sim.to_dict()["baseline"] == "bf16"
    with pytest.raises(Exception, match="scheme must be one of"):
        simulate_results(data, [8], [1.0], ALPHA, "mesh")
    with pytest.raises(Exception, match="baseline must be one of"):
        simulate_results(data, [8], [1.0], ALPHA, baseline="fp16")


def test_simulate_prices_the_bf16_all_reduce_beside_fp32() -> None:
    """Without a bf16 case the bf16 step is the fp32 reference with half the bytes (the copies standing for the casts);
    with one, the bf16 case's own predicted step, so its own speed-up over bf16 is exactly 1."""
    from gcbench.predict.network import collective_seconds
    from gcbench.predict.simulate import BF16_MEASURED, BF16_MODELLED, bf16_of_case

    net, n = Network(10, ALPHA), 16
    topk = CaseCost("topk", "topk", 2e6, 1e8, compute_s=0.05, compress_s=0.01, decompress_s=0.001, copy_s=0.004)
    p = predict(topk, n, net, "auto", None, True)
    want = 0.05 + 2 * 0.004 + collective_seconds("allreduce", 5e7, n, net)[0]
    assert p.bf16_step_s == pytest.approx(want) and p.speedup_bf16 == pytest.approx(want / p.step_s)
    assert p.speedup_vs("fp32") == p.speedup and p.speedup_vs("bf16") == p.speedup_bf16 < p.speedup
    assert bf16_of_case(topk, n, net)[1] == BF16_MODELLED
    bf16 = CaseCost("bf16", "bf16", 5e7, 1e8, compute_s=0.05, compress_s=0.003, decompress_s=0.003, copy_s=0.004)
    assert predict(bf16, n, net, "auto", bf16, True).speedup_bf16 == 1.0 and bf16_of_case(topk, n, net, "auto", bf16)[1] == BF16_MEASURED
    ps = predict(topk, n, net, "ps", None, True)  # a forced scheme: its dense reference with half the bytes
    assert ps.bf16_step_s == pytest.approx(0.05 + parameter_server(5e7, 5e7, n).seconds(net))


def test_tree_and_alltoall_by_hand() -> None:
    from gcbench.predict.network import collective_seconds, tree_allreduce
    from gcbench.results.calibration import pairwise_alltoall

    # 256 workers: the tree pays 2·8 latency rounds and carries the buffer twice; the ring 2·255 rounds and 2·255/256 of it
    net = Network(100, ALPHA)
    assert (tree_allreduce(1e6, 256).alphas, tree_allreduce(1e6, 256).volume) == (16.0, 2e6)
    small, _ = collective_seconds("allreduce", 1e3, 256, net)
    assert small == pytest.approx(tree_allreduce(1e3, 256).seconds(net))  # latency-bound: the tree
    big, algo = collective_seconds("allreduce", 1e9, 4, net)
    assert algo == "ring" and big == pytest.approx(ring_allreduce(1e9, 4).seconds(net))  # bandwidth-bound: the ring
    # all-to-all of 8 MB over 8 workers: 7 rounds, 7/8 of the message out through the link
    assert pairwise_alltoall(8e6, 8).seconds(Network(1, ALPHA)) == pytest.approx(7 * ALPHA + 7e6 / 1.25e8)
    # an all-gather grows with the workers, an all-reduce does not
    assert collective_seconds("allgather", 1e6, 64, net)[0] > 7 * collective_seconds("allgather", 1e6, 8, net)[0]


def test_hierarchical_collectives_charge_the_node_link_once_per_node() -> None:
    from gcbench.predict.network import Topology, collective_seconds

    net, topo = Network(10, 0.0), Topology(8, 800.0)
    flat = collective_seconds("allreduce", 1e8, 4, net)[0]  # 4 nodes of one GPU
    hier, algo = collective_seconds("allreduce", 1e8, 32, net, topo)  # 4 nodes of 8 GPUs: the same bytes between nodes
    intra = 2 * (7 / 8) * 1e8 / (800e9 / 8)
    assert "hierarchical" in algo and hier == pytest.approx(flat + intra)
    # all-gather: each node's link carries its 8 payloads to the other 3 nodes' 8 payloads
    ag = collective_seconds("allgather", 1e6, 32, net, topo)[0]
    assert ag == pytest.approx(3 * 8e6 / 1.25e9 + (7e6 + 24e6) / 1e11)
    with pytest.raises(ValueError, match="do not fill nodes"):
        collective_seconds("allreduce", 1e6, 12, net, topo)
    with pytest.raises(ValueError, match="intra-node"):
        Topology(8)


def test_protocol_legs_price_each_collective_of_the_protocol() -> None:
    from gcbench.compressors import registry
    from gcbench.predict.network import collective_seconds, protocol_seconds

    net, n, m = Network(1, ALPHA), 8, 4e6
    onebit = registry.get("onebit").protocol  # all-to-all of the stripes, then all-gather of the re-quantized m/n stripe
    secs, decodes, algos = protocol_seconds(onebit, m, n, net)
    assert secs == pytest.approx(collective_seconds("alltoall", m, n, net)[0] + collective_seconds("allgather", m / n, n, net)[0])
    assert decodes == 2 and algos.startswith("alltoall")
    tern = registry.get("terngrad").resolve_protocol({"share_scaler": True})
    secs, decodes, _ = protocol_seconds(tern, m, n, net, tensors=161)  # one float per tensor all-reduced (MAX) first
    assert secs == pytest.approx(collective_seconds("allreduce", 644, n, net)[0] + collective_seconds("allgather", m, n, net)[0])
    assert decodes == n
    psgd = registry.get("powersgd").protocol  # P and Q: two all-reduces sharing the bytes, two latencies
    assert protocol_seconds(psgd, m, n, net)[0] == pytest.approx(2 * collective_seconds("allreduce", m / 2, n, net)[0])
    topk = registry.get("topk").protocol  # the default: all-gather of every payload, each decoded
    assert protocol_seconds(topk, m, n, net)[:2] == (pytest.approx(collective_seconds("allgather", m, n, net)[0]), n)


def _leg_kinds(name: str, params: dict[str, object], n: int = 3) -> list[str]:
    """The legs the compressor's own protocol yields, in order, when n workers exchange two tensors on the simulated transport."""
    from gcbench.compressors import registry
    from gcbench.core.protocol import Context, simulate
    from tests.conftest import normal, recording_legs

    comp = registry.create(name, **params)
    seen: list[object] = []
    xs = [normal((64, 32), seed=1), normal((40,), seed=2)]
    memo: dict[object, object] = {}
    shared = [comp.init_state(u) for u in range(len(xs))]
    gens = [comp.worker_protocol([x.clone() for x in xs], [comp.init_state(10 * w + u) for u in range(len(xs))],
                                 Context(w, n, shared, memo)) for w in range(n)]
    simulate([recording_legs(g, seen) if w == 0 else g for w, g in enumerate(gens)])
    return [type(leg).__name__.lower() for leg in seen]


@pytest.mark.parametrize("name", [n for n in __import__("gcbench.compressors.registry", fromlist=["names"]).names() if n != "lgc"])
def test_the_network_model_prices_the_legs_the_protocol_runs(name: str) -> None:
    # the card's cost legs (what netmodel and advise price) are the legs the compressor's own protocol yields, in order
    # (LGC's, by preset, phase and mode: tests/compressors/test_lgc.py::test_card_cost_legs_are_the_legs_the_compressed_phase_runs)
    from gcbench.compressors import registry

    info = registry.get(name)
    configs = [{}] + ([{"share_scaler": True}] if "share_scaler" in info.defaults else [])
    for params in configs:
        want = [leg.collective for leg in info.resolve_protocol(params).cost for _ in range(leg.rounds)]
        assert _leg_kinds(name, params) == want, (name, params)


def test_simulate_auto_is_advise_s_model_protocol_legs_and_ddp_s_copies() -> None:
    """``auto`` prices each protocol leg by leg (1-bit SGD: all-to-all then all-gather of the stripes) and charges the
    dense reference DDP's two bucket copies, so an identity codec whose kernels cost one copy each lands at 1.0×."""
    from gcbench.predict.network import collective_seconds

    net = Network(10, ALPHA)
    ident = CaseCost("none", "none", 1e8, 1e8, compute_s=0.05, compress_s=0.004, decompress_s=0.004, copy_s=0.004)
    for n in (2, 8, 256):
        assert predict(ident, n, net).speedup == pytest.approx(1.0, rel=1e-12)
    onebit = CaseCost("onebit", "onebit", 4e6, 1e8, compute_s=0.05, compress_s=0.01, decompress_s=0.002, copy_s=0.004, tensors=3)
    p = predict(onebit, 8, net)
    assert p.communicate_s == pytest.approx(collective_seconds("alltoall", 4e6, 8, net)[0]
                                            + collective_seconds("allgather", 4e6 / 8, 8, net)[0])
    assert "alltoall" in p.collective and "allgather" in p.collective
    # the break-even bandwidth is where the model's speed-up crosses 1
    b = break_even_bandwidth(onebit, 8, ALPHA)
    assert b is not None and predict(onebit, 8, Network(b, ALPHA)).speedup == pytest.approx(1.0, rel=1e-9)


def test_a_damaged_configuration_in_a_results_file_is_a_results_error() -> None:
    run = {"schema_version": 1, "kind": "run", "cases": [
        {"label": "tg", "compressor": "terngrad", "status": "ok", "params": {"share_scaler": {"a": 1}}, "source": {"label": "s"},
         "size": {"wire_bytes": 2e6, "dense_bytes": 1e8}, "timing": {"compress": {"median_s": 0.02}, "decompress": {"median_s": 0.002}}},
    ]}
    with pytest.raises(ResultsError, match="cannot be priced"):
        cases_from_results(run)


def test_lgc_s_server_and_relay_legs_by_hand() -> None:
    """LGC's ps mode: three server rounds (every worker's message to a server on a worker, a reply back through its link);
    ring mode: the leader's message relayed hop by hop, then a ring all-reduce."""
    from gcbench.compressors import registry
    from gcbench.predict.network import collective_seconds, protocol_seconds

    net, m, n = Network(1, ALPHA), 3e5, 4
    ps = registry.get("lgc").resolve_protocol({"mode": "ps"})
    secs, decodes, algos = protocol_seconds(ps, m, n, net)
    assert secs == pytest.approx(3 * (2 * ALPHA + 2 * n * (m / 3) / 1.25e8))
    assert "server" in algos and decodes == n  # the server decodes every worker's payload
    ring = registry.get("lgc").resolve_protocol({"mode": "ring"})
    secs, _, algos = protocol_seconds(ring, m, n, net)
    assert secs == pytest.approx((n - 1) * (ALPHA + m / 1.25e8) + collective_seconds("allreduce", m, n, net)[0])
    assert "ring relay" in algos


def test_simulate_prices_an_identity_from_the_same_copy_as_the_reference() -> None:
    """Issue 34: an identity whose own rounds ran while the machine copied 25% slower (its ×copy 1, its seconds 1.25x the
    run's pooled copy) was priced below 1x against a reference charged the pooled copy.  By ×copy it is 1.0 exactly."""
    net = Network(10, ALPHA)
    drifted = CaseCost("none", "none", 1e8, 1e8, compute_s=0.012, compress_s=0.005, decompress_s=0.005, copy_s=0.004,
                       compress_x_copy=1.0, decompress_x_copy=1.0)
    for n in (2, 16, 256):
        assert predict(drifted, n, net).speedup == 1.0
    assert predict(dataclasses.replace(drifted, compress_x_copy=None, decompress_x_copy=None), 16, net).speedup < 0.99  # by seconds


@pytest.mark.parametrize(("bits", "n"), [(4, 2), (4, 16), (2, 64), (8, 5)])
def test_thc_s_summed_payload_is_priced_at_its_width_on_n_workers(bits: int, n: int) -> None:
    """THC's fields are b + ⌈log2 N⌉ bits on N workers: the payload a worker sends in the real exchange is the one the
    model prices from a payload measured alone (compress at b bits), to within the per-tensor header and range."""
    from gcbench.compressors import registry
    from gcbench.predict.network import collective_seconds, payload_scale, protocol_seconds
    from tests.conftest import normal

    comp = registry.create("thc", bits=bits, block=1024)
    xs = [[normal((50_000,), seed=10 * w + u) for u in range(2)] for w in range(n)]
    alone = sum(comp.compress(x, comp.init_state(0)).nbytes for x in xs[0])
    states = [[comp.init_state(100 * w + u) for u in range(2)] for w in range(n)]
    sent = sum(r.payloads[0].nbytes for r in comp.exchange_group(xs, states))
    scale = payload_scale("thc", {"bits": bits}, 1, n)
    assert scale == pytest.approx((63 // bits) / (63 // (bits + (n - 1).bit_length())))
    assert abs(alone * scale - sent) <= 2 * 64 * scale  # two tensors' headers and ranges, scaled with the words
    assert payload_scale("thc", {"bits": bits}, n, n) == 1.0 and payload_scale("qsgd", {}, 1, n) == 1.0
    net, proto = Network(1, ALPHA), registry.get("thc").protocol
    secs, _, _ = protocol_seconds(proto, alone, n, net, tensors=2, payload_scale=scale)
    assert secs == pytest.approx(collective_seconds("allreduce", 8, n, net)[0] + collective_seconds("allreduce", alone * scale, n, net)[0])
    # a case measured alone and predicted on n workers pays for the wider words; measured on n, it is priced as measured
    one = CaseCost("thc", "thc", alone, 400_000.0, params=(("bits", bits),))
    on_n = dataclasses.replace(one, wire_bytes=float(sent), measured_workers=n)
    assert predict(one, n, net).communicate_s == pytest.approx(predict(on_n, n, net).communicate_s, rel=0.01)


def test_a_results_file_case_and_a_bench_case_of_the_same_measurements_are_one_cost_description() -> None:
    """The two adapters of :func:`gcbench.predict.step.price_step`: a results file's case (:meth:`CaseCost.cost`) and a
    bench file's kernels (:meth:`StepKernels.cost`) of the same measurements give the same :class:`StepCost`, priced by
    ×copy where both carry it and by seconds where neither does."""
    from gcbench.predict.step import StepCost
    from gcbench.predict.step_kernels import StepKernels

    case = CaseCost("onebit", "onebit", 4e6, 1e8, compute_s=0.05, compress_s=0.01, decompress_s=0.002, copy_s=0.004, tensors=3)
    k = StepKernels("onebit", "onebit", 0.01, 0.002, 0.004, 4e6, 1e8, tensors=3)
    want = StepCost("onebit", "onebit", 4e6, 1e8, 0.05, 0.01, 0.002, 0.004, tensors=3)
    assert case.cost() == k.cost(0.05) == want
    timed = dataclasses.replace(case, compress_x_copy=2.5, decompress_x_copy=0.5)
    xk = dataclasses.replace(k, compress_x_copy=2.5, decompress_x_copy=0.5)
    assert timed.cost() == xk.cost(0.05) == dataclasses.replace(want, compress_s=2.5 * 0.004, decompress_s=0.5 * 0.004)

