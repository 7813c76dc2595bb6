"""The embedded repository builder (pipeline.serving.embedded): shipped configs on a stand-in backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.errors import BenchError
from pipeline.serving.embedded import (
    build_embedded_repository,
    find_shipped,
    read_config,
    to_native_backend,
    to_python_backend,
)
from tests.tiny_triton import shipped_repository, variant_config


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


@pytest.mark.parametrize("backend", ["native", "python"])
def test_variants_serving_different_files_each_get_their_own(tmp_path: Path, backend: str) -> None:
    """When the variants serve different precisions, each config names its file; the stand-in serves each one's own."""
    thr = variant_config("tiny", "throughput")
    thr.default_model_filename = "model.int8.onnx"
    model_dir = shipped_repository(tmp_path / "shipped", configs={"latency": variant_config("tiny", "latency"), "throughput": thr})
    (model_dir / "1" / "model.int8.onnx").write_bytes((model_dir / "1" / "model.onnx").read_bytes() + b"\0")
    shipped = find_shipped(model_dir)
    assert shipped.onnx_for("latency") == (model_dir / "1" / "model.onnx").resolve() == shipped.onnx
    assert shipped.onnx_for("throughput") == (model_dir / "1" / "model.int8.onnx").resolve()
    build_embedded_repository(model_dir, tmp_path / "emb", backend)
    for variant, name in (("latency", "model.onnx"), ("throughput", "model.int8.onnx")):
        for cfg in (tmp_path / "emb/tiny/configs" / f"{variant}.pbtxt", tmp_path / f"emb/tiny__{variant}/config.pbtxt"):
            assert read_config(cfg).parameters["onnx_path"].string_value == str((model_dir / "1" / name).resolve()), cfg


def test_a_server_that_caught_a_fatal_signal_is_killed_without_the_sigterm_grace(tmp_path: Path) -> None:
    """tritonserver hangs in its fatal-signal handler ("Signal (6) received."): SIGTERM is ignored, so stop() does not
    wait out the 10 s grace for it. A process that ignores SIGTERM stands in for the hung server."""
    import subprocess
    import time

    from pipeline.serving.process import EmbeddedServer

    srv = EmbeddedServer(tmp_path, "tiny")
    srv.log_path = tmp_path / "tritonserver.log"
    srv.log_path.write_text("I1207 model loaded\nSignal (6) received.\n")
    srv.proc = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 60"], start_new_session=True)
    time.sleep(0.2)  # the trap is set
    started = time.monotonic()
    srv.stop()
    assert srv.proc.poll() is not None and time.monotonic() - started < 5
    srv.log_path.write_text("I1207 model loaded\n")
    assert srv._stop_grace_s() == 10.0  # a server that is only stopping gets its grace


def test_the_watchdog_removes_exactly_its_servers_shared_memory_after_the_kill(tmp_path: Path) -> None:
    """A SIGKILLed stage leaves its python-backend stubs' regions in /dev/shm (1 MB each): the watchdog removes them,
    and not those of another server whose port starts with the same digits."""
    import os
    import subprocess
    import uuid

    from pipeline.serving.process import Watchdog

    prefix = f"pipelinetest{os.getpid()}x3329"
    ours = [Path(f"/dev/shm/{prefix}{uuid.uuid4()}") for _ in range(2)]
    theirs = Path(f"/dev/shm/{prefix}5{uuid.uuid4()}")  # port 33295
    group = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        for region in (*ours, theirs):
            region.write_bytes(b"\0" * 16)
        dog = Watchdog(group.pid, prefix)
        assert dog._fd is not None
        os.close(dog._fd)  # what our death does: the watchdog reads EOF
        dog._fd = None
        assert dog.proc is not None and dog.proc.wait(timeout=10) == 0
        assert group.wait(timeout=5) == -9
        assert [r for r in ours if r.exists()] == [] and theirs.exists()
    finally:
        group.kill()
        for region in (*ours, theirs):
            region.unlink(missing_ok=True)
