"""``gcbench advise --plan auto``: a compressor per tensor, chosen to minimise the predicted step under a fidelity floor.

Inputs, each measured (nothing fitted):

* per tensor and candidate compressor, the **fidelity** (the cosine between the tensor's gradient and what
  its receivers decode, one step from a fresh state) and the **wire bytes** (``len()`` of the tensor's
  payload): measured here on one forward + backward of the model (:func:`measure_tensor_fits`);
* per compressor, the **kernels** of the whole model (advise's bench: compress and decode as ×copy), charged
  to a group of tensors in proportion to its elements.

A plan's step (:func:`plan_step`) is ``compute + Σ_groups (compress + communicate + decode)``: each group of
tensors sharing a compressor is exchanged by its own protocol (:func:`gcbench.predict.step.price_step`, its
bytes the sum of its tensors' payloads); with ``local_steps = H`` the communication part is paid once every H
inner steps.  The search (:func:`search`) starts from every single compressor (its tensors below the floor
exempt) and moves one tensor at a time to the compressor that shortens the step most, until none does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gcbench.compressors import registry
from gcbench.core.errors import GcbenchError
from gcbench.predict.network import Network, Topology
from gcbench.predict.step import StepCost, exposed, price_step
from gcbench.predict.step_kernels import KernelSet, StepKernels, reference_copy
from gcbench.results.calibration import Calibration

#: the default per-tensor fidelity floor (``--fidelity-floor``): the cosine between a tensor's gradient and its decoded
#: compression.  At 0.5 the decoded tensor still points within 60° of the gradient: top-k and low-rank keep the
#: layers whose gradient concentrates and drop those where they keep little but noise (top-k 1% kept one weight of
#: digits_cnn's first convolution)
FIDELITY_FLOOR = 0.5
#: the dense codecs a tensor falls back to (exempt): bf16 where it meets the floor, else none
DENSE = ("bf16", "none")


@dataclass(frozen=True)
class TensorFit:
    """One gradient tensor: its name, size, kind and, per candidate spec, its fidelity (cosine) and payload bytes."""

    name: str
    numel: int
    kind: str | None
    fidelity: Mapping[str, float]
    wire_bytes: Mapping[str, float]


@dataclass(frozen=True)
class PlanStep:
    """A plan's predicted step on one cluster (seconds per inner step) and its terms."""

    step_s: float
    compute_s: float
    compress_s: float
    communicate_s: float
    decompress_s: float
    wire_bytes: float  # one worker's payload bytes of an exchange
    local_steps: int = 1


def plan_candidates(specs: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the specs a plan rule can name, one line per spec left out and why): a compressor that applies momentum of its
    own (plans refuse it) or that needs the whole model (it cannot take a subset of tensors) is left out."""
    keep, out = [], []
    for spec in specs:
        name, params = registry.parse_spec(spec)
        comp = registry.create(name, **params)
        if getattr(comp, "applies_momentum", False):
            out.append(f"{spec}: applies momentum of its own (a plan rule cannot name it)")
        elif comp.needs_whole_model:
            out.append(f"{spec}: needs the whole model (a rule gives it a subset of tensors)")
        else:
            keep.append(spec)
    for d in DENSE:
        if d not in keep:
            keep.append(d)
    return keep, out


def _cosine(a: object, b: object) -> float:
    import torch

    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    x, y = a.double().flatten(), b.double().flatten()
    nx, ny = float(x.norm()), float(y.norm())
    if nx == 0.0:
        return 1.0 if ny == 0.0 else 0.0
    return float(x @ y) / (nx * ny) if ny > 0 else 0.0


def measure_tensor_fits(model: str, specs: Sequence[str], *, seed: int = 0, device: str = "cpu") -> list[TensorFit]:
    """Per tensor of zoo ``model``, each spec's fidelity and payload bytes on one step's gradient (batch 0 at ``seed``)."""
    import torch

    from gcbench.plan.assign import tensor_infos
    from gcbench.sources.zoo import load_model

    zm = load_model(model, seed)
    module = zm.module.to(device)
    inputs, targets = zm.make_batch(0, 0)
    zm.loss_fn(module(inputs.to(device)), targets.to(device)).backward()
    params = dict(module.named_parameters())
    comps = {s: _create(s) for s in specs}
    fits = []
    with torch.no_grad():
        for info in tensor_infos(module):
            grad = params[info.name].grad
            g = grad.detach() if grad is not None else torch.zeros(info.shape, device=device)
            fid, size = {}, {}
            for spec, comp in comps.items():
                payload, decoded = comp.compress_and_decode(g, comp.init_state(seed))
                fid[spec], size[spec] = _cosine(decoded, g), float(payload.nbytes)
            fits.append(TensorFit(info.name, info.numel, info.kind, fid, size))
    return fits


def _create(spec: str) -> Any:
    name, params = registry.parse_spec(spec)
    return registry.create(name, **params)


def _kernel(kernels: KernelSet, spec: str) -> StepKernels:
    """The kernels of ``spec``: its label as typed, else the same configuration however the bench labelled it."""
    from gcbench.predict.accuracy import same_spec

    k = kernels.get(spec) or next((k for k in kernels.kernels if same_spec(k.label, spec)), None)
    if k is None:
        raise GcbenchError(f"no kernels of {spec} in {kernels.origin or 'the bench'}: it cannot be priced")
    return k


def plan_step(assignment: Mapping[str, str], fits: Sequence[TensorFit], kernels: KernelSet, n: int, net: Network,
              compute_s: float, topo: Topology = Topology(), overlap: bool = False,
              calibration: Calibration | None = None, local_steps: int = 1) -> PlanStep:
    """The step of ``assignment`` (tensor name → spec): each spec's group exchanged by its protocol, its kernels charged
    by element share against the reference copy, the communication of every group exposed once as DDP's is, and with
    ``local_steps`` H everything but the compute paid once every H inner steps."""
    copy_s = reference_copy(kernels.kernels)
    total = sum(f.numel for f in fits) or 1
    groups: dict[str, list[TensorFit]] = {}
    for f in fits:
        groups.setdefault(assignment[f.name], []).append(f)
    comp = comm = dec = wire = 0.0
    for spec, members in groups.items():
        k = _kernel(kernels, spec)
        share = sum(f.numel for f in members) / total
        identity = registry.get(k.compressor).identity
        c_s, d_s = (copy_s, copy_s) if identity else k.priced(copy_s)  # the identity is DDP's copies, as advise prices it
        size = sum(f.wire_bytes[spec] for f in members)
        cost = StepCost(spec, k.compressor, size, 4.0 * sum(f.numel for f in members), 0.0, c_s * share, d_s * share,
                        copy_s * share, len(members), k.params, 1)
        p = price_step(cost, n, net, topo, False, calibration)
        comp, comm, dec, wire = comp + p.compress_s, comm + p.communicate_s, dec + p.decompress_s, wire + p.payload_bytes
    wait = exposed(comm, compute_s, 4.0 * total, overlap)
    h = max(1, local_steps)
    return PlanStep(compute_s + (comp + wait + dec) / h, compute_s, comp / h, wait / h, dec / h, wire, h)


def admissible(fit: TensorFit, specs: Sequence[str], floor: float) -> list[str]:
    """The specs whose fidelity on ``fit`` meets ``floor`` (none always does: it is the gradient)."""
    return [s for s in specs if s == "none" or fit.fidelity.get(s, -math.inf) >= floor]


def fallback(fit: TensorFit, floor: float) -> str:
    """The dense codec an exempt tensor gets: bf16 where it meets the floor, else none."""
    return "bf16" if fit.fidelity.get("bf16", -math.inf) >= floor else "none"


def search(fits: Sequence[TensorFit], specs: Sequence[str], floor: float, price: object,
           passes: int = 3) -> dict[str, str]:
    """The assignment (tensor → spec) with the shortest ``price(assignment)`` step found: each single spec with the
    tensors below ``floor`` falling back (:func:`fallback`), the best of them improved one tensor at a time."""
    assert callable(price)
    ok = {f.name: admissible(f, specs, floor) for f in fits}
    best: dict[str, str] | None = None
    best_s = math.inf
    for spec in specs:
        a = {f.name: spec if spec in ok[f.name] else fallback(f, floor) for f in fits}
        s = price(a).step_s
        if best is None or s < best_s:
            best, best_s = a, s
    assert best is not None
    for _ in range(passes):
        moved = False
        for f in sorted(fits, key=lambda f: -f.numel):
            for spec in ok[f.name]:
                if spec == best[f.name]:
                    continue
                trial = {**best, f.name: spec}
                s = price(trial).step_s
                if s < best_s * (1 - 1e-12):
                    best, best_s, moved = trial, s, True
        if not moved:
            break
    return best
