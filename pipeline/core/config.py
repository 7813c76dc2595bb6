"""Structured-config schemas for every section of conf/ and params.yaml.

The YAML under conf/ is composed by Hydra (by `dvc exp run`, or by
``python -m pipeline.params``) into params.yaml. Every stage loads params.yaml
through :func:`load_config`, which merges it onto these dataclasses, so an
unknown key or a wrong type fails at load with the key named.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException, ValidationError

from pipeline.core.errors import ConfigError


# ---------------------------------------------------------------- model
@dataclass
class TensorSpec:
    """One model input: name, numpy dtype and shape (strings name dynamic axes)."""

    name: str = "input"
    dtype: str = "float32"
    shape: list[Any] = field(default_factory=lambda: ["batch", 3, 32, 32])
    # Value range for synthetic samples (token ids need high = vocabulary size).
    low: float = 0.0
    high: float = 1.0


@dataclass
class ModelConfig:
    """Where the model comes from and what its I/O looks like."""

    name: str = "model"  # Triton model name
    source: str = "factory"  # "factory" (a torch nn.Module) or "onnx" (an existing file)
    factory: Optional[dict[str, Any]] = None  # {_target_: pkg.module.fn, **kwargs} -> nn.Module
    checkpoint: Optional[str] = None  # state_dict: .safetensors, or .pt loaded with weights_only=True
    path: Optional[str] = None  # the .onnx file when source == "onnx"
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    # Real sample inputs: {_target_: fn, **kwargs} returning a list of feed dicts
    # (name -> numpy array); null means synthetic inputs from `inputs`.
    data: Optional[dict[str, Any]] = None
    seq_len: int = 128  # used by text models' interpolations
    seed: int = 0


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
    # Share of an output's nonzero values that must be subnormal before the node is blocked.
    subnormal_share: float = 0.01
    reference_check: bool = True  # cross-check with onnx.reference's true float16 evaluation


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
    hardware_compatibility: str = "none"  # "none" or "ampere_plus"
    version_compatible: bool = False


@dataclass
class ProfileConfig:
    """Optimization-profile ranges: batch, and named dynamic axes (e.g. sequence)."""

    batch: list[int] = field(default_factory=lambda: [1, 8, 32])  # min, opt, max
    dims: dict[str, list[int]] = field(default_factory=dict)  # axis name -> [min, opt, max]


@dataclass
class TargetConfig:
    """One deployment target: the CPU, or a GPU family of a given compute capability."""

    name: str = "cpu"
    kind: str = "cpu"  # "cpu" or "gpu"
    gpu_family: Optional[str] = None
    compute_capability: Optional[str] = None  # e.g. "8.0"
    precision: str = "fp32"  # which ONNX the ONNX Runtime model serves: fp32 or fp16
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
class VariantConfig:
    """The scheduling part of a Triton config: what makes it a latency or throughput config."""

    name: str = "latency"
    max_batch_size: int = 8
    instance_count: int = 1
    intra_op_threads: int = 2
    inter_op_threads: int = 1
    # Triton's ORT graph level: 1 = all optimizations, -1 = basic, 2 = OFF (not "more").
    graph_optimization_level: int = 1
    dynamic_batching: Optional[DynamicBatchingConfig] = None


@dataclass
class VariantsConfig:
    """The two config variants every repository ships."""

    latency: VariantConfig = field(default_factory=VariantConfig)
    throughput: VariantConfig = field(default_factory=lambda: VariantConfig(name="throughput"))


@dataclass
class RepositoryConfig:
    """Model repository layout."""

    version: int = 1
    default_variant: str = "latency"  # copied to config.pbtxt
    trt_model_suffix: str = "_trt"


# ---------------------------------------------------------------- parity / bench / release
@dataclass
class ToleranceConfig:
    """Tolerance for one artifact kind, with optional per-output overrides."""

    atol: float = 1e-4
    rtol: float = 1e-3
    check_error_stat: str = "max"  # elemwise | max | mean | median | quantile
    error_quantile: float = 0.99
    per_output: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class ParityConfig:
    """Numerical parity gate settings."""

    fp32: ToleranceConfig = field(default_factory=ToleranceConfig)
    fp16: ToleranceConfig = field(default_factory=lambda: ToleranceConfig(atol=2e-2, rtol=2e-2))
    trt: ToleranceConfig = field(default_factory=lambda: ToleranceConfig(atol=2e-2, rtol=2e-2))
    max_samples: int = 16


@dataclass
class BenchConfig:
    """Benchmark settings (perf_analyzer against Triton, ORT baseline)."""

    server: str = "embedded"  # embedded | external
    url: Optional[str] = None  # for server=external
    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    measurement_interval_ms: int = 3000
    stability_percentage: int = 10
    max_trials: int = 10
    warmup_runs: int = 20
    baseline_runs: int = 200
    baseline_batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    queue_share_threshold: float = 0.02
    tune: bool = False
    latency_budget_ms: float = 100.0


@dataclass
class ReleaseConfig:
    """Release store settings."""

    store: str = "releases"
    environments: list[str] = field(default_factory=lambda: ["dev", "staging", "production"])


# ---------------------------------------------------------------- root
@dataclass
class PipelineConfig:
    """The whole composed config (params.yaml)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    simplify: SimplifyConfig = field(default_factory=SimplifyConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    targets: list[str] = field(default_factory=lambda: ["cpu"])
    target_specs: dict[str, TargetConfig] = field(default_factory=dict)
    variant: VariantsConfig = field(default_factory=VariantsConfig)
    repository: RepositoryConfig = field(default_factory=RepositoryConfig)
    parity: ParityConfig = field(default_factory=ParityConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    release: ReleaseConfig = field(default_factory=ReleaseConfig)


def _known_keys(node: Any, prefix: str = "") -> list[str]:
    out: list[str] = []
    if isinstance(node, DictConfig):
        for k in node.keys():
            key = f"{prefix}{k}"
            out.append(key)
            out += _known_keys(node._get_node(k), key + ".")  # noqa: SLF001 - no public way to get a child node
    return out


def validate(raw: DictConfig | dict[str, Any], origin: str = "params.yaml") -> PipelineConfig:
    """Merge ``raw`` onto the schema; raise :class:`ConfigError` naming the bad key.

    Returns a typed :class:`PipelineConfig` object (dataclass instances, not DictConfig).
    """
    schema = OmegaConf.structured(PipelineConfig)
    try:
        merged = OmegaConf.merge(schema, raw)
        obj = OmegaConf.to_object(merged)
    except ConfigKeyError as e:
        key = e.full_key or str(e.key)
        close = difflib.get_close_matches(key, _known_keys(schema), n=1)
        raise ConfigError(
            f"unknown config key '{key}' in {origin}",
            fix=(f"did you mean '{close[0]}'? " if close else "")
            + "correct the key in conf/ or in your -S override, then regenerate params.yaml",
            details={"key": key},
        ) from None
    except MissingMandatoryValue as e:
        key = e.full_key or "?"
        raise ConfigError(
            f"config key '{key}' has no value in {origin}",
            fix=f"set it, e.g. `python -m pipeline.params ... {key}=<value>` or `dvc exp run -S {key}=<value>`",
            details={"key": key},
        ) from None
    except (ValidationError, OmegaConfBaseException) as e:
        key = getattr(e, "full_key", None) or "?"
        raise ConfigError(
            f"invalid value for config key '{key}' in {origin}",
            fix="give the key a value of the type its schema in pipeline/core/config.py declares",
            details={"key": key, "error": getattr(e, "msg", str(e)).splitlines()[0]},
        ) from None
    assert isinstance(obj, PipelineConfig)
    _check_semantics(obj, origin)
    return obj


def _check_semantics(cfg: PipelineConfig, origin: str) -> None:
    """Checks a type system cannot express."""
    if cfg.model.source not in ("factory", "onnx"):
        raise ConfigError(
            f"model.source must be 'factory' or 'onnx', got '{cfg.model.source}' in {origin}",
            fix="set model.source=factory (with model.factory._target_) or model.source=onnx (with model.path)",
        )
    unknown = [t for t in cfg.targets if t not in cfg.target_specs]
    if unknown:
        raise ConfigError(
            f"targets {unknown} have no definition in {origin}",
            fix=f"choose from {sorted(cfg.target_specs)} or add conf/target/<name>.yaml and list it in conf/config.yaml",
            details={"targets": cfg.targets},
        )
    for name, v in (("latency", cfg.variant.latency), ("throughput", cfg.variant.throughput)):
        if v.graph_optimization_level not in (-1, 0, 1, 2):
            raise ConfigError(
                f"variant.{name}.graph_optimization_level={v.graph_optimization_level} is not a Triton ORT level",
                fix="use 1 (all optimizations), -1 (basic) or 2 (off)",
            )
    if cfg.repository.default_variant not in ("latency", "throughput"):
        raise ConfigError(
            f"repository.default_variant='{cfg.repository.default_variant}' is not a variant",
            fix="set repository.default_variant to latency or throughput",
        )


def load_config(params_path: str | Path, origin: str | None = None) -> PipelineConfig:
    """Load and validate params.yaml; raise :class:`ConfigError` with the fix on any problem."""
    path = Path(params_path)
    if not path.is_file():
        raise ConfigError(
            f"params file not found: {path}",
            fix="run `python -m pipeline.params` to compose conf/ into params.yaml",
        )
    try:
        raw = OmegaConf.load(path)
    except Exception as e:  # yaml errors come in several types
        raise ConfigError(f"cannot parse {path}", fix="fix the YAML syntax", details={"error": e}) from None
    assert isinstance(raw, DictConfig)
    return validate(raw, origin=origin or str(path))
