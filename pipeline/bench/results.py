"""The whole bench result, and bench.json at its one edge.

:class:`BenchResult` holds every typed measurement (the parts' results.py) and what is derived from them:
the headline :class:`Ratios` (analysis/ratios.py) and the :class:`Finding` list (analysis/diagnose.py).
:meth:`BenchResult.to_json` writes bench.json: the keys other stages read (``schema``, ``model``, ``summary``) through
their record, pipeline.records.bench, and the bench's own beside them (``ratios``, ``variants.<v>.points.c<N>``,
``server``, ``machine``, ``diagnosis``, ...); :meth:`BenchResult.from_json` reads a bench.json back, so a report
can be rendered again from it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from pipeline.stats.estimate import Estimate
from pipeline.bench.measure.inputs import InputsInfo
from pipeline.bench.measure.machine import Machine
from pipeline.bench.measure.results import Baseline, Json, Point, Sweep
from pipeline.bench.peers.results import PeersResult
from pipeline.bench.text import TextEndpointResult
from pipeline.bench.readiness.results import Production
from pipeline.bench.rounds.results import C1Rounds, ThroughputRounds
from pipeline.core.config import BenchConfig, from_plain
from pipeline.core.errors import BenchError
from pipeline.records.bench import SCHEMA, BenchRecord, MeasuredModel
from pipeline.records.tune import TuneRecord


@dataclass
class ServerInfo:
    """The server the numbers came from: mode, description, and for embedded mode the stand-in."""

    mode: str
    description: str
    backend: str | None = None  # embedded only
    config_changes: dict[str, list[str]] | None = None  # embedded only: per variant, what the stand-in changed
    triton_version: str | None = None

    def to_json(self) -> Json:
        d: Json = {"mode": self.mode, "description": self.description}
        if self.backend is not None:
            d |= {"backend": self.backend, "config_changes": self.config_changes}
        return d | ({"triton_version": self.triton_version} if self.triton_version is not None else {})


@dataclass
class Finding:
    """One diagnosis: the rule, how bad, which variant, what was measured, and what to change."""

    rule: str
    severity: str  # error | warning | info
    variant: str
    message: str
    fix: str


@dataclass
class Comparison:
    """Throughput variant against the latency variant and in-process best batch at one concurrency.

    The estimates come from the rounds when they ran there (median and interval; no value if none gave one),
    else they hold the sweep's single ratio without an interval.
    """

    concurrency: int
    vs_latency: Estimate
    vs_latency_unpaired: float | None
    vs_ort_best: Estimate
    vs_ort_best_unpaired: float | None

    def to_json(self) -> Json:
        c = self.concurrency
        d: Json = self.vs_latency.flat(f"throughput_vs_latency_c{c}") | {f"throughput_vs_latency_c{c}_unpaired": self.vs_latency_unpaired}
        return d | self.vs_ort_best.flat(f"throughput_vs_ort_best_c{c}") | {f"throughput_vs_ort_best_c{c}_unpaired": self.vs_ort_best_unpaired}

    @classmethod
    def from_json(cls, d: Json, c: int) -> Comparison:
        return cls(
            c,
            Estimate.from_flat(d, f"throughput_vs_latency_c{c}"),
            d.get(f"throughput_vs_latency_c{c}_unpaired"),
            Estimate.from_flat(d, f"throughput_vs_ort_best_c{c}"),
            d.get(f"throughput_vs_ort_best_c{c}_unpaired"),
        )


_COMPARED = re.compile(r"^throughput_vs_latency_c(\d+)$")
_HEAD = "latency_c1_p50_vs_ort_p50"


@dataclass
class Ratios:
    """The headline numbers: served against in-process, and throughput against latency variant, each an :class:`Estimate`.

    Embedded c=1 rounds also give the two factors of the served/in-process ratio (``served_vs_in_server``: served p50
    over the server's ORT time in the same window; ``in_server_vs_in_process``: the server's ORT time over in-process
    ORT, from the alternations) and ``serving_overhead_ms`` (served p50 minus the server's ORT time, same window).
    """

    latency_c1_p50_ms: float | None
    ort_p50_ms: float | None
    latency_c1: Estimate
    latency_c1_p50_vs_ort_p50_standin_removed: float | None
    latency_c1_p50_vs_ort_p50_unpaired: float | None
    latency_c1_queue_share: float | None
    compared: list[Comparison]  # one per compared concurrency (ratios.compared_concurrencies)
    throughput_c1_queue_ms: float | None
    throughput_c1_queue_share: float | None
    batching_tax_c1: Estimate
    batching_tax_c1_ms_unpaired: float | None
    served_vs_in_server: Estimate = field(default_factory=lambda: Estimate(None))
    in_server_vs_in_process: Estimate = field(default_factory=lambda: Estimate(None))
    serving_overhead_ms: Estimate = field(default_factory=lambda: Estimate(None))

    def comparison(self, c: int) -> Comparison | None:
        return next((x for x in self.compared if x.concurrency == c), None)

    def headlines(self) -> dict[str, Estimate]:
        """Every headline ratio by its bench.json name: what must carry an interval."""
        out = {_HEAD: self.latency_c1}
        for x in self.compared:
            out |= {f"throughput_vs_latency_c{x.concurrency}": x.vs_latency, f"throughput_vs_ort_best_c{x.concurrency}": x.vs_ort_best}
        return out

    def to_json(self) -> Json:
        d: Json = {k: getattr(self, k) for k in ("latency_c1_p50_ms", "ort_p50_ms")} | self.latency_c1.flat(_HEAD)
        d |= {k: getattr(self, k) for k in ("latency_c1_p50_vs_ort_p50_standin_removed", "latency_c1_p50_vs_ort_p50_unpaired", "latency_c1_queue_share")}
        d |= self.served_vs_in_server.flat("latency_c1_p50_vs_in_server_ort") | self.in_server_vs_in_process.flat("in_server_ort_vs_in_process_ort")
        d |= self.serving_overhead_ms.flat("serving_overhead_c1_ms")
        for x in self.compared:
            d |= x.to_json()
        d |= {k: getattr(self, k) for k in ("throughput_c1_queue_ms", "throughput_c1_queue_share")}
        return d | self.batching_tax_c1.flat("batching_tax_c1_ms") | {"batching_tax_c1_ms_unpaired": self.batching_tax_c1_ms_unpaired}

    @classmethod
    def from_json(cls, d: Json) -> Ratios:
        cs = sorted(int(m.group(1)) for m in map(_COMPARED.match, d) if m)
        plain = (
            "latency_c1_p50_ms",
            "ort_p50_ms",
            "latency_c1_p50_vs_ort_p50_standin_removed",
            "latency_c1_p50_vs_ort_p50_unpaired",
            "latency_c1_queue_share",
            "throughput_c1_queue_ms",
            "throughput_c1_queue_share",
            "batching_tax_c1_ms_unpaired",
        )
        return cls(
            **{k: d.get(k) for k in plain},
            latency_c1=Estimate.from_flat(d, _HEAD),
            compared=[Comparison.from_json(d, c) for c in cs],
            batching_tax_c1=Estimate.from_flat(d, "batching_tax_c1_ms"),
            served_vs_in_server=Estimate.from_flat(d, "latency_c1_p50_vs_in_server_ort"),
            in_server_vs_in_process=Estimate.from_flat(d, "in_server_ort_vs_in_process_ort"),
            serving_overhead_ms=Estimate.from_flat(d, "serving_overhead_c1_ms"),
        )


def _plain(x: Any) -> Any:
    """Config values as JSON has them: Enums by value."""
    if isinstance(x, Enum):
        return x.value
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _settings_from_json(d: Json) -> BenchConfig:
    """bench.json's settings as a BenchConfig (keys it no longer has are dropped, new ones take their defaults)."""
    return from_plain(BenchConfig, d)


def _r4(x: Any) -> Any:
    return round(x, 4) if isinstance(x, float) else x


@dataclass
class BenchResult:
    """Everything the bench stage measured and concluded; bench.json is :meth:`to_json`."""

    machine: Machine
    model: MeasuredModel
    inputs: InputsInfo
    settings: BenchConfig
    baseline: Baseline
    server: ServerInfo
    variants: dict[str, Sweep]
    paired_c1: C1Rounds | None = None
    paired_throughput: dict[int, ThroughputRounds] = field(default_factory=dict)
    tune: TuneRecord | None = None  # the tune stage's record of the throughput variant shipped (its file's, else None)
    ratios: Ratios | None = None
    diagnosis: list[Finding] = field(default_factory=list)
    schema: int = SCHEMA
    production: Production | None = None
    peers: PeersResult | None = None  # bench.peers: the side by side with TorchServe
    text: TextEndpointResult | None = None  # the text endpoint, when the repository ships one

    def point(self, variant: str, c: int) -> Point | None:
        """The valid measurement of ``variant`` at concurrency ``c``, or None."""
        p = self.variants[variant].at(c) if variant in self.variants else None
        return p if p and p.valid else None

    def points_of(self, variant: str) -> list[Point]:
        """Every measurement of ``variant``: its sweep's points and every round's (for memory and /metrics)."""
        pts = list(self.variants[variant].points) if variant in self.variants else []
        for r in self.paired_c1.rounds if self.paired_c1 else []:
            pts += [p for p in (r.latency if variant == "latency" else r.throughput,) if p is not None]
        for t in self.paired_throughput.values():
            pts += [getattr(r, variant) for r in t.rounds if variant in ("latency", "throughput")]
        return pts

    def all_points(self) -> list[Point]:
        return [p for v in dict.fromkeys([*self.variants, "latency", "throughput"]) for p in self.points_of(v)]

    def _production_summary(self) -> Json:
        """The readiness headline, flat for `dvc exp show`: cold start, first request, peak RSS, overload, metrics, soak."""
        prod = self.production
        if prod is None:
            return {}
        out: Json = {}
        # Each variant's cold start as it ships (with its model_warmup when it has one); the run without warmup that
        # shows what warmup buys is in bench.json and report.md.
        shipped = {c.variant: c for c in sorted(prod.cold_start, key=lambda c: c.warmup)}
        for v, c in shipped.items():
            out |= {f"cold_start_s_{v}": _r4(c.start_to_ready_s), f"first_vs_warm_{v}": _r4(c.first_vs_warm)}
        for v in self.variants:
            peaks = [p.memory["rss_peak_mb"] for p in self.points_of(v) if p.memory]
            out[f"rss_peak_mb_{v}"] = max(peaks) if peaks else None
        top = prod.overload.levels[-1] if prod.overload and prod.overload.levels else None
        if top is not None:
            out |= {"overload_bounded_error_rate": _r4(top.error_rate), "overload_bounded_rejected": top.rejected, "overload_bounded_timeouts": top.timeouts}
        shares = [p.agree["server_ms"] for p in self.all_points() if "server_ms" in p.agree]
        out["triton_metrics_vs_perf_server_ms_max_share"] = _r4(max(shares)) if shares else None
        if prod.soak is not None:
            out |= {k: _r4(v) for k, v in prod.soak.slope_mb_per_h.flat("soak_rss_slope_mb_per_h").items() if not k.endswith("_rounds")}
            out["soak_partial"] = prod.soak.partial
        return out

    def _in_summary(self, key: str) -> bool:
        """The headline numbers with their intervals (and the batching tax's); the factors without theirs, and the
        unpaired numbers and round counts only in bench.json: `dvc exp show` stays a readable width."""
        if key.endswith(("_unpaired", "_rounds")):
            return False
        with_interval = {*(self.ratios.headlines() if self.ratios else {}), "batching_tax_c1_ms"}
        base = re.sub(r"_ci\d+_(low|high)$", "", key)
        return base == key or base in with_interval

    def summary(self) -> Json:
        """The headline numbers (dvc metrics, and what a release manifest embeds): ratios, and per variant c=1 and peak."""
        variants = {}
        for name, sweep in self.variants.items():
            c1 = sweep.at(1)
            m = c1.metrics if c1 else {}
            peak = max((p.metrics["throughput_infer_s"] for p in sweep.points if p.valid), default=None)
            variants[name] = {"c1_p50_ms": _r4(m.get("p50_ms")), "c1_p99_ms": _r4(m.get("p99_ms")), "peak_infer_s": _r4(peak)}
        ratios = self.ratios.to_json() if self.ratios else {}
        return (
            {
                "server": self.server.mode,
                "ort_p50_ms": _r4(self.baseline.latency.p50_ms),
                "ort_best_infer_s": _r4(self.baseline.throughput.best_infer_s),
                "ratios": {k: _r4(v) for k, v in ratios.items() if self._in_summary(k)},
                "variants": variants,
            }
            | ({"production": self._production_summary()} if self.production else {})
            | ({"peers": self.peers.summary()} if self.peers else {})
            | ({"text_endpoint": self.text.summary()} if self.text else {})
            | ({"tune": self._tune_summary()} if self.tune and self.tune.enabled else {})
        )

    def _tune_summary(self) -> Json:
        """Where the throughput variant came from and, when measured, its paired ratios (winner over the configured
        variant and over Model Analyzer's best, with their 90% intervals)."""
        assert self.tune is not None
        out: Json = {"source": self.tune.source, "partial": self.tune.partial}
        for name, c in (("vs_start", self.tune.vs_start), ("vs_model_analyzer", self.tune.vs_model_analyzer)):
            if c is not None:
                out |= {name: _r4(c.ratio.value), f"{name}_ci90_low": _r4(c.ratio.low), f"{name}_ci90_high": _r4(c.ratio.high)}
        return out

    def record(self) -> BenchRecord:
        """What other stages read of bench.json: the schema, the files measured, the summary (when ratios were taken)."""
        return BenchRecord(self.model, self.summary() if self.ratios is not None else None, self.schema)

    def to_json(self) -> Json:
        """bench.json: the record other stages read (:meth:`record`), every measurement, the ratios and the diagnosis."""
        d: Json = self.record().to_json() | {
            "machine": self.machine.to_json(),
            "inputs": asdict(self.inputs),
            "settings": _plain(asdict(self.settings)),
            "baseline": self.baseline.to_json(),
            "server": self.server.to_json(),
            "variants": {v: s.to_json() for v, s in self.variants.items()},
        }
        if self.paired_c1 is not None:
            d["paired_c1"] = self.paired_c1.to_json()
        if self.paired_throughput:
            d["paired_throughput"] = {f"c{c}": p.to_json() for c, p in self.paired_throughput.items()}
        if self.tune is not None:
            d["tune"] = self.tune.to_json()
        if self.ratios is not None:
            d["ratios"] = self.ratios.to_json()
        if self.production is not None:
            d["production"] = self.production.to_json()
        if self.peers is not None:
            d["peers"] = self.peers.to_json()
        if self.text is not None:
            d["text_endpoint"] = self.text.to_json()
        return d | {"diagnosis": [asdict(f) for f in self.diagnosis]}

    @classmethod
    def from_json(cls, d: Json) -> BenchResult:
        """A bench.json read back (the summary is derived again, not read).

        Raises:
            BenchError: its record (schema, model) does not parse (:meth:`BenchRecord.from_json`).
        """
        head = BenchRecord.from_json(d)
        return cls(
            machine=Machine(**d["machine"]),
            model=head.model,
            inputs=InputsInfo(**d["inputs"]),
            settings=_settings_from_json(d.get("settings", {})),
            baseline=Baseline.from_json(d["baseline"]),
            server=ServerInfo(**d["server"]),
            variants={v: Sweep.from_json(s) for v, s in d["variants"].items()},
            paired_c1=C1Rounds.from_json(d["paired_c1"]) if d.get("paired_c1") else None,
            paired_throughput={int(k[1:]): ThroughputRounds.from_json(p, int(k[1:])) for k, p in (d.get("paired_throughput") or {}).items()},
            tune=TuneRecord.from_json(d["tune"], "bench.json's tune", BenchError) if d.get("tune") else None,
            ratios=Ratios.from_json(d["ratios"]) if "ratios" in d else None,
            diagnosis=[Finding(**f) for f in d.get("diagnosis", [])],
            schema=head.schema,
            production=Production.from_json(d["production"]) if d.get("production") else None,
            peers=PeersResult.from_json(d["peers"]) if d.get("peers") else None,
            text=TextEndpointResult.from_json(d["text_endpoint"]) if d.get("text_endpoint") else None,
        )
