"""Closed sets of config values, as Enums the schema declares.

Each is a ``str`` Enum whose ``str()`` is its value, so existing code that compares with plain strings
(``cfg.model.source == "onnx"``), formats it (``f"{precision}"``) or writes JSON keeps working.
OmegaConf matches YAML strings to members by name, so every member's name equals its value.
"""

from __future__ import annotations

from enum import Enum


class ConfigEnum(str, Enum):
    """Base class: prints as its value (``onnx``, not ``Source.onnx``)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        """f"{x:>8}" pads the value, on every Python version."""
        return format(str(self.value), format_spec)

    @classmethod
    def choices(cls) -> list[str]:
        """The valid values, in declaration order."""
        return [m.value for m in cls]


class Source(ConfigEnum):
    """Where the model comes from: a torch factory, or an existing ONNX file."""

    factory = "factory"
    onnx = "onnx"


class TargetKind(ConfigEnum):
    cpu = "cpu"
    gpu = "gpu"


class Precision(ConfigEnum):
    """Which ONNX file a target serves (its TensorRT engine is built from the same one); auto: the fastest that passed
    parity, timed in process on the machine that runs the pipeline (cpu targets only)."""

    fp32 = "fp32"
    fp16 = "fp16"
    int8 = "int8"
    auto = "auto"


class QuantMode(ConfigEnum):
    """static: QDQ with calibrated activation ranges (ONNX Runtime and TensorRT read it); dynamic: activation ranges
    computed per request (ONNX Runtime only, no calibration)."""

    static = "static"
    dynamic = "dynamic"


class CalibrationMethod(ConfigEnum):
    """How static quantization turns the calibration samples' activations into ranges (ONNX Runtime's calibrators)."""

    minmax = "minmax"
    entropy = "entropy"
    percentile = "percentile"


class QuantType(ConfigEnum):
    """8-bit activation type: int8 (TensorRT needs it, symmetric) or uint8 (ONNX Runtime CPU only)."""

    int8 = "int8"
    uint8 = "uint8"


class TokenField(ConfigEnum):
    """What the text endpoint feeds a graph input: the token ids, the attention mask, or the token type ids."""

    ids = "ids"
    attention_mask = "attention_mask"
    type_ids = "type_ids"


class OutputKind(ConfigEnum):
    """What an output means, so the parity gate can judge it by what matters: embedding (cosine to the reference and
    rank agreement of pairwise similarities) or classifier (top-1 agreement)."""

    embedding = "embedding"
    classifier = "classifier"


class HardwareCompatibility(ConfigEnum):
    """TensorRT hardware-compatibility level (ampere_plus: one engine for sm80 and newer, can be slower)."""

    none = "none"
    ampere_plus = "ampere_plus"


class VariantName(ConfigEnum):
    """The two config variants every repository ships."""

    latency = "latency"
    throughput = "throughput"


class BenchServer(ConfigEnum):
    """embedded: a tritonserver the bench starts itself; external: one already running at bench.url."""

    embedded = "embedded"
    external = "external"


class EmbeddedBackend(ConfigEnum):
    """The embedded server's stand-in for Triton's onnxruntime backend."""

    native = "native"  # pipeline_ort: ORT inside tritonserver (C++)
    python = "python"  # a python-backend model: ORT in the stub process


class BenchPeer(ConfigEnum):
    """Another server the bench measures beside Triton, on the same model, inputs and load (bench.peers)."""

    torchserve = "torchserve"


class BenchProfile(ConfigEnum):
    """default: every point measured inside interleaved rounds that stop once the headline intervals are narrow;
    full: also the whole sweep (bench.sweep.concurrency, each variant in its own server) and every round up to the max."""

    default = "default"
    full = "full"


class Protocol(ConfigEnum):
    """perf_analyzer -i."""

    http = "http"
    grpc = "grpc"


class InputShapes(ConfigEnum):
    """uniform: the largest group of same-shape sample rows; as_sampled: every row, mixed shapes."""

    uniform = "uniform"
    as_sampled = "as_sampled"


class DType(ConfigEnum):
    """numpy dtype names that have a Triton data type (model_config.proto DataType)."""

    bool = "bool"
    uint8 = "uint8"
    uint16 = "uint16"
    uint32 = "uint32"
    uint64 = "uint64"
    int8 = "int8"
    int16 = "int16"
    int32 = "int32"
    int64 = "int64"
    float16 = "float16"
    float32 = "float32"
    float64 = "float64"


class CanaryTraffic(ConfigEnum):
    """release canary traffic: replay = the samples to both versions; real = a perf_analyzer load, a share to the candidate."""

    replay = "replay"
    real = "real"


class ErrorStat(ConfigEnum):
    """The error statistic Polygraphy's SimpleCompareFunc checks against atol/rtol."""

    elemwise = "elemwise"  # every element: fails where |diff| > atol AND |diff|/|ref| > rtol
    max = "max"
    mean = "mean"
    median = "median"
    quantile = "quantile"  # the error_quantile-th quantile of the errors


# Triton's ORT optimization.graph.level values: -1 basic, 1 extended, 2 = OFF (not "more"), 0 = all.
# An int check, not an Enum: the level is rendered into config.pbtxt and headers as a plain number.
GRAPH_LEVELS = (-1, 0, 1, 2)


class TuneObjective(ConfigEnum):
    """What the tune stage maximizes, in Model Analyzer's names: perf_throughput (infer/s) or perf_latency_p99 (lower is
    better); tune.constraints bound the rest."""

    perf_throughput = "perf_throughput"
    perf_latency_p99 = "perf_latency_p99"
