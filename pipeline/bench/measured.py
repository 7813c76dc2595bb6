"""Typed measurements: perf_analyzer points, the in-process baseline, paired rounds, tuning.

What the measuring modules (baseline, sweep, pairing, tune) return and the others read; each
has a ``to_json``/``from_json`` pair used only by results.BenchResult, the one bench.json edge.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Generic, TypeVar

from tritonclient.grpc import model_config_pb2 as mc


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

    def to_json(self) -> Json:
        # perf_analyzer's row starts with its (float) concurrency: our int takes its place, first.
        d: Json = {"concurrency": self.concurrency} | {k: v for k, v in self.metrics.items() if k != "concurrency"}
        return d | {"valid": self.valid, "reason": self.reason, "avg_batch": self.avg_batch, "failed_requests": self.failed_requests}

    @classmethod
    def from_json(cls, d: Json) -> Point:
        own = ("concurrency", "valid", "reason", "avg_batch", "failed_requests")
        return cls(int(d["concurrency"]), bool(d["valid"]), d.get("reason", ""), {k: v for k, v in d.items() if k not in own},
                   d.get("avg_batch"), d.get("failed_requests", 0.0))  # fmt: skip


@dataclass
class Sweep:
    """One variant's perf_analyzer sweep, in the order measured."""

    points: list[Point]

    def at(self, c: int) -> Point | None:
        """The point at concurrency ``c`` (valid or not), or None."""
        return next((p for p in self.points if p.concurrency == c), None)

    def to_json(self) -> Json:
        return {"points": {f"c{p.concurrency}": p.to_json() for p in self.points}}

    @classmethod
    def from_json(cls, d: Json) -> Sweep:
        return cls([Point.from_json(p) for p in d.get("points", {}).values()])


# ---------------------------------------------------------------- in-process ONNX Runtime baseline
@dataclass
class OrtSettings:
    """The ONNX Runtime settings a Triton config implies."""

    intra_op_threads: int
    inter_op_threads: int
    graph_level: int

    @classmethod
    def from_config(cls, cfg: mc.ModelConfig) -> OrtSettings:
        p = cfg.parameters
        intra = int(p["intra_op_thread_count"].string_value or 0) if "intra_op_thread_count" in p else 0
        inter = int(p["inter_op_thread_count"].string_value or 0) if "inter_op_thread_count" in p else 0
        level = cfg.optimization.graph.level if cfg.HasField("optimization") else 0
        return cls(intra, inter, level)


@dataclass
class Latency:
    """Batch-1 latency percentiles in process (ms), over ``n`` timed runs."""

    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    n: int
    settings: OrtSettings | None = None

    def to_json(self) -> Json:
        d: Json = {k: getattr(self, k) for k in ("p50_ms", "p95_ms", "p99_ms", "mean_ms", "n")}
        return d | ({"settings": asdict(self.settings)} if self.settings else {})

    @classmethod
    def from_json(cls, d: Json) -> Latency:
        s = d.get("settings")
        return cls(d["p50_ms"], d["p95_ms"], d["p99_ms"], d["mean_ms"], d["n"], OrtSettings(**s) if s else None)


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
        return {"per_batch_infer_s": {str(b): v for b, v in self.per_batch_infer_s.items()}, "best_batch": self.best_batch,
                "best_infer_s": self.best_infer_s, "settings": asdict(self.settings)}  # fmt: skip

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


# ---------------------------------------------------------------- paired rounds (see pairing.py)
@dataclass
class Round(Generic[S]):
    """One bracketed round: in-process gauges around each served step, and whether the round counts."""

    index: int
    gauges: list[float]
    gauge_mean: float
    in_server_gauge: float | None
    drift: float
    ratio: float | None
    counted: bool
    steps: list[S]

    def head_json(self, gauge: str) -> Json:
        """The keys every round has, before its steps' own."""
        return {"round": self.index, f"{gauge}_before": self.gauges[0], f"{gauge}_after": self.gauges[-1], "gauges": self.gauges,
                "gauge_mean": self.gauge_mean, "in_server_gauge": self.in_server_gauge, "drift": self.drift}  # fmt: skip

    @staticmethod
    def head_from_json(d: Json) -> dict[str, Any]:
        return {"index": d["round"], "gauges": d["gauges"], "gauge_mean": d["gauge_mean"], "in_server_gauge": d.get("in_server_gauge"),
                "drift": d["drift"], "ratio": d["ratio"], "counted": d["counted"]}  # fmt: skip


@dataclass
class Bracketed(Generic[S]):
    """Rounds of [gauge, step, gauge, ...] and the median ratio over the ones that count (None if none did)."""

    gauge: str  # the gauge's name, e.g. ort_p50_ms; also its key in JSON
    max_drift: float
    rounds: list[Round[S]]
    ratio: float | None = None
    gauge_median: float | None = None
    ratio_range: list[float] | None = None
    reason: str | None = None  # why there is no ratio

    @property
    def counted(self) -> list[Round[S]]:
        return [r for r in self.rounds if r.counted]

    def head_json(self, rounds: list[Json]) -> Json:
        d: Json = {"rounds": rounds, "max_drift": self.max_drift, "counted_rounds": len(self.counted), "gauge": self.gauge, "ratio": self.ratio}
        if self.ratio is not None:
            return d | {self.gauge: self.gauge_median, "ratio_range": self.ratio_range}
        return d | {"reason": self.reason}

    @staticmethod
    def head_from_json(d: Json) -> dict[str, Any]:
        return {"gauge": d["gauge"], "max_drift": d["max_drift"], "ratio": d.get("ratio"), "gauge_median": d.get(d["gauge"]),
                "ratio_range": d.get("ratio_range"), "reason": d.get("reason")}  # fmt: skip

    def head(self) -> dict[str, Any]:
        """This object's own fields, to build a subclass from it."""
        return {f.name: getattr(self, f.name) for f in fields(Bracketed)}


@dataclass
class PairedC1(Bracketed[Point]):
    """Latency variant c=1 p50 against in-process batch-1 ORT p50, each round's one step the served point."""

    in_server_key: str | None = None  # the served metric that is the server's own time inside ORT
    served_p50_ms: float | None = None

    def to_json(self) -> Json:
        rounds = [r.head_json(self.gauge) | {"served_valid": r.steps[0].valid, "served_reason": r.steps[0].reason,
                                              "served": dict(r.steps[0].metrics), "ratio": r.ratio, "counted": r.counted}
                  for r in self.rounds]  # fmt: skip
        d = self.head_json(rounds) | {"in_server_gauge": self.in_server_key}
        return d | ({"served_p50_ms": self.served_p50_ms} if self.ratio is not None else {})

    @classmethod
    def from_json(cls, d: Json) -> PairedC1:
        rounds = [Round(**Round.head_from_json(r), steps=[Point(1, r["served_valid"], r["served_reason"], dict(r["served"]))]) for r in d["rounds"]]
        return cls(**Bracketed.head_from_json(d), rounds=rounds, in_server_key=d.get("in_server_gauge"), served_p50_ms=d.get("served_p50_ms"))


@dataclass
class VariantRun:
    """One step of a paired throughput round: perf_analyzer on one variant."""

    variant: str
    point: Point


@dataclass
class PairedThroughput(Bracketed[VariantRun]):
    """Throughput over latency variant at one concurrency, both run in each round (order alternating)."""

    concurrency: int = 0
    # Medians over the counted rounds (None when none counted).
    latency_infer_s: float | None = None
    throughput_infer_s: float | None = None
    throughput_vs_ort_best: float | None = None
    p50_delta_ms: float | None = None

    @staticmethod
    def run(r: Round[VariantRun], variant: str) -> Point:
        """The round's measurement of ``variant``."""
        return next(s.point for s in r.steps if s.variant == variant)

    def round_vs_ort_best(self, r: Round[VariantRun]) -> float | None:
        """The throughput variant's infer/s over the round's mean gauge (in-process best batch, same minute)."""
        thr = self.run(r, "throughput")
        return thr.metrics["throughput_infer_s"] / r.gauge_mean if thr.valid else None

    def round_p50_delta_ms(self, r: Round[VariantRun]) -> float | None:
        """The throughput variant's p50 above the latency variant's in the round (the batching tax at c=1)."""
        return self.run(r, "throughput").metrics["p50_ms"] - self.run(r, "latency").metrics["p50_ms"] if r.ratio is not None else None

    def to_json(self) -> Json:
        def step(p: Point) -> Json:
            return {"valid": p.valid, "reason": p.reason, "avg_batch": p.avg_batch, **p.metrics}

        rounds = [r.head_json(self.gauge) | {"order": [s.variant for s in r.steps]} | {s.variant: step(s.point) for s in r.steps}
                  | {"ratio": r.ratio, "counted": r.counted, "throughput_vs_ort_best": self.round_vs_ort_best(r),
                     "p50_delta_ms": self.round_p50_delta_ms(r)} for r in self.rounds]  # fmt: skip
        d = self.head_json(rounds)
        if self.counted:
            d |= {k: getattr(self, k) for k in ("latency_infer_s", "throughput_infer_s", "throughput_vs_ort_best", "p50_delta_ms")}
        return d

    @classmethod
    def from_json(cls, d: Json, concurrency: int) -> PairedThroughput:
        def step(v: str, s: Json) -> VariantRun:
            own = ("valid", "reason", "avg_batch")
            return VariantRun(v, Point(concurrency, s["valid"], s["reason"], {k: x for k, x in s.items() if k not in own}, s.get("avg_batch")))

        rounds = [Round(**Round.head_from_json(r), steps=[step(v, r[v]) for v in r["order"]]) for r in d["rounds"]]
        medians = {k: d.get(k) for k in ("latency_infer_s", "throughput_infer_s", "throughput_vs_ort_best", "p50_delta_ms")}
        return cls(**Bracketed.head_from_json(d), rounds=rounds, concurrency=concurrency, **medians)


# ---------------------------------------------------------------- tuning (see tune.py)
@dataclass
class Scheduling:
    """The throughput variant's scheduling values a tuning candidate tries."""

    max_queue_delay_us: int
    preferred_batch_sizes: list[int]
    instance_count: int


@dataclass
class Candidate:
    """One tuning candidate as measured: its last round (the counted one, when one counted)."""

    scheduling: Scheduling
    valid: bool
    reason: str
    avg_batch: float | None
    rounds: int
    gauges: list[float]
    drift: float
    steady: bool  # its gauges agreed: the round counted
    vs_ort_best: float | None
    within_budget: bool
    p99_ms: float | None = None
    p50_ms: float | None = None
    throughput_infer_s: float | None = None

    def to_json(self) -> Json:
        d = asdict(self.scheduling) | {k: getattr(self, k) for k in ("valid", "reason", "avg_batch", "rounds", "gauges", "drift", "steady", "vs_ort_best")}
        if self.valid:
            d |= {"p99_ms": self.p99_ms, "p50_ms": self.p50_ms, "throughput_infer_s": self.throughput_infer_s}
        return d | {"within_budget": self.within_budget}

    @classmethod
    def from_json(cls, d: Json) -> Candidate:
        sched = Scheduling(**{f.name: d[f.name] for f in fields(Scheduling)})
        return cls(sched, **{f.name: d.get(f.name) for f in fields(cls) if f.name != "scheduling"})


@dataclass
class Tuning:
    """Every candidate measured, the winner (None when none may win) and how to persist it."""

    concurrency: int
    latency_budget_ms: float
    max_drift: float
    candidates: list[Candidate]
    chosen: Scheduling | None
    persist: str  # the Hydra overrides that make the repository stage emit the winner, or why there is none
    lead_over_next: float | None = None
    rank: str = "infer/s over in-process best-batch infer/s"

    def to_json(self) -> Json:
        d: Json = {"concurrency": self.concurrency, "latency_budget_ms": self.latency_budget_ms, "max_drift": self.max_drift,
                   "rank": self.rank, "candidates": [c.to_json() for c in self.candidates],
                   "chosen": asdict(self.chosen) if self.chosen else None}  # fmt: skip
        return d | ({"lead_over_next": self.lead_over_next} if self.chosen else {}) | {"persist": self.persist}

    @classmethod
    def from_json(cls, d: Json) -> Tuning:
        return cls(d["concurrency"], d["latency_budget_ms"], d["max_drift"], [Candidate.from_json(c) for c in d["candidates"]],
                   Scheduling(**d["chosen"]) if d.get("chosen") else None, d["persist"], d.get("lead_over_next"), d["rank"])  # fmt: skip
