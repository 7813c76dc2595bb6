"""Fast parts of the tritonserver adapter and the embedded repository builder."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.serving import tritonserver as ts
from pipeline.serving.embedded import (
    build_embedded_repository,
    find_shipped,
    read_config,
    to_native_backend,
    to_python_backend,
)
from pipeline.core.errors import BenchError
from tests.tiny_triton import shipped_repository, variant_config


def test_locate_finds_binary_libs_and_stub() -> None:
    inst = ts.locate_tritonserver()
    assert inst.binary.is_file() and inst.stub.is_file() and (inst.libs).is_dir()


def test_backend_dir_has_python_backend_and_stub(tmp_path: Path) -> None:
    d = ts.backend_dir(ts.locate_tritonserver(), root=tmp_path)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py", "triton_python_backend_stub"):
        assert (d / "python" / name).is_file(), name
    assert ts.backend_dir(ts.locate_tritonserver(), root=tmp_path) == d  # reused, not rebuilt


def test_env_has_libs_and_site_packages() -> None:
    inst = ts.locate_tritonserver()
    env = ts.server_env(inst)
    assert str(inst.libs) in env["LD_LIBRARY_PATH"]
    assert any(str(p) in env["PYTHONPATH"] for p in ts.site_packages())


def test_missing_pytriton_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ts, "site_packages", lambda: [tmp_path])
    with pytest.raises(ts.ToolError, match="nvidia-pytriton"):
        ts.locate_tritonserver()


def test_taken_port_is_replaced() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        srv = ts.EmbeddedServer("/nowhere", "m", ports=(taken, taken, 0))
        http, grpc, metrics = srv._pick_ports()
    assert taken not in (http, grpc, metrics)
    assert len({http, grpc, metrics}) == 3


def test_error_lines_drop_cpu_noise() -> None:
    log = (
        'E1130 08:36:26.613827 4212 server.cc:241] "CudaDriverHelper has not been initialized."\n'
        "I1130 model loaded fine\n"
        "E1130 08:36:26.956668 4212 backend_model.cc:692] \"ERROR: Failed to create instance: boom\"\n"
    )
    assert ts.error_lines(log) == ['E1130 08:36:26.956668 4212 backend_model.cc:692] "ERROR: Failed to create instance: boom"']


@pytest.mark.parametrize("backend", ["python", "pipeline_ort"])
def test_embedded_config_keeps_scheduling(tmp_path: Path, backend: str) -> None:
    shipped_cfg = variant_config("tiny", "throughput", threads=2, level=-1)
    shipped_cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_GPU
    if backend == "python":
        out, notes = to_python_backend(shipped_cfg, tmp_path / "m.onnx")
    else:
        out, notes = to_native_backend(shipped_cfg, tmp_path / "m.onnx", tmp_path / "libonnxruntime.so")
        assert out.parameters["ort_library"].string_value == str(tmp_path / "libonnxruntime.so")
    assert out.backend == backend and not out.platform
    for f in ("max_batch_size", "dynamic_batching", "input", "output", "optimization"):
        assert getattr(out, f) == getattr(shipped_cfg, f), f
    assert out.parameters["intra_op_thread_count"].string_value == "2"
    assert out.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU and out.instance_group[0].count == 1
    assert out.parameters["onnx_path"].string_value == str(tmp_path / "m.onnx")
    assert any("KIND_GPU" in n for n in notes)


@pytest.mark.parametrize("backend", ["native", "python"])
def test_build_embedded_repository(tmp_path: Path, backend: str) -> None:
    model_dir = shipped_repository(tmp_path / "shipped")
    shipped, changes = build_embedded_repository(model_dir, tmp_path / "emb", backend)
    d = tmp_path / "emb" / "tiny"
    assert set(changes) == {"latency", "throughput"}
    for model in (d, tmp_path / "emb" / "tiny__throughput"):
        if backend == "python":
            assert (model / "1" / "model.py").is_file() and (model / "1" / "sys_path.json").is_file()
        else:  # Triton finds <model>/libtriton_<backend>.so; the version directory holds nothing
            assert (model / "libtriton_pipeline_ort.so").is_file() and not list((model / "1").iterdir())
    thr = read_config(d / "configs" / "throughput.pbtxt")
    assert thr.backend == {"native": "pipeline_ort", "python": "python"}[backend]
    assert list(thr.dynamic_batching.preferred_batch_size) == [4, 8]
    assert thr.parameters["onnx_path"].string_value == str(shipped.onnx)
    assert read_config(d / "config.pbtxt") == read_config(d / "configs" / "latency.pbtxt")


def test_find_shipped_without_configs(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    with pytest.raises(BenchError, match="no config variants"):
        find_shipped(tmp_path / "m")
