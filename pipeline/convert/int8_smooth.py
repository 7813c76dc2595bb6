"""Activation smoothing before INT8 (SmoothQuant, Xiao et al. 2023): move each activation channel's range into the weights.

Static INT8 gives an activation tensor one scale (per tensor), set by its widest channel: a transformer's LayerNorm
outputs and FFN activations carry a few channels far wider than the rest, so the rest are rounded to a few levels. The
weights are quantized per output channel and have room. For ``Y = X @ W`` the product is unchanged by

    X' = X * (1 / s)       W' = diag(s) @ W       s_k = max|X_k| ** alpha / max|W_k,:| ** (1 - alpha)

(k an input channel, ``max|X_k|`` over the calibration rows, ``max|W_k,:|`` over the row of W that multiplies it), which
narrows the wide activation channels and widens the matching weight rows: ``alpha`` says how much of the range moves
(``int8.smoothing``; 0.5 shares it evenly, nearer 1 moves more into the weights). Consumers of one tensor share one
``s`` (the max over their weights), so the division is one Mul node per smoothed tensor, an elementwise op beside the
MatMuls it feeds; other consumers keep reading ``X``. In FP32 the smoothed graph computes the same values up to rounding.

Smoothed: MatMul with a constant second input and Gemm with a constant B (not transA) of the quantized op types, whose
first input is an activation. The scales come from the calibration rows, as the activation ranges do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from pipeline.convert.int8_errors import probe_session
from pipeline.records.int8 import Smoothing as SmoothingRecord

Feed = dict[str, np.ndarray]
_FLOOR, _CLIP = 1e-5, 1e3  # a silent channel (max 0) gets the floor; s is kept within [1/_CLIP, _CLIP]


@dataclass(frozen=True)
class Smoothing:
    """What smoothing did: the smoothed tensors and nodes, and the range of the scales."""

    alpha: float
    tensors: int
    nodes: list[str]
    scale_min: float
    scale_max: float

    def record(self, used: bool, margin: dict[str, float]) -> SmoothingRecord:
        """The report's account of it: whether the smoothed graph was used, and each graph's stop-rule margin."""
        return SmoothingRecord(self.alpha, self.tensors, len(self.nodes), round(self.scale_min, 6), round(self.scale_max, 6), self.nodes, used, margin)


def _weight_axis(n: onnx.NodeProto, weights: set[str]) -> int | None:
    """The axis of the node's constant weight that runs over input channels, or None when the node is not smoothable."""
    if len(n.input) < 2 or n.input[1] not in weights or n.input[0] in weights:
        return None
    attrs = {a.name: a.i for a in n.attribute}
    if n.op_type == "MatMul":
        return 0
    if n.op_type == "Gemm" and not attrs.get("transA", 0):
        return 1 if attrs.get("transB", 0) else 0
    return None


def smooth(model: onnx.ModelProto, feeds: list[Feed], alpha: float, op_types: Iterable[str], skip: Iterable[str] = ()) -> tuple[onnx.ModelProto, Smoothing]:
    """A smoothed copy of ``model`` (module docstring) with scales from ``feeds``; nodes named in ``skip`` are left alone."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    weights = {i.name: i for i in out.graph.initializer}
    ops, skipped = set(op_types), set(skip)
    uses = Counter(i for n in out.graph.node for i in n.input)
    targets: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in out.graph.node:
        axis = _weight_axis(n, set(weights)) if n.op_type in ops and n.name not in skipped else None
        if axis is not None and uses[n.input[1]] == 1:  # a weight shared by two nodes cannot take two scales
            targets.setdefault(n.input[0], []).append((n, axis))
    if not targets:
        return out, Smoothing(alpha, 0, [], 1.0, 1.0)
    names = list(targets)
    sess = probe_session(model, names)
    inputs = {i.name for i in sess.get_inputs()}
    amax: dict[str, np.ndarray] = {}
    for f in feeds:
        for t, v in zip(names, sess.run(names, {k: a for k, a in f.items() if k in inputs})):
            a = np.abs(np.asarray(v, dtype=np.float64)).reshape(-1, v.shape[-1]).max(axis=0)
            amax[t] = np.maximum(amax[t], a) if t in amax else a
    muls: dict[str, onnx.NodeProto] = {}
    smoothed: list[str] = []
    scales: list[np.ndarray] = []
    for t, consumers in targets.items():
        rows = [np.abs(numpy_helper.to_array(weights[n.input[1]])).max(axis=1 - axis) for n, axis in consumers]
        w_max = np.maximum.reduce(rows)
        if w_max.shape != amax[t].shape:  # weight rows that do not match the activation's last axis: leave them
            continue
        s = np.clip(np.maximum(amax[t], _FLOOR) ** alpha / np.maximum(w_max, _FLOOR) ** (1 - alpha), 1 / _CLIP, _CLIP)
        scales.append(s)
        inv = numpy_helper.from_array((1 / s).astype(np.float32), f"{t}_smooth_inv")
        out.graph.initializer.append(inv)
        muls[t] = helper.make_node("Mul", [t, inv.name], [f"{t}_smoothed"], name=f"{t}_Smooth")
        for n, axis in consumers:
            w = numpy_helper.to_array(weights[n.input[1]]).astype(np.float64) * (s[:, None] if axis == 0 else s[None, :])
            weights[n.input[1]].CopyFrom(numpy_helper.from_array(w.astype(np.float32), n.input[1]))
            n.input[0] = f"{t}_smoothed"
            smoothed.append(n.name)
    made = len(muls)
    nodes: list[onnx.NodeProto] = []
    for n in out.graph.node:  # each Mul right before its first consumer keeps the graph topologically sorted
        nodes.extend(muls.pop(i[: -len("_smoothed")]) for i in n.input if i.endswith("_smoothed") and i[: -len("_smoothed")] in muls)
        nodes.append(n)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    if not scales:
        return out, Smoothing(alpha, 0, [], 1.0, 1.0)
    return out, Smoothing(alpha, made, smoothed, float(min(x.min() for x in scales)), float(max(x.max() for x in scales)))
