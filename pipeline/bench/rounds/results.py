"""Typed records of the headline rounds (measured by rounds/pairing.py) and the estimates they give.

A round's ratio comes from measurements taken next to each other, so each round is drift-free on
its own; the headline is the median over rounds with its interval (estimate.py). The estimates are
derived from the rounds whenever asked (the bootstrap is seeded), so bench.json stores the rounds
and a report rendered again from it has the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.stats.estimate import Estimate, estimate
from pipeline.bench.measure.results import Json, Point, Sweep


@dataclass
class Alternation:
    """One server burst and one in-process burst, back to back: the server's own mean time inside ORT per request,
    and in-process batch-1 ORT p50, both in ms (``in_server_ms`` None: the burst failed)."""

    in_server_ms: float | None
    in_process_ms: float
    server_first: bool

    @property
    def ratio(self) -> float | None:
        return self.in_server_ms / self.in_process_ms if self.in_server_ms and self.in_process_ms else None


def _p50(p: Point | None) -> float | None:
    return p.metrics["p50_ms"] if p is not None and p.valid else None


def _median(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return float(np.median(vals)) if vals else None


@dataclass
class C1Round:
    """perf_analyzer at c=1 on the latency variant (and the throughput variant next to it: the batching tax), with
    in-process ORT beside it: embedded, ``alternations`` between server and in-process bursts; external, in-process
    p50 ``gauges`` right before and after the served run."""

    index: int
    latency: Point
    throughput: Point | None = None
    order: list[str] = field(default_factory=list)
    alternations: list[Alternation] = field(default_factory=list)
    gauges: list[float] = field(default_factory=list)

    def in_server_ms(self, key: str | None) -> float | None:
        """The server's own time inside ORT per request during the served run (the window's in-server gauge)."""
        return self.latency.metrics.get(key) if key and self.latency.valid else None

    def served_vs_in_server(self, key: str | None) -> float | None:
        """Served p50 over the server's ORT time in the same window: the serving path's share, immune to drift."""
        p50, ort = _p50(self.latency), self.in_server_ms(key)
        return p50 / ort if p50 and ort else None

    def in_server_vs_in_process(self) -> float | None:
        """The server's ORT time over in-process ORT p50: the median over this round's alternations."""
        return _median([a.ratio for a in self.alternations])

    def ort_p50_ms(self) -> float | None:
        """In-process batch-1 ORT p50 of this round (median of the alternations' bursts, else mean of the gauges)."""
        if self.alternations:
            return _median([a.in_process_ms for a in self.alternations])
        return float(np.mean(self.gauges)) if self.gauges else None

    def ratio(self, key: str | None) -> float | None:
        """Served p50 over in-process ORT p50. Embedded: (served / in-server ORT, same window) x (in-server /
        in-process ORT, alternations): each factor compares numbers taken together. External: over the gauges' mean."""
        if self.alternations:
            a, b = self.served_vs_in_server(key), self.in_server_vs_in_process()
            return a * b if a and b else None
        p50, ort = _p50(self.latency), self.ort_p50_ms()
        return p50 / ort if p50 and ort else None

    def overhead_ms(self, key: str | None) -> float | None:
        """Served p50 minus the server's ORT time in the same window: what serving adds, in ms."""
        p50, ort = _p50(self.latency), self.in_server_ms(key)
        return p50 - ort if p50 and ort else None

    def tax_ms(self) -> float | None:
        """The throughput variant's p50 above the latency variant's, run next to each other at c=1."""
        lat, thr = _p50(self.latency), _p50(self.throughput)
        return thr - lat if lat and thr else None

    def to_json(self, key: str | None) -> Json:
        d: Json = {"round": self.index, "order": self.order, "latency": step(self.latency)}
        d |= {"throughput": step(self.throughput)} if self.throughput is not None else {}
        d |= {"alternations": [[a.in_server_ms, a.in_process_ms, a.server_first] for a in self.alternations]} if self.alternations else {}
        d |= {"gauges": self.gauges} if self.gauges else {}
        return d | {
            "ort_p50_ms": self.ort_p50_ms(),
            "served_vs_in_server": self.served_vs_in_server(key),
            "in_server_vs_in_process": self.in_server_vs_in_process(),
            "ratio": self.ratio(key),
            "overhead_ms": self.overhead_ms(key),
            "batching_tax_ms": self.tax_ms(),
        }

    @classmethod
    def from_json(cls, d: Json) -> C1Round:
        thr = d.get("throughput")
        return cls(
            d["round"],
            _point(1, d["latency"]),
            _point(1, thr) if thr else None,
            d.get("order", []),
            [Alternation(s, p, bool(f)) for s, p, f in d.get("alternations", [])],
            d.get("gauges", []),
        )


def step(p: Point) -> Json:
    """A round's point as bench.json keeps it (its concurrency is the round's)."""
    return {k: v for k, v in p.to_json().items() if k not in ("concurrency", "failed_requests")}


def _point(c: int, s: Json) -> Point:
    return Point.from_json({**s, "concurrency": c})


@dataclass
class C1Rounds:
    """The c=1 rounds and why they stopped; ``in_server_key`` names the served metric that is the server's ORT time."""

    in_server_key: str | None
    rounds: list[C1Round] = field(default_factory=list)
    stopped: str = ""

    def weights(self) -> list[float]:
        """Each round's weight: (fastest round's in-process ORT p50 / this round's)^2, 1 for the quietest round.

        Every c=1 estimate uses them, so the headline and its factors come from the same rounds.

        Contention is not a slowdown that hits both sides alike: a round whose in-process gauge ran several times
        slower than the run's fastest had the CPU taken away from it at 100 ms scales, and such rounds read low
        (served faster than in-process, which the serving path cannot be). They still count, at a weight falling
        with the square of their slowdown, so a run on a busy machine is carried by its uncontended rounds.
        """
        g = [r.ort_p50_ms() for r in self.rounds]
        fastest = min((x for x in g if x), default=None)
        return [(fastest / x) ** 2 if fastest and x else 0.0 for x in g]

    def ratio(self) -> Estimate:
        """The headline: latency variant c=1 p50 over in-process ORT p50 (rounds weighted by :meth:`weights`)."""
        return estimate([r.ratio(self.in_server_key) for r in self.rounds], self.weights())

    def served_vs_in_server(self) -> Estimate:
        return estimate([r.served_vs_in_server(self.in_server_key) for r in self.rounds], self.weights())

    def in_server_vs_in_process(self) -> Estimate:
        return estimate([r.in_server_vs_in_process() for r in self.rounds], self.weights())

    def overhead_ms(self) -> Estimate:
        return estimate([r.overhead_ms(self.in_server_key) for r in self.rounds], self.weights())

    def batching_tax_ms(self) -> Estimate:
        return estimate([r.tax_ms() for r in self.rounds], self.weights())

    def decisive(self) -> list[Estimate]:
        """What the stopping rule watches: the headline ratio."""
        return [self.ratio()]

    def median_round(self) -> C1Round | None:
        """The round whose ratio is the median (the lower middle one for an even count): its served point is shown."""
        valued = sorted(((x, r) for r in self.rounds if (x := r.ratio(self.in_server_key)) is not None), key=lambda xr: xr[0])
        return valued[(len(valued) - 1) // 2][1] if valued else None

    def served_p50_ms(self) -> float | None:
        return _median([_p50(r.latency) for r in self.rounds])

    def ort_p50_ms(self) -> float | None:
        return _median([r.ort_p50_ms() for r in self.rounds])

    def to_json(self) -> Json:
        k = self.in_server_key
        return {
            "in_server_gauge": k,
            "stopped": self.stopped,
            "ratio": self.ratio().to_json(),
            "served_vs_in_server": self.served_vs_in_server().to_json(),
            "in_server_vs_in_process": self.in_server_vs_in_process().to_json(),
            "overhead_ms": self.overhead_ms().to_json(),
            "batching_tax_ms": self.batching_tax_ms().to_json(),
            "served_p50_ms": self.served_p50_ms(),
            "ort_p50_ms": self.ort_p50_ms(),
            "rounds": [r.to_json(k) | {"weight": w} for r, w in zip(self.rounds, self.weights())],
        }

    @classmethod
    def from_json(cls, d: Json) -> C1Rounds:
        return cls(d.get("in_server_gauge"), [C1Round.from_json(r) for r in d["rounds"]], d.get("stopped", ""))


@dataclass
class ThroughputRound:
    """Both variants at one concurrency, next to each other, and in-process ORT best-batch infer/s next to the
    throughput variant's run. ``order`` alternates per round: [latency, throughput, gauge] / [gauge, throughput, latency]."""

    index: int
    order: list[str]
    latency: Point
    throughput: Point
    gauge: float

    def ratio(self) -> float | None:
        """Throughput variant infer/s over the latency variant's."""
        lat, thr = self.latency, self.throughput
        return thr.metrics["throughput_infer_s"] / lat.metrics["throughput_infer_s"] if lat.valid and thr.valid else None

    def vs_ort_best(self) -> float | None:
        """Throughput variant infer/s over in-process best-batch infer/s measured next to it."""
        return self.throughput.metrics["throughput_infer_s"] / self.gauge if self.throughput.valid and self.gauge else None

    def p50_delta_ms(self) -> float | None:
        lat, thr = _p50(self.latency), _p50(self.throughput)
        return thr - lat if lat and thr else None

    def to_json(self) -> Json:
        return {
            "round": self.index,
            "order": self.order,
            "latency": step(self.latency),
            "throughput": step(self.throughput),
            "ort_best_infer_s": self.gauge,
            "ratio": self.ratio(),
            "throughput_vs_ort_best": self.vs_ort_best(),
            "p50_delta_ms": self.p50_delta_ms(),
        }

    @classmethod
    def from_json(cls, d: Json, c: int) -> ThroughputRound:
        return cls(d["round"], d["order"], _point(c, d["latency"]), _point(c, d["throughput"]), d["ort_best_infer_s"])


@dataclass
class ThroughputRounds:
    """The rounds at one concurrency and why they stopped."""

    concurrency: int
    rounds: list[ThroughputRound] = field(default_factory=list)
    stopped: str = ""

    def vs_latency(self) -> Estimate:
        return estimate([r.ratio() for r in self.rounds])

    def vs_ort_best(self) -> Estimate:
        return estimate([r.vs_ort_best() for r in self.rounds])

    def decisive(self) -> list[Estimate]:
        return [self.vs_latency(), self.vs_ort_best()]

    def infer_s(self, variant: str) -> float | None:
        """The median infer/s of ``variant`` over the rounds."""
        return _median([getattr(r, variant).metrics.get("throughput_infer_s") for r in self.rounds if getattr(r, variant).valid])

    def to_json(self) -> Json:
        return {
            "stopped": self.stopped,
            "vs_latency": self.vs_latency().to_json(),
            "vs_ort_best": self.vs_ort_best().to_json(),
            "latency_infer_s": self.infer_s("latency"),
            "throughput_infer_s": self.infer_s("throughput"),
            "rounds": [r.to_json() for r in self.rounds],
        }

    @classmethod
    def from_json(cls, d: Json, c: int) -> ThroughputRounds:
        return cls(c, [ThroughputRound.from_json(r, c) for r in d["rounds"]], d.get("stopped", ""))


def median_point(points: list[Point]) -> Point | None:
    """The valid point with the median infer/s (the lower middle one for an even count), else the last invalid one."""
    valid = sorted((p for p in points if p.valid), key=lambda p: p.metrics["throughput_infer_s"])
    if valid:
        return valid[(len(valid) - 1) // 2]
    return points[-1] if points else None


def sweep_from_rounds(c1: C1Rounds | None, tp: dict[int, ThroughputRounds]) -> dict[str, Sweep]:
    """Per variant, each concurrency's :func:`median_point` over the rounds (the default profile has no separate sweep)."""
    pts: dict[str, dict[int, list[Point]]] = {}
    for r in c1.rounds if c1 else []:
        pts.setdefault("latency", {}).setdefault(1, []).append(r.latency)
        if r.throughput is not None:
            pts.setdefault("throughput", {}).setdefault(1, []).append(r.throughput)
    for c, t in sorted(tp.items()):
        for tr in t.rounds:
            for v in ("latency", "throughput"):
                pts.setdefault(v, {}).setdefault(c, []).append(getattr(tr, v))
    return {v: Sweep([p for c in sorted(by_c) if (p := median_point(by_c[c])) is not None], "rounds") for v, by_c in pts.items()}
