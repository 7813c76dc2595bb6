"""The tune record: which scheduling the throughput variant ships, and the search that chose it.

Written by the tune stage (pipeline/tune/) as ``tune.json``; read by the repository stage, which renders the throughput
variant from ``winner`` (so the repository needs none of the search's code), and by the bench report. ``source`` says
where the winner came from: ``config`` (tune.enabled=false: the variant as configured, nothing measured), ``search``
(the best candidate that met the constraint), or ``config-kept`` (the search ran and no candidate beat or met it).
``files`` holds the sha256 of the ONNX file searched on: the repository refuses a winner found on another file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from pipeline.core.atomic import read_json
from pipeline.core.config import DynamicBatchingConfig, VariantConfig
from pipeline.core.errors import PipelineError

SCHEMA_VERSION = 1
SOURCES = ("config", "search", "config-kept")


@dataclass(frozen=True)
class TuneKnobs:
    """The throughput variant's scheduling that the tune searches. ``preferred_batch_sizes`` and ``max_queue_delay_us`` are
    None for a variant without dynamic batching (the search then leaves batching off)."""

    instance_count: int
    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...] | None
    max_queue_delay_us: int | None
    intra_op_threads: int
    inter_op_threads: int
    graph_optimization_level: int

    @classmethod
    def of_variant(cls, v: VariantConfig) -> TuneKnobs:
        db = v.dynamic_batching
        return cls(
            v.instance_count,
            v.max_batch_size,
            None if db is None else tuple(db.preferred_batch_sizes),
            None if db is None else db.max_queue_delay_us,
            v.intra_op_threads,
            v.inter_op_threads,
            v.graph_optimization_level,
        )

    def onto_variant(self, v: VariantConfig) -> VariantConfig:
        """``v`` with these values: what the repository renders (everything else, warmup included, stays as configured;
        warmup batch sizes above the new max_batch_size are dropped, as Triton refuses them)."""
        db = None  # None in the knobs: no dynamic batching (Model Analyzer's best may have none)
        if self.preferred_batch_sizes is not None:
            sizes, delay = list(self.preferred_batch_sizes), self.max_queue_delay_us or 0
            db = DynamicBatchingConfig(sizes, delay) if v.dynamic_batching is None else replace(v.dynamic_batching, preferred_batch_sizes=sizes, max_queue_delay_us=delay)
        warmup = v.warmup
        if warmup is not None and self.max_batch_size > 0:
            sizes = [b for b in warmup.batch_sizes if b <= self.max_batch_size] or [1]
            warmup = replace(warmup, batch_sizes=sizes)
        return replace(
            v,
            instance_count=self.instance_count,
            max_batch_size=self.max_batch_size,
            intra_op_threads=self.intra_op_threads,
            inter_op_threads=self.inter_op_threads,
            graph_optimization_level=self.graph_optimization_level,
            dynamic_batching=db,
            warmup=warmup,
        )

    def label(self) -> str:
        """A short name for tables: ``i1 b16 p[8,16] d500 t2/1 g1``."""
        batching = "no-db" if self.preferred_batch_sizes is None else f"p[{','.join(map(str, self.preferred_batch_sizes))}] d{self.max_queue_delay_us}"
        return f"i{self.instance_count} b{self.max_batch_size} {batching} t{self.intra_op_threads}/{self.inter_op_threads} g{self.graph_optimization_level}"

    def overrides(self, key: str = "variants.throughput") -> list[str]:
        """The Hydra overrides that would set these values in params.yaml (for a person who wants them in the YAML)."""
        out = [f"{key}.{f}={getattr(self, f)}" for f in ("instance_count", "max_batch_size", "intra_op_threads", "inter_op_threads", "graph_optimization_level")]
        if self.preferred_batch_sizes is not None:
            out += [
                f"{key}.dynamic_batching.preferred_batch_sizes=[{','.join(map(str, self.preferred_batch_sizes))}]",
                f"{key}.dynamic_batching.max_queue_delay_us={self.max_queue_delay_us}",
            ]
        return out

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["preferred_batch_sizes"] = None if self.preferred_batch_sizes is None else list(self.preferred_batch_sizes)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TuneKnobs:
        pref = d["preferred_batch_sizes"]
        return cls(**{f.name: d[f.name] for f in fields(cls)} | {"preferred_batch_sizes": None if pref is None else tuple(int(b) for b in pref)})


@dataclass(frozen=True)
class Interval:
    """A paired ratio over rounds: the median and its 90% bootstrap interval (pipeline.stats.estimate.Estimate's numbers)."""

    value: float | None
    low: float | None
    high: float | None
    rounds: int

    def text(self) -> str:
        if self.value is None:
            return "n/a"
        if self.low is None or self.high is None:
            return f"{self.value:.3f}x ({self.rounds} round{'s' * (self.rounds != 1)}, no interval)"
        return f"{self.value:.3f}x (90% CI {self.low:.3f}-{self.high:.3f}, {self.rounds} rounds)"


@dataclass(frozen=True)
class Trial:
    """One candidate in one step of the search, against the step's incumbent in the same rounds and server."""

    step: int
    knob: str  # the knob the step moved ("start" for the first measurement)
    knobs: TuneKnobs
    vs_incumbent: Interval  # objective ratio, candidate over incumbent (> 1: better); the incumbent's own row is 1
    infer_s: float | None  # median over its rounds (the geometric mean over tune.concurrency)
    p99_ms: float | None  # median over its rounds of the worst p99 over tune.concurrency
    rounds: int
    feasible: bool  # its p99 met the constraint
    verdict: str  # "incumbent", "moved the search: ...", "dropped after round N", "invalid: ...", ...
    confirmed: Interval | None = None  # the step's best only: its ratio in the fresh rounds that decided


@dataclass(frozen=True)
class Comparison:
    """Two configurations measured against each other in alternating paired rounds in one server."""

    a: str  # names: "winner", "runner-up", "start", "model-analyzer"
    b: str
    a_knobs: TuneKnobs | None
    b_knobs: TuneKnobs | None
    ratio: Interval  # a's infer/s over b's, per round
    a_infer_s: float | None
    b_infer_s: float | None
    a_p99_ms: float | None
    b_p99_ms: float | None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["a_knobs"] = self.a_knobs.to_json() if self.a_knobs else None
        d["b_knobs"] = self.b_knobs.to_json() if self.b_knobs else None
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Comparison:
        knobs = {k: TuneKnobs.from_json(d[k]) if d.get(k) else None for k in ("a_knobs", "b_knobs")}
        return cls(**(d | knobs | {"ratio": Interval(**d["ratio"])}))


@dataclass(frozen=True)
class AnalyzerRun:
    """Model Analyzer's search beside ours: whether it ran (else its own error line), its best config and wall time."""

    ran: bool
    error: str = ""
    knobs: TuneKnobs | None = None
    config_name: str = ""  # MA's name for its best (e.g. model_config_3)
    wall_s: float = 0.0
    measured: int = 0  # configurations MA measured
    reported_infer_s: float | None = None  # MA's own number for its best
    reported_p99_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"knobs": self.knobs.to_json() if self.knobs else None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AnalyzerRun:
        return cls(**(d | {"knobs": TuneKnobs.from_json(d["knobs"]) if d.get("knobs") else None}))


@dataclass
class TuneRecord:
    """The tune stage's decision and its evidence."""

    enabled: bool
    source: str  # one of SOURCES
    objective: str
    p99_bound_ms: float
    concurrency: list[int]
    start: TuneKnobs  # the variant as configured
    winner: TuneKnobs  # what the repository ships
    reason: str  # one line: why this winner
    onnx: str = ""  # the file searched on
    onnx_sha256: str = ""
    precision: str = ""
    partial: bool = False  # the time budget ran out before the search finished (the best so far ships)
    budget_s: float = 0.0
    wall_s: float = 0.0
    cores: int = 0
    best_p99_ms: float | None = None  # the lowest p99 any candidate had (what to bound by when none met the constraint)
    trials: list[Trial] = field(default_factory=list)
    runner_up: Comparison | None = None  # the winner against the best candidate that did not win
    vs_start: Comparison | None = None  # the winner against the configured variant, at tune.concurrency
    model_analyzer: AnalyzerRun | None = None
    vs_model_analyzer: Comparison | None = None  # our winner against Model Analyzer's best
    notes: list[str] = field(default_factory=list)
    schema: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d |= {"start": self.start.to_json(), "winner": self.winner.to_json(), "trials": [asdict(t) | {"knobs": t.knobs.to_json()} for t in self.trials]}
        for k in ("runner_up", "vs_start", "model_analyzer", "vs_model_analyzer"):
            v = getattr(self, k)
            d[k] = v.to_json() if v is not None else None
        return d

    @classmethod
    def from_json(cls, d: Any, origin: str, error: type[PipelineError]) -> TuneRecord:
        """Parse a tune record; raise ``error`` when it is not one."""
        try:
            if d.get("schema") != SCHEMA_VERSION:
                raise ValueError(f"schema {d.get('schema')!r}, expected {SCHEMA_VERSION}")
            if d["source"] not in SOURCES:
                raise ValueError(f"source {d['source']!r}, expected one of {SOURCES}")
            trials = [
                Trial(
                    **(
                        t
                        | {
                            "knobs": TuneKnobs.from_json(t["knobs"]),
                            "vs_incumbent": Interval(**t["vs_incumbent"]),
                            "confirmed": Interval(**t["confirmed"]) if t.get("confirmed") else None,
                        }
                    )
                )
                for t in d.get("trials", [])
            ]
            parsed: dict[str, Any] = {
                "start": TuneKnobs.from_json(d["start"]),
                "winner": TuneKnobs.from_json(d["winner"]),
                "trials": trials,
                "runner_up": Comparison.from_json(d["runner_up"]) if d.get("runner_up") else None,
                "vs_start": Comparison.from_json(d["vs_start"]) if d.get("vs_start") else None,
                "model_analyzer": AnalyzerRun.from_json(d["model_analyzer"]) if d.get("model_analyzer") else None,
                "vs_model_analyzer": Comparison.from_json(d["vs_model_analyzer"]) if d.get("vs_model_analyzer") else None,
            }
            return cls(**(d | parsed))
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise error(f"{origin} is not a tune record (the tune stage's output)", fix="rerun it: dvc repro tune", details={"error": f"{type(e).__name__}: {e}"}) from None


def read_tune(path: str | Path, error: type[PipelineError]) -> TuneRecord:
    """Read ``tune.json``; raise ``error`` (the caller's stage error) when it is missing or malformed."""
    return TuneRecord.from_json(read_json(Path(path), error, "tune record", "run the tune stage: dvc repro tune"), str(path), error)
