"""Rendering config.pbtxt from Triton's schema: dims, dtypes, variants, and refusals."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.repository import config as triton_config
from pipeline.core.config import DynamicBatchingConfig, TargetConfig, VariantConfig
from pipeline.core.errors import RepositoryError
from pipeline.core.specs import IOSpec

INPUTS = [IOSpec("input_ids", "int64", ("batch", "sequence")), IOSpec("attention_mask", "int64", ("batch", "sequence"))]
OUTPUTS = [IOSpec("embedding", "float32", ("batch", 384))]
CPU = TargetConfig()
GPU = TargetConfig(name="a100", kind="gpu", compute_capability="8.0", precision="fp16")


def test_latency_variant_cpu() -> None:
    v = VariantConfig(max_batch_size=8, instance_count=2, intra_op_threads=1, inter_op_threads=1)
    cfg = triton_config.onnx_model_config("minilm", INPUTS, OUTPUTS, v, CPU, "variants.latency")
    assert cfg.backend == "onnxruntime" and cfg.max_batch_size == 8
    assert [list(i.dims) for i in cfg.input] == [[-1], [-1]]  # batch dropped, sequence dynamic
    assert cfg.input[0].data_type == mc.TYPE_INT64 and cfg.output[0].data_type == mc.TYPE_FP32
    assert list(cfg.output[0].dims) == [384]
    assert cfg.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU and cfg.instance_group[0].count == 2
    assert not cfg.HasField("dynamic_batching")
    assert cfg.optimization.graph.level == 1
    assert cfg.parameters["intra_op_thread_count"].string_value == "1"


def test_throughput_variant_gpu_round_trips() -> None:
    v = VariantConfig(name="throughput", max_batch_size=16, dynamic_batching=DynamicBatchingConfig([4, 8], 500, 32))
    cfg = triton_config.onnx_model_config("minilm", INPUTS, OUTPUTS, v, GPU, "variants.throughput")
    assert cfg.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 500
    assert cfg.dynamic_batching.default_queue_policy.max_queue_size == 32
    text = triton_config.render(cfg, triton_config.describe_variant(v, GPU, "fp16"))
    assert text.startswith("# ") and "2 = OFF" in text and "ORT_ENABLE_EXTENDED" in text
    parsed = mc.ModelConfig()
    from google.protobuf import text_format

    text_format.Parse(text, parsed)
    assert parsed == cfg


def test_unbatched_keeps_all_dims() -> None:
    v = VariantConfig(max_batch_size=0)
    cfg = triton_config.onnx_model_config("m", INPUTS, OUTPUTS, v, CPU, "variants.latency")
    assert list(cfg.input[0].dims) == [-1, -1] and list(cfg.output[0].dims) == [-1, 384]


def test_refusals() -> None:
    # Config values are refused where params.yaml is composed (pipeline/core/config), before any stage runs.
    from pipeline.core.errors import ConfigError
    from pipeline.params import compose

    with pytest.raises(ConfigError, match="variants.latency.max_batch_size=-1"):
        compose(["variants.latency.max_batch_size=-1"])
    with pytest.raises(ConfigError, match="preferred_batch_sizes"):
        compose(["variants.throughput.max_batch_size=4", "variants.throughput.dynamic_batching.preferred_batch_sizes=[8]"])
    # The graph against the config is the renderer's own check: a fixed batch dim cannot be dropped.
    fixed = [IOSpec("x", "float32", (1, 8))]
    with pytest.raises(RepositoryError, match="no dynamic batch axis"):
        triton_config.onnx_model_config("m", fixed, OUTPUTS, VariantConfig(), CPU, "variants.latency")
