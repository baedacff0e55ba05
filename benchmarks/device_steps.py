"""The GPU steps of ``benchmarks/device_check.py`` that are not a pytest module or a gcbench command.

Usage::

    python benchmarks/device_steps.py syncs OUT.json [--device cuda] [--names a,b]
    python benchmarks/device_steps.py bench OUT.json [--device cuda] [--time 120] [--sizes 64000000,1000000]
    python benchmarks/device_steps.py hooks OUT.json [--device cuda] [--model resnet18] [--iters 20] [--warmup 5] [--rounds 2]
    python benchmarks/device_steps.py converge OUTDIR [--steps 20] [--compressors fp16,topk]

* ``syncs``: every registered compressor's ``compress_and_decode`` and ``decompress`` of a 100,000-element
  tensor on the device, with :func:`gcbench.core.host_sync.count_host_syncs` (tensor<->NumPy conversions,
  scalar reads) and, on CUDA, ``torch.cuda.set_sync_debug_mode("warn")`` counting every synchronising CUDA
  call (each one a warning); each row says whether the conversions are 0 and the scalar reads within the
  card's budget.
* ``bench``: every compressor at 64M elements (held to its GPU target, :mod:`gcbench.measure.gpu_targets`) and
  at 1M, timed with CUDA events against a device copy of the same tensor, into a bench results file written
  after every case; an out-of-memory case is an error row and the others go on.
* ``hooks``: a ResNet-18-sized model's DDP step on one GPU (NCCL with world size 1; if NCCL refuses,
  two ranks over gloo on the same GPU) with PyTorch's own all-reduce, ``bf16_compress_hook`` and
  ``powerSGD_hook`` beside gcbench's hook for ``none``, ``bf16`` and ``powersgd`` (same rank); each step
  timed with CUDA events (:func:`gcbench.measure.timing.timer_for`), in interleaved rounds; per pair
  gcbench ÷ PyTorch against the issue's 1.3×.
* ``converge``: ``gcbench converge --model smallcnn`` for two deterministic compressors on the CPU and
  with ``--device cuda``; the two runs' held-out curves must agree within float tolerance (TF32 and
  cuDNN's algorithms are not the CPU's arithmetic).  Without ``converge --device`` it says "not available".

Every subcommand writes its JSON and prints a short table; exit status 1 when a check it makes fails.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "benchmarks"):  # run as a script from anywhere: the checkout's gcbench; ddp_hooks beside this
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

SHAPE = (250, 400)  # 100,000 elements, a matrix (PowerSGD's factors are real), as the guard test
#: converge's curves on the GPU and the CPU agree when every held-out loss is within this relative difference
#: and every accuracy within :data:`METRIC_ATOL`
LOSS_RTOL = 2e-2
METRIC_ATOL = 0.03


# ----------------------------------------------------------------------------- syncs


def _counted(fn: Any, device: torch.device) -> dict[str, Any]:
    """Run ``fn`` once with host conversions, scalar reads and (on CUDA) synchronising calls counted."""
    from gcbench.core.host_sync import count_host_syncs

    cuda = device.type == "cuda"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with count_host_syncs() as counted:
                fn()
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    return {"conversions": counted.conversions, "scalar_reads": counted.scalar_reads,
            "cuda_syncs": len(syncs) if cuda else None, "sites": counted.sites[:4]}


def sync_counts(device: torch.device, names: list[str] | None = None) -> list[dict[str, Any]]:
    """Per compressor: the counts of one compress_and_decode (after one untimed step) and of one decompress."""
    from gcbench.compressors import registry

    rows = []
    for name in names or registry.names():
        comp = registry.create(name)
        x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)).to(device)
        state = comp.init_state(0)
        row: dict[str, Any] = {"compressor": name, "budget": comp.info.scalar_reads}
        try:
            comp.compress_and_decode(x, state)  # the first step: caches, tables and states made
            row["compress"] = _counted(functools.partial(comp.compress_and_decode, x, state), device)
            payload = comp.compress(x, state.clone())
            comp.decompress(payload, x.shape)  # decode tables made once per device (Elias-ω's)
            row["decompress"] = _counted(functools.partial(comp.decompress, payload, x.shape), device)
        except Exception as exc:  # a compressor that fails on the device is a row, not the end of the step
            if device.type == "cuda" and isinstance(exc, torch.OutOfMemoryError):
                torch.cuda.empty_cache()
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        row["ok"] = "error" not in row and all(row[k]["conversions"] == 0 and row[k]["scalar_reads"] <= row["budget"]
                                               for k in ("compress", "decompress"))
        rows.append(row)
    return rows


def _print_syncs(rows: list[dict[str, Any]], device: torch.device) -> None:
    print(f"host syncs on {device} ({SHAPE[0] * SHAPE[1]:,} float32): conversions / scalar reads / CUDA syncs (budget)")
    for r in rows:
        if "error" in r:
            print(f"{r['compressor']:<16} ERROR {r['error']}")
            continue
        cells = [f"{c['conversions']} / {c['scalar_reads']} / {'-' if c['cuda_syncs'] is None else c['cuda_syncs']}"
                 for c in (r["compress"], r["decompress"])]
        print(f"{r['compressor']:<16}{cells[0]:>16}{cells[1]:>16}  ({r['budget']}) {'ok' if r['ok'] else 'OVER'}")


# ----------------------------------------------------------------------------- bench

#: the bench step's sizes: the GPU target's (64M elements, judged) first, then a 1M tensor (launch-bound, reported)
BENCH_SIZES = (64_000_000, 1_000_000)


def bench_rows(device: torch.device, out_dir: Path, time_s: float, names: list[str] | None = None,
               sizes: tuple[int, ...] = BENCH_SIZES) -> dict[str, Any]:
    """Every compressor at each size on ``device`` (:func:`gcbench.measure.bench.bench_case` in this process, no
    reference rows), each row held to its GPU target; the results file is on disk after every case, and no case
    starts once ``time_s`` is spent (those rows say so)."""
    from gcbench.compressors import registry
    from gcbench.measure.bench import bench_case
    from gcbench.measure.bench_verdict import kernel_verdict
    from gcbench.results.store import RunWriter

    names = names or registry.names()
    cases = [(n, s) for s in sizes for n in names]
    writer = RunWriter(out_dir, {"name": "bench", "sizes": list(sizes), "repeats": 5, "threads": 2}, "", None, str(device),
                       kind="bench")
    start, rows = time.monotonic(), []
    for i, (name, numel) in enumerate(cases):
        left = time_s - (time.monotonic() - start)
        if left <= 2:
            rows.append({"label": name, "numel": numel, "error": "not run: the step's time was spent"})
            continue
        try:  # each kernel's calibration gets a share of what is left (bench's own rule: at most its 3 s)
            rec = bench_case(name, numel=numel, device=str(device), reference=False, budget_s=min(3.0, left / (len(cases) - i) / 3))
        except Exception as exc:  # an out-of-memory GPU ends this case as failed; the others go on
            if device.type == "cuda":
                torch.cuda.empty_cache()
            rec = {"compressor": name, "label": name, "numel": numel, "device": str(device),
                   "error": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"}
        writer.add_case(rec)
        target, verdict = kernel_verdict(rec)
        rows.append({"label": rec.get("label"), "numel": numel, "error": rec.get("error"), "timer": rec.get("timer"),
                     "compress_x_copy": rec.get("compress_x_copy"), "decompress_x_copy": rec.get("decompress_x_copy"),
                     "target": target, "verdict": verdict})
    writer.finish("complete")
    judged = [r for r in rows if r.get("verdict") in ("pass", "short")]
    return {"device": str(device), "results": str(writer.path), "rows": rows, "judged": len(judged),
            "short": [r["label"] for r in judged if r["verdict"] == "short"], "ok": not any(r.get("error") for r in rows)}


def _print_bench(res: dict[str, Any]) -> None:
    print(f"bench on {res['device']}: compress / decompress ×device copy (target, verdict)")
    for r in res["rows"]:
        if r.get("error"):
            print(f"{r['label']:<16}{r['numel']:>12,}  ERROR {r['error']}")
        else:
            print(f"{r['label']:<16}{r['numel']:>12,}{r['compress_x_copy']:9.2f}{r['decompress_x_copy']:9.2f}  "
                  f"({r['target']}, {r['verdict']})")


# ----------------------------------------------------------------------------- hooks

#: (pair, gcbench variant, PyTorch variant)
PAIRS = (("none", "gcbench none", "torch all-reduce"), ("bf16", "gcbench bf16", "torch bf16_compress_hook"),
         ("powersgd", "gcbench powersgd", "torch powerSGD_hook"))
#: on the CPU (a smoke test of this step): PyTorch's bf16 hook needs NCCL, so the fp16 pair stands in for it
CPU_PAIRS = (PAIRS[0], ("fp16", "gcbench fp16", "torch fp16_compress_hook"), PAIRS[2])


def pairs_for(device: torch.device) -> tuple[tuple[str, str, str], ...]:
    return PAIRS if device.type == "cuda" else CPU_PAIRS


#: gcbench's hook at most this multiple of PyTorch's on the same model (the issue's target)
HOOK_TARGET = 1.3


def hook_times(device: torch.device, group: Any, world_rank: int, model: str, iters: int, warmup: int, rounds: int,
               rank: int = 4) -> dict[str, list[float]]:
    """Seconds of each timed DDP step per variant, rounds interleaved (every variant from the same initial model)."""
    from ddp_hooks import register_hook  # beside this script (sys.path above)
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gcbench.measure.timing import timer_for
    from gcbench.sources.zoo import load_model

    timer = timer_for(device)
    variants = [v for pair in pairs_for(device) for v in pair[1:]]
    times: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds):
        for variant in variants if r % 2 == 0 else variants[::-1]:
            zm = load_model(model, 0)
            net = zm.module.to(device)
            ddp = DDP(net, process_group=group, device_ids=[device.index] if device.type == "cuda" else None)
            register_hook(ddp, variant, group, rank)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
            batches = [tuple(t.to(device) for t in zm.make_batch(i, world_rank)) for i in range(2)]
            times[variant] += _timed_steps(timer, ddp, opt, zm.loss_fn, batches, warmup, iters)
            del ddp, net, opt
    return times


def _timed_steps(timer: Any, ddp: Any, opt: torch.optim.Optimizer, loss_fn: Any, batches: list[tuple[torch.Tensor, ...]],
                 warmup: int, iters: int) -> list[float]:
    """Seconds of the ``iters`` timed DDP steps after ``warmup`` untimed ones, the two batches in turn."""

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        opt.step()

    times = []
    for it in range(warmup + iters):
        x, y = batches[it % 2]
        dt = timer(lambda x=x, y=y: step(x, y))  # defaults bind the loop's batch
        if it >= warmup:
            times.append(dt)
    return times


def _hooks_worker(ctx: Any, model: str, iters: int, warmup: int, rounds: int) -> dict[str, list[float]]:
    """Two ranks over gloo sharing GPU 0 (when NCCL refuses world size 1)."""
    return hook_times(torch.device("cuda", 0), ctx.group, ctx.rank, model, iters, warmup, rounds)


def _hooks_nccl(device: torch.device, model: str, iters: int, warmup: int, rounds: int) -> dict[str, list[float]]:
    import torch.distributed as dist

    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        return hook_times(device, None, 0, model, iters, warmup, rounds)
    finally:
        dist.destroy_process_group()


def hooks(device: torch.device, model: str, iters: int, warmup: int, rounds: int) -> dict[str, Any]:
    """The hook step: NCCL world size 1 first, two gloo ranks on one GPU if NCCL refuses; stats and ratios."""
    how = f"{'NCCL' if device.type == 'cuda' else 'gloo'}, world size 1"
    try:
        times = _hooks_nccl(device, model, iters, warmup, rounds)
    except Exception as exc:  # NCCL refused: two processes over gloo on the same GPU
        if device.type != "cuda":
            raise
        from gcbench.train.workers import run_group

        how = f"two ranks over gloo on one GPU (NCCL refused: {type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
        times = run_group(_hooks_worker, (model, iters, warmup, rounds), 2, timeout_s=300)[0]
    medians = {v: 1e3 * statistics.median(t) for v, t in times.items()}
    stats = {v: {"median_ms": medians[v], "n": len(t),
                 "iqr_ms": 1e3 * (statistics.quantiles(t, n=4)[2] - statistics.quantiles(t, n=4)[0]) if len(t) > 3 else None}
             for v, t in times.items()}
    ratio = {pair: medians[ours] / medians[theirs] for pair, ours, theirs in pairs_for(device)}
    return {"device": str(device), "model": model, "how": how, "timer": "cuda events" if device.type == "cuda" else "host clock",
            "variants": stats, "ratio": ratio, "target": HOOK_TARGET, "ok": all(r <= HOOK_TARGET for r in ratio.values())}


def _print_hooks(res: dict[str, Any]) -> None:
    print(f"hook step on {res['device']} ({res['model']}, {res['how']}, {res['timer']}): median ms, gcbench ÷ PyTorch "
          f"(target ≤ {res['target']}×)")
    for pair, ours, theirs in pairs_for(torch.device(res["device"])):
        a, b = res["variants"][ours], res["variants"][theirs]
        print(f"{pair:<9}{a['median_ms']:10.2f}{b['median_ms']:10.2f}{res['ratio'][pair]:8.2f}×")


# ----------------------------------------------------------------------------- converge on the GPU against the CPU


def _converge(device: str, out: Path, steps: int, compressors: list[str], timeout_s: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "gcbench", "converge", "--model", "smallcnn", *[a for c in compressors for a in ("-c", c)],
           "--steps", str(steps), "--seeds", "1", "--workers", "2", "--eval-every", str(max(1, steps // 4)),
           "--device", device, "--out", str(out / f"converge-{device.replace(':', '')}"), "--json", "--quiet"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)  # ends before the step's cap
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise RuntimeError(f"converge --device {device} failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def curves(data: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each case's first seed's held-out curve, by label."""
    return {c["label"]: ((c.get("convergence") or {}).get("seeds") or [{}])[0].get("curve") or [] for c in data.get("cases", [])}


def agreement(cpu: dict[str, Any], gpu: dict[str, Any]) -> dict[str, Any]:
    """Per compressor: the largest relative held-out loss and absolute metric difference between the two runs' curves."""
    out: dict[str, Any] = {}
    a, b = curves(cpu), curves(gpu)
    for label in a:
        pa, pb = a[label], b.get(label, [])
        if not pa or len(pa) != len(pb):
            out[label] = {"ok": False, "why": f"curves of {len(pa)} and {len(pb)} points"}
            continue
        loss = max(abs(x["eval_loss"] - y["eval_loss"]) / max(abs(x["eval_loss"]), 1e-12) for x, y in zip(pa, pb, strict=True))
        metric = max(abs(x["metric"] - y["metric"]) for x, y in zip(pa, pb, strict=True))
        out[label] = {"max_rel_loss": loss, "max_abs_metric": metric, "points": len(pa),
                      "ok": loss <= LOSS_RTOL and metric <= METRIC_ATOL}
    return out


def converge_check(out: Path, steps: int, compressors: list[str], time_s: float = 120.0) -> dict[str, Any]:
    """converge on the CPU and on the GPU (each within half of ``time_s``), their curves compared (:func:`agreement`)."""
    help_text = subprocess.run([sys.executable, "-m", "gcbench", "converge", "--help"], cwd=ROOT, capture_output=True,
                               text=True, timeout=120).stdout
    if "--device" not in help_text:
        return {"status": "not available", "why": "gcbench converge has no --device option here", "ok": True}
    try:
        cpu = _converge("cpu", out, steps, compressors, time_s / 2)
        gpu = _converge("cuda", out, steps, compressors, time_s / 2)
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:  # said in the step's JSON
        return {"status": "failed", "why": f"{type(exc).__name__}: {str(exc)[:400]}", "ok": False}
    agreed = agreement(cpu, gpu)
    return {"status": "compared", "compressors": compressors, "steps": steps, "rtol_loss": LOSS_RTOL, "atol_metric": METRIC_ATOL,
            "agreement": agreed, "cpu": cpu.get("results"), "cuda": gpu.get("results"),
            "ok": bool(agreed) and all(v["ok"] for v in agreed.values())}


# ----------------------------------------------------------------------------- command line


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("syncs", "bench", "hooks", "converge"))
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--names", default="")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--compressors", default="fp16,topk")
    ap.add_argument("--time", type=float, default=120.0,
                    help="bench: seconds after which no case starts; converge: seconds for its two runs")
    ap.add_argument("--sizes", default=",".join(str(s) for s in BENCH_SIZES), help="bench: element counts")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":  # an index for DDP's device_ids and NCCL's binding
        device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
        torch.cuda.set_device(device)
    t0 = time.monotonic()
    if args.step == "syncs":
        rows = sync_counts(device, [n for n in args.names.split(",") if n] or None)
        _print_syncs(rows, device)
        result: dict[str, Any] = {"device": str(device), "rows": rows, "ok": all(r["ok"] for r in rows)}
    elif args.step == "bench":
        result = bench_rows(device, args.out.parent / "bench", args.time, [n for n in args.names.split(",") if n] or None,
                            tuple(int(s) for s in args.sizes.split(",") if s))
        _print_bench(result)
    elif args.step == "hooks":
        result = hooks(device, args.model, args.iters, args.warmup, args.rounds)
        _print_hooks(result)
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        result = converge_check(args.out, args.steps, [c for c in args.compressors.split(",") if c], args.time)
        print(json.dumps({k: v for k, v in result.items() if k in ("status", "why", "agreement")}, indent=1))
    result["seconds"] = round(time.monotonic() - t0, 1)
    path = args.out / "converge.json" if args.step == "converge" else args.out
    path.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
