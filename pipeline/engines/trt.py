"""TensorRT through Polygraphy's loaders: whether TensorRT is usable here, and building a serialized engine.

``tensorrt`` is imported lazily (only :func:`available` imports it), so ``import pipeline`` works on
machines without it. The build is Polygraphy's loader chain (``polygraphy.backend.trt``, the library
behind ``polygraphy convert``): ``CreateNetwork(strongly_typed=...)``, TensorRT's ONNX parser,
``CreateConfig(profiles, memory pool, optimization level, hardware/version compatibility, fp16)`` and
``EngineBytesFromNetwork``. Polygraphy sets the network flag and every builder setting for
TensorRT 10 and 11 alike, so the only version knowledge left here is :func:`plan_settings`:

- TensorRT 10 builds a weakly typed network with ``BuilderFlag.FP16`` (or, if asked, a strongly typed
  one via ``NetworkDefinitionCreationFlag.STRONGLY_TYPED``, which refuses precision flags);
- TensorRT 11 removed ``BuilderFlag.FP16``; every network is strongly typed (the STRONGLY_TYPED flag is
  accepted and ignored), so precision comes from the FP16 ONNX.

An ``int8`` target builds from the QDQ ONNX (explicit quantization: the Q/DQ nodes say what runs in INT8). Strongly
typed, no flag is set and every layer outside the Q/DQ pairs runs in the file's FP32; TensorRT 10 weakly typed sets
``BuilderFlag.INT8`` (Q/DQ need it there) and ``FP16`` (TensorRT may run the other layers in FP16), as
``trtexec --int8 --fp16`` does. A ``fp32`` target sets no precision flag.

Two parts stay direct TensorRT calls, for reasons Polygraphy's loaders cannot meet:
- parsing: ``NetworkFromOnnxPath`` logs the parser's errors and raises a generic "Could not parse ONNX
  correctly"; :func:`_parse` makes the same calls (plugins, ``OnnxParser``, ``parse_from_file``) and puts
  every parser error (operator, node) into the EngineError;
- the saved timing cache: ``CreateConfig(load_timing_cache=...)`` ignores ``set_timing_cache``'s verdict and
  ``EngineBytesFromNetwork(save_timing_cache=...)`` merges the old file with ``ignore_mismatch=True``, which
  would keep timings from another GPU or TensorRT version; :func:`_load_timing_cache` refuses such a cache.

:func:`reproduce_commands` gives the same build as a ``polygraphy convert`` and a ``trtexec`` command line.
"""

from __future__ import annotations

import importlib
import os
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Optional

from pipeline.core.config import TrtBuilderConfig
from pipeline.core.errors import EngineError

if TYPE_CHECKING:  # annotations only: targets imports onnx and numpy, which the every-run probe never needs
    from pipeline.engines.targets import InputProfile

INSTALL_FIX = "install the `tensorrt` extra on a GPU runner: pip install -e '.[tensorrt]'"


def available() -> tuple[Optional[ModuleType], str]:
    """``(tensorrt, "")`` when ``import tensorrt`` works here, else ``(None, why)``: the one TensorRT import probe.

    OSError counts as absent too: the Python bindings can be installed while libnvinfer is not.
    """
    try:
        return importlib.import_module("tensorrt"), ""
    except (ImportError, OSError) as e:
        return None, f"{type(e).__name__}: {e}".splitlines()[0][:300]


def import_tensorrt() -> ModuleType:
    """The ``tensorrt`` module; raise EngineError saying how to get it when it does not import."""
    trt, why = available()
    if trt is None:
        raise EngineError("cannot import tensorrt", fix=INSTALL_FIX, details={"error": why})
    return trt


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
    precision: str = "fp16"  # of the ONNX file: fp16, fp32 or int8 (QDQ)
    int8_flag: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


def plan_settings(builder: TrtBuilderConfig, tensorrt_major: int, precision: str = "fp16") -> BuildSettings:
    """Decide the version- and precision-specific settings; pure, so every branch is tested without TensorRT.

    ``precision`` is the ONNX file's (the target's precision): fp16, fp32, or int8 (a QDQ file).
    Raises EngineError for TensorRT older than 10.
    """
    if tensorrt_major < 10:
        raise EngineError(f"TensorRT {tensorrt_major}.x is not supported", fix="install TensorRT 10 or 11: pip install -e '.[tensorrt]'")
    if tensorrt_major >= 11:
        strongly, fp16_flag, int8_flag = True, False, False  # 11 removed weak typing and the precision flags
    else:
        strongly = builder.strongly_typed_trt10
        # A strongly typed network refuses precision flags; weakly typed, FP16 lets TensorRT pick half kernels
        # (for int8 too, outside the Q/DQ pairs) and Q/DQ layers need INT8.
        fp16_flag = not strongly and precision in ("fp16", "int8")
        int8_flag = not strongly and precision == "int8"
    return BuildSettings(
        tensorrt_major=tensorrt_major,
        strongly_typed=strongly,
        fp16_flag=fp16_flag,
        workspace_bytes=int(builder.workspace_mb) * (1 << 20),
        optimization_level=builder.optimization_level,
        hardware_compatibility=builder.hardware_compatibility,
        version_compatible=builder.version_compatible,
        timing_cache=builder.timing_cache,
        precision=precision,
        int8_flag=int8_flag,
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


def _parse(trt: ModuleType, onnx_path: str | os.PathLike[str], strongly_typed: bool) -> tuple[Any, Any, Any]:
    """(builder, network, parser) for ``onnx_path``: NetworkFromOnnxPath's calls, with the parser errors kept.

    Raises EngineError listing every parser error.
    """
    from polygraphy.backend.trt import CreateNetwork, get_trt_logger

    builder, network = CreateNetwork(strongly_typed=strongly_typed)()
    # TensorRT 10+ parses InstanceNorm natively by default (NATIVE_INSTANCENORM), which is what
    # version/hardware-compatible engines need, so no parser flag is set here.
    trt.init_libnvinfer_plugins(get_trt_logger(), "")
    parser = trt.OnnxParser(network, get_trt_logger())
    if not parser.parse_from_file(str(onnx_path)) or parser.num_errors:
        raise EngineError(
            f"TensorRT's ONNX parser rejected {onnx_path}",
            fix="check the operators against TensorRT's ONNX support matrix; simplify the model (simplify.enabled=true)",
            details={"errors": _parser_errors(parser) or ["(no parser error recorded)"]},
        )
    return builder, network, parser


def _load_timing_cache(config: Any, saved: bytes) -> str:
    """Attach the saved timing cache, or an empty one when it does not fit this device/TensorRT; say which."""
    if config.set_timing_cache(config.create_timing_cache(saved), ignore_mismatch=False):
        return f"loaded timing cache ({len(saved)} bytes)"
    # A cache from another GPU or TensorRT version: start empty rather than reuse wrong timings.
    config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
    return "saved timing cache did not match this device/TensorRT version; started an empty one"


def build_engine(
    onnx_path: str | os.PathLike[str],
    profiles: Sequence[InputProfile],
    builder_cfg: TrtBuilderConfig,
    timing_cache: Optional[bytes] = None,
    precision: str = "fp16",
) -> BuildResult:
    """Build a serialized engine from ``onnx_path`` on the current GPU.

    Args:
        onnx_path: the target's ONNX file (FP16, FP32, or INT8 QDQ: ``precision``).
        profiles: one min/opt/max shape per input (a single optimization profile).
        builder_cfg: the target's builder section.
        timing_cache: a previously saved timing cache, or None/empty to start fresh.

    Raises:
        EngineError: TensorRT missing, ONNX not parsed, or the build failed.
    """
    trt = import_tensorrt()
    settings = plan_settings(builder_cfg, major_version(trt), precision)
    notes: list[str] = []
    if precision == "int8" and settings.strongly_typed:
        notes.append("explicit quantization, strongly typed: INT8 where the ONNX has Q/DQ pairs, FP32 elsewhere (the QDQ file is quantized from FP32)")
    configs: list[Any] = []

    def keep_config(builder: Any, network: Any, config: Any) -> None:
        configs.append(config)  # to serialize its timing cache after the build
        if settings.timing_cache and timing_cache:
            notes.append(_load_timing_cache(config, timing_cache))

    t0 = time.perf_counter()
    serialized = _serialize(trt, onnx_path, profiles, settings, keep_config)
    build_time = time.perf_counter() - t0
    cache_bytes = bytes(memoryview(configs[0].get_timing_cache().serialize())) if settings.timing_cache else None
    return BuildResult(bytes(memoryview(serialized)), cache_bytes, settings, str(trt.__version__), build_time, notes)


def _create_config(trt: ModuleType, profiles: Sequence[InputProfile], settings: BuildSettings) -> Any:
    """Polygraphy's ``CreateConfig`` loader for ``settings``, with one optimization profile of ``profiles``."""
    from polygraphy.backend.trt import CreateConfig, Profile

    profile = Profile()
    for p in profiles:
        profile.add(p.name, p.min, p.opt, p.max)
    return CreateConfig(
        profiles=[profile],
        memory_pool_limits={trt.MemoryPoolType.WORKSPACE: settings.workspace_bytes},
        builder_optimization_level=settings.optimization_level,
        hardware_compatibility_level=trt.HardwareCompatibilityLevel.AMPERE_PLUS if settings.hardware_compatibility == "ampere_plus" else None,
        version_compatible=settings.version_compatible,
        fp16=settings.fp16_flag,  # TensorRT 10 weak typing only (plan_settings)
        int8=settings.int8_flag,  # the same; the QDQ file's scales, no calibrator
        tf32=True,  # TensorRT's default; CreateConfig would clear it
        profiling_verbosity=trt.ProfilingVerbosity.LAYER_NAMES_ONLY,  # TensorRT's default; CreateConfig's is DETAILED
    )


def _serialize(trt: ModuleType, onnx_path: str | os.PathLike[str], profiles: Sequence[InputProfile], settings: BuildSettings, postprocess: Callable[[Any, Any, Any], None]) -> Any:
    """The serialized engine from Polygraphy's loader chain; ``postprocess(builder, network, config)`` runs on the
    config before the build. Raises EngineError when TensorRT refuses the config or the build."""
    from polygraphy.backend.trt import EngineBytesFromNetwork, PostprocessConfig
    from polygraphy.exception import PolygraphyException

    try:
        return EngineBytesFromNetwork(lambda: _parse(trt, onnx_path, settings.strongly_typed), PostprocessConfig(_create_config(trt, profiles, settings), postprocess))()
    except PolygraphyException as e:  # Polygraphy's G_LOGGER.critical: TensorRT refused the config or the build
        raise EngineError(
            f"TensorRT failed to build an engine from {onnx_path}",
            fix="read TensorRT's log above; try a larger builder.workspace_mb or narrower profile ranges",
            details={"error": str(e).strip().splitlines()[0], "settings": settings.as_dict(), "profiles": {p.name: p.as_dict() for p in profiles}},
        ) from None


def reproduce_commands(onnx_path: str | os.PathLike[str], profiles: Sequence[InputProfile], settings: BuildSettings, plan: Path, timing_cache: Path) -> dict[str, str]:
    """The same build as ``polygraphy convert`` and ``trtexec`` command lines (TensorRT's defaults kept:
    TF32 on, layer-names-only profiling; trtexec's ``--skipInference`` builds without benchmarking)."""

    def poly_shape(which: str) -> list[str]:
        return [f"{p.name}:[{','.join(str(d) for d in getattr(p, which))}]" for p in profiles]

    def exec_shape(which: str) -> str:
        return ",".join(f"{p.name}:{'x'.join(str(d) for d in getattr(p, which))}" for p in profiles)

    ampere = settings.hardware_compatibility == "ampere_plus"
    poly = [
        "polygraphy",
        "convert",
        str(onnx_path),
        "--convert-to",
        "trt",
        "-o",
        str(plan),
        "--trt-min-shapes",
        *poly_shape("min"),
        "--trt-opt-shapes",
        *poly_shape("opt"),
        "--trt-max-shapes",
        *poly_shape("max"),
        "--pool-limit",
        f"workspace:{settings.workspace_bytes}",
        "--builder-optimization-level",
        str(settings.optimization_level),
        "--tf32",
        "--profiling-verbosity",
        "layer_names_only",
        *(["--fp16"] if settings.fp16_flag else []),
        *(["--int8"] if settings.int8_flag else []),
        *(["--strongly-typed"] if settings.strongly_typed else []),
        *(["--hardware-compatibility-level", "ampere_plus"] if ampere else []),
        *(["--version-compatible"] if settings.version_compatible else []),
        *(["--load-timing-cache", str(timing_cache), "--save-timing-cache", str(timing_cache)] if settings.timing_cache else []),
    ]
    trtexec = [
        "trtexec",
        f"--onnx={onnx_path}",
        f"--saveEngine={plan}",
        "--skipInference",
        f"--minShapes={exec_shape('min')}",
        f"--optShapes={exec_shape('opt')}",
        f"--maxShapes={exec_shape('max')}",
        f"--memPoolSize=workspace:{settings.workspace_bytes >> 20}M",
        f"--builderOptimizationLevel={settings.optimization_level}",
        *(["--fp16"] if settings.fp16_flag else []),
        *(["--int8"] if settings.int8_flag else []),
        *(["--stronglyTyped"] if settings.strongly_typed else []),
        *(["--hardwareCompatibilityLevel=ampere+"] if ampere else []),
        *(["--versionCompatible"] if settings.version_compatible else []),
        *([f"--timingCacheFile={timing_cache}"] if settings.timing_cache else []),
    ]
    return {"polygraphy": shlex.join(poly), "trtexec": shlex.join(trtexec)}


def read_timing_cache(path: str | os.PathLike[str]) -> Optional[bytes]:
    """The saved timing cache, or None when absent or empty (an empty file means 'no cache yet')."""
    p = Path(path)
    if not p.is_file():
        return None
    data = p.read_bytes()
    return data or None
