"""The rules of precision choices: INT8 quantization settings, the `auto` rounds, what each target's precision needs.

Called from checks.check_config with the same :class:`Problems`; none raises.
"""

from __future__ import annotations

import math
from typing import Any

from pipeline.core.config.enums import Precision, QuantMode, QuantType, TargetKind
from pipeline.core.config.problems import Problems
from pipeline.core.config.schema import ChooseConfig, Int8Config, PipelineConfig

MIN_SPLIT_ROWS = 3  # rows on each side of the INT8 fallback's search/validation split


def engine_onnx_precision(kind: str, precision: str) -> str:
    """The precision of the ONNX file a target's engine stage reads: its own for a GPU target; a cpu target builds no
    engine (its stage records `skipped`), so it names the FP32 file, which always exists."""
    return str(precision) if str(kind) == str(TargetKind.gpu) else str(Precision.fp32)


def derived_engine_precision(cfg: PipelineConfig) -> dict[str, str]:
    """``engine_precision`` as conf/config.yaml derives it: {fleet target: precision of the ONNX its engine stage reads}."""
    return {t: engine_onnx_precision(cfg.target_specs[t].kind, cfg.target_specs[t].precision) for t in cfg.targets if t in cfg.target_specs}


IN_FLEET = ("fp16", "int8")  # the optional precisions: `<p>_in_fleet` says whether the fleet may serve them


def in_fleet(precisions: list[str], precision: str) -> bool:
    """``<precision>_in_fleet`` from the fleet targets' precisions: some target serves it, or auto (which may choose it)."""
    return any(str(p) in (str(precision), str(Precision.auto)) for p in precisions)


def int8_in_fleet(precisions: list[str]) -> bool:
    """``int8_in_fleet`` from the fleet targets' precisions."""
    return in_fleet(precisions, str(Precision.int8))


def derived_in_fleet(cfg: PipelineConfig, precision: str) -> bool:
    """``<precision>_in_fleet`` as conf/config.yaml derives it."""
    return in_fleet([cfg.target_specs[t].precision for t in cfg.targets if t in cfg.target_specs], precision)


def derived_int8_in_fleet(cfg: PipelineConfig) -> bool:
    """``int8_in_fleet`` as conf/config.yaml derives it."""
    return derived_in_fleet(cfg, str(Precision.int8))


def check_fleet_precision(cfg: PipelineConfig, p: Problems, engine_precision: dict[str, Any] | None, fleet: dict[str, Any] | None = None) -> None:
    """What each target's precision needs: auto only where it can be timed, INT8 from real samples in a form TensorRT
    reads, and the derived engine_precision and <precision>_in_fleet as derived (``fleet``: their raw values by key)."""
    q = cfg.int8
    for t in dict.fromkeys(cfg.targets):
        spec = cfg.target_specs.get(t)
        if spec is None:
            continue
        key = f"target_specs.{t}.precision"
        if spec.precision == Precision.auto and spec.kind == TargetKind.gpu:
            p.add(
                key,
                "auto",
                "auto times each precision in process with ONNX Runtime on the machine that runs the pipeline, which "
                "says nothing about a TensorRT engine on a GPU: set fp16 or int8 (or fp32)",
            )
        if spec.precision == Precision.int8 and cfg.model.data is None:
            p.add(
                key, "int8", "INT8 is calibrated on real samples and model.data is null: set model.data ({_target_: pkg.fn} or {path: samples.json}), or choose another precision"
            )
        if spec.precision == Precision.int8 and spec.kind == TargetKind.gpu:
            if q.mode != QuantMode.static:
                p.add("int8.mode", q.mode, f"target '{t}' builds a TensorRT engine from the INT8 ONNX, which needs Q/DQ nodes: set int8.mode=static")
            if q.activation_type != QuantType.int8 or not q.activation_symmetric:
                p.add(
                    "int8.activation_type",
                    q.activation_type,
                    f"target '{t}' builds a TensorRT engine from the INT8 ONNX: TensorRT reads "
                    "symmetric int8 only, set int8.activation_type=int8 and int8.activation_symmetric=true",
                )
    precision_problem = any(p.has(f"target_specs.{t}.precision") for t in cfg.targets)
    for prec in IN_FLEET:
        got_flag, want_flag = (fleet or {}).get(f"{prec}_in_fleet"), derived_in_fleet(cfg, prec)
        if got_flag is not None and got_flag != want_flag and not precision_problem:
            p.add(f"{prec}_in_fleet", got_flag, f"is derived from targets and target_specs.<target>.precision ({want_flag}): never set it")
    if engine_precision is None:
        return
    want = derived_engine_precision(cfg)
    got = {str(k): str(v) for k, v in engine_precision.items()} if isinstance(engine_precision, dict) else engine_precision
    if got != want and not precision_problem:
        p.add("engine_precision", engine_precision, f"is derived from targets and target_specs.<target>.precision ({want}): never set it")


def check_int8(q: Int8Config, p: Problems) -> None:
    """Quantization settings: ops to quantize, calibration sample counts, the fallback's bounds."""
    if not q.op_types:
        p.add("int8.op_types", [], "must list at least one op type to quantize (default: [MatMul, Gemm, Conv])")
    p.unique("int8.op_types", q.op_types)
    p.unique("int8.nodes_to_exclude", q.nodes_to_exclude)
    if q.smoothing is not None:
        p.number("int8.smoothing", q.smoothing, 0, 1, low_open=True)
    c = q.calibration
    p.number("int8.calibration.percentile", c.percentile, 50, 100, low_open=True)
    p.number("int8.calibration.holdout", c.holdout, 0, 1, low_open=True, high_open=True)
    p.number("int8.calibration.min_holdout", c.min_holdout, 1)
    if p.number("int8.calibration.min_samples", c.min_samples, 1):
        p.number("int8.calibration.max_samples", c.max_samples, c.min_samples)
    p.number("int8.fallback.max_attempts", q.fallback.max_attempts, 1, 50)
    p.number("int8.fallback.min_margin", q.fallback.min_margin, 0, 1, high_open=True)
    if p.number("int8.fallback.validation", q.fallback.validation, 0, 1, low_open=True, high_open=True) and q.fallback.enabled and not p.has("int8.calibration.min_samples"):
        # The rule holds out floor(n * share) of n rows, so the fewest calibration rows allowed bound both parts.
        held = math.floor(c.min_samples * q.fallback.validation)
        if min(held, c.min_samples - held) < MIN_SPLIT_ROWS:
            p.add(
                "int8.fallback.validation",
                q.fallback.validation,
                f"int8.calibration.min_samples={c.min_samples}: the fallback's split leaves, with the fewest rows allowed, "
                f"{c.min_samples - held} search and {held} validation rows; each part needs at least {MIN_SPLIT_ROWS} (rank "
                f"agreement compares the pairs of at least three rows): raise int8.calibration.min_samples or move "
                "int8.fallback.validation toward 0.5",
            )


def check_choose(c: ChooseConfig, p: Problems) -> None:
    """The auto rounds: candidates, batch sizes, round counts, the interval target."""
    if not c.candidates:
        p.add("choose.candidates", [], "must list at least one precision, e.g. [fp32, fp16, int8]")
    elif Precision.auto in c.candidates:
        p.add("choose.candidates", list(c.candidates), "lists auto: the candidates are the precisions auto chooses from (fp32, fp16, int8)")
    p.unique("choose.candidates", [str(x) for x in c.candidates])
    p.each("choose.batch_sizes", c.batch_sizes, 1)
    p.number("choose.burst_ms", c.burst_ms, 0, low_open=True)
    if p.number("choose.min_rounds", c.min_rounds, 2):
        p.number("choose.max_rounds", c.max_rounds, c.min_rounds)
    p.number("choose.target_half_width", c.target_half_width, 0, 1, low_open=True)
    p.number("choose.budget_s", c.budget_s, 0, low_open=True)
