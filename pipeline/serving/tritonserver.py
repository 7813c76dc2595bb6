"""Validate a model repository with the real tritonserver (strict config checks, exit on error).

The top of the server modules: :mod:`~pipeline.serving.install` (where the binary is, its
environment) <- :mod:`~pipeline.serving.process` (running and stopping it) <- this module.
Other packages have always imported the server's names from here, so the ones they use
are re-exported below; new code imports them from the module that defines them.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.errors import ToolError
from pipeline.serving.install import (
    backend_dir,
    error_level_lines,
    locate_tritonserver,
    server_env,
)
from pipeline.serving.process import kill_group

__all__ = ["MISSING_ORT_BACKEND", "ValidationResult", "validate_repository"]

MISSING_ORT_BACKEND = "unable to find backend library for backend 'onnxruntime'"


@dataclass
class ValidationResult:
    """Outcome of starting the real server on a repository with strict config checks."""

    config_name: str | None
    returncode: int | None
    only_missing_backend: bool  # the config parsed and validated; only the ORT backend library is absent
    errors: list[str] = field(default_factory=list)  # error lines other than the missing backend
    log: str = ""

    @property
    def ok(self) -> bool:
        """True when Triton accepted the config (on CPU: failed only for the missing backend)."""
        return self.only_missing_backend and not self.errors


def validate_repository(repo_dir: str | os.PathLike[str], config_name: str | None = None, timeout_s: float = 60.0) -> ValidationResult:
    """Start tritonserver with strict config checks on ``repo_dir`` and classify its errors.

    A valid onnxruntime config fails here only at ``unable to find backend library for
    backend 'onnxruntime'``; anything else (e.g. ``'max_batch_size' must be non-negative``)
    is a real config error and is returned in ``errors`` with the log.

    Raises:
        ToolError: tritonserver is missing, or did not exit within ``timeout_s``.
    """
    inst = locate_tritonserver()
    cmd = [
        str(inst.binary),
        f"--model-repository={Path(repo_dir).resolve()}",
        "--strict-model-config=true",
        "--exit-on-error=true",
        f"--backend-directory={backend_dir(inst)}",
        # Validation must not bind the default ports other servers may hold.
        "--allow-http=false",
        "--allow-grpc=false",
        "--allow-metrics=false",
    ]
    if config_name:
        cmd.append(f"--model-config-name={config_name}")
    proc = subprocess.Popen(cmd, env=server_env(inst), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        log = proc.communicate()[0] or ""
        raise ToolError(
            f"tritonserver did not exit within {timeout_s:.0f} s while validating {repo_dir}",
            fix="a valid repository makes the server exit at the missing onnxruntime backend; check the log",
            details={"command": " ".join(cmd), "log": "\n".join(log.splitlines()[-20:])},
        ) from None
    missing = MISSING_ORT_BACKEND in log
    real = [ln for ln in error_level_lines(log) if MISSING_ORT_BACKEND not in ln]
    if missing:  # the server's closing summary of that same failure
        real = [ln for ln in real if "failed to load all models" not in ln]
    return ValidationResult(config_name, proc.returncode, missing, real, log)
