"""Structured-config schemas of precision: the FP16 conversion, INT8 quantization, quality thresholds, the `auto` choice.

Types, defaults and ranges here (:func:`~pipeline.core.config.knobs.knob`); closed sets in enums.py; rules across fields
(the INT8 split, what a target's precision needs) in rules.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from pipeline.core.config.enums import CalibrationMethod, Precision, QuantMode, QuantType
from pipeline.core.config.knobs import knob

FP16_MAX = 65504.0  # FP16's largest finite value


# ---------------------------------------------------------------- fp16
@dataclass
class Fp16FallbackConfig:
    """Data-driven FP32 fallback for nodes whose values leave FP16's range (pipeline/convert/fp16_safety.py)."""

    enabled: bool = True
    max_attempts: int = knob(3, ge=1)
    # |x| above this is an overflow risk (65504 is FP16's largest finite value).
    max_abs: float = knob(FP16_MAX, gt=0)
    # Values whose magnitude is below FP16's smallest normal but above `tiny_ignore` lose precision.
    min_normal: float = knob(6.104e-05, gt=0)
    tiny_ignore: float = knob(1e-30, ge=0)
    # Block a node when this share of an output's meaningful values is below min_normal (subnormal)...
    subnormal_share: float = knob(0.01, ge=0, le=1)
    # ...counting only values above this fraction of the tensor's own max |x| (softmax tails are not meaningful).
    subnormal_relative: float = knob(1e-3, ge=0, le=1)
    # |x| >= this is a masking sentinel (e.g. torch.finfo(float32).min in attention masks), not an
    # overflow: the converter clips constants to precision.max_finite_val, so it stays finite in FP16.
    # Set to .inf to treat sentinels as overflow too.
    sentinel_abs: float = knob(1e30, gt=0)
    reference_check: bool = True  # cross-check with onnx.reference's true float16 evaluation
    # onnx.reference runs float16 in numpy (slow): cross-check on this many of the smallest samples.
    reference_check_samples: int = knob(1, ge=1)


@dataclass
class PrecisionConfig:
    """FP16 conversion settings (onnxconverter-common)."""

    keep_io_types: bool = True  # inputs/outputs stay FP32 so clients need no change
    op_block_list: list[str] = field(default_factory=list)  # extra op types kept in FP32 (added to the converter's defaults)
    node_block_list: list[str] = field(default_factory=list)  # node names kept in FP32
    # Constants are clipped into [min_positive_val, max_finite_val] (min_positive_val < max_finite_val).
    min_positive_val: float = knob(1e-7, gt=0)
    max_finite_val: float = knob(1e4, gt=0, le=FP16_MAX)
    fallback: Fp16FallbackConfig = field(default_factory=Fp16FallbackConfig)


# ---------------------------------------------------------------- int8
@dataclass
class CalibrationConfig:
    """The calibration set (real samples from model.data) and how static quantization reads ranges from it."""

    method: CalibrationMethod = CalibrationMethod.minmax  # ONNX Runtime's calibrators
    percentile: float = knob(99.999, gt=50, le=100)  # method=percentile: the share of |activation| values the range keeps
    # model.data's rows are split in two by one fixed rule (pipeline/core/holdout.py): this share is held out, evenly
    # spread over the hook's order (0.5: every other row), and never calibrates or steers the fallback; the parity gate
    # judges every artifact on the held-out rows only, so INT8's verdict is on inputs calibration never saw.
    holdout: float = knob(0.5, gt=0, lt=1)
    min_samples: int = knob(8, ge=1)  # calibration rows (batch entries) after the split; fewer is refused
    min_holdout: int = knob(8, ge=1)  # held-out rows the gate judges on; fewer is refused
    max_samples: int = 512  # calibration rows kept, in the hook's order (>= min_samples)


@dataclass
class Int8FallbackConfig:
    """Automatic FP32 fallback (pipeline/convert/int8_search.py).

    The calibration rows are split again (the same rule, ``validation`` the share) into search and validation rows.
    Quantize, judge with parity.int8's quality thresholds; while it fails, rank the nodes once by the error each
    introduces on the search rows and keep FP32 the k worst, k found by bisection: the smallest that passes on the
    validation rows, and on the search rows counting only the gain the validation rows confirm. At most
    ``max_attempts`` quantizations. It runs only when some target of the fleet serves int8 or auto (int8_in_fleet,
    derived): otherwise the INT8 file is quantized without it, for parity to report its quality. Ranges, smoothing
    scales and the ranking are fitted on the search rows only: the validation rows stay unseen.
    """

    enabled: bool = True
    # Quantizations in all, the first (plain, and smoothed) included; bisection over n nodes takes about log2(n) more.
    max_attempts: int = knob(8, ge=1, le=50)
    # The share of the calibration rows that validate the search's stop (0.5: every other one).
    validation: float = knob(0.5, gt=0, lt=1)
    # The stop needs every metric to leave this share of its error budget (1 - threshold) on the search and validation
    # rows: the gate's worst held-out row comes from more rows than the search saw, so passing by a hair fails there.
    min_margin: float = knob(0.75, ge=0, lt=1)


@dataclass
class Int8Config:
    """INT8 quantization with ONNX Runtime's tooling (pipeline/convert/int8.py), from the simplified FP32 model.

    static: QDQ with activation ranges calibrated on real samples (model.data); ONNX Runtime's CPU provider runs it as
    integer kernels, and TensorRT builds an INT8 engine from the same file (explicit quantization) when its activations
    are symmetric int8. Used for every built-in model. dynamic: activation ranges computed per request; ONNX Runtime
    only (no Q/DQ activations for TensorRT), no calibration.
    """

    mode: QuantMode = QuantMode.static
    per_channel: bool = True  # one scale per output channel of each weight (per-tensor breaks outlier-heavy layers)
    reduce_range: bool = False  # 7-bit weights: only for CPUs without VNNI
    # uint8 with a zero point: what ONNX Runtime's CPU kernels run fastest (U8S8) and the closest fit for one-sided
    # activations (GELU, softmax). TensorRT reads only symmetric int8: a fleet with a GPU int8 target must set
    # activation_type=int8 and activation_symmetric=true (checked at composition), which is slower and less exact on CPU.
    activation_type: QuantType = QuantType.uint8
    activation_symmetric: bool = False
    # false: a quantized op's output stays float (ONNX Runtime runs e.g. MatMulIntegerToFloat; TensorRT fuses the
    # next Q); true: its output is quantized too, one more rounding, per tensor (an outlier channel crushes the rest).
    quantize_outputs: bool = False
    # The weight-heavy ops: where int8 pays, and what TensorRT fuses with Q/DQ.
    op_types: list[str] = knob(["MatMul", "Gemm", "Conv"], nonempty=True, unique=True, empty="must list at least one op type to quantize")
    # SmoothQuant's alpha (pipeline/convert/int8_smooth.py): before quantizing, each activation channel feeding a
    # MatMul/Gemm is divided by a scale that its weight row takes on (the same product in FP32), so a few wide channels
    # no longer set the whole tensor's INT8 step. 0.5 shares the range evenly, nearer 1 moves more into the
    # (per-channel quantized) weights; null: no smoothing.
    smoothing: Optional[float] = knob(0.8, gt=0, le=1)
    nodes_to_exclude: list[str] = knob([], unique=True)  # node names kept FP32 (the report lists every node's fate)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    fallback: Int8FallbackConfig = field(default_factory=Int8FallbackConfig)


@dataclass
class QualityConfig:
    """Quality thresholds by output kind (model.output_kinds); null = not checked. Each is an "at least" bound.

    A reference that cannot judge (one class, near-constant) makes a verdict inconclusive. The same thresholds steer the
    int8 stage's automatic fallback.
    """

    cosine_min: Optional[float] = knob(None, ge=0, le=1)  # embedding: the worst row's cosine similarity to the reference
    cosine_mean: Optional[float] = knob(None, ge=0, le=1)  # embedding: the mean over rows
    # embedding: Spearman correlation of the pairwise similarities over all rows (does the model still rank neighbours
    # the same way?).
    rank_agreement: Optional[float] = knob(None, ge=-1, le=1)
    # classifier: share of positions whose argmax along the class axis (model.output_axes) matches the reference's;
    # for [N, C] a position is a row.
    top1_agreement: Optional[float] = knob(None, ge=0, le=1)


# ---------------------------------------------------------------- auto
@dataclass
class ChooseConfig:
    """``precision: auto`` (the ONNX Runtime model, targets[0] when it is a cpu target): every candidate that passed
    parity is timed in this process with the served variant's threads and graph level, in paired rounds
    (pipeline/choose/): each round one burst per candidate, back to back in an order that rotates, so a change of
    machine speed hits all of them. Each candidate's ratio to fp32 is the median over rounds with a 90% bootstrap
    interval (pipeline/stats/estimate.py). A candidate replaces fp32 only when its whole interval says it is faster;
    the fastest such one ships."""

    candidates: list[Precision] = knob([Precision.fp32, Precision.fp16, Precision.int8], nonempty=True, unique=True, empty="must list at least one precision")
    # Best-batch throughput (the throughput variant): the best of these, up to its max_batch_size.
    batch_sizes: list[int] = knob([1, 4, 8, 16], ge=1, nonempty=True)
    burst_ms: float = knob(250.0, gt=0)  # each candidate's burst in a round
    min_rounds: int = knob(5, ge=2)
    max_rounds: int = 15  # >= min_rounds
    target_half_width: float = knob(0.03, gt=0, le=1)  # stop once every ratio's 90% interval is within +-3%
    budget_s: float = knob(90.0, gt=0)  # no new round after this long, once min_rounds ran
