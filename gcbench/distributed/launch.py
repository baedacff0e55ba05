"""The launch environment of a torch.distributed job, checked before any rendezvous, and the rendezvous itself.

A launcher (``torchrun``, or a scheduler's script) tells each process its place through
environment variables: ``RANK`` and ``WORLD_SIZE``, and where rank 0 hosts the rendezvous store,
``MASTER_ADDR`` and ``MASTER_PORT``.  torch reads them only inside ``init_process_group``, where a
mistake becomes a ``ValueError`` traceback (``WORLD_SIZE=abc``, no ``MASTER_ADDR``) or a wait
that cannot end (``RANK=2`` of ``WORLD_SIZE=2``, ``RANK=-1``: rank 0 counts workers that will never
come).  :func:`launch_env` checks them all first and says in one line what is wrong; every gcbench
entry that joins a process group from the environment goes through :func:`init_from_env`, which
also turns a rendezvous that fails (the port taken, rank 0 absent, the timeout passed) into one
:class:`LaunchError` line naming the address, the rank and the cause.

Once the group exists, :func:`check_agreement` makes sure its ranks were configured alike (the
DDP hook's compressor, ``gcbench train``'s options under torchrun): one all-gather of a fixed-size
fingerprint, and every rank raises the same :class:`RankMismatchError` line when they differ,
instead of aborting or hanging in mismatched collectives.

No torch import at module level: ``gcbench train`` checks the environment before it loads torch,
so a bad launch fails in the time the command line takes to parse.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from gcbench.core.errors import GcbenchError

#: the variables a launcher sets; RANK and WORLD_SIZE together say "launched", the others where to meet
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class LaunchError(GcbenchError):
    """A launch environment that cannot form a process group, or a rendezvous that failed (one line, exit 1)."""


class RankMismatchError(GcbenchError):
    """The ranks of a process group hold different configurations (raised on every rank by :func:`check_agreement`)."""


#: bytes of the configuration fingerprint every rank all-gathers: a SHA-256 digest, then the readable text
FINGERPRINT_BYTES = 1024
_DIGEST_BYTES = 32


def check_agreement(what: str, configuration: Mapping[str, Any], text: str, group: Any = None) -> None:
    """Compare this rank's ``configuration`` with every rank's in ``group``; on a difference every rank raises the same line.

    One all-gather of a fixed-size fingerprint (SHA-256 of the canonical JSON, then ``text``,
    the configuration in words, truncated to fit): fixed so the comparison is itself a matching
    collective whatever the ranks hold.  A collective: every rank of the group must call it.  The
    :class:`RankMismatchError` reads ``ranks disagree on the {what}: rank 0: ...; rank 1: ...``.
    """
    import torch
    import torch.distributed as dist

    canonical = json.dumps(dict(configuration), sort_keys=True, separators=(",", ":"), default=repr).encode()
    raw = hashlib.sha256(canonical).digest() + text.encode()[: FINGERPRINT_BYTES - _DIGEST_BYTES]
    device = torch.device("cuda", torch.cuda.current_device()) if str(dist.get_backend(group)) == "nccl" else torch.device("cpu")
    mine = torch.tensor(list(raw.ljust(FINGERPRINT_BYTES, b"\0")), dtype=torch.uint8, device=device)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    raws = [bytes(t.cpu().tolist()) for t in every]
    if len({r[:_DIGEST_BYTES] for r in raws}) == 1:
        return
    ranks_of: dict[bytes, list[int]] = {}
    for r, fp in enumerate(raws):
        ranks_of.setdefault(fp, []).append(r)
    texts = {fp: fp[_DIGEST_BYTES:].rstrip(b"\0").decode("utf-8", "replace") for fp in ranks_of}
    parts = [f"{'rank' if len(rs) == 1 else 'ranks'} {', '.join(map(str, rs))}: {texts[fp]}" for fp, rs in ranks_of.items()]
    raise RankMismatchError(f"ranks disagree on the {what}: {'; '.join(parts)}")


@dataclass(frozen=True)
class LaunchEnv:
    """A launcher's settings for this process, checked: ``0 <= rank < world_size``, a port in 1-65535."""

    rank: int
    world_size: int
    master_addr: str
    master_port: int

    @property
    def where(self) -> str:
        """``rank R of W at ADDR:PORT``, for messages."""
        return f"rank {self.rank} of {self.world_size} at {self.master_addr}:{self.master_port}"


def launched(environ: Mapping[str, str] | None = None) -> bool:
    """True when a launcher set ``RANK`` or ``WORLD_SIZE`` (either one: :func:`launch_env` refuses a half-set pair)."""
    env = os.environ if environ is None else environ
    return "RANK" in env or "WORLD_SIZE" in env


def _integer(env: Mapping[str, str], name: str) -> int:
    text = env[name].strip()
    try:
        return int(text, 10)
    except ValueError:
        raise LaunchError(f"{name}={env[name]!r} is not an integer (set by the launcher; torchrun sets it for each process)") from None


def launch_env(environ: Mapping[str, str] | None = None) -> LaunchEnv | None:
    """This process's launch settings, checked; None when no launcher set ``RANK``/``WORLD_SIZE``.

    Raises :class:`LaunchError` (one line naming the variable) for anything ``init_process_group``
    would turn into a traceback or an endless wait: a missing or non-integer ``RANK``/``WORLD_SIZE``,
    ``WORLD_SIZE < 1``, ``RANK`` outside ``0 .. WORLD_SIZE - 1``, no ``MASTER_ADDR``, and a
    ``MASTER_PORT`` that is missing or outside 1-65535.
    """
    env = os.environ if environ is None else environ
    if not launched(env):
        return None
    missing = [v for v in ("RANK", "WORLD_SIZE") if v not in env]
    if missing:
        have = "RANK" if missing == ["WORLD_SIZE"] else "WORLD_SIZE"
        raise LaunchError(f"{have} is set but {missing[0]} is not: a torch.distributed launch sets both "
                          "(torchrun --nproc-per-node N -m gcbench ...), a single-machine run sets neither")
    world = _integer(env, "WORLD_SIZE")
    rank = _integer(env, "RANK")
    if world < 1:
        raise LaunchError(f"WORLD_SIZE={world} must be at least 1")
    if not 0 <= rank < world:
        raise LaunchError(f"RANK={rank} is outside 0..{world - 1} for WORLD_SIZE={world}: the rendezvous would wait forever "
                          "for ranks that cannot come")
    addr = env.get("MASTER_ADDR", "").strip()
    if not addr:
        raise LaunchError(f"RANK and WORLD_SIZE are set but MASTER_ADDR is {'empty' if 'MASTER_ADDR' in env else 'not'}: "
                          "set MASTER_ADDR and MASTER_PORT to rank 0's host and a free port (torchrun sets them)")
    if not env.get("MASTER_PORT", "").strip():
        raise LaunchError("MASTER_PORT is not set: set it to a free TCP port on rank 0's host (torchrun sets it)")
    port = _integer(env, "MASTER_PORT")
    if not 1 <= port <= 65535:
        raise LaunchError(f"MASTER_PORT={port} is not a TCP port (1-65535)")
    return LaunchEnv(rank, world, addr, port)


def _cause(exc: BaseException, launch: LaunchEnv, timeout_s: float) -> str:
    """What a failed rendezvous most likely means, from torch's message (which names neither the variable nor the fix)."""
    text = " ".join(str(exc).split()).lower()
    if "address already in use" in text or "eaddrinuse" in text:
        return f"MASTER_PORT {launch.master_port} is already in use on rank 0's host: choose a free port"
    if "timed out" in text or "timeout" in text or "connect" in text or "refused" in text:
        who = "the other ranks" if launch.rank == 0 else f"rank 0 at {launch.master_addr}:{launch.master_port}"
        return f"{who} did not join within {timeout_s:g} s (are all {launch.world_size} processes running, is the address reachable?)"
    if "name or service not known" in text or "nodename nor servname" in text or "getaddrinfo" in text:
        return f"MASTER_ADDR {launch.master_addr!r} does not resolve"
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    return f"{type(exc).__name__}: {first[:300]}"


def init_from_env(backend: str = "gloo", timeout_s: float = 300.0, environ: Mapping[str, str] | None = None) -> LaunchEnv:
    """Join the process group the launch environment describes (checked by :func:`launch_env` first).

    Raises :class:`LaunchError` when no launcher set the environment, when it is malformed, or when
    the rendezvous fails, in one line naming this rank, the address and the cause.
    """
    launch = launch_env(environ)
    if launch is None:
        raise LaunchError("no launch environment: run it on every rank with a torch.distributed launcher "
                          "(torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
    import torch.distributed as dist

    if dist.is_initialized():
        return launch
    try:
        with _stderr_held():
            # env:// and not a tcp:// URL of the checked values: under torchrun the agent already hosts the store on
            # MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE), and only the env:// handler joins it as a client
            dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=timeout_s))
    except (RuntimeError, ValueError, OSError, TimeoutError) as exc:  # DistNetworkError, DistStoreError are RuntimeErrors
        raise LaunchError(f"rendezvous failed ({launch.where}): {_cause(exc, launch, timeout_s)}") from exc
    return launch


@contextmanager
def _stderr_held() -> Iterator[None]:
    """Hold what C++ writes to file descriptor 2 meanwhile; pass it on only if the block succeeds.

    c10d logs a failed connection as dozens of ``[E...] socket.cpp`` lines with a C++ stack
    straight to fd 2, before the Python exception exists: a failed rendezvous is reported by its
    :class:`LaunchError` line instead (``--debug`` shows the chained torch error).
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        ok = False
        try:
            yield
            ok = True
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if ok:
                held.seek(0)
                text = held.read()
                if text:  # warnings of a rendezvous that worked stay visible
                    os.write(2, text)
