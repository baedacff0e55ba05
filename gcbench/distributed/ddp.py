"""DDP communication hooks for every gcbench compressor: compressed training on ``torch.distributed``.

``register_compressor_hook(ddp_model, "topk:density=0.01")`` replaces DDP's gradient all-reduce with
a real compressed exchange (PyTorch's ``DistributedDataParallel.register_comm_hook`` API; gloo on
CPU, NCCL on GPU).  The same compressor objects, payloads and *protocols* as ``gcbench run`` are
used: the hook runs the compressor's :meth:`~gcbench.core.compressor.Compressor.worker_protocol`
generator on the ``torch.distributed`` transport (:mod:`gcbench.distributed.transport`), the very
code ``exchange`` runs on the simulated one, so the bytes measured in training are the bytes the
benchmark counts (``tests/distributed/test_protocol_transports.py`` checks it per leg and worker).  This module
knows no compressor by name: none/fp16/bf16 all-reduce their bodies, TernGrad shares its scaler,
PowerSGD all-reduces P and Q, 1-bit SGD runs its two legs, LGC runs its parameter server (hosted
by rank 0) or its ring, every other compressor all-gathers its payloads, because that is what their
protocols yield.  ``protocol="gather"`` forces the plain all-gather.  A compression plan (``"plan:FILE"``, a
:class:`~gcbench.plan.model.Plan`) gives each parameter its rule's compressor: :mod:`gcbench.distributed.plan_hook`.

A compressor whose protocol spans the whole model
(:attr:`~gcbench.core.compressor.Compressor.needs_whole_model`: LGC's reference preset) gets it:
DDP hands the hook one bucket at a time and waits for the buckets' futures only at the end of the
backward pass, so the hook holds each bucket's future until the step's last bucket arrives, then
runs the protocol once over every parameter's gradient (units in the module's parameter order,
states kept under :data:`WHOLE_MODEL`) and completes every bucket's future.  Everything else stays
per bucket.

Asynchronous, as PyTorch's own hooks: :func:`compressor_hook` returns at once a future chained with
the collectives' completion callbacks (each leg starts an ``async_op=True`` collective and the
protocol resumes in its callback), so a bucket's communication overlaps the backward pass of the
next buckets.  Collectives must start in the same order on every worker, so the buckets of a
model are exchanged one after another (a queue in :class:`~gcbench.distributed.hook_state.HookState`,
:func:`~gcbench.distributed.hook_state.queued`): bucket b + 1's protocol starts when bucket b's completed, while the
main thread goes on with the backward pass.

State (kept apart from the hook, like PyTorch's ``PowerSGDState``): a
:class:`~gcbench.distributed.hook_state.HookState`, one compressor state per compressed unit, kept per bucket index
and carried across steps and DDP's bucket rebuild (:mod:`gcbench.distributed.hook_state`).

Accounting (:class:`~gcbench.distributed.hook_stats.HookStats`), per bucket and step: ``payload_bytes`` = what this worker sent by
the protocol's counting rules (:mod:`gcbench.core.protocol`: payloads with their headers, the
ring all-reduce's chunks, TernGrad's scalers; the simulation's numbers); ``sent_bytes`` =
everything it handed to collectives, including the size exchanges (8 bytes per unit), the padding
to the largest payload and whole all-reduce buffers.  How a collective replicates those bytes
across links (ring, tree) is the network model's business (``predict/network.py``).

Wire verification (:mod:`gcbench.distributed.transport`): per bucket, ``promised_bytes`` (what the
messages declare: the payloads' ``nbytes``, an all-reduce's declared body), ``overhead_bytes`` (size
exchanges, framing), ``padding_bytes`` (this worker's message padded to the longest of a gather)
and ``wire_bytes``, measured from the tensors handed to ``torch.distributed``; ``wire_verified`` when
they add up.  A leg that does not raises :class:`~gcbench.distributed.transport.WireMismatchError`
(the compressor, the leg, promised and sent bytes), and so does a payload this worker sent whose
body is not the size its codec's header declares (``Compressor._expected_body_nbytes``): a silent
fallback to a wider dtype or a dense exchange is an error, not a number in a table.
``HookState(verify_wire=False)`` records the figures without raising.
Times (wall clock, CUDA synchronised), per bucket: ``compress_s`` = the protocol's computing
before and between its legs, ``decompress_s`` = after its last leg (and the write-back into the
bucket), ``communicate_s`` = from launching each leg's collectives to their completion callback,
which includes waiting for slower peers and for the buckets queued before.  With the overlap these
are not slices of the step: they can add up to more than the hook's share of it.  A whole-model
exchange is recorded as one bucket per step, index :data:`WHOLE_MODEL`.

Agreement: every rank must run the same compressor, parameters, protocol, granularity and seed,
or the ranks' collectives do not match (a peer's payload fails to decode, gloo aborts the process
on a size mismatch, or one rank's all-reduce waits for another's all-gather until the collective
timeout).  Before the first exchange the ranks all-gather a fixed-size fingerprint of that
configuration (:meth:`HookState.check_peers`: at :func:`register_compressor_hook`, or at the
first bucket for a state registered by hand) and every rank raises
:class:`~gcbench.distributed.launch.RankMismatchError`, one line naming each configuration and its ranks, when they differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from gcbench.core.compressor import Compressor
from gcbench.core.errors import ParamError
from gcbench.distributed.hook_state import WHOLE_MODEL, Held, HookState, bucket_units, make_compressor, queued
from gcbench.distributed.hook_stats import HookStats
from gcbench.distributed.plan_hook import as_plan, register_plan_hook
from gcbench.plan.model import Plan


def compressor_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook: the compressor's protocol on one bucket, averaged over the group, asynchronously.

    Returns at once; the future completes when the bucket's last collective has landed and the
    aggregate is written back into the bucket's layout (see the module docstring for the queue).
    A protocol over the whole model holds the bucket until the step's last one (:func:`_hold`).
    The first bucket of a state nobody checked compares the ranks' configurations first
    (:meth:`HookState.check_peers`): nothing is queued yet, so the blocking all-gather cannot interleave with an exchange.
    """
    if not state.peers_checked:
        state.check_peers()
    if state.whole_model:
        return _hold(state, bucket)
    buf = bucket.buffer()
    xs, offsets, signature, parts = bucket_units(state, bucket)
    index = bucket.index()
    states = state.states_for(index, signature, len(xs), parts, [x.numel() for x in xs])
    return queued(state, xs, states, buf.device, index, bucket.is_last(), lambda means: _write_back(buf, xs, offsets, means))


def _write_back(buf: torch.Tensor, xs: list[torch.Tensor], offsets: list[int], means: list[torch.Tensor]) -> torch.Tensor:
    """A bucket's result in its flat layout: each unit's aggregate at its offset (zeros in any gap between the views)."""
    if len(xs) == 1 and offsets == [0] and xs[0].numel() == buf.numel():
        return means[0].reshape(buf.shape).to(buf.dtype)
    out = torch.zeros_like(buf)
    for x, off, m in zip(xs, offsets, means, strict=True):
        out[off : off + x.numel()] = m.reshape(-1).to(buf.dtype)
    return out



def _hold(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A whole-model protocol's hook: hold this bucket's future; at the step's last bucket run the protocol over all of them.

    DDP starts the buckets in index order and waits for their futures only after the last one,
    so nothing waits on a held future before the protocol can run.  The units are every held
    bucket's parameter gradients in the module's parameter order (:meth:`HookState.name_parameters`).
    """
    buf = bucket.buffer()
    xs, offsets, _, _ = bucket_units(state, bucket)
    if bucket.index() == 0 and state.held:  # a step that broke off before its last bucket: nothing will complete those
        stale, state.held = state.held, []
        for h in stale:
            h.future.set_exception(RuntimeError("the DDP step ended before its last bucket reached the gradient hook"))  # type: ignore[arg-type]  # torch's stub types it as the value
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future(devices=[buf.device] if buf.device.type == "cuda" else None)
    state.held.append(Held(buf, list(bucket.parameters()), xs, offsets, fut))
    if not bucket.is_last():
        return fut
    held, state.held = state.held, []
    order = {pid: i for i, pid in enumerate(state.param_names)}  # the module's parameter order (a stable sort keeps the rest)
    units = sorted(((h, i) for h in held for i in range(len(h.xs))), key=lambda hi: order.get(id(hi[0].params[hi[1]]), len(order)))
    signature = tuple(state.param_names.get(id(h.params[i]), f"<unnamed {tuple(h.params[i].shape)}>") for h, i in units)
    states = state.states_for(WHOLE_MODEL, signature, len(units))

    def write(means: list[torch.Tensor]) -> list[torch.Tensor]:
        by_unit = {(id(h), i): m for (h, i), m in zip(units, means, strict=True)}  # back into each bucket's order
        return [_write_back(h.buffer, h.xs, h.offsets, [by_unit[id(h), i] for i in range(len(h.xs))]) for h in held]

    def settle(done: torch.futures.Future[list[torch.Tensor]]) -> None:
        try:
            outs = done.value()
        except BaseException as exc:  # every held bucket's waiter raises it
            for h in held:
                h.future.set_exception(exc)  # type: ignore[arg-type]  # torch's stub types it as the value
            return
        for h, out in zip(held, outs, strict=True):
            h.future.set_result(out)

    queued(state, [h.xs[i] for h, i in units], states, buf.device, WHOLE_MODEL, True, write).add_done_callback(settle)
    return fut


# DDP checks the hook's annotations by identity, and this module's are strings (PEP 563)
compressor_hook.__annotations__ = {"state": HookState, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}


def register_compressor_hook(
    ddp_model: torch.nn.parallel.DistributedDataParallel,
    compressor: str | Compressor | Plan,
    params: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    stats: HookStats | None = None,
    granularity: str = "bucket",
    protocol: str = "auto",
    process_group: dist.ProcessGroup | None = None,
    verify_wire: bool = True,
) -> HookState:
    """Make ``ddp_model`` exchange gradients through a gcbench compressor; returns the hook state.

    Args:
        ddp_model: a ``DistributedDataParallel`` model (its process group must be the default
            group or ``process_group``).
        compressor: a registered name (``"qsgd"``), a spec (``"topk:density=0.001"``) or an instance; or a compression
            plan, ``"plan:FILE"`` or a :class:`~gcbench.plan.model.Plan`: each parameter's gradient by its rule's
            compressor (:mod:`gcbench.distributed.plan_hook`; its units are always tensors, so ``granularity`` is ignored).
        params: compressor parameters (with a name or spec only).
        seed: seeds every unit's state (per worker, per bucket, per unit).
        stats: an existing :class:`HookStats` to record into (default: a new one, ``state.stats``).
        granularity: ``"bucket"`` compresses each flat DDP bucket, ``"layer"`` each parameter's gradient.
        protocol: ``"auto"`` runs the compressor's protocol (the paper's where it has one),
            ``"gather"`` forces all-gather-and-average.
        process_group: the group to communicate in (default: the default group).
        verify_wire: raise :class:`~gcbench.distributed.transport.WireMismatchError` when the bytes handed to
            ``torch.distributed`` are not what the messages promise (module doc); False records it in the stats only.

    A collective: every rank of the group calls it, and every rank raises
    :class:`~gcbench.distributed.launch.RankMismatchError` when their configurations differ
    (:meth:`HookState.check_peers`), before any gradient is exchanged.
    """
    plan = as_plan(compressor)
    if plan is not None:
        if params:
            raise ParamError("a plan names its compressors in its rules: give no params with it")
        return register_plan_hook(ddp_model, plan, seed=seed, stats=stats, protocol=protocol, process_group=process_group,
                                  verify_wire=verify_wire)
    assert not isinstance(compressor, Plan)  # as_plan took it
    comp = make_compressor(compressor, params)
    state = HookState(comp, process_group=process_group, seed=seed, granularity=granularity, protocol=protocol, stats=stats,
                      verify_wire=verify_wire)
    state.check_peers()
    state.name_parameters(ddp_model.module)
    ddp_model.register_comm_hook(state, compressor_hook)
    return state
