"""A network calibration: the collectives of one backend timed on one network, the file that holds them and the fit.

``python -m gcbench.distributed.calibrate`` measures the prices on a running process group; the cost model
(:mod:`gcbench.predict.network`, ``gcbench advise --network FILE``) prices each collective the file covers as measured.
Both read this module, which sits below both: the measurement imports no prediction and the prediction no
torch.distributed.

A price is relative to the latency–bandwidth (α–β, Hockney) cost of the collective's algorithm
(:data:`COLLECTIVES`): a message of m bytes over one link costs ``α + m/B``, so a collective costs
``alphas·α + volume/B`` (:class:`Cost`) with the latency rounds and the bytes through one link its algorithm takes.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from gcbench.core.errors import ParamError, ResultsError
from gcbench.core.files import load_user_json


class Link(Protocol):
    """A worker's link as a cost is priced on it (:class:`gcbench.predict.network.Network`)."""

    @property
    def latency_s(self) -> float: ...

    @property
    def bytes_per_s(self) -> float: ...


@dataclass(frozen=True)
class Cost:
    """A communication cost as ``alphas·α + volume/B``: latency rounds and bytes through one link."""

    alphas: float
    volume: float

    def seconds(self, net: Link) -> float:
        return self.alphas * net.latency_s + self.volume / net.bytes_per_s

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.alphas + other.alphas, self.volume + other.volume)


def ring_allreduce(nbytes: float, n: int) -> Cost:
    """Ring all-reduce of ``nbytes`` over ``n`` workers: 2(n−1) rounds, 2(n−1)/n of the buffer."""
    if n <= 1:
        return Cost(0.0, 0.0)
    return Cost(2.0 * (n - 1), 2.0 * (n - 1) / n * nbytes)


def ring_allgather(nbytes: float, n: int) -> Cost:
    """Ring all-gather of ``nbytes`` per worker: n−1 rounds, each worker receives (n−1)·nbytes."""
    if n <= 1:
        return Cost(0.0, 0.0)
    return Cost(float(n - 1), (n - 1) * float(nbytes))


def pairwise_alltoall(nbytes: float, n: int) -> Cost:
    """All-to-all of ``nbytes`` per worker cut into n parts (part j to worker j): n−1 rounds, (n−1)/n of the message out."""
    if n <= 1:
        return Cost(0.0, 0.0)
    return Cost(float(n - 1), (n - 1) / n * float(nbytes))


# ----------------------------------------------------------------------------- collectives measured on a network

#: the collectives a calibration prices, and the α–β cost of each that its measured price is relative to
COLLECTIVES = {"allreduce": ring_allreduce, "allgather": ring_allgather, "alltoall": pairwise_alltoall}


@dataclass(frozen=True)
class CollectivePrice:
    """One collective as a backend really runs it on one network, relative to the α–β model of :data:`COLLECTIVES`.

    ``seconds = overhead_s + efficiency × volume / B``, where ``volume`` is the model's bytes through one link and
    B the link's nominal rate.  ``efficiency`` above 1 is what the model leaves out: Ethernet/IP/TCP framing and
    acknowledgements sharing the link, a backend algorithm that does not use both directions of a link (gloo's
    all-gather), copies.  ``overhead_s`` is the fixed cost of one call at ``workers`` (latency rounds, the size
    exchange gcbench's transport does first, the backend's own work)."""

    kind: str
    workers: int
    efficiency: float
    overhead_s: float
    points: tuple[tuple[float, float], ...] = ()  # (bytes per worker, median seconds) it was fitted to


def fit_price(kind: str, workers: int, points: Sequence[tuple[float, float]], bandwidth_gbps: float) -> CollectivePrice:
    """Least-squares line through measured (bytes per worker, seconds) of one collective: its efficiency and overhead.

    The line is fitted in the model's volume time (``volume / B``), so its slope is the efficiency; a negative
    intercept (noise on a fixed cost near zero) is fixed at zero and the slope refitted through the origin."""
    if kind not in COLLECTIVES:
        raise ParamError(f"unknown collective {kind!r}: one of {', '.join(COLLECTIVES)}")
    if len(points) < 2 or workers < 2:
        raise ParamError(f"a price needs at least two message sizes on two or more workers, got {len(points)} on {workers}")
    bps = bandwidth_gbps * 1e9 / 8
    xs = [COLLECTIVES[kind](b, workers).volume / bps for b, _ in points]
    ys = [t for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        raise ParamError("a price needs at least two different message sizes")
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    icept = my - slope * mx
    if icept < 0:
        slope, icept = sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs), 0.0
    if slope <= 0:
        raise ParamError(f"the {kind} times do not grow with the message size ({', '.join(f'{1e3 * t:.2f} ms' for t in ys)}): "
                         "the messages are too small to see the link; measure larger ones")
    return CollectivePrice(kind, workers, slope, icept, tuple((float(b), float(t)) for b, t in points))


@dataclass(frozen=True)
class Calibration:
    """The collectives of one backend timed on one network (``python -m gcbench.distributed.calibrate``), for
    ``gcbench advise --network FILE``: prices replace the α–β model's for the kinds and worker counts they cover."""

    backend: str
    bandwidth_gbps: float  # the nominal rate of the links the prices were measured on
    prices: tuple[CollectivePrice, ...]
    origin: str = ""

    def price(self, kind: str, n: int) -> CollectivePrice | None:
        """The price of ``kind`` measured at ``n`` workers, else at the nearest worker count measured (None: not priced)."""
        mine = [p for p in self.prices if p.kind == kind]
        return min(mine, key=lambda p: (abs(p.workers - n), -p.workers)) if mine else None

    def seconds(self, kind: str, nbytes: float, n: int, net: Link) -> tuple[float, str] | None:
        """(seconds, how) of ``kind`` from its measured price at ``net``'s rate; the fixed cost scales with the latency
        rounds of the algorithm from the measured worker count to ``n``.  None when ``kind`` was not measured."""
        p = self.price(kind, n)
        if p is None:
            return None
        model, at = COLLECTIVES[kind](nbytes, n), COLLECTIVES[kind](1.0, p.workers)
        fixed = p.overhead_s * (model.alphas / at.alphas if at.alphas else 1.0)
        how = f"{self.backend} measured" + ("" if p.workers == n else f" at {p.workers} workers")
        return fixed + p.efficiency * model.volume / net.bytes_per_s, how

    def to_dict(self) -> dict[str, Any]:
        return {"format": "gcbench-network-calibration", "version": 1, "backend": self.backend,
                "bandwidth_gbps": self.bandwidth_gbps,
                "prices": [{**asdict(p), "points": [list(x) for x in p.points]} for p in self.prices]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], origin: str = "") -> Calibration:
        """Read :meth:`to_dict`'s form; anything else is a :class:`ResultsError` naming ``origin``."""
        where = origin or "the calibration file"
        if not isinstance(data, Mapping) or data.get("format") != "gcbench-network-calibration":
            raise ResultsError(f"{where} is not a gcbench network calibration (make one with "
                               "`python -m gcbench.distributed.calibrate`)")
        try:
            prices = tuple(CollectivePrice(str(p["kind"]), int(p["workers"]), float(p["efficiency"]), float(p["overhead_s"]),
                                           tuple((float(b), float(t)) for b, t in p.get("points", ())))
                           for p in data["prices"])
            cal = cls(str(data["backend"]), float(data["bandwidth_gbps"]), prices, origin)
        except (KeyError, TypeError, ValueError) as e:
            raise ResultsError(f"{where} is damaged: {e}") from None
        bad = [p for p in prices if p.kind not in COLLECTIVES or p.workers < 2 or not 0 < p.efficiency < math.inf
               or not 0 <= p.overhead_s < math.inf]
        if bad or not prices:
            raise ResultsError(f"{where} is damaged: " + (f"a price of {bad[0].kind!r} at {bad[0].workers} workers is not usable"
                                                          if bad else "it holds no price"))
        return cal

    def describe(self) -> str:
        """One line for the output: where the prices come from and what they say."""
        parts = ", ".join(f"{p.kind} {p.efficiency:.2f}× the model's volume time + {1e3 * p.overhead_s:.1f} ms at {p.workers} workers"
                          for p in sorted(self.prices, key=lambda p: (p.kind, p.workers)))
        return (f"collectives priced from {self.origin or 'a calibration'} ({self.backend}, measured at "
                f"{self.bandwidth_gbps:g} Gbit/s): {parts}")


def load_calibration(path: str | os.PathLike[str]) -> Calibration:
    """Read a calibration file; a missing, unreadable or foreign file is one :class:`ResultsError` line."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise ResultsError(f"no calibration file {path}")
    try:  # a regular file of at most 1 MiB: a device or FIFO given to --network is refused, not read forever
        data = load_user_json(p, "calibration file", error=ResultsError)
    except ResultsError as e:
        raise ResultsError(f"cannot read the calibration: {e}") from None
    return Calibration.from_dict(data, str(path))
