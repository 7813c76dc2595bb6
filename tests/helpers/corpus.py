"""Tiny structural twins of real-world models that broke the journey (issue 28), built in the test, no downloads.

Each is a few nodes in the shape of its family, so a stage meets the same graph features a real model has.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh


def save_graph(graph: onnx.GraphProto, path: Path, opset: int = 17, ir: int = 8, external: bool = False) -> Path:
    """Check the model and write it (ir 8 by default: what this ONNX Runtime reads); ``external``: every weight in
    ``<path>.data`` beside it."""
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=ir)
    onnx.checker.check_model(m)
    path.parent.mkdir(parents=True, exist_ok=True)
    if external:
        onnx.save(m, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=0)
    else:
        onnx.save(m, str(path))
    return path


def if_onnx(path: Path) -> Path:
    """A voice-activity-detector twin: ``x [N, 4]`` and a rank-0 int64 ``sr`` whose value picks an ``If`` branch.

    The then-branch reads an outer-scope initializer (``W``), which is what breaks FP16 conversion of subgraphs:
    the converter casts ``W`` to FP16 while the branch still receives FP32 ``x``.
    """
    w = nh.from_array(np.full((4, 4), 0.5, np.float32), "W")
    b = nh.from_array(np.full((4,), 0.25, np.float32), "b")
    zero = nh.from_array(np.array(8000.0, np.float32), "threshold")
    then_g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["t_out"])], "then", [], [h.make_tensor_value_info("t_out", T.FLOAT, ["N", 4])])
    else_g = h.make_graph([h.make_node("Add", ["x", "b"], ["e_out"])], "else", [], [h.make_tensor_value_info("e_out", T.FLOAT, ["N", 4])])
    nodes = [
        h.make_node("Cast", ["sr"], ["srf"], to=T.FLOAT),
        h.make_node("Greater", ["srf", "threshold"], ["cond"]),
        h.make_node("If", ["cond"], ["z"], then_branch=then_g, else_branch=else_g),
        h.make_node("Tanh", ["z"], ["y"]),
    ]
    g = h.make_graph(
        nodes,
        "vad_twin",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 4]), h.make_tensor_value_info("sr", T.INT64, [])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])],
        [w, b, zero],
    )
    return save_graph(g, path)


def conv_opset12_onnx(path: Path) -> Path:
    """An OCR-network twin exported at opset 12 (as PaddlePaddle's exporter writes them): Conv + Relu on ``x [N, 3, H, W]``."""
    rng = np.random.default_rng(0)
    w = nh.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "W")
    g = h.make_graph(
        [h.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1], name="conv"), h.make_node("Relu", ["c"], ["y"], name="relu")],
        "ocr_twin",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 16, 16])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 8, 16, 16])],
        [w],
    )
    return save_graph(g, path, opset=12, ir=7)


def stride32_onnx(path: Path) -> Path:
    """A detector twin with dynamic H and W that only runs on multiples of 32 (a stride-32 feature map added back
    to the input, as an FPN does): ``x [N, 3, H, W]`` -> ``y``; at 16 x 16 ONNX Runtime fails to broadcast."""
    scales = nh.from_array(np.array([1, 1, 32, 32], np.float32), "scales")
    nodes = [
        h.make_node("MaxPool", ["x"], ["p"], kernel_shape=[32, 32], strides=[32, 32], name="stride32"),
        h.make_node("Resize", ["p", "", "scales"], ["u"], mode="nearest", name="up32"),
        h.make_node("Add", ["x", "u"], ["y"], name="fpn_add"),
    ]
    g = h.make_graph(nodes, "detector_twin", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, "H", "W"])], [h.make_tensor_value_info("y", T.FLOAT, ["N", 3, "H", "W"])], [scales])
    return save_graph(g, path)


def bert_like_onnx(path: Path, vocab: int = 64, hidden: int = 8, labels: int = 3) -> Path:
    """A three-input BERT-style classifier twin: ``input_ids`` and ``token_type_ids`` index embedding tables (Gather),
    ``attention_mask`` weighs the mean; ``logits [N, labels]``. Random integers beyond a table's rows break it."""
    rng = np.random.default_rng(0)
    words = nh.from_array(rng.standard_normal((vocab, hidden)).astype(np.float32), "word_embeddings")
    types = nh.from_array(rng.standard_normal((2, hidden)).astype(np.float32), "token_type_embeddings")
    head = nh.from_array(rng.standard_normal((hidden, labels)).astype(np.float32), "classifier")
    axes = nh.from_array(np.array([-1], np.int64), "last")
    nodes = [
        h.make_node("Gather", ["word_embeddings", "input_ids"], ["w"], name="words"),
        h.make_node("Gather", ["token_type_embeddings", "token_type_ids"], ["t"], name="types"),
        h.make_node("Add", ["w", "t"], ["e"], name="embed"),
        h.make_node("Cast", ["attention_mask"], ["m"], to=T.FLOAT, name="mask_f"),
        h.make_node("Unsqueeze", ["m", "last"], ["m3"], name="mask_3d"),
        h.make_node("Mul", ["e", "m3"], ["me"], name="masked"),
        h.make_node("ReduceMean", ["me"], ["pooled"], axes=[1], keepdims=0, name="pool"),
        h.make_node("MatMul", ["pooled", "classifier"], ["logits"], name="head"),
    ]
    ins = [h.make_tensor_value_info(n, T.INT64, ["batch", "sequence"]) for n in ("input_ids", "token_type_ids", "attention_mask")]
    g = h.make_graph(nodes, "bert_twin", ins, [h.make_tensor_value_info("logits", T.FLOAT, ["batch", labels])], [words, types, head, axes])
    return save_graph(g, path)


def fixed_batch_onnx(path: Path) -> Path:
    """A model exported with a fixed batch of 4 (no dynamic axis at all): ``x [4, 8]`` -> ``y [4, 8]``."""
    w = nh.from_array(np.eye(8, dtype=np.float32) * 0.5, "W")
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "W"], ["z"], name="mm"), h.make_node("Relu", ["z"], ["y"], name="relu")],
        "fixed_twin",
        [h.make_tensor_value_info("x", T.FLOAT, [4, 8])],
        [h.make_tensor_value_info("y", T.FLOAT, [4, 8])],
        [w],
    )
    return save_graph(g, path)


def vad_state_onnx(path: Path) -> Path:
    """The voice detector twin with its recurrent state, batch on axis 1 as Silero VAD has it: ``x [N, 4]``, rank-0
    ``sr``, ``state [2, N, 4]`` -> ``y [N, 4]``, ``stateN [2, N, 4]``; the ``If`` on ``sr`` reads an outer weight."""
    w = nh.from_array(np.full((4, 4), 0.5, np.float32), "W")
    b = nh.from_array(np.full((4,), 0.25, np.float32), "b")
    threshold = nh.from_array(np.array(8000.0, np.float32), "threshold")
    zero = nh.from_array(np.array([0], np.int64), "axis0")
    then_g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["t_out"])], "then", [], [h.make_tensor_value_info("t_out", T.FLOAT, ["N", 4])])
    else_g = h.make_graph([h.make_node("Add", ["x", "b"], ["e_out"])], "else", [], [h.make_tensor_value_info("e_out", T.FLOAT, ["N", 4])])
    nodes = [
        h.make_node("Cast", ["sr"], ["srf"], to=T.FLOAT, name="sr_f"),
        h.make_node("Greater", ["srf", "threshold"], ["cond"], name="wideband"),
        h.make_node("If", ["cond"], ["z"], then_branch=then_g, else_branch=else_g, name="branch"),
        h.make_node("Unsqueeze", ["z", "axis0"], ["z3"], name="z3"),
        h.make_node("Add", ["state", "z3"], ["s"], name="carry"),
        h.make_node("Tanh", ["s"], ["stateN"], name="state_out"),
        h.make_node("ReduceMean", ["stateN"], ["y"], axes=[0], keepdims=0, name="y"),
    ]
    ins = [h.make_tensor_value_info("x", T.FLOAT, ["N", 4]), h.make_tensor_value_info("sr", T.INT64, []), h.make_tensor_value_info("state", T.FLOAT, [2, "N", 4])]
    outs = [h.make_tensor_value_info("y", T.FLOAT, ["N", 4]), h.make_tensor_value_info("stateN", T.FLOAT, [2, "N", 4])]
    return save_graph(h.make_graph(nodes, "vad_state_twin", ins, outs, [w, b, threshold, zero]), path)


def jax_int32_onnx(path: Path, vocab: int = 64, hidden: int = 8, labels: int = 4) -> Path:
    """A JAX-exported content-type classifier twin (jax2onnx/tf2onnx style): ``ids [batch, sequence]`` int32 index an
    embedding table (Gather); a ``Constant`` with a ``value_float`` attribute is added to it; the mean over the sequence
    divides by the length taken from ``Shape`` and ``Cast(to=FLOAT)``; ``logits [batch, labels]``.

    The float16 converter rewrites tensor attributes but not ``value_float``, so after a naive conversion the ``Add``
    reads a FLOAT16 embedding and a FLOAT constant, and ONNX Runtime refuses the graph ("bound to different types").
    """
    rng = np.random.default_rng(0)
    table = nh.from_array(rng.standard_normal((vocab, hidden)).astype(np.float32), "embedding")
    head = nh.from_array(rng.standard_normal((hidden, labels)).astype(np.float32), "dense")
    seq_axis = nh.from_array(np.array(1, np.int64), "seq_axis")
    nodes = [
        h.make_node("Gather", ["embedding", "ids"], ["e"], name="embed"),
        h.make_node("Constant", [], ["bias"], value_float=0.5, name="bias"),
        h.make_node("Add", ["e", "bias"], ["x"], name="add_bias"),
        h.make_node("Unsqueeze", ["seq_axis", "axes0"], ["seq_axis_1d"], name="seq_axis_1d"),
        h.make_node("ReduceSum", ["x", "seq_axis_1d"], ["total"], keepdims=0, name="sum"),
        # Shape of x, not of ids: ORT then meets the Add first and names it (the Cast alone fix_float_casts repairs).
        h.make_node("Shape", ["x"], ["shape"], name="shape"),
        h.make_node("Gather", ["shape", "seq_axis"], ["length"], name="length"),
        h.make_node("Cast", ["length"], ["length_f"], to=T.FLOAT, name="length_f"),
        h.make_node("Div", ["total", "length_f"], ["mean"], name="mean"),
        h.make_node("MatMul", ["mean", "dense"], ["logits"], name="dense"),
    ]
    axes0 = nh.from_array(np.array([0], np.int64), "axes0")
    g = h.make_graph(
        nodes,
        "jax_cls_twin",
        [h.make_tensor_value_info("ids", T.INT32, ["batch", "sequence"])],
        [h.make_tensor_value_info("logits", T.FLOAT, ["batch", labels])],
        [table, head, seq_axis, axes0],
    )
    return save_graph(g, path)


def external_data_onnx(path: Path) -> Path:
    """A model saved as ``model.onnx`` plus ``model.onnx.data`` (how every model over 2 GB ships, and what some
    exporters write at any size): an MLP ``x [N, 16]`` -> ``y [N, 4]`` whose weights live only in the data file."""
    rng = np.random.default_rng(0)
    w1 = nh.from_array(rng.standard_normal((16, 32)).astype(np.float32), "W1")
    w2 = nh.from_array(rng.standard_normal((32, 4)).astype(np.float32), "W2")
    nodes = [h.make_node("MatMul", ["x", "W1"], ["a"], name="fc1"), h.make_node("Relu", ["a"], ["r"], name="relu"), h.make_node("MatMul", ["r", "W2"], ["y"], name="fc2")]
    g = h.make_graph(nodes, "external_twin", [h.make_tensor_value_info("x", T.FLOAT, ["N", 16])], [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])], [w1, w2])
    return save_graph(g, path, external=True)
