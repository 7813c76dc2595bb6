"""Structured-config schema of the tune stage (``tune`` in params.yaml): what it searches, for what, and for how long.

The vocabulary follows Model Analyzer's where it fits: an ``objective`` (``perf_throughput``) and ``constraints``
(``perf_latency_p99``, in ms). Rules across fields (a constraint no candidate can meet, a budget too short for one
comparison) are in rules.py; pipeline/tune/ is the search.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.core.config.enums import GRAPH_LEVELS, TuneObjective
from pipeline.core.config.knobs import knob


@dataclass
class TuneConstraints:
    """What a candidate must meet to win, as Model Analyzer's ``constraints`` name them."""

    # Every measured concurrency's client p99 (perf_analyzer's), in ms.
    perf_latency_p99: float = knob(100.0, gt=0)


@dataclass
class TuneSpace:
    """The values each knob of the throughput variant may take. Coordinate descent moves one knob at a time from the
    shipped variant; a knob with one value stays as the variant has it. Instances x threads never exceed the cores."""

    instance_count: list[int] = knob([1, 2], ge=1, le=64, nonempty=True, unique=True)
    max_batch_size: list[int] = knob([4, 8, 16, 32], ge=1, le=65536, nonempty=True, unique=True)
    # Each set is clipped to the candidate's max_batch_size (sizes above it are dropped).
    preferred_batch_sizes: list[list[int]] = knob([[4, 8], [8, 16], [16, 32]], ge=1, nonempty=True)
    max_queue_delay_us: list[int] = knob([0, 500, 2000, 5000], ge=0, le=10_000_000, nonempty=True, unique=True)
    intra_op_threads: list[int] = knob([1, 2], ge=1, le=256, nonempty=True, unique=True)
    inter_op_threads: list[int] = knob([1], ge=1, le=256, nonempty=True, unique=True)
    # Triton's ORT levels: 1 = extended, 0 = all (+layout), -1 = basic, 2 = off.
    graph_optimization_level: list[int] = knob([1, 0, -1], ge=min(GRAPH_LEVELS), le=max(GRAPH_LEVELS), nonempty=True, unique=True)


@dataclass
class ModelAnalyzerConfig:
    """Model Analyzer's search beside ours (``tune.model_analyzer.enabled``; `bash scripts/setup.sh --model-analyzer`
    installs it in a venv of its own): the same server, stand-in, objective, constraint and time budget."""

    enabled: bool = False
    # Its brute search's bounds (run_config_search_max_*): MA searches instances, max_batch_size and dynamic batching.
    max_instance_count: int = knob(2, ge=1, le=64)
    max_model_batch_size: int = knob(32, ge=1, le=65536)
    max_concurrency: int = knob(16, ge=1, le=1024)


@dataclass
class TuneConfig:
    """The tune stage: a search of the throughput variant's scheduling whose winner the repository ships
    (docs/benchmarking.md, tuning). Off, it records the variant as configured and measures nothing."""

    enabled: bool = False
    objective: TuneObjective = TuneObjective.perf_throughput
    constraints: TuneConstraints = field(default_factory=TuneConstraints)
    # The concurrencies the objective is measured at (the geometric mean of their infer/s ratios); the constraint holds at each.
    concurrency: list[int] = knob([16], ge=1, le=1024, nonempty=True, unique=True)
    budget_s: float = knob(300.0, gt=0, le=86400)  # the search's wall time; past it the best so far ships, marked partial
    # Successive halving per knob: every value once, then the better half again, up to this many rounds.
    rounds: int = knob(3, ge=2, le=20)
    # A challenger replaces the current winner only when its paired ratio's 90% interval lies above 1 + min_gain.
    min_gain: float = knob(0.02, ge=0, le=1)
    measurement_interval_ms: int = knob(1000, gt=0, le=60000)  # perf_analyzer's window per run
    passes: int = knob(2, ge=1, le=10)
    # After the search: the winner, the configured variant, the runner-up and Model Analyzer's best in one server, this
    # many alternating paired rounds (each measures them all): the ratios the report and the metrics give.
    final_rounds: int = knob(6, ge=2, le=100)  # coordinate-descent passes over the knobs (a pass with no move ends the search)
    space: TuneSpace = field(default_factory=TuneSpace)
    model_analyzer: ModelAnalyzerConfig = field(default_factory=ModelAnalyzerConfig)
