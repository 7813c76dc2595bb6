"""Structured-config schemas: one dataclass per section of params.yaml, the only place a default or a range lives.

Every field's default is composed into params.yaml (store.py registers these classes' defaults with Hydra, under the
YAML of conf/, which holds only choices and values that differ). A bounded field is declared with
:func:`~pipeline.core.config.knobs.knob`, checked by one walker; closed sets are Enums (enums.py); rules across fields
are in rules.py. Sections with schemas of their own: schema_precision.py, schema_bench.py, schema_release.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from pipeline.core.config.enums import GRAPH_LEVELS, DType, ErrorStat, HardwareCompatibility, OutputKind, Precision, Source, TargetKind, TokenField, VariantName
from pipeline.core.config.knobs import knob
from pipeline.core.config.schema_bench import BenchConfig
from pipeline.core.config.schema_precision import ChooseConfig, Int8Config, PrecisionConfig, QualityConfig
from pipeline.core.config.schema_release import ReleaseConfig
from pipeline.core.config.schema_tune import TuneConfig

# Upper bounds no real deployment reaches, so a typo (an extra zero, 1e9) fails at composition, not in Triton.
LIMITS = {
    "max_batch_size": 65536,
    "instance_count": 64,
    "threads": 256,
    "instance_threads": 1024,  # instance_count x intra_op_threads
    "max_queue_delay_us": 10_000_000,
    "max_queue_size": 1_000_000,
    "warmup_count": 1000,
    "name_bytes": 255,
}
OPSETS = (7, 23)  # what onnx 1.23 / ONNX Runtime 1.31 accept for the default domain


# ---------------------------------------------------------------- model
@dataclass
class TensorSpec:
    """One model input: name, numpy dtype and shape (strings name dynamic axes)."""

    name: str = "input"
    dtype: DType = DType.float32
    shape: list[Any] = field(default_factory=lambda: ["batch", 3, 32, 32])
    # Value range for synthetic samples (token ids need high = vocabulary size); low <= high.
    low: float = 0.0
    high: float = 1.0


@dataclass
class TokenizerConfig:
    """The text model's tokenizer: the repository adds ``<model.name>_text``, which takes text and returns the outputs."""

    # A tokenizers-library tokenizer.json: a path (relative to the project), or <python package>:<file in the package>.
    path: str = knob("", nonempty=True, empty="must name the tokenizer.json file (or set model.tokenizer=null)")
    max_length: int = knob(128, ge=1, le=65536)  # a row's tokens, special tokens included
    truncation: bool = True  # cut a longer row to max_length; false: answer that request with an error
    # Which graph input gets what: {input_ids: ids, attention_mask: attention_mask} (type_ids for a third input).
    inputs: dict[str, TokenField] = field(default_factory=dict)


@dataclass
class ModelConfig:
    """Where the model comes from and what its I/O looks like."""

    name: str = "model"  # Triton model name
    source: Source = Source.factory  # a torch nn.Module from `factory`, or an existing ONNX file at `path`
    factory: Optional[dict[str, Any]] = None  # {_target_: pkg.module.fn, **kwargs} -> nn.Module
    checkpoint: Optional[str] = None  # state_dict: .safetensors, or .pt loaded with weights_only=True
    path: Optional[str] = None  # the .onnx file when source == "onnx" (model=onnx: `???`, a value you must set)
    # source=onnx: read from the graph; list them here to pin names and sample ranges. source=factory: the input specs
    # to export with.
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)  # source=factory: the output names to export with
    # What each output means, so the parity gate judges it by what matters ({embedding: embedding}, {logits: classifier});
    # an output not listed is judged by the elementwise tolerances alone.
    output_kinds: dict[str, OutputKind] = field(default_factory=dict)
    # The class axis (classifier) or embedding axis of a judged output, where it is not the last: {output: axis}.
    # A [N, T, C] recognizer is judged per position along its last axis; a [N, C, T] one needs {output: 1}.
    output_axes: dict[str, int] = field(default_factory=dict)
    # Real sample inputs: {_target_: fn, **kwargs} returning a list of feed dicts (name -> numpy array), or the file
    # form {path: file or folder of images, mean, std} (schema_data.DataPathConfig); null: synthetic inputs from `inputs`.
    data: Optional[dict[str, Any]] = None
    seq_len: int = knob(128, ge=1)  # used by text models' interpolations (their inputs, the targets' profiles)
    seed: int = knob(0, ge=0)
    # The size synthetic samples give each dynamic axis, by the axis name (the graph's, or model.inputs'), where the
    # default (16) does not fit the model: {height: 32, width: 32} for a detector that needs multiples of 32. The batch
    # axis takes the samples' batch sizes. (The export stage tries a few sizes and names this key when 16 fails.)
    sample_dims: dict[str, int] = knob({}, ge=1, le=65536)
    # A text model's tokenizer: the repository then also ships <name>_text, text in and outputs out. null: no text endpoint.
    tokenizer: Optional[TokenizerConfig] = None


# ---------------------------------------------------------------- export / simplify
@dataclass
class ExportConfig:
    """torch.onnx.export settings."""

    opset: int = knob(17, ge=OPSETS[0], le=OPSETS[1])
    dynamo: bool = False  # the TorchScript exporter needs no onnxscript and handles MiniLM
    do_constant_folding: bool = True
    batch_axis: str = knob("batch", nonempty=True, empty="must name the dynamic batch axis")  # on every input and output
    sample_batch: int = knob(2, ge=1)  # batch of the sanity sample compared against torch
    check_atol: float = knob(1e-4, ge=0)
    check_rtol: float = knob(1e-3, ge=0)


@dataclass
class SimplifyConfig:
    """onnxsim settings; `enabled: false` copies the exported graph unchanged."""

    enabled: bool = True
    check_n: int = knob(3, ge=0)  # random-input comparisons onnxsim runs on its own result
    skip_shape_inference: bool = False


# ---------------------------------------------------------------- targets
@dataclass
class TrtBuilderConfig:
    """TensorRT builder settings for one GPU target."""

    workspace_mb: int = knob(4096, gt=0)
    optimization_level: int = knob(3, ge=0, le=5)  # builder optimization level
    hardware_compatibility: HardwareCompatibility = HardwareCompatibility.none  # ampere_plus: portable across sm80+, can be slower
    version_compatible: bool = False
    # TensorRT 10 only (11 is always strongly typed): true = strongly typed network, precision from the
    # FP16 ONNX as in 11; false = weakly typed with BuilderFlag.FP16 (TensorRT may pick FP32 kernels).
    strongly_typed_trt10: bool = False
    timing_cache: bool = True  # load/save the per-target timing cache (a DVC output)


@dataclass
class ProfileConfig:
    """Optimization-profile ranges: batch, and named dynamic axes (e.g. sequence)."""

    batch: list[int] = field(default_factory=lambda: [1, 8, 32])  # [min, opt, max], 1 <= min <= opt <= max
    # axis name -> [min, opt, max], e.g. {sequence: [1, "${model.seq_len}", 256]} for a text model's GPU target
    dims: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class TargetConfig:
    """One deployment target: the CPU, or a GPU family of a given compute capability (conf/target/<name>.yaml)."""

    name: str = "cpu"  # the key it is defined under in target_specs
    kind: TargetKind = TargetKind.cpu
    gpu_family: Optional[str] = None
    compute_capability: Optional[str] = None  # e.g. "8.0"
    # Case-insensitive substrings of the GPU name (nvidia-smi) this target accepts, e.g. ["A10"] for
    # A10 and A10G; empty = any GPU of the right compute capability.
    gpu_names: list[str] = field(default_factory=list)
    # Which ONNX the ONNX Runtime model serves (and a GPU target's engine is built from): fp32 | fp16 | int8 | auto (the
    # fastest that passed parity, timed here: ChooseConfig; cpu targets only).
    precision: Precision = Precision.fp32
    builder: TrtBuilderConfig = field(default_factory=TrtBuilderConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)


# ---------------------------------------------------------------- Triton variants
@dataclass
class DynamicBatchingConfig:
    """Triton dynamic_batching block."""

    preferred_batch_sizes: list[int] = knob([4, 8], ge=1)  # each <= the variant's max_batch_size
    max_queue_delay_us: int = knob(1000, ge=0, le=LIMITS["max_queue_delay_us"])
    # 0 = unbounded. A bounded queue makes this Triton build's dynamic batcher stall, on both stand-ins (the native one
    # too: docs/benchmarking.md, bounded queues); set a bound on a full Triton after the bench's bounded-queue check
    # passes there. Unbounded, past capacity the queue only grows (the unbounded_queue finding).
    max_queue_size: int = knob(0, ge=0, le=LIMITS["max_queue_size"])
    preserve_ordering: bool = False


@dataclass
class WarmupConfig:
    """Triton model_warmup: requests the server runs while it loads the model, before it reports it ready.

    Each batch size is one warmup sample built from a real sample row (the repository stage writes it under
    ``<model>/warmup/``), run ``count`` times; null in a variant: no warmup, its first request pays the first-run cost.
    """

    batch_sizes: list[int] = knob([1], ge=1, nonempty=True, unique=True)  # each <= the variant's max_batch_size
    count: int = knob(1, ge=1, le=LIMITS["warmup_count"])


@dataclass
class VariantConfig:
    """The scheduling part of a Triton config: what makes it a latency or throughput config."""

    name: str = "latency"  # the variant it configures (latency | throughput)
    max_batch_size: int = knob(8, ge=0, le=LIMITS["max_batch_size"])
    instance_count: int = knob(1, ge=1, le=LIMITS["instance_count"])
    intra_op_threads: int = knob(2, ge=0, le=LIMITS["threads"])  # 2 cores on our CI machines: 1 instance x 2 threads
    inter_op_threads: int = knob(1, ge=0, le=LIMITS["threads"])
    # Triton's ORT graph level: 1 = extended fusions, 0 = all (+layout, same as absent), -1 = basic, 2 = OFF (not "more").
    graph_optimization_level: int = knob(1, one_of=GRAPH_LEVELS, why="not a Triton ORT level: use 1 (extended), 0 (all, incl. layout), -1 (basic) or 2 (off)")
    # null: no dynamic batching, so a request never waits in a queue for company (the latency variant).
    dynamic_batching: Optional[DynamicBatchingConfig] = None
    # Triton runs these requests (a real sample row, under <model>/warmup/) while it loads the model, so a "ready"
    # server is a warm one; null: no warmup, the first request pays ONNX Runtime's first-run cost.
    warmup: Optional[WarmupConfig] = field(default_factory=WarmupConfig)
    # The text endpoint's variant answers a text it has answered before from Triton's response cache (its config gets
    # response_cache { enable: true }). Inert unless the server runs with --cache-config (e.g. local,size=16777216).
    response_cache: bool = False
    # The text endpoint's instances in this variant (each tokenizes a batch and calls the tensor model); 0: as many as
    # the tensor model's instance_count. The bench measures the other count beside it (bench.text.instances).
    text_instances: int = knob(0, ge=0, le=LIMITS["instance_count"])


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

    version: int = knob(1, ge=1)
    default_variant: VariantName = VariantName.latency  # copied to config.pbtxt: the variant a plain load serves
    trt_model_suffix: str = "_trt"  # a GPU fleet's TensorRT model is <model.name><suffix>


# ---------------------------------------------------------------- parity / bench / release
@dataclass
class OutputToleranceConfig:
    """Per-output override; a null field inherits the artifact kind's value."""

    atol: Optional[float] = knob(None, ge=0)
    rtol: Optional[float] = knob(None, ge=0)
    check_error_stat: Optional[ErrorStat] = None
    error_quantile: Optional[float] = knob(None, gt=0, le=1)


@dataclass
class ToleranceConfig:
    """Tolerance for one artifact kind (fp32, fp16, trt, int8), with optional per-output overrides.

    Polygraphy semantics: an output fails only when its statistic exceeds BOTH atol and rtol (rtol is relative to the
    reference value). NaN/Inf in any artifact output always fails.
    """

    atol: float = knob(1e-4, ge=0)
    rtol: float = knob(1e-3, ge=0)
    check_error_stat: ErrorStat = ErrorStat.max  # elemwise | max | mean | median | quantile (uses error_quantile)
    error_quantile: float = knob(0.99, gt=0, le=1)
    # Per-output overrides (unset fields inherit), e.g. `dvc exp run -S '+parity.fp16.per_output.embedding.atol=5e-2'`.
    per_output: dict[str, OutputToleranceConfig] = field(default_factory=dict)
    # Quality by output kind (model.output_kinds); any kind takes one, e.g. `dvc exp run -S parity.fp16.quality.cosine_min=0.999`.
    quality: QualityConfig = field(default_factory=QualityConfig)


@dataclass
class ParityConfig:
    """Numerical parity gate: every artifact against the reference (the original PyTorch model on CPU, or the given ONNX
    file for model=onnx) on real inputs, with Polygraphy's Comparator."""

    fp32: ToleranceConfig = field(default_factory=ToleranceConfig)
    fp16: ToleranceConfig = field(default_factory=lambda: ToleranceConfig(atol=2e-2, rtol=2e-2))
    # TensorRT engines (strongly typed, FP16 from the fp16 ONNX): the same budget as the FP16 ONNX.
    trt: ToleranceConfig = field(default_factory=lambda: ToleranceConfig(atol=2e-2, rtol=2e-2))
    # INT8 (the ONNX file, and TensorRT engines built from it): elementwise tolerances only catch a broken model (mean
    # error); what decides is quality by output kind, each an "at least" bound (QualityConfig).
    int8: ToleranceConfig = field(
        default_factory=lambda: ToleranceConfig(
            atol=0.1, rtol=0.1, check_error_stat=ErrorStat.mean, quality=QualityConfig(cosine_min=0.98, cosine_mean=0.99, rank_agreement=0.98, top1_agreement=0.98)
        )
    )
    max_samples: int = knob(64, ge=1)  # samples compared (and saved as goldens), at most: of real ones, the rows held out of calibration
    # Batch sizes of the synthetic samples used when model.data is null (e.g. cnn): one synthetic sample per size.
    synthetic_batch_sizes: list[int] = knob([1, 2, 4, 8], ge=1, nonempty=True)


# ---------------------------------------------------------------- root
@dataclass
class PipelineConfig:
    """The whole composed config (params.yaml), its keys in this order."""

    model: ModelConfig = field(default_factory=ModelConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    simplify: SimplifyConfig = field(default_factory=SimplifyConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    int8: Int8Config = field(default_factory=Int8Config)
    # Set by conf/config.yaml to ${pipeline_checked:}: resolving it runs every check of this package while Hydra
    # composes params.yaml (pipeline/core/config/resolver.py), so it reads "passed (...)" in params.yaml. It comes before
    # the fleet so that the checks run before any key derived from it (serving, engine_precision) is resolved: a broken
    # fleet is reported by the checks, not by an interpolation.
    config_check: str = ""
    # The fleet (conf/config.yaml chooses it). The ONNX Runtime model in the repository serves targets[0]'s kind and precision.
    targets: list[str] = field(default_factory=lambda: ["cpu"])
    # Every known target (conf/target/<name>.yaml, each listed in conf/config.yaml); `targets` picks the fleet.
    target_specs: dict[str, TargetConfig] = field(default_factory=dict)
    # Derived in conf/config.yaml from targets[0]; never set. dvc.yaml names the one ONNX file the repository stage
    # serves with it (artifacts/onnx/model.<precision>.onnx), so that stage depends on exactly what it reads.
    serving: ServingConfig = field(default_factory=ServingConfig)
    # Derived in conf/config.yaml from the fleet ({target: precision of the ONNX its engine stage reads}); never set.
    # dvc.yaml runs one engine stage per entry (a GPU target reads model.<precision>.onnx; a cpu target builds nothing).
    engine_precision: dict[str, Precision] = field(default_factory=dict)
    # Derived in conf/config.yaml from the fleet (some target serves int8 or auto, which may choose it); never set. The
    # int8 stage depends on this key alone: it runs its automatic fallback search (up to int8.fallback.max_attempts
    # quantizations) only when true; otherwise it quantizes once, for parity to report the INT8 model's quality.
    int8_in_fleet: bool = False
    # Derived likewise for fp16; never set. Where a precision is not in the fleet, its stages are best effort: a
    # conversion that fails is recorded as "not available: <reason>" (its file says so), and nothing downstream is
    # blocked by it.
    fp16_in_fleet: bool = False
    choose: ChooseConfig = field(default_factory=ChooseConfig)
    variants: VariantsConfig = field(default_factory=VariantsConfig)
    # The throughput variant's scheduling, searched by measurement (pipeline/tune); the repository ships the winner.
    tune: TuneConfig = field(default_factory=TuneConfig)
    repository: RepositoryConfig = field(default_factory=RepositoryConfig)
    parity: ParityConfig = field(default_factory=ParityConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    release: ReleaseConfig = field(default_factory=ReleaseConfig)
