"""Render Triton model configs from Triton's own schema (model_config.proto), never from string templates.

``tritonclient.grpc.model_config_pb2`` is the generated code of Triton's
model_config.proto; ``google.protobuf.text_format`` writes the same text format
``config.pbtxt`` uses. Only the header comments are added as text.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.config import TargetConfig, VariantConfig
from pipeline.core.errors import PipelineError, RepositoryError
from pipeline.core.specs import IOSpec

# Triton's onnxruntime backend (src/onnxruntime.cc, ModelState constructor) maps optimization.graph.level:
# -1 -> ORT_ENABLE_BASIC, 1 -> ORT_ENABLE_EXTENDED, 2 -> ORT_DISABLE_ALL, anything else (0 or absent)
# -> ORT_ENABLE_ALL. So 2 is not "more" optimization but none at all.
# (pipeline/serving/python_standin.py repeats this table: it runs inside the python-backend stub,
# which cannot import this package.)
ORT_LEVEL_NAME = {1: "ORT_ENABLE_EXTENDED", -1: "ORT_ENABLE_BASIC", 0: "ORT_ENABLE_ALL", 2: "ORT_DISABLE_ALL"}
_LEVEL_NOTE = {
    1: "basic + extended fusions: attention, GELU, LayerNorm, ...",
    -1: "constant folding, redundant node removal",
    0: "extended + layout optimizations; also what an absent level gives",
    2: "graph optimizations OFF",
}
GRAPH_LEVEL_MEANING = {level: f"{name} ({_LEVEL_NOTE[level]})" for level, name in ORT_LEVEL_NAME.items()}


def io_dims(spec: IOSpec, batched: bool, key: str) -> list[int]:
    """Triton dims: dynamic -> -1; the batch axis dropped when the model is batched (``key`` names max_batch_size)."""
    dims = [d if isinstance(d, int) else -1 for d in spec.dims]
    if batched:
        if not dims or isinstance(spec.dims[0], int):
            raise RepositoryError(
                f"'{spec.name}' has no dynamic batch axis (dims {list(spec.dims)}) but {key} > 0",
                fix=f"export with a dynamic batch axis (export.batch_axis) or set {key}=0",
            )
        dims = dims[1:]
    return dims or [1]


def base_config(name: str, inputs: list[IOSpec], outputs: list[IOSpec], variant: VariantConfig, variant_key: str, kind: str) -> mc.ModelConfig:
    """Name, I/O, max_batch_size, instance group and dynamic batching: what every backend shares."""
    key = f"{variant_key}.max_batch_size"
    if variant.max_batch_size < 0:
        raise RepositoryError(f"{key}={variant.max_batch_size} must be >= 0", fix=f"set {key} to 0 (no batching) or a positive size")
    batched = variant.max_batch_size > 0
    cfg = mc.ModelConfig(name=name, max_batch_size=variant.max_batch_size)
    for s in inputs:
        cfg.input.add(name=s.name, data_type=mc.DataType.Value(s.triton_dtype()), dims=io_dims(s, batched, key))
    for s in outputs:
        cfg.output.add(name=s.name, data_type=mc.DataType.Value(s.triton_dtype()), dims=io_dims(s, batched, key))
    instance_kind = mc.ModelInstanceGroup.KIND_GPU if kind == "gpu" else mc.ModelInstanceGroup.KIND_CPU
    cfg.instance_group.add(count=variant.instance_count, kind=instance_kind)
    db = variant.dynamic_batching
    if db is not None:
        if not batched:
            raise RepositoryError(f"{variant_key}.dynamic_batching needs max_batch_size > 0", fix=f"set {key} > 0 or {variant_key}.dynamic_batching=null")
        too_big = [b for b in db.preferred_batch_sizes if b > variant.max_batch_size or b < 1]
        if too_big:
            raise RepositoryError(
                f"{variant_key}.dynamic_batching.preferred_batch_sizes {too_big} outside 1..max_batch_size={variant.max_batch_size}",
                fix=f"lower the preferred sizes or raise {key}",
            )
        cfg.dynamic_batching.preferred_batch_size.extend(db.preferred_batch_sizes)
        cfg.dynamic_batching.max_queue_delay_microseconds = db.max_queue_delay_us
        cfg.dynamic_batching.preserve_ordering = db.preserve_ordering
        if db.max_queue_size > 0:
            cfg.dynamic_batching.default_queue_policy.max_queue_size = db.max_queue_size
    return cfg


def onnx_model_config(name: str, inputs: list[IOSpec], outputs: list[IOSpec], variant: VariantConfig, target: TargetConfig, variant_key: str) -> mc.ModelConfig:
    """The ONNX Runtime model config for one variant on one target."""
    cfg = base_config(name, inputs, outputs, variant, variant_key, target.kind)
    cfg.backend = "onnxruntime"
    cfg.default_model_filename = "model.onnx"
    cfg.optimization.graph.level = variant.graph_optimization_level
    # Thread counts are explicit so instances x threads never silently oversubscribes the cores.
    cfg.parameters["intra_op_thread_count"].string_value = str(variant.intra_op_threads)
    cfg.parameters["inter_op_thread_count"].string_value = str(variant.inter_op_threads)
    return cfg


def header(lines: list[str]) -> str:
    """Comment block placed before the rendered config."""
    return "".join(f"# {ln}\n" if ln else "#\n" for ln in lines)


def describe_variant(variant: VariantConfig, target: TargetConfig, precision: str) -> list[str]:
    """Why this config looks the way it does, for the header comment."""
    level = variant.graph_optimization_level
    lines = [
        f"Variant '{variant.name}' for target '{target.name}' ({target.kind}, {precision} ONNX). Generated by the repository stage (pipeline.stages.repository).",
        f"optimization.graph.level: {level} = {GRAPH_LEVEL_MEANING.get(level, '?')}.",
        "Triton's ONNX Runtime levels: -1 basic, 1 extended, 2 = OFF (not 'more'), 0/absent = all incl. layout.",
        f"instance_group count {variant.instance_count} x intra_op_thread_count {variant.intra_op_threads} = "
        f"{variant.instance_count * variant.intra_op_threads} threads for inference.",
    ]
    db = variant.dynamic_batching
    if db is None:
        lines.append("No dynamic_batching: each request runs at once, it never waits in a queue for others.")
    else:
        lines.append(
            f"dynamic_batching: a request may wait up to {db.max_queue_delay_us} us for a batch of {list(db.preferred_batch_sizes)}:"
        )
        lines.append("do not measure latency against this variant at low load; that measures the queue, not the model.")
    return lines


def render(cfg: mc.ModelConfig, comment: list[str] | None = None) -> str:
    """config.pbtxt text: optional comment header + protobuf text format."""
    return (header(comment) if comment else "") + text_format.MessageToString(cfg)


def parse_text(text: str, where: str, error: type[PipelineError] = RepositoryError, fix: str = "re-run the repository stage: dvc repro repository") -> mc.ModelConfig:
    """Parse config.pbtxt text with Triton's schema (comments are ignored); ``error`` names ``where`` and ``fix``."""
    try:
        return text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as e:
        raise error(f"cannot parse Triton config {where}", fix=fix, details={"error": e}) from None


def parse(path: str | Path, error: type[PipelineError] = RepositoryError, fix: str = "re-run the repository stage: dvc repro repository") -> mc.ModelConfig:
    """Read and parse a config.pbtxt; an unreadable or invalid file raises ``error`` naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"cannot read Triton config {path}", fix=fix, details={"error": e}) from None
    return parse_text(text, str(path), error, fix)
