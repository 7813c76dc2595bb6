"""The keys conf/config.yaml derives from the fleet (``serving``, ``engine_precision``, ``<precision>_in_fleet``).

The resolvers compute them while Hydra composes (resolver.py), the loader fills them on the typed config, and the rules
compare a composed value with what it derives from (rules.check_fleet_precision): one definition for all three.
"""

from __future__ import annotations

from pipeline.core.config.enums import Precision, TargetKind
from pipeline.core.config.schema import PipelineConfig

IN_FLEET = ("fp16", "int8")  # the optional precisions: `<p>_in_fleet` says whether the fleet may serve them


def engine_onnx_precision(kind: str, precision: str) -> str:
    """The precision of the ONNX file a target's engine stage reads: its own for a GPU target; a cpu target builds no
    engine (its stage records `skipped`), so it names the FP32 file, which always exists."""
    return str(precision) if str(kind) == str(TargetKind.gpu) else str(Precision.fp32)


def derived_engine_precision(cfg: PipelineConfig) -> dict[str, str]:
    """``engine_precision`` as conf/config.yaml derives it: {fleet target: precision of the ONNX its engine stage reads}."""
    return {t: engine_onnx_precision(cfg.target_specs[t].kind, cfg.target_specs[t].precision) for t in cfg.targets if t in cfg.target_specs}


def in_fleet(precisions: list[str], precision: str) -> bool:
    """``<precision>_in_fleet`` from the fleet targets' precisions: some target serves it, or auto (which may choose it)."""
    return any(str(p) in (str(precision), str(Precision.auto)) for p in precisions)


def int8_in_fleet(precisions: list[str]) -> bool:
    """``int8_in_fleet`` from the fleet targets' precisions."""
    return in_fleet(precisions, str(Precision.int8))


def derived_in_fleet(cfg: PipelineConfig, precision: str) -> bool:
    """``<precision>_in_fleet`` as conf/config.yaml derives it."""
    return in_fleet([cfg.target_specs[t].precision for t in cfg.targets if t in cfg.target_specs], precision)
