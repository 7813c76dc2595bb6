"""Structured-config schemas: one dataclass per section of conf/ and params.yaml.

Types and defaults live here; OmegaConf rejects an unknown key or a wrong type when params are merged
onto these classes. Closed sets are Enums (enums.py); ranges and cross-field rules are in checks.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from pipeline.core.config.enums import (
    BenchPeer,
    BenchProfile,
    BenchServer,
    DType,
    EmbeddedBackend,
    ErrorStat,
    HardwareCompatibility,
    InputShapes,
    OutputKind,
    Precision,
    Protocol,
    Source,
    TargetKind,
    VariantName,
)

from pipeline.core.config.schema_int8 import ChooseConfig, Int8Config, QualityConfig
from pipeline.core.config.schema_release import ReleaseConfig


# ---------------------------------------------------------------- model
@dataclass
class TensorSpec:
    """One model input: name, numpy dtype and shape (strings name dynamic axes)."""

    name: str = "input"
    dtype: DType = DType.float32
    shape: list[Any] = field(default_factory=lambda: ["batch", 3, 32, 32])
    # Value range for synthetic samples (token ids need high = vocabulary size).
    low: float = 0.0
    high: float = 1.0


@dataclass
class ModelConfig:
    """Where the model comes from and what its I/O looks like."""

    name: str = "model"  # Triton model name
    source: Source = Source.factory  # a torch nn.Module from `factory`, or an existing ONNX file at `path`
    factory: Optional[dict[str, Any]] = None  # {_target_: pkg.module.fn, **kwargs} -> nn.Module
    checkpoint: Optional[str] = None  # state_dict: .safetensors, or .pt loaded with weights_only=True
    path: Optional[str] = None  # the .onnx file when source == "onnx"
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    # What each output means, so the parity gate judges it by what matters ({embedding: embedding}, {logits: classifier});
    # an output not listed is judged by the elementwise tolerances alone.
    output_kinds: dict[str, OutputKind] = field(default_factory=dict)
    # The class axis (classifier) or embedding axis of a judged output, where it is not the last: {output: axis}.
    # A [N, T, C] recognizer is judged per position along its last axis; a [N, C, T] one needs {output: 1}.
    output_axes: dict[str, int] = field(default_factory=dict)
    # Real sample inputs: {_target_: fn, **kwargs} returning a list of feed dicts (name -> numpy array), or the file
    # form {path: file or folder of images, mean, std} (schema_data.DataPathConfig); null: synthetic inputs from `inputs`.
    data: Optional[dict[str, Any]] = None
    seq_len: int = 128  # used by text models' interpolations
    seed: int = 0
    # The size synthetic samples give each dynamic axis, by the axis name (the graph's, or model.inputs'), where the
    # default (16) does not fit the model: {height: 32, width: 32} for a detector that needs multiples of 32. The batch
    # axis takes the samples' batch sizes. (The export stage tries a few sizes and names this key when 16 fails.)
    sample_dims: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------- export / simplify / precision
@dataclass
class ExportConfig:
    """torch.onnx.export settings."""

    opset: int = 17
    dynamo: bool = False  # the TorchScript exporter needs no onnxscript and handles MiniLM
    do_constant_folding: bool = True
    batch_axis: str = "batch"
    sample_batch: int = 2
    check_atol: float = 1e-4
    check_rtol: float = 1e-3


@dataclass
class SimplifyConfig:
    """onnxsim settings; `enabled: false` copies the exported graph unchanged."""

    enabled: bool = True
    check_n: int = 3  # random-input comparisons onnxsim runs on its own result
    skip_shape_inference: bool = False


@dataclass
class Fp16FallbackConfig:
    """Data-driven FP32 fallback for nodes whose values leave FP16's range."""

    enabled: bool = True
    max_attempts: int = 3
    # |x| above this is an overflow risk (65504 is FP16's largest finite value).
    max_abs: float = 65504.0
    # Values whose magnitude is below FP16's smallest normal but above `tiny_ignore` lose precision.
    min_normal: float = 6.104e-05
    tiny_ignore: float = 1e-30
    # Share of an output's meaningful values that must be subnormal before the node is blocked.
    subnormal_share: float = 0.01
    # A value is meaningful only above this fraction of its tensor's own max |x| (softmax tails are not).
    subnormal_relative: float = 1e-3
    # |x| >= this is a masking sentinel (e.g. torch.finfo(float32).min in attention masks), not an
    # overflow: the converter clips constants to precision.max_finite_val, so it stays finite in FP16.
    # Set to .inf to treat sentinels as overflow too.
    sentinel_abs: float = 1e30
    reference_check: bool = True  # cross-check with onnx.reference's true float16 evaluation
    # onnx.reference runs float16 in numpy (slow): cross-check on this many of the smallest samples.
    reference_check_samples: int = 1


@dataclass
class PrecisionConfig:
    """FP16 conversion settings (onnxconverter-common)."""

    keep_io_types: bool = True
    op_block_list: list[str] = field(default_factory=list)  # extra op types kept in FP32
    node_block_list: list[str] = field(default_factory=list)  # node names kept in FP32
    min_positive_val: float = 1e-7
    max_finite_val: float = 1e4
    fallback: Fp16FallbackConfig = field(default_factory=Fp16FallbackConfig)


# ---------------------------------------------------------------- targets
@dataclass
class TrtBuilderConfig:
    """TensorRT builder settings for one GPU target."""

    workspace_mb: int = 4096
    optimization_level: int = 3  # builder optimization level 0..5
    hardware_compatibility: HardwareCompatibility = HardwareCompatibility.none
    version_compatible: bool = False
    # TensorRT 10 only (11 is always strongly typed): true = strongly typed network, precision from the
    # FP16 ONNX as in 11; false = weakly typed with BuilderFlag.FP16 (TensorRT may pick FP32 kernels).
    strongly_typed_trt10: bool = False
    timing_cache: bool = True  # load/save the per-target timing cache (a DVC output)


@dataclass
class ProfileConfig:
    """Optimization-profile ranges: batch, and named dynamic axes (e.g. sequence)."""

    batch: list[int] = field(default_factory=lambda: [1, 8, 32])  # min, opt, max
    dims: dict[str, list[int]] = field(default_factory=dict)  # axis name -> [min, opt, max]


@dataclass
class TargetConfig:
    """One deployment target: the CPU, or a GPU family of a given compute capability."""

    name: str = "cpu"
    kind: TargetKind = TargetKind.cpu
    gpu_family: Optional[str] = None
    compute_capability: Optional[str] = None  # e.g. "8.0"
    # Case-insensitive substrings of the GPU name (nvidia-smi) this target accepts, e.g. ["A10"] for
    # A10 and A10G; empty = any GPU of the right compute capability.
    gpu_names: list[str] = field(default_factory=list)
    precision: Precision = Precision.fp32  # which ONNX the ONNX Runtime model serves
    builder: TrtBuilderConfig = field(default_factory=TrtBuilderConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)


# ---------------------------------------------------------------- Triton variants
@dataclass
class DynamicBatchingConfig:
    """Triton dynamic_batching block."""

    preferred_batch_sizes: list[int] = field(default_factory=lambda: [4, 8])
    max_queue_delay_us: int = 1000
    max_queue_size: int = 0  # 0 = unbounded
    preserve_ordering: bool = False


@dataclass
class WarmupConfig:
    """Triton model_warmup: requests the server runs while it loads the model, before it reports it ready.

    Each batch size is one warmup sample built from a real sample row (the repository stage writes it under
    ``<model>/warmup/``), run ``count`` times; null in a variant: no warmup, its first request pays the first-run cost.
    """

    batch_sizes: list[int] = field(default_factory=lambda: [1])
    count: int = 1


@dataclass
class VariantConfig:
    """The scheduling part of a Triton config: what makes it a latency or throughput config."""

    name: str = "latency"
    max_batch_size: int = 8
    instance_count: int = 1
    intra_op_threads: int = 2
    inter_op_threads: int = 1
    # Triton's ORT graph level: -1 basic, 1 extended, 2 = OFF (not "more"), 0 = all (same as absent).
    graph_optimization_level: int = 1
    dynamic_batching: Optional[DynamicBatchingConfig] = None
    warmup: Optional[WarmupConfig] = field(default_factory=WarmupConfig)


@dataclass
class VariantsConfig:
    """The two config variants every repository ships."""

    latency: VariantConfig = field(default_factory=VariantConfig)
    throughput: VariantConfig = field(default_factory=lambda: VariantConfig(name="throughput"))


@dataclass
class ServingConfig:
    """Derived in conf/config.yaml from ``targets[0]``: what the ONNX Runtime model serves. Never set by hand."""

    target: str = "cpu"
    kind: TargetKind = TargetKind.cpu
    precision: Precision = Precision.fp32


@dataclass
class RepositoryConfig:
    """Model repository layout."""

    version: int = 1
    default_variant: VariantName = VariantName.latency  # copied to config.pbtxt
    trt_model_suffix: str = "_trt"


# ---------------------------------------------------------------- parity / bench / release
@dataclass
class OutputToleranceConfig:
    """Per-output override; a null field inherits the artifact kind's value."""

    atol: Optional[float] = None
    rtol: Optional[float] = None
    check_error_stat: Optional[ErrorStat] = None
    error_quantile: Optional[float] = None


@dataclass
class ToleranceConfig:
    """Tolerance for one artifact kind (fp32, fp16, trt), with optional per-output overrides.

    Polygraphy semantics: an output fails only when its statistic exceeds BOTH atol and rtol.
    """

    atol: float = 1e-4
    rtol: float = 1e-3
    check_error_stat: ErrorStat = ErrorStat.max
    error_quantile: float = 0.99
    per_output: dict[str, OutputToleranceConfig] = field(default_factory=dict)
    quality: QualityConfig = field(default_factory=QualityConfig)


@dataclass
class ParityConfig:
    """Numerical parity gate settings."""

    fp32: ToleranceConfig = field(default_factory=ToleranceConfig)
    fp16: ToleranceConfig = field(default_factory=lambda: ToleranceConfig(atol=2e-2, rtol=2e-2))
    trt: ToleranceConfig = field(default_factory=lambda: ToleranceConfig(atol=2e-2, rtol=2e-2))
    int8: ToleranceConfig = field(
        default_factory=lambda: ToleranceConfig(
            atol=0.1, rtol=0.1, check_error_stat=ErrorStat.mean, quality=QualityConfig(cosine_min=0.98, cosine_mean=0.99, rank_agreement=0.98, top1_agreement=0.98)
        )
    )
    max_samples: int = 64  # samples compared (and saved as goldens), at most: of real ones, the rows held out of calibration
    # Batch sizes of the synthetic samples used when model.data is null (e.g. cnn).
    synthetic_batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8])


@dataclass
class BenchConfig:
    """Benchmark settings (perf_analyzer against Triton, ORT baseline)."""

    server: BenchServer = BenchServer.embedded
    # embedded only: the stand-in for Triton's onnxruntime backend. native = pipeline_ort (C++, ORT inside
    # tritonserver); python = a python-backend model (ORT in the stub process; adds IPC and Python per batch).
    embedded_backend: EmbeddedBackend = EmbeddedBackend.native
    url: Optional[str] = None  # for server=external
    # The sweep (curves): the full profile, an external server, and any variant the rounds do not measure.
    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    measurement_interval_ms: int = 3000
    stability_percentage: int = 10
    max_trials: int = 10
    warmup_runs: int = 20
    baseline_runs: int = 200
    baseline_batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    queue_share_threshold: float = 0.02
    # ...and above this absolute wait: a 20 us queue on a 0.2 ms model is scheduling noise, not a tax.
    queue_min_ms: float = 0.1
    # How thorough (BenchProfile). default: both variants in one server, every point measured inside interleaved
    # rounds that stop once each headline's 90% interval is within +-target_half_width (or rounds_budget_s is spent);
    # full: also the sweep over bench.concurrency (each variant in its own server) and every round up to the max.
    profile: BenchProfile = BenchProfile.default
    # The headline rounds (pipeline/bench/pairing.py). Each round gives one ratio from measurements taken next to each
    # other; a headline is the median over rounds with a 90% bootstrap interval. c=1: perf_analyzer on the latency
    # variant (and the throughput one: the batching tax) plus `alternations` short bursts alternating between the
    # server and in-process ORT; at each paired_throughput_concurrency: both variants and an in-process gauge.
    # *_rounds: at least this many rounds with a value before an interval may stop them (0 = none: the sweep's
    # unpaired number, full profile only); *_max_rounds: at most this many.
    paired_rounds: int = 5
    paired_max_rounds: int = 12
    paired_throughput_concurrency: list[int] = field(default_factory=lambda: [1, 8, 16])  # 1: the batching tax
    paired_throughput_rounds: int = 5
    paired_throughput_max_rounds: int = 12
    paired_measurement_interval_ms: int = 500  # the rounds' perf_analyzer windows (also the best-batch gauge's time)
    # perf_analyzer's stability check in the rounds: the interval over rounds, not each run, measures the noise.
    paired_stability_percentage: int = 50
    target_half_width: float = 0.03  # default profile: stop a headline's rounds once its interval is within +-3%
    max_half_width: float = 0.10  # a wider interval says nothing (the machine_drift finding)
    rounds_budget_s: float = 75.0  # default profile: no new round after this long, once the minimum rounds ran
    alternations: int = 8  # per c=1 round: server / in-process burst pairs (in-server vs in-process ORT)
    alternation_ms: float = 150.0  # each burst's length
    # Tuning only: a candidate is measured again while its in-process gauges drift more than this.
    paired_max_drift: float = 0.10
    tune: bool = False
    latency_budget_ms: float = 100.0
    protocol: Protocol = Protocol.http  # perf_analyzer -i
    # uniform: the largest group of same-shape sample rows (a client padding to one length, which is what
    # lets Triton batch: it batches only equal shapes); as_sampled: every sample row, mixed lengths.
    input_shapes: InputShapes = InputShapes.uniform
    baseline_seconds: float = 2.0  # per batch size, in-process best-batch throughput
    server_timeout_s: float = 180.0  # start + model load
    perf_timeout_s: float = 600.0  # one perf_analyzer run
    # Throughput-variant tuning (bench.tune=true): every combination is measured at tune_concurrency, between two
    # in-process best-batch gauges; a candidate whose gauges drift more than paired_max_drift is measured again,
    # at most tune_max_rounds times, and is not chosen if they never agree.
    tune_concurrency: int = 8
    tune_max_rounds: int = 3
    tune_queue_delays_us: list[int] = field(default_factory=lambda: [0, 500, 2000, 5000])
    tune_preferred_batch_sizes: list[list[int]] = field(default_factory=lambda: [[4, 8], [8, 16]])
    tune_instance_counts: list[int] = field(default_factory=lambda: [1, 2])
    # Production readiness (docs/benchmarking.md; conf/bench/default.yaml says what each key does).
    cold_start: bool = True  # each variant in fresh servers, with and without its model_warmup
    cold_start_requests: int = 30  # the warm p50 the first request is held against
    first_request_max_ratio: float = 3.0
    memory_sample_ms: float = 200.0  # RSS of tritonserver + its stubs
    metrics_tolerance: float = 0.25  # Triton's /metrics against perf_analyzer's server split, per request
    metrics_url: Optional[str] = None  # external: /metrics host:port (null: bench.url's host, port 8002)
    overload: bool = True
    overload_levels: list[float] = field(default_factory=lambda: [0.5, 1.0, 1.5])  # shares of the throughput capacity
    overload_interval_ms: int = 1000
    burst_factor: float = 4.0
    burst_s: float = 1.0
    overload_queue_size: int = 16  # the bounded-queue check's max_queue_size when the variant ships unbounded
    soak_s: float = 0.0  # 0: no soak
    soak_ramp_s: float = 60.0
    memory_growth_mb_per_h: float = 50.0
    # The side by side (pipeline/bench/peers.py): [] or [torchserve]; its rounds as the headline's (conf/bench/default.yaml).
    peers: list[BenchPeer] = field(default_factory=list)
    peer_rounds: int = 3
    peer_max_rounds: int = 6
    peer_budget_s: float = 150.0


# ---------------------------------------------------------------- root
@dataclass
class PipelineConfig:
    """The whole composed config (params.yaml)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    simplify: SimplifyConfig = field(default_factory=SimplifyConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    int8: Int8Config = field(default_factory=Int8Config)
    targets: list[str] = field(default_factory=lambda: ["cpu"])
    target_specs: dict[str, TargetConfig] = field(default_factory=dict)
    serving: ServingConfig = field(default_factory=ServingConfig)
    # Derived in conf/config.yaml from the fleet ({target: precision of the ONNX its engine stage reads}); never set.
    engine_precision: dict[str, Precision] = field(default_factory=dict)
    # Derived in conf/config.yaml from the fleet (some target serves int8 or auto); never set. The int8 stage runs its
    # automatic fallback search only when it is true.
    int8_in_fleet: bool = False
    # Derived likewise for fp16; never set. When false, the fp16 stage is best effort: a failure is recorded, not fatal.
    fp16_in_fleet: bool = False
    choose: ChooseConfig = field(default_factory=ChooseConfig)
    variants: VariantsConfig = field(default_factory=VariantsConfig)
    repository: RepositoryConfig = field(default_factory=RepositoryConfig)
    parity: ParityConfig = field(default_factory=ParityConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    release: ReleaseConfig = field(default_factory=ReleaseConfig)
    # Set by conf/config.yaml to ${pipeline_checked:}: resolving it runs every check of this package while
    # Hydra composes params.yaml (pipeline/core/config/resolver.py), so it reads "passed (...)" in params.yaml.
    config_check: str = ""
