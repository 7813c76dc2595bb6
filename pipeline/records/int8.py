"""The int8 stage's report (``int8.json``): how the model was quantized, on which calibration rows, what each node became,
and the automatic FP32 fallback's search: every quantization tried, the stop rule's numbers, the nodes kept FP32.

The int8 stage writes it (pipeline/convert/int8.py); its printout, its metrics and the measurement scripts read it
through :meth:`Int8Report.from_json`. Its layout predates schema versions: version 1 is the layout without a
``schema`` key (writing one would change the report's key paths), and a report that names another version is refused.

A stage that failed while no target serves INT8 writes a different, small report instead (pipeline/core/optional.py:
``status: unavailable``); :func:`read_report` says so rather than parsing it as this one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from pipeline.core.atomic import read_json
from pipeline.core.errors import QuantizationError
from pipeline.core.verdicts import Quality

SCHEMA_VERSION = 1
DYNAMIC_ACTIVATIONS = "dynamic"
SMOOTHING_OFF = "off (int8.smoothing: null)"
_FIX = "rerun the int8 stage: dvc repro int8"

# Verdicts per part of the split ("search", "validation"), per judged output.
PartVerdicts = dict[str, dict[str, Quality]]


def _verdicts_from_json(d: Mapping[str, Any]) -> PartVerdicts:
    return {str(part): {str(o): Quality.from_json(v) for o, v in outs.items()} for part, outs in d.items()}


def _verdicts_to_json(v: PartVerdicts) -> dict[str, Any]:
    return {part: {o: q.to_json() for o, q in outs.items()} for part, outs in v.items()}


@dataclass(frozen=True)
class Activations:
    """Static quantization's activation type (int8 or uint8) and whether its ranges are symmetric."""

    type: str
    symmetric: bool


@dataclass(frozen=True)
class Calibration:
    """The calibration set (its file's identity) and how it was used: its rows, the search rows ranges were fitted on,
    the validation rows, and the calibration method (``percentile`` with it)."""

    file: str
    sha256: str
    bytes: int
    rows: int
    samples: int
    fitted_on: str
    validation_rows: int
    method: str
    percentile: Optional[float] = None

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("file", "sha256", "bytes", "rows", "samples", "fitted_on", "validation_rows", "method")}
        return d if self.percentile is None else d | {"percentile": self.percentile}


@dataclass(frozen=True)
class Smoothing:
    """What SmoothQuant did to the smoothed copy of the graph, whether that copy was used, and each graph's margin."""

    alpha: float
    tensors: int
    nodes: int
    scale_min: float
    scale_max: float
    smoothed_nodes: list[str]
    used: bool
    margin: dict[str, float]  # graph (plain, smoothed) -> the stop rule's margin of its first quantization


@dataclass(frozen=True)
class NodeFate:
    """A node of a quantizable (or requested) op type: int8, or fp32 and why."""

    node: str
    op: str
    status: str  # int8 | fp32
    reason: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        d = {"node": self.node, "op": self.op, "status": self.status}
        return d if self.reason is None else d | {"reason": self.reason}


@dataclass(frozen=True)
class Part:
    """One part of the calibration rows' split: its rows, samples, the hook's unit indices and the content digest."""

    rows: int
    samples: int
    units: list[int]
    sha256: str


@dataclass(frozen=True)
class Split:
    """The calibration rows cut again into search and validation rows (``int8.fallback.validation``)."""

    validation: float
    rule: str
    search: Part
    validation_rows: Part


@dataclass(frozen=True)
class RankedNode:
    """A quantized node by the error it introduces on the search rows."""

    node: str
    op: str
    introduced: float


@dataclass(frozen=True)
class BlockedNode:
    """A node the fallback kept FP32: its place in the ranking, its errors, and why."""

    node: str
    op: str
    rank: int
    introduced: float
    output_error: float
    input_error: float
    reason: str


@dataclass(frozen=True)
class Check:
    """The stop rule's numbers for one ``<output>.<metric>``: the threshold, the search, validation and credited values."""

    threshold: float
    search: float
    validation: float
    credited: float


@dataclass(frozen=True)
class Attempt:
    """One quantization: how many nodes it kept FP32 (by the fallback), the stop rule's verdict and numbers, the quality
    on both parts of the split, its time, and the graph (plain or smoothed) it quantized."""

    attempt: int
    kept_fp32: int
    fallback_nodes: int
    passed: bool
    margin: float
    checks: dict[str, Check]
    quality: PartVerdicts
    seconds: float
    graph: str

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "kept_fp32": self.kept_fp32,
            "fallback_nodes": self.fallback_nodes,
            "passed": self.passed,
            "margin": self.margin,
            "checks": {k: asdict(c) for k, c in self.checks.items()},
            "quality": _verdicts_to_json(self.quality),
            "seconds": self.seconds,
            "graph": self.graph,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Attempt:
        checks = {str(k): Check(float(c["threshold"]), float(c["search"]), float(c["validation"]), float(c["credited"])) for k, c in d["checks"].items()}
        head = (int(d["attempt"]), int(d["kept_fp32"]), int(d["fallback_nodes"]), bool(d["passed"]), float(d["margin"]))
        return cls(*head, checks, _verdicts_from_json(d["quality"]), float(d["seconds"]), str(d["graph"]))


@dataclass(frozen=True)
class Fallback:
    """The automatic FP32 fallback: its settings, what it judged on, and the search it ran (or why it did not)."""

    enabled: bool
    max_attempts: int
    in_fleet: bool
    judged_outputs: dict[str, str]  # output -> its kind (model.output_kinds)
    thresholds: str
    judged_on: str
    split: Split
    stop_rule: str
    strategy: str
    ranking: list[RankedNode]
    searched: bool
    not_searched: Optional[str]
    chosen_attempt: int
    blocked_nodes: list[BlockedNode]
    attempts: list[Attempt]

    def to_json(self) -> dict[str, Any]:
        head = {k: getattr(self, k) for k in ("enabled", "max_attempts", "in_fleet")}
        return head | {
            "judged_outputs": dict(self.judged_outputs),
            "thresholds": self.thresholds,
            "judged_on": self.judged_on,
            "split": asdict(self.split),
            "stop_rule": self.stop_rule,
            "strategy": self.strategy,
            "ranking": [asdict(r) for r in self.ranking],
            "searched": self.searched,
            "not_searched": self.not_searched,
            "chosen_attempt": self.chosen_attempt,
            "blocked_nodes": [asdict(b) for b in self.blocked_nodes],
            "blocked_count": len(self.blocked_nodes),
            "attempts": [a.to_json() for a in self.attempts],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Fallback:
        s = d["split"]
        return cls(
            enabled=bool(d["enabled"]),
            max_attempts=int(d["max_attempts"]),
            in_fleet=bool(d["in_fleet"]),
            judged_outputs={str(o): str(k) for o, k in d["judged_outputs"].items()},
            thresholds=str(d["thresholds"]),
            judged_on=str(d["judged_on"]),
            split=Split(float(s["validation"]), str(s["rule"]), Part(**s["search"]), Part(**s["validation_rows"])),
            stop_rule=str(d["stop_rule"]),
            strategy=str(d["strategy"]),
            ranking=[RankedNode(**r) for r in d["ranking"]],
            searched=bool(d["searched"]),
            not_searched=d.get("not_searched"),
            chosen_attempt=int(d["chosen_attempt"]),
            blocked_nodes=[BlockedNode(**b) for b in d["blocked_nodes"]],
            attempts=[Attempt.from_json(a) for a in d["attempts"]],
        )


@dataclass(frozen=True)
class Int8Report:
    """The whole report (see the module docstring). ``activations`` None: dynamic quantization; ``smoothing`` None:
    ``int8.smoothing`` is off. ``passed_on_calibration`` is None when no output is judged."""

    mode: str  # static | dynamic
    format: str
    per_channel: bool
    reduce_range: bool
    quantize_outputs: bool
    activations: Optional[Activations]
    calibration: Calibration
    op_types: list[str]
    op_types_left_fp32: dict[str, str]  # op type -> why ONNX Runtime's quantizer leaves it FP32
    smoothing: Optional[Smoothing]
    nodes: list[NodeFate]
    fallback: Fallback
    passed_on_calibration: Optional[bool]
    quality_on_calibration: PartVerdicts  # the chosen attempt's
    size_bytes_fp32: int
    size_bytes_int8: int
    seconds: float

    @property
    def quantized_count(self) -> int:
        return sum(n.status == "int8" for n in self.nodes)

    @property
    def kept_fp32_count(self) -> int:
        return sum(n.status == "fp32" for n in self.nodes)

    def to_json(self) -> dict[str, Any]:
        """The report file's JSON; the counts are derived from the node lists."""
        return {
            "mode": self.mode,
            "format": self.format,
            "per_channel": self.per_channel,
            "reduce_range": self.reduce_range,
            "quantize_outputs": self.quantize_outputs,
            "activations": asdict(self.activations) if self.activations else DYNAMIC_ACTIVATIONS,
            "calibration": self.calibration.to_json(),
            "op_types": list(self.op_types),
            "op_types_left_fp32": dict(self.op_types_left_fp32),
            "smoothing": asdict(self.smoothing) if self.smoothing else SMOOTHING_OFF,
            "quantized_count": self.quantized_count,
            "kept_fp32_count": self.kept_fp32_count,
            "nodes": [n.to_json() for n in self.nodes],
            "fallback": self.fallback.to_json(),
            "passed_on_calibration": self.passed_on_calibration,
            "quality_on_calibration": _verdicts_to_json(self.quality_on_calibration),
            "size_bytes_fp32": self.size_bytes_fp32,
            "size_bytes_int8": self.size_bytes_int8,
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, data: object, origin: str = "int8 report") -> Int8Report:
        """Parse an int8 report; raise QuantizationError when it is not one (another schema, a missing or malformed key)."""
        if not isinstance(data, dict) or data.get("schema", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise QuantizationError(f"{origin} has an unknown format", details={"schema": data.get("schema") if isinstance(data, dict) else None}, fix=_FIX)
        if data.get("status") == "unavailable":
            raise QuantizationError(f"{origin} records no INT8 model: {data.get('reason')}", fix=_FIX)
        try:
            act, sm = data["activations"], data["smoothing"]
            return cls(
                mode=str(data["mode"]),
                format=str(data["format"]),
                per_channel=bool(data["per_channel"]),
                reduce_range=bool(data["reduce_range"]),
                quantize_outputs=bool(data["quantize_outputs"]),
                activations=Activations(str(act["type"]), bool(act["symmetric"])) if isinstance(act, dict) else None,
                calibration=Calibration(**data["calibration"]),
                op_types=[str(o) for o in data["op_types"]],
                op_types_left_fp32={str(k): str(v) for k, v in data["op_types_left_fp32"].items()},
                smoothing=Smoothing(**sm) if isinstance(sm, dict) else None,
                nodes=[NodeFate(**n) for n in data["nodes"]],
                fallback=Fallback.from_json(data["fallback"]),
                passed_on_calibration=data["passed_on_calibration"],
                quality_on_calibration=_verdicts_from_json(data["quality_on_calibration"]),
                size_bytes_fp32=int(data["size_bytes_fp32"]),
                size_bytes_int8=int(data["size_bytes_int8"]),
                seconds=float(data["seconds"]),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise QuantizationError(f"{origin} is not an int8 report", details={"error": f"{type(e).__name__}: {e}"}, fix=_FIX) from None


def read_report(path: Path | str) -> Int8Report:
    """Read an int8.json; raise QuantizationError if it is missing, unreadable, not an int8 report, or records that no
    INT8 model was made."""
    p = Path(path)
    return Int8Report.from_json(read_json(p, QuantizationError, "int8 report", _FIX), f"int8 report {p}")
