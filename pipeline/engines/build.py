"""Build one target's TensorRT engine from its precision's ONNX, or record why not (the engine stage's work).

One DVC stage per fleet target (``foreach: ${targets}``). It writes the directory
``artifacts/engines/<target>/`` holding ``manifest.json`` and, when built,
``model.plan``; the directory is the DVC output, so a skipped target (no matching GPU,
no TensorRT, or a CPU target) still produces its output and the pipeline finishes.
The per-target timing cache is a separate, persistent DVC output (an empty file
means no cache yet). A build failure on a matching GPU is an error, not a skip.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from pipeline.core import atomic
from pipeline.core.config import TargetConfig
from pipeline.core.config.derived import engine_onnx_precision
from pipeline.core.errors import EngineError
from pipeline.core.onnx_tools import load_model
from pipeline.core.specs import graph_io
from pipeline.engines import trt as trt_adapter
from pipeline.engines.manifest import expected_for, sha256_file
from pipeline.engines.probe import decide
from pipeline.engines.targets import InputProfile, compute_profiles
from pipeline.records.engine_manifest import MANIFEST_NAME, PLAN_NAME, EngineFile, EngineManifest, OnnxSource, write_manifest


def _machine(probe: dict[str, Any], gpu: Optional[dict[str, Any]]) -> dict[str, Any]:
    trt = probe.get("tensorrt") or {}
    return {
        "gpu_name": gpu.get("name") if gpu else None,
        "compute_capability": gpu.get("compute_capability") if gpu else None,
        "gpu_index": gpu.get("index") if gpu else None,
        "gpus_present": [f"{g.get('name')} ({g.get('compute_capability')})" for g in probe.get("gpus") or []],
        "driver_version": probe.get("driver_version"),
        "cuda_driver_version": probe.get("cuda_driver_version"),
        "cuda_runtime_version": probe.get("cuda_runtime_version"),
        "tensorrt_version": trt.get("version"),
    }


def _select_device(gpu: dict[str, Any]) -> None:
    """Make the chosen GPU CUDA's device 0 before TensorRT initialises CUDA (nvidia-smi order = PCI order)."""
    if "CUDA_VISIBLE_DEVICES" not in os.environ and int(gpu.get("index", 0)) != 0:
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu["index"])


def build_target(
    target: TargetConfig,
    onnx_path: Path,
    probe: dict[str, Any],
    out_dir: Path,
    timing_cache_path: Path,
    batch_axis: str = "batch",
) -> EngineManifest:
    """Build ``target``'s engine into ``out_dir`` (replaced atomically), or write a skipped manifest.

    ``probe`` is the machine description (the probe stage's JSON, or a dict in tests). The manifest's
    ``reproduce`` holds the ``dvc repro`` line and, for a built engine, the same build as ``polygraphy
    convert`` and ``trtexec`` commands. Raises EngineError when the build is due but fails.
    """
    decision = decide(target, probe)
    precision = engine_onnx_precision(target.kind, target.precision)
    manifest = EngineManifest(
        target=target.name,
        status="skipped",
        reason=decision.reason,
        expected=expected_for(target),
        precision=precision,
        machine=_machine(probe, decision.gpu),
        onnx=OnnxSource(str(onnx_path), sha256_file(onnx_path) if onnx_path.is_file() else None),
        timing_cache={"path": str(timing_cache_path)},
        reproduce={"dvc": f"dvc repro engine@{target.name}"},
    )
    result = None
    if target.kind == "gpu":
        profiles = _describe_graph(manifest, target, onnx_path, batch_axis)
        if decision.build:
            assert decision.gpu is not None
            _select_device(decision.gpu)
            result = _build(manifest, target, onnx_path, profiles, timing_cache_path, out_dir / PLAN_NAME)
    _write(out_dir, manifest, result.engine if result else None)
    _write_timing_cache(timing_cache_path, result.timing_cache if result else None)
    return manifest


def _describe_graph(manifest: EngineManifest, target: TargetConfig, onnx_path: Path, batch_axis: str) -> list[InputProfile]:
    """Record the graph's inputs and outputs and the target's profiles in ``manifest`` (every GPU target's, built or
    not, so profile errors surface on any machine); returns the profiles. Raises EngineError without the ONNX file."""
    precision = manifest.precision
    if not onnx_path.is_file():
        raise EngineError(
            f"{precision.upper()} ONNX not found: {onnx_path}",
            fix=f"run the {precision} stage first: dvc repro {precision}" if precision != "fp32" else "run the simplify stage first: dvc repro simplify",
        )
    inputs, outputs = graph_io(load_model(onnx_path, f"{precision.upper()} model"))
    manifest.io = {k: [{"name": s.name, "dtype": s.dtype, "dims": list(s.dims)} for s in v] for k, v in (("inputs", inputs), ("outputs", outputs))}
    profiles = compute_profiles(inputs, target.profile, target.name, batch_axis)
    manifest.profiles = {p.name: p.as_dict() for p in profiles}
    return profiles


def _build(manifest: EngineManifest, target: TargetConfig, onnx_path: Path, profiles: list[InputProfile], timing_cache_path: Path, plan: Path) -> trt_adapter.BuildResult:
    """Build the engine with TensorRT and record how in ``manifest`` (``plan``: where the stage writes it)."""
    old_cache = trt_adapter.read_timing_cache(timing_cache_path) if target.builder.timing_cache else None
    result = trt_adapter.build_engine(onnx_path, profiles, target.builder, old_cache, manifest.precision)
    manifest.status = "built"
    manifest.settings = result.settings.as_dict()
    manifest.build_time_s = round(result.build_time_s, 3)
    manifest.machine["tensorrt_version"] = result.tensorrt_version
    manifest.notes = list(result.notes)
    manifest.timing_cache.update(loaded=bool(old_cache), bytes=len(result.timing_cache or b""))
    manifest.reproduce.update(trt_adapter.reproduce_commands(onnx_path, profiles, result.settings, plan, timing_cache_path))
    return result


def _write(out_dir: Path, manifest: EngineManifest, plan_bytes: Optional[bytes]) -> None:
    """Replace ``out_dir`` with the manifest and, when built, the plan (its file and sha256 recorded in the manifest)."""
    with atomic.atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        if plan_bytes is not None:
            (tmp / PLAN_NAME).write_bytes(plan_bytes)
            manifest.engine = EngineFile(PLAN_NAME, len(plan_bytes), sha256_file(tmp / PLAN_NAME))
        write_manifest(tmp / MANIFEST_NAME, manifest)


def _write_timing_cache(path: Path, new_cache: Optional[bytes]) -> None:
    """Save the build's timing cache; DVC needs the output to exist, so an empty file means "no timing cache yet"."""
    if new_cache is not None:
        with atomic.atomic_path(path) as tmp_cache:
            tmp_cache.write_bytes(new_cache)
    elif not path.exists():
        atomic.write_text(path, "")
