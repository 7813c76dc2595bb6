"""Machine-probe dicts for tests, shaped like the probe stage's JSON (injected, never monkeypatched)."""

from __future__ import annotations

from typing import Any

TRT_OK = {"available": True, "version": "10.7.0", "error": None}
TRT_MISSING = {"available": False, "version": None, "error": "ModuleNotFoundError: No module named 'tensorrt'"}


def probe(gpus: list[tuple[str, str]], trt: dict[str, Any] = TRT_OK) -> dict[str, Any]:
    """A probe with these (name, compute capability) GPUs and this TensorRT status."""
    return {
        "schema": 1,
        "gpus": [{"index": i, "name": n, "compute_capability": cc, "driver_version": "550.54"} for i, (n, cc) in enumerate(gpus)],
        "gpu_error": None if gpus else "nvidia-smi not found on PATH",
        "driver_version": "550.54" if gpus else None,
        "cuda_driver_version": "12.4" if gpus else None,
        "cuda_runtime_version": "12.4.127",
        "tensorrt": trt,
    }
