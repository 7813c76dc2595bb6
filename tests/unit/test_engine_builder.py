"""The TensorRT 10 vs 11 builder branches, exercised against a stand-in for the tensorrt module
(tests/fakes/fake_tensorrt.py), since the real one cannot be installed on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.engines.trt import build_engine, major_version, plan_settings, read_timing_cache
from pipeline.core.config import TrtBuilderConfig
from pipeline.core.errors import EngineError
from pipeline.engines.targets import InputProfile
from tests.fakes.fake_tensorrt import STAND_IN_CACHE, STAND_IN_PLAN, make_fake_tensorrt
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
    trt = make_fake_tensorrt("10.7.0")
    r = build_engine(onnx_file, PROFILES, TrtBuilderConfig(workspace_mb=1024, optimization_level=4), trt=trt)
    assert r.engine == STAND_IN_PLAN and r.timing_cache == STAND_IN_CACHE
    assert names(trt.calls, "create_network") == [("create_network", 0)]
    assert ("set_flag", "FP16") in trt.calls
    assert ("set_memory_pool_limit", "WORKSPACE", 1024 << 20) in trt.calls
    assert ("builder_optimization_level", 4) in trt.calls
    assert ("set_shape", "x", (1, 16), (8, 16), (32, 16)) in trt.calls
    assert ("add_optimization_profile", ["x"]) in trt.calls
    assert r.settings.as_dict()["fp16_flag"] is True


def test_trt10_strongly_typed_option(onnx_file: Path) -> None:
    trt = make_fake_tensorrt("10.13.0")
    build_engine(onnx_file, PROFILES, TrtBuilderConfig(strongly_typed_trt10=True), trt=trt)
    flag = 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    assert names(trt.calls, "create_network") == [("create_network", flag)]
    assert not names(trt.calls, "set_flag")


def test_trt11_is_strongly_typed_and_never_touches_fp16(onnx_file: Path) -> None:
    trt = make_fake_tensorrt("11.0.0")
    assert not hasattr(trt.BuilderFlag, "FP16")  # removed in 11: using it would raise AttributeError
    r = build_engine(onnx_file, PROFILES, TrtBuilderConfig(), trt=trt)
    assert names(trt.calls, "create_network") == [("create_network", 0)]  # strong typing is the default
    assert not names(trt.calls, "set_flag")
    assert r.settings.strongly_typed and not r.settings.fp16_flag


@pytest.mark.parametrize("version", ["10.7.0", "11.0.0"])
def test_compatibility_settings(onnx_file: Path, version: str) -> None:
    trt = make_fake_tensorrt(version)
    b = TrtBuilderConfig(hardware_compatibility="ampere_plus", version_compatible=True)
    build_engine(onnx_file, PROFILES, b, trt=trt)
    assert ("hardware_compatibility_level", "AMPERE_PLUS") in trt.calls
    assert ("set_flag", "VERSION_COMPATIBLE") in trt.calls


def test_timing_cache_loaded_and_mismatch_discarded(onnx_file: Path) -> None:
    trt = make_fake_tensorrt("10.7.0")
    r = build_engine(onnx_file, PROFILES, TrtBuilderConfig(), timing_cache=b"old", trt=trt)
    assert ("set_timing_cache", 3, True) in trt.calls and any("loaded timing cache" in n for n in r.notes)
    trt = make_fake_tensorrt("10.7.0", cache_matches=False)
    r = build_engine(onnx_file, PROFILES, TrtBuilderConfig(), timing_cache=b"other-gpu", trt=trt)
    assert names(trt.calls, "set_timing_cache") == [("set_timing_cache", 9, False), ("set_timing_cache", 0, True)]
    assert any("did not match" in n for n in r.notes)


def test_timing_cache_disabled(onnx_file: Path) -> None:
    trt = make_fake_tensorrt("11.0.0")
    r = build_engine(onnx_file, PROFILES, TrtBuilderConfig(timing_cache=False), timing_cache=b"x", trt=trt)
    assert r.timing_cache is None and not names(trt.calls, "set_timing_cache")


def test_parser_failure_lists_the_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    with pytest.raises(EngineError, match="ONNX parser rejected") as e:
        build_engine(bad, PROFILES, TrtBuilderConfig(), trt=make_fake_tensorrt("11.0.0"))
    assert "stand-in parser" in str(e.value) and "fix:" in str(e.value)


def test_build_failure_is_an_error(onnx_file: Path) -> None:
    with pytest.raises(EngineError, match="failed to build"):
        build_engine(onnx_file, PROFILES, TrtBuilderConfig(), trt=make_fake_tensorrt("10.7.0", build_ok=False))


def test_missing_tensorrt_says_how_to_install(onnx_file: Path) -> None:
    """Without a tensorrt argument the real module is imported; absent here, that is a clear EngineError."""
    try:
        import tensorrt  # noqa: F401
    except (ImportError, OSError):
        with pytest.raises(EngineError, match=r"\[tensorrt\]"):
            build_engine(onnx_file, PROFILES, TrtBuilderConfig())
    else:
        pytest.skip("tensorrt is installed here")


def test_read_timing_cache(tmp_path: Path) -> None:
    assert read_timing_cache(tmp_path / "none.cache") is None
    (tmp_path / "empty.cache").write_bytes(b"")
    assert read_timing_cache(tmp_path / "empty.cache") is None
    (tmp_path / "c.cache").write_bytes(b"abc")
    assert read_timing_cache(tmp_path / "c.cache") == b"abc"
