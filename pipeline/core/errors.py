"""One exception hierarchy for every user-facing failure.

Each error carries what failed, the values involved and what to change, so the
stage entry point can print one message and exit non-zero.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TextIO


class PipelineError(Exception):
    """Base class: a failure the user can act on.

    Args:
        what: one sentence saying what failed.
        fix: what to change (a config key, a flag, a file) to make it pass.
        details: values involved, printed as ``key: value`` lines.
    """

    exit_code: int = 2

    def __init__(self, what: str, fix: str | None = None, details: Mapping[str, object] | None = None) -> None:
        self.what = what
        self.fix = fix
        self.details = dict(details or {})
        super().__init__(self.render())

    def render(self) -> str:
        """The one message shown to the user."""
        lines = [self.what]
        lines += [f"  {k}: {v}" for k, v in self.details.items()]
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


class ConfigError(PipelineError):
    """The Hydra config or params.yaml is invalid (unknown key, wrong type, bad value)."""


class ModelSourceError(PipelineError):
    """The model cannot be loaded: missing path, bad factory, unsafe or mismatched checkpoint."""


class OnnxModelError(PipelineError):
    """An ONNX file is missing, corrupt, or fails the checker or an ONNX Runtime session."""


class ExportError(PipelineError):
    """torch.onnx.export failed or its output disagrees with torch."""


class SimplifyError(PipelineError):
    """onnxsim failed or its own check failed."""


class PrecisionError(PipelineError):
    """FP16 conversion produced an invalid or non-finite model."""


class QuantizationError(PipelineError):
    """INT8 quantization failed, or its calibration samples do not fit the graph."""


class ParityError(PipelineError):
    """An artifact's outputs do not match the reference within tolerance."""


class RepositoryError(PipelineError):
    """The Triton model repository cannot be written as configured."""


class ToolError(PipelineError):
    """An external tool (tritonserver, perf_analyzer, trtexec) is missing or failed."""


class EngineError(PipelineError):
    """A TensorRT engine could not be built or does not match its target."""


class BenchError(PipelineError):
    """A benchmark could not run or produced no valid measurement."""


class ReleaseError(PipelineError):
    """A release operation (build, promote, rollback, verify) was refused or failed."""


class CanaryRejected(ReleaseError):
    """``release canary`` ran and its verdict failed the candidate (exit 1: a verdict, not a breakdown)."""

    exit_code = 1


def print_error(e: PipelineError, where: str | None = None, stream: TextIO | None = None) -> int:
    """The one way every entry point (stages, ``pipeline.params``, the CLI, CI helpers) shows a failure.

    Prints ``ERROR [where] <what>``, the details and the fix, to stderr; returns the exit code to use.
    """
    print(f"ERROR{f' [{where}]' if where else ''} {e.render()}", file=stream or sys.stderr)
    return e.exit_code
