"""fp16 stage: FP16 conversion with onnxconverter-common; unsafe nodes stay FP32; NaN/Inf refused.

Which nodes are unsafe is decided from data (pipeline/convert/fp16_safety.py): FP32 intermediate
ranges on the real samples, cross-checked by a true FP16 evaluation where onnx.reference can run
the model. An FP16 run on ONNX Runtime's CPU provider alone proves nothing (it computes in FP32).
"""

from __future__ import annotations

import copy
import time
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import onnx

from pipeline.convert import fp16_io, fp16_ort, fp16_safety
from pipeline.core import onnx_tools
from pipeline.core.config import ModelConfig, PrecisionConfig
from pipeline.core.errors import OnnxModelError, PrecisionError
from pipeline.core.samples import input_specs, load_samples
from pipeline.core.specs import graph_io


def convert(model: onnx.ModelProto, cfg: PrecisionConfig, extra_nodes: list[str] | None = None) -> tuple[onnx.ModelProto, list[str], list[str]]:
    """Convert to FP16; returns (model, op types blocked, node names blocked)."""
    from onnxconverter_common import float16

    ops = sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(cfg.op_block_list))
    nodes = sorted(set(cfg.node_block_list) | set(extra_nodes or []))
    nodes = sorted({*nodes, *fp16_ort.nested_names(model, nodes)})  # a control-flow node stays FP32 with its bodies
    try:
        with warnings.catch_warnings():
            # One warning per clipped constant (hundreds for MiniLM); clipping is configured and reported.
            warnings.simplefilter("ignore", UserWarning)
            # The converter edits its argument in place; the caller converts the same model more than once.
            converted = float16.convert_float_to_float16(
                copy.deepcopy(model),
                min_positive_val=cfg.min_positive_val,
                max_finite_val=cfg.max_finite_val,
                keep_io_types=cfg.keep_io_types,
                op_block_list=ops,
                node_block_list=nodes,
            )
    except Exception as e:  # noqa: BLE001 - the converter raises ValueError/RuntimeError on unsupported graphs
        raise PrecisionError(
            "FP16 conversion failed",
            fix="add the failing op type to precision.op_block_list",
            details={"error": f"{type(e).__name__}: {e}"},
        ) from None
    fix_float_casts(converted, nodes)
    fp16_ort.cast_outer_inputs(converted, nodes)
    # The converter's value_info can also claim FLOAT16 where a node still computes FLOAT (e.g. a
    # Softmax reading an FP32 graph output that keep_io_types cast back). value_info is optional:
    # drop it and let ONNX Runtime infer types from the (consistent) nodes.
    del converted.graph.value_info[:]
    fp16_io.settle_io_types(converted, fp16_io.promised_types(model, cfg.keep_io_types))
    return converted, ops, nodes


def fix_float_casts(model: onnx.ModelProto, blocked_nodes: list[str]) -> list[str]:
    """Retarget ``Cast(to=FLOAT)`` nodes whose output the converter declared FLOAT16.

    onnxconverter-common rewrites value_info to float16 but leaves Cast's ``to``
    attribute alone, so a Cast from int64 (e.g. an attention mask) feeding FP16
    math makes ONNX Runtime refuse the graph with a type error. Returns the
    names of the Cast nodes changed.
    """
    fp16_values = {vi.name for vi in list(model.graph.value_info) + list(model.graph.output) if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16}
    changed: list[str] = []
    for n in model.graph.node:
        if n.op_type != "Cast" or n.name in blocked_nodes or n.output[0] not in fp16_values:
            continue
        for a in n.attribute:
            if a.name == "to" and a.i == onnx.TensorProto.FLOAT:
                a.i = onnx.TensorProto.FLOAT16
                changed.append(n.name)
    return changed


def check_io_types(sess: Any, fp32: onnx.ModelProto, keep_io_types: bool) -> dict[str, str]:  # noqa: ANN401 - onnxruntime type
    """{name: ONNX Runtime's type} of the FP16 session's inputs and outputs; raise PrecisionError where one breaks the promise."""
    promised = {k: onnx.helper.tensor_dtype_to_np_dtype(v) for k, v in fp16_io.promised_types(fp32, keep_io_types).items()}
    seen = {a.name: a.type for a in [*sess.get_inputs(), *sess.get_outputs()]}
    wrong = {k: f"{seen.get(k)}, promised tensor({_ort_name(v)})" for k, v in promised.items() if seen.get(k) != f"tensor({_ort_name(v)})"}
    if wrong:
        raise PrecisionError(
            "the FP16 model's inputs or outputs do not have the types precision.keep_io_types promises",
            fix="report the graph to us; precision.keep_io_types=false promises FLOAT16 in place of every FLOAT",
            details={"precision.keep_io_types": keep_io_types, **wrong},
        )
    return seen


def _ort_name(dtype: Any) -> str:  # noqa: ANN401 - a numpy dtype
    """ONNX Runtime's type name of a numpy dtype: float32 -> 'float', float16 -> 'float16', int64 -> 'int64'."""
    import numpy as np

    name = np.dtype(dtype).name
    return {"float32": "float", "float64": "double"}.get(name, name)


def kept_fp32(model: onnx.ModelProto, ops: list[str], nodes: list[str], reasons: dict[str, str] | None = None) -> list[dict[str, str]]:
    """Nodes of the source graph that the conversion left in FP32, and why (``reasons``: automatic fallback)."""
    out: list[dict[str, str]] = []
    reasons = reasons or {}
    for n in model.graph.node:
        if n.name in reasons:
            out.append({"node": n.name, "op": n.op_type, "reason": reasons[n.name]})
        elif n.name in nodes:
            out.append({"node": n.name, "op": n.op_type, "reason": "precision.node_block_list"})
        elif n.op_type in ops:
            out.append({"node": n.name, "op": n.op_type, "reason": "op type in the FP32 block list"})
    return out


def run_fp16(src: Path, out: Path, cfg: PrecisionConfig, model: ModelConfig) -> dict[str, Any]:
    """Convert ``src`` into ``out`` (a temporary path) with data-driven FP32 fallback; open a session, refuse NaN/Inf."""
    from onnxconverter_common import float16

    t0 = time.perf_counter()
    fp32 = onnx_tools.load_model(src, "simplified model")
    fp16_safety.name_nodes(fp32)  # node_block_list works by name; unnamed nodes get stable names
    inputs, _ = graph_io(fp32)
    feeds = load_samples(model, input_specs(model, inputs))
    block_ops = set(float16.DEFAULT_OP_BLOCK_LIST) | set(cfg.op_block_list)
    graph_ops = {n.op_type for n in fp32.graph.node}
    if graph_ops and graph_ops <= block_ops | set(cfg.op_block_list):
        # Nothing would run in FP16: the file would be the FP32 model under an FP16 name (and the cross-check on
        # a large graph all in numpy takes many minutes).
        raise PrecisionError(
            f"precision.op_block_list (with the converter's defaults) blocks every op type of the graph: {sorted(graph_ops)}",
            fix="leave some op types to FP16 (remove them from precision.op_block_list), or serve fp32",
        )
    converted, sess, safety, rejected = _safe_and_loadable(fp32, cfg, feeds, block_ops, out)
    auto = {
        b["node"]: f"fallback ({b['source']}): {b['role']} '{b['value']}': {b['reason']}" if b["value"] else f"fallback ({b['source']}): {b['reason']}"
        for b in safety["blocked_nodes"]
    }
    ops = sorted(block_ops)
    auto.update({n: f"fallback (ONNX Runtime refused the FP16 graph): {why}" for n, why in rejected.items()})
    nodes = sorted(set(cfg.node_block_list) | set(auto))
    float16_in = {i.name for i in sess.get_inputs() if i.type == "tensor(float16)"}  # keep_io_types=false promises them
    for i, feed in enumerate(feeds):
        feed = {k: v.astype("float16") if k in float16_in and v.dtype == "float32" else v for k, v in feed.items()}
        if bad := onnx_tools.nonfinite(onnx_tools.run(sess, feed, "FP16 model")):
            raise PrecisionError(
                f"the FP16 model produces NaN/Inf on sample {i}",
                fix="add the overflowing node names to precision.node_block_list or op types to precision.op_block_list",
                details={"outputs": bad},
            )
    io = check_io_types(sess, fp32, cfg.keep_io_types)
    kept = kept_fp32(fp32, ops, nodes, auto)
    return {
        "keep_io_types": cfg.keep_io_types,
        "io": io,
        "io_settled": fp16_io.settled(converted),
        "nodes": len(converted.graph.node),
        "kept_fp32": kept,
        "kept_fp32_count": len(kept),
        "fallback_blocked_count": len(auto),
        "ort_rejected": [{"node": n, "error": why} for n, why in rejected.items()],
        "fallback": safety,
        "size_bytes_fp32": src.stat().st_size,
        "size_bytes_fp16": out.stat().st_size,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def _convert_keeping(cfg: PrecisionConfig, keep: list[str], model: onnx.ModelProto, extra: list[str]) -> onnx.ModelProto:
    """:func:`convert` with ``keep`` (nodes ONNX Runtime refused in FP16) blocked beside the data-driven ``extra``."""
    return convert(model, cfg, [*extra, *keep])[0]


def _safe_and_loadable(
    fp32: onnx.ModelProto, cfg: PrecisionConfig, feeds: list[fp16_safety.Feed], block_ops: set[str], out: Path
) -> tuple[onnx.ModelProto, Any, dict[str, Any], dict[str, str]]:
    """The data-driven fallback, then ONNX Runtime's; returns (model, session, fallback report, {node ORT refused: error}).

    When ORT refuses nodes, the true-FP16 cross-check has evaluated a graph that is not the one shipped (and usually
    could not run it: onnx.reference refuses an ``Add`` of FLOAT16 and FLOAT as ORT does), so the data-driven pass runs
    again with those nodes kept FP32; at most precision.fallback.max_attempts passes.

    Raises:
        PrecisionError: unsafe nodes with the fallback disabled, or NaN/Inf left in the true-FP16 cross-check.
        OnnxModelError: ONNX Runtime still refuses the graph (see :func:`_loadable`).
    """
    rejected: dict[str, str] = {}
    for _ in range(max(cfg.fallback.max_attempts, 1)):
        keep = sorted(rejected)
        converted, safety = fp16_safety.convert_safely(fp32, cfg, feeds, partial(_convert_keeping, cfg, keep), block_ops)
        blocked = {b["node"] for b in safety["blocked_nodes"]}
        converted, sess, new = _loadable(converted, fp32, cfg, out, blocked | set(rejected))
        rejected.update(new)
        if not new or not cfg.fallback.reference_check:  # the cross-check saw the shipped graph, or there is none
            break
    else:  # out of passes with ORT still refusing nodes: the last cross-check ran on an earlier graph; say so
        safety["attempts"][-1]["cross_check"] = {
            "status": "unavailable",
            "error": f"ONNX Runtime refused {sorted(new)} after the last cross-check; raise precision.fallback.max_attempts to check the shipped graph",
        }
    return converted, sess, safety, rejected


def _loadable(converted: onnx.ModelProto, fp32: onnx.ModelProto, cfg: PrecisionConfig, out: Path, blocked: set[str]) -> tuple[onnx.ModelProto, Any, dict[str, str]]:
    """Save ``converted`` to ``out`` and open it; while ONNX Runtime refuses it naming nodes, keep those FP32 and convert
    again (at most precision.fallback.max_attempts more times). Returns (model, session, {node kept: ORT's error}).

    Cast/Resize type errors only show when a session is opened, so one is opened here, not in a later stage.

    Raises:
        OnnxModelError: ONNX Runtime still refuses the graph, names no node of it, or the attempts ran out.
    """
    rejected: dict[str, str] = {}
    for _ in range(max(cfg.fallback.max_attempts, 0) + 1):
        onnx_tools.save_model(converted, out)
        try:
            return converted, onnx_tools.session(out, "FP16 model"), rejected
        except OnnxModelError as e:
            error = str(e.details.get("error", "")).split(" failed:", 1)[-1]  # drop "Load model from <temp file>"
            new = [n for n in fp16_ort.rejected_nodes(error, fp32) if n not in blocked and n not in rejected]
            if not new or not cfg.fallback.enabled:
                raise
            rejected.update(dict.fromkeys(new, error[:300]))
            converted = convert(fp32, cfg, sorted(blocked | set(rejected)))[0]
    onnx_tools.save_model(converted, out)
    return converted, onnx_tools.session(out, "FP16 model"), rejected


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """Size and what stayed FP32 (dvc metrics); the node list and ranges stay in the report."""
    keep = ("nodes", "kept_fp32_count", "fallback_blocked_count", "size_bytes_fp32", "size_bytes_fp16")
    return {k: report[k] for k in keep if k in report}
