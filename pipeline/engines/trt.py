"""Thin adapter over the TensorRT Python API: build a serialized engine from an ONNX file.

``tensorrt`` is imported lazily (only :func:`import_tensorrt` imports it), so
``import pipeline`` works on machines without it. Every call below was checked
against TensorRT's Python API for 10.x and 11.x (the bindings' pyCore.cpp/pyOnnx.cpp
and the 10.x -> 11.x migration guide):

- ``trt.Logger``, ``trt.Builder(logger)``, ``builder.create_network(flags)``,
  ``builder.create_builder_config()``, ``builder.create_optimization_profile()``,
  ``builder.build_serialized_network(network, config)`` (returns ``None`` on failure);
- ``trt.OnnxParser(network, logger)``, ``parser.parse_from_file(path)``,
  ``parser.num_errors``, ``parser.get_error(i)``;
- ``config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, bytes)``,
  ``config.builder_optimization_level``, ``config.hardware_compatibility_level =
  trt.HardwareCompatibilityLevel.AMPERE_PLUS``, ``config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)``;
- ``config.create_timing_cache(bytes)``, ``config.set_timing_cache(cache, ignore_mismatch)``
  (returns False when the cache does not fit this device/version),
  ``config.get_timing_cache().serialize()``;
- ``profile.set_shape(name, min, opt, max)``, ``config.add_optimization_profile(profile)``.

Version branches: TensorRT 10 builds a weakly typed network with ``BuilderFlag.FP16``
(or, if asked, a strongly typed one via ``NetworkDefinitionCreationFlag.STRONGLY_TYPED``).
TensorRT 11 removed ``BuilderFlag.FP16`` and every network is strongly typed (the
STRONGLY_TYPED flag is deprecated and ignored), so precision comes from the FP16 ONNX.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

from pipeline.core.config import TrtBuilderConfig
from pipeline.core.errors import EngineError
from pipeline.engines.targets import InputProfile


def import_tensorrt() -> ModuleType:
    """Import the real ``tensorrt`` module, or raise EngineError saying how to get it."""
    try:
        return importlib.import_module("tensorrt")
    except (ImportError, OSError) as e:  # OSError: the bindings are there but libnvinfer is not
        raise EngineError(
            "cannot import tensorrt",
            fix="install the `tensorrt` extra on a GPU runner: pip install -e '.[tensorrt]'",
            details={"error": f"{type(e).__name__}: {e}".splitlines()[0]},
        ) from None


def major_version(trt: ModuleType) -> int:
    """TensorRT's major version from ``trt.__version__`` (e.g. '10.7.0.post1' -> 10)."""
    version = str(getattr(trt, "__version__", ""))
    head = version.split(".", 1)[0]
    if not head.isdigit():
        raise EngineError(f"cannot read the TensorRT version from tensorrt.__version__={version!r}", fix="reinstall tensorrt")
    return int(head)


@dataclass(frozen=True)
class BuildSettings:
    """The exact builder settings of one build, as recorded in the manifest."""

    tensorrt_major: int
    strongly_typed: bool
    fp16_flag: bool
    workspace_bytes: int
    optimization_level: int
    hardware_compatibility: str
    version_compatible: bool
    timing_cache: bool

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def plan_settings(builder: TrtBuilderConfig, tensorrt_major: int) -> BuildSettings:
    """Decide the version-specific settings; pure, so both branches are tested without TensorRT."""
    if tensorrt_major < 10:
        raise EngineError(
            f"TensorRT {tensorrt_major}.x is not supported",
            fix="install TensorRT 10 or 11: pip install -e '.[tensorrt]'",
        )
    if tensorrt_major >= 11:
        strongly, fp16_flag = True, False  # 11 removed weak typing and BuilderFlag.FP16
    else:
        strongly = builder.strongly_typed_trt10
        fp16_flag = not strongly  # a strongly typed network refuses precision flags
    return BuildSettings(
        tensorrt_major=tensorrt_major,
        strongly_typed=strongly,
        fp16_flag=fp16_flag,
        workspace_bytes=int(builder.workspace_mb) * (1 << 20),
        optimization_level=builder.optimization_level,
        hardware_compatibility=builder.hardware_compatibility,
        version_compatible=builder.version_compatible,
        timing_cache=builder.timing_cache,
    )


@dataclass
class BuildResult:
    """A serialized engine plus what is needed to describe and repeat its build."""

    engine: bytes
    timing_cache: Optional[bytes]
    settings: BuildSettings
    tensorrt_version: str
    build_time_s: float
    notes: list[str] = field(default_factory=list)


def _parser_errors(parser: Any) -> list[str]:
    errors = []
    for i in range(int(parser.num_errors)):
        err = parser.get_error(i)
        desc = err.desc() if hasattr(err, "desc") else str(err)
        node = f" (node {err.node()})" if hasattr(err, "node") else ""
        errors.append(f"{desc}{node}")
    return errors


def _logger(trt: ModuleType) -> Any:
    return trt.Logger(trt.Logger.WARNING)


def build_engine(
    onnx_path: str | os.PathLike[str],
    profiles: Sequence[InputProfile],
    builder_cfg: TrtBuilderConfig,
    timing_cache: Optional[bytes] = None,
    trt: Optional[ModuleType] = None,
) -> BuildResult:
    """Build a serialized engine from ``onnx_path`` on the current GPU.

    Args:
        onnx_path: the (FP16) ONNX file.
        profiles: one min/opt/max shape per input (a single optimization profile).
        builder_cfg: the target's builder section.
        timing_cache: a previously saved timing cache, or None/empty to start fresh.
        trt: the tensorrt module (tests pass a stand-in); default imports the real one.

    Raises:
        EngineError: TensorRT missing, ONNX not parsed, or the build failed.
    """
    trt = trt or import_tensorrt()
    settings = plan_settings(builder_cfg, major_version(trt))
    notes: list[str] = []
    logger = _logger(trt)
    builder = trt.Builder(logger)

    flags = 0
    if settings.strongly_typed and settings.tensorrt_major < 11:
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)

    # TensorRT 10+ parses InstanceNorm natively by default (NATIVE_INSTANCENORM), which is what
    # version/hardware-compatible engines need, so no parser flag is set here.
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        raise EngineError(
            f"TensorRT's ONNX parser rejected {onnx_path}",
            fix="check the operators against TensorRT's ONNX support matrix; simplify the model (simplify.enabled=true)",
            details={"errors": _parser_errors(parser) or ["(no parser error recorded)"]},
        )

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace_bytes)
    config.builder_optimization_level = settings.optimization_level
    if settings.fp16_flag:
        config.set_flag(trt.BuilderFlag.FP16)  # TensorRT 10 only; removed in 11
    if settings.hardware_compatibility == "ampere_plus":
        config.hardware_compatibility_level = trt.HardwareCompatibilityLevel.AMPERE_PLUS
    if settings.version_compatible:
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)

    if settings.timing_cache:
        cache = config.create_timing_cache(timing_cache or b"")
        if not config.set_timing_cache(cache, ignore_mismatch=False):
            # A cache from another GPU or TensorRT version: start empty rather than reuse wrong timings.
            notes.append("saved timing cache did not match this device/TensorRT version; started an empty one")
            config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
        elif timing_cache:
            notes.append(f"loaded timing cache ({len(timing_cache)} bytes)")

    profile = builder.create_optimization_profile()
    for p in profiles:
        profile.set_shape(p.name, p.min, p.opt, p.max)
    config.add_optimization_profile(profile)

    t0 = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    build_time = time.perf_counter() - t0
    if serialized is None:
        raise EngineError(
            f"TensorRT failed to build an engine from {onnx_path}",
            fix="read TensorRT's log above; try a larger builder.workspace_mb or narrower profile ranges",
            details={"settings": settings.as_dict(), "profiles": {p.name: p.as_dict() for p in profiles}},
        )
    engine = bytes(memoryview(serialized))
    cache_bytes = None
    if settings.timing_cache:
        cache_bytes = bytes(memoryview(config.get_timing_cache().serialize()))
    return BuildResult(engine, cache_bytes, settings, str(trt.__version__), build_time, notes)


def read_timing_cache(path: str | os.PathLike[str]) -> Optional[bytes]:
    """The saved timing cache, or None when absent or empty (an empty file means 'no cache yet')."""
    p = Path(path)
    if not p.is_file():
        return None
    data = p.read_bytes()
    return data or None
