"""Where the tritonserver is and how it runs (pipeline.serving.install), and free ports (pipeline.serving.process)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pipeline.core.errors import ToolError
from pipeline.serving import install
from pipeline.serving.process import EmbeddedServer


def test_locate_finds_binary_libs_and_stub() -> None:
    inst = install.locate_tritonserver()
    assert inst.binary.is_file() and inst.stub.is_file() and (inst.libs).is_dir()


def test_backend_dir_has_python_backend_and_stub(tmp_path: Path) -> None:
    d = install.backend_dir(install.locate_tritonserver(), root=tmp_path)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py", "triton_python_backend_stub"):
        assert (d / "python" / name).is_file(), name
    assert install.backend_dir(install.locate_tritonserver(), root=tmp_path) == d  # reused, not rebuilt


def test_env_has_libs_and_site_packages() -> None:
    inst = install.locate_tritonserver()
    env = install.server_env(inst)
    assert str(inst.libs) in env["LD_LIBRARY_PATH"]
    assert any(str(p) in env["PYTHONPATH"] for p in install.site_packages())


def test_missing_pytriton_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(install, "site_packages", lambda: [tmp_path])
    with pytest.raises(ToolError, match="nvidia-pytriton"):
        install.locate_tritonserver()


def test_taken_port_is_replaced() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        srv = EmbeddedServer("/nowhere", "m", ports=(taken, taken, 0))
        http, grpc, metrics = srv._pick_ports()
    assert taken not in (http, grpc, metrics)
    assert len({http, grpc, metrics}) == 3


def test_error_lines_drop_cpu_noise() -> None:
    log = (
        'E1130 08:36:26.613827 4212 server.cc:241] "CudaDriverHelper has not been initialized."\n'
        "I1130 model loaded fine\n"
        'E1130 08:36:26.956668 4212 backend_model.cc:692] "ERROR: Failed to create instance: boom"\n'
    )
    assert install.error_lines(log) == ['E1130 08:36:26.956668 4212 backend_model.cc:692] "ERROR: Failed to create instance: boom"']
