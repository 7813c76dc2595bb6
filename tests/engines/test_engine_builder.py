"""The TensorRT 10 vs 11 builder branches, exercised through Polygraphy's real loaders against a stand-in
for the tensorrt module (tests/fakes/fake_tensorrt.py), since the real one cannot be installed on this machine."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from pipeline.core.config import TrtBuilderConfig
from pipeline.core.errors import EngineError
from pipeline.engines.targets import InputProfile
from pipeline.engines.trt import available, build_engine, major_version, plan_settings, read_timing_cache, reproduce_commands
from tests.fakes.fake_tensorrt import STAND_IN_CACHE, STAND_IN_PLAN, fake_tensorrt, make_fake_tensorrt
from tests.tiny_triton import tiny_onnx

PROFILES = [InputProfile("x", (1, 16), (8, 16), (32, 16))]


@pytest.fixture
def onnx_file(tmp_path: Path) -> Path:
    return tiny_onnx(tmp_path / "model.fp16.onnx")


def names(calls: list[tuple[object, ...]], what: str) -> list[tuple[object, ...]]:
    return [c for c in calls if c[0] == what]


def test_plan_settings_branches() -> None:
    b = TrtBuilderConfig(workspace_mb=2048)
    s10 = plan_settings(b, 10)
    assert (s10.strongly_typed, s10.fp16_flag, s10.workspace_bytes) == (False, True, 2048 << 20)
    s10s = plan_settings(TrtBuilderConfig(strongly_typed_trt10=True), 10)
    assert (s10s.strongly_typed, s10s.fp16_flag) == (True, False)
    s11 = plan_settings(b, 11)
    assert (s11.strongly_typed, s11.fp16_flag) == (True, False)
    with pytest.raises(EngineError, match="TensorRT 8.x is not supported"):
        plan_settings(b, 8)


def test_version_parsing() -> None:
    assert major_version(make_fake_tensorrt("10.7.0.post1")) == 10
    assert major_version(make_fake_tensorrt("11.0.0")) == 11


def test_trt10_uses_the_fp16_flag_on_a_weakly_typed_network(onnx_file: Path) -> None:
    with fake_tensorrt("10.7.0") as trt:
        r = build_engine(onnx_file, PROFILES, TrtBuilderConfig(workspace_mb=1024, optimization_level=4))
    assert r.engine == STAND_IN_PLAN and r.timing_cache == STAND_IN_CACHE
    assert names(trt.calls, "create_network") == [("create_network", 0)]
    assert ("set_flag", "FP16") in trt.calls
    assert ("set_memory_pool_limit", "WORKSPACE", 1024 << 20) in trt.calls
    assert ("builder_optimization_level", 4) in trt.calls
    assert ("set_shape", "x", (1, 16), (8, 16), (32, 16)) in trt.calls
    assert ("add_optimization_profile", ["x"]) in trt.calls
    assert r.settings.as_dict()["fp16_flag"] is True


def test_trt10_strongly_typed_option(onnx_file: Path) -> None:
    with fake_tensorrt("10.13.0") as trt:
        build_engine(onnx_file, PROFILES, TrtBuilderConfig(strongly_typed_trt10=True))
    flag = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    assert names(trt.calls, "create_network") == [("create_network", flag)]
    assert names(trt.calls, "set_flag") == [("set_flag", "TF32")]  # TensorRT's default kept; no precision flag


def test_trt11_is_strongly_typed_and_never_touches_fp16(onnx_file: Path) -> None:
    with fake_tensorrt("11.0.0") as trt:
        assert not hasattr(trt.BuilderFlag, "FP16")  # removed in 11: using it would raise AttributeError
        r = build_engine(onnx_file, PROFILES, TrtBuilderConfig())
    # Strong typing is the default in 11; the STRONGLY_TYPED flag is accepted and ignored, and passing it
    # on every version keeps one code path.
    flag = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    assert names(trt.calls, "create_network") == [("create_network", flag)]
    assert names(trt.calls, "set_flag") == [("set_flag", "TF32")]
    assert r.settings.strongly_typed and not r.settings.fp16_flag


def test_a_precision_flag_on_a_strongly_typed_network_is_refused(onnx_file: Path) -> None:
    """The stand-in refuses what TensorRT refuses, so a wrong plan_settings cannot pass unnoticed."""
    from polygraphy.backend.trt import CreateConfig, EngineBytesFromNetwork, NetworkFromOnnxPath, Profile
    from polygraphy.exception import PolygraphyException

    profile = Profile().add("x", (1, 16), (8, 16), (32, 16))
    with fake_tensorrt("10.7.0") as trt:
        assert EngineBytesFromNetwork(NetworkFromOnnxPath(str(onnx_file)), CreateConfig(fp16=True, profiles=[profile]))() == STAND_IN_PLAN
        with pytest.raises(PolygraphyException, match="Invalid Engine"):
            EngineBytesFromNetwork(NetworkFromOnnxPath(str(onnx_file), strongly_typed=True), CreateConfig(fp16=True, profiles=[profile]))()
    assert names(trt.calls, "build_serialized_network") == [("build_serialized_network",)] * 2


def test_an_input_without_a_profile_is_refused(onnx_file: Path) -> None:
    with fake_tensorrt("11.0.0"), pytest.raises(EngineError, match="failed to build") as e:
        build_engine(onnx_file, [InputProfile("other", (1,), (1,), (1,))], TrtBuilderConfig())
    assert "Invalid inputs were provided to the optimization profile" in str(e.value)


@pytest.mark.parametrize("version", ["10.7.0", "11.0.0"])
def test_compatibility_settings(onnx_file: Path, version: str) -> None:
    b = TrtBuilderConfig(hardware_compatibility="ampere_plus", version_compatible=True)
    with fake_tensorrt(version) as trt:
        build_engine(onnx_file, PROFILES, b)
    assert ("hardware_compatibility_level", "AMPERE_PLUS") in trt.calls
    assert ("set_flag", "VERSION_COMPATIBLE") in trt.calls


def test_timing_cache_loaded_and_mismatch_discarded(onnx_file: Path) -> None:
    with fake_tensorrt("10.7.0") as trt:
        r = build_engine(onnx_file, PROFILES, TrtBuilderConfig(), timing_cache=b"old")
    assert ("set_timing_cache", 3, True) in trt.calls and any("loaded timing cache" in n for n in r.notes)
    with fake_tensorrt("10.7.0", cache_matches=False) as trt:
        r = build_engine(onnx_file, PROFILES, TrtBuilderConfig(), timing_cache=b"other-gpu")
    # CreateConfig always attaches an empty cache first; the saved one is refused, and an empty one replaces it.
    assert names(trt.calls, "set_timing_cache") == [("set_timing_cache", 0, True), ("set_timing_cache", 9, False), ("set_timing_cache", 0, True)]
    assert any("did not match" in n for n in r.notes)


def test_timing_cache_disabled(onnx_file: Path) -> None:
    with fake_tensorrt("11.0.0") as trt:
        r = build_engine(onnx_file, PROFILES, TrtBuilderConfig(timing_cache=False), timing_cache=b"x")
    # Only CreateConfig's empty per-build cache (what TensorRT uses without one): the saved bytes are never read.
    assert r.timing_cache is None and names(trt.calls, "set_timing_cache") == [("set_timing_cache", 0, True)]


def test_parser_failure_lists_the_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    with fake_tensorrt("11.0.0"), pytest.raises(EngineError, match="ONNX parser rejected") as e:
        build_engine(bad, PROFILES, TrtBuilderConfig())
    assert "stand-in parser" in str(e.value) and "fix:" in str(e.value)


def test_build_failure_is_an_error(onnx_file: Path) -> None:
    with fake_tensorrt("10.7.0", build_ok=False), pytest.raises(EngineError, match="failed to build"):
        build_engine(onnx_file, PROFILES, TrtBuilderConfig())


def test_missing_tensorrt_says_how_to_install(onnx_file: Path) -> None:
    """Without the stand-in the real module is imported; absent here, that is a clear EngineError."""
    if available()[0] is not None:
        pytest.skip("tensorrt is installed here")
    with pytest.raises(EngineError, match=r"\[tensorrt\]"):
        build_engine(onnx_file, PROFILES, TrtBuilderConfig())


def test_read_timing_cache(tmp_path: Path) -> None:
    assert read_timing_cache(tmp_path / "none.cache") is None
    (tmp_path / "empty.cache").write_bytes(b"")
    assert read_timing_cache(tmp_path / "empty.cache") is None
    (tmp_path / "c.cache").write_bytes(b"abc")
    assert read_timing_cache(tmp_path / "c.cache") == b"abc"


# ---------------------------------------------------------------- the manifest's reproduce commands
def _after(calls: list[tuple[object, ...]], what: str) -> list[tuple[object, ...]]:
    i = next(i for i, c in enumerate(calls) if c[0] == what)
    return calls[i:]


@pytest.mark.parametrize(
    ("version", "builder"),
    [
        ("10.7.0", TrtBuilderConfig(workspace_mb=1024, optimization_level=4)),
        ("10.13.0", TrtBuilderConfig(strongly_typed_trt10=True, timing_cache=False)),
        ("11.0.0", TrtBuilderConfig(hardware_compatibility="ampere_plus", version_compatible=True)),
    ],
)
def test_polygraphy_command_makes_the_same_tensorrt_calls(tmp_path: Path, onnx_file: Path, version: str, builder: TrtBuilderConfig) -> None:
    """The manifest's `polygraphy convert` line, parsed by Polygraphy's own argparse definitions and run by its
    own CLI code against the stand-in, configures TensorRT exactly as our build did."""
    from polygraphy.tools.args import TrtConfigArgs, TrtLoadNetworkArgs
    from polygraphy.tools.convert import Convert

    from pipeline.engines.trt import reproduce_commands

    profiles = [InputProfile("x", (1, 16), (8, 16), (32, 16))]
    with fake_tensorrt(version) as ours:
        r = build_engine(onnx_file, profiles, builder)
    plan, cache = tmp_path / "out" / "model.plan", tmp_path / "tc" / "t.cache"
    cmd = reproduce_commands(onnx_file, profiles, r.settings, plan, cache)["polygraphy"]
    argv = shlex.split(cmd)
    assert argv[:3] == ["polygraphy", "convert", str(onnx_file)]
    tool = Convert()
    args = tool.setup_parser().parse_args(argv[2:])
    tool.parse(args)
    config = tool.arg_groups[TrtConfigArgs]
    assert [{k: tuple(map(tuple, v)) for k, v in p.items()} for p in config.profile_dicts] == [{"x": ((1, 16), (8, 16), (32, 16))}]
    assert bool(config.fp16) == r.settings.fp16_flag and bool(tool.arg_groups[TrtLoadNetworkArgs].strongly_typed) == r.settings.strongly_typed
    (tmp_path / "out").mkdir()
    (tmp_path / "tc").mkdir()
    with fake_tensorrt(version) as theirs:
        tool.run(args)
    assert plan.read_bytes() == STAND_IN_PLAN
    assert names(theirs.calls, "create_network") == names(ours.calls, "create_network")
    # polygraphy convert first builds a throwaway config for the parser; from parsing on, the calls are ours.
    assert _after(theirs.calls, "parse_from_file") == _after(ours.calls, "parse_from_file")


def test_trtexec_command(tmp_path: Path) -> None:
    from pipeline.engines.trt import reproduce_commands

    profiles = [InputProfile("ids", (1, 1), (8, 128), (32, 256)), InputProfile("mask", (1, 1), (8, 128), (32, 256))]
    s10 = plan_settings(TrtBuilderConfig(workspace_mb=2048, optimization_level=5), 10)
    cmd = shlex.split(reproduce_commands("m.onnx", profiles, s10, Path("e/model.plan"), Path("c.cache"))["trtexec"])
    assert cmd[:4] == ["trtexec", "--onnx=m.onnx", "--saveEngine=e/model.plan", "--skipInference"]
    assert "--minShapes=ids:1x1,mask:1x1" in cmd and "--maxShapes=ids:32x256,mask:32x256" in cmd
    assert {"--memPoolSize=workspace:2048M", "--builderOptimizationLevel=5", "--fp16", "--timingCacheFile=c.cache"} <= set(cmd)
    assert "--stronglyTyped" not in cmd
    s11 = plan_settings(TrtBuilderConfig(hardware_compatibility="ampere_plus", version_compatible=True, timing_cache=False), 11)
    cmd = shlex.split(reproduce_commands("m.onnx", profiles, s11, Path("model.plan"), Path("c.cache"))["trtexec"])
    assert {"--stronglyTyped", "--hardwareCompatibilityLevel=ampere+", "--versionCompatible"} <= set(cmd)
    assert "--fp16" not in cmd and not any(a.startswith("--timingCacheFile") for a in cmd)  # trtexec 11 has no --fp16


def test_plan_settings_int8_branches() -> None:
    """INT8 from the QDQ ONNX: TensorRT 10 weakly typed needs the INT8 flag (and FP16 for the other layers); strongly
    typed (10 by choice, 11 always) takes precision from the Q/DQ nodes and no flag; fp32 sets no precision flag."""
    weak = plan_settings(TrtBuilderConfig(), 10, "int8")
    assert (weak.strongly_typed, weak.int8_flag, weak.fp16_flag, weak.precision) == (False, True, True, "int8")
    strong = plan_settings(TrtBuilderConfig(strongly_typed_trt10=True), 10, "int8")
    assert (strong.int8_flag, strong.fp16_flag) == (False, False)
    assert (plan_settings(TrtBuilderConfig(), 11, "int8").int8_flag, plan_settings(TrtBuilderConfig(), 10, "fp32").fp16_flag) == (False, False)


@pytest.fixture
def qdq_file(onnx_file: Path, tmp_path: Path) -> Path:
    from tests.helpers.tiny_models import qdq_onnx

    return qdq_onnx(onnx_file, tmp_path / "model.int8.onnx")


def test_trt10_builds_the_qdq_file_with_int8_and_fp16_flags(qdq_file: Path) -> None:
    with fake_tensorrt("10.7.0") as trt:
        r = build_engine(qdq_file, PROFILES, TrtBuilderConfig(), precision="int8")
    assert ("set_flag", "INT8") in trt.calls and ("set_flag", "FP16") in trt.calls
    assert ("parse_from_file", str(qdq_file)) in trt.calls
    cmds = reproduce_commands(qdq_file, PROFILES, r.settings, Path("e/model.plan"), Path("tc"))
    assert "--int8" in shlex.split(cmds["trtexec"]) and "--int8" in shlex.split(cmds["polygraphy"])


def test_trt11_builds_the_qdq_file_strongly_typed_without_precision_flags(qdq_file: Path) -> None:
    with fake_tensorrt("11.0.0") as trt:
        r = build_engine(qdq_file, PROFILES, TrtBuilderConfig(), precision="int8")
    assert names(trt.calls, "set_flag") == [("set_flag", "TF32")] and r.engine == STAND_IN_PLAN
    assert any("explicit quantization" in n for n in r.notes) and r.settings.as_dict()["precision"] == "int8"
