"""Typed measurements: perf_analyzer points, the in-process baseline (the headline rounds' are in rounds/results.py).

What the measuring modules (baseline, sweep) return and the others read; each
has a ``to_json``/``from_json`` pair used only by bench/results.py's BenchResult, the one bench.json edge.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from pipeline.stats.ort import Latency, OrtSettings


Json = dict[str, Any]  # only at the edge: to_json / from_json
S = TypeVar("S")


# ---------------------------------------------------------------- one perf_analyzer measurement
@dataclass
class Point:
    """One concurrency level of one variant: perf_analyzer's row (``metrics``) and Triton's batch counts."""

    concurrency: int
    valid: bool
    reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    avg_batch: float | None = None
    failed_requests: float = 0.0
    # Triton's /metrics deltas over the run (tritonmetrics.delta) with their cross-check against perf_analyzer
    # (``agree``: tritonmetrics.cross_check), and the server's RSS over it (MB: peak, median); kept for invalid runs too.
    triton: dict[str, float] = field(default_factory=dict)
    agree: dict[str, float] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> Json:
        # perf_analyzer's row starts with its (float) concurrency: our int takes its place, first.
        d: Json = {"concurrency": self.concurrency} | {k: v for k, v in self.metrics.items() if k != "concurrency"}
        d |= {"valid": self.valid, "reason": self.reason, "avg_batch": self.avg_batch, "failed_requests": self.failed_requests}
        return d | {k: getattr(self, k) for k in _EXTRA if getattr(self, k)}

    @classmethod
    def from_json(cls, d: Json) -> Point:
        own = ("concurrency", "valid", "reason", "avg_batch", "failed_requests", *_EXTRA)
        return cls(
            int(d["concurrency"]),
            bool(d["valid"]),
            d.get("reason", ""),
            {k: v for k, v in d.items() if k not in own},
            d.get("avg_batch"),
            d.get("failed_requests", 0.0),
            *(d.get(k) or {} for k in _EXTRA),
        )


_EXTRA = ("triton", "agree", "memory")  # Point's nested records, in field order


@dataclass
class Sweep:
    """One variant's points, in the order measured.

    ``source``: ``sweep`` (perf_analyzer at each bench.sweep.concurrency in a server of its own) or ``rounds``
    (each concurrency's median-throughput measurement from the headline rounds, see rounds.median_point).
    """

    points: list[Point]
    source: str = "sweep"

    def at(self, c: int) -> Point | None:
        """The point at concurrency ``c`` (valid or not), or None."""
        return next((p for p in self.points if p.concurrency == c), None)

    def to_json(self) -> Json:
        return {"source": self.source, "points": {f"c{p.concurrency}": p.to_json() for p in self.points}}

    @classmethod
    def from_json(cls, d: Json) -> Sweep:
        return cls([Point.from_json(p) for p in d.get("points", {}).values()], d.get("source", "sweep"))


# ---------------------------------------------------------------- in-process ONNX Runtime baseline
@dataclass
class Throughput:
    """Inferences/s in process per batch size, and the best of them."""

    per_batch_infer_s: dict[int, float]
    settings: OrtSettings

    @property
    def best_batch(self) -> int:
        return max(self.per_batch_infer_s, key=self.per_batch_infer_s.__getitem__)

    @property
    def best_infer_s(self) -> float:
        return self.per_batch_infer_s[self.best_batch]

    def to_json(self) -> Json:
        return {
            "per_batch_infer_s": {str(b): v for b, v in self.per_batch_infer_s.items()},
            "best_batch": self.best_batch,
            "best_infer_s": self.best_infer_s,
            "settings": asdict(self.settings),
        }

    @classmethod
    def from_json(cls, d: Json) -> Throughput:
        return cls({int(b): v for b, v in d["per_batch_infer_s"].items()}, OrtSettings(**d["settings"]))


@dataclass
class Baseline:
    """In-process ORT: batch-1 latency (the faster of before/after the sweep), its other run, best-batch throughput."""

    latency: Latency
    throughput: Throughput
    latency_after: Latency | None = None

    def to_json(self) -> Json:
        d = {"latency": self.latency.to_json(), "throughput": self.throughput.to_json()}
        return d | ({"latency_after": self.latency_after.to_json()} if self.latency_after else {})

    @classmethod
    def from_json(cls, d: Json) -> Baseline:
        after = d.get("latency_after")
        return cls(Latency.from_json(d["latency"]), Throughput.from_json(d["throughput"]), Latency.from_json(after) if after else None)


WINDOW_LATENCIES = 4  # a perf_analyzer window spans at least this many of the model's request latencies at the top concurrency
WINDOW_CAP_MS = 15_000  # ...but never longer than this (a model at seconds per batch gets fewer, and the report says so)


def fitted_window_ms(base: Baseline, configured_ms: int, top_concurrency: int) -> int:
    """A measurement window that fits the model: ``configured_ms``, or :data:`WINDOW_LATENCIES` request latencies
    when that is longer (up to :data:`WINDOW_CAP_MS`).

    The latency is the slower of the in-process batch-1 p50 and what ``top_concurrency`` requests in flight each take
    at the model's best in-process throughput (c / infer/s): perf_analyzer counts the requests that end inside a
    window (InferenceProfiler::ValidLatencyMeasurement), and a window no request ends in is INVALID. A ResNet-50 at
    ~44 infer/s (c=16: ~360 ms a request) made every 500 ms window INVALID; MiniLM here (~140 infer/s: ~110 ms at c=16)
    is measured exactly as configured.
    """
    per_request_ms = max(base.latency.p50_ms, 1000.0 * top_concurrency / base.throughput.best_infer_s if base.throughput.best_infer_s > 0 else 0.0)
    return int(min(max(configured_ms, WINDOW_LATENCIES * per_request_ms), max(WINDOW_CAP_MS, configured_ms)))
