"""The record of which precision the ONNX Runtime model serves, per variant, and why: written by the choose stage
(pipeline/choose/), read by the repository stage, so neither needs the other's code.

``reason`` says it in one line: the configured ``target_specs.<t>.precision``, or for ``auto`` the measured ratio
and its interval. ``files`` holds the sha256 of each candidate file the decision was about, so the repository
refuses to ship a file the decision was not made on.

The choose stage's report (``choose.json``) is this record plus what the stage measured (machine, timing, rows left
out); :meth:`PrecisionChoice.from_json` reads the decision part of it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.core.atomic import read_json
from pipeline.core.errors import PipelineError

SCHEMA_VERSION = 1
VARIANTS = ("latency", "throughput")


@dataclass(frozen=True)
class VariantChoice:
    """What one variant serves: a precision (fp32, fp16, int8) and why."""

    precision: str
    reason: str


@dataclass(frozen=True)
class CandidateFile:
    """A candidate ONNX file the decision was made on."""

    path: str
    sha256: str


@dataclass(frozen=True)
class PrecisionChoice:
    """The choose stage's decision for the serving target (``targets[0]``)."""

    target: str
    configured: str  # target_specs.<target>.precision: fp32 | fp16 | int8 | auto
    variants: dict[str, VariantChoice]
    files: dict[str, CandidateFile] = field(default_factory=dict)  # precision -> the file it was decided on
    schema: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Any, origin: str, error: type[PipelineError]) -> PrecisionChoice:
        """Parse a choose report (its decision part); raise ``error`` when it is not one."""
        try:
            if d.get("schema") != SCHEMA_VERSION:
                raise ValueError(f"schema {d.get('schema')!r}, expected {SCHEMA_VERSION}")
            variants = {v: VariantChoice(str(d["variants"][v]["precision"]), str(d["variants"][v]["reason"])) for v in VARIANTS}
            files = {str(p): CandidateFile(str(f["path"]), str(f["sha256"])) for p, f in (d.get("files") or {}).items()}
            return cls(str(d["target"]), str(d["configured"]), variants, files)
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise error(
                f"{origin} is not a precision choice (the choose stage's report)", fix="rerun it: dvc repro choose", details={"error": f"{type(e).__name__}: {e}"}
            ) from None


def read_choice(path: str | Path, error: type[PipelineError]) -> PrecisionChoice:
    """Read ``choose.json``; raise ``error`` (the caller's stage error) when it is missing or malformed."""
    return PrecisionChoice.from_json(read_json(Path(path), error, "precision choice", "run the choose stage: dvc repro choose"), str(path), error)
