"""Structured-config schema of the bench stage (``bench`` in params.yaml), one section per concern.

Every default and range lives here (:func:`~pipeline.core.config.knobs.knob`); conf/bench/default.yaml holds only
values that differ. Rules across fields (the server's URL, rounds' minimum against their maximum, the soak's ramp,
what the peers need) are in rules.py. docs/benchmarking.md says how the bench uses each section.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from pipeline.core.config.enums import BenchPeer, BenchProfile, BenchServer, EmbeddedBackend, InputShapes, Protocol
from pipeline.core.config.knobs import knob


@dataclass
class SweepConfig:
    """The sweep (the curves): each variant in its own server at every concurrency, in the full profile, against an
    external server, and for any variant the rounds do not measure."""

    concurrency: list[int] = knob([1, 2, 4, 8, 16], ge=1, nonempty=True)
    measurement_interval_ms: int = knob(3000, gt=0)  # perf_analyzer's window per point
    stability_percentage: int = knob(10, ge=1, le=100)  # perf_analyzer's stability check per point


@dataclass
class BaselineConfig:
    """In-process ONNX Runtime with the served variant's settings: the reference every served number is held against."""

    warmup_runs: int = knob(20, ge=0)  # batch-1 runs before the timed ones (also the rounds' in-process gauges)
    runs: int = knob(200, ge=1)  # timed batch-1 runs: the in-process p50
    batch_sizes: list[int] = knob([1, 2, 4, 8, 16], ge=1, nonempty=True)  # best-batch throughput: the best of these
    seconds: float = knob(2.0, gt=0)  # per batch size, in-process best-batch throughput


@dataclass
class QueueConfig:
    """When queueing is a finding (the queue tax): a share of the latency spent in Triton's queue above
    ``share_threshold``, and above ``min_ms`` of absolute wait."""

    share_threshold: float = knob(0.02, ge=0, le=1)
    # A 20 us queue on a 0.2 ms model is scheduling noise, not a tax; also the floor below which /metrics and
    # perf_analyzer's split are not compared.
    min_ms: float = knob(0.1, ge=0)


@dataclass
class RoundCounts:
    """How many rounds of one kind: at least ``min`` with a value before an interval may stop them (0 = none: the
    sweep's unpaired number, full profile only), at most ``max``."""

    min: int = knob(5, ge=0)
    max: int = 12


@dataclass
class ThroughputRoundsConfig(RoundCounts):
    """The throughput rounds: at each concurrency, both variants back to back and an in-process best-batch gauge."""

    concurrency: list[int] = knob([1, 8, 16], ge=1)  # 1: the batching tax (the throughput variant at c=1)


@dataclass
class PeerRoundsConfig:
    """The side by side's rounds (bench.peers): every deployment back to back in each round, at least ``min``, at most
    ``max``, none started after ``budget_s`` once the minimum ran."""

    min: int = knob(3, ge=2)
    max: int = 6
    budget_s: float = knob(150.0, gt=0)


@dataclass
class RoundsConfig:
    """The headline rounds (pipeline/bench/rounds/pairing.py).

    Each round gives one ratio from measurements taken next to each other, so the machine's speed cancels; a headline
    is the median over rounds with a 90% bootstrap interval, nothing dropped for drift. c=1: perf_analyzer on the latency
    variant (and the throughput one: the batching tax), served p50 over the server's own ORT time in that window, times
    the server's ORT time over in-process ORT from ``alternations`` bursts alternating between the two. At each
    ``throughput.concurrency`` above 1: both variants back to back and an in-process best-batch gauge.
    """

    c1: RoundCounts = field(default_factory=RoundCounts)
    throughput: ThroughputRoundsConfig = field(default_factory=ThroughputRoundsConfig)
    peers: PeerRoundsConfig = field(default_factory=PeerRoundsConfig)
    measurement_interval_ms: int = knob(500, gt=0)  # the rounds' perf_analyzer windows (also the best-batch gauge's time)
    # Loose: the interval over rounds, not each run, measures the noise.
    stability_percentage: int = knob(50, ge=1, le=100)
    target_half_width: float = knob(0.03, gt=0, le=1)  # default profile: stop a headline's rounds once its interval is within +-3%
    max_half_width: float = knob(0.10, le=10)  # a wider interval says nothing (the machine_drift finding); >= target_half_width
    # Default profile: no new round after this long, once the minimum ran (MiniLM on 2 cores: the minimum takes ~80 s).
    budget_s: float = knob(75.0, gt=0)
    alternations: int = knob(8, ge=1)  # per c=1 round: server / in-process burst pairs (in-server vs in-process ORT)
    alternation_ms: float = knob(150.0, gt=0)  # each burst's length


@dataclass
class ReadinessConfig:
    """Production readiness (docs/benchmarking.md): cold start, memory, Triton's own metrics."""

    # Each variant in a fresh server, with and without its model_warmup: server start, load request -> ready, and the
    # first request against the p50 of the next cold_start_requests.
    cold_start: bool = True
    cold_start_requests: int = knob(30, ge=2)
    first_request_max_ratio: float = knob(3.0, ge=1)  # a first request slower than this x that p50 is a finding
    memory_sample_ms: float = knob(200.0, ge=10, le=10000)  # RSS of tritonserver + its stubs (psutil), all along
    metrics_tolerance: float = knob(0.25, gt=0, le=10)  # Triton's /metrics against perf_analyzer's server split, per request


@dataclass
class OverloadConfig:
    """Overload: perf_analyzer request-rate at ``levels`` (shares of the throughput variant's capacity), then one burst
    (idle, ``burst_factor`` x capacity for ``burst_s``, idle); the bounded-queue check at the top level with max_queue_size
    ``queue_size`` (when the variant ships unbounded), by an open-loop client that counts rejections."""

    enabled: bool = True
    levels: list[float] = knob([0.5, 1.0, 1.5], ge=0.05, le=10)  # not empty when enabled
    interval_ms: int = knob(1000, ge=100)
    burst_factor: float = knob(4.0, ge=1)
    burst_s: float = knob(1.0, ge=0.1, le=60)
    queue_size: int = knob(16, ge=1)


@dataclass
class SoakConfig:
    """Soak (``dvc exp run -S bench.soak.duration_s=600``): the throughput variant at its best concurrency; the RSS slope
    after ``ramp_s``, MB/h with a 90% interval, above ``memory_growth_mb_per_h`` is a memory_growth finding."""

    duration_s: float = knob(0.0, ge=0)  # 0: no soak
    ramp_s: float = knob(60.0, ge=0)  # at most a third of duration_s: the fit needs the rest
    memory_growth_mb_per_h: float = knob(50.0, gt=0)


@dataclass
class TextCacheBenchConfig:
    """Triton's response cache on the text endpoint, measured on a repeated-query workload: ``requests`` texts drawn
    from the sample sentences with Zipf exponent ``zipf_s`` (rank = order in the file), sent at ``concurrency`` to the
    throughput variant with the cache off and on, in ``rounds`` paired rounds (pipeline/bench/text.py)."""

    enabled: bool = True
    size_mb: int = knob(16, ge=1, le=65536)  # the server's local cache (--cache-config=local,size=...)
    zipf_s: float = knob(1.1, gt=0, le=10)
    requests: int = knob(1000, ge=10, le=1000000)  # perf_analyzer's input steps (it cycles through them)
    concurrency: int = knob(8, ge=1, le=1024)
    rounds: int = knob(2, ge=2)  # two at least: an interval needs two (the gap is tens of times: two show it)
    checked: int = knob(20, ge=1, le=10000)  # texts asked uncached, on a miss and on a hit: the same bytes?


@dataclass
class TextInstancesBenchConfig:
    """The throughput variant's text-endpoint instance count, judged by measurement: a copy of the text model with
    the other count (1 beside 2, 2 beside 1; never more instances than cores) served beside the shipped one, both at
    the highest of bench.text.concurrency in ``rounds`` paired rounds, the order alternating (pipeline/bench/text.py)."""

    enabled: bool = True
    rounds: int = knob(2, ge=2)  # two at least: an interval needs two
    # The other count is chosen only when its interval's low end clears 1 + min_gain: a few percent is within what
    # two rounds on a drifting machine can tell.
    min_gain: float = knob(0.05, ge=0, le=1)


@dataclass
class TextBenchConfig:
    """The text endpoint (``<model>_text``, when the repository has one): paired c=1 rounds against tokenize + ONNX
    Runtime in process, then throughput at ``concurrency`` on each variant, then the response cache
    (pipeline/bench/text.py)."""

    enabled: bool = True
    rounds: int = knob(4, ge=2)  # two at least: an interval needs two
    concurrency: list[int] = knob([8, 16], ge=1, unique=True)
    cache: TextCacheBenchConfig = field(default_factory=TextCacheBenchConfig)
    instances: TextInstancesBenchConfig = field(default_factory=TextInstancesBenchConfig)


@dataclass
class BenchConfig:
    """Benchmark settings: perf_analyzer against a real Triton, an in-process ONNX Runtime baseline beside it."""

    server: BenchServer = BenchServer.embedded
    # embedded only: the stand-in for Triton's onnxruntime backend. native = pipeline_ort (C++, ORT inside
    # tritonserver); python = a python-backend model (ORT in the stub process; adds IPC and Python per batch).
    embedded_backend: EmbeddedBackend = EmbeddedBackend.native
    url: Optional[str] = None  # server=external: the running Triton's <host>:<port> for `protocol`
    metrics_url: Optional[str] = None  # server=external: Triton's metrics <host>:<port> (null: url's host, port 8002)
    protocol: Protocol = Protocol.http  # perf_analyzer -i
    # How thorough (BenchProfile). default: both variants in one server, every point measured inside interleaved rounds
    # that stop once each headline's 90% interval is within +-rounds.target_half_width (or rounds.budget_s is spent);
    # full: also the sweep over sweep.concurrency (each variant in its own server) and every round up to its maximum.
    profile: BenchProfile = BenchProfile.default
    # uniform: the largest group of same-shape sample rows (a client padding to one length, which is what lets Triton
    # batch: it batches only equal shapes); as_sampled: every sample row, mixed lengths. The choose stage reads it too.
    input_shapes: InputShapes = InputShapes.uniform
    max_trials: int = knob(10, ge=1)  # perf_analyzer's --max-trials, every run
    server_timeout_s: float = knob(180.0, gt=0)  # start + model load
    perf_timeout_s: float = knob(600.0, gt=0)  # the most one perf_analyzer run may take (less where its windows say so)
    # The side by side (pipeline/bench/peers/run.py): [] or [torchserve], the same model, inputs and load beside Triton
    # (`dvc exp run -S 'bench.peers=[torchserve]'`); its rounds are rounds.peers.
    peers: list[BenchPeer] = knob([], unique=True)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    baseline: BaselineConfig = field(default_factory=BaselineConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    rounds: RoundsConfig = field(default_factory=RoundsConfig)
    readiness: ReadinessConfig = field(default_factory=ReadinessConfig)
    overload: OverloadConfig = field(default_factory=OverloadConfig)
    soak: SoakConfig = field(default_factory=SoakConfig)
    text: TextBenchConfig = field(default_factory=TextBenchConfig)
