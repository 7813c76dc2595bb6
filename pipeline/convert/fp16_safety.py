"""FP16 safety from data, not from the CPU provider: which nodes must stay FP32, and why.

ONNX Runtime's CPU provider runs most FP16 ops in FP32 behind inserted Casts, so an FP16 run on
the CPU hides overflow (measured: an 8.6e4 activation in front of a LayerNormalization gave no
NaN). Instead we:

1. run the FP32 model under ONNX Runtime on the real samples with every intermediate float value
   exposed as a graph output (graph optimizations off, so every value is the graph's own);
2. mark a value unsafe when |x| > fallback.max_abs (overflow) or when more than
   fallback.subnormal_share of its meaningful values (above tiny_ignore and above
   subnormal_relative x the tensor's own max) lie below min_normal (precision loss). Values at or
   above fallback.sentinel_abs are masking sentinels (torch.finfo(float32).min in attention masks):
   the converter clips constants to precision.max_finite_val, so they stay finite; they are counted
   and reported, not blocked (this assumes max_finite_val <= max_abs, which is checked);
   an unsafe value must be produced AND consumed in FP32 (a Cast to FP16 in front of a consumer
   would overflow just the same), so its producer and consumers are blocked;
3. cross-check the converted model with ``onnx.reference.ReferenceEvaluator``, which computes
   FP16 graphs in numpy float16: nodes whose FP16 output is NaN/Inf where FP32 was finite are
   blocked too and the conversion is redone, up to fallback.max_attempts. The evaluator does not
   run every model (e.g. it fails on MiniLM's GatherElements); then the cross-check is recorded
   as unavailable, with the error, and the FP32 ranges alone decide.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from pipeline.core.config import Fp16FallbackConfig, PrecisionConfig
from pipeline.core.errors import PrecisionError

Feed = dict[str, np.ndarray]
Convert = Callable[[onnx.ModelProto, list[str]], onnx.ModelProto]


def name_nodes(model: onnx.ModelProto) -> int:
    """Give every unnamed main-graph node a unique name (node_block_list works by name); returns how many."""
    used = {n.name for n in model.graph.node if n.name}
    count = 0
    for i, n in enumerate(model.graph.node):
        if not n.name:
            name = f"{n.op_type}_{i}"
            while name in used:
                name += "_"
            n.name = name
            used.add(name)
            count += 1
    return count


def _float_values(model: onnx.ModelProto) -> list[str]:
    """Main-graph node outputs whose inferred type is FLOAT (the ones FP16 conversion would change)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, ValueError) as e:  # shape inference can reject odd graphs
        raise PrecisionError(
            "ONNX shape inference failed, so intermediate value types are unknown",
            fix="set precision.fallback.enabled=false and block nodes by hand (precision.node_block_list)",
            details={"error": str(e).splitlines()[0]},
        ) from None
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    return [o for n in model.graph.node for o in n.output if o and types.get(o) == onnx.TensorProto.FLOAT]


def value_ranges(model: onnx.ModelProto, feeds: list[Feed], fb: Fp16FallbackConfig) -> dict[str, dict[str, float]]:
    """Per intermediate float value over all samples: max |x| (finite, sentinels excluded), counts, subnormal share."""
    import onnxruntime as ort

    probe = copy.deepcopy(model)
    values = _float_values(probe)
    present = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(v, onnx.TensorProto.FLOAT, None) for v in values if v not in present)
    opts = ort.SessionOptions()
    # Off: fusions would swallow intermediate values, and we want the graph's own arithmetic.
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(probe.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - ORT raises its own exception types
        raise PrecisionError(
            "ONNX Runtime cannot open the FP32 model with its intermediate values exposed",
            fix="set precision.fallback.enabled=false and block nodes by hand",
            details={"error": str(e).splitlines()[0]},
        ) from None
    acc: dict[str, dict[str, float]] = {v: {"max_abs": 0.0, "nonfinite": 0, "sentinels": 0, "tiny": 0, "meaningful": 0} for v in values}
    for feed in feeds:
        outs = sess.run(values, {k: v for k, v in feed.items() if k in {i.name for i in sess.get_inputs()}})
        for v, x in zip(values, outs):
            a = np.abs(np.asarray(x, dtype=np.float32))
            finite = np.isfinite(a)
            s = acc[v]
            s["nonfinite"] += int(a.size - finite.sum())
            sentinel = finite & (a >= fb.sentinel_abs)
            s["sentinels"] += int(sentinel.sum())
            af = a[finite & ~sentinel]
            if af.size:
                s["max_abs"] = max(s["max_abs"], float(af.max()))
                meaningful = af > max(fb.tiny_ignore, fb.subnormal_relative * float(af.max()))
                s["meaningful"] += int(meaningful.sum())
                s["tiny"] += int((meaningful & (af < fb.min_normal)).sum())
    for s in acc.values():
        s["subnormal_share"] = s["tiny"] / s["meaningful"] if s["meaningful"] else 0.0
    return acc


def unsafe_values(ranges: dict[str, dict[str, float]], fb: Fp16FallbackConfig) -> dict[str, str]:
    """Values that leave FP16's range, with the reason in numbers."""
    out: dict[str, str] = {}
    for v, s in ranges.items():
        if s["max_abs"] > fb.max_abs:
            out[v] = f"max |x| = {s['max_abs']:.4g} > precision.fallback.max_abs = {fb.max_abs:g}"
        elif s["nonfinite"]:
            out[v] = f"{int(s['nonfinite'])} NaN/Inf values already in FP32"
        elif s["subnormal_share"] > fb.subnormal_share:
            out[v] = f"{s['subnormal_share']:.1%} of meaningful values below FP16's smallest normal {fb.min_normal:g} > precision.fallback.subnormal_share = {fb.subnormal_share:g}"
    return out


def nodes_touching(model: onnx.ModelProto, values: dict[str, str], already: set[str], block_ops: set[str]) -> dict[str, dict[str, str]]:
    """Producer and consumers of each unsafe value, minus nodes that are FP32 anyway: {node: {op, value, reason}}."""
    out: dict[str, dict[str, str]] = {}
    for n in model.graph.node:
        if n.name in already or n.op_type in block_ops:
            continue
        for role, names in (("produces", n.output), ("consumes", n.input)):
            hit = next((v for v in names if v in values), None)
            if hit is not None and n.name not in out:
                out[n.name] = {"op": n.op_type, "value": hit, "role": role, "reason": values[hit], "source": "fp32 ranges"}
    return out


def true_fp16_check(converted: onnx.ModelProto, feeds: list[Feed], fp32_nonfinite: set[str]) -> dict[str, Any]:
    """Run the converted model with onnx.reference (numpy float16); find nodes whose output turns NaN/Inf.

    Returns {"status": "ok"|"nonfinite"|"unavailable", "nodes": {node: reason}, "outputs": [...], "seconds": s}.
    """
    from onnx.reference import ReferenceEvaluator

    t0 = time.perf_counter()
    producer = {o: n for n in converted.graph.node for o in n.output}
    graph_outputs = [o.name for o in converted.graph.output]
    bad_nodes: dict[str, str] = {}
    bad_outputs: set[str] = set()
    try:
        ev = ReferenceEvaluator(converted)
        for feed in feeds:
            with np.errstate(all="ignore"):  # overflow is what we are looking for; numpy warns about each one
                results = ev.run(None, feed, intermediate=True)
            if not isinstance(results, dict):  # intermediate=True returns {value name: array}
                raise TypeError(f"onnx.reference returned {type(results).__name__} for intermediate=True, not a dict")
            for name, x in results.items():
                if not isinstance(x, np.ndarray) or x.dtype.kind != "f" or np.isfinite(x).all():
                    continue
                if name in graph_outputs:
                    bad_outputs.add(name)
                n = producer.get(name)
                if n is not None and name not in fp32_nonfinite:
                    bad_nodes.setdefault(n.name, f"true FP16 evaluation (onnx.reference) gives NaN/Inf in '{name}' ({x.dtype})")
    except Exception as e:  # noqa: BLE001 - the reference evaluator raises whatever numpy raises on ops it cannot run
        return {"status": "unavailable", "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}", "seconds": round(time.perf_counter() - t0, 2)}
    status = "nonfinite" if bad_nodes or bad_outputs else "ok"
    return {"status": status, "nodes": bad_nodes, "outputs": sorted(bad_outputs), "seconds": round(time.perf_counter() - t0, 2)}


def _first_nonfinite(model: onnx.ModelProto, nodes: dict[str, str]) -> dict[str, str]:
    """Keep only the earliest nodes in graph order: NaN propagates, so later ones are consequences."""
    order = [n.name for n in model.graph.node if n.name in nodes]
    return {order[0]: nodes[order[0]]} if order else {}


def convert_safely(fp32: onnx.ModelProto, cfg: PrecisionConfig, feeds: list[Feed], convert: Convert, block_ops: set[str]) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """Convert with data-driven FP32 fallback; returns (model, report). ``fp32`` must have named nodes.

    Raises PrecisionError when masking sentinels would not be clipped, when unsafe nodes exist and the fallback is
    disabled, or when the true-FP16 cross-check still finds NaN/Inf after fallback.max_attempts conversions.
    """
    fb = cfg.fallback
    t0 = time.perf_counter()
    _check_sentinels_clipped(cfg)
    ranges = value_ranges(fp32, feeds, fb)
    unsafe = unsafe_values(ranges, fb)
    blocked = nodes_touching(fp32, unsafe, set(cfg.node_block_list), block_ops)
    report = _ranges_report(ranges, unsafe, fb, len(feeds))
    if blocked and not fb.enabled:
        raise PrecisionError(
            f"{len(blocked)} node(s) touch values outside FP16's range and precision.fallback.enabled=false",
            fix="set precision.fallback.enabled=true, or add these nodes to precision.node_block_list",
            details={n: f"{b['op']} {b['role']} '{b['value']}': {b['reason']}" for n, b in list(blocked.items())[:20]},
        )
    fp32_nonfinite = {v for v, s in ranges.items() if s["nonfinite"]}
    check_feeds = sorted(feeds, key=lambda f: sum(a.size for a in f.values()))[: max(fb.reference_check_samples, 0)]
    naive_check: dict[str, Any] | None = None
    if fb.enabled and fb.reference_check and blocked and check_feeds:
        # Confirm the finding: the same conversion without the data-driven blocks, in true FP16.
        naive_check = true_fp16_check(convert(fp32, []), check_feeds, fp32_nonfinite)
    converted, attempts = _convert_until_finite(fp32, fb, convert, blocked, check_feeds, fp32_nonfinite)
    report.update(
        {
            "blocked_nodes": [{"node": n, **b} for n, b in blocked.items()],
            "blocked_count": len(blocked),
            "cross_check_without_fallback": naive_check,
            "attempts": attempts,
            "seconds": round(time.perf_counter() - t0, 2),
        }
    )
    return converted, report


def _check_sentinels_clipped(cfg: PrecisionConfig) -> None:
    """Raise PrecisionError unless the converter clips constants into FP16's range, as masking sentinels need."""
    fb = cfg.fallback
    if cfg.max_finite_val > fb.max_abs and fb.sentinel_abs != float("inf"):
        raise PrecisionError(
            "masking sentinels are only safe when the converter clips constants into FP16 range",
            fix="set precision.max_finite_val <= precision.fallback.max_abs, or precision.fallback.sentinel_abs=.inf",
            details={"precision.max_finite_val": cfg.max_finite_val, "precision.fallback.max_abs": fb.max_abs},
        )


def _ranges_report(ranges: dict[str, dict[str, float]], unsafe: dict[str, str], fb: Fp16FallbackConfig, samples: int) -> dict[str, Any]:
    """The report's part about the FP32 ranges: what was checked, the largest value seen, what is unsafe."""
    worst = max(ranges.items(), key=lambda kv: kv[1]["max_abs"], default=(None, {"max_abs": 0.0}))
    return {
        "enabled": fb.enabled,
        "values_checked": len(ranges),
        "samples": samples,
        "max_abs_seen": {"value": worst[0], "max_abs": worst[1]["max_abs"]},
        "unsafe_values": [{"value": v, "reason": r} for v, r in unsafe.items()],
        "sentinel_values": {v: int(s["sentinels"]) for v, s in ranges.items() if s["sentinels"]},
    }


def _convert_until_finite(
    fp32: onnx.ModelProto, fb: Fp16FallbackConfig, convert: Convert, blocked: dict[str, dict[str, str]], check_feeds: list[Feed], fp32_nonfinite: set[str]
) -> tuple[onnx.ModelProto, list[dict[str, Any]]]:
    """Convert with ``blocked`` kept FP32; while the true-FP16 cross-check finds NaN/Inf, block the earliest node that
    produces it and convert again (``blocked`` grows in place). Returns (the last conversion, the attempts).

    Raises PrecisionError when NaN/Inf is still there after fallback.max_attempts conversions.
    """
    attempts: list[dict[str, Any]] = []
    for attempt in range(1, max(fb.max_attempts, 1) + 1):
        converted = convert(fp32, sorted(blocked))
        check: dict[str, Any] = true_fp16_check(converted, check_feeds, fp32_nonfinite) if fb.reference_check and check_feeds else {"status": "disabled"}
        attempts.append({"attempt": attempt, "blocked": len(blocked), "cross_check": check})
        if check["status"] != "nonfinite" or not fb.enabled:
            break
        new = {n: r for n, r in _first_nonfinite(fp32, check["nodes"]).items() if n not in blocked}
        if not new:
            break
        for n, r in new.items():
            op = next(x.op_type for x in fp32.graph.node if x.name == n)
            blocked[n] = {"op": op, "value": "", "role": "produces", "reason": r, "source": "true fp16 evaluation"}
    if check.get("status") == "nonfinite":
        raise PrecisionError(
            f"the FP16 model still gives NaN/Inf in a true FP16 evaluation after {len(attempts)} conversion attempt(s)",
            fix="raise precision.fallback.max_attempts, or add the nodes to precision.node_block_list / op types to precision.op_block_list",
            details={"nodes": sorted(check.get("nodes", {}))[:10], "outputs": check.get("outputs")},
        )
    return converted, attempts
