"""Rate-limited links on one machine: N network namespaces on a bridge, each link shaped with tc.

The validation of ``gcbench advise`` needs real multi-process training over a network whose
bandwidth and latency are known and far below the loopback's, so that communication is a large
part of every step.  :class:`NetLab` builds one, like a cluster of N single-GPU nodes on a switch:

* one namespace per worker (``gcb0`` … ``gcb{N-1}``), each with one veth whose peer sits on the
  bridge ``gcbbr`` in the root namespace, addresses ``10.77.0.1`` … ``10.77.0.N``;
* each link is full duplex at ``mbit``: the worker side's egress (its upload) and the bridge side's
  egress towards it (its download) each get a token-bucket qdisc (``tbf``) at that rate, with a
  queue long enough (2 s) that a burst of a whole bucket is delayed, not dropped.  No latency is
  added: this kernel has no ``netem``; the links keep the veth's own (tens of µs), which
  :func:`check` reports from a ping.
* :meth:`NetLab.popen` starts a command inside a worker's namespace.

Needs root (CAP_NET_ADMIN) and iproute2; everything it made is removed on exit, also after an
error.  Used by ``benchmarks/validate_network.py``; run alone it prints a ping and a one-way
transfer per link, a check that the shaping holds::

    python benchmarks/netlab.py --workers 2 --mbit 50
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from types import TracebackType

PREFIX = "gcb"
BRIDGE = f"{PREFIX}br"
SUBNET = "10.77.0"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _tc(*args: str) -> None:
    subprocess.run(["tc", *args], check=True, capture_output=True, text=True)


class NetLab:
    """N namespaces on a bridge with shaped links (see the module docstring); a context manager."""

    def __init__(self, workers: int, mbit: float) -> None:
        if workers < 1 or workers > 200:
            raise ValueError(f"workers must be 1..200, got {workers}")
        if mbit <= 0:
            raise ValueError(f"mbit must be positive, got {mbit}")
        self.workers, self.mbit = workers, float(mbit)

    def ns(self, rank: int) -> str:
        """The namespace of worker ``rank``."""
        return f"{PREFIX}{rank}"

    def dev(self, rank: int) -> str:
        """Worker ``rank``'s interface inside its namespace (what ``GLOO_SOCKET_IFNAME`` names)."""
        return f"{PREFIX}v{rank}"

    def addr(self, rank: int) -> str:
        """Worker ``rank``'s address."""
        return f"{SUBNET}.{rank + 1}"

    def __enter__(self) -> NetLab:
        self.teardown()  # leftovers of an interrupted earlier run
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.teardown()

    def _build(self) -> None:
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("link", "set", BRIDGE, "up")
        rate = f"{self.mbit:g}mbit"
        # the bucket holds 10 ms at the rate (at least two full frames); the queue 2 s of traffic:
        # a bucket of gradients sent at once waits in it instead of being dropped (TCP backing off
        # would make the link slower than its rate)
        burst = str(max(2 * 1514, int(self.mbit * 1e6 / 8 / 100)))
        shape = ["tbf", "rate", rate, "burst", burst, "latency", "2s"]
        for r in range(self.workers):
            ns, dev, peer = self.ns(r), self.dev(r), f"{PREFIX}p{r}"
            _ip("netns", "add", ns)
            _ip("link", "add", dev, "type", "veth", "peer", "name", peer)
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{self.addr(r)}/24", "dev", dev)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("link", "set", peer, "master", BRIDGE, "up")
            _tc("-n", ns, "qdisc", "add", "dev", dev, "root", *shape)
            _tc("qdisc", "add", "dev", peer, "root", *shape)

    def teardown(self) -> None:
        """Remove every namespace and the bridge this lab makes (also those of an earlier run)."""
        listed = _ip("netns", "list", check=False).stdout.split()
        for name in listed:
            if name.startswith(PREFIX) and name[len(PREFIX):].isdigit():
                _ip("netns", "del", name, check=False)
        _ip("link", "del", BRIDGE, check=False)
        # a namespace some process still holds (a worker that outlived its run) keeps its veth pair: delete
        # the bridge-side ends here, which takes their peers with them
        for line in _ip("-o", "link", check=False).stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0] if line.count(":") >= 2 else ""
            if name.startswith((f"{PREFIX}p", f"{PREFIX}v")) and name[len(PREFIX) + 1:].isdigit():
                _ip("link", "del", name, check=False)
        # a deleted namespace's links go away asynchronously: wait, or the next lab's veth "exists"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
                f" {PREFIX}p" in line or f" {PREFIX}v" in line for line in _ip("-o", "link", check=False).stdout.splitlines()):
            time.sleep(0.05)

    def popen(self, rank: int, argv: Sequence[str], env: Mapping[str, str] | None = None,
              **kwargs: object) -> subprocess.Popen[bytes]:
        """Start ``argv`` in worker ``rank``'s namespace with ``env`` added to this process's environment."""
        full = {**os.environ, **(env or {})}
        return subprocess.Popen(["ip", "netns", "exec", self.ns(rank), *argv], env=full, **kwargs)  # type: ignore[call-overload]

    def torch_env(self, rank: int, port: int) -> dict[str, str]:
        """The environment a ``torch.distributed`` worker needs here (env:// init, gloo on the shaped link)."""
        return {"RANK": str(rank), "WORLD_SIZE": str(self.workers), "LOCAL_RANK": "0", "MASTER_ADDR": self.addr(0),
                "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": self.dev(rank)}


_SINK = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 20)
    if not b: break
    t0 = t0 or time.perf_counter(); n += len(b)
print(n, time.perf_counter() - t0, flush=True)
"""

_ECHO = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1)
c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while (b := c.recv(1)):
    c.sendall(b)
"""

_PING = """
import socket, statistics, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for _ in range(200):
    t0 = time.perf_counter(); s.sendall(b"x"); s.recv(1); rtts.append(time.perf_counter() - t0)
s.close(); print(statistics.median(rtts))
"""

_SOURCE = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30); buf = b"x" * (1 << 20)
for _ in range(int(sys.argv[3])): s.sendall(buf)
s.close()
"""


def check(lab: NetLab, megabytes: int) -> None:
    """Time a round trip from worker 1 to worker 0 and send ``megabytes`` one way; print the rate the link gave."""
    if lab.workers < 2:
        return
    port = _free_port()
    echo = lab.popen(0, [sys.executable, "-c", _ECHO, str(port)])
    time.sleep(0.5)
    rtt = subprocess.run(["ip", "netns", "exec", lab.ns(1), sys.executable, "-c", _PING, lab.addr(0), str(port)],
                         check=True, capture_output=True, text=True).stdout.strip()
    echo.wait(timeout=30)
    print(f"TCP round trip (median of 200 one-byte echoes): {float(rtt) * 1e6:.0f} µs")
    port = _free_port()
    sink = lab.popen(0, [sys.executable, "-c", _SINK, str(port)], stdout=subprocess.PIPE)
    time.sleep(0.5)
    subprocess.run(["ip", "netns", "exec", lab.ns(1), sys.executable, "-c", _SOURCE, lab.addr(0), str(port), str(megabytes)],
                   check=True)
    out, _ = sink.communicate(timeout=300)
    n, secs = out.split()
    print(f"{int(n) / 1e6:.1f} MB in {float(secs):.2f} s: {int(n) * 8 / float(secs) / 1e6:.1f} Mbit/s (shaped at {lab.mbit:g})")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--mbit", type=float, default=50.0)
    ap.add_argument("--megabytes", type=int, default=20, help="size of the one-way transfer check")
    args = ap.parse_args(argv)
    try:
        with NetLab(args.workers, args.mbit) as lab:
            check(lab, args.megabytes)
    except subprocess.CalledProcessError as exc:
        print(f"netlab: {' '.join(exc.cmd)} failed: {(exc.stderr or '').strip()} (needs root and iproute2)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
