"""Per-layer error of a quantized model: how much error each quantized node adds, measured on the calibration samples.

Quantizing a node rounds its weights, its activation inputs and (in QDQ form) its output. Every one of these shows
in the value its consumers read: the output after its own Q/DQ pair. Both graphs keep the float model's tensor names
(the QDQ quantizer leaves each float tensor in place and feeds consumers from DequantizeLinear copies; dynamic
quantization replaces a node by integer ops that end in the same output name), so each can be compared with the
FP32 model's value:

    error(t)       = mean over channels c of ||t_int8[c] - t_fp32[c]|| / ||t_fp32[c]||   (per sample, then averaged)
    introduced(N)  = error(N's output, as its consumers read it) - max(error(N's float activation inputs))

the error that appears at the node, net of the error that reached it. Error is measured per channel (the last axis;
axis 1 for Conv), not over the whole tensor: one outlier channel carries most of a tensor's norm, so a whole-tensor
error hides every other channel being rounded to nothing, which a later normalisation or rescale brings back. The
nodes that introduce the most are the ones the automatic fallback keeps FP32 first (pipeline/convert/int8.py).
Both models run with graph optimizations off, so every compared value is the graph's own (fusions would swallow them).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import onnx

Feed = dict[str, np.ndarray]
_CHANNEL_AXIS = {"Conv": 1, "ConvTranspose": 1}


@dataclass(frozen=True)
class NodeError:
    """One quantized node: the error at its output, the largest at its inputs, and the difference it introduces."""

    node: str
    op: str
    output: str
    output_error: float
    input_error: float

    @property
    def introduced(self) -> float:
        return self.output_error - self.input_error


def quantized_nodes(fp32: onnx.ModelProto, quant: onnx.ModelProto, op_types: Iterable[str]) -> list[onnx.NodeProto]:
    """Nodes of the FP32 graph (of ``op_types``) that the quantized graph runs quantized.

    Static QDQ keeps the node and feeds it from DequantizeLinear; dynamic quantization replaces it (its name is
    gone, its output is produced by the integer ops).
    """
    ops = set(op_types)
    producer = {o: n for n in quant.graph.node for o in n.output}
    by_name = {n.name: n for n in quant.graph.node}
    out = []
    for n in fp32.graph.node:
        if n.op_type not in ops:
            continue
        q = by_name.get(n.name)
        if q is None:
            if n.output and n.output[0] in producer:
                out.append(n)
        elif any(producer.get(i) is not None and producer[i].op_type == "DequantizeLinear" for i in q.input):
            out.append(n)
    return out


def seen_by_consumers(quant: onnx.ModelProto, name: str) -> str:
    """The quantized graph's tensor that consumers of float tensor ``name`` read: its DequantizeLinear copy when it
    was quantized (Q -> DQ right after it), else ``name`` itself."""
    for q in quant.graph.node:
        if q.op_type == "QuantizeLinear" and q.input[0] == name:
            for d in quant.graph.node:
                if d.op_type == "DequantizeLinear" and d.input[0] == q.output[0]:
                    return d.output[0]
    return name


def probe_session(model: onnx.ModelProto, values: list[str]):  # noqa: ANN201 - onnxruntime type
    """A session that also returns the tensors ``values`` (graph optimizations off: every value is the graph's own)."""
    import onnxruntime as ort

    probe = copy.deepcopy(model)
    present = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(v, onnx.TensorProto.FLOAT, None) for v in dict.fromkeys(values) if v not in present)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(probe.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])


def _float_values(model: onnx.ModelProto) -> set[str]:
    """Node outputs whose inferred type is FLOAT (only those are compared: indices and shapes are not quantized)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, ValueError):  # an odd graph: compare what the outputs declare
        inferred = model
    infos = list(inferred.graph.value_info) + list(inferred.graph.output)
    return {vi.name for vi in infos if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}


def channel_error(ref: np.ndarray, got: np.ndarray, axis: int) -> float | None:
    """Mean over channels (``axis``) of the channel's relative L2 error; channels that are all zero are left out."""
    if ref.ndim == 0 or ref.shape != got.shape:
        return None
    r = np.moveaxis(np.asarray(ref, dtype=np.float64), axis, 0).reshape(ref.shape[axis], -1)
    g = np.moveaxis(np.asarray(got, dtype=np.float64), axis, 0).reshape(ref.shape[axis], -1)
    norm = np.linalg.norm(r, axis=1)
    keep = norm > 0
    return float(np.mean(np.linalg.norm(g - r, axis=1)[keep] / norm[keep])) if keep.any() else None


def relative_errors(fp32: onnx.ModelProto, quant: onnx.ModelProto, feeds: list[Feed], pairs: dict[str, tuple[str, str, int]]) -> dict[str, float]:
    """:func:`channel_error` per entry of ``pairs`` ({key: (FP32 tensor, quantized-graph tensor, channel axis)}), averaged
    over samples; a graph input is 0 (both get the same); tensors missing from either graph, or not float, are left out."""
    graph_inputs = {i.name for i in fp32.graph.input}
    in_quant = {o for n in quant.graph.node for o in n.output}
    floats = _float_values(fp32)
    out = {k: 0.0 for k, (f, _, _) in pairs.items() if f in graph_inputs}
    todo = {k: p for k, p in pairs.items() if p[0] in floats and p[1] in in_quant and p[0] not in graph_inputs}
    if not todo:
        return out
    f_names, q_names = list(dict.fromkeys(p[0] for p in todo.values())), list(dict.fromkeys(p[1] for p in todo.values()))
    f_sess, q_sess = probe_session(fp32, f_names), probe_session(quant, q_names)
    inputs = {i.name for i in f_sess.get_inputs()}
    sums: dict[str, list[float]] = {k: [] for k in todo}
    for feed in feeds:
        feed = {k: v for k, v in feed.items() if k in inputs}
        f_vals = dict(zip(f_names, f_sess.run(f_names, feed)))
        q_vals = dict(zip(q_names, q_sess.run(q_names, feed)))
        for k, (f, q, axis) in todo.items():
            e = channel_error(f_vals[f], q_vals[q], axis if f_vals[f].ndim > 1 else 0)
            if e is not None:
                sums[k].append(e)
    return out | {k: float(np.mean(v)) for k, v in sums.items() if v}


def node_errors(fp32: onnx.ModelProto, quant: onnx.ModelProto, feeds: list[Feed], nodes: list[onnx.NodeProto]) -> list[NodeError]:
    """The error each of ``nodes`` (quantized FP32-graph nodes) introduces, largest first."""
    weights = {i.name for i in fp32.graph.initializer}
    pairs: dict[str, tuple[str, str, int]] = {}
    for n in nodes:
        axis = _CHANNEL_AXIS.get(n.op_type, -1)
        pairs[f"out:{n.name}"] = (n.output[0], seen_by_consumers(quant, n.output[0]), axis)
        for i in n.input:
            if i and i not in weights:
                pairs[f"in:{n.name}:{i}"] = (i, i, axis)
    errors = relative_errors(fp32, quant, feeds, pairs)
    out = []
    for n in nodes:
        if f"out:{n.name}" not in errors:
            continue
        inputs = [errors[k] for k in errors if k.startswith(f"in:{n.name}:")]
        out.append(NodeError(n.name, n.op_type, n.output[0], errors[f"out:{n.name}"], max(inputs, default=0.0)))
    return sorted(out, key=lambda e: e.introduced, reverse=True)
