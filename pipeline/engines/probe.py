"""Probe of the machine a TensorRT engine would be built on, and the build-or-skip decision.

The probe (GPU names, compute capabilities, driver, CUDA and TensorRT versions) is
written by the ``probe`` DVC stage, which runs every time (``always_changed``); every
engine stage depends on its JSON. Its content is deterministic (no timestamps), so on
the same machine it hashes the same and engines are not rebuilt, while on another GPU
or TensorRT version the hash changes and DVC's run-cache cannot restore an engine
built elsewhere.

:func:`decide` is a pure function of a probe dict and a target, so tests inject probe
data directly.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Optional

from pipeline.core.config import TargetConfig
from pipeline.engines.trt import available

PROBE_SCHEMA = 1
_SMI_QUERY = "name,compute_cap,driver_version,memory.total"


def _run(cmd: list[str], timeout_s: float = 20.0) -> tuple[int, str]:
    """Run a probe command; a missing or hanging tool is a probe result, not a crash."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)
    return proc.returncode, proc.stdout if proc.returncode == 0 else (proc.stderr or proc.stdout)


def parse_smi_csv(text: str) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader``."""
    gpus = []
    for i, line in enumerate(ln for ln in text.splitlines() if ln.strip()):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        gpus.append(
            {
                "index": i,
                "name": parts[0],
                "compute_capability": parts[1],
                "driver_version": parts[2],
                "memory_total": parts[3] if len(parts) > 3 else None,
            }
        )
    return gpus


def _smi_cuda_version(text: str) -> Optional[str]:
    """The 'CUDA Version: 12.4' in nvidia-smi's banner: the newest CUDA the driver supports."""
    m = re.search(r"CUDA Version:\s*([0-9.]+)", text)
    return m.group(1) if m else None


def _probe_gpus() -> dict[str, Any]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"gpus": [], "gpu_source": "none", "gpu_error": "nvidia-smi not found on PATH", "cuda_driver_version": None}
    rc, out = _run([smi, f"--query-gpu={_SMI_QUERY}", "--format=csv,noheader"])
    if rc != 0:
        return {"gpus": [], "gpu_source": "nvidia-smi", "gpu_error": f"nvidia-smi failed: {out.strip()[:300]}", "cuda_driver_version": None}
    gpus = parse_smi_csv(out)
    _, banner = _run([smi])
    return {
        "gpus": gpus,
        "gpu_source": "nvidia-smi",
        "gpu_error": None if gpus else "nvidia-smi listed no GPU",
        "cuda_driver_version": _smi_cuda_version(banner),
    }


def _dist_version(*names: str) -> Optional[str]:
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def probe_tensorrt() -> dict[str, Any]:
    """Whether ``import tensorrt`` works here, and its version (the import is the real test: :func:`trt.available`)."""
    trt, why = available()
    if trt is None:
        return {"available": False, "version": None, "error": why}
    return {"available": True, "version": str(getattr(trt, "__version__", "unknown")), "error": None}


def probe_machine() -> dict[str, Any]:
    """Everything an engine build depends on, deterministic for a given machine."""
    gpu = _probe_gpus()
    return {
        "schema": PROBE_SCHEMA,
        **gpu,
        "driver_version": gpu["gpus"][0]["driver_version"] if gpu["gpus"] else None,
        # The CUDA runtime TensorRT's wheels use comes from these pip packages on GPU runners.
        "cuda_runtime_version": _dist_version("nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12"),
        "tensorrt": probe_tensorrt(),
    }


# ---------------------------------------------------------------- decision
@dataclass(frozen=True)
class Decision:
    """Whether to build ``target`` here; the GPU to build on, or why not."""

    build: bool
    reason: str
    gpu: Optional[dict[str, Any]] = None


def sm_tag(compute_capability: str) -> str:
    """ "8.0" -> "sm80" (the file-name tag used for plans)."""
    return "sm" + compute_capability.replace(".", "")


def name_matches(gpu_name: str, patterns: list[str]) -> bool:
    """True when any pattern is a case-insensitive substring of the GPU name (no patterns = any)."""
    return not patterns or any(p.lower() in gpu_name.lower() for p in patterns)


def _describe(gpus: list[dict[str, Any]]) -> str:
    return ", ".join(f"{g['name']} (compute capability {g['compute_capability']})" for g in gpus)


def decide(target: TargetConfig, probe: dict[str, Any]) -> Decision:
    """Build ``target`` on this machine, or skip it with a reason a user can act on."""
    if target.kind != "gpu":
        return Decision(False, f"target '{target.name}' is a {target.kind} target: the ONNX Runtime model serves it, no TensorRT engine")
    if not target.compute_capability:
        return Decision(False, f"target '{target.name}' has no compute_capability (set target_specs.{target.name}.compute_capability)")
    gpus = list(probe.get("gpus") or [])
    if not gpus:
        why = probe.get("gpu_error") or "no GPU found"
        return Decision(False, f"no NVIDIA GPU on this machine ({why}); target '{target.name}' needs compute capability {target.compute_capability}")
    same_cc = [g for g in gpus if str(g.get("compute_capability")) == target.compute_capability]
    if not same_cc:
        return Decision(
            False,
            f"GPU here is {_describe(gpus)}; target '{target.name}' needs compute capability {target.compute_capability}: build it on a {target.gpu_family or target.name} runner",
        )
    named = [g for g in same_cc if name_matches(str(g.get("name", "")), target.gpu_names)]
    if not named:
        return Decision(
            False,
            f"GPU here is {_describe(same_cc)}, whose name matches none of target_specs.{target.name}.gpu_names {target.gpu_names}",
        )
    trt = probe.get("tensorrt") or {}
    if not trt.get("available"):
        return Decision(
            False,
            f"TensorRT is not importable here ({trt.get('error') or 'not installed'}); install the project's `tensorrt` extra on the GPU runner",
            named[0],
        )
    return Decision(True, f"building on GPU {named[0]['index']}: {named[0]['name']}", named[0])
