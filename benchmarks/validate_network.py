"""Predicted against measured step time of compressed data-parallel training over rate-limited links.

For each (workers, compressor, bandwidth) configuration this script

1. **measures the prediction's inputs apart from the run it predicts**: the compute time of one
   step (the same N processes training without any communication, so they contend for the cores
   as in the real run), and the compressor's per-step compress and decompress time and payload
   bytes (the same N processes training through the DDP hook over unshaped links);
2. **prices the collectives on the shaped links** with bare collectives (``python -m
   gcbench.distributed.calibrate``: each collective as gcbench issues it, at four message sizes, no
   training), also apart from the run it predicts;
3. **predicts** the step time with ``gcbench advise``'s model (:mod:`gcbench.predict.advise`) from
   those inputs, twice: with the collectives priced by the calibration (what ``gcbench advise
   --network`` does) and by the bare α–β model at the link's nominal rate (nothing is fitted to the
   run being predicted);
4. **measures** the step time of real training: N processes in network namespaces whose links are
   shaped to the bandwidth (:mod:`netlab`), gloo, the gcbench DDP hook;
5. prints predicted vs measured, the error, and the share of the step spent communicating.

The model is an MLP small enough that computing is a small part of a step at these bandwidths on
a 2-core machine.  Needs root (network namespaces).  Example (about 4 minutes)::

    sudo python benchmarks/validate_network.py --workers 2,4 --json validation.json

The uncompressed reference (``none`` through plain DDP all-reduce) is one of the configurations.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from netlab import NetLab

if TYPE_CHECKING:
    from gcbench.results.calibration import Calibration

#: (compressor spec, link rate in Mbit/s): one all-reduce protocol, one all-gather, one of its own; the
#: rates put communication at more than half of each step (checked and printed)
DEFAULT_CONFIGS = (("allreduce", 100.0), ("fp16", 100.0), ("topk:density=0.01", 5.0), ("onebit", 5.0))
SIZES = (784, 1024, 512, 10)  # the MLP: 1.34M parameters, 5.4 MB of float32 gradient
STEPS, WARMUP = 30, 5
PORT = 29611


@dataclass
class Row:
    """One configuration: its inputs, the prediction and the measurement (seconds, bytes)."""

    workers: int
    compressor: str
    mbit: float
    compute_s: float
    compress_s: float
    decompress_s: float
    payload_bytes: float
    dense_bytes: float
    predicted_s: float  # collectives priced by the calibration on the same links
    model_only_s: float  # collectives priced by the bare α–β model at the nominal rate
    measured_s: float
    measured_iqr_s: float
    communicate_share: float
    predicted_comm_s: float  # the communication the prediction waits for
    measured_comm_s: float | None  # the hook's own communicate time in the shaped run (median over steps, mean over ranks)

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1

    @property
    def model_only_error(self) -> float:
        return self.model_only_s / self.measured_s - 1


# ----------------------------------------------------------------------------- one worker process

WORKER = r'''
import json, os, statistics, sys, time
import torch, torch.distributed as dist
from torch import nn
mode, spec, out = sys.argv[1], sys.argv[2], sys.argv[3]
sizes = [int(s) for s in sys.argv[4].split(",")]; steps, warmup = int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(1)
rank = int(os.environ.get("RANK", "0"))
torch.manual_seed(0)
layers = []
for a, b in zip(sizes, sizes[1:]):
    layers += [nn.Linear(a, b), nn.ReLU()]
model = nn.Sequential(*layers[:-1])
gen = torch.Generator().manual_seed(1 + rank)
x, y = torch.randn(32, sizes[0], generator=gen), torch.randint(0, sizes[-1], (32,), generator=gen)
state = None
if mode != "local":
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(model)
    if spec != "allreduce":
        from gcbench.distributed.ddp import register_compressor_hook
        state = register_compressor_hook(model, spec, seed=0)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
times = []
for step in range(steps):
    if mode != "local":
        dist.barrier()
    t0 = time.perf_counter()
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    times.append(time.perf_counter() - t0)
rec = {"step_s": times[warmup:]}
if state is not None:
    rec["hook"] = state.stats.summary(skip=warmup)
json.dump(rec, open(out, "w"))
if mode != "local":
    dist.destroy_process_group()
'''


def _launch(lab: NetLab | None, n: int, mode: str, spec: str, port: int) -> list[dict[str, Any]]:
    """Run the worker in ``n`` processes (in the lab's namespaces, or locally without a network) and read their records."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "worker.py"
        script.write_text(WORKER)
        procs = []
        for r in range(n):
            out = str(Path(tmp) / f"r{r}.json")
            argv = [sys.executable, str(script), mode, spec, out, ",".join(map(str, SIZES)), str(STEPS), str(WARMUP)]
            env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")]))}
            if lab is not None:
                procs.append(lab.popen(r, argv, {**env, **lab.torch_env(r, port)}, stderr=subprocess.PIPE))
            else:
                procs.append(subprocess.Popen(argv, env={**os.environ, **env, "RANK": str(r)}, stderr=subprocess.PIPE))
        errs = []
        for r, p in enumerate(procs):
            _, errb = p.communicate(timeout=900)
            if p.returncode != 0:
                errs.append((r, p.returncode, errb.decode().strip().splitlines()[-1:]))
        recs = []
        for r in range(n):
            try:
                recs.append(json.loads((Path(tmp) / f"r{r}.json").read_text()))
            except (OSError, ValueError):
                raise RuntimeError(f"worker {r} failed ({mode} {spec}): {errs}") from None
        for r, rc, tail in errs:  # gloo's threads can abort the process in its teardown, after the record was written
            print(f"  note: worker {r} exited {rc} after writing its record ({mode} {spec}): {tail}", flush=True)
        return recs


def _median_step(recs: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """The step time of a run: per step, the slowest rank (the step ends when all have); median and IQR over steps."""
    per_step = [max(vals) for vals in zip(*(r["step_s"] for r in recs), strict=True)]
    q = statistics.quantiles(per_step, n=4)
    return statistics.median(per_step), q[2] - q[0]


def validate(workers: Sequence[int], configs: Sequence[tuple[str, float]], latency_s: float, overlap: bool,
             port: int = PORT) -> list[Row]:
    """Measure the inputs, price the links, predict with ``gcbench advise``'s model, measure the real step; one row per
    configuration."""
    from gcbench.predict.advise import predict_step
    from gcbench.predict.network import Network
    from gcbench.predict.step import reference_step
    from gcbench.predict.step_kernels import StepKernels

    dense = float(4 * sum(a * b + b for a, b in itertools.pairwise(SIZES)))
    copy_s = _copy_seconds(dense)
    rows = []
    calibrations: dict[tuple[int, float], Calibration] = {}
    for n in workers:
        compute_s, _ = _median_step(_launch(None, n, "local", "none", port))
        for spec, mbit in configs:
            port += 3
            net = Network(mbit / 1000, latency_s)
            if (n, mbit) not in calibrations:  # bare collectives on the shaped links, apart from the training runs
                with NetLab(n, mbit) as lab:
                    calibrations[n, mbit] = _calibrate(lab, n, mbit, port + 2)
                print(f"  {n} workers at {mbit:g} Mbit/s: {calibrations[n, mbit].describe()}", flush=True)
            cal = calibrations[n, mbit]
            if spec == "allreduce":  # plain DDP: no hook, no kernels
                k = StepKernels("allreduce", "none", 0.0, 0.0, copy_s, dense, dense)
                predicted, comm = reference_step(k.cost(compute_s), n, net, overlap=overlap, calibration=cal)
                model_only, _ = reference_step(k.cost(compute_s), n, net, overlap=overlap)
            else:
                with NetLab(n, 10_000) as fast:  # unshaped (10 Gbit/s): the hook's kernels and bytes
                    hook = [r["hook"] for r in _launch(fast, n, "ddp", spec, port)]
                name = spec.split(":")[0]
                params = dict(kv.split("=") for kv in spec.split(":")[1].split(",")) if ":" in spec else {}
                from gcbench.compressors import registry

                typed = registry.create(name, **{k_: _number(v) for k_, v in params.items()}).params
                decoded = max(1, hook[0]["decoded_payloads"])
                k = StepKernels(spec, name, statistics.mean(h["compress_s_median"] for h in hook),
                                statistics.mean(h["decompress_s_median"] for h in hook) / decoded, copy_s,
                                _payload_bytes(name, typed), statistics.mean(h["dense_bytes_per_step"] for h in hook),
                                tensors=2 * (len(SIZES) - 1), params=tuple(sorted(typed.items())))
                st = predict_step(k, n, net, compute_s, overlap=overlap, calibration=cal)
                predicted, comm = st.step_s, st.communicate_s
                model_only = predict_step(k, n, net, compute_s, overlap=overlap).step_s
            with NetLab(n, mbit) as lab:
                recs = _launch(lab, n, "ddp", spec, port + 1)
            measured, iqr = _median_step(recs)
            hooked = [r["hook"]["communicate_s_median"] for r in recs if "hook" in r]
            rows.append(Row(n, spec, mbit, compute_s, k.compress_s, k.decompress_s, k.wire_bytes, k.dense_bytes, predicted,
                            model_only, measured, iqr, comm / predicted, comm,
                            statistics.mean(hooked) if hooked else None))
            print(_line(rows[-1]), flush=True)
    return rows


def _calibrate(lab: NetLab, n: int, mbit: float, port: int) -> Calibration:
    """``python -m gcbench.distributed.calibrate`` in the lab's namespaces: the collectives' prices on its links."""
    from gcbench.results.calibration import load_calibration

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "net.json"
        argv = [sys.executable, "-m", "gcbench.distributed.calibrate", "--bandwidth", str(mbit / 1000), "--out", str(out)]
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")]))}
        procs = [lab.popen(r, argv, {**env, **lab.torch_env(r, port)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for r in range(n)]
        for p in procs:
            _, errb = p.communicate(timeout=900)
            if p.returncode != 0:
                raise RuntimeError(f"calibration failed: {errb.decode().strip().splitlines()[-1:]}")
        return load_calibration(out)


def _payload_bytes(name: str, params: dict[str, Any]) -> float:
    """One worker's payload bytes of a step (what ``gcbench advise`` reads from ``bench --model``): the MLP's gradient
    tensors compressed as a group, after one step so error feedback is in its steady state.  Not the hook's
    ``payload_bytes``, which counts what a worker sends by its protocol (1-bit SGD's stripes once per peer)."""
    import torch

    from gcbench.compressors import registry

    gen = torch.Generator().manual_seed(0)
    xs = [t for a, b in itertools.pairwise(SIZES) for t in (torch.randn(b, a, generator=gen) * 0.01, torch.randn(b, generator=gen) * 0.01)]
    comp = registry.create(name, **params)
    states = [comp.init_state(i) for i in range(len(xs))]
    comp.compress_group(xs, states, need_decoded=False)
    return float(sum(p.nbytes for p, _ in comp.compress_group(xs, states, need_decoded=False)))


def _number(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _copy_seconds(dense_bytes: float) -> float:
    """A copy of the model's gradient (DDP copies it into its buckets and back), median of 20."""
    import time as _t

    import torch

    x = torch.randn(int(dense_bytes // 4))
    y = torch.empty_like(x)
    times = []
    for _ in range(20):
        t0 = _t.perf_counter()
        y.copy_(x)
        times.append(_t.perf_counter() - t0)
    return statistics.median(times)


def _line(r: Row) -> str:
    return (f"{r.workers} × {r.compressor:22s} {r.mbit:7g} Mbit/s  predicted {1e3 * r.predicted_s:8.1f} ms  "
            f"measured {1e3 * r.measured_s:8.1f} ± {1e3 * r.measured_iqr_s / 2:5.1f} ms  error {100 * r.error:+6.1f}%  "
            f"(α–β alone {1e3 * r.model_only_s:.1f} ms, {100 * r.model_only_error:+.1f}%)  "
            f"(compute {1e3 * r.compute_s:.1f} ms, communication {100 * r.communicate_share:.0f}% of the predicted step: "
            f"{1e3 * r.predicted_comm_s:.1f} ms"
            + ("" if r.measured_comm_s is None else f", the hook measured {1e3 * r.measured_comm_s:.1f} ms") + ")")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="2,4", help="comma list of process counts")
    ap.add_argument("--config", action="append", metavar="SPEC@MBIT",
                    help="a compressor spec (or 'allreduce' for plain DDP) and a link rate, e.g. topk@5 (repeatable)")
    ap.add_argument("--latency-us", type=float, default=50.0, help="per-message latency the model charges (the veth's, measured by netlab)")
    ap.add_argument("--overlap", action="store_true", help="predict with communication overlapping the backward pass (DDP's buckets)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    configs = DEFAULT_CONFIGS
    if args.config:
        configs = tuple((c.rpartition("@")[0], float(c.rpartition("@")[2])) for c in args.config)
    t0 = time.time()
    rows = validate([int(w) for w in args.workers.split(",")], configs, args.latency_us * 1e-6, args.overlap)
    worst = max(abs(r.error) for r in rows)
    print(f"{len(rows)} configurations in {time.time() - t0:.0f} s; largest error {100 * worst:.1f}% "
          f"(α–β model alone: {100 * max(abs(r.model_only_error) for r in rows):.1f}%)")
    if args.json:
        args.json.write_text(json.dumps([{**asdict(r), "error": r.error, "model_only_error": r.model_only_error} for r in rows],
                                        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
