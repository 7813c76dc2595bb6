"""int8 stage: INT8 with ONNX Runtime's quantization tooling, calibrated on real samples, with automatic FP32 fallback.

``int8.mode=static`` (the default for every built-in model) writes a QDQ model: weights quantized per output channel,
activations quantized with ranges calibrated on the calibration set (MinMax, Entropy or Percentile). ONNX Runtime's
CPU provider fuses the Q/DQ pairs into integer kernels. Activations default to uint8 with a zero point, which that
provider runs fastest and which fits one-sided activations best (measured on MiniLM: symmetric int8 activations were
both slower there and less exact). TensorRT builds an engine from the same file when its activations are symmetric
int8 (explicit quantization reads nothing else), so a fleet with a GPU int8 target sets that and gets one file for
both. ``dynamic`` computes activation ranges per request instead (ONNX Runtime only).

Only the op types in ``int8.op_types`` are quantized (MatMul, Gemm, Conv: the weight-heavy ops, where integer
kernels pay); an op type ONNX Runtime has no quantizer for in the chosen mode is left FP32 and reported.

The automatic fallback: the quantized model runs on the calibration samples beside the FP32 model and is judged by
the same quality thresholds as the parity gate (``parity.int8.quality``, by ``model.output_kinds``). While it fails,
the ``int8.fallback.nodes_per_attempt`` nodes that introduce the most error (pipeline/convert/int8_errors.py) stay
FP32 and the model is quantized again, at most ``int8.fallback.max_attempts`` times; the ranges are calibrated once.
Which nodes: the ``int8.fallback.trials`` nodes that introduce the most error are each tried alone (re-quantized and
judged), and those that raise the gate's worst margin most are kept FP32: per-layer error says where to look, the
gate says what helps (on a transformer the error is spread thin, and the largest local error is not always what
costs the worst row most). A model that still fails is written anyway: the parity gate judges it on the rows held
out of calibration (pipeline/core/holdout.py), which neither the ranges nor the search have seen, and refuses to ship
it. The search runs only when some target of the fleet serves int8 or auto (``int8_in_fleet``, derived from the fleet):
it costs up to ``max_attempts`` quantizations, which a fleet that never serves INT8 should not pay for; otherwise the
file is quantized once, for parity to report its quality, and the report says why the search did not run.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import onnx

from pipeline.convert import calibration, int8_errors
from pipeline.convert.fp16_safety import name_nodes
from pipeline.core import onnx_tools, quality
from pipeline.core.config import Int8Config, OutputKind, PipelineConfig, QualityConfig, QuantMode
from pipeline.core.errors import QuantizationError
from pipeline.core.holdout import rows_of
from pipeline.core.specs import graph_io

Feed = dict[str, Any]


class _Reader:
    """ONNX Runtime's CalibrationDataReader protocol over the calibration samples."""

    def __init__(self, feeds: list[Feed]) -> None:
        self._feeds, self._i, self._end = feeds, 0, len(feeds)

    def get_next(self) -> Feed | None:
        if self._i >= self._end:
            return None
        self._i += 1
        return self._feeds[self._i - 1]

    def rewind(self) -> None:
        self._i = 0

    def set_range(self, start_index: int, end_index: int) -> None:
        """Serve only samples [start, end): ONNX Runtime calls it to calibrate in strides."""
        self._i, self._end = start_index, min(end_index, len(self._feeds))

    def __len__(self) -> int:
        return len(self._feeds)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """ONNX Runtime's quantizer logs through the root logger (a pre-processing hint per call); the report says what matters."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def supported_ops(mode: QuantMode) -> set[str]:
    """Op types ONNX Runtime's quantizer has a rule for in ``mode``."""
    from onnxruntime.quantization.registry import IntegerOpsRegistry, QDQRegistry, QLinearOpsRegistry

    return set(IntegerOpsRegistry) if mode == QuantMode.dynamic else set(QDQRegistry) | set(QLinearOpsRegistry)


def plan_ops(cfg: Int8Config) -> tuple[list[str], dict[str, str]]:
    """(op types to quantize, {op type: why it is left FP32}) for the configured ``int8.op_types``."""
    ok = supported_ops(cfg.mode)
    skipped = {op: f"ONNX Runtime has no {cfg.mode} quantizer for {op}: left FP32" for op in cfg.op_types if op not in ok}
    return [op for op in cfg.op_types if op in ok], skipped


def quantize(src: Path, out: Path, cfg: Int8Config, feeds: list[Feed], ops: list[str], exclude: list[str], cache: Path) -> None:
    """Quantize ``src`` into ``out`` with ONNX Runtime; static ranges come from ``feeds`` once, then from ``cache``.

    Raises QuantizationError with the quantizer's message.
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static

    try:
        with _quiet():
            if cfg.mode == QuantMode.dynamic:
                quantize_dynamic(str(src), str(out), op_types_to_quantize=ops, per_channel=cfg.per_channel, reduce_range=cfg.reduce_range,
                                 weight_type=QuantType.QInt8, nodes_to_exclude=exclude)  # fmt: skip
                return
            method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy, "percentile": CalibrationMethod.Percentile}
            extra: dict[str, Any] = {"ActivationSymmetric": cfg.activation_symmetric, "WeightSymmetric": True}
            if not cfg.quantize_outputs:
                extra["OpTypesToExcludeOutputQuantization"] = ops
            if cfg.calibration.method == "percentile":
                extra["CalibPercentile"] = cfg.calibration.percentile
            if cfg.calibration.method != "minmax":
                # The histogram calibrators stack every sample's activations into one array, which fails for samples of
                # different shapes (sequences padded per batch); one sample per stride, merged histogram by histogram.
                extra["CalibStridedMinMax"] = 1
            quantize_static(
                str(src), str(out), _Reader(feeds), quant_format=QuantFormat.QDQ, op_types_to_quantize=ops, per_channel=cfg.per_channel,
                reduce_range=cfg.reduce_range, activation_type=QuantType.QInt8 if cfg.activation_type == "int8" else QuantType.QUInt8,
                weight_type=QuantType.QInt8, nodes_to_exclude=exclude, calibrate_method=method[str(cfg.calibration.method)],
                extra_options=extra, calibration_cache_path=str(cache),
            )
    except Exception as e:  # noqa: BLE001 - the quantizer raises ValueError/RuntimeError/ORT errors on graphs it cannot handle
        raise QuantizationError(
            "ONNX Runtime could not quantize the model", details={"mode": str(cfg.mode), "op types": ops, "error": f"{type(e).__name__}: {e}"[:400]},
            fix="leave the failing node FP32 (int8.nodes_to_exclude) or its op type out of int8.op_types; int8.mode=dynamic needs no calibration",
        ) from None


def judge(fp32: Path, int8: Path, feeds: list[Feed], kinds: Mapping[str, OutputKind], limits: QualityConfig) -> dict[str, quality.QualityVerdict]:
    """Each judged output's quality verdict: the INT8 model against the FP32 model on ``feeds`` (default session options)."""
    ref_sess, q_sess = onnx_tools.session(fp32, "FP32 model"), onnx_tools.session(int8, "INT8 model")
    ref = [onnx_tools.run(ref_sess, f, "FP32 model") for f in feeds]
    got = [onnx_tools.run(q_sess, f, "INT8 model") for f in feeds]
    return {o: quality.judge(k, quality.measure(k, [r[o] for r in ref], [g[o] for g in got]), limits) for o, k in kinds.items() if o in ref[0]}


def judge_with(source: Path, out: Path, cfg: Int8Config, feeds: list[Feed], ops: list[str], exclude: list[str], cache: Path,
               kinds: Mapping[str, OutputKind], limits: QualityConfig) -> dict[str, quality.QualityVerdict]:  # fmt: skip
    """Quantize with ``exclude`` kept FP32 (ranges from ``cache``) and judge the result."""
    quantize(source, out, cfg, feeds, ops, sorted(exclude), cache)
    return judge(source, out, feeds, kinds, limits)


def margin(verdicts: Mapping[str, quality.QualityVerdict], limits: QualityConfig) -> float:
    """The gate's worst margin: min over judged outputs and set thresholds of (value - threshold); NaN counts as -1."""
    gaps = [(v.metrics.get(m) if v.metrics.get(m) is not None and v.metrics.get(m) == v.metrics.get(m) else -1.0) - t
            for v in verdicts.values() for m, t in v.thresholds.items()]
    return round(min(gaps, default=0.0), 6)


def node_fates(fp32: onnx.ModelProto, quant: onnx.ModelProto, cfg: Int8Config, skipped_ops: Mapping[str, str],
               excluded: Mapping[str, str]) -> list[dict[str, str]]:  # fmt: skip
    """Every node of a quantizable (or requested) op type: quantized, or FP32 and why."""
    done = {n.name for n in int8_errors.quantized_nodes(fp32, quant, cfg.op_types)}
    out = []
    for n in fp32.graph.node:
        if n.op_type not in cfg.op_types:
            continue
        if n.name in excluded:
            # QDQ quantizes a tensor once for all its consumers: a node kept FP32 beside a quantized one reads the
            # dequantized copy of their shared input, though its own weights and output stay float.
            shared = " (its activation input stays quantized for another consumer)" if n.name in done else ""
            out.append({"node": n.name, "op": n.op_type, "status": "fp32", "reason": excluded[n.name] + shared})
        elif n.name in done:
            out.append({"node": n.name, "op": n.op_type, "status": "int8"})
        else:
            reason = skipped_ops.get(n.op_type) or "ONNX Runtime's quantizer left it FP32 (e.g. no constant weight or no calibrated range)"
            out.append({"node": n.name, "op": n.op_type, "status": "fp32", "reason": reason})
    return out


def run_int8(src: Path, calibration_path: Path, out: Path, cfg: PipelineConfig) -> dict[str, Any]:
    """Quantize ``src`` into ``out`` (a temporary path) with the fallback loop; return the report.

    Raises QuantizationError: unreadable calibration set, samples that do not fit the graph, a quantizer failure.
    """
    q = cfg.int8
    t0 = time.perf_counter()
    fp32 = onnx_tools.load_model(src, "simplified FP32 model")
    feeds = calibration.load(calibration_path)
    calibration.check_feeds(feeds, graph_io(fp32)[0])
    ops, skipped_ops = plan_ops(q)
    if not ops:
        raise QuantizationError("no op type of int8.op_types can be quantized by ONNX Runtime", details=skipped_ops,
                                fix="list op types ONNX Runtime quantizes (MatMul, Gemm, Conv, ...) in int8.op_types")
    kinds = {o: OutputKind(k) for o, k in cfg.model.output_kinds.items()}
    limits = cfg.parity.int8.quality
    excluded: dict[str, str] = dict.fromkeys(q.nodes_to_exclude, "int8.nodes_to_exclude")
    blocked: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="int8-", dir=out.parent) as tmp:
        cache, source = Path(tmp) / "ranges.json", src
        if name_nodes(fp32):  # nodes_to_exclude works by name, as FP16's block list does: unnamed nodes get stable names
            source = Path(tmp) / "model.fp32.named.onnx"
            onnx_tools.save_model(fp32, source)
        search = q.fallback.enabled and cfg.int8_in_fleet
        for attempt in range(1, q.fallback.max_attempts + 1):
            quantize(source, out, q, feeds, ops, sorted(excluded), cache)
            verdicts = judge(source, out, feeds, kinds, limits)
            passed = all(v.passed for v in verdicts.values())
            attempts.append({"attempt": attempt, "kept_fp32": len(excluded), "passed": passed,
                             "quality": {o: v.to_json() for o, v in verdicts.items()}})  # fmt: skip
            if passed or not search or not verdicts or attempt == q.fallback.max_attempts:
                break
            quant = onnx_tools.load_model(out, "INT8 model")
            ranked = [e for e in int8_errors.node_errors(fp32, quant, feeds, int8_errors.quantized_nodes(fp32, quant, ops)) if e.node not in excluded]
            if not ranked:
                break
            trial = Path(tmp) / "trial.onnx"
            margins = {e.node: margin(judge_with(source, trial, q, feeds, ops, [*excluded, e.node], cache, kinds, limits), limits)
                       for e in ranked[: q.fallback.trials]}  # fmt: skip
            order = sorted(ranked[: max(q.fallback.trials, q.fallback.nodes_per_attempt)], key=lambda e: -margins.get(e.node, -1e9))
            for e in order[: q.fallback.nodes_per_attempt]:
                tried = f"; alone it brings the gate's worst margin to {margins[e.node]:+.4f}" if e.node in margins else ""
                why = (f"fallback (attempt {attempt}): introduces relative error {e.introduced:.3g} at '{e.output}' "
                       f"(input {e.input_error:.3g} -> output {e.output_error:.3g}; #{ranked.index(e) + 1} of {len(ranked)} quantized nodes){tried}")  # fmt: skip
                excluded[e.node] = why
                blocked.append({"node": e.node, "op": e.op, "attempt": attempt, "introduced": round(e.introduced, 6), "margin_alone": margins.get(e.node),
                                "output_error": round(e.output_error, 6), "input_error": round(e.input_error, 6), "reason": why})  # fmt: skip
        sess = onnx_tools.session(out, "INT8 model")  # a graph ONNX Runtime cannot open fails here, not in a later stage
        for i, feed in enumerate(feeds[:2]):
            if bad := onnx_tools.nonfinite(onnx_tools.run(sess, feed, "INT8 model")):
                raise QuantizationError(f"the INT8 model produces NaN/Inf on calibration sample {i}", details={"outputs": bad},
                                        fix="keep the offending nodes FP32 (int8.nodes_to_exclude)")
        quant = onnx_tools.load_model(out, "INT8 model")
    fates = node_fates(fp32, quant, q, skipped_ops, excluded)
    final = attempts[-1]
    searched = len(attempts) > 1 or bool(blocked)
    return {
        "mode": str(q.mode), "format": "QDQ" if q.mode == QuantMode.static else "dynamic (integer ops)",
        "per_channel": q.per_channel, "reduce_range": q.reduce_range, "quantize_outputs": q.quantize_outputs,
        "activations": {"type": str(q.activation_type), "symmetric": q.activation_symmetric} if q.mode == QuantMode.static else "dynamic",
        "calibration": {**calibration.record(calibration_path), "rows": sum(rows_of(f) for f in feeds), "samples": len(feeds),
                        "method": str(q.calibration.method) if q.mode == QuantMode.static else "none (dynamic)",
                        **({"percentile": q.calibration.percentile} if q.calibration.method == "percentile" else {})},
        "op_types": ops, "op_types_left_fp32": skipped_ops,
        "quantized_count": sum(f["status"] == "int8" for f in fates), "kept_fp32_count": sum(f["status"] == "fp32" for f in fates),
        "nodes": fates,
        "fallback": {"enabled": q.fallback.enabled, "max_attempts": q.fallback.max_attempts, "nodes_per_attempt": q.fallback.nodes_per_attempt,
                     "judged_outputs": {o: str(k) for o, k in kinds.items()}, "thresholds": "parity.int8.quality",
                     "judged_on": "the calibration rows (never the rows parity holds out)", "in_fleet": cfg.int8_in_fleet,
                     "searched": searched, "not_searched": None if searched else not_searched(cfg, final["passed"], bool(kinds)),
                     "blocked_nodes": blocked, "blocked_count": len(blocked), "attempts": attempts},
        "passed_on_calibration": final["passed"] if kinds else None,
        "quality_on_calibration": final["quality"],
        "size_bytes_fp32": src.stat().st_size,
        "size_bytes_int8": out.stat().st_size,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def not_searched(cfg: PipelineConfig, passed: bool, judged: bool) -> str:
    """Why the fallback's search did not run, as the report says it."""
    if not judged:
        return "no output is judged (model.output_kinds is empty): nothing to search for"
    if passed:
        return "the first quantization passes parity.int8.quality on the calibration rows"
    if not cfg.int8.fallback.enabled:
        return "int8.fallback.enabled=false"
    if not cfg.int8_in_fleet:
        return ("no target of the fleet serves int8 or auto (int8_in_fleet=false, derived from targets and "
                "target_specs.<target>.precision): quantized once, for parity to report its quality; a fleet that serves "
                "it runs the search (up to int8.fallback.max_attempts quantizations)")
    if cfg.int8.fallback.max_attempts == 1:
        return "int8.fallback.max_attempts=1"
    return "no quantized node left to keep FP32"


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """Size, node counts, attempts and the calibration-set quality (dvc metrics)."""
    out = {k: report[k] for k in ("quantized_count", "kept_fp32_count", "size_bytes_fp32", "size_bytes_int8", "passed_on_calibration")}
    out["fallback_blocked_count"] = report["fallback"]["blocked_count"]
    out["attempts"] = len(report["fallback"]["attempts"])
    out["fallback_searched"] = report["fallback"]["searched"]
    out["quality_on_calibration"] = {o: v["metrics"] for o, v in report["quality_on_calibration"].items()}
    return out
