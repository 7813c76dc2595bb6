"""Data-driven FP32 fallback on hand-built ONNX graphs: overflow, precision loss, sentinels, retries."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh
from onnxconverter_common import float16

from pipeline.convert import fp16_safety
from pipeline.core.config import Fp16FallbackConfig, PrecisionConfig
from pipeline.core.errors import PrecisionError
from pipeline.convert.fp16 import convert

RNG = np.random.default_rng(0)
FEEDS = [{"x": RNG.uniform(5, 10, (b, 16)).astype(np.float32)} for b in (1, 4)]


def graph(nodes: list, inits: list, out_dim: int = 32) -> onnx.ModelProto:
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 16])], [h.make_tensor_value_info("y", T.FLOAT, ["batch", out_dim])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def matmul_layernorm(low: float, high: float) -> onnx.ModelProto:
    """x [5,10] @ W [low,high] -> LayerNormalization -> Relu."""
    w = RNG.uniform(low, high, (16, 32)).astype(np.float32)
    return graph(
        [
            h.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
            h.make_node("LayerNormalization", ["mm", "g", "b"], ["ln"], name="ln", axis=-1),
            h.make_node("Relu", ["ln"], ["y"], name="relu"),
        ],
        [nh.from_array(w, "W"), nh.from_array(np.ones(32, np.float32), "g"), nh.from_array(np.zeros(32, np.float32), "b")],
    )


def run(model: onnx.ModelProto, **fallback: object) -> tuple[onnx.ModelProto, dict]:
    cfg = PrecisionConfig(fallback=Fp16FallbackConfig(**fallback))
    fp16_safety.name_nodes(model)
    ops = set(float16.DEFAULT_OP_BLOCK_LIST)
    return fp16_safety.convert_safely(model, cfg, FEEDS, lambda m, extra: convert(m, cfg, extra)[0], ops)


def test_overflow_blocks_producer_and_consumer() -> None:
    _, rep = run(matmul_layernorm(500, 800))  # |mm| ~ 1e5 > 65504
    assert {b["node"]: b["role"] for b in rep["blocked_nodes"]} == {"mm": "produces", "ln": "consumes"}
    assert rep["cross_check_without_fallback"]["status"] == "nonfinite"
    assert rep["attempts"] == [{"attempt": 1, "blocked": 2, "cross_check": rep["attempts"][0]["cross_check"]}]
    assert rep["attempts"][0]["cross_check"]["status"] == "ok"


def test_cross_check_finds_what_ranges_miss_and_retries() -> None:
    # |mm| ~ 4e4 is inside FP16's range, but LayerNorm squares it: the true FP16 evaluation overflows.
    model, rep = run(matmul_layernorm(200, 400))
    assert rep["unsafe_values"] == [] and len(rep["attempts"]) == 2
    assert rep["attempts"][0]["cross_check"]["status"] == "nonfinite" and rep["attempts"][1]["cross_check"]["status"] == "ok"
    assert [(b["node"], b["source"]) for b in rep["blocked_nodes"]] == [("ln", "true fp16 evaluation")]
    assert next(n for n in model.graph.node if n.name == "ln").output[0] != "ln"  # converter wrapped it in Casts: FP32


def test_attempts_are_bounded() -> None:
    with pytest.raises(PrecisionError, match="after 1 conversion attempt"):
        run(matmul_layernorm(200, 400), max_attempts=1)


def test_disabled_fallback_refuses_unsafe_nodes() -> None:
    with pytest.raises(PrecisionError) as e:
        run(matmul_layernorm(500, 800), enabled=False)
    assert set(e.value.details) == {"mm", "ln"} and "max |x|" in e.value.details["mm"]


def test_tiny_values_block_but_softmax_tails_and_sentinels_do_not() -> None:
    tiny = np.full((1, 32), 1e-6, np.float32)
    model = graph(
        [
            h.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
            h.make_node("Mul", ["mm", "tiny"], ["small"], name="shrink"),  # every value ~1e-5: below FP16's smallest normal
            h.make_node("Mul", ["small", "big"], ["back"], name="grow"),
            h.make_node("Softmax", ["back"], ["sm"], name="softmax", axis=-1),  # tails below 6e-5, but negligible
            h.make_node("Add", ["sm", "mask"], ["masked"], name="mask_add"),  # float32-min sentinel, as in HF masks
            h.make_node("Softmax", ["masked"], ["y"], name="softmax2", axis=-1),
        ],
        [
            nh.from_array(RNG.uniform(0.05, 0.1, (16, 32)).astype(np.float32), "W"),
            nh.from_array(tiny, "tiny"),
            nh.from_array(np.full((1, 32), 1e6, np.float32), "big"),
            nh.from_array(np.where(np.arange(32) < 16, 0.0, np.finfo(np.float32).min).astype(np.float32)[None], "mask"),
        ],
    )
    _, rep = run(model)
    assert {b["node"] for b in rep["blocked_nodes"]} == {"shrink", "grow"}
    assert "below FP16's smallest normal" in rep["blocked_nodes"][0]["reason"]
    assert rep["sentinel_values"] == {"masked": 16 * 5}
