"""A STAND-IN for the ``tensorrt`` Python module, since the real one cannot be installed here.

It models the surface that pipeline/engines/trt.py and the Polygraphy loaders it drives
(``CreateNetwork``, ``CreateConfig``, ``PostprocessConfig``, ``EngineBytesFromNetwork``, and the
``NetworkFromOnnxPath`` chain ``polygraphy convert`` builds) touch, with TensorRT's names and
signatures for 10.x and 11.x (11 has no BuilderFlag.FP16/INT8/..., no EXPLICIT_BATCH network flag,
no IBuilderConfig.int8_calibrator). It checks what the real builder checks before building
(every dynamic input has a valid profile; no precision flag on a strongly typed network) and
records every setting, so tests see which calls were made. It builds nothing: the "plan" it
returns is a marker string, never a TensorRT engine, and exists only in test temp dirs.

    with fake_tensorrt("10.7.0") as trt:     # or "11.0.0": BuilderFlag.FP16 is absent there
        build_engine(...); trt.calls          -> [("create_network", 0), ("set_flag", "TF32"), ...]
"""

from __future__ import annotations

import enum
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import onnx

STAND_IN_PLAN = b"STAND-IN PLAN from tests/fakes/fake_tensorrt.py: not a TensorRT engine\n"
STAND_IN_CACHE = b"STAND-IN TIMING CACHE\n"

# BuilderFlag members of TensorRT 10.x with their values; 11.x removed the weak-typing ones.
_FLAGS_10 = [
    "FP16",
    "INT8",
    "DEBUG",
    "GPU_FALLBACK",
    "REFIT",
    "DISABLE_TIMING_CACHE",
    "TF32",
    "SPARSE_WEIGHTS",
    "SAFETY_SCOPE",
    "OBEY_PRECISION_CONSTRAINTS",
    "PREFER_PRECISION_CONSTRAINTS",
    "DIRECT_IO",
    "REJECT_EMPTY_ALGORITHMS",
    "VERSION_COMPATIBLE",
    "EXCLUDE_LEAN_RUNTIME",
    "FP8",
    "ERROR_ON_TIMING_CACHE_MISS",
    "BF16",
    "DISABLE_COMPILATION_CACHE",
    "STRIP_PLAN",
    "REFIT_IDENTICAL",
    "WEIGHT_STREAMING",
    "INT4",
    "REFIT_INDIVIDUAL",
    "STRICT_NANS",
    "MONITOR_MEMORY",
    "FP4",
]
_REMOVED_IN_11 = {"FP16", "INT8", "FP8", "BF16", "INT4", "FP4", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS", "DIRECT_IO"}
_PRECISION_FLAGS = {"FP16", "INT8", "FP8", "BF16", "INT4", "FP4"}
_ONNX_TO_TRT = {
    onnx.TensorProto.FLOAT: "FLOAT",
    onnx.TensorProto.FLOAT16: "HALF",
    onnx.TensorProto.INT32: "INT32",
    onnx.TensorProto.INT64: "INT64",
    onnx.TensorProto.BOOL: "BOOL",
    onnx.TensorProto.INT8: "INT8",
}


class _Enum(enum.IntEnum):
    """A pybind11 enum: an int with ``name`` and ``__members__``, printed as ``Type.NAME``."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class HostMemory(bytes):
    """IHostMemory: a buffer (``memoryview`` works) that is also a context manager, as Polygraphy uses it."""

    def __enter__(self) -> HostMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def make_fake_tensorrt(
    version: str = "10.7.0",
    parse_ok: Optional[bool] = None,
    build_ok: bool = True,
    cache_matches: bool = True,
) -> types.ModuleType:
    """A fresh stand-in module for TensorRT ``version`` (use it through :func:`fake_tensorrt`).

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

    flags = [(n, i) for i, n in enumerate(_FLAGS_10) if major < 11 or n not in _REMOVED_IN_11]
    trt.BuilderFlag = _Enum("BuilderFlag", flags)  # type: ignore[attr-defined]
    ncf = {"STRONGLY_TYPED": 1} if major >= 11 else {"EXPLICIT_BATCH": 0, "STRONGLY_TYPED": 1}
    trt.NetworkDefinitionCreationFlag = _Enum("NetworkDefinitionCreationFlag", ncf)  # type: ignore[attr-defined]
    trt.MemoryPoolType = _Enum("MemoryPoolType", ["WORKSPACE", "DLA_MANAGED_SRAM", "DLA_LOCAL_DRAM", "DLA_GLOBAL_DRAM", "TACTIC_DRAM"], start=0)  # type: ignore[attr-defined]
    trt.HardwareCompatibilityLevel = _Enum("HardwareCompatibilityLevel", ["NONE", "AMPERE_PLUS", "SAME_COMPUTE_CAPABILITY"], start=0)  # type: ignore[attr-defined]
    trt.ProfilingVerbosity = _Enum("ProfilingVerbosity", ["LAYER_NAMES_ONLY", "NONE", "DETAILED"], start=0)  # type: ignore[attr-defined]
    trt.DeviceType = _Enum("DeviceType", ["GPU", "DLA"], start=0)  # type: ignore[attr-defined]
    trt.OnnxParserFlag = _Enum("OnnxParserFlag", ["NATIVE_INSTANCENORM"], start=0)  # type: ignore[attr-defined]
    trt.LayerType = _Enum("LayerType", ["CONVOLUTION", "ACTIVATION", "MATRIX_MULTIPLY", "ELEMENTWISE", "SHAPE", "UNARY", "QUANTIZE", "DEQUANTIZE"], start=0)  # type: ignore[attr-defined]
    trt.DataType = _Enum("DataType", ["FLOAT", "HALF", "INT8", "INT32", "BOOL", "INT64"], start=0)  # type: ignore[attr-defined]

    class ILogger:
        def __init__(self) -> None:
            pass

    class Logger(ILogger):
        Severity = _Enum("Severity", ["INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE"], start=0)
        INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = Severity

        def __init__(self, min_severity: Any = None) -> None:
            super().__init__()
            self.min_severity = min_severity

        def log(self, severity: Any, msg: str) -> None:
            pass

    class Tensor:
        def __init__(self, name: str, dtype: Any, shape: tuple[int, ...]) -> None:
            self.name, self.dtype, self.shape, self.is_shape_tensor = name, dtype, shape, False

    class Layer:
        def __init__(self, name: str, layer_type: Any = None) -> None:
            self.name, self.type, self.precision_is_set = name, layer_type or trt.LayerType.UNARY, False

    class Network:
        def __init__(self, flags: int) -> None:
            self.flags = flags
            self.inputs: list[Tensor] = []
            self.outputs: list[Tensor] = []
            self.layers: list[Layer] = []

        num_inputs = property(lambda self: len(self.inputs))
        num_outputs = property(lambda self: len(self.outputs))
        num_layers = property(lambda self: len(self.layers))

        def get_input(self, index: int) -> Tensor:
            return self.inputs[index]

        def get_output(self, index: int) -> Tensor:
            return self.outputs[index]

        def get_flag(self, flag: Any) -> bool:
            return bool(self.flags & (1 << int(flag)))

        def __len__(self) -> int:
            return len(self.layers)

        def __getitem__(self, index: int) -> Layer:
            return self.layers[index]

        @property
        def strongly_typed(self) -> bool:
            return major >= 11 or self.get_flag(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)

    def _tensor(vi: onnx.ValueInfoProto) -> Tensor:
        t = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim)
        return Tensor(vi.name, getattr(trt.DataType, _ONNX_TO_TRT.get(t.elem_type, "FLOAT")), dims)

    class ParserError:
        def __init__(self, msg: str) -> None:
            self.msg = msg

        def desc(self) -> str:
            return self.msg

        def node(self) -> int:
            return -1

        def __str__(self) -> str:
            return f"In node -1 (stand-in): {self.msg}"

    class OnnxParser:
        def __init__(self, network: Network, logger: ILogger) -> None:
            self.network = network
            self.errors: list[ParserError] = []
            self.flags = 1 << int(trt.OnnxParserFlag.NATIVE_INSTANCENORM)  # TensorRT 10's default

        def parse_from_file(self, model: str) -> bool:
            calls.append(("parse_from_file", model))
            try:
                graph = onnx.load(model).graph
            except Exception as e:  # noqa: BLE001 - the stand-in reports any load failure as a parser error
                self.errors.append(ParserError(f"stand-in parser: {type(e).__name__}"))
                return False
            if parse_ok is False:
                self.errors.append(ParserError("stand-in parser: unsupported operator"))
                return False
            weights = {i.name for i in graph.initializer}
            self.network.inputs = [_tensor(vi) for vi in graph.input if vi.name not in weights]
            self.network.outputs = [_tensor(vi) for vi in graph.output]
            # Q/DQ nodes become IQuantizeLayer/IDequantizeLayer (what Polygraphy looks for to skip INT8 calibration).
            kinds = {
                "QuantizeLinear": trt.LayerType.QUANTIZE,
                "DequantizeLinear": trt.LayerType.DEQUANTIZE,
                "MatMul": trt.LayerType.MATRIX_MULTIPLY,
                "Gemm": trt.LayerType.MATRIX_MULTIPLY,
                "Conv": trt.LayerType.CONVOLUTION,
            }
            self.network.layers = [Layer(n.name or n.op_type, kinds.get(n.op_type)) for n in graph.node]
            return True

        @property
        def num_errors(self) -> int:
            return len(self.errors)

        def get_error(self, index: int) -> ParserError:
            return self.errors[index]

        def clear_flag(self, flag: Any) -> None:
            self.flags &= ~(1 << int(flag))

    class TimingCache:
        def __init__(self, data: bytes) -> None:
            self.data = bytes(data)

        def serialize(self) -> HostMemory:
            return HostMemory(STAND_IN_CACHE)

        def combine(self, other: TimingCache, ignore_mismatch: bool) -> bool:
            calls.append(("combine_timing_cache", len(other.data), ignore_mismatch))
            return cache_matches or ignore_mismatch

    class OptimizationProfile:
        def __init__(self) -> None:
            self.shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}

        def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:  # noqa: A002 - TensorRT's names
            calls.append(("set_shape", input, tuple(min), tuple(opt), tuple(max)))
            self.shapes[input] = (tuple(min), tuple(opt), tuple(max))

        def get_shape(self, input: str) -> list[tuple[int, ...]]:  # noqa: A002 - TensorRT's names
            return list(self.shapes[input])

        def __bool__(self) -> bool:  # IOptimizationProfile.__bool__ is isValid(): min <= opt <= max, same ranks
            return all(len(lo) == len(mid) == len(hi) and all(a <= b <= c for a, b, c in zip(lo, mid, hi)) for lo, mid, hi in self.shapes.values())

    class BuilderConfig:
        def __init__(self) -> None:
            self.flags = {trt.BuilderFlag.TF32}  # TF32 is on by default
            self.pools: dict[Any, int] = {}
            self.profiles: list[OptimizationProfile] = []
            self._cache: Optional[TimingCache] = None
            self._opt_level, self._hw, self._verbosity = 3, trt.HardwareCompatibilityLevel.NONE, trt.ProfilingVerbosity.LAYER_NAMES_ONLY
            self.DLA_core, self.default_device_type = -1, trt.DeviceType.GPU
            if major < 11:
                self.int8_calibrator = None  # removed in 11

        def _set(name: str, attr: str) -> property:  # type: ignore[misc]
            def setter(self: Any, v: Any) -> None:
                calls.append((name, getattr(v, "name", v)))
                setattr(self, attr, v)

            return property(lambda self: getattr(self, attr), setter)

        builder_optimization_level = _set("builder_optimization_level", "_opt_level")
        hardware_compatibility_level = _set("hardware_compatibility_level", "_hw")
        profiling_verbosity = _set("profiling_verbosity", "_verbosity")
        num_optimization_profiles = property(lambda self: len(self.profiles))
        del _set

        def set_memory_pool_limit(self, pool: Any, pool_size: int) -> None:
            calls.append(("set_memory_pool_limit", pool.name, pool_size))
            self.pools[pool] = pool_size

        def get_memory_pool_limit(self, pool: Any) -> int:
            return self.pools.get(pool, 0)

        def set_flag(self, flag: Any) -> None:
            calls.append(("set_flag", flag.name))
            self.flags.add(flag)

        def clear_flag(self, flag: Any) -> None:
            calls.append(("clear_flag", flag.name))
            self.flags.discard(flag)

        def get_flag(self, flag: Any) -> bool:
            return flag in self.flags

        def create_timing_cache(self, serialized_timing_cache: bytes) -> TimingCache:
            return TimingCache(serialized_timing_cache)

        def set_timing_cache(self, cache: TimingCache, ignore_mismatch: bool) -> bool:
            ok = cache_matches or not cache.data or ignore_mismatch
            calls.append(("set_timing_cache", len(cache.data), ok))
            if ok:
                self._cache = cache
            return ok

        def get_timing_cache(self) -> Optional[TimingCache]:
            return self._cache

        def add_optimization_profile(self, profile: OptimizationProfile) -> int:
            calls.append(("add_optimization_profile", sorted(profile.shapes)))
            if not profile:
                return -1  # TensorRT refuses an invalid profile
            self.profiles.append(profile)
            return len(self.profiles) - 1

    class Builder:
        def __init__(self, logger: ILogger) -> None:
            if not isinstance(logger, ILogger):
                raise TypeError("Builder(): incompatible constructor arguments (logger must be a tensorrt.ILogger)")
            self.logger = logger

        def create_network(self, flags: int = 0) -> Network:
            calls.append(("create_network", flags))
            return Network(flags)

        def create_builder_config(self) -> BuilderConfig:
            return BuilderConfig()

        def create_optimization_profile(self) -> OptimizationProfile:
            return OptimizationProfile()

        def build_serialized_network(self, network: Network, config: BuilderConfig) -> Optional[HostMemory]:
            calls.append(("build_serialized_network",))
            problem = _build_problem(network, config)
            if problem:
                self.logger.log(Logger.ERROR, problem)
                return None
            return HostMemory(STAND_IN_PLAN) if build_ok else None

    def _build_problem(network: Network, config: BuilderConfig) -> Optional[str]:
        """What TensorRT's builder refuses before building, or None."""
        precision = sorted(f.name for f in config.flags if f.name in _PRECISION_FLAGS)
        if precision and network.strongly_typed:
            return f"precision flags {precision} are not allowed on a strongly typed network"
        for t in network.inputs:
            if -1 not in t.shape:
                continue
            shapes = [p.shapes[t.name] for p in config.profiles if t.name in p.shapes]
            if not shapes:
                return f"network input {t.name} {t.shape} is dynamic but no optimization profile sets it"
            for lo, _, hi in shapes:
                if len(lo) != len(t.shape) or any(d != -1 and not lo[i] == hi[i] == d for i, d in enumerate(t.shape)):
                    return f"profile shapes {lo}..{hi} do not fit network input {t.name} {t.shape}"
        return None

    def init_libnvinfer_plugins(logger: Any, namespace: str) -> bool:
        calls.append(("init_libnvinfer_plugins", namespace))
        return True

    trt.ILogger = ILogger  # type: ignore[attr-defined]
    trt.Logger = Logger  # type: ignore[attr-defined]
    trt.OnnxParser = OnnxParser  # type: ignore[attr-defined]
    trt.Builder = Builder  # type: ignore[attr-defined]
    trt.init_libnvinfer_plugins = init_libnvinfer_plugins  # type: ignore[attr-defined]
    return trt


def _forget_polygraphy_trt() -> None:
    """Polygraphy imports tensorrt lazily and keeps the module per file (``mod.lazy_import``'s LazyModule),
    and caches its TensorRT logger (a subclass of that module's ILogger): forget both, so its loaders
    import whatever ``sys.modules["tensorrt"]`` is now."""
    for name, module in list(sys.modules.items()):
        lazy = vars(module).get("trt") if name.startswith("polygraphy") and module is not None else None
        if type(lazy).__name__ == "LazyModule":
            object.__setattr__(lazy, "module", None)
    trt_util = sys.modules.get("polygraphy.backend.trt.util")
    if trt_util is not None:
        trt_util.TRT_LOGGER = None  # type: ignore[attr-defined]


@contextmanager
def installed(trt: types.ModuleType) -> Iterator[types.ModuleType]:
    """Make ``trt`` the ``tensorrt`` module for our code and Polygraphy's loaders; restore on exit."""
    previous = sys.modules.get("tensorrt")
    sys.modules["tensorrt"] = trt
    _forget_polygraphy_trt()
    try:
        yield trt
    finally:
        if previous is None:
            sys.modules.pop("tensorrt", None)
        else:
            sys.modules["tensorrt"] = previous
        _forget_polygraphy_trt()


@contextmanager
def fake_tensorrt(version: str = "10.7.0", **options: Any) -> Iterator[types.ModuleType]:
    """``installed(make_fake_tensorrt(version, **options))``."""
    with installed(make_fake_tensorrt(version, **options)) as trt:
        yield trt
