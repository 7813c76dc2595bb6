"""Tiny models and shipped-style Triton repositories for the bench and Triton tests.

Models are built with onnx.helper; configs are rendered from Triton's schema
(tritonclient.grpc.model_config_pb2 + text_format), like the repository stage does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from google.protobuf import text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

FEATURES = 16
OUT = 8


def tiny_onnx(path: Path, seed: int = 0) -> Path:
    """x[batch,16] float32 -> y[batch,8] = tanh(x @ W + b): a dynamic-batch MatMul model."""
    rng = np.random.default_rng(seed)
    w = helper.make_tensor("W", TensorProto.FLOAT, [FEATURES, OUT], rng.standard_normal((FEATURES, OUT)).astype(np.float32).ravel())
    b = helper.make_tensor("B", TensorProto.FLOAT, [OUT], rng.standard_normal(OUT).astype(np.float32))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["z"]), helper.make_node("Tanh", ["z"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", FEATURES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", OUT])],
        initializer=[w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def variant_config(name: str, variant: str, max_batch_size: int = 8, batching: bool | None = None, threads: int = 1, level: int = 1) -> mc.ModelConfig:
    """A Triton onnxruntime config for the tiny model, latency or throughput flavoured."""
    cfg = mc.ModelConfig(name=name, backend="onnxruntime", max_batch_size=max_batch_size)
    cfg.input.add(name="x", data_type=mc.TYPE_FP32, dims=[FEATURES])
    cfg.output.add(name="y", data_type=mc.TYPE_FP32, dims=[OUT])
    cfg.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    cfg.parameters["intra_op_thread_count"].string_value = str(threads)
    cfg.parameters["inter_op_thread_count"].string_value = "1"
    cfg.optimization.graph.level = level
    if batching if batching is not None else variant == "throughput":
        cfg.dynamic_batching.preferred_batch_size.extend([4, 8])
        cfg.dynamic_batching.max_queue_delay_microseconds = 500
    return cfg


def shipped_repository(root: Path, name: str = "tiny", configs: dict[str, mc.ModelConfig] | None = None) -> Path:
    """``root/<name>/`` laid out like the repository stage's output; returns the model dir."""
    d = root / name
    tiny_onnx(d / "1" / "model.onnx")
    configs = configs or {v: variant_config(name, v) for v in ("latency", "throughput")}
    (d / "configs").mkdir(parents=True, exist_ok=True)
    for v, cfg in configs.items():
        (d / "configs" / f"{v}.pbtxt").write_text(text_format.MessageToString(cfg))
    first = configs.get("latency") or next(iter(configs.values()))
    (d / "config.pbtxt").write_text(text_format.MessageToString(first))
    return d
