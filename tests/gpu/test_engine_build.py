"""Real TensorRT builds on a GPU runner: build an engine for a tiny model through the engine stage,
then compare it with ONNX Runtime through Polygraphy (TrtRunner vs OnnxrtRunner, Comparator).

Skipped where there is no NVIDIA GPU or no importable tensorrt (every CPU machine). On a GPU
runner: ``pip install -e '.[dev,tensorrt]' && python -m pytest -m gpu tests/gpu -q``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from pipeline.core.config import ProfileConfig, TargetConfig
from pipeline.engines.manifest import check_matches_target, sha256_file
from pipeline.engines.probe import probe_machine
from pipeline.engines.build import build_target
from tests.tiny_triton import FEATURES, tiny_onnx

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def machine() -> dict[str, Any]:
    info = probe_machine()
    if not info["gpus"]:
        pytest.skip(f"no NVIDIA GPU here ({info.get('gpu_error')})")
    if not info["tensorrt"]["available"]:
        pytest.skip(f"tensorrt not importable here ({info['tensorrt']['error']}); pip install -e '.[tensorrt]'")
    return info


def here_target(machine: dict[str, Any], **builder: object) -> TargetConfig:
    """A target for the GPU this test runs on (whatever its family)."""
    gpu = machine["gpus"][0]
    t = TargetConfig(
        name="here",
        kind="gpu",
        gpu_family=gpu["name"],
        compute_capability=gpu["compute_capability"],
        precision="fp16",
        profile=ProfileConfig(batch=[1, 4, 16]),
    )
    for k, v in builder.items():
        setattr(t.builder, k, v)
    return t


def fp16_model(tmp_path: Path) -> Path:
    """The tiny model converted to FP16 with FP32 I/O, as the fp16 stage does."""
    from onnxconverter_common import float16

    src = tiny_onnx(tmp_path / "model.onnx")
    out = tmp_path / "model.fp16.onnx"
    onnx.save(float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), str(out))
    return out


def compare_with_onnxruntime(engine: bytes, onnx_path: Path, atol: float, rtol: float) -> None:
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner
    from polygraphy.comparator import Comparator, CompareFunc

    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((b, FEATURES)).astype(np.float32)} for b in (1, 4, 16)]
    runners = [OnnxrtRunner(SessionFromOnnx(str(onnx_path))), TrtRunner(EngineFromBytes(engine))]
    results = Comparator.run(runners, data_loader=feeds)
    assert bool(Comparator.compare_accuracy(results, compare_func=CompareFunc.simple(atol=atol, rtol=rtol)))


def test_engine_stage_builds_and_matches_onnxruntime(tmp_path: Path, machine: dict[str, Any]) -> None:
    onnx_path = fp16_model(tmp_path)
    target = here_target(machine)
    out, cache = tmp_path / "engines" / "here", tmp_path / "here.cache"
    m = build_target(target, onnx_path, machine, out, cache)
    assert m.built, m.reason
    assert m.machine["tensorrt_version"] and m.settings and m.engine
    assert sha256_file(out / "model.plan") == m.engine["sha256"]
    assert cache.stat().st_size > 0  # the timing cache was saved
    check_matches_target(m, target, out)
    assert m.reproduce["polygraphy"].startswith("polygraphy convert ") and m.reproduce["trtexec"].startswith("trtexec ")
    compare_with_onnxruntime((out / "model.plan").read_bytes(), onnx_path, atol=1e-2, rtol=1e-2)

    # A second build reuses the saved timing cache.
    m2 = build_target(target, onnx_path, machine, out, cache)
    assert m2.built and m2.timing_cache["loaded"] is True


def test_version_and_hardware_compatible_build(tmp_path: Path, machine: dict[str, Any]) -> None:
    if float(machine["gpus"][0]["compute_capability"]) < 8.0:
        pytest.skip("hardware compatibility (Ampere+) needs an sm80+ GPU")
    onnx_path = fp16_model(tmp_path)
    target = here_target(machine, hardware_compatibility="ampere_plus", version_compatible=True)
    m = build_target(target, onnx_path, machine, tmp_path / "e", tmp_path / "c")
    assert m.built and m.settings and m.settings["hardware_compatibility"] == "ampere_plus"
    compare_with_onnxruntime((tmp_path / "e" / "model.plan").read_bytes(), onnx_path, atol=1e-2, rtol=1e-2)


def test_int8_engine_from_the_qdq_onnx_matches_onnxruntime_on_that_file(tmp_path: Path, machine: dict[str, Any]) -> None:
    """An int8 target builds from the QDQ file the int8 stage writes (explicit quantization); TensorRT and ONNX Runtime
    run the same Q/DQ scales, so they agree within INT8 rounding, not FP16's."""
    from tests.helpers.tiny_models import qdq_onnx

    qdq = qdq_onnx(tiny_onnx(tmp_path / "model.fp32.onnx"), tmp_path / "model.int8.onnx", FEATURES)
    target = here_target(machine)
    target.precision = "int8"
    m = build_target(target, qdq, machine, tmp_path / "e", tmp_path / "c")
    assert m.built, m.reason
    assert m.precision == "int8" and m.settings and m.settings["precision"] == "int8" and m.onnx["sha256"] == sha256_file(qdq)
    assert m.settings["int8_flag"] is (not m.settings["strongly_typed"])  # TensorRT 10 weak typing needs it; strong typing refuses it
    compare_with_onnxruntime((tmp_path / "e" / "model.plan").read_bytes(), qdq, atol=5e-2, rtol=5e-2)
