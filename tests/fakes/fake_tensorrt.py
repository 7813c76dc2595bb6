"""A STAND-IN for the ``tensorrt`` Python module, since the real one cannot be installed here.

It mimics only the surface pipeline/engines/trt.py uses (names and signatures
as in TensorRT's Python bindings, 10.x and 11.x) and records every call, so tests can
check which version branch was taken. It builds nothing: the "plan" it returns is a
marker string, never a TensorRT engine, and exists only in test temp dirs.

    trt = make_fake_tensorrt("10.7.0")   # or "11.0.0": BuilderFlag.FP16 is absent there
    build_engine(..., trt=trt); trt.calls  -> [("create_network", 0), ("set_flag", "FP16"), ...]
"""

from __future__ import annotations

import enum
import types
from typing import Any, Optional

import onnx

STAND_IN_PLAN = b"STAND-IN PLAN from tests/fakes/fake_tensorrt.py: not a TensorRT engine\n"
STAND_IN_CACHE = b"STAND-IN TIMING CACHE\n"


def make_fake_tensorrt(
    version: str = "10.7.0",
    parse_ok: Optional[bool] = None,
    build_ok: bool = True,
    cache_matches: bool = True,
) -> types.ModuleType:
    """A fresh stand-in module for TensorRT ``version``.

    Args:
        parse_ok: force the ONNX parser's result (default: parse succeeds iff onnx.load works).
        build_ok: False makes build_serialized_network return None, as TensorRT does on failure.
        cache_matches: False makes set_timing_cache report a mismatch (returns False) for a non-empty cache.
    """
    major = int(version.split(".")[0])
    calls: list[tuple[Any, ...]] = []
    trt = types.ModuleType("tensorrt")
    trt.__doc__ = "stand-in for tensorrt (tests/fakes/fake_tensorrt.py)"
    trt.__version__ = version
    trt.calls = calls  # type: ignore[attr-defined]

    flags = ["DEBUG", "GPU_FALLBACK", "REFIT", "DISABLE_TIMING_CACHE", "TF32", "VERSION_COMPATIBLE", "EXCLUDE_LEAN_RUNTIME"]
    if major < 11:
        flags = ["FP16", "INT8", "BF16", *flags]  # removed in 11 (strong typing only)
    trt.BuilderFlag = enum.Enum("BuilderFlag", flags)  # type: ignore[attr-defined]
    ncf = ["STRONGLY_TYPED"] if major >= 11 else ["EXPLICIT_BATCH", "STRONGLY_TYPED"]
    trt.NetworkDefinitionCreationFlag = enum.IntEnum("NetworkDefinitionCreationFlag", {n: i for i, n in enumerate(ncf)})  # type: ignore[attr-defined]
    trt.MemoryPoolType = enum.Enum("MemoryPoolType", ["WORKSPACE", "DLA_MANAGED_SRAM"])  # type: ignore[attr-defined]
    trt.HardwareCompatibilityLevel = enum.Enum("HardwareCompatibilityLevel", ["NONE", "AMPERE_PLUS", "SAME_COMPUTE_CAPABILITY"])  # type: ignore[attr-defined]

    class Logger:
        WARNING = "WARNING"

        def __init__(self, severity: str = "WARNING") -> None:
            self.severity = severity

    class ParserError:
        def __init__(self, msg: str) -> None:
            self.msg = msg

        def desc(self) -> str:
            return self.msg

        def node(self) -> int:
            return -1

    class OnnxParser:
        def __init__(self, network: Any, logger: Logger) -> None:
            self.errors: list[ParserError] = []

        def parse_from_file(self, model: str) -> bool:
            calls.append(("parse_from_file", model))
            ok = parse_ok
            if ok is None:
                try:
                    onnx.load(model)
                    ok = True
                except Exception as e:  # the stand-in reports any load failure as a parser error
                    self.errors.append(ParserError(f"stand-in parser: {type(e).__name__}"))
                    ok = False
            elif not ok:
                self.errors.append(ParserError("stand-in parser: unsupported operator"))
            return ok

        @property
        def num_errors(self) -> int:
            return len(self.errors)

        def get_error(self, index: int) -> ParserError:
            return self.errors[index]

    class TimingCache:
        def __init__(self, data: bytes) -> None:
            self.data = bytes(data)

        def serialize(self) -> bytes:
            return STAND_IN_CACHE

    class OptimizationProfile:
        def __init__(self) -> None:
            self.shapes: dict[str, tuple[Any, Any, Any]] = {}

        def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:  # noqa: A002 - TensorRT's names
            calls.append(("set_shape", input, tuple(min), tuple(opt), tuple(max)))
            self.shapes[input] = (min, opt, max)

    class BuilderConfig:
        def __init__(self) -> None:
            self._cache: Optional[TimingCache] = None
            self._opt_level = 3
            self._hw = trt.HardwareCompatibilityLevel.NONE

        def set_memory_pool_limit(self, pool: Any, pool_size: int) -> None:
            calls.append(("set_memory_pool_limit", pool.name, pool_size))

        @property
        def builder_optimization_level(self) -> int:
            return self._opt_level

        @builder_optimization_level.setter
        def builder_optimization_level(self, v: int) -> None:
            calls.append(("builder_optimization_level", v))
            self._opt_level = v

        @property
        def hardware_compatibility_level(self) -> Any:
            return self._hw

        @hardware_compatibility_level.setter
        def hardware_compatibility_level(self, v: Any) -> None:
            calls.append(("hardware_compatibility_level", v.name))
            self._hw = v

        def set_flag(self, flag: Any) -> None:
            calls.append(("set_flag", flag.name))

        def create_timing_cache(self, serialized_timing_cache: bytes) -> TimingCache:
            return TimingCache(serialized_timing_cache)

        def set_timing_cache(self, cache: TimingCache, ignore_mismatch: bool) -> bool:
            ok = cache_matches or not cache.data
            calls.append(("set_timing_cache", len(cache.data), ok))
            if ok:
                self._cache = cache
            return ok

        def get_timing_cache(self) -> Optional[TimingCache]:
            return self._cache

        def add_optimization_profile(self, profile: OptimizationProfile) -> int:
            calls.append(("add_optimization_profile", sorted(profile.shapes)))
            return 0

    class Builder:
        def __init__(self, logger: Logger) -> None:
            self.logger = logger

        def create_network(self, flags: int = 0) -> object:
            calls.append(("create_network", flags))
            return object()

        def create_builder_config(self) -> BuilderConfig:
            return BuilderConfig()

        def create_optimization_profile(self) -> OptimizationProfile:
            return OptimizationProfile()

        def build_serialized_network(self, network: object, config: BuilderConfig) -> Optional[bytes]:
            calls.append(("build_serialized_network",))
            return STAND_IN_PLAN if build_ok else None

    trt.Logger = Logger  # type: ignore[attr-defined]
    trt.OnnxParser = OnnxParser  # type: ignore[attr-defined]
    trt.Builder = Builder  # type: ignore[attr-defined]
    return trt

