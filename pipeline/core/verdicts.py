"""An output's quality verdict and the coverage of the reference rows as the reports carry them: the JSON form of
pipeline/core/quality.py's verdicts (rounded, NaN as null), typed and read back. The parity report
(pipeline/records/parity.py) and the int8 report (pipeline/records/int8.py) both hold them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional


def with_optional(d: dict[str, Any], **optional: object) -> dict[str, Any]:
    """``d`` plus each optional key whose value is not None (a report leaves out what does not apply)."""
    return d | {k: v for k, v in optional.items() if v is not None}


def number(x: Any) -> float | None:
    """A JSON number or null (float() raises on anything else)."""
    return None if x is None else float(x)


@dataclass(frozen=True)
class Coverage:
    """Whether the reference rows can judge an output: how many, how much they vary, (classifiers) how many classes
    they cover, and the reasons they cannot. ``judgeable``/``blocking`` are set where a verdict depends on it."""

    rows: int
    spread: float
    reasons: list[str]
    error: Optional[float] = None  # the artifact's largest error on these rows (None in the reference's own entry)
    classes_covered: Optional[int] = None
    classes: Optional[int] = None
    judgeable: Optional[bool] = None
    blocking: Optional[list[str]] = None  # the reasons that void a threshold set for this output

    def to_json(self) -> dict[str, Any]:
        head = with_optional({"rows": self.rows, "spread": self.spread}, error=self.error) | {"reasons": list(self.reasons)}
        return with_optional(head, classes_covered=self.classes_covered, classes=self.classes, judgeable=self.judgeable, blocking=self.blocking)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Coverage:
        return cls(
            int(d["rows"]),
            float(d["spread"]),
            [str(r) for r in d.get("reasons") or []],
            number(d.get("error")),
            d.get("classes_covered"),
            d.get("classes"),
            d.get("judgeable"),
            None if d.get("blocking") is None else [str(r) for r in d["blocking"]],
        )


@dataclass(frozen=True)
class FailedMetric:
    """A quality metric below its threshold (value None: it could not be computed)."""

    value: Optional[float]
    threshold: float


@dataclass(frozen=True)
class Quality:
    """An output's quality verdict (pipeline/core/quality.py): its metrics against the thresholds set for its kind."""

    kind: str
    metrics: dict[str, Optional[float]]
    thresholds: dict[str, float]
    passed: bool
    failed: dict[str, FailedMetric]
    coverage: Optional[Coverage] = None

    def to_json(self) -> dict[str, Any]:
        failed = {m: {"value": f.value, "threshold": f.threshold} for m, f in self.failed.items()}
        d = {"kind": self.kind, "metrics": dict(self.metrics), "thresholds": dict(self.thresholds), "passed": self.passed, "failed": failed}
        return with_optional(d, coverage=self.coverage.to_json() if self.coverage else None)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Quality:
        return cls(
            str(d["kind"]),
            {str(m): number(v) for m, v in d["metrics"].items()},
            {str(m): float(v) for m, v in d["thresholds"].items()},
            bool(d["passed"]),
            {str(m): FailedMetric(number(f.get("value")), float(f["threshold"])) for m, f in d["failed"].items()},
            Coverage.from_json(d["coverage"]) if d.get("coverage") else None,
        )
