"""A recent whole-model bench to reuse: ``gcbench advise`` prices kernels from it instead of timing them again.

A bench of a large model takes minutes (ResNet-50: about 3.5 min), and ``advise`` used to run one on
every call.  A stored bench answers the same question when it measured the same model, for every
compressor asked for (same effective parameters), on the same machine (:meth:`Environment.machine_key`:
CPU model, cores, threads, GPU, kernel path) with the same gcbench version, completely, and not long
ago.  Its file is named in advise's output, so where a number came from is never hidden;
``--remeasure`` times the kernels anew.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import gcbench
from gcbench.compressors import registry
from gcbench.results.bench_record import BenchCase
from gcbench.results.record import Environment, RunRecord
from gcbench.results.store import environment, recent_benches

#: a bench older than this is measured anew: a machine's speed and load move over hours and days
MAX_AGE_S = 24 * 3600.0


def _config(name: str, params: Any) -> tuple[str, str]:
    """A compressor configuration as a results file holds it (JSON: tuples become lists), comparable across files."""
    return name, json.dumps(dict(params or {}), sort_keys=True, default=str)


def wanted_configs(specs: Sequence[str]) -> list[tuple[str, str]]:
    """(name, effective parameters) of every SPEC: what a bench case must have measured to stand for it."""
    out = []
    for sp in specs:
        name, params = registry.parse_spec(sp)
        out.append(_config(name, json.loads(json.dumps(dict(registry.create(name, **params).params), default=str))))
    return out


def _covers(record: RunRecord, model: str, wanted: Sequence[tuple[str, str]]) -> bool:
    """Whether ``record`` measured ``model`` for every wanted configuration, at each compressor's current version."""
    current = {n: registry.get(n).version for n in registry.names()}
    have = {_config(str(c.compressor), c.params) for c in record.cases
            if isinstance(c, BenchCase) and c.ok and c.model == model and str(c.compressor) in current
            and c.version == current[str(c.compressor)]}
    return all(w in have for w in wanted)


def find_recent_bench(model: str, specs: Sequence[str], runs_dir: Path | str, *, device: str = "cpu",
                      max_age_s: float = MAX_AGE_S, now: datetime | None = None, stored: str | None = None,
                      skip: Path | None = None) -> tuple[RunRecord, Path, float] | None:
    """The newest complete bench file in ``runs_dir`` that measured ``model`` for every compressor ``specs`` names,
    on this machine and gcbench version, at most ``max_age_s`` old: (record, path, age in seconds), or None.
    ``stored``: only a file that holds this key (advise's compute time); ``skip``: not this file (the one just written)."""
    here = Environment.model_validate(environment(device)).machine_key()
    wanted = wanted_configs(specs)
    for record, path, age in recent_benches(runs_dir, max_age_s, now):
        if skip is not None and path.resolve() == skip.resolve():
            continue
        if record.status != "complete" or record.gcbench_version != gcbench.__version__:
            continue
        if record.env.machine_key() != here or not _covers(record, model, wanted):
            continue
        if stored is not None and stored not in (record.model_extra or {}):
            continue
        return record, path, age
    return None
