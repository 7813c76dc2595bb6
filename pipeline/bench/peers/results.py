"""Typed records of the side-by-side bench (bench.peers): deployments, their cold starts and answers, the rounds.

Measured by :mod:`~pipeline.bench.peers.run`, rendered by :mod:`~pipeline.bench.report.peers`; each record has a
``to_json``/``from_json`` pair, read and written only through :class:`PeersResult` (bench.json's ``peers``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pipeline.stats.estimate import Estimate
from pipeline.bench.measure.results import Point
from pipeline.bench.readiness.results import ColdStart
from pipeline.bench.rounds.results import median_point

Json = dict[str, Any]


def _plain(cls: type, d: Json) -> Any:
    return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass
class Scheduling:
    """TorchServe's scheduling for one deployment, and the Triton variant fields it mirrors (for the report)."""

    batch_size: int
    max_batch_delay_ms: int
    workers: int
    mirrors: str  # e.g. "dynamic_batching preferred [4, 8, 16] (largest 16), max_queue_delay 2000 us, 1 instance"


@dataclass
class Agreement:
    """A deployment's answers to every sample row against Triton's (the same graph's latency variant), per output:
    the error statistic of the parity tolerance (``stat``) on absolute and relative error, and the verdict."""

    rows: int
    failed: int  # requests that got no answer (HTTP status other than 200): a handler error counts here
    abs_error: dict[str, float] = field(default_factory=dict)
    rel_error: dict[str, float] = field(default_factory=dict)
    tolerance: dict[str, dict[str, float | str]] = field(default_factory=dict)  # output -> atol, rtol, stat
    passed: bool = False
    first_error: str = ""  # the first failed answer's status and body
    response_bytes: float = 0.0  # mean size of an answer's JSON body


@dataclass
class Deployment:
    """One served thing of the side-by-side table: a Triton variant, or a TorchServe deployment mirroring one."""

    key: str  # e.g. "torchserve_same_graph_throughput"
    label: str  # e.g. "TorchServe same graph (throughput)"
    server: str  # "triton" | "torchserve"
    kind: str  # "triton" | "same_graph" (the server comparison) | "native" (the runtime comparison)
    variant: str  # the Triton variant it is, or mirrors
    model: str  # the name it is served under
    runtime: str  # what runs the model, with its threads and graph level
    server_label: str  # the server process it runs in (RSS is per server)
    scheduling: Scheduling | None = None  # TorchServe only (Triton's is its config)
    # Its server's start, the model's load or registration until ready, then the first request against the p50 of the
    # next ones sent the same way (HTTP, one at a time, the connection open); ``cold_source`` says how it was measured.
    cold: ColdStart | None = None
    cold_source: str = ""
    agreement: Agreement | None = None
    error: str = ""  # why it was not measured (its archive, registration or every answer failed)
    log_excerpt: list[str] = field(default_factory=list)  # the worker log when its handler failed

    def to_json(self) -> Json:
        d = {k: getattr(self, k) for k in ("key", "label", "server", "kind", "variant", "model", "runtime", "server_label", "cold_source", "error", "log_excerpt")}
        return d | {
            "scheduling": asdict(self.scheduling) if self.scheduling else None,
            "cold": self.cold.to_json() if self.cold else None,
            "agreement": asdict(self.agreement) if self.agreement else None,
        }

    @classmethod
    def from_json(cls, d: Json) -> Deployment:
        dep = _plain(cls, {k: v for k, v in d.items() if k not in ("scheduling", "cold", "agreement")})
        dep.scheduling = _plain(Scheduling, d["scheduling"]) if d.get("scheduling") else None
        dep.cold = _plain(ColdStart, d["cold"]) if d.get("cold") else None
        dep.agreement = _plain(Agreement, d["agreement"]) if d.get("agreement") else None
        return dep


@dataclass
class PeerRound:
    """Every deployment at one concurrency, back to back in ``order`` (reversed every other round)."""

    index: int
    concurrency: int
    order: list[str]
    points: dict[str, Point]

    def to_json(self) -> Json:
        return {"index": self.index, "concurrency": self.concurrency, "order": self.order, "points": {k: p.to_json() for k, p in self.points.items()}}

    @classmethod
    def from_json(cls, d: Json) -> PeerRound:
        return cls(d["index"], d["concurrency"], d["order"], {k: Point.from_json(p) for k, p in d["points"].items()})


@dataclass
class Ratio:
    """A headline of the side by side: ``numerator`` over ``denominator`` (deployment keys) of ``metric`` at ``concurrency``,
    one value per round from neighbouring runs, the median with its 90% interval; > 1 means the first-named one wins."""

    name: str
    concurrency: int
    metric: str  # "throughput_infer_s" or "p50_ms"
    numerator: str
    denominator: str
    meaning: str
    estimate: Estimate

    def to_json(self) -> Json:
        return {k: getattr(self, k) for k in ("name", "concurrency", "metric", "numerator", "denominator", "meaning")} | {"estimate": self.estimate.to_json()}

    @classmethod
    def from_json(cls, d: Json) -> Ratio:
        return cls(d["name"], d["concurrency"], d["metric"], d["numerator"], d["denominator"], d["meaning"], Estimate.from_json(d["estimate"]))


@dataclass
class PeersResult:
    """The side-by-side bench: what was served, how, and the rounds that compare them."""

    peers: list[str]
    concurrency: list[int]
    deployments: dict[str, Deployment] = field(default_factory=dict)
    rounds: list[PeerRound] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    rss: dict[str, dict[str, float]] = field(default_factory=dict)  # server label -> peak / median MB over the rounds
    payload: dict[str, float] = field(default_factory=dict)  # bytes per request and response, each protocol (the boundary)
    versions: dict[str, str] = field(default_factory=dict)
    settings: list[str] = field(default_factory=list)  # TorchServe settings changed from its defaults, and why
    notes: list[str] = field(default_factory=list)
    stopped: str = ""
    seconds: float = 0.0
    window_ms: int = 0  # perf_analyzer's measurement window in the rounds (every deployment the same)

    def points(self, key: str) -> list[Point]:
        """``key``'s point per concurrency: the median-throughput measurement over the rounds."""
        out = []
        for c in self.concurrency:
            p = median_point([r.points[key] for r in self.rounds if r.concurrency == c and key in r.points])
            if p is not None:
                out.append(p)
        return out

    def point(self, key: str, c: int) -> Point | None:
        return next((p for p in self.points(key) if p.concurrency == c), None)

    def summary(self) -> Json:
        """The metrics file's part: every ratio with its interval, cold starts and peak RSS per server."""
        out: Json = {}
        for r in self.ratios:
            out |= r.estimate.flat(r.name)
        for d in self.deployments.values():
            if d.cold and d.cold.start_to_ready_s is not None:
                out[f"cold_start_s_{d.key}"] = round(d.cold.start_to_ready_s, 3)
        out |= {f"rss_peak_mb_{label}": v.get("rss_peak_mb") for label, v in self.rss.items()}
        return out

    def to_json(self) -> Json:
        return {
            "peers": self.peers,
            "concurrency": self.concurrency,
            "deployments": {k: d.to_json() for k, d in self.deployments.items()},
            "rounds": [r.to_json() for r in self.rounds],
            "ratios": [r.to_json() for r in self.ratios],
            "rss": self.rss,
            "payload": self.payload,
            "versions": self.versions,
            "settings": self.settings,
            "notes": self.notes,
            "stopped": self.stopped,
            "seconds": self.seconds,
            "window_ms": self.window_ms,
        }

    @classmethod
    def from_json(cls, d: Json) -> PeersResult:
        return cls(
            d["peers"],
            d["concurrency"],
            {k: Deployment.from_json(v) for k, v in d["deployments"].items()},
            [PeerRound.from_json(r) for r in d["rounds"]],
            [Ratio.from_json(r) for r in d["ratios"]],
            d.get("rss", {}),
            d.get("payload", {}),
            d.get("versions", {}),
            d.get("settings", []),
            d.get("notes", []),
            d.get("stopped", ""),
            d.get("seconds", 0.0),
            d.get("window_ms", 0),
        )
