"""The canary record: one ``release canary`` run, as ``history/<env>/<model>.canary/<id>.json`` holds it.

Written when the canary starts (``running``), rewritten with its verdict (``passed`` / ``failed``), or by whoever
cleaned up after it (``interrupted``, ``error``, ``killed``, ``aborted``). ``release list`` and ``release canary``
read it back; a record in a final status is never rewritten.

The JSON keys, in order: ``schema, id, model, env, live, candidate, variant, status, started_at, server, servers,
copies, traffic, bounds, by, notes``, then as the run gets there ``outputs, latency, errors, metrics, checks,
verdict, promotion, note, cleanup, finished_at, timings``. A key the run did not reach is absent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1
FINAL = ("passed", "failed")  # a record in any other status was cut short (running, interrupted, killed, aborted, error)


@dataclass(frozen=True)
class TrafficSettings:
    """What the canary sent: the kind of traffic, for how long, and the rows it replayed."""

    kind: str  # replay | real
    duration_s: float
    share: float
    request_rate: float
    rounds: int
    rows: int
    samples_from: list[str]


@dataclass(frozen=True)
class Bounds:
    """The verdict's bounds (``release.canary``)."""

    max_p99_ratio: float
    max_error_rate: float
    min_round_requests: int


@dataclass(frozen=True)
class Agreement:
    """The candidate's outputs against the live version's, with the parity stage's per-output statistics."""

    tolerance: str  # parity.<kind>: the tolerance section used
    answered: int  # rows answered by both versions
    distinct: int  # distinct answer pairs compared
    passed: bool
    outputs: dict[str, dict[str, Any]]  # output -> the parity stage's summary of it (pipeline.parity.report.summarize_output)
    problems: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Agreement:
        return cls(str(d["tolerance"]), int(d["answered"]), int(d["distinct"]), bool(d["passed"]), dict(d.get("outputs") or {}), list(d.get("problems") or []))


@dataclass(frozen=True)
class SideLatency:
    """All of one side's requests in the run: how many, how many failed, p50/p99 of the answered ones."""

    requests: int
    errors: int
    p50_ms: float | None
    p99_ms: float | None


@dataclass
class Round:
    """One time slice: answered requests and p50/p99 per side (None: fewer than the minimum)."""

    start_s: float
    live_n: int
    candidate_n: int
    live_p50_ms: float | None = None
    live_p99_ms: float | None = None
    candidate_p50_ms: float | None = None
    candidate_p99_ms: float | None = None

    def ratio(self, q: str) -> float | None:
        """Candidate over live at quantile ``q`` (``p50`` or ``p99``); None when either side has no number."""
        live, cand = getattr(self, f"live_{q}_ms"), getattr(self, f"candidate_{q}_ms")
        return cand / live if live and cand else None


@dataclass(frozen=True)
class LatencySummary:
    """The paired latency comparison as recorded: the ratios over rounds (estimates' JSON), each side, each round."""

    p99_ratio: dict[str, Any]  # pipeline.stats.estimate.Estimate's JSON
    p50_ratio: dict[str, Any]
    live: SideLatency
    candidate: SideLatency
    window_s: float
    min_round_requests: int
    rounds: list[Round]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LatencySummary:
        return cls(
            dict(d["p99_ratio"]),
            dict(d["p50_ratio"]),
            SideLatency(**d["live"]),
            SideLatency(**d["candidate"]),
            float(d["window_s"]),
            int(d["min_round_requests"]),
            [Round(**r) for r in d.get("rounds") or []],
        )


@dataclass(frozen=True)
class ProductionCounts:
    """What the served model did while the canary ran (Triton's counts) and what the canary sent it."""

    failed_during_canary: int
    answered_during_canary: int
    sent_by_canary: int


@dataclass(frozen=True)
class ErrorCounts:
    """Failed requests: the candidate's (the verdict's rate), the baseline's, and production's during the canary."""

    rate: float | None  # None: the candidate answered no request
    failed: int
    requests: int
    live_failed: int
    live_requests: int
    production: ProductionCounts
    triton: dict[str, dict[str, int]]  # side -> Triton's success/fail counts during the canary
    messages: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ErrorCounts:
        return cls(
            d.get("rate"),
            int(d["failed"]),
            int(d["requests"]),
            int(d["live_failed"]),
            int(d["live_requests"]),
            ProductionCounts(**d["production"]),
            dict(d.get("triton") or {}),
            list(d.get("messages") or []),
        )


@dataclass(frozen=True)
class MetricsRow:
    """One side's Triton /metrics counters during the canary, and the mean times per request (None: no request)."""

    success: int
    failure: int
    inferences: int
    executions: int
    request_ms: float | None
    queue_ms: float | None
    compute_infer_ms: float | None


@dataclass(frozen=True)
class MetricsDelta:
    """Each side's /metrics during the canary (``available`` False: the endpoint did not answer)."""

    available: bool
    sides: dict[str, MetricsRow] = field(default_factory=dict)  # side -> its row; flat beside "available" in the JSON

    def to_json(self) -> dict[str, Any]:
        return {"available": self.available, **{side: asdict(row) for side, row in self.sides.items()}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MetricsDelta:
        return cls(bool(d.get("available")), {k: MetricsRow(**v) for k, v in d.items() if k != "available" and isinstance(v, dict)})


@dataclass(frozen=True)
class Check:
    """One line of the verdict."""

    name: str  # outputs | latency | errors
    passed: bool
    detail: str


@dataclass
class Verdict:
    """The canary's outcome: whether every check passed, and a line saying why not (or what was promoted)."""

    passed: bool
    summary: str


@dataclass(frozen=True)
class Promotion:
    """The switch a passed canary made."""

    from_: int  # "from" in the JSON
    to: int
    copy: str
    timings: dict[str, float]
    tag: str | None

    def to_json(self) -> dict[str, Any]:
        return {"from": self.from_, "to": self.to, "copy": self.copy, "timings": self.timings, "tag": self.tag}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Promotion:
        return cls(int(d["from"]), int(d["to"]), str(d.get("copy", "")), dict(d.get("timings") or {}), d.get("tag"))


@dataclass
class CanaryRecord:
    """One canary run; see the module docstring for its life and its JSON."""

    id: str
    model: str
    env: str
    live: int
    candidate: int
    variant: str
    status: str  # running | passed | failed | interrupted | error | killed | aborted
    started_at: str
    server: str  # the judging server
    servers: list[str]  # every server it switches on a pass
    copies: dict[str, str]  # side -> the model name its copy was loaded under
    traffic: TrafficSettings
    bounds: Bounds
    by: str
    notes: list[str] = field(default_factory=list)
    outputs: Agreement | None = None
    latency: LatencySummary | None = None
    errors: ErrorCounts | None = None
    metrics: MetricsDelta | None = None
    checks: list[Check] | None = None
    verdict: Verdict | None = None
    promotion: Promotion | None = None
    note: str | None = None  # why it was cut short
    cleanup: list[str] | None = None  # what was done to put the servers back
    finished_at: str | None = None
    timings: dict[str, float] | None = None
    schema: int = SCHEMA_VERSION

    @property
    def final(self) -> bool:
        """Whether the record has its verdict (it is never rewritten then)."""
        return self.status in FINAL

    def summary_line(self) -> str:
        """One line for ``release list``: when, which versions, the outcome and why."""
        why = (self.verdict.summary if self.verdict else "") or self.note or ""
        return f"last canary {self.started_at[:16].replace('T', ' ')}: v{self.candidate} against live v{self.live}, {self.status.upper()}{': ' + why if why else ''}"

    def to_json(self) -> dict[str, Any]:
        out = {
            "schema": self.schema,
            "id": self.id,
            "model": self.model,
            "env": self.env,
            "live": self.live,
            "candidate": self.candidate,
            "variant": self.variant,
            "status": self.status,
            "started_at": self.started_at,
            "server": self.server,
            "servers": self.servers,
            "copies": self.copies,
            "traffic": asdict(self.traffic),
            "bounds": asdict(self.bounds),
            "by": self.by,
            "notes": self.notes,
            "outputs": self.outputs.to_json() if self.outputs else None,
            "latency": self.latency.to_json() if self.latency else None,
            "errors": self.errors.to_json() if self.errors else None,
            "metrics": self.metrics.to_json() if self.metrics else None,
            "checks": [asdict(c) for c in self.checks] if self.checks is not None else None,
            "verdict": asdict(self.verdict) if self.verdict else None,
            "promotion": self.promotion.to_json() if self.promotion else None,
            "note": self.note,
            "cleanup": self.cleanup,
            "finished_at": self.finished_at,
            "timings": self.timings,
        }
        return {k: v for k, v in out.items() if v is not None}  # a key the run did not reach is absent

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CanaryRecord:
        """The record in ``d``.

        Raises:
            KeyError, TypeError, ValueError: ``d`` is not a canary record.
        """

        def opt(key: str, read: Any) -> Any:
            return read(d[key]) if d.get(key) is not None else None

        return cls(
            id=str(d["id"]),
            model=str(d["model"]),
            env=str(d["env"]),
            live=int(d["live"]),
            candidate=int(d["candidate"]),
            variant=str(d.get("variant", "default")),
            status=str(d["status"]),
            started_at=str(d.get("started_at", "?")),
            server=str(d.get("server", "")),
            servers=list(d.get("servers") or []),
            copies=dict(d.get("copies") or {}),
            traffic=TrafficSettings(**d["traffic"]),
            bounds=Bounds(**d["bounds"]),
            by=str(d.get("by", "?")),
            notes=list(d.get("notes") or []),
            outputs=opt("outputs", Agreement.from_json),
            latency=opt("latency", LatencySummary.from_json),
            errors=opt("errors", ErrorCounts.from_json),
            metrics=opt("metrics", MetricsDelta.from_json),
            checks=opt("checks", lambda cs: [Check(**c) for c in cs]),
            verdict=opt("verdict", lambda v: Verdict(bool(v["passed"]), str(v.get("summary", "")))),
            promotion=opt("promotion", Promotion.from_json),
            note=d.get("note"),
            cleanup=d.get("cleanup"),
            finished_at=d.get("finished_at"),
            timings=d.get("timings"),
            schema=int(d.get("schema", SCHEMA_VERSION)),
        )
