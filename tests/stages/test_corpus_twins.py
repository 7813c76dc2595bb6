"""The corpus twins (tests/helpers/corpus.py) still break a naive pipeline the way their real model did.

A twin that stops reproducing its failure would let tests/stages/test_corpus.py pass without testing anything.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxconverter_common import float16

from pipeline.convert import fp16
from pipeline.core.config import PrecisionConfig
from pipeline.core.specs import graph_io
from tests.helpers import corpus


@pytest.fixture
def jax_cls(tmp_path: Path) -> onnx.ModelProto:
    return onnx.load(str(corpus.jax_int32_onnx(tmp_path / "jax_cls.onnx")))


def test_jax_twin_fails_a_naive_fp16_conversion_with_mixed_types(jax_cls: onnx.ModelProto) -> None:
    ort.InferenceSession(jax_cls.SerializeToString(), providers=["CPUExecutionProvider"])  # the FP32 twin itself loads
    naive = float16.convert_float_to_float16(jax_cls, keep_io_types=True)
    with pytest.raises(Exception, match=r"Type parameter \(T\) of Optype \(Add\) bound to different types \(tensor\(float16\) and tensor\(float\)"):
        ort.InferenceSession(naive.SerializeToString(), providers=["CPUExecutionProvider"])


def test_jax_twin_ids_are_int32_and_ranged_by_their_gather_table(jax_cls: onnx.ModelProto) -> None:
    inputs, _ = graph_io(jax_cls)
    assert [(i.name, i.dtype, i.dims, i.index_range) for i in inputs] == [("ids", "int32", ("batch", "sequence"), 64)]


def test_jax_twin_ort_fallback_keeps_the_add_fp32_and_the_cross_check_sees_that_graph(jax_cls: onnx.ModelProto, tmp_path: Path) -> None:
    from onnxconverter_common.float16 import DEFAULT_OP_BLOCK_LIST

    feeds = [{"ids": np.arange(b * 8, dtype=np.int32).reshape(b, 8) % 64} for b in (1, 2)]
    _, sess, safety, rejected = fp16._safe_and_loadable(jax_cls, PrecisionConfig(), feeds, set(DEFAULT_OP_BLOCK_LIST), tmp_path / "m.fp16.onnx")
    assert list(rejected) == ["add_bias"] and "bound to different types" in rejected["add_bias"]
    # The true-FP16 cross-check ran on the graph that loads, not on the one ORT (and onnx.reference) refused.
    assert safety["attempts"][-1]["cross_check"]["status"] == "ok", safety["attempts"]
    assert sess.get_inputs()[0].type == "tensor(int32)"
