"""Structured-config schemas of the INT8 path and the precision choice: quantization, quality thresholds, `auto`.

Kept apart from schema.py (which imports them into the root config) so each module stays small; the same rules hold:
types and defaults here, closed sets in enums.py, ranges and cross-field rules in precision_checks.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from pipeline.core.config.enums import CalibrationMethod, Precision, QuantMode, QuantType


@dataclass
class CalibrationConfig:
    """The calibration set (real samples from model.data) and how static quantization reads ranges from it."""

    method: CalibrationMethod = CalibrationMethod.minmax
    percentile: float = 99.999  # method=percentile: the share of |activation| values the range keeps
    # The share of model.data's rows held out of calibration (and of the fallback's search) for the parity gate to judge
    # INT8 on: every 1/holdout-th row, evenly spread over the hook's order (pipeline/core/holdout.py).
    holdout: float = 0.5
    min_samples: int = 8  # calibration rows (batch entries) after the split; fewer is refused
    min_holdout: int = 8  # held-out rows the gate judges on; fewer is refused
    max_samples: int = 512  # calibration rows kept, in the hook's order


@dataclass
class Int8FallbackConfig:
    """Automatic FP32 fallback (pipeline/convert/int8_search.py): the nodes that introduce the most error on the search
    rows stay FP32, as many as a bisection finds that pass parity.int8.quality on the validation rows too, in at most
    max_attempts quantizations."""

    enabled: bool = True
    max_attempts: int = 8  # quantizations in all, the first (nothing kept FP32) included; bisection needs ~log2(nodes)
    # The share of the calibration rows kept out of the search to validate its stop (the held-out rule again: every
    # 1/validation-th row); the search ranks nodes on the others.
    validation: float = 0.5
    # The stop rule asks every metric to leave this share of its error budget (1 - threshold) on the calibration rows:
    # the gate's worst row comes from more rows than the search saw, so passing there by a hair fails at the gate.
    min_margin: float = 0.75


@dataclass
class Int8Config:
    """INT8 quantization with ONNX Runtime's tooling (pipeline/convert/int8.py)."""

    mode: QuantMode = QuantMode.static
    per_channel: bool = True  # one scale per output channel of each weight (per-tensor breaks outlier-heavy layers)
    reduce_range: bool = False  # 7-bit weights: only for CPUs without VNNI
    # uint8 with a zero point: ONNX Runtime's CPU kernels (U8S8) and the closest fit for one-sided activations;
    # TensorRT reads only symmetric int8 (a GPU int8 target requires activation_type=int8, activation_symmetric=true).
    activation_type: QuantType = QuantType.uint8
    activation_symmetric: bool = False
    # false: a quantized op's output stays float (ONNX Runtime runs e.g. MatMulIntegerToFloat; TensorRT fuses the
    # next Q); true: its output is quantized too, one more rounding, per tensor (an outlier channel crushes the rest).
    quantize_outputs: bool = False
    op_types: list[str] = field(default_factory=lambda: ["MatMul", "Gemm", "Conv"])  # op types to quantize
    # SmoothQuant's alpha (pipeline/convert/int8_smooth.py): how much of each activation channel's range moves into the
    # weights of the MatMul/Gemm it feeds before quantizing; null: no smoothing.
    smoothing: Optional[float] = 0.8
    nodes_to_exclude: list[str] = field(default_factory=list)  # node names kept FP32
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    fallback: Int8FallbackConfig = field(default_factory=Int8FallbackConfig)


@dataclass
class QualityConfig:
    """Quality thresholds by output kind (model.output_kinds); null = not checked. Each is an "at least" bound."""

    cosine_min: Optional[float] = None  # embedding: the worst row's cosine similarity to the reference
    cosine_mean: Optional[float] = None  # embedding: the mean over rows
    rank_agreement: Optional[float] = None  # embedding: Spearman correlation of the pairwise similarities over rows
    top1_agreement: Optional[float] = None  # classifier: share of rows whose argmax matches the reference


@dataclass
class ChooseConfig:
    """``precision: auto``: every candidate that passed parity timed in process with the served settings, in paired
    rounds (pipeline/choose/), each round one burst per candidate; the bench's median-of-rounds estimate and interval."""

    candidates: list[Precision] = field(default_factory=lambda: [Precision.fp32, Precision.fp16, Precision.int8])
    batch_sizes: list[int] = field(default_factory=lambda: [1, 4, 8, 16])  # best-batch throughput: the best of these
    burst_ms: float = 250.0  # each candidate's burst in a round
    min_rounds: int = 5
    max_rounds: int = 15
    target_half_width: float = 0.03  # stop once every ratio's 90% interval is within +-3%
    budget_s: float = 90.0  # no new round after this long, once min_rounds ran
