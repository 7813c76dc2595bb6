"""Typed records of the production-readiness measurements: cold start, overload and bursts, soak, memory over time.

Measured by coldstart.py, overload.py and soak.py; each record has a ``to_json``/``from_json`` pair used only by
bench/results.py's BenchResult (bench.json's one edge). Per-point memory and Triton's /metrics deltas live on each Point.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pipeline.stats.estimate import Estimate

Json = dict[str, Any]


def _plain(cls: type, d: Json) -> Any:
    """A dataclass from its asdict() form (keys it no longer has are dropped)."""
    return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass
class ColdStart:
    """One variant in a fresh server: spawn -> server ready (no model), load request -> model ready, first request.

    ``warm_p50_ms`` is the p50 of the ``requests`` sent right after the first one, by the same client and the same way,
    so first and warm have one measurement boundary. RSS (MB): after the load, and the peak over the server's life.
    """

    variant: str
    warmup: bool
    server_start_s: float | None = None
    load_s: float | None = None
    first_ms: float | None = None
    warm_p50_ms: float | None = None
    requests: int = 0
    rss_loaded_mb: float | None = None
    rss_peak_mb: float | None = None
    # Triton's own view (statistics API): inferences it ran while loading (the warmup), the first request's time
    # in the server, and the mean over the warm requests.
    warmup_inferences: float = 0.0
    first_server_ms: float | None = None
    warm_server_ms: float | None = None
    error: str = ""

    @property
    def start_to_ready_s(self) -> float | None:
        return self.server_start_s + self.load_s if self.server_start_s is not None and self.load_s is not None else None

    @property
    def first_vs_warm(self) -> float | None:
        return self.first_ms / self.warm_p50_ms if self.first_ms and self.warm_p50_ms else None

    def to_json(self) -> Json:
        return asdict(self) | {"start_to_ready_s": self.start_to_ready_s, "first_vs_warm": self.first_vs_warm}


@dataclass
class LoadLevel:
    """One open-loop load on the throughput variant: a share of its capacity, or the burst.

    ``tool``: perf_analyzer (request-rate or request-intervals mode; it stops at the first failed request) or the
    open-loop client (keeps sending through rejections and counts them). ``success`` is Triton's (/metrics deltas);
    ``failed`` Triton's failures plus, for the open-loop client, what it saw rejected or failing; ``rejected`` and
    ``timeouts`` are the client's (Triton's failure counter leaves out requests its full queue turned away). ``passes_ms``: perf_analyzer's
    average latency per window, in order (a queue that grows shows as a rise).
    """

    label: str
    share: float
    offered_rate: float
    tool: str
    queue_size: int  # max_queue_size of the config measured, 0 = unbounded
    valid: bool
    reason: str = ""
    seconds: float = 0.0
    achieved_rate: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    success: float = 0.0
    failed: float = 0.0
    rejected: float = 0.0
    timeouts: float = 0.0
    rejected_p99_ms: float | None = None
    rss_peak_mb: float | None = None
    rss_start_mb: float | None = None
    rss_end_mb: float | None = None
    pending_after: float | None = None
    passes_ms: list[float] = field(default_factory=list)

    @property
    def error_rate(self) -> float | None:
        total = self.success + self.failed + self.timeouts
        return (self.failed + self.timeouts) / total if total else None

    @property
    def latency_growth(self) -> float | None:
        """Last window's average latency over the first's (perf_analyzer runs only)."""
        return self.passes_ms[-1] / self.passes_ms[0] if len(self.passes_ms) >= 2 and self.passes_ms[0] else None

    def to_json(self) -> Json:
        return asdict(self) | {"error_rate": self.error_rate, "latency_growth": self.latency_growth}


@dataclass
class Overload:
    """The load levels, the burst and the bounded-queue check, against the capacity they are shares of."""

    capacity_infer_s: float
    capacity_from: str
    levels: list[LoadLevel] = field(default_factory=list)

    def level(self, label: str) -> LoadLevel | None:
        return next((x for x in self.levels if x.label == label), None)

    def to_json(self) -> Json:
        return {"capacity_infer_s": self.capacity_infer_s, "capacity_from": self.capacity_from, "levels": [x.to_json() for x in self.levels]}

    @classmethod
    def from_json(cls, d: Json) -> Overload:
        return cls(d["capacity_infer_s"], d["capacity_from"], [_plain(LoadLevel, x) for x in d.get("levels", [])])


@dataclass
class Soak:
    """Sustained load on the throughput variant; the RSS slope after the ramp (MB/h, Theil-Sen, 90% interval)."""

    variant: str
    concurrency: int
    planned_s: float
    seconds: float
    partial: bool
    ramp_s: float
    slope_mb_per_h: Estimate
    rss_start_mb: float | None
    rss_end_mb: float | None
    throughput_infer_s: float | None = None
    p99_ms: float | None = None
    failed: float = 0.0
    series: list[list[float]] = field(default_factory=list)  # [seconds since the soak began, MB], thinned
    reason: str = ""

    def to_json(self) -> Json:
        d = asdict(self)
        return d | {"slope_mb_per_h": self.slope_mb_per_h.to_json()}

    @classmethod
    def from_json(cls, d: Json) -> Soak:
        return _plain(cls, d | {"slope_mb_per_h": Estimate.from_json(d["slope_mb_per_h"])})


@dataclass
class Trace:
    """One server's RSS over the bench: [seconds since the bench began, MB], thinned for the plot."""

    label: str
    series: list[list[float]]


@dataclass
class Production:
    """Everything production readiness adds to a bench result."""

    cold_start: list[ColdStart] = field(default_factory=list)
    overload: Overload | None = None
    soak: Soak | None = None
    traces: list[Trace] = field(default_factory=list)
    metrics_limits: list[str] = field(default_factory=list)  # what Triton's /metrics leaves out, stated in the report
    notes: list[str] = field(default_factory=list)  # what was not measured, and why

    def cold(self, variant: str, warmup: bool) -> ColdStart | None:
        return next((c for c in self.cold_start if c.variant == variant and c.warmup == warmup), None)

    def to_json(self) -> Json:
        return {
            "cold_start": [c.to_json() for c in self.cold_start],
            "overload": self.overload.to_json() if self.overload else None,
            "soak": self.soak.to_json() if self.soak else None,
            "traces": [asdict(t) for t in self.traces],
            "metrics_limits": self.metrics_limits,
            "notes": self.notes,
        }

    @classmethod
    def from_json(cls, d: Json) -> Production:
        return cls(
            [_plain(ColdStart, c) for c in d.get("cold_start", [])],
            Overload.from_json(d["overload"]) if d.get("overload") else None,
            Soak.from_json(d["soak"]) if d.get("soak") else None,
            [Trace(**t) for t in d.get("traces", [])],
            d.get("metrics_limits", []),
            d.get("notes", []),
        )


def thin(series: list[tuple[float, float]], t0: float, keep: int = 400) -> list[list[float]]:
    """At most ``keep`` samples of ``series`` (every k-th, the last always), times made relative to ``t0``."""
    if not series:
        return []
    step = max(1, len(series) // keep)
    picked = series[::step] + ([series[-1]] if (len(series) - 1) % step else [])
    return [[round(t - t0, 2), round(mb, 2)] for t, mb in picked]
